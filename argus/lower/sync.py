"""Pass: make every synchronization decision an explicit IR op (ir/ops.py, "synchronization").

Runs last, on the kernel as every other pass left it; codegen renders these ops one for one and
the verifier proves them (verify/check_sync.py). Walking each region in program order, it keeps
what is in flight and inserts:

* wgmma: `wgmma.fence` before and `wgmma.commit` after every wgmma. Outside a consume step
  `wgmma.wait 0` + `fence.operands` right after. Inside a consume step the group stays in
  flight, register-A ("rs") groups too, and is retired where it must be, by the general rule:
  an op that touches a register tile of an in-flight group (its accumulator, or the A tile of
  an rs group; views included, but for a word view of a packed A fragment, lower/packed.py,
  which copies nothing: FP8 P V's per-atom groups stay in flight together) waits with
  `wgmma.wait N`, N = the groups committed after the newest such group (groups retire in
  commit order, PTX ISA "wgmma.wait_group"; at most WGMMA_WAIT_MAX, older ones retire too
  past it), then
  `fence.operands` on every group that wait retired (their packed A registers included); a
  wait retiring a group beside which register-tile work ran is `pinned` (codegen keeps it
  behind that work in the machine code, where ptxas would hoist it). So
  FlashAttention's softmax of S_j, issued before P_{j-1} V_{j-1}, waits with N = 1 and the
  P V group stays in flight beside it. An rs group's packed A registers live in the C scope of
  its issue (codegen declares them there), so such a group is retired before the region that
  issued it ends (the end of an `ag.when` / loop body, or its consume step's end), with one
  exception (`_outlives`): an rs group issued in a consume step nested in another, that reads
  no shared memory of its own step's slot and whose A tile is defined outside that step,
  stays in flight past the step's end (whose wait retires only the groups reading the slot:
  wait N, N = the groups committed after them) and is taken over by the enclosing step, where
  the general rule retires it (an op touching its registers, a covering wait, that step's end
  before its release); its issue's wgmma.fence gets `a_scope` = the steps it outlived, and
  codegen declares its packed A registers that many regions out. FA3's early K release:
  S_j and P_{j-1} V_{j-1} issued in K_j's step inside V_{j-1}'s, K_j's end `wait 1` + K_j's
  release, the softmax of S_j, V_{j-1}'s end `wait 0` + V's release. At the
  step's end: with `wgmma_in_flight` = 1 and no rs group open, `wgmma.wait 1` (retires the
  previous step's group) and the release of the previous step's slot, this one held (a
  `whole_step` step: `wgmma.wait N`, N = its groups still in flight, so none of them retires
  there and every group of the previous step does: the deepest wait before that release,
  CUTLASS's whole k tile in flight; at most WGMMA_WAIT_MAX); else
  `wgmma.wait N` retiring this step's groups and the release of this step's slot. A held
  slot is released after `wgmma.wait 0` before the next op that is not pure scalar/control
  work (the accumulator may be read there) and at the end of the role.
  Overwriting wgmma (fp8 promotion with `overlap`): a smem-operand wgmma with
  `overwrite` into a tile no held or in-flight group writes issues beside the previous step's
  held group (no flush), and so do `var`/`assign` and global loads that touch no held
  accumulator while every held one is such a partial; the op that reads the held partial
  then retires it with `wgmma.wait N`, N = the groups issued beside it, so the new block's
  group stays in flight during the promotion. Kernels without overwriting wgmma are lowered as before.
  A loop body is walked with what is in flight when an iteration begins, the previous
  iteration's group included (to a fixpoint), so an op ahead of the consume step reading the
  accumulator waits in iterations 2 and later too; a wgmma accumulating into an in-flight
  accumulator (the next k step) issues behind it without a wait.
* proxy fences: a `fence.proxy_async` + group `barrier` between generic-proxy shared-memory
  writes (stmatrix) and an async-proxy reader of that buffer (a TMA store, or a wgmma reading
  it as an operand). One fence covers a run of TMA stores.
* TMA stores: `tma.store.commit` after each store; the read-wait right after it, unless only
  this role's stmatrix writes the buffer (then it waits at the role's next stmatrix, behind a
  barrier: architecture note 9), and `tma.store.wait` (completion) at the end of the role.
  That deferred read-wait waits only for the stores that may read the slot being written:
  the issuing thread's bulk groups retire in commit order (PTX ISA
  "cp.async.bulk.wait_group": `.read N` leaves at most the newest N reading), so before an
  stmatrix into a slot it is `wait_group.read N`, N = the groups committed after the newest
  one whose source may be that slot (same buffer, stage not provably different: stages are
  compared as affine forms over their leaves, `2 wg + 1` vs `2 wg`), and no wait at all
  where none may be. An epilogue staging 64-column blocks in two slots waits `read 1`
  before reusing a slot while the other slot's store keeps reading. Paths are tracked one by
  one (a loop to a fixpoint around its back edge, where a stage mentioning a value the body
  defines, or the induction variable, may be any slot; an `if` taken or not); past
  MAX_STORE_PATHS paths or loop passes it waits `read 0` as before.
* roles: `setmaxnreg` first in each role with a register budget (inc above the entry budget,
  dec below), a CTA barrier (or a cluster barrier) after the pipelines' init, and a cluster
  barrier before exit.
* ordered sections (ag.ordered): each (role, section name) gets W named barriers, one per
  warpgroup, numbered after the group barriers (1 + warpgroup index, codegen/cuda/sync.py);
  `ordered.wait` / `ordered.pass` get their ids and thread count (waiter + passer: 256), and
  the role starts with the initial pass that gives warpgroup 0 the first turn. A pass does
  not retire the in-flight wgmma group (the next warpgroup's MMAs may start while this one's
  last group finishes: the point of ping-pong); a wait does, like any other op, so no slot is
  held while waiting for a turn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from argus import config
from argus.errors import CompileError, Loc
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.ir.tag_ops import is_tag_op
from argus.ir.types import ScalarType, TensorType, TileType
from argus.target.limits import (NAMED_BARRIERS, WARPGROUP_SIZE, WGMMA_WAIT_MAX,
                                 entry_registers)

# Ops that may run while a consumer's last wgmma group is still in flight (no accumulator
# read, no shared-memory write): pure scalar work and control whose bodies are walked.
NO_FLUSH = (O.For, O.Consume, O.Const, O.Arith, O.SmemSlice, O.If, O.ClusterRank, O.Arange,
            O.TurnPass, O.PipeSkip)


def smem_roots(kernel: Kernel) -> dict[int, int]:
    """Shared-memory view id -> the id of the allocation it slices."""
    root: dict[int, int] = {}
    for op in kernel.body.walk():
        if isinstance(op, O.SmemSlice):
            root[op.result.id] = root.get(op.buffer.id, op.buffer.id)
    return root


def deferrable_store_buffers(kernel: Kernel, root: dict[int, int]) -> set[int]:
    """Shared buffers that TMA stores read and that only stmatrix of the storing role writes:
    their read-wait may move to that role's next smem write. A buffer another role writes, or
    TMA loads into, keeps the wait right after the store."""
    writers: dict[int, set] = {}
    stored: dict[int, set] = {}
    for role in (op for op in kernel.body.ops if isinstance(op, O.RoleOp)):
        for op in role.body.walk():
            if isinstance(op, O.StMatrix):
                writers.setdefault(root.get(op.dst.id, op.dst.id), set()).add(role.name)
            elif isinstance(op, O.TmaLoad):
                writers.setdefault(root.get(op.dst.id, op.dst.id), set()).add(None)
            elif isinstance(op, O.TmaStore):
                stored.setdefault(root.get(op.src.id, op.src.id), set()).add(role.name)
    return {buf for buf, roles in stored.items()
            if len(roles) == 1 and writers.get(buf, set()) <= roles}


@dataclass(eq=False)
class _Group:
    """A committed wgmma group still in flight inside a consume step: its accumulator, its
    register A tile (rs form, else None), and the region depth it was issued at."""

    acc: Value
    a: Value | None
    depth: int
    # register-tile work ran while the group was in flight: the wait that retires it is
    # pinned behind that work (WgmmaWait.pinned: ptxas would move it above the work)
    overlapped: bool = False
    # an overwriting wgmma issued while an earlier step's group was still held (`_beside`)
    beside: bool = False
    # the wgmma.fence (its a_scope counts the consume steps the group outlives) and
    # the ids of the pipeline stages whose shared memory it reads (None: a view of no stage)
    fence: O.WgmmaFence | None = None
    stages: frozenset | None = None


A_REGS_NOTE = "the A registers are read until the group retires"


@dataclass
class _State:
    root: dict[int, int]
    deferrable: set[int]
    in_role: bool = False
    # consume steps being walked: the groups each issued that are still in flight
    in_consume: list[list[_Group]] = field(default_factory=list)
    # every in-flight group of those steps, in commit order (oldest first): wait N retires
    # all but the newest N of them
    inflight: list[_Group] = field(default_factory=list)
    depth: int = 0                    # regions entered (an rs group retires before its own ends)
    def_depth: dict = field(default_factory=dict)   # value id -> depth of its defining region
    # id(wgmma.fence) -> (the fence, its a_scope): rs groups kept in flight past their step
    a_scopes: dict = field(default_factory=dict)
    tile_root: dict[int, int] = field(default_factory=dict)  # register view -> its tile
    # pipe id -> (pipe, accumulators) of a consume step whose last group is still in flight
    pending: dict[int, tuple[Value, list[Value]]] = field(default_factory=dict)
    lazy: set[int] = field(default_factory=set)     # scale-d = 0 accumulators
    overwritten: set[int] = field(default_factory=set)  # tiles of overwriting wgmma
    store_unfenced: bool = True       # generic smem writes since the last proxy fence
    store_read_pending: bool = False  # deferred TMA stores may still read their buffer
    # those deferred stores' groups in commit order, as their source slots: one tuple per
    # path that reaches here; None where too many paths (then `read 0`)
    store_paths: frozenset | None = frozenset({()})
    defs: dict = field(default_factory=dict)  # value id -> its defining op (stage arithmetic)
    runs: dict = field(default_factory=dict)  # id(stmatrix) -> the views its run writes
    tma_stores: bool = False
    generic_unfenced: set[int] = field(default_factory=set)  # buffers written, not fenced
    # values an enclosing loop body defines that this walk has not reached: at the top of an
    # iteration the previous iteration's such accumulator is dead (and out of scope)
    fresh: frozenset = frozenset()
    # the register tiles (and scalars) whose value changes across the iterations of the
    # innermost enclosing loop (_loop_defs); None outside every loop: a register A fragment
    # not among them is loop-invariant there, and its wgmma.fence copies it (_a_copy)
    loop_defs: frozenset | None = None
    turn_barriers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # this role's
    # shared exchange through a buffer (store_shared, then a gather from it by other threads):
    # buffers generically written / gathered from since the last group barrier
    exchange_written: set[int] = field(default_factory=set)
    exchange_read: set[int] = field(default_factory=set)

    def scope(self) -> str:
        return "warpgroup" if self.in_role else "cta"

    def rt(self, v: Value) -> int:
        return self.root.get(v.id, v.id)

    def tile(self, v: Value) -> int:
        return self.tile_root.get(v.id, v.id)


def _retire(st: _State, groups: list[_Group], note: str, loc) -> list[O.Op]:
    """`wgmma.wait N` that retires `groups` (and every older group), N = the in-flight groups
    committed after the newest of them, then `fence.operands` on all it retired: their
    accumulators (as listed, once per group) and the packed A registers of rs groups."""
    newest = max(st.inflight.index(g) for g in groups)
    # wgmma.wait_group's N is at most WGMMA_WAIT_MAX: with more groups newer than these
    # (FP8 P V in up to 7 V^T atoms beside S), older ones retire too
    newest = max(newest, len(st.inflight) - 1 - WGMMA_WAIT_MAX)
    retired = st.inflight[:newest + 1]
    rs = any(g.a is not None for g in retired)
    accs = tuple(dict.fromkeys(g.acc for g in retired))
    st.inflight = st.inflight[newest + 1:]
    for step in st.in_consume:
        step[:] = [g for g in step if g not in retired]
    return [O.WgmmaWait(len(st.inflight), note=A_REGS_NOTE if rs else note,
                        pinned=retired[-1].overlapped, loc=loc),
            O.FenceOperands(accs, a_registers=rs, loc=loc)]


def _touches(op: O.Op, st: _State) -> list[_Group]:
    """The in-flight groups whose register tiles `op` reads or writes (views included): its
    accumulator, or the A tile of an rs group. A wgmma accumulating into an in-flight
    accumulator chains behind it (no wait); one taking such an accumulator as A does not."""
    if isinstance(op, O.Wgmma):
        a = {st.tile(op.a)} if op.a_in_registers else set()
        return [g for g in st.inflight if st.tile(g.acc) in a]
    # a view (TileSlice, ExpandDims) accesses no register (check_sync reads it so), but one
    # of an rs group's A tile retires that group here all the same: it bounds the packed A
    # fragments live at once to one (ping-pong's and the example's Q atoms; keeping all four
    # in flight raised the example's spills at head dim 256 from 80 to 316 bytes)
    used = {st.tile(v) for v in op.operands()}
    if isinstance(op, O.TileSlice) and op.result.type.packed:
        # a word view of a packed A fragment (lower/packed.py: FP8 P's k-step windows, one
        # per V^T atom): it names words the carried tile keeps live anyway and copies none,
        # so the atoms' P V groups stay in flight together (one chain on O, as from shared
        # memory); an accumulator it viewed would still retire its group
        return [g for g in st.inflight if st.tile(g.acc) in used]
    return [g for g in st.inflight
            if st.tile(g.acc) in used or (g.a is not None and st.tile(g.a) in used)]


def _loop_defs(loop: O.For, st: _State) -> frozenset:
    """The register tiles whose value `loop`'s body changes from one iteration to the next:
    those it writes in place (the targets of its `assign`s, e.g. a `var` carried across the
    back edge as FA3's packed P_{j-1} is; the accumulators of its wgmma), and the results of
    its ops that read the loop variable, such a tile, or shared memory (a buffer, a pipeline
    step). A view names its tile's registers (it writes none); an op on loop-invariant
    registers and scalars alone (a conversion of Q inside the loop) computes an invariant that
    ptxas may hoist, so it does not count.

    A read of a global tensor (load, gather, load.scalar) counts through its address alone
    (offsets, indices): at a loop-invariant address it is an invariant the compilers may
    hoist too. The kernel's tensors are `__restrict__` parameters, so NVVM proves them
    untouched by the loop's `asm volatile(... "memory")` (it already emits such a load as
    ld.global.nc, LDG.CONSTANT) and nothing but heuristics keeps the load in the loop: hoisted,
    the fragment is Q's shape, which the pin miscompiled. (NVRTC 13.0 keeps it in the loop
    today, behind the pipeline's wait: tests/unit/test_wgmma_register_a_ptx.py
    test_a_fixed_address_reload_is_copied.) Shared memory cannot be hoisted so: the
    memory-clobbering asm of the wgmma's own fences in the same loop may write it, so each
    iteration reloads it, which is what makes the pin safe."""
    views = (O.TileSlice, O.ExpandDims)
    body = list(loop.body.walk())
    varying = {loop.var.id} | {st.tile(x.dst) for x in body if isinstance(x, O.Assign)} | \
        {st.tile(x.acc) for x in body if isinstance(x, O.Wgmma)}
    for x in body:     # definitions before uses (what is written in place is seeded above)
        if isinstance(x, views) or isinstance(x, O.Assign):
            continue
        if any(st.tile(v) in varying or
               not isinstance(v.type, (TileType, ScalarType, TensorType))
               for v in x.operands()):
            varying |= {v.id for v in x.results()}
    return frozenset(varying)


def _a_copy(op: O.Wgmma, st: _State) -> bool:
    """Whether the wgmma.fence of register-A wgmma `op` copies the A registers (an identity
    prmt each, device header fence_operands) rather than pinning them (an empty asm with a
    "+r" constraint, CUTLASS's warpgroup_fence_operand, no instruction).

    Copied where the A tile is invariant in the innermost loop that issues the wgmma (defined
    before it, or computed in it from invariant registers only, or loaded in it from a global
    tensor at an invariant address: _loop_defs): ping-pong
    attention's Q, loaded once before the KV loop. There
    the pin alone left the PTX a loop-body `mov` of hoisted registers, which ptxas (NVRTC 13.0)
    coalesced with them and then reused for P once the first wgmma retired, never restoring
    them: S = P K^T from the second KV block on (commit 9879b96). A copy defines the A
    registers in the loop, right before each issue, and cannot be coalesced away.

    Pinned where the body computes the tile anew before the issue each iteration (the P
    fragment packed at the issue, from this block's scores) or rewrites it (a `var` assigned in the body: packed_p's P_{j-1},
    packed after P_{j-2} V_{j-2} retired and read by the next iteration's P V). A value carried
    across the back edge is defined in the loop too: the iteration's A registers hold what the
    body wrote in the previous iteration (or the value from before the loop, first), a phi of
    a definition inside the loop, so ptxas sees no invariant to coalesce; the pin before the
    issue and after the wait keeps them live (unmoved, unreused) while the group reads them.
    A wgmma in no loop has nothing to hoist: pinned. tests/unit/test_wgmma_register_a_ptx.py
    checks both kinds in the machine code of every library attention schedule with register
    A. ARGUS_WGMMA_A_FENCE=copy (argus/config.py) copies at every register-A fence, to time
    the two kinds against each other."""
    if config.wgmma_a_fence() == "copy":
        return True
    return st.loop_defs is not None and st.tile(op.a) not in st.loop_defs


def _retire_scope(st: _State, outer_depth: int, loc) -> list[O.Op]:
    """Retire the rs groups issued inside a region that ends here: their packed A registers
    go out of scope with it."""
    late = [g for g in st.inflight if g.a is not None and g.depth > outer_depth]
    return _retire(st, late, A_REGS_NOTE, loc) if late else []


def _stages_read(op: O.Wgmma, st: _State) -> frozenset | None:
    """The ids of the pipeline stages (consume steps' `stage` values) whose slots `op` reads
    from shared memory; None where a view slices no stage (an unstaged buffer)."""
    out = set()
    for view in ([op.b] if op.a_in_registers else [op.a, op.b]):
        v, stage = view, None
        while isinstance(d := st.defs.get(v.id), O.SmemSlice):
            if stage is None:
                stage = d.stage
            v = d.buffer
        if stage is None:
            return None
        out.add(stage.id)
    return frozenset(out)


def _outlives(step: O.Consume, g: _Group, st: _State) -> bool:
    """Whether rs group `g`, issued in consume step `step` (whose body just ended; st.depth
    is the enclosing region's), stays in flight past the step's end: it reads no shared
    memory of the step's slot (so the release need not wait for it), its A tile is defined
    outside the step (a value that outlives it: FA3's P_{j-1}, carried or converted before
    K_j's step), and an enclosing consume step takes it over, where it retires at the first
    op that touches its registers, a wait that covers it, or that step's own end (its slot
    release, or the region declaring its packed A registers: WgmmaFence.a_scope). Issued
    inside an `if` or loop of the step, it has retired at that region's end already."""
    return (g.a is not None and g.fence is not None and len(st.in_consume) >= 2
            and g.depth == st.depth + 1 and g.stages is not None
            and step.stage.id not in g.stages
            and st.def_depth.get(st.tile(g.a), 0) <= st.depth)


def _set_scopes(region: Region, scopes: dict) -> Region:
    """`region` with each wgmma.fence of `scopes` (by identity) given its a_scope."""
    ops = []
    for op in region.ops:
        if id(op) in scopes and scopes[id(op)][0] is op:
            op = op.replace(a_scope=scopes[id(op)][1])
        subs = {f.name: _set_scopes(getattr(op, f.name), scopes) for f in op.spec_fields()
                if isinstance(getattr(op, f.name), Region)}
        ops.append(op.replace(**subs) if subs else op)
    return Region(tuple(ops))


def _flush(st: _State, loc) -> list[O.Op]:
    """Retire the in-flight groups and release the slots they held. Groups this step issued
    beside them (`_beside`, committed later) stay in flight: wait N = their count."""
    if not st.pending:
        return []
    newer = len(st.inflight) if st.inflight and all(g.beside for g in st.inflight) else 0
    note = "retire the held group; this step's stays in flight" if newer else \
        "retire the last in-flight wgmma group"
    out: list[O.Op] = [O.WgmmaWait(newer, note=note, loc=loc)]
    for _pid, (pipe, accs) in sorted(st.pending.items()):
        for acc in accs:
            if acc.id not in st.fresh:
                out.append(O.FenceOperands((acc,), zero_unwritten=acc.id in st.lazy, loc=loc))
        out.append(O.SlotRelease(pipe, None, previous=True, loc=loc))
    st.pending = {}
    return out


def _proxy_fence(st: _State, loc) -> list[O.Op]:
    st.store_unfenced = False
    st.generic_unfenced = set()
    return [O.ProxyFence(loc=loc), O.GroupBarrier(st.scope(), loc=loc)]


def _generic_writes(region: Region, st: _State) -> set[int]:
    return {st.rt(op.dst) for op in region.walk() if isinstance(op, O.StMatrix)}


def _chains(op: O.Op, st: _State) -> bool:
    """A smem-operand wgmma accumulating into an accumulator of an in-flight group: it may
    issue behind that group (the point of keeping one in flight), no flush."""
    return (isinstance(op, O.Wgmma) and not op.a_in_registers
            and any(op.acc in accs for _pipe, accs in st.pending.values()))


def _beside(op: O.Op, st: _State) -> bool:
    """An overwriting smem-operand wgmma into a tile no held or in-flight group writes: it may
    issue while the previous step's group is still held (fp8 promotion's next K block into the
    other partial, before this one is promoted); the op that reads the held group's
    accumulator later retires it with wait N, N = the groups issued beside it."""
    if not (isinstance(op, O.Wgmma) and op.overwrite and not op.a_in_registers):
        return False
    busy = {st.tile(a) for _pipe, accs in st.pending.values() for a in accs} | \
        {st.tile(g.acc) for g in st.inflight}
    return st.tile(op.acc) not in busy


def _carries_beside(op: O.Op, st: _State) -> bool:
    """A loop-carried variable's declaration or update (`var`, `assign`) or a global load
    into new registers that touches no held accumulator, while every held accumulator is an
    overwriting wgmma's partial: it runs beside them (fp8 promotion's sum carried across
    steps, the next blocks' scales loaded, while the next partial computes)."""
    if not isinstance(op, (O.Var, O.Assign, O.Load, O.LoadScalar)):
        return False
    held = {st.tile(a) for _pipe, accs in st.pending.values() for a in accs}
    return bool(held) and held <= st.overwritten and \
        not held & {st.tile(v) for v in op.operands()}


MAX_STORE_PATHS = 16   # store paths tracked one by one; more: wait for every store


def _affine(v: Value, st: _State) -> tuple | None:
    """`v` as (constant, ((leaf id, coefficient), ...)) through const, add, sub and
    multiplication by a constant; any other value is a leaf. None where it reads a `var`:
    one value id holds each assignment in turn (ir.ops.Var), so two forms over it are not
    comparable (a store of slot `s`, then `s = s + 1`: the next `s - 1` is that slot)."""
    op = st.defs.get(v.id)
    if isinstance(op, O.Var):
        return None
    if isinstance(op, O.Const) and isinstance(op.value, int):
        return op.value, ()
    if isinstance(op, O.Arith) and op.fn in ("add", "sub", "mul"):
        lhs, rhs = _affine(op.lhs, st), _affine(op.rhs, st)
        if lhs is None or rhs is None:
            return None
        (c1, t1), (c2, t2) = lhs, rhs
        if op.fn == "mul":
            if t1 and t2:
                return 0, ((v.id, 1),)
            k, (c, t) = (c2, (c1, t1)) if not t2 else (c1, (c2, t2))
            return c * k, tuple((x, a * k) for x, a in t if a * k)
        sign = 1 if op.fn == "add" else -1
        terms = dict(t1)
        for x, a in t2:
            terms[x] = terms.get(x, 0) + sign * a
        return c1 + sign * c2, tuple(sorted((x, a) for x, a in terms.items() if a))
    return 0, ((v.id, 1),)


_UNKNOWN_STAGE = object()   # a staged view whose stage `_affine` cannot state


def _slot(view: Value, st: _State) -> tuple:
    """(buffer, stage) of a shared-memory view: the stage as `_affine` gives it (None for
    an unstaged buffer or a stage that reads a `var`: any slot of the buffer)."""
    v, stage = view, None
    while isinstance(op := st.defs.get(v.id), O.SmemSlice):
        if stage is None and op.stage is not None:
            stage = _affine(op.stage, st) or _UNKNOWN_STAGE
        v = op.buffer
    return st.rt(view), None if stage is _UNKNOWN_STAGE else stage


def _may_alias(a: tuple, b: tuple | None) -> bool:
    """Two slots may be the same bytes: same buffer and stages not provably different
    (unstaged, unknown, or not a nonzero constant apart)."""
    if a[0] != b[0]:
        return False
    if a[1] is None or b[1] is None:
        return True
    return a[1][1] != b[1][1] or a[1][0] == b[1][0]


def _join_paths(a, b):
    if a is None or b is None:
        return None
    out = a | b
    return out if len(out) <= MAX_STORE_PATHS else None


def _forget(paths, ids: set[int]):
    """Around a back edge: a slot whose stage mentions a value redefined by the body (or
    the induction variable) may be any slot of its buffer in the next iteration."""
    if paths is None:
        return None
    return frozenset(tuple((b, None) if stage is not None and any(x in ids for x, _ in stage[1])
                           else (b, stage) for b, stage in path) for path in paths)


def _store_back_edge(loop: O.For, st: _State):
    """The store paths when an iteration begins: before the loop, or left by the previous
    iteration, to a fixpoint (walks copies); None if it does not settle."""
    ids = {v.id for x in loop.body.walk() for v in x.results()} | \
        {v.id for v in loop.results()}
    entry = st.store_paths
    for _ in range(8):
        trial = dataclasses.replace(
            st, in_consume=[list(gs) for gs in st.in_consume], inflight=list(st.inflight),
            pending=dict(st.pending), generic_unfenced=set(st.generic_unfenced),
            store_paths=entry, store_read_pending=True)
        _region(loop.body.ops, trial)
        nxt = _join_paths(entry, _forget(trial.store_paths, ids))
        if nxt == entry:
            return entry
        entry = nxt
    return None


def _stmatrix_runs(region: Region) -> dict[int, tuple[Value, ...]]:
    """id(stmatrix) -> the destinations of it and the stmatrix after it in its region, up to
    the next TMA store (the slots one read-wait before it must cover)."""
    out: dict[int, tuple[Value, ...]] = {}
    for op in region.ops:
        for sub in op.regions():
            out.update(_stmatrix_runs(sub))
    ops = region.ops
    for i, op in enumerate(ops):
        if isinstance(op, O.StMatrix):
            run = []
            for x in ops[i:]:
                if isinstance(x, O.TmaStore):
                    break
                run += [x.dst] if isinstance(x, O.StMatrix) else []
            out[id(op)] = tuple(run)
    return out


def _store_read_wait(op: O.StMatrix, st: _State) -> list[O.Op]:
    """The read-wait before an stmatrix into a slot deferred stores may still read."""
    loc = op.loc
    if st.store_paths is None:
        st.store_paths = frozenset({()})
        return [O.TmaStoreWait(0, note="earlier bulk stores have read their smem", loc=loc),
                O.GroupBarrier(st.scope(), loc=loc)]
    # one wait for the run of stmatrix this one starts (up to the next store): a wait per
    # slot of a run would add a barrier each
    slots = [_slot(v, st) for v in st.runs.get(id(op), (op.dst,))]
    need = None
    for path in st.store_paths:
        hits = [i for i, s in enumerate(path) if any(_may_alias(x, s) for x in slots)]
        if hits:
            n = len(path) - hits[-1] - 1
            need = n if need is None else min(need, n)
    if need is None:
        return []   # no store that may read this slot is in flight
    st.store_paths = frozenset(path[len(path) - need:] if need else () for path in st.store_paths)
    note = "earlier bulk stores have read their smem" if not need else \
        f"the stores of this slot have read it; the newest {need} may still read theirs"
    return [O.TmaStoreWait(need, note=note, loc=loc), O.GroupBarrier(st.scope(), loc=loc)]


def exchange_read_view(op: O.Op):
    """The shared view `op` reads element by element in a layout of its own, so each thread
    may read elements other threads wrote: a shared gather (ag.gather of a view) or a 32-bit
    ag.load_shared (the ldmatrix op of an f32 / i32 view, e.g. a tile staged transposed by
    ag.store_shared(transposed=True) read back for row-contiguous global stores); else None."""
    if isinstance(op, O.SmemGather):
        return op.src
    if isinstance(op, O.LdMatrix) and op.result.type.dtype.bits == 32:
        return op.src
    return None


def _exchange(emitted: list[O.Op], st: _State) -> list[O.Op]:
    """`emitted` with a group barrier before a shared read (`exchange_read_view`: a gather of
    a view, a 32-bit load_shared) of a buffer written since the last barrier, and before a
    write of a buffer read so since then: each thread reads elements other threads wrote
    (read after write), and a rewrite must wait for every thread's reads (write after read).
    Loops and ifs were walked by their own `_region`; `_visit` widened the sets around them
    (a back edge, a skipped body). A buffer only TMA writes (a pipeline stage read by
    load_shared) is never in `exchange_written`: no barrier there."""
    out: list[O.Op] = []
    for x in emitted:
        read = exchange_read_view(x)
        if isinstance(x, O.GroupBarrier):
            st.exchange_written.clear()
            st.exchange_read.clear()
        elif read is not None and st.rt(read) in st.exchange_written:
            what = "gather" if isinstance(x, O.SmemGather) else "load_shared"
            out.append(O.GroupBarrier(st.scope(), note=f"the {what} reads other threads' "
                                      "shared writes", loc=x.loc))
            st.exchange_written.clear()
            st.exchange_read.clear()
        elif isinstance(x, O.StMatrix) and st.rt(x.dst) in st.exchange_read:
            out.append(O.GroupBarrier(st.scope(), note="every thread's gather read the "
                                      "buffer before it is rewritten", loc=x.loc))
            st.exchange_written.clear()
            st.exchange_read.clear()
        if read is not None:
            st.exchange_read.add(st.rt(read))
        elif isinstance(x, O.StMatrix):
            st.exchange_written.add(st.rt(x.dst))
        out.append(x)
    return out


def _exchange_widen(body: Region, st: _State) -> None:
    """What a loop's back edge or a skipped body may leave unbarriered: every buffer the
    body writes or gathers from (conservative: a barrier too many, never one too few)."""
    for x in body.walk():
        if exchange_read_view(x) is not None:
            st.exchange_read.add(st.rt(exchange_read_view(x)))
        elif isinstance(x, O.StMatrix):
            st.exchange_written.add(st.rt(x.dst))


def _region(ops, st: _State) -> list[O.Op]:
    out: list[O.Op] = []
    for op in ops:
        for v in op.results():
            st.def_depth.setdefault(v.id, st.depth)
        if st.pending and not isinstance(op, NO_FLUSH) and not is_tag_op(op) \
                and not _chains(op, st) and not _beside(op, st) \
                and not _carries_beside(op, st):
            out += _flush(st, op.loc)
        out += _exchange(_visit(op, st), st)
        if st.inflight and not is_tag_op(op) and \
                any(isinstance(v.type, TileType) for v in op.results()):
            for g in st.inflight:   # this work ran beside them
                g.overlapped = True
        if st.fresh:
            st.fresh = st.fresh - {v.id for v in op.results()}
    return out


def _pending_key(pending: dict) -> frozenset:
    return frozenset((pid, frozenset(a.id for a in accs)) for pid, (_p, accs) in pending.items())


def _join_pending(a: dict, b: dict) -> dict:
    """Pending on either path: per pipe, b's accumulators (as listed: one fence.operands each)
    and those only a lists."""
    out = dict(a)
    for pid, (pipe, accs) in b.items():
        out[pid] = (pipe, [*accs, *(x for x in a.get(pid, (pipe, []))[1] if x not in accs)])
    return out


def _back_edge_pending(loop: O.For, st: _State) -> dict:
    """What is pending when an iteration begins: before the loop, or left by the previous
    iteration (its last consume step's group kept in flight), to a fixpoint. Walks copies; the
    pending set only grows over the finite accumulators and pipes, so it settles."""
    entry = dict(st.pending)
    while True:
        trial = dataclasses.replace(
            st, in_consume=[list(gs) for gs in st.in_consume], inflight=list(st.inflight),
            pending=dict(entry),
            generic_unfenced=set(st.generic_unfenced),
            # copies: the trial walk clears these at the barriers it inserts, which left the
            # real walk without the barrier before a loop's gather of a buffer written
            # before the loop
            exchange_written=set(st.exchange_written),
            exchange_read=set(st.exchange_read))
        _region(loop.body.ops, trial)
        nxt = _join_pending(entry, trial.pending)
        if _pending_key(nxt) == _pending_key(entry):
            return entry
        entry = nxt


def _visit(op: O.Op, st: _State) -> list[O.Op]:  # noqa: C901 - a dispatcher over sync points
    loc = op.loc
    exchange = (set(st.exchange_written), set(st.exchange_read))
    if isinstance(op, O.For):
        _exchange_widen(op.body, st)   # an iteration begins after the previous one's accesses
        stores = any(isinstance(x, O.TmaStore) for x in op.body.walk())
        # an iteration may begin with the previous one's stores in flight and its writes
        # unfenced; the loop may also run zero times, leaving what was pending before it
        before, held = st.store_read_pending, dict(st.pending)
        paths = st.store_paths
        if stores or before:
            st.store_paths = _store_back_edge(op, st)
        st.store_read_pending |= stores
        st.store_unfenced = True
        st.generic_unfenced |= _generic_writes(op.body, st)
        # an op of the body before its consume step may run while the previous iteration's
        # group is in flight: walk the body with what flows around the back edge
        fresh, loop_defs = st.fresh, st.loop_defs
        st.fresh = fresh | {v.id for x in op.body.walk() for v in x.results()}
        st.loop_defs = _loop_defs(op, st)
        st.pending = _back_edge_pending(op, st)
        st.depth += 1
        body = _region(op.body.ops, st)
        body += _retire_scope(st, st.depth - 1, op.body.ops[-1].loc if op.body.ops else loc)
        st.depth -= 1
        st.fresh, st.loop_defs = fresh, loop_defs
        st.pending = _join_pending(held, st.pending)  # a flush in the body may not have run
        st.store_read_pending |= stores or before
        st.store_paths = _join_paths(paths, st.store_paths)   # it may run zero times
        st.store_unfenced = True
        st.generic_unfenced |= _generic_writes(op.body, st)
        _exchange_widen(op.body, st)   # what the last iteration left, or none ran:
        st.exchange_written |= exchange[0]
        st.exchange_read |= exchange[1]
        return [op.replace(body=Region(tuple(body)))]
    if isinstance(op, O.If):
        before, unfenced = st.store_read_pending, set(st.generic_unfenced)
        held, paths = dict(st.pending), st.store_paths
        st.depth += 1
        body = _region(op.body.ops, st)
        body += _retire_scope(st, st.depth - 1, op.body.ops[-1].loc if op.body.ops else loc)
        st.depth -= 1
        st.store_read_pending |= before  # the body may not have run
        st.store_paths = _join_paths(paths, st.store_paths)
        st.pending = {**held, **st.pending}  # nor a flush in it
        st.store_unfenced = True
        st.generic_unfenced |= unfenced
        st.exchange_written |= exchange[0]   # the body may not have run
        st.exchange_read |= exchange[1]
        return [op.replace(body=Region(tuple(body)))]
    if isinstance(op, O.Produce):
        return [op.replace(body=Region(tuple(_region(op.body.ops, st))))]
    if isinstance(op, O.Consume):
        st.in_consume.append([])
        st.depth += 1
        body = _region(op.body.ops, st)
        st.depth -= 1
        mine = list(st.in_consume[-1])
        # rs groups that read no slot of this step and whose A registers outlive it stay in
        # flight (_outlives): FA3's K_j released after wait 1, P_{j-1} V_{j-1} still running
        later = [g for g in mine if _outlives(op, g, st)]
        if later:
            mine = [g for g in mine if g not in later]
            st.in_consume[-1][:] = mine
            st.in_consume[-2].extend(later)
            for g in later:
                g.depth = st.depth
                st.a_scopes[id(g.fence)] = (g.fence, st.a_scopes.get(id(g.fence),
                                                                     (g.fence, 0))[1] + 1)
        accs = [g.acc for g in mine]
        if mine and not later and op.wgmma_in_flight == 1 and \
                all(g.a is None for g in mine):
            # keep this step's group in flight: wait_group 1 retires the previous step's,
            # whose slot is released now; this one's is held. A whole step keeps every group
            # it committed (`mine`: those still in flight, the newest of all): wait N, N =
            # their count, retires exactly what is older, the previous step's groups among it
            keep = min(len(mine), WGMMA_WAIT_MAX) if op.whole_step else 1
            st.in_consume.pop()
            st.inflight = [g for g in st.inflight if g not in mine]
            body += [O.WgmmaWait(keep, note="keep this step's groups in flight"
                                 if keep > 1 else "", loc=loc),
                     O.FenceOperands(tuple(accs), loc=loc),
                     O.SlotRelease(op.pipe, op.stage, previous=True, loc=loc)]
            st.pending[op.pipe.id] = (op.pipe, accs)
        else:
            # this step's groups retire before its slot is released (an rs group's packed A
            # registers also end with the step's scope)
            if mine:
                body += _retire(st, mine, "retire this step's wgmma before release", loc)
            st.in_consume.pop()
            body.append(O.SlotRelease(op.pipe, op.stage, loc=loc))
        return [op.replace(body=Region(tuple(body)))]
    if isinstance(op, O.Wgmma):
        out: list[O.Op] = []
        reads = [op.b] if op.a_in_registers else [op.a, op.b]
        if any(st.rt(v) in st.generic_unfenced for v in reads):
            out += _proxy_fence(st, loc)  # stmatrix'd operand: visible to the tensor cores
        touched = _touches(op, st)   # an in-flight accumulator as this wgmma's A
        if touched:
            out += _retire(st, touched, "the accumulator is read as register A", loc)
        rs = op.a_in_registers
        # a_copy only means something with register A (smem A: the default, elided in the IR)
        fence = O.WgmmaFence((op.acc,), a_registers=rs, a_copy=not rs or _a_copy(op, st),
                             loc=loc)
        out += [fence, op, O.WgmmaCommit(loc=loc)]
        if st.in_consume:
            group = _Group(op.acc, op.a if rs else None, st.depth,
                           beside=bool(st.pending) and _beside(op, st),
                           fence=fence, stages=_stages_read(op, st))
            st.in_consume[-1].append(group)
            st.inflight.append(group)
        elif rs:
            out += [O.WgmmaWait(0, note=A_REGS_NOTE, loc=loc),
                    O.FenceOperands((op.acc,), a_registers=True, loc=loc)]
        else:
            out += [O.WgmmaWait(0, loc=loc), O.FenceOperands((op.acc,), loc=loc)]
        return out
    out = []
    if st.inflight and not is_tag_op(op):
        # a register tile of an in-flight group read (or written) inside a step: retire that
        # group, and no newer one, first
        touched = _touches(op, st)
        if touched:
            out += _retire(st, touched, "the accumulator is read inside its step", loc)
    if isinstance(op, O.StMatrix):
        # a generic write: wait until deferred bulk stores have read the buffer; fence later
        st.store_unfenced = True
        if st.store_read_pending:
            out += _store_read_wait(op, st)
            st.store_read_pending = st.store_paths is None or any(st.store_paths)
        st.generic_unfenced.add(st.rt(op.dst))
        return out + [op]
    if isinstance(op, (O.TurnWait, O.TurnPass)):
        ids = st.turn_barriers[op.name]
        return out + [op.replace(barriers=ids, threads=2 * WARPGROUP_SIZE)]
    if isinstance(op, O.TmaStore):
        # every thread's generic writes visible to the async proxy before one thread hands the
        # buffer to TMA; one fence and barrier covers a run of stores
        if st.store_unfenced:
            out += _proxy_fence(st, loc)
        deferred = st.in_role and st.rt(op.src) in st.deferrable
        out += [op, O.TmaStoreCommit(loc=loc)]
        if deferred:
            st.store_read_pending = True
            slot = _slot(op.src, st)
            st.store_paths = None if st.store_paths is None else \
                frozenset(path + (slot,) for path in st.store_paths)
        else:
            out += [O.TmaStoreWait(0, loc=loc), O.GroupBarrier(st.scope(), loc=loc)]
        st.tma_stores = True
        return out
    return out + [op]


def _turn_barriers(roles, threads: int) -> dict[str, dict[str, tuple[int, ...]]]:
    """role -> section name -> the named barrier of each of its warpgroups. Ids 0 (the CTA)
    and 1 .. CTA warpgroups (group barriers, 1 + warpgroup index) are taken; the sections'
    follow, W per (role, name), in program order."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    nxt = 1 + threads // WARPGROUP_SIZE
    for role in roles:
        for op in role.body.walk():
            if isinstance(op, O.TurnWait) and op.name not in out.setdefault(role.name, {}):
                ids = tuple(range(nxt, nxt + role.warpgroups))
                if ids[-1] >= NAMED_BARRIERS:
                    raise CompileError(
                        f"ordered section {op.name!r} of role {role.name!r} needs named "
                        f"barriers {ids[0]}..{ids[-1]}, but a CTA has {NAMED_BARRIERS} (0 is "
                        f"__syncthreads, 1..{threads // WARPGROUP_SIZE} its warpgroups' group "
                        f"barriers)", op.loc,
                        fix="use fewer section names or fewer warpgroups")
                out[role.name][op.name] = ids
                nxt += role.warpgroups
    return out


def run(kernel: Kernel) -> Kernel:
    if any(isinstance(op, O.SYNC_OPS) for op in kernel.walk()):
        return kernel  # already synchronized
    root = smem_roots(kernel)
    st = _State(root, deferrable_store_buffers(kernel, root))
    st.defs = {r.id: op for op in kernel.walk() for r in op.results()}
    st.runs = _stmatrix_runs(kernel.body)
    st.lazy = {op.result.id for op in kernel.walk() if isinstance(op, O.Full) and op.scale_d_zero}
    st.overwritten = {op.acc.id for op in kernel.walk() if isinstance(op, O.Wgmma) and op.overwrite}
    for op in kernel.walk():
        if isinstance(op, (O.TileSlice, O.ExpandDims)):  # same registers, no copy
            st.tile_root[op.result.id] = st.tile_root.get(op.src.id, op.src.id)
    threads = kernel.attr("threads")
    cluster = tuple(kernel.attr("cluster", (1, 1, 1)))
    cluster_size = cluster[0] * cluster[1] * cluster[2]
    roles = [op for op in kernel.body.ops if isinstance(op, O.RoleOp)]
    prologue = [op for op in kernel.body.ops if not isinstance(op, O.RoleOp)]
    out = _region(prologue, st)
    loc = roles[0].loc if roles else (prologue[-1].loc if prologue else Loc.unknown())
    # the CTA's shared writes before the roles (store_shared of a gathered operand) reach a
    # role's wgmma or TMA store through the async proxy, and its gathers from other threads:
    # every thread fences its writes, then a CTA barrier, before any role runs
    handoff = bool(roles) and bool(st.generic_unfenced or st.exchange_written)
    if handoff:
        out.append(O.ProxyFence(loc=loc))
    if cluster_size > 1:
        # barriers of every CTA initialized before any peer multicasts into them or arrives
        out.append(O.ClusterSync(loc=loc))
    elif any(isinstance(op, O.PipelineCreate) for op in prologue):
        out.append(O.GroupBarrier("cta", note="barriers initialized before any role uses them",
                                  loc=loc))
    elif handoff:
        out.append(O.GroupBarrier("cta", note="the CTA's shared writes before any role reads "
                                  "them", loc=loc))
    st.exchange_written, st.exchange_read = set(), set()
    plan = {name: regs for name, _first, _count, regs in kernel.attr("role_plan", ())}
    entry = entry_registers(threads, kernel.attr("min_ctas_per_sm", 1))
    turns = _turn_barriers(roles, threads)
    for role in roles:
        head: list[O.Op] = []
        regs = plan.get(role.name, role.regs)
        if regs:
            head.append(O.SetMaxNReg(regs, regs > entry, loc=role.loc))
        st.turn_barriers = turns.get(role.name, {})
        for name, ids in st.turn_barriers.items():
            head.append(O.TurnPass(name, ids, 2 * WARPGROUP_SIZE, initial=True, loc=role.loc))
        st.in_role = True
        st.tma_stores, st.store_unfenced, st.store_read_pending = False, True, False
        st.store_paths = frozenset({()})
        st.generic_unfenced = set()
        body = head + _region(role.body.ops, st)
        end = role.body.ops[-1].loc if role.body.ops else role.loc
        body += _flush(st, end)
        if st.tma_stores:
            body.append(O.TmaStoreWait(0, read=False, note="bulk stores done before exit",
                                       loc=end))
        st.in_role = False
        out.append(role.replace(body=Region(tuple(body))))
    if cluster_size > 1:
        # no CTA leaves while a peer may still multicast into its smem or arrive on its
        # barriers (HOPPER.md hazard 12)
        out.append(O.ClusterSync(loc=out[-1].loc if out else Loc.unknown()))
    body = Region(tuple(out))
    if st.a_scopes:
        body = _set_scopes(body, st.a_scopes)
    return dataclasses.replace(kernel, body=body).with_attrs(synchronized=True)
