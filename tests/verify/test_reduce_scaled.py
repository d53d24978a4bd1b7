"""reduce.coverage through a scaled row max: a first block peeled before the loop whose max is
scaled before it joins the running max (`m = max(x0) * c`, then `m = maximum(m, max(x_j) *
c)` for j = 1 ..; FA3's folded softmax scale, argus/kernels/attention.py fold_scale) belongs to
the row when c > 0 is proven (a positive constant, or a parameter under ag.require(c > 0)):
max(s) * c is then max(s * c) (check_reduce._order_preserved). A negative c makes it the
block's min, and a c of unknown sign may: the peeled block is then not in the row, and the loop
from 1 does not cover it (an error, as before the rule). A positive scale does not hide a loop
that stops a block short, nor a peeled block the loop reduces again; a sum scaled by c weighs
every element c times and is not paired either (as `x + x` is refused,
test_reduce_peeled)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

BN = 1024


def _scaled(scale: str, loop: str = "rest", fn: str = "max", where: str = "head"):
    """scale: "param>0" (a parameter under ag.require(c > 0)), "param" (no precondition),
    "param<0" (required negative), "0.5" / "-0.5" / "2.0 div" (a constant; div: x / 2.0).
    loop: "rest" (1 .. blocks), "short" (1 .. blocks - 1), "all" (0 .. blocks: block 0
    reduced twice)."""
    @ag.kernel(threads=256)
    def peel(X: ag.Tensor["M", "N", ag.f32], OUT: ag.Tensor["M", 1, ag.f32], c: ag.f32):
        if scale == "param>0":
            ag.require(ag.sym(c) > 0, "the scale is folded into the row max")
        elif scale == "param<0":
            ag.require(ag.sym(c) < 0, "a negative scale")
        (p,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        fill = float("-inf") if fn == "max" else 0.0

        def part(b):
            x = ag.load(X, (p, b * BN), (1, BN), other=fill)
            r = x.max(axis=1) if fn == "max" else x.sum(axis=1)
            if scale.startswith("param"):
                return r * c
            if scale.endswith("div"):
                return r / float(scale.split()[0])
            return float(scale) * r

        def combine(a, b):
            return ag.maximum(a, b) if fn == "max" else a + b
        if where == "head":
            m = part(0)
            lo = 0 if loop == "all" else 1
            for b in ag.range(lo, blocks - 1 if loop == "short" else blocks):
                m = combine(m, part(b))
        else:                                  # the last block after the loop
            m = ag.full((1, 1), fill)
            for b in ag.range(blocks - 1):
                m = combine(m, part(b))
            m = combine(m, part(blocks - 1))
        ag.store(OUT, (p, 0), m)
    return peel


def _coverage(kernel, lowered: bool):
    report = verify.run(lower_only(kernel) if lowered else kernel.trace())
    return [d for d in report.diagnostics if d.code == "reduce.coverage"]


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])
@pytest.mark.parametrize("scale,where", [("param>0", "head"), ("0.5", "head"),
                                         ("2.0 div", "head"), ("param>0", "tail")])
def test_a_positively_scaled_peeled_max_is_in_the_row(scale, where, lowered):
    assert _coverage(_scaled(scale, where=where), lowered) == []


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])
@pytest.mark.parametrize("scale", ["param", "param<0", "-0.5"])
def test_a_max_scaled_by_a_negative_or_unknown_sign_is_not(scale, lowered):
    # max(x0) * c with c < 0 is min(x0 * c): the row's max is not taken over block 0, and the
    # loop from 1 leaves its columns unreduced
    found = _coverage(_scaled(scale), lowered)
    short = [d for d in found if d.severity == "error" and "covers the row" in d.message]
    assert short, [str(d) for d in found]
    wit = short[0].counterexample
    assert wit["domain"] < wit["extent"], wit


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])
def test_a_scaled_max_over_a_partial_row_is_refused(lowered):
    found = _coverage(_scaled("param>0", loop="short"), lowered)
    short = [d for d in found if d.severity == "error" and "covers the row" in d.message]
    assert short, [str(d) for d in found]
    wit = short[0].counterexample
    assert wit["domain"] < wit["extent"], wit


def test_a_scaled_peeled_max_the_loop_reduces_again_is_refused():
    found = _coverage(_scaled("param>0", loop="all"), False)
    twice = [d for d in found if d.severity == "error" and "reduced twice" in d.message]
    assert twice, [str(d) for d in found]
    assert twice[0].counterexample["peeled_at"], twice[0].counterexample


def test_a_scaled_peeled_sum_is_not_paired():
    # sum(x0) * 0.5 + sum over the rest: block 0's elements weigh half, not a row sum of x
    found = _coverage(_scaled("0.5", fn="sum"), False)
    assert any(d.severity == "error" and "covers the row" in d.message for d in found), \
        [str(d) for d in found]
