"""Rules for shared-memory buffers and views, global loads/stores and atomics,
ldmatrix/stmatrix.

Invariant: shared memory starts as NaN (reading an unwritten element shows up in the result);
global accesses are clipped at the tensor's edges (loads fill `other`, stores drop), and stores
round to the tensor's dtype. Atomics act at once on the tensor: the machine runs one group
(CTA or warpgroup) at a time, so each is indivisible, and the order in which the groups run is
one order the GPU may take.
"""

from __future__ import annotations

import numpy as np

from argus.ir import ops as O
from argus.runtime.interp.machine import _Group, _Interp, _View
from argus.runtime.interp.registry import rule


@rule(O.SmemAlloc)
def smem_alloc(m: _Interp, g: _Group, op: O.SmemAlloc) -> None:
    t = op.result.type
    g.env[op.result.id] = np.full(t.shape, np.nan, dtype=np.float32)


@rule(O.SmemSlice)
def smem_slice(m: _Interp, g: _Group, op: O.SmemSlice) -> None:
    stage = None if op.stage is None else m.val(g, op.stage)
    row0 = op.row0 if isinstance(op.row0, int) else m.val(g, op.row0)
    g.env[op.result.id] = _View(m.val(g, op.buffer), stage, row0,
                                op.result.type.shape[0], op.buffer.id)


@rule(O.StMatrix)
def stmatrix(m: _Interp, g: _Group, op: O.StMatrix) -> None:
    src = m.val(g, op.src)
    if op.transposed:   # [A*W, K] -> atoms [A][K][W] (O.StMatrix.transposed)
        w, k = op.dst.type.shape[1], op.src.type.shape[1]
        src = np.asarray(src).reshape(-1, w, k).transpose(0, 2, 1).reshape(-1, w)
    m.val(g, op.dst).array()[...] = src


@rule(O.LdMatrix)
def ldmatrix(m: _Interp, g: _Group, op: O.LdMatrix) -> None:
    src = m.val(g, op.src).array()
    if op.transposed:   # atoms [A][K][W] -> [A*W, K] (O.LdMatrix.transposed)
        k, w = op.result.type.shape[1], src.shape[1]
        src = src.reshape(-1, k, w).transpose(0, 2, 1).reshape(-1, k)
    g.env[op.result.id] = src.copy()


@rule(O.Load)
def load(m: _Interp, g: _Group, op: O.Load) -> None:
    offs = [m.val(g, o) for o in op.offsets]
    g.env[op.result.id] = m._box(op.tensor, offs, op.result.type.shape, op.other)


def _gathered(m: _Interp, g: _Group, op, src: np.ndarray, dtype) -> np.ndarray:
    """The gather's result: element i reads `src` at the indices' element i (broadcast to the
    result's shape); an index outside its dim of `src` reads `op.other`."""
    shape = op.result.type.shape
    idx = [np.broadcast_to(np.asarray(m.val(g, ix), dtype=np.int64), shape)
           for ix in op.indices]
    inside = np.ones(shape, dtype=bool)
    for ix, n in zip(idx, src.shape):
        inside &= (ix >= 0) & (ix < n)
    out = np.full(shape, op.other, dtype=dtype)
    out[inside] = src[tuple(ix[inside] for ix in idx)]
    return out


@rule(O.Gather)
def gather(m: _Interp, g: _Group, op: O.Gather) -> None:
    """Element i reads the tensor at the indices' element i (broadcast); an index outside its
    dim reads `other`, as the load's bounds do."""
    src = m.tensors[op.tensor.id]
    # float tensors widen to float32 registers; integer ones keep their type (exact), as _box
    g.env[op.result.id] = _gathered(m, g, op, src,
                                    np.float32 if src.dtype.kind == "f" else src.dtype)


@rule(O.SmemGather)
def smem_gather(m: _Interp, g: _Group, op: O.SmemGather) -> None:
    """Element i reads the view at the indices' element i, `other` outside the view (an
    element never written reads NaN, as every shared read: a missing barrier or write shows
    up in the result)."""
    g.env[op.result.id] = _gathered(m, g, op, m.val(g, op.src).array(), np.float32)


@rule(O.LoadScalar)
def load_scalar(m: _Interp, g: _Group, op: O.LoadScalar) -> None:
    offs = [m.val(g, o) for o in op.offsets]
    src = m.tensors[op.tensor.id]
    inside = all(0 <= o < n for o, n in zip(offs, src.shape))
    x = src[tuple(offs)] if inside else op.other
    # an f32 scalar stays f32 in later arithmetic, as in the generated CUDA
    g.env[op.result.id] = (np.float32(x) if op.result.type.dtype.is_float
                           else int(x))


@rule(O.Store)
def store(m: _Interp, g: _Group, op: O.Store) -> None:
    offs = [m.val(g, o) for o in op.offsets]
    value = m.val(g, op.value)
    m._write(op.tensor, offs, value.T if op.transposed else value)


@rule(O.AtomicAdd)
def atomic_add(m: _Interp, g: _Group, op: O.AtomicAdd) -> None:
    offs = [m.val(g, o) for o in op.offsets]
    m._write(op.tensor, offs, np.asarray(m.val(g, op.value)), add=True)


@rule(O.AtomicFetchAdd)
def atomic_fetch_add(m: _Interp, g: _Group, op: O.AtomicFetchAdd) -> None:
    """Once per executing group, as on the device (one thread of the group runs the atomic);
    atom.inc's wrap: old >= wrap - 1 gives 0, as PTX (unsigned compare)."""
    offs = [m.val(g, o) for o in op.offsets]
    dst = m.tensors[op.tensor.id]
    if not all(0 <= o < n for o, n in zip(offs, dst.shape)):
        g.env[op.result.id] = -1
        return
    old = int(dst[tuple(offs)])
    if op.wrap is None:
        new = (old + int(m.val(g, op.value))) & 0xFFFFFFFF
        new = new - (1 << 32) if new >= 1 << 31 else new   # stored back as int32
    else:
        wrap = int(m.val(g, op.wrap))
        new = 0 if (old & 0xFFFFFFFF) >= ((wrap - 1) & 0xFFFFFFFF) else old + 1
    dst[tuple(offs)] = new
    g.env[op.result.id] = old
