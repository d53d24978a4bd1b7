"""Rules for ordered sections (ag.ordered) and pipeline skips: the turn protocol of ping-pong.

Invariant: the sections of one name in one role of one CTA run one at a time and round-robin:
turn t belongs to warpgroup t % W. `ordered.wait` blocks its warpgroup until the turn is its
own; `ordered.pass` ends the section and hands the turn on (a state change the deadlock
detection watches). A warpgroup that skips its turn leaves the others waiting forever, which
the machine reports as a deadlock, as the named barriers would hang on the GPU. The lowered
initial pass (warpgroup W - 1 gives warpgroup 0 the first turn) is where the count starts,
so it changes nothing here. `pipe.skip` moves the warpgroup's step counter on (by nothing
for a count <= 0, like a loop of that many steps).
"""

from __future__ import annotations

from typing import Iterator

from argus.ir import ops as O
from argus.runtime.interp.machine import InterpError, _Blocked, _Group, _Interp
from argus.runtime.interp.registry import rule


def _turn(m: _Interp, g: _Group, op) -> list:
    if g.role is None:
        raise InterpError(f"ordered section {op.name!r} at {op.loc} runs outside a role")
    return m.turns.setdefault((g.cta, g.role.name, op.name), [0, None])


@rule(O.TurnWait)
def turn_wait(m: _Interp, g: _Group, op: O.TurnWait) -> Iterator[_Blocked]:
    state = _turn(m, g, op)
    warpgroups = g.role.warpgroups
    while state[0] % warpgroups != g.wg:
        yield _Blocked(f"{g.name} waits for its turn in ordered section {op.name!r} (turn "
                       f"{state[0]} is warpgroup {state[0] % warpgroups}'s)")
    state[1] = g.wg


@rule(O.TurnPass)
def turn_pass(m: _Interp, g: _Group, op: O.TurnPass) -> None:
    if op.initial:
        return  # the turn count starts at warpgroup 0's first turn
    state = _turn(m, g, op)
    if state[1] != g.wg:
        raise InterpError(f"{g.name} ends ordered section {op.name!r} at {op.loc} without "
                          f"holding its turn (turn {state[0]} is warpgroup "
                          f"{state[0] % g.role.warpgroups}'s)")
    state[0] += 1
    state[1] = None
    m.events += 1


@rule(O.PipeSkip)
def pipe_skip(m: _Interp, g: _Group, op: O.PipeSkip) -> None:
    steps = op.steps if isinstance(op.steps, int) else m.val(g, op.steps)
    g.counters[op.pipe.id] = g.counters.get(op.pipe.id, 0) + max(steps, 0)
