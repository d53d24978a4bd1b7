"""reduce.mean: a mean divides a sum by the number of elements the sum combined.

Job (held-out class "a mean over the block size"): `x.sum(axis=1) / BN` over a row loaded
with its tail masked (N <= BN, or a ragged last block) divides by the tile width, while the
sum combined only the row's N elements: every mean of a short row is too small, and nothing
else in the tags sees it (the stored row and column are right). The obligation ties the
divisor to the sum's coverage:

  * a sum at one site over a tile axis whose element coordinate is base + v (v the axis
    index) along a dim of extent E: when the block covers the row (base <= 0 and base +
    block >= E, the reduction's own coverage; a block that misses part of the row is
    reduce.coverage's or store.coverage's to report), the divisor must be E, the count of
    in-bounds elements it combined;
  * a sum carried over a loop (`acc = acc + x.sum(axis=1)`) whose loop walks the summed
    field along the row (the block's base moves with the loop, names no CTA index, and the
    walk, trips x block, reaches E: `_whole_walk`): reduce.coverage proves the loop reduces
    every element of [0, E) exactly once, so the count is E and the divisor must be E. A loop
    over another dim (a 2 x 2 average pool: kh walks rows, each step sums a 2-wide window of
    W at `wo * 2`) combines a window, not the row: no claim (nested sums' product of counts
    is not modelled).

Only `sum / c` (or `sum * (1 / c)`) with a compile-time or shape count c is a mean here (a
constant factor only when 1 / c is the block's width: `0.5 * sum` may be a weight): a
divisor that is a tile (softmax's o / l) or a value read at run time (a temperature) states
no count. The sum's tensor dim is found from the reduced coordinate field (a named dim, or an
integer dim whose extent every tensor agrees on at that position).
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify import solver
from argus.verify import witness as W
from argus.verify.check_reduce import accumulators, carried_loops
from argus.verify.model import Model
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import (fresh_int, is_coordinate_field, is_integer_dim, mentions,
                                    substitute)

_THROUGH = (O.Convert, O.ConvertLayout, O.ExpandDims)


def obligations(model: Model) -> tuple[list[Obligation], list]:
    kernel = model.kernel
    defs = model.value_defs()
    assigned = model.assigned_sources()
    sites = {id(r.op): r for r in model.reduces}
    out: list[Obligation] = []
    unknown: list[Finding] = []
    for op in kernel.walk():
        if not (isinstance(op, O.Elementwise) and op.fn in ("div", "mul") and
                len(op.args) == 2):
            continue
        num, den = op.args
        if op.fn == "mul" and isinstance(den.type, TileType):
            num, den = den, num                      # c * sum
        if not isinstance(num.type, TileType) or isinstance(den.type, TileType):
            continue
        divisor = _divisor(model, den) if op.fn == "div" else _reciprocal(model, den, defs)
        if divisor is None:
            continue
        found = _sum_of(num, defs, assigned)
        if found is None:
            continue
        red, carried = found
        site = sites.get(id(red))
        if site is None:
            continue
        if op.fn == "mul" and isinstance(model.sym.get(den.id), float) and \
                z3.simplify(divisor).as_long() != red.src.type.shape[red.axis]:
            # a constant factor is read as 1 / count only at the block's width (`sum *
            # (1.0 / BN)`): `0.5 * sum` may be a weight, not a mean over two elements
            continue
        ob = _mean(model, op, red, site, carried, divisor)
        if isinstance(ob, Finding):
            unknown.append(ob)
        elif ob is not None:
            out.append(ob)
    return out, unknown


def _divisor(model: Model, v):
    """The divisor as an Int term (a constant with an integer value, or a shape term), or
    None when it states no count."""
    t = model.sym.get(v.id)
    if isinstance(t, bool) or t is None:
        return None
    if isinstance(t, float):
        return z3.IntVal(int(t)) if t.is_integer() and t > 0 else None
    if isinstance(t, int):
        return z3.IntVal(t)
    if isinstance(t, z3.ArithRef) and t.is_int():
        return t
    return None


def _reciprocal(model: Model, v, defs):
    """k when the scalar v is 1 / k (`sum * (1.0 / N)`): a constant whose reciprocal is an
    integer, or 1 / d computed from a count d; else None (a weight, not a count)."""
    t = model.sym.get(v.id)
    if isinstance(t, float) and t > 0:
        k = 1.0 / t
        return z3.IntVal(round(k)) if abs(k - round(k)) < 1e-9 * k else None
    op = defs.get(v.id)
    if isinstance(op, O.Arith) and op.fn == "div":
        one = model.sym.get(op.lhs.id)
        if isinstance(one, (int, float)) and not isinstance(one, bool) and one == 1:
            return _divisor(model, op.rhs)
    return None


def _sum_of(v, defs, assigned):
    """(the sum Reduce, carried) when v is a sum (through conversions), or a variable every
    assignment of which adds a sum to it (`acc = acc + x.sum(axis=1)`); else None."""
    seen = 0
    while True:
        op = defs.get(v.id)
        if isinstance(op, _THROUGH) and seen < 8:
            v, seen = op.src, seen + 1
            continue
        break
    if isinstance(op, O.Reduce):
        return (op, False) if op.fn == "sum" else None
    if isinstance(op, O.Var):
        reds = []
        for src in assigned.get(v.id, []):
            add = defs.get(src.id)
            if not (isinstance(add, O.Elementwise) and add.fn == "add" and len(add.args) == 2):
                return None
            others = [a for a in add.args if a.id != v.id]
            if len(others) != 1:
                return None
            got = _sum_of(others[0], defs, {})
            if got is None or got[1]:
                return None
            reds.append(got[0])
        if len(reds) == 1:
            return reds[0], True
    return None


def _extent(model: Model, fname: str):
    """The extent of the tensor dim a coordinate field names, when every tensor agrees."""
    got = []
    for info in model.tensors.values():
        for d, f in enumerate(info.field_names):
            if f == fname:
                got.append(info.extent(model, d))
    if not got:
        return None
    first = got[0]
    if all(z3.eq(z3.simplify(z3.IntVal(g) if isinstance(g, int) else g),
                 z3.simplify(z3.IntVal(first) if isinstance(first, int) else first))
           for g in got):
        return z3.IntVal(first) if isinstance(first, int) else first
    return None


def _whole_walk(model: Model, site, base, block: int):
    """The size of a carried sum's walk (trips x block) when its loop walks the summed field
    along the row, else None (the sum's count is then not the row's extent: no mean is
    claimed). The field's block base must move with a loop the sum is carried over (`j *
    BN`), and neither it nor the loops' trip counts may name the CTA or an enclosing loop the
    sum is not carried over: a 2 x 2 average pool's loop walks the window's rows (kh) while
    the summed W window sits at `wo * 2`, so it combines 4 elements, not W's extent. The
    caller's premise is the size at least the extent: reduce.coverage's claim at the same
    reduction (as is each element once), so the count is the extent."""
    loops = carried_loops(model, site)
    if not loops:
        return None
    carried_vars = [s.var for s in loops]
    if not any(mentions(base, v) for v in carried_vars):
        return None
    others = [v for v, _, _ in model.grid_vars] + \
        [s.var for s in site.site.loops() if all(s.op is not c.op for c in loops)]
    trips = [model.trip_term(s.op) for s in loops]
    if any(mentions(t, g) for t in [base] + trips for g in others):
        return None
    size = z3.IntVal(block)
    for t in trips:
        size = size * t
    return size


def _mean(model: Model, op, red: O.Reduce, site, carried: bool, divisor):
    src = model.tiles.get(red.src.id)
    if src is None:
        return None
    shape = red.src.type.shape
    axis, block = red.axis, shape[red.axis]
    idx = [fresh_int(f"e{d}") for d in range(len(shape))]
    v = idx[axis]
    rec = src.fn(tuple(idx))
    swept = []
    for fname, val in rec.fields.items():
        if not (is_coordinate_field(fname) or is_integer_dim(fname)):
            continue
        if not val.is_point:
            continue
        base = z3.simplify(substitute(val.term, (v, z3.IntVal(0))))
        if not z3.eq(z3.simplify(val.term - base - v), z3.IntVal(0)):
            continue          # not a unit-stride walk of this dim along the reduced axis
        ext = _extent(model, fname)
        if ext is not None:
            swept.append((fname, base, ext))
    if len(swept) != 1:
        return None
    fname, base, ext = swept[0]
    prem = list(model.premises) + site.site.constraints() + list(rec.cond) + \
        [z3.And(i >= 0, i < n) for d, (i, n) in enumerate(zip(idx, shape)) if d != axis]
    if not carried:
        prem += [base <= 0, base + block >= ext]
    else:
        size = _whole_walk(model, site, base, block)
        if size is None:
            # the loop does not walk the summed field (a pooling window summed over another
            # dim): the mean is the window's, whose count is trips x block when its
            # elements are distinct and inside the tensor (`_window`)
            return _window(model, op, red, site, rec, idx, divisor, fname)
        prem += [size >= ext]
    claims = [(f"the divisor == the {fname} elements the sum combined", divisor == ext)]
    prem += model.axiom_instances([c for _, c in claims] + prem)
    how = (f"the loop at {site.site.scopes[-1].op.loc} reduces every {fname} of the row "
           f"once (reduce.coverage)" if carried and site.site.scopes else
           f"the block of {block} covers the row, its tail masked")

    def decode(zm, violated):
        wit = W.context(model, zm, site.site)
        wit["shapes"] = W.shapes(model, zm)
        wit["divisor"] = value(zm, divisor)
        wit["count"] = value(zm, ext)
        wit["sum_at"] = str(red.loc)
        return W.placed(f"the mean divides the sum at {red.loc} by {value(zm, divisor)} but "
                        f"the sum combined {value(zm, ext)} elements ({fname} in [0, "
                        f"{value(zm, ext)}): {how}): a mean over a row shorter than the block "
                        f"is divided by the block width, not by the row's length", wit), wit
    return Obligation("reduce.mean", op.loc, f"mean at {op.loc}", prem, claims, decode,
                      fix=f"divide by the reduced extent (the row length, {fname}'s dim), "
                          f"not by the block width")


def _unchecked(op, red, fname: str, why: str) -> Finding:
    return Finding("reduce.mean", op.loc, f"mean at {op.loc}", "unknown",
                   f"the sum at {red.loc} is carried over a loop that does not walk {fname} "
                   f"along the row (a window), and {why}; the divisor is not checked",
                   fix="none needed if the divisor is the number of elements the window "
                       "sums; the verifier checks a window's count when each step sums "
                       "distinct elements inside the tensor, from a sum that starts at 0")


def _window(model: Model, op, red: O.Reduce, site, rec, idx, divisor, fname: str):
    """A window mean (a 2 x 2 average pool: the loop walks the window's rows, each step sums a
    block of W at `wo * 2`): the sum combined trips x block elements (every carried loop's
    trip count, times the block), when the accumulator starts at 0 (a constant, not a
    peeled sum), the sum is added once per iteration (no `if` between the loops and the
    sum), and the summed elements are distinct (the map (loop indices, position along the
    reduced axis) -> the tensor element is injective) and inside the tensor. The divisor
    must be that count: claimed, with a counterexample when it is not. An element past the
    tensor's edge (a padded window) leaves the count to the padding convention (PyTorch's
    count_include_pad either way): unknown, as is a window whose sum is added conditionally
    or whose coordinates are not points."""
    loops = carried_loops(model, site)
    defs = {r.id: o for o in model.kernel.walk() for r in o.results()}
    if not loops or not _starts_at_zero(site, loops[0].op, defs):
        return _unchecked(op, red, fname, "its accumulator does not start at 0")
    inner = site.site.scopes[site.site.scopes.index(loops[0]):]
    if any(sc.kind == "if" for sc in inner):
        return _unchecked(op, red, fname, "the sum is added under a condition")
    t = rec.fields.get("tensor")
    if t is None or not t.is_point or not z3.is_int_value(z3.simplify(t.term)):
        return _unchecked(op, red, fname, "the tensor it reads is not known")
    info = list(model.tensors.values())[z3.simplify(t.term).as_long()]
    coords = []
    for d, f in enumerate(info.field_names):
        val = rec.fields.get(f)
        if val is None or not val.is_point:
            return _unchecked(op, red, fname, f"{info.name}'s {f} is not a point")
        coords.append((f, val.term, info.extent(model, d)))
    axis, block = red.axis, red.src.type.shape[red.axis]
    v = idx[axis]
    walk = [sc.var for sc in loops] + [v]
    twin = [(x, fresh_int(f"{x}'")) for x in walk]
    ranges = [c for sc in loops for c in sc.constraints] + [v >= 0, v < block]
    shape = red.src.type.shape
    prem = list(model.premises) + site.site.constraints() + list(rec.cond) + ranges + \
        [z3.And(i >= 0, i < n) for d, (i, n) in enumerate(zip(idx, shape)) if d != axis]
    count = z3.IntVal(block)
    for sc in loops:
        count = count * model.trip_term(sc.op)
    inside = z3.And([z3.And(c >= 0, c < _int(e)) for _, c, e in coords])
    got = solver.prove(prem, [("inside the tensor", inside)], rlimit=solver.default_rlimit())
    if got.status != "proven":
        return _unchecked(op, red, fname, f"its elements may lie past {info.name}'s edge "
                                          f"(a padded window: the count is the padding "
                                          f"convention's)" if got.status == "violated"
                          else "whether its elements lie inside the tensor is unknown")
    other = [z3.substitute(c, *twin) for c in ranges + list(rec.cond)]
    same = z3.And([c == z3.substitute(c, *twin) for _, c, _ in coords])
    differ = z3.Or([x != y for x, y in twin])
    claims = [("the window's elements are distinct", z3.Implies(z3.And(*other, differ),
                                                                z3.Not(same))),
              (f"the divisor == the window's count ({block} x the loops' trips)",
               divisor == count)]
    prem += model.axiom_instances([c for _, c in claims] + prem)
    src = defs.get(red.src.id)
    while isinstance(src, _THROUGH):
        src = defs.get(src.src.id)
    read_at = str(src.loc) if src is not None else str(red.loc)   # the line a fix edits

    def decode(zm, violated):
        wit = W.context(model, zm, site.site)
        wit["shapes"] = W.shapes(model, zm)
        wit["divisor"] = value(zm, divisor)
        wit["count"] = value(zm, count)
        wit["sum_at"] = str(red.loc)
        wit["loops"] = [str(sc.op.loc) for sc in loops]
        if violated and "distinct" in violated[0]:
            names = {str(sc.var): f"loop index at {sc.op.loc}" for sc in loops}
            names[str(v)] = f"position along axis {axis}"
            at = {names[str(x)]: value(zm, x) for x in walk}
            again = {names[str(x)]: value(zm, y) for x, y in twin}
            element = [value(zm, c) for _, c, _ in coords]
            wit.update(element=element, first=at, second=again, read_at=read_at)
            return W.placed(f"the window sums {info.name}{element} twice (at {at} and at "
                            f"{again}; read at {read_at}, summed at {red.loc}): its steps "
                            f"overlap, so the mean counts that element twice and misses "
                            f"another", wit), wit
        return W.placed(f"the mean divides the window sum at {red.loc} by "
                        f"{value(zm, divisor)} but the window combined {value(zm, count)} "
                        f"distinct elements of {info.name} ({block} a step x the trips of the "
                        f"loop(s) at {', '.join(wit['loops'])}), all inside the tensor",
                        wit), wit
    return Obligation("reduce.mean", op.loc, f"window mean at {op.loc}", prem, claims, decode,
                      fix="divide by the number of elements the window sums (its block "
                          "times the loop's trip count)")


def _int(e):
    return z3.IntVal(e) if isinstance(e, int) else e


def _starts_at_zero(site, loop: O.For, defs) -> bool:
    """Whether every variable the loop carries the sum into starts as a constant 0 tile."""
    for vid in accumulators(site, loop):
        var = defs.get(vid)
        init = defs.get(var.init.id) if isinstance(var, O.Var) else None
        while isinstance(init, _THROUGH):
            init = defs.get(init.src.id)
        if not (isinstance(init, O.Full) and init.value == 0):
            return False
    return True
