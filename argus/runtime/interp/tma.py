"""Rules for TMA bulk copies between global tensors and shared-memory views.

Invariant: a load fills the whole view (out-of-bounds elements read 0, as the TMA unit zero-fills);
a multicast load writes the same window of every CTA of the cluster; a store is clipped at the
tensor's edges and rounds to its dtype.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.runtime.interp.machine import _Group, _Interp, _View
from argus.runtime.interp.registry import rule


@rule(O.TmaLoad)
def tma_load(m: _Interp, g: _Group, op: O.TmaLoad) -> None:
    view: _View = m.val(g, op.dst)
    coords = [m.val(g, c) for c in op.coords]
    shape = view.array().shape
    # an explicit box (several non-unit outer dims) lands in the view row-major
    box = m._box(op.tensor, coords, op.box, 0.0).reshape(shape) if op.box else \
        m._box(op.tensor, coords, shape, 0.0)
    targets = ([view.on(peer[view.buffer_id]) for peer in g.peers]
               if op.multicast else [view])
    for target in targets:
        target.array()[...] = box


@rule(O.TmaStore)
def tma_store(m: _Interp, g: _Group, op: O.TmaStore) -> None:
    view = m.val(g, op.src)
    coords = [m.val(g, c) for c in op.coords]
    m._write(op.tensor, coords, view.array())
