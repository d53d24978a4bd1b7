"""The fp8 grouped GEMM with its block scales through shared memory (argus/kernels/moe_fp8.py
MoeFp8Schedule(smem_scales=True), grouped_gemm_fp8_smem_kernel: gemm_fp8.SharedBlockScales,
the dense kernel's "smem scales") without a GPU: the quantizers' K-major scale write bit for
bit against the library's reference; the fp8 layer in the interpreter against float64 and
bit-identical to the global-scale default (the split 128 x 256 and the serial 128 x 128, K/128
padded to 4 or not, both epilogues, persistent wrap-around); a seeded swap of the halves'
weight scales is seen; the schedule's checks; the verifier with zero findings (TMA boxes
16-byte aligned: tma.inner-align proven); NVRTC builds for sm_90a without spills."""

import re
from dataclasses import replace

import numpy as np
import pytest

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import SharedBlockScales
from argus.kernels.moe_fp8 import (FP8_PREFILL, FP8_PREFILL_SPLIT_SMEM,
                                   FP8_PREFILL_SPLIT_SMEM_TMA, GROUP, MoeFp8Schedule,
                                   grouped_gemm_fp8_smem_kernel, permute_quantize_kernel,
                                   quantize_1x128_kernel)
from argus.ops.quantize_fp8 import reference as quantize_reference
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

from tests.moe.test_moe_fp8_interp import activations  # noqa: E402
from tests.moe.test_moe_fp8_layer import _rel  # noqa: E402
from tests.moe.test_moe_fp8_split import _layer_out  # noqa: E402

SMEM_128 = replace(FP8_PREFILL, smem_scales=True)   # the serial 128 x 128 with smem scales


@pytest.mark.parametrize("rows,cols", [(5, 384), (3, 512)])   # K/128 = 3 (padded to 4), 4
def test_k_major_quantize_matches_the_reference(rows, cols):
    x = torch.from_numpy(activations(rows, cols)).bfloat16()
    kg = cols // GROUP
    xq = torch.zeros(rows, kg, GROUP, dtype=torch.float8_e4m3fn)
    sa = torch.full((rows + 3, M._pad4(kg), 1), -7.0)
    quantize_1x128_kernel(ag.bf16, k_major=True).interpret(x.view(rows, kg, GROUP), xq, sa)
    q, s = quantize_reference(x.float())
    assert torch.equal(xq.view(torch.uint8).view(rows, cols),
                       q.view(torch.uint8).view(rows, cols))
    assert torch.equal(sa[:rows, :kg, 0], s)
    assert bool((sa[rows:] == -7.0).all()), "rows past M are not written"


def test_k_major_permute_quantize_writes_each_slot_row():
    T, k, H = 6, 2, 384
    x = torch.from_numpy(activations(T, H)).bfloat16()
    pos = torch.tensor(np.random.default_rng(1).permutation(16)[:T * k], dtype=torch.int32)
    xq = torch.zeros(16, H // GROUP, GROUP, dtype=torch.float8_e4m3fn)
    sa = torch.full((16, 4, 1), -7.0)
    permute_quantize_kernel(k, k_major=True).interpret(x.view(T, H // GROUP, GROUP),
                                                      pos.view(-1, 1), xq, sa)
    _, s = quantize_reference(x.float())
    rows = pos.long()
    assert torch.equal(sa[rows, :H // GROUP, 0], s[torch.arange(T * k) // k])


@pytest.mark.parametrize("kernel", [quantize_1x128_kernel(ag.bf16, k_major=True),
                                    permute_quantize_kernel(8, k_major=True)],
                         ids=["quantize", "permute_quantize"])
def test_k_major_quantizers_verify_clean(kernel):
    report = verify.run(lower_only(kernel))
    assert not [d for d in report.diagnostics if d.severity in ("error", "warning")]


@pytest.mark.parametrize("T,E,k,H,I,schedule", [
    (150, 4, 2, 384, 256, FP8_PREFILL_SPLIT_SMEM),       # K/128 = 3 and 2: padded to 4
    (150, 4, 2, 256, 384, FP8_PREFILL_SPLIT_SMEM_TMA),
    (150, 4, 2, 640, 512, FP8_PREFILL_SPLIT_SMEM),       # 5 K blocks (two scale boxes), 4
    (150, 4, 2, 384, 256, SMEM_128),                     # serial 128 x 128, planes split at 64
    # 2 persistent CTAs: the ring, the scale stages and the staging wrap
    (150, 4, 2, 512, 512, replace(FP8_PREFILL_SPLIT_SMEM_TMA, stages=2, num_sms=2, group_m=1)),
])
def test_smem_scales_layer_matches_float64_and_the_default(T, E, k, H, I, schedule):
    out, exact = _layer_out(T, E, k, H, I, schedule, seed=T + H + I)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    default, _ = _layer_out(T, E, k, H, I, FP8_PREFILL, seed=T + H + I)
    assert torch.equal(out, default)     # the same partials, scales and order


def test_the_check_sees_the_halves_weight_scales_swapped(monkeypatch):
    """Seeded bug: SharedBlockScales.piece giving half j the other half's scale (the gate-up's
    planes swapped, the down's two weight blocks swapped): the layer leaves float64."""
    def swapped(self, j, width):
        if self.planes == 1:
            return replace(self, bn=width)
        return replace(self, bn=width, split=self.split - (1 - j) * width)

    grouped_gemm_fp8_smem_kernel.cache_clear()
    monkeypatch.setattr(SharedBlockScales, "piece", swapped)
    try:
        out, exact = _layer_out(150, 4, 2, 256, 256, FP8_PREFILL_SPLIT_SMEM, seed=11)
    finally:
        grouped_gemm_fp8_smem_kernel.cache_clear()
    assert _rel(out, exact) > 0.1, _rel(out, exact)


@pytest.mark.parametrize("kwargs,words", [
    (dict(smem_scales=True, overlap=True), "smem_scales reads"),
    (dict(smem_scales=True, late_release=True), "smem_scales reads"),
    (dict(smem_scales=True, stages=3, cluster_m=2), "no clusters"),
])
def test_smem_scales_schedule_checks(kwargs, words):
    with pytest.raises(ValueError, match=words):
        MoeFp8Schedule(**kwargs)


def test_smem_scales_repr_and_reach():
    assert "smem_scales" not in repr(FP8_PREFILL)
    assert repr(FP8_PREFILL_SPLIT_SMEM).endswith("n_split=2, smem_scales=True)")
    for card in M.CARDS:                        # the prefill default on either card
        assert M.fp8_schedule_for(16384, 8, 256, card) == FP8_PREFILL_SPLIT_SMEM_TMA
    layer = M._layer(300, 256, 256, 4, 2, (FP8_PREFILL, FP8_PREFILL_SPLIT_SMEM), True)
    assert layer.down == FP8_PREFILL_SPLIT_SMEM and not layer.schedule.smem_scales


SCHEDULES = [FP8_PREFILL_SPLIT_SMEM, FP8_PREFILL_SPLIT_SMEM_TMA, SMEM_128]
IDS = ["split", "split_tma", "serial128"]


@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
def test_smem_scales_verify_clean(gated, schedule):
    report = verify.run(lower_only(grouped_gemm_fp8_smem_kernel(gated), s=schedule))
    findings = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    assert not findings, "\n".join(str(d) for d in findings)
    assert {"wgmma.agree", "wgmma.k-once", "tma.inner-align", "store.coords"} <= \
        {o.code for o in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
def test_smem_scales_build_without_spills(gated, schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(grouped_gemm_fp8_smem_kernel(gated), s=schedule))
    assert "convert_layout" not in source.text
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    assert f"m64n{schedule.piece}k32.f32.e4m3.e4m3" in binary.ptx
    assert "232" in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+)", binary.ptx)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
