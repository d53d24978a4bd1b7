"""wgmma obligations on tags: operands defined, operands agree, each k exactly once.

Job: at every `wgmma(a, b, acc)` (INVARIANTS.md §3.2), for all accumulator elements (m, n),
all k inside the instruction's K, every iteration, warpgroup and CTA:
  * wgmma.defined — A[m, k] and B[n, k] were written (by the TMA copies of the very pipeline
    step this consume owns, or by an earlier shared-memory store);
  * wgmma.agree — fields present on both sides agree: the contracted coordinate (the field
    that varies with k, e.g. `k` of A["M","K"] and B["N","K"]) and every user tag (`expert`);
  * wgmma.k-once — the map (reduction-loop iteration, k in tile) -> k is injective with image
    [0, |domain|) and |domain| >= K, so every k of [0, K) is multiplied exactly once. A
    deliberate permutation of k stays legal (the stronger "k == it*BK + kk" is not required).
All three are linear integer arithmetic over the symbolic iteration (tier LIA).
"""

from __future__ import annotations

import z3

from argus.verify import witness as W
from argus.verify.model import Model, WgmmaSite, _num, b_index
from argus.verify.obligation import Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int, is_coordinate_field, mentions


def _coords_text(zm, rec, model: Model) -> str:
    tensor_ix = rec.fields.get("tensor")
    if tensor_ix is None:
        tags = {k: value(zm, v.term) for k, v in rec.fields.items()
                if v.is_point and k not in ("iter", "step", "stage")}
        return f"computed data with tags {tags}" if tags else (rec.source or "untagged data")
    tid = list(model.tensors)[value(zm, tensor_ix.term)]
    info = model.tensors[tid]
    coords = [value(zm, rec.fields[f].term) for f in info.field_names]
    return W.fmt_elem(info.name, coords)


def obligations(model: Model, site: WgmmaSite) -> list[Obligation]:
    op = site.op
    N = op.acc.type.shape[1]
    K = site.a.cols
    m, n, kk = fresh_int("m"), fresh_int("n"), fresh_int("kk")
    ra = model.read_smem(site.a, (m, kk), site.site)
    rb = model.read_smem(site.b, b_index(site.b, n, kk, K, op.trans_b), site.site)
    ranges = [m >= 0, m < 64, n >= 0, n < N, kk >= 0, kk < K]
    base = list(model.premises) + site.site.constraints() + ranges + list(ra.cond) + \
        list(rb.cond)
    subject = f"wgmma at {op.loc} (a = {site.a.buffer}, b = {site.b.buffer})"

    def decode(zm, violated):
        mv, nv, kv = value(zm, m), value(zm, n), value(zm, kk)
        wit = W.context(model, zm, site.site)
        wit.update(W.acc_thread(mv, nv))
        wit.update({"accumulator": (mv, nv), "k_in_tile": kv, "k_block": kv // 16,
                    "k_in_block": kv % 16})
        a_txt = _coords_text(zm, ra, model) if z3.is_true(zm.eval(ra.defined, True)) else \
            "nothing written there in this step"
        b_txt = _coords_text(zm, rb, model) if z3.is_true(zm.eval(rb.defined, True)) else \
            "nothing written there in this step"
        wit["a_element"] = a_txt
        wit["b_element"] = b_txt
        for key, rec in (("a_written_by", ra), ("b_written_by", rb)):
            for cond, what in rec.provenance:
                if z3.is_true(zm.eval(cond, True)):
                    wit[key] = what
                    break
        msg = (f"warpgroup thread {wit['thread']} (warp {wit['warp']}, lane {wit['lane']}), "
               f"accumulator {wit['register']} = tile element ({mv}, {nv}), k {kv} of the tile "
               f"(k-block {kv // 16}): A operand holds {a_txt}"
               f"{' (' + wit['a_written_by'] + ')' if 'a_written_by' in wit else ''}, B operand "
               f"holds {b_txt}{' (' + wit['b_written_by'] + ')' if 'b_written_by' in wit else ''}; "
               f"violated: {', '.join(violated)}")
        return msg, wit

    obs = [Obligation("wgmma.defined", op.loc, subject, base,
                      [("A element defined", ra.defined), ("B element defined", rb.defined)],
                      decode, minimize=_minimize(site) + [m, n, kk])]
    claims = []
    k_fields = []
    for name in sorted(set(ra.fields) & set(rb.fields)):
        if not is_coordinate_field(name) and name not in _user_fields(model):
            continue
        fa, fb = ra.fields[name], rb.fields[name]
        varies = mentions(fa.term, kk) or mentions(fb.term, kk)
        # a coordinate both operands hold constant over the whole tile is a batch index (batch,
        # head): it must agree too; one that follows m or n (Q's and K's sequence index in
        # self-attention, A @ A^T) is a free index and need not
        batch = not any(mentions(t, v) for t in (fa.term, fb.term) for v in (m, n, kk))
        if name in _user_fields(model) or varies or batch:
            claims.append((f"A.{name} == B.{name}", fa.term == fb.term))
            base = base + list(fa.cond) + list(fb.cond)
            if varies and is_coordinate_field(name):
                k_fields.append(name)
    defined = [ra.defined, rb.defined]
    for claim in claims:  # one query per field: each stays small
        obs.append(Obligation("wgmma.agree", op.loc, subject + f": {claim[0]}", base + defined,
                              [claim], decode, minimize=_minimize(site) + [m, n, kk]))
    for name in k_fields:
        obs.extend(_k_once(model, site, name))
    return obs


def _user_fields(model: Model) -> set[str]:
    out: set[str] = set()
    for info in model.tensors.values():
        out |= set(info.user_fields)
    return out


def _minimize(site: WgmmaSite) -> list:
    return [s.var for s in site.site.scopes if s.kind == "loop"]


def _reduction_loops(model: Model, site: WgmmaSite):
    """Loops entered after the accumulator was (re)initialized: the ones it sums over."""
    def_op = model.def_ops.get(site.op.acc.id)
    out = []
    for s in site.site.loops():
        if def_op is not None and any(x is def_op for x in s.op.body.walk()):
            continue
        out.append(s)
    return out


def _k_once(model: Model, site: WgmmaSite, name: str) -> list[Obligation]:
    op = site.op
    K = site.a.cols
    loops = _reduction_loops(model, site)
    subject = f"k of wgmma at {op.loc} over {len(loops)} loop(s)"
    # two instances that differ in (reduction-loop indices, k); everything else shared
    kk1, kk2, m = fresh_int("kk"), fresh_int("kk"), fresh_int("m")
    ren = [(s.var, fresh_int(f"{s.var}@2")) for s in loops]
    r1 = model.read_smem(site.a, (m, kk1), site.site)
    r2 = model.read_smem(site.a, (m, kk2), site.site)
    f1, f2 = r1.fields.get(name), r2.fields.get(name)
    if f1 is None:
        return []

    def sub(t):
        return z3.substitute(t, *ren) if ren else t
    cons1 = site.site.constraints()
    cons2 = [sub(c) for c in cons1]
    prem = list(model.premises) + cons1 + cons2 + list(r1.cond) + [sub(c) for c in r2.cond] \
        + list(f1.cond) + [sub(c) for c in f2.cond] + \
        [m >= 0, m < 64, kk1 >= 0, kk1 < K, kk2 >= 0, kk2 < K, r1.defined, sub(r2.defined)]
    same_instance = z3.And([kk1 == kk2] + [a == b for a, b in ren])
    t1, t2 = f1.term, sub(f2.term)

    def decode_dup(zm, violated):
        wit = W.context(model, zm, site.site)
        i1 = {str(s.op.loc): value(zm, s.var) for s in loops}
        i2 = {str(s.op.loc): value(zm, b) for s, (_, b) in zip(loops, ren)}
        k = value(zm, t1)
        wit.update({"k": k, "first": {"iteration": i1, "k_in_tile": value(zm, kk1)},
                    "second": {"iteration": i2, "k_in_tile": value(zm, kk2)}})
        return (f"global {name} = {k} is multiplied twice: at iteration {i1} k-in-tile "
                f"{value(zm, kk1)} and at iteration {i2} k-in-tile {value(zm, kk2)}"), wit

    obs = [Obligation("wgmma.k-once", op.loc, subject + ": injective", prem,
                      [(f"distinct (iteration, k) give distinct {name}",
                        z3.Or(same_instance, t1 != t2))], decode_dup,
                      minimize=[s.var for s in loops] + [kk1])]
    # coverage: |domain| = product of trip counts x K, image inside [0, |domain|), |domain| >= K
    size = z3.IntVal(K)
    for s in loops:
        size = size * model.trip_term(s.op)
    extent = _field_extent(model, r1, name)
    prem_one = list(model.premises) + cons1 + list(r1.cond) + list(f1.cond) + \
        [m >= 0, m < 64, kk1 >= 0, kk1 < K, r1.defined]

    def decode_range(zm, violated):
        wit = W.context(model, zm, site.site)
        k = value(zm, t1)
        d = value(zm, size)
        wit.update({"k": k, "k_in_tile": value(zm, kk1), "domain": d})
        if "k range covers the tensor" in violated:
            msg = (f"the loop multiplies {d} values of {name} but the tensor has "
                   f"{value(zm, extent)}: {name} = {d} .. {value(zm, extent) - 1} are never "
                   f"multiplied")
        else:
            msg = f"{name} = {k} lies outside [0, {d}) (the {d} k values the loop visits)"
        return msg, wit

    claims = [(f"{name} in [0, |domain|)", z3.And(t1 >= 0, t1 < size))]
    if extent is not None:
        claims.append(("k range covers the tensor", size >= _num(extent)))
    obs.append(Obligation("wgmma.k-once", op.loc, subject + ": covers [0, K)", prem_one, claims,
                          decode_range, minimize=list(model.params.values())))
    return obs


def _field_extent(model: Model, rec, name: str):
    for info in model.tensors.values():
        if name in info.field_names:
            d = info.field_names.index(name)
            return info.extent(model, d)
    return None
