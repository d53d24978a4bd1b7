"""fill.identity and `where`: a condition on indices is a mask, a condition on data is not.

`where(cols < N, x, c)` (its condition computed from an arange) is how kernels mask: the check
takes c as what the masked elements hold. A condition on data values (KernelBench L1/98's
KL divergence: `where(t > 0, t * log(t), 0)`) is no mask: in bounds its false branch is a value
like any other, and at a masked lane the condition is evaluated on the loads' fills (0 > 0 is
false), so the lane's value still comes only from the loads' masked lanes, bounded like them
(proven when the blocks divide the row). Read as a mask, it made every KL kernel a verdict
(the masked lanes "not bounded"), a false alarm at 2048 columns in blocks of 1024, and it
accepted `t >= 0`, which picks t * log(t) = nan at the fill (tests/mutations: kl_div/*).
A condition mixing indices and data stays a mask (the stricter reading)."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

INF = float("inf")


def _fills(kernel, lower: bool):
    report = verify.run(lower_only(kernel) if lower else kernel.trace())
    return [d for d in report.diagnostics if d.code == "fill.identity"]


def _kl(n: int, cond: str = "gt"):
    @ag.kernel(threads=256)
    def kl(P: ag.Tensor[64, n, ag.f32], T: ag.Tensor[64, n, ag.f32],
           OUT: ag.Tensor[64, 1, ag.f32]):
        (row,) = ag.grid(64)
        acc = ag.full((1, 1), 0.0)
        for j in ag.range(ag.cdiv(n, 1024)):
            t = ag.load(T, (row, j * 1024), (1, 1024))
            p = ag.load(P, (row, j * 1024), (1, 1024))    # fill 0: log(0) * 0 = nan
            pos = t > 0.0 if cond == "gt" else t >= 0.0
            ent = ag.where(pos, t * ag.log(ag.where(pos, t, 1.0)), 0.0)
            acc = acc + (ent - t * ag.log(p)).sum(axis=1)
        ag.store(OUT, (row, 0), acc)
    return kl


@pytest.mark.parametrize("lower", [True, False], ids=["ring", "traced"])
def test_a_data_where_in_blocks_that_divide_the_row_verifies(lower):
    # L1/98's composed kernel: the nan of t * log(p) at a masked lane comes from the loads
    # alone (the data where does not make it unbounded), and no lane is masked
    assert _fills(_kl(2048), lower) == []


@pytest.mark.parametrize("cond", ["gt", "ge"])
def test_a_data_where_in_a_partial_block_is_refused_at_the_lane(cond):
    (d,) = _fills(_kl(4000, cond), True)
    assert d.severity == "error" and "nan" in d.message
    assert d.counterexample["coordinates"]["dim1"] >= 4000


def test_the_fill_decides_the_branch_at_a_masked_lane():
    """where(x > 0, x, 0) before a max, x filled with -inf: -inf > 0 is false, the lane holds
    0, not the identity; proven unreachable when the blocks divide the row, refused when the
    last block is partial (with the element past the end)."""
    def relu_max(n):
        @ag.kernel(threads=256)
        def k(X: ag.Tensor[64, n, ag.f32], OUT: ag.Tensor[64, 1, ag.f32]):
            (row,) = ag.grid(64)
            acc = ag.full((1, 1), -INF)
            for j in ag.range(ag.cdiv(n, 1024)):
                x = ag.load(X, (row, j * 1024), (1, 1024), other=-INF)
                acc = ag.maximum(acc, ag.where(x > 0.0, x, 0.0).max(axis=1))
            ag.store(OUT, (row, 0), acc)
        return k
    assert _fills(relu_max(2048), False) == []
    (d,) = _fills(relu_max(3000), False)
    assert d.counterexample["fill"] == 0.0 and d.counterexample["coordinates"]["dim1"] >= 3000


def test_a_condition_mixing_indices_and_data_stays_a_mask():
    """(cols < N) & (x > 0) with a 0 before a max: read as a mask, its 0 is what every
    masked-out element holds, in bounds or not: refused as before, even though no lane is past
    the end (2048 columns in blocks of 1024)."""
    @ag.kernel(threads=256)
    def mixed(X: ag.Tensor[64, 2048, ag.f32], OUT: ag.Tensor[64, 1, ag.f32]):
        (row,) = ag.grid(64)
        acc = ag.full((1, 1), -INF)
        for j in ag.range(2):
            x = ag.load(X, (row, j * 1024), (1, 1024), other=-INF)
            cols = ag.arange(1024)[None, :] + j * 1024
            acc = ag.maximum(acc, ag.where((cols < 2048) & (x > 0.0), x, 0.0).max(axis=1))
        ag.store(OUT, (row, 0), acc)
    (d,) = _fills(mixed, False)
    assert d.severity == "error" and "-inf" in d.message
