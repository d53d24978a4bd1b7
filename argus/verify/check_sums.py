"""reduce.slices: a sum of partials adds every slice exactly once (the second half of split-K).

Job (INVARIANTS.md §4 class 2 and 14, for partial sums): a split-K GEMM writes one fp32
partial per K slice, P[s] for s in [0, splits) (wgmma.k-once proves each slice's k once; the
partial is legal because a later sum adds it), and a second kernel adds them: C = P[0] + P[1]
+ ... The tags cannot see that sum: every partial carries the same output coordinates, so
adding P[0] twice and P[1] never, or stopping one slice short, stores right-looking tags.

This check reads the sum itself. For every stored value, the tree of elementwise additions
under it (through conversions and a variable's initial value) has loads of one tensor as leaves;
the dims along which the leaves' offsets differ are the summed dims (the slice index). Then
  * distinct leaves read distinct slices (no slice added twice), and
  * every slice index lies in the tensor's extent, and there are as many leaves as slices
    (the product of the summed dims' extents): with the first, every slice is added once.
Only a slice index is claimed: a dim of constant extent that the output does not have, read at
constant offsets (shifted reads along a dim the output keeps, a stencil or a pooling window,
are no partial sums). A single load (no sum) is not a sum of partials: no claim.
"""

from __future__ import annotations

import itertools

import z3

from argus.ir import ops as O
from argus.verify import witness as W
from argus.verify.model import Model, _num
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    defs = {r.id: op for op in model.kernel.walk() for r in op.results()}
    obs: list[Obligation] = []
    for st in model.kernel.walk():
        if not isinstance(st, O.Store):
            continue
        leaves: list[O.Load] = []
        if not _sum_leaves(defs, st.value.id, leaves) or len(leaves) < 2:
            continue
        tensors = {ld.tensor.id for ld in leaves}
        info = model.tensors.get(next(iter(tensors)))
        if len(tensors) != 1 or info is None:
            continue
        try:
            offs = [[_num(model.scalar(o)) for o in ld.offsets] for ld in leaves]
        except Exception:  # noqa: BLE001 - an offset the model has no term for: no claim
            continue
        summed = [d for d in range(len(info.dims))
                  if any(not z3.eq(z3.simplify(o[d]), z3.simplify(offs[0][d])) for o in offs)]
        # a slice index: a dim of constant extent the output does not have, read at constant
        # offsets (P[s] of split-K); shifted reads along a dim the output keeps (a stencil,
        # a pooling window) are not partial sums
        out_rank = len(model.tensors[st.tensor.id].dims) if st.tensor.id in model.tensors \
            else len(info.dims)
        if not summed or len(info.dims) <= out_rank or any(
                not isinstance(info.dims[d], int) or
                not all(z3.is_int_value(z3.simplify(o[d])) for o in offs) for d in summed):
            continue
        obs.append(_slices(model, st, info, leaves, offs, summed))
    return obs, []


def _sum_leaves(defs, vid: int, out: list) -> bool:
    """Collect the loads added up into value `vid`; False when the tree has another kind of
    node (a product, a max: not a plain sum of partials)."""
    op = defs.get(vid)
    if isinstance(op, O.Load):
        out.append(op)
        return True
    if isinstance(op, (O.Convert, O.ConvertLayout)):
        return _sum_leaves(defs, op.src.id, out)
    if isinstance(op, O.Var):
        return _sum_leaves(defs, op.init.id, out)
    if isinstance(op, O.Elementwise) and op.fn == "add" and len(op.args) == 2:
        return all(_sum_leaves(defs, a.id, out) for a in op.args)
    return False


def _slices(model: Model, st: O.Store, info, leaves, offs, summed) -> Obligation:
    n = len(leaves)
    names = [info.field_names[d] for d in summed]
    count = z3.IntVal(1)
    for d in summed:
        count = count * _num(info.extent(model, d))
    distinct = [z3.Or([offs[i][d] != offs[j][d] for d in summed])
                for i, j in itertools.combinations(range(n), 2)]
    inside = [z3.And(offs[i][d] >= 0, offs[i][d] < _num(info.extent(model, d)))
              for i in range(n) for d in summed]
    claims = [("each slice added once", z3.And(distinct)),
              ("slices inside the tensor", z3.And(inside)),
              ("every slice added", count <= n)]

    def decode(zm, violated):
        got = [tuple(value(zm, o[d]) for d in summed) for o in offs]
        wit = {"shapes": W.shapes(model, zm), "summed": names, "slices": got,
               "extent": value(zm, count),
               "defined": {f"{info.name} slice {g}": str(ld.loc)
                           for g, ld in zip(got, leaves)}}
        if "each slice added once" in violated:
            dup = next(g for g in got if got.count(g) > 1)
            first = next(ld for g, ld in zip(got, leaves) if g == dup)
            second = [ld for g, ld in zip(got, leaves) if g == dup][1]
            wit["defined"] = {"first": str(first.loc), "second": str(second.loc)}
            msg = (f"the sum stored at {st.loc} adds {info.name} slice {dict(zip(names, dup))} "
                   f"twice (loads at {first.loc} and {second.loc})")
        elif "slices inside the tensor" in violated:
            msg = (f"the sum stored at {st.loc} reads {info.name} slices {got}, not all inside "
                   f"its {wit['extent']} slices")
        else:
            msg = (f"the sum stored at {st.loc} adds {n} slices of {info.name} but it has "
                   f"{wit['extent']}: {wit['extent'] - n} slice(s) never added "
                   f"(added: {got})")
        return msg, wit
    return Obligation("reduce.slices", st.loc,
                      f"sum of {n} slices of {info.name} stored at {st.loc}",
                      list(model.premises), claims, decode,
                      minimize=list(model.params.values()),
                      fix=f"add every slice of {info.name} along {', '.join(names)} once")
