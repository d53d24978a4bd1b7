"""Pass: decide which threads of a role issue its work, as an explicit `elect` op.

A role whose every op is one that a single thread does for its warpgroup (ir.ops.electable:
index math, control, scalar reads, produce steps and their TMA loads: the producer of a TMA
pipeline) runs on one elected thread: its body, after the leading `setmaxnreg` (a
warpgroup-wide instruction every thread executes), becomes `elect(threads=1) { ... }`, picking
from the role's warpgroup (`group` = 128: the one datum codegen and the verifier read). Every
other role runs on all its threads. The decision used to be codegen's; as an op, the verifier
counts the arrivals it implies (check_pipeline's pipe.producers: one arrive.expect_tx per step
on a full barrier whose init count is PipelineCreate.FULL_ARRIVALS) and codegen renders it.

A role that produces into a pipeline but also does work one thread cannot do for its
warpgroup (tile math, wgmma, barriers) is refused here: rendered for all 128 threads, each
would arrive with expect_tx and issue every TMA copy again (128 arrivals, 128x the transaction
bytes: an unspecified launch failure on the GPU, while the interpreter, which runs a role
once, is right).

An `elect` written at the kernel's top level (ag.elect(): one thread of the CTA, e.g. a
prefetch before a PDL wait) gets its group here, the CTA's thread count.

An atomic.fetch_add in an elected body (a producer drawing its next unit from a work counter)
is marked `alone`: the one thread runs it for itself, without the group barriers and the
broadcast a whole group's atomic needs (which the other threads, skipping the body, would
never reach).

Runs after lower/sync.py, which places the setmaxnreg this pass keeps outside; the kernel gets
the attribute `elected` (the verifier checks thread counts only once the decision is made).
"""

from __future__ import annotations

import dataclasses

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region
from argus.target.limits import WARPGROUP_SIZE

NOTE = "one thread issues the async copies"


def run(kernel: Kernel) -> Kernel:
    body = []
    for op in kernel.body.ops:
        if isinstance(op, O.Elect) and not op.group:   # ag.elect(): one thread of the CTA
            op = op.replace(group=kernel.attr("threads"), body=_alone(op.body))
        body.append(_role(op) if isinstance(op, O.RoleOp) else op)
    return dataclasses.replace(kernel, body=Region(tuple(body))).with_attrs(elected=True)


def _role(role: O.RoleOp) -> O.RoleOp:
    ops = list(role.body.ops)
    head = []
    while ops and isinstance(ops[0], O.SetMaxNReg):  # the role's first instruction, all threads
        head.append(ops.pop(0))
    if any(isinstance(op, O.Elect) for op in role.body.walk()):
        return role  # already decided (a kernel lowered twice, or written with elect)
    rest = Region(tuple(ops))
    if all(O.electable(op) for op in rest.walk()):
        elect = O.Elect(_alone(rest), threads=1, group=WARPGROUP_SIZE, note=NOTE,
                        loc=role.loc)
        return role.replace(body=Region((*head, elect)))
    if any(isinstance(op, O.Produce) for op in rest.walk()):
        others = sorted({op.NAME for op in rest.walk() if not O.electable(op)})
        raise CompileError(f"role {role.name!r} produces into a pipeline but also does "
                           f"{', '.join(others)}, which one elected thread cannot do for its "
                           f"warpgroup; the full barriers count one arrival per step",
                           role.loc, fix="move that work to another role (or before the roles) "
                           "and keep the producer to index math, scalar reads and TMA loads")
    return role


def _alone(region: Region) -> Region:
    """`region` (an elect's body of one thread) with its atomic.fetch_add ops marked alone."""
    def visit(op: O.Op) -> O.Op:
        if isinstance(op, O.AtomicFetchAdd):
            return op.replace(alone=True)
        nested = {f.name: _alone(getattr(op, f.name)) for f in op.spec_fields()
                  if isinstance(getattr(op, f.name), Region)}
        return op.replace(**nested) if nested else op
    return Region(tuple(visit(op) for op in region.ops))
