"""reduce.coverage of an integer dim that repeats while another position of the element moves:
a walk over a flattened x[M, 64] (the row moves), and a walk over pages a block table picks
(the page moves): the reduced position is (page, in-page row). Each read's page is an opaque
function of the table entry it came from (`loaded(b, j // per_page)`), so "each once" is
claimed over (page, in-page row) with the assumption that distinct entries hold distinct pages
(a block table's contract; docs/verify.md, "Integer dims in reduce.coverage: the element, not
the dim"). The clean walk is proven (f16bc98 read the
repeating row as reduced twice: 26 false errors on the paged decode attention kernels); a
walk that reads one entry, or one in-page block, in two iterations is refused."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

PAGE = 64


def _paged_sum(form: str, bn: int):
    per_page = PAGE // bn

    @ag.kernel(threads=128)
    def paged_sum(K: ag.Tensor["PAGES", PAGE, ag.f32], BT: ag.Tensor["B", "MP", ag.i32],
                  OUT: ag.Tensor["B", 1, ag.f32]):
        (b,) = ag.grid(BT.shape[0])
        acc = ag.full((1, 1), 0.0)
        for j in ag.range(BT.shape[1] * per_page):
            entry = 0 if form == "same_entry" else j // per_page
            page = ag.load_scalar(BT, (b, entry))
            # the swapped walk takes the in-page block from the entry index: twice the same
            off = ((j // per_page if form == "same_block" else j) % per_page) * bn
            acc = acc + ag.load(K, (page, off), (1, bn)).sum(axis=1)
        ag.store(OUT, (b, 0), acc)
    return paged_sum


def _coverage(form: str, bn: int, lowered: bool):
    kernel = _paged_sum(form, bn)
    report = verify.run(lower_only(kernel) if lowered else kernel.trace())
    return report, [d for d in report.diagnostics if d.code == "reduce.coverage"]


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "lowered"])
@pytest.mark.parametrize("bn", [PAGE // 2, PAGE // 4], ids=["half_page", "quarter_page"])
def test_a_page_walk_reduces_each_row_once(bn, lowered):
    report, found = _coverage("clean", bn, lowered)
    assert found == [], [str(d) for d in found]
    # the claim was posed, and proven (not skipped)
    once = [f for f in report.proven if f.code == "reduce.coverage" and "each once" in f.subject]
    assert once, [str(f) for f in report.proven if f.code == "reduce.coverage"]


@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "lowered"])
@pytest.mark.parametrize("form,bn", [("same_entry", PAGE // 2), ("same_entry", PAGE // 4),
                                     ("same_block", PAGE // 2), ("same_block", PAGE // 4)])
def test_a_page_walk_that_rereads_a_block_is_refused(form, bn, lowered):
    """same_entry: every iteration reads table entry (b, 0), so the page does not move and the
    in-page row alone repeats; same_block: the in-page block taken from the entry index
    (j // per_page) rather than j, so two iterations on one entry read one block: the error
    names the entry, read both times."""
    _, found = _coverage(form, bn, lowered)
    twice = [d for d in found if d.severity == "error" and "reduced twice" in d.message]
    assert twice, [str(d) for d in found]
    wit = twice[0].counterexample
    assert wit["first"]["iteration"] != wit["second"]["iteration"]
    assert wit["dim1"] < PAGE
    if form == "same_block":
        ((_fn, e1, e2),) = wit["table_entries"]
        assert e1 == e2 and "entry" in twice[0].message, twice[0].message


def _flat_sum(form: str, bn: int = PAGE // 2):
    per_row = PAGE // bn

    @ag.kernel(threads=128)
    def flat_sum(X: ag.Tensor["M", PAGE, ag.f32], OUT: ag.Tensor[1, 1, ag.f32]):
        ag.grid(1)
        acc = ag.full((1, 1), 0.0)
        for j in ag.range(X.shape[0] * per_row):
            row = j // per_row
            off = ((j // per_row if form == "same_block" else j) % per_row) * bn
            acc = acc + ag.load(X, (row, off), (1, bn)).sum(axis=1)
        ag.store(OUT, (0, 0), acc)
    return flat_sum


@pytest.mark.parametrize("form", ["clean", "same_block"])
def test_a_flattened_walk_pairs_the_row_with_the_column(form):
    """x[M, 64] summed (1, 32) block by block, row j // 2 and column (j % 2) * 32: the column
    dim repeats on every row, the pair (m, dim1) does not; a walk that reads column 0 twice
    per row is refused at the row it repeats on."""
    report = verify.run(lower_only(_flat_sum(form)))
    found = [d for d in report.diagnostics if d.code == "reduce.coverage"]
    if form == "clean":
        assert found == [], [str(d) for d in found]
        return
    twice = [d for d in found if d.severity == "error" and "reduced twice" in d.message]
    assert twice, [str(d) for d in found]
    wit = twice[0].counterexample
    assert "m" in wit and "at m = " in twice[0].message, twice[0].message
