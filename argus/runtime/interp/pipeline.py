"""Rules for the mbarrier-ring pipeline: create, produce step, consume step.

Invariant: a producer's step n waits until slot n % stages was released n // stages times; a
consumer's step waits until the slot holds its iteration's fill (from every producer of the
cluster); a slot is released when all its consumers' steps for that fill ended. Every state
change bumps `events`, which the machine's deadlock detection watches.
"""

from __future__ import annotations

from typing import Iterator

from argus.ir import ops as O
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


@rule(O.Consume)
def consume(m: _Interp, g: _Group, op: O.Consume) -> Iterator[_Blocked]:
    p: _PipeState = m.val(g, op.pipe)
    n = g.counters.get(op.pipe.id, 0)
    s, phase = n % p.stages, n // p.stages
    while p.fills[s] < (phase + 1) * p.producers:
        yield _Blocked(f"{g.name} waits for slot {s} to be filled (step {n})")
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
    p: _PipeState = m.val(g, op.pipe)
    n = g.counters.get(op.pipe.id, 0)
    s, phase = n % p.stages, n // p.stages
    while p.fills[s] < (phase + 1) * p.producers:
        yield _Blocked(f"{g.name} peeks at slot {s}, waiting for its fill (step {n})")
    if p.payloads[s] is None:
        raise InterpError(f"{g.name} peeks at the payload of slot {s}, which no produce step "
                          f"wrote")
    g.env[op.result.id] = p.payloads[s]
