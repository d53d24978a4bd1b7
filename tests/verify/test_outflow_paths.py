"""fill.identity through outflow.py: a masked column of a column max (on the axis the max
keeps) whose result DOES reach an in-bounds output element, by paths other than the plain
store. Review 2026-12-02 tried each as a counterexample to the relaxed claim ('in bounds, or
stored nowhere in bounds'); all are refused, and these tests keep them so: each fails if
outflow.py follows its op too loosely (a slice's shift with the wrong sign, a reduction or
reverse scan along the kept axis taken as index-preserving, a where's condition dropped, a
second store site or a carried variable whose store moves left unexplored).

X is [64, 1000] in [16, 128] blocks: block 7's columns 1000..1023 (local 104..127) hold the
fill 0, and 0 is not the identity of max."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

INF = float("inf")
ROWS, BN = 16, 128


def _col_max(path: str):
    def col_max(X: ag.Tensor[64, 1000, ag.f32], OUT: ag.Tensor[1, 1000, ag.f32],
                OUT2: ag.Tensor[1, 8, ag.f32]):
        (pid,) = ag.grid(ag.cdiv(1000, BN))
        acc = ag.full((1, BN), -INF)
        for b in ag.range(4):
            x = ag.load(X, (b * ROWS, pid * BN), (ROWS, BN))
            acc = ag.maximum(acc, x.max(axis=0))
        if path == "clean":
            ag.store(OUT, (0, pid * BN), acc)
        elif path == "slice_shift":
            # local columns 64..127 stored at pid * BN + 0..63: 1000..1023 land on 960..983
            ag.store(OUT, (0, pid * BN), acc[:, 64:128])
        elif path == "second_site":
            ag.store(OUT, (0, pid * BN), acc)
            ag.store(OUT, (0, pid * BN - 64), acc)
        elif path == "row_reduce":
            ag.store(OUT2, (0, pid), acc.max(axis=1))
        elif path == "scan_reverse":
            y, _ = ag.scan(acc, "max", 1, reverse=True)
            ag.store(OUT, (0, pid * BN), y)
        elif path == "where_condition":
            m = acc.max(axis=1)
            ag.store(OUT, (0, pid * BN), ag.where(m > 0.0, acc * 0.0, 1.0))
        elif path == "carried_moving_store":
            prev = ag.full((1, BN), 0.0)
            for j in ag.range(2):
                ag.store(OUT, (0, pid * BN - j * 64), prev)
                prev = acc
    return ag.kernel(col_max, threads=256, name=f"outflow_{path}")


def _fills(kernel, lower: bool):
    report = verify.run(lower_only(kernel) if lower else kernel.trace())
    return [d for d in report.diagnostics if d.code == "fill.identity"]


def test_the_plain_store_of_masked_columns_verifies():
    assert _fills(_col_max("clean"), False) == []


@pytest.mark.parametrize("lower", [False, True], ids=["traced", "ring"])
@pytest.mark.parametrize("path", ["slice_shift", "second_site", "row_reduce", "scan_reverse",
                                  "where_condition", "carried_moving_store"])
def test_a_masked_column_reaching_an_output_is_refused(path, lower):
    (d,) = _fills(_col_max(path), lower)
    assert d.severity == "error"
    assert d.counterexample["coordinates"]["dim1"] >= 1000
