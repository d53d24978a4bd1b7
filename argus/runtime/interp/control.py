"""Rules for control flow and mutable values: ag.range, ag.when, elect, roles, var/assign.

Invariant: regions run through the machine (`run_region`), so a pipeline step nested in a loop
or a branch still blocks its coroutine; roles are scheduled by the machine, never run as ops.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.runtime.interp.machine import InterpError, _Blocked, _Group, _Interp
from argus.runtime.interp.registry import rule


@rule(O.For)
def for_(m: _Interp, g: _Group, op: O.For) -> Iterator[_Blocked]:
    start, stop, step = (m.val(g, v) for v in (op.start, op.stop, op.step))
    if step <= 0:
        raise InterpError(f"ag.range at {op.loc} got step {step} at run time; the step "
                          f"must be positive (the GPU kernel traps)")
    for i in range(start, stop, step):
        g.env[op.var.id] = i
        yield from m.run_region(g, op.body)


@rule(O.If)
def if_(m: _Interp, g: _Group, op: O.If) -> Iterator[_Blocked]:
    if m.val(g, op.cond):
        yield from m.run_region(g, op.body)


@rule(O.Elect)
def elect(m: _Interp, g: _Group, op: O.Elect) -> Iterator[_Blocked]:
    """A group runs as one sequential program whose ops act for the whole group, so the work
    its elected thread does for it runs once. Several elected threads would each run a produce
    step (each arriving on a full barrier that counts one arrival per step), which this
    one-program-per-group model cannot show: refused rather than run once and found right."""
    if op.threads != 1 and any(isinstance(x, O.Produce) for x in op.body.walk()):
        raise InterpError(f"elect at {op.loc}: {op.threads} threads would each run the produce "
                          f"steps inside it, arriving {op.threads} times per step on a full "
                          f"barrier that counts {O.PipelineCreate.FULL_ARRIVALS}")
    yield from m.run_region(g, op.body)


@rule(O.RoleOp)
def role(m: _Interp, g: _Group, op: O.RoleOp) -> None:
    raise InterpError("nested role")  # roles are scheduled by machine.run_cta


@rule(O.Var)
def var(m: _Interp, g: _Group, op: O.Var) -> None:
    init = m.val(g, op.init)
    g.env[op.result.id] = (np.array(init, dtype=init.dtype, copy=True)
                           if isinstance(init, np.ndarray) else init)


@rule(O.Assign)
def assign(m: _Interp, g: _Group, op: O.Assign) -> None:
    if isinstance(op.dst.type, TileType):
        m.val(g, op.dst)[...] = m.val(g, op.src)
    else:
        g.env[op.dst.id] = m.val(g, op.src)
