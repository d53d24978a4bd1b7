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
  * a condition on the thread index (`ag.when(ag.thread_index() < 1)`, a per-thread mask
    `pid * 128 + tid < N`) — read per element, at the threads that hold it: codegen stores a
    register tile from every thread, each thread the registers it holds under the tile's
    layout (codegen/cuda/memory.py: replicas of an element store it too), so element e is
    written when the condition holds at one of its holders. The holders come from the layout
    (target/register_layouts.py): thread t0(e), whose replicated bits are 0, and t0 | m for m
    over the replicated bits; the query takes t0's other bits as 0/1 variables with e =
    thread_part(t0) + regs[r] (one register r: the layout holds each element once per
    replica class, checked), and claims the condition at t0 | m for some m. A one-element
    tile is held by every thread under any layout; a larger tile of a kernel whose layouts
    are not inferred yet (a traced, not lowered, kernel) is unknown. A thread index taken
    outside the store's role, or a store that is not a register tile's, reads the condition
    at every thread (the thread free: sound, and strict);
  * a ticket condition `old == k` on the old value of a self-resetting counter
    (`ag.atomic_fetch_add(CNT, cell, wrap=W)`: the fused split-decode combine, where the last
    of W splits merges) — exactly one of the W arrivals at a counter element passes it when
    atomic.tickets' claims hold (its query, restated here: W arrivals draw 0 .. W - 1 once
    each) and 0 <= k < W. The arrivals differ only in the counter's free program id F, so
    they all store the same elements when neither the destination nor the store's loop bounds
    mention F (nor k): then for each element, the instance the count relies on has an F that
    passes. Anything else about a ticket is read as the first kind of condition (and fails
    with the ticket that skips).

Several stores of one tile at one place that differ only by their conditions (a full-tile
store under `r0 + BM <= M` and a tail store under `r0 + BM > M`) are counted once, and their
conditions are claimed together (`alternatives`): at every instance storing an in-bounds
element, all conditions of some site hold.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import z3

from argus.ir import ops as O
from argus.target import register_layouts as RL
from argus.verify import witness as W
from argus.verify.check_atomics import _mentions_ticket, _tickets
from argus.verify.model import Model, StoreSite, _num, trailing
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import free_consts, fresh_int
from argus.verify.terms import outermost


def conditions(st: StoreSite) -> list:
    """(scope, condition) of every `ag.when` around the store, outermost first."""
    return [(sc, c) for sc in st.site.scopes if sc.kind == "if" for c in sc.constraints]


def unguarded(st: StoreSite) -> list[z3.BoolRef]:
    """The store site's constraints without its conditions (loop ranges, warpgroups)."""
    return [c for sc in st.site.scopes if sc.kind != "if" for c in sc.constraints]


def obligations(model: Model, st: StoreSite, conds: list | None = None) \
        -> tuple[list[Obligation], list[Finding]]:
    """The store.coverage obligations of the conditions in `conds` (all of the store's by
    default), and an unknown finding for a condition on the thread index whose holders are
    not known: see the module docstring. The conditions on the thread index that resolve
    through the tile's layout are one obligation (one replica of the element must pass them
    all; each passed by another replica stores nothing); every other condition is its own."""
    obs: list[Obligation] = []
    finds: list[Finding] = []
    held: list = []   # (scope, condition, holders) resolved through the layout
    for sc, c in (conditions(st) if conds is None else conds):
        ticket = _ticket_form(model, st, c)
        if ticket is not None:
            obs += [_ticket_obligation(model, st, sc, *ticket),
                    _counter_inside(model, st, sc, ticket[0])]
            continue
        h = _holders(model, st, c)
        if isinstance(h, str):
            finds.append(Finding(
                "store.coverage", sc.op.loc, _subject(st, [(sc, c)]), "unknown",
                f"the condition reads the thread index, and {h}",
                fix="verify the lowered kernel (verify.run(kernel, lower=True); ag.compile "
                    "verifies it), where every tile has its register layout"))
        elif h is not None and h.layout is not None:
            held.append((sc, c, h))
        else:
            obs.append(_holds(model, st, [(sc, c)], h))
    if held:
        tids = {str(t): t for _, _, h in held for t in h.tids}
        obs.append(_holds(model, st, [(sc, c) for sc, c, _ in held],
                          _Holders(tuple(tids.values()), held[0][2].layout)))
    return obs, finds


def alternatives(model: Model, sites: list[StoreSite], per_site: list | None = None) \
        -> tuple[list[Obligation], list[Finding]] | None:
    """The store.coverage obligation of stores that write one tile to one place under
    different `ag.when`s (an epilogue that stores full tiles under `r0 + BM <= M` and the tail
    under `r0 + BM > M`; check_stores._alternatives): where one of them stores, that one does,
    so the count over every instance (check_stores._coverage) holds when at every instance that
    stores an in-bounds element the conditions of SOME site all hold. None when a condition
    reads the thread index or is a counter's ticket (those are read per holder or per arrival:
    `obligations`, site by site). `per_site`: each site's conditions to claim, where not all
    of them (check_stores._coverage leaves out the warpgroup turns every site has)."""
    given, per_site = per_site, []
    for k, st in enumerate(sites):
        conds = conditions(st) if given is None else given[k]
        if any(_ticket_form(model, st, c) is not None or _holders(model, st, c) is not None
               for _, c in conds):
            return None
        per_site.append(conds)
    st = sites[0]
    idx, dest, stored = _stored(model, st)
    prem = list(model.premises) + unguarded(st) + stored
    some = z3.Or([z3.And([c for _, c in conds]) if conds else z3.BoolVal(True)
                  for conds in per_site])
    every = [(sc, c) for conds in per_site for sc, c in conds]
    claims = [("the conditions of one of the stores hold", some)]
    name = st.tensor.name

    def decode(zm, violated):
        wit = W.context(model, zm, st.site)
        wit["tile_element"] = tuple(value(zm, i) for i in idx)
        wit["output"] = W.fmt_elem(name, [value(zm, d) for d in dest])
        at = ", ".join(str(sc.op.loc) for sc, _ in every)
        wit["condition"] = at
        failed = "; ".join(
            f"the store at {x.op.loc} needs the condition(s) at "
            f"{', '.join(str(sc.op.loc) for sc, _ in conds) or '(none)'}"
            for x, conds in zip(sites, per_site))
        msg = (f"{len(sites)} stores write this tile to the same place, each under its own "
               f"condition ({failed}), and none of them holds for CTA {wit.get('cta')}: "
               f"{wit['output']} (tile element {wit['tile_element']}) is never written")
        return W.placed(msg, wit), wit
    return [Obligation("store.coverage", every[0][0].op.loc if every else st.op.loc,
                       _subject(st, every) if every else f"the stores to {name}", prem, claims,
                       decode, minimize=list(idx) + list(st.site.scope_vars()),
                       fix=f"make the conditions of the stores to {name} at "
                           f"{', '.join(str(x.op.loc) for x in sites)} complementary (one of "
                           f"them holds wherever the tile has an element inside {name})")], []


def _subject(st: StoreSite, conds: list) -> str:
    lines = ", ".join(str(sc.op.loc) for sc, _ in conds)
    return (f"the condition{'s' if len(conds) > 1 else ''} at {lines} around the store to "
            f"{st.tensor.name} at {st.op.loc}")


def _dest(st: StoreSite, idx) -> list:
    seq = list(idx)[::-1] if st.transposed else list(idx)
    return [_num(x) for x in trailing(st.offsets, seq)]


def _stored(model: Model, st: StoreSite):
    """(tile element variables, destination, premises): an element of the tile whose
    destination lies inside the tensor, the elements that a condition must let through."""
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    dest = _dest(st, idx)
    inside = [z3.And(d >= 0, d < _num(st.tensor.extent(model, k))) for k, d in enumerate(dest)]
    return idx, dest, inside + [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)]


def _holds(model: Model, st: StoreSite, conds: list, h: _Holders | None) -> Obligation:
    """The conditions `conds` hold at every instance that stores an in-bounds element (at a
    thread holding the element, for conditions on the thread index: `_holding`)."""
    idx, dest, stored = _stored(model, st)
    held, thread, claims = _holding(h, idx, conds)
    prem = list(model.premises) + unguarded(st) + stored + held
    name = st.tensor.name

    def decode(zm, violated):
        # the conditions violated (one claim each, or one claim for all of them)
        failed = [k for k, (n, _) in enumerate(claims) if n in violated] \
            if len(claims) == len(conds) else list(range(len(conds)))
        at = ", ".join(str(conds[k][0].op.loc) for k in failed or [0])
        wit = W.context(model, zm, st.site)
        wit["tile_element"] = tuple(value(zm, i) for i in idx)
        wit["output"] = W.fmt_elem(name, [value(zm, d) for d in dest])
        wit["condition"] = at
        read = {str(t): value(zm, t) for k in failed for t in _reads(conds[k][1])}
        if read:
            wit["values_read"] = read
        if thread is not None:
            wit.update(_holder_wit(h, zm, thread, wit["tile_element"]))
        who = f"CTA {wit.get('cta')}" + (f" warpgroup {wit['warpgroup']}"
                                         if "warpgroup" in wit else "") + \
            (f" thread {wit['thread']}" if thread is not None else "")
        why = (f" with the values read at run time {read}" if read else "")
        msg = (f"the store at {st.op.loc} runs only where the condition at {at} holds, "
               f"and it does not for {who}{why}: {wit['output']} (tile element "
               f"{wit['tile_element']}) is never written")
        # a condition not on the thread index: every thread of the store's group skips it,
        # named from the site (W.placed of W.context's role, warpgroup and thread)
        return (msg if thread is not None else W.placed(msg, wit)), wit
    return Obligation("store.coverage", conds[0][0].op.loc, _subject(st, conds), prem,
                      claims, decode,
                      minimize=list(idx) + list(st.site.scope_vars()) +
                      ([thread] if thread is not None else []),
                      fix=f"store {name} unconditionally (the instances outside it store "
                          f"nothing), or, if the kernel writes part of {name} on purpose, "
                          f"declare it: @ag.kernel(partial_outputs=('{name}',)); a condition "
                          f"on data read at run time holds only under a contract the kernel "
                          f"states (ag.tag_tensor(..., value=...), ag.tag_assume); one on "
                          f"the thread index must pass a thread holding each element")


def _reads(term) -> list:
    """The values read at run time in a term: applications of uninterpreted functions (a
    scalar loaded at an address, an atomic's old value) and fresh constants of loads."""
    def read(t) -> bool:
        return z3.is_app(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED and \
            (t.num_args() > 0 or str(t).startswith(("loaded", "ticket")))
    out: dict[str, z3.ExprRef] = {}
    for t in outermost([term], read, binders=False):
        out.setdefault(str(t), t)   # one per spelling: the witness names them by str
    return list(out.values())


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
        _, dest, _ = _stored(model, st)
        used = set().union(*(free_consts(x) for x in dest + unguarded(st) + [k]))
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
    idx, dest, stored = _stored(model, st)
    prem = [p for p in model.premises if not _mentions_ticket(p, model)] + unguarded(st) + \
        a.site.constraints() + stored
    cell = [_num(o) for o in a.offsets]
    inside = z3.And([z3.And(o >= 0, o < _num(a.tensor.extent(model, d)))
                     for d, o in enumerate(cell)])
    name = a.tensor.name

    def decode(zm, violated):
        wit = W.context(model, zm, st.site)
        wit["counter_element"] = W.fmt_elem(name, [value(zm, o) for o in cell])
        wit["output"] = W.fmt_elem(st.tensor.name, [value(zm, d) for d in dest])
        return W.placed(f"the store at {st.op.loc} of {wit['output']} runs only where the "
                        f"condition at {sc.op.loc} passes, but its counter element "
                        f"{wit['counter_element']} ({a.op.loc}) lies outside {name}: no atomic "
                        f"runs there, the old value is -1 and the store never does", wit), wit
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
        return W.by_site(model, st.site,
                         f"the condition at {sc.op.loc} compares the old value of counter "
                         f"{a.tensor.name} ({a.op.loc}) with {wit['compared']}, which none of "
                         f"its {wit['wrap']} arrivals draws (0 .. {wit['wrap']} - 1): the "
                         f"store to {st.tensor.name} at {st.op.loc} never runs", wit), wit
    return Obligation("store.coverage", sc.op.loc,
                      f"the condition at {sc.op.loc} lets one of the arrivals at each element "
                      f"of counter {a.tensor.name} ({a.op.loc}; the {who} counts them) "
                      f"store {st.tensor.name} at {st.op.loc}", tickets.premises, claims,
                      decode, fix=tickets.fix)


# ----------------------------------------------------------------------------- thread holders


@dataclass(frozen=True)
class _Holders:
    """The threads that store an element of the tile, for a condition reading `tids` (the
    thread index, one variable per ag.thread_index() call: one thread's index all the same).
    `layout`: the register layout that holds the element; None reads the condition at every
    thread (the thread free), for the reason `why`."""

    tids: tuple
    layout: RL.RegisterLayout | None
    why: str = ""


def _holders(model: Model, st: StoreSite, cond) -> _Holders | str | None:
    """How the condition's thread index resolves per stored element (module docstring): None
    when it reads no thread index, why not as a string when the tile's holders are unknown."""
    tids = tuple(z3.Int(n) for n in sorted(free_consts(cond))
                 if getattr(model.vars.get(n), "kind", None) == "thread")
    if not tids:
        return None
    if st.kind != "store":
        return _Holders(tids, None, f"a {st.kind} is issued, not stored by the threads "
                                    f"holding a register tile")
    role = st.site.role.index.id if st.site.role is not None else None
    if any(_role_of(model, model.vars[str(t)].value.id) != role for t in tids):
        return _Holders(tids, None, "the thread index is taken outside the store's role (an "
                                    "index over other threads than the tile's)")
    threads = 128 if st.site.role is not None else int(model.threads)
    size = 1
    for n in st.shape:
        size *= n
    if not st.tile.layout and size > 1:
        return (f"the stored tile's register layout is not inferred in this kernel (traced, "
                f"not lowered): which thread holds which of its {size} elements is not known")
    try:
        # every thread holds the one element of a one-element tile, whatever its layout
        lay = st.tile.register_layout(threads) if st.tile.layout else \
            RL.replicated(st.shape, threads)
    except ValueError as e:
        return f"the stored tile's layout {st.tile.layout!r} is not built ({e})"
    why = lay.check_exact() if threads & (threads - 1) == 0 else \
        f"its {threads} threads are not a power of two"
    for d in range(lay.rank):
        imgs = [img[d] for img in lay.thread_bases if img[d]]
        if why is None and sum(imgs) != _or(imgs):
            why = f"thread bits combine by XOR along tile dim {d}"
    if why is not None:
        return (f"the holders of the stored tile's elements (layout {lay.name}) are not "
                f"modelled: {why}")
    return _Holders(tids, lay)


def _or(xs: list[int]) -> int:
    out = 0
    for x in xs:
        out |= x
    return out


def _role_of(model: Model, vid: int) -> int | None:
    """The role (its index's IR name) whose body takes thread index `vid`; None outside
    roles, where the index runs over the CTA instead of one warpgroup."""
    for r in model.kernel.walk():
        if isinstance(r, O.RoleOp) and any(isinstance(o, O.ThreadIndex) and o.result.id == vid
                                           for o in r.body.walk()):
            return r.index.id
    return None


def _holding(h: _Holders | None, idx, conds: list):
    """(premises, thread term, claims) of the conditions `conds` at tile element `idx`. With
    a layout: thread t0 holds the element (its replicated bits 0, its other bits 0/1
    variables, one register's offset) and the conditions hold at t0 or at one replica t0 | m
    (all of them at the same one). Exact: the layout holds each element once per replica
    class (`check_exact`) and its thread bits add along each dim, so one (t0, register)
    meets the premises for each element of the tile. Without one, each condition is claimed
    as it stands (a thread index in it is free: every thread)."""
    named = [(f"the condition at {sc.op.loc} holds", c) for sc, c in conds]
    if h is None or h.layout is None:
        return [], (h.tids[0] if h is not None else None), named
    lay = h.layout
    rep = lay.replicated_bits()
    bits = {b: fresh_int(f"holder_bit{b}") for b in range(len(lay.thread_bases))
            if b not in rep}
    t0 = z3.Sum([z3.IntVal(0)] + [v * (1 << b) for b, v in bits.items()])
    part = [z3.Sum([z3.IntVal(0)] + [v * lay.thread_bases[b][d] for b, v in bits.items()
                                     if lay.thread_bases[b][d]]) for d in range(lay.rank)]
    prem = [z3.And(v >= 0, v <= 1) for v in bits.values()] + [t0 < lay.threads] + \
        [z3.Or([z3.And([i == p + o for i, p, o in zip(idx, part, reg)]) for reg in lay.regs])]

    def at(cond, m: int):
        return z3.substitute(cond, *[(t, t0 + m) for t in h.tids])
    if not rep:
        return prem, t0, [(f"{n} at the thread holding the element", at(c, 0)) for n, c in named]
    masks = [sum(1 << b for b in sub) for k in range(len(rep) + 1)
             for sub in itertools.combinations(rep, k)]
    name = (named[0][0] if len(named) == 1 else
            f"the conditions at {', '.join(str(sc.op.loc) for sc, _ in conds)} hold") + \
        " at one of the threads holding the element"
    return prem, t0, [(name, z3.Or([z3.And([at(c, m) for _, c in named]) for m in masks]))]


def _holder_wit(h: _Holders, zm, t0, element: tuple) -> dict:
    """The thread (and register) holding the element whose store the condition skips."""
    t = value(zm, t0)
    if h.layout is None:
        return {"thread": t, "threads": f"{h.why}: the condition must hold at every thread, "
                                        f"and thread {t} fails it"}
    lay = h.layout
    reg = next((r for r in range(lay.nregs) if lay.coord(t, r) == element), None)
    rep = lay.replicated_bits()
    who = (f"thread {t} holds it (layout {lay.name}) and fails the condition" if not rep else
           f"thread {t} and the {(1 << len(rep)) - 1} threads that differ from it in thread "
           f"bits {list(rep)} hold it (layout {lay.name}) and all fail the condition")
    return {"thread": t, "register": reg, "threads": who}
