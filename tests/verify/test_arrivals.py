"""Arrival counts on the pipeline barriers, read from the explicit ops.

Each phase of a slot's full barrier expects PipelineCreate.FULL_ARRIVALS = 1 arrive.expect_tx:
the threads that run the produce step, counted from the `elect` around it (pipe.producers);
each phase of its empty barrier expects one arrive per consumer warpgroup (x peers): every
consume step's slot released exactly once on every path, by a pipe.release of it or by one
that holds it until a later release (sync.arrive). Seeded bugs in the lowered GEMM: a slot
never released (a hang once the ring wraps), released twice (a phase completed early), the
last held slot never released, two elected producer threads, no elect at all."""

from __future__ import annotations

import pytest

from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region
from tests.mutations import kernels as K
from tests.mutations.corpus import rewrite


@pytest.fixture(scope="module")
def gemm():
    return lower_only(K.make_gemm(None, stages=2, consumers=2))


def _codes(kernel, code):
    report = verify.run(kernel)
    return ([d for d in report.errors if d.code == code],
            [d for d in report.proven if d.code == code])


def test_a_clean_gemm_proves_every_release_once(gemm):
    bad, proven = _codes(gemm, "sync.arrive")
    assert not bad, bad
    # the consume step, its release, the flush after the loop, the role's end
    assert len(proven) >= 3


def test_a_slot_never_released_is_a_hang(gemm):
    bad, _ = _codes(rewrite(gemm, O.SlotRelease, lambda op: None), "sync.arrive")
    assert bad and "not released on some path" in bad[0].message
    assert "forever" in bad[0].message


def test_a_slot_released_twice_completes_a_phase_early(gemm):
    def twice(op: O.Consume) -> O.Consume:
        releases = tuple(x for x in op.body.ops if isinstance(x, O.SlotRelease))
        assert releases
        return op.replace(body=Region(op.body.ops + releases))
    bad, _ = _codes(rewrite(gemm, O.Consume, twice), "sync.arrive")
    assert bad and "arrives twice" in bad[0].message


def test_a_release_only_under_a_condition_is_not_counted_as_one(gemm):
    """A release inside an `if` of the step leaves the slot owed on the skipping path."""
    cond = next(op.result for op in gemm.walk()
                if isinstance(op, O.Const) and isinstance(op.value, int))

    def guarded(op: O.Consume) -> O.Consume:
        body = tuple(O.If(cond, Region((x,)), loc=x.loc) if isinstance(x, O.SlotRelease) else x
                     for x in op.body.ops)
        return op.replace(body=Region(body))
    bad, _ = _codes(rewrite(gemm, O.Consume, guarded), "sync.arrive")
    assert bad and any("not released on some path" in d.message for d in bad)


def test_the_last_held_slot_must_be_released(gemm):
    """The flush after the K loop (pipe.release previous, no stage) dropped: the role ends
    holding the last step's slot."""
    flush = [op for op in gemm.walk() if isinstance(op, O.SlotRelease) and op.stage is None]
    assert flush
    bad, _ = _codes(rewrite(gemm, O.SlotRelease,
                            lambda op: None if op.stage is None else op), "sync.arrive")
    assert bad and "ends holding" in bad[0].message


@pytest.mark.parametrize("threads,what", [(2, "an elect of 2 threads"),
                                          (None, "no elect around it")])
def test_producer_arrivals_are_counted_from_the_elect(gemm, threads, what):
    if threads is None:
        def dissolve(role: O.RoleOp) -> O.RoleOp:
            ops = [x for op in role.body.ops
                   for x in (op.body.ops if isinstance(op, O.Elect) else (op,))]
            return role.replace(body=Region(tuple(ops)))
        kernel = rewrite(gemm, O.RoleOp, dissolve)
    else:
        kernel = rewrite(gemm, O.Elect, lambda op: op.replace(threads=threads))
    bad, _ = _codes(kernel, "pipe.producers")
    assert bad and what in bad[0].message
    assert bad[0].counterexample["full_barrier_count"] == O.PipelineCreate.FULL_ARRIVALS
