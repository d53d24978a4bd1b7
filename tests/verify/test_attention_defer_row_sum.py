"""The running row sum kept as each thread's partial (AttentionSchedule.defer_row_sum, bench
token "sumend"): P's columns folded by 8-column windows each KV block, the quad's reduction
once after the loop. Verifies with zero findings on every loop it applies to: FA3's overlap
order in the grid and the persistent walks (early Q release, the snake with P packed), FA3's
128 x 176, head dim 256 with own_blocks, with the LSE (which reads the reduced sum), and the
FP8 forward (head dims 128 with its 224 / 192-key blocks, and 256). The fold's coverage is
proven since h323 (reduce.coverage's fold claims, argus/verify/fold.py): the windows are
every column of P once, in the loop and in the block peeled before it, the partials are summed
over axis 1 after the loop, and the unfolded sum's per-block claims hold of the folded P
(seeded bugs: tests/mutations/test_attention_defer_row_sum_fold.py)."""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel, fp8_schedule
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
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, causal, lse), s=s),
                        include_proven=True)
    _assert_clean(report, s.epilogue, head_dim)
    _assert_fold_proven(report)


def _assert_fold_proven(report) -> None:
    """The fold's claims are posed and proven: its windows (in the loop; in the block peeled
    before FA3's loop) and the after-loop sum of the partials."""
    fold = [f for f in report.findings if f.code == "reduce.coverage" and
            ("windows of width 8" in f.subject or "partials of the fold" in f.subject)]
    assert any("partials of the fold" in f.subject for f in fold), fold
    assert len(fold) >= 2 and all(f.status == "proven" for f in fold), fold


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_defer_row_sum_verifies_clean_fp8(head_dim, causal):
    s = dataclasses.replace(fp8_schedule(head_dim, causal), defer_row_sum=True)
    kernel = attention_kernel(head_dim, ag.e4m3, causal, False, s.permuted_vt)
    report = verify.run(lower_only(kernel, s=s), include_proven=True)
    _assert_clean(report, s.epilogue, head_dim)
    _assert_fold_proven(report)
