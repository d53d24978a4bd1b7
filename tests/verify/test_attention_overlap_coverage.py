"""The attention forward's intra-warpgroup overlap (AttentionSchedule(intra_wg_overlap=True),
the bench token `overlap`; not FA3's order, fa3_overlap) verifies with zero findings at head
dims 64, 128 and 256, full and causal.

Before (main at 1c97e3c6), every full-mask build had two reduce.coverage errors, the row max
and the row sum: "the loop reduces 128 values of sk but the tensor has 129" (64 of 65 at
head dims 64 and 256). A verifier false positive, not a kernel bug: the overlap runs the
softmax of block j - 1 in `range(1, blocks)` and the last block's after the loop, and
check_reduce paired a block reduced after a loop only where nothing but the combination read
the accumulator. The online softmax reads the old max again in its rescale, exp2(m - m_new),
and the sum's tail is added to the rescaled l * alpha, so the last block was left out of the
row (the interpreter agrees with float64 at ragged lengths: tests/interp/
test_attention_overlap_interp.py). check_reduce._tails_after now pairs the tail where every
read of the partial statistic is a step of the combination or depends on the tail too, and
follows the loop's own rescale of a sum (tests/verify/test_reduce_peeled.py seeds the wrong
tails: reduced twice, a block short, the stale statistic stored, a rescale the loop lacks).
The causal builds had no error (a CTA-dependent trip count: coverage is not claimed there).

Then one unknown was left under the full mask: the mask's tag assertion in the loop's softmax
sits in a branch never taken (block j - 1 < blocks - 1 holds no key past SK), an empty model,
which the verifier reports as a vacuous proof. The kernel now states what the branch is for
instead (softmax(whole=True): every key of the block is one a query may see), proven here,
and refused when the loop runs a block too far (the seeded bug below)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention as A
from tests.loading import load_script
from tests.verify.test_attention_schedules import _assert_clean


BENCH = load_script("gpu_attention_bench")


def overlap_schedule(head_dim: int) -> A.AttentionSchedule:
    """The bench's `overlap` token (scripts/gpu_attention_bench.py variant_schedule: the plain
    loop's tiles with the intra-warpgroup overlap, block_n halved until it fits: 64 at every
    head dim but 128)."""
    s = BENCH.variant_schedule("overlap", head_dim, False)
    assert s.intra_wg_overlap and not s.fa3_overlap and not s.problems_for(head_dim)
    return s


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_overlap_verifies_clean(head_dim, causal):
    s = overlap_schedule(head_dim)
    report = verify.run(lower_only(A.attention_kernel(head_dim, ag.bf16, causal, False), s=s),
                        include_proven=True)
    _assert_clean(report, s.epilogue, head_dim)
    if not causal:
        # the row max and sum are claimed and proven, with the last block after the loop
        for fn in ("max", "sum"):
            got = [f for f in report.findings if f.code == "reduce.coverage"
                   and f.subject.startswith(f"{fn} over axis 1") and "covers the row"
                   in f.subject]
            assert got and all(f.status == "proven" for f in got), (fn, got)
        whole = [f for f in report.findings if f.code == "tag.assert"
                 and "never masks" in str(f.subject) + str(getattr(f, "message", ""))]
        assert whole and all(f.status == "proven" for f in whole), whole


def _patched(monkeypatch, by: int):
    real = A._kv_blocks

    def moved(q0, block_m, block_n, S, SK, causal, at_least=0):
        return real(q0, block_m, block_n, S, SK, causal, at_least) + by
    monkeypatch.setattr(A, "_kv_blocks", moved)
    fn = A.attention_kernel.__wrapped__(128, ag.bf16, False, False)   # not the cached one
    return verify.run(lower_only(fn, s=overlap_schedule(128)))


def test_overlap_one_block_short_is_still_a_coverage_error(monkeypatch):
    """A reduce that really covers too few columns: the KV loop one block short, so the last
    key block is never reduced. Pairing the tail after the loop must not hide it."""
    report = _patched(monkeypatch, -1)
    hits = [d for d in report.errors if d.code == "reduce.coverage"]
    fns = {fn for fn in ("max", "sum") for d in hits if d.message.startswith(f"{fn} over")
           or f"— {fn} over" in d.message}
    assert fns == {"max", "sum"}, [str(d) for d in report.errors]
    assert all("never reduced" in d.message for d in hits), [str(d) for d in hits]


def test_overlap_one_block_too_many_breaks_the_whole_block_assertion(monkeypatch):
    """The loop a block too far: its softmax then reaches the block with the key tail, which
    `whole` says it never does; the assertion is refused with a counterexample."""
    report = _patched(monkeypatch, 1)
    hits = [d for d in report.errors if d.code == "tag.assert" and "never masks" in d.message]
    assert hits, [(d.code, d.message[:160]) for d in report.diagnostics]
