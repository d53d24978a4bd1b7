"""Pass: give every TMA copy its tensor-map box, swizzle and credited bytes.

The box is the smem view's shape (outermost first), or the explicit box of the load (its
outer extents multiply to the view's rows: the box lands row-major); the swizzle is the
buffer's, so the tensor map and every reader of the buffer agree by construction (bug class 1
of INVARIANTS.md §4). The bytes credited to the barrier are the full box, zero-filled parts
included (PTX ISA "cp.async.bulk.tensor", complete_tx).
"""

from __future__ import annotations

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel
from argus.ir.rewrite import Rules

SWIZZLE_SPAN = {0: 1 << 30, 32: 32, 64: 64, 128: 128}


def _box(op: O.TmaLoad, _ctx):
    if op.swizzle != -1:     # lowered already
        return None
    view = op.dst.type
    rows, cols = view.shape
    if op.box:               # an explicit box (ag.tma.load(box=...)): rows = its outer extents
        cols = op.box[-1]
        rows = 1
        for e in op.box[:-1]:
            rows *= e
        if (rows, cols) != tuple(view.shape):
            raise CompileError(f"TMA box {op.box} does not fill its view {view.shape} "
                               f"row-major", op.loc)
    inner_bytes = cols * view.dtype.bytes
    if view.swizzle and inner_bytes > SWIZZLE_SPAN[view.swizzle]:
        raise CompileError(f"TMA box inner extent {inner_bytes} B exceeds the {view.swizzle}B "
                           f"swizzle span", op.loc)
    if inner_bytes % 16:
        raise CompileError(f"TMA box inner extent {inner_bytes} B is not a multiple of 16 B",
                           op.loc, fix="use a tile width whose bytes are a multiple of 16")
    box = op.box or (rows, cols)
    if len(box) < len(op.tensor.type.shape):
        box = (1,) * (len(op.tensor.type.shape) - 2) + box
    return op.replace(box=box, swizzle=view.swizzle, bytes=rows * cols * view.dtype.bytes)


RULES = Rules([(O.TmaLoad, _box)])


def run(kernel: Kernel) -> Kernel:
    return RULES.apply(kernel)
