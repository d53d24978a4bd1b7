"""The running row sum kept as each thread's partial (AttentionSchedule.defer_row_sum, bench
token "sumend"): P's columns folded by 8-column windows each KV block, the quad's reduction
once after the loop. Verifies with zero findings on every loop it applies to: FA3's overlap
order in the grid and the persistent walks (early Q release, the snake with P packed), FA3's
128 x 176, head dim 256 with own_blocks, and with the LSE (which reads the reduced sum). Not
proven: the folded sum's coverage (reduce.coverage proves the per-block `p.sum(axis=1)` it
replaces: 3 proofs fewer at head dim 128; a dropped window of the fold passes the verifier),
which is the interpreter's check (tests/interp/test_attention_defer_row_sum_interp.py: a
dropped window fails 7 of its 9 cases). In ping-pong's plain loop the verifier reads the
fold as 8 keys a block and reports the sum as violated: the schedule refuses that loop."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel
from tests.loading import load_script
from tests.verify.test_attention_schedules import _assert_clean

BENCH = load_script("gpu_attention_bench")

# (variant, head_dim, causal, the bench length that picks the default, lse)
CASES = [("default+sumend", 128, False, 16384, False),
         ("default+sumend", 128, True, 16384, False),
         ("default+sumend", 128, False, 1024, False),            # walk, early Q release
         ("default+sumend+packp", 128, True, 4096, False),       # snake walk, P packed
         ("default+sumend+packp+bn176+direct", 128, False, 16384, False),
         ("default+sumend", 256, True, 2048, False),             # snake + own_blocks
         ("default+sumend", 128, False, 16384, True)]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len,lse", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}{'-lse' if l_ else ''}"
                              for v, d, c, n, l_ in CASES])
def test_defer_row_sum_verifies_clean(variant, head_dim, causal, seq_len, lse):
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    assert s.defer_row_sum and s.problems_for(head_dim) == []
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, causal, lse), s=s))
    _assert_clean(report, s.epilogue, head_dim)
