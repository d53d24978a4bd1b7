"""Transfer function of thread election (`elect`, placed by lower/elect.py).

Job: the elected threads do their group's work (a producer's index math, scalar reads, produce
steps and TMA loads) once for the group, so the model walks the body as part of the enclosing
region, in the same scopes: the data the body moves and the steps it counts are the group's.
How many threads arrive on a barrier because of the election is not data: check_pipeline
(pipe.producers) counts it, and check_sync (sync.elect) proves the body holds only work one
thread can do for its group.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.verify.transfer.domain import Rule


def elect(m: Model, op: O.Elect, scopes, role, counters, following) -> None:
    m._walk(op.body, scopes, role, counters)


RULES: dict[type, Rule] = {O.Elect: elect}
