"""Synchronization obligations, read from the explicit sync ops that lower/sync.py placed.

Job (INVARIANTS.md §2.6, bug classes 5, 12, 24), on a kernel the sync pass ran on (attribute
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
      Also, an rs wgmma's group is retired before the region that issued it ends: its packed A
      registers live in that region's C scope (codegen/cuda/mma.py), and once out of scope
      ptxas may give them to other values while the tensor cores still read them (the
      register reuse of 9879b96). So a `wgmma.wait N` that allows the group to stay in flight
      past its region's end, or past an op touching its tiles, is a violation: N is read as
      "all but the newest N committed groups retire", whatever N is.

The ordered sections' obligations (ordered.pairs/barriers/turns/skip) are
verify/check_ordered.py's; they run from here, the turns on traced kernels too.

A finding carries the location of the reader (proxy.fence, sync.acc) or of the release
(sync.release).
The interpreter needs none of these ops; codegen renders them one for one, so what is proven
here is what runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.tag_ops import is_tag_op
from argus.verify import check_ordered
from argus.verify.model import Model
from argus.verify.obligation import Finding

MAX_GROUPS = 8  # in-flight groups tracked one by one; older ones merge (conservative)
# the state only grows from pass to pass over a finite lattice, so a loop settles; a loop that
# has not settled after this many passes is reported "unknown", never silently proven
MAX_LOOP_PASSES = 256


@dataclass
class _State:
    written: frozenset = frozenset()        # buffers with generic writes not yet fenced
    fenced: frozenset = frozenset()         # fenced, not yet behind a barrier
    writer: dict = field(default_factory=dict)  # buffer -> loc of its last generic write
    # slots read by wgmma not yet committed: (pipe id, "cur"/"held"), and the register tiles
    # those wgmma write or read: ("tile", tile id, wgmma site)
    open_reads: frozenset = frozenset()
    groups: tuple = ()                      # committed groups in flight, oldest first
    # the empty-barrier arrivals owed, as the possible (pipe id, this step's slot, held slot)
    # of the paths so far: this step's slot "owed" (not released yet) / "done" / "none" (no
    # step open), the held slot "yes" / "no" (a pipe absent: ("none", "no"))
    slots: frozenset = frozenset()

    def key(self):
        return (self.written, self.fenced, self.open_reads, self.groups, self.slots)

    def copy(self) -> "_State":
        return _State(self.written, self.fenced, dict(self.writer), self.open_reads, self.groups,
                      self.slots)


def _join(a: _State, b: _State) -> _State:
    n = max(len(a.groups), len(b.groups))
    ga = ((frozenset(),) * (n - len(a.groups))) + a.groups
    gb = ((frozenset(),) * (n - len(b.groups))) + b.groups
    pipes = {p for p, _, _ in a.slots | b.slots}
    # a pipe one side never touched is in its initial state there
    slots = a.slots | b.slots | {(p, "none", "no") for p in pipes
                                 if not any(x[0] == p for x in a.slots)
                                 or not any(x[0] == p for x in b.slots)}
    return _State(a.written | b.written, a.fenced | b.fenced, {**b.writer, **a.writer},
                  a.open_reads | b.open_reads, tuple(x | y for x, y in zip(ga, gb)), slots)


class _Checker:
    def __init__(self, kernel):
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
        self.sites: dict[int, O.Wgmma] = {}  # id(wgmma) -> the op
        for op in kernel.walk():
            if isinstance(op, O.Consume):
                self.steps[op.stage.id] = op.pipe.id
            elif isinstance(op, (O.TileSlice, O.ExpandDims)):  # same registers, no copy
                self.tile_root[op.result.id] = self.tile_root.get(op.src.id, op.src.id)
        for op in kernel.walk():
            if isinstance(op, O.Wgmma):
                self.wgmma_tiles |= {self.tile(v) for v in self._wgmma_regs(op)}
        self.findings: dict[tuple, Finding] = {}
        # threads of the group the walked code runs in (obligations sets it: the CTA at the
        # top level, a warpgroup in a role); an elect states the group it picks from
        # (Elect.group, set by lower/elect.py), which must be this one
        self.group = 128

    def rt(self, v) -> int:
        return self.root.get(v.id, v.id)

    def tile(self, v) -> int:
        return self.tile_root.get(v.id, v.id)

    @staticmethod
    def _wgmma_regs(op: O.Wgmma) -> list:
        """The registers a wgmma group uses until it retires: the accumulator, register A."""
        return [op.acc, op.a] if op.a_in_registers else [op.acc]

    def report(self, code, op, subject, ok: bool, msg="", witness=None, fix=""):
        key = (code, id(op))
        if ok and key in self.findings:
            return  # a violation on some path stays a violation
        self.findings[key] = Finding(code, op.loc, subject, "proven" if ok else "violated",
                                     msg, witness or {}, fix)

    # -- transfer ------------------------------------------------------------------------
    def region(self, region: Region, st: _State) -> _State:
        for op in region.ops:
            st = self.op(op, st)
        self.scope_ends(region, st)
        return st

    def scope_ends(self, region: Region, st: _State) -> None:
        """sync.acc at the end of a region: no rs wgmma issued in it is still in flight (its
        packed A registers go out of scope here)."""
        for op in region.ops:
            if not (isinstance(op, O.Wgmma) and op.a_in_registers):
                continue
            live = any(k[2] == id(op) for g in (*st.groups, st.open_reads) for k in g
                       if len(k) == 3)
            key = ("sync.acc", "scope", id(op))
            if not live and key in self.findings:
                continue  # a violation on some path stays a violation
            subject = f"register A of the wgmma at {op.loc} at the end of its scope"
            self.findings[key] = Finding(
                "sync.acc", op.loc, subject, "violated" if live else "proven",
                "" if not live else
                f"the register-A wgmma at {op.loc} may still be in flight when the region that "
                f"issued it ends (no wgmma.wait retires its group before, on some path): its "
                f"packed A registers go out of scope there and may be reused while the tensor "
                f"cores still read them",
                {"wgmma": str(op.loc), "groups_in_flight": len(st.groups)} if live else {},
                "lower.sync retires an rs group (wgmma.wait N + fence.operands) before the "
                "end of the region that issued it")

    def loop(self, loop: O.For, st: _State) -> _State:
        head = st
        for _ in range(MAX_LOOP_PASSES):
            out = self.region(loop.body, head.copy())
            nxt = _join(head, out)
            if nxt.key() == head.key():
                return head  # zero or more iterations
            head = nxt
        self.findings[("sync.fixpoint", id(loop))] = Finding(
            "sync.fixpoint", loop.loc, f"loop at {loop.loc}", "unknown",
            f"the synchronization state of this loop did not settle in {MAX_LOOP_PASSES} "
            f"passes: what is proven inside it holds for those iterations only")
        return head

    def op(self, op, st: _State) -> _State:  # noqa: C901 - a dispatcher over the sync ops
        if isinstance(op, O.For):
            return self.loop(op, st)
        if isinstance(op, O.If):
            return _join(st, self.region(op.body, st.copy()))
        if isinstance(op, O.Elect):
            self.elect(op)
            return self.region(op.body, st)
        if isinstance(op, O.Consume):
            self.step_opens(op, st)
            st = self.region(op.body, st)
            self.step_closes(op, st)
            return st
        if isinstance(op, O.Produce):
            return self.region(op.body, st)
        if not isinstance(op, O.SYNC_OPS + (O.TileSlice, O.ExpandDims)) and not is_tag_op(op):
            self.register_access(op, st)
        if isinstance(op, O.StMatrix):
            b = self.rt(op.dst)
            st.written, st.fenced = st.written | {b}, st.fenced - {b}
            st.writer[b] = op.loc
        elif isinstance(op, O.ProxyFence):
            st.written, st.fenced = frozenset(), st.fenced | st.written
        elif isinstance(op, O.GroupBarrier):
            st.fenced = frozenset()
        elif isinstance(op, O.TmaStore):
            self.async_read(op, [op.src], "tma-store", st)
        elif isinstance(op, O.Wgmma):
            views = [op.b] if op.a_in_registers else [op.a, op.b]
            self.async_read(op, views, "wgmma", st)
            slots = {(self.steps[self.stage_of[v.id]], "cur") for v in views
                     if self.stage_of.get(v.id) in self.steps}
            tiles = {("tile", self.tile(v), id(op)) for v in self._wgmma_regs(op)}
            self.sites[id(op)] = op
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

    def async_read(self, op, views, kind: str, st: _State) -> None:
        for v in views:
            b = self.rt(v)
            if b not in st.written and b not in st.fenced:
                if b in st.writer:
                    self.report("proxy.fence", op, f"{kind} of {v} at {op.loc}", True)
                continue
            missing = "fence.proxy.async" if b in st.written else "barrier after the fence"
            w = st.writer.get(b)
            self.report("proxy.fence", op, f"{kind} of {v} at {op.loc}", False,
                        f"{v} is written through the generic proxy by stmatrix at {w} and read "
                        f"by the async proxy ({kind}) at {op.loc} with no {missing} in between "
                        f"on some path: the tensor core/TMA may read stale bytes",
                        {"writer": str(w), "reader": str(op.loc), "missing": missing},
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
        return turns, turn_findings  # the sync ops are lowering's decision: checked once made
    c = _Checker(kernel)
    top = [op for op in kernel.body.ops if not isinstance(op, O.RoleOp)]
    c.group = kernel.attr("threads", 128)
    c.region(Region(tuple(top)), _State())
    c.group = 128  # a role's group is its warpgroup
    for role in (op for op in kernel.body.ops if isinstance(op, O.RoleOp)):
        c.role_ends(role, c.region(role.body, _State()))
    return turns, turn_findings + list(c.findings.values())
