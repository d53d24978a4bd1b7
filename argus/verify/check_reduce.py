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

Several reductions in one iteration into the same accumulator (a Python loop unrolled while
tracing: two blocks an iteration) are one row's: `_siblings`; the domain counts every site's
block, and no element may be reduced at two of them.

A block reduced outside the loop into the same accumulator (peeled: the first block before
the loop as the variable's initial value, `acc = x0.sum()` then `for j in ag.range(1,
blocks)`, or the last after it, `acc = acc + tail.sum()`) is part of the same row: its
positions join the domain (|domain| adds its block), and no column may be reduced both there
and in the loop (a peeled first block with a loop that still starts at 0 adds it twice).
A peeled max or min may be scaled by a scalar proven positive on its way to the accumulator
(`m = max(x0) * c`: FA3's folded softmax scale; `_order_preserved`): an increasing map
commutes with the max, so it is still the max of the same block; any other map (a negative or
unknown-sign scale, a scaled sum) leaves the block unpaired.

An integer dim (`dim{i}`: a template's static shape, a paged key's in-page row) is checked
with its extent from the tensor that holds it (`_integer_owner_extents`). Where another
position of that tensor moves with the loop too (the row of a flattened walk, the page a
block table names), the element reduced is the tuple, and "each once" is claimed over it
(`_partners`); a page loaded from a table is opaque, and distinct table entries are assumed to
hold distinct pages (a block table's contract). The tuple's extent is not the dim's, so such
a dim is not counted for coverage.

The reduced coordinate must be a point of the block position. A field the wgmma made a set
over its contracted k only through a case split the context decides (bf16 attention at head
dim 128: a K row is two 64-column boxes, the box picked by k, the key row the same in both) is
used as the point it is once `_singleton` proves the set has one value there; unproven, it
stays a set and nothing is claimed.

Masked elements (past the tensor's end) count as visited: their value is fill.identity's
business. A loop whose trip count depends on the CTA (a causal mask stops at the diagonal)
may stop early on purpose; the count is then not claimed (injectivity still is). Instead
(`_skipped_masked`), when the reduced tile carries a mask (`live`, an `ag.where(valid, s,
-inf)`), every position an iteration past the stop would reduce inside the row must be one the
mask drops: the mask evaluated at the skipped iteration, so a causal key bound rounded down is
caught. A score tile from a wgmma is left to wgmma.k-once's cover claim on P V.
A mask's range bound that reads only the reduced coordinate's own variables and constants
(no other coordinate, size or loaded length: not a causal or varlen relation) must keep every
position of [0, extent) the loop reduces (`_mask_keeps_row`: `row < 7` over 8 partials).
A reduction whose result is not carried across
the loop (a per-block statistic stored per block: split reductions) is not a row reduction
over the loop and is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify import solver
from argus.verify import witness as W
from argus.verify.accumulate import Accumulation, accumulations
from argus.verify.fold import Fold, folds
from argus.verify.model import Model, ReduceSite, _num, through
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import (fresh_int, free_consts, integer_dim_position,
                                    is_coordinate_field, is_integer_dim, mentions)
from argus.verify.terms import subterms
from argus.verify.transfer.values import positive_scalar


def obligations(model: Model) -> tuple[list[Obligation], list]:
    obs: list[Obligation] = []
    accs = accumulations(model)
    for red in model.reduces:
        obs += _coverage(model, red)
        obs += _accumulated(model, red, accs)
    finds: list[Finding] = []
    for fold in folds(model):
        got, found = _fold_claims(model, fold)
        obs += got
        finds += found
    return obs, finds


def carried_loops(model: Model, red: ReduceSite) -> list:
    """The enclosing loops across which the reduction's result is carried: some assign in the
    loop body takes a value computed from it, into a var defined outside that loop."""
    return [scope for scope in red.site.loops() if accumulators(red, scope.op)]


def accumulators(red: ReduceSite, loop: O.For) -> set[int]:
    """The variables defined outside `loop` that an assign in its body sets to a value computed
    from the reduction's result."""
    body = list(loop.body.walk())
    inside = {r.id for op in body for r in op.results()}
    tainted = {red.op.result.id}
    out: set[int] = set()
    for op in body:
        if isinstance(op, O.Assign):
            if op.src.id in tainted:
                tainted.add(op.dst.id)     # the variable now holds it
                if op.dst.id not in inside:
                    out.add(op.dst.id)
        elif any(v.id in tainted for v in op.operands()):
            tainted.update(r.id for r in op.results())
    return out


# the elementwise op that adds a partial result of each reduction into its accumulator
_COMBINE = {"sum": "add", "max": "max", "min": "min", "prod": "mul"}
_THROUGH = (O.Convert, O.ConvertLayout)


def _peeled(model: Model, red: ReduceSite, loop: O.For) -> list[ReduceSite]:
    """Reductions of the same kind combined into the accumulators of `loop` outside it: in the
    variable's initial value (a first block reduced before the loop) or, after the loop, in
    straight-line combinations with it (a last block reduced after it)."""
    accs = accumulators(red, loop)
    combine = _COMBINE.get(red.op.fn)
    if not accs or combine is None:
        return []
    defs = model.value_defs()
    found: list[int] = []
    region = _region_of(model.kernel.body, loop)
    # what a variable is set to before the loop in straight-line code (its region, or a
    # pipeline step in it: a first block reduced in the K step before an overlapped loop)
    set_before: dict[int, list[int]] = {}

    def straight(ops) -> None:
        for op in ops:
            if isinstance(op, O.Assign):
                set_before.setdefault(op.dst.id, []).append(op.src.id)
            elif isinstance(op, (O.Produce, O.Consume)):
                straight(op.body.ops)
            else:                  # set under an if or in a loop: not known, no peeled block
                for inner in op.regions():
                    for x in inner.walk():
                        if isinstance(x, O.Assign):
                            set_before.setdefault(x.dst.id, []).append(None)
    if region is not None:
        straight(region.ops[:region.ops.index(loop)])
    # its own recursive walk, not Model.walk_defs: a variable is followed to the value set
    # before the loop in straight-line code (`set_before`), not to every assign, the depth is
    # bounded, and a reduction reached a second time is recorded (`x + x` combines a block
    # twice), which a walk yielding each value once cannot see
    seen: set[int] = set()

    roots = {f.root.id for f in folds(model)} if red.op.fn == "sum" else set()

    def leaves(vid: int, depth: int = 0) -> None:
        d = defs.get(vid)
        if vid in roots and vid != red.op.result.id and vid not in seen:
            found.append(vid)                  # a block folded by windows (fold.py)
        if isinstance(d, O.Reduce) and d.fn == red.op.fn and vid in seen:
            found.append(vid)                  # reached again: combined twice (see below)
        if depth > 16 or d is None or vid in seen:
            return
        seen.add(vid)
        if isinstance(d, O.Reduce):
            if d.fn == red.op.fn and d is not red.op:
                found.append(d.result.id)
        elif isinstance(d, _THROUGH):
            leaves(d.src.id, depth + 1)
        elif isinstance(d, O.Var):
            sets = set_before.get(vid)
            if sets and None not in sets:   # the last one is its value at the loop
                leaves(sets[-1], depth + 1)
            elif sets:
                return
            else:
                leaves(d.init.id, depth + 1)
        elif isinstance(d, O.Elementwise) and d.fn == combine and len(d.args) == 2:
            for a in d.args:
                leaves(a.id, depth + 1)
        elif (src := _order_preserved(model, red.op.fn, d)) is not None:
            leaves(src.id, depth + 1)
    for acc in accs:
        leaves(acc)                        # before the loop: the initial value
    if region is not None:                 # after the loop: acc = acc + tail.sum() ...
        after = region.ops[region.ops.index(loop) + 1:]
        flat = [x for op in after for x in [op, *(y for inner in op.regions()
                                                  for y in inner.walk())]]
        # each accumulator's own continuation (`accs` holds every variable the reduction
        # flows into: the softmax's row max reaches l and O too)
        for acc in sorted(accs):
            for a in _tails_after(model, red, loop, acc, after, flat, combine, accs - {acc}):
                leaves(a)
    if combine in ("add", "mul") and len(accs) == 1 and len(found) != len(set(found)):
        # one block's result added (multiplied) in twice, `x + x`: no peeled block is paired,
        # so the loop alone must cover the row (a sum that counts a block twice is refused)
        return []
    sites = []
    for vid in dict.fromkeys(found):
        sites += [r for r in model.reduces if r.op.result.id == vid and r.op.axis is not None]
        if vid in roots:
            sites += [x for f in folds(model) if f.root.id == vid
                      and (x := _fold_site(model, f)) is not None]
    return sites


def _tails_after(model: Model, red: ReduceSite, loop: O.For, acc: int, after: list, flat: list,
                 combine: str, others: set[int] = frozenset()) -> list[int]:
    """The values combined into accumulator `acc` after `loop` in straight-line code (`acc =
    acc + tail.sum()`), where that combination is the accumulator's one continuation: nothing
    reads the accumulator, or a partial combination, without the tail (`extra = acc +
    tail.sum()` beside a store of acc: the tail is not in acc's row; no tail is returned).
    `after`: the ops after the loop in its region; `flat`: the same with the ops nested in
    them, in program order; `others`: the loop's other accumulators of the reduction."""
    chain = {acc}
    # a sum the loop body rescales (`l = l * alpha + p.sum()`: the online softmax's row sum)
    # continues the same way after it: `l * alpha` is still the loop's partial, so a tail
    # added to it joins the row. Only the loop's own rescale: the same multiply (source
    # line) by a factor made at the same line, as one softmax function traced in the loop
    # and after it gives; any other product (`l * 2 + tail`, which weighs the loop's
    # elements twice) is no continuation of the loop's sum
    defs = model.value_defs()
    body = list(loop.body.walk())
    copies = {acc}               # the accumulator and its copies into a step's variables
    for x in body:
        if isinstance(x, O.Var) and x.init.id in copies:
            copies.add(x.result.id)

    def rescale(x, held) -> tuple | None:
        """(the multiply's line, its factor's line) for `held * factor`, else None."""
        if not (isinstance(x, O.Elementwise) and x.fn == "mul" and len(x.args) == 2) or \
                sum(a.id in held for a in x.args) != 1:
            return None
        factor = next(a for a in x.args if a.id not in held)
        d = defs.get(factor.id)
        return str(x.loc), str(d.loc) if d is not None else None
    rescales = {r for x in body if (r := rescale(x, copies)) is not None} \
        if combine == "add" else set()
    tails: list[int] = []
    for op in after:
        if isinstance(op, _THROUGH) and op.src.id in chain:
            chain.add(op.result.id)
        elif (src := _order_preserved(model, red.op.fn, op)) is not None and src.id in chain:
            chain.add(op.result.id)        # max(acc * c, tail.max() * c), c > 0
        elif isinstance(op, O.Elementwise) and op.fn == combine and len(op.args) == 2 \
                and any(a.id in chain for a in op.args):
            chain.add(op.result.id)
            # another of the loop's accumulators combined in (`s0 + s1`, two partial sums
            # the loop carries) is the loop's too, not a block reduced after it
            chain.update(a.id for a in op.args if a.id in others)
            tails += [a.id for a in op.args if a.id not in chain]
        elif rescales and rescale(op, chain) in rescales:
            chain.add(op.result.id)        # l * alpha: the rescaled partial
    if not tails:
        return []
    # a read of a partial (the accumulator before its tail joins) is one of the chain's own
    # steps, or an op whose result depends on a tail too: the online softmax reads the old
    # row max again in its rescale, exp2(m - m_new) with m_new = max(m, tail.max()). A read
    # with no result (a store), or one whose result has no tail in it, uses the row without
    # its tail block
    with_tail = set(tails)
    for x in flat:
        if any(v.id in with_tail for v in x.operands()):
            with_tail.update(r.id for r in x.results())
    partial = chain - with_tail
    for x in flat:
        if any(v.id in partial for v in x.operands()):
            results = {r.id for r in x.results()}
            if not results or not results <= (chain | with_tail):
                return []
    return tails


def _order_preserved(model: Model, fn: str, op) -> object | None:
    """The tile x when `op` is f(x) for a map f that commutes with the reduction `fn` over
    any set of elements, so that f(fn(block)) is the fn of f(block) and reduces the block's
    elements as fn(block) does: for max and min, a scaling by a scalar proven positive
    (x * c, c * x, x / c with c > 0: a positive constant, or a parameter whose ag.require
    implies c > 0; transfer/values.positive_scalar). An increasing map keeps the order, so
    max(s) * c = max(s * c) (FA3's folded softmax scale, `maximum(m, max(s) * c)`, and the
    float product is rounded monotonically, so it holds bit for bit). A negative c turns the
    max into the min of s * c, and a c of unknown sign may: neither is paired (a peeled
    block so scaled is not in the row, and a loop that skips it does not cover the row).
    None for every other op, and for sum and prod (sum(x) * c weighs each element c times,
    as x + x counts it twice: not a row reduction of x)."""
    if fn not in ("max", "min") or not isinstance(op, O.Elementwise) or len(op.args) != 2 \
            or op.fn not in ("mul", "div"):
        return None
    tiles = [isinstance(a.type, TileType) for a in op.args]
    if sum(tiles) != 1 or (op.fn == "div" and not tiles[0]):
        return None                                    # c / x is decreasing
    x, c = op.args if tiles[0] else reversed(op.args)
    return x if positive_scalar(model, c) else None


def _fold_site(model: Model, fold: Fold) -> ReduceSite | None:
    """The fold read as `src.sum(axis)` where its windows are added (its root add's site):
    the reduction it is when its windows partition the tile (`_partition`). None where the
    tile has no tags."""
    if fold.src.id not in model.tiles:
        return None
    op = O.Reduce(loc=fold.windows[0].loc, result=fold.root, src=fold.src, fn="sum",
                  axis=fold.axis, scratch=(), release=True)
    return ReduceSite(op, fold.site, model.tile(fold.src))


def _fold_claims(model: Model, fold: Fold) -> tuple[list[Obligation], list[Finding]]:
    """A fold (argus/verify/fold.py) carried over a loop: its windows are every column of the
    tile once (`_partition`), a sum over the windows' axis of the accumulator follows the loop
    (`_completion`), and then the fold is the tile's row sum, whose coverage over the loop is
    posed as for `p.sum(axis)` (`_coverage`: each key once, the peeled first block, the count,
    a causal stop left to wgmma.k-once). A peeled block folded the same way (the first block
    before FA3's overlapped loop) must partition its tile too: `_peeled_terms` pairs it only
    then."""
    red = _fold_site(model, fold)
    loops = carried_loops(model, red) if red is not None else []
    if not loops:
        return [], []
    done = _completion(model, fold, red, loops)
    if done is None:
        # nothing reduces the partials after the loop: a keep-width sum (the partials are
        # the result), no row statistic, as a reduction not carried over the loop is none
        return [], []
    finds = [_partition(fold), done]
    seen = {fold.root.id}
    for scope in loops:
        for p in _peeled(model, red, scope.op):
            other = _fold_of(model, p)
            if other is not None and other.root.id not in seen:
                seen.add(other.root.id)
                finds.append(_partition(other, " (the block folded outside the loop)"))
    if finds[0].status != "proven":
        return [], finds          # not the tile's sum: the per-key claims would be of another
    return _coverage(model, red, accumulated=False), finds


def _fold_of(model: Model, site: ReduceSite) -> Fold | None:
    """The fold a site read by `_fold_site` stands for (None for a reduction of the kernel)."""
    if any(r is site for r in model.reduces):
        return None
    return next((f for f in folds(model) if f.root.id == site.op.result.id
                 and f.src.id == site.op.src.id), None)


def _partition(fold: Fold, where: str = "") -> Finding:
    """The fold's windows hold every column of the tile along its axis exactly once (decided
    on the windows' static starts and width: a dropped window, one added twice, a width or a
    stride that leaves a gap or an overlap each leave a column counted 0 or 2 times)."""
    n, w, extent = len(fold.windows), fold.width, fold.extent
    starts = sorted(x.start for x in fold.windows)
    subject = (f"sum of {n} windows of width {w} along axis {fold.axis} at "
               f"{fold.windows[0].loc}{where}: every column of the {extent}-column tile once")
    counts = fold.counts()
    bad = next(((c, at) for c, at in sorted(counts.items()) if len(at) != 1), None)
    if bad is None:
        return Finding("reduce.coverage", fold.windows[0].loc, subject, "proven")
    c, at = bad
    said = ("is in none of them" if not at else
            f"is added {len(at)} times, by the windows starting at "
            f"{', '.join(str(a) for a in at)}")
    what = "never added" if not at else "counted more than once"
    return Finding("reduce.coverage", fold.windows[0].loc, subject, "violated",
                   f"column {c} of the tile folded at {fold.windows[0].loc} ({extent} columns "
                   f"along axis {fold.axis}; windows of width {w} starting at "
                   f"{', '.join(str(a) for a in starts)}) {said}: the row sum has that column "
                   f"{what}",
                   {"column": c, "windows": starts, "width": w, "extent": extent,
                    "added": len(at)},
                   fix=f"add the {extent // w if w else 0} windows [{w}g, {w}g + {w}) of the "
                       f"tile, each once")


def _completion(model: Model, fold: Fold, red: ReduceSite, loops) -> Finding | None:
    """After the loop, the accumulator the fold is carried in is summed along the windows'
    axis (`l.sum(axis=1)`: the 8 partials of a row made one): found as a sum over that axis
    outside the loop whose source is, through variables, their assignments and conversions,
    the loop's accumulator. A reduction of it that is not that (a max, a sum over another
    axis) leaves the row's statistic as partials: violated. None where nothing reduces the
    accumulator after the loop (the DSL refuses the deferred row sum's partials where the
    reduced sum is read: they do not broadcast against O)."""
    outer = loops[0].op
    accs = set()
    for scope in loops:
        accs |= accumulators(red, scope.op)
    defs = model.value_defs()
    assigned = model.assigned_sources()

    def follow(v, op) -> list:
        if isinstance(op, O.Var):
            return [op.init] + list(assigned.get(v.id, ()))
        return [op.src] if isinstance(op, _THROUGH) else []
    names = ", ".join(sorted({defs[a].result.hint or f"%{a}" for a in accs if a in defs}))
    subject = (f"the partials of the fold at {fold.windows[0].loc}, carried in {names} over "
               f"loop@{outer.loc}, summed over axis {fold.axis} after the loop")
    others = []
    for r in model.reduces:
        if any(sc.op is outer for sc in r.site.loops()) or \
                not any(x.id in accs for x, _ in model.walk_defs(r.op.src, follow)):
            continue
        if r.op.fn == "sum" and r.op.axis == fold.axis:
            return Finding("reduce.coverage", r.op.loc, subject + f" (at {r.op.loc})",
                           "proven")
        others.append(f"{r.op.fn} over axis {r.op.axis} at {r.op.loc}")
    if not others:
        return None
    seen = f" (the accumulator is reduced only by the {'; '.join(others)})"
    return Finding("reduce.coverage", fold.windows[0].loc, subject, "violated",
                   f"the fold at {fold.windows[0].loc} adds each row's columns into "
                   f"{fold.width} partials carried in {names} over loop@{outer.loc}, but no sum "
                   f"over axis {fold.axis} of them follows the loop{seen}: the row's statistic "
                   f"is never the sum of its columns",
                   {"partials": fold.width, "axis": fold.axis, "accumulator": names},
                   fix=f"sum the accumulator over axis {fold.axis} once after the loop "
                       f"(`{names or 'acc'} = {names or 'acc'}.sum(axis={fold.axis})`)")


def _region_of(region, target: O.For):
    """The region whose top level holds `target`."""
    if any(op is target for op in region.ops):
        return region
    for op in region.ops:
        for inner in op.regions():
            got = _region_of(inner, target)
            if got is not None:
                return got
    return None


def _siblings(model: Model, red: ReduceSite, loops) -> list[ReduceSite]:
    """The reductions that reduce blocks of the same row into the same accumulators in the
    same iterations: the same function, axis and shape off the axis, carried over the same
    loops into a shared variable, under the same `ag.when` blocks (a Python loop unrolled
    while tracing: `for h in range(2): lo = ag.minimum(lo, y.min(axis=0))` loads two blocks
    an iteration). Together they must cover the row once, as the sites of one wgmma
    accumulator do (check_wgmma._siblings); `red` is among them, in program order."""
    shape, axis = red.op.src.type.shape, red.op.axis

    def whens(r):
        return [sc.op.cond.id for sc in r.site.scopes if sc.kind == "if"]
    inner = loops[-1].op
    accs = accumulators(red, inner)
    out = []
    if not any(r is red for r in model.reduces):
        return [red]      # an elementwise accumulation read as a reduction (`_accumulated`)
    for other in model.reduces:
        if other is red:
            out.append(other)
            continue
        oshape = other.op.src.type.shape
        if other.op.fn != red.op.fn or other.op.axis != axis or len(oshape) != len(shape) \
                or any(a != b for d, (a, b) in enumerate(zip(oshape, shape)) if d != axis):
            continue
        oloops = carried_loops(model, other)
        if len(oloops) != len(loops) or any(a.op is not b.op for a, b in zip(oloops, loops)):
            continue
        if not (accumulators(other, inner) & accs) or whens(other) != whens(red):
            continue
        out.append(other)
    return out


def _coverage(model: Model, red: ReduceSite, extents: dict | None = None, *,
              accumulated: bool | None = None) -> list[Obligation]:
    """`extents`: the fields of integer dims (`dim{i}`) to check too, with their extent (the
    caller resolved which tensor's dim they are: `_accumulated`); coordinate fields take
    theirs from the tensor that names them. `accumulated`: the site is `_accumulated`'s
    reading of an elementwise accumulation (by default: a site that is not the kernel's
    reduction); a fold (`_fold_claims`) is a row reduction carried over the loop, as the
    kernel's are."""
    extents = extents or {}
    if accumulated is None:
        accumulated = not any(r is red for r in model.reduces)   # read so by `_accumulated`
    loops = carried_loops(model, red)
    if not loops:
        return []
    siblings = _siblings(model, red, loops)
    index = next(i for i, x in enumerate(siblings) if x is red)
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
    base = list(model.premises) + red.site.constraints() + ranges + list(rec1.cond) + \
        [r1 >= 0, r1 < shape[axis]]
    # integer dims: the tensors' that own them here, and the caller's (`_accumulated`)
    integer = {**_integer_owner_extents(model, rec1), **extents}
    for name, f1 in sorted(rec1.fields.items()):
        coord = is_coordinate_field(name) or name in integer
        if coord and not f1.is_point:
            f1 = _singleton(f1, base) or f1
        # the field moves with the loop: directly (j * BN + r), or through the auxiliary
        # variables of the copy that wrote it (the producer's index, tied to j by the counter)
        if not (coord and f1.is_point and mentions(f1.term, r1)
                and any(mentions(t, v) for v in vars_
                        for t in (f1.term,) + tuple(f1.cond) + tuple(rec1.cond))):
            continue
        extent = integer[name] if name in integer else _extent(model, name)
        ren = [(v, fresh_int(f"{v}@2")) for v in vars_]

        def sub(t, ren=ren):
            return z3.substitute(t, *ren)
        rec2 = red.src.fn(at2)
        f2 = rec2.fields.get(name)
        if f2 is not None and not f2.is_point:
            f2 = _singleton(f2, list(model.premises) + red.site.constraints() + ranges +
                            list(rec2.cond) + [r2 >= 0, r2 < shape[axis]])
        if f2 is None or not f2.is_point:
            continue
        cons = red.site.constraints()
        prem = list(model.premises) + cons + ranges + list(rec1.cond) + list(f1.cond) + \
            [r1 >= 0, r1 < shape[axis]]
        prem2 = prem + [sub(c) for c in cons] + [sub(c) for c in rec2.cond] + \
            [sub(c) for c in f2.cond] + [r2 >= 0, r2 < shape[axis]]
        t1, t2 = f1.term, sub(f2.term)
        same = z3.And([r1 == r2] + [a == b for a, b in ren])
        # an integer dim is one position of the element the tensor holds: where another
        # position of it moves with the loop too (the row of a walk over a flattened x[M, 64];
        # the page of a paged key, read from a block table), the reduced element is the tuple,
        # and the dim repeating with a different row or page is no double reduction
        others = _partners(model, rec1, rec2, name, vars_, sub) if name in integer else []
        differ = [t1 != t2] + [p.first != p.second for p in others]
        what = ", ".join([p.field for p in others] + [name])
        tables = [c for p in others for c in p.distinct_entries()]
        subject = f"{red.op.fn} over axis {axis} at {red.op.loc}, carried over " + \
            ", ".join(f"loop@{s.op.loc}" for s in loops)

        def decode_dup(zm, violated, ren=ren, t1=t1, name=name, others=others):
            wit = W.context(model, zm, red.site)
            i1 = {f"loop@{s.op.loc}": value(zm, s.var) for s in loops}
            i2 = {f"loop@{s.op.loc}": value(zm, b) for s, (_, b) in zip(loops, ren)}
            c = value(zm, t1)
            wit.update({"element": tuple(value(zm, i) for i in idx), name: c,
                        "first": {"iteration": i1, "position": value(zm, r1)},
                        "second": {"iteration": i2, "position": value(zm, r2)}})
            on = ""
            for p in others:
                wit[p.field] = value(zm, p.first)
                on += f" at {p.field} = {wit[p.field]} both times"
                for a1, a2 in p.tables:
                    e1, e2 = (tuple(value(zm, x) for x in a.children()) for a in (a1, a2))
                    wit.setdefault("table_entries", []).append([str(a1.decl()), e1, e2])
                    on += (f" (read from {a1.decl()} entry {e1} both times)" if e1 == e2
                           else f" (read from {a1.decl()} entries {e1} and {e2})")
            return W.placed(f"{name} = {c} is reduced twice{on}: at iteration {i1} (position "
                            f"{value(zm, r1)} along axis {axis}) and at iteration {i2} "
                            f"(position {value(zm, r2)})", wit), wit
        out.append(Obligation("reduce.coverage", red.op.loc, subject + ": each once",
                              prem2 + tables,
                              [(f"distinct (iteration, position) give distinct {what}",
                                       z3.Or([same] + differ))], decode_dup,
                              minimize=vars_ + [r1]))
        if extent is not None and not others:
            out += _mask_keeps_row(model, red, name, f1, rec1, prem, extent, vars_, at1,
                                   subject)
        if others:
            # the row is the tuple's, whose extent is not the dim's (a paged row's is the
            # table's: which pages, how many, as a logical field such as the decode kernel's
            # `key` tag says): the dim is not counted, and its sibling and peeled blocks are
            # not paired with it alone
            continue
        for other in siblings[index + 1:]:   # the same row's blocks at the later sites
            out += _sibling_once(model, red, other, loops, name, idx, axis, prem, r1, t1,
                                 ren, subject)
        peeled = _peeled_terms(model, red, loops, name, idx)
        if peeled:
            out.append(_peeled_once(model, red, loops, name, idx, prem, r1, t1, peeled,
                                    subject))
        if accumulated and any(mentions(t1, g) for g, _, _ in model.grid_vars):
            # the accumulated path (`_accumulated`): a segment of the row the CTA picks (a
            # split reduction's slice, `b = ps * 4 + bb`, its partial stored per slice): each
            # once within it, but the row is the union over the CTAs, not claimed here
            continue
        trips = [model.trip_term(s.op) for s in loops]
        # a trip count that depends on the CTA or on an enclosing loop the row is not carried
        # over (a persistent walk's unit, which picks the tile) may stop early on purpose
        # (the causal diagonal): coverage is not claimed, as the module docstring says
        grid = [v for v, _, _ in model.grid_vars] + \
            [s.var for s in red.site.loops() if all(s.op is not c.op for c in loops)]
        if extent is None or any(mentions(t, g) for t in trips for g in grid):
            if extent is not None and len(loops) == 1:
                # stopping early is legal only where what it skips is masked (the causal
                # diagonal): every element an iteration past the stop would reduce inside
                # the row is one the reduced tile's mask drops
                out += _skipped_masked(model, red, loops[0], name, idx, axis, r1, f1, rec1,
                                       ranges, extent, subject)
            continue
        # every site's block, each trip; counted only when every sibling's block carries the
        # field as a point that moves along its axis (the records `_sibling_once` asks
        # about): a sibling whose block is not such is not shown to add new positions, and
        # counting it could prove a row covered that is not, so the row is not claimed
        if not all(_moves_along(model, s, name, idx, axis) for s in siblings):
            continue
        size = z3.IntVal(sum(s.op.src.type.shape[axis] for s in siblings))
        for t in trips:
            size = size * t
        for pk in peeled:                  # a block reduced outside the loop adds its positions
            size = size + pk.size
            prem = prem + list(pk.prem)
        # a split reduction: each CTA reduces one segment of the row, picked by a program id
        # the trips do not depend on (`b = ps * 4 + bb` inside `range(4)`); together the
        # CTAs' segments must reach the extent: |segments| * |domain| >= extent (a slice one
        # block short leaves the last rows of every segment out). The position's range per
        # CTA is the segment's, not [0, |domain|): that claim is not posed
        seg = [(g, lo, hi) for g, lo, hi in model.grid_vars if mentions(t1, g)]
        if seg:
            count = z3.IntVal(1)
            for _g, lo, hi in seg:
                count = count * (_num(hi) - _num(lo))
            covered = size * count

            def decode_seg(zm, violated, covered=covered, extent=extent, name=name,
                           count=count):
                wit = W.context(model, zm, red.site)
                d, e = value(zm, covered), value(zm, _num(extent))
                wit.update({"domain": d, "extent": e, "segments": value(zm, count),
                            "trips": [value(zm, t) for t in trips]})
                return W.placed(f"the {wit['segments']} CTAs' loops reduce {d} values of "
                                f"{name} but the tensor has {e}: {e - d} of them are never "
                                f"reduced", wit), wit
            out.append(Obligation("reduce.coverage", red.op.loc, subject + ": the segments "
                                  "cover the row", prem,
                                  [("the segments cover the row", covered >= _num(extent))],
                                  decode_seg, minimize=list(model.params.values())))
            continue

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
            return W.placed(msg, wit), wit
        out.append(Obligation("reduce.coverage", red.op.loc, subject + ": covers the row",
                              prem, [(f"{name} in [0, |domain|)", z3.And(t1 >= 0, t1 < size)),
                                     ("the loop covers the row", size >= _num(extent))] +
                              [(f"{name} of the block reduced at {pk.site.op.loc} in "
                                f"[0, |domain|)", z3.And(pk.term >= 0, pk.term < size))
                               for pk in peeled],
                              decode_cov, minimize=list(model.params.values())))
    return out


def _skipped_masked(model: Model, red: ReduceSite, loop, name: str, idx: list, axis: int,
                    r1, f1, rec1, ranges: list, extent, subject: str) -> list[Obligation]:
    """A row reduction whose loop stops at a bound that depends on the CTA (a causal
    attention's last key block, the row's diagonal): the iterations it skips, the loop's index
    continued past its stop, would reduce positions of the row that must all be masked, or
    lie past the row's end. The mask is the reduced tile's own (`live`: the `ag.where(valid,
    s, -inf)` that tiles.py records), evaluated at the skipped iteration, so a bound one block
    short (`(q0 + BM) // BN` for `cdiv(q0 + BM, BN)`) shows the key a query may see and no
    iteration reduces. No mask on the tile: nothing is claimed (as before)."""
    live = rec1.fields.get("live")
    if live is None or not live.is_point or _from_wgmma(model, red.op.src):
        # a score tile of Q K^T: its skipped keys are wgmma.k-once's cover claim on P V (the
        # A operand zero at every key the loop does not reach), posed where the keys are
        # the contracted k; asked here too it is redundant, and unproven where a key is a
        # case split over head-dim boxes (d128)
        return []
    var = loop.var
    start, stop, step = (_num(model.scalar(v)) for v in (loop.op.start, loop.op.stop,
                                                         loop.op.step))
    if not z3.is_int_value(z3.simplify(step)) or z3.simplify(step).as_long() <= 0:
        return []
    past = fresh_int(f"{var}@skipped")

    def at(t):
        return z3.substitute(t, (var, past))
    others = [c for sc in red.site.scopes if sc is not loop for c in sc.constraints]
    prem = list(model.premises) + [at(c) for c in others] + ranges + \
        [at(c) for c in rec1.cond] + [at(c) for c in f1.cond] + \
        [r1 >= 0, r1 < red.op.src.type.shape[axis], past >= stop,
         (past - start) % step == 0]
    pos, kept = at(f1.term), at(live.term)

    def decode(zm, violated):
        wit = W.context(model, zm, red.site)
        wit.pop("iteration", None)
        wit.update({name: value(zm, pos), "skipped_iteration": value(zm, past),
                    "stop": value(zm, stop), "element": tuple(
                        value(zm, r1) if d == axis else value(zm, i)
                        for d, i in enumerate(idx))})
        msg = (f"the loop at {loop.op.loc} stops before index {wit['stop']}, but index "
               f"{wit['skipped_iteration']} would reduce {name} = {wit[name]} (element "
               f"{wit['element']} of the reduced tile), which the tile's mask keeps: a "
               f"position the row may see is never reduced")
        return W.placed(msg, wit), wit
    return [Obligation("reduce.coverage", red.op.loc, subject + ": what the loop skips is "
                       "masked", prem,
                       [("every position a skipped iteration would reduce is masked or past "
                         "the row", z3.Implies(z3.And(pos >= 0, pos < _num(extent)),
                                               kept == 0))],
                       decode, minimize=[past] + list(model.params.values()),
                       fix=f"let the loop at {loop.op.loc} run to the last block holding a "
                           f"position the mask keeps (round the bound up: ag.cdiv)")]


def _mask_keeps_row(model: Model, red: ReduceSite, name: str, f1, rec1, prem, extent,
                    vars_, at, subject: str) -> list[Obligation]:
    """A mask on the reduced tile (`live`: an `ag.where(valid, x, identity)` of index
    comparisons, transfer/tiles.py) that drops in-bounds elements of the row is legal only as
    a relation the kernel states: a causal bound (the key against the query row: another
    coordinate), a variable length (a loaded value, a runtime size or scalar), a sliding
    window. A conjunct of the mask that reads nothing but the reduced coordinate's own
    variables (the loop index, the position along the axis, a split's slice id) and constants
    states no relation: it is a bound on the row itself, and the row is the tensor's
    [0, extent) (a kernel that reduces a part of a tensor loads a view of that part). Each
    such conjunct must keep every position of the row the loop reduces: `row + o < 7` over 8
    partials leaves the last one unreduced. A conjunct reading anything else (another
    coordinate, a size symbol, a loaded value, an unknown) is a relation, and a conjunct
    that is no order comparison selects a subset on purpose (`_order`): not claimed."""
    live = rec1.fields.get("live")
    if live is None or not live.is_point:
        return []
    own = free_consts(f1.term)
    bounds = [c for c in _conjuncts(live.term) if _order(c) and not _opaque_apps(c) and
              all(n in own or n.startswith("wrapped_") for n in free_consts(c)) and
              free_consts(c) & own]
    if not bounds:
        return []
    where = _mask_where(model, red.op.src)
    loc = where.loc if where is not None else red.op.loc
    pos = f1.term

    def decode(zm, violated):
        wit = W.context(model, zm, red.site)
        wit.update({name: value(zm, pos), "extent": value(zm, _num(extent)),
                    "mask": str(loc), "element": tuple(value(zm, x) for x in at)})
        return W.placed(f"the mask at {loc} drops {name} = {wit[name]} (element "
                        f"{wit['element']} of the reduced tile), inside the row [0, "
                        f"{wit['extent']}) the loop reduces, and compares it with nothing "
                        f"but constants (no other coordinate, length or size): that element "
                        f"is never reduced", wit), wit
    return [Obligation("reduce.coverage", loc, subject + ": the mask keeps the row",
                       list(prem) + list(live.cond),
                       [(f"every {name} in [0, extent) is kept by the mask",
                         z3.Implies(z3.And(pos >= 0, pos < _num(extent)), z3.And(bounds)))],
                       decode, minimize=list(vars_),
                       fix=f"compare {name} with the row's extent ({extent}) in the mask at "
                           f"{loc}, or load a view of the part of the tensor the reduction "
                           f"means")]


def _order(c) -> bool:
    """An order comparison (a range bound: `row < 7`, `col >= 1`). An equality or a residue
    (`group == g`, `col % 2 == 0`) selects a subset of the row on purpose (MoE routing's
    per-group maxima), which no range reading can tell from a bug: not claimed."""
    return z3.is_lt(c) or z3.is_le(c) or z3.is_gt(c) or z3.is_ge(c)


def _conjuncts(t) -> list:
    """The conjuncts of a mask's `live` term (`If(c, 1, 0)`, `x != 0`, `And`, as
    transfer/tiles.py builds index comparisons and `&`): boolean terms."""
    out, todo = [], [t]
    while todo:
        x = todo.pop()
        if z3.is_app_of(x, z3.Z3_OP_ITE) and z3.is_int_value(x.arg(1)) and \
                z3.is_int_value(x.arg(2)) and x.arg(1).as_long() != 0 and \
                x.arg(2).as_long() == 0:
            todo.append(x.arg(0))          # If(c, 1, 0) as a truth value: c
        elif z3.is_and(x):
            todo.extend(x.children())
        elif z3.is_distinct(x) and x.num_args() == 2 and z3.is_int_value(x.arg(1)) and \
                x.arg(1).as_long() == 0:
            todo.append(x.arg(0))          # v != 0
        elif z3.is_not(x) and z3.is_eq(x.arg(0)) and z3.is_int_value(x.arg(0).arg(1)) and \
                x.arg(0).arg(1).as_long() == 0:
            todo.append(x.arg(0).arg(0))   # Not(v == 0)
        elif z3.is_bool(x):
            out.append(x)
    return out


def _mask_where(model: Model, v):
    """The where that masks v (v's definitions walked back through pointwise ops): the first
    `ag.where` with a tile condition, or None."""
    for _, op in model.walk_defs(v, through(_POINTWISE)):
        if isinstance(op, O.Elementwise) and op.fn == "where" and \
                isinstance(op.args[0].type, TileType):
            return op
    return None


def _from_wgmma(model: Model, v) -> bool:
    """Whether value v is computed from a wgmma's accumulator (through any ops of the
    kernel: a walk of its definitions, variables by their assignments)."""
    # a wgmma accumulates into its acc operand (lowered: in place)
    accs = {op.acc.id for op in model.kernel.walk() if isinstance(op, O.Wgmma)}
    return any(isinstance(op, O.Wgmma) or x.id in accs
               for x, op in model.walk_defs(v, model.sources))


def _singleton(f, premises) -> object | None:
    """`f` as a point when its set has one value: a field reduced over a wgmma's k whose
    term names k only in a case split that the context decides (bf16 attention's score: the
    key row of sK read through the two 64-column boxes of a 128-wide head, the box chosen by
    k, the row the same in both), so the block's key coordinate is tracked as the point it
    is and the row statistic's coverage is posed. Proven, not assumed: the set is non-empty
    under `premises` (some member meets the set's conditions, `_nonempty`: an empty set would
    make "every two members are equal" hold vacuously, and its conditions, kept on the point,
    would make every claim posed on it vacuous), and two members of the set (the bound
    variables renamed twice, each under the set's conditions) are equal under `premises`;
    else None (the field stays a set and the claims that need a point are not posed, as
    before)."""
    if not f.bound or len(f.bound) > 2:
        return None
    one = [(b, fresh_int("pt")) for b in f.bound]
    two = [(b, fresh_int("pt")) for b in f.bound]
    t1, t2 = z3.substitute(f.term, *one), z3.substitute(f.term, *two)
    c1 = [z3.substitute(c, *one) for c in f.cond]
    c2 = [z3.substitute(c, *two) for c in f.cond]
    if not _nonempty([b for _, b in one], c1, premises):
        return None
    # (solver.prove answers an alpha-equivalent query from its cache)
    out = solver.prove(list(premises) + c1 + c2, [("one value", t1 == t2)],
                       rlimit=solver.rlimit_of(200), proof_only=True)
    if out.status != "proven":
        return None
    return replace(f, term=t1, bound=(), cond=tuple(c1))


# The budget of `_nonempty`'s quantifier elimination. z3's qe tactic neither counts nor checks
# resource units (a context rlimit of 1 unit does not stop it: measured with z3 4.x), so the
# wall-clock backstop that solver.py puts behind every rlimit is its only bound: the budget of
# the proof that follows, as a backstop (10 s; qe takes milliseconds on the library kernels'
# sets, and seconds only where the bound variables meet in non-linear terms).
QE_RLIMIT = solver.rlimit_of(200)
QE_BACKSTOP_MS = solver.backstop_ms(QE_RLIMIT)


def _nonempty(points, conds, premises) -> bool:
    """Whether `premises` imply that some values of `points` meet `conds` (the set a bound
    field ranges over has a member). The existential is eliminated first (z3's qe: the
    instruction's k ranges `0 <= k < 64` become true, a range `k < n` becomes `n >= 1`) and
    the quantifier-free rest proven under `premises`; where elimination leaves a quantifier
    (a division by a constant over the bound variable) or runs out of its budget
    (`QE_BACKSTOP_MS`: cancelled) the existential itself is the claim, proven within
    the same budget. Not proven (also unknown): False (the set is not used as a point), never
    a guess."""
    if not conds:
        return True
    exists = z3.Exists(list(points), z3.And(conds))
    claim = exists
    try:
        goal = z3.Goal()
        goal.add(exists)
        qe = z3.Then(z3.Tactic("simplify"), z3.Tactic("qe"))
        got = z3.TryFor(qe, QE_BACKSTOP_MS)(goal)
        if len(got) == 1:
            free = got[0].as_expr()
            if not _quantified(free):
                claim = free
    except z3.Z3Exception:
        pass   # cancelled (out of budget) or refused: the existential stays the claim
    claim = z3.simplify(claim)
    if z3.is_true(claim) or z3.is_false(claim):
        return z3.is_true(claim)
    out = solver.prove(list(premises), [("the set is non-empty", claim)], rlimit=QE_RLIMIT,
                       proof_only=True)
    return out.status == "proven"


def _quantified(e) -> bool:
    """Whether the formula `e` still has a quantifier in it."""
    return any(z3.is_quantifier(x) for x in subterms(e))


def _moves_along(model: Model, site: ReduceSite, name: str, idx, axis: int) -> bool:
    """Whether the block reduced at `site` carries the field `name` as a point term of its
    position along `axis` (what lets its positions count toward the row's domain)."""
    r = fresh_int("r")
    rec = site.src.fn(tuple(r if d == axis else x for d, x in enumerate(idx)))
    f = rec.fields.get(name)
    if f is not None and not f.is_point:
        shape = site.op.src.type.shape
        f = _singleton(f, list(model.premises) + site.site.constraints() + list(rec.cond) +
                       [z3.And(i >= 0, i < n) for d, (i, n) in enumerate(zip(idx, shape))
                        if d != axis] + [r >= 0, r < shape[axis]])
    return f is not None and f.is_point and mentions(f.term, r)


def _sibling_once(model: Model, red: ReduceSite, other: ReduceSite, loops, name: str, idx,
                  axis: int, prem, r1, t1, ren, subject: str) -> list[Obligation]:
    """No element of the row is reduced at both `red` and a sibling site `other`, in any
    two iterations (distinct sites are distinct instances)."""
    shape = other.op.src.type.shape
    r2 = fresh_int("r")
    rec2 = other.src.fn(tuple(r2 if d == axis else x for d, x in enumerate(idx)))
    f2 = rec2.fields.get(name)
    if f2 is not None and not f2.is_point:
        f2 = _singleton(f2, list(model.premises) + other.site.constraints() + list(rec2.cond) +
                        [z3.And(i >= 0, i < n) for d, (i, n) in enumerate(zip(idx, shape))
                         if d != axis] + [r2 >= 0, r2 < shape[axis]])
    if f2 is None or not f2.is_point:
        return []

    def sub(t):
        return z3.substitute(t, *ren)
    prem2 = list(prem) + [sub(c) for c in other.site.constraints()] + \
        [sub(c) for c in rec2.cond] + [sub(c) for c in f2.cond] + [r2 >= 0, r2 < shape[axis]]
    t2 = sub(f2.term)
    vars_ = [s.var for s in loops]

    def decode(zm, violated):
        wit = W.context(model, zm, red.site)
        i1 = {f"loop@{s.op.loc}": value(zm, s.var) for s in loops}
        i2 = {f"loop@{s.op.loc}": value(zm, b) for s, (_, b) in zip(loops, ren)}
        c = value(zm, t1)
        wit.update({"element": tuple(value(zm, i) for i in idx), name: c,
                    "first": {"iteration": i1, "position": value(zm, r1),
                              "reduced_at": str(red.op.loc)},
                    "second": {"iteration": i2, "position": value(zm, r2),
                               "reduced_at": str(other.op.loc)}})
        return W.placed(f"{name} = {c} is reduced twice: at {red.op.loc} in iteration {i1} "
                        f"(position {value(zm, r1)}) and at {other.op.loc} in iteration "
                        f"{i2} (position {value(zm, r2)})", wit), wit
    return [Obligation("reduce.coverage", red.op.loc,
                       subject + f": each once with the reduction at {other.op.loc}", prem2,
                       [(f"the reductions at {red.op.loc} and {other.op.loc} reduce distinct "
                         f"{name}", t1 != t2)], decode, minimize=vars_ + [r1])]


@dataclass(frozen=True)
class _Peeled:
    """A block of the row reduced outside the loop (`_peeled`), at position `r` of its axis."""

    site: ReduceSite
    r: z3.ArithRef
    term: z3.ArithRef          # the reduced coordinate there
    prem: tuple                # its scopes and its record's conditions
    size: int                  # positions along the axis


def _peeled_terms(model: Model, red: ReduceSite, loops, name: str, idx) -> list[_Peeled]:
    """The blocks reduced into the same accumulator outside the loops, read at the loop's row
    element (the same index off the reduced axis) along field `name`; a block whose tile has
    another shape off the axis, or does not move `name` along it, is not paired (no claim)."""
    shape, axis = red.op.src.type.shape, red.op.axis
    sites: list[ReduceSite] = []
    for scope in loops:
        sites += [p for p in _peeled(model, red, scope.op) if p not in sites]
    out = []
    for p in sites:
        pshape = p.op.src.type.shape
        fold = _fold_of(model, p)
        if fold is not None and _partition(fold).status != "proven":
            continue            # not its tile's sum (`_fold_claims` reports the windows)
        if p.op.axis != axis or len(pshape) != len(shape) or any(
                a != b for d, (a, b) in enumerate(zip(pshape, shape)) if d != axis):
            continue
        r = fresh_int("r")
        rec = p.src.fn(tuple(r if d == axis else x for d, x in enumerate(idx)))
        f = rec.fields.get(name)
        if f is not None and not f.is_point:
            f = _singleton(f, list(model.premises) + p.site.constraints() + list(rec.cond) +
                           [z3.And(i >= 0, i < n) for d, (i, n) in enumerate(zip(idx, pshape))
                            if d != axis] + [r >= 0, r < pshape[axis]])
        if f is None or not f.is_point or not mentions(f.term, r):
            continue
        prem = tuple(p.site.constraints()) + tuple(rec.cond) + tuple(f.cond) + \
            (r >= 0, r < pshape[axis])
        out.append(_Peeled(p, r, f.term, prem, pshape[axis]))
    return out


def _peeled_once(model: Model, red: ReduceSite, loops, name: str, idx, prem, r1, t1,
                 peeled: list[_Peeled], subject: str) -> Obligation:
    """No element of the row is reduced both in the loop and in a block outside it, nor in two
    such blocks."""
    claims, pairs = [], {}
    for k, pk in enumerate(peeled):
        what = f"the loop and the block reduced at {pk.site.op.loc} reduce distinct {name}"
        claims.append((what, t1 != pk.term))
        pairs[what] = (None, pk)
        for pj in peeled[k + 1:]:
            what = (f"the blocks reduced at {pk.site.op.loc} and {pj.site.op.loc} reduce "
                    f"distinct {name}")
            claims.append((what, pk.term != pj.term))
            pairs[what] = (pk, pj)
    premises = list(prem) + [c for pk in peeled for c in pk.prem]

    def decode(zm, violated):
        first, second = pairs[violated[0]]
        wit = W.context(model, zm, red.site if first is None else first.site)
        c = value(zm, second.term)
        if first is None:
            i1 = {f"loop@{s.op.loc}": value(zm, s.var) for s in loops}
            one = {"iteration": i1, "position": value(zm, r1), "reduced_at": str(red.op.loc)}
            said = f"in the loop at iteration {i1} (position {value(zm, r1)})"
        else:
            one = {"position": value(zm, first.r), "reduced_at": str(first.site.op.loc)}
            said = f"by the block reduced at {first.site.op.loc}"
        two = {"position": value(zm, second.r), "reduced_at": str(second.site.op.loc)}
        wit.update({"element": tuple(value(zm, i) for i in idx), name: c, "first": one,
                    "second": two, "peeled_at": str(second.site.op.loc)})
        wit.update(W.holder(model, red.op.src.type,
                            tuple(value(zm, r1) if d == red.op.axis else value(zm, i)
                                  for d, i in enumerate(idx))))
        return W.placed(f"{name} = {c} is reduced twice: {said} and again by the block "
                        f"reduced outside the loop at {second.site.op.loc} (position "
                        f"{value(zm, second.r)}): the {red.op.fn} counts it twice", wit), wit
    return Obligation("reduce.coverage", red.op.loc,
                      subject + ": each once with the blocks reduced outside the loop",
                      premises, claims, decode,
                      minimize=[s.var for s in loops] + [r1] + [pk.r for pk in peeled],
                      fix="start (or end) the loop after the blocks reduced outside it, or "
                          "drop the peeled block")


@dataclass(frozen=True)
class _Partner:
    """Another position of the reduced element that moves with the loop: its value at the two
    reads, and the opaque applications in them (`page(b, jb // per_page)`: a value the
    kernel loaded, from a table), paired by function, one from each read."""

    field: str
    first: z3.ArithRef
    second: z3.ArithRef
    tables: tuple

    def distinct_entries(self) -> list:
        """The assumption that distinct entries of a table hold distinct values, instantiated
        at the two reads: a block table lists a page once per sequence (the decode kernel
        states it, `pos(page(b, i)) == i`; a table that lists a page twice reduces its rows
        twice, which the verifier cannot see)."""
        return [z3.Implies(a1 == a2, z3.And([x == y for x, y in zip(a1.children(),
                                                                      a2.children())]))
                for a1, a2 in self.tables]


def _partners(model: Model, rec1, rec2, name: str, vars_, sub) -> list[_Partner]:
    """The fields of the record's tensor, other than `name`, that are points at both reads and
    move with the loop: the element reduced is (these, name), so `name` repeating where one
    of these differs is no double reduction. `rec2` is read 2's record, its loop indices
    renamed by `sub`. A page number loaded from a block table (`ag.tag_tensor(BT,
    value=...)`'s function, or a plain load's `loaded` one) is opaque: its applications that
    move with the loop are paired for `_Partner.distinct_entries`."""
    out = []
    for other in sorted({f for t in _integer_owners(model, rec1) for f in t.field_names}):
        f1, f2 = rec1.fields.get(other), rec2.fields.get(other)
        if other == name or f1 is None or f2 is None or not (f1.is_point and f2.is_point) \
                or not any(mentions(f1.term, v) for v in vars_):
            continue
        t1, t2 = f1.term, sub(f2.term)
        # a loop's step sum (`Model.steps_over`: rows before iteration j of a ragged walk) is
        # an uninterpreted function too, but not a table: it repeats where a step is 0, so
        # it is not assumed injective
        moving = [a for a in _opaque_apps(t1) if any(mentions(a, v) for v in vars_)
                  and a.decl().name() not in model.step_sums]
        tables = tuple((a1, a2) for a1 in moving for a2 in _opaque_apps(t2)
                       if a1.decl().eq(a2.decl()))
        out.append(_Partner(other, t1, t2, tables))
    return out


def _opaque_apps(t) -> list:
    """The uninterpreted functions applied to arguments in `t` (values the kernel loaded),
    each once."""
    return [x for x in subterms(t, binders=False) if _opaque_app(x)]


def _opaque_app(t) -> bool:
    """An uninterpreted function applied to arguments: a value the kernel loaded."""
    return z3.is_app(t) and t.num_args() > 0 and \
        t.decl().kind() == z3.Z3_OP_UNINTERPRETED


def _integer_owners(model: Model, rec) -> list:
    """The tensors an element with the record's fields may be read from: their integer
    positions are exactly the record's `dim` fields, and the record carries each of their
    named ones (K[PAGES, 64] for a record of pages and dim1, not OUT[B, 1])."""
    dims = frozenset(f for f in rec.fields if is_integer_dim(f))
    if not dims:
        return []
    return [t for t in model.tensors.values()
            if frozenset(f for f in t.field_names if is_integer_dim(f)) == dims
            and all(f in rec.fields for f in t.field_names)]


def _integer_owner_extents(model: Model, rec) -> dict:
    """`dim{i}` field -> extent, for a record read from an integer-shaped tensor (a template's
    x[4, 64, 3000]): a constant dim is a known size and is checked as a named one is. The
    field is a position, so its tensor is found by the record's set of `dim` fields: the
    tensors with exactly those integer positions; where they disagree on dim i's extent
    (or none has that set: a view, a reshape) the field is left out, as before."""
    owners = _integer_owners(model, rec)
    out = {}
    for f in sorted({f for t in owners for f in t.field_names if is_integer_dim(f)}):
        i = integer_dim_position(f)
        exts = {t.dims[i] for t in owners if len(t.dims) > i}
        if len(exts) == 1 and isinstance(next(iter(exts)), int) and \
                all(t.field_names[i] == f for t in owners):
            out[f] = next(iter(exts))
    return out


def _extent(model: Model, name: str):
    for info in model.tensors.values():
        if name in info.field_names:
            return info.extent(model, info.field_names.index(name))
    return None


# ops through which a reduced tile reads an accumulator at the same element (pointwise)
_POINTWISE = (O.Elementwise, O.Convert, O.ConvertLayout)


def _accumulated(model: Model, red: ReduceSite, accs: list[Accumulation]) -> list[Obligation]:
    """A reduction after a loop of an elementwise accumulator the loop carries
    (argus/verify/accumulate.py: `acc = ag.maximum(acc, x)` each iteration, `acc.max(axis=1)`
    after the loop, as argus/compose's templates write a row statistic): element e of acc
    combines x[e] of every iteration, so the reduction is one over (iterations x positions
    along the axis), and its coverage is the loop's as for a reduction carried over it
    (`_coverage`), posed on the part x at its site in the loop (its tags are points there;
    after the loop they are sets over the summarized index) with the accumulation's op read as
    a reduction of that part along the axis. The accumulator must reach the reduction through
    pointwise ops of its shape (`acc2 * exp(acc1 - m)`, a rescale before the sum), the combine
    must be the reduction's own (a max accumulator under a sum is another statistic), and the
    reduction must follow the loop in the region holding it (after every iteration).

    The accumulator must start as a constant tile (`ag.full`): a first block peeled into
    its initial value would be a part of the row the loop does not reduce (no claim).

    Integer dims (`dim{i}` fields, the templates' static shapes) are checked where the part's
    loads resolve the dim: every tensor loaded into it with that field has one extent there
    (`_loaded_extents`); a field two loaded tensors give different extents is left alone."""
    if carried_loops(model, red):
        return []                                # carried itself: `_coverage`
    shape = red.op.src.type.shape
    leaves = _pointwise_leaves(model, red.op.src, shape)
    mine = [a for a in accs if a.reduction == red.op.fn and any(x is a.var for x in leaves)]
    # the accumulator must be all the reduction reads of the row: another leaf (a block
    # combined after the loop, `(acc + tail).max()`, a second accumulator of the same
    # statistic, `ag.maximum(lo, hi).max()`, a variable the loop overwrites) would hold
    # positions the loop need not cover; other statistics (softmax's running max under its
    # sum) and constants are not elements of the row
    others = {id(a.var) for a in accs if a.reduction != red.op.fn}
    if len(mine) != 1 or any(not isinstance(x, (O.Full, O.Const)) and id(x) not in others
                             and x is not mine[0].var for x in leaves):
        return []
    inits = {r.id: op for op in model.kernel.walk() for r in op.results()}
    out = []
    folded = {f.root.id for f in folds(model)}
    for acc in mine:
        if tuple(acc.part.type.shape) != tuple(shape):
            continue
        if acc.combine.result.id in folded:
            # the part is a fold of a wider tile's windows (the deferred row sum): its
            # positions are (window, column), not the part's own, and `_fold_claims` poses
            # the row's claims on the folded tile (read as 8 keys a block it is one short)
            continue
        if not isinstance(inits.get(acc.var.init.id), O.Full):
            # a block of the row in the initial value (`acc = x0`, the loop from block 1):
            # not paired with the loop here, so the loop alone is not claimed to cover it
            continue
        region = _region_of(model.kernel.body, acc.loop)
        ops = list(region.ops) if region is not None else []
        at = next((i for i, op in enumerate(ops) if op is acc.loop), None)
        if at is None or not any(op is red.op for op in ops[at + 1:]):
            continue
        tiles = [a for a in acc.combine.args if isinstance(a.type, TileType)]
        k = next(i for i, a in enumerate(tiles) if a.id == acc.part.id)
        extents = _loaded_extents(model, acc.part)
        for ew in model.ews:
            if ew.op is not acc.combine or len(ew.operands) != len(tiles):
                continue
            # the accumulation read as the reduction of its part along the axis, at the
            # combine's site: its result is what the loop carries into the accumulator
            op = O.Reduce(loc=red.op.loc, result=acc.combine.result, src=acc.part,
                          fn=red.op.fn, axis=red.op.axis, scratch=(), release=True)
            out += _coverage(model, ReduceSite(op, ew.site, ew.operands[k][0]), extents)
    return out


def _pointwise_leaves(model: Model, v, shape) -> list:
    """What v reads at its own element: its definitions walked back through pointwise ops and
    conversions whose operand has v's shape (a per-row operand broadcast along the axis is
    another value, not followed), to the first values not so computed (variables, loads,
    constants ...): their defining ops (None for a value without one)."""
    return [op for _, op in model.walk_defs(v, through(_POINTWISE, shape))
            if not isinstance(op, _POINTWISE)]


def _loaded_extents(model: Model, v) -> dict:
    """The extent of each integer-dim field (`dim{i}`) of the tensors loaded into value v
    (its definitions walked back, variables through their initial values and assignments),
    where every such tensor with that field agrees on it: the static-shape fields that name
    a position, not a dim, resolved by the tensors that give v its tags."""
    found: dict[str, set] = {}
    for op in model.loads_into(v):
        info = model.tensors.get(op.tensor.id)
        for d, name in enumerate(info.field_names if info is not None else ()):
            if is_integer_dim(name):
                e = info.extent(model, d)
                found.setdefault(name, set()).add(e if isinstance(e, int) else str(e))
    return {name: next(iter(es)) for name, es in found.items()
            if len(es) == 1 and isinstance(next(iter(es)), int)}
