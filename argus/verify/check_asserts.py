"""User tag assertions (`ag.tag_assert`): evaluate the expression over the tags of the tiles
and views it names and prove it for every pairing, thread, iteration and CTA.

Job: turn one `tag.assert` op into one obligation. Pairing (tag_ops.TagAssert): views that
the next wgmma in the same region reads are paired as that wgmma multiplies them (A[m, k] with
B[n, k], the accumulator at [m, n]); tiles and other views pair element-wise with
broadcasting. A field that is a reduction (a row max's `n`, an accumulator's `k`) denotes the
set of its contributors, so `max_tile.q == s.q` fails when any contributor has another q:
this is how a reduction over the wrong axis is caught. Opaque tag functions are uninterpreted
functions; `tag.assume` axioms are instantiated on the ground terms of the query.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import SmemType, TileType
from argus.verify import exprs
from argus.verify import witness as W
from argus.verify.model import AssertSite, Model, ViewInfo, _num, b_index
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int


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

    def _read_view(v: _ViewRef):
        if wg is not None:
            inner, av, bv = wg
            m, n, kk = idx_vars
            site = wg_site.site if wg_site else a.site
            if _matches(v, av):
                return model.read_smem(av, b_index(av, m, kk, inner.k_extent, inner.trans_a),
                                       site)
            return model.read_smem(bv, b_index(bv, n, kk, inner.k_extent, inner.trans_b), site)
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
    return Obligation("tag.assert", op.loc, subject, premises, [(op.expr, claim)], decode,
                      minimize=list(idx_vars) + [s.var for s in a.site.scopes
                                                 if s.var is not None])


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
