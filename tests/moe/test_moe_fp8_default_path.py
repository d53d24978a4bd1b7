"""The fp8 layer through the op's DEFAULT schedule (schedule=None: fp8_schedule_for at x's
card, card_of), which from 32 rows an expert is FP8_PREFILL_SPLIT_SMEM_TMA (128 x 256 N-split,
block scales through shared memory, TMA store; up to 128 rows an expert with the gate-up
quantizing h itself, on one CTA a unit on the H100 class and on the persistent walk on the
H200 class; the walk with the separate quantize above). CPU tensors have no card (the H100
class): the H200 class's form is run by naming the card the op sees (card_of patched),
on the shapes the op accepts beyond DeepSeek-V3's: H and I multiples
of 128 but not of 256 (the down's last 256-column tile half real, the gate-up's odd tile
count), K/128 not a multiple of 4 (the op's zero-padded weight-scale copies, K-major activation
scales padded to 4), per-tensor and per-expert scales (broadcast, then padded), few experts
with many rows, T just below the small-tile threshold and past the unit grid's. In the interpreter against float64
(reference_fp8) and bit-identical to the global-scale 128 x 128 FP8_PREFILL."""

from dataclasses import replace

import pytest

from argus.kernels.moe_fp8 import FP8_PREFILL, FP8_PREFILL_SPLIT_SMEM_TMA, FP8_SMALL

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

from tests.moe.test_moe_fp8_layer import _problem, _rel  # noqa: E402


def _default(x, w13, w2, s13, s2, ids, weights, k, out=None):
    """The op's own path for given routing: _run with schedule=None."""
    return M._run(x, w13, w2, None, k, True, "softmax", "silu", ids, weights, None, 0, 0, 1.0,
                  None, interpret=True, out=out, w13_scale=s13, w2_scale=s2)


@pytest.fixture
def ran(monkeypatch):
    """The layers the op's expert half ran (argus.ops.moe.experts, spied on)."""
    layers = []
    experts = M.experts

    def spy(*args, **kwargs):
        layers.append(args[5])
        return experts(*args, **kwargs)

    monkeypatch.setattr(M, "experts", spy)
    return layers


def _on_card(monkeypatch, card):
    """The op's tensors on a card of `card`'s class (what card_of answers for x's device)."""
    seen = []
    monkeypatch.setattr(M, "card_of", lambda device: seen.append(device.type) or card)
    return seen


def _assert_matches_float64_and_the_global_scale_tile(out, T, E, k, H, I, x, w13, w2, s13, s2,
                                                      ids, weights):
    """No padding reached the output, it matches float64, and it is bit-equal to the layer on
    FP8_PREFILL (the same partials, scales and K order)."""
    assert not torch.isnan(out).any(), "a padding row or padding scale reached the output"
    exact = M.reference_fp8(x, w13, w2, s13, s2, ids, weights)
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    plain = M.experts(x, w13, w2, ids, weights, M.Layer(T, H, I, E, k, FP8_PREFILL),
                      interpret=True, scales=(s13, s2))
    assert torch.equal(out, plain)


@pytest.mark.parametrize("T,E,k,H,I,form", [
    # H = I = 384: K/128 = 3 for both GEMMs (weight scales padded to 4), the down's second
    # 256-column tile one real half; T * k / E = 128
    (256, 4, 2, 384, 384, "block"),
    # I = 640 (I/128 = 5: two scale boxes, the down's weight scales padded to 8), H = 256
    (256, 4, 2, 256, 640, "block"),
    # one scale for everything, and one an expert: broadcast, then padded (I/128 = 3)
    (256, 4, 2, 256, 384, "tensor"),
    (300, 3, 2, 384, 256, "expert"),
    # few experts, many rows: _problem routes every token to expert 0 (k = 1 of 1 column),
    # expert 1 empty; 3 m-tiles of one expert and a ragged last one
    (300, 2, 1, 256, 384, "block"),
    # 300 rows an expert: the persistent walk, as 150 and 200 above (past
    # FP8_UNIT_GRID_MAX_ROWS; the 128-row cases take the unit grid on the H100 class)
    (600, 2, 1, 256, 256, "block"),
])
def test_default_prefill_path_matches_float64_and_the_global_scale_tile(T, E, k, H, I, form,
                                                                        ran):
    band = T * k / E <= M.FP8_UNIT_GRID_MAX_ROWS
    assert M.card_of(torch.empty(0).device) == M.CARD_H100      # CPU: no card
    want = M.FP8_PREFILL_UNIT_GRID if band else FP8_PREFILL_SPLIT_SMEM_TMA
    assert M._layer(T, H, I, E, k, None, True, M.CARD_H100).schedule == want
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=T + H + I, form=form)
    out = _default(x, w13, w2, s13, s2, ids, weights, k)
    assert [layer.schedule for layer in ran] == [want]
    _assert_matches_float64_and_the_global_scale_tile(out, T, E, k, H, I, x, w13, w2, s13, s2,
                                                      ids, weights)


@pytest.mark.parametrize("T,E,k,H,I,form", [
    (256, 4, 2, 384, 384, "block"),     # 128 rows an expert: the band's top, K/128 = 3
    (64, 4, 2, 256, 640, "tensor"),     # 32 rows: its bottom; I/128 = 5, one broadcast scale
])
def test_the_h200_class_default_runs_the_walk_quantizing_h(T, E, k, H, I, form, ran,
                                                           monkeypatch):
    """On the H200 class the op's default from 32 to 128 rows an expert is the persistent walk
    with the gate-up quantizing h itself (FP8_PREFILL_WALK_FUSED_QUANTIZE: the unit grid
    measured slower there), taken from x's card, matching float64 and the global-scale tile;
    the walk with the separate quantize above, as on the H100 class."""
    seen = _on_card(monkeypatch, M.CARD_H200)
    walk_q = M.FP8_PREFILL_WALK_FUSED_QUANTIZE
    assert walk_q.persistent and walk_q.quantize_out and walk_q != M.FP8_PREFILL_UNIT_GRID
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=T + I, form=form)
    out = _default(x, w13, w2, s13, s2, ids, weights, k)
    assert [layer.schedule for layer in ran] == [walk_q] and seen == ["cpu"]
    _assert_matches_float64_and_the_global_scale_tile(out, T, E, k, H, I, x, w13, w2, s13, s2,
                                                      ids, weights)
    # past the band: the walk with the separate quantize (the layer only)
    past = M.FP8_UNIT_GRID_MAX_ROWS * E // k + 1
    assert M._layer(past, H, I, E, k, None, True, M.CARD_H200).schedule == \
        FP8_PREFILL_SPLIT_SMEM_TMA


def test_just_below_the_threshold_takes_the_small_tile():
    T, E, k, H, I = 63, 4, 2, 256, 384     # 31.5 rows an expert
    assert M._layer(T, H, I, E, k, None, True).schedule == FP8_SMALL
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=3)
    out = _default(x, w13, w2, s13, s2, ids, weights, k)
    exact = M.reference_fp8(x, w13, w2, s13, s2, ids, weights)
    assert _rel(out, exact) < 1e-2, _rel(out, exact)


def test_weight_scales_updated_in_place_are_seen_by_the_next_call():
    """The padded weight-scale copies (K/128 = 3) are kept per scale tensor and version
    (argus.ops.moe._scale_operand): a scale changed in place between two calls into the same
    `out` (a version bump) is derived again and changes the result."""
    T, E, k, H, I = 256, 4, 2, 384, 384
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=17)
    out = torch.empty(T, H, dtype=torch.bfloat16)
    _default(x, w13, w2, s13, s2, ids, weights, k, out=out)
    s2.mul_(2.0)
    s13.view(E, 2, I // 128, H // 128)[:, 1] *= 0.5      # the up plane's blocks
    _default(x, w13, w2, s13, s2, ids, weights, k, out=out)
    exact = M.reference_fp8(x, w13, w2, s13, s2, ids, weights)
    assert _rel(out, exact) < 1e-2, _rel(out, exact)


def test_the_gate_up_tile_refusal_offers_the_default_tile():
    """bn = 160 straddles weight blocks; the fix names the tile the default runs (bn = 256 with
    n_split = 2), not only 128 / 64."""
    import argus as ag
    from argus.compiler import lower_only
    from argus.errors import LaunchError
    from argus.kernels.moe_fp8 import MoeFp8Schedule, grouped_gemm_fp8_kernel

    s = MoeFp8Schedule(bn=160, stages=3)
    with pytest.raises(LaunchError) as launch:
        M._layer(300, 256, 256, 4, 2, s, True)
    with pytest.raises(ag.TraceError) as trace:
        lower_only(grouped_gemm_fp8_kernel(True), s=s)
    for exc in (launch.value, trace.value):
        assert "bn=256 with n_split=2" in exc.fix, exc.fix
