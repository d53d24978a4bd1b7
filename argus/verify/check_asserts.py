"""User tag assertions (`ag.tag_assert`): evaluate the expression over the tags of the tiles
and views it names and prove it for every pairing, thread, iteration and CTA.

Job: turn one `tag.assert` op into one obligation. Pairing (tag_ops.TagAssert): views that
the next wgmma in the same region reads are paired as that wgmma multiplies them (A[m, k] with
B[n, k], the accumulator at [m, n]; a view naming some of an operand's rows, `rows_of` at a
fixed offset into the wgmma's view, speaks of those rows only, and its record keeps only the
writers that can hold them); tiles and other views pair element-wise with broadcasting. A
field that is a reduction (a row max's `n`, an accumulator's `k`) denotes the set of its
contributors, so `max_tile.q == s.q` fails when any contributor has another q:
this is how a reduction over the wrong axis is caught. Opaque tag functions are uninterpreted
functions; `tag.assume` axioms are instantiated on the ground terms of the query.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import SmemType, TileType
from argus.verify import exprs, solver
from argus.verify import witness as W
from argus.verify.model import AssertSite, Model, ViewInfo, _num, b_index
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import Record, TagVal, fresh_int, mentions


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    for a in model.asserts:
        try:
            obs.append(_assertion(model, a))
        except (exprs.ExprError, KeyError, ValueError) as e:
            finds.append(Finding("tag.assert", a.op.loc, f"tag assertion at {a.op.loc}",
                                 "unknown", f"cannot evaluate {a.op.expr!r}: {e}"))
    return obs, finds


class _ViewRef:
    def __init__(self, buffer, stage, row0, rows):
        self.buffer, self.stage, self.row0, self.rows = buffer, stage, row0, rows


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return z3.eq(z3.simplify(_num(a)), z3.simplify(_num(b)))


def _assertion(model: Model, a: AssertSite) -> Obligation:
    op = a.op
    refs = op.refs
    # 1. what the expression names: $i is a buffer (for view(...)), a tile, or a scalar
    buf_terms = []
    for r in refs:
        if isinstance(r.type, SmemType):
            buf_terms.append(r)
        elif isinstance(r.type, TileType):
            buf_terms.append(("tile", r))
        else:
            buf_terms.append(model.scalar(r))
    # 2. pairing: the wgmma that reads the named views, else element-wise
    wg = None
    probe_views: list[_ViewRef] = []

    def probe_call(vals):
        v = _ViewRef(*vals)
        probe_views.append(v)
        return v
    _collect(op.expr, model, buf_terms, probe_call)
    for nxt in a.following:
        for inner in nxt.walk():
            if isinstance(inner, O.Wgmma) and probe_views:
                av, bv = model.views.get(inner.a.id), model.views.get(inner.b.id)
                if av is None or bv is None:
                    continue
                if all(_matches(v, av) or _matches(v, bv) for v in probe_views):
                    wg = (inner, av, bv)
                    break
        if wg is not None:
            break
    idx_vars: list = []
    premises = list(model.premises) + a.site.constraints()
    shape = None
    wg_site = None
    if wg is not None:
        inner, av, bv = wg
        N, K = inner.acc.type.shape[1], av.cols
        m, n, kk = fresh_int("m"), fresh_int("n"), fresh_int("kk")
        idx_vars = [m, n, kk]
        premises += [m >= 0, m < 64, n >= 0, n < N, kk >= 0, kk < K]
        shape = (64, N)
        wg_site = next((s for s in model.wgmmas if s.op is inner), None)
    else:
        shapes = [st.shape for st in a.tiles.values()] + [(v.rows, _view_cols(model, v))
                                                          for v in probe_views]
        shape = _broadcast(shapes)
        idx_vars = [fresh_int(f"e{d}") for d in range(len(shape))]
        premises += [z3.And(i >= 0, i < s) for i, s in zip(idx_vars, shape)]
    records = []
    # one read per view element: the expression names a view once per field (`a.tap`,
    # `a.oh`, ... each a view(...) call of its own), and each read_smem is a fresh record
    # with its own writer instance, so the fields of one element came from unrelated
    # writers and the query grew by a writer's disjunction a field (37 reads in a packed
    # conv's receptive field). An element has one writer: its fields are one record's.
    read_memo: list[tuple[_ViewRef, object]] = []

    def read_view(v: _ViewRef):
        for seen, rec in read_memo:
            if seen.buffer is v.buffer and _same(seen.stage, v.stage) and \
                    _same(seen.row0, v.row0) and _same(seen.rows, v.rows):
                return rec
        rec = _read_view(v)
        read_memo.append((v, rec))
        return rec

    def _rows_named(v: _ViewRef, paired: ViewInfo, idx, trans: bool) -> list:
        # a view naming some rows of the operand (`rows_of` of the wgmma's view): the
        # assertion speaks of those rows only (the paired index within them). A per-box
        # assertion is then one box's query, not a disjunction over every box of the view
        # (conv's narrow per-row boxes: bm / bw boxes a stage)
        # (an MN-major operand's rows are its K: not restricted here)
        if trans or v.rows >= paired.rows:
            return []
        off = z3.simplify(_num(v.row0) - _num(paired.row0))
        if not z3.is_int_value(off):
            raise exprs.ExprError(f"the view's rows {v.row0}.. are not a fixed offset into "
                                  f"the wgmma operand's rows {paired.row0}..")
        first = off.as_long()
        rows = [idx >= first, idx < first + v.rows]
        premises.extend(rows)
        return rows

    def _read_view(v: _ViewRef):
        if wg is not None:
            inner, av, bv = wg
            m, n, kk = idx_vars
            site = wg_site.site if wg_site else a.site
            # the writers that cannot hold the element dropped (`_pruned`): for a view naming
            # some rows, those outside them; for any, the copies of a stage's other rows (a
            # packed conv step's other atoms), whose cases `_by_writer` would ask otherwise
            if _matches(v, av):
                rows = _rows_named(v, av, m, inner.trans_a)
                rec = model.read_smem(av, b_index(av, m, kk, inner.k_extent, inner.trans_a),
                                      site)
                return _pruned(rec, m, rows + [m >= 0, m < 64] + a.site.constraints())
            rows = _rows_named(v, bv, n, inner.trans_b)
            rec = model.read_smem(bv, b_index(bv, n, kk, inner.k_extent, inner.trans_b), site)
            return _pruned(rec, n, rows + [n >= 0, n < shape[1]] + a.site.constraints())
        view = ViewInfo(v.buffer, v.buffer, v.stage, v.row0, v.rows, _view_cols(model, v), op)
        i, j = _bidx(idx_vars, (v.rows, view.cols))
        return model.read_smem(view, (i, j), a.site)

    def field(obj, name):
        if isinstance(obj, _ViewRef):
            rec = read_view(obj)
        elif isinstance(obj, tuple) and obj[0] == "tile":
            state = a.tiles.get(obj[1].id)
            if state is None:
                raise exprs.ExprError(f"tile {obj[1]} has no tags here")
            if wg is not None:
                tidx = tuple(idx_vars[:2])
            else:
                tidx = _bidx(idx_vars, state.shape)
            rec = state.fn(tidx)
        else:
            raise exprs.ExprError(f".{name} of a scalar; use the scalar itself")
        if not any(rec is seen for seen in records):
            records.append(rec)
        if name not in rec.fields:
            raise exprs.ExprError(f"no tag field {name!r}; this data has "
                                  f"{sorted(k for k in rec.fields)}")
        val = rec.fields[name]
        premises.extend(val.cond)
        return val.term
    claim = model.eval_tag_expr(op.expr, op.refs, ref_values=tuple(
        r for r in buf_terms), field_fn=field, call_view=lambda vals: _ViewRef(*vals),
        division="c")
    claim = claim if isinstance(claim, z3.BoolRef) else _num(claim) != 0
    for rec in records:
        premises += list(rec.cond) + [rec.defined]
    premises += model.axiom_instances([claim] + premises)
    subject = f"tag assertion `{op.expr}`" + (f" ({op.message})" if op.message else "")

    def decode(zm, violated):
        wit = W.context(model, zm, a.site)
        iv = tuple(value(zm, i) for i in idx_vars)
        if wg is not None:
            wit.update({"accumulator": iv[:2], "k_in_tile": iv[2]})
            wit.update(W.acc_thread(iv[0], iv[1]))
        else:
            wit["element"] = iv
        fields = []
        for rec in records:
            fields.append({k: value(zm, v.term) for k, v in rec.fields.items()
                           if k not in ("tensor",)})
        wit["tags"] = fields
        who = f"thread {wit['thread']} {wit['register']}, " if "register" in wit else ""
        return W.placed(f"{who}{'accumulator ' + str(iv[:2]) + ' k ' + str(iv[2]) if wg else 'element ' + str(iv)}"
                        f": the tags are {fields}" + (f" — {op.message}" if op.message else ""),
                        wit), wit
    claims = _by_writer(op.expr, claim, records)
    return Obligation("tag.assert", op.loc, subject, premises, claims, decode,
                      minimize=list(idx_vars) + [s.var for s in a.site.scopes
                                                 if s.var is not None],
                      separately=len(claims) > 1)


def _collect(text, model, refs, call_view):
    """Run the expression once with dummy fields to find the views it names."""
    def field(obj, name):
        return z3.IntVal(0)
    try:
        model.eval_tag_expr(text, (), ref_values=tuple(refs), field_fn=field,
                            call_view=call_view)
    except exprs.ExprError:
        pass


def _matches(v: _ViewRef, view: ViewInfo) -> bool:
    return hasattr(v.buffer, "id") and v.buffer.id == view.buffer.id and _same(v.stage,
                                                                               view.stage)


def _view_cols(model: Model, v: _ViewRef) -> int:
    return model.buffers[v.buffer.id].result.type.shape[-1]


def _broadcast(shapes):
    shapes = [tuple(s) for s in shapes if s]
    if not shapes:
        return (1,)
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        out.append(max(s[d] if d < len(s) else 1 for s in shapes))
    return tuple(out)


def _bidx(idx, shape):
    return tuple(z3.IntVal(0) if s == 1 else x for x, s in zip(idx, shape))


def _pruned(rec: Record, idx, premises: list) -> Record:
    """`rec` without the writers that cannot hold the element: those whose row range excludes
    every index in `premises`' range (a view naming some rows of a wgmma operand, conv's one
    box of a warpgroup's rows / bw). Decided on each writer's coverage conjuncts that name
    the index, under premises the obligation holds (so sound: under the obligation such a
    writer's condition is false, and its branch is dead); a small linear query each, an
    unknown answer keeps the writer. The query then carries one box's terms, not every box's
    (each with its own divisions and products: 7 s for 16 boxes, past the solver's budget)."""
    dead = []
    # (only the premises that bound one variable by a numeral: the index range, the
    # warpgroup's; the others, the tile loops' non-linear bounds, would only slow it down)
    bounds = [p for p in premises if _bound(p)]
    for cover, _ in rec.provenance:
        parts = [c for c in (cover.children() if z3.is_and(cover) else [cover])
                 if mentions(c, idx)]
        if not parts:
            continue
        s = z3.SimpleSolver()
        s.set("rlimit", 200_000)
        s.add(*bounds, *parts)
        if s.check() == z3.unsat:
            dead.append(cover)
    if not dead:
        return rec
    gone = {c.get_id() for c in dead}

    def walk(t):
        # the If / Or spine the writers' selection built (model._select, `defined`): a dead
        # writer's branch dropped, the rest of the term untouched
        if z3.is_app_of(t, z3.Z3_OP_ITE):
            cond, rest = t.arg(0), walk(t.arg(2))
            if cond.get_id() in gone:
                return rest
            return t if rest.eq(t.arg(2)) else z3.If(cond, t.arg(1), rest)
        if z3.is_or(t):
            kids = [walk(c) for c in t.children() if c.get_id() not in gone]
            return z3.BoolVal(False, t.ctx) if not kids else kids[0] if len(kids) == 1 \
                else z3.Or(kids)
        return t
    fields = {name: TagVal(walk(v.term), v.bound, v.cond, v.mixed, v.via)
              for name, v in rec.fields.items()}
    return Record(fields, walk(rec.defined), rec.cond, rec.source,
                  tuple((c, who) for c, who in rec.provenance if c.get_id() not in gone))


def _bound(p) -> bool:
    """p is `x op c` (or `c op x`) for a constant x and a numeral c, op a comparison."""
    if not (z3.is_app(p) and p.num_args() == 2 and p.decl().kind() in (
            z3.Z3_OP_LE, z3.Z3_OP_LT, z3.Z3_OP_GE, z3.Z3_OP_GT, z3.Z3_OP_EQ)):
        return False
    x, c = p.arg(0), p.arg(1)
    if z3.is_int_value(x):
        x, c = c, x
    return z3.is_int_value(c) and z3.is_const(x) and \
        x.decl().kind() == z3.Z3_OP_UNINTERPRETED


# the most cases `_by_writer` splits a claim into (the product of its records' writer counts)
WRITER_CASES_MAX = 8
# the least degree (`_degree`) of a claim `_by_writer` splits
SPLIT_MIN_DEGREE = 3


def _degree(term) -> int:
    """The largest number of non-numeral factors in a product of `term`, reading each
    division, remainder and uninterpreted term as one factor and an If as its larger branch:
    (n * D + d) * H is 3, image * H + h is 2, a linear claim 1 (0: numerals only).

    Walked through the C API (`solver.raw`: no wrapper object per subterm; a packed conv's
    claims carry their writers' If spines, and the wrapper walk was a tenth of the assertion's
    Python time, profiled)."""
    L = solver.raw()
    ref = term.ctx.ref()
    get_id, kind_of = L.Z3_get_ast_id, L.Z3_get_ast_kind
    nargs, arg = L.Z3_get_app_num_args, L.Z3_get_app_arg
    decl_of, decl_kind = L.Z3_get_app_decl, L.Z3_get_decl_kind
    memo: dict[int, int] = {}
    kids_of: dict[int, list] = {}
    stack = [(term.as_ast(), False)]
    while stack:
        a, expanded = stack.pop()
        i = get_id(ref, a)
        if i in memo:
            continue
        if not expanded:
            ast_kind = kind_of(ref, a)
            # (a numeral is an application too, of its own ast kind)
            kind = decl_kind(ref, decl_of(ref, a)) \
                if ast_kind in (z3.Z3_APP_AST, z3.Z3_NUMERAL_AST) else None
            if kind in (z3.Z3_OP_ANUM, z3.Z3_OP_TRUE, z3.Z3_OP_FALSE):
                memo[i] = 0
                continue
            if ast_kind == z3.Z3_QUANTIFIER_AST:
                kids = [L.Z3_get_quantifier_body(ref, a)]
            elif kind is None or kind in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD, z3.Z3_OP_REM):
                kids = []
            else:
                kids = [arg(ref, a, k) for k in range(nargs(ref, a))]
            if not kids:
                memo[i] = 1
                continue
            if kind == z3.Z3_OP_ITE:
                kids = kids[1:]
            kids_of[i] = (kind, kids)
            stack.append((a, True))
            stack.extend((k, False) for k in kids if get_id(ref, k) not in memo)
            continue
        kind, kids = kids_of.pop(i)
        degs = [memo[get_id(ref, k)] for k in kids]
        memo[i] = sum(degs) if kind == z3.Z3_OP_MUL else max(degs)
    return memo[get_id(ref, term.as_ast())]


def _by_writer(text: str, claim, records) -> list:
    """The claim as one claim per candidate writer of the elements it reads: for writer i of a
    record (its `provenance`, in the order its fields' If spine tests them: a field is
    `If(cover_0, v_0, If(cover_1, v_1, ... v_last))`), `case_i ⇒ claim_i`, where case_i is
    cover_i with every earlier cover false and claim_i is the claim with those covers
    replaced by their values there (so each field is writer i's term, no If); the last
    writer's case is every other cover false (the spine's default branch). The cases are
    exhaustive and under case_i claim_i is the claim, so the conjunction is the claim: same
    proofs, same models. The claims are asked one query each (Obligation.separately): the
    conjunction as one query (its negation a disjunction of the cases) took 15 s where the
    cases took 0.1-0.3 s each (a 3-d bw 32 box).

    Why: a field read through a writer's If is one term to the solver's arithmetic, and a
    claim equating a non-linear expression of fields (conv's 3-d receptive field: the input
    row (n * D + d) * H + h over the box's n, d, h) with the writer's coordinate (the same
    expression over the writer's terms) needs the monomials of the If term and of the
    writer's to be seen equal: the 3-d row equation ran out of 5M units; split, each case is
    the writer's terms on both sides (0.07-0.10 s each, docs/verify.md "Conv receptive field:
    3-d"). One claim when every record has one writer, when the cases would exceed
    WRITER_CASES_MAX, or when the claim's products have fewer than SPLIT_MIN_DEGREE factors
    (`_degree`): the 2-d receptive fields (image * H: degree 2) are proven as one claim in
    0.14-0.35 s, split in about the same (packed taps) or up to twice that (the halo's)."""
    if _degree(claim) < SPLIT_MIN_DEGREE:
        return [(text, claim)]
    cases = [([], [])]     # (substitutions, case conditions) per combination of writers
    for rec in records:
        covers = [c for c, _ in rec.provenance]
        if len(covers) < 2:
            continue
        if len(cases) * len(covers) > WRITER_CASES_MAX:
            return [(text, claim)]
        nxt = []
        for subs, conds in cases:
            for i, cover in enumerate(covers):
                earlier = [(c, z3.BoolVal(False)) for c in covers[:i]]
                here = earlier + ([(cover, z3.BoolVal(True))] if i < len(covers) - 1 else [])
                nxt.append((subs + here, conds + [z3.Not(c) for c in covers[:i]] +
                            ([cover] if i < len(covers) - 1 else [])))
        cases = nxt
    if len(cases) == 1:
        return [(text, claim)]
    out = []
    for n, (subs, conds) in enumerate(cases):
        out.append((f"{text} (writer case {n + 1} of {len(cases)})",
                    z3.Implies(z3.And(conds), z3.substitute(claim, *subs))))
    return out
