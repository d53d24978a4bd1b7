"""lower/prefetch.py: a global tile load in a runtime loop is issued one iteration ahead
(var / assign in the IR). The rewrite keeps the numbers (the interpreter runs the lowered
kernel against float64), the verifier proves the prefetched kernel clean and catches a
prefetch of the wrong block, and the pass leaves alone what it may not move: a load of a
tensor the loop stores to, a load whose offset is a loop-carried scalar, a load in a warp role.
"""

import dataclasses

import numpy as np
import pytest

import argus as ag
from argus import analysis, lower
from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.types import TileType
from argus.lower import prefetch
from argus.runtime import interp
from argus.verify import check


def _lowered(fn, **consts):
    return lower.run(analysis.infer_layouts(fn.trace(**consts)))


def _loops(kernel):
    return [op for op in kernel.walk() if isinstance(op, O.For)]


@pytest.fixture
def online(examples):
    return examples("softmax_online")


def test_both_passes_of_the_online_softmax_load_one_block_ahead(online):
    k = _lowered(online.KERNEL, BN=1024)
    for loop in _loops(k):
        loads = [op for op in loop.body.ops if isinstance(op, O.Load)]
        assigns = [op for op in loop.body.ops if isinstance(op, O.Assign)]
        assert len(loads) == 1
        nxt = next(op for op in loop.body.ops if isinstance(op, O.Arith) and op.fn == "add"
                   and op.lhs.id == loop.var.id)
        assert nxt.rhs.id == loop.step.id                       # j + step
        assert any(a.src.id == loads[0].result.id for a in assigns)
    top = list(k.body.ops)
    assert sum(isinstance(op, O.Load) for op in top) == 2       # the first block of each pass
    assert sum(isinstance(op, O.Var) and op.result.type.shape == (1, 1024) for op in top) == 2


@pytest.mark.parametrize("bn", [1024, 2048])
def test_the_lowered_kernel_computes_the_softmax(online, bn):
    x, y = online.make_inputs("small")           # 9 x 5000: ragged last block
    x, y = x.numpy(), np.full(y.shape, np.nan, np.float32)
    interp.run(_lowered(online.KERNEL, BN=bn), x, y)
    ref = online.reference(*map(__import__("torch").from_numpy, (x, y))).numpy()
    assert np.abs(y - ref).max() < 1e-6


def test_the_verifier_proves_the_prefetched_kernel(online):
    assert [d for d in check(_lowered(online.KERNEL, BN=2048))
            if d.severity in ("error", "unknown")] == []


def test_the_verifier_catches_a_prefetch_of_the_wrong_block(online):
    k = _lowered(online.KERNEL, BN=2048)
    loop = _loops(k)[-1]   # the normalizing pass: its stores check the coordinates

    def wrong(op):          # next = j + start (= j): each iteration reloads its own block
        if isinstance(op, O.Arith) and op.fn == "add" and op.lhs.id == loop.var.id:
            return dataclasses.replace(op, rhs=loop.start)
        return op
    bad_loop = dataclasses.replace(loop, body=Region(tuple(wrong(op) for op in loop.body.ops)))
    body = tuple(bad_loop if op is loop else op for op in k.body.ops)
    errors = [d for d in check(dataclasses.replace(k, body=Region(body)))
              if d.severity == "error"]
    assert errors and "store to Y" in errors[0].message


@ag.kernel(threads=256)
def in_place(X: ag.Tensor["M", "N", ag.f32]):
    (row,) = ag.grid(X.shape[0])
    for j in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, j * 1024), (1, 1024))
        ag.store(X, (row, j * 1024), x * 2.0)


@ag.kernel(threads=256)
def carried_offset(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    (row,) = ag.grid(X.shape[0])
    col = row * 0
    for _ in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, col), (1, 1024))
        ag.store(Y, (row, col), x)
        col = col + 1024


@ag.kernel(threads=256)
def too_wide(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    (row,) = ag.grid(X.shape[0])
    for j in ag.range(ag.cdiv(X.shape[1], 8192)):
        x = ag.load(X, (row, j * 8192), (1, 8192))   # 32 registers per thread: over budget
        ag.store(Y, (row, j * 8192), x)


@pytest.mark.parametrize("fn", [in_place, carried_offset, too_wide])
def test_loads_it_may_not_move_stay_in_place(fn):
    k = _lowered(fn)
    (loop,) = _loops(k)
    assert not [op for op in k.body.ops if isinstance(op, O.Var)
                and isinstance(op.result.type, TileType)]
    assert any(isinstance(op, O.Load) for op in loop.body.ops)
    assert not any(isinstance(op, O.Load) for op in k.body.ops)


def test_the_library_gemm_is_untouched():
    from argus.kernels.gemm import gemm

    k = analysis.infer_layouts(gemm.trace())   # its loops are in warp roles
    assert prefetch.run(k) == k
