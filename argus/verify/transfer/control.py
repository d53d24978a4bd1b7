"""Transfer functions of structured control flow and loop-carried values: for, if, var, assign.

Job: walk the nested regions with their scopes (a loop index bounded by its range, an if's
condition), keep the pipeline step counters exact across loops (steps before the loop +
iteration x steps per iteration) and ifs (a counter that differs between the branches becomes
a z3 If), and summarize loop-carried tiles over the loop: a dry pass over the body gives their
state after one iteration, which, summarized over the loop and joined with the initial state,
is the state every iteration sees on entry.

Invariant kept: a loop-carried value is never taken at one iteration's state: tags that vary
with the index are reduced over its whole range (`tagdomain.reduce_over`), and premises that
mention the finished loop's index range over every iteration. A scalar variable that something
assigns is an opaque term, so whatever is proven holds for all its values.

Roles (RoleOp) have no rule here: the model walks each role from the kernel's top level once
per warpgroup index (`Model._walk_role`); see EXEMPT in this package's __init__.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import ScalarType
from argus.verify.tagdomain import (Record, Substitution, TagVal, fresh_int, joined_via,
                                    mentions, reduce_over)
from argus.verify.transfer.domain import (Rule, TileState, VarInfo, _is_z3, _is_zero, _num,
                                          _same, _Unsupported)
from argus.verify.transfer.values import FACTS


def for_(m: Model, op: O.For, scopes, role, counters, following) -> None:
    start, stop, step = (m.scalar(v) for v in (op.start, op.stop, op.step))
    var = m._var(f"i{op.var.id}", VarInfo("loop", f"loop index at {op.loc}", op.var, op))
    m.sym[op.var.id] = var
    cons = [var >= _num(start), var < _num(stop)]
    if not (isinstance(step, int) and step == 1):
        cons.append((var - _num(start)) % _num(step) == 0)
    index = var - _num(start) if isinstance(step, int) and step == 1 else \
        (var - _num(start)) / _num(step)
    # the body's scalars first (inner loop bounds), so its steps per iteration can be
    # counted; counters inside the body are then exact
    m._prime_scalars(op.body)
    per = {}
    for pid in m.pipes:
        try:
            per[pid] = m._count(op.body, pid)
        except _Unsupported as e:
            m.note_unsupported(op.loc, str(e))
            per[pid] = 0
    # a count per iteration that depends on the index (a causal tile's KV blocks in a
    # persistent walk) adds up to a sum, not trip x count (Model.steps_over)
    varying = {pid for pid, n in per.items() if mentions(_num(n), var)}
    # the counter at the start of iteration `index`: before + index * per, or with a varying
    # count before + the sum of the earlier iterations' counts. Both kinds go into the scope's
    # `steps`: a step of iteration t has counter start(t) + offset, 0 <= offset < per(t), and
    # start(t) + per(t) <= start(t + 1) (a prefix sum of counts >= 0), so two roles walking
    # this loop with equal counts per iteration meet at equal counters exactly in the same
    # iteration at the same offset (Model._same_loop_nest). Left out of `steps`, a varying
    # count (a causal tile's KV blocks in a persistent walk) left the roles' counters as two
    # uninterpreted sums, which the solver could make equal at different units: FA3's causal
    # persistent walk got wgmma.agree / k-once false alarms pairing one unit's P with
    # another's V (issue 13)
    start_of = {pid: _num(counters.get(pid, 0)) + (
        m.steps_over(op, n, index) if pid in varying else index * _num(n))
        for pid, n in per.items() if not _is_zero(n)}
    scope = m._scope("loop", op, var, tuple(cons),
                     _counter_lemmas(index, m._trip(op), step,
                                     [n for pid, n in per.items()
                                      if pid not in varying and not _is_zero(n)]),
                     tuple((pid, _num(counters.get(pid, 0)), start_of[pid], _num(per[pid]))
                           for pid in start_of))
    inner_scopes = scopes + (scope,)
    # (the same terms as the scope's `steps`: a step's offset in its iteration is its
    # counter minus these, Model._same_loop_nest)
    inner_counters = dict(start_of)
    carried = m._carried_tiles(op.body)
    shifted: list[int] = []
    if carried:
        # dry pass (no recording): the loop-carried tiles' state after one iteration,
        # summarized over the loop and joined with the initial state, is the state every
        # iteration sees on entry
        saved, recording = dict(m.tiles), m._recording
        m._recording = False
        # one dry pass per level of the tiles known exactly per iteration: a register ring
        # (lower/prefetch.py, DEPTH blocks) rotates b0 = b1, ..., b_last = load(j + DEPTH*step),
        # so b1's entry state must be known before b0's is (its value at j - step), and so on
        entry: dict = {}
        for level in _exact_levels(m, op, carried) or [set()]:
            m.tiles.clear()
            m.tiles.update(saved)
            m.tiles.update(entry)
            m._walk(op.body, inner_scopes, role, dict(inner_counters))
            for vid in level:
                if vid in m.tiles and vid in saved:
                    entry[vid] = _previous_iteration(saved[vid], m.tiles[vid], var, start, step)
        summary = {vid: _join(saved[vid], _summarize(m.tiles[vid], var, start, stop, op.loc))
                   for vid in carried if vid not in entry and vid in m.tiles and vid in saved}
        # a tile the body recomputes each iteration from other carried tiles (FA3's P_{j-1},
        # carried past the softmax of S_j): one more dry pass, every other carried tile at
        # its entry state, gives its value at any iteration's end; iteration j sees the one
        # of j - step (`_previous_iteration`), not a summary that loses its index
        shifted = [vid for vid in _recomputed_values(m, op, carried, set(entry))
                   if vid in summary]
        if shifted:
            m.tiles.clear()
            m.tiles.update(saved)
            m.tiles.update(entry)
            m.tiles.update(summary)
            m._walk(op.body, inner_scopes, role, dict(inner_counters))
            for vid in shifted:
                if vid in m.tiles:
                    entry[vid] = _previous_iteration(saved[vid], m.tiles[vid], var, start,
                                                     step)
        m._recording = recording
        for vid in carried:
            if vid in entry:
                m.tiles[vid] = entry[vid]
            elif vid in summary:
                m.tiles[vid] = summary[vid]
    m._walk(op.body, inner_scopes, role, dict(inner_counters))
    trip = m._trip(op)
    for vid in carried:
        if vid in shifted and vid in m.tiles:
            # after the loop: the entry state of the iteration one past the last (the last
            # iteration's value, the initial one if the loop runs none)
            past = _num(start) + _num(trip) * _num(step)
            m.tiles[vid] = _at(_previous_iteration(saved[vid], m.tiles[vid], var, start, step),
                               var, past)
        elif vid in m.tiles:
            m.tiles[vid] = _summarize(m.tiles[vid], var, start, stop, op.loc)
    for pid, n in per.items():
        if not _is_zero(n):
            steps = m.steps_over(op, n) if pid in varying else trip * n
            if pid not in varying and _is_z3(trip):
                # (steps, trip, per iteration): the same steps in every iteration of a walk,
                # which check_pipeline pairs with a step sum over the same walk iteration by
                # iteration (_Pair: a role whose warpgroups take turns on the units)
                m.trip_steps[steps.get_id()] = (steps, _num(trip), _num(n))
            counters[pid] = _num(counters.get(pid, 0)) + steps


def _counter_lemmas(index, trip, step, counts) -> tuple:
    """For each count n of pipeline steps per iteration: index*n + n <= trip*n and
    index*n >= 0, i.e. iteration `index`'s steps lie in the loop's [0, trip*n). True because
    0 <= index <= trip - 1 inside the body and n >= 0 (stated as conditions, so a lemma can
    never assume more than the loop gives). With these the solver compares the counters of
    two loops that run one after the other (a main walk, then a tail walk) linearly, over the
    products as atoms, instead of searching non-linear arithmetic (seconds, heavy-tailed)."""
    if isinstance(step, int) and step <= 0:
        return ()
    out = []
    for n in counts:
        n = _num(n)
        ok = [n >= 0] + ([_num(step) > 0] if not isinstance(step, int) else [])
        lemma = z3.And(index * n + n <= _num(trip) * n, index * n >= 0)
        out.append(z3.Implies(z3.And(ok), lemma))
    return tuple(out)


def if_(m: Model, op: O.If, scopes, role, counters, following) -> None:
    cond = m._bool(op.cond)
    inner = dict(counters)
    before = dict(m.tiles)
    m._walk(op.body, scopes + (m._scope("if", op, None, (cond,)),), role, inner)
    for vid, state in list(m.tiles.items()):
        if vid in before and before[vid] is not state:
            # a tile the body assigned: its tags stay the body's (an over-approximation of
            # both paths' lineages), but what the body made of its value (a mask's `live`,
            # -inf, 0) holds only where the body ran
            m.tiles[vid] = _facts_where(cond, state, before[vid])
    for pid, n in inner.items():
        before = counters.get(pid, 0)
        if not _same(n, before):
            counters[pid] = z3.If(cond, _num(n), _num(before))


# the value facts of an element and what each is when nothing assigned it (`_facts_where`)
_FACT_DEFAULTS = {"live": 1, "is_neg_inf": 0, "is_zero": 0, "not_neg_inf": 0}


def _facts_where(cond, after: TileState, before: TileState) -> TileState:
    """`after` (the state an `ag.when` body left) with its value facts (`live`, values.py's)
    taken from `after` where `cond` holds and from `before` elsewhere."""
    def fn(idx):
        rec = after.fn(idx)
        if not any(k in rec.fields for k in _FACT_DEFAULTS):
            return rec
        old = before.fn(idx).fields if before.valued else {}
        fields = dict(rec.fields)
        for name, default in _FACT_DEFAULTS.items():
            a, b = rec.fields.get(name), old.get(name)
            if a is None and b is None:
                continue
            ta = a.term if a is not None and a.is_point else None
            tb = b.term if b is not None and b.is_point else None
            if (a is not None and ta is None) or (b is not None and tb is None):
                fields.pop(name, None)   # a set, not a point: nothing known
                continue
            fields[name] = TagVal(z3.If(cond, ta if ta is not None else z3.IntVal(default),
                                        tb if tb is not None else z3.IntVal(default)))
        return Record(fields, rec.defined, rec.cond, rec.source, rec.provenance)
    return TileState(after.shape, after.layout, fn, after.loc, after.what)


def var(m: Model, op: O.Var, scopes, role, counters, following) -> None:
    if isinstance(op.result.type, ScalarType):
        # a scalar variable that something assigns takes other values in later iterations
        # (or after an ag.when): an opaque term, so whatever is proven holds for all of them
        m.sym[op.result.id] = (fresh_int(f"var{op.result.id}") if op.result.id in
                               m._assigned_vars() else m.scalar(op.init))
        return
    src = m.tile(op.init)
    m.tiles[op.result.id] = TileState(src.shape, src.layout, src.fn, op.loc, src.what,
                                      valued=src.valued)
    m._def_seq[op.result.id] = next(m._seq)


def assign(m: Model, op: O.Assign, scopes, role, counters, following) -> None:
    if isinstance(op.dst.type, ScalarType):
        return  # the variable is opaque (see `var` above)
    src = m.tile(op.src)
    m.tiles[op.dst.id] = TileState(m.tile(op.dst).shape, src.layout, src.fn, op.loc, src.what,
                                   valued=src.valued)
    m._def_seq[op.dst.id] = next(m._seq)


def _exact_levels(m: Model, loop: O.For, carried: list[int]) -> list[set[int]]:
    """`_iteration_values` to a fixpoint: level k holds the tiles computed from nothing carried
    but the tiles of the levels before it."""
    levels: list[set[int]] = []
    known: set[int] = set()
    while new := _iteration_values(m, loop, carried, known) - known:
        levels.append(new)
        known |= new
    return levels


def _iteration_values(m: Model, loop: O.For, carried: list[int],
                      known: set[int] = frozenset()) -> set[int]:
    """The carried tiles whose entry state is known exactly: assigned once, at the top level of
    the loop body, a value computed from nothing carried but the `known` tiles (no other
    carried tile, no assigned scalar variable: loads and arithmetic of the loop index and
    loop-invariant values, such as a block that lower/prefetch.py loads ahead, or the next
    block of its ring). Iteration j then sees the value the assignment computed at iteration
    j - step (the initial value at j = start)."""
    walked = list(loop.body.walk())
    defs = {r.id: op for op in walked for r in op.results()}
    assigned = [op.dst.id for op in walked if isinstance(op, O.Assign)]
    impure = (set(carried) | m._assigned_vars()) - set(known)
    out = set()
    for op in loop.body.ops:
        if not isinstance(op, O.Assign) or op.dst.id not in carried or \
                assigned.count(op.dst.id) != 1:
            continue
        todo, seen, pure = [op.src], set(), True
        while todo and pure:
            v = todo.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            pure = v.id not in impure
            if v.id in defs:
                d = defs[v.id]
                pure = pure and not isinstance(d, (O.Var, O.Wgmma)) and not d.regions()
                todo += list(d.operands())
        if pure:
            out.add(op.dst.id)
    return out


def _recomputed_values(m: Model, loop: O.For, carried: list[int], known: set[int]) -> list[int]:
    """The carried tiles (not in `known`) whose value at an iteration's end is a function of
    that iteration alone, given the entry states of the *other* carried tiles: assigned once
    in the body, at its top level (so in every iteration, last), from a value that does not
    read the tile's own entry value nor an assigned scalar variable. Found by a dependency
    pass in program order: a variable (or a wgmma accumulator, updated in place) holds the
    carried tiles its current content was computed from; an update under an `if` or an
    inner loop may not happen, so it adds to what the variable held (and the condition's
    dependencies, since the value it picks depends on them)."""
    body_assigns = [op.dst.id for op in loop.body.walk() if isinstance(op, O.Assign)]
    scalars = m._assigned_vars()
    cur: dict[int, frozenset] = {}

    def deps(v) -> frozenset:
        if v.id in cur:
            return cur[v.id]
        if v.id in scalars and isinstance(v.type, ScalarType):
            return _SCALAR_VARIABLE
        return frozenset({v.id}) if v.id in carried else frozenset()

    tops: dict[int, frozenset] = {}

    def walk(region, guard: frozenset, maybe: bool) -> None:
        for op in region.ops:
            if isinstance(op, O.Var):
                cur[op.result.id] = deps(op.init) | guard
            elif isinstance(op, O.Assign):
                new = deps(op.src) | guard
                cur[op.dst.id] = (cur.get(op.dst.id, deps(op.dst)) | new) if maybe else new
                if region is loop.body:
                    tops[op.dst.id] = new
            elif isinstance(op, O.Wgmma):
                cur[op.acc.id] = frozenset().union(*(deps(v) for v in op.operands())) | guard
            else:
                got = frozenset().union(*(deps(v) for v in op.operands()), guard)
                for r in op.results():
                    cur[r.id] = got
            for inner in op.regions():
                if isinstance(op, (O.Produce, O.Consume)):
                    walk(inner, guard, maybe)        # its body runs once, every time
                else:                                # an if, an inner loop, an elect
                    cond = frozenset().union(*(deps(v) for v in op.operands()))
                    # an inner loop twice: a read before a later assignment in its body
                    # sees that assignment's dependencies across the inner back edge
                    for _ in range(2 if isinstance(op, O.For) else 1):
                        walk(inner, guard | cond, True)

    walk(loop.body, frozenset(), False)
    return [vid for vid in carried if vid not in known and vid in tops and
            body_assigns.count(vid) == 1 and vid not in tops[vid] and
            not (tops[vid] & _SCALAR_VARIABLE)]


# what a value read from an assigned scalar variable depends on (`_recomputed_values`): an
# opaque term that stands for its value at any iteration, so not one to shift by an iteration
_SCALAR_VARIABLE = frozenset({-1})


def _previous_iteration(initial: TileState, after: TileState, var, start, step) -> TileState:
    """Entry state of iteration `var`: `initial` at var = start, else `after` (one iteration's
    assignment, a function of the index) taken at var - step. The shifted premises hold only
    past the first iteration, so they are stated under that condition."""
    prev, first = var - _num(step), var == _num(start)
    shift = Substitution([(var, prev)])   # one set of C arrays for every term shifted

    def fn(idx):
        a, b = initial.fn(idx), after.fn(idx)
        fields = {}
        for name in a.fields.keys() & b.fields.keys():
            fa, fb = a.fields[name], b.fields[name]
            # each side's set conditions bind only under its own case: a side that does not
            # apply must not empty the field's set (that would make claims about it vacuous)
            fields[name] = TagVal(z3.If(first, fa.term, shift(fb.term)), fa.bound + fb.bound,
                                  tuple(z3.Implies(first, c) for c in fa.cond) +
                                  tuple(z3.Implies(z3.Not(first), shift(c)) for c in fb.cond),
                                  fa.mixed + fb.mixed, joined_via(fa, fb))
        cond = a.cond + tuple(z3.Implies(z3.Not(first), shift(c)) for c in b.cond)
        defined = z3.If(first, a.defined, shift(b.defined))
        return Record(fields, defined, cond, b.source)
    return TileState(after.shape, after.layout, fn, after.loc, after.what)


def _at(state: TileState, var, value) -> TileState:
    """`state` with the loop index `var` taken at `value` (a term of the enclosing scope)."""
    value = _num(value)
    at = Substitution([(var, value)])

    def fn(idx, inner=state.fn):
        rec = inner(idx)
        fields = {name: TagVal(at(v.term), v.bound, tuple(at(c) for c in v.cond), v.mixed,
                               v.via) for name, v in rec.fields.items()}
        return Record(fields, at(rec.defined), tuple(at(c) for c in rec.cond), rec.source)
    return TileState(state.shape, state.layout, fn, state.loc, state.what)


def _summarize(state: TileState, var, start, stop, loc) -> TileState:
    def fn(idx, inner=state.fn):
        rec = inner(idx)
        fields = {name: reduce_over(val, var, _num(start), _num(stop),
                                    f"accumulated over the loop at {loc}")
                  for name, val in rec.fields.items()}
        # premises that mention the finished loop's index range over all its iterations
        other = fresh_int(f"{var}@all")
        cond = tuple(Substitution([(var, other)]).many(list(rec.cond)))
        # a condition the substitution changed mentioned the index (it comes back as the
        # same object otherwise), so it mentions `other` now
        if any(new is not old for new, old in zip(cond, rec.cond)):
            cond += (other >= _num(start), other < _num(stop))
        return Record(fields, rec.defined, cond, rec.source)
    return TileState(state.shape, state.layout, fn, state.loc, state.what)


def _join(initial: TileState, summary: TileState) -> TileState:
    def fn(idx):
        a, b = initial.fn(idx), summary.fn(idx)
        fields = dict(b.fields)
        for name, val in a.fields.items():
            if name in FACTS:
                # a value fact holds on entry only where both the initial value and every
                # iteration's have it (points: a summary's set says nothing)
                other = b.fields.get(name)
                if other is None or not (val.is_point and other.is_point):
                    fields.pop(name, None)
                else:
                    fields[name] = TagVal(z3.If(z3.And(val.term != 0, other.term != 0), 1, 0))
                continue
            fields.setdefault(name, val)
        return Record(fields, b.defined, a.cond + b.cond, b.source)
    return TileState(summary.shape, summary.layout, fn, summary.loc, summary.what)


RULES: dict[type, Rule] = {
    O.For: for_,
    O.If: if_,
    O.Var: var,
    O.Assign: assign,
}
