"""Layout inference: decide how each register tile is spread over the threads of its group.

The only analysis that edits the kernel (it rewrites TileType.layout). Rules, in order:
- a tile that a wgmma accumulates into, and everything computed pointwise from it or assigned
  into it, uses the wgmma accumulator fragment ("wgmma_acc", INVARIANTS.md §2.1);
- a row reduction of a blocked tile gives one value per row replicated over the group
  ("rowvec");
- everything else is "blocked": for a [R, C] tile over T threads with vector width v, thread t
  holds, for each row, C/T elements in chunks of v at columns chunk*T*v + t*v + j. Adjacent
  threads touch adjacent 16-byte chunks, so loads and stores coalesce.
A tile whose layout cannot be decided, or that mixes layouts without a conversion, is an error
that names the op and line and says why.
"""

from __future__ import annotations

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Value, map_kernel_values
from argus.ir.types import TileType

BLOCKED, ROWVEC, WGMMA_ACC = "blocked", "rowvec", "wgmma_acc"


def infer_layouts(kernel: Kernel) -> Kernel:
    layout: dict[int, str] = {}
    acc_ids = {op.acc.id for op in kernel.walk() if isinstance(op, O.Wgmma)}
    changed = True
    # Iterate to a fixed point: assignments can carry a layout backwards into a variable.
    for _ in range(10):
        if not changed:
            break
        changed = False
        for op in kernel.walk():
            new = _rule(op, layout, acc_ids)
            if new is None:
                continue
            vid, lay = new
            if layout.get(vid) != lay:
                if vid in layout and layout[vid] != lay:
                    raise CompileError(f"tile {op.results()[0] if op.results() else ''} needs "
                                       f"layout {lay} here but {layout[vid]} elsewhere", op.loc,
                                       fix="convert explicitly, or keep wgmma accumulators and "
                                           "loaded tiles separate")
                layout[vid] = lay
                changed = True
        for op in kernel.walk():
            if isinstance(op, O.Assign) and op.src.id in layout and op.dst.id not in layout:
                layout[op.dst.id] = layout[op.src.id]
                changed = True

    def retype(v: Value) -> Value:
        if isinstance(v.type, TileType):
            lay = layout.get(v.id, BLOCKED)
            return Value(v.id, TileType(v.type.dtype, v.type.shape, lay), v.hint)
        return v

    out = map_kernel_values(kernel, retype)
    _check(out)
    return out


def _rule(op, layout: dict[int, str], acc_ids: set[int]):
    if isinstance(op, O.Full):
        return op.result.id, WGMMA_ACC if op.result.id in acc_ids else BLOCKED
    if isinstance(op, O.Load):
        return op.result.id, BLOCKED
    if isinstance(op, O.LdMatrix):
        return op.result.id, WGMMA_ACC  # the m8n8.x4 fragment of 16-row blocks (§2.4)
    if isinstance(op, O.TileSlice):
        return op.result.id, layout.get(op.src.id, BLOCKED)
    if isinstance(op, O.Reduce):
        return op.result.id, ROWVEC if op.axis == len(op.src.type.shape) - 1 else BLOCKED
    if isinstance(op, O.Convert):
        return op.result.id, layout.get(op.src.id, BLOCKED)
    if isinstance(op, O.Elementwise):
        tiles = [a for a in op.args if isinstance(a.type, TileType)]
        full = [a for a in tiles if a.type.shape == op.result.type.shape]
        lays = {layout.get(a.id, BLOCKED) for a in full} or {BLOCKED}
        if WGMMA_ACC in lays:
            return op.result.id, WGMMA_ACC
        return op.result.id, BLOCKED if BLOCKED in lays or not lays - {ROWVEC} else ROWVEC
    return None


def _check(kernel: Kernel) -> None:
    for op in kernel.walk():
        if isinstance(op, O.Elementwise):
            lays = {a.type.layout for a in op.args if isinstance(a.type, TileType)}
            if WGMMA_ACC in lays and len(lays - {WGMMA_ACC}) and any(
                    a.type.shape != op.result.type.shape for a in op.args
                    if isinstance(a.type, TileType)):
                raise CompileError("broadcasting a row or column against a wgmma accumulator is "
                                   "not supported yet", op.loc,
                                   fix="apply the broadcast after storing, or to a loaded tile")
