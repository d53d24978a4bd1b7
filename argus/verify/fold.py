"""Folds: a tile's static windows along an axis added elementwise, a row sum left unfinished.

Job: recognize the deferred row sum (AttentionSchedule.defer_row_sum; FA3's online_softmax,
whose quad reduction waits for finalize): instead of `l = l * alpha + p.sum(axis=1)` each
block, `l = l * alpha + (p[:, 0:8] + p[:, 8:16] + ... + p[:, N - 8:N])` and `l.sum(axis=1)`
once after the loop. Element (r, c) of the [ROWS, 8] partial adds p[r, start_g + c] over the
windows g, so the fold is a reduction of p along the axis whose reduced coordinate is (window
g, column c), completed by the sum over c after the loop: it is `p.sum(axis)` exactly when
the windows' columns {start_g + c} are every column of p once (a partition: no window
dropped or added twice, none of another width or offset), and the after-loop sum runs over
the axis the windows were taken along. reduce.coverage (check_reduce: `_fold_claims`) decides
both, and poses the per-block claims on p as for the unfolded sum.

A fold is recognized only in this form (anything else is not one, and nothing is claimed):
the leaves of a maximal tree of elementwise adds of one shape (the tree the accumulator joins:
`l * alpha + w0 + w1 ...`, any association), those that are `tile.slice` windows of one tile
along one axis, narrower than the tile there (a window the whole tile wide is the tile).
The other leaves (the rescaled accumulator) are not the fold's. Whether the sum is carried
over a loop and reduced after it is the checker's question (a fold outside a loop, or whose
partials nothing reduces after it, keeps its width on purpose and states nothing about a
row).
"""

from __future__ import annotations

from dataclasses import dataclass

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify.model import Model
from argus.verify.transfer.domain import Site


@dataclass(frozen=True)
class Fold:
    """The windows of `src` along `axis` added into `root` (at `site`, the root add's)."""

    root: object              # the add tree's result: what joins the accumulator
    src: object               # the tile whose windows are added
    axis: int
    width: int                # every window's extent along the axis (the adds' shape)
    windows: tuple            # the tile.slice ops, once per time each is added
    site: Site

    @property
    def extent(self) -> int:
        return self.src.type.shape[self.axis]

    def counts(self) -> dict[int, list[int]]:
        """Column of src along the axis -> the starts of the windows that add it."""
        out: dict[int, list[int]] = {c: [] for c in range(self.extent)}
        for w in self.windows:
            for c in range(w.start, w.start + self.width):
                out.setdefault(c, []).append(w.start)
        return out


def folds(model: Model) -> list[Fold]:
    defs = model.value_defs()

    def adds(v) -> O.Elementwise | None:
        op = defs.get(v.id)
        if isinstance(op, O.Elementwise) and op.fn == "add" and len(op.args) == 2 and \
                all(isinstance(a.type, TileType) and tuple(a.type.shape) ==
                    tuple(op.result.type.shape) for a in op.args):
            return op
        return None
    # the values an add of the same shape reads: not the root of a maximal tree
    inner = {a.id for ew in model.ews if adds(ew.op.result) is not None for a in ew.op.args}
    out: list[Fold] = []
    roots: set[int] = set()
    for ew in model.ews:
        if adds(ew.op.result) is None or ew.op.result.id in inner or \
                ew.op.result.id in roots:
            continue
        roots.add(ew.op.result.id)        # one fold a tree (the first site's, as recorded)
        leaves: list = []
        todo = [ew.op.result]
        while todo:
            v = todo.pop()
            op = adds(v)
            if op is None:
                leaves.append(defs.get(v.id))
            else:
                todo += reversed(op.args)
        groups: dict[tuple, list] = {}
        for leaf in leaves:
            if isinstance(leaf, O.TileSlice) and \
                    leaf.result.type.shape[leaf.axis] < leaf.src.type.shape[leaf.axis]:
                groups.setdefault((leaf.src.id, leaf.axis), []).append(leaf)
        for (_, axis), windows in groups.items():
            out.append(Fold(ew.op.result, windows[0].src, axis,
                            windows[0].result.type.shape[axis], tuple(windows), ew.site))
    return out
