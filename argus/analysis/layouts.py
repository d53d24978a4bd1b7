"""Layout inference: decide how each register tile is spread over the threads of its group.

The only analysis that edits the kernel: it sets TileType.layout (a name that
argus.target.register_layouts.build turns into a RegisterLayout) and inserts explicit
`convert_layout` ops where an op needs an operand in a layout it does not have. Rules:
- anchored tiles take their layout from where they come from: a wgmma accumulator (and a
  register A operand loaded from memory) is "wgmma_acc" (INVARIANTS.md §2.1), a global load
  is "blocked", ldmatrix gives the accumulator fragment, a reduction gives the slice of its
  source along the axis (so a row statistic of an accumulator stays in the accumulator's
  threads), slices / conversions / expand_dims follow their source, an elementwise result
  takes the layout of its full-shape operands (the accumulator's when one is; "rows" when its
  only anchored operands are gathered rows broadcast along other dims), and a variable
  takes the layout of what is assigned to it; a gather is "rows" (whole rows per thread: each
  thread computes its own elements' addresses, and a store of whole rows is a few wide
  accesses a thread), or "blocked" when its dim 0 does not split over the threads;
- flexible tiles (constants `full`/`zeros`, `arange` index tiles, rank-1 global loads,
  pointwise math over only those, and variables only ever given such tiles) adopt whatever
  layout their first user needs: the user's layout sliced along the dims they broadcast over.
  A flexible tile no user constrains is "blocked". A rank-1 load is a vector broadcast
  against a tile (a per-row scale of an accumulator, `acc * scale[:, None]`): loaded in the
  accumulator's slice, each thread reads the few elements it combines, instead of a blocked
  load and a conversion through shared memory;
- a 32-bit shared-memory read (`ag.load_shared`, the ldmatrix op of an f32 view) is flexible
  too, and so is a one-wide window of it (TileSlice): the read takes the window's layout
  widened along the sliced axis (RL.widen), so the window needs no code;
- a 2-d power-of-two tile stored transposed (ag.store(transposed=True), not an accumulator)
  is in V x V blocks a thread (`_vblocks`): the global loads that reach it through pointwise
  ops are loaded so, any other source is converted (through a buffer padded one element a
  row, ConvertLayout.pad), and codegen stores the blocks' columns as rows of the transpose;
- then every operand that cannot broadcast into its user's layout in the same thread
  (RegisterLayout.broadcast_map) gets a `convert_layout` into the layout it needs.
Errors name the op, the line and why.
"""

from __future__ import annotations

import dataclasses
import itertools

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value, map_kernel_values
from argus.ir.types import TileType
from argus.target import register_layouts as RL

BLOCKED, WGMMA_ACC = "blocked", "wgmma_acc"

_FLEXIBLE_SOURCES = (O.Full, O.Arange)


def infer_layouts(kernel: Kernel) -> Kernel:
    threads = _group_threads(kernel)
    acc_ids = {op.acc.id for op in kernel.walk() if isinstance(op, O.Wgmma)}
    # a register A operand loaded from global memory is loaded straight into the A fragment
    # (the accumulator pattern, target/fragments.py wgmma_a_coord): no conversion
    a_ids = {op.a.id for op in kernel.walk() if isinstance(op, O.Wgmma) and op.a_in_registers}
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    # ... also through column windows and conversions of it (Q's 64-column slices for a
    # head dim of 128): the load itself is in the fragment, the windows follow it
    for vid in list(a_ids):
        op = defs.get(vid)
        while isinstance(op, (O.TileSlice, O.Convert)):
            a_ids.add(op.src.id)
            op = defs.get(op.src.id)
    flexible = _flexible(kernel, acc_ids | a_ids)
    layout: dict[int, str] = {}
    wide = _transposed_sources(kernel, defs, acc_ids | a_ids)
    ops = list(kernel.walk())
    # A fixpoint: layouts are only ever added (a conflicting one is an error), so every round
    # that changes something places at least one more tile; more rounds than tiles cannot be.
    for _ in range(len(ops) + 1):
        before = dict(layout)
        _forward(ops, layout, acc_ids, a_ids, flexible, threads, wide)
        _backward(ops, layout, flexible, threads)
        if layout == before:
            break
    else:
        raise CompileError(f"layout inference of kernel {kernel.name} did not settle (an "
                           f"internal error: please report it with the kernel)", None)
    for op in ops:  # flexible tiles no user constrains
        if isinstance(op, (O.Reduce, O.Scan)):
            continue  # the slice of its source's layout, which this loop or _forward sets
        for r in op.results():
            if isinstance(r.type, TileType) and r.id not in layout:
                layout[r.id] = BLOCKED
    _forward(ops, layout, acc_ids, a_ids, flexible, threads, wide)

    def retype(v: Value) -> Value:
        if isinstance(v.type, TileType):
            lay = layout.get(v.id, BLOCKED)
            return Value(v.id, TileType(v.type.dtype, v.type.shape, lay), v.hint)
        return v

    out = map_kernel_values(kernel, retype)
    out = _insert_conversions(out, threads, defs)
    return out


# ----------------------------------------------------------------------------- helpers


def _group_threads(kernel: Kernel) -> dict[int, int]:
    """Op id() -> the threads of the group that executes it (128 inside a role)."""
    out: dict[int, int] = {}
    cta = kernel.attr("threads", 128)
    for top in kernel.body.ops:
        n = 128 if isinstance(top, O.RoleOp) else cta
        for op in top.walk():
            out[id(op)] = n
    return out


def _flexible(kernel: Kernel, pinned: set[int]) -> set[int]:
    """Tiles whose layout their users choose: constants, index tiles, and pointwise math,
    expand_dims and conversions of only those."""
    flex: set[int] = set()
    users: dict[int, int] = {}
    reads: dict[int, int] = {}   # uses other than as the variable an assign overwrites
    smem_reads: set[int] = set()  # 32-bit shared-memory reads and windows of them
    var_ids = {op.result.id for op in kernel.walk() if isinstance(op, O.Var)}
    for op in kernel.walk():
        for a in op.operands():
            users[a.id] = users.get(a.id, 0) + 1
            # a variable copied into another one (a value carried out of a pipeline step and
            # then out of the loop: var inside var) is not read by the copy: the two take one
            # layout (Assign's rules), so the copy puts no demand of its own on it
            if not (isinstance(op, O.Assign) and (a is op.dst or a.id in var_ids)):
                reads[a.id] = reads.get(a.id, 0) + 1
    for op in kernel.walk():
        if isinstance(op, _FLEXIBLE_SOURCES) and op.result.id not in pinned:
            flex.add(op.result.id)
        elif isinstance(op, O.Load) and len(op.result.type.shape) == 1 and \
                op.result.id not in pinned and users.get(op.result.id, 0) == 1:
            # a vector with one user: loaded in whatever layout that user needs (with two,
            # e.g. ids[:, None] and ids[None, :], no one layout serves both: it stays blocked
            # and each use converts)
            flex.add(op.result.id)
        elif isinstance(op, O.LdMatrix) and op.result.type.dtype.bits == 32 and \
                op.result.id not in pinned:
            # a 32-bit shared-memory read (ag.load_shared: block scales) is read in whatever
            # layout its user needs, as a rank-1 global load
            flex.add(op.result.id)
            smem_reads.add(op.result.id)
        elif isinstance(op, O.TileSlice) and op.src.id in smem_reads and \
                op.result.id not in pinned:
            # a window of such a read (its first column: a TMA box is at least 16 bytes wide)
            flex.add(op.result.id)
            smem_reads.add(op.result.id)
        elif isinstance(op, (O.Elementwise, O.ExpandDims, O.Convert)):
            tiles = [a for a in op.operands() if isinstance(a.type, TileType)]
            if tiles and all(a.id in flex for a in tiles) and op.result.id not in pinned:
                flex.add(op.result.id)
        elif isinstance(op, O.Var) and op.init.id in flex and op.result.id not in pinned and \
                reads.get(op.result.id, 0) <= 1:
            # a prefetched vector carried to the next iteration (read once, like a vector load)
            flex.add(op.result.id)
    # a variable assigned from an anchored tile is anchored
    for op in kernel.walk():
        if isinstance(op, O.Assign) and op.src.id not in flex:
            flex.discard(op.dst.id)
    return flex


def _build(name: str, t: TileType, threads: int, op) -> RL.RegisterLayout:
    try:
        return RL.build(name, tuple(t.shape), threads)
    except ValueError as e:
        raise CompileError(f"layout inference: `{op.NAME}` needs a {t.dtype.name} "
                           f"{'x'.join(map(str, t.shape))} tile in layout {name}, which does "
                           f"not exist over {threads} threads: {e}", op.loc,
                           fix="use tile extents that are multiples of the group's threads or "
                               "powers of two") from None


def _vblocks(t: TileType, threads: int, shared_source: bool = False) -> str:
    """The layout of a 2-d tile that is stored transposed: vblocks(V, run) (RL.vblocks), V x V
    blocks a thread with V the elements of 16 bytes (fewer where the tile has fewer blocks
    than `threads`; at most its smaller extent), so its rows load and its columns store in
    16-byte chunks, and `run` threads stacked along dim 0 first, so a warp's store writes runs
    of 64 bytes of each destination row (two full 32-byte sectors) while its loads read rows
    of 128 bytes or more.

    `shared_source` (a tile staged in shared memory and read back, ag.load_shared): V = 1 and
    32 threads along dim 0, so each warp store writes one contiguous run of 32 elements (128
    bytes for f32) of a destination row whatever the row's alignment: rows 8 bytes off a
    16-byte boundary (an NCHW result of Q = 2 mod 4 floats) would fail every 16-byte chunk's
    alignment test, and 8-byte halves spread over the row touch 9 sectors a store. The reads
    are per element either way (32 consecutive elements of one row a warp: conflict-free)."""
    if shared_source:
        run = max(1, min(32, t.shape[0]))
        return f"vblocks(1,{run})"
    vec = max(1, min(16 // max(1, t.dtype.bytes), *t.shape))
    # no thread without a block of its own (a replicated block is loaded and stored twice)
    while vec > 1 and (t.shape[0] // vec) * (t.shape[1] // vec) < threads:
        vec //= 2
    run = max(1, min(64 // (vec * t.dtype.bytes), t.shape[0] // vec))
    return f"vblocks({vec},{run})"


def _pow2_2d(t: TileType) -> bool:
    return len(t.shape) == 2 and all(n > 0 and n & (n - 1) == 0 for n in t.shape)


def _transposed_sources(kernel: Kernel, defs, pinned: set[int]) -> set[int]:
    """Global loads and 32-bit shared-memory reads (ag.load_shared) of 2-d power-of-two tiles
    that reach a transposed store of a register tile (not a wgmma accumulator) through
    pointwise ops and conversions only (round_nhwc's load -> round_tf32 -> store; the conv
    NCHW epilogue's staged tile read back, argus/kernels/conv.py NchwStaging): loaded in the
    store's layout (`_vblocks`), so neither side moves data between threads. A chain that
    meets an accumulator keeps the defaults."""
    out: set[int] = set()
    for st in kernel.walk():
        if not (isinstance(st, O.Store) and st.transposed and _pow2_2d(st.value.type)):
            continue
        found, todo, ok = [], [st.value], True
        while todo and ok:
            v = todo.pop()
            op = defs.get(v.id)
            if v.id in pinned or isinstance(op, O.Wgmma) or \
                    (isinstance(op, O.LdMatrix) and op.result.type.dtype.bits != 32):
                ok = False
            elif isinstance(op, (O.Load, O.LdMatrix)):
                found.append(v.id)
            elif isinstance(op, (O.Elementwise, O.Convert)):
                todo.extend(a for a in op.operands() if isinstance(a.type, TileType)
                            and a.type.shape == v.type.shape)
        if ok:
            out.update(found)
    return out


def _gather_layout(t: TileType, threads: int) -> str:
    """"rows" where dim 0 splits over the threads (RL.rows), else "blocked"."""
    try:
        RL.rows(tuple(t.shape), threads)
    except ValueError:
        return BLOCKED
    return "rows"


def _rows_broadcast(part, res: TileType, layout, threads: int) -> bool:
    """Whether an elementwise result whose anchored operands are all "rows" tiles broadcast
    along dims other than dim 0 (a gathered [R, 1, G] shifted by a [1, F, 1] count) stays
    "rows": each thread already holds its rows' elements, and the broadcast repeats them in
    the same thread (no conversion through shared memory into a blocked result)."""
    return all(layout[a.id] == "rows" and a.type.shape[0] == res.shape[0] for a in part) and \
        _gather_layout(res, threads) == "rows"


def _slice_name(name: str, src: TileType, axis: int, threads: int, op) -> str:
    return RL.slice_(_build(name, src, threads, op), axis).name


def _set(layout: dict[int, str], v: Value, name: str, op, why: str) -> None:
    old = layout.get(v.id)
    if old is not None and old != name:
        raise CompileError(f"layout inference: {op.NAME} at {op.loc} gives tile {v} layout "
                           f"{name} ({why}) but it already has {old}", op.loc,
                           fix="keep wgmma accumulators and loaded tiles in separate variables, "
                               "or convert one explicitly")
    layout[v.id] = name


def _forward(ops, layout, acc_ids, a_ids, flexible, threads, wide=frozenset()) -> None:
    for op in ops:
        n = threads.get(id(op), 128)
        res = op.results()[0] if op.results() else None
        if isinstance(op, O.Full) and (op.result.id in acc_ids):
            _set(layout, op.result, WGMMA_ACC, op, "wgmma accumulates into it")
        elif isinstance(op, O.Load) and op.result.id in wide:
            _set(layout, op.result, _vblocks(op.result.type, n), op,
                 "a global load a transposed store writes: 16-byte blocks a thread")
        elif isinstance(op, O.Load) and op.result.id not in flexible:
            acc = op.result.id in acc_ids | a_ids
            _set(layout, op.result, WGMMA_ACC if acc else BLOCKED, op,
                 "a register wgmma operand" if acc else "a global load")
        elif isinstance(op, O.LdMatrix) and op.result.id in wide:
            _set(layout, op.result, _vblocks(op.result.type, n, shared_source=True), op,
                 "a shared-memory read a transposed store writes: runs of a destination row "
                 "a warp")
        elif isinstance(op, O.LdMatrix) and op.result.id not in flexible:
            _set(layout, op.result, WGMMA_ACC, op, "the m8n8.x4 fragment (§2.4)")
        elif isinstance(op, (O.Gather, O.SmemGather)):
            _set(layout, op.result, _gather_layout(op.result.type, n), op, "a gather")
        elif isinstance(op, (O.TileSlice, O.Convert)) and op.src.id in layout:
            if res.id not in flexible or res.id not in layout:
                layout.setdefault(res.id, layout[op.src.id])
        elif isinstance(op, O.Reduce) and op.src.id in layout and res.id not in layout:
            layout[res.id] = _slice_name(layout[op.src.id], op.src.type, op.axis, n, op)
        elif isinstance(op, O.Scan) and op.src.id in layout and res.id not in layout:
            # a scan keeps its source's layout; its total is the slice, as a reduction's
            layout[res.id] = layout[op.src.id]
            layout[op.total.id] = _slice_name(layout[op.src.id], op.src.type, op.axis, n, op)
        elif isinstance(op, O.ExpandDims) and op.src.id in layout and res.id not in layout:
            layout[res.id] = RL.expand(_build(layout[op.src.id], op.src.type, n, op),
                                       op.axis).name
        elif isinstance(op, O.Elementwise) and res.id not in layout:
            full = [a for a in op.args if isinstance(a.type, TileType)
                    and a.type.shape == res.type.shape and a.id in layout
                    and a.id not in flexible]
            lays = [layout[a.id] for a in full]
            if WGMMA_ACC in lays:
                layout[res.id] = WGMMA_ACC
            elif lays:
                layout[res.id] = lays[0]
            elif res.id in a_ids:
                # pointwise math of flexible reads that is a register wgmma A (a tf32 A read
                # from shared memory and rounded): the A fragment, and the reads follow it
                layout[res.id] = WGMMA_ACC
            elif res.id not in flexible:
                # only broadcast operands are anchored: the result takes a layout they
                # broadcast into when one exists (a row statistic of an accumulator)
                part = [a for a in op.args if isinstance(a.type, TileType) and a.id in layout
                        and a.id not in flexible]
                if part and all(layout[a.id].startswith("slice(wgmma_acc") for a in part):
                    layout[res.id] = WGMMA_ACC if res.type.shape[0] == 64 and \
                        len(res.type.shape) == 2 and res.type.shape[1] % 8 == 0 else BLOCKED
                elif part and _rows_broadcast(part, res.type, layout, n):
                    layout[res.id] = "rows"
        elif isinstance(op, O.Var) and op.init.id in layout and res.id not in layout:
            layout[res.id] = layout[op.init.id]
        elif isinstance(op, O.Assign):
            if op.src.id in layout and op.dst.id not in layout:
                layout[op.dst.id] = layout[op.src.id]
            elif op.dst.id in layout and op.src.id not in layout and op.src.id in flexible:
                layout[op.src.id] = layout[op.dst.id]


def _backward(ops, layout, flexible, threads) -> None:
    """Flexible tiles adopt the layout their first user needs (walk users last to first, so
    the earliest user's demand is the one that stays)."""
    demands: dict[int, str] = {}
    for op in reversed(ops):
        n = threads.get(id(op), 128)
        res = op.results()[0] if op.results() else None
        if res is not None and res.id in flexible and res.id in demands:
            layout[res.id] = demands[res.id]
        if isinstance(op, O.Elementwise) and res.id in layout:
            rl = _build(layout[res.id], res.type, n, op)
            for a in op.args:
                if isinstance(a.type, TileType) and a.id in flexible:
                    demands[a.id] = RL.broadcast_layout(rl, a.type.shape).name
        elif isinstance(op, O.ExpandDims) and res.id in layout and op.src.id in flexible:
            rl = _build(layout[res.id], res.type, n, op)
            demands[op.src.id] = RL.squeeze(rl, op.axis).name
        elif isinstance(op, O.Convert) and res.id in layout and op.src.id in flexible:
            demands[op.src.id] = layout[res.id]
        elif isinstance(op, (O.Gather, O.SmemGather)) and res.id in layout:
            # an index tile is read in the gather's threads: each register its own element's
            # index (an arange's column index a compile-time constant there)
            rl = _build(layout[res.id], res.type, n, op)
            for ix in op.indices:
                if isinstance(ix.type, TileType) and ix.id in flexible:
                    demands[ix.id] = RL.broadcast_layout(rl, ix.type.shape).name
        elif isinstance(op, O.TileSlice) and res.id in layout and op.src.id in flexible and \
                res.type.shape[op.axis] == 1:
            # a one-wide window of a flexible read: the read holds the window's layout grown
            # along the axis in registers, so the window is a register view (no code)
            rl = _build(layout[res.id], res.type, n, op)
            demands[op.src.id] = RL.widen(rl, op.axis, op.src.type.shape[op.axis]).name
        elif isinstance(op, O.Assign) and op.dst.id in layout and op.src.id in flexible:
            demands[op.src.id] = layout[op.dst.id]
        elif isinstance(op, O.Var) and res.id in layout and op.init.id in flexible:
            demands[op.init.id] = layout[res.id]
        elif isinstance(op, O.Reduce) and op.src.id in flexible and op.src.id not in demands:
            demands[op.src.id] = BLOCKED
        elif isinstance(op, O.Scan):
            if op.src.id in flexible and op.src.id not in demands:
                demands[op.src.id] = BLOCKED
            if op.init.id in flexible and op.src.id in layout:
                demands[op.init.id] = _slice_name(layout[op.src.id], op.src.type, op.axis, n,
                                                  op)


# ----------------------------------------------------------------------------- conversions


def _needs(op, threads: int):
    """(operand, layout name it needs) for each operand of `op` that must change layout."""
    out = []
    if isinstance(op, O.Elementwise):
        res = RL.build(op.result.type.layout, op.result.type.shape, threads)
        for a in op.args:
            if not isinstance(a.type, TileType):
                continue
            have = RL.build(a.type.layout, a.type.shape, threads)
            if have.broadcast_map(res) is None:
                out.append((a, RL.broadcast_layout(res, a.type.shape).name,
                            f"`{op.fn}` combines it with a {op.result.type.layout} tile"))
    elif isinstance(op, (O.Gather, O.SmemGather)):
        res = RL.build(op.result.type.layout, op.result.type.shape, threads)
        for ix in op.indices:
            if isinstance(ix.type, TileType) and \
                    RL.build(ix.type.layout, ix.type.shape, threads).broadcast_map(res) is None:
                out.append((ix, RL.broadcast_layout(res, ix.type.shape).name,
                            "a gather reads its indices in its own threads"))
    elif isinstance(op, (O.Assign,)) and isinstance(op.dst.type, TileType):
        if op.src.type.layout != op.dst.type.layout:
            out.append((op.src, op.dst.type.layout, "it is assigned to a tile in that layout"))
    elif isinstance(op, O.Convert) and op.src.type.layout != op.result.type.layout:
        out.append((op.src, op.result.type.layout, "its conversion result has that layout"))
    elif isinstance(op, O.Reduce):
        have = RL.build(op.src.type.layout, op.src.type.shape, threads)
        try:
            plan = have.reduction_plan(op.axis)
            if plan.result.broadcast_map(RL.build(op.result.type.layout, op.result.type.shape,
                                                  threads)) is None:
                raise ValueError("the result layout is not the source's slice")
        except ValueError:
            out.append((op.src, BLOCKED, f"{op.fn} along axis {op.axis} needs it"))
    elif isinstance(op, O.Scan):
        have = RL.build(op.src.type.layout, op.src.type.shape, threads)
        try:
            plan = have.scan_plan(op.axis)
        except ValueError:
            out.append((op.src, BLOCKED, f"a {op.fn} scan along axis {op.axis} needs it"))
        else:
            init = RL.build(op.init.type.layout, op.init.type.shape, threads)
            if init.broadcast_map(plan.result) is None:
                out.append((op.init, plan.result.name, "a scan starts from its source's slice"))
    elif isinstance(op, O.Store) and op.transposed and _pow2_2d(op.value.type) and \
            op.value.type.layout not in (WGMMA_ACC, "wgmma_a"):
        # a register tile stored transposed: in V x V blocks a thread, whose columns are
        # V-wide chunks of the destination's rows (codegen/cuda/memory.py `_transposed_info`)
        want = _vblocks(op.value.type, threads)
        # any V x V blocks: a shared-memory read placed with its own (`_vblocks`) is stored
        # as is (codegen/cuda/memory.py `_transposed_info` stores any layout)
        if not op.value.type.layout.startswith("vblocks("):
            out.append((op.value, want, "a transposed store writes rows of its transpose"))
    elif isinstance(op, O.StMatrix) and not op.plain and op.src.type.layout != WGMMA_ACC:
        out.append((op.src, WGMMA_ACC, "stmatrix stores the accumulator fragment"))
    elif isinstance(op, O.Wgmma) and op.a_in_registers and op.a.type.layout != WGMMA_ACC:
        out.append((op.a, WGMMA_ACC, "a register wgmma A operand is the A fragment"))
    return out


def _insert_conversions(kernel: Kernel, threads: dict[int, int], defs) -> Kernel:
    ids = itertools.count(1 + max([r.id for op in kernel.walk() for r in op.results()] +
                                  [p.value.id for p in kernel.params] + [0]))
    # threads by op identity do not survive retyping: recompute per top-level op
    cta = kernel.attr("threads", 128)

    def region(r: Region, n: int) -> Region:
        out = []
        for op in r.ops:
            nn = 128 if isinstance(op, O.RoleOp) else n
            if op.regions():
                op = op.replace(**{f.name: region(getattr(op, f.name), nn)
                                   for f in op.spec_fields()
                                   if isinstance(getattr(op, f.name), Region)})
            subst = {}
            for v, name, why in _needs(op, nn):
                if v.id in subst:
                    continue
                t = TileType(v.type.dtype, v.type.shape, name)
                try:
                    RL.build(name, t.shape, nn)
                except ValueError as e:
                    raise CompileError(f"layout inference: {op.NAME} at {op.loc} needs tile {v} "
                                       f"in layout {name} ({why}), which does not exist: {e}",
                                       op.loc) from None
                nv = Value(next(ids), t, v.hint)
                # a conversion into V x V blocks reads V rows of the buffer a thread, the
                # threads of a warp `run` blocks apart down the rows first: with a
                # power-of-two pitch those rows share banks; one element of padding a row
                # shifts each by a bank
                pad = 1 if name.startswith("vblocks(") else 0
                out.append(O.ConvertLayout(nv, v, pad=pad, loc=op.loc))
                subst[v.id] = nv
            if subst:
                op = _replace_operands(op, subst)
            out.append(op)
        return Region(tuple(out))

    return dataclasses.replace(kernel, body=region(kernel.body, cta))


def _replace_operands(op, subst: dict[int, Value]):
    """`op` with operands (not results, not nested regions) replaced."""
    changes = {}
    for f in op.spec_fields():
        if f.name in op.RESULTS:
            continue
        x = getattr(op, f.name)
        if isinstance(x, Value) and x.id in subst:
            changes[f.name] = subst[x.id]
        elif isinstance(x, tuple) and any(isinstance(i, Value) and i.id in subst for i in x):
            changes[f.name] = tuple(subst.get(i.id, i) if isinstance(i, Value) else i for i in x)
    # an assignment's destination is the variable itself, never converted
    if isinstance(op, O.Assign):
        changes.pop("dst", None)
    return op.replace(**changes)
