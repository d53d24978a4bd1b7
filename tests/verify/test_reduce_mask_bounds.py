"""reduce.coverage of a masked row (check_reduce._mask_keeps_row): a conjunct of the reduced
tile's mask that is an order comparison of the reduced coordinate with constants alone (no
other coordinate, runtime size, scalar or loaded value) must keep every position of the row
[0, extent) the loop reduces. `col < 2999` over 3000 columns leaves the last unreduced; a tail
mask `col < 3000` is proven. A causal bound (the column against the CTA's row), a runtime
length (a scalar argument) and a selection (`col % 2 == 0`, an equality) are relations the
kernel states: no claim."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify


def _row_sum(mask: str):
    @ag.kernel(threads=128)
    def row_sum(X: ag.Tensor["M", 3000, ag.f32], OUT: ag.Tensor["M", "C", ag.f32], L: ag.i32,
                ROWS: int = 2, BN: int = 1024):
        (p0,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
        o0 = p0 * ROWS
        acc = ag.zeros((ROWS, 1))
        for b in ag.range(3):
            o1 = b * BN
            x = ag.load(X, (o0, o1), (ROWS, BN))
            col = ag.arange(BN)[None, :] + o1
            row = ag.arange(ROWS)[:, None] + o0 + 2000
            if mask == "tail":
                keep = col < 3000
            elif mask == "drops_last":
                keep = col < 2999
            elif mask == "drops_first":
                keep = (col >= 1) & (col < 3000)
            elif mask == "causal":
                keep = (col < 3000) & (col <= row)
            elif mask == "runtime_length":
                keep = col < L
            else:                                   # "even": a selection, on purpose
                keep = (col < 3000) & (col % 2 == 0)
            m = ag.where(keep, x, 0.0)
            acc = acc + m.sum(axis=1)
        ag.store(OUT, (o0, 0), acc)
    return row_sum


@pytest.mark.parametrize("mask", ["tail", "causal", "runtime_length", "even"])
def test_a_mask_that_keeps_the_row_or_states_a_relation_is_clean(mask):
    report = verify.run(_row_sum(mask).trace())
    found = [d for d in report.errors if d.code == "reduce.coverage"]
    assert not found, "\n".join(str(d) for d in found)


def test_the_tail_mask_is_claimed_and_proven():
    ds = verify.check(_row_sum("tail").trace(), include_proven=True)
    assert any("the mask keeps the row" in str(d) for d in ds), \
        "\n".join(str(d) for d in ds if d.code == "reduce.coverage")


@pytest.mark.parametrize("mask,dropped", [("drops_last", 2999), ("drops_first", 0)])
def test_a_constant_bound_inside_the_row_is_refused_at_the_where(mask, dropped):
    report = verify.run(_row_sum(mask).trace())
    found = [d for d in report.errors if d.code == "reduce.coverage"
             and "mask keeps the row" in str(d)]
    assert found, "\n".join(str(d) for d in report.diagnostics)
    wit = found[0].counterexample
    assert "thread" in wit, wit
    assert wit["dim1"] == dropped, wit
    assert str(found[0].loc) == wit["mask"], (found[0].loc, wit)   # located at the where
