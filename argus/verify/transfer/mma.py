"""Transfer function of wgmma: the accumulator's tags after D += A . B.

Job: record the wgmma site (its A operand from a shared-memory view or from registers, its B
view, the accumulator before it and the op that last (re)initialized that accumulator) and its
shared-memory reads; the new accumulator element (m, n) carries its previous tags combined with
the tags of A[m, k] and B[n, k] reduced over the contracted k (`tagdomain.reduce_over`).

Invariant kept: the per-element bookkeeping of a copy (tensor, iteration, step, stage) does not
flow into the accumulator, only the data's tags; A and B are resolved at the wgmma's site
(`Model.wgmma_a`, `Model.read_smem`), so they see what the pipeline allows this step to see.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.verify.tagdomain import (Record, align_operands, combine, fresh_int, reduce_over,
                                    referenced_conds, through, with_fresh)
from argus.verify.transfer.domain import ReadSite, Rule, TileState, WgmmaSite, b_index
from argus.verify.transfer.values import FACTS


def wgmma(m: Model, op: O.Wgmma, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    a, b = m.views.get(op.a.id), m.views[op.b.id]
    a_tile = m.tile(op.a) if a is None else None  # A from registers
    before = m.tile(op.acc)
    wsite = WgmmaSite(op, site, a, b, before, m._def_seq.get(op.acc.id, 0), a_tile)
    if m._recording:
        m.wgmmas.append(wsite)
        if a is not None:
            m.reads.append(ReadSite("wgmma-a", op, site, a))
        m.reads.append(ReadSite("wgmma-b", op, site, b))
    K = op.k_extent

    def fn(idx, a=a, b=b, before=before, site=site, trans=op.trans_b):
        mm, n = idx
        kk = fresh_int("kk")
        ra, own_a = with_fresh(lambda: m.wgmma_a(wsite, mm, kk))
        rb, own_b = with_fresh(lambda: m.read_smem(b, b_index(b, n, kk, K, trans), site))
        # each operand's tags name the view that selected its rows (the line of
        # `sA[st].rows_of(...)`): a wrong m or n at the store points there (store.coords)
        if a is not None:
            ra = through(ra, f"the A operand's view at {a.op.loc}")
        rb = through(rb, f"the B operand's view at {b.op.loc}")
        # overwrite (scale-d = 0): nothing of the accumulator's old value flows in
        prev = Record(source="an overwritten accumulator") if op.overwrite else before.fn(idx)
        # (the product is no longer the value the accumulator had: its value facts go)
        fields = {k: v for k, v in prev.fields.items() if k not in FACTS}
        # one dim name on two tensors' rows (self-attention's Q["S", D], K["S", D]): B's
        # lineage under its own name (`align_operands`), not lost under A's
        rb = align_operands(ra, rb, mm, n, kk, list(m.tensors.values()))
        for rec in (ra, rb):
            for name, val in rec.fields.items():
                if name in ("tensor", "iter", "step", "stage", "value", "live"):
                    continue
                val = reduce_over(val, kk, 0, K, f"wgmma k at {op.loc}")
                if name in fields:
                    fields[name] = combine(fields[name], val, f"wgmma at {op.loc}")
                else:
                    fields[name] = val
        # the operands' conditions stay where their auxiliaries do (a k-slice whose lineage
        # `combine` dropped leaves none: referenced_conds)
        return Record(fields, prev.defined, prev.cond + referenced_conds(
            fields, prev.defined, (), [(ra, own_a), (rb, own_b)]),
            f"wgmma accumulator at {op.loc}")
    m.tiles[op.acc.id] = TileState(before.shape, "wgmma_acc", fn, op.loc,
                                   f"wgmma accumulator at {op.loc}", valued=False)


RULES: dict[type, Rule] = {
    O.Wgmma: wgmma,
}
