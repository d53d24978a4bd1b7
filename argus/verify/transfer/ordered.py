"""Transfer functions of ordered sections (ag.ordered) and pipeline skips (ping-pong).

Job: `ordered.wait` / `ordered.pass` move no data (transparent to tags, like the sync ops);
the model records each wait's site (its loops, ifs and warpgroup variable) for
verify/check_ordered.py, which proves the turns go round. `pipe.skip` moves the warpgroup's
step counter on by its step count (none for a count <= 0, like a loop of that many steps),
exactly as the steps it stands for would (Model._count counts it the same way), so the
consumer role's counter at each step and its total are the ones the producer's steps are
matched against (pipe.totals, pipe.data).

Invariant kept: a skip changes a counter and nothing else; a turn op changes nothing.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.verify.transfer.domain import Rule, _num


def _max0(x):
    """max(x, 0): a skip of a count <= 0 skips nothing."""
    return z3.If(x > 0, x, 0) if isinstance(x, z3.ExprRef) else max(0, x)


def turn_wait(m: Model, op: O.TurnWait, scopes, role, counters, following) -> None:
    if m._recording:
        m.turns.append(m._site(op, scopes, role))


def turn_pass(m: Model, op: O.TurnPass, scopes, role, counters, following) -> None:
    pass  # no data; check_ordered reads the passes from the IR


def pipe_skip(m: Model, op: O.PipeSkip, scopes, role, counters, following) -> None:
    counters[op.pipe.id] = _num(counters.get(op.pipe.id, 0)) + _num(_max0(m.scalar(op.steps)))


RULES: dict[type, Rule] = {
    O.TurnWait: turn_wait,
    O.TurnPass: turn_pass,
    O.PipeSkip: pipe_skip,
}
