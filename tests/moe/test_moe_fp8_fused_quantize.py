"""The fp8 gate-up quantizing its own output (argus/kernels/moe_fp8.py
MoeFp8Schedule(quantize_out=True), `_quantize_unit`: with n_split = 2 and bn = 256 a unit's h
tile is one 1x128 scale group, so the epilogue writes h in e4m3 plus its scales and the op
skips the bf16 h and the quantize_1x128 launch) without a GPU: in the interpreter, the layer
and the down's operands (hq, and hs in either layout) bit-identical to the unfused path
(gate-up to bf16, then quantize_1x128) on ragged experts, K/128 padded to 4 or not, both
kernels (smem and global scales), persistent wrap-around; two seeded formula bugs are seen by
that check (amax of the unrounded fp32 values, the scale written one row down); the
schedule's checks; the verifier with zero findings; NVRTC builds for sm_90a without spills."""

import re
from dataclasses import replace

import pytest

import argus.kernels.moe_fp8 as F
from argus import codegen, verify
from argus.compiler import lower_only
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_SMEM,
                                   FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA, GROUP,
                                   MoeFp8Schedule, grouped_gemm_fp8_kernel,
                                   grouped_gemm_fp8_smem_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

from tests.moe.test_moe_fp8_layer import _problem, _rel  # noqa: E402


def _q(s):
    return replace(s, quantize_out=True)


def _run(T, E, k, H, I, schedule, seed, monkeypatch):
    """The interpreted layer's output and its workspace (hq, hs, tiles)."""
    seen = []
    real = M._workspace

    def keep(*a, **kw):
        ws = real(*a, **kw)
        seen.append(ws)
        return ws

    monkeypatch.setattr(M, "_workspace", keep)
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=seed)
    out = M.experts(x, w13, w2, ids, weights, M.Layer(T, H, I, E, k, schedule),
                    interpret=True, scales=(s13, s2))
    monkeypatch.setattr(M, "_workspace", real)
    return out, seen[-1], M.reference_fp8(x, w13, w2, s13, s2, ids, weights)


def _same_bits(a, b):
    """Bit for bit, NaN for NaN: the padding rows of the interpreter's layout are NaN (the
    workspace's fill, so a test sees any that leaks) and their NaN's sign bit is not kept
    alike by numpy's bf16 round trip in the unfused path; nothing reads those rows."""
    nan_a, nan_b = torch.isnan(a.float()), torch.isnan(b.float())
    bits_a, bits_b = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    if not torch.equal(nan_a, nan_b):
        return False
    keep = ~nan_a.repeat_interleave(a.element_size(), dim=-1)
    return torch.equal(bits_a[keep], bits_b[keep])


def _check_identical(T, E, k, H, I, schedule, monkeypatch, seed):
    fused, wf, exact = _run(T, E, k, H, I, _q(schedule), seed, monkeypatch)
    plain, wp, _ = _run(T, E, k, H, I, schedule, seed, monkeypatch)
    assert "h" not in wf and "h" in wp, "the fused path allocates no bf16 h"
    assert not torch.isnan(fused).any(), "a padding row reached the output"
    assert _rel(fused, exact) < 1e-2, _rel(fused, exact)
    assert _same_bits(fused, plain)
    # the down's operands: every row of the units routing counted (padding rows included:
    # computed like any row in both paths), bit for bit; quantize_1x128 also writes the rows
    # past them, which nothing reads
    rows = int(wp["tiles"][0, 0]) * schedule.bm
    groups = I // GROUP
    assert _same_bits(wf["hq"][:rows], wp["hq"][:rows])
    if schedule.smem_scales:     # K-major [M, K/128 padded to 4, 1]
        hf, hp = wf["hs"][:rows, :groups], wp["hs"][:rows, :groups]
    else:                        # MN-major [K/128, M]
        hf, hp = wf["hs"][:, :rows], wp["hs"][:, :rows]
    assert _same_bits(hf, hp)
    return fused, exact


@pytest.mark.parametrize("T,E,k,H,I,schedule", [
    (150, 4, 2, 384, 256, FP8_PREFILL_SPLIT_SMEM_TMA),   # the prefill default: K/128 = 2 -> 4
    (150, 4, 2, 256, 384, FP8_PREFILL_SPLIT_SMEM),       # I/128 = 3: hs padded to 4 columns
    # 2 persistent CTAs: the ring, the scale stages and the units wrap
    (150, 4, 2, 512, 512, replace(FP8_PREFILL_SPLIT_SMEM_TMA, stages=2, num_sms=2, group_m=1)),
    (150, 4, 2, 384, 256, FP8_PREFILL_SPLIT_TMA),        # global scales: MN-major hs
    (150, 4, 2, 256, 384, replace(FP8_PREFILL_SPLIT, fast_silu=True, rsqrt_silu=True)),
])
def test_fused_quantize_is_bit_identical_to_the_unfused_path(T, E, k, H, I, schedule,
                                                              monkeypatch):
    _check_identical(T, E, k, H, I, schedule, monkeypatch, seed=T + H + I)


def test_mixed_layouts_gate_up_global_down_smem(monkeypatch):
    """The gate-up with global scales, the down with smem scales: the fused epilogue writes
    hs K-major (the down's layout), as quantize_1x128(k_major=True) would."""
    x, w13, w2, s13, s2, ids, weights = _problem(150, 4, 2, 256, 256, seed=5)
    outs = []
    for up in (FP8_PREFILL_SPLIT_TMA, _q(FP8_PREFILL_SPLIT_TMA)):
        layer = M.Layer(150, 256, 256, 4, 2, up, FP8_PREFILL_SPLIT_SMEM)
        outs.append(M.experts(x, w13, w2, ids, weights, layer, interpret=True,
                              scales=(s13, s2)))
    assert _same_bits(outs[0], outs[1])


@pytest.mark.parametrize("bug", ["amax_unrounded", "scale_one_row_down"])
def test_the_check_sees_a_wrong_formula(monkeypatch, bug):
    """Seeded bugs in `_quantize_unit`: the amax taken over the fp32 silu * up instead of
    the bf16-rounded values the unfused quantizer reads (scales differ in the last bits: the
    bit-identity check fails), or each row's scale written at the next row."""
    import argus as ag

    def wrong(Hq, ScaleC, k_major, s, n, row0, acc):
        raw = F.silu_mul(acc[0], acc[1], s.fast_silu, s.rsqrt_silu)
        h = raw.to(ag.bf16).to(ag.f32)
        amax = ag.maximum(ag.abs_(raw if bug == "amax_unrounded" else h).max(axis=1),
                          F.AMAX_FLOOR)
        ag.store(Hq, (row0, n * GROUP), (h * (F.E4M3_MAX / amax)).to(ag.e4m3))
        row = row0 + 1 if bug == "scale_one_row_down" else row0
        ag.store(ScaleC, (row, n), amax / F.E4M3_MAX)

    grouped_gemm_fp8_smem_kernel.cache_clear()
    monkeypatch.setattr(F, "_quantize_unit", wrong)
    try:
        with pytest.raises(AssertionError):
            _check_identical(150, 4, 2, 256, 256, FP8_PREFILL_SPLIT_SMEM_TMA, monkeypatch,
                             seed=11)
    finally:
        grouped_gemm_fp8_smem_kernel.cache_clear()


@pytest.mark.parametrize("kwargs", [dict(), dict(bn=128, n_split=2),
                                    dict(bn=256, n_split=1, stages=2)])
def test_quantize_out_schedule_checks(kwargs):
    with pytest.raises(ValueError, match="quantize_out quantizes the gate-up's unit tile"):
        MoeFp8Schedule(quantize_out=True, **kwargs)


def test_quantize_out_repr_and_kernel_checks():
    assert "quantize_out" not in repr(FP8_PREFILL_SPLIT_SMEM_TMA)
    assert repr(_q(FP8_PREFILL_SPLIT_SMEM_TMA)).endswith("smem_scales=True, quantize_out=True)")
    for card in M.CARDS:                        # not the default at 512 rows on either card
        assert M.fp8_schedule_for(16384, 8, 256, card) == FP8_PREFILL_SPLIT_SMEM_TMA
    with pytest.raises(Exception, match="quantize_out=True"):     # bf16 kernel, fused schedule
        lower_only(grouped_gemm_fp8_smem_kernel(True), s=_q(FP8_PREFILL_SPLIT_SMEM))
    with pytest.raises(Exception, match="gate-up's"):
        lower_only(grouped_gemm_fp8_smem_kernel(False, True), s=_q(FP8_PREFILL_SPLIT_SMEM))
    # the down ignores the field (one schedule for both GEMMs)
    lower_only(grouped_gemm_fp8_smem_kernel(False), s=_q(FP8_PREFILL_SPLIT_SMEM))


KERNELS = [
    ("smem_kmajor", lambda: grouped_gemm_fp8_smem_kernel(True, True, True),
     FP8_PREFILL_SPLIT_SMEM_TMA),
    ("smem_mnmajor", lambda: grouped_gemm_fp8_smem_kernel(True, True, False),
     FP8_PREFILL_SPLIT_SMEM),
    ("global_mnmajor", lambda: grouped_gemm_fp8_kernel(True, True, False),
     FP8_PREFILL_SPLIT_TMA),
    ("global_kmajor", lambda: grouped_gemm_fp8_kernel(True, True, True), FP8_PREFILL_SPLIT),
]


@pytest.mark.parametrize("name,build,schedule", KERNELS, ids=[k[0] for k in KERNELS])
def test_fused_quantize_verifies_clean(name, build, schedule):
    report = verify.run(lower_only(build(), s=_q(schedule)))
    findings = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    assert not findings, "\n".join(str(d) for d in findings)
    assert {"wgmma.agree", "wgmma.k-once", "store.coords"} <= {o.code for o in report.proven}


# the bench's split_smem_fusedq4: no staging buffer, so a 4th stage fits (206 KB)
BUILDS = KERNELS[:3] + [("smem_kmajor_4stages",
                         lambda: grouped_gemm_fp8_smem_kernel(True, True, True),
                         replace(FP8_PREFILL_SPLIT_SMEM_TMA, stages=4))]


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,build,schedule", BUILDS, ids=[k[0] for k in BUILDS])
def test_fused_quantize_builds_without_spills(name, build, schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(build(), s=_q(schedule)))
    assert "convert_layout" not in source.text
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    assert "m64n128k32.f32.e4m3.e4m3" in binary.ptx
    assert "232" in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+)", binary.ptx)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
