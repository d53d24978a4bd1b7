"""Transfer function of the synchronization ops (ir/ops.py SYNC_OPS): wgmma fence/commit/wait,
fence.operands, slot releases, proxy fences, group barriers, TMA-store commit/wait,
setmaxnreg, cluster sync.

Job: none of them moves or computes data, so they are transparent to tags: a sync op leaves
every scalar term, tile state and shared-memory write of the model as it was. The model does
not assume their ordering effects either: the data flow it builds is the one the pipeline
construct and program order define, and whether the placed sync ops actually implement that
ordering (proxy fences before async reads of generic writes, releases after the last read of
a slot, waits before an accumulator is read) is proven on the IR by verify/check_sync.py (and
the pipeline module), not here.

Invariant kept: a sync op never adds, removes or changes a tag, a site or a premise; removing
one from a kernel changes only check_sync's verdict.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir.core import Op
from argus.verify.transfer.domain import Rule


def transparent(m: Model, op: Op, scopes, role, counters, following) -> None:
    pass  # no data: verify/check_sync.py proves them on the IR


def fence(m: Model, op: O.Fence, scopes, role, counters, following) -> None:
    pass  # no data; the order it buys across CTAs is what check_atomics' claims rely on


def griddep(m: Model, op: O.Op, scopes, role, counters, following) -> None:
    pass  # no data; where the wait sits is proven on the IR by verify/check_pdl.py


RULES: dict[type, Rule] = ({cls: transparent for cls in O.SYNC_OPS} | {O.Fence: fence}
                           | {O.GridDepWait: griddep, O.GridDepLaunch: griddep})
