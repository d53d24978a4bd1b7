"""A row sum folded by static windows (argus/verify/fold.py): `acc = acc + x[:, 0:16] + ... +
x[:, 48:64]` over the column blocks, `acc.sum(axis=1)` after the loop, the form of attention's
deferred row sum (AttentionSchedule.defer_row_sum) on a plain loaded tile. reduce.coverage
asks the windows to be every column of the block once, the partials to be summed over the
windows' axis after the loop, and then the unfolded sum's claims of the folded block (each
column once over the loop, the loop covering the row). A fold whose partials nothing reduces
after the loop keeps its width on purpose: nothing is claimed. Each test builds the kernel
with one switch, so a correct variant and its bug differ in one line."""

from __future__ import annotations

import argus as ag
from argus import verify


def _folded(windows=(0, 16, 32, 48), short: int = 0, after: str = "sum"):
    @ag.kernel(threads=256, name="fold_row_sum")
    def fold_row_sum(X: ag.Tensor["M", "N", ag.f32], OUT: ag.Tensor["M", 1, ag.f32],
                     PART: ag.Tensor["M", 16, ag.f32], ROWS: int = 2, BN: int = 64):
        p0, _ = ag.grid(ag.cdiv(X.shape[0], ROWS), 1)
        o0 = p0 * ROWS
        acc = ag.full((ROWS, 16), 0.0)
        for b in ag.range(ag.cdiv(X.shape[1], BN) - short):
            x = ag.load(X, (o0, b * BN), (ROWS, BN), other=0.0)
            part = x[:, windows[0]:windows[0] + 16]
            for w in windows[1:]:
                part = part + x[:, w:w + 16]
            acc = acc + part
        if after == "sum":
            ag.store(OUT, (o0, 0), acc.sum(axis=1))
        elif after == "max":
            ag.store(OUT, (o0, 0), acc.max(axis=1))
        else:                       # the partials are the result
            ag.store(PART, (o0, 0), acc)
    return fold_row_sum.trace()


def _fold(kernel) -> list:
    return [d for d in verify.check(kernel, include_proven=True) if d.code == "reduce.coverage"]


def test_a_fold_of_every_column_is_proven():
    got = _fold(_folded())
    assert got and all(d.severity == "note" for d in got), [str(d) for d in got]
    said = " ".join(str(d) for d in got)
    for claim in ("every column of the 64-column tile once", "summed over axis 1 after the loop",
                  "each once", "covers the row"):
        assert claim in said, said


def test_a_dropped_window_is_caught():
    (d,) = [d for d in _fold(_folded(windows=(0, 16, 48))) if d.severity == "error"]
    assert "column 32 of the tile folded" in d.message and "in none of them" in d.message, d


def test_a_loop_one_block_short_is_caught_on_the_fold():
    """The windows are right, the loop is not: the unfolded sum's count claim, posed on the
    folded block, reports the columns never reduced."""
    bad = [d for d in _fold(_folded(short=1))
           if d.severity == "error"]
    assert any("covers the row" in str(d) for d in bad), [str(d) for d in bad]


def test_partials_reduced_by_a_max_are_caught():
    (d,) = [d for d in _fold(_folded(after="max")) if d.severity == "error"]
    assert "no sum over axis 1 of them follows the loop" in d.message, d


def test_partials_kept_as_the_result_claim_nothing():
    assert _fold(_folded(after="keep")) == []
