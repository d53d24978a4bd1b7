"""O's rescale after P V retires (AttentionSchedule.rescale_late: ping-pong on FA3's overlap
order always, the overlap order alone with rescale_after_pv, bench token "olate"): O takes
alpha_j after the V step's end, and the next P V accumulates onto it unscaled, so the turn
holds the two GEMM issues alone. Verifies with zero findings, bf16 and FP8, in the grid, the
persistent walks (early Q release peels the last P V), with P carried packed and at FA3's
128 x 176; the ping-pong schedules (ordered.turns proven) are test_attention_pingpong_fa3.py's,
which now build this order."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel
from tests.loading import load_script
from tests.verify.test_attention_schedules import _assert_clean

BENCH = load_script("gpu_attention_bench")

CASES = [("default+olate", 128, False, 16384), ("default+olate", 128, True, 16384),
         ("default+olate", 128, False, 1024),            # walk, early Q release
         ("default+olate+packp", 128, True, 4096),       # snake walk, P packed
         ("default+packp+bn176+direct+olate", 128, False, 16384),
         ("default+olate", 256, False, 16384), ("default+olate", 256, True, 2048)]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}"
                              for v, d, c, n in CASES])
def test_rescale_after_pv_verifies_clean(variant, head_dim, causal, seq_len):
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    assert s.rescale_late and not s.ordered and s.problems_for(head_dim) == []
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=s))
    _assert_clean(report, s.epilogue, head_dim)


# head dims 64 and 256 take the late rescale only with the token (h315), both masks, natural
# and permuted V^T
FP8_CASES = [("olate", 128, False), ("pvt+olate", 128, True), ("olate", 64, True),
             ("pvt+olate", 64, False), ("olate", 256, False), ("pvt+olate", 256, True)]


@pytest.mark.parametrize("variant,head_dim,causal", FP8_CASES,
                         ids=[f"fp8-{v}-d{d}-{'causal' if c else 'full'}"
                              for v, d, c in FP8_CASES])
def test_fp8_rescale_after_pv_verifies_clean(variant, head_dim, causal):
    s = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert s.rescale_late and s.problems_for(head_dim, ag.e4m3) == []
    report = verify.run(lower_only(attention_kernel(head_dim, ag.e4m3, causal, False,
                                                    s.permuted_vt), s=s))
    _assert_clean(report, s.epilogue, head_dim)
