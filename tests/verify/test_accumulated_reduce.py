"""Elementwise accumulators carried across a loop and reduced after it (argus/verify/
accumulate.py; argus/compose's row statistics: `acc = ag.maximum(acc, x)` over the column
blocks, `acc.max(axis=1)` after the loop). The reduction is one over (iterations x positions):
reduce.coverage asks the loop's parts to cover the row once each, and fill.identity that a
where's constant accumulated every iteration is the combine's identity. Each test builds the
kernel with one switch, so a correct variant and its bug differ in one line."""

from __future__ import annotations

import argus as ag
from argus import verify


def _row_max(blocks: int = 3, step: int = 1024, fill: float = float("-inf"),
             combine: str = "max", init: float = float("-inf")):
    @ag.kernel(threads=256, name="acc_row_max")
    def acc_row_max(X: ag.Tensor[64, 3000, ag.f32], OUT: ag.Tensor[64, 1, ag.f32],
                    ROWS: int = 2, BN: int = 1024):
        p0, p1 = ag.grid(32, 1)
        o0 = p0 * ROWS
        acc = ag.full((ROWS, BN), init)
        for b in ag.range(blocks):
            o1 = b * step
            x = ag.load(X, (o0, o1), (ROWS, BN))
            inb = (ag.arange(ROWS)[:, None] + o0 < 64) & (ag.arange(BN)[None, :] + o1 < 3000)
            m = ag.where(inb, x, fill)
            if combine == "max":
                acc = ag.maximum(acc, m)
            elif combine == "add":
                acc = acc + m
            else:                      # overwritten each iteration: no accumulation
                acc = m
        if combine == "add":
            r = acc.sum(axis=1)
        else:
            r = acc.max(axis=1)
        ag.store(OUT, (o0, 0), r)
    return acc_row_max.trace()


def _row_max_named(skip: int = 0):
    """The same accumulation over a runtime row length N (a named dim)."""
    @ag.kernel(threads=256, name="acc_row_max_n")
    def acc_row_max_n(X: ag.Tensor["M", "N", ag.f32], OUT: ag.Tensor["M", 1, ag.f32],
                      ROWS: int = 2, BN: int = 1024):
        p0, p1 = ag.grid(ag.cdiv(X.shape[0], ROWS), 1)
        o0 = p0 * ROWS
        acc = ag.full((ROWS, BN), float("-inf"))
        for b in ag.range(ag.cdiv(X.shape[1], BN) - skip):
            x = ag.load(X, (o0, b * BN), (ROWS, BN), other=float("-inf"))
            acc = ag.maximum(acc, x)
        ag.store(OUT, (o0, 0), acc.max(axis=1))
    return acc_row_max_n.trace()


def _codes(kernel, severity: str = "error") -> list[str]:
    return [d.code for d in verify.check(kernel, include_proven=True) if d.severity == severity]


def test_accumulated_max_covers_the_row():
    """Three blocks of 1024 cover 3000 columns once each: posed and proven (notes), no
    error."""
    ds = verify.check(_row_max(), include_proven=True)
    assert not [d for d in ds if d.severity in ("error", "warning")], ds
    proven = [d for d in ds if d.code == "reduce.coverage" and d.severity == "note"]
    assert len(proven) >= 2, [str(d) for d in ds]   # each once, covers the row


def test_accumulated_max_one_block_short_is_caught():
    (d,) = [d for d in verify.check(_row_max(blocks=2))
            if d.severity == "error" and d.code == "reduce.coverage"]
    assert "2048" in d.message and "3000" in d.message, d.message
    assert "thread" in d.counterexample, d.counterexample


def test_accumulated_max_overlapping_blocks_are_caught():
    """Blocks at offsets b * 512 overlap (and stop at 2048): a column reduced twice."""
    got = [d for d in verify.check(_row_max(blocks=6, step=512))
           if d.severity == "error" and d.code == "reduce.coverage"]
    assert any("twice" in d.message for d in got), [d.message for d in got]


def test_overwritten_variable_is_no_accumulation():
    """`acc = m` each iteration keeps the last block only: not an accumulation, no claim
    (the loop-carried reduction of a summarized value is not posed)."""
    ds = verify.check(_row_max(combine="set"), include_proven=True)
    assert not [d for d in ds if d.code == "reduce.coverage"], [str(d) for d in ds]


def test_named_row_length_is_proven_and_a_short_loop_caught():
    assert "reduce.coverage" not in _codes(_row_max_named())
    assert "reduce.coverage" in _codes(_row_max_named(), "note")
    assert "reduce.coverage" in _codes(_row_max_named(skip=1))


def test_accumulated_sum_masked_with_one_is_caught_at_the_where():
    (d,) = [d for d in verify.check(_row_max(fill=1.0, combine="add", init=0.0))
            if d.severity == "error" and d.code == "fill.identity"]
    assert d.counterexample["fill"] == 1.0 and "filled_at" in d.counterexample, d


def test_accumulated_sum_masked_with_zero_is_clean():
    ds = verify.check(_row_max(fill=0.0, combine="add", init=0.0))
    assert not [d for d in ds if d.severity in ("error", "warning")], [str(d) for d in ds]


def test_peeled_first_block_is_not_claimed():
    """`acc = x0`, then the loop from block 1: the first block is in the initial value, which
    the accumulation does not pair with the loop, so no coverage is claimed (no false error
    for a correct peel)."""
    @ag.kernel(threads=256, name="acc_peeled")
    def acc_peeled(X: ag.Tensor[64, 3072, ag.f32], OUT: ag.Tensor[64, 1, ag.f32],
                   ROWS: int = 2, BN: int = 1024):
        p0, p1 = ag.grid(32, 1)
        o0 = p0 * ROWS
        acc = ag.load(X, (o0, 0), (ROWS, BN), other=float("-inf"))
        for b in ag.range(1, 3):
            acc = ag.maximum(acc, ag.load(X, (o0, b * BN), (ROWS, BN), other=float("-inf")))
        ag.store(OUT, (o0, 0), acc.max(axis=1))
    ds = verify.check(acc_peeled.trace())
    assert not [d for d in ds if d.severity in ("error", "warning")], [str(d) for d in ds]


def test_block_combined_after_the_loop_is_not_claimed():
    """`(acc + tail).sum()` with the last block loaded after the loop: the loop covers two of
    the three blocks and the tail the third; the loop alone is not claimed to cover the row."""
    @ag.kernel(threads=256, name="acc_tail")
    def acc_tail(X: ag.Tensor[64, 3072, ag.f32], OUT: ag.Tensor[64, 1, ag.f32],
                 ROWS: int = 2, BN: int = 1024):
        p0, p1 = ag.grid(32, 1)
        o0 = p0 * ROWS
        acc = ag.full((ROWS, BN), 0.0)
        for b in ag.range(2):
            acc = acc + ag.load(X, (o0, b * BN), (ROWS, BN))
        tail = ag.load(X, (o0, 2 * BN), (ROWS, BN))
        ag.store(OUT, (o0, 0), (acc + tail).sum(axis=1))
    ds = verify.check(acc_tail.trace())
    assert not [d for d in ds if d.severity in ("error", "warning")], [str(d) for d in ds]


def test_split_segment_is_not_claimed_to_cover_the_row():
    """A split reduction's first pass (compose's split-R, KernelBench L1/99 at 8192 columns):
    slice ps accumulates blocks ps * 4 + bb and stores its partial; the row is the union over
    the slices, which the combine pass adds: each slice is not claimed to cover it."""
    @ag.kernel(threads=256, name="acc_split")
    def acc_split(X: ag.Tensor[64, 8192, ag.f32], OUT: ag.Tensor[2, 64, 1, ag.f32],
                  ROWS: int = 2, BN: int = 1024):
        p0, p1, ps = ag.grid(32, 1, 2)
        o0 = p0 * ROWS
        acc = ag.full((ROWS, BN), 0.0)
        for bb in ag.range(4):
            o1 = (ps * 4 + bb) * BN
            x = ag.load(X, (o0, o1), (ROWS, BN))
            acc = acc + ag.where((ag.arange(ROWS)[:, None] + o0 < 64)
                                 & (ag.arange(BN)[None, :] + o1 < 8192), x, 0.0)
        ag.store(OUT, (ps, o0, 0), acc.sum(axis=1))
    ds = verify.check(acc_split.trace())
    assert not [d for d in ds if d.severity in ("error", "warning")], [str(d) for d in ds]
