"""Inverses of shape:stride layouts.

Job: undo a layout, e.g. "which register holds offset x" or "which coordinate did a copy
write at smem offset x" (the verifier resolves reads this way, INVARIANTS.md §3.1).

* `right_inverse(L)` is the largest compact R with `L(R(i)) == i` for i in [0, size R).
* `left_inverse(L)` (L injective) is an R with `R(L(i)) == i` for i in [0, size L).

Invariant kept: the returned layout satisfies its equation exactly on the stated domain; when
no such shape:stride layout exists the function raises ValueError instead of approximating.
"""

from __future__ import annotations

from argus.layout import inttuple as it
from argus.layout.algebra import complement
from argus.layout.shape_stride import Layout, coalesce, make_layout


def right_inverse(layout: Layout) -> Layout:
    """Largest R with L(R(i)) == i on [0, size R): chains the modes with strides 1, s0, s0*s1...

    Size-1 and stride-0 modes never help and are skipped. `size(R) == size(L)` exactly when L
    is a bijection onto [0, size L).
    """
    shapes = it.flatten(layout.shape)
    strides = it.flatten(layout.stride)
    index_strides = it.flatten(it.prefix_products(layout.shape))
    live = sorted((d, pos) for pos, (s, d) in enumerate(zip(shapes, strides))
                  if s != 1 and d != 0)
    out_shape: list[int] = []
    out_stride: list[int] = []
    current = 1
    for d, pos in live:
        if d < current:        # a second mode with an already-covered stride: unusable
            continue
        if d > current:        # a gap: offsets in [current, d) are never produced
            break
        out_shape.append(shapes[pos])
        out_stride.append(index_strides[pos])
        current *= shapes[pos]
    if not out_shape:
        return Layout(1, 0)
    return coalesce(Layout(tuple(out_shape), tuple(out_stride)))


def left_inverse(layout: Layout) -> Layout:
    """R with R(L(i)) == i for every i in [0, size L); L must be injective.

    Built as right_inverse((L, complement(L))): that pair is a bijection onto [0, n), so its
    right inverse is a two-sided inverse there. Raises ValueError when L is not injective or
    its modes overlap (then no complement, and in general no inverse layout, exists).
    """
    for s, d in zip(it.flatten(layout.shape), it.flatten(layout.stride)):
        if s > 1 and d == 0:
            raise ValueError(
                f"left_inverse of {layout}: mode {s}:0 broadcasts, so the layout is not "
                "injective and has no left inverse. fix: invert a layout without stride-0 modes")
    try:
        full = make_layout(layout, complement(layout))
    except ValueError as exc:
        raise ValueError(
            f"left_inverse of {layout}: its modes overlap, so (L, complement L) is not a "
            f"bijection and no inverse layout can be built ({exc})") from None
    return right_inverse(full)
