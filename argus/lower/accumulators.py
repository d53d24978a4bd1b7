"""Pass: check the accumulators that ask to be zeroed by their first wgmma (scale-d = 0).

`ag.zeros(..., by_wgmma=True)` (a schedule choice) marks the tile; this pass proves it legal —
the tile's next use in its region is a loop in which only pipelined wgmma (inside `consume`
steps) touch it, or a wgmma into it right there (a fresh partial accumulator per pipeline step,
as fp8 promotion uses one per K block) — and rejects it otherwise. Such a tile needs no
zeroing instructions: the first wgmma runs with scale-d = 0, which computes D = A·B instead
of D = A·B + D. The codegen keeps a "still zero" flag and zeroes the registers only if the
loop ran no iteration.
Semantics are unchanged (the interpreter ignores the flag); it removes 128 moves and a register
dependency per tile.

It also marks each wgmma whose first k instruction reads nothing of its accumulator
(`Wgmma.acc_write_only`): an overwriting wgmma (scale-d = 0), and the wgmma that follows a
by_wgmma zero tile right away (a fresh partial per step); codegen then binds those registers
write-only ("=f" instead of "+f"), so nothing asks the compiler to keep their old values.
"""

from __future__ import annotations

import dataclasses

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region
from argus.ir.tag_ops import is_tag_op


def _touches(op: O.Op, vid: int) -> bool:
    return any(v.id == vid for inner in op.walk() if not is_tag_op(inner)
               for v in inner.operands())


def _only_pipelined_wgmma(loop: O.Op, vid: int) -> bool:
    found = False
    for op in loop.walk():
        if is_tag_op(op):
            continue  # tags generate no code (and must not change what is generated)
        if any(v.id == vid for v in op.operands()):
            if not isinstance(op, O.Wgmma) or op.acc.id != vid:
                return False
            found = True
    consumes = [op for op in loop.walk() if isinstance(op, O.Consume)]
    return found and all(
        any(isinstance(w, O.Wgmma) and w.acc.id == vid for w in c.body.walk())
        for c in consumes) and bool(consumes)


def _region(region: Region) -> Region:
    ops = list(region.ops)
    for j, op in enumerate(ops):
        subs = {f.name: _region(getattr(op, f.name)) for f in op.spec_fields()
                if isinstance(getattr(op, f.name), Region)}
        if subs:
            op = ops[j] = dataclasses.replace(op, **subs)
        if isinstance(op, O.Wgmma) and op.overwrite and not op.acc_write_only:
            ops[j] = op.replace(acc_write_only=True)
        if not (isinstance(op, O.Full) and op.scale_d_zero):
            continue
        vid = op.result.id
        at, nxt = next(((i, o) for i, o in enumerate(ops[j + 1:], j + 1) if _touches(o, vid)),
                       (None, None))
        if isinstance(nxt, O.Wgmma) and nxt.acc.id == vid:
            ops[at] = nxt = nxt.replace(acc_write_only=True)
        first_writer = (isinstance(nxt, O.For) and _only_pipelined_wgmma(nxt, vid)) or \
            (isinstance(nxt, O.Wgmma) and nxt.acc.id == vid)
        legal = op.value == 0.0 and op.result.type.layout == "wgmma_acc" and first_writer
        if not legal:
            raise CompileError("ag.zeros(..., by_wgmma=True) needs an accumulator whose next "
                               "use is a wgmma into it, or a loop of pipelined wgmma (inside "
                               "pipe.consume) that nothing else touches", op.loc,
                               fix="drop by_wgmma=True")
    return Region(tuple(ops))


def run(kernel: Kernel) -> Kernel:
    return dataclasses.replace(kernel, body=_region(kernel.body))
