"""The op set of Argus IR. Each class's docstring states when the op is legal.

Scalars are uniform across the executing group unless derived from `thread_index`. Register
tiles are *variables*: elementwise ops make new tiles, while `wgmma` and `assign` update the
tile named by their `acc`/`dst` operand in place, which is how values carry across `for`
iterations without block arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.ir.core import Op, Region, Value
from argus.ir.types import ScalarType, TileType

# ----------------------------------------------------------------------------- scalars


@dataclass(frozen=True)
class Const(Op):
    """A compile-time constant scalar."""

    NAME = "const"
    RESULTS = ("result",)
    result: Value
    value: int | float | bool


@dataclass(frozen=True)
class Arith(Op):
    """Binary scalar arithmetic or comparison. fn: add sub mul div floordiv mod min max
    lt le gt ge eq ne and or, and on integers the bitwise fns (argus/ir/numeric.py BITWISE:
    bitand bitor bitxor shl shr, C's & | ^ << >>, the result the left operand's type). Both
    operands are scalars of the result's kind."""

    NAME = "arith"
    RESULTS = ("result",)
    result: Value
    fn: str
    lhs: Value
    rhs: Value


@dataclass(frozen=True)
class GridIds(Op):
    """Declares the launch grid (extents computed from shape parameters) and yields the CTA's
    program ids. Exactly one per kernel, at top level, before any use of the ids. `cluster` is
    the thread-block cluster shape; the extents must be multiples of it."""

    NAME = "grid"
    RESULTS = ("ids",)
    ids: tuple[Value, ...]
    extents: tuple[Value, ...]
    cluster: tuple[int, ...] = (1, 1, 1)


@dataclass(frozen=True)
class ClusterRank(Op):
    """This CTA's rank inside its thread-block cluster (PTX %cluster_ctarank): uniform per CTA."""

    NAME = "cluster_rank"
    RESULTS = ("result",)
    result: Value


@dataclass(frozen=True)
class ThreadIndex(Op):
    """The thread's index inside the executing group (CTA or warpgroup). Non-uniform: a
    condition derived from it may not guard warpgroup-wide instructions."""

    NAME = "thread_index"
    RESULTS = ("result",)
    result: Value


# ----------------------------------------------------------------------------- control


@dataclass(frozen=True)
class For(Op):
    """A runtime loop `for var in range(start, stop, step)`; step > 0. Uniform bounds.
    `unroll` is how many iterations one trip of the rendered loop runs (the body that many
    times, the index advanced and tested between copies: the same iterations in the same
    order); lower/prefetch.py sets it so that its register ring rotates by renaming."""

    NAME = "for"
    RESULTS = ("var",)
    var: Value
    start: Value
    stop: Value
    step: Value
    body: Region
    unroll: int = 1


@dataclass(frozen=True)
class If(Op):
    """Run `body` when `cond` holds. A non-uniform cond may not guard wgmma, pipeline or
    barrier ops (they are warpgroup-wide)."""

    NAME = "if"
    cond: Value
    body: Region


@dataclass(frozen=True)
class RoleOp(Op):
    """A warp-specialized region run by `warpgroups` warpgroups with `regs` registers per
    thread (setmaxnreg; multiple of 8 in [24, 256]). `index` is the warpgroup's index inside the
    role. Roles sit at the top level of the kernel body; all threads of the CTA belong to
    exactly one role when roles are used.

    `uniform_index`: the index is read warp-uniformly (threadIdx.x / 128 broadcast from lane
    0), so ptxas keeps what derives from it (stage addresses, wgmma descriptors) in uniform
    registers instead of moving each descriptor with R2UR before its wgmma; False derives it
    per thread. No library kernel uses False today: the fp8 split loop did (uniform, ptxas
    spilled it), until its second half's wgmma was pinned (Wgmma.pinned)."""

    NAME = "role"
    RESULTS = ("index",)
    index: Value
    name: str
    warpgroups: int
    regs: int
    body: Region
    uniform_index: bool = True


# ----------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class SmemAlloc(Op):
    """A shared-memory buffer (type in result). Swizzled buffers are aligned to the swizzle
    period (1024 B for 128B) by the smem planner."""

    NAME = "smem.alloc"
    RESULTS = ("result",)
    result: Value


@dataclass(frozen=True)
class SmemSlice(Op):
    """A 2-D view of `buffer`: stage `stage` (None for an unstaged buffer), rows
    [row0, row0 + view rows). row0 is a scalar or int; views never cross a stage."""

    NAME = "smem.slice"
    RESULTS = ("result",)
    result: Value
    buffer: Value
    stage: Value | None
    row0: Value | int


@dataclass(frozen=True)
class PipelineCreate(Op):
    """An mbarrier ring of `stages` slots (in the result type). Each slot has a `full` barrier
    (TMA bytes land) and an `empty` barrier (`consumers` warpgroup arrivals release it).
    Stage and phase parity of every produce/consume are derived from per-role counters that
    continue across loops, so persistent kernels stay in phase. `peers` (set by lowering) is
    the number of CTAs whose producers write each slot (the cluster size when loads multicast):
    a slot is then released by every consumer warpgroup of every peer CTA. `payload`: each slot
    also holds one int32 that a produce step writes (Produce.payload) and the consumers read
    before consuming that fill (PipePayload), e.g. the unit a dynamic scheduler drew."""

    NAME = "pipeline"
    RESULTS = ("result",)
    # the full barriers' init count: one arrive.expect_tx per step, by the one thread that
    # issues the step's TMA loads (an `elect` of one thread in a one-warpgroup role)
    FULL_ARRIVALS = 1
    result: Value
    consumers: int
    peers: int = 1
    payload: bool = field(default=False, metadata={"elide_default": True})


@dataclass(frozen=True)
class Produce(Op):
    """One producer step: wait for slot `stage` to be empty, run `body` (TMA loads into that
    slot), arm the full barrier with the bytes the body's TMA loads deliver (`tx_bytes`, filled
    in by lowering). `payload` (a pipeline created with payload=True): an int32 scalar written
    into the slot's payload word after the empty wait and before the full barrier is armed, by
    the thread that arms it (its arrive releases the write; a consumer's full wait acquires
    it), so the consumers of this fill read it with PipePayload."""

    NAME = "produce"
    RESULTS = ("stage",)
    stage: Value
    pipe: Value
    body: Region
    tx_bytes: int = 0
    stage_expr: str = ""
    parity_expr: str = ""
    payload: Value | None = field(default=None, metadata={"elide_default": True})


@dataclass(frozen=True)
class PipePayload(Op):
    """A peek at the fill of this role's next consume step on `pipe` (a pipeline created with
    payload=True), without consuming it: wait on that step's full barrier (slot and parity
    from the role's step counter, `stage_expr` / `parity_expr` as Consume's, set by lowering)
    and read the word its produce step wrote (Produce.payload). Legal in a consuming role
    outside any step of `pipe`, where a consume step of `pipe` follows before the role's
    next release of that slot (the slot cannot be refilled before this role releases it, so
    the word stays that fill's); the step's own wait then finds the phase complete. The
    dynamic scheduler's consumers learn their next unit this way."""

    NAME = "pipe.peek"
    RESULTS = ("result",)
    result: Value
    pipe: Value
    stage_expr: str = ""
    parity_expr: str = ""


@dataclass(frozen=True)
class Consume(Op):
    """One consumer step: wait for slot `stage` to be full, run `body`, retire its async
    readers (wgmma.wait_group), then release the slot (one arrive per warpgroup).
    `stage_expr`/`parity_expr` as for Produce (the wait is on the *full* barrier);
    `arrivals` is the empty barrier's init count (consumer warpgroups), set by lowering.
    `wgmma_in_flight` (set by lowering): 0 = wait for this step's wgmma (wait_group 0) and
    release the slot at the end of the step; 1 = keep this step's wgmma group in flight, wait
    with wait_group 1 (which retires the previous step's group) and release the previous
    step's slot then; the last slot is released after a wait_group 0 before the accumulator
    is read. Either way a slot is released only after the wgmma that read it retired.
    `whole_step` (set by the kernel, `pipe.consume(whole_step=True)`): with wgmma_in_flight =
    1, every group this step commits stays in flight at its end, not only its last: the wait
    is wait_group N, N = the step's groups still in flight, the deepest that still retires
    every group of the previous step (whose slot is released right after it). A 128-row
    ping-pong tile commits two m64 groups per step; wait_group 1 would retire the first of
    them too (CUTLASS keeps a whole k tile in flight). No effect with wgmma_in_flight = 0."""

    NAME = "consume"
    RESULTS = ("stage",)
    stage: Value
    pipe: Value
    body: Region
    stage_expr: str = ""
    parity_expr: str = ""
    arrivals: int = 0
    wgmma_in_flight: int = 0
    whole_step: bool = False


@dataclass(frozen=True)
class PipeSkip(Op):
    """Advance this warpgroup's step counter on `pipe` by `steps` (nothing when <= 0, like a
    loop of that many steps) without waiting or releasing: the steps another warpgroup of
    the same role consumes in its turn (ping-pong).
    Legal in a consumer role whose warpgroups take turns on the pipe: each step is consumed
    by exactly one of them, so the empty barriers expect one arrival per step (per peer)."""

    NAME = "pipe.skip"
    pipe: Value
    steps: Value | int


@dataclass(frozen=True)
class TmaLoad(Op):
    """Bulk tensor copy of the box `dst.shape` at element coordinates `coords` (one per tensor
    dim, outermost first) into smem view `dst`. Legal only inside `produce`. Out-of-bounds
    elements are zero-filled; the full box counts toward the barrier's bytes.
    Lowering fills `box` (the tensor map's box, outermost first), `swizzle` (the tensor map's
    swizzle in bytes) and `bytes` (what the copy credits to each barrier).
    `multicast`: the box lands at the same offset in every CTA of the cluster and credits
    every CTA's barrier (`.multicast::cluster`); all CTAs of the cluster run the same code, so
    each CTA receives one such box from every peer.
    `elem_strides` (one per tensor dim, outermost first; () = all 1): the tensor map's
    elementStrides, the box's element i along dim d read from coords[d] + i * elem_strides[d]
    (the innermost stride is 1: TMA ignores it). `box` stays the elements that land (the
    view's shape); the tensor map's boxDim is box[d] * elem_strides[d] (cuTensorMapEncodeTiled:
    "to load N elements along dim i, boxDim[i] must be set to N * elementStrides[i]")."""

    NAME = "tma.load"
    dst: Value
    tensor: Value
    coords: tuple[Value, ...]
    box: tuple[int, ...] = ()
    swizzle: int = -1
    bytes: int = 0
    multicast: bool = False
    elem_strides: tuple[int, ...] = field(default=(), metadata={"elide_default": True})


@dataclass(frozen=True)
class TmaPrefetch(Op):
    """A hint (PTX ISA "cp.async.bulk.prefetch.tensor", .L2): bring the box at element
    coordinates `coords` of `tensor` (outermost first) from global memory into L2. No shared
    memory, no barrier, no result; the box and swizzle are those of a tma.load of the same
    view (the DSL takes them from it), so both use one tensor map. It moves nothing the
    kernel reads: a line that another grid writes later is updated in L2 (the point of
    coherence), so it orders nothing and races with nothing, and may come before a PDL
    wait; the loads that follow read what they would have read, sooner. Issued by the thread
    that runs it (an elected producer thread: electable)."""

    NAME = "tma.prefetch"
    tensor: Value
    coords: tuple[Value, ...]
    box: tuple[int, ...] = ()
    swizzle: int = 0


@dataclass(frozen=True)
class TmaStore(Op):
    """Bulk tensor copy of smem view `src` to `tensor` at `coords` (out-of-bounds parts are
    dropped). The source must have been made visible to the async proxy (the lowering fences).
    Issued once per executing group, by its thread 0 (as are its commit and wait): a store is
    no barrier arrival, so who issues it is the op's definition, not an `elect`."""

    NAME = "tma.store"
    tensor: Value
    coords: tuple[Value, ...]
    src: Value


@dataclass(frozen=True)
class Wgmma(Op):
    """acc[64*j .. , N] += a[M, K] @ b^T with a, b shared-memory views (K-major, b is [N, K];
    or `a` a bf16/f16 [64, K] register tile held in the A fragment, see a_in_registers;
    `trans_b` means b is [K, N], MN-major; `trans_a` means a is [K, M] MN-major, with a K-major
    b). Executed by a whole warpgroup; M = 64 per warpgroup, N in 8..256 step 8, K a multiple
    of 32 bytes (16 bf16/f16, 8 f32, 32 e4m3); e4m3 and f32 operands are K-major only. f32
    views are multiplied as tf32 (PTX wgmma `.tf32`, the only wgmma over 32-bit elements: a
    10-bit mantissa, fp32 accumulation), which the DSL admits only under `precision="tf32"`;
    the interpreter drops their 13 low bits (dtypes.truncate_to_tf32). Lowering fills
    `a_desc`/`b_desc` = (swizzle_bytes, lbo_bytes, sbo_bytes, k_step_advance_bytes), the
    advance per instruction (32 bytes of K into a K-major row, 16 rows of an MN-major atom):
    the matrix-descriptor fields codegen encodes (PTX ISA "Matrix Descriptor Format")."""

    NAME = "wgmma"
    acc: Value
    a: Value
    b: Value
    trans_b: bool = False
    a_desc: tuple[int, ...] = ()
    b_desc: tuple[int, ...] = ()
    # a is MN-major: its 64 rows stored as 64 / W column atoms of [K][W] (W = one swizzle
    # span of elements), as TMA writes boxes of a [K, M] tensor (16-bit only)
    trans_a: bool = False
    # acc = a @ b^T instead of acc += (scale-d = 0 on the first k instruction): the block
    # partial of fp8 promotion written into a tile that lives across K steps, so the next
    # block's wgmma can issue into the other of two such tiles before this one is promoted
    overwrite: bool = False
    # lowering's finding (lower/accumulators.py), no change of meaning: the group's first k
    # instruction reads nothing of `acc` (scale-d = 0: `overwrite`, or the first wgmma into a
    # by_wgmma zero tile, right after it), so codegen binds its registers write-only ("=f")
    acc_write_only: bool = False
    # the kernel's request, no change of meaning: the issue (its wgmma.fence) stays behind the
    # ops before it in the machine code (codegen: wgmma_fence_pinned, a branch ptxas does not
    # hoist the wgmma across). ptxas moves a wgmma above independent register work: the
    # split fp8 promotion's second column half above the first half's FFMAs, so both
    # partials were live and the 128 x 256 consumer spilled (gemm_fp8.split_promoted_mma).
    # Shared-memory A only: codegen refuses it on a register A
    pinned: bool = False
    # an 8-bit register A read in the accumulator's own order (target/fragments.py
    # AccOrderA8): k-position k of the product takes column acc_order_col(k) of `a`, i.e.
    # acc += a[:, acc_order_col] @ b^T; legal only when b's k rows are in that order too (FP8
    # attention's V^T with its keys permuted inside each 32-key group; the verifier checks
    # P's key against V's row through the same map). No shuffles in codegen
    a_acc_order: bool = False

    @property
    def a_in_registers(self) -> bool:
        """A is a bf16/f16 [64, K] register tile in the A fragment (the "rs" form)."""
        return isinstance(self.a.type, TileType)

    @property
    def k_extent(self) -> int:
        """K of the product (the A view's columns, or an MN-major A's rows per atom)."""
        rows, cols = self.a.type.shape[-2], self.a.type.shape[-1]
        return rows // max(1, 64 // cols) if self.trans_a else cols


@dataclass(frozen=True)
class StMatrix(Op):
    """Store a register tile into smem view `dst`: element (i, j) of `src` to element (i, j)
    of the view. A 16-bit tile in the accumulator fragment through stmatrix.m8n8.x4 (the
    epilogue path from wgmma accumulators to a TMA store); with `plain`, any f32 / bf16 / f16
    tile of an unswizzled view by st.shared in the tile's own layout (`ag.store_shared`: a
    "rows" tile of gathered pixels staged for a TMA store, 16 bytes a chunk), so the
    interpreter, the verifier and the sync lowering see one shared-memory write either way.
    With `transposed` (plain only: ag.store_shared(transposed=True)) the MN-major write, the
    inverse of O.LdMatrix.transposed: the [A*K, W] view is A atoms of [K][W], and element
    (m, k) of the [A*W, K] tile goes to view element ((m // W) * K + k, m % W) (A = 1: the
    plain transpose), e.g. an accumulator of [pixels, channels] staged as [channels][pixels]
    boxes of an NCHW result for a TMA store."""

    NAME = "stmatrix"
    dst: Value
    src: Value
    plain: bool = field(default=False, metadata={"elide_default": True})
    transposed: bool = field(default=False, metadata={"elide_default": True})


@dataclass(frozen=True)
class LdMatrix(Op):
    """Load a register tile from smem view `src`: a 16-bit tile in the accumulator fragment
    through ldmatrix.m8n8.x4, or a 32-bit tile of an unswizzled view (`ag.load_shared`:
    block scales) by ld.shared in whatever layout its user needs. Element (i, j) of the
    result is element (i, j) of the view (so interpreter and verifier read any type), or with
    `transposed` (32-bit only: ag.load_shared(transposed=True)) the MN-major read: the
    [A*K, W] view is A atoms of [K][W], and element (m, k) of the [A*W, K] result is element
    ((m // W) * K + k, m % W) of the view (A = 1: the plain transpose)."""

    NAME = "ldmatrix"
    RESULTS = ("result",)
    result: Value
    src: Value
    transposed: bool = False


@dataclass(frozen=True)
class Load(Op):
    """Load the tile at `offsets` (one scalar per tensor dim) from a global tensor, with
    elements outside the tensor set to `other`."""

    NAME = "load"
    RESULTS = ("result",)
    result: Value
    tensor: Value
    offsets: tuple[Value, ...]
    other: float = 0.0


@dataclass(frozen=True)
class Gather(Op):
    """Load a tile element by element from computed positions: element i of the result is
    tensor[indices[0][i], ..., indices[-1][i]], one index per tensor dim, each an integer
    tile that broadcasts to the result's shape (numpy rules) or a scalar; an element with an
    index outside its dim reads `other` (padding, with no mask). Legal for a result of the
    tensor's dtype and integer indices. Each thread computes the addresses of the elements
    it holds (no data moves between threads), so the result's layout is the one its users
    need; layout inference gives it "rows" (whole rows per thread: its stores vectorize)."""

    NAME = "gather"
    RESULTS = ("result",)
    result: Value
    tensor: Value
    indices: tuple[Value, ...]
    other: float = 0.0


@dataclass(frozen=True)
class SmemGather(Op):
    """Read a register tile element by element from computed positions of an unswizzled
    shared-memory view `src` ([rows, cols]): element i is src[indices[0][i], indices[1][i]]
    (each an integer tile broadcasting to the result's shape, or a scalar); an index outside
    its dim reads `other`. Legal for a result of the view's dtype; the threads that wrote the
    elements read must have passed a CTA barrier since (lower/sync.py puts one after the
    buffer's last generic write, verify/check_sync.py's sync.exchange proves it). Layout as
    `Gather`'s ("rows"): a thread's indices name its own elements, one ld.shared each.
    `inside`: the dims whose index the trace proved inside [0, extent) from its static
    interval (ir/numeric.py: aranges and constants), which need no guard (the im2col span
    kernels' columns: a compare an element less)."""

    NAME = "smem.gather"
    RESULTS = ("result",)
    result: Value
    src: Value
    indices: tuple[Value, ...]
    other: float = 0.0
    inside: tuple[int, ...] = field(default=(), metadata={"elide_default": True})


@dataclass(frozen=True)
class LoadScalar(Op):
    """Read one element of a global tensor at `offsets` (one scalar per tensor dim) into a
    uniform scalar; an element outside the tensor reads as `other`. An f32/bf16/f16 tensor
    gives an f32 scalar (widening is exact), an i32/i64/u32 tensor a scalar of its own type."""

    NAME = "load.scalar"
    RESULTS = ("result",)
    result: Value
    tensor: Value
    offsets: tuple[Value, ...]
    other: float = 0.0


@dataclass(frozen=True)
class Store(Op):
    """Store tile `value` to a global tensor at `offsets`; elements outside the tensor are
    dropped. The tile's dtype must equal the tensor's. `transposed`: the tile's two axes are
    swapped on the way, element (i, j) going to (offsets[-2] + j, offsets[-1] + i) — a swap-AB
    GEMM computes C^T and stores it into C this way; any other 2-d register tile too (a layout
    copy: codegen stores its layout relabeled, RL.transpose)."""

    NAME = "store"
    tensor: Value
    offsets: tuple[Value, ...]
    value: Value
    transposed: bool = False


@dataclass(frozen=True)
class AtomicAdd(Op):
    """Add tile `value` elementwise into a global tensor at `offsets` by atomic reductions
    (PTX red.global.add.f32 / .s32: relaxed, GPU scope), elements outside the tensor dropped.
    Each element of the tile is added once (by one thread of each replica class of the tile's
    layout: a replicated element is not added twice). Legal for f32 and i32 tensors, with the
    tile of the tensor's dtype. Not a store: the additions of any threads and CTAs to one
    element commute and none is lost, so store.once does not apply; the verifier records it
    as an atomic site, never as a store (verify/check_atomics.py says what it proves)."""

    NAME = "atomic.add"
    tensor: Value
    offsets: tuple[Value, ...]
    value: Value


@dataclass(frozen=True)
class AtomicFetchAdd(Op):
    """One atomic read-modify-write of one element of an i32 global tensor for the executing
    group (the CTA, or one warpgroup of a role): a group barrier (every thread of the group
    has run the ops before it), then one thread runs PTX atom.acq_rel.gpu.global.add.u32 of
    the uniform i32 scalar `value` at `offsets`, or with `wrap` atom.acq_rel.gpu.global.inc.u32
    (value 1; the element becomes 0 when it was >= wrap - 1, else old + 1: a counter of wrap
    arrivals that resets itself), and `result`, the element's old value, is broadcast to the
    group through `scratch` (one i32 shared-memory slot per warpgroup copy, placed by
    lower/smem.py) and a second group barrier. acq_rel because the PTX memory model's release
    and acquire patterns are per thread: the group's stores reach that one thread through the
    first barrier, so the release must be its own and after it (a `fence` each thread ran
    before the barrier precedes no strong write of that thread), and the group's later loads
    see what it acquired through the second barrier (CUTLASS's barrier: red.release by thread
    0 after __syncthreads, ld.acquire by thread 0 before it). Offsets outside the tensor: no
    atomic, result -1. Legal where the whole group reaches it (not under a per-thread guard).
    The old values one element returns are distinct while it takes fewer than wrap (2^32
    without wrap) additions; verify/check_atomics.py proves when that is so. `alone` (set by
    lower/elect.py for the atomic in the body of an elect of one thread, e.g. a producer
    drawing its next unit): that thread is the group's only one to run it, so it runs the
    atomic into a value of its own, without the barriers and the broadcast."""

    NAME = "atomic.fetch_add"
    RESULTS = ("result",)
    result: Value
    tensor: Value
    offsets: tuple[Value, ...]
    value: Value
    wrap: Value | None = None
    scratch: tuple[Value, ...] = ()
    alone: bool = field(default=False, metadata={"elide_default": True})


@dataclass(frozen=True)
class Fence(Op):
    """fence.acq_rel.gpu by every thread of the executing group (PTX ISA "membar / fence";
    memory consistency model, release and acquire patterns): the thread's memory operations
    before it are ordered before those after it for every thread of the GPU that synchronizes
    with it. Written by the user (ag.fence) where global data crosses CTAs: between a split's
    partial stores and the atomic that counts it (release), and between the atomic that says
    every split has arrived and the loads of their partials (acquire)."""

    NAME = "fence"
    scope: str = "gpu"


@dataclass(frozen=True)
class GridDepWait(Op):
    """griddepcontrol.wait by every thread of the executing group (PTX ISA "griddepcontrol";
    CUDA programmatic dependent launch): the thread waits until every prerequisite grid (the
    kernels before this one in the stream) has completed and its memory is visible. Written by
    the user (ag.wait_prior_grids); a kernel holding one is launched with
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (the kernel attr `pdl`), so it may
    start while its predecessor still runs; with no prerequisite grid it returns at once.
    `stable`: tensor parameters the preceding kernels do not write (weights), which may be
    read before it. Legal at the top level of the kernel or of a role body, before every
    global store and every load of a tensor not in `stable` (verify/check_pdl.py)."""

    NAME = "griddep.wait"
    stable: tuple[Value, ...] = ()


@dataclass(frozen=True)
class GridDepLaunch(Op):
    """griddepcontrol.launch_dependents (PTX ISA "griddepcontrol"): lets the next kernel of the
    stream, when launched with programmatic stream serialization, start once every CTA of this
    grid issued it or exited. It orders no memory: the dependent still waits for this grid's
    completion in its own griddep.wait. Legal after this kernel's own griddep.wait (else the
    dependent may run beside this kernel's predecessor: verify/check_pdl.py)."""

    NAME = "griddep.launch_dependents"


@dataclass(frozen=True)
class Full(Op):
    """A register tile filled with a constant (zeros are `full 0.0`); an integer tile's value
    is an int (exact at any size).

    `scale_d_zero` (set by lowering for a zero accumulator whose first writer is a pipelined
    wgmma): the registers are not zeroed; the first wgmma runs with scale-d = 0 and overwrites
    them (PTX ISA wgmma.mma_async, scale-d), and they are zeroed only if no wgmma ran."""

    NAME = "full"
    RESULTS = ("result",)
    result: Value
    value: int | float
    scale_d_zero: bool = False


@dataclass(frozen=True)
class Elementwise(Op):
    """Pointwise math over tiles and scalars with numpy broadcasting (a [R,1] column or a
    [1,C] row broadcasts against [R,C]). fn is one of ELEMENTWISE_FNS.

    `emulate` (fn "exp2_approx" only; () is off): (group, count, period), the elements whose
    last-axis coordinate falls in `count` of every `period` groups of `group` columns are
    computed on the FMA pipe (a polynomial) instead of the SFU, the rest by ex2.approx.ftz;
    the rule, the arithmetic and its error are argus/target/exp2_emulation.py's. Legal where
    the choice is the same for every thread of each register (codegen checks it against the
    tile's layout: group 8 on a wgmma accumulator)."""

    NAME = "ew"
    RESULTS = ("result",)
    result: Value
    fn: str
    args: tuple[Value, ...]
    # printed only when set, so the IR of every other elementwise op reads as before
    emulate: tuple[int, ...] = field(default=(), metadata={"elide_default": True})


@dataclass(frozen=True)
class Convert(Op):
    """Convert a tile to the result's dtype: to a float, round to nearest even; a float to an
    integer, toward zero, clamped to the integer's range, NaN to 0 (INT64_MIN into i64: PTX
    cvt.rzi); an integer to a narrower one wraps; to i1, nonzero. The only way a tile changes
    type besides the operand casts of argus/ir/numeric.work_dtype."""

    NAME = "convert"
    RESULTS = ("result",)
    result: Value
    src: Value


@dataclass(frozen=True)
class Reduce(Op):
    """Reduce `src` along `axis` (any axis of a tile of rank 1-4) with fn in REDUCE_FNS,
    keeping the axis with extent 1. argmax/argmin give an i32 tile of indices along the axis
    (ties and NaNs: the smallest index, as numpy and torch); the others keep src's dtype.
    After layout inference the result's layout is the slice of src's along `axis`. When warps
    hold parts of the axis, their partials meet in shared memory: `scratch` is that buffer
    (f32 partials; argmax/argmin add an i32 buffer of their indices), one copy per warpgroup
    of a role, allocated by lower/smem.py in the shared-memory plan. `release`: the exchange
    ends with a group barrier, so the op's next write of its slots (its next iteration in a
    loop) waits until every thread has read them; lower/smem.py clears it where no such write
    can come before another barrier (module docstring there)."""

    NAME = "reduce"
    RESULTS = ("result",)
    result: Value
    src: Value
    fn: str
    axis: int
    scratch: tuple[Value, ...] = ()
    release: bool = True


@dataclass(frozen=True)
class Scan(Op):
    """Cumulative `fn` (one of SCAN_FNS) of `src` along `axis`, starting from `init` (src's
    shape with extent 1 along axis, in the slice layout of src's): result[.., j, ..] combines
    init with src[.., i, ..] for i <= j (i < j when `exclusive`; i >= j and i > j when
    `reverse`), and `total` (init's shape and layout) combines init with every element along
    the axis: the carry of a scan walked block by block. Legal when the thread bits that move
    along the axis are the lowest lane bits in order and no warp bit does (one warp holds a
    row: register runs, then `__shfl_up_sync` over the lanes, RegisterLayout.scan_plan)."""

    NAME = "scan"
    RESULTS = ("result", "total")
    result: Value
    total: Value
    src: Value
    init: Value
    fn: str
    axis: int
    reverse: bool = False
    exclusive: bool = False


@dataclass(frozen=True)
class ConvertLayout(Op):
    """The tile `src` redistributed into the result's register layout (same shape and dtype;
    only TileType.layout differs). Inserted by layout inference where an op needs an operand
    in a layout it does not have; rendered through shared memory: `scratch` is that buffer
    (the whole tile, one copy per warpgroup of a role), allocated by lower/smem.py in the
    shared-memory plan. `pad`: elements added to each row of the buffer (row pitch = last dim +
    pad), decided by layout inference where the result's threads read down the buffer's
    columns (a conversion into V x V blocks for a transposed store: one element of padding
    spreads their rows over the banks); 0 is the dense row-major buffer."""

    NAME = "convert_layout"
    RESULTS = ("result",)
    result: Value
    src: Value
    scratch: tuple[Value, ...] = ()
    pad: int = field(default=0, metadata={"elide_default": True})


@dataclass(frozen=True)
class Arange(Op):
    """The i32 index tile [0, 1, ..., n - 1] (rank 1, n = the result's extent). Legal in any
    register layout: every register renders as its coordinate, no memory."""

    NAME = "arange"
    RESULTS = ("result",)
    result: Value


@dataclass(frozen=True)
class ExpandDims(Op):
    """`src` with a unit dim inserted at `axis` (t[:, None], t[None, :]); the result has rank
    src's + 1 <= 4 and holds the same registers (layout expand(P, axis) of src's P)."""

    NAME = "expand_dims"
    RESULTS = ("result",)
    result: Value
    src: Value
    axis: int


@dataclass(frozen=True)
class TileSlice(Op):
    """The static window [start, start + result extent) of tile `src` along `axis` (a view: it
    copies nothing). On a wgmma accumulator the window is along columns, 8-aligned."""

    NAME = "tile.slice"
    RESULTS = ("result",)
    result: Value
    src: Value
    axis: int
    start: int


@dataclass(frozen=True)
class Var(Op):
    """A variable (a register tile or a runtime scalar) initialized with a copy of `init`, of
    the same type. `assign` updates it; every read of `result` sees the latest assignment in
    program order. This is how a value rebound in an `ag.range` / `ag.when` body or a pipeline
    step carries to the next iteration and out of the region: `var` before the region,
    `assign` at the end of its body (argus/dsl/carry.py)."""

    NAME = "var"
    RESULTS = ("result",)
    result: Value
    init: Value


@dataclass(frozen=True)
class Assign(Op):
    """Overwrite variable `dst` (a `var`, or a tile that wgmma accumulates into) with `src`
    (same shape and dtype for tiles, same type for scalars): the loop-carried update."""

    NAME = "assign"
    dst: Value
    src: Value


# ----------------------------------------------------------------------------- synchronization
# Inserted by lower/sync.py after every other pass: each is one synchronization decision,
# rendered by codegen as it stands and proved by the verifier. The numpy semantics need none
# of them (the interpreter runs a step's ops in order), so each is a no-op there.


@dataclass(frozen=True)
class WgmmaFence(Op):
    """wgmma.fence before a wgmma issue (PTX ISA "wgmma.fence"): orders this warpgroup's
    earlier register accesses of the accumulators `tiles` (and, with `a_registers`, of the
    register A operand of the wgmma that follows) before the asynchronous reads and writes of
    that wgmma. Legal directly before a `wgmma`, in the warpgroup that issues it; codegen also
    pins the tiles' registers (fence_operands). `a_copy` (with `a_registers`): the packed A
    registers are also copied in place (an identity prmt each, here and at the fence after
    the wait that retires the group) instead of only pinned (an empty asm, no instruction):
    lower/sync.py sets it where the A tile is invariant in the innermost loop issuing the
    wgmma (defined before it, computed in it from invariant registers alone, or loaded in it
    from a global tensor at an invariant address: _loop_defs; a loop-invariant fragment, which
    ptxas miscompiled with the pin alone) and clears it elsewhere (the loop redefines the
    fragment each iteration, or no loop issues it). The default is the copy: IR built or
    parsed without that decision (hand-written, a test's) gets the fence that is right for
    every fragment; the pin is right only where the fragment is not loop-invariant, and the
    copy costs only a prmt a register. The printed IR names the pins alone (`a_copy=false`).
    `a_scope` (with `a_registers`, set by lower/sync.py): the packed A registers are declared
    this many regions out from the one issuing the wgmma, because its group stays in flight
    past the end of the issuing region(s) (FA3's P_{j-1} V_{j-1} issued in K_j's consume step
    and retired in V_{j-1}'s, after K_j's release); 0, the default: in the issuing region.
    The group is retired before the end of the region that declares them."""

    NAME = "wgmma.fence"
    tiles: tuple[Value, ...]
    a_registers: bool = False
    a_copy: bool = field(default=True, metadata={"elide_default": True})
    a_scope: int = field(default=0, metadata={"elide_default": True})


@dataclass(frozen=True)
class WgmmaCommit(Op):
    """wgmma.commit_group: the wgmma issued since the last commit form one group, which
    `wgmma.wait` retires. Legal directly after the wgmma of a group (after a `wgmma.fence`)."""

    NAME = "wgmma.commit"


@dataclass(frozen=True)
class WgmmaWait(Op):
    """wgmma.wait_group `pending`: blocks until at most `pending` committed groups of this
    warpgroup are in flight. Only then may a retired group's accumulator be read or written
    by other instructions, or the shared memory it read be released or overwritten. `note`
    is a comment for the generated code. `pinned` (lower/sync.py sets it where register-tile
    work ran while the retired group was in flight): the wait stays behind that work in the
    machine code too; ptxas moves a wait to the top of its basic block, so codegen renders a
    block boundary before it (device header: wgmma_wait_pinned)."""

    NAME = "wgmma.wait"
    pending: int
    note: str = ""
    pinned: bool = False


@dataclass(frozen=True)
class FenceOperands(Op):
    """A register fence on the accumulators `tiles` (and with `a_registers`, the packed
    register A operand of the wgmma issue it follows, or, placed later in the issue's scope,
    of the rs wgmma groups accumulating into `tiles` that the wait before it retired: those
    registers stay allocated until here): the compiler may not move their accesses across it.
    Legal after a `wgmma.wait` that retired the groups writing them. `zero_unwritten`: the
    tile is a scale-d = 0 accumulator (`full` with scale_d_zero) and is zeroed here if no
    wgmma wrote it (a K loop of zero trips)."""

    NAME = "fence.operands"
    tiles: tuple[Value, ...]
    a_registers: bool = False
    zero_unwritten: bool = False


@dataclass(frozen=True)
class SlotRelease(Op):
    """One arrive per warpgroup on the empty barrier of a pipeline slot (of every peer CTA
    when `pipe` has peers). `previous` = False: release `stage`, the enclosing consume step's
    slot. `previous` = True: release the slot held since an earlier step (if any), then hold
    `stage` (None: hold nothing). Legal inside a consumer role, after a `wgmma.wait` that
    retired every wgmma reading the released slot."""

    NAME = "pipe.release"
    pipe: Value
    stage: Value | None = None
    previous: bool = False


@dataclass(frozen=True)
class ProxyFence(Op):
    """fence.proxy.async.shared::cta: this thread's generic-proxy shared-memory writes
    (st.shared, stmatrix) become visible to the async proxy (TMA, wgmma descriptors). Legal
    anywhere; between a generic write and an async read of the same bytes it must be followed
    by a `barrier` of the writing threads before the reader issues."""

    NAME = "fence.proxy_async"


@dataclass(frozen=True)
class GroupBarrier(Op):
    """A barrier of the executing group: scope "warpgroup" (named barrier 1 + warpgroup index,
    128 threads, inside a role) or "cta" (__syncthreads). Legal where every thread of the
    group reaches it (never under a per-thread condition). `note`: a comment."""

    NAME = "barrier"
    scope: str
    note: str = ""


@dataclass(frozen=True)
class TmaStoreCommit(Op):
    """cp.async.bulk.commit_group: the bulk stores issued since the last commit form a group.
    Issued by the thread that issued the stores; legal directly after them."""

    NAME = "tma.store.commit"


@dataclass(frozen=True)
class TmaStoreWait(Op):
    """cp.async.bulk.wait_group(.read) `pending` by the issuing thread: with `read`, until the
    committed bulk stores have read their shared memory (the buffer may then be rewritten,
    after a group barrier); without, until they completed (before the CTA exits). `note` is a
    comment for the generated code."""

    NAME = "tma.store.wait"
    pending: int
    read: bool = True
    note: str = ""


@dataclass(frozen=True)
class SetMaxNReg(Op):
    """setmaxnreg.inc/dec (sm_90a): this warpgroup's per-thread register budget becomes
    `regs`; `inc` says whether that is more than the entry budget (65536 / threads rounded
    down to 8), as the instruction needs to know. Legal only as the first op of a role body."""

    NAME = "setmaxnreg"
    regs: int
    inc: bool


@dataclass(frozen=True)
class ClusterSync(Op):
    """barrier.cluster.arrive + wait by every thread of every CTA of the cluster. Legal at the
    kernel's top level only: after the barriers are initialized (before any peer multicasts
    into them or arrives on them) and before exit (no CTA leaves while peers may still write
    its shared memory)."""

    NAME = "cluster.sync"


@dataclass(frozen=True)
class TurnWait(Op):
    """The start of an ordered section `name` (ag.ordered): warpgroup wg of a role waits for
    its turn. The sections of one name run one at a time, round-robin over the role's W >= 2
    warpgroups (warpgroup 0's first, warpgroup 1's first, ..., warpgroup 0's second, ...).
    Lowered (lower/sync.py): bar.sync barriers[wg], threads, where `barriers[w]` is the named
    barrier warpgroup w waits on and `threads` the waiting warpgroup plus the passing one
    (256). Legal inside a role, at one site per name, followed in the same region by the
    section's `ordered.pass`, with no other section of the role opened in between; not inside
    a pipeline step; each warpgroup must reach it in its turn (the verifier proves it)."""

    NAME = "ordered.wait"
    name: str
    barriers: tuple[int, ...] = ()
    threads: int = 0


@dataclass(frozen=True)
class TurnPass(Op):
    """The end of an ordered section `name`: warpgroup wg hands the turn to the next warpgroup
    without waiting (lowered: bar.arrive barriers[(wg + 1) % W], threads). `initial` (placed by
    lower/sync.py after the role's setmaxnreg): run by warpgroup W - 1 alone, before any
    section, it gives warpgroup 0 the first turn. The last pass of a run is never waited on
    (the turn is left with the next warpgroup at exit, as in FlashAttention 3: the named
    barrier's partial arrival dies with the CTA)."""

    NAME = "ordered.pass"
    name: str
    barriers: tuple[int, ...] = ()
    threads: int = 0
    initial: bool = False


@dataclass(frozen=True)
class Elect(Op):
    """Thread election: `threads` threads of the executing group of `group` threads (a role's
    warpgroup, 128, or the CTA outside roles) run `body`, the others skip it. threads = 1 is
    thread 0 of the group; threads = n > 1 is one thread per group / n consecutive threads
    (n = 4 in a warpgroup: one per warp, elect.sync's pattern); n divides `group`, which is
    the group the op runs in (codegen renders from it and the verifier checks it, sync.elect).
    Placed by lower/elect.py around a role that only
    issues work one thread does for its warpgroup (index math, scalar reads, produce steps,
    TMA loads: `electable`); an arrive in the body (a produce step's arrive.expect_tx)
    arrives once per elected thread, which the verifier counts against the barrier's init
    count (pipe.producers). Not nested; no warpgroup-collective op (wgmma, barriers,
    setmaxnreg) and no register tile inside. `note` is a comment for the generated code."""

    NAME = "elect"
    body: Region
    threads: int = 1
    # 0: written with ag.elect() at the kernel's top level, the CTA's thread count filled in
    # by lower/elect.py (the kernel's threads are known once its roles are lowered)
    group: int = 128
    note: str = ""


# What one thread may do for its warpgroup inside an `elect`: index math, control, uniform
# scalar reads from global memory (a producer reading its coordinates: the value feeds only
# ops inside the elected body), pipeline produce steps and their TMA loads, smem views.
# AtomicFetchAdd: a producer's draw of its next unit from a global work counter (dynamic
# scheduler): one atomic per warpgroup, which the elected thread runs alone (lower/elect.py
# marks it `alone`: no group barriers, no broadcast slot)
ELECTABLE = (Const, Arith, For, If, LoadScalar, Produce, TmaLoad, TmaPrefetch, SmemSlice,
             ClusterRank, AtomicFetchAdd)


def electable(op: Op) -> bool:
    """One of ELECTABLE, or a loop-carried scalar (`var` / `assign` of a scalar: a producer
    walking its coordinates, `k = k + 64`, is index math too; a carried tile is not), or a tag
    op (no code: a TMA copy's tag.copy fields elect with the copy)."""
    from argus.ir.tag_ops import is_tag_op   # tag_ops builds on ir.core, not on this module
    if is_tag_op(op):
        return True
    if isinstance(op, Var):
        return isinstance(op.result.type, ScalarType)
    if isinstance(op, Assign):
        return isinstance(op.dst.type, ScalarType)
    return isinstance(op, ELECTABLE)


SYNC_OPS = (WgmmaFence, WgmmaCommit, WgmmaWait, FenceOperands, SlotRelease, ProxyFence,
            GroupBarrier, TmaStoreCommit, TmaStoreWait, SetMaxNReg, ClusterSync)
# the ordered sections (ag.ordered): recorded by the DSL, barrier ids filled in by lower/sync.py
ORDERED_OPS = (TurnWait, TurnPass)


ELEMENTWISE_FNS = {
    # arity 1
    "neg": 1, "abs": 1, "exp": 1, "exp2": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1,
    "erf": 1, "sigmoid": 1, "relu": 1, "recip": 1,
    # 2^x on the SFU alone (PTX ex2.approx.ftz.f32: relative error <= 2^-22, a subnormal
    # input reads as 0 and a subnormal result is flushed to 0); "exp2" is the full-range
    # libdevice exp2f, which on sm_90 costs a compare and two predicated multiplies more
    "exp2_approx": 1,
    # an f32 value rounded to tf32 (10 mantissa bits), to nearest with ties away from zero:
    # PTX cvt.rna.tf32.f32, what a tf32 wgmma operand should hold (the tensor core drops the
    # 13 low bits of an unrounded one)
    "round_tf32": 1,
    # arity 2
    "add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2, "pow": 2,
    # integer tiles only: the remainder of `div` (truncating), with the dividend's sign, as C
    "mod": 2,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2,
    # boolean (i1) tiles: & | ~
    "and": 2, "or": 2, "not": 1,
    # integer tiles only (argus/ir/numeric.py BITWISE): & | ^ of the bits, and << / >> by a count in
    # [0, bits): the result has the left operand's type; >> is arithmetic on a signed type,
    # logical on an unsigned one; << wraps modulo 2^bits
    "bitand": 2, "bitor": 2, "bitxor": 2, "shl": 2, "shr": 2,
    # arity 3
    "where": 3,
}

REDUCE_FNS = ("sum", "max", "min", "prod", "argmax", "argmin")
SCAN_FNS = ("sum", "prod", "max", "min")

ALL_OPS: dict[str, type[Op]] = {
    cls.NAME: cls
    for cls in (Const, Arith, GridIds, ClusterRank, ThreadIndex, For, If, RoleOp, SmemAlloc,
                SmemSlice,
                PipelineCreate, Produce, Consume, TmaLoad, TmaPrefetch, TmaStore, Wgmma,
                StMatrix, LdMatrix,
                Load, Gather, SmemGather, LoadScalar, Store, AtomicAdd, AtomicFetchAdd, Fence,
                GridDepWait, GridDepLaunch, Full, Elementwise,
                Convert, Reduce, Scan, TileSlice, Var, Assign, ConvertLayout, Arange,
                ExpandDims, PipeSkip, PipePayload, Elect) + SYNC_OPS
    + ORDERED_OPS
}
