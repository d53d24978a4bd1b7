"""The fp8 grouped GEMM's N-split promotion (argus/kernels/moe_fp8.py MoeFp8Schedule(n_split=2),
FP8_PREFILL_SPLIT / FP8_PREFILL_SPLIT_TMA: gemm_fp8.split_promoted_mma on 128 x 256 tiles,
global scales) without a GPU: the fp8 layer in the interpreter against float64 (ragged down
tiles, both epilogues, persistent wrap-around), the same values as the 128 x 128 default; the
wrong half's weight scale is seen by that check (gate-up planes swapped, the down's second half
taking the first half's weight block); the schedule's checks and repr; the op takes it as an
explicit schedule; the verifier with zero findings; NVRTC builds for sm_90a without spills."""

import re
from dataclasses import replace

import pytest

from argus import codegen, verify
from argus.compiler import lower_only
from argus.kernels.moe_fp8 import (FP8_PREFILL, FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_TMA,
                                   GroupedBlockScales, MoeFp8Schedule,
                                   grouped_gemm_fp8_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

from tests.moe.test_moe_fp8_layer import _problem, _rel  # noqa: E402


def _layer_out(T, E, k, H, I, schedule, seed):
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=seed)
    out = M.experts(x, w13, w2, ids, weights, M.Layer(T, H, I, E, k, schedule),
                    interpret=True, scales=(s13, s2))
    return out, M.reference_fp8(x, w13, w2, s13, s2, ids, weights)


@pytest.mark.parametrize("T,E,k,H,I,schedule", [
    # H = 384: the down's second 256-column tile has one real half (columns 256..383)
    (150, 4, 2, 384, 256, FP8_PREFILL_SPLIT),
    (150, 4, 2, 256, 384, FP8_PREFILL_SPLIT_TMA),             # 3 gate-up tiles, TMA store
    # the branch-free SiLU in the split's (gate, up) epilogue
    (150, 4, 2, 256, 256, replace(FP8_PREFILL_SPLIT_TMA, fast_silu=True, rsqrt_silu=True)),
    # 8+ units on 2 persistent CTAs: the ring, both sums, the staging and the scales wrap
    (150, 4, 2, 512, 256, replace(FP8_PREFILL_SPLIT_TMA, stages=2, num_sms=2, group_m=1)),
])
def test_split_layer_matches_float64(T, E, k, H, I, schedule):
    out, exact = _layer_out(T, E, k, H, I, schedule, seed=T + H + I)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)


def test_split_gives_the_default_tiles_values():
    """Each column's sum adds the same partials times the same scales in the same K order as
    the 128 x 128 default, so the interpreted layers are bit-identical (as gemm_fp8's split
    against its unsplit loop)."""
    a, _ = _layer_out(150, 4, 2, 256, 256, FP8_PREFILL_SPLIT, seed=9)
    b, _ = _layer_out(150, 4, 2, 256, 256, FP8_PREFILL, seed=9)
    assert torch.equal(a, b)


@pytest.mark.parametrize("bug", ["planes_swapped", "down_second_half_first_block"])
def test_the_check_sees_the_wrong_halfs_weight_scale(monkeypatch, bug):
    """Seeded bugs in GroupedBlockScales.piece: the gate-up's half j taking the other plane's
    scale, or the down's second half the first half's weight block: the layer leaves the
    float64 reference (the check above would fail)."""
    real = GroupedBlockScales.piece

    def wrong(self, j, width):
        got = real(self, j, width)
        if bug == "planes_swapped" and got.plane is not None:
            return replace(got, plane=1 - got.plane)
        if bug == "down_second_half_first_block" and got.plane is None and j == 1:
            return replace(got, first_col=self.first_col)
        return got

    grouped_gemm_fp8_kernel.cache_clear()      # fresh KernelFunctions: no cached trace
    monkeypatch.setattr(GroupedBlockScales, "piece", wrong)
    try:
        out, exact = _layer_out(150, 4, 2, 256, 256, FP8_PREFILL_SPLIT, seed=11)
    finally:
        grouped_gemm_fp8_kernel.cache_clear()
    assert _rel(out, exact) > 0.1, _rel(out, exact)


@pytest.mark.parametrize("kwargs,words", [
    (dict(bn=256, n_split=2, overlap=True), "none of overlap, late_release"),
    (dict(bn=256, n_split=2, late_release=True), "none of overlap, late_release"),
    (dict(bn=320, n_split=2, stages=2), "exceeds the budget of 192"),
    (dict(bn=256, n_split=3), "1 or 2 column halves"),
    (dict(bn=200, n_split=2), "multiple of 16"),
    (dict(bn=256), "bn=256 exceeds the register budget"),      # unsplit: two 128 x 256 sums
])
def test_split_schedule_checks(kwargs, words):
    with pytest.raises(ValueError, match=words):
        MoeFp8Schedule(**kwargs)


def test_split_schedule_repr_and_fields():
    assert "n_split" not in repr(FP8_PREFILL)
    assert repr(FP8_PREFILL_SPLIT).endswith("late_release=False, n_split=2)")
    assert FP8_PREFILL_SPLIT.gate_up_fits and FP8_PREFILL_SPLIT.piece == 128
    narrow = replace(FP8_PREFILL_SPLIT, bn=128)
    assert narrow != replace(narrow, n_split=1) and hash(narrow) != hash(replace(narrow, n_split=1))
    # an explicit schedule reaches the split (the op's prefill default is the smem-scale
    # split with the TMA store since 2026-12-06: test_moe_fp8_layer.py)
    assert M._layer(300, 256, 256, 4, 2, FP8_PREFILL_SPLIT, True).schedule == FP8_PREFILL_SPLIT


@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("schedule", [FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_TMA],
                         ids=["split", "split_tma"])
def test_split_verifies_clean(gated, schedule):
    """Zero findings; each half's promoted sum k-once, no tile reads another expert's
    weights, every stored element at its own coordinates."""
    report = verify.run(lower_only(grouped_gemm_fp8_kernel(gated), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    findings = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    assert not findings, "\n".join(str(d) for d in findings)
    assert {"wgmma.agree", "wgmma.k-once", "store.coords", "store.once"} <= \
        {o.code for o in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("schedule", [FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_TMA],
                         ids=["split", "split_tma"])
def test_split_builds_without_spills(gated, schedule):
    """NVRTC, sm_90a: no local memory, no wgmma serialization warning, 128-wide fp8 wgmma
    (the halves), the consumers at 232 registers (setmaxnreg), within 227 KB of shared
    memory (the TMA form: 4 x 48 KB stages and one half's 32 KB of staging)."""
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(grouped_gemm_fp8_kernel(gated), s=schedule))
    assert "convert_layout" not in source.text
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in binary.ptx
    assert "m64n256k32" not in binary.ptx
    assert "232" in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+)", binary.ptx)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


def test_repr_names_every_field_that_is_set():
    """MoeFp8Schedule prints MoeSchedule's repr=False fields too (rsqrt_silu, pdl): two
    schedules that differ only there printed alike (bench tables, agent logs)."""
    fast = replace(FP8_PREFILL, fast_silu=True, rsqrt_silu=True)
    assert repr(fast).endswith("late_release=False, rsqrt_silu=True)")
    assert repr(fast) != repr(replace(fast, rsqrt_silu=False))
    both = replace(FP8_PREFILL_SPLIT, rsqrt_silu=True, quantize_out=True)
    assert repr(both).endswith("rsqrt_silu=True, n_split=2, quantize_out=True)")
