"""Structural facts of a kernel's wgmma sites that more than one check reads: the op defining
each value, an accumulator's chain back to its initial value, whether it is carried across a
loop, the (tensor, field) a site reads along k and its operand records, a field's extent. Below
both check_wgmma (per-site claims) and promotion (the promoted sum's k-once), so neither imports
the other. Each answer is computed once per model (memoized on the model) and read only.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify.model import Model, WgmmaSite, b_index
from argus.verify.tagdomain import align_operands, fresh_int, with_fresh


def _minimize(site: WgmmaSite) -> list:
    return [s.var for s in site.site.scopes if s.kind == "loop"]


def _acc_chain(defs: dict, vid: int) -> list[int]:
    """The values an accumulator is made of, from the wgmma's operand back to where it was
    (re)initialized: through variables (`var` takes its initial value) and rescaling by a
    factor that does not read it (`o * alpha`, FlashAttention's rescale). It stops at the op
    that made the value (zeros, a load, another wgmma's result)."""
    chain = [vid]
    while True:
        op = defs.get(chain[-1])
        if isinstance(op, O.Var) and isinstance(op.init.type, TileType):
            nxt = op.init.id
        elif isinstance(op, O.Elementwise) and op.fn == "mul" and len(op.args) == 2:
            shape = tuple(op.result.type.shape)
            full = [a for a in op.args if isinstance(a.type, TileType)
                    and tuple(a.type.shape) == shape]
            if len(full) != 1:
                break
            nxt = full[0].id
        else:
            break
        if nxt in chain:
            break
        chain.append(nxt)
    return chain


def _carried_across(chain: list[int], loop: O.For, defs: dict) -> bool:
    """Whether the accumulator made of `chain` carries its value from one iteration of
    `loop` to the next: the wgmma accumulates in place into a value that lives across the
    loop (defined outside it), or a variable of the chain is defined outside the loop and
    assigned inside it (the loop-carried update). An accumulator made afresh in every
    iteration (zeros inside a persistent kernel's tile loop) is not, whatever the nesting."""
    # the values defined inside the loop, by IR name (a value is inside iff its def op is)
    inside = {v.id for x in loop.body.walk() for v in x.results()}
    if chain[0] not in defs or chain[0] not in inside:
        return True
    assigned = {x.dst.id for x in loop.body.walk() if isinstance(x, O.Assign)}
    return any(isinstance(defs.get(v), O.Var) and v not in inside and v in assigned
               for v in chain)


def _k_key(model: Model, site: WgmmaSite, name: str):
    """What a site reads along k: (tensor index, field) as a simplified term, or None when it
    does not read one tensor's field `name`. From A, or from B when A holds computed data
    (FlashAttention's P in registers: its k is the key V's rows are read at). A structural
    fact of the site: decided once per (site, field) and model (k-once asks it for every
    sibling candidate of every site, and each answer builds a whole operand record)."""
    # keyed by the site's program point (Site.seq, a value; one site per wgmma op)
    memo = model.__dict__.setdefault("_wgmma_k_keys", {})
    per_site = memo.get(site.site.seq)
    if per_site is None:
        per_site = memo[site.site.seq] = {}
    if name not in per_site:
        per_site[name] = _k_key_of(model, site, name)
    return per_site[name]


def _operands(model: Model, site: WgmmaSite):
    """(m, n, kk, A's record at (m, kk), B's at (n, kk), the fresh variables A's computation
    created) of a site, once per model and site: the site's obligations and the structural
    questions other sites' k-once asks of it (`_k_key_of`) read the same records (each was
    built again per question: a register A operand is the whole softmax's record)."""
    memo = model.__dict__.setdefault("_wgmma_operands", {})   # by Site.seq, as _k_key's
    got = memo.get(site.site.seq)
    if got is None:
        op = site.op
        m, n, kk = fresh_int("m"), fresh_int("n"), fresh_int("kk")
        ra, own_a = with_fresh(lambda: model.wgmma_a(site, m, kk))
        rb = model.read_smem(site.b, b_index(site.b, n, kk, op.k_extent, op.trans_b),
                             site.site)
        # B's fields named as the accumulator's transfer names them (self-attention's one
        # dim name for the query and the key: tagdomain.align_operands)
        rb = align_operands(ra, rb, m, n, kk, list(model.tensors.values()))
        got = memo[site.site.seq] = (m, n, kk, ra, rb, own_a)
    return got


def _k_key_of(model: Model, site: WgmmaSite, name: str):
    _, _, _, rec, rb, _ = _operands(model, site)
    if "tensor" not in rec.fields:
        rec = rb
    tensor = rec.fields.get("tensor")
    if name not in rec.fields or tensor is None:
        return None
    t = z3.simplify(tensor.term)
    return (t.as_long(), name) if z3.is_int_value(t) else None


def _field_extent(model: Model, rec, name: str):
    """The extent of coordinate `name`: its tensor dim's, or for a user coordinate (no dim:
    paged KV's logical `key`) the record's own `<name>_extent` user tag where the kernel
    states one (`ag.tag_tensor(K, key=..., key_extent=...)`), else None."""
    for info in model.tensors.values():
        if name in info.field_names:
            d = info.field_names.index(name)
            return info.extent(model, d)
    declared = rec.fields.get(f"{name}_extent") if rec is not None else None
    return declared.term if declared is not None and declared.is_point else None
