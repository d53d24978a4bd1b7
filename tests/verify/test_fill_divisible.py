"""fill.identity and tiles that never straddle the tensor's end.

A row reduction whose blocks divide the row (8192 columns in blocks of 1024, KernelBench L1/99's
composed kernel) has no masked element, yet fill.identity refuses it (a known false alarm: the
check does not ask whether a load can be masked at all). Treating such tiles as unmasked is not
enough: a loop that runs one whole block past the end, with a 0 fill under a max, must still be
refused, and no other check catches it; the fix needs the loads' offset ranges (and, for the
register ring of lower/prefetch.py, that the blocks it loads past the end are never used)."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only


def _row_sum_of_shifted_squares(n: int):
    @ag.kernel(threads=256)
    def shifted(X: ag.Tensor[64, n, ag.f32], OUT: ag.Tensor[64, 1, ag.f32], BN: int = 1024):
        (p,) = ag.grid(32)
        acc = ag.full((2, 1), 0.0)
        for b in ag.range(ag.cdiv(n, BN)):
            x = ag.load(X, (p * 2, b * BN), (2, BN))
            v = x + 1e-6
            acc = acc + (v * v).sum(axis=1)
        ag.store(OUT, (p * 2, 0), acc)
    return shifted


def _fill_findings(n: int):
    report = verify.run(lower_only(_row_sum_of_shifted_squares(n)))
    return [d for d in report.diagnostics if d.code == "fill.identity"]


@pytest.mark.xfail(strict=True, reason="known false alarm: fill.identity does not bound the "
                                        "loads' offsets (L1/99 is refused with verification on)")
def test_blocks_that_divide_the_row_have_no_masked_elements():
    assert _fill_findings(8192) == []


def test_a_loop_one_block_past_the_end_is_refused():
    @ag.kernel(threads=256)
    def past(X: ag.Tensor[64, 8192, ag.f32], OUT: ag.Tensor[64, 1, ag.f32], BN: int = 1024):
        (p,) = ag.grid(32)
        acc = ag.full((2, 1), float("-inf"))
        for b in ag.range(ag.cdiv(8192, BN) + 1):       # one whole block past the end
            x = ag.load(X, (p * 2, b * BN), (2, BN))     # its zeros win a max of negatives
            acc = ag.maximum(acc, x.max(axis=1))
        ag.store(OUT, (p * 2, 0), acc)

    report = verify.run(lower_only(past))
    assert [d for d in report.diagnostics if d.code == "fill.identity" and d.severity == "error"]


@pytest.mark.parametrize("n", [8000, 8192 + 512])
def test_a_partial_last_block_is_still_refused(n):
    found = _fill_findings(n)
    assert found and all(d.severity == "error" for d in found)
    assert "1e-12" in str(found[0])
