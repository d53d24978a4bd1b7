"""The pipeline handle: `pipe = ag.pipeline(stages)`; `with pipe.produce() as stage:` and
`with pipe.consume() as stage:` open one step of the mbarrier ring.

Job: record Produce/Consume regions; the compiler derives every stage index and phase parity
from per-role step counters (lower/pipeline.py). A tile rebound inside a step carries out of
it (argus/dsl/carry.py), as in any other traced region.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from argus import dtypes
from argus.dsl.carry import CarryScope
from argus.dsl.tracing import current, user_loc
from argus.dsl.values import Scalar, as_scalar
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.core import Region, Value
from argus.ir.types import ScalarType


def _emit(op):
    return current().builder.append(op)


class Pipe:
    """A producer/consumer ring. `produce()`/`consume()` open one pipeline step and yield the
    stage index; the compiler derives stage and phase parity from per-role step counters."""

    def __init__(self, value: Value, payload: bool = False):
        self.value = value
        self.has_payload = payload

    @property
    def stages(self) -> int:
        return self.value.type.stages

    def _step(self, cls, **fields) -> Iterator[Scalar]:
        ctx = current()
        loc = user_loc()
        if ctx.in_role is None and ctx.any_role:
            raise TraceError("pipeline steps must be inside an ag.role", loc)
        if ctx.nonuniform_guards:
            raise TraceError("a pipeline step (mbarrier wait/arrive) is guarded by a condition "
                             "that differs between threads", loc,
                             fix="pipeline steps are warpgroup-wide: guard them with a uniform "
                                 "condition or none")
        stage = ctx.builder.fresh(ScalarType(dtypes.i32), "st")
        ctx.open_pipeline_steps += 1
        ctx.open_steps.append((cls is O.Consume, self.value.id))
        scope = CarryScope("pipeline step")
        try:
            with ctx.builder.region() as body:
                yield Scalar(stage)
        finally:
            ctx.open_pipeline_steps -= 1
            ctx.open_steps.pop()
        before, ops = scope.close(list(body), loc, induction=(stage,))
        for op in before:
            _emit(op)
        _emit(cls(stage, self.value, Region(tuple(ops)), loc=loc, **fields))

    def skip(self, steps) -> None:
        """Move this warpgroup's step counter past `steps` steps that another warpgroup of
        this role consumes in its turn (ping-pong: each consumer skips the other's units).
        The empty barriers then expect one release per step: ag.pipeline(consumers=1)."""
        ctx = current()
        loc = user_loc()
        if ctx.in_role is None:
            raise TraceError("pipe.skip outside an ag.role: only a consumer warpgroup that "
                             "takes turns with others skips their steps", loc,
                             fix="call it inside the consumer role")
        if ctx.role_warpgroups < 2:
            raise TraceError(f"pipe.skip in role {ctx.in_role!r} of {ctx.role_warpgroups} "
                             f"warpgroup: the skipped steps are consumed by another warpgroup "
                             f"of the same role in its turn, and there is none", loc,
                             fix="give the role warpgroups=2 or more and take turns (ag.ordered "
                                 "around the consume loop), or consume every step")
        if ctx.open_pipeline_steps:
            raise TraceError("pipe.skip inside a pipeline step: the step counter moves between "
                             "steps, never during one", loc, fix="skip after the step ends")
        if self.value.id in ctx.sections_in_steps:
            raise TraceError(f"pipe.skip of a pipeline in whose consume steps role "
                             f"{ctx.in_role!r} takes turns (ordered section "
                             f"{ctx.sections_in_steps[self.value.id]!r}): a warpgroup waiting "
                             f"for its turn while holding a slot can starve the warpgroup "
                             f"whose turn it is when that one needs a slot of the steps it "
                             f"consumes alone", loc,
                             fix="open that section around the pipeline steps, or consume "
                                 "every step in every warpgroup (no skip)")
        ctx.skipped_pipes.add(self.value.id)
        if ctx.nonuniform_guards:
            raise TraceError("pipe.skip under a condition that differs between threads: the "
                             "step counter is warpgroup-wide", loc,
                             fix="guard it with a condition uniform per warpgroup, or none")
        if isinstance(steps, int) and steps < 0:
            raise TraceError(f"pipe.skip({steps}): a step counter only moves forward", loc)
        _emit(O.PipeSkip(self.value, as_scalar(steps).value if not isinstance(steps, int)
                         else steps, loc=loc))

    @contextlib.contextmanager
    def produce(self, payload=None) -> Iterator[Scalar]:
        """payload (a pipeline made with payload=True): an int32 scalar this step puts into its
        slot, read back by the consumers of the same fill (`Pipe.peek`)."""
        value = None
        if payload is not None:
            loc = user_loc()
            if not self.has_payload:
                raise TraceError("pipe.produce(payload=...) on a pipeline without payload "
                                 "words", loc, fix="create it with ag.pipeline(..., "
                                 "payload=True)")
            p = as_scalar(payload)
            if p.dtype != dtypes.i32 or not p.uniform:
                raise TraceError("a pipeline payload is a uniform int32 scalar", loc)
            value = p.value
        yield from self._step(O.Produce, payload=value)

    def peek(self) -> Scalar:
        """The int32 that the fill of this warpgroup's next consume step carries
        (`produce(payload=...)`), read before that step: waits for the fill. Call it between
        steps, with a consume step to follow (ir.ops.PipePayload): the dynamic scheduler's
        consumers read their next unit so, before its main loop."""
        ctx = current()
        loc = user_loc()
        if not self.has_payload:
            raise TraceError("pipe.peek on a pipeline without payload words", loc,
                             fix="create it with ag.pipeline(..., payload=True)")
        if ctx.in_role is None:
            raise TraceError("pipe.peek outside an ag.role: it reads at the role's step "
                             "counter", loc, fix="call it in the consumer role")
        if any(pid == self.value.id for _, pid in ctx.open_steps):
            raise TraceError("pipe.peek inside a step of its pipeline: it reads the fill of "
                             "the next step", loc, fix="call it between steps")
        if ctx.nonuniform_guards:
            raise TraceError("pipe.peek (an mbarrier wait) under a condition that differs "
                             "between threads", loc, fix="guard it uniformly or not at all")
        r = ctx.builder.fresh(ScalarType(dtypes.i32), "pay")
        _emit(O.PipePayload(r, self.value, loc=loc))
        return Scalar(r)

    @contextlib.contextmanager
    def consume(self, whole_step: bool = False) -> Iterator[Scalar]:
        """whole_step: where the compiler keeps the step's wgmma in flight past its end (the
        next step's wgmma issue behind it), keep every group the step commits, not only its
        last (ir.ops.Consume.whole_step): a step of two m64 wgmma then ends in wait_group 2,
        which still retires the whole previous step before its slot is released."""
        if not isinstance(whole_step, bool):
            raise TraceError(f"pipe.consume(whole_step={whole_step!r}): whole_step is True or "
                             f"False", user_loc())
        yield from self._step(O.Consume, whole_step=whole_step)
