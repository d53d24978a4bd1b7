"""Rules for TMA bulk copies between global tensors and shared-memory views.

Invariant: a load fills the whole view (out-of-bounds elements read 0, as the TMA unit zero-fills);
a multicast load writes the same window of every CTA of the cluster; a store is clipped at the
tensor's edges and rounds to its dtype. Every copy's innermost start is 16-byte aligned: the
device traps (CUDA_ERROR_ILLEGAL_INSTRUCTION) on one that is not, which no descriptor check can see
since the coordinates are runtime values (seen on the H200: the fp8 kernel's block-scale loads at
K-block k of an f32 tensor; Triton issue 7385 and its Gluon TMA tutorial state the rule).
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.runtime.interp.machine import InterpError, _Group, _Interp, _View
from argus.runtime.interp.registry import rule


def _check_inner_alignment(op: O.TmaLoad | O.TmaPrefetch | O.TmaStore,
                            coords: list) -> None:
    elem_bytes = op.tensor.type.dtype.bytes
    start = int(coords[-1]) * elem_bytes
    if start % 16:
        what = "store to" if isinstance(op, O.TmaStore) else \
            "load from" if isinstance(op, O.TmaLoad) else "prefetch of"
        raise InterpError(
            f"TMA {what} {op.tensor.hint or 'a tensor'} at {op.loc}: the innermost coordinate "
            f"{int(coords[-1])} starts {start} bytes into a row ({elem_bytes}-byte elements), "
            "not a multiple of 16: the device stops with an illegal instruction. Fix: start "
            f"the box at a multiple of {max(1, 16 // elem_bytes)} elements along the innermost "
            "dim (round the coordinate down and pick the wanted column from the box)")


@rule(O.TmaLoad)
def tma_load(m: _Interp, g: _Group, op: O.TmaLoad) -> None:
    view: _View = m.val(g, op.dst)
    coords = [m.val(g, c) for c in op.coords]
    _check_inner_alignment(op, coords)
    shape = view.array().shape
    # an explicit box (several non-unit outer dims) lands in the view row-major
    if op.elem_strides:
        # elementStrides: the box traverses box[d] * stride elements along dim d (out of
        # bounds ones zero-filled, as any) and lands every stride-th, from coords[d] on
        span = tuple(b * e for b, e in zip(op.box, op.elem_strides))
        box = m._box(op.tensor, coords, span, 0.0)[
            tuple(slice(None, None, e) for e in op.elem_strides)].reshape(shape)
    elif op.box:
        box = m._box(op.tensor, coords, op.box, 0.0).reshape(shape)
    else:
        box = m._box(op.tensor, coords, shape, 0.0)
    targets = ([view.on(peer[view.buffer_id]) for peer in g.peers]
               if op.multicast else [view])
    for target in targets:
        target.array()[...] = box


@rule(O.TmaPrefetch)
def tma_prefetch(m: _Interp, g: _Group, op: O.TmaPrefetch) -> None:
    """A hint into L2: no data moves that the kernel reads, so nothing to do but the device's
    own refusal of a misaligned innermost coordinate."""
    _check_inner_alignment(op, [m.val(g, c) for c in op.coords])


@rule(O.TmaStore)
def tma_store(m: _Interp, g: _Group, op: O.TmaStore) -> None:
    view = m.val(g, op.src)
    coords = [m.val(g, c) for c in op.coords]
    _check_inner_alignment(op, coords)
    m._write(op.tensor, coords, view.array())
