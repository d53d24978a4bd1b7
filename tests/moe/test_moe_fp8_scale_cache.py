"""argus.ops.moe's fp8 weight-scale operands (argus/ops/moe.py _scale_operand): a per-tensor or
per-expert scale broadcast to blocks and/or block scales with K/128 zero-padded to a multiple of
4 (the shared-memory-scale GEMMs' 16-byte TMA row pitches) are derived in one copy per scale
tensor and version and kept (argus.ops.weight_cache), not copied on every call; so a call with
such scales replays (_run's key holds the operands' addresses). Without a GPU:

- the launcher replaced by one that records each launch's arguments and plans that count
  their replays (as tests/moe/test_moe_replay.py): derivations counted across repeated calls,
  an in-place update (a version bump) launching anew with the new operand, a simulated CUDA
  graph capture (torch.cuda.is_current_stream_capturing monkeypatched, as
  tests/unit/test_weight_cache.py) using and keeping nothing;
- in the interpreter: a call after an in-place update of the scales is bit-identical to a
  fresh op call with new tensors holding the new scales.

Forms: one element, [E], [E, N/128, K/128] blocks; K/128 = 3, 5 and 6 (the gate-up's or the
down's), beside a K/128 = 4 GEMM whose block scales are read in place (the stub tests: every
form at every size; the interpreter's: four of them, at small sizes)."""

import pytest

from argus.kernels.moe_fp8 import FP8_PREFILL, FP8_PREFILL_SPLIT_SMEM_TMA, GROUP

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

from tests.moe.conftest import stub_launches  # noqa: E402
from tests.moe.test_moe_fp8_layer import _problem  # noqa: E402

FORMS = ["tensor", "expert", "block"]
# (H, I): the gate-up's K/128 = H/128, the down's = I/128
SIZES = [(384, 512), (512, 640), (512, 768)]          # K/128 = 3 | 4, 4 | 5, 4 | 6
SIZE_IDS = ["k3_up", "k5_down", "k6_down"]
SMEM = FP8_PREFILL_SPLIT_SMEM_TMA                     # the prefill default


@pytest.fixture
def launches(monkeypatch):
    """Each call's launches (tests/moe/conftest.py `stub_launches`): ("launch", kernel name,
    args) or ("replay", kernel name, stream). Workspaces are cached per layer with a replay
    table, as on a GPU stream. The scale cache starts empty."""
    log = stub_launches(monkeypatch, with_args=True)
    _clear()
    yield log
    _clear()


def _kept() -> list:
    """The kept scale operands (tensors)."""
    cache = getattr(M, "_SCALES", None)
    return [v for _, v in cache.values()] if cache is not None else []


def _clear() -> None:
    if getattr(M, "_SCALES", None) is not None:
        M._SCALES.clear()


@pytest.fixture
def derivations(monkeypatch):
    """The scale derivations made (one entry per _derive_scale call: the copies)."""
    made = []
    derive = getattr(M, "_derive_scale", None)

    def counted(scale, block, width):
        made.append((tuple(scale.shape), block, width))
        return derive(scale, block, width)

    if derive is not None:   # (a tree without the kept operands counts none)
        monkeypatch.setattr(M, "_derive_scale", counted)
    return made


def _stub_call(problem, k, out, schedule=SMEM):
    x, w13, w2, s13, s2, ids, weights = problem
    return M._run(x, w13, w2, None, k, True, "softmax", "silu", ids, weights, None, 0, 0, 1.0,
                  schedule, out=out, w13_scale=s13, w2_scale=s2)


def _scale_args(log):
    """The weight-scale operands of the launched GEMMs in order (gate-up, down): the argument
    after the activation scales."""
    return [args[3] for kind, name, args in log
            if kind == "launch" and name.startswith(("moe_fp8_gate_up", "moe_fp8_down"))]


def _expected(scale, E, n, k, width):
    """The operand a GEMM must read: the scale broadcast to [E, n/128, k/128] blocks, the
    columns up to `width` zero."""
    blocks = M._block_scales(scale, E, n, k)
    return torch.nn.functional.pad(blocks, (0, width - blocks.shape[-1]))


def _derived_count(form, H, I):
    """Operands that need a copy: a broadcast form, or K/128 not a multiple of 4."""
    return sum(form != "block" or (kdim // GROUP) % 4 != 0 for kdim in (H, I))


@pytest.mark.parametrize("H,I", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("form", FORMS)
def test_scale_operands_are_derived_once_and_the_call_replays(launches, derivations, form,
                                                              H, I):
    T, E, k = 4, 3, 2
    problem = _problem(T, E, k, H, I, seed=H + I, form=form)
    s13, s2 = problem[3], problem[4]
    out = torch.empty(T, H, dtype=torch.bfloat16)
    _stub_call(problem, k, out)
    assert len(derivations) == _derived_count(form, H, I)
    up, down = _scale_args(launches)
    # what the GEMMs read: broadcast, padded to 16-byte rows, zero past K/128
    assert torch.equal(up, _expected(s13, E, 2 * I, H, M._pad4(H // GROUP)).view(up.shape))
    assert torch.equal(down, _expected(s2, E, H, I, M._pad4(I // GROUP)))
    for operand, scale in ((up, s13), (down, s2)):   # block scales in the GEMM's form: as given
        assert (operand.data_ptr() == scale.data_ptr()) == (operand.numel() == scale.numel())
    for _ in range(2):
        launches.clear()
        _stub_call(problem, k, out)
        # no copy: the kept operands, at the recorded addresses: the plans replay
        assert len(derivations) == _derived_count(form, H, I)
        assert launches and all(kind == "replay" for kind, _, _ in launches)


@pytest.mark.parametrize("H,I", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("form", FORMS)
def test_an_in_place_update_launches_anew_with_the_new_operand(launches, derivations, form,
                                                               H, I):
    T, E, k = 4, 3, 2
    problem = _problem(T, E, k, H, I, seed=H + I + 1, form=form)
    s13, s2 = problem[3], problem[4]
    out = torch.empty(T, H, dtype=torch.bfloat16)
    _stub_call(problem, k, out)
    _stub_call(problem, k, out)
    first = len(derivations)
    with torch.no_grad():
        s13.mul_(0.5)
        s2.add_(1.0)
    launches.clear()
    _stub_call(problem, k, out)
    # a version bump: derived again (the same operands as before: one each), not replayed
    assert len(derivations) == 2 * first
    assert launches and all(kind == "launch" for kind, _, _ in launches)
    up, down = _scale_args(launches)
    assert torch.equal(up, _expected(s13, E, 2 * I, H, M._pad4(H // GROUP)).view(up.shape))
    assert torch.equal(down, _expected(s2, E, H, I, M._pad4(I // GROUP)))
    assert len(_kept()) == first       # the earlier version's copies were let go of
    launches.clear()
    _stub_call(problem, k, out)        # the new version's plans replay
    assert launches and all(kind == "replay" for kind, _, _ in launches)
    assert len(derivations) == 2 * first


@pytest.mark.parametrize("form", FORMS)
def test_a_captured_call_uses_and_keeps_no_derived_scale(launches, derivations, monkeypatch,
                                                         form):
    """While a CUDA graph is captured the scales are derived in the call (the graph captures
    the copy, and each replay of it reads the scales' current values): no kept operand is
    read, none is kept, and the call is not replayed from the eager calls' plans."""
    T, E, k, H, I = 4, 3, 2, 512, 768                  # the down's K/128 = 6
    problem = _problem(T, E, k, H, I, seed=5, form=form)
    out = torch.empty(T, H, dtype=torch.bfloat16)
    _stub_call(problem, k, out)
    _stub_call(problem, k, out)
    kept = {id(v) for v in _kept()}
    kept_ptrs = {v.data_ptr() for v in _kept()}
    count = len(derivations)
    assert len(kept) == count == _derived_count(form, H, I)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for capture in (1, 2):
        launches.clear()
        _stub_call(problem, k, out)
        assert launches and all(kind == "launch" for kind, _, _ in launches)
        assert len(derivations) == count * (1 + capture)   # a copy in every captured call
        for operand in _scale_args(launches):
            assert operand.data_ptr() not in kept_ptrs
        assert {id(v) for v in _kept()} == kept                 # nothing new kept
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    launches.clear()
    _stub_call(problem, k, out)                        # eager again: the kept ones, replayed
    assert launches and all(kind == "replay" for kind, _, _ in launches)
    assert len(derivations) == 3 * count


def test_views_of_one_stacked_scale_tensor_are_kept_each(launches, derivations):
    """Layers whose scales are views of one stacked tensor (one version counter) keep one
    operand each instead of replacing each other every call."""
    T, E, k, H, I = 4, 3, 2, 512, 768
    problem = _problem(T, E, k, H, I, seed=6)
    stacked = torch.stack([problem[4], problem[4] * 2])   # two layers' down scales
    outs = [torch.empty(T, H, dtype=torch.bfloat16) for _ in range(2)]
    for _ in range(3):
        for layer in (0, 1):
            _stub_call(problem[:4] + (stacked[layer],) + problem[5:], k, outs[layer])
    assert len(derivations) == 2


def test_a_parameter_scale_is_kept_without_autograd_history(launches):
    T, E, k, H, I = 4, 3, 2, 512, 768
    problem = list(_problem(T, E, k, H, I, seed=7, form="expert"))
    problem[3] = torch.nn.Parameter(problem[3])
    problem[4] = torch.nn.Parameter(problem[4])
    _stub_call(tuple(problem), k, torch.empty(T, H, dtype=torch.bfloat16))
    assert len(_kept()) == 2
    assert all(v.grad_fn is None and not v.requires_grad for v in _kept())


# ---------------------------------------------------------------------- in the interpreter


def _interp(problem, k, schedule=SMEM, out=None):
    x, w13, w2, s13, s2, ids, weights = problem
    return M._run(x, w13, w2, None, k, True, "softmax", "silu", ids, weights, None, 0, 0, 1.0,
                  schedule, interpret=True, out=out, w13_scale=s13, w2_scale=s2)


# (form, H, I), small for the interpreter (each GEMM's K/128 is padded: 3 | 1, 1 | 5, 1 | 6;
# the stub tests above take every form at every size)
INTERP = [("tensor", 384, 128), ("expert", 128, 640), ("block", 128, 768), ("tensor", 128, 768)]


@pytest.mark.parametrize("form,H,I", INTERP,
                         ids=["tensor-k3_up", "expert-k5_down", "block-k6_down", "tensor-k6_down"])
def test_after_an_in_place_update_a_call_equals_a_fresh_call(derivations, form, H, I):
    """Two calls on the same scales (the second on the kept operands), the scales updated in
    place, a third call: bit-identical to a call on new tensors with the new values, and the
    kept operands derived once per version."""
    T, E, k = 8, 2, 1
    _clear()
    problem = _problem(T, E, k, H, I, seed=H + I + 2, form=form)
    s13, s2 = problem[3], problem[4]
    out = torch.empty(T, H, dtype=torch.bfloat16)
    first = _interp(problem, k, out=out).clone()
    assert torch.equal(_interp(problem, k, out=out), first)     # the kept operands
    with torch.no_grad():
        s2.mul_(3.0)
        s13.view(-1)[::2] *= 0.25                                # through a view
    updated = _interp(problem, k, out=out).clone()
    fresh = _interp(problem[:3] + (s13.clone(), s2.clone()) + problem[5:], k)
    assert torch.equal(updated, fresh)
    assert not torch.equal(updated, first)
    # one copy per operand that needs one and per version (the fresh call's clones: one more)
    assert len(derivations) == 3 * _derived_count(form, H, I)
    _clear()


def test_the_global_scale_tile_reads_broadcast_scales_unpadded(launches, derivations):
    """FP8_PREFILL reads its weight scales from global memory: a per-expert scale is broadcast
    (kept) but not padded, and K/128 = 6 block scales are read in place."""
    T, E, k, H, I = 4, 3, 2, 512, 768
    for form, copies in (("expert", 2), ("block", 0)):
        problem = _problem(T, E, k, H, I, seed=8, form=form)
        out = torch.empty(T, H, dtype=torch.bfloat16)
        launches.clear()
        _stub_call(problem, k, out, schedule=FP8_PREFILL)
        up, down = _scale_args(launches)
        assert down.shape == (E, H // GROUP, I // GROUP)
        assert (down.data_ptr() == problem[4].data_ptr()) == (form == "block")
        _stub_call(problem, k, out, schedule=FP8_PREFILL)
        assert len(derivations) == copies
        derivations.clear()
