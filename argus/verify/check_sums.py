"""reduce.slices: a sum of partials adds every slice exactly once (the second half of split-K).

Job (INVARIANTS.md §4 class 2 and 14, for partial sums): a split-K GEMM writes one fp32
partial per K slice, P[s] for s in [0, splits) (wgmma.k-once proves each slice's k once; the
partial is legal because a later sum adds it), and a second kernel adds them: C = P[0] + P[1]
+ ... The tags cannot see that sum: every partial carries the same output coordinates, so
adding P[0] twice and P[1] never, or stopping one slice short, stores right-looking tags.

This check reads the sum itself. For every stored value, the tree of elementwise additions
under it (through conversions and a variable's initial value) has loads of one tensor as leaves;
the dims along which the leaves' offsets differ are the summed dims (the slice index). Then
  * distinct leaves read distinct slices (no slice added twice), and
  * every slice index lies in the tensor's extent, and there are as many leaves as slices
    (the product of the summed dims' extents): with the first, every slice is added once.
Only a slice index is claimed: a dim of constant extent that the output does not have, read at
constant offsets (shifted reads along a dim the output keeps, a stencil or a pooling window,
are no partial sums), or a leading dim the output lacks walked by a runtime loop, whose extent
may be a runtime size (`for s in ag.range(P.shape[0])`). A single load (no sum) is not a sum
of partials: no claim; one load a loop adds every iteration to a zero accumulator is (as
many leaves as trips), and when its offsets move along no dim, the dims the output lacks are
its slice dims (the loop adds one slice again).

The sum may run in a runtime loop (`total = ag.load(P, (0, ...))`, then `for s in
ag.range(1, splits): total = total + ag.load(P, (s, ...))`): a variable whose one assignment,
at the top level of a loop body, adds loads to itself. Its loads are leaves at every iteration
(offsets along the slice dim that are functions of the loop index alone), and the claims hold
for all of them: the loads of two different iterations (or two loads of one) read distinct
slices, none the slice of a load outside the loop, all inside the tensor, and the count is
trips x loads per iteration plus the loads outside. So a loop that starts at 0 after the
initial value read slice 0, or stops one slice short, is refused. Lowered, the loop's loads
may go through lower/prefetch.py's register ring (`_Ring`): the block read at iteration j is
the one issued `depth` iterations earlier, at offsets(j).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import z3

from argus.ir import ops as O
from argus.verify import solver
from argus.verify import witness as W
from argus.verify.model import Model, _num
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    defs = model.value_defs()
    looped = _loop_sums(model)
    assigned = model.assigned_sources()   # membership only: the variables some assign sets
    obs: list[Obligation] = []
    finds: list[Finding] = []
    for st in model.kernel.walk():
        if not isinstance(st, O.Store):
            continue
        leaves: list[O.Load] = []
        loops: list[tuple[O.For, list[O.Load]]] = []
        # one load is no sum, unless a loop adds it once an iteration (`acc = zeros`, then
        # `acc = acc + ag.load(P, (s, ...))`: as many leaves as trips)
        if not _sum_leaves(defs, st.value.id, leaves, looped, loops, assigned) or \
                (len(leaves) + sum(len(x) for _, x in loops) < 2 and not loops):
            continue
        # a store inside a summing loop reads the variable mid-sum (a prefix): no claim
        if any(st is op for loop, _ in loops for op in loop.body.walk()):
            continue
        tensors = {ld.tensor.id for ld in leaves} | {ld.tensor.id for _, x in loops for ld in x}
        info = model.tensors.get(next(iter(tensors)))
        if len(tensors) != 1 or info is None:
            continue
        try:
            offs = [[_num(model.scalar(o)) for o in ld.offsets] for ld in leaves]
            per_loop = [(loop, [_leaf_offsets(model, loop, ld) for ld in x], x)
                        for loop, x in loops]
        except _NoClaim as e:   # a ring this check cannot read: say so, never a pass
            finds.append(Finding("reduce.slices", st.loc, f"sum stored at {st.loc}", "unknown",
                                 f"not checked: {e}"))
            continue
        except Exception:  # noqa: BLE001 - an offset the model has no term for: no claim
            continue
        everything = offs + [o for _, lo, _ in per_loop for o in lo]
        summed = [d for d in range(len(info.dims))
                  if any(not z3.eq(z3.simplify(o[d]), z3.simplify(everything[0][d]))
                         for o in everything)]
        # a slice index: a dim of constant extent the output does not have, read at constant
        # offsets (P[s] of split-K), or at offsets of a loop's index alone; shifted reads
        # along a dim the output keeps (a stencil, a pooling window) are not partial sums
        out_rank = len(model.tensors[st.tensor.id].dims) if st.tensor.id in model.tensors \
            else len(info.dims)
        # the dims the output does not have (its leading ones: a tile takes the last dims)
        extra = len(info.dims) - out_rank
        if not summed and per_loop and extra > 0:
            # a loop adding the same slice every iteration (`P[0]` for `P[s]`): nothing
            # varies, so the slice dims are the ones the output lacks; the claims below then
            # say the iterations read one slice again
            summed = list(range(extra))
        if not summed or extra <= 0 or any(
                # a runtime extent is a slice count only for a dim the output lacks, walked
                # by a loop (`for s in ag.range(P.shape[0])`); a constant one may be unrolled
                not (isinstance(info.dims[d], int) or (d < extra and per_loop)) or
                not all(z3.is_int_value(z3.simplify(o[d])) for o in offs) or
                not all(_of_index(model, loop, o[d]) for loop, lo, _ in per_loop for o in lo)
                for d in summed):
            continue
        if per_loop:
            obs.append(_looped_slices(model, st, info, leaves, offs, per_loop, summed))
        else:
            obs.append(_slices(model, st, info, leaves, offs, summed))
    return obs, finds


def _sum_leaves(defs, vid: int, out: list, looped: dict | None = None,
                loops: list | None = None, assigned: dict | None = None) -> bool:
    """Collect the loads added up into value `vid`; False when the tree has another kind of
    node (a product, a max: not a plain sum of partials). A variable summed in a loop
    (`looped`) adds its initial value's loads to `out` and (loop, its loads) to `loops`; any
    other assigned variable (a key of `assigned`, Model.assigned_sources) holds more than its
    initial value: False. A tree walk, not Model.walk_defs: a value added twice (`x + x`)
    is two leaves, which a walk visiting each value once would count as one."""
    op = defs.get(vid)
    if isinstance(op, O.Load):
        out.append(op)
        return True
    if isinstance(op, O.Full) and op.value == 0:
        return True    # a zero tile adds nothing (an accumulator's initial value)
    if isinstance(op, (O.Convert, O.ConvertLayout)):
        return _sum_leaves(defs, op.src.id, out, looped, loops, assigned)
    if isinstance(op, O.Var):
        if looped is not None and vid in looped:
            if loops is None or any(lp is looped[vid][0] for lp, _ in loops):
                return False
            loops.append(looped[vid])
        elif assigned is not None and vid in assigned:
            return False
        return _sum_leaves(defs, op.init.id, out, looped, loops, assigned)
    if isinstance(op, O.Elementwise) and op.fn == "add" and len(op.args) == 2:
        return all(_sum_leaves(defs, a.id, out, looped, loops, assigned) for a in op.args)
    return False


def _loop_sums(model: Model) -> dict[int, tuple[O.For, list[O.Load]]]:
    """Variables summed in a runtime loop: var id -> (the loop, the loads its one assignment,
    at the top level of the loop body, adds to it each iteration). The assignment's value is
    an addition tree over the variable itself (once) and loads of the loop's own body."""
    defs = model.value_defs()
    assigns = {vid: len(srcs) for vid, srcs in model.assigned_sources().items()}
    out = {}
    for loop in model.kernel.walk():
        if not isinstance(loop, O.For):
            continue
        inside = {r.id for op in loop.body.walk() for r in op.results()}
        for at, op in enumerate(loop.body.ops):
            if not isinstance(op, O.Assign) or assigns.get(op.dst.id) != 1 or \
                    op.dst.id in inside or not isinstance(defs.get(op.dst.id), O.Var):
                continue
            loads: list = []
            selves = [0]

            def tree(vid: int, dst=op.dst.id, loads=loads, selves=selves, acc=at,
                     loop=loop, inside=inside) -> bool:
                d = defs.get(vid)
                if vid == dst:
                    selves[0] += 1
                    return True
                if isinstance(d, O.Load) and vid in inside:
                    loads.append(d)
                    return True
                if isinstance(d, O.Var) and vid not in inside:
                    ring = _ring(loop, vid, acc, defs, assigns, inside)
                    if ring is not None:
                        loads.append(ring)
                    return ring is not None
                if isinstance(d, (O.Convert, O.ConvertLayout)):
                    return tree(d.src.id)
                if isinstance(d, O.Elementwise) and d.fn == "add" and len(d.args) == 2:
                    return all(tree(a.id) for a in d.args)
                return False
            if tree(op.src.id) and selves[0] == 1 and loads:
                out[op.dst.id] = (loop, loads)
    return out


@dataclass(frozen=True)
class _Ring:
    """A block of lower/prefetch.py's register ring read in a loop: the variable holds, on entry
    to iteration j, the block the load `issued` read `depth` iterations earlier, i.e. at
    offsets(j) (`issued`'s offsets taken at j - depth * step); the first `depth` iterations
    read the ring's first blocks `inits` instead (checked to be offsets(start + k * step))."""

    issued: O.Load
    depth: int
    inits: tuple[O.Load, ...]

    @property
    def loc(self):
        return self.issued.loc

    @property
    def tensor(self):
        return self.issued.tensor


def _ring(loop: O.For, vid: int, acc: int, defs, assigns, inside) -> _Ring | None:
    """The ring whose first variable is `vid`, read by the accumulator's assignment, the op
    at index `acc` of the loop body: at the body's top level, after it, in order, b0 = b1,
    ..., b_last = a load of the body; each variable defined before the loop from a load and
    assigned only there. Ops are placed by their index in the body (an assign has no result
    to be named by, and two equal assigns are two ops), loads by their result's IR name."""
    body = loop.body.ops
    top = {r.id for op in body for r in op.results()}   # values the body's top level makes
    last, cur, chain = acc, vid, []
    while len(chain) < 16:
        mine = [(i, x) for i, x in enumerate(body) if isinstance(x, O.Assign) and
                x.dst.id == cur]
        var = defs.get(cur)
        if len(mine) != 1 or assigns.get(cur) != 1 or cur in inside or \
                not isinstance(var, O.Var) or mine[0][0] <= last:
            return None
        init = defs.get(var.init.id)
        if not isinstance(init, O.Load):
            return None
        chain.append(init)
        last, assign = mine[0]
        src = defs.get(assign.src.id)
        if isinstance(src, O.Load) and assign.src.id in top:
            return _Ring(src, len(chain), tuple(chain))
        if not isinstance(src, O.Var) or assign.src.id in inside:
            return None
        cur = assign.src.id
    return None


def _leaf_offsets(model: Model, loop: O.For, leaf) -> list:
    """A loop leaf's offsets at iteration `loop.var`; for a ring block, also that its first
    blocks are those offsets at the first iterations (else _NoClaim)."""
    if isinstance(leaf, O.Load):
        return [_num(model.scalar(o)) for o in leaf.offsets]
    var = model.sym[loop.var.id]
    start, step = _num(model.scalar(loop.start)), _num(model.scalar(loop.step))
    issued = [_num(model.scalar(o)) for o in leaf.issued.offsets]
    offs = [z3.substitute(t, (var, var - leaf.depth * step)) for t in issued]
    for k, init in enumerate(leaf.inits):
        at = [z3.substitute(t, (var, start + k * step)) for t in offs]
        got = [_num(model.scalar(o)) for o in init.offsets]
        if all(z3.eq(z3.simplify(a), z3.simplify(b)) for a, b in zip(at, got)):
            continue   # the same term (lower/prefetch.py's clones): no query
        out = solver.prove(list(model.premises),
                           [(f"ring block {k}", z3.And([a == b for a, b in zip(at, got)]))])
        if out.status != "proven":
            raise _NoClaim(f"the ring's block {k} at {init.loc} is not the loop's block {k}")
    return offs


class _NoClaim(Exception):
    """A sum the check does not read (no claim is made)."""


def _of_index(model: Model, loop: O.For, term) -> bool:
    """term is a function of the loop's index and constants only."""
    var = model.sym.get(loop.var.id)
    if var is None:
        return False
    return z3.is_int_value(z3.simplify(z3.substitute(_num(term), (var, z3.IntVal(0)))))


def _looped_slices(model: Model, st: O.Store, info, leaves, offs, per_loop, summed):
    """`_slices` with loads in runtime loops: each loop load stands for one load per
    iteration, its slice a function of the loop index (module docstring)."""
    names = [info.field_names[d] for d in summed]
    extent = [_num(info.extent(model, d)) for d in summed]
    count = z3.IntVal(1)
    for e in extent:
        count = count * e
    prem = list(model.premises)
    claims = []
    added = z3.IntVal(len(leaves))
    iters = []    # (loop, index, its second instance)
    twice: dict[str, tuple] = {}   # a distinctness claim -> (its slice, who reads it twice)
    for loop, loffs, loads in per_loop:
        var = model.sym[loop.var.id]
        var2 = fresh_int(f"{var}@2")
        start, stop, step = (_num(model.scalar(v)) for v in (loop.start, loop.stop, loop.step))
        for v in (var, var2):
            prem += [v >= start, v < stop, (v - start) % step == 0]
        iters.append((loop, var, var2))
        added = added + model.trip_term(loop) * len(loads)
        for a, (oa, la) in enumerate(zip(loffs, loads)):
            slice_a = [oa[d] for d in summed]
            claims.append((f"the load at {la.loc} reads a slice inside the tensor",
                           z3.And([z3.And(x >= 0, x < e) for x, e in zip(slice_a, extent)])))
            for o, ld in zip(offs, leaves):
                what = (f"the load at {la.loc} (in the loop) and the load at {ld.loc} read "
                        f"distinct slices")
                claims.append((what, z3.Or([x != o[d] for x, d in zip(slice_a, summed)])))
                twice[what] = (slice_a, f"by the load at {la.loc} in iteration {{i1}} and by "
                                        f"the load at {ld.loc} before the loop")
            for b, (ob, lb) in enumerate(zip(loffs, loads)):
                if b < a:
                    continue
                other = [z3.substitute(ob[d], (var, var2)) for d in summed]
                differ = z3.Or([x != y for x, y in zip(slice_a, other)])
                what = (f"the loads at {la.loc} and {lb.loc} read distinct slices in different "
                        f"iterations" + ("" if a == b else " (or the same)"))
                claims.append((what, differ if a != b else z3.Implies(var != var2, differ)))
                twice[what] = (slice_a, f"by the load at {la.loc} in iteration {{i1}} and by "
                                        f"the load at {lb.loc} in iteration {{i2}}")
    # two loops' loads: each loop has its own index, so any iterations of the two
    for (la_loop, loffs_a, loads_a), (lb_loop, loffs_b, loads_b) in \
            itertools.combinations(per_loop, 2):
        for oa, la in zip(loffs_a, loads_a):
            for ob, lb in zip(loffs_b, loads_b):
                slice_a = [oa[d] for d in summed]
                what = (f"the loads at {la.loc} and {lb.loc} (in two loops) read distinct "
                        f"slices")
                claims.append((what, z3.Or([x != ob[d] for x, d in zip(slice_a, summed)])))
                twice[what] = (slice_a, f"by the load at {la.loc} in the loop at "
                                        f"{la_loop.loc} and by the load at {lb.loc} in the "
                                        f"loop at {lb_loop.loc} (iterations {{i1}})")
    static = _slices(model, st, info, leaves, offs, summed).claims if len(leaves) > 1 else []
    claims += [c for c in static if c[0] == "each slice added once"] + [
        ("slices inside the tensor", z3.And([z3.And(o[d] >= 0, o[d] < e)
                                             for o in offs for d, e in zip(summed, extent)])),
        ("every slice added", count <= added)]

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "summed": names, "extent": value(zm, count),
               "added": value(zm, added),
               "iteration": {f"loop@{lp.loc}": value(zm, v) for lp, v, _ in iters},
               "second_iteration": {f"loop@{lp.loc}": value(zm, v2) for lp, _, v2 in iters},
               "slices": [tuple(value(zm, o[d]) for d in summed) for o in offs] +
               [tuple(value(zm, o[d]) for d in summed) for _, lo, _ in per_loop for o in lo]}
        what = violated[0]
        if what == "every slice added":
            msg = (f"the sum stored at {st.loc} adds {wit['added']} slices of {info.name} but "
                   f"it has {wit['extent']}: {wit['extent'] - wit['added']} slice(s) never "
                   f"added")
        elif "inside" in what:
            msg = f"the sum stored at {st.loc}: {what} is false (slices {wit['slices']})"
        elif what in twice:
            got, who = twice[what]
            i1 = ", ".join(str(v) for v in wit["iteration"].values())
            i2 = ", ".join(str(v) for v in wit["second_iteration"].values())
            msg = (f"the sum stored at {st.loc} adds slice "
                   f"{dict(zip(names, (value(zm, g) for g in got)))} of {info.name} twice: "
                   + who.format(i1=i1, i2=i2))
        else:
            msg = f"the sum stored at {st.loc} adds a slice of {info.name} twice ({what})"
        wit["defined"] = {f"loop@{lp.loc}": str(lp.loc) for lp, _, _ in iters}
        return _by_store(model, st, msg, wit), wit
    return Obligation("reduce.slices", st.loc,
                      f"sum of slices of {info.name} stored at {st.loc}, in a runtime loop",
                      prem, claims, decode,
                      minimize=[v for _, v, _ in iters] + list(model.params.values()),
                      fix=f"add every slice of {info.name} along {', '.join(names)} once")


def _by_store(model: Model, st: O.Store, msg: str, wit: dict) -> str:
    """`msg` naming who runs the sum's store (W.by_site of its store site: role, warpgroup,
    threads), so the finding does not rely on names.who's lookup of its line."""
    site = next((x.site for x in model.stores if x.op is st), None)
    return W.by_site(model, site, msg, wit) if site is not None else msg


def _slices(model: Model, st: O.Store, info, leaves, offs, summed) -> Obligation:
    n = len(leaves)
    names = [info.field_names[d] for d in summed]
    count = z3.IntVal(1)
    for d in summed:
        count = count * _num(info.extent(model, d))
    distinct = [z3.Or([offs[i][d] != offs[j][d] for d in summed])
                for i, j in itertools.combinations(range(n), 2)]
    inside = [z3.And(offs[i][d] >= 0, offs[i][d] < _num(info.extent(model, d)))
              for i in range(n) for d in summed]
    claims = [("each slice added once", z3.And(distinct)),
              ("slices inside the tensor", z3.And(inside)),
              ("every slice added", count <= n)]

    def decode(zm, violated):
        got = [tuple(value(zm, o[d]) for d in summed) for o in offs]
        wit = {"shapes": W.shapes(model, zm), "summed": names, "slices": got,
               "extent": value(zm, count),
               "defined": {f"{info.name} slice {g}": str(ld.loc)
                           for g, ld in zip(got, leaves)}}
        if "each slice added once" in violated:
            dup = next(g for g in got if got.count(g) > 1)
            first = next(ld for g, ld in zip(got, leaves) if g == dup)
            second = [ld for g, ld in zip(got, leaves) if g == dup][1]
            wit["defined"] = {"first": str(first.loc), "second": str(second.loc)}
            msg = (f"the sum stored at {st.loc} adds {info.name} slice {dict(zip(names, dup))} "
                   f"twice (loads at {first.loc} and {second.loc})")
        elif "slices inside the tensor" in violated:
            msg = (f"the sum stored at {st.loc} reads {info.name} slices {got}, not all inside "
                   f"its {wit['extent']} slices")
        else:
            msg = (f"the sum stored at {st.loc} adds {n} slices of {info.name} but it has "
                   f"{wit['extent']}: {wit['extent'] - n} slice(s) never added "
                   f"(added: {got})")
            # one line that loads several slices is a Python loop unrolled while tracing: its
            # bound is a trace-time value with no IR line, so the loop body's line is the
            # nearest program point the witness can name
            by_line: dict[str, list] = {}
            for g, ld in zip(got, leaves):
                by_line.setdefault(str(ld.loc), []).append(g)
            many = {at: gs for at, gs in by_line.items() if len(gs) > 1}
            if many:
                at, gs = max(many.items(), key=lambda kv: len(kv[1]))
                wit["unrolled_at"] = at
                msg += (f"; the load at {at} adds {len(gs)} of them ({', '.join(map(str, gs))}): "
                        f"a Python loop unrolled while tracing, whose bound decides how many")
        return _by_store(model, st, msg, wit), wit
    return Obligation("reduce.slices", st.loc,
                      f"sum of {n} slices of {info.name} stored at {st.loc}",
                      list(model.premises), claims, decode,
                      minimize=list(model.params.values()),
                      fix=f"add every slice of {info.name} along {', '.join(names)} once")
