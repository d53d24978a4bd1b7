"""Rules for the synchronization ops of lower/sync (ir.ops.SYNC_OPS): all no-ops here.

Invariant: the numpy semantics already give every guarantee these ops buy on the device.
An executing group (a CTA, or a role's warpgroup) is one sequential program whose ops act on
whole tiles, in order: a wgmma's accumulator is complete when the next op reads it, so
wgmma fences, commit groups, waits and register fences order nothing more (an accumulator that
no wgmma wrote already holds its `full` value); a group barrier among a group's threads orders
nothing within one sequential program; shared memory has one proxy and a TMA store lands when
it is issued (proxy fences, bulk-store commit/wait); a consume step releases its slot when it
ends, which is what slot releases implement on the device (the produce/consume rules model the
mbarrier ring, blocking included); register budgets (setmaxnreg) do not exist; and the CTAs of
a cluster share their barrier state from the start and none exits early (cluster.sync).
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.runtime.interp.machine import _Group, _Interp
from argus.runtime.interp.registry import rule


@rule(*O.SYNC_OPS)
def sync_no_op(m: _Interp, g: _Group, op: O.Op) -> None:
    """Fences, waits, barriers, slot releases, setmaxnreg: no-ops (see the module docstring)."""


@rule(O.Fence)
def fence(m: _Interp, g: _Group, op: O.Fence) -> None:
    """A no-op: the machine runs one group at a time, every write visible at once."""


@rule(O.GridDepWait, O.GridDepLaunch)
def griddep(m: _Interp, g: _Group, op: O.Op) -> None:
    """No-ops: the interpreter runs one kernel at a time, to completion, so the preceding
    kernel's memory is complete before this one starts and no dependent starts early."""
