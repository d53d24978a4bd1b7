"""The DSL's operations: launch grid, runtime loops and predicates, warp roles, tiles, shared
memory, the mbarrier pipeline, TMA, wgmma, ldmatrix/stmatrix and elementwise math.

Each function checks its arguments at trace time and raises TraceError at the user's line for
shapes that cannot tile, non-uniform guards around warpgroup-wide instructions, and misuse.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Iterator, Sequence

from argus import dtypes
from argus.dtypes import DType
from argus.dsl.carry import CarryScope
from argus.dsl.tracing import current, user_loc
from argus.dsl.pipe import Pipe
from argus.dsl.values import (Scalar, SmemBuffer, SmemView, TensorArg, Tile, as_scalar,
                              const_scalar, elementwise)
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.types import PipeType, ScalarType, SmemType, TileType
from argus.target import exp2_emulation as _exp2_emulation

# ----------------------------------------------------------------------------- launch grid


def grid(*extents, cluster: int | tuple[int, ...] = 1) -> tuple[Scalar, ...]:
    """Declare the launch grid (1 to 3 extents, runtime scalars of shape parameters) and
    return this CTA's program ids. `cluster` groups CTAs into thread-block clusters (an int
    for clusters along x, or a shape); the extents must be multiples of it."""
    ctx = current("ag.grid")
    loc = user_loc()
    if isinstance(cluster, int):
        dims = (cluster, 1, 1)
    else:
        dims = tuple(cluster) + (1,) * (3 - len(cluster))
    if len(dims) != 3 or any(not isinstance(d, int) or d < 1 for d in dims) or \
            dims[0] * dims[1] * dims[2] > 8:
        raise TraceError(f"cluster shape {cluster} must be up to 3 positive ints with at most 8 "
                         f"CTAs (the portable cluster size)", loc)
    if dims != (1, 1, 1) and ctx.cluster != (1, 1, 1) and tuple(ctx.cluster) != dims:
        raise TraceError(f"cluster {dims} here but {ctx.cluster} in @ag.kernel", loc)
    if dims != (1, 1, 1):
        ctx.cluster = dims
    if ctx.grid_declared:
        raise TraceError("ag.grid was called twice", loc, fix="declare the grid once")
    if not 1 <= len(extents) <= 3:
        raise TraceError(f"ag.grid takes 1 to 3 extents, got {len(extents)}", loc)
    if ctx.builder.depth:
        raise TraceError("ag.grid must be called at the top level of the kernel", loc)
    ctx.grid_declared = True
    values = tuple(as_scalar(e).value for e in extents)
    ids = tuple(ctx.builder.fresh(ScalarType(dtypes.i32), "pid") for _ in extents)
    ctx.builder.append(O.GridIds(ids, values, tuple(ctx.cluster), loc=loc))
    return tuple(Scalar(i) for i in ids)


def occupancy(ctas_per_sm: int) -> None:
    """The kernel's occupancy hint: at least `ctas_per_sm` CTAs share an SM (1 to 8; rendered
    `__launch_bounds__(threads, ctas_per_sm)`, so ptxas fits a thread in 65536 / (threads x
    ctas_per_sm) registers at launch). Lowering checks that the roles' registers and the
    shared memory of that many CTAs fit an SM, and refuses the kernel otherwise. Call it once,
    at the top level."""
    ctx = current("ag.occupancy")
    loc = user_loc()
    if isinstance(ctas_per_sm, bool) or not isinstance(ctas_per_sm, int) or \
            not 1 <= ctas_per_sm <= 8:
        raise TraceError(f"ag.occupancy({ctas_per_sm!r}): the minimum CTAs per SM is an int "
                         f"in 1..8", loc, fix="ag.occupancy(2) for two CTAs per SM")
    if ctx.builder.depth:
        raise TraceError("ag.occupancy must be called at the top level of the kernel", loc)
    if ctx.min_ctas_per_sm is not None:
        raise TraceError("ag.occupancy was called twice", loc, fix="state the hint once")
    ctx.min_ctas_per_sm = ctas_per_sm


def cluster_rank() -> Scalar:
    """This CTA's rank in its cluster (0 .. cluster size - 1)."""
    ctx = current("ag.cluster_rank")
    v = ctx.builder.fresh(ScalarType(dtypes.i32), "rank")
    ctx.builder.append(O.ClusterRank(v, loc=user_loc()))
    return Scalar(v)


def cdiv(a, b):
    """Ceiling division, for trace-time ints and runtime scalars alike."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return (as_scalar(a) + b - 1) // b


def scalar(value: int | float | bool, dtype: DType | None = None) -> Scalar:
    """A runtime scalar holding `value` (i32 for ints, f32 for floats unless `dtype` says
    otherwise): a start value that a loop can carry, e.g. `total = ag.scalar(0)`."""
    current("ag.scalar")
    if not isinstance(value, (int, float, bool)):
        raise TraceError(f"ag.scalar takes a Python number, got {type(value).__name__}",
                         user_loc())
    if dtype is not None and dtype.is_float:
        value = float(value)
    return const_scalar(value, dtype)


def thread_index() -> Scalar:
    """This thread's index in the executing group: a non-uniform value."""
    ctx = current("ag.thread_index")
    v = ctx.builder.fresh(ScalarType(dtypes.i32), "tid")
    ctx.builder.append(O.ThreadIndex(v, loc=user_loc()))
    return Scalar(v, uniform=False)


# ----------------------------------------------------------------------------- control flow


def range(start, stop=None, step: int = 1) -> Iterator[Scalar]:  # noqa: A001 - mirrors Python
    """A runtime loop. The body is traced once with a symbolic induction variable; use a
    plain Python `for` to unroll at trace time."""
    ctx = current("ag.range")
    loc = user_loc()
    if stop is None:
        start, stop = 0, start
    if isinstance(step, int) and step <= 0:
        raise TraceError(f"ag.range step must be positive, got {step}", loc)
    start_v, stop_v, step_v = (as_scalar(x).value for x in (start, stop, step))
    var = ctx.builder.fresh(ScalarType(dtypes.i32), "i")
    scope = CarryScope("ag.range loop")
    with ctx.builder.region() as body:
        yield Scalar(var)
    before, ops = scope.close(list(body), loc, induction=(var,))
    for op in before:
        ctx.builder.append(op)
    ctx.builder.append(O.For(var, start_v, stop_v, step_v, Region(tuple(ops)), loc=loc))


@contextlib.contextmanager
def when(cond) -> Iterator[None]:
    """Run the block only where `cond` holds (a runtime predicate)."""
    ctx = current("ag.when")
    loc = user_loc()
    c = as_scalar(cond)
    if not c.uniform:
        ctx.nonuniform_guards += 1
    scope = CarryScope("ag.when block")
    try:
        with ctx.builder.region() as body:
            yield
    finally:
        if not c.uniform:
            ctx.nonuniform_guards -= 1
    before, ops = scope.close(list(body), loc)
    for op in before:
        ctx.builder.append(op)
    ctx.builder.append(O.If(c.value, Region(tuple(ops)), loc=loc))


@contextlib.contextmanager
def elect() -> Iterator[None]:
    """One thread of the CTA runs the block, at the kernel's top level (outside roles): work
    one thread issues for all, such as scalar reads, index math and TMA prefetches before a
    PDL wait (a producer role is elected by lowering, lower/elect.py). Nothing in it may be a
    collective op or a register tile (the verifier's sync.elect); no value it defines is
    used after it."""
    ctx = current("ag.elect")
    loc = user_loc()
    if ctx.builder.depth:
        raise TraceError("ag.elect must be at the top level of the kernel, outside roles and "
                         "blocks", loc, fix="a role that only issues copies is elected by "
                                            "lowering; elsewhere use ag.elect() at the top")
    ctx.nonuniform_guards += 1   # one thread: group-wide ops inside refuse
    scope = CarryScope("ag.elect block")
    try:
        with ctx.builder.region() as body:
            yield
    finally:
        ctx.nonuniform_guards -= 1
    before, ops = scope.close(list(body), loc)
    for op in before:
        ctx.builder.append(op)
    ctx.builder.append(O.Elect(Region(tuple(ops)), threads=1, group=0,
                               note="one thread of the CTA", loc=loc))


@contextlib.contextmanager
def role(name: str, warpgroups: int = 1, regs: int = 0,
         uniform_index: bool = True) -> Iterator[Scalar]:
    """A warp-specialized region for `warpgroups` warpgroups with `regs` registers per thread
    (0 = leave the allocation alone). Yields the warpgroup's index inside the role, warp-uniform
    by default (ptxas keeps what derives from it in uniform registers; `uniform_index=False`
    derives it per thread, for a kernel whose uniform values push it past its registers)."""
    ctx = current("ag.role")
    loc = user_loc()
    if ctx.builder.depth:
        raise TraceError("ag.role must be at the top level of the kernel", loc)
    if name in ctx.roles_seen:
        raise TraceError(f"role {name!r} declared twice", loc)
    if not isinstance(warpgroups, int) or warpgroups < 1:
        raise TraceError(f"role {name!r}: warpgroups must be a positive int", loc)
    if not isinstance(uniform_index, bool):
        raise TraceError(f"role {name!r}: uniform_index must be True or False, got "
                         f"{uniform_index!r}", loc,
                         fix="leave it out (True), or pass False for a kernel that spills "
                             "with the warp-uniform index")
    if regs and (regs % 8 or not 24 <= regs <= 256):
        raise TraceError(f"role {name!r}: regs={regs} is not a multiple of 8 in [24, 256]", loc,
                         fix="setmaxnreg takes multiples of 8 in [24, 256] (PTX ISA, setmaxnreg)")
    ctx.roles_seen.append(name)
    ctx.any_role = True
    index = ctx.builder.fresh(ScalarType(dtypes.i32), "wg")
    ctx.in_role = name
    ctx.role_warpgroups, ctx.ordered_names = warpgroups, set()
    ctx.sections_in_steps, ctx.skipped_pipes = {}, set()
    try:
        with ctx.builder.region() as body:
            yield Scalar(index)
    finally:
        ctx.in_role = None
        ctx.role_warpgroups = 0
    ctx.builder.append(O.RoleOp(index, name, warpgroups, regs, Region(tuple(body)),
                                uniform_index, loc=loc))


@contextlib.contextmanager
def ordered(name: str) -> Iterator[None]:
    """An ordered section: the sections named `name` of this role run one at a time,
    round-robin over its warpgroups (warpgroup 0's first, then warpgroup 1's first, ...,
    then warpgroup 0's second), so one warpgroup's work outside the section (an epilogue, a
    softmax) overlaps the next one's section (its MMAs): ping-pong. Each warpgroup must reach
    the section in its turn (`ag.when(...)` around it may pick turns, e.g. every other unit;
    the verifier proves the turns go round). Values bound inside are visible after it. Inside
    a consume step only where no warpgroup of the role skips that pipeline's steps (each
    consumes every step: the turns then order work within a step, e.g. the two column
    halves of the split fp8 promotion)."""
    ctx = current("ag.ordered")
    loc = user_loc()
    if not isinstance(name, str) or not name:
        raise TraceError(f"ag.ordered needs a section name (a non-empty str), got {name!r}", loc,
                         fix='with ag.ordered("mma"): ...')
    if ctx.in_role is None:
        raise TraceError(f"ordered section {name!r} outside an ag.role: sections take turns "
                         f"among the warpgroups of one role", loc,
                         fix="put it inside `with ag.role(\"consumer\", warpgroups=2) as wg:`")
    if ctx.role_warpgroups < 2:
        raise TraceError(f"ordered section {name!r} in role {ctx.in_role!r} of "
                         f"{ctx.role_warpgroups} warpgroup: there is nobody to take turns with",
                         loc, fix="give the role warpgroups=2 or more, or drop ag.ordered")
    if ctx.ordered_open is not None:
        raise TraceError(f"ordered section {name!r} inside ordered section "
                         f"{ctx.ordered_open!r}: nested turns deadlock when the orders differ",
                         loc, fix="close the outer section first (sections do not nest)")
    if name in ctx.ordered_names:
        raise TraceError(f"ordered section {name!r} appears twice in role {ctx.in_role!r}: "
                         f"the turns of one name are counted at one site", loc,
                         fix="use one `with ag.ordered(...)` per name, or distinct names")
    # inside a consume step the turn is waited for while a slot is held: safe when every
    # warpgroup of the role consumes every step of that pipeline (cooperative consumers: the
    # warpgroup whose turn it is has waited for the same full slot, or will find it full, and
    # needs no slot the waiter holds), unsafe when the role skips steps of it (ping-pong: the
    # turn holder may need a slot only a release of the waiter's frees)
    for consume, pipe in ctx.open_steps:
        if not consume or pipe in ctx.skipped_pipes:
            why = "a produce step" if not consume else \
                "a consume step of a pipeline whose steps this role skips (pipe.skip)"
            raise TraceError(f"ordered section {name!r} inside {why}: waiting for a turn "
                             f"while holding a ring slot can starve the warpgroup whose turn "
                             f"it is", loc,
                             fix="open the section around the pipeline steps (inside a "
                                 "consume step only where every warpgroup consumes every step)")
    if ctx.nonuniform_guards:
        raise TraceError(f"ordered section {name!r} under a condition that differs between "
                         f"threads: the turn barrier is warpgroup-wide", loc,
                         fix="guard it with a condition uniform per warpgroup (e.g. of the "
                             "warpgroup index or a loop index), or none")
    ctx.ordered_names.add(name)
    for _, pipe in ctx.open_steps:
        ctx.sections_in_steps.setdefault(pipe, name)
    ctx.builder.append(O.TurnWait(name, loc=loc))
    ctx.ordered_open = name
    try:
        yield
    finally:
        ctx.ordered_open = None
    ctx.builder.append(O.TurnPass(name, loc=loc))


# ----------------------------------------------------------------------------- tiles


def _check_tile_shape(shape, loc) -> tuple[int, ...]:
    shape = tuple(shape)
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise TraceError(f"tile shape {shape} must be positive trace-time ints", loc)
    return shape


def full(shape, value: float, dtype: DType = dtypes.f32) -> Tile:
    ctx = current("ag.full")
    shape = _check_tile_shape(shape, user_loc())
    v = ctx.builder.fresh(TileType(dtype, shape))
    if dtype.is_float or dtype == dtypes.i1:
        ctx.builder.append(O.Full(v, float(value), loc=user_loc()))
        return Tile(v)
    if not float(value).is_integer():
        raise TraceError(f"ag.full of an {dtype} tile with the value {value!r}", user_loc(),
                         fix="give an integer value, or a float dtype")
    # an integer fill stays an int in the IR: exact at any size (a float is exact to 2^53)
    ctx.builder.append(O.Full(v, int(value), loc=user_loc()))
    return Tile(v, (int(value), int(value)))


def arange(n: int) -> Tile:
    """The i32 index tile [0, 1, ..., n - 1]; reshape with t[:, None] / t[None, :] to build
    row and column indices that broadcast. It costs no registers or memory: every element
    renders as its coordinate in whatever layout its users need."""
    ctx = current("ag.arange")
    loc = user_loc()
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise TraceError(f"ag.arange takes a positive trace-time int, got {n!r}", loc)
    v = ctx.builder.fresh(TileType(dtypes.i32, (n,)))
    ctx.builder.append(O.Arange(v, loc=loc))
    return Tile(v, (0, n - 1))


def zeros(shape, dtype: DType = dtypes.f32, by_wgmma: bool = False) -> Tile:
    """A zero tile. by_wgmma=True (an accumulator whose first writer is a pipelined wgmma):
    skip the zeroing instructions and let that wgmma overwrite with scale-d = 0."""
    ctx = current("ag.zeros")
    shape = _check_tile_shape(shape, user_loc())
    v = ctx.builder.fresh(TileType(dtype, shape))
    ctx.builder.append(O.Full(v, 0.0, scale_d_zero=bool(by_wgmma), loc=user_loc()))
    return Tile(v)


def _offsets(tensor: TensorArg, offsets, loc) -> tuple:
    if not isinstance(tensor, TensorArg):
        raise TraceError(f"expected a kernel tensor parameter, got {type(tensor).__name__}", loc)
    offsets = tuple(offsets)
    if len(offsets) != len(tensor.shape):
        raise TraceError(f"{tensor.name} has {len(tensor.shape)} dims but {len(offsets)} "
                         f"offsets were given", loc)
    return tuple(as_scalar(o).value for o in offsets)


def load(tensor: TensorArg, offsets, shape, other: float = 0.0) -> Tile:
    """Load the tile of `shape` whose first element is at `offsets` (one per tensor dim; a tile
    of lower rank takes the tensor's last dims); out-of-bounds elements read as `other`."""
    ctx = current("ag.load")
    loc = user_loc()
    shape = _check_tile_shape(shape, loc)
    if len(shape) > len(tensor.shape):
        raise TraceError(f"a rank-{len(shape)} tile from a rank-{len(tensor.shape)} tensor", loc)
    offs = _offsets(tensor, offsets, loc)
    v = ctx.builder.fresh(TileType(tensor.dtype, shape))
    ctx.builder.append(O.Load(v, tensor.value, offs, float(other), loc=loc))
    return Tile(v)


def gather(tensor: TensorArg, indices, other: float = 0.0) -> Tile:
    """A tile read element by element from computed positions: element i is
    tensor[indices[0][i], ..., indices[-1][i]], one index per tensor dim, each an integer tile
    (built from ag.arange and scalars) or a scalar; the tiles broadcast to the result's shape.
    An element with an index outside its dim reads `other` (padding needs no mask: give a
    column that must read `other` an index of -1). Each thread holds whole rows of the result
    (layout "rows"), so a store of it is a few wide accesses per thread: the im2col gather
    (argus/kernels/conv_im2col.py) builds each pixel's row of A this way.

    `tensor` may also be an unswizzled shared-memory view (`buf.view()`, a [rows, cols]
    block the CTA wrote with `ag.store_shared`): then two indices (row, column) of the view,
    one ld.shared an element, and the compiler puts a CTA barrier between the buffer's last
    write and this read (the threads read what other threads wrote). The im2col span gather
    loads each input row's span once, coalesced, and gathers a pixel's taps from it."""
    ctx = current("ag.gather")
    loc = user_loc()
    shared = isinstance(tensor, (SmemView, SmemBuffer))
    if shared:
        tensor = _view(tensor, "gather source", loc)
        if tensor.buffer.type.swizzle:
            raise TraceError(f"ag.gather reads unswizzled shared views; this buffer has a "
                             f"{tensor.buffer.type.swizzle}B swizzle", loc,
                             fix="allocate the buffer with swizzle=0")
        dims, name = tensor.shape, "the shared view"
    elif not isinstance(tensor, TensorArg):
        raise TraceError(f"expected a kernel tensor parameter or a shared-memory view, got "
                         f"{type(tensor).__name__}", loc)
    else:
        dims, name = tensor.shape, tensor.name
    indices = tuple(indices)
    if len(indices) != len(dims):
        raise TraceError(f"{name} has {len(dims)} dims but {len(indices)} "
                         f"indices were given", loc)
    tiles = [i for i in indices if isinstance(i, Tile)]
    if not tiles:
        raise TraceError("ag.gather needs at least one index tile (for one element use "
                         "ag.load_scalar)", loc)
    shape: tuple[int, ...] = tiles[0].shape
    for t in tiles:
        if t.dtype.is_float or t.dtype == dtypes.i1:
            raise TraceError(f"ag.gather: an index tile of {t.dtype}", loc,
                             fix="build indices from ag.arange and integer scalars")
        if len(t.shape) != len(shape):
            raise TraceError(f"ag.gather: index tiles of ranks {len(shape)} and "
                             f"{len(t.shape)}", loc, fix="expand them with t[:, None]")
        shape = tuple(max(a, b) if 1 in (a, b) or a == b else -1
                      for a, b in zip(shape, t.shape))
        if -1 in shape:
            raise TraceError(f"ag.gather: index tiles of shapes {tiles[0].shape} and {t.shape} "
                             "do not broadcast", loc)
    values = tuple(i.value if isinstance(i, Tile) else as_scalar(i).value for i in indices)
    if shared:
        # dims whose index lies in [0, extent) by its static interval: no guard in codegen
        bounds = [(i, i) if isinstance(i, int) else i.bound if isinstance(i, Tile) else None
                  for i in indices]
        inside = tuple(d for d, (b, n) in enumerate(zip(bounds, dims))
                       if b is not None and 0 <= b[0] and b[1] < n)
        v = ctx.builder.fresh(TileType(tensor.buffer.type.dtype, shape))
        ctx.builder.append(O.SmemGather(v, tensor.materialize(), values, float(other),
                                        inside, loc=loc))
        return Tile(v)
    v = ctx.builder.fresh(TileType(tensor.dtype, shape))
    ctx.builder.append(O.Gather(v, tensor.value, values, float(other), loc=loc))
    return Tile(v)


def load_scalar(tensor: TensorArg, offsets, other: float = 0.0) -> Scalar:
    """One element of a global tensor as a uniform runtime scalar (every thread reads the same
    address), e.g. a per-tensor scale kept on the device; outside the tensor it reads `other`.
    Floats come back as f32 scalars, integers as their own type."""
    ctx = current("ag.load_scalar")
    loc = user_loc()
    offs = _offsets(tensor, offsets, loc)
    if tensor.dtype in (dtypes.e4m3, dtypes.f64, dtypes.i1):
        raise TraceError(f"ag.load_scalar reads f32/bf16/f16 or integer tensors, not "
                         f"{tensor.dtype} ({tensor.name})", loc,
                         fix="keep scalars such as scales in a float32 tensor")
    dtype = dtypes.f32 if tensor.dtype.is_float else tensor.dtype
    v = ctx.builder.fresh(ScalarType(dtype))
    ctx.builder.append(O.LoadScalar(v, tensor.value, offs, float(other), loc=loc))
    # uniform only when every thread reads the same address
    uniform = all(o.uniform for o in offsets if isinstance(o, Scalar))
    return Scalar(v, uniform=uniform)


def store(tensor: TensorArg, offsets, tile: Tile, *, transposed: bool = False) -> None:
    """Store `tile` at `offsets`; elements outside the tensor are dropped. With
    transposed=True a 2-d tile is stored as its transpose: element (i, j) goes to
    (offsets[-2] + j, offsets[-1] + i)."""
    ctx = current("ag.store")
    loc = user_loc()
    if not isinstance(tile, Tile):
        raise TraceError("ag.store needs a tile", loc)
    if transposed and len(tile.shape) != 2:
        raise TraceError(f"ag.store(transposed=True) swaps the two axes of a 2-d tile; this "
                         f"tile has shape {tile.shape}", loc)
    if tile.dtype != tensor.dtype:
        raise TraceError(f"storing a {tile.dtype} tile into {tensor.name} of dtype "
                         f"{tensor.dtype}", loc, fix=f"convert with .to(ag.{tensor.dtype.name})")
    if len(tile.shape) > len(tensor.shape):
        raise TraceError(f"a rank-{len(tile.shape)} tile into a rank-{len(tensor.shape)} tensor",
                         loc)
    offs = _offsets(tensor, offsets, loc)
    ctx.builder.append(O.Store(tensor.value, offs, tile.value, transposed, loc=loc))


def atomic_add(tensor: TensorArg, offsets, tile: Tile) -> None:
    """Add `tile` elementwise into `tensor` at `offsets` with atomic reductions (PTX
    red.global.add: f32 or i32, the tensor's dtype); elements outside the tensor are dropped.
    Additions from any threads and CTAs to one element all land (in some order: f32 sums are
    exact up to that order's rounding). Not a store: see docs/verify.md for what is proven."""
    ctx = current("ag.atomic_add")
    loc = user_loc()
    if not isinstance(tile, Tile):
        raise TraceError("ag.atomic_add needs a tile", loc,
                         fix="make one with ag.full((1,), value) for a single element")
    if tensor.dtype not in (dtypes.f32, dtypes.i32) or tile.dtype != tensor.dtype:
        raise TraceError(f"ag.atomic_add adds f32 or i32 tiles into a tensor of the same dtype; "
                         f"got a {tile.dtype} tile into {tensor.name} ({tensor.dtype})", loc,
                         fix="accumulate in a float32 (or int32) tensor, converting the tile "
                             "with .to(ag.f32)")
    if len(tile.shape) > len(tensor.shape):
        raise TraceError(f"a rank-{len(tile.shape)} tile into a rank-{len(tensor.shape)} tensor",
                         loc)
    offs = _offsets(tensor, offsets, loc)
    ctx.builder.append(O.AtomicAdd(tensor.value, offs, tile.value, loc=loc))


def atomic_fetch_add(tensor: TensorArg, offsets, value=1, *, wrap=None) -> Scalar:
    """Atomically add the uniform int `value` to one element of an i32 tensor, once for the
    executing group (the CTA, or this warpgroup inside a role), and return the element's old
    value to every thread (PTX atom.global.add.u32). With `wrap` (value 1): a counter that
    resets itself, atom.global.inc.u32: the element becomes 0 when it was wrap - 1, so wrap
    arrivals leave it as they found it and exactly one of them reads wrap - 1 (the last CTA
    to finish a unit of work). Offsets outside the tensor: no atomic, -1."""
    ctx = current("ag.atomic_fetch_add")
    loc = user_loc()
    _group_wide("ag.atomic_fetch_add", ctx, loc)
    if tensor.dtype != dtypes.i32:
        raise TraceError(f"ag.atomic_fetch_add counts in an int32 tensor; {tensor.name} is "
                         f"{tensor.dtype}", loc, fix="allocate the counters as torch.int32")
    if wrap is not None and not (isinstance(value, int) and value == 1):
        raise TraceError(f"ag.atomic_fetch_add(..., wrap=...) increments by 1 "
                         f"(atom.inc); got value={value!r}", loc)
    v = as_scalar(value)
    if v.dtype != dtypes.i32 or not v.uniform:
        raise TraceError("ag.atomic_fetch_add adds a uniform int32 scalar", loc)
    w = None
    if wrap is not None:
        w = as_scalar(wrap)
        if w.dtype != dtypes.i32 or not w.uniform:
            raise TraceError("ag.atomic_fetch_add's wrap is a uniform int32 scalar", loc)
        w = w.value
    offs = _offsets(tensor, offsets, loc)
    if not all(o.uniform for o in offsets if isinstance(o, Scalar)):
        raise TraceError("ag.atomic_fetch_add's offsets differ between threads", loc,
                         fix="one atomic runs for the whole group: use uniform offsets")
    r = ctx.builder.fresh(ScalarType(dtypes.i32), "old")
    ctx.builder.append(O.AtomicFetchAdd(r, tensor.value, offs, v.value, w, loc=loc))
    return Scalar(r)


def fence() -> None:
    """fence.acq_rel.gpu by every thread: its memory operations before the fence are ordered
    before those after it for any thread of the GPU that synchronizes with it. Put one between
    global stores and the ag.atomic_fetch_add that tells other CTAs they are done (release),
    and one between that atomic's answer and loads of what the others stored (acquire)."""
    ctx = current("ag.fence")
    ctx.builder.append(O.Fence(loc=user_loc()))


def wait_prior_grids(*, stable: Sequence[TensorArg] = ()) -> None:
    """Programmatic dependent launch: wait here until the kernels before this one in the stream
    have completed and their memory is visible (griddepcontrol.wait by every thread). A kernel
    that calls it is launched so that it may start while its predecessor still runs: what
    comes before the wait (barrier init, tensor-map prefetch, loads of `stable` tensors) then
    overlaps the predecessor's tail. `stable`: the tensor parameters no preceding kernel
    writes (weights); they alone may be loaded before the wait. Call it once, at the top level
    of the kernel or of a role, before every global store (the predecessor may still read
    what a store would overwrite) and every other global load; the verifier checks it
    (verify/check_pdl.py). First in a stream, or after an ordinary kernel, it returns at once."""
    ctx = current("ag.wait_prior_grids")
    loc = user_loc()
    for t in stable:
        if not isinstance(t, TensorArg):
            raise TraceError(f"ag.wait_prior_grids(stable=...) takes tensor parameters, got "
                             f"{type(t).__name__}", loc,
                             fix="pass the kernel's tensor arguments, e.g. stable=(W,)")
    ctx.builder.append(O.GridDepWait(tuple(t.value for t in stable), loc=loc))


def allow_dependent_launch() -> None:
    """Programmatic dependent launch: the next kernel in the stream (if it calls
    ag.wait_prior_grids) may start now, once every CTA of this grid got here or exited
    (griddepcontrol.launch_dependents). Orders no memory: the next kernel still waits for this
    one's completion in its ag.wait_prior_grids. Call it after this kernel's own
    ag.wait_prior_grids (else the next kernel may run beside the one before this), e.g. when
    the main loop's last loads are issued."""
    ctx = current("ag.allow_dependent_launch")
    ctx.builder.append(O.GridDepLaunch(loc=user_loc()))


def where(cond: Tile, a, b) -> Tile:
    """Elementwise `a` where `cond` (a boolean tile) holds, else `b`; a and b are tiles or
    scalars and broadcast like numpy."""
    if not isinstance(cond, Tile) or cond.dtype != dtypes.i1:
        raise TraceError("ag.where needs a boolean tile (a comparison) as its condition",
                         user_loc())
    return elementwise("where", cond, a, b)


def scan(x: Tile, fn: str = "sum", axis: int = -1, init=None, *, reverse: bool = False,
         exclusive: bool = False) -> tuple[Tile, Tile]:
    """(cumulative `fn` of `x` along `axis`, total): fn is "sum", "prod", "max" or "min"
    over a float or an integer tile (integers exactly, in their own type);
    element j combines `init` (a tile of x's shape with extent 1 along axis, or a number;
    default: fn's identity) with the elements i <= j (i < j when exclusive; i >= j / i > j
    when reverse). `total` combines init with the whole axis: the carry of a row walked block
    by block, `y, carry = ag.scan(x, "sum", 1, carry)`. The scanned axis must lie within one
    warp (registers, then lanes): a blocked tile of a 32-thread kernel, or [rows, 32 x vec]."""
    ctx = current("ag.scan")
    loc = user_loc()
    if not isinstance(x, Tile) or x.dtype.kind not in ("float", "int", "uint"):
        raise TraceError("ag.scan takes a float or integer tile", loc)
    if fn not in O.SCAN_FNS:
        raise TraceError(f"ag.scan: fn={fn!r} is not one of {O.SCAN_FNS}", loc)
    rank = len(x.shape)
    if not -rank <= axis < rank:
        raise TraceError(f"ag.scan: axis {axis} out of range for a tile of shape {x.shape}", loc)
    axis %= rank
    edge = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    if init is None or isinstance(init, (int, float)):
        if x.dtype.is_float:
            value = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}[fn] \
                if init is None else float(init)
        else:   # an integer scan starts from its type's identity (the extremes for max / min)
            bits = x.dtype.bits
            lo, hi = (0, (1 << bits) - 1) if x.dtype.kind == "uint" else \
                (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
            value = {"sum": 0, "prod": 1, "max": lo, "min": hi}[fn] if init is None else init
        init = full(edge, value, x.dtype)
    if not isinstance(init, Tile) or init.shape != edge or init.dtype != x.dtype:
        raise TraceError(f"ag.scan: init must be a {x.dtype} tile of shape {edge} (x's shape "
                         f"with extent 1 along axis {axis}), got "
                         f"{getattr(init, 'shape', type(init).__name__)}", loc)
    result = ctx.builder.fresh(TileType(x.dtype, x.shape))
    total = ctx.builder.fresh(TileType(x.dtype, edge))
    ctx.builder.append(O.Scan(result, total, x.value, init.value, fn, axis, bool(reverse),
                              bool(exclusive), loc=loc))
    return Tile(result), Tile(total)


def maximum(a, b):
    """Elementwise max of tiles, or the max of two scalars."""
    if not isinstance(a, Tile) and not isinstance(b, Tile):
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return as_scalar(a)._bin("max", b)
    return elementwise("max", a, b)


def minimum(a, b):
    """Elementwise min of tiles, or the min of two scalars."""
    if not isinstance(a, Tile) and not isinstance(b, Tile):
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return as_scalar(a)._bin("min", b)
    return elementwise("min", a, b)


def _unary(fn):
    def f(x: Tile) -> Tile:
        return elementwise(fn, x)
    f.__name__ = fn
    f.__doc__ = f"Elementwise {fn}."
    return f


exp, log, sqrt, rsqrt, tanh, erf, sigmoid, relu, abs_ = (
    _unary(n) for n in ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "relu", "abs"))


def round_tf32(x: Tile) -> Tile:
    """Elementwise: an f32 tile rounded to tf32 (10 mantissa bits, to nearest, ties away from
    zero: PTX cvt.rna.tf32.f32), still an f32 tile. Round a tf32 wgmma's operands with it
    before they reach shared memory: the tensor core reads an unrounded f32 by dropping its 13
    low bits, a bias toward zero that does not average out over K (normwise ~8e-4 on signed
    data against rounding's ~3e-4)."""
    if x.dtype != dtypes.f32:
        raise TraceError(f"ag.round_tf32 rounds f32 tiles, got {x.dtype}", user_loc(),
                         fix="convert with .to(ag.f32) first")
    return elementwise("round_tf32", x)


def exp2(x: Tile, approx: bool = False, emulate: tuple[int, ...] = ()) -> Tile:
    """Elementwise 2^x. approx=True: the SFU's ex2.approx.ftz alone (relative error <= 2^-22;
    results below 2^-126 flush to 0, inputs below it in magnitude read as 0), one instruction
    where the full-range exp2 (the default) adds a range check and two multiplies on sm_90:
    what a softmax wants, whose terms below 2^-126 of the row max are lost in any sum.

    emulate=(count, period) or (count, period, group) with approx=True: of every `period`
    groups of `group` (default 8) columns along the last axis, `count` are computed on the FMA
    pipe by a polynomial (relative error <= 1.05e-4; NaN, +-inf and the flush to zero as the
    SFU's) instead of the SFU, which then has that much less to do (FlashAttention-4's partial
    emulation; argus/target/exp2_emulation.py). Group 8 suits a wgmma accumulator (S of
    attention), where the choice is static per register; count 0 is off."""
    spec = ()
    if emulate:
        if len(emulate) not in (2, 3):
            raise TraceError(f"ag.exp2(emulate={emulate!r}): (count, period) or (count, "
                             f"period, group)", user_loc(), fix="e.g. emulate=(4, 16)")
        count, period, group = (*emulate, 8)[:3]
        spec = (group, count, period) if count else ()
        problem = _exp2_emulation.check_spec(spec)
        if problem:
            raise TraceError(f"ag.exp2: {problem}", user_loc(),
                             fix="e.g. emulate=(4, 16): 4 of every 16 groups of 8 columns")
    if spec and not approx:
        raise TraceError("ag.exp2(emulate=...) splits the SFU's ex2.approx between the SFU and "
                         "the FMA pipe", user_loc(), fix="pass approx=True with emulate")
    return elementwise("exp2_approx" if approx else "exp2", x, emulate=spec)

# ----------------------------------------------------------------------------- shared memory


def smem(shape, dtype: DType, swizzle: int = 0) -> SmemBuffer:
    """A shared-memory buffer: (rows, cols) or (stages, rows, cols). With a swizzle (32, 64,
    128 bytes) one row must be exactly the swizzle span, as TMA and wgmma address it."""
    ctx = current("ag.smem")
    loc = user_loc()
    shape = _check_tile_shape(shape, loc)
    if len(shape) not in (2, 3):
        raise TraceError(f"ag.smem takes 2-d or 3-d (staged) shapes, got {shape}", loc)
    if swizzle not in (0, 32, 64, 128):
        raise TraceError(f"swizzle must be 0, 32, 64 or 128 bytes, got {swizzle}", loc)
    row_bytes = shape[-1] * dtype.bytes
    if swizzle and row_bytes != swizzle:
        raise TraceError(f"a {swizzle}B-swizzled buffer needs rows of {swizzle} bytes "
                         f"({swizzle // dtype.bytes} x {dtype}), got {shape[-1]} x {dtype} = "
                         f"{row_bytes} bytes", loc,
                         fix=f"use {swizzle // dtype.bytes} columns per row (the K tile), or "
                             f"another swizzle")
    v = ctx.builder.fresh(SmemType(dtype, shape, swizzle), "s")
    ctx.builder.append(O.SmemAlloc(v, loc=loc))
    return SmemBuffer(v)


def pipeline(stages: int, consumers: int = 1, payload: bool = False) -> Pipe:
    """An mbarrier ring of `stages` slots released by `consumers` consumer warpgroups. With
    payload=True each slot also carries one int32 from its produce step to its consume steps
    (`pipe.produce(payload=x)`, `pipe.payload(stage)`)."""
    ctx = current("ag.pipeline")
    loc = user_loc()
    if not isinstance(stages, int) or not 1 <= stages <= 16:
        raise TraceError(f"pipeline stages must be an int in [1, 16], got {stages}", loc)
    if not isinstance(consumers, int) or isinstance(consumers, bool) or not 1 <= consumers <= 4:
        raise TraceError(f"pipeline consumers (warpgroups that release each slot) must be an "
                         f"int in [1, 4], got {consumers!r}", loc,
                         fix="pass the number of consumer warpgroups, e.g. consumers=2")
    if not isinstance(payload, bool):
        raise TraceError(f"ag.pipeline(payload={payload!r}): True or False", loc)
    v = ctx.builder.fresh(PipeType(stages), "pipe")
    ctx.builder.append(O.PipelineCreate(v, consumers, payload=payload, loc=loc))
    return Pipe(v, payload)


def _view(x, what: str, loc) -> SmemView:
    if isinstance(x, SmemBuffer):
        x = x.view()
    if not isinstance(x, SmemView):
        raise TraceError(f"{what} must be a shared-memory view (buf[stage] or buf.view()), got "
                         f"{type(x).__name__}", loc)
    return x


def _tma_load(dst, tensor: TensorArg, coords, multicast: bool = False, box=None,
              tags=None, elem_strides=None) -> None:
    """TMA box copy into `dst`; with multicast=True the box also lands, at the same offset,
    in every other CTA of the cluster (which all run the same code).

    `tags` ({field: lambda c0, c1, ...: expr}): tag fields of every element this copy writes,
    over the element's coordinates in `tensor` and runtime scalars of the copy (`ag.sym`):
    what the box is for beyond where it reads, e.g. the filter tap of an implicit GEMM's
    im2col box. For the verifier only (no code).

    `box` (one extent per tensor dim, outermost first; default: unit leading dims, then the
    view's rows and columns): a box with several non-unit outer dims, e.g. (1, 8, 16, 64) of
    an [N, H, W, C] tensor, lands in the view row-major (the TMA unit writes the box densely,
    innermost dim first), so box[-1] is the view's columns and the product of the outer
    extents its rows; each outer dim is zero-filled where it leaves the tensor on its own.

    `elem_strides` (with `box`; one int in [1, 8] per tensor dim, outermost first, the last
    1): the tensor map's elementStrides. The box's element i along dim d is the tensor's
    coords[d] + i * elem_strides[d]: box[d] elements land, read every elem_strides[d]-th
    (a stride-2 convolution's output pixels' input pixels, argus/kernels/conv.py rowbox).
    The TMA unit ignores the innermost stride, so it must be 1."""
    ctx = current("ag.tma.load")
    loc = user_loc()
    if multicast and ctx.cluster == (1, 1, 1):
        raise TraceError("a multicast TMA load needs a cluster", loc,
                         fix="declare it with ag.grid(..., cluster=2)")
    view = _view(dst, "tma.load destination", loc)
    if ctx.open_pipeline_steps == 0:
        raise TraceError("ag.tma.load must be inside a `with pipe.produce() as stage:` block",
                         loc, fix="TMA completes on the pipeline's full barrier; open a produce "
                                  "step first")
    if view.buffer.type.dtype != tensor.dtype:
        raise TraceError(f"TMA from {tensor.name} ({tensor.dtype}) into a "
                         f"{view.buffer.type.dtype} buffer", loc)
    if box is None and any(d > 256 for d in view.shape):
        raise TraceError(f"TMA box {view.shape} exceeds 256 elements in a dimension", loc,
                         fix="split the copy into boxes of at most 256 rows")
    coords_v = _offsets(tensor, coords, loc)
    if box is not None:
        box = tuple(box)
        rows = 1
        for e in box[:-1]:
            rows *= e if isinstance(e, int) else 0
        if len(box) != len(tensor.shape) or not all(
                isinstance(e, int) and not isinstance(e, bool) and 1 <= e <= 256 for e in box) \
                or box[-1] != view.shape[1] or rows != view.shape[0]:
            raise TraceError(f"TMA box {box} into a view of {view.shape[0]} rows x "
                             f"{view.shape[1]} columns: a box has one int extent in [1, 256] "
                             f"per dim of {tensor.name} ({len(tensor.shape)}), its last extent "
                             f"is the view's columns and the product of the others its rows",
                             loc, fix="size the view to the box (rows = the product of the "
                                      "outer extents)")
    strides = ()
    if elem_strides is not None:
        strides = tuple(elem_strides)
        if box is None or len(strides) != len(tensor.shape) or not all(
                isinstance(e, int) and not isinstance(e, bool) and 1 <= e <= 8
                for e in strides) or strides[-1] != 1 or \
                any(b * e > 256 for b, e in zip(box, strides)):
            raise TraceError(f"TMA elem_strides {strides} with box {box} of {tensor.name}: "
                             f"one int in [1, 8] per dim of {tensor.name} "
                             f"({len(tensor.shape)}), the innermost 1 (the TMA unit ignores "
                             f"it), with an explicit box whose extent x stride (the tensor "
                             f"map's boxDim) is at most 256 in each dim", loc,
                             fix="pass box= with elem_strides=, and narrow the box where "
                                 "box x stride exceeds 256")
        if all(e == 1 for e in strides):
            strides = ()     # the plain box (one tensor map with the unstrided loads)
    ctx.builder.append(O.TmaLoad(view.materialize(), tensor.value, coords_v,
                                 box=box or (), multicast=bool(multicast), loc=loc,
                                 elem_strides=strides))
    if tags:
        from argus.dsl.tags import copy_tags
        copy_tags(ctx, tensor, dict(tags), loc)


def _group_wide(what: str, ctx, loc) -> None:
    """Ops whose generated code synchronizes the warpgroup (a named barrier around the bulk
    store and before the staging writes) must be reached by all of its threads."""
    if ctx.nonuniform_guards:
        raise TraceError(f"{what} is guarded by a condition that differs between threads", loc,
                         fix=f"{what} synchronizes its warpgroup: all 128 threads must execute "
                             f"it; use a uniform condition")


def _tma_store(tensor: TensorArg, coords, src) -> None:
    ctx = current("ag.tma.store")
    loc = user_loc()
    _group_wide("tma.store", ctx, loc)
    view = _view(src, "tma.store source", loc)
    coords_v = _offsets(tensor, coords, loc)
    ctx.builder.append(O.TmaStore(tensor.value, coords_v, view.materialize(), loc=loc))


def _tma_prefetch(like, tensor: TensorArg, coords) -> None:
    """Prefetch into L2 the box that `ag.tma.load(like, tensor, coords)` would copy into the
    view `like` (nothing is written to it: the view names the box and swizzle, so the
    prefetch and the loads share one tensor map). A hint with no result and no barrier: it
    may sit anywhere, inside no produce step, e.g. before ag.wait_prior_grids for a tensor
    no preceding kernel writes (PTX ISA "cp.async.bulk.prefetch.tensor")."""
    current("ag.tma.prefetch")
    loc = user_loc()
    view = _view(like, "tma.prefetch view", loc)
    if view.buffer.type.dtype != tensor.dtype:
        raise TraceError(f"TMA prefetch of {tensor.name} ({tensor.dtype}) shaped like a "
                         f"{view.buffer.type.dtype} buffer", loc)
    if any(d > 256 for d in view.shape):
        raise TraceError(f"TMA box {view.shape} exceeds 256 elements in a dimension", loc,
                         fix="prefetch boxes of at most 256 rows")
    coords_v = _offsets(tensor, coords, loc)
    box = (1,) * (len(tensor.shape) - 2) + tuple(view.shape)
    ctx = current("ag.tma.prefetch")
    ctx.builder.append(O.TmaPrefetch(tensor.value, coords_v, box=box,
                                     swizzle=view.buffer.type.swizzle, loc=loc))


tma = SimpleNamespace(load=_tma_load, store=_tma_store, prefetch=_tma_prefetch)


def wgmma(a, b, acc: Tile, trans_b: bool = False, *, trans_a: bool = False,
          overwrite: bool = False, precision: str | None = None, pinned: bool = False,
          a_acc_order: bool = False) -> Tile:
    """acc += a @ b^T on the tensor cores (one warpgroup). a: [64, K] smem view, b: [N, K]
    smem view (K-major), or with `trans_b=True` a [K, N] tile stored MN-major as N/64 column
    atoms of [K][64] stacked along the rows; acc: [64, N] f32 tile. With `trans_a=True` a is
    a [K, 64] tile stored MN-major the same way (one [K][64] atom for bf16 with a 128-byte
    swizzle), e.g. the weights of a swap-AB x @ W with W [K, N]. With `overwrite=True`
    acc = a @ b^T (its old value is dropped; shared-memory operands only): a K block's partial
    into a tile that is reused block after block (fp8 promotion). Returns acc, updated in
    place.

    f32 operands (K-major views, K a multiple of 8) need `precision="tf32"`: the tensor core
    reads fp32 data with a 10-bit mantissa (PTX wgmma `.tf32`, fp32 accumulation), the
    arithmetic of PyTorch with allow_tf32 on. The data stays fp32 in memory; the request says
    that the product, not the storage, is reduced, so it is named on the product.

    `pinned=True` keeps the issue behind the work traced before it in the machine code (no
    change of meaning; Wgmma.pinned): ptxas otherwise hoists a wgmma above independent
    register work, e.g. the next column half's wgmma above the promotion of the previous one,
    which then needs both partials' registers at once.

    `a_acc_order=True` (an e4m3 register A converted from a 64-row accumulator only): k-position
    k of the product reads column acc_order_col(k) of `a` (target/fragments.py: a permutation
    inside each 32-column group), acc += a[:, acc_order_col] @ b^T, so each thread's A bytes
    are its own accumulator registers and no shuffle is needed (AccOrderA8). `b`'s k rows must
    be stored in the same order: FP8 attention's V^T with its keys permuted by the op; the
    verifier compares A's and B's tags through the map, so a B in natural order is reported
    (wgmma.agree)."""
    ctx = current("ag.wgmma")
    loc = user_loc()
    if precision not in (None, "tf32"):
        raise TraceError(f"wgmma precision={precision!r}: the only reduced precision is "
                         f"'tf32' (f32 operands read with a 10-bit mantissa)", loc,
                         fix="pass precision='tf32' with f32 operands, or leave it out")
    if isinstance(a, Tile):
        if (precision == "tf32") != (a.dtype == dtypes.f32):
            raise TraceError(f"a register A of dtype {a.dtype} with precision={precision!r}: "
                             f"a register A operand is a bf16 or f16 (or e4m3) tile without "
                             f"precision, or an f32 one read as tf32 with precision='tf32' "
                             f"(and a_acc_order=True)",
                             loc, fix="pass precision='tf32' with an f32 A tile, or leave "
                                      "precision out")
        if a.dtype == dtypes.f32 and not a_acc_order:
            raise TraceError("a tf32 register A is read in the accumulator's order only: its "
                             "m64k8 fragment holds k-positions q and q + 4 where the "
                             "accumulator pattern holds columns 2q and 2q + 1", loc,
                             fix="pass a_acc_order=True and store B's k rows in the order "
                                 "target/fragments.py acc_order_col32 (the weight's columns "
                                 "permuted within each 8-group)")
        if overwrite:
            raise TraceError("wgmma(overwrite=True) takes shared-memory operands", loc,
                             fix="use a shared-memory A view, or a fresh ag.zeros accumulator")
        if pinned:
            raise TraceError("wgmma(pinned=True) takes shared-memory operands", loc,
                             fix="use a shared-memory A view, or leave pinned out")
        return _wgmma_register_a(ctx, loc, a, b, acc, trans_b, a_acc_order)
    if a_acc_order:
        raise TraceError("wgmma(a_acc_order=True) takes an e4m3 or f32 (tf32) register A", loc,
                         fix="pass the register tile, or leave a_acc_order out")
    av, bv = _view(a, "wgmma operand a", loc), _view(b, "wgmma operand b", loc)
    if (trans_a or trans_b) and dtypes.f32 in (av.buffer.type.dtype, bv.buffer.type.dtype):
        which = "A" if trans_a else "B"
        raise TraceError(f"a tf32 wgmma {which} operand must be K-major: PTX has no transpose "
                         "for tf32 inputs", loc,
                         fix=f"store {which} with K contiguous (transpose it in global memory) "
                             f"and pass trans_{which.lower()}=False")
    if ctx.nonuniform_guards:
        raise TraceError("wgmma is guarded by a condition that differs between threads", loc,
                         fix="wgmma is warpgroup-wide (.sync.aligned): all 128 threads must "
                             "execute it; use a uniform condition")
    if ctx.any_role and ctx.in_role is None:
        raise TraceError("wgmma outside an ag.role in a warp-specialized kernel", loc)
    if not isinstance(acc, Tile) or acc.dtype != dtypes.f32 or len(acc.shape) != 2:
        raise TraceError("wgmma accumulates into a 2-d f32 tile (ag.zeros((64, N)))", loc)
    m, n = acc.shape
    k = av.cols
    if trans_a:
        span = _swizzle_span(av)
        k = bv.cols
        if trans_b or not span or av.cols != span or m % span or av.rows != (m // span) * k:
            raise TraceError(f"an MN-major wgmma A operand for M={m}, K={k} must be a swizzled "
                             f"view of ({m} // W) * {k} rows x W columns, W = one swizzle span "
                             f"of elements, with a K-major B; got {av.rows} x {av.cols}"
                             + (" and trans_b=True" if trans_b else ""), loc,
                             fix="allocate ag.smem((stages, BK, 64), ag.bf16, swizzle=128) and "
                                 "TMA-load one [BK, 64] box of the [K, M] tensor")
    if trans_b:
        _check_mn_major_b(bv, n, k, loc,
                          fix="allocate ag.smem((stages, (BN // 64) * BK, 64), ag.bf16, "
                              "swizzle=128) and TMA-load one [BK, 64] box per 64 columns")
        bn, bk = n, k
    else:
        bn, bk = bv.rows, bv.cols
    if m != 64:
        raise TraceError(f"one warpgroup's wgmma covers 64 rows, the accumulator has {m}", loc,
                         fix="split M across warpgroups (role warpgroups=2 for 128 rows) and "
                             "give each a [64, N] accumulator")
    if av.rows != 64 and not trans_a:
        raise TraceError(f"wgmma operand a has {av.rows} rows, need 64", loc,
                         fix="take a 64-row slice: buf[stage].rows_of(64 * wg, 64)")
    if n % 8 or not 8 <= n <= 256:
        raise TraceError(f"wgmma N={n} must be a multiple of 8 in [8, 256]", loc)
    if bn != n or bk != k:
        raise TraceError(f"wgmma shapes disagree: a is 64x{k}, b gives N={bn}, K={bk}, acc is "
                         f"64x{n}", loc)
    in_dtype = av.buffer.type.dtype
    if in_dtype not in (dtypes.bf16, dtypes.f16, dtypes.e4m3, dtypes.f32) or \
            bv.buffer.type.dtype != in_dtype:
        raise TraceError(f"wgmma operands must both be bf16, both f16, both e4m3 or both f32 "
                         f"(with precision='tf32'), got {in_dtype} and "
                         f"{bv.buffer.type.dtype}", loc)
    if in_dtype == dtypes.f32 and precision != "tf32":
        raise TraceError("wgmma of f32 operands runs as tf32 on the tensor cores (a 10-bit "
                         "mantissa: each operand rounded by up to 2^-11, not fp32 accuracy)",
                         loc, fix="pass precision='tf32' to accept that, or split the operands "
                                  "into bf16 pieces (argus.ops.conv's fp32 split) for fp32 "
                                  "accuracy")
    if precision == "tf32" and in_dtype != dtypes.f32:
        raise TraceError(f"wgmma precision='tf32' takes f32 operands, got {in_dtype}", loc,
                         fix="allocate the operand buffers as ag.f32 (32 per 128-byte row), "
                             "or leave precision out")
    # one instruction covers 32 bytes of K (PTX ISA wgmma: k16 for 16-bit, k8 for tf32,
    # k32 for fp8)
    k_step = 32 // in_dtype.bytes
    if k % k_step:
        raise TraceError(f"wgmma K={k} must be a multiple of {k_step} for {in_dtype} inputs",
                         loc)
    if (trans_a or trans_b) and in_dtype == dtypes.e4m3:
        which = "A" if trans_a else "B"
        raise TraceError(f"an fp8 wgmma {which} operand must be K-major: PTX has no transpose "
                         "for 8-bit inputs", loc,
                         fix=f"store {which} with K contiguous (transpose it in global memory) "
                             f"and pass trans_{which.lower()}=False")
    ctx.builder.append(O.Wgmma(acc.value, av.materialize(), bv.materialize(), trans_b,
                               trans_a=trans_a, overwrite=bool(overwrite),
                               pinned=bool(pinned), loc=loc))
    return acc


def _swizzle_span(view) -> int:
    """Elements in one swizzle span of `view`'s buffer (0 when the buffer is not swizzled)."""
    t = view.buffer.type
    return t.swizzle // t.dtype.bytes if t.swizzle else 0


def _check_mn_major_b(bv, n: int, k: int, loc, fix: str) -> None:
    """An MN-major wgmma B operand ([K, N], trans_b=True) must be stored as N/W column atoms
    of [K rows][W columns], W = one swizzle span of elements, stacked along the view's rows
    (the layout TMA writes when each atom is one box); shared by both wgmma forms, each with
    its own `fix`."""
    span = _swizzle_span(bv)
    if not span or bv.cols != span or n % span or bv.rows != (n // span) * k:
        raise TraceError(f"an MN-major wgmma B operand for N={n}, K={k} must be a swizzled "
                         f"view of ({n} // W) * {k} rows x W columns, W = one swizzle span "
                         f"of elements; got {bv.rows} x {bv.cols}", loc, fix=fix)


def _wgmma_register_a(ctx, loc, a: Tile, b, acc: Tile, trans_b: bool,
                      a_acc_order: bool = False) -> Tile:
    """acc += a @ b^T with `a` a bf16/f16/e4m3 [64, K] register tile (wgmma's "rs" form): the
    A operand never touches shared memory. A 16-bit tile converted from a 64-row accumulator
    (P of FlashAttention) already sits in the A fragment, register for register; an e4m3 one
    (FP8 attention's P) is moved into the 8-bit fragment by two quad shuffles per register
    (target/fragments.py AccToA8), and its B must be e4m3 and K-major (no trans_b)."""
    bv = _view(b, "wgmma operand b", loc)
    if ctx.nonuniform_guards:
        raise TraceError("wgmma is guarded by a condition that differs between threads", loc,
                         fix="wgmma is warpgroup-wide (.sync.aligned): all 128 threads must "
                             "execute it; use a uniform condition")
    if not ctx.in_role:
        raise TraceError("wgmma with A in registers runs inside an ag.role (one warpgroup "
                         "owns the fragment)", loc, fix="put it in `with ag.role(...):`")
    if not isinstance(acc, Tile) or acc.dtype != dtypes.f32 or len(acc.shape) != 2 or \
            acc.shape[0] != 64:
        raise TraceError("wgmma accumulates into a [64, N] f32 tile (ag.zeros((64, N)))", loc)
    if len(a.shape) != 2 or a.shape[0] != 64 or \
            a.dtype not in (dtypes.bf16, dtypes.f16, dtypes.e4m3, dtypes.f32):
        raise TraceError(f"a register A operand is a [64, K] bf16, f16, e4m3 or f32 (tf32) "
                         f"tile, got "
                         f"{a.shape} {a.dtype}", loc,
                         fix="convert the accumulator it comes from: p.to(ag.bf16)")
    m, n = acc.shape
    k = a.shape[1]
    k_step = 32 // a.dtype.bytes     # 32 bytes of K per instruction
    if k % k_step:
        raise TraceError(f"wgmma K={k} must be a multiple of {k_step} for {a.dtype} inputs",
                         loc)
    if bv.buffer.type.dtype != a.dtype:
        raise TraceError(f"wgmma operands must have one dtype: A is {a.dtype}, B is "
                         f"{bv.buffer.type.dtype}", loc)
    if trans_b and a.dtype.bits != 16:
        raise TraceError(f"an MN-major B (trans_b=True) of an {a.dtype} wgmma: PTX transposes "
                         f"16-bit operands only", loc,
                         fix="store B with K contiguous (e.g. V transposed, [D, keys]) and "
                             "pass trans_b=False")
    if trans_b:
        _check_mn_major_b(bv, n, k, loc,
                          fix="load V [K, N] as N/64 boxes of [K][64] (128-byte swizzle)")
    elif (bv.rows, bv.cols) != (n, k):
        raise TraceError(f"wgmma shapes disagree: a is 64x{k}, b is {bv.rows}x{bv.cols} "
                         f"(need {n}x{k}), acc is 64x{n}", loc)
    if n % 8 or not 8 <= n <= 256:
        raise TraceError(f"wgmma N={n} must be a multiple of 8 in [8, 256]", loc)
    if a_acc_order and a.dtype.bits == 16:
        raise TraceError(f"wgmma(a_acc_order=True) reads an 8-bit or 32-bit A in the "
                         f"accumulator's order; a {a.dtype} A already is the accumulator "
                         f"pattern", loc,
                         fix="leave a_acc_order out for 16-bit P")
    ctx.builder.append(O.Wgmma(acc.value, a.value, bv.materialize(), trans_b,
                               a_acc_order=bool(a_acc_order), loc=loc))
    return acc


def stmatrix(dst, tile: Tile) -> None:
    """Store a 16-bit register tile into a shared-memory view (stmatrix.m8n8.x4)."""
    ctx = current("ag.stmatrix")
    loc = user_loc()
    _group_wide("stmatrix", ctx, loc)
    view = _view(dst, "stmatrix destination", loc)
    if tile.dtype.bits != 16 or tuple(tile.shape) != view.shape:
        raise TraceError(f"stmatrix stores a 16-bit tile of the view's shape {view.shape}; got "
                         f"{tile.shape} {tile.dtype}", loc)
    ctx.builder.append(O.StMatrix(view.materialize(), tile.value, loc=loc))


def store_shared(dst, tile: Tile, *, transposed: bool = False) -> None:
    """Store a register tile into a shared-memory view of its shape, each thread its own
    elements by st.shared in the tile's layout: a "rows" tile (an `ag.gather`'s, whole rows a
    thread) by 16-byte chunks, 8 consecutive columns of bf16 / fp16. A swizzled view (a row
    is the swizzle span, as ag.smem requires) is written at the swizzled addresses, the
    layout a TMA copy and a wgmma operand read: a gather straight into a wgmma operand tile
    (the interpreter and the verifier see the logical [rows, cols] view either way). For a block
    of rows that a TMA store then copies to global memory whole (`ag.tma.store`: the lowering
    fences the writes to the async proxy and puts a barrier before the copy), so a CTA's rows
    reach global memory as one contiguous bulk copy instead of one row-strided vector store a
    thread (the im2col pixel gather, docs/perf/conv.md). Recorded as the IR's shared-memory
    write (the `stmatrix` op, `plain`), which the interpreter and the verifier read element by
    element whatever its layout; 16-bit tiles in the accumulator fragment: `ag.stmatrix`.

    `transposed=True` writes a 2-d tile MN-major, the inverse of `ag.load_shared(transposed=
    True)`: the view is `A` atoms of [K][W] stacked along its rows (W = its columns, the
    swizzle span for a swizzled view: 32 f32 or 64 bf16 with swizzle=128), and element (m, k)
    of the [A * W, K] tile goes to view element ((m // W) * K + k, m % W). A wgmma
    accumulator of [pixels, channels] becomes [channels][pixels] boxes, each channel's W
    pixels one contiguous (swizzled) row: the layout of an NCHW result's box for a TMA store
    (argus/kernels/conv.py, ConvSchedule(nchw_epilogue='tma')). One st.shared per element
    (the accumulator holds no two consecutive pixels of a channel); with the 128-byte swizzle
    an accumulator's f32 writes are conflict-free (a warp's 8 pixels x 4 channel pairs land
    on 32 distinct banks)."""
    ctx = current("ag.store_shared")
    loc = user_loc()
    view = _view(dst, "store_shared destination", loc)
    vt = view.buffer.type
    if transposed:
        _check_transposed_store(view, vt, tile, loc)
    elif not isinstance(tile, Tile) or tuple(tile.shape) != view.shape or \
            tile.dtype != vt.dtype:
        got = f"{tuple(tile.shape)} {tile.dtype}" if isinstance(tile, Tile) else repr(tile)
        raise TraceError(f"ag.store_shared stores a {vt.dtype} tile of the view's shape "
                         f"{view.shape}; got {got}", loc,
                         fix="convert it first (t.to(dtype)) or take a view of the tile's rows "
                             "(view.rows_of(row0, rows))")
    if tile.dtype not in (dtypes.f32, dtypes.bf16, dtypes.f16):
        raise TraceError(f"ag.store_shared moves f32, bf16 or f16 tiles, not {tile.dtype}", loc,
                         fix="convert the tile first (t.to(ag.bf16)), or store an 8-bit tile "
                             "to global memory with ag.store")
    ctx.builder.append(O.StMatrix(view.materialize(), tile.value, plain=True,
                                  transposed=bool(transposed), loc=loc))


def _check_transposed_store(view, vt, tile, loc) -> None:
    """ag.store_shared(transposed=True)'s shapes: a 2-d tile [A * W, K] of the view's dtype
    into a view [A * K, W] (A atoms of [K][W]), W the swizzle span of a swizzled view."""
    if not isinstance(tile, Tile) or len(tile.shape) != 2 or tile.dtype != vt.dtype:
        got = f"{tuple(tile.shape)} {tile.dtype}" if isinstance(tile, Tile) else repr(tile)
        raise TraceError(f"ag.store_shared(transposed=True) stores a 2-d {vt.dtype} tile; "
                         f"got {got}", loc, fix="convert it first (t.to(dtype))")
    (mn, k), w = tile.shape, view.cols
    if vt.swizzle and w * vt.dtype.bytes != vt.swizzle:
        raise TraceError(f"ag.store_shared(transposed=True) into a {vt.swizzle}-byte swizzled "
                         f"view needs rows of one swizzle span ({vt.swizzle // vt.dtype.bytes} "
                         f"elements), got {w}", loc,
                         fix=f"allocate the buffer with {vt.swizzle // vt.dtype.bytes} columns")
    if mn % w or view.rows != (mn // w) * k:
        raise TraceError(f"ag.store_shared(transposed=True): a [{mn}, {k}] tile is {mn} / {w} "
                         f"atoms of [{k}][{w}] (W = the view's columns), so the view needs "
                         f"{mn} // {w} * {k} rows; got a view of shape {view.shape}", loc,
                         fix=f"take a view of {(mn // w) * k if mn % w == 0 else '?'} rows, "
                             f"and a tile whose rows are a multiple of {w}")


def load_shared(src, *, transposed: bool = False, rows: int | None = None) -> Tile:
    """Read a 32-bit tile (f32 or i32) from an unswizzled shared-memory view, e.g. block
    scales a producer copied by TMA with each pipeline stage, inside the consume step that
    reads them. Recorded as the IR's shared-memory read (the `ldmatrix` op, which the
    interpreter and the verifier read element by element whatever its type) and rendered as
    one ld.shared per register, in the layout the tile's user needs: a one-wide window of it
    (`t[:, 0:1]`, the first of the four f32 a 16-byte TMA box holds) broadcast against an
    accumulator reads only the elements each thread multiplies.

    `transposed=True` reads an MN-major tile as its [MN, K] transpose, e.g. [channels, pixels]
    boxes of an NCHW tensor as the [pixels, channels] tf32 register A of a wgmma: the view is
    `rows // W` atoms of [K][W] stacked along its rows (W = its columns: one atom, the plain
    transpose, unswizzled; or the swizzle span, 32 f32 with swizzle=128, whose XOR spreads a
    column's reads over the banks), and element (m, k) of the [rows, K] result is element
    ((m // W) * K + k, m % W) of the view: wgmma's MN-major operand layout. `rows` defaults
    to W."""
    ctx = current("ag.load_shared")
    loc = user_loc()
    view = _view(src, "load_shared source", loc)
    dtype = view.buffer.type.dtype
    swizzle = view.buffer.type.swizzle
    if dtype.bits != 32 or (swizzle and not transposed):
        raise TraceError(f"ag.load_shared reads 32-bit unswizzled views (a swizzled one only "
                         f"transposed=True), got {dtype} with swizzle {swizzle}", loc,
                         fix="16-bit tiles in the accumulator fragment: ag.ldmatrix; "
                             "allocate the buffer with swizzle=0")
    shape = view.shape
    if transposed:
        w = view.cols
        if swizzle and w * dtype.bytes != swizzle:
            raise TraceError(f"ag.load_shared(transposed=True) of a {swizzle}-byte swizzled "
                             f"view needs rows of one swizzle span ({swizzle // dtype.bytes} "
                             f"elements), got {w}", loc,
                             fix=f"allocate the buffer with {swizzle // dtype.bytes} columns")
        mn = w if rows is None else rows
        if not isinstance(mn, int) or mn <= 0 or mn % w or view.rows % (mn // w):
            raise TraceError(f"ag.load_shared(transposed=True, rows={rows}): the view's "
                             f"{view.rows} rows are rows // {w} atoms of [K][{w}], so rows "
                             f"must be a multiple of {w} dividing them into equal atoms", loc,
                             fix="stack one [K][W] box per W rows of the result")
        shape = (mn, view.rows // (mn // w))
    elif rows is not None:
        raise TraceError("ag.load_shared(rows=...) is for transposed reads", loc,
                         fix="leave rows out, or pass transposed=True")
    v = ctx.builder.fresh(TileType(dtype, shape))
    ctx.builder.append(O.LdMatrix(v, view.materialize(), transposed=bool(transposed), loc=loc))
    return Tile(v)


def ldmatrix(src) -> Tile:
    """Load a 16-bit tile from a shared-memory view (ldmatrix.m8n8.x4)."""
    ctx = current("ag.ldmatrix")
    loc = user_loc()
    view = _view(src, "ldmatrix source", loc)
    v = ctx.builder.fresh(TileType(view.buffer.type.dtype, view.shape))
    ctx.builder.append(O.LdMatrix(v, view.materialize(), loc=loc))
    return Tile(v)
