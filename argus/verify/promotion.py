"""wgmma.k-once of a K reduction promoted block by block: partials that a wgmma overwrites
(scale-d = 0) and that are added into a destination accumulator.

Job: fp8 promotion (DeepSeek-V3 §3.3.2) multiplies each K block into a partial accumulator with
`ag.wgmma(..., overwrite=True)` and adds the partial into an fp32 accumulator on the CUDA cores
(`acc = acc + part`, or `acc + part * s` with a scale that does not read the partial). The
reduction is then not a property of one wgmma site: what reaches the sum is what each
*promotion* reads, and a partial may be written at one site and promoted at another, in a later
iteration, or after the loop (an overlapped promotion keeps two partials and promotes block
k - 1 after issuing block k; its first block is written before the loop and its last promoted
after it). So "each k once" is stated over the promotions:

  * the domain is the set of promotion instances (promotion site, the iterations of the loops
    the destination carries its value across, k in the block);
  * the k of an instance is that of the wgmma instance whose overwrite the promotion reads:
    the reaching write of the partial register at the promotion's read, found on the
    structured IR (`_reaching`): the last wgmma on that register before the read in program
    order, in the same iteration, in the previous iteration of an enclosing loop (its index
    minus the step; at the first iteration, what came before the loop), or in the last
    iteration of a loop that ended before the read (its index at start + (trip - 1) * step,
    when it ran), through `ag.when`s (a write under a condition is one case, what came
    before it the other). Each case is a condition over the promotion's variables, the wgmma
    site and a substitution of that site's loop indices;
  * claims: every promotion reads a partial some wgmma wrote (not the register's initial
    value); two distinct promotion instances promote distinct k (a partial promoted twice,
    or one overwritten before its promotion so that a later block is promoted twice, is a
    collision); each k lies in [0, |domain|) with |domain| = sum over the promotion sites of
    [their ag.when guards] x K of the block x the trip counts of their loops, and |domain| >=
    K. Injective into [0, |domain|) with |domain| elements means onto; so every k of [0, K)
    reaches the destination exactly once (the counting argument of wgmma.k-once).

A skipped block (the last partial never promoted) leaves |domain| short of K; a loop bound off
by one changes both |domain| and the blocks read. Each case's record conditions hold only where
the case does (stated as implications), so an iteration the case does not describe (the one
before the first) never makes the premises vacuous.

Applies when the structure is the one above (see `group_of`): every write of each partial is an
overwriting wgmma, the partial is read only by promotions (and wgmma fences), the promotions
of a destination share its chain (`wgmma_facts._acc_chain`) and the destination is read
otherwise only after every promotion and outside their loops, and the reaching writes are found
(a loop whose body writes the partial only under a condition is not followed). Else None, and
check_wgmma keeps its per-site k-once, which then reports what it sees.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify import witness as W
from argus.verify.model import Model, WgmmaSite, _num
from argus.verify.obligation import Obligation
from argus.verify import solver
from argus.verify.solver import value
from argus.verify.tagdomain import Substitution, fresh_int


@dataclass(frozen=True)
class Case:
    """The partial a promotion reads, where `cond` holds (over the promotion's variables):
    written by `site` (None: the register's initial value, no wgmma wrote it) with that
    site's loop indices given by `sub` (pairs (site variable, term of the reader's))."""

    cond: z3.BoolRef
    site: WgmmaSite | None
    sub: tuple = ()
    # an accumulating wgmma (scale-d = 1) after the overwrite the promotion reads: its block
    # reaches the partial too, where `cond` holds (promote_every > 1: `interval_promoted_mma`)
    adds: bool = False

    def under(self, cond, pairs=()) -> Case:
        """This case seen from outside: its terms through `pairs` (a loop index taken at one
        iteration), and `cond` besides its own."""
        if pairs:
            s = Substitution(list(pairs))
            own = s(self.cond)
            sub = tuple((v, s(t)) for v, t in self.sub) + tuple(
                (v, t) for v, t in pairs if not any(v.eq(a) for a, _ in self.sub))
        else:
            own, sub = self.cond, self.sub
        return Case(z3.And(cond, own), self.site, sub, self.adds)


@dataclass(frozen=True)
class Promotion:
    assign: O.Assign          # dst = dst + f(partial)
    add: object               # the EwSite of the add
    read: object              # the op reading the partial (the add, or the scale's mul)
    partial: int              # the partial's value id
    loops: tuple              # the loop scopes the destination carries its value across
    cases: tuple              # Case, exclusive and exhaustive


@dataclass(frozen=True)
class Group:
    """The promotions into one destination chain, and the overwriting wgmmas they read."""

    root: int
    promotions: tuple
    sites: tuple              # the WgmmaSites writing the partials, in program order
    dest: str                 # the destination's name, for messages


def group_of(model: Model, site: WgmmaSite) -> Group | None:
    """The promoted reduction an overwriting wgmma site belongs to, or None (then per-site
    k-once applies). Decided once per model."""
    memo = model.__dict__.get("_promotion_groups")
    if memo is None:
        # by the site's program point (Site.seq, a value; one site per wgmma op)
        memo = model._promotion_groups = {}
        for g in _groups(model):
            for s in g.sites:
                memo[s.site.seq] = g
    return memo.get(site.site.seq)


# ----------------------------------------------------------------------------- structure


def _tree(model: Model):
    """(program point -> op, value id -> the point of the op defining it): the structured
    IR's nesting, once per model. A program point is a value: the path of (op index in its
    region, region index in its op) from the kernel's body, as check_fills numbers
    assignments ((3, 0, 5): the sixth op of the first region of the body's fourth op). An
    assignment or a wgmma has no result to be named by, and two equal ops are two points.

    What the walks need follows from the points: the op at p sits at index p[-1] of the
    region at p[:-1] (`_region`), whose op is at p[:-2]; program order (the kernel's pre-order
    walk) is the points' lexicographic order; an op is inside a loop iff the loop's point is
    a proper prefix of its own."""
    got = model.__dict__.get("_promotion_tree")
    if got is None:
        ops: dict[tuple[int, ...], O.Op] = {}
        defined: dict[int, tuple[int, ...]] = {}

        def visit(region, point: tuple[int, ...]) -> None:
            for i, op in enumerate(region.ops):
                at = point + (i,)
                ops[at] = op
                for r in op.results():
                    defined.setdefault(r.id, at)
                for j, r in enumerate(op.regions()):
                    visit(r, at + (j,))
        visit(model.kernel.body, ())
        got = model._promotion_tree = (ops, defined)
    return got


def _region(model: Model, point: tuple[int, ...]):
    """The region at a region's program point (() is the kernel's body)."""
    if not point:
        return model.kernel.body
    ops, _ = _tree(model)
    return ops[point[:-1]].regions()[point[-1]]


def _inside(point: tuple[int, ...], loop: tuple[int, ...]) -> bool:
    """Whether the op at `point` is inside the op at `loop` (in one of its regions)."""
    return len(point) > len(loop) and point[:len(loop)] == loop


def _reads(defs: dict, vid: int, target: int) -> bool:
    if vid == target:
        return True
    op = defs.get(vid)
    return op is not None and not isinstance(op, O.Var) and any(
        _reads(defs, a.id, target) for a in op.operands() if isinstance(a.type, TileType))


def _scaled_read(defs: dict, vid: int, partials: set[int]):
    """(partial id, the op that reads it) when value `vid` is a partial, or a partial times
    factors that do not read it; (partial, None) when vid is the partial itself."""
    if vid in partials:
        return vid, None
    op = defs.get(vid)
    if not isinstance(op, O.Elementwise) or op.fn != "mul" or len(op.args) != 2:
        return None
    for x, y in (op.args, op.args[::-1]):
        got = _scaled_read(defs, x.id, partials)
        if got is not None and not _reads(defs, y.id, got[0]):
            return got[0], got[1] if got[1] is not None else op
    return None


def _sum_of(defs: dict, vid: int, root: int, partials: set[int]):
    """(x, [(partial, the op reading it, the add adding it)]) when value `vid` is x plus
    partials (each times factors that do not read it), x a value of the chain from `root`;
    else None."""
    from argus.verify.wgmma_facts import _acc_chain

    if vid not in partials and _acc_chain(defs, vid)[-1] == root:
        return vid, []
    op = defs.get(vid)
    if not isinstance(op, O.Elementwise) or op.fn != "add" or len(op.args) != 2:
        return None
    for x, y in (op.args, op.args[::-1]):
        head = _sum_of(defs, x.id, root, partials)
        term = _scaled_read(defs, y.id, partials) if head is not None else None
        if term is not None:
            return head[0], head[1] + [(term[0], term[1] or op, op)]
    return None


def _groups(model: Model) -> list[Group]:
    from argus.verify.wgmma_facts import _acc_chain, _carried_across

    defs = model.value_defs()
    at_point, defined = _tree(model)
    # the wgmma ops by program point: the register each writes (writers), the model's site
    # of each (matched to its op object once here; a point is what the walks below carry)
    writers: dict[int, list[tuple[int, ...]]] = {}
    for at, op in at_point.items():
        if isinstance(op, O.Wgmma):
            writers.setdefault(op.acc.id, []).append(at)
    sites = {at: s for s in model.wgmmas for ats in writers.values() for at in ats
             if at_point[at] is s.op}
    partials = {vid for vid, ats in writers.items()
                if any(at_point[a].overwrite for a in ats)}
    if not partials:
        return []
    ews = {e.op.result.id: e for e in model.ews}   # by the elementwise op's result (IR name)
    # chain root -> [(assign's point, add op, read op, partial, base)]
    found: dict[int, list] = {}
    for at, op in at_point.items():
        if not isinstance(op, O.Assign) or not isinstance(defs.get(op.dst.id), O.Var):
            continue
        # dst = x + f(p1) + f(p2) + ... (the DSL folds consecutive `acc = acc + part` into
        # one assignment of a sum), x a value of dst's own chain (dst itself, or the copy an
        # ag.when or a loop body made of it: argus/dsl/carry.py); that x holds the running
        # sum is `_linear`'s question
        root = _acc_chain(defs, op.dst.id)[-1]
        got = _sum_of(defs, op.src.id, root, partials)
        if got is None or not got[1]:
            continue
        base, terms = got
        for partial, read, add in terms:
            found.setdefault(root, []).append((at, add, read, partial, base))
    out = []
    for root, proms in found.items():
        used = {p[3] for p in proms}
        if not _pure(model, writers, used, proms):
            continue
        group_sites = [sites.get(a) for vid in used for a in writers[vid]]
        if any(s is None for s in group_sites):
            continue
        group_sites.sort(key=lambda s: s.site.seq)
        if len({s.op.k_extent for s in group_sites}) != 1:
            continue
        made, assigned = [], []
        for assign_at, add, read, vid, _ in proms:
            ew = ews.get(add.result.id)
            read_at = defined.get(read.result.id)
            # the read in the assignment's region (values: the two regions' points)
            if ew is None or read_at is None or read_at[:-1] != assign_at[:-1]:
                made = None
                break
            assign = at_point[assign_at]
            cases = _before(model, sites, vid, read_at)
            if cases is None:
                made = None
                break
            chain = _acc_chain(defs, assign.dst.id)
            loops = tuple(s for s in ew.site.loops() if _carried_across(chain, s.op, defs))
            # a guard inside a loop the destination sums over would make the count of
            # instances depend on the iteration: not counted here
            inside = False
            for sc in ew.site.scopes:
                if loops and sc is loops[0]:
                    inside = True
                elif inside and sc.kind == "if":
                    made = None
                    break
            if made is None:
                break
            made.append(Promotion(assign, ew, read, vid, loops, tuple(cases)))
            assigned.append(assign_at)
        if not made or not _linear(model, defs, root, made, assigned, [p[4] for p in proms]):
            continue
        name = next((p.assign.dst.hint for p in made if p.assign.dst.hint), f"%{root}")
        out.append(Group(root, tuple(made), tuple(group_sites), name))
    return out


def _pure(model, writers, used, proms) -> bool:
    """Every write of the partials is an overwriting wgmma, nothing assigns them, and nothing
    reads them but the promotions' reads and wgmma fences."""
    at_point, _ = _tree(model)
    reads = {p[2].result.id for p in proms}   # the reading ops, by their results (IR names)
    for vid in used:
        # every write a wgmma: overwriting ones (scale-d = 0) and accumulating ones, whose
        # blocks the reaching-write walk counts to the promotion after them (Case.adds)
        if not any(at_point[a].overwrite for a in writers[vid]):
            return False
    for op in model.kernel.walk():
        if isinstance(op, O.Assign) and op.dst.id in used:
            return False
        if isinstance(op, (O.Wgmma, O.WgmmaFence, O.FenceOperands)):
            if isinstance(op, O.Wgmma) and any(v.id in used for v in op.operands()
                                               if v is not op.acc):
                return False
            continue
        if any(r.id in reads for r in op.results()):
            continue
        if any(v.id in used for v in op.operands()):
            return False
    return True


def _linear(model, defs, root, made, assigned, sums) -> bool:
    """Every promotion adds to the running sum, and the destination is read (beyond the
    promotions and its own variables) only after every promotion and outside the loops the
    promotions sum over, where it holds the whole sum.

    A walk in program order keeps the set of the chain's variables that hold the running sum
    (a `var` copy of one does; an assignment from one does; a promotion leaves only its
    destination): a promotion must read one of them, else it adds to a stale copy and an
    earlier promotion is lost. An ag.when's body may not run (the set after it holds in both
    cases: the intersection); a loop body is walked until its set at entry is stable (an
    intersection with the set at its end: it may run any number of times). A read elsewhere
    (an observer) must see a variable of the set, after the last promotion, outside the
    promotions' loops. `assigned`: the program points of the promotions' assignments (the
    walk carries points: an assignment has no result to be named by)."""
    from argus.verify.wgmma_facts import _acc_chain

    _, defined = _tree(model)
    chain = {root}
    for op in model.kernel.walk():
        if isinstance(op, O.Var) and isinstance(op.result.type, TileType) and \
                _acc_chain(defs, op.result.id)[-1] == root:
            chain.add(op.result.id)
    by_assign = dict(zip(assigned, sums))
    # the sums' values (each add's result), read only by the next add of the same sum or by
    # its assignment
    adds = {p.add.op.result.id for p in made}

    def sums_op(op, at) -> bool:
        """Whether the op at `at` is one of the sums' adds or assignments."""
        return at in by_assign or any(r.id in adds for r in op.results())
    last = max(assigned)   # program order is the points' order
    loops = [defined[sc.op.var.id] for p in made for sc in p.loops]   # For defines its index

    def observer_ok(op, at, live) -> bool:
        return all(v.id in live for v in op.operands() if v.id in chain) and \
            at > last and not any(_inside(at, lp) for lp in loops)

    def run(region, point, live: frozenset):
        for i, op in enumerate(region.ops):
            at = point + (i,)
            if any(r.id == root for r in op.results()):
                live = frozenset({root})         # the sum starts (again, in a unit loop)
                continue
            hit = by_assign.get(at)
            if hit is not None:
                if hit not in live:
                    return None          # adds to a copy that misses a promotion
                live = frozenset({op.dst.id})
                continue
            if any(v.id in adds for v in op.operands()) and not sums_op(op, at):
                return None              # a promotion's sum read by something else
            if isinstance(op, O.Var) and op.result.id in chain:
                if op.init.id in live:
                    live = live | {op.result.id}
                continue
            if isinstance(op, O.Assign) and op.dst.id in chain:
                if op.src.id in chain:
                    live = live | {op.dst.id} if op.src.id in live else live - {op.dst.id}
                    continue
                return None              # the sum rescaled or replaced: not a plain sum
            if any(v.id in chain for v in op.operands()) and not sums_op(op, at):
                if isinstance(op, O.Wgmma) or not observer_ok(op, at, live):
                    return None
            for j, r in enumerate(op.regions()):
                if isinstance(op, O.If):
                    got = run(r, at + (j,), live)
                    if got is None:
                        return None
                    live = live & got
                elif isinstance(op, O.For):
                    entry = live
                    while True:
                        got = run(r, at + (j,), entry)
                        if got is None:
                            return None
                        nxt = entry & got
                        if nxt == entry:
                            break
                        entry = nxt
                    live = entry & got
                else:
                    got = run(r, at + (j,), live)
                    if got is None:
                        return None
                    live = got
        return live

    return run(model.kernel.body, (), frozenset({root})) is not None


# ----------------------------------------------------------------------------- reaching writes


_NONE = "no write"


def _before(model: Model, sites, vid: int, point: tuple[int, ...]):
    """The cases of the partial's content at the op at program point `point` (before it
    runs), or None. `sites`: the wgmma sites by program point."""
    ops, _ = _tree(model)
    cases: list[Case] = []
    pending = z3.BoolVal(True)   # no write found after this point yet
    where, index = point[:-1], point[-1]    # the region's point, the op's index in it
    while True:
        got = _scan_back(model, sites, where, index, vid, pending, from_definition=True)
        if got is None:
            return None
        found, pending, finished = got
        cases += found
        if finished:
            return cases
        if not where:
            return None                     # the kernel's body: no op around it
        owner_at = where[:-1]
        owner = ops[owner_at]
        if isinstance(owner, O.For):
            # the previous iteration's last write, else (at the first) what came before
            var = model.sym[owner.var.id]
            start, step = _num(model.scalar(owner.start)), _num(model.scalar(owner.step))
            got = _last_in_region(model, sites, where, vid)
            if got is None:
                return None
            if got is not _NONE:
                inner, complete = got
                if not z3.is_true(z3.simplify(complete)):
                    return None   # a body that may not write: an earlier iteration's write
                prev = [(var, var - step)]
                cases += [c.under(z3.And(pending, var != start), prev) for c in inner]
                pending = z3.And(pending, var == start)
        elif not isinstance(owner, (O.If, O.Produce, O.Consume, O.Elect, O.RoleOp)):
            return None
        where, index = owner_at[:-1], owner_at[-1]


def _body_point(op, at: tuple[int, ...]) -> tuple[int, ...]:
    """The program point of `op.body`, for the op at `at` (its index among the op's regions,
    found by identity: regions compare by value)."""
    return at + (next(j for j, r in enumerate(op.regions()) if r is op.body),)


def _last_in(model: Model, sites, op, at: tuple[int, ...], vid: int):
    """The last write of the partial while `op` (at program point `at`) runs: (cases, the
    condition that it wrote), _NONE, or None (not followed)."""
    if isinstance(op, O.Wgmma):
        if op.acc.id != vid:
            return _NONE
        site = sites.get(at)
        if site is None:
            return None
        if not op.overwrite:
            # adds its block to what the partial held: one more block the promotion adds,
            # and the walk goes on to the write before it
            return [Case(z3.BoolVal(True), site, adds=True)], z3.BoolVal(False)
        return [Case(z3.BoolVal(True), site)], z3.BoolVal(True)
    if isinstance(op, O.Assign) and op.dst.id == vid:
        return None
    if not op.regions():
        return _NONE
    if isinstance(op, (O.Produce, O.Consume, O.Elect)):
        return _last_in_region(model, sites, _body_point(op, at), vid)
    if isinstance(op, O.If):
        got = _last_in_region(model, sites, _body_point(op, at), vid)
        if got is None or got is _NONE:
            return got
        cond = model._bool(op.cond)
        inner, complete = got
        return [c.under(cond) for c in inner], z3.And(cond, complete)
    if isinstance(op, O.For):
        got = _last_in_region(model, sites, _body_point(op, at), vid)
        if got is None or got is _NONE:
            return got
        inner, complete = got
        if not z3.is_true(z3.simplify(complete)):
            return None
        var = model.sym[op.var.id]
        start, step = _num(model.scalar(op.start)), _num(model.scalar(op.step))
        trip = model.trip_term(op)
        ran = trip > 0
        last = [(var, start + (trip - 1) * step)]
        return [c.under(ran, last) for c in inner], ran
    return None


def _scan_back(model: Model, sites, where: tuple[int, ...], end: int, vid: int, pending, *,
               from_definition: bool = False):
    """Walk the first `end` ops of the region at program point `where` backwards for the
    partial's writes: (the cases found, each under `pending` and no later write; the
    condition that none of them wrote; whether the walk ended at a write that always
    happens, or, `from_definition`, at the op that made the register), or None (not
    followed)."""
    cases: list[Case] = []
    ops = _region(model, where).ops
    for i in range(end - 1, -1, -1):
        op = ops[i]
        if from_definition and any(r.id == vid for r in op.results()):
            cases.append(Case(pending, None))   # the register as it was made
            return cases, pending, True
        got = _last_in(model, sites, op, where + (i,), vid)
        if got is None:
            return None
        if got is _NONE:
            continue
        inner, complete = got
        cases += [c.under(pending) for c in inner]
        pending = z3.And(pending, z3.Not(complete))
        if z3.is_true(z3.simplify(complete)):
            return cases, pending, True
    return cases, pending, False


def _last_in_region(model: Model, sites, where: tuple[int, ...], vid: int):
    """_last_in over the whole region at program point `where`."""
    got = _scan_back(model, sites, where, len(_region(model, where).ops), vid, z3.BoolVal(True))
    if got is None:
        return None
    cases, pending, finished = got
    if finished:
        return cases, z3.BoolVal(True)
    if not cases:
        return _NONE
    return cases, z3.Not(pending)


# ----------------------------------------------------------------------------- obligations


def _site_text(site: WgmmaSite) -> str:
    """A wgmma site for messages: its line, and its pipeline step's (the partials of an
    overlapped promotion are written by one helper, so one line for every site)."""
    step = next((sc.op for sc in reversed(site.site.scopes)
                 if sc.kind in ("consume", "produce")), None)
    return f"wgmma at {site.op.loc}" + (f" (in the step at {step.loc})" if step is not None
                                        else "")


def _exclusive(model: Model, p1: Promotion, p2: Promotion) -> bool:
    """Whether the ag.when guards of two promotion sites never hold together (the tails of an
    even and of an odd block count): their pair of instances does not exist, and its query
    would have contradictory premises. Decided by the solver on the guards alone, which
    mention no loop index the promotions sum over (`_groups`); unknown keeps the pair."""
    g1 = [c for sc in p1.add.site.scopes if sc.kind == "if" for c in sc.constraints]
    g2 = [c for sc in p2.add.site.scopes if sc.kind == "if" for c in sc.constraints]
    if not g1 or not g2:
        return False
    s = z3.Solver()
    s.set("rlimit", 1_000_000)
    s.set("timeout", solver.backstop_ms(1_000_000))
    s.add(*model.premises, *p1.add.site.constraints(), *p2.add.site.constraints())
    return s.check() == z3.unsat


def k_once(model: Model, site: WgmmaSite, name: str) -> list[Obligation] | None:
    """wgmma.k-once of an overwriting wgmma site whose partial is promoted: the obligations of
    its promoted reduction (made once, at the group's first site: [] at the others), or None
    when the site is not one (then check_wgmma's per-site claims apply). Every site of the
    group must read one tensor's `name` along k; else None for all of them."""
    from argus.verify.wgmma_facts import _k_key

    group = group_of(model, site)   # an accumulating site too, when it writes a partial
    if group is None:
        return None
    keys = {_k_key(model, s, name) for s in group.sites}
    if len(keys) != 1 or None in keys:
        return None
    if site is not group.sites[0]:
        return []
    memo = model.__dict__.setdefault("_promotion_obligations", {})
    key = (group.root, name)
    if key not in memo:
        memo[key] = obligations(model, group, name)
    return memo[key]


def _expanded(proms) -> tuple:
    """The promotions as instances of one block each: a promotion whose partial also holds
    accumulating wgmma's blocks (Case.adds: promote_every > 1) stands for its reaching
    overwrite (the cases without `adds`) and one more promotion per accumulating write, each
    adding K values where its case holds and none where it does not (its "written" claim then
    fails: an accumulating write that only sometimes reaches the promotion is not counted)."""
    out = []
    for p in proms:
        adds = [c for c in p.cases if c.adds]
        if not adds:
            out.append(p)
            continue
        out.append(dataclasses.replace(p, cases=tuple(c for c in p.cases if not c.adds)))
        out += [dataclasses.replace(p, cases=(c,)) for c in adds]
    return tuple(out)


def obligations(model: Model, group: Group, name: str) -> list[Obligation]:
    """wgmma.k-once over the group's promotions (the module docstring); `name` is the field
    along k (`k`)."""
    from argus.verify.wgmma_facts import _field_extent, _minimize

    first = group.sites[0]
    K = first.op.k_extent
    m = fresh_int("m")
    proms = _expanded(group.promotions)
    subject = (f"k of the sum promoted into {group.dest} ({len(proms)} promotions of "
               f"partials written by {len(group.sites)} wgmma sites)")

    def instance(p: Promotion, kk, ren: Substitution | None):
        """(k term, premises, which-case terms) of promotion p at k-in-block kk, its loop
        indices renamed by `ren` (the second instance)."""
        prem = list(p.add.site.constraints()) + [kk >= 0, kk < K]
        t = fresh_int("k_unwritten")   # the initial register: no k (a claim fails there)
        written = z3.Or([c.cond for c in p.cases if c.site is not None] or
                        [z3.BoolVal(False)])
        for c in reversed(p.cases):
            if c.site is None:
                continue
            rec = model.wgmma_a(c.site, m, kk)
            f = rec.fields.get(name)
            if f is None:
                return None
            sub = Substitution(list(c.sub)) if c.sub else None
            facts = list(c.site.site.constraints()) + list(rec.cond) + list(f.cond) + \
                [rec.defined]
            if sub is not None:
                facts = sub.many(facts)
                term = sub(f.term)
            else:
                term = f.term
            prem.append(z3.Implies(c.cond, z3.And(facts)))
            t = z3.If(c.cond, term, t)
        if ren is not None:
            prem = ren.many(prem)
            t, written = ren(t), ren(written)
        return t, prem, written

    size = z3.IntVal(0)
    for p in proms:
        part = z3.IntVal(K)
        for sc in p.loops:
            part = part * model.trip_term(sc.op)
        guards = [c for sc in p.add.site.scopes if sc.kind == "if" for c in sc.constraints]
        size = size + (z3.If(z3.And(guards), part, 0) if guards else part)
    size = z3.simplify(size)
    extent = _field_extent(model, None, name)   # (reads the tensors only)
    minimize_base = _minimize(first)

    def where(zm, p, ren=None) -> dict:
        it = {str(sc.op.loc): value(zm, ren(sc.var) if ren else sc.var) for sc in p.loops}
        out = {"promotion": str(p.add.op.loc), "iteration": it}
        for c in p.cases:
            cond = ren(c.cond) if ren else c.cond
            if not z3.is_true(zm.eval(cond, True)):
                continue
            if c.site is None:
                out["reads"] = "the partial's initial value (no wgmma wrote it)"
                return out
            out["reads"] = f"the partial written by the {_site_text(c.site)}"
            # the writer's iterations of the loops the promotion is not in (a previous
            # iteration of its own loop, the last of a loop that ended before it)
            loops = {str(sc.var): sc for sc in c.site.site.loops()}
            written = {str(loops[str(v)].op.loc) if str(v) in loops else str(v):
                       value(zm, ren(t) if ren else t) for v, t in c.sub}
            out["written_at"] = written or "the same iteration"
            return out
        return out

    obs = []
    kk1 = fresh_int("kk")
    built = {}
    for i, p in enumerate(proms):
        got = instance(p, kk1, None)
        if got is None:
            return []
        built[i] = got
    for i, p1 in enumerate(proms):
        t1, prem1, w1 = built[i]
        for j in range(i, len(proms)):
            p2 = proms[j]
            if j != i and _exclusive(model, p1, p2):
                continue   # one ag.when and its negation: never both in one sum
            ren = Substitution([(sc.var, fresh_int(f"{sc.var}@2")) for sc in p2.loops]) \
                if p2.loops else None
            kk2 = fresh_int("kk")
            got = instance(p2, kk2, ren)
            if got is None:
                return []
            t2, prem2, w2 = got
            same = z3.And([kk1 == kk2] + [sc.var == ren(sc.var) for sc in p2.loops]) \
                if i == j else z3.BoolVal(False)

            def decode_dup(zm, violated, p1=p1, p2=p2, ren=ren, kk2=kk2, t1=t1):
                wit = W.context(model, zm, p1.add.site)
                k = value(zm, t1)
                a, b = where(zm, p1), where(zm, p2, ren)
                a["k_in_block"], b["k_in_block"] = value(zm, kk1), value(zm, kk2)
                wit.update({"k": k, "first": a, "second": b})
                # who runs the promotion: its site's role, warpgroup and thread (W.context),
                # in the words too, not names.who's lookup of the line
                return W.placed(
                    f"global {name} = {k} reaches {group.dest} twice: promoted at "
                    f"{a['promotion']} (iteration {a['iteration']}, {a.get('reads')}) and at "
                    f"{b['promotion']} (iteration {b['iteration']}, {b.get('reads')})",
                    wit), wit
            obs.append(Obligation(
                "wgmma.k-once", p1.add.op.loc, subject + f": promotions at {p1.add.op.loc} and "
                f"{p2.add.op.loc} promote distinct {name}", list(model.premises) + prem1 + prem2,
                # (an instance reading the register's initial value has no k: the claim
                # below, "written by a wgmma", fails there)
                [(f"distinct promotion instances promote distinct {name}",
                  z3.Or(same, z3.Not(w1), z3.Not(w2), t1 != t2))], decode_dup,
                minimize=[sc.var for sc in p1.loops] + minimize_base + [kk1]))
    for i, p in enumerate(proms):
        t, prem, written = built[i]
        claims = [("the promoted partial was written by a wgmma", written),
                  (f"{name} in [0, |domain|)", z3.Implies(written, z3.And(t >= 0, t < size)))]
        if i == 0 and extent is not None:
            claims.append(("k range covers the tensor", size >= _num(extent)))

        def decode_range(zm, violated, p=p, t=t):
            wit = W.context(model, zm, p.add.site)
            d = value(zm, size)
            wit.update(where(zm, p))
            wit.update({"domain": d, "k_in_block": value(zm, kk1)})
            if "the promoted partial was written by a wgmma" in violated:
                msg = (f"the promotion at {p.add.op.loc} adds a partial no wgmma has written "
                       f"since it was made (its initial value)")
            elif "k range covers the tensor" in violated:
                msg = (f"the promotions add {d} values of {name} but the tensor has "
                       f"{value(zm, extent)}: {name} = {d} .. {value(zm, extent) - 1} never "
                       f"reach {group.dest}")
            else:
                msg = (f"{name} = {value(zm, t)} promoted at {p.add.op.loc} lies outside "
                       f"[0, {d}) (the {d} values the promotions add)")
            return W.placed(msg, wit), wit
        obs.append(Obligation(
            "wgmma.k-once", p.add.op.loc, subject + f": the promotion at {p.add.op.loc} adds "
            f"a written block inside [0, |domain|)" + (", covers [0, K)" if len(claims) > 2
                                                       else ""),
            list(model.premises) + prem, claims, decode_range,
            minimize=list(model.params.values()) + [sc.var for sc in p.loops]))
    return obs

