"""Inverses of shape:stride layouts (CuTe's right_inverse and left_inverse).

Job: undo a layout, e.g. "which register holds offset x" or "which coordinate did a copy
write at smem offset x" (the verifier resolves reads this way, INVARIANTS.md §3.1).

* `right_inverse(L)`: L is coalesced, then its modes are chained by stride 1, s0, s0*s1, ...
  (the first mode with the next stride each time); R maps i back to that chain's index, so
  `L(R(i)) == i` for i in [0, size R). size(R) == size(L) when L is a bijection onto
  [0, size L).
* `left_inverse(L)`: `R(L(i)) == i` for every i when L is injective; when L repeats offsets
  through stride-0 modes it is CuTe's quasi-inverse, `L(R(L(i))) == L(i)` (R picks the
  coordinate whose broadcast modes are 0). CuTe's right_inverse((L, complement L)) when L's
  gaps are even; with uneven gaps that would invert only a prefix, so the sorted strides are
  read as a mixed radix instead (see the function).

Invariant kept: the returned layout satisfies its equation exactly on the stated domain; when
the complement does not exist (argus.layout.algebra.complement says why) left_inverse raises.
"""

from __future__ import annotations

from argus.layout import inttuple as it
from argus.layout.algebra import complement
from argus.layout.shape_stride import Layout, coalesce, make_layout


def right_inverse(layout: Layout) -> Layout:
    """CuTe's right inverse: L(R(i)) == i on [0, size R), R as large as L's stride chain.

    L is coalesced first; from stride 1 on, the first mode whose stride is the next one in
    the chain 1, s_a, s_a*s_b, ... is appended, and R gives it L's compact index stride.
    """
    flat = coalesce(layout)
    shapes = it.flatten(flat.shape)
    strides = it.flatten(flat.stride)
    index_strides = it.flatten(it.prefix_products(flat.shape))
    out_shape: list[int] = []
    out_stride: list[int] = []
    used: set[int] = set()
    current = 1
    while True:
        pos = next((p for p, (s, d) in enumerate(zip(shapes, strides))
                    if d == current and s > 1 and p not in used), None)
        if pos is None:
            break
        used.add(pos)
        out_shape.append(shapes[pos])
        out_stride.append(index_strides[pos])
        current *= shapes[pos]
    if not out_shape:
        return Layout(1, 0)
    if len(out_shape) == 1:
        return Layout(out_shape[0], out_stride[0])
    return Layout(tuple(out_shape), tuple(out_stride))


def left_inverse(layout: Layout) -> Layout:
    """R with R(L(i)) == i for every i in [0, size L) when L is injective; with stride-0
    (broadcast) modes the quasi-inverse L(R(L(i))) == L(i).

    CuTe's construction, right_inverse((L, complement L)), when L's gaps are even (each
    sorted stride a multiple of the extent below it): (L, complement L) is then a bijection
    and its right inverse inverts L. With uneven gaps CuTe's R inverts L only below the first
    uneven gap, so argus reads the sorted strides as a mixed radix instead when they divide
    each other (d_1 | d_2 | ...): R = (d_1, d_2/d_1, ..., s_n):(0, S_1, ..., S_n), S_k the
    index stride of the mode of stride d_k. Raises ValueError, saying why, when L has no
    complement (its non-broadcast modes repeat an offset or interleave) or when its gaps are
    uneven and its strides do not divide each other.
    """
    try:
        rest = complement(layout)
    except ValueError as exc:
        raise ValueError(f"left_inverse of {layout}: no left inverse is built without a "
                         f"complement; {exc}") from None
    index_strides = it.flatten(it.prefix_products(layout.shape))
    live = sorted((d, s, index_strides[pos]) for pos, (s, d) in enumerate(
        zip(it.flatten(layout.shape), it.flatten(layout.stride))) if s > 1 and d > 0)
    extent = 1
    uneven = None
    for d, s, _ in live:
        if d % extent and uneven is None:
            uneven = (s, d, extent)
        extent = s * d
    if uneven is None:
        return right_inverse(make_layout(layout, rest))
    for (d0, _, _), (d1, s1, _) in zip(live, live[1:]):
        if d1 % d0:
            s, d, e = uneven
            raise ValueError(
                f"left_inverse of {layout}: the gap below mode {s}:{d} is uneven (stride {d} "
                f"is not a multiple of the extent {e} below it), so CuTe's right_inverse((L, "
                f"complement L)) would invert L only on offsets below {d}; and mode {s1}:{d1}'s "
                f"stride is not a multiple of the next smaller stride {d0}, so the strides are "
                "no mixed radix either. fix: use strides that are multiples of each other "
                "(or of the extents below them)")
    shapes = [live[0][0]] + [d1 // d0 for (d0, _, _), (d1, _, _) in zip(live, live[1:])]
    shapes.append(live[-1][1])
    strides = [0] + [idx for _, _, idx in live]
    return coalesce(Layout(tuple(shapes), tuple(strides)))
