"""fill.identity: a fill turned into another value (`x - m`) is asked about at the lanes of the
values it comes from, in their state at the reduction.

Compose's online softmax / logsumexp over a channel axis (KernelBench L2/6, 24, 58, 91, 92):
a (ROWS, BN) block of a [B, C, 900] tensor, columns 900.. masked with fill 0, summed over the
rows (axis 0, never masked) as exp(x - mnew), mnew the running column max. Lowered, x is a
block lower/prefetch.py loads ahead and carries in a ring, so the obligation cannot name the
loads in the reduction's loop body (the `own` case); it asked the reduced tile's `defined`
instead, which also asks mnew's, a loop-carried variable the model summarizes, known at no
element: a masked lane 'at column 0' that the store writes (a false alarm that rejected the
five tasks' prebuild). The question is now asked of the values holding masked lanes (x, not
mnew: the running max holds none), read in their state at the reduction
(ReduceSite.operands). A sum over the masked axis (columns) of exp(x - max) with fill 0 is
still refused: the padding adds exp(-max) per masked column to a row stored in bounds."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

INF = float("inf")


def _fills(kernel, lower: bool):
    report = verify.run(lower_only(kernel) if lower else kernel.trace())
    return [d for d in report.diagnostics if d.code == "fill.identity"]


def _channel_softmax():
    """Softmax over the channel axis (24 = 12 blocks of 2 rows), the composed L2 kernels'
    shape: the columns past 900 are masked, and only ever reach columns the store masks."""
    @ag.kernel(threads=256, name="channel_softmax")
    def channel_softmax(L0: ag.Tensor[4, 24, 900, ag.f32], OUT: ag.Tensor[4, 24, 900, ag.f32],
                        ROWS: int = 2, BN: int = 1024):
        p0, p1 = ag.grid(4, 1)
        o2 = p1 * BN
        acc1 = ag.full((1, BN), -INF)
        acc2 = ag.full((1, BN), 0.0)
        for b in ag.range(12):
            x = ag.load(L0, (p0, b * ROWS, o2), (ROWS, BN))
            mnew = ag.maximum(acc1, x.max(axis=0))
            ex = ag.exp(x - mnew)
            ex = ex.sum(axis=0)
            acc2 = acc2 * ag.exp(acc1 - mnew) + ex
            acc1 = mnew
        for b in ag.range(12):
            x = ag.load(L0, (p0, b * ROWS, o2), (ROWS, BN))
            ag.store(OUT, (p0, b * ROWS, o2), ag.exp(x - acc1) / acc2)
    return channel_softmax


def _column_softmax(fill: float):
    """Online softmax over the columns (the masked axis: 900 = 3.5 blocks of 256), the running
    max from a -inf-filled load and exp(x - mnew) summed from a load filled with `fill`: 0.0
    is the bug (exp(0 - mnew) per masked column joins its row's sum), -inf is right."""
    @ag.kernel(threads=256, name="column_softmax")
    def column_softmax(X: ag.Tensor[64, 900, ag.f32], OUT: ag.Tensor[64, 900, ag.f32],
                       ROWS: int = 16, BN: int = 256):
        (p,) = ag.grid(4)
        acc1 = ag.full((ROWS, 1), -INF)
        acc2 = ag.full((ROWS, 1), 0.0)
        for j in ag.range(4):
            xm = ag.load(X, (p * ROWS, j * BN), (ROWS, BN), other=-INF)
            mnew = ag.maximum(acc1, xm.max(axis=1))
            x = ag.load(X, (p * ROWS, j * BN), (ROWS, BN), other=fill)
            ex = ag.exp(x - mnew)
            ex = ex.sum(axis=1)   # BUG when fill = 0.0
            acc2 = acc2 * ag.exp(acc1 - mnew) + ex
            acc1 = mnew
        for j in ag.range(4):
            x = ag.load(X, (p * ROWS, j * BN), (ROWS, BN), other=-INF)
            ag.store(OUT, (p * ROWS, j * BN), ag.exp(x - acc1) / acc2)
    return column_softmax


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
def test_a_channel_softmax_with_masked_columns_verifies(lower):
    # ring: refused before (element (0, 0) 'a masked lane', reaching OUT[0, 0, 0])
    assert _fills(_channel_softmax(), lower) == []


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
def test_a_zero_fill_summed_over_the_masked_columns_is_refused(lower):
    (d,) = _fills(_column_softmax(0.0), lower)
    assert d.severity == "error" and "sum over axis 1" in d.message
    assert "BUG" in open(d.loc.file).read().splitlines()[d.loc.line - 1]
    cex = d.counterexample
    # the lane named is a column past the end, in a row whose result is stored in bounds
    col = cex["coordinates"]["dim1"]
    assert col >= 900 and cex["element"][1] == col - 3 * 256
    assert cex["output"].startswith("OUT[")


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
def test_a_minus_inf_fill_summed_over_the_masked_columns_verifies(lower):
    assert _fills(_column_softmax(-INF), lower) == []
