"""fill.identity and tiles that can never straddle the tensor's end: a row reduction whose
blocks divide the row (8192 columns in blocks of 1024, KernelBench L1/99's composed kernel) has
no masked element, whatever the fill does to it; the same kernel over 8000 columns is still
refused (its last block is partial and its masked zeros become 1e-12 before the sum)."""

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


def test_blocks_that_divide_the_row_have_no_masked_elements():
    assert _fill_findings(8192) == []


@pytest.mark.parametrize("n", [8000, 8192 + 512])
def test_a_partial_last_block_is_still_refused(n):
    found = _fill_findings(n)
    assert found and all(d.severity == "error" for d in found)
    assert "1e-12" in str(found[0])
