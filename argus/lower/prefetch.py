"""Pass: global tile loads in a runtime loop are issued one iteration ahead (register double
buffering), so their latency overlaps the previous iteration's work.

A loop that loads a block, reduces it across the CTA (shuffles, a shared-memory exchange and
barriers) and only then loads the next block leaves the memory system idle during every
reduction; with several blocks per row a looped softmax ran at 67-90% of the copy bandwidth
where the one-block form ran at 93% (docs/perf/core2.md). This pass rewrites

    for j in range(start, stop, step):              x0 = load(X, offsets(start))
        x = load(X, offsets(j))               =>    var xv = x0
        ... uses x ...                              for j in range(start, stop, step):
                                                        xn = load(X, offsets(j + step))
                                                        ... uses xv ...
                                                        assign xv = xn

as explicit IR (`var` / `assign`, printed, verified and rendered like any loop-carried tile).
Legal for a load at the top level of the loop body whose offsets are computed from values
defined before the loop and the loop variable by constants and scalar arithmetic only (no
loop-carried scalar, no load), into a tensor that nothing in the loop stores to (parameters
do not alias: the kernel's pointers are __restrict__). The extra load past the last
iteration, and the first one when the loop runs no iteration, are bounds-checked like every
load: they read in-bounds memory or nothing, and their values are never used.

Not applied inside warp roles (warp-specialized schedules place their own loads and budget
their registers), and a loop prefetches at most MAX_PREFETCH_REGS registers per thread.
"""

from __future__ import annotations

import dataclasses
import itertools

from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value, map_values
from argus.ir.types import TileType
from argus.target import register_layouts as RL

# registers per thread a loop may hold for its next iteration's loads: 16 f32 = 64 bytes in
# flight per thread, enough to cover the latency; a wider block (the looped softmax at BN 8192
# holds 32 registers per load) already has that many bytes in flight, and doubling its
# registers would cost occupancy
MAX_PREFETCH_REGS = 16


def run(kernel: Kernel) -> Kernel:
    ids = itertools.count(1 + max([r.id for op in kernel.walk() for r in op.results()] +
                                  [p.value.id for p in kernel.params] + [0]))
    threads = kernel.attr("threads", 128)
    return dataclasses.replace(kernel, body=_region(kernel.body, ids, threads))


def _region(region: Region, ids, threads: int) -> Region:
    out: list[O.Op] = []
    for op in region.ops:
        if isinstance(op, O.RoleOp):
            out.append(op)
            continue
        subs = {f.name: _region(getattr(op, f.name), ids, threads) for f in op.spec_fields()
                if isinstance(getattr(op, f.name), Region)}
        if subs:
            op = dataclasses.replace(op, **subs)
        out.extend(_pipeline(op, ids, threads) if isinstance(op, O.For) else [op])
    return Region(tuple(out))


def _pipeline(loop: O.For, ids, threads: int) -> list[O.Op]:
    body = list(loop.body.ops)
    in_body = {r.id for op in loop.body.walk() for r in op.results()}
    carried = {op.dst.id for op in loop.body.walk() if isinstance(op, O.Assign)}
    stored = {op.tensor.id for op in loop.body.walk() if isinstance(op, (O.Store, O.TmaStore))}
    top = {r.id: k for k, op in enumerate(body) for r in op.results()}
    chosen: list[tuple[int, list[int]]] = []
    budget = MAX_PREFETCH_REGS
    for k, op in enumerate(body):
        if not isinstance(op, O.Load) or op.tensor.id in stored:
            continue
        regs = _regs_per_thread(op.result.type, threads)
        if regs is None or regs > budget:
            continue
        slice_ = _offset_slice(op.offsets, body, top, in_body, carried, loop.var)
        if slice_ is None:
            continue
        budget -= regs
        chosen.append((k, slice_))
    if not chosen:
        return [loop]

    def clone(indices: list[int], mapping: dict[int, Value]) -> list[O.Op]:
        out = []
        for k in indices:
            for r in body[k].results():
                mapping[r.id] = Value(next(ids), r.type, r.hint)
            out.append(map_values(body[k], lambda v: mapping.get(v.id, v)))
        return out

    before: list[O.Op] = []
    nxt = Value(next(ids), loop.var.type, "next")
    step_ops = {chosen[0][0]: [O.Arith(nxt, "add", loop.var, loop.step, loc=loop.loc)]}
    current: dict[int, Value] = {}   # a load's result -> the variable holding this block
    last: list[O.Op] = []
    for k, slice_ in chosen:
        load = body[k]
        first = clone(slice_ + [k], {loop.var.id: loop.start})
        var = Value(next(ids), load.result.type, load.result.hint)
        before += first + [O.Var(var, first[-1].result, loc=load.loc)]
        ahead = clone(slice_ + [k], {loop.var.id: nxt})
        step_ops.setdefault(k, []).extend(ahead)
        current[load.result.id] = var
        last.append(O.Assign(var, ahead[-1].result, loc=load.loc))
    replaced = {k for k, _ in chosen}
    new_body: list[O.Op] = []
    for k, op in enumerate(body):
        new_body += step_ops.get(k, [])   # the next block's load where this one's was
        if k not in replaced:
            new_body.append(map_values(op, lambda v: current.get(v.id, v)))
    new_body += last
    return before + [dataclasses.replace(loop, body=Region(tuple(new_body)))]


def _regs_per_thread(t, threads: int) -> int | None:
    if not isinstance(t, TileType) or t.layout not in ("", "blocked"):
        return None
    try:
        return RL.build(t.layout or "blocked", tuple(t.shape), threads).nregs
    except ValueError:
        return None


def _offset_slice(offsets, body, top, in_body, carried, var: Value) -> list[int] | None:
    """Indices (in body order) of the top-level body ops that compute `offsets` from the loop
    variable and values defined before the loop, or None when another value is involved."""
    need: set[int] = set()
    todo = list(offsets)
    while todo:
        v = todo.pop()
        if v.id == var.id:
            continue
        if v.id in carried:
            return None   # a loop-carried scalar: its next value is not known yet
        if v.id not in in_body:
            continue      # defined before the loop: the same in every iteration
        k = top.get(v.id)
        if k is None or not isinstance(body[k], (O.Const, O.Arith)):
            return None
        if k not in need:
            need.add(k)
            todo += list(body[k].operands())
    return sorted(need)
