"""The fused-combine split decode kernel compiles with NVRTC for sm_90a without spills (one CTA
an SM at 255 registers; two CTAs an SM at 128), renders its ticket as one atom.inc per
warpgroup between two named barriers with the release and acquire fences around it, and
needs no combine kernel (tests/interp/test_attention_decode_fused_interp.py runs it against
float64; tests/verify/test_attention_decode_fused_verifies.py proves it)."""

import pytest

import argus as ag
from argus.kernels.attention_decode import (DecodeSchedule, decode_kernel, default_decode_schedule,
                                            merge_rows, with_fused_combine)


@pytest.mark.parametrize("head_dim,pad,two", [(128, 16, False), (128, 32, True)])
def test_fused_kernel_compiles_without_spills(head_dim, pad, two):
    s = DecodeSchedule(block_n=64, stages=2, consumer_regs=232, ctas_per_sm=2,
                       fused_combine=True) if two else \
        with_fused_combine(default_decode_schedule(head_dim, 1), head_dim)
    c = ag.compile(decode_kernel(head_dim, ag.bf16, False, True, 0, True), s=s,
                   splits_pad=pad, verify=False)
    r = c.resources
    assert r.spill_stores == 0 and r.spill_loads == 0, r.summary()
    assert r.registers <= (128 if two else 255), r.summary()
    text = c.source.text
    assert text.count("ag::atom_inc_acq_rel_gpu(") == 1 and text.count("fence.acq_rel.gpu") == 2
    assert f"__launch_bounds__(128, {2 if two else 1})" in text or \
        f"__launch_bounds__(256, {2 if two else 1})" in text


def test_merge_rows():
    assert merge_rows(16, 128) == 4 and merge_rows(2, 64) == 16 and merge_rows(128, 256) == 1


def test_fused_needs_its_kernel():
    s = with_fused_combine(default_decode_schedule(128, 1), 128)
    with pytest.raises(ag.TraceError, match="needs the fused split kernel"):
        decode_kernel(128, ag.bf16, False, True).trace(s=s)
    with pytest.raises(ValueError, match="contiguous cache"):
        decode_kernel(128, ag.bf16, False, True, 128, True)
