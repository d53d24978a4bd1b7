"""reduce.coverage: a reduction carried over a loop sees every element of its row once.

Job (INVARIANTS.md §3.3 on an interval; bug class 16): a row statistic computed block by block
(`m = max(m, x.max(axis=1))`, `acc = acc + x.sum(axis=1)` over `for j in ag.range(blocks)`) is
right only if the blocks' columns, over all iterations, are every column of the row exactly
once. The per-block reduction is checked by reduce.layout; this checks the loop: for a
reduction whose result flows into a loop-carried variable (an `assign` to a `var` defined
outside the loop), the map (loop indices, position along the reduced axis) -> the reduced
coordinate (the field that varies along the axis: n of X[m, n]) must be

  * injective (no column reduced twice: a block offset that repeats), and
  * onto [0, extent): its image lies in [0, |domain|) with |domain| = trips x block >=
    extent (a counting argument, as for wgmma.k-once), so a loop that skips the last block
    (`ag.range(blocks - 1)`) or a block size that does not match the offset is caught.

Masked elements (past the tensor's end) count as visited: their value is fill.identity's
business. A loop whose trip count depends on the CTA (a causal mask stops at the diagonal)
may stop early on purpose; coverage is then not claimed (injectivity still is) — masks are not
modelled, and wgmma.k-once already warns there. A reduction whose result is not carried across
the loop (a per-block statistic stored per block: split reductions) is not a row reduction
over the loop and is left alone.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.verify import witness as W
from argus.verify.model import Model, ReduceSite, _num
from argus.verify.obligation import Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int, is_coordinate_field, mentions


def obligations(model: Model) -> tuple[list[Obligation], list]:
    obs: list[Obligation] = []
    for red in model.reduces:
        obs += _coverage(model, red)
    return obs, []


def _carried_loops(model: Model, red: ReduceSite) -> list:
    """The enclosing loops across which the reduction's result is carried: some assign in the
    loop body takes a value computed from it, into a var defined outside that loop."""
    out = []
    for scope in red.site.loops():
        body = list(scope.op.body.walk())
        inside = {r.id for op in body for r in op.results()}
        tainted = {red.op.result.id}
        carried = False
        for op in body:
            if isinstance(op, O.Assign):
                if op.src.id in tainted:
                    tainted.add(op.dst.id)     # the variable now holds it
                    carried |= op.dst.id not in inside
            elif any(v.id in tainted for v in op.operands()):
                tainted.update(r.id for r in op.results())
        if carried:
            out.append(scope)
    return out


def _coverage(model: Model, red: ReduceSite) -> list[Obligation]:
    loops = _carried_loops(model, red)
    if not loops:
        return []
    shape = red.op.src.type.shape
    axis = red.op.axis
    idx = [fresh_int(f"e{d}") for d in range(len(shape))]
    r1, r2 = fresh_int("r"), fresh_int("r")
    at1 = tuple(r1 if d == axis else x for d, x in enumerate(idx))
    at2 = tuple(r2 if d == axis else x for d, x in enumerate(idx))
    rec1 = red.src.fn(at1)
    ranges = [z3.And(i >= 0, i < n) for d, (i, n) in enumerate(zip(idx, shape)) if d != axis]
    vars_ = [s.var for s in loops]
    out = []
    for name, f1 in sorted(rec1.fields.items()):
        # the field moves with the loop: directly (j * BN + r), or through the auxiliary
        # variables of the copy that wrote it (the producer's index, tied to j by the counter)
        if not (is_coordinate_field(name) and f1.is_point and mentions(f1.term, r1)
                and any(mentions(t, v) for v in vars_
                        for t in (f1.term,) + tuple(f1.cond) + tuple(rec1.cond))):
            continue
        extent = _extent(model, name)
        ren = [(v, fresh_int(f"{v}@2")) for v in vars_]

        def sub(t, ren=ren):
            return z3.substitute(t, *ren)
        rec2 = red.src.fn(at2)
        f2 = rec2.fields.get(name)
        if f2 is None or not f2.is_point:
            continue
        cons = red.site.constraints()
        prem = list(model.premises) + cons + ranges + list(rec1.cond) + list(f1.cond) + \
            [r1 >= 0, r1 < shape[axis]]
        prem2 = prem + [sub(c) for c in cons] + [sub(c) for c in rec2.cond] + \
            [sub(c) for c in f2.cond] + [r2 >= 0, r2 < shape[axis]]
        t1, t2 = f1.term, sub(f2.term)
        same = z3.And([r1 == r2] + [a == b for a, b in ren])
        subject = f"{red.op.fn} over axis {axis} at {red.op.loc}, carried over " + \
            ", ".join(f"loop@{s.op.loc}" for s in loops)

        def decode_dup(zm, violated, ren=ren, t1=t1, name=name):
            wit = W.context(model, zm, red.site)
            i1 = {f"loop@{s.op.loc}": value(zm, s.var) for s in loops}
            i2 = {f"loop@{s.op.loc}": value(zm, b) for s, (_, b) in zip(loops, ren)}
            c = value(zm, t1)
            wit.update({"element": tuple(value(zm, i) for i in idx), name: c,
                        "first": {"iteration": i1, "position": value(zm, r1)},
                        "second": {"iteration": i2, "position": value(zm, r2)}})
            return (f"{name} = {c} is reduced twice: at iteration {i1} (position "
                    f"{value(zm, r1)} along axis {axis}) and at iteration {i2} (position "
                    f"{value(zm, r2)})"), wit
        out.append(Obligation("reduce.coverage", red.op.loc, subject + ": each once",
                              prem2, [(f"distinct (iteration, position) give distinct {name}",
                                       z3.Or(same, t1 != t2))], decode_dup,
                              minimize=vars_ + [r1]))
        trips = [model.trip_term(s.op) for s in loops]
        grid = [v for v, _, _ in model.grid_vars]
        if extent is None or any(mentions(t, g) for t in trips for g in grid):
            continue
        size = z3.IntVal(shape[axis])
        for t in trips:
            size = size * t

        def decode_cov(zm, violated, size=size, extent=extent, t1=t1, name=name):
            wit = W.context(model, zm, red.site)
            d, e = value(zm, size), value(zm, _num(extent))
            wit.update({"domain": d, "extent": e, name: value(zm, t1),
                        "trips": [value(zm, t) for t in trips]})
            if "the loop covers the row" in violated:
                msg = (f"the loop reduces {d} values of {name} but the tensor has {e}: "
                       f"{name} = {d} .. {e - 1} are never reduced")
            else:
                msg = (f"{name} = {value(zm, t1)} lies outside [0, {d}) (the {d} positions "
                       f"the loop visits): some other {name} is never reduced")
            return msg, wit
        out.append(Obligation("reduce.coverage", red.op.loc, subject + ": covers the row",
                              prem, [(f"{name} in [0, |domain|)", z3.And(t1 >= 0, t1 < size)),
                                     ("the loop covers the row", size >= _num(extent))],
                              decode_cov, minimize=list(model.params.values())))
    return out


def _extent(model: Model, name: str):
    for info in model.tensors.values():
        if name in info.field_names:
            return info.extent(model, info.field_names.index(name))
    return None
