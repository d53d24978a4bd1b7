"""Where a reduction's result elements go: the stores an element can reach, and at which index.

Job: fill.identity (check_fills.py) asks whether a masked element that reaches a reduction
with the wrong fill can change the kernel's output. Element e of the reduced tile goes into
result element k(e) (e with the reduced axis at 0); what k(e) then influences is a question
of data flow over the IR, separate from the tags. This module follows the result forward
through the ops that keep track of *which element* a value is:

  elementwise (numpy broadcasting: an operand axis of extent 1 against a wider result reaches
  every index of it), convert, convert_layout: the same index; expand_dims: a new unit axis;
  tile.slice: the index shifted by the window's start; reduce and scan: every index along
  their axis; var / assign: the variable (a loop-carried update, `crossed`); store: the
  element's destination.

A use it does not follow (a wgmma operand, a write to shared memory, anything else) makes
the answer None: the caller then has no bound on where the element goes and keeps its
stronger claim. Tag ops (no effect at run time) and the register fences around a wgmma (they
move no data) are not uses.

The answer is a list of (store op, axes, crossed): tile element `idx` of the stored value can
depend on result element k when, for every axis d, axes[d] is None (any index) or
(j, off) with idx[d] == k[j] + off. `crossed`: the path went through an assignment, so the
store may run in a later iteration of a loop that encloses both (its loop indices are then not
the reduction's). The walk is a fixpoint over (value, axes, crossed) triples; a loop of shifts
that never closes is cut at a bound and answers None.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir import tag_ops as T
from argus.ir.core import Kernel

_LIMIT = 256          # (value, axes) facts before the walk gives up (None)
# readers that move no data: tag ops have no effect at run time; the register fences around a
# wgmma only order accesses of the tiles they name (or zero an accumulator no wgmma wrote)
_NO_DATA = (T.TagFn, T.TagTensor, T.TagCopy, T.TagAssume, T.TagAssert, T.Require, O.WgmmaFence,
            O.FenceOperands)


class Uses:
    """The readers of every value of a kernel (built once; `stores_reached` per reduction)."""

    def __init__(self, kernel: Kernel):
        self.readers: dict[int, list] = {}
        for op in kernel.walk():
            if isinstance(op, _NO_DATA):
                continue
            for v in (op.src,) if isinstance(op, O.Assign) else op.operands():
                self.readers.setdefault(v.id, []).append(op)
        self._memo: dict[object, list | None] = {}

    def stores_reached(self, red: O.Reduce) -> list[tuple[O.Store, tuple, bool]] | None:
        """The stores result element k of `red` can reach, as (store, axes, crossed) (module
        docstring), or None where it reaches a use this module does not follow."""
        key = red.result.id
        if key not in self._memo:
            seed = tuple(None if d == red.axis else (d, 0)
                         for d in range(len(red.result.type.shape)))
            self._memo[key] = self._walk(red.result, seed)
        return self._memo[key]

    def stores_from(self, v) -> list[tuple[O.Store, tuple, bool]] | None:
        """The stores tile value `v`'s elements can reach, each element at its own index
        (the same answer as `stores_reached`, seeded with every axis kept)."""
        key = ("from", v.id)
        if key not in self._memo:
            self._memo[key] = self._walk(v, tuple((d, 0) for d in range(len(v.type.shape))))
        return self._memo[key]

    def _walk(self, start, seed: tuple) -> list | None:
        seen: set = set()
        todo = [(start, seed, False)]
        out: list = []
        while todo:
            v, axes, crossed = todo.pop()
            if (v.id, axes, crossed) in seen:
                continue
            seen.add((v.id, axes, crossed))
            if len(seen) > _LIMIT:
                return None
            for op in self.readers.get(v.id, ()):
                nxt = _through(op, v, axes)
                if nxt is None:
                    return None
                for res, res_axes in nxt:
                    if res is None:                       # the store itself
                        out.append((op, res_axes, crossed))
                    else:
                        todo.append((res, res_axes, crossed or isinstance(op, O.Assign)))
        return out


def _through(op, v, axes: tuple) -> list | None:
    """What reading value v (whose element idx depends on k per `axes`) gives: a list of
    (result value or None for a store, the result's axes); None: not followed."""
    if isinstance(op, O.Store):
        if op.value.id != v.id:
            return None                      # a tile as an offset: not followed
        return [(None, axes)]
    if isinstance(op, O.Elementwise):
        out_shape = getattr(op.result.type, "shape", None)
        if out_shape is None:
            return None                      # a scalar made of tile data: not followed
        return [(op.result, _broadcast(axes, v.type.shape, out_shape))]
    if isinstance(op, (O.Convert, O.ConvertLayout)):
        return [(op.result, axes)]
    if isinstance(op, O.Var):
        return [(op.result, axes)]
    if isinstance(op, O.Assign):
        return [(op.dst, axes)]
    if isinstance(op, O.ExpandDims):
        return [(op.result, axes[:op.axis] + (None,) + axes[op.axis:])]
    if isinstance(op, O.TileSlice):
        a = axes[op.axis]
        shifted = None if a is None else (a[0], a[1] - op.start)
        return [(op.result, axes[:op.axis] + (shifted,) + axes[op.axis + 1:])]
    if isinstance(op, O.Reduce):
        return [(op.result, _any_along(axes, op.axis))]
    if isinstance(op, O.Scan):
        return [(op.result, _any_along(axes, op.axis)), (op.total, _any_along(axes, op.axis))]
    return None


def _any_along(axes: tuple, axis: int) -> tuple:
    return axes[:axis] + (None,) + axes[axis + 1:]


def _broadcast(axes: tuple, shape, out_shape) -> tuple:
    """An operand's axes seen in the result of a numpy broadcast: leading result axes the
    operand lacks, and its unit axes against wider ones, reach every index."""
    lead = len(out_shape) - len(shape)
    got = [None] * lead
    for d, a in enumerate(axes):
        got.append(None if shape[d] == 1 and out_shape[lead + d] != 1 else a)
    return tuple(got)
