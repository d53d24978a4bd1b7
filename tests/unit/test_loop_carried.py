"""Loop-carried values (argus/dsl/carry.py): a tile or runtime scalar rebound inside an
`ag.range` body, an `ag.when` block or a pipeline step carries to the next iteration and out of
the region, as in plain Python; the IR states it (`var` before the region, `assign` at the end
of its body), the interpreter, codegen and the verifier read it, and misuse is a TraceError at
the user's line."""

from __future__ import annotations

import re

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel

BN = 256


@ag.kernel(threads=128)
def running_max(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "W", ag.f32],
                BN: int = BN):
    """Per row, the elementwise max over column blocks, and how many blocks it saw."""
    (row,) = ag.grid(X.shape[0])
    best = ag.full((1, BN), float("-inf"))
    blocks = ag.scalar(0)
    for j in ag.range(ag.cdiv(X.shape[1], BN)):
        best = ag.maximum(best, ag.load(X, (row, j * BN), (1, BN), other=float("-inf")))
        blocks = blocks + 1
    with ag.when(blocks > 2):
        best = best * 2.0  # only rows of more than two blocks are doubled
    ag.store(Y, (row, 0), best)


def _running_max_ref(x: np.ndarray) -> np.ndarray:
    blocks = -(-x.shape[1] // BN)
    pad = np.full((x.shape[0], blocks * BN), -np.inf, dtype=np.float32)
    pad[:, :x.shape[1]] = x
    best = pad.reshape(x.shape[0], blocks, BN).max(axis=1)
    return best * 2.0 if blocks > 2 else best


@pytest.mark.parametrize("n", [100, 700, 1000])
def test_running_max_matches_numpy(n):
    x = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    y = np.zeros((3, BN), np.float32)
    running_max.interpret(x, y)
    np.testing.assert_array_equal(y, _running_max_ref(x))


def test_carried_values_are_explicit_in_the_ir_and_round_trip():
    k = running_max.trace()
    text = print_kernel(k)
    assert parse_kernel(text) == k
    loop = next(op for op in k.body.ops if isinstance(op, O.For))
    cond = next(op for op in k.body.ops if isinstance(op, O.If))
    vars_ = [op for op in k.body.ops if isinstance(op, O.Var)]
    assert len(vars_) == 3  # best and blocks before the loop, best before the ag.when
    assigned = [op.dst for op in loop.body.ops if isinstance(op, O.Assign)]
    assert {v.id for v in assigned} == {v.result.id for v in vars_[:2]}
    assert isinstance(cond.body.ops[-1], O.Assign)


def test_carried_kernel_renders_and_builds_for_sm90a():
    text = codegen.render(lower_only(running_max)).text
    # the scalar variable is mutable and updated at the end of the loop body
    assert any(line.strip().startswith("int v") and "= 0;" in line for line in text.splitlines())
    from argus.compiler import compile_kernel

    compiled = compile_kernel(running_max)
    assert compiled.binary


def test_verifier_reads_carried_values():
    from argus import verify

    errors = [d for d in verify.check(lower_only(running_max)) if d.severity == "error"]
    assert not errors, errors


@ag.kernel(threads=128)
def swap_each_iteration(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32],
                        Z: ag.Tensor["N", ag.f32], T: ag.Tensor["T", ag.f32]):
    (pid,) = ag.grid(1)
    a = ag.load(X, (0,), (128,))
    b = a * 0.0 + 1.0
    for i in ag.range(T.shape[0]):
        a, b = b, a  # parallel assignment: both read the values before the iteration
    ag.store(Y, (0,), a)
    ag.store(Z, (0,), b)


@pytest.mark.parametrize("trips", [0, 1, 2, 3])
def test_parallel_assignment_swaps(trips):
    x = np.arange(128, dtype=np.float32)
    y, z, t = np.zeros(128, np.float32), np.zeros(128, np.float32), np.zeros(trips, np.float32)
    swap_each_iteration.interpret(x, y, z, t)
    a, b = x, np.ones(128, np.float32)
    for _ in range(trips):
        a, b = b, a
    np.testing.assert_array_equal(y, a)
    np.testing.assert_array_equal(z, b)
    codegen.render(lower_only(swap_each_iteration))  # renders (through temporaries)


@ag.kernel(threads=128)
def scale_by_carried_scalar(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
    (pid,) = ag.grid(1)
    s = ag.scalar(1.0, ag.f32)  # bound before t: its update is assigned first
    t = ag.load(X, (0,), (128,))
    for i in ag.range(3):
        t = t * s
        s = s + 1.0
    ag.store(Y, (0,), t)


def test_an_update_reads_the_old_value_of_a_carried_scalar_in_codegen_too():
    x = np.ones(128, np.float32)
    y = np.zeros(128, np.float32)
    scale_by_carried_scalar.interpret(x, y)
    np.testing.assert_array_equal(y, np.full(128, 6.0, np.float32))  # 1 * 1 * 2 * 3
    # codegen: `t * s` must not be inlined into t's assign after s was reassigned
    text = codegen.render(lower_only(scale_by_carried_scalar)).text
    loop = text[text.index("for (int"):]
    product = re.search(r"\* (v\d+)\)", loop)  # t * s, s the carried C variable vNN
    assert product and product.start() < loop.index(f"{product[1]} = "), loop


@ag.kernel(threads=128)
def keep_previous_as_view(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", 1, ag.f32],
                          Z: ag.Tensor[1, "N", ag.f32]):
    (pid,) = ag.grid(1)
    a = ag.load(X, (0,), (128,))
    rows = ag.full((2, 128), 0.0)
    prev = ag.full((128, 1), 0.0)
    top = ag.full((1, 128), 0.0)
    for i in ag.range(2):
        prev = a[:, None]  # views of a and rows, taken before they are rebound: old values
        top = rows[0:1, :]
        a = a + 1.0
        rows = rows + 1.0
    ag.store(Y, (0, 0), prev)
    ag.store(Z, (0, 0), top)


def test_an_update_that_is_a_view_of_a_carried_value_reads_its_old_value():
    x = np.zeros(128, np.float32)
    y, z = np.full((128, 1), np.nan, np.float32), np.full((1, 128), np.nan, np.float32)
    keep_previous_as_view.interpret(x, y, z)
    np.testing.assert_array_equal(y, np.ones((128, 1), np.float32))
    np.testing.assert_array_equal(z, np.ones((1, 128), np.float32))
    snapshots = [op for op in lower_only(keep_previous_as_view).walk()
                 if isinstance(op, O.Var) and op.result.hint.endswith("_prev")]
    assert len(snapshots) == 2  # codegen copies them before a's assign


@ag.kernel(threads=128)
def alias_stays_invariant(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32],
                          Z: ag.Tensor["N", ag.f32], T: ag.Tensor["T", ag.f32]):
    (pid,) = ag.grid(1)
    x0 = ag.load(X, (0,), (128,))
    acc = x0  # two names for one value: only acc is rebound
    for i in ag.range(T.shape[0]):
        acc = acc + x0
    ag.store(Y, (0,), acc)
    ag.store(Z, (0,), x0)


def test_an_alias_of_a_carried_value_keeps_its_value():
    x = np.arange(128, dtype=np.float32)
    y, z, t = np.zeros(128, np.float32), np.zeros(128, np.float32), np.zeros(3, np.float32)
    alias_stays_invariant.interpret(x, y, z, t)
    np.testing.assert_array_equal(y, 4 * x)
    np.testing.assert_array_equal(z, x)


@ag.kernel(threads=128)
def nested(X: ag.Tensor["A", "B", ag.f32], Y: ag.Tensor[1, "W", ag.f32], BN: int = 128):
    (pid,) = ag.grid(1)
    total = ag.full((1, BN), 0.0)
    for i in ag.range(X.shape[0]):
        row = ag.full((1, BN), 0.0)
        for j in ag.range(ag.cdiv(X.shape[1], BN)):
            row = row + ag.load(X, (i, j * BN), (1, BN))
        total = ag.maximum(total, row)
    ag.store(Y, (0, 0), total)


def test_nested_loops_carry_independently():
    x = np.random.default_rng(1).standard_normal((5, 300)).astype(np.float32)
    y = np.zeros((1, 128), np.float32)
    nested.interpret(x, y)
    pad = np.zeros((5, 384), np.float32)
    pad[:, :300] = x
    ref = np.maximum(pad.reshape(5, 3, 128).sum(axis=1).max(axis=0, keepdims=True), 0.0)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- misuse


def _trace_error(fn, **kw) -> TraceError:
    with pytest.raises(TraceError) as info:
        ag.kernel(fn, threads=128).trace(**kw)
    return info.value


def test_python_number_rebound_to_a_tile_is_refused():
    def k(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        acc = 0.0
        for i in ag.range(X.shape[0]):
            acc = acc + ag.load(X, (0,), (128,))
        ag.store(Y, (0,), acc)

    err = _trace_error(k)
    assert "Python value 0.0" in str(err) and "ag.full" in str(err)


def test_changing_shape_is_refused():
    def k(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        acc = ag.full((1, 128), 0.0)
        for i in ag.range(X.shape[0]):
            acc = acc.sum(axis=1)
        ag.store(Y, (0,), acc)

    assert "keeps its shape and dtype" in str(_trace_error(k))


def test_a_value_first_bound_in_the_loop_is_not_readable_after_it():
    def k(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        for i in ag.range(X.shape[0]):
            last = ag.load(X, (0,), (128,))
        ag.store(Y, (0,), last)

    err = _trace_error(k)
    assert "first bound inside the ag.range loop" in str(err)
    assert err.loc.line and "ag.full" in str(err)


def test_loop_index_is_not_carried_and_not_readable_after_the_loop():
    def k(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        i = ag.scalar(0)
        for i in ag.range(X.shape[0]):  # noqa: B007 - rebinding the index is the point
            pass
        ag.store(Y, (i,), ag.load(X, (0,), (128,)))

    err = _trace_error(k)
    assert "i holds the index of the ag.range loop" in str(err)
    assert "ag.scalar(0) before the loop" in err.fix and "+ 1 inside" in err.fix


def test_the_advice_for_a_loop_index_read_after_the_loop_traces():
    """The fix the message above gives (carry a count) traces, and the count reaches the
    store's coordinate after the loop."""
    def k(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        i = ag.scalar(0)
        for _ in ag.range(X.shape[0]):
            i = i + 1
        ag.store(Y, (i,), ag.load(X, (0,), (128,)))

    kernel = ag.kernel(k, threads=128).trace()
    assert any(isinstance(op, O.Assign) for op in kernel.walk())


def _slot_after_step(read: str, in_loop: bool):
    """A consumer that binds `slot` before its step (`slot = ag.scalar(0)`, the advice the
    refusal used to give), sets `slot = st` in a consume step, and reads the slot after the
    step (read="after") or inside it (read="inside"), in an ag.range loop or not (K is one
    tile: the loop, ag.range(1), runs once)."""
    BM, BN, BK = 64, 128, 64

    @ag.kernel(name="slot_after_step")
    def k(A: ag.Tensor["M", 64, ag.bf16], B: ag.Tensor["N", 64, ag.bf16],
          C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((2, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((2, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(2)
        k_tiles = ag.cdiv(K, BK) if in_loop else 1
        with ag.role("producer", warpgroups=1, regs=40):
            for kk in ag.range(k_tiles):
                with ring.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, kk * BK))
                    ag.tma.load(sB[st], B, (pid_n * BN, kk * BK))
        with ag.role("consumer", warpgroups=1, regs=232):
            acc = ag.zeros((BM, BN), ag.f32)
            slot = ag.scalar(0)
            for _ in ag.range(k_tiles) if in_loop else range(1):
                with ring.consume() as st:
                    slot = st
                    if read == "inside":
                        ag.wgmma(sA[slot], sB[slot], acc)
                if read == "after":
                    ag.wgmma(sA[slot], sB[slot], acc)
            ag.store(C, (pid_m * BM, pid_n * BN), acc.to(ag.bf16))
    return k


@pytest.mark.parametrize("in_loop", [False, True], ids=["one_step", "in_ag_range"])
def test_a_slot_read_after_its_step_gives_advice_that_traces(in_loop):
    """A slot read after its consume step is refused, with or without an ag.range loop
    around the step, and binding the name before the step does not help (the stage never
    carries): the message says to read the slot inside the step. Doing that traces and
    verifies clean."""
    from argus import verify

    with pytest.raises(TraceError) as info:
        _slot_after_step("after", in_loop).trace()
    err = info.value
    assert "slot holds the stage of the pipeline step" in str(err)
    assert "read the slot inside the step" in err.fix and "ag.scalar(0)" not in err.fix
    kernel = _slot_after_step("inside", in_loop).trace()
    found = [d for d in verify.check(kernel) if d.severity in ("error", "warning")]
    assert not found, "\n".join(str(d) for d in found)


def test_a_pipeline_stage_used_after_its_step_is_refused_at_its_line():
    """The stage of a consume step is released when the step ends: reading it after the
    `with` block is refused where it happens (the mutation corpus keeps the lowered-IR form
    of this bug for the verifier)."""
    from tests.mutations import kernels as K

    with pytest.raises(TraceError) as info:
        K.make_gemm("wgmma_after_consume").trace()
    err = info.value
    assert "st holds the stage of the pipeline step" in str(err)
    line = next(i + 1 for i, text in enumerate(open(K.__file__).read().splitlines())
                if "BUG:wgmma_after_consume" in text)
    assert err.loc.line == line
