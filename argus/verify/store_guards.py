"""The `ag.when` conditions around a store, for store.coverage: which instances do store.

Job (INVARIANTS.md §3.2, bug class 13): store.coverage counts the instances of a store (the
grid, its loops and warpgroups) as if each one stored; a condition around the store makes
that count meaningless unless it is shown to let through every instance that the count
relies on. check_stores counts over every instance (the conditions are not its premises) and
adds, per condition around the store, one obligation from here:

  * a condition on indices and shapes, or on data read at run time (a loaded flag, an
    atomic's old value) — it holds at every instance that stores an in-bounds element (the
    instances outside the output store nothing, so a mask such as `pid * BM < M` is proven).
    The loaded values are free in the query, so a condition on data is violated with the
    values that skip the store (a counterexample, not a guess: some input does that), unless
    the kernel states the data's contract (ag.tag_tensor value=, ag.tag_assume);
  * a ticket condition `old == k` on the old value of a self-resetting counter
    (`ag.atomic_fetch_add(CNT, cell, wrap=W)`: the fused split-decode combine, where the last
    of W splits merges) — exactly one of the W arrivals at a counter element passes it when
    atomic.tickets' claims hold (its query, restated here: W arrivals draw 0 .. W - 1 once
    each) and 0 <= k < W. The arrivals differ only in the counter's free program id F, so
    they all store the same elements when neither the destination nor the store's loop bounds
    mention F (nor k): then for each element, the instance the count relies on has an F that
    passes. Anything else about a ticket is read as the first kind of condition (and fails
    with the ticket that skips).
"""

from __future__ import annotations

import z3

from argus.verify import witness as W
from argus.verify.check_atomics import _mentions_ticket, _tickets
from argus.verify.model import Model, StoreSite, _num, trailing
from argus.verify.obligation import Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import free_consts, fresh_int


def conditions(st: StoreSite) -> list:
    """(scope, condition) of every `ag.when` around the store, outermost first."""
    return [(sc, c) for sc in st.site.scopes if sc.kind == "if" for c in sc.constraints]


def unguarded(st: StoreSite) -> list[z3.BoolRef]:
    """The store site's constraints without its conditions (loop ranges, warpgroups)."""
    return [c for sc in st.site.scopes if sc.kind != "if" for c in sc.constraints]


def obligations(model: Model, st: StoreSite, conds: list | None = None) -> list[Obligation]:
    """One store.coverage obligation per condition in `conds` (all of the store's by
    default): see the module docstring."""
    out = []
    for sc, c in (conditions(st) if conds is None else conds):
        ticket = _ticket_form(model, st, c)
        if ticket is None:
            out.append(_holds(model, st, sc, c))
        else:
            out += [_ticket_obligation(model, st, sc, *ticket),
                    _counter_inside(model, st, sc, ticket[0])]
    return out


def _dest(st: StoreSite, idx) -> list:
    seq = list(idx)[::-1] if st.transposed else list(idx)
    return [_num(x) for x in trailing(st.offsets, seq)]


def _holds(model: Model, st: StoreSite, sc, cond) -> Obligation:
    """The condition holds at every instance that stores an in-bounds element."""
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    dest = _dest(st, idx)
    inb = [z3.And(d >= 0, d < _num(st.tensor.extent(model, k))) for k, d in enumerate(dest)]
    prem = list(model.premises) + unguarded(st) + inb + \
        [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)]
    name = st.tensor.name

    def decode(zm, violated):
        wit = W.context(model, zm, st.site)
        wit["tile_element"] = tuple(value(zm, i) for i in idx)
        wit["output"] = W.fmt_elem(name, [value(zm, d) for d in dest])
        wit["condition"] = str(sc.op.loc)
        read = {str(t): value(zm, t) for t in _reads(cond)}
        if read:
            wit["values_read"] = read
        who = f"CTA {wit.get('cta')}" + (f" warpgroup {wit['warpgroup']}"
                                         if "warpgroup" in wit else "")
        why = (f" with the values read at run time {read}" if read else "")
        return (f"the store at {st.op.loc} runs only where the condition at {sc.op.loc} holds, "
                f"and it does not for {who}{why}: {wit['output']} (tile element "
                f"{wit['tile_element']}) is never written"), wit
    return Obligation("store.coverage", sc.op.loc,
                      f"the condition at {sc.op.loc} around the store to {name} at "
                      f"{st.op.loc}", prem,
                      [(f"the condition at {sc.op.loc} holds", cond)], decode,
                      minimize=list(idx) + list(st.site.scope_vars()),
                      fix=f"store {name} unconditionally (the instances outside it store "
                          f"nothing), or, if the kernel writes part of {name} on purpose, "
                          f"declare it: @ag.kernel(partial_outputs=('{name}',)); a condition "
                          f"on data read at run time holds only under a contract the kernel "
                          f"states (ag.tag_tensor(..., value=...), ag.tag_assume)")


def _reads(term) -> list:
    """The values read at run time in a term: applications of uninterpreted functions (a
    scalar loaded at an address, an atomic's old value) and fresh constants of loads."""
    out, seen, stack = [], set(), [term]
    while stack:
        t = stack.pop()
        if not z3.is_app(t):
            continue
        if t.decl().kind() == z3.Z3_OP_UNINTERPRETED and \
                (t.num_args() > 0 or str(t).startswith(("loaded", "ticket"))):
            if str(t) not in seen:
                seen.add(str(t))
                out.append(t)
            continue
        stack.extend(t.children())
    return out


def _ticket_form(model: Model, st: StoreSite, cond):
    """(atomic site, k, free program id) when `cond` is `old == k` on a wrapping counter's
    old value in the shape the module docstring names, else None."""
    if not z3.is_eq(cond):
        return None
    inst = {str(v) for v in st.site.scope_vars()} | {str(v) for v, _, _ in model.grid_vars}
    for t, k in ((cond.arg(0), cond.arg(1)), (cond.arg(1), cond.arg(0))):
        a = next((a for a in model.atomics if a.kind == "fetch_add" and a.op.wrap is not None
                  and a.ticket is not None and a.ticket.eq(t)), None)
        if a is None:
            continue
        if not {str(v) for v in a.args} <= inst or _reads(k):
            return None
        grid = [v for v, _, _ in model.grid_vars]
        free = [v for v in grid if not any(str(v) in free_consts(_num(o)) for o in a.offsets)]
        if len(free) != 1:
            return None
        f = str(free[0])
        idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
        used = set().union(*(free_consts(x) for x in _dest(st, idx) + unguarded(st) + [k]))
        if f in used or not free_consts(k) <= inst | set(model.params):
            return None
        return a, k, free[0]
    return None


def _counter_inside(model: Model, st: StoreSite, sc, a) -> Obligation:
    """The counter element of every instance that stores an in-bounds element lies inside
    the counter tensor: outside it no atomic runs and the old value is -1, which no ticket
    condition passes, while atomic.tickets and the ticket obligation take the element inside
    (their premises), so a counter tensor shorter than the cells the stores need would leave
    those stores out unseen."""
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    dest = _dest(st, idx)
    inb = [z3.And(d >= 0, d < _num(st.tensor.extent(model, k))) for k, d in enumerate(dest)]
    prem = [p for p in model.premises if not _mentions_ticket(p, model)] + unguarded(st) + \
        a.site.constraints() + inb + [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)]
    cell = [_num(o) for o in a.offsets]
    inside = z3.And([z3.And(o >= 0, o < _num(a.tensor.extent(model, d)))
                     for d, o in enumerate(cell)])
    name = a.tensor.name

    def decode(zm, violated):
        wit = W.context(model, zm, st.site)
        wit["counter_element"] = W.fmt_elem(name, [value(zm, o) for o in cell])
        wit["output"] = W.fmt_elem(st.tensor.name, [value(zm, d) for d in dest])
        return (f"the store at {st.op.loc} of {wit['output']} runs only where the condition at "
                f"{sc.op.loc} passes, but its counter element {wit['counter_element']} "
                f"({a.op.loc}) lies outside {name}: no atomic runs there, the old value is -1 "
                f"and the store never does"), wit
    return Obligation("store.coverage", sc.op.loc,
                      f"the counter element of {name} ({a.op.loc}) that the condition at "
                      f"{sc.op.loc} reads lies inside {name} for every store to "
                      f"{st.tensor.name} at {st.op.loc}", prem,
                      [(f"the counter element lies inside {name}", inside)], decode,
                      minimize=list(idx) + list(st.site.scope_vars()),
                      fix=f"give {name} a cell for every unit that stores (its shape from the "
                          f"same symbols as the grid), or index it within its shape")


def _ticket_obligation(model: Model, st: StoreSite, sc, a, k, free) -> Obligation:
    """One arrival per counter element passes `old == k`: atomic.tickets' claims (its
    query) and k among the tickets drawn."""
    tickets = _tickets(model, a)
    info = model.vars.get(str(free))
    who = info.label if info is not None else str(free)
    wrap = _num(model.scalar(a.op.wrap))
    drawn = "the compared ticket is drawn (0 <= k < wrap)"
    claims = [(drawn, z3.And(k >= 0, k < wrap))] + list(tickets.claims)

    def decode(zm, violated):
        if drawn not in violated:
            return tickets.decode(zm, violated)
        wit = {"shapes": W.shapes(model, zm), "compared": value(zm, k), "wrap": value(zm, wrap),
               "condition": str(sc.op.loc), "counter": str(a.op.loc)}
        return (f"the condition at {sc.op.loc} compares the old value of counter "
                f"{a.tensor.name} ({a.op.loc}) with {wit['compared']}, which none of its "
                f"{wit['wrap']} arrivals draws (0 .. {wit['wrap']} - 1): the store to "
                f"{st.tensor.name} at {st.op.loc} never runs"), wit
    return Obligation("store.coverage", sc.op.loc,
                      f"the condition at {sc.op.loc} lets one of the arrivals at each element "
                      f"of counter {a.tensor.name} ({a.op.loc}; the {who} counts them) "
                      f"store {st.tensor.name} at {st.op.loc}", tickets.premises, claims,
                      decode, fix=tickets.fix)
