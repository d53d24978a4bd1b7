"""fill.identity: masked lanes it does not bound (known holes, found in review 2026-12-02).

The rule's abstract value of a tile's masked lanes is its operands' values at *their* masked
lanes, which assumes every operand is masked at the same lanes. A kernel where that fails and
a fill that is not the identity reaches a reduction is accepted today; the test asserts the
finding the rule should make, so it fails (xfail, strict) until the rule bounds it, and an
XPASS tells whoever fixes it to drop the mark.

where(y > 0, x, -inf).max() with x [.., 1000] and y [.., 2000] loaded at the same 1024-column
block: at x's masked lanes (columns 1000..1023) the condition is y's data, so the lane holds
x's fill 0 or -inf, and 0 may win the max. The condition's value there is unknown, the join of
0 and -inf is TOP, and unknown values are never errors. (Before where-on-data, the where was
read as a mask and -inf taken: accepted too.) The same gap makes sum(x + y) compute 0 + 0 at
those lanes where the kernel adds y's data; whether that is a bug depends on what the author
meant, so it is not asserted here.
"""

import pytest

import argus as ag
from argus import verify

INF = float("inf")


def _mixed(kind: str):
    @ag.kernel(threads=256, name=f"mixed_bounds_{kind}")
    def mixed(X: ag.Tensor[64, 1000, ag.f32], Y: ag.Tensor[64, 2000, ag.f32],
              OUT: ag.Tensor[64, 1, ag.f32]):
        (row,) = ag.grid(64)
        x = ag.load(X, (row, 0), (1, 1024))
        y = ag.load(Y, (row, 0), (1, 1024))
        if kind == "sum":
            ag.store(OUT, (row, 0), (x + y).sum(axis=1))
        else:
            ag.store(OUT, (row, 0), ag.where(y > 0.0, x, -INF).max(axis=1))
    return mixed


@pytest.mark.xfail(strict=True, reason="fill.identity assumes operands share their masked "
                   "lanes (review 2026-12-02, module docstring)")
def test_a_data_where_between_differently_masked_loads_is_refused():
    kind = "where_max"
    report = verify.run(_mixed(kind).trace())
    assert any(d.code == "fill.identity" and d.severity == "error"
               for d in report.diagnostics), [str(d) for d in report.errors]
