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
    m._walk(op.body, scopes + (m._scope(kind, op, None, ()),), role, counters)


def pipe_payload(m: Model, op: O.PipePayload, scopes, role, counters, following) -> None:
    # the word the fill of this step's slot carries: a function of the consume step's counter
    # n alone (the fill of step n), unconstrained. Not yet tied to the producer's written value
    # (the producer's step n is another instance): a kernel whose coordinates come from it
    # proves nothing of them (docs/design/dynamic_scheduler.md, what the verifier must prove)
    info = m.steps_by_stage.get(op.stage.id)
    if info is None:
        raise _Unsupported("pipe.payload outside a consume step")
    fn = z3.Function(f"payload{op.pipe.id}", z3.IntSort(), z3.IntSort())
    m.sym[op.result.id] = fn(_num(info.counter))


RULES: dict[type, Rule] = {
    O.PipelineCreate: pipeline_create,
    O.Produce: step,
    O.Consume: step,
    O.PipePayload: pipe_payload,
}
