"""FA3's early K release (AttentionSchedule.early_k_release, bench token "ekr"): K_j's consume
step holds S_j's and P_{j-1} V_{j-1}'s issues inside V_{j-1}'s step; its end waits wait_group
1 (S_j retired) and releases K_j, the softmax of S_j runs beside P_{j-1} V_{j-1}, and V_{j-1}'s
end waits wait_group 0 before V's release (lower/sync.py keeps the rs group in flight past the
step that issued it: _outlives; its packed A registers are declared in V's step,
WgmmaFence.a_scope). Verifies with zero findings on the loops it applies to: the grid and the
persistent walk (early Q release) at head dims 64 / 128 / 256, full and causal, P packed,
with the LSE, and O rescaled after P V (rescale_after_pv: O accumulated in place into the
loop's own O, which wgmma.k-once follows into the peeled last P V since h328); sync.acc
proves the group retired before the end of V's step, the region that declares its packed A
registers."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel
from tests.loading import load_script
from tests.verify.test_attention_schedules import _assert_clean

BENCH = load_script("gpu_attention_bench")

# (variant, head_dim, causal, the bench length that picks the default, lse)
CASES = [("default+ekr", 128, False, 16384, False),
         ("default+ekr", 128, True, 16384, False),
         ("default+ekr", 128, False, 1024, False),            # walk, early Q release
         ("default+ekr+packp", 128, True, 4096, False),       # snake walk, P packed
         ("default+ekr", 256, True, 2048, False),             # snake + own_blocks
         ("fa3+ekr", 64, False, 16384, False),
         ("default+ekr", 128, False, 16384, True),
         ("default+ekr+olate", 128, False, 16384, False),      # h328: O in place, k-once
         ("default+ekr+olate+packp", 128, True, 2048, True)]


def kernel(variant, head_dim, causal, seq_len, lse):
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    assert s.early_k_release and s.problems_for(head_dim) == []
    return s, lower_only(attention_kernel(head_dim, ag.bf16, causal, lse), s=s)


@pytest.mark.parametrize("variant,head_dim,causal,seq_len,lse", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}{'-lse' if l_ else ''}"
                              for v, d, c, n, l_ in CASES])
def test_early_k_release_verifies_clean(variant, head_dim, causal, seq_len, lse):
    s, k = kernel(variant, head_dim, causal, seq_len, lse)
    # the shape under proof: an rs wgmma whose registers outlive its step
    assert any(isinstance(op, O.WgmmaFence) and op.a_scope == 1 for op in k.walk())
    report = verify.run(k)
    _assert_clean(report, s.epilogue, head_dim)
    pv = next(op for op in k.walk() if isinstance(op, O.Wgmma) and op.a_in_registers)
    scope = [f for f in report.findings if f.code == "sync.acc"
             and f.subject == f"register A of the wgmma at {pv.loc} at the end of its scope"]
    assert [f.status for f in scope] == ["proven"], scope
