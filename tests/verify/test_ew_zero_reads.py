"""ew.broadcast of an integer dim read at 0 (check_tiles._zero_reads): an operand read at
position 0 of a dim wider than 1 (y[0] of y[4, 64, 1024]) met in one elementwise op by an
operand whose position there moves over a dim of the same extent (x[c0]) combines one batch
with every batch: torch broadcasts only extent-1 dims. Caught with or without an extent-1
tensor in the kernel (w[1, 64, 1], which transfer/tiles._broadcast_kept reads as the
broadcast), naming the thread and the zero read's load. Clean: both read at c0, and a table
[4, 1024] read at row 0 beside an x[8, 1024] whose row moves (another dim of another extent
that shares the position's name)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify


def _batch_add(form: str):
    @ag.kernel(threads=256)
    def batch_add(X: ag.Tensor[4, 64, 1024, ag.f32], Y: ag.Tensor[4, 64, 1024, ag.f32],
                  W: ag.Tensor[1, 64, 1, ag.f32], OUT: ag.Tensor[4, 64, 1024, ag.f32],
                  ROWS: int = 2, BN: int = 1024):
        (p0,) = ag.grid(128)
        o1 = (p0 % 32) * ROWS
        c0 = p0 // 32
        x = ag.load(X, (c0, o1, 0), (ROWS, BN))
        y = ag.load(Y, (0 if form.endswith("zero") else c0, o1, 0), (ROWS, BN))
        if form.startswith("scaled"):
            v = x * ag.load(W, (0, o1, 0), (ROWS, 1)) + y
        else:
            v = y + x
        ag.store(OUT, (c0, o1, 0), v)
    return batch_add


def _table_row():
    """x[:4] + t[0]: rows of 1-d tiles, so dim0 is a position no tile axis covers (a (1, BN)
    tile covers it and no zero read is looked for), stored to OUT[4, 1024], a destination with
    T's extent at dim0: only the moving operand's own dim (X's extent 8, not 4) keeps it
    clean (_zero_reads' same-dim test)."""
    @ag.kernel(threads=256)
    def table_row(X: ag.Tensor[8, 1024, ag.f32], T: ag.Tensor[4, 1024, ag.f32],
                  OUT: ag.Tensor[4, 1024, ag.f32], BN: int = 1024):
        (p0,) = ag.grid(4)
        x = ag.load(X, (p0, 0), (BN,))
        t = ag.load(T, (0, 0), (BN,))
        ag.store(OUT, (p0, 0), x + t)
    return table_row


def _anchor_row():
    """x - x[0] of x[4, 64, 1024]: the first batch subtracted from every batch (valid torch,
    x[0] broadcast along dim0), the zero read of the moving operand's own tensor: not claimed
    (the review of h228's claim found it refused)."""
    @ag.kernel(threads=256)
    def anchor_row(X: ag.Tensor[4, 64, 1024, ag.f32], OUT: ag.Tensor[4, 64, 1024, ag.f32],
                   ROWS: int = 2, BN: int = 1024):
        (p0,) = ag.grid(128)
        o1 = (p0 % 32) * ROWS
        c0 = p0 // 32
        x = ag.load(X, (c0, o1, 0), (ROWS, BN))
        first = ag.load(X, (0, o1, 0), (ROWS, BN))
        ag.store(OUT, (c0, o1, 0), x - first)
    return anchor_row


@pytest.mark.parametrize("form", ["plain_zero", "scaled_zero"])
def test_a_wide_dim_read_at_zero_against_a_moving_one_is_refused(form):
    report = verify.run(_batch_add(form).trace())
    found = [d for d in report.errors if d.code == "ew.broadcast"]
    assert found, "\n".join(str(d) for d in report.diagnostics)
    wit = found[0].counterexample
    assert "thread" in wit, wit
    assert wit["dim0"] != 0 and "zero_read" in wit, wit


@pytest.mark.parametrize("kernel", [lambda: _batch_add("plain"), lambda: _batch_add("scaled"),
                                    _table_row, _anchor_row],
                         ids=["plain", "scaled", "table_row", "anchor_row"])
def test_reads_at_the_same_dim_or_of_another_dim_are_clean(kernel):
    report = verify.run(kernel().trace())
    found = [d for d in report.errors if d.code == "ew.broadcast"]
    assert not found, "\n".join(str(d) for d in found)
