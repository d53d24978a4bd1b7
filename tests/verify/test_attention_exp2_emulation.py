"""The attention kernels with part of the softmax's exp2 on the FMA pipe
(AttentionSchedule.exp2_emulate) verify as their SFU-only schedules do and build for sm_90a
without spills: the emulated exp2 keeps exp2(-inf) = 0 and never gives -inf (the facts the
mask and row-statistics proofs read, verify/transfer/values.py), so the FP8 head_dim 128 and
the bf16 head_dim 64 schedules at 6 of 16 key groups emulated (the most the bench sweeps) are
clean."""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import compile_kernel, lower_only
from argus.kernels.attention import attention_kernel, default_schedule, fp8_schedule
from argus.runtime import nvrtc_available
from tests.verify.test_attention_schedules import _assert_clean


@pytest.mark.parametrize("permuted", [False, True], ids=["shfl", "pvt"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp8_head_dim_128_verifies_clean(causal, permuted):
    s = dataclasses.replace(fp8_schedule(128, causal, wide_keys=False), exp2_emulate=6,
                            permuted_vt=permuted)   # emulation counts fit the 128-key tile
    diags = verify.check(lower_only(attention_kernel(128, ag.e4m3, causal, False, permuted),
                                    s=s))
    assert not [d for d in diags if d.severity in ("error", "warning")], diags


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bf16_head_dim_64_verifies_clean(causal):
    s = dataclasses.replace(default_schedule(64, causal, 4096), exp2_emulate=6)
    _assert_clean(verify.run(lower_only(attention_kernel(64, ag.bf16, causal, False), s=s)))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("head_dim,dtype", [(128, ag.e4m3), (64, ag.bf16)], ids=["fp8", "bf16"])
def test_builds_without_spills(head_dim, dtype):
    fp8 = dtype.bits == 8
    base = dataclasses.replace(fp8_schedule(head_dim, True), permuted_vt=True) if fp8 else \
        default_schedule(head_dim, True, 4096)
    compiled = compile_kernel(attention_kernel(head_dim, dtype, True, False, fp8), verify=False,
                              s=dataclasses.replace(base, exp2_emulate=6))
    res = compiled.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert compiled.binary.ptx.count("add.rm.ftz.f32") > 0
