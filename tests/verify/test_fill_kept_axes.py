"""fill.identity: a masked element matters only where its reduction result is stored in bounds.

A column max over the rows of a block whose last columns are past the tensor's end (compose's
max over a non-innermost axis, KernelBench L1/49, 51-53, L2/6, 24, 25, 32, 58, 79, 91, 92)
reduces masked elements, but on the axis the max keeps: their column's result is past the end
too and its store is masked. The rule proves that (argus/verify/outflow.py follows the result
to the stores) instead of refusing the default fill 0. Masked rows (the reduced axis) and an
output that stores the masked columns are still refused (tests/mutations: col_max/*); so is a
result carried to a store in a later iteration of the loop, where that iteration's
destination is in bounds."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.verify.outflow import Uses
from tests.mutations import kernels as K

INF = float("inf")


def _fills(kernel, lower: bool):
    report = verify.run(lower_only(kernel) if lower else kernel.trace())
    return [d for d in report.diagnostics if d.code == "fill.identity"]


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
def test_masked_columns_on_a_kept_axis_verify(lower):
    assert _fills(K.make_col_max(), lower) == []


def test_the_column_max_reaches_its_store_at_the_same_column():
    kernel = K.make_col_max().trace()
    (red,) = [op for op in kernel.walk() if isinstance(op, O.Reduce)]
    (store,) = [op for op in kernel.walk() if isinstance(op, O.Store)]
    # through the running max (a variable: crossed) to the store, column for column; the
    # reduced axis (rows) is any index of the stored [1, BN] row
    assert Uses(kernel).stores_reached(red) == [(store, (None, (1, 0)), True)]


def _carried(reverse: bool):
    """Each iteration stores the running value `acc`, the previous iteration's column max (a
    software-pipelined epilogue). Forward: block j is loaded and block j - 1's max stored at
    block j - 1, right. Reverse: blocks 8, 7, ..., 0 are loaded and the store writes at the
    block loaded in this iteration, one block off from the max it holds (the bug). Block 8
    (columns 1024..1151) is wholly past the end, block 7 partly (1000..1023)."""
    @ag.kernel(threads=256, name="carried")
    def carried(X: ag.Tensor[16, 1000, ag.f32], OUT: ag.Tensor[1, 1000, ag.f32],
                BN: int = 128):
        (p,) = ag.grid(1)
        acc = ag.full((1, BN), -INF)
        for j in ag.range(9):
            if reverse:
                ag.store(OUT, (0, (8 - j) * BN), acc)
                x = ag.load(X, (0, (8 - j) * BN), (16, BN))
            else:
                ag.store(OUT, (0, (j - 1) * BN), acc)
                x = ag.load(X, (0, j * BN), (16, BN))
            acc = x.max(axis=0)
    return carried


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
def test_a_result_stored_one_iteration_later_at_its_own_columns_verifies(lower):
    # block 7's masked columns (1000..1023) are stored in iteration 8 at 1000..1023: masked;
    # block 8's result is never stored (the loop ends)
    assert _fills(_carried(False), lower) == []


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
def test_a_result_stored_in_a_later_iteration_in_bounds_is_refused(lower):
    # iteration 0 reduces block 8, wholly past the end; iteration 1 stores that max (0, the
    # fill) at block 7, whose first 104 columns are in bounds. In the reduction's own
    # iteration the store's block (8) is past the end, and so is block 7's masked tail in
    # iteration 1: the store's iteration must not be taken as the reduction's
    (d,) = _fills(_carried(True), lower)
    assert d.severity == "error"
    assert list(d.counterexample["iteration"].values()) == [0]
    assert d.counterexample["coordinates"]["dim1"] >= 1024
    assert d.counterexample["output"] == "OUT[0, 896]"
