"""check_sums finds lower/prefetch.py's register ring by the index of each op in the loop body
and by the IR names of the loads (issue 13, the house rule: no id()-keyed maps): the
accumulator's assignment is passed as its index, the rotation b0 = b1, ..., b_last = load must
follow it in that order, and the issued load must be one the body's top level makes."""

from __future__ import annotations

from argus.compiler import lower_only
from argus.ir import ops as O
from argus.verify import check_sums
from argus.verify.model import Model
from tests.verify.test_sum_slices_loop import _summed


def _ring_loop():
    kernel = lower_only(_summed("ok"))
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    assigns: dict[int, int] = {}
    for op in kernel.walk():
        if isinstance(op, O.Assign):
            assigns[op.dst.id] = assigns.get(op.dst.id, 0) + 1
    (vid, (loop, leaves)), = check_sums._loop_sums(Model(kernel)).items()
    return defs, assigns, loop, leaves


def test_the_ring_is_found_by_op_indices():
    defs, assigns, loop, leaves = _ring_loop()
    (ring,) = leaves
    assert isinstance(ring, check_sums._Ring) and ring.depth == len(ring.inits) == 3
    body = loop.body.ops
    top = [i for i, op in enumerate(body) if isinstance(op, O.Assign)]
    acc, rotation = top[0], top[1:]
    assert len(rotation) == 3
    inside = {r.id for op in loop.body.walk() for r in op.results()}
    first = body[rotation[0]].dst.id
    again = check_sums._ring(loop, first, acc, defs, assigns, inside)
    assert again == ring
    # the accumulator's index placed after the rotation's first assignment: the block it
    # reads was rotated before it, so this is no ring
    assert check_sums._ring(loop, first, rotation[0], defs, assigns, inside) is None
    # the issued load is a value the body's top level makes (the ring's last block)
    assert any(r.id == body[rotation[-1]].src.id for r in ring.issued.results())
