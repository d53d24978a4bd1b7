"""Synchronization obligations, read from the explicit sync ops that lower/sync.py placed.

Job (INVARIANTS.md §2.6, bug classes 5, 11, 12, 24), on a kernel the sync pass ran on (attribute
`synchronized`), per role, over every path (loops iterate to a fixpoint, an `if` joins the
skipped and the taken path):

  proxy.fence — between a generic-proxy write of a shared buffer (stmatrix) and an
      async-proxy read of it (a TMA store's source, a wgmma operand) there is a
      `fence.proxy_async` and, after it, a group `barrier` (the writes of every thread of the
      group are fenced before the one issuing thread hands the buffer over);
  sync.release — a `pipe.release` of a slot follows a `wgmma.wait` that retired every wgmma
      group reading that slot (no group committed after the slot's reads may still be in
      flight);
  sync.acc — a wgmma's accumulator (and its register A operand) is touched by no other op
      between the wgmma and the `wgmma.wait` that retires its group (`wait N` retires all but
      the newest N): no elementwise, reduce, convert, store, stmatrix, var/assign or anything
      else reads or writes it (or a view of it) while the tensor cores may still write it. A
      wgmma accumulating into the same tile (chaining) and `fence.operands` are no readers.
      Also, an rs wgmma's group is retired before the region that declares its packed A
      registers ends: the region that issued it, or the one its wgmma.fence's a_scope names
      (that many regions out: a group lower/sync.py keeps in flight past its consume step,
      FA3's P_{j-1} V_{j-1} issued in K_j's step and retired in V_{j-1}'s); the registers
      live in that region's C scope (codegen/cuda/mma.py, emit.py), and once out of scope
      ptxas may give them to other values while the tensor cores still read them (the
      register reuse of 9879b96). So a `wgmma.wait N` that allows the group to stay in flight
      past its region's end, or past an op touching its tiles, is a violation: N is read as
      "all but the newest N committed groups retire", whatever N is.

  sync.store-read — a shared-memory write (stmatrix, a TMA load) of a slot that a bulk
      tensor store may still read comes after that store's group retired: the issuing
      thread's bulk groups retire in commit order (PTX ISA "cp.async.bulk.wait_group":
      `.read N` waits until at most the newest N committed groups may still read their
      source), so the store's group is older than the newest N at a preceding
      `tma.store.wait N` (a store not yet committed is never retired), and a group barrier
      after that wait orders the other threads' writes. Slots compare by buffer and stage as
      affine forms over their leaves (never equal when they differ by a constant the gcd of
      their coefficients does not divide, as model._never_equal: no solver query); a stage
      over a `var`, an unstaged buffer, or a stage over a value a loop redefines once the
      walk crosses that loop's back edge may be any slot of its buffer. Rows within a slot
      are not compared (two row ranges of one slot alias). Another warpgroup's writes are
      not this check's (each walk is one warpgroup's program).

  sync.exchange — a gather from a shared view (ag.gather of a buffer store_shared wrote)
      comes after a group barrier that follows the buffer's writes, and the next write of
      the buffer after a barrier that follows the gather: its threads read elements other
      threads wrote (read after write, write after read). In a role of several warpgroups
      the group barrier is the warpgroup's (named barrier 1 + warpgroup, 128 threads), which
      orders no two warpgroups: no element a warpgroup gathers is written by another
      warpgroup of the role (a solver obligation on the gather's own index terms, element
      by element: `_across_warpgroups`), or the finding names both warpgroups, the element,
      the row and the barrier that orders only one of them. A write and a gather both in
      one ag.ordered section are ordered by its turns (bar.arrive / bar.sync between the
      warpgroups): there only a row a later turn of the same round writes is reported.
      smem.race leaves those pairs to it (check_smem._races).

The ordered sections' obligations (ordered.pairs/barriers/turns/skip) are
verify/check_ordered.py's; they run from here, the turns on traced kernels too.

A finding carries the location of the reader (proxy.fence, sync.acc) or of the release
(sync.release).
The interpreter needs none of these ops; codegen renders them one for one, so what is proven
here is what runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import z3

from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.tag_ops import is_tag_op
from argus.verify import check_ordered
from argus.verify.check_smem import (_defining_ops, _instance_renaming,
                                     gathers_across_warpgroups)
from argus.verify import witness as W
from argus.verify.model import Model, _num, _stage_eq
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int


def exchange_read_view(op):
    """The shared view `op` reads in a layout of its own (each thread may read what other
    threads wrote): a shared gather, or a 32-bit ag.load_shared (the ldmatrix op of an f32 /
    i32 view); else None. Stated here apart from lower/sync.py's, which it checks."""
    if isinstance(op, O.SmemGather):
        return op.src
    if isinstance(op, O.LdMatrix) and op.result.type.dtype.bits == 32:
        return op.src
    return None


MAX_GROUPS = 8  # in-flight groups tracked one by one; older ones merge (conservative)
# bulk-store groups tracked one by one (sync.store-read). A merged pair counts as one group, so
# a `wait_group.read N` that retires the older of the pair is read as retiring neither: with 8,
# a TMA-store epilogue of 9 slots per warpgroup (fp8 bn = 144: read 8 before slot 0 again) was
# reported as a race. An epilogue stages at most a tile's column blocks (bn / 16 <= 16) per
# warpgroup, so 32 keeps every library and bench kernel exact; the lattice stays finite
MAX_BULK_GROUPS = 32
# the state only grows from pass to pass over a finite lattice, so a loop settles; a loop that
# has not settled after this many passes is reported "unknown", never silently proven
MAX_LOOP_PASSES = 256


@dataclass
class _State:
    written: frozenset = frozenset()        # buffers with generic writes not yet fenced
    fenced: frozenset = frozenset()         # fenced, not yet behind a barrier
    writer: dict = field(default_factory=dict)  # buffer -> loc of its last generic write
    # slots read by wgmma not yet committed: (pipe id, "cur"/"held"), and the register tiles
    # those wgmma write or read: ("tile", tile id, the wgmma's program point)
    open_reads: frozenset = frozenset()
    groups: tuple = ()                      # committed groups in flight, oldest first
    # the empty-barrier arrivals owed, as the possible (pipe id, this step's slot, held slot)
    # of the paths so far: this step's slot "owed" (not released yet) / "done" / "none" (no
    # step open), the held slot "yes" / "no" (a pipe absent: ("none", "no"))
    slots: frozenset = frozenset()
    # bulk (TMA) stores of the walked group's thread 0 that may still read their source slot,
    # as reads (buffer root, stage form or None = any slot, store loc, "same"/"earlier"
    # iteration): issued and not committed yet; committed groups in commit order, oldest
    # first; retired by thread 0's wait_group but not yet behind a group barrier (the other
    # threads may still run ahead of that wait)
    bulk_open: frozenset = frozenset()
    bulk: tuple = ()
    bulk_unbarriered: frozenset = frozenset()
    # sync.exchange: buffers written by store_shared / gathered from (ag.gather of a view)
    # since the last group barrier, as (buffer root, loc of the access)
    exchange_w: frozenset = frozenset()
    exchange_r: frozenset = frozenset()

    def key(self):
        return (self.written, self.fenced, self.open_reads, self.groups, self.slots,
                self.bulk_open, self.bulk, self.bulk_unbarriered, self.exchange_w,
                self.exchange_r)

    def copy(self) -> "_State":
        return _State(self.written, self.fenced, dict(self.writer), self.open_reads, self.groups,
                      self.slots, self.bulk_open, self.bulk, self.bulk_unbarriered,
                      self.exchange_w, self.exchange_r)


def _join(a: _State, b: _State) -> _State:
    n = max(len(a.groups), len(b.groups))
    ga = ((frozenset(),) * (n - len(a.groups))) + a.groups
    gb = ((frozenset(),) * (n - len(b.groups))) + b.groups
    pipes = {p for p, _, _ in a.slots | b.slots}
    # a pipe one side never touched is in its initial state there
    slots = a.slots | b.slots | {(p, "none", "no") for p in pipes
                                 if not any(x[0] == p for x in a.slots)
                                 or not any(x[0] == p for x in b.slots)}
    m = max(len(a.bulk), len(b.bulk))  # aligned on the newest: wait N keeps the newest N
    ba = ((frozenset(),) * (m - len(a.bulk))) + a.bulk
    bb = ((frozenset(),) * (m - len(b.bulk))) + b.bulk
    return _State(a.written | b.written, a.fenced | b.fenced, {**b.writer, **a.writer},
                  a.open_reads | b.open_reads, tuple(x | y for x, y in zip(ga, gb)), slots,
                  a.bulk_open | b.bulk_open, tuple(x | y for x, y in zip(ba, bb)),
                  a.bulk_unbarriered | b.bulk_unbarriered, a.exchange_w | b.exchange_w,
                  a.exchange_r | b.exchange_r)


def _merge_oldest(groups: tuple) -> tuple:
    """At most MAX_BULK_GROUPS groups: the two oldest merge (kept in flight while either is)."""
    return (groups[0] | groups[1],) + groups[2:] if len(groups) > MAX_BULK_GROUPS else groups


def _body_point(op, at: tuple) -> tuple:
    """The program point of `op.body`, for the op at point `at`: its index among the op's
    regions (found by identity: regions compare by value)."""
    return at + (next(j for j, r in enumerate(op.regions()) if r is op.body),)


class _Checker:
    def __init__(self, kernel):
        self.role: O.RoleOp | None = None    # the role being walked (None: the CTA's code)
        self.root: dict[int, int] = {}
        self.stage_of: dict[int, int] = {}   # view id -> the stage value it slices with
        for op in kernel.walk():
            if isinstance(op, O.SmemSlice):
                self.root[op.result.id] = self.root.get(op.buffer.id, op.buffer.id)
                if op.stage is not None:
                    self.stage_of[op.result.id] = op.stage.id
                elif op.buffer.id in self.stage_of:
                    self.stage_of[op.result.id] = self.stage_of[op.buffer.id]
        self.steps: dict[int, int] = {}      # consume stage value id -> pipe id
        self.tile_root: dict[int, int] = {}  # view id -> the register tile it is a view of
        self.wgmma_tiles: set[int] = set()   # tiles a wgmma writes (acc) or reads (register A)
        self.sites: dict[tuple, O.Wgmma] = {}  # program point of a wgmma -> the op
        for op in kernel.walk():
            if isinstance(op, O.Consume):
                self.steps[op.stage.id] = op.pipe.id
            elif isinstance(op, (O.TileSlice, O.ExpandDims)):  # same registers, no copy
                self.tile_root[op.result.id] = self.tile_root.get(op.src.id, op.src.id)
        for op in kernel.walk():
            if isinstance(op, O.Wgmma):
                self.wgmma_tiles |= {self.tile(v) for v in self._wgmma_regs(op)}
        self.defs = {r.id: op for op in kernel.walk() for r in op.results()}
        self.forms: dict[int, tuple | None] = {}   # stage value id -> its affine form
        # a loop's index value id -> the values its iterations redefine
        self.loop_ids: dict[int, set[int]] = {}
        # buffers some bulk store reads: a write elsewhere needs no store-read check
        self.store_bufs = {self.rt(op.src) for op in kernel.walk() if isinstance(op, O.TmaStore)}
        # buffer -> loc of its write: the CTA's code wrote it before the roles with no
        # fence.proxy.async + CTA barrier after (`obligations` fills it)
        self.handoff: dict = {}
        self.cta_writer: dict = {}   # buffer -> loc: every generic write before the roles
        # buffers a shared gather reads, or a 32-bit load_shared reads that store_shared
        # writes (lower/sync.py `exchange_read_view`; sync.exchange is checked on them alone)
        generic = {self.rt(op.dst) for op in kernel.walk() if isinstance(op, O.StMatrix)}
        self.gathered = {self.rt(op.src) for op in kernel.walk()
                         if isinstance(op, O.SmemGather)} | \
            {self.rt(v) for v in map(exchange_read_view, kernel.walk())
             if v is not None and self.rt(v) in generic}
        # buffer -> (role, loc) of each generic write inside a role: a group barrier orders
        # one warpgroup, so a gather in another role is ordered after none of them
        self.role_writes: dict[int, list] = {}
        for role in kernel.body.ops:
            if isinstance(role, O.RoleOp):
                for op in role.body.walk():
                    if isinstance(op, O.StMatrix):
                        self.role_writes.setdefault(self.rt(op.dst), []).append((role, op.loc))
        self.findings: dict[tuple, Finding] = {}
        # threads of the group the walked code runs in (obligations sets it: the CTA at the
        # top level, a warpgroup in a role); an elect states the group it picks from
        # (Elect.group, set by lower/elect.py), which must be this one
        self.group = 128
        # the program point of the op being walked (the path of op and region indices from
        # the kernel's body, as check_fills numbers assignments): the findings are keyed by
        # it, a value (two equal ops, or one op object placed twice, are two points)
        self.at: tuple[int, ...] = ()

    def rt(self, v) -> int:
        return self.root.get(v.id, v.id)

    def tile(self, v) -> int:
        return self.tile_root.get(v.id, v.id)

    @staticmethod
    def _wgmma_regs(op: O.Wgmma) -> list:
        """The registers a wgmma group uses until it retires: the accumulator, register A."""
        return [op.acc, op.a] if op.a_in_registers else [op.acc]

    def report(self, code, op, subject, ok: bool, msg="", witness=None, fix=""):
        """A finding on `op`, the op at the walk's current point `self.at`."""
        key = (code, self.at)
        if ok and key in self.findings:
            return  # a violation on some path stays a violation
        witness = dict(witness or {})
        if not ok and code in ("sync.acc", "sync.elect"):
            msg = self.placed(msg, witness, "every thread" if code == "sync.acc" else
                              f"the {op.threads} elected thread(s)")
        self.findings[key] = Finding(code, op.loc, subject, "proven" if ok else "violated",
                                     msg, witness, fix)

    def placed(self, msg: str, witness: dict, threads: str) -> str:
        """`msg` naming who runs the reported op: the role being walked, its warpgroup(s) and
        `threads` (W.issuer), also put into the witness where it has no such key, so the
        finding does not rely on names.who's lookup of its line."""
        who, words = W.issuer(self.role, threads)
        for k, v in who.items():
            witness.setdefault(k, v)
        return f"{msg} ({words})"

    # -- transfer ------------------------------------------------------------------------
    def region(self, region: Region, point: tuple, st: _State) -> _State:
        """Walk `region`, whose program point is `point`."""
        return self.ops([(point + (i,), op) for i, op in enumerate(region.ops)], st)

    def ops(self, placed: list, st: _State) -> _State:
        """Walk the ops of one region, given as (program point, op) in program order."""
        for at, op in placed:
            st = self.op(op, at, st)
        self.scope_ends(placed, st)
        return st

    @staticmethod
    def declared_here(placed: list) -> list:
        """(program point, rs wgmma) whose packed A registers this region declares (its ops
        as (program point, op)): those it issues with a fence of a_scope 0, and those issued
        k regions inside it whose fence (the op before the wgmma) has a_scope k
        (lower/sync.py keeps their groups in flight past the issuing regions; codegen
        declares the registers here, emit.py declare_outer_a_registers)."""
        out = []

        def walk(ops: list, k: int) -> None:
            prev = None
            for at, op in ops:
                if isinstance(op, O.Wgmma) and op.a_in_registers:
                    scope = prev.a_scope if isinstance(prev, O.WgmmaFence) else 0
                    if scope == k:
                        out.append((at, op))
                for j, r in enumerate(op.regions()):
                    walk([(at + (j, i), x) for i, x in enumerate(r.ops)], k + 1)
                prev = op
        walk(placed, 0)
        return out

    def scope_ends(self, placed: list, st: _State) -> None:
        """sync.acc at the end of a region (its ops as (program point, op)): no rs wgmma
        whose packed A registers it declares (declared_here: those it issued, or issued in
        regions inside it and kept in flight past them) is still in flight (the registers
        go out of scope here)."""
        for at, op in self.declared_here(placed):
            live = any(k[2] == at for g in (*st.groups, st.open_reads) for k in g
                       if len(k) == 3)
            key = ("sync.acc", "scope", at)
            if not live and key in self.findings:
                continue  # a violation on some path stays a violation
            subject = f"register A of the wgmma at {op.loc} at the end of its scope"
            wit = {"wgmma": str(op.loc), "groups_in_flight": len(st.groups)} if live else {}
            self.findings[key] = Finding(
                "sync.acc", op.loc, subject, "violated" if live else "proven",
                "" if not live else self.placed(
                    f"the register-A wgmma at {op.loc} may still be in flight when the region "
                    f"that issued it ends (no wgmma.wait retires its group before, on some "
                    f"path): its packed A registers go out of scope there and may be reused "
                    f"while the tensor cores still read them", wit, "every thread"),
                wit,
                "lower.sync retires an rs group (wgmma.wait N + fence.operands) before the "
                "end of the region that issued it")

    def loop(self, loop: O.For, at: tuple, st: _State) -> _State:
        head, body = st, _body_point(loop, at)
        for _ in range(MAX_LOOP_PASSES):
            out = self.back_edge(loop, self.region(loop.body, body, head.copy()))
            nxt = _join(head, out)
            if nxt.key() == head.key():
                return head  # zero or more iterations
            head = nxt
        self.findings[("sync.fixpoint", at)] = Finding(
            "sync.fixpoint", loop.loc, f"loop at {loop.loc}", "unknown",
            f"the synchronization state of this loop did not settle in {MAX_LOOP_PASSES} "
            f"passes: what is proven inside it holds for those iterations only")
        return head

    def op(self, op, at: tuple, st: _State) -> _State:
        """The state after `op`, at program point `at` (findings on it are keyed by `at`)."""
        outer, self.at = self.at, at
        try:
            return self._op(op, at, st)
        finally:
            self.at = outer

    def _op(self, op, at: tuple, st: _State) -> _State:  # noqa: C901 - a dispatcher
        if isinstance(op, O.For):
            return self.loop(op, at, st)
        if isinstance(op, O.If):
            return _join(st, self.region(op.body, _body_point(op, at), st.copy()))
        if isinstance(op, O.Elect):
            self.elect(op)
            return self.region(op.body, _body_point(op, at), st)
        if isinstance(op, O.Consume):
            self.step_opens(op, st)
            st = self.region(op.body, _body_point(op, at), st)   # restores self.at
            self.step_closes(op, st)
            return st
        if isinstance(op, O.Produce):
            return self.region(op.body, _body_point(op, at), st)
        if not isinstance(op, O.SYNC_OPS + (O.TileSlice, O.ExpandDims)) and not is_tag_op(op):
            self.register_access(op, st)
        if isinstance(op, (O.StMatrix, O.TmaLoad)):
            self.store_read(op, st)
        if isinstance(op, O.StMatrix) or exchange_read_view(op) is not None:
            self.exchange(op, st)
        if isinstance(op, O.StMatrix):
            b = self.rt(op.dst)
            st.written, st.fenced = st.written | {b}, st.fenced - {b}
            st.writer[b] = op.loc
        elif isinstance(op, O.ProxyFence):
            st.written, st.fenced = frozenset(), st.fenced | st.written
        elif isinstance(op, O.GroupBarrier):
            st.exchange_w, st.exchange_r = frozenset(), frozenset()
            st.fenced = frozenset()
            st.bulk_unbarriered = frozenset()  # every thread is past thread 0's wait now
        elif isinstance(op, O.TmaStore):
            self.async_read(op, [op.src], "tma-store", st)
            st.bulk_open = st.bulk_open | {(self.rt(op.src), self.stage_form(op.src), op.loc,
                                            None)}
        elif isinstance(op, O.TmaStoreCommit):
            if st.bulk_open:
                st.bulk = _merge_oldest(st.bulk + (st.bulk_open,))
            st.bulk_open = frozenset()
        elif isinstance(op, O.TmaStoreWait):
            # thread 0's committed groups but the newest `pending` have read their smem (a
            # completion wait, read=False, implies it); stores not committed are not waited
            keep = len(st.bulk) - op.pending if op.pending else len(st.bulk)
            keep = max(0, keep)
            retired = frozenset().union(*st.bulk[:keep])
            st.bulk, st.bulk_unbarriered = st.bulk[keep:], st.bulk_unbarriered | retired
        elif isinstance(op, O.Wgmma):
            views = [op.b] if op.a_in_registers else [op.a, op.b]
            self.async_read(op, views, "wgmma", st)
            slots = {(self.steps[self.stage_of[v.id]], "cur") for v in views
                     if self.stage_of.get(v.id) in self.steps}
            tiles = {("tile", self.tile(v), at) for v in self._wgmma_regs(op)}
            self.sites[at] = op
            st.open_reads = st.open_reads | slots | tiles
        elif isinstance(op, O.WgmmaCommit):
            groups = st.groups + (st.open_reads,)
            if len(groups) > MAX_GROUPS:
                groups = (groups[0] | groups[1],) + groups[2:]
            st.groups, st.open_reads = groups, frozenset()
        elif isinstance(op, O.WgmmaWait):
            # at most `pending` of the newest groups may still be in flight (all, if fewer)
            st.groups = st.groups[max(0, len(st.groups) - op.pending):] if op.pending else ()
        elif isinstance(op, O.SlotRelease):
            self.release(op, st)
        return st

    # -- bulk stores still reading their source (sync.store-read) --------------------------
    def stage_form(self, view) -> tuple | None:
        """The stage of a shared-memory view as an affine form (constant, ((leaf value id,
        coefficient), ...)), through const, add, sub and multiplication by a constant; None
        for any slot of the buffer (an unstaged buffer, or a stage that reads a `var`: one
        value id holds each assignment in turn, so two forms over it are not comparable)."""
        sid = self.stage_of.get(view.id)
        return None if sid is None else self.affine(sid)

    def affine(self, vid: int) -> tuple | None:
        if vid in self.forms:
            return self.forms[vid]
        op, form = self.defs.get(vid), (0, ((vid, 1),))
        if isinstance(op, O.Var):
            form = None
        elif isinstance(op, O.Const) and isinstance(op.value, int):
            form = (op.value, ())
        elif isinstance(op, O.Arith) and op.fn in ("add", "sub", "mul"):
            lhs, rhs = self.affine(op.lhs.id), self.affine(op.rhs.id)
            if lhs is None or rhs is None:
                form = None
            elif op.fn == "mul":
                if not lhs[1] or not rhs[1]:
                    (k, _), (c, t) = (lhs, rhs) if not lhs[1] else (rhs, lhs)
                    form = (c * k, tuple((x, a * k) for x, a in t if a * k))
            else:
                sign, terms = (1 if op.fn == "add" else -1), dict(lhs[1])
                for x, a in rhs[1]:
                    terms[x] = terms.get(x, 0) + sign * a
                form = (lhs[0] + sign * rhs[0],
                        tuple(sorted((x, a) for x, a in terms.items() if a)))
        self.forms[vid] = form
        return form

    @staticmethod
    def never_equal(a: tuple, b: tuple) -> bool:
        """Two affine stages differ for every value of their leaves: their difference is a
        nonzero constant, or (the gcd test, as model._never_equal) a sum of terms whose
        coefficients' gcd does not divide its constant."""
        terms = dict(a[1])
        for x, c in b[1]:
            terms[x] = terms.get(x, 0) - c
        k, g = a[0] - b[0], 0
        for c in terms.values():
            g = math.gcd(g, c)
        return k != 0 if g == 0 else k % g != 0

    def may_alias(self, buf: int, form, read: tuple) -> bool:
        if read[0] != buf:
            return False
        return form is None or read[1] is None or not self.never_equal(form, read[1])

    def back_edge(self, loop: O.For, st: _State) -> _State:
        """Around a back edge a stage over a value the body redefines (or the induction
        variable) may be any slot in the next iteration; every store read is then an earlier
        iteration's."""
        ids = self.loop_ids.get(loop.var.id)
        if ids is None:
            ids = {v.id for x in loop.body.walk() for v in x.results()} | \
                {v.id for v in loop.results()}
            self.loop_ids[loop.var.id] = ids

        def forget(reads: frozenset) -> frozenset:
            return frozenset((b, None if form is None or any(x in ids for x, _ in form[1])
                              else form, loc, loop.loc) for b, form, loc, _ in reads)
        st.bulk_open, st.bulk_unbarriered = forget(st.bulk_open), forget(st.bulk_unbarriered)
        st.bulk = tuple(forget(g) for g in st.bulk)
        return st

    def store_read(self, op, st: _State) -> None:
        """sync.store-read: a write of shared memory (stmatrix, a TMA load) comes after every
        bulk store that may read the same slot has read it: thread 0 (which issued and
        committed the stores) waited `wait_group.read N` with the store's group older than
        the newest N, and a group barrier since then orders the other threads' writes."""
        b = self.rt(op.dst)
        if b not in self.store_bufs:
            return
        form = self.stage_form(op.dst)
        subject = f"{op.NAME} into {op.dst} at {op.loc} after bulk stores of its buffer"
        pending = [(i, r) for i, g in enumerate((*st.bulk, st.bulk_open)) for r in g
                   if self.may_alias(b, form, r)]
        early = [r for r in st.bulk_unbarriered if self.may_alias(b, form, r)]
        if not pending and not early:
            self.report("sync.store-read", op, subject, True)
            return
        n = len(st.bulk)
        if pending:
            i, r = min(pending, key=lambda x: (x[0], x[1][2].line))
            newer = n - i - 1 if i < n else None
            thread = "0 (it issued the store) and every other thread of the group"
            why = ("that store was never committed (no cp.async.bulk.commit_group), so no "
                   "wait_group retires it" if newer is None else
                   f"no wait_group.read retires its group first ({newer} group(s) were "
                   f"committed after it: wait_group.read N with N <= {newer} would)")
        else:
            r = min(early, key=lambda x: x[2].line)
            thread = f"1 .. {self.group - 1} (every thread but 0)"
            why = ("thread 0 waited for it, but no group barrier after that wait orders the "
                   "other threads' writes behind it")
        iteration = (f"the store in an earlier iteration of the loop at {r[3]}, the write in a "
                     f"later one" if r[3] is not None else "the store and the write in the "
                     "same iteration")
        self.report("sync.store-read", op, subject, False,
                    f"{op.NAME} at {op.loc} writes {op.dst} (slot {self.slot_text(form)} of "
                    f"its buffer) while the bulk store at {r[2]} (slot {self.slot_text(r[1])}) "
                    f"may still be reading the same shared memory ({iteration}): {why}. The "
                    f"TMA unit may copy the new bytes to global memory instead of the old ones",
                    {"thread": thread, "iteration": iteration, "write": str(op.loc),
                     "store": str(r[2]), "groups_in_flight": n},
                    fix="lower.sync waits cp.async.bulk.wait_group.read N, N = the groups "
                        "committed after the newest store of an aliasing slot, then a group "
                        "barrier, before the write")

    def slot_text(self, form) -> str:
        if form is None:
            return "any"
        c, terms = form
        parts = [f"{a}*%{x}" if a != 1 else f"%{x}" for x, a in terms] + ([str(c)] if c or
                                                                           not terms else [])
        return " + ".join(parts)

    def elect(self, op: O.Elect) -> None:
        """sync.elect: the elected threads can do the body's work for their group."""
        bad = sorted({x.NAME for x in op.body.walk() if not O.electable(x)})
        why = ""
        if bad:
            why = (f"the elect at {op.loc} holds {', '.join(bad)}, which the threads it "
                   f"elects cannot do for their warpgroup (a collective op hangs, a register "
                   f"tile is computed for those threads only)")
        elif op.threads < 1 or op.group % op.threads:
            why = f"the elect at {op.loc} elects {op.threads} of {op.group} threads"
        elif op.group != self.group:
            why = (f"the elect at {op.loc} picks from a group of {op.group} threads but runs "
                   f"in a group of {self.group}")
        self.report("sync.elect", op, f"elect at {op.loc}", not why, why,
                    {"ops": bad, "threads": op.threads, "group": op.group},
                    fix="keep the elected body to index math, scalar reads and TMA loads")

    def exchange(self, op, st: _State) -> None:
        """sync.exchange: a gather from a shared view (ag.gather) reads elements other threads
        of the group wrote, so a group barrier lies between the buffer's generic writes and
        it (read after write), and between it and the next write of the buffer (write after
        read), on every path. Only buffers some gather reads are checked (a buffer written
        for a TMA store alone is proxy.fence's)."""
        gather = not isinstance(op, O.StMatrix)     # a shared read (exchange_read_view)
        b = self.rt(op.src if gather else op.dst)
        if gather and self.handoff_read(op, b, op.src, "a gather"):
            return
        if b not in self.gathered:
            return
        if gather and self.cross_role_read(op, b):
            return
        pending = st.exchange_w if gather else st.exchange_r
        other = sorted(str(loc) for x, loc in pending if x == b)
        if gather:
            st.exchange_r = st.exchange_r | {(b, op.loc)}
        else:
            st.exchange_w = st.exchange_w | {(b, op.loc)}
        what = "gather" if gather else "write"
        subject = f"shared {what} of {op.src if gather else op.dst} at {op.loc}"
        if not other:
            self.report("sync.exchange", op, subject, True)
            return
        who, said = W.issuer(self.role, "every thread")
        msg = (f"the gather at {op.loc} reads elements other threads wrote at {other[0]} with "
               f"no barrier in between on some path, in {said}: it may read them before they "
               f"are written" if gather else
               f"the write at {op.loc} may overwrite elements other threads still gather at "
               f"{other[0]} (no barrier in between on some path, in {said})")
        self.report("sync.exchange", op, subject, False, msg,
                    {**who, "other_access": other[0], "access": str(op.loc)},
                    fix="lower.sync places a group barrier between a buffer's writes and a "
                        "gather from it; a hand-placed write or gather must keep one")

    def cross_role_read(self, op, b) -> bool:
        """A gather of a buffer another role writes (generic writes): no barrier the walk
        knows orders two roles' generic accesses (a group barrier in a role orders its own
        warpgroup), so the read after write is not proven: reported, True (smem.race
        reports the overlapping pair too). Else False."""
        if self.role is None:
            return False
        other = [(r, loc) for r, loc in self.role_writes.get(b, []) if r is not self.role]
        if not other:
            return False
        role, loc = other[0]
        who, said = W.issuer(self.role, "every thread")
        self.report("sync.exchange", op, f"shared gather of {op.src} at {op.loc}", False,
                    f"the gather at {op.loc} in {said} reads {op.src}, which role "
                    f"{role.name!r} writes at {loc}: no barrier orders two roles' shared "
                    f"writes and reads, so it may read them before they are written",
                    {**who, "other_access": str(loc), "writer_role": role.name,
                     "access": str(op.loc)},
                    fix="write the buffer in the role that gathers it (its warpgroup barrier "
                        "then orders the two), or hand it over through a pipeline (TMA)")
        return True

    def handoff_read(self, op, b, v, kind: str) -> bool:
        """A role's read of a buffer the CTA's code wrote before the roles with no fence and
        CTA barrier after (`handoff`): reported, True. Outside roles: False."""
        if self.role is None:
            return False
        if b not in self.handoff:
            if b in self.cta_writer:   # written before the roles, fenced and barriered
                self.report("proxy.fence", op, f"{kind} of {v} at {op.loc}", True)
            return False
        w = self.handoff[b]
        who, said = W.issuer(self.role, "every thread")
        self.report("proxy.fence", op, f"{kind} of {v} at {op.loc}", False,
                    f"{v} is written by every thread of the CTA at {w}, before the roles, and "
                    f"read by {kind} at {op.loc} in {said} with no fence.proxy.async and CTA "
                    f"barrier after the writes: the reader may see them unwritten",
                    {**who, "writer": str(w), "reader": str(op.loc),
                     "missing": "fence.proxy.async + CTA barrier before the roles"},
                    fix="lower.sync places them after the CTA's code, before the roles")
        return True

    def async_read(self, op, views, kind: str, st: _State) -> None:
        for v in views:
            b = self.rt(v)
            if self.handoff_read(op, b, v, kind):
                continue
            if b not in st.written and b not in st.fenced:
                if b in st.writer:
                    self.report("proxy.fence", op, f"{kind} of {v} at {op.loc}", True)
                continue
            missing = "fence.proxy.async" if b in st.written else "barrier after the fence"
            w = st.writer.get(b)
            # the writes and the read are the walked role's (the state is per role): its
            # writing threads are the ones that must fence
            who, said = W.issuer(self.role, "every thread")
            self.report("proxy.fence", op, f"{kind} of {v} at {op.loc}", False,
                        f"{v} is written through the generic proxy by stmatrix at {w} and read "
                        f"by the async proxy ({kind}) at {op.loc} with no {missing} in between "
                        f"on some path, in {said}: the tensor core/TMA may read stale bytes",
                        {**who, "writer": str(w), "reader": str(op.loc), "missing": missing},
                        fix="lower.sync places fence.proxy_async + barrier before the reader")

    def register_access(self, op, st: _State) -> None:
        """sync.acc: op reads or writes no register tile of a wgmma group still in flight
        (a wgmma chaining into its own accumulator is the exception)."""
        if isinstance(op, O.Wgmma):  # chaining into its accumulator reads nothing early
            touched = {self.tile(op.a)} if op.a_in_registers else set()
        else:
            touched = {self.tile(v) for v in (*op.operands(), *op.results())}
        touched &= self.wgmma_tiles
        if not touched:
            return
        live = {k for g in (*st.groups, st.open_reads) for k in g
                if len(k) == 3 and k[1] in touched}
        if isinstance(op, O.Wgmma):  # another wgmma's accumulator as register A
            live = {k for k in live if self.tile(self.sites[k[2]].acc) == k[1]}
        live = sorted(live, key=lambda k: (self.sites[k[2]].loc.line, k[1]))
        subject = f"{op.NAME} at {op.loc}"
        if not live:
            self.report("sync.acc", op, subject, True)
            return
        _, tid, site = live[0]
        w = self.sites[site]
        role = "accumulator" if self.tile(w.acc) == tid else "register A operand"
        self.report("sync.acc", op, subject, False,
                    f"{op.NAME} at {op.loc} touches the {role} of the wgmma at {w.loc} (tile "
                    f"%{tid}) while that wgmma's group may still be in flight (no wgmma.wait "
                    f"retires it first, on some path): the tensor cores may still write (or "
                    f"read) those registers",
                    {"wgmma": str(w.loc), "reader": str(op.loc), "tile": f"%{tid}",
                     "groups_in_flight": len(st.groups)},
                    fix="lower.sync places wgmma.wait + fence.operands before the first op "
                        "that touches an in-flight accumulator")

    # -- arrivals on the empty barriers (sync.arrive) ---------------------------------------
    @staticmethod
    def _states(st: _State, pid: int) -> set:
        states = {(c, h) for p, c, h in st.slots if p == pid}
        return states or {("none", "no")}

    @staticmethod
    def _set(st: _State, pid: int, states: set) -> None:
        st.slots = frozenset({x for x in st.slots if x[0] != pid} |
                             {(pid, c, h) for c, h in states})

    def step_opens(self, op: O.Consume, st: _State) -> None:
        pid = op.pipe.id
        self._set(st, pid, {("owed", h) for _, h in self._states(st, pid)})

    def step_closes(self, op: O.Consume, st: _State) -> None:
        """sync.arrive: the step's slot was released (or handed on as the held slot) on
        every path through the step, so each consumer warpgroup arrives once per phase."""
        pid = op.pipe.id
        states = self._states(st, pid)
        owed = any(c == "owed" for c, _ in states)
        self.report("sync.arrive", op, f"release of the slot of the consume step at {op.loc}",
                    not owed, "" if not owed else
                    f"the slot of the consume step at {op.loc} (pipeline {op.pipe}) is not "
                    f"released on some path through the step (no pipe.release of it, nor one "
                    f"that holds it for a later release): its empty barrier gets fewer "
                    f"arrivals per phase than its init count, so the producer waits on it "
                    f"forever once the ring wraps (a hang)",
                    {"consume": str(op.loc), "pipeline": str(op.pipe)},
                    fix="lower.sync releases every consume step's slot once (pipe.release)")
        self._set(st, pid, {("none", h) for _, h in states})

    def release_count(self, op: O.SlotRelease, st: _State) -> None:
        """sync.arrive at a release: it releases a slot that is owed, never one twice."""
        pid = op.pipe.id
        states = self._states(st, pid)
        out, twice, stray = set(), False, False
        for cur, held in states:
            if op.previous:  # the held slot (if any: a runtime check) is released; hold cur
                if op.stage is None:
                    out.add((cur, "no"))
                    continue
                twice |= cur == "done"
                stray |= cur == "none"
                out.add(("done", "yes"))
            else:
                twice |= cur == "done"
                stray |= cur == "none"
                out.add(("done", held))
        why = ""
        if twice:
            why = (f"the release at {op.loc} releases the slot of pipeline {op.pipe} that this "
                   f"step already released, on some path: each consumer warpgroup arrives "
                   f"twice in one phase of its empty barrier, whose init count expects one "
                   f"arrival per warpgroup, so the phase completes while other warpgroups may "
                   f"still read the slot and the producer refills it under them")
        elif stray:
            why = (f"the release at {op.loc} of pipeline {op.pipe} is outside any consume step "
                   f"of that pipeline on some path: an arrival no phase expects")
        self.report("sync.arrive", op, f"release of pipeline {op.pipe} at {op.loc}", not why,
                    why, {"release": str(op.loc), "pipeline": str(op.pipe)},
                    fix="one pipe.release per consume step (lower.sync places it)")
        self._set(st, pid, out)

    def role_ends(self, role: O.RoleOp, st: _State) -> None:
        """sync.arrive: no slot is still held when the role ends (lower.sync releases the last
        held slot after its wgmma.wait 0): every step's slot was released once."""
        held = sorted({p for p, _, h in st.slots if h == "yes"})
        self.report("sync.arrive", role, f"slots held at the end of role {role.name!r}",
                    not held, "" if not held else
                    f"role {role.name!r} ends holding the slot of its last consume step of "
                    f"pipeline(s) {', '.join(f'%{p}' for p in held)} on some path (no release "
                    f"of the held slot after the last step): the empty barrier of that slot "
                    f"misses this role's arrivals",
                    {"role": role.name, "pipelines": [f"%{p}" for p in held]},
                    fix="release the held slot (pipe.release previous) after the last step")

    def release(self, op: O.SlotRelease, st: _State) -> None:
        self.release_count(op, st)
        pid = op.pipe.id
        which = "held" if op.previous else "cur"
        in_flight = [g for g in st.groups if (pid, which) in g] + \
            ([st.open_reads] if (pid, which) in st.open_reads else [])
        subject = f"release of pipeline {op.pipe} at {op.loc}"
        if not in_flight:
            self.report("sync.release", op, subject, True)
        else:
            self.release_violated(op, st, in_flight, which, subject)
        if op.previous:  # the held slot is gone; this step's slot is held from now on
            def relabel(g):
                g = g - {(pid, "held")}
                if op.stage is not None and (pid, "cur") in g:
                    g = (g - {(pid, "cur")}) | {(pid, "held")}
                return g
            st.groups = tuple(relabel(g) for g in st.groups)
            st.open_reads = relabel(st.open_reads)

    def release_violated(self, op: O.SlotRelease, st: _State, in_flight: list, which: str,
                         subject: str) -> None:
        """sync.release's counterexample: the wgmma sites of the groups still reading the
        slot, which step's slot it is, and who arrives."""
        # the wgmma of those groups (each group's tile keys name its wgmma sites), and which
        # step read the slot: the held slot is the previous step's, else the step's own
        sites = sorted({self.sites[k[2]].loc for g in in_flight for k in g
                        if len(k) == 3 and k[2] in self.sites}, key=lambda loc: loc.line)
        readers = ", ".join(str(loc) for loc in sites) or "a wgmma"
        read_by, steps = ("n - 1", "n >= 1") if which == "held" else ("n", "n >= 0")
        self.report("sync.release", op, subject, False,
                    f"the slot of pipeline {op.pipe} that consume step {read_by} read is "
                    f"released at {op.loc} in step n (every {steps}) while the wgmma at "
                    f"{readers} that read it may still be in flight (no wgmma.wait retires its "
                    f"group first; up to {len(st.groups)} groups pending there): thread 0 of "
                    f"the warpgroup arrives on the slot's empty barrier, so the producer may "
                    f"refill it under the tensor cores",
                    {"release": str(op.loc), "wgmma": readers,
                     "iteration": f"released in step n ({steps}), read by step {read_by}",
                     "thread": "0 of the consumer warpgroup (the empty-barrier arrive); the "
                               "wgmma is the warpgroup's 128 threads",
                     "groups_in_flight": len(st.groups)},
                    fix="wgmma.wait before pipe.release (lower.sync)")


def obligations(model: Model) -> tuple[list, list[Finding]]:
    kernel = model.kernel
    # ordered sections' turns hold for the traced program too; their barriers once lowered
    turns, turn_findings = check_ordered.obligations(model)
    if not kernel.attr("synchronized", False):
        # the sync ops are lowering's decision: checked once made. Two warpgroups of one
        # role are ordered by no barrier either way: their exchanges are checked here too
        return turns + _across_warpgroups(model), turn_findings
    c = _Checker(kernel)
    # program points are numbered on the kernel's body, roles included
    top = [((i,), op) for i, op in enumerate(kernel.body.ops) if not isinstance(op, O.RoleOp)]
    first = next((i for i, op in enumerate(kernel.body.ops) if isinstance(op, O.RoleOp)),
                 len(kernel.body.ops))
    c.group = kernel.attr("threads", 128)
    before = c.ops([(at, op) for at, op in top if at[0] < first], _State())
    # the CTA's generic writes the roles may read with no fence + CTA barrier after them (a
    # barrier inside a role orders its warpgroup only): every role's async read or gather of
    # such a buffer is a violation
    c.handoff = {b: before.writer.get(b) for b in before.written | before.fenced} | \
        {b: loc for b, loc in before.exchange_w}
    c.cta_writer = dict(before.writer)
    c.ops([(at, op) for at, op in top if at[0] >= first], before)
    c.group = 128  # a role's group is its warpgroup
    for i, role in enumerate(kernel.body.ops):
        if isinstance(role, O.RoleOp):
            c.role = role
            end = c.region(role.body, _body_point(role, (i,)), _State())
            c.at = (i,)
            c.role_ends(role, end)
    return turns + _across_warpgroups(model), turn_findings + list(c.findings.values())


def _barrier_before(role: O.RoleOp, op) -> O.GroupBarrier | None:
    """The last group barrier before `op` in `role`'s program order (the one lower/sync.py
    put before a gather: it orders the gathering warpgroup's threads only)."""
    last = None
    for x in role.body.walk():
        if x is op:
            return last
        if isinstance(x, O.GroupBarrier):
            last = x
    return None


def _sections(role: O.RoleOp) -> dict[int, O.TurnWait]:
    """id(op) -> the ordered section (its ordered.wait) `op` runs inside, for every op of
    `role` between a section's wait and its pass (nested regions included)."""
    out: dict[int, O.TurnWait] = {}

    def walk(region: Region, outer: O.TurnWait | None) -> None:
        current = outer
        for op in region.ops:
            if isinstance(op, O.TurnWait) and outer is None:
                current = op
                continue
            if isinstance(op, O.TurnPass) and not op.initial and outer is None and \
                    current is not None and op.name == current.name:
                current = None
                continue
            if current is not None:
                out[id(op)] = current
            for f in op.spec_fields():
                inner = getattr(op, f.name)
                if isinstance(inner, Region):
                    walk(inner, current)
    walk(role.body, None)
    return out


def _round_pairs(model: Model, wait: O.TurnWait, r_site, w_site, sub):
    """(the gather's index, the write's renamed index) of every loop around the section
    `wait` opens (its wait's loops, outermost first): the round of an instance is its
    iteration of these loops. None when a loop around the section is not found at both sites
    (not decided: the pair is left unordered)."""
    turn = next((t for t in model.turns if t.op is wait), None)
    if turn is None:
        return None
    pairs = []
    for loop in turn.loops():
        a = next((s for s in r_site.loops() if s.op is loop.op), None)
        b = next((s for s in w_site.loops() if s.op is loop.op), None)
        if a is None or b is None:
            return None
        pairs.append((a.var, sub(b.var)))
    return pairs


def _same_round(model: Model, wait: O.TurnWait, r_site, w_site, sub):
    """The condition that the gather's and the write's instances lie in one round of the
    section `wait` opens: the loops around the section at the same iteration (the writer's
    variables renamed apart by `sub`). None when undecided (`_round_pairs`)."""
    pairs = _round_pairs(model, wait, r_site, w_site, sub)
    if pairs is None:
        return None
    return z3.And([a == b for a, b in pairs]) if pairs else z3.BoolVal(True)


def _round_before(pairs) -> z3.BoolRef:
    """The write's round comes before the gather's: its loop indices are lexicographically
    smaller, outermost first (each loop index grows with its iterations)."""
    out = z3.BoolVal(False)
    for a, b in reversed(pairs):
        out = z3.Or(b < a, z3.And(b == a, out))
    return out


def _unwritten_before(model: Model, r, section, row, wgv):
    """The condition that no write of the gathered row comes before the gather in the order
    of the ordered section `section`: no instance of any write of the buffer in an earlier
    round, or in the same round in an earlier turn (a smaller warpgroup) or earlier in the
    gatherer's own turn; quantified over each write's instance (its loop and warpgroup
    indices, renamed apart). None unless every write of the buffer is a generic write of
    the role inside that section with its rounds found (a row written outside it, by TMA or
    by another role, may hold the data: not decided)."""
    writes = model.writes.get(r.view.buffer.id, [])
    sections = _sections(r.site.role)
    if not writes or any(w.kind != "generic" or w.site.role is not r.site.role or
                         sections.get(id(w.op)) is not section for w in writes):
        return None
    nones = []
    for w in writes:
        pairs, _ = _instance_renaming(r.site, w.site)

        def sub(t, pairs=pairs):
            t = t if isinstance(t, z3.BoolRef) else _num(t)
            return z3.substitute(t, *pairs) if pairs else t
        rounds = _round_pairs(model, section, r.site, w.site, sub)
        if rounds is None:
            return None
        same = z3.And([a == b for a, b in rounds]) if rounds else z3.BoolVal(True)
        wg2 = sub(wgv)
        turn_first = z3.Or(wg2 < wgv, z3.And(wg2 == wgv, w.site.seq < r.site.seq)) \
            if w.site.seq < r.site.seq else wg2 < wgv
        w0 = sub(w.view.row0)
        writes_row = z3.And(_stage_eq(r.view.stage, None if w.view.stage is None
                                      else sub(w.view.stage)),
                            w0 <= row, row < w0 + w.view.rows)
        before = z3.And(z3.And([sub(c) for c in w.site.constraints()]),
                        z3.Or(_round_before(rounds), z3.And(same, turn_first)), writes_row)
        fresh = [b for _, b in pairs]
        nones.append(z3.ForAll(fresh, z3.Not(before)) if fresh else z3.Not(before))
    return z3.And(nones)


def _across_warpgroups(model: Model) -> list[Obligation]:
    """sync.exchange between two warpgroups of one role: for every shared gather in a role of
    several warpgroups and every generic write of its buffer in that role, no element the
    gather reads (its row: the view's first row + the element's row index; an index outside
    the view reads `other` and touches nothing) lies in the rows another warpgroup's write
    covers, in the same stage. The writer's scope variables are renamed apart (any iteration
    of its loops), its warpgroup differs. Element by element, so warpgroups gathering their
    own rows of a view over the whole buffer are proven (smem.race's row ranges would
    overlap).

    Both inside one ag.ordered section: the sections of a name run one at a time, warpgroup
    0, 1, ..., W - 1 in each round (check_ordered proves the turns: ordered.turns /
    ordered.pairs), and each turn is handed on by a bar.arrive of the passing warpgroup that
    the next one's bar.sync waits on (256 threads: both warpgroups participate, so the
    passer's earlier shared accesses are performed for the waiter: PTX ISA, barrier{.cta}).
    Any two instances of the section are therefore ordered, in turn order: no race. What is
    left is the order itself: a gather in warpgroup B's turn reads a row warpgroup A writes in
    the SAME round (the loops around the section at the same iteration) only if A's turn
    comes first (A < B); else it reads the row before A writes it. Instances of different
    rounds are ordered and not judged (reading a row an earlier round wrote is the carried
    exchange)."""
    obs = []
    # the walk above needs the kernel alone (tests drive it with a namespace holding just
    # that); these need the model's read sites: none without them
    for r in getattr(model, "reads", ()):
        if r.kind != "smem-gather" or not r.indices:
            continue
        shape = r.op.result.type.shape
        idx = tuple(fresh_int(f"x{d}") for d in range(len(shape)))
        coords, conds = [], []
        for (x, ishape), extent in zip(r.indices, (r.view.rows, r.view.cols)):
            if ishape is None:
                term = _num(x)
            else:
                rec = x.fn(tuple(z3.IntVal(0) if n == 1 else c for c, n in zip(idx, ishape)))
                v = rec.fields.get("value")
                # an index the model does not know: any element of the view
                term = _num(v.term) if v is not None else fresh_int("gathered")
                conds += list(rec.cond) if v is not None else []
            coords.append(term)
            conds.append(z3.And(term >= 0, term < extent))
        row = _num(r.view.row0) + coords[0]
        barrier = _barrier_before(r.site.role, r.op) if r.site.role is not None else None
        sections = _sections(r.site.role) if r.site.role is not None else {}
        for w in model.writes.get(r.view.buffer.id, []):
            if not gathers_across_warpgroups(r, w):
                continue
            pairs, diff = _instance_renaming(r.site, w.site)
            wgv = model.sym[r.site.role.index.id]

            def sub(t, pairs=pairs):
                t = t if isinstance(t, z3.BoolRef) else _num(t)
                return z3.substitute(t, *pairs) if pairs else t
            w0 = sub(w.view.row0)
            overlap = z3.And(_stage_eq(r.view.stage, None if w.view.stage is None
                                       else sub(w.view.stage)),
                             w0 <= row, row < w0 + w.view.rows)
            prem = list(model.premises) + r.site.constraints() + \
                [sub(c) for c in w.site.constraints()] + [wgv != sub(wgv)] + conds + \
                [z3.And(i >= 0, i < n) for i, n in zip(idx, shape)]
            subject = (f"shared gather of {r.view.buffer} at {r.op.loc} vs the write at "
                       f"{w.op.loc}, across the warpgroups of role {r.site.role.name!r}")
            # both in one ordered section: ordered by the turns; only a write of the same
            # round by a warpgroup whose turn comes later is read too early
            section = sections.get(id(r.op))
            rnd = None
            if section is not None and sections.get(id(w.op)) is section:
                rnd = _same_round(model, section, r.site, w.site, sub)
            later_claim = None
            if rnd is not None:
                claims = [("no warpgroup whose turn comes later in the round writes a "
                           "gathered row (ordered section " + repr(section.name) + ")",
                           z3.Not(z3.And(overlap, rnd, sub(wgv) > wgv)))]
                # a row this write gives only in a LATER round (the next iteration, the
                # other buffer of a ping-pong) and no write before the gather: the first
                # round reads it unwritten
                rounds = _round_pairs(model, section, r.site, w.site, sub)
                unwritten = _unwritten_before(model, r, section, row, wgv)
                if rounds and unwritten is not None:
                    later = z3.Not(z3.Or(_round_before(rounds), rnd))
                    later_claim = ("every gathered row is written before the gather in the "
                                   "turns of ordered section " + repr(section.name) +
                                   " (an earlier round or an earlier turn)")
                    claims.append((later_claim, z3.Not(z3.And(overlap, later, unwritten))))
            else:
                claims = [("no other warpgroup of the role writes a gathered row",
                           z3.Not(overlap))]

            def decode(zm, violated, r=r, w=w, idx=idx, row=row, sub=sub, wgv=wgv,
                       barrier=barrier, coords=coords,
                       section=section if rnd is not None else None,
                       later_claim=later_claim,
                       overlap_same=(z3.And(overlap, rnd, sub(wgv) > wgv) if rnd is not None
                                     else z3.BoolVal(True))):
                wit = W.context(model, zm, r.site)
                element = tuple(value(zm, i) for i in idx)
                wit.update(W.holder(model, r.op.result.type, element, r.site))
                other = value(zm, sub(wgv))
                at = value(zm, row)
                # the row index's defining line: the expression a fix edits
                made = _defining_ops(model).get(r.op.indices[0].id)
                wit.update({"element": element, "row": at,
                            "index": tuple(value(zm, c) for c in coords),
                            "index_at": str(made.loc if made is not None else r.op.loc),
                            "buffer": str(r.view.buffer), "gather": str(r.op.loc),
                            "writer": {"role": r.site.role.name, "warpgroup": other,
                                       "op": str(w.op.loc)},
                            "barrier": str(barrier.loc) if barrier is not None else None,
                            "section": section.name if section is not None else None})
                # which claim the model breaks, read off its quantifier-free part (the
                # later-round claim's "no write before" is quantified: a model need not
                # evaluate it to false)
                if section is not None and later_claim is not None and not z3.is_true(
                        zm.eval(z3.And(overlap_same), model_completion=True)):
                    rounds = [(str(a), value(zm, a), value(zm, b)) for a, b in
                              _round_pairs(model, section, r.site, w.site, sub)]
                    wit["round"] = {"gather": tuple(x for _, x, _ in rounds),
                                    "write": tuple(y for _, _, y in rounds)}
                    return (f"role {r.site.role.name!r}, warpgroup {wit['warpgroup']}, thread "
                            f"{wit['thread']} gathers element {element} (index "
                            f"{wit['index']}, the row index {r.op.indices[0]} defined at "
                            f"{wit['index_at']}) at {r.op.loc} in round "
                            f"{wit['round']['gather']} of the ordered section "
                            f"{section.name!r} (at {section.loc}): row {at} of "
                            f"{r.view.buffer}, which no turn before it writes; warpgroup "
                            f"{other} writes it at {w.op.loc} only in the later round "
                            f"{wit['round']['write']}, so the gather reads the row unwritten "
                            f"(the first round of a carried exchange: peel it, or write the "
                            f"row before the section)"), wit
                if section is not None:
                    return (f"role {r.site.role.name!r}, warpgroup {wit['warpgroup']}, thread "
                            f"{wit['thread']} gathers element {element} (index "
                            f"{wit['index']}, the row index {r.op.indices[0]} defined at "
                            f"{wit['index_at']}) at {r.op.loc}: row {at} of {r.view.buffer}, "
                            f"which warpgroup {other} writes at {w.op.loc} in the same round "
                            f"of the ordered section {section.name!r} (at {section.loc}); the "
                            f"section runs warpgroup 0, 1, ... in turn, so warpgroup "
                            f"{wit['warpgroup']}'s turn comes first and the gather reads the "
                            f"row before warpgroup {other} writes it (a stale or unwritten "
                            f"row)"), wit
                order = (f"the barrier before the gather, at {barrier.loc} (named barrier "
                         f"1 + warpgroup index, 128 threads), orders warpgroup "
                         f"{wit['warpgroup']}'s own threads only"
                         if barrier is not None and barrier.scope == "warpgroup" else
                         "no barrier orders two warpgroups of one role")
                return (f"role {r.site.role.name!r}, warpgroup {wit['warpgroup']}, thread "
                        f"{wit['thread']} gathers element {element} (index "
                        f"{wit['index']}, the row index {r.op.indices[0]} defined at "
                        f"{wit['index_at']}) at {r.op.loc}: row {at} of {r.view.buffer}, which "
                        f"warpgroup {other} of the same role writes at {w.op.loc}; {order}, "
                        f"so the gather may read the row before warpgroup {other} wrote it, "
                        f"or while it rewrites it"), wit
            obs.append(Obligation(
                "sync.exchange", r.op.loc, subject, prem,
                claims, decode, minimize=list(idx),
                # the orders this check models between warpgroups of one role: one ag.ordered
                # section holding both the write and the gather (the turns); a pipeline's
                # handoff between them is not modelled, so the fix names only what it proves
                # or does not pair (TMA writes and other roles' writes are not this role's
                # generic writes)
                fix="gather only rows the gathering warpgroup wrote itself (index them by "
                    "the warpgroup), or put the write and the gather in one ag.ordered "
                    "section and gather only rows a warpgroup whose turn comes earlier in the "
                    "round wrote, or have the rows written by TMA or by another role and "
                    "handed over through a pipeline; a pipeline between the warpgroups of "
                    "this role is not modelled here and is still reported"))
    return obs
