"""Global atomics: what the verifier proves of atomic.add and atomic.fetch_add.

Job: an atomic is not a store. The additions of many threads and CTAs to one element commute
and none is lost (the hardware's guarantee), so store.once and store.coverage claim nothing of
them (transfer/memory.py records them as atomic sites, never as stores). Two claims remain:

  atomic.exclusive — a tensor that atomics update is not also stored (plain or TMA) nor read
      by a plain load (tile, scalar or TMA) anywhere in the kernel: such an access would race
      with other CTAs' atomics (the result depends on the order). Decided on the IR.
  atomic.tickets — a counter with wrap (atom.inc: it resets itself after wrap arrivals) is
      reached by exactly `wrap` instances per element. With the counter at 0 at launch (the
      caller's contract: zeroed once; every launch then leaves it at 0), the instances at one
      element draw the old values 0 .. wrap - 1, each once. Distinctness is the premise
      transfer/memory.py states (the instance as a function of (cell, ticket)), which lets
      store.once prove that only one instance passes a guard `old == wrap - 1` (the last CTA
      merges). Proven in LIA for two instances renamed apart: the atomic is under no
      condition and in no runtime loop (a trip count may leave an instance out); the
      element's coordinates are a function of the program ids and warpgroup, of which at
      most one program id, the free one, may differ between two instances at one element;
      and its grid extent is wrap (none free: wrap is 1).
      Or, in a grid-stride loop (the persistent walk's `for t in ag.range(g, stop, E)`, g the
      free program id and E its extent: the instances (g, t) are then the t of [0, stop),
      each once), when the loop is the atomic's only condition: every other instance
      variable is the same for two instances at one element, the element depends on t
      through t mod D alone (two instances meet at one element exactly when their t agree
      mod D), and stop = D * wrap, so each element's arrivals are the wrap values of t of
      one residue class in [0, D * wrap) (the tail-split GEMM's fused finish: t = slice *
      tail + tile, an element per tail tile, D = tail); an element that does not read t is
      the case D = 1, stop = wrap (the dynamic scheduler's one work counter, drawn once per
      unit of the walk: GemmSchedule(scheduler="dynamic")). Proven in NIA for two instances.
      Both forms also claim that no other atomic site of the kernel reaches the element
      (`_alone`): the counts above are one site's, so a second draw from the element (two
      fetches an iteration, the ticket of the second handed on) would repeat that site's
      tickets while each site's own claims hold.
  atomic.tickets, the merge — an `ag.when` whose condition compares a wrapping counter's old
      value (`old == k`, as a conjunct too) lets through no arrival but the last: for every
      ticket x in 0 .. wrap - 1 that passes the comparison, x == wrap - 1. The arrivals draw
      their tickets in arrival order, so the body of a guard that an earlier ticket passes
      (`old == wrap - 2`) runs before the last arrival's partial is stored and reads it
      unwritten (store.once still holds: one arrival passes). Proven in LIA, with the
      guard's enclosing conditions and loop ranges as premises; the finding is at the guard,
      the line a fix edits, and names the arrival (its CTA, role, warpgroup) that merges early.

What is not claimed: the ordering of the plain stores before a counter's atomic and the loads
after it (the `fence`s around it) is the memory model's release/acquire pattern, which the
kernel author writes (ag.fence) and the verifier does not check; nor the counters' initial
zeros (a launch contract). A fetch without wrap
gives an opaque old value (no premise), as does an atomic.add's element.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.verify import witness as W
from argus.verify.model import Model, _num
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int, mentions
from argus.verify.terms import outermost, subterms

# ops that access a global tensor other than by an atomic: (class, the field naming it)
_PLAIN = ((O.Store, "store"), (O.TmaStore, "TMA store"), (O.Load, "load"), (O.Gather, "gather"),
          (O.LoadScalar, "scalar load"), (O.TmaLoad, "TMA load"))


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    if not model.atomics:
        return [], []
    finds = _exclusive(model)
    obs = [_tickets(model, a) for a in model.atomics
           if a.kind == "fetch_add" and a.op.wrap is not None]
    return obs + _merges(model), finds


def _exclusive(model: Model) -> list[Finding]:
    targets = {a.tensor.value.id: a for a in model.atomics}
    out = []
    for tid, a in targets.items():
        plain = [(what, op) for op in model.kernel.walk() for cls, what in _PLAIN
                 if isinstance(op, cls) and op.tensor.id == tid]
        subject = f"atomics on {a.tensor.name} at {a.op.loc}"
        if plain:
            what, op = plain[0]
            out.append(Finding("atomic.exclusive", op.loc, subject, "violated",
                               f"{a.tensor.name} is updated by atomics ({a.op.loc}) and "
                               f"accessed by a plain {what} at {op.loc}: the {what} races "
                               f"with other CTAs' atomics",
                               {"tensor": a.tensor.name, "atomic": str(a.op.loc),
                                "access": str(op.loc)},
                               fix="keep counters and atomic accumulators in tensors of their "
                                   "own; read a result in a later launch"))
        else:
            out.append(Finding("atomic.exclusive", a.op.loc, subject, "proven"))
    return out


def _tickets(model: Model, a) -> Obligation:
    """atomic.tickets for one counter site (module docstring)."""
    args = list(a.args)
    ren = [(v, fresh_int(f"{v}@2")) for v in args]

    def sub(t):
        t = t if isinstance(t, z3.BoolRef) else _num(t)
        return z3.substitute(t, *ren) if ren else t
    # the ticket premises are what this obligation justifies: never its premises
    own = [p for p in model.premises if not _mentions_ticket(p, model)]
    cell1 = [_num(o) for o in a.offsets]
    cell2 = [sub(o) for o in cell1]
    inside = [z3.And(o >= 0, o < _num(a.tensor.extent(model, d))) for d, o in enumerate(cell1)]
    prem = own + [sub(p) for p in own] + a.site.constraints() + \
        [sub(c) for c in a.site.constraints()] + inside + \
        [c1 == c2 for c1, c2 in zip(cell1, cell2)]
    grid = [v for v, _, _ in model.grid_vars]
    free = [v for v in grid if not any(mentions(o, v) for o in cell1)]
    wrap = _num(model.scalar(a.op.wrap))
    claims = []
    if len(free) > 1:
        claims.append((f"one program id ({', '.join(map(str, free))}) absent from the cell",
                       z3.BoolVal(False)))
    for v, w in ren:
        if not any(v.eq(f) for f in free):
            claims.append((f"{v} is the same for two instances at one element", v == w))
    # every instance arrives (no guard around the atomic): the arrivals at one element are
    # then exactly the free id's extent, which must be wrap for the counter to return to 0
    # and for exactly one arrival to draw wrap - 1. A runtime loop is a condition too: its
    # trip count may depend on the free id or on data (`ag.range(ag.minimum(pid, 1))` skips
    # pid 0), and the claims above, over two instances that do arrive, cannot see an
    # instance that never does
    guarded = [sc for sc in a.site.scopes if sc.kind in ("if", "loop")]
    alone = _alone(model, a, cell1)
    stride = _grid_stride(model, a, own, sub, cell1, cell2, inside, free, guarded, wrap,
                          alone)
    if stride is not None:
        return stride
    claims += alone
    if guarded:
        claims.append((f"the counter is reached under no condition and in no runtime loop "
                       f"(the {guarded[0].kind} at {guarded[0].op.loc})", z3.BoolVal(False)))
    if free:
        d = next(k for k, v in enumerate(grid) if v.eq(free[0]))
        extent = _num(model.scalar(model.grid.extents[d])) if d < len(model.grid.extents) \
            else None
        if extent is None:
            claims.append(("the free program id is a grid dimension", z3.BoolVal(False)))
        else:
            claims.append((f"grid extent {d} == wrap", extent == wrap))
    else:
        claims.append(("wrap == 1 (one instance an element)", wrap == 1))

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "violated": violated,
               "first": {str(v): value(zm, v) for v in args},
               "second": {str(v): value(zm, w) for v, w in ren}}
        return _who(model, zm, a,
                    f"counter {a.tensor.name} at {a.op.loc} may be reached by more than wrap "
                    f"instances at one element ({'; '.join(violated)}): two instances "
                    f"{wit['first']} and {wit['second']} share an element, so their old "
                    f"values can repeat and more than one can see wrap - 1", wit), wit
    return Obligation("atomic.tickets", a.op.loc, f"counter {a.tensor.name} at {a.op.loc}",
                      prem, claims, decode,
                      fix="index the counter by every program id but the one that counts "
                          "arrivals, and give the counter that id's grid extent as wrap")


def _who(model: Model, zm, a, msg: str, wit: dict) -> str:
    """`msg` naming who runs the counter's atomic (W.context of its site: role, warpgroup,
    thread), also put into the witness, so the finding does not rely on names.who's lookup."""
    ctx = W.context(model, zm, a.site)
    for k in ("role", "warpgroup", "thread", "threads"):
        if k in ctx:
            wit.setdefault(k, ctx[k])
    return W.placed(msg, ctx)


# the instance variables a grid-stride counter's other coordinates may be: grid and role ids,
# whose ranges do not depend on the loop (so every t of a residue class has its instances)
_FIXED_KINDS = ("pid", "cluster", "rank", "wg")


def _alone(model: Model, a, cell1) -> list:
    """The claims that no other atomic site reaches this counter's element: the arrivals
    counted by this site's claims are then the element's only ones. Another site drawing from
    the same element (a second draw in the walk's loop) would take tickets out of this site's
    sequence: each site alone reached by wrap instances, the element by more, so this site's
    tickets repeat across instances (and the walk's units, read from them, repeat or go
    missing) while each site's claims hold. The other site's instance is its own (its scope
    variables renamed apart), constrained by its scopes inside the claim, never a premise."""
    out = []
    for b in model.atomics:
        if b is a or b.tensor.value.id != a.tensor.value.id:
            continue
        own_vars = list(b.site.scope_vars()) + [v for v, _, _ in model.grid_vars]
        ren = [(v, fresh_int(f"{v}@other")) for v in own_vars]

        def apart(t, ren=ren):
            t = t if isinstance(t, z3.BoolRef) else _num(t)
            return z3.substitute(t, *ren) if ren else t
        meet = z3.And([apart(o) == c for o, c in zip(b.offsets, cell1)])
        out.append((f"no other atomic on {a.tensor.name} ({b.kind} at {b.op.loc}) reaches "
                    f"this counter's element",
                    z3.Implies(z3.And([apart(c) for c in b.site.constraints()]),
                               z3.Not(meet))))
    return out


def _grid_stride(model: Model, a, own, sub, cell1, cell2, inside, free, guarded, wrap,
                 alone: list):
    """atomic.tickets for a counter in a grid-stride loop (module docstring), or None when the
    atomic is not in that form (then the general claims apply, and fail on the loop)."""
    if len(guarded) != 1 or guarded[0].kind != "loop" or len(free) != 1:
        return None
    loop, g = guarded[0], free[0]
    t = loop.var
    args = list(a.args)
    if t is None or not any(t.eq(v) for v in args):
        return None
    others = [v for v in args if not v.eq(t) and not v.eq(g)]
    kinds = [model.vars.get(str(v)) for v in others]
    if any(k is None or k.kind not in _FIXED_KINDS for k in kinds):
        return None
    start, stop, step = (_num(model.scalar(v)) for v in (loop.op.start, loop.op.stop,
                                                        loop.op.step))
    if any(mentions(term, v) for term in (stop, step) for v in args) or \
            any(mentions(start, v) for v in args if not v.eq(g)):
        return None
    extent = next((hi for v, _, hi in model.grid_vars if v.eq(g)), None)
    # the residue form: the element reads t as t mod D (t % D in its coordinates, no t // D);
    # a walk whose element is t's quotient (MoE's unit // splits) is not this form. An
    # element that does not read t at all is the form with D = 1: one counter that every
    # iteration of the walk reaches (the dynamic scheduler's work counter, wrap = stop)
    if extent is None or _applies(cell1, t, z3.Z3_OP_IDIV) or \
            (not _applies(cell1, t, z3.Z3_OP_MOD) and any(mentions(c, t) for c in cell1)):
        return None
    t2 = sub(t)
    residue = stop / wrap   # D: the element's arrivals are one residue class of t mod D
    meet = z3.And([c1 == c2 for c1, c2 in zip(cell1, cell2)])
    same = z3.And([v == sub(v) for v in others]) if others else z3.BoolVal(True)
    prem = own + [sub(p) for p in own] + a.site.constraints() + \
        [sub(c) for c in a.site.constraints()] + inside
    claims = [(f"{v} is the same for two instances at one element", z3.Implies(meet, v == sub(v)))
              for v in others]
    claims += [
        (f"the loop at {loop.op.loc} starts at the free program id {g}", start == g),
        (f"the loop at {loop.op.loc} steps by {g}'s extent", _num(step) == _num(extent)),
        ("the loop's stop is D * wrap (D = stop / wrap)",
         z3.And(wrap >= 1, stop == residue * wrap)),
        ("two instances at one element have t equal mod D",
         z3.Implies(meet, t % residue == t2 % residue)),
        ("instances with t equal mod D (and the other ids equal) meet at one element",
         z3.Implies(z3.And(t % residue == t2 % residue, same), meet)),
    ] + alone

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "violated": violated,
               "first": {str(v): value(zm, v) for v in args},
               "second": {str(v): value(zm, sub(v)) for v in args}}
        return _who(model, zm, a,
                    f"counter {a.tensor.name} at {a.op.loc}, in the grid-stride loop at "
                    f"{loop.op.loc}, may not be reached by exactly wrap instances at each "
                    f"element ({'; '.join(violated)}): instances {wit['first']} and "
                    f"{wit['second']}", wit), wit
    return Obligation("atomic.tickets", a.op.loc, f"counter {a.tensor.name} at {a.op.loc}",
                      prem, claims, decode,
                      fix="walk the loop as ag.range(pid, S * D, programs) and index the "
                          "counter by t % D (t = slice * D + unit), with wrap = S")


def _sites(model: Model):
    """Every recorded site of the model (the ops inside an `ag.when` carry its scope)."""
    for group in (model.stores, model.reads, model.atomics, model.wgmmas, model.ews,
                  model.reduces, model.asserts, *model.writes.values()):
        for x in group:
            yield x.site
    yield from model.turns


def _merges(model: Model) -> list[Obligation]:
    """atomic.tickets' merge claim for every `ag.when` comparing a wrapping counter's old
    value (module docstring), one obligation a guard and counter."""
    counters = [a for a in model.atomics if a.kind == "fetch_add" and a.op.wrap is not None
                and a.ticket is not None and z3.is_app(a.ticket)]
    if not counters:
        return []
    seen: set = set()
    out = []
    for site in _sites(model):
        for i, sc in enumerate(site.scopes):
            if sc.kind != "if":
                continue
            for cond in sc.constraints:
                for a in counters:
                    key = (id(sc.op), id(a.op))
                    if key in seen:
                        continue
                    eqs = [c for c in _conjuncts(cond)
                           if z3.is_eq(c) and _has_app(c, a.ticket.decl())]
                    if eqs:
                        seen.add(key)
                        out.append(_merge(model, a, sc, site.scopes[:i], eqs))
    return out


def _conjuncts(cond) -> list:
    stack, out = [cond], []
    while stack:
        c = stack.pop()
        if z3.is_and(c):
            stack.extend(c.children())
        else:
            out.append(c)
    return out


def _merge(model: Model, a, sc, outer, eqs) -> Obligation:
    """No ticket but wrap - 1 passes the comparisons `eqs` of the guard `sc` (module
    docstring). The ticket is replaced by a fresh x in 0 .. wrap - 1 (it is one of those at
    every arrival inside the counter: transfer/memory.py's premise), so the claim holds of
    whichever arrival draws x."""
    x = fresh_int(f"ticket@{sc.op.loc.line}")
    decl = a.ticket.decl()
    wrap = _num(model.scalar(a.op.wrap))

    def put(e):
        # every application of this counter's ticket function (one per instance renaming)
        # is the arrival's ticket x: the comparison is about the value drawn
        apps = outermost([e], lambda t: z3.is_app(t) and t.decl().eq(decl), binders=False)
        return z3.substitute(e, *[(t, x) for t in apps]) if apps else e
    passes = z3.And([put(c) for c in eqs])
    own = [p for p in model.premises if not _mentions_ticket(p, model)]
    prem = own + [c for s in outer for c in s.constraints] + \
        [x >= 0, x < wrap, passes]
    claim = f"only the last arrival's ticket (wrap - 1) passes the comparison at {sc.op.loc}"
    inst = a.site

    def decode(zm, violated):
        wit = W.context(model, zm, inst)
        wit.update({"ticket": value(zm, x), "wrap": value(zm, wrap),
                    "condition": str(sc.op.loc), "counter": str(a.op.loc)})
        late = wit["wrap"] - 1 - wit["ticket"]
        msg = (f"the condition at {sc.op.loc} merges at ticket {wit['ticket']} of counter "
               f"{a.tensor.name} ({a.op.loc}), drawn by arrival {wit['ticket'] + 1} of "
               f"{wit['wrap']} (tickets are drawn in arrival order): its body runs while "
               f"{late} arrival(s) have not yet stored their part (the stores before the "
               f"atomic) and reads them unwritten")
        return W.placed(msg, wit), wit
    return Obligation("atomic.tickets", sc.op.loc,
                      f"the merge at {sc.op.loc} on counter {a.tensor.name} ({a.op.loc}) is "
                      f"the last arrival's", prem, [(claim, x == wrap - 1)], decode,
                      fix=f"compare the old value of {a.tensor.name} with its wrap - 1 (the "
                          f"last of wrap arrivals draws it): ag.when(old == wrap - 1)")


def _applies(terms, t, kind) -> bool:
    """Whether an application of `kind` (z3.Z3_OP_MOD, Z3_OP_IDIV) to t appears in `terms`."""
    return any(z3.is_app(e) and e.decl().kind() == kind and e.num_args() == 2 and
               e.arg(0).eq(t) for e in subterms(*terms, binders=False))


def _mentions_ticket(p, model: Model) -> bool:
    return any(a.ticket is not None and _has_app(p, a.ticket.decl()) for a in model.atomics
               if a.kind == "fetch_add" and z3.is_app(a.ticket))


def _has_app(term, decl) -> bool:
    return any(z3.is_app(t) and t.decl().eq(decl) for t in subterms(term, binders=False))
