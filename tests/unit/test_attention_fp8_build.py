"""The FP8 attention forward's real schedules (argus.kernels.attention.fp8_schedule) on the
CPU: the generated CUDA issues e4m3 wgmma for both products (S = Q K^T from shared memory,
P V with P gathered into the 8-bit A fragment and V^T K-major), NVRTC builds it for sm_90a
without spills, and the verifier finds nothing (every head dim, full and causal). The bf16
kernels' CUDA did not move with the FP8 path (compared by hash before and after, 55 kernels,
2026-12-03; docs/perf/attention.md)."""

from __future__ import annotations

import dataclasses

import pytest

import argus as ag
from argus import codegen, verify
from argus.compiler import compile_kernel, lower_only
from argus.kernels.attention import attention_kernel, default_schedule, fp8_schedule
from argus.runtime import nvrtc_available

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _text(D, causal, s=None, dt=ag.e4m3):
    s = s or (fp8_schedule(D, causal) if dt is ag.e4m3 else default_schedule(D, causal))
    return codegen.render(lower_only(attention_kernel(D, dt, causal, False), s=s)).text


def test_both_products_are_e4m3_wgmma_and_p_is_gathered_by_quads():
    # the 128-key tile with P in fp32 (wide_keys=False); the default's wide blocks below
    text = _text(128, False, s=fp8_schedule(128, False, wide_keys=False))
    # S = Q K^T: 128 x 128 from shared memory, 4 k32 steps per block (the peeled first block
    # and the loop's); P V: N = head dim 128, A from registers, 4 k32 steps per block
    assert text.count("ag::wgmma_m64n128k32_f32_e4m3_ss(") >= 8
    assert text.count("ag::wgmma_m64n128k32_f32_e4m3_rs(") >= 8
    assert "_e4m3_rs_tb" not in text and "_e4m3_ss_tb" not in text   # fp8 is K-major only
    # 16 A registers per 128 keys, each gathered from two quad lanes
    assert text.count("ag::quad_gather_b16x2(") == 16 * 2     # the loop's P V and the last


@pytest.mark.parametrize("D,staged", [(64, False), (128, True), (256, False)])
def test_the_epilogue_is_the_measured_one(D, staged):
    # head dim 128 stores O through stmatrix + TMA (measured ahead at 2k, within noise at 8k
    # and 16k full, fp8_schedule's docstring); 64 and 256 were not measured: direct stores
    text = _text(D, False)
    assert ("ag::stmatrix" in text) == staged
    assert fp8_schedule(D, False).fold_scale and fp8_schedule(D, True).fold_scale


@pytest.mark.parametrize("causal,keys", [(False, 224), (True, 192)])
def test_the_default_at_128_takes_the_wide_key_block_with_p_packed(causal, keys):
    text = _text(128, causal)
    # S = Q K^T: 64 x keys a warpgroup, 4 k32 steps a block; P packed as e4m3 words
    assert text.count(f"ag::wgmma_m64n{keys}k32_f32_e4m3_ss(") >= 8
    assert text.count("ag::wgmma_m64n128k32_f32_e4m3_rs(") >= 8
    assert fp8_schedule(128, causal).packed_p and fp8_schedule(128, causal).block_n == keys


def test_bf16_kernel_does_not_gather():
    text = _text(128, False, dt=ag.bf16)
    assert "quad_gather" not in text and "e4m3" not in text.split("namespace ag {")[-1]


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True])
def test_builds_for_sm90a_without_spills(causal):
    compiled = compile_kernel(attention_kernel(128, ag.e4m3, causal, True),
                              s=fp8_schedule(128, causal))
    assert compiled.binary
    res = compiled.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_verifies_clean(D, causal):
    diags = verify.check(lower_only(attention_kernel(D, ag.e4m3, causal, False),
                                    s=fp8_schedule(D, causal)))
    assert not [d for d in diags if d.severity in ("error", "warning")], diags


def test_plain_loop_verifies_with_the_folded_scale():
    s = dataclasses.replace(fp8_schedule(128, True, wide_keys=False), fa3_overlap=False,
                            rescale_after_pv=False,
                            fold_scale=True)
    diags = verify.check(lower_only(attention_kernel(128, ag.e4m3, True, False), s=s))
    errors = [d for d in diags if d.severity == "error"]
    assert not errors, errors


@pytest.mark.parametrize("epilogue", ["direct", "tma"])
def test_overlap_with_the_folded_scale_verifies(epilogue):
    # the peeled first block's max(s) * c (c > 0 by the kernel's ag.require) is a max of the
    # row (check_reduce._order_preserved), so the row max covers every key; the coverage
    # obligation is posed (it was the one that failed before the rule), not skipped
    s = dataclasses.replace(fp8_schedule(128, False), fold_scale=True, epilogue=epilogue)
    report = verify.run(lower_only(attention_kernel(128, ag.e4m3, False, False), s=s),
                        include_proven=True)
    assert not [d for d in report.diagnostics if d.severity in ("error", "warning")], \
        report.diagnostics
    covered = [f for f in report.findings if f.code == "reduce.coverage"
               and "max" in f.subject and "covers the row" in f.subject]
    assert covered and all(f.status == "proven" for f in covered), covered


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True])
def test_ptx_keeps_fa3_order_with_the_gather(causal):
    """In the PTX of fp8_schedule(128): the loop issues P V (4 register-A k32 wgmma), waits
    for S_j alone (wait 1), runs the softmax's 64 + 2 exp2 while P V is in flight, then wait 0,
    as the bf16 kernel does (test_attention_overlap_ptx); the packed A registers are fresh
    before each wgmma (defined by the gather itself: P's fence is the pin, no copy); the
    gather is 32 shuffles per P V site (two of them: the loop's and the last block's) and two
    e4m3x2 conversions per A register."""
    from tests.unit.test_attention_overlap_ptx import loop_order
    from tests.unit.test_wgmma_register_a_ptx import register_a_without_fresh_copy

    ptx = attention_kernel(128, ag.e4m3, causal, False).compile(
        s=fp8_schedule(128, causal, wide_keys=False)).binary.ptx
    order = loop_order(ptx)
    assert any(order[i:i + 4] == ["rs:4", "w1", "e:66", "w0"] for i in range(len(order))), \
        order
    assert register_a_without_fresh_copy(ptx, pinned=True) == []   # P: the pin, no copy
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 2 * 16 * 2
    assert ptx.count("shfl.sync.idx") >= 2 * 32
