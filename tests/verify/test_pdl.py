"""verify/check_pdl.py on seeded bugs (issue 16): in a kernel that waits for its predecessor
(ag.wait_prior_grids), a load of a non-stable input before the wait, a store before it, a
trigger (ag.allow_dependent_launch) before it or without one, and a wait inside a loop are each
found, naming the op, the role, the line and the fix; the correct kernels have no finding."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.verify.check_pdl import findings
from tests.unit.test_pdl import consumer, plain, producer, trigger_only


def _codes(kernel, **ct) -> list[str]:
    return [d.code for d in verify.run(kernel, **ct).diagnostics if d.severity == "error"]


def test_correct_kernels_have_no_pdl_finding():
    assert _codes(consumer) == [] and _codes(producer) == [] and _codes(plain) == []


@pytest.mark.parametrize("bug, code, op", [
    ("load", "pdl.wait-first", "load of Y"),
    ("store", "pdl.wait-first", "store to Y"),
    ("trigger", "pdl.trigger", "ag.allow_dependent_launch"),
    ("loop", "pdl.placement", "ag.wait_prior_grids"),
])
def test_seeded_bugs_are_found(bug, code, op):
    diags = [d for d in verify.run(consumer, BUG=bug).diagnostics if d.severity == "error"]
    if bug != "loop":   # one seeded hazard, one finding (the loop's is below)
        assert [d.code for d in diags] == [code]
    d = next(d for d in diags if d.code == code)
    assert op in d.message and "the kernel body" in d.message
    assert d.loc.line > 0 and d.loc.file.endswith("unit/test_pdl.py") and d.fix
    if bug == "load":   # the fix names the declaration that would make it legal
        assert "stable=(Y,)" in d.fix


def test_loop_wait_leaves_the_load_after_it_unordered():
    # the wait inside the loop does not dominate what follows the loop: the load, the store
    # and the trigger after it are not counted as ordered

    codes = sorted(f.code for f in findings(consumer.trace(BUG="loop")))
    assert codes == ["pdl.placement", "pdl.trigger", "pdl.wait-first", "pdl.wait-first"]


def test_trigger_without_a_wait_is_found():
    assert _codes(trigger_only) == ["pdl.trigger"]


def test_every_role_needs_its_own_wait():
    """A wait in one role does not order another role's accesses: role 'b' is found, by
    name, both traced and lowered (the check reads either IR)."""
    @ag.kernel
    def roles(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32],
              Z: ag.Tensor["N", ag.f32], B_WAITS: bool = False):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 128))
        with ag.role("a"):
            ag.wait_prior_grids()
            ag.store(Y, (pid * 128,), ag.load(X, (pid * 128,), (128,)))
        with ag.role("b"):
            if B_WAITS:
                ag.wait_prior_grids()
            ag.store(Z, (pid * 128,), ag.load(X, (pid * 128,), (128,)))

    for k in (roles.trace(), roles.lower()):
        got = sorted((f.code, f.subject) for f in findings(k))
        assert got == [("pdl.wait-first", "load of X in role 'b'"),
                       ("pdl.wait-first", "store to Z in role 'b'")]
    assert findings(roles.trace(B_WAITS=True)) == []
    assert findings(roles.lower(B_WAITS=True)) == []


def test_every_global_memory_op_is_classified():
    """An IR op with a `tensor` operand reads or writes global memory: check_pdl must order
    it (a new such op left out would pass before the wait unseen), or name it a hint that
    races with nothing (the L2 prefetch)."""
    import dataclasses

    from argus.ir import ops as O
    from argus.verify import check_pdl

    touching = {cls for cls in O.ALL_OPS.values()
                if "tensor" in {f.name for f in dataclasses.fields(cls)}
                and cls.__module__ != "argus.ir.tag_ops"}   # tags name a tensor, never read it
    assert touching == set(check_pdl._LOADS) | set(check_pdl._WRITES) | \
        set(check_pdl._HINTS), touching


def test_a_kernel_writing_a_tensor_it_declares_stable_is_found():
    """Launched twice in a row, the second launch reads W before its wait while the first, its
    trigger given, may still be writing W after its own wait: stable is then a false promise.
    Found at the write (after the wait, so no other rule sees it); without the store, none."""
    @ag.kernel
    def updates_w(W: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32], WRITE: bool = True):
        (pid,) = ag.grid(ag.cdiv(W.shape[0], 128))
        w = ag.load(W, (pid * 128,), (128,))
        ag.wait_prior_grids(stable=(W,))
        ag.allow_dependent_launch()
        ag.store(Y, (pid * 128,), w)
        if WRITE:
            ag.store(W, (pid * 128,), w * 2.0)

    got = [(f.code, f.subject) for f in findings(updates_w.trace())]
    assert got == [("pdl.stable", "store to W in the kernel body")]
    d = next(d for d in verify.run(updates_w).diagnostics if d.code == "pdl.stable")
    assert d.severity == "error" and "stable" in d.fix and d.loc.line > 0
    assert findings(updates_w.trace(WRITE=False)) == []
