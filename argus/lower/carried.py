"""Pass: place a carried tile's promotion where its value is made, not at the end of its region.

A value rebound in a loop body or a pipeline step carries out through `assign` ops that the
DSL appends at the end of the region (argus/dsl/carry.py), and codegen inlines a pointwise
tile used once into that `assign`. So fp8 promotion, `acc = acc + partial * scale` made right
after the K block's wgmma, ran at the end of the consume step: with a second wgmma in the step
(Fp8GemmSchedule(n_split=2): two column halves, each with its own partial) the first half's
FFMAs came after the second half's wgmma, both partials were live at once (128 more
registers), and the kernel had to put a one-trip loop around the promotion as a sequence point.

Rule: in every region, an `assign` of a register tile whose source is a pointwise tile made in
the same region, whose operand tree (pointwise ops of the region) reads the accumulator of a
wgmma of that region made fresh there (`ag.zeros(..., by_wgmma=True)`: a K block's partial),
and that a later wgmma issue separates from its source, moves to right after the source's
definition, which lower/sync.py then places after the wgmma wait that makes the partial
available. Legal when no op between the source's definition and the assign reads or writes
the destination (the variable keeps its old value for every reader before the assign's old
place, and its new value for none of them): the program's meaning is unchanged, so the
interpreter and verifier see the same kernel, only the order codegen renders differs.
Other assigns stay at the end of their region.
"""

from __future__ import annotations

import dataclasses

from argus.ir import ops as O
from argus.ir.core import Kernel, Region
from argus.ir.types import TileType

POINTWISE = (O.Elementwise, O.Convert, O.TileSlice, O.ExpandDims)


def _reads_partial(vid: int, defs: dict, partials: set[int]) -> bool:
    """The value `vid`'s pointwise operand tree (ops of this region) reads a wgmma
    accumulator of this region."""
    todo, seen = [vid], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in partials:
            return True
        op = defs.get(v)
        if isinstance(op, POINTWISE):
            todo += [a.id for a in op.operands()]
    return False


def _region(region: Region) -> Region:
    ops = []
    for op in region.ops:
        subs = {f.name: _region(getattr(op, f.name)) for f in op.spec_fields()
                if isinstance(getattr(op, f.name), Region)}
        ops.append(dataclasses.replace(op, **subs) if subs else op)
    defs = {r.id: op for op in ops for r in op.results()}
    # fresh partials: wgmma accumulators made in this region (scale-d = 0 zero tiles)
    fresh = {op.result.id for op in ops if isinstance(op, O.Full) and op.scale_d_zero}
    partials = {o.acc.id for op in ops for o in op.walk()
                if isinstance(o, O.Wgmma) and o.acc.id in fresh}
    if not partials:
        return Region(tuple(ops))
    j = 0
    while j < len(ops):
        op = ops[j]
        src = getattr(op, "src", None)
        if not (isinstance(op, O.Assign) and isinstance(op.dst.type, TileType)
                and isinstance(defs.get(src.id), POINTWISE)
                and _reads_partial(src.id, defs, partials)):
            j += 1
            continue
        at = next(i for i, o in enumerate(ops) if src in o.results())
        between = ops[at + 1:j]
        touched = {v.id for o in between for x in o.walk()
                   for v in (*x.operands(), *x.results())}
        # only across a later wgmma issue: what the move is for (the partial retired before
        # the next one is made); other orders are left as the DSL wrote them (FlashAttention's
        # overlapped softmax relies on its updates staying behind the next wgmma)
        issues = any(isinstance(x, O.Wgmma) for o in between for x in o.walk())
        if issues and op.dst.id not in touched:
            ops[at + 1:j + 1] = [op, *between]
        j += 1
    return Region(tuple(ops))


def run(kernel: Kernel) -> Kernel:
    return dataclasses.replace(kernel, body=_region(kernel.body))
