"""Rules for the mbarrier-ring pipeline: create, produce step, consume step.

Invariant: a producer's step n waits until slot n % stages was released n // stages times; a
consumer's step waits until the slot holds its iteration's fill (from every producer of the
cluster); a slot is released when all its consumers' steps for that fill ended. Every state
change bumps `events`, which the machine's deadlock detection watches.
"""

from __future__ import annotations

from typing import Generator, Iterator

from argus.ir import ops as O
from argus.ir.core import Value
from argus.runtime.interp.machine import InterpError, _Blocked, _Group, _Interp, _PipeState
from argus.runtime.interp.registry import rule


@rule(O.PipelineCreate)
def pipeline_create(m: _Interp, g: _Group, op: O.PipelineCreate) -> None:
    g.env[op.result.id] = _PipeState(op.result.type.stages, op.consumers)


@rule(O.Produce)
def produce(m: _Interp, g: _Group, op: O.Produce) -> Iterator[_Blocked]:
    p: _PipeState = m.val(g, op.pipe)
    n = g.counters.get(op.pipe.id, 0)
    s, phase = n % p.stages, n // p.stages
    while p.releases[s] < phase:
        yield _Blocked(f"{g.name} waits for slot {s} to be released (step {n})")
    g.env[op.stage.id] = s
    if op.payload is not None:   # written before the fill, as before the full barrier's arm
        p.payloads[s] = int(m.val(g, op.payload))
    yield from m.run_region(g, op.body)
    p.fills[s] += 1
    m.events += 1
    g.counters[op.pipe.id] = n + 1


def _wait_for_fill(m: _Interp, g: _Group, pipe: Value, why: str
                   ) -> Generator[_Blocked, None, tuple[_PipeState, int, int, int]]:
    """Block until the slot of `g`'s next consume step on `pipe` holds that step's fill from
    every producer (the consume step and the peek before it wait alike); return (the pipe's
    state, the step, its slot, its phase). `why` says what g waits in, its slot as {s}."""
    p: _PipeState = m.val(g, pipe)
    n = g.counters.get(pipe.id, 0)
    s, phase = n % p.stages, n // p.stages
    while p.fills[s] < (phase + 1) * p.producers:
        yield _Blocked(f"{g.name} {why.format(s=s)} (step {n})")
    return p, n, s, phase


@rule(O.Consume)
def consume(m: _Interp, g: _Group, op: O.Consume) -> Iterator[_Blocked]:
    p, n, s, phase = yield from _wait_for_fill(m, g, op.pipe, "waits for slot {s} to be filled")
    g.env[op.stage.id] = s
    yield from m.run_region(g, op.body)
    key = (s, phase)
    p.arrivals[key] = p.arrivals.get(key, 0) + 1
    if p.arrivals[key] == p.consumers:
        p.releases[s] += 1
    m.events += 1
    g.counters[op.pipe.id] = n + 1


@rule(O.PipePayload)
def pipe_peek(m: _Interp, g: _Group, op: O.PipePayload) -> Iterator[_Blocked]:
    """Wait, as this group's next consume step will, for its slot's fill; read the word."""
    p, _, s, _ = yield from _wait_for_fill(m, g, op.pipe,
                                           "peeks at slot {s}, waiting for its fill")
    if p.payloads[s] is None:
        raise InterpError(f"{g.name} peeks at the payload of slot {s}, which no produce step "
                          f"wrote")
    g.env[op.result.id] = p.payloads[s]

