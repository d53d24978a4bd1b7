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


def _online(form: str):
    """The online softmax's row statistics with the last block after the loop (the attention
    forward's intra-warpgroup overlap: `range(1, blocks)` runs the softmax of block j - 1,
    the last block's after it): the running max is read again by the rescale exp2(m - m_new)
    and the running sum rescaled, l * alpha + p.sum(), in the loop and after it. Forms:
    "tail" the correct one; "tail_twice" the tail reduces block blocks - 2 again; "short" the
    loop stops a block early (block blocks - 2 is never reduced); "stale_l" / "stale_m" the
    statistic stored is the loop's, without the tail (which is computed beside it);
    "scaled" the tail adds to l * 2, a product the loop does not take."""
    @ag.kernel(threads=256)
    def online(X: ag.Tensor["M", "N", ag.f32], L: ag.Tensor["M", 1, ag.f32],
               MX: ag.Tensor["M", 1, ag.f32]):
        (p,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        neg_inf = float("-inf")

        def step(b, m, l_):
            x = ag.load(X, (p, b * BN), (1, BN), other=neg_inf)
            m_new = ag.maximum(m, x.max(axis=1))
            m_use = ag.where(m_new == neg_inf, 0.0, m_new)
            alpha = ag.exp2(m - m_use)
            return m_new, l_ * alpha + ag.exp2(x - m_use).sum(axis=1)
        m, l_ = ag.full((1, 1), neg_inf), ag.full((1, 1), 0.0)
        for b in ag.range(blocks - 2 if form == "short" else blocks - 1):
            m, l_ = step(b, m, l_)
        if form == "scaled":
            x = ag.load(X, (p, (blocks - 1) * BN), (1, BN), other=neg_inf)
            m_t = ag.maximum(m, x.max(axis=1))
            m_u = ag.where(m_t == neg_inf, 0.0, m_t)
            l_t = l_ * 2.0 + ag.exp2(x - m_u).sum(axis=1)
        else:
            m_t, l_t = step(blocks - 2 if form == "tail_twice" else blocks - 1, m, l_)
        ag.store(L, (p, 0), l_ if form == "stale_l" else l_t)
        ag.store(MX, (p, 0), m if form == "stale_m" else m_t)
    return online


def _online_coverage(form: str, lowered: bool) -> list:
    kernel = _online(form)
    report = verify.run(lower_only(kernel) if lowered else kernel.trace())
    return [d for d in report.diagnostics if d.code == "reduce.coverage"]


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])
def test_the_online_softmax_tail_after_the_loop_is_in_the_row(lowered):
    # before: the old max read again by the rescale (and the new one twice, m_new == -inf)
    # and the sum's tail added to l * alpha, not to l, left the tail unpaired: "the loop
    # reduces 1024 values of n but the tensor has 1025" for both (the attention forward's
    # overlap at head dim 128: "128 values of sk but the tensor has 129")
    found = _online_coverage("tail", lowered)
    assert [d for d in found if d.severity != "note"] == [], [str(d) for d in found]


@pytest.mark.parametrize("form,fns,words", [
    ("tail_twice", {"max", "sum"}, "reduced twice"),
    ("short", {"max", "sum"}, "never reduced"),
    ("stale_l", {"sum"}, "never reduced"),
    ("stale_m", {"max"}, "never reduced"),
    ("scaled", {"sum"}, "never reduced"),
])
def test_a_wrong_online_softmax_tail_is_refused(form, fns, words):
    found = _online_coverage(form, False)
    errors = [d for d in found if d.severity == "error"]
    got = {fn for fn in ("max", "sum") if any(f"{fn} over axis 1" in d.message and words in
                                                  d.message for d in errors)}
    assert got >= fns, [str(d) for d in found]
