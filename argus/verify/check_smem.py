"""Shared-memory access obligations: ownership through the pipeline, races between
warpgroups, views inside their buffers, proxy fences, and uniform warpgroup-wide operations.

Job (INVARIANTS.md §2.6, §3.4; bug classes 5, 11, 12, 22, 23, 24):
  pipe.release — every read of a pipelined (TMA-filled) buffer happens inside a consume step
      of that pipeline and uses that step's own stage, so the slot is released only after its
      wgmma or TMA-store readers retire (codegen retires them before the empty arrive);
  smem.race — two different warpgroups (roles or instances of one role) never touch the same
      shared bytes without the pipeline ordering them, when one of them writes;
  smem.bounds — a view's rows lie inside its buffer for every warpgroup index and iteration;
  smem.gather-inside — a gather from a shared view (ir.ops.SmemGather) whose trace claimed a
      dim's index inside the view (`inside`: codegen drops that dim's bounds check) names,
      for every element and thread, an index in [0, extent) of that dim;
  (proxy fences and the waits before slot releases are explicit ops: check_sync.py);
  uniform — wgmma and pipeline steps never sit under a condition that varies per thread.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.verify import witness as W
from argus.verify.model import Model, ReadSite, Site, _num, _stage_eq, _subst
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int, mentions

def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    o, f = _ownership(model)
    obs += o
    finds += f
    obs += _races(model)
    o, f = _tma_overlaps(model)
    obs += o
    finds += f
    obs += _bounds(model)
    o, f = _gather_inside(model)
    obs += o
    finds += f
    finds += _uniform(model)
    finds += _dead_copies(model)
    return obs, finds


def _dead_copies(model: Model) -> list[Finding]:
    """smem.dead: a buffer TMA copies fill that no op reads. An IR fact: an op reads a
    buffer when it takes the buffer or a view of it as an operand, unless it only writes it
    (the TMA copy's destination, stmatrix) or derives another view from it (whose readers
    count). Conservative: any other op that names the buffer (a tag assertion, a lowered
    barrier op) counts as a reader, so only a buffer nothing but its writers name is
    reported. A warning: dead data is no wrong output by itself, but the op meant to read
    it read another buffer (P V reading K's buffer twice, V's never): the finding lists the
    reads of the buffers filled beside it, the lines a fix edits."""
    tma = {bid: [w for w in ws if w.kind == "tma"] for bid, ws in model.writes.items()}
    tma = {bid: ws for bid, ws in tma.items() if ws}
    if not tma:
        return []

    def buffer_of(v):
        vi = model.views.get(v.id)
        return vi.buffer.id if vi is not None else v.id

    read: set[int] = set()
    for op in model.kernel.walk():
        if isinstance(op, (O.TmaLoad, O.StMatrix)):
            continue
        if any(r.id in model.views for r in op.results()):
            continue   # a view of a view: its own readers count
        read |= {buffer_of(v) for v in op.operands()}
    read |= {r.view.buffer.id for r in model.reads}
    out = []
    for bid, ws in tma.items():
        if bid in read:
            continue
        first = ws[0]
        steps = {w.step.site.seq for w in ws if w.step is not None}
        beside = {w.view.buffer.id for b2, ws2 in tma.items() if b2 != bid for w in ws2
                  if w.step is not None and w.step.site.seq in steps}
        readers = sorted({f"{r.view.buffer} by {r.kind} at {r.op.loc}" for r in model.reads
                          if r.view.buffer.id in beside})
        buf = str(first.view.buffer)
        tensor = first.tensor.name if first.tensor is not None else "a tensor"
        wit = {"buffer": buf, "tensor": tensor,
               "copies": [str(w.op.loc) for w in ws][:4],
               "reads_beside": readers[:6]}
        msg = (f"{buf} is filled from {tensor} by the TMA copy at {first.op.loc} but no op "
               f"reads it" + (f"; the buffers filled in the same step are read: "
                              f"{'; '.join(readers[:6])}" if readers else ""))
        out.append(Finding("smem.dead", first.op.loc, f"TMA copy into {buf}", "warning",
                           msg, wit))
    return out


def _tma_buffers(model: Model) -> dict[int, list]:
    return {bid: [w for w in ws if w.kind == "tma"] for bid, ws in model.writes.items()
            if any(w.kind == "tma" for w in ws)}


def _ownership(model: Model):
    obs, finds = [], []
    tma = _tma_buffers(model)
    for bid, writes in tma.items():
        pipes = {w.step.pipe.id for w in writes if w.step is not None}
        pipe = model.pipes[next(iter(pipes))] if pipes else None
        buf = model.buffers[bid].result
        if pipe is not None and any(w.view.stage is None for w in writes) and pipe.stages > 1:
            w = next(w for w in writes if w.view.stage is None)
            finds.append(Finding("smem.race", w.op.loc, f"TMA into {buf}", "violated",
                                 f"{buf} has no stages but pipeline {pipe.op.result} has "
                                 f"{pipe.stages}: step n+1's copy overwrites the buffer while "
                                 f"step n is still read", fix="index the buffer by the stage "
                                                              "(ag.smem((S, rows, cols)))"))
        if any(w.kind == "generic" for w in model.writes.get(bid, [])):
            g = next(w for w in model.writes[bid] if w.kind == "generic")
            finds.append(Finding("smem.race", g.op.loc, f"stmatrix into {buf}", "violated",
                                 f"{buf} is filled by TMA through the pipeline and also written "
                                 f"by stmatrix at {g.op.loc}: the writes race"))
        for r in model.reads:
            if r.view.buffer.id != bid:
                continue
            obs_r, finds_r = _owned_read(model, r, pipe)
            obs += obs_r
            finds += finds_r
    return obs, finds


def _owned_read(model: Model, r: ReadSite, pipe):
    subject = f"{r.kind} of {r.view.buffer} at {r.op.loc}"
    consume = None
    for s in reversed(r.site.scopes):
        if s.kind == "consume" and pipe is not None and s.op.pipe.id == pipe.op.result.id:
            consume = s
            break
    if consume is None:
        wit = {"reader": r.kind, "line": str(r.op.loc)}
        msg = W.by_site(model, r.site,
                        f"{r.view.buffer} is filled by pipeline "
                        f"{pipe.op.result if pipe else '?'} but this {r.kind} reads it outside "
                        f"any consume step of that pipeline: the slot is released (and may "
                        f"be refilled by the producer) before this reader runs or retires",
                        wit)
        return [], [Finding("pipe.release", r.op.loc, subject, "violated", msg, wit,
                            fix="move the read inside `with pipe.consume() as st:` and index "
                                "the buffer with st")]
    step = model.steps_by_stage[consume.op.stage.id]
    if r.view.stage is None:
        return [], []
    prem = list(model.premises) + r.site.constraints()
    claim = _num(r.view.stage) == step.stage_term

    def decode(zm, violated):
        wit = W.context(model, zm, r.site)
        own, used = value(zm, step.stage_term), value(zm, _num(r.view.stage))
        wit.update({"owned_stage": own, "read_stage": used})
        return W.placed(f"consume step n = {value(zm, step.counter)} owns slot {own} but "
                        f"the {r.kind} reads slot {used}, which the producer may be "
                        f"refilling", wit), wit
    return [Obligation("pipe.release", r.op.loc, subject, prem,
                       [("reads its own stage", claim)], decode,
                       minimize=[s.var for s in r.site.scopes if s.var is not None])], []


def _accesses(model: Model):
    """(kind, site, view, op, the ReadSite / WriteSite) for every generic-proxy smem access,
    writes first."""
    out = []
    for ws in model.writes.values():
        for w in ws:
            if w.kind == "generic":
                out.append(("write", w.site, w.view, w.op, w))
    tma = _tma_buffers(model)
    for r in model.reads:
        if r.view.buffer.id not in tma:
            out.append(("read", r.site, r.view, r.op, r))
    return out


def _instance_renaming(a: Site, b: Site):
    """Fresh copies of b's variables, and the condition that a and b are different
    warpgroups (same role: different index; different roles: always)."""
    pairs = [(v, fresh_int(f"{v}@2")) for v in b.scope_vars()]
    if a.role is None or b.role is None:
        return pairs, None
    if a.role is not b.role:
        return pairs, z3.BoolVal(True)
    if a.role.warpgroups == 1:
        return pairs, None
    wg = a.role.index.id
    return pairs, ("wg", wg)


def gathers_across_warpgroups(read, write) -> bool:
    """Whether a shared gather `read` (a ReadSite) and a generic write `write` (a WriteSite)
    of one buffer are two warpgroups' accesses in one role of several: sync.exchange's
    pair (check_sync._across_warpgroups), which _races leaves to it."""
    role = read.site.role
    return read.kind == "smem-gather" and write.kind == "generic" and role is not None and \
        write.site.role is role and role.warpgroups > 1


def _races(model: Model) -> list[Obligation]:
    obs = []
    acc = _accesses(model)
    for i, (k1, s1, v1, op1, a1) in enumerate(acc):
        for k2, s2, v2, op2, a2 in acc[i:]:
            if "write" not in (k1, k2) or v1.buffer.id != v2.buffer.id:
                continue
            if k1 != k2 and gathers_across_warpgroups(*((a2, a1) if k1 == "write"
                                                        else (a1, a2))):
                # a gather and a write of two warpgroups of one role: sync.exchange's, which
                # decides it element by element (the gather's indices, not its view's rows)
                continue
            pairs, diff = _instance_renaming(s1, s2)
            if diff is None:
                continue
            def sub(t, pairs=pairs):
                t = t if isinstance(t, z3.BoolRef) else _num(t)
                return z3.substitute(t, *pairs) if pairs else t
            if isinstance(diff, tuple):
                wgv = model.sym[diff[1]]
                different = wgv != sub(wgv)
            else:
                different = diff
            r1, r2 = _num(v1.row0), sub(v2.row0)
            overlap = z3.And(_stage_eq(v1.stage, None if v2.stage is None else sub(v2.stage)),
                             r1 < r2 + v2.rows, r2 < r1 + v1.rows)
            # the `ag.when`s around the two accesses are part of the claim, not premises: a
            # pair no two warpgroups both run (one warpgroup's write under `wg == 0`) then has
            # satisfiable premises and its claim proven, not an empty model
            (guard1, rest1), (guard2, rest2) = _guards(s1), _guards(s2)
            prem = list(model.premises) + rest1 + \
                [z3.substitute(c, *pairs) if pairs else c for c in rest2] + [different]
            both_run = z3.And(guard1 + [z3.substitute(c, *pairs) if pairs else c
                                        for c in guard2])
            subject = f"{k1} at {op1.loc} vs {k2} at {op2.loc} on {v1.buffer}"

            def decode(zm, violated, s1=s1, s2=s2, r1=r1, r2=r2, v1=v1, v2=v2, pairs=pairs,
                       k1=k1, k2=k2, op1=op1, op2=op2):
                w1 = W.context(model, zm, s1)
                wg2 = value(zm, z3.substitute(model.sym[s2.role.index.id], *pairs)) \
                    if s2.role is not None and pairs else 0
                lo = max(value(zm, r1), value(zm, r2))
                wit = {"first": {"op": str(op1.loc), "role": s1.role.name if s1.role else None,
                                 "warpgroup": w1.get("warpgroup"),
                                 "rows": (value(zm, r1), value(zm, r1) + v1.rows)},
                       "second": {"op": str(op2.loc), "role": s2.role.name if s2.role else None,
                                  "warpgroup": wg2,
                                  "rows": (value(zm, r2), value(zm, r2) + v2.rows)},
                       "row": lo, "cta": w1.get("cta")}
                # who: each access's role, warpgroup and thread (thread 0 of those W.context
                # says run it), in the witness's first / second and in the words
                wit["first"].update({k: w1[k] for k in ("thread", "threads")})
                wit["second"].update({"thread": 0, "threads": W.context(model, zm, s2)["threads"]})
                wit.update({k: w1[k] for k in ("role", "warpgroup", "thread", "threads")
                            if k in w1})
                one = W.said({**wit["first"], "role": wit["first"]["role"] or "cta"}) \
                    if s1.role else W.said({"thread": 0})
                two = W.said({**wit["second"], "role": wit["second"]["role"]}) \
                    if s2.role else W.said({"thread": 0})
                return (f"{one} ({k1} at {op1.loc}) and {two} ({k2} at {op2.loc}) both touch "
                        f"row {lo} of {v1.buffer} with no ordering between them"), wit
            obs.append(Obligation("smem.race", op1.loc, subject, prem,
                                  [("disjoint rows", z3.Not(z3.And(both_run, overlap)))],
                                  decode))
    return obs


def _guards(site: Site) -> tuple[list, list]:
    """The site's `ag.when` conditions, and its other constraints (loop ranges, roles)."""
    guard = [c for sc in site.scopes if sc.kind == "if" for c in sc.constraints]
    rest = [c for sc in site.scopes if sc.kind != "if" for c in sc.constraints]
    return guard, rest


def _tma_overlaps(model: Model):
    """The TMA copies that fill one slot in one step — this CTA's own, and in a cluster the
    multicast copies of every CTA (rank substituted) — write disjoint rows: async copies
    complete in no defined order, so overlapping ones leave the slot's contents undefined."""
    obs: list[Obligation] = []
    finds: list[Finding] = []
    cs = model.cluster_size if model.rank_digits else 1
    ranks = list(range(cs)) if model.rank_digits else [None]
    for pipe in model.pipes.values():
        for step in (s for s in pipe.steps if s.kind == "produce"):
            writes = [w for ws in model.writes.values() for w in ws
                      if w.kind == "tma" and w.step is step]
            if len(writes) + sum(cs - 1 for w in writes if w.op.multicast) < 2:
                continue
            seen: set = set()
            for r in ranks:
                inst = []
                for w in writes:
                    for q in (range(cs) if w.op.multicast and model.rank_digits else [r]):
                        pre = model.peer_pairs(q)
                        # the copy's own guards (conditions inside the produce step), as
                        # CTA rank q evaluates them
                        guards = [z3.simplify(_subst(c, pre)) for sc in w.site.scopes
                                  if sc.kind == "if" for c in sc.constraints]
                        if any(z3.is_false(g) for g in guards):
                            continue  # this CTA never issues the copy
                        inst.append((w, q if w.op.multicast else None,
                                     _subst(_num(w.view.row0), pre), _subst(w.view.stage, pre),
                                     [g for g in guards if not z3.is_true(g)]))
                for i, (w1, q1, a1, s1, g1) in enumerate(inst):
                    for w2, q2, a2, s2, g2 in inst[i + 1:]:
                        if w1.view.buffer.id != w2.view.buffer.id:
                            continue
                        # the pair by the writes' program points (Site.seq, values)
                        key = (w1.site.seq, q1, w2.site.seq, q2)
                        if key in seen:
                            continue
                        seen.add(key)
                        o, f = _overlap(model, step, w1, q1, a1, s1, w2, q2, a2, s2, r,
                                        g1 + g2)
                        obs += o
                        finds += f
    return obs, finds


def _who(w, q) -> str:
    return f"TMA copy at {w.op.loc}" + (f" (multicast by cluster rank {q})" if q is not None
                                        else "")


def _overlap(model: Model, step, w1, q1, a1, s1, w2, q2, a2, s2, rank, guards):
    buf = w1.view.buffer
    subject = f"{_who(w1, q1)} vs {_who(w2, q2)} into {buf}"
    n1, n2 = w1.view.rows, w2.view.rows
    overlap = z3.And(_stage_eq(s1, s2), a1 < a2 + n2, a2 < a1 + n1)
    d1, d2 = z3.simplify(a1), z3.simplify(a2)
    if not guards and z3.is_int_value(d1) and z3.is_int_value(d2) and z3.is_true(z3.simplify(
            _stage_eq(s1, s2))):
        lo, hi = d1.as_long(), d2.as_long()
        if not (lo < hi + n2 and hi < lo + n1):
            return [], [Finding("smem.race", w1.op.loc, subject, "proven")]
        row = max(lo, hi)
        wit = {"first": {"op": str(w1.op.loc), "rows": (lo, lo + n1), "cluster_rank": q1},
               "second": {"op": str(w2.op.loc), "rows": (hi, hi + n2), "cluster_rank": q2},
               "row": row, "pipeline_step": "every"}
        if rank is not None:
            wit["this_rank"] = rank
        msg = W.by_site(model, w2.site,
                        f"{_who(w1, q1)} writes rows [{lo}, {lo + n1}) and {_who(w2, q2)} "
                        f"rows [{hi}, {hi + n2}) of the same slot of {buf} in the same "
                        f"pipeline step: row {row} is written twice by unordered async "
                        f"copies, so what the consumer reads there is undefined", wit)
        return [], [Finding("smem.race", w2.op.loc, subject, "violated", msg, wit,
                            fix="give each copy (and each CTA of the cluster) its own rows")]
    prem = list(model.premises) + step.site.constraints() + list(guards)

    def decode(zm, violated):
        wit = W.context(model, zm, step.site)
        r1, r2 = value(zm, a1), value(zm, a2)
        wit.update({"first": {"op": str(w1.op.loc), "rows": (r1, r1 + n1), "cluster_rank": q1},
                    "second": {"op": str(w2.op.loc), "rows": (r2, r2 + n2),
                               "cluster_rank": q2}, "row": max(r1, r2)})
        return W.placed(f"{_who(w1, q1)} writes rows [{r1}, {r1 + n1}) and {_who(w2, q2)} "
                        f"rows [{r2}, {r2 + n2}) of the same slot of {buf} in pipeline step "
                        f"{wit.get('pipeline_step')}: row {max(r1, r2)} is written twice by "
                        f"unordered async copies", wit), wit
    return [Obligation("smem.race", w2.op.loc, subject, prem,
                       [("disjoint rows", z3.Not(overlap))], decode,
                       minimize=[s.var for s in step.site.scopes if s.var is not None])], []


def _bounds(model: Model) -> list[Obligation]:
    obs = []
    seen = set()
    sites = [(r.site, r.view, r.op) for r in model.reads]
    for ws in model.writes.values():
        sites += [(w.site, w.view, w.op) for w in ws]
    for site, view, op in sites:
        if view.value.id in seen:
            continue
        seen.add(view.value.id)
        t = model.buffers[view.buffer.id].result.type
        rows = t.shape[-2]
        stages = t.shape[0] if len(t.shape) == 3 else None
        r0 = _num(view.row0)
        claims = [("row0 >= 0", r0 >= 0), (f"row0 + {view.rows} <= {rows}",
                                           r0 + view.rows <= rows)]
        if stages is not None and view.stage is not None:
            st = _num(view.stage)
            claims += [("stage in range", z3.And(st >= 0, st < stages))]
        prem = list(model.premises) + site.constraints()

        def decode(zm, violated, site=site, r0=r0, view=view, rows=rows):
            wit = W.context(model, zm, site)
            # the line that defined the view (`sA[st].rows_of(...)`): the one a fix edits,
            # where the op reading it is only where it was used
            wit.update({"rows": (value(zm, r0), value(zm, r0) + view.rows),
                        "buffer_rows": rows, "view_at": str(view.op.loc)})
            return W.placed(f"the view covers rows [{value(zm, r0)}, "
                            f"{value(zm, r0) + view.rows}) of {view.buffer}, which has {rows} "
                            f"rows per stage (view defined at {view.op.loc})", wit), wit
        obs.append(Obligation("smem.bounds", op.loc, f"view of {view.buffer} at {op.loc}", prem,
                              claims, decode))
    return obs


def _gather_inside(model: Model) -> tuple[list[Obligation], list[Finding]]:
    """smem.gather-inside, per gather site and claimed dim: SmemGather.inside comes from the
    tracer's static intervals (dsl/api.py gather: aranges and constants), and codegen reads
    such a dim without its guard, so an index outside [0, extent) there would read another
    row's (or buffer's) shared bytes instead of `other`, which the model (transfer/memory.py
    smem_gather: undefined outside the view) would never see. The claim is proven here on
    the model's own index terms, every element of the result and so every thread; an index
    the model does not know (no `value` field) is unknown, never proven."""
    obs: list[Obligation] = []
    finds: list[Finding] = []
    for r in model.reads:
        op = r.op
        if r.kind != "smem-gather" or not getattr(op, "inside", ()):
            continue
        shape = op.result.type.shape
        idx = tuple(fresh_int(f"g{d}") for d in range(len(shape)))
        prem = list(model.premises) + r.site.constraints() + \
            [z3.And(i >= 0, i < n) for i, n in zip(idx, shape)]
        subject = f"gather from {r.view.buffer} at {op.loc}"
        claims, terms = [], {}
        for d in op.inside:
            x, ishape = r.indices[d]
            if ishape is None:
                term = _num(x)
            else:
                rec = x.fn(tuple(z3.IntVal(0) if s == 1 else c for c, s in zip(idx, ishape)))
                v = rec.fields.get("value")
                if v is None:
                    finds.append(Finding(
                        "smem.gather-inside", op.loc, subject, "unknown",
                        f"the trace claims the gather's dim-{d} index {op.indices[d]} inside "
                        f"the view {op.src} (its bounds check dropped), but the verifier "
                        f"does not model that index's value, so the claim is not checked"))
                    continue
                term = _num(v.term)
                prem += list(rec.cond)
            extent = r.view.rows if d == 0 else r.view.cols
            terms[d] = (term, extent)
            claims.append((f"dim-{d} index in [0, {extent})",
                           z3.And(term >= 0, term < extent)))
        if not claims:
            continue

        def decode(zm, violated, r=r, op=op, idx=idx, terms=terms):
            wit = W.context(model, zm, r.site)
            element = tuple(value(zm, i) for i in idx)
            wit.update(W.holder(model, op.result.type, element, r.site))
            bad = [(d, value(zm, t), n) for d, (t, n) in terms.items()
                   if not 0 <= value(zm, t) < n]
            d, got, n = bad[0] if bad else next((d, value(zm, t), n)
                                                for d, (t, n) in terms.items())
            axis = "row" if d == 0 else "column"
            # the index's defining line (the expression a fix edits) where the model has it
            at = _defining_ops(model).get(op.indices[d].id)
            at = at.loc if at is not None else op.loc
            wit.update({"element": element, "dim": d, "index": got, "extent": n,
                        "index_value": str(op.indices[d]), "index_at": str(at),
                        "view": str(op.src), "buffer": str(r.view.buffer),
                        "view_at": str(r.view.op.loc)})
            return W.placed(
                f"element {element} of the gather reads {axis} {got} of its view of "
                f"{r.view.buffer} (the {axis} index {op.indices[d]}, defined at {at}), "
                f"outside the view's {n} {axis}s (view defined at {r.view.op.loc}): the "
                f"trace claimed this index inside the view, so codegen dropped its bounds "
                f"check and the thread reads other shared bytes instead of `other`",
                wit), wit
        obs.append(Obligation(
            "smem.gather-inside", op.loc, subject, prem, claims, decode, minimize=list(idx),
            fix="keep the index inside [0, extent) for every element (clamp it, or route an "
                "outside element through ag.where(..., -1) so its guard stays); a claim the "
                "index breaks is a bug of the tracer's interval (ir/numeric.py)"))
    return obs, finds


def _defining_ops(model: Model) -> dict:
    """value id -> the op defining it, from the IR (model.def_ops misses the ops whose
    transfer sets a tile directly, such as elementwise arithmetic); built once per model."""
    got = model.__dict__.get("_defining_ops")
    if got is None:
        got = model.__dict__["_defining_ops"] = {
            r.id: op for op in model.kernel.walk()
            for r in (getattr(op, name, None) for name in getattr(op, "RESULTS", ()))
            if r is not None and hasattr(r, "id")}
    return got


def _uniform(model: Model) -> list[Finding]:
    out = []
    tids = [v for name, info in model.vars.items() if info.kind == "thread"
            for v in [z3.Int(name)]]
    if not tids:
        return out
    sites = [(w.site, w.op) for w in model.wgmmas] + \
        [(s.site, s.op) for p in model.pipes.values() for s in p.steps]
    for site, op in sites:
        for sc in site.scopes:
            if sc.kind == "if" and any(mentions(c, t) for c in sc.constraints for t in tids):
                out.append(Finding("uniform", op.loc, f"{op.NAME} at {op.loc}", "violated",
                                   f"{op.NAME} is warpgroup-wide (.sync.aligned) but runs under "
                                   f"the thread-dependent condition at {sc.op.loc}"))
                break
    return out
