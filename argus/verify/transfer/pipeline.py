"""Transfer functions of the pipeline construct: pipeline creation and its produce/consume
steps.

Job: give every step its role's step counter n (as the walk keeps it: steps before it, exact
across loops and ifs) and its stage the slot n % S the construct defines, record the step, and
walk its body inside a produce/consume scope. Whether the lowered stage/parity expressions
implement n % S is the pipeline module's obligation (assume-guarantee, INVARIANTS.md §3.4).

Invariant kept: a role's counter grows by exactly one per step, in program order, in the dry
pass of a loop as in the recorded one; only the recorded pass lists the step.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.verify.tagdomain import fresh_int
from argus.verify.terms import subterms
from argus.verify.transfer.domain import PipeInfo, Rule, StepInfo, _num, _Unsupported


def pipeline_create(m: Model, op: O.PipelineCreate, scopes, role, counters, following) -> None:
    m.pipes[op.result.id] = PipeInfo(op, op.result.type.stages, op.consumers)


def step(m: Model, op: O.Produce | O.Consume, scopes, role, counters, following) -> None:
    pipe = m.pipes.get(op.pipe.id)
    if pipe is None:
        raise _Unsupported("pipeline step on an unknown pipeline")
    n = _num(counters.get(op.pipe.id, 0))
    kind = "produce" if isinstance(op, O.Produce) else "consume"
    site = m._site(op, scopes, role)
    stage = n % pipe.stages
    info = StepInfo(op, site, op.pipe, kind, n, stage)
    m.sym[op.stage.id] = stage
    m.steps_by_stage[op.stage.id] = info
    if m._recording:
        pipe.steps.append(info)
    counters[op.pipe.id] = n + 1
    if isinstance(op, O.Produce) and op.payload is not None and m._recording:
        # the word this step writes, by its site (pipe_peek resolves reads against it)
        pipe.payload_words[site.seq] = m.scalar(op.payload)
    m._walk(op.body, scopes + (m._scope(kind, op, None, ()),), role, counters)


def pipe_peek(m: Model, op: O.PipePayload, scopes, role, counters, following) -> None:
    # the word that the fill of this role's next consume step (counter n, not advanced)
    # carries: the payload term of the produce step whose counter is n (the step that filled
    # the slot: pipe.data and pipe.totals prove that fills and reads pair up so), in this
    # role's terms, as a TMA read resolves its data (Model._read_tma). Modelled in one form:
    # the peek at the start of an iteration of loops that the producer's step walks too
    # (same bounds, counters and steps per iteration: `_shared_loops`), before any step of
    # that iteration, whose fill is then the producer's first step of the same iteration.
    # The producer's loop indices are the peek's, its other variables (its warpgroup, its
    # K loop's index) fresh, tied by their ranges and "first step of the iteration", stated
    # as premises: satisfiable whenever the iteration has a step (the dynamic GEMM requires
    # K >= 1), so they hide no instance of the peek. The producer's premises about the word
    # (a ticket's range and inverses) are stated again for that instance. Any other peek
    # (after the iteration's steps, or of a ring with several payload-writing produce sites)
    # reads an opaque word, a function of n, which proves nothing of what it is used for.
    n = _num(counters.get(op.pipe.id, 0))
    pipe = m.pipes.get(op.pipe.id)
    if pipe is None:
        raise _Unsupported("pipe.peek on an unknown pipeline")
    words = pipe.payload_words
    sites = {st.site.seq: st for st in pipe.steps
             if st.kind == "produce" and st.site.seq in words}
    reader = m._site(op, scopes, role)
    if m._recording:   # check_pipeline proves the role consumes that step (else: a hang)
        pipe.peeks.append((reader, n))
    nest = _shared_loops(m, next(iter(sites.values())), reader, n) if len(sites) == 1 \
        else None
    if nest is None or not z3.eq(nest[2], z3.IntVal(0)):
        # not the peek at the start of an iteration of the producer's walk: opaque
        m.sym[op.result.id] = z3.Function(f"payload{op.pipe.id}", z3.IntSort(),
                                          z3.IntSort())(n)
        return
    (seq, st), = sites.items()
    pairs, w_side, r_side = nest
    sub = pairs + [(v, fresh_int(f"{v}@w")) for v in st.site.scope_vars()
                   if not any(v.eq(a) for a, _ in pairs)]

    def inst(t):
        return z3.substitute(t, *sub) if sub else t
    word = _num(words[seq])
    m.sym[op.result.id] = inst(word)
    if m._recording:
        fns = _functions(word)
        again = [inst(p) for p in m.premises if fns & _functions(p)]
        m.premises.append(z3.And(*[inst(c) for c in st.site.constraints()],
                                 inst(_num(w_side)) == _num(r_side), *again))


def _shared_loops(m: Model, st: StepInfo, reader, n):
    """(pairs, writer's side, reader's side) when the producer step's outer loops and the
    peek's loops are the same walk, or None. Model._same_loop_nest's prefix form, decided on
    the terms alone (it proves the counters' equality under the premises, which are not all
    known during the walk, when the peek is modelled): a prefix of loops with the same
    bounds, the same counter before each and the same steps per iteration, so equal counters
    mean equal iterations of those loops and equal offsets in the innermost one (the peek's
    offset is its steps before it in the iteration, the producer's its place in the unit's
    K loop)."""
    pid = st.pipe.id
    pairs: list = []
    sides = None
    for a, b in zip(st.site.loops(), reader.loops()):
        trial = pairs + [(a.var, b.var)]

        def w(t, trial=trial):
            return z3.simplify(z3.substitute(_num(t), *trial))
        if any(not z3.eq(w(m.scalar(getattr(a.op, f))),
                         z3.simplify(_num(m.scalar(getattr(b.op, f)))))
               for f in ("start", "stop", "step")):
            break
        sa = next((x for x in a.steps if x[0] == pid), None)
        sb = next((x for x in b.steps if x[0] == pid), None)
        if sa is None or sb is None or not z3.eq(w(sa[1]), z3.simplify(_num(sb[1]))) or \
                not z3.eq(w(sa[3]), z3.simplify(_num(sb[3]))):
            break
        pairs = trial
        sides = (z3.simplify(_num(st.counter) - _num(sa[2]), som=True),
                 z3.simplify(_num(n) - _num(sb[2]), som=True))
    if sides is None:
        return None
    return pairs, sides[0], sides[1]


def _functions(term) -> set:
    """The uninterpreted functions applied in a z3 term (a ticket, its inverses)."""
    return {t.decl().name() for t in subterms(term, binders=False)
            if z3.is_app(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED and t.num_args() > 0}


RULES: dict[type, Rule] = {
    O.PipelineCreate: pipeline_create,
    O.Produce: step,
    O.Consume: step,
    O.PipePayload: pipe_peek,
}
