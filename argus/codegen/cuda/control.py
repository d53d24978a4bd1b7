"""Rendering rules of control flow and variables: for, if, elect, var, assign.

Roles are not here: render() lays them out (EXEMPT in emit.py). A runtime loop is a C `for`; a
variable is a register array (tile) or a mutable C scalar, updated in place by `assign`.
"""

from __future__ import annotations

import re

from argus.codegen.cuda.emit import SCALAR_C, _Emitter, rule
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.types import ScalarType


@rule(O.For)
def for_(em: _Emitter, op: O.For) -> None:
    v = f"v{op.var.id}"
    em.names[op.var.id] = v
    step = em.name(op.step)
    if not step.lstrip("-").isdigit():
        # ag.range rejects a constant step <= 0 at trace time; a runtime one would spin
        # forever (0) or run no iterations (< 0): stop the kernel with an error instead
        em.emit(f"if ({step} <= 0) __trap();  // ag.range needs a positive step")
    head = f"for (int {v} = {em.name(op.start)}; {v} < {em.name(op.stop)}; {v} += {step})"
    unroll = op.unroll
    if unroll < 1:
        raise CompileError(f"a loop rendered {unroll} iterations per trip", op.loc,
                           fix="For.unroll is 1, or the iterations per trip (lower/prefetch.py)")
    if unroll == 1:
        em.block(head, op.body)
        return
    # the body `unroll` times per trip, each copy in its own scope, the index advanced and
    # tested between copies: the iterations and their order are the loop's, and a register
    # ring that lower/prefetch.py rotates by `assign` needs no copy at the back edge
    em.emit(f"{head} {{  // unrolled {unroll}x (lower/prefetch.py)")
    em.indent += 1
    for u in range(unroll):
        if u:
            em.emit(f"{v} += {step};")
            em.emit(f"if (!({v} < {em.name(op.stop)})) break;")
        em.emit("{")
        em.indent += 1
        em.region(op.body)
        em.indent -= 1
        em.emit("}")
    em.indent -= 1
    em.emit("}")


@rule(O.If)
def if_(em: _Emitter, op: O.If) -> None:
    em.block(f"if ({em.name(op.cond)})", op.body)


@rule(O.Elect)
def elect(em: _Emitter, op: O.Elect) -> None:
    """The threads lower/elect.py chose: thread 0 of the op's group, or one per group /
    threads consecutive threads (gtid is the thread's index in its warpgroup inside a role, in
    the CTA outside: the op's group must be that one)."""
    group = op.group
    if group != em.group_threads:
        raise CompileError(f"elect picks from a group of {group} threads but runs in a group "
                           f"of {em.group_threads}", op.loc,
                           fix="Elect.group is the thread count of the group it runs in: 128 "
                               "in a role, the CTA's threads outside")
    if op.threads < 1 or group % op.threads:
        raise CompileError(f"elect of {op.threads} threads in a group of {group}", op.loc,
                           fix="elect 1 thread, or a divisor of the group's thread count")
    cond = "gtid == 0" if op.threads == 1 else f"gtid % {group // op.threads} == 0"
    em.emit(f"if ({cond}) {{" + (f"  // {op.note}" if op.note else ""))
    em.indent += 1
    em.region(op.body)
    em.indent -= 1
    em.emit("}")


@rule(O.Var)
def var(em: _Emitter, op: O.Var) -> None:
    """A variable: a register array (tile) or a mutable C scalar, copied from its init."""
    if isinstance(op.result.type, ScalarType):
        n = f"v{op.result.id}"
        em.emit(f"{SCALAR_C[op.result.type.dtype.name]} {n} = {em.name(op.init)};")
        em.names[op.result.id] = n
        return
    info = em.declare_tile(op.result, op.loc)
    if info.packed:   # word copies (or the init's pairs packed): lower/packed.py
        for w, e in enumerate(em.packed_words(op.init, info.layout)):
            em.emit(f"{info.name}[{w}] = {e};")
        return
    for i in range(info.layout.nregs):
        em.emit(f"{info.name}[{i}] = {em.tile_expr(op.init, i, info.layout)};")


@rule(O.Assign)
def assign(em: _Emitter, op: O.Assign) -> None:
    if isinstance(op.dst.type, ScalarType):
        em.emit(f"{em.name(op.dst)} = {em.name(op.src)};")
        return
    dst = em.tiles[op.dst.id]
    if dst.packed:
        # a packed variable's source is a stored word array of the same web or the inlined
        # convert that makes it, which reads no register of the variable (lower/packed.py)
        for w, e in enumerate(em.packed_words(op.src, dst.layout)):
            em.emit(f"{dst.name}[{w}] = {e};")
        return
    # every element of the source is read before any is written: when register i's new
    # value reads another register of the destination (a broadcast of its own row
    # maximum, a slice), the new values go through temporaries first
    exprs = [em.tile_expr(op.src, i, dst.layout) for i in range(dst.layout.nregs)]
    if any(not _reads_only_register(e, dst.name, i) for i, e in enumerate(exprs)):
        em.emit("{")
        for i, e in enumerate(exprs):
            em.emit(f"    const auto assign_tmp{i} = {e};")
        for i in range(len(exprs)):
            em.emit(f"    {dst.name}[{i}] = assign_tmp{i};")
        em.emit("}")
        return
    for i, e in enumerate(exprs):
        em.emit(f"{dst.name}[{i}] = {e};")


def _reads_only_register(expr: str, array: str, index: int) -> bool:
    """Whether `expr` reads no register of `array` other than `array[index]`."""
    return all(int(m) == index for m in re.findall(rf"\b{re.escape(array)}\[(\d+)\]", expr))
