"""Ordered-section obligations (ag.ordered, ping-pong): the turns go round, nobody deadlocks,
the sections are mutually exclusive and in order.

The protocol (lower/sync.py places it, codegen renders it): a role of W warpgroups gets one
named barrier per warpgroup for each section name; warpgroup w's section starts with
`ordered.wait` = bar.sync barriers[w], 256 and ends with `ordered.pass` = bar.arrive
barriers[(w + 1) % W], 256; warpgroup W - 1 passes once before any section (`initial`).
Then exactly one warpgroup holds the turn at any time (the one whose barrier has an
outstanding pass), so the sections are mutually exclusive and run in the order 0, 1, ..,
W - 1, 0, ... — provided the structure is that protocol, which is checked here, and every
warpgroup reaches its section in its turn, which is proven here:

  ordered.pairs    each section's wait and pass are in one region, in that order, with no
                   other section opened in between (a pass without its wait hands on a turn
                   its warpgroup does not hold), no produce step around them and no consume
                   step of a pipeline the role skips steps of; one site per name in a role
                   (ag.ordered refuses a second at trace time). A section inside a consume
                   step of a pipeline every warpgroup consumes every step of (cooperative
                   consumers, the split fp8 promotion's halves) cannot starve: the turn holder
                   is in the same step or an earlier one, whose slots are full (its full wait
                   is behind it or already satisfied: the waiter passed the same one or a
                   later one), and it needs no slot the waiter holds before it passes;
  ordered.barriers (lowered kernels) each (role, name) has W barrier ids, one per warpgroup,
                   the same tuple at the wait and the pass (else a pass wakes a barrier nobody
                   of this sequence waits on), 256 threads (the waiter and the passer), ids
                   above the CTA's group barriers (1 + warpgroup index) and below 16, no id
                   shared with another sequence, and exactly one initial pass per name, at the
                   role's start;
  ordered.turns    (z3) in the innermost loop around the section, the warpgroups that run the
                   section in iteration i are all of them (no condition depends on the
                   warpgroup, or one that does holds alike for each: `wg < 2` of two; one
                   query) or exactly warpgroup i % W (ping-pong: each takes every W-th
                   unit), and when an enclosing loop runs that loop again, the ping-pong
                   loop's trip count is a multiple of W (each pass restarts at warpgroup 0)
                   — otherwise some warpgroup waits for a turn that never comes, or takes a
                   turn out of ring order;
  ordered.skip     a role that skips pipeline steps (pipe.skip: another warpgroup consumes
                   them) consumes its own steps of that pipeline inside an ordered section: the
                   sections then run in step order, so when a warpgroup waits on a slot's
                   full barrier every earlier fill of that slot has completed and the parity
                   it waits for cannot be an older phase's.

Whether each step is consumed exactly once (the skip count is the other warpgroups' steps) is
pipe.totals and pipe.data of the pipeline module: the model counts a skip as the steps it
stands for, so the consumer's counter is the producer's at every step (transfer/ordered.py).
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.core import Region
from argus.target.limits import NAMED_BARRIERS, WARPGROUP_SIZE
from argus.verify import solver
from argus.verify.model import Model
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import free_consts, mentions
from argus.verify.transfer.domain import _num


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    lowered = model.kernel.attr("synchronized", False)
    used: dict[int, str] = {}
    for role in model.roles:
        finds += _pairs(role)
        if lowered:
            finds += _barriers(model, role, used)
        finds += _skips(role)
    for site in model.turns:
        ob, f = _turns(model, site)
        obs += ob
        finds += f
    return obs, finds


# ----------------------------------------------------------------------------- structure


def _pairs(role: O.RoleOp) -> list[Finding]:
    finds: list[Finding] = []

    def bad(op, why, fix=""):
        finds.append(Finding("ordered.pairs", op.loc, f"ordered section {op.name!r} of role "
                             f"{role.name!r}", "violated", why, {"role": role.name},
                             fix=fix or "open and close each section with one `with "
                                        "ag.ordered(name):` block"))

    # pipelines whose steps a warpgroup of this role skips (ping-pong): a section inside
    # one of their steps waits for a turn holding a slot the turn holder may need
    skipped = {op.pipe.id for op in role.body.walk() if isinstance(op, O.PipeSkip)}

    def walk(region: Region, open_name: str | None, steps: tuple) -> None:
        current: O.TurnWait | None = None
        for op in region.ops:
            if isinstance(op, O.TurnWait):
                unsafe = [s for s in steps if not isinstance(s, O.Consume)
                          or s.pipe.id in skipped]
                if current is not None or open_name is not None:
                    bad(op, f"section {op.name!r} opens inside section "
                            f"{(current.name if current else open_name)!r}: nested turns "
                            f"deadlock when their orders differ")
                elif unsafe:
                    bad(op, "the section opens inside a produce step, or a consume step of a "
                            "pipeline whose steps this role skips: waiting for a turn while "
                            "holding a ring slot can starve the warpgroup whose turn it is")
                current = op
            elif isinstance(op, O.TurnPass) and not op.initial:
                if current is None or current.name != op.name:
                    bad(op, f"section {op.name!r} ends without being opened in this region: "
                            f"the warpgroup hands on a turn it does not hold")
                current = None
            for f in op.spec_fields():
                inner = getattr(op, f.name)
                if isinstance(inner, Region):
                    walk(inner, open_name or (current.name if current else None),
                         steps + ((op,) if isinstance(op, (O.Produce, O.Consume)) else ()))
        if current is not None:
            bad(current, f"section {current.name!r} is not closed in the region that opened "
                         f"it: a path leaves it holding the turn")
    walk(role.body, None, ())
    first: dict[str, O.TurnWait] = {}
    for op in role.body.walk():
        if isinstance(op, O.TurnWait):
            if op.name in first:
                # ordered.turns proves each site's round alone: a second site starts its own
                # round at warpgroup 0 wherever the first one left the turn
                bad(op, f"section {op.name!r} opens again here (first at "
                        f"{first[op.name].loc}): the turns of one name are proven at one site",
                    "one `with ag.ordered(name):` per name in a role, or distinct names")
            first.setdefault(op.name, op)
    return finds


def _barriers(model: Model, role: O.RoleOp, used: dict[int, str]) -> list[Finding]:
    finds: list[Finding] = []
    W = role.warpgroups
    group_ids = model.threads // WARPGROUP_SIZE

    def bad(op, why, fix):
        finds.append(Finding("ordered.barriers", op.loc, f"ordered section {op.name!r} of "
                             f"role {role.name!r}", "violated", why,
                             {"role": role.name, "barriers": op.barriers,
                              "threads": op.threads}, fix=fix))
    seen: dict[str, tuple] = {}
    initial: dict[str, int] = {}
    for op in role.body.walk():
        if not isinstance(op, (O.TurnWait, O.TurnPass)):
            continue
        ids = op.barriers
        if isinstance(op, O.TurnPass) and op.initial:
            initial[op.name] = initial.get(op.name, 0) + 1
        if op.threads != 2 * WARPGROUP_SIZE:
            bad(op, f"bar.sync/bar.arrive count {op.threads}, but each phase of a turn barrier "
                    f"is the waiting warpgroup and the passing one: {2 * WARPGROUP_SIZE} "
                    f"threads (a smaller count lets the waiter through on its own arrivals, a "
                    f"larger one never completes)", f"threads = {2 * WARPGROUP_SIZE}")
        if len(ids) != W or len(set(ids)) != W:
            bad(op, f"barriers {ids}: a role of {W} warpgroups needs {W} distinct ids, one "
                    f"per warpgroup", "one named barrier per warpgroup of the role")
            continue
        if op.name in seen and seen[op.name] != ids:
            bad(op, f"barriers {ids} differ from {seen[op.name]} at another op of the same "
                    f"section: a pass arrives on a barrier its successor does not wait on "
                    f"(hang), or wakes a warpgroup out of turn", "the same tuple at the "
                    f"wait, the pass and the initial pass of a section")
        seen.setdefault(op.name, ids)
        clash = [i for i in ids if i <= group_ids or i >= NAMED_BARRIERS]
        if clash:
            bad(op, f"barrier ids {clash} are taken: 0 is __syncthreads, 1..{group_ids} the "
                    f"group barriers of the CTA's {group_ids} warpgroups, and a CTA has "
                    f"{NAMED_BARRIERS}", f"ids in {group_ids + 1}..{NAMED_BARRIERS - 1}")
    for name, ids in seen.items():
        for i in ids:
            other = used.get(i)
            if other is not None and other != f"{role.name}/{name}":
                first = next(op for op in role.body.walk() if isinstance(op, O.TurnWait)
                             and op.name == name)
                bad(first, f"barrier {i} is also used by ordered section {other}: two "
                           f"sequences' passes and waits would mix", "distinct ids per "
                                                                     "(role, section)")
            used[i] = f"{role.name}/{name}"
        if initial.get(name, 0) != 1:
            first = next(op for op in role.body.walk() if isinstance(op, O.TurnWait)
                         and op.name == name)
            bad(first, f"{initial.get(name, 0)} initial passes: warpgroup 0's first wait "
                       f"needs exactly one (none: it waits forever; two: warpgroup 1 may "
                       f"enter while warpgroup 0 is in its section)",
                "one ordered.pass(initial=True) first in the role")
    heads = [op for op in role.body.ops if not isinstance(op, O.SetMaxNReg)]
    for op in role.body.walk():
        if isinstance(op, O.TurnPass) and op.initial and not any(op is h for h in heads[:len(
                initial)]):
            bad(op, "the initial pass is not at the role's start: a section may wait before "
                    "warpgroup 0 was given the first turn", "place it first in the role "
                                                            "(after setmaxnreg)")
    return finds


def _skips(role: O.RoleOp) -> list[Finding]:
    skipped = {op.pipe.id: op for op in role.body.walk() if isinstance(op, O.PipeSkip)}
    if not skipped:
        return []
    finds: list[Finding] = []

    def walk(region: Region, inside: bool) -> None:
        open_ = inside
        for op in region.ops:
            if isinstance(op, O.TurnWait):
                open_ = True
            elif isinstance(op, O.TurnPass) and not op.initial:
                open_ = inside
            elif isinstance(op, O.Consume) and op.pipe.id in skipped and not open_:
                finds.append(Finding(
                    "ordered.skip", op.loc, f"consume step of role {role.name!r}", "violated",
                    f"role {role.name!r} skips steps of this pipeline (pipe.skip at "
                    f"{skipped[op.pipe.id].loc}) but consumes its own outside an ordered "
                    f"section: a warpgroup may wait on a slot whose earlier fill another "
                    f"warpgroup has not waited for, and the full barrier's parity then "
                    f"matches an older phase (the wait passes before the data landed)",
                    {"role": role.name}, fix="consume inside `with ag.ordered(name):` so the "
                                             "warpgroups take their steps in ring order"))
            for f in op.spec_fields():
                inner = getattr(op, f.name)
                if isinstance(inner, Region):
                    walk(inner, open_)
    walk(role.body, False)
    return finds


# ----------------------------------------------------------------------------- turns


def _opaque_values(term) -> list[str]:
    """The unmodelled values (transfer/scalar.py's `opaque` variables) that `term` uses."""
    return [name for name in free_consts(term) if name.startswith("opaque")]


def _turns(model: Model, site) -> tuple[list[Obligation], list[Finding]]:
    op: O.TurnWait = site.op
    role = site.role
    subject = f"ordered section {op.name!r} of role {role.name!r} at {op.loc}"
    if role is None:
        return [], [Finding("ordered.pairs", op.loc, subject, "violated",
                            "an ordered section outside a role")]
    W = role.warpgroups
    role_scope = site.enclosing("role")
    wg = role_scope.var
    scopes = [s for s in site.scopes if s.kind != "role"]
    last = max((j for j, s in enumerate(scopes) if s.kind == "loop"), default=-1)
    outer, inner = scopes[:last + 1], scopes[last + 1:]
    loop = scopes[last] if last >= 0 else None
    for s in outer:
        terms = list(s.constraints)
        if any(mentions(t, wg) for t in terms):
            return [], [Finding("ordered.turns", op.loc, subject, "unknown",
                                f"a loop or condition around the section's innermost loop "
                                f"depends on the warpgroup ({s.kind} at {s.op.loc}): turns of "
                                f"that shape are not modelled")]
    for s in scopes:
        hidden = sorted({v for t in s.constraints for v in _opaque_values(t)})
        if hidden:
            # an unmodelled value (a float comparison, ...) is a fresh variable that no
            # longer mentions what it was computed from: it may differ between warpgroups
            return [], [Finding("ordered.turns", op.loc, subject, "unknown",
                                f"the {s.kind} at {s.op.loc} around the section depends on "
                                f"unmodelled arithmetic (a float comparison, ...: "
                                f"{', '.join(hidden)}), "
                                f"so it cannot tell whether every warpgroup takes it alike "
                                f"(one that does not waits forever for its turn)",
                                fix="decide the section and its loops' bounds by integer "
                                    "arithmetic on loop indices, shapes and the warpgroup "
                                    "index")]
    cond = z3.And(*[c for s in inner for c in s.constraints]) if inner else z3.BoolVal(True)
    if not mentions(cond, wg):
        # every warpgroup runs the section in the same iterations: one turn each, in order
        return [], [Finding("ordered.turns", op.loc, subject, "proven", tier="arith")]
    prem = list(model.premises) + [c for s in outer for c in s.constraints]
    alike = [(f"warpgroup {w} runs the section as warpgroup 0 does",
              z3.substitute(cond, (wg, z3.IntVal(w))) == z3.substitute(
                  cond, (wg, z3.IntVal(0)))) for w in range(1, W)]
    if loop is not None:
        # a condition that names the warpgroup but selects all of them alike (`wg < 2` of
        # two, `wg >= 0`, the same set in every iteration) is the cooperative form, not a
        # ping-pong one: decided first, one query (the ping-pong claims below would refute
        # it, a false error)
        got = solver.prove(prem, alike, rlimit=solver.default_rlimit())
        if got.status == "proven":
            return [], [Finding("ordered.turns", op.loc, subject, "proven",
                                tier=got.theory or "LIA", ms=got.ms)]
    if loop is None:
        claims = alike
        index = None
    else:
        restart = f"the loop's trip count is a multiple of {W}"
        start, step = (_num(model.scalar(v)) for v in (loop.op.start, loop.op.step))
        index = loop.var - start if z3.is_int_value(step) and step.as_long() == 1 \
            else (loop.var - start) / step
        claims = [(f"warpgroup {w} runs the section exactly in iterations i % {W} == {w}",
                   z3.substitute(cond, (wg, z3.IntVal(w))) == (index % W == w))
                  for w in range(W)]
        if any(s.kind == "loop" for s in outer[:-1]):
            # the loop restarts at iteration 0 (warpgroup 0's turn) each time an enclosing
            # loop runs it again, so its turns continue the global round only when it
            # ends on warpgroup W - 1's: W = 2 with 3 iterations gives warpgroup 0 two turns
            # in a row
            claims.append((restart, model.trip_term(loop.op) % W == 0))

    def decode(zm, violated):
        if index is not None and violated == [restart]:
            trips = value(zm, model.trip_term(loop.op))
            return (f"the loop at {loop.op.loc} runs {trips} iterations, not a multiple of "
                    f"{W}, and an enclosing loop runs it again: its next pass starts with "
                    f"warpgroup 0 while the turn is warpgroup {trips % W}'s, so the sections "
                    f"leave ring order and a warpgroup waits forever for its last turn",
                    {"trip_count": trips, "warpgroups": W})
        runs = [w for w in range(W) if z3.is_true(zm.eval(z3.substitute(
            cond, (wg, z3.IntVal(w))), model_completion=True))]
        # the conditions deciding who runs the section: names.annotate adds what they read
        # (the turn's formula is fixed where it is computed)
        wit = {"warpgroups_in_section": runs, "warpgroups": W,
               "related_sites": [str(s.op.loc) for s in inner if s.kind == "if"]}
        if index is not None:
            it = value(zm, index)
            wit["iteration"] = it
            msg = (f"in iteration {it} of the loop at {loop.op.loc} warpgroup(s) {runs} run "
                   f"the section, but the turn is warpgroup {it % W}'s alone: "
                   + ("nobody takes it and every warpgroup waits forever" if not runs else
                      "a warpgroup that skips its turn leaves the others waiting forever, and "
                      "one that runs out of turn takes a later turn (or waits forever)"))
        else:
            msg = (f"warpgroup(s) {runs} of {W} run the section: a warpgroup that skips its "
                   f"only turn leaves the next one waiting forever")
        return msg, wit
    return [Obligation("ordered.turns", op.loc, subject, prem, claims, decode,
                       minimize=[loop.var] if loop is not None else [],
                       fix="run the section in every warpgroup each iteration, or in "
                           f"warpgroup i % {W} in iteration i (ping-pong: "
                           f"ag.when(it % {W} == wg)) of a loop that no other loop repeats, "
                           f"or whose trip count is a multiple of {W}")], []
