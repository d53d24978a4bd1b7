"""Pass: global tile loads in a runtime loop are software-pipelined through a ring of `depth`
register blocks, so `depth` blocks are in flight while one is being worked on.

A loop that loads a block, reduces it across the CTA (shuffles, a shared-memory exchange and
barriers) and only then loads the next block leaves the memory system idle during every
reduction; with several blocks per row a looped softmax ran at 67-90% of the copy bandwidth
where the one-block form ran at 93% (docs/perf/core2.md). With d = depth and s = step:

    for j in range(start, stop, s):           b_k = load(offsets(start + k*s))   k < d  (var)
        x = load(offsets(j))            =>    for j in range(start, stop, s):
        ... uses x ...                            t = load(offsets(j + d*s))
                                                  ... uses b_0 ...
                                                  assign b_0 = b_1, ..., b_{d-1} = t

as explicit IR (`var` / `assign`, printed, verified and rendered like any loop-carried tile;
the verifier knows each b_k exactly per iteration: verify/transfer/control.py).

The rotation alone would not work on the GPU: the copy b_{d-1} = t at the end of an iteration
reads registers whose load is still in flight, so the machine waits there for the load it has
just issued (the SASS of the one-block-ahead form showed the MOVs of the loaded registers at
the loop's back edge). So the pass also sets the loop's `unroll` field to depth + 1:
codegen renders the body depth + 1 times per trip, the index advanced and tested between the
copies (the same iterations in the same order), and over depth + 1 consecutive iterations
every `assign` of the ring is a renaming, so the CUDA compiler keeps each block in the
registers its load writes (modulo variable expansion); the SASS of that form has no copy of
a loaded register.

Legal for a load at the top level of the loop body whose offsets are computed from values
defined before the loop and the loop variable by constants and scalar arithmetic only (no
loop-carried scalar, no load), into a tensor that nothing in the loop stores to (parameters
do not alias: the kernel's pointers are __restrict__). The loads past the last iteration (and
the first ones when the loop runs fewer than d iterations) are bounds-checked like every load:
they read in-bounds memory or nothing, and their values are never used.

A load whose offsets do not involve the loop variable (the finished row max a logsumexp's sum
pass reads in every block, KernelBench L2/42, 43, 84, 92) reads the same block in every
iteration: it is hoisted, loaded once before the loop, instead of ringed (a ring of copies of
one block costs `depth` times its registers and a load per iteration for nothing, and the
verifier, which knows each ring block per iteration, would see `depth` different values where
there is one: softmax.stats read exp(x - m) of two iterations as relative to two maxima).

The depth is DEPTH blocks. What the memory system sees is the bytes in flight per SM: CTAs per
SM x threads x depth x registers per block x 4. Measured on the H200 at 8192 x 8192 fp32
(docs/perf/core2.md, scripts/gpu_prefetch_sweep.py), the looped softmax at BN 2048 (8
registers per block) ran at 80.2% of the copy bandwidth without the ring and 83.8 / 88.3 /
88.7 / 72.0% with rings 1 / 2 / 3 / 5 deep (48 / 61 / 64 / 86 registers); at BN 4096 (16
registers per block) at 90.2% without it and 87.9 / 80.2 / 77.6% with rings 1 / 2 / 3 (the
registers cost more CTAs per SM than the blocks add). Hence depth 3 and blocks of at most
MAX_BLOCK_REGS = 8 registers. Not applied inside warp roles
(warp-specialized schedules place their own loads and budget their registers), to loads of more
than MAX_BLOCK_REGS registers per thread per block (together), or to a loop that contains loops
(its inner loops are pipelined; unrolling it would multiply their code).
"""

from __future__ import annotations

import dataclasses
import itertools

from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value, map_values
from argus.ir.types import TileType
from argus.target import register_layouts as RL

# registers per thread of one block of a loop's loads, above which the loop is left alone: a
# wider block already has that many bytes in flight, and a ring of such blocks costs occupancy
# (the looped softmax at BN 4096, 16 registers per block, measured slower with any ring)
MAX_BLOCK_REGS = 8
# blocks in flight ahead of the one being worked on (module docstring); the body is rendered
# DEPTH + 1 times per trip
DEPTH = 3


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
        subs = {f.name: _region(getattr(op, f.name), ids, threads)
                for f in op.spec_fields()
                if isinstance(getattr(op, f.name), Region)}
        if subs:
            op = dataclasses.replace(op, **subs)
        out.extend(_pipeline(op, ids, threads) if isinstance(op, O.For) else [op])
    return Region(tuple(out))


def _pipeline(loop: O.For, ids, threads: int) -> list[O.Op]:
    if any(isinstance(op, O.For) for op in loop.body.walk()):
        return [loop]   # its inner loops are pipelined; unrolling it would multiply their code
    chosen: list[tuple[int, list[int]]] = []
    invariant: list[tuple[int, list[int]]] = []
    regs_per_block = 0
    for k, slice_, regs, varies in _movable(loop, threads):
        if not varies:
            invariant.append((k, slice_))   # the same block every iteration: hoisted
        elif regs_per_block + regs <= MAX_BLOCK_REGS:
            regs_per_block += regs
            chosen.append((k, slice_))
    if not chosen and not invariant:
        return [loop]
    body = list(loop.body.ops)
    gone = {k for k, _ in invariant}
    hoisted, current = _hoist(body, invariant, ids)
    # the hoisted loads' readers read the block loaded before the loop (the loads stay in
    # `body` until they are left out, so the indices of `chosen` still hold)
    body = [op if k in gone else map_values(op, lambda v: current.get(v.id, v))
            for k, op in enumerate(body)]
    if not chosen:
        return hoisted + [dataclasses.replace(loop, body=Region(tuple(
            op for k, op in enumerate(body) if k not in gone)))]
    return hoisted + _ring(loop, body, chosen, DEPTH, ids, drop=gone)


def _movable(loop: O.For, threads: int):
    """(index, offset slice, registers per thread, whether the offsets vary with the loop
    variable) of each top-level load of the body that may move out of its iteration (module
    docstring: a tensor the loop does not store to, offsets from the loop variable and values
    defined before the loop, at most MAX_BLOCK_REGS registers per thread)."""
    body = list(loop.body.ops)
    in_body = {r.id for op in loop.body.walk() for r in op.results()}
    carried = {op.dst.id for op in loop.body.walk() if isinstance(op, O.Assign)}
    stored = {op.tensor.id for op in loop.body.walk() if isinstance(op, (O.Store, O.TmaStore))}
    top = {r.id: k for k, op in enumerate(body) for r in op.results()}
    for k, op in enumerate(body):
        if not isinstance(op, O.Load) or op.tensor.id in stored:
            continue
        regs = _regs_per_thread(op.result.type, threads)
        if regs is None or regs > MAX_BLOCK_REGS:
            continue
        slice_ = _offset_slice(op.offsets, body, top, in_body, carried, loop.var)
        if slice_ is None:
            continue
        varies = any(v.id == loop.var.id for v in op.offsets) or any(
            v.id == loop.var.id for i in slice_ for v in body[i].operands())
        yield k, slice_, regs, varies


def _hoist(body: list[O.Op], invariant: list[tuple[int, list[int]]],
           ids) -> tuple[list[O.Op], dict[int, Value]]:
    """Loop-invariant loads (offsets from values defined before the loop, no loop variable),
    loaded once before the loop: a ring of copies of one block would cost `depth` times its
    registers and a load per iteration for nothing. Like the ring's, the load runs even when
    the loop runs no iteration: it is bounds-checked, and its value is then never used.
    Returns the ops before the loop and load result id -> the hoisted block."""
    out: list[O.Op] = []
    current: dict[int, Value] = {}
    for k, slice_ in invariant:
        ops = _clone(body, slice_ + [k], {}, ids)
        out += ops
        current[body[k].result.id] = ops[-1].result
    return out, current


def _clone(body: list[O.Op], indices: list[int], mapping: dict[int, Value], ids) -> list[O.Op]:
    """Copies of body[indices] with fresh result values (`mapping`: old id -> new value,
    pre-seeded with substitutions such as the loop variable)."""
    out = []
    for k in indices:
        for r in body[k].results():
            mapping[r.id] = Value(next(ids), r.type, r.hint)
        out.append(map_values(body[k], lambda v: mapping.get(v.id, v)))
    return out


def _ring(loop: O.For, body: list[O.Op], chosen: list[tuple[int, list[int]]], depth: int,
          ids, drop: set[int] = frozenset()) -> list[O.Op]:
    """The loop with a ring of `depth` register blocks per chosen load, rendered `depth` + 1
    iterations per trip (module docstring); the body ops at `drop` (hoisted) are left out."""

    def clone(indices: list[int], mapping: dict[int, Value]) -> list[O.Op]:
        return _clone(body, indices, mapping, ids)

    def advance(index: Value, out: list[O.Op]) -> Value:
        nxt = Value(next(ids), index.type, "next")
        out.append(O.Arith(nxt, "add", index, loop.step, loc=loop.loc))
        return nxt

    before: list[O.Op] = []
    first = [loop.start]                    # start + k*step, k < depth: the ring's first blocks
    for _ in range(1, depth):
        first.append(advance(first[-1], before))
    ahead: list[O.Op] = []                  # j + depth*step: the block this iteration issues
    index = loop.var
    for _ in range(depth):
        index = advance(index, ahead)
    step_ops = {chosen[0][0]: ahead}
    current: dict[int, Value] = {}          # a load's result -> the variable holding block j
    rotate: list[O.Op] = []
    for k, slice_ in chosen:
        load = body[k]
        ring = []
        for start in first:
            ops = clone(slice_ + [k], {loop.var.id: start})
            var = Value(next(ids), load.result.type, load.result.hint)
            before += ops + [O.Var(var, ops[-1].result, loc=load.loc)]
            ring.append(var)
        issued = clone(slice_ + [k], {loop.var.id: index})
        step_ops.setdefault(k, []).extend(issued)
        current[load.result.id] = ring[0]
        # in order, so each reads the value it replaces: b_0 = b_1, ..., b_{d-1} = the issued
        rotate += [O.Assign(dst, src, loc=load.loc)
                   for dst, src in zip(ring, ring[1:] + [issued[-1].result])]
    replaced = {k for k, _ in chosen} | set(drop)
    new_body: list[O.Op] = []
    for k, op in enumerate(body):
        new_body += step_ops.get(k, [])   # the block `depth` ahead, issued where this one was
        if k not in replaced:
            new_body.append(map_values(op, lambda v: current.get(v.id, v)))
    new_body += rotate
    return before + [dataclasses.replace(loop, body=Region(tuple(new_body)), unroll=depth + 1)]


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
