"""packed_p (h295: FA3's overlap loop carries P_{j-1} as the packed bf16 A fragment,
lower/packed.py) verifies with zero findings, as the fp32 carry does: the default schedules
with it (head dims 128 and 256, full and causal, the grid and the persistent walks with early
Q release and the snake) and the wider key blocks it lets build, the bench candidates
"default+packp+bn160" (hd128), "default+packp+bn176+direct" (FA3's 128 x 176) and
"default+packp+bn80+direct" (hd256's 128 x 80). The packing changes the representation, not the
program: the verifier reads the same ops (P's convert now sits before the back edge). The
seeded V-one-block-ahead bug is caught with P packed too
(tests/mutations/test_attention_fa3_carry.py)."""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel
from tests.loading import load_script
from tests.verify.test_attention_schedules import _assert_clean

BENCH = load_script("gpu_attention_bench")

CASES = [("default+packp", 128, False, 4096), ("default+packp", 128, True, 4096),
         ("default+packp", 128, False, 1024), ("default+packp", 256, False, 4096),
         ("default+packp", 256, True, 2048),
         ("default+packp+bn160", 128, False, 4096), ("default+packp+bn160", 128, True, 4096),
         ("default+packp+bn176+direct", 128, False, 4096),
         ("default+packp+bn176+direct", 128, True, 16384),
         ("default+packp+bn80+direct", 256, False, 4096),
         ("default+packp+bn80+direct", 256, True, 4096)]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}"
                              for v, d, c, n in CASES])
def test_packed_p_verifies_clean(variant, head_dim, causal, seq_len):
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    assert s.packed_p and s.problems_for(head_dim) == []
    kernel = lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=s)
    _assert_clean(verify.run(kernel), s.epilogue, head_dim)


# (the wider FP8 tiles, 192 / 224 / 256 with both masks and both V^T orders, verify with zero
# findings since h319: tests/verify/test_attention_fp8_wide.py)
FP8_CASES = [("pvt+packp", False), ("pvt+packp", True), ("packp", False), ("packp", True),
             ("pvt+packp+bn224", False), ("packp+bn224", False)]


@pytest.mark.parametrize("variant,causal", FP8_CASES,
                         ids=[f"fp8-{v}-{'causal' if c else 'full'}" for v, c in FP8_CASES])
def test_fp8_packed_p_verifies_clean(variant, causal):
    """h313: the FP8 kernel's P carried as e4m3 words verifies clean, with the findings of
    the same schedule unpacked (none: tests/unit/test_attention_fp8_build.py)."""
    s = BENCH.fp8_variant_schedule(variant, 128, causal)
    assert s.packed_p and s.problems_for(128, ag.e4m3) == []
    kernel = attention_kernel(128, ag.e4m3, causal, False, s.permuted_vt)
    report = verify.run(lower_only(kernel, s=s))
    _assert_clean(report, s.epilogue, 128)
    unpacked = verify.run(lower_only(kernel, s=dataclasses.replace(s, packed_p=False)))
    assert [str(d) for d in report.diagnostics] == [str(d) for d in unpacked.diagnostics]
