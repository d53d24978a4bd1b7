"""reduce.coverage with blocks reduced outside the loop: a first block peeled before the loop
(the accumulator's initial value) or a last block after it belongs to the same row. A correct
peel (the loop starts after the first block, or stops before the last) is proven, where the
loop alone was refused as not covering the row; a peel whose block the loop reduces again is
refused as a double count, with both positions, where it used to pass. Traced and lowered
(lower/prefetch.py's register ring around the loop's loads)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

BN = 1024


def _peeled(form: str, fn: str = "sum"):
    @ag.kernel(threads=256)
    def peel(X: ag.Tensor["M", "N", ag.f32], OUT: ag.Tensor["M", 1, ag.f32]):
        (p,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        fill = float("-inf") if fn == "max" else 0.0

        def part(b):
            x = ag.load(X, (p, b * BN), (1, BN), other=fill)
            return x.max(axis=1) if fn == "max" else x.sum(axis=1)

        def combine(a, b):
            return ag.maximum(a, b) if fn == "max" else a + b
        if form in ("head", "head_twice"):
            acc = part(0)
            for b in ag.range(1 if form == "head" else 0, blocks):
                acc = combine(acc, part(b))
        else:
            acc = ag.full((1, 1), fill)
            for b in ag.range(blocks - 1):
                acc = combine(acc, part(b))
            acc = combine(acc, part(blocks - 1 if form == "tail" else blocks - 2))
        ag.store(OUT, (p, 0), acc)
    return peel


def _coverage(form: str, lowered: bool, fn: str = "sum"):
    kernel = _peeled(form, fn)
    report = verify.run(lower_only(kernel) if lowered else kernel.trace())
    return [d for d in report.diagnostics if d.code == "reduce.coverage"]


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])
@pytest.mark.parametrize("form,fn", [("head", "sum"), ("tail", "sum"), ("head", "max")])
def test_a_correct_peel_is_proven(form, fn, lowered):
    assert _coverage(form, lowered, fn) == []


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])
@pytest.mark.parametrize("form", ["head_twice", "tail_twice"])
def test_a_block_reduced_in_the_peel_and_the_loop_is_refused(form, lowered):
    found = _coverage(form, lowered)
    twice = [d for d in found if d.severity == "error" and "reduced twice" in d.message]
    assert twice, [str(d) for d in found]
    wit = twice[0].counterexample
    # the loop's block b at position q and the peeled block at its position reach one column
    (b,) = wit["first"]["iteration"].values()
    blocks = -(-wit["shapes"]["N"] // BN)
    peeled_block = 0 if form == "head_twice" else blocks - 2
    assert b * BN + wit["first"]["position"] == peeled_block * BN + wit["second"]["position"] \
        == wit["n"]
    assert "thread" in wit and "peeled_at" in wit


def test_a_tail_combined_beside_the_stored_accumulator_is_not_in_its_row():
    # extra = acc + last.sum() is computed, but acc (without the last block) is stored: the
    # last block must not count for acc's row (before, the loop over blocks - 1 was proven)
    @ag.kernel(threads=256)
    def beside(X: ag.Tensor["M", "N", ag.f32], OUT: ag.Tensor["M", 1, ag.f32],
               OUT2: ag.Tensor["M", 1, ag.f32]):
        (p,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        acc = ag.full((1, 1), 0.0)
        for b in ag.range(blocks - 1):
            acc = acc + ag.load(X, (p, b * BN), (1, BN)).sum(axis=1)
        extra = acc + ag.load(X, (p, (blocks - 1) * BN), (1, BN)).sum(axis=1)
        ag.store(OUT, (p, 0), acc)
        ag.store(OUT2, (p, 0), extra)
    found = [d for d in verify.run(beside.trace()).diagnostics if d.code == "reduce.coverage"]
    assert any(d.severity == "error" for d in found), [str(d) for d in found]


def test_a_peeled_block_added_twice_is_refused():
    # acc starts as x + x with x the first block's sum: block 0 counts twice in the row's sum
    @ag.kernel(threads=256)
    def doubled(X: ag.Tensor["M", "N", ag.f32], OUT: ag.Tensor["M", 1, ag.f32]):
        (p,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        x = ag.load(X, (p, 0), (1, BN)).sum(axis=1)
        acc = x + x
        for b in ag.range(1, blocks):
            acc = acc + ag.load(X, (p, b * BN), (1, BN)).sum(axis=1)
        ag.store(OUT, (p, 0), acc)
    found = [d for d in verify.run(doubled.trace()).diagnostics if d.code == "reduce.coverage"]
    assert any(d.severity == "error" for d in found), [str(d) for d in found]
