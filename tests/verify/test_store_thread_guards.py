"""store.coverage reads a condition on the thread index per stored element, at the threads
holding it under the tile's register layout (argus/verify/store_guards.py: `_holders`).

Before, the thread index was a free value in the guard obligation: a store under
`ag.when(ag.thread_index() < 1)` of a one-element tile was reported as skipping X[0] (thread 0
holds it and stores it), and a per-thread mask `pid * 128 + tid < N` as skipping elements
the masked-in threads store. The true skips (a thread that holds an element and fails the
condition, with no replica passing it) and the warpgroup's thread index inside a role are in
tests/mutations/test_thread_guard_mutations.py."""

import pytest

import argus as ag
from argus import verify


@ag.kernel(threads=128, name="first_thread")
def first_thread(X: ag.Tensor[1, ag.f32]):
    ag.grid(1)
    with ag.when(ag.thread_index() < 1):
        ag.store(X, (0,), ag.full((1,), 7.0))


def _masked():
    @ag.kernel(threads=128, name="masked")
    def masked(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 128))
        x = ag.load(X, (pid * 128,), (128,))
        with ag.when(pid * 128 + ag.thread_index() < X.shape[0]):   # each thread its own
            ag.store(Y, (pid * 128,), x)
    return masked


def _tile(shape, cond, name="tile"):
    @ag.kernel(threads=128, name=name)
    def tile(X: ag.Tensor[shape[0], shape[1], ag.f32]):
        ag.grid(1)
        with ag.when(cond(ag.thread_index())):
            ag.store(X, (0, 0), ag.full(shape, 7.0))
    return tile


def _nested(lo: int, hi: int):
    @ag.kernel(threads=128, name="nested")
    def nested(X: ag.Tensor[1, ag.f32]):
        ag.grid(1)
        with ag.when(ag.thread_index() >= lo):
            with ag.when(ag.thread_index() < hi):
                ag.store(X, (0,), ag.full((1,), 7.0))
    return nested


def _guards(report):
    return [d for d in report.diagnostics
            if d.code == "store.coverage" and "the condition" in d.message]


def _proven(kernel, lower):
    report = verify.run(kernel, include_proven=True, lower=lower)
    guards = _guards(report)
    assert guards and all(d.severity == "note" for d in guards), [str(d) for d in guards]
    assert not report.errors, [str(d) for d in report.errors]
    return report


@pytest.mark.parametrize("lower", [False, True])
def test_thread_zero_stores_a_one_element_tile(lower):
    """The false alarm of issue 13: every thread holds the one element (any layout), thread 0
    passes the condition and stores it (before: an error naming X[0])."""
    _proven(first_thread, lower)


def test_a_per_thread_mask_is_proven_on_the_lowered_kernel():
    """The blocked layout gives element e to thread e: the mask holds at the thread holding
    every in-bounds element (before: an error, the thread free past the mask)."""
    _proven(_masked(), True)


def test_a_traced_tile_of_several_elements_is_unknown_not_an_error():
    """Which thread holds which element is decided by layout inference; a traced kernel has
    none, so the condition is unknown (before: an error at any N), with the fix to verify
    the lowered kernel."""
    report = verify.run(_masked(), include_proven=True)
    guards = _guards(report)
    assert [d.severity for d in guards] == ["unknown"], [str(d) for d in guards]
    assert "thread index" in guards[0].message and "lower=True" in guards[0].fix
    assert not report.errors, [str(d) for d in report.errors]


@pytest.mark.parametrize("cond", [lambda t: t < 32, lambda t: t >= 96],
                         ids=["first replica", "last replica"])
def test_a_replica_of_each_element_passing_covers_it(cond):
    """A 2 x 16 tile over 128 threads: thread bits 0-4 place the element, bits 5 and 6
    replicate it (threads t, t + 32, t + 64, t + 96 hold the same element and all store it):
    either end of the replicas covers the tile."""
    _proven(_tile((2, 16), cond), True)


def test_nested_thread_conditions_are_passed_by_one_thread():
    """Two conditions on the thread index hold at one thread of the replicas: 32 <= t < 64
    stores the replicated element; t >= 1 and t < 1 are each passed by some thread, never by
    the same one, so X[0] is never written."""
    _proven(_nested(32, 64), True)
    report = verify.run(_nested(1, 1))
    bad = [d for d in report.errors if d.code == "store.coverage"]
    assert bad and bad[0].counterexample["output"] == "X[0]", [str(d) for d in bad]
    assert "127 threads" in bad[0].counterexample["threads"]
