"""The shape:stride layout algebra: composition, complement, logical divide and products.

Job: build new layouts from old ones so that the result is exactly the intended function:

* `composition(A, B)(c) == A(B(c))` for every c in B's domain;
* `complement(A, M)` fills the gaps of A so that `(A, complement(A, M))` is injective and
  its image covers [0, M);
* `logical_divide(A, B) = A ∘ (B, complement(B, size A))` (B-shaped tiles, then the rest);
* `logical_product(A, B) = (A, complement(A, size A · cosize B) ∘ B)` (A repeated as B says),
  with `blocked_product` / `raked_product` regrouping it mode by mode.

Invariant kept: never a wrong answer. CuTe's composition can silently return a layout that is
not A∘B when its divisibility (admissibility) conditions fail (NVIDIA/cutlass discussion
#3288). Here every case the construction cannot represent exactly raises ValueError saying
which condition failed, on which modes, and how to fix it. The constructions follow the
published math (Shah, "A Note on the Algebra of CuTe Layouts"; Cecka, arXiv 2603.02298).

Evaluation past the domain: A is coalesced first and, as in CuTe, its last mode is treated as
unbounded, so `A(B(c))` with `B(c) >= size(A)` means "extend A along its last coalesced
mode". Inside A's domain the result never depends on this convention.
"""

from __future__ import annotations

import numpy as np

from argus.layout import inttuple as it
from argus.layout.inttuple import IntTuple
from argus.layout.shape_stride import Layout, coalesce, make_layout

# A tiler: a layout, an int n (meaning n:1), or a tuple of tilers applied mode by mode.
Tiler = Layout | int | tuple


def _as_layout(x: Layout | int, what: str) -> Layout:
    if isinstance(x, Layout):
        return x
    if it.is_int(x):
        return Layout(int(x), 1)
    raise TypeError(f"{what}: expected a Layout or an int, got {x!r}")


def _flat_modes(layout: Layout) -> list[tuple[int, int]]:
    c = coalesce(layout)
    return list(zip(it.flatten(c.shape), it.flatten(c.stride)))


def composition(a: Layout, b: Tiler) -> Layout:
    """R = A ∘ B with R(c) == A(B(c)) on B's domain; R has B's mode structure.

    `b` may be a Layout, an int n (= n:1) or a tuple of tilers applied to A's modes one by one
    (modes of A beyond the tuple are kept). Raises ValueError when A∘B is not a shape:stride
    layout that this construction can build (divisibility conditions), never returns a wrong one.
    """
    if isinstance(b, tuple):
        if len(b) > a.rank:
            raise ValueError(f"composition: tiler {b} has more modes than layout {a}")
        modes = [a[i] if b[i] is None else composition(a[i], b[i]) for i in range(len(b))]
        modes += [a[i] for i in range(len(b), a.rank)]
        return make_layout(*modes)
    b = _as_layout(b, "composition")
    if it.is_tuple(b.shape):
        result = make_layout(*(composition(a, mode) for mode in b.modes()))
        _check_modes_do_not_carry(a, b)
        return result
    return _compose_one_mode(a, b.shape, b.stride)


def _check_modes_do_not_carry(a: Layout, b: Layout) -> None:
    """(A∘B0, A∘B1, ...) is A∘B only if A is additive on B's modes: A(y0 + y1) = A(y0) + A(y1)
    for y_k in the image of B_k. That holds iff adding the mixed-radix digits of the y_k (radices
    = A's coalesced mode sizes, the last unbounded) never carries, i.e. for every digit the sum
    over modes of its largest value stays below the radix. Otherwise raise."""
    radices = [n for n, _ in _flat_modes(a)][:-1]
    if not radices or b.rank < 2:
        return
    worst = np.zeros(len(radices), dtype=np.int64)
    for mode in b.modes():
        rest = mode.table()
        for j, n in enumerate(radices):
            worst[j] += int((rest % n).max())
            rest = rest // n
    for j, n in enumerate(radices):
        if worst[j] >= n:
            raise ValueError(
                f"composition {a} ∘ {b} is not admissible (modes carry): the offsets of B's "
                f"modes add up to digit {int(worst[j])} in mode {j} (size {n}) of coalesced "
                f"A = {coalesce(a)}, so A(B0 + B1) != A(B0) + A(B1) and the result would not "
                "be A∘B mode by mode. fix: compose with each mode of B separately, or choose B "
                "whose modes address disjoint parts of A's modes")


def _compose_one_mode(a: Layout, s: int, d: int) -> Layout:
    """A ∘ (s:d): the points A(0), A(d), ..., A((s-1)d) as a layout."""
    if s == 1:
        return Layout(1, 0)
    if d == 0:
        return Layout(s, 0)
    modes = _flat_modes(a)
    # 1. Stride divisibility: "divide A by d" by walking its modes; the last mode is unbounded.
    rest = d
    remaining: list[tuple[int, int]] = []
    for j, (n, stride) in enumerate(modes[:-1]):
        if rest % n == 0:                  # d steps over this whole mode
            rest //= n
            continue
        if n % rest == 0:                  # d lands inside this mode: keep n/d of it
            remaining = [(n // rest, stride * rest)] + modes[j + 1:]
            rest = 1
            break
        if (s - 1) * rest < n:             # all s points stay inside this mode
            return Layout(s, stride * rest)
        raise ValueError(
            f"composition {a} ∘ {s}:{d} is not admissible (stride divisibility): after "
            f"dividing by the earlier modes the remaining stride {rest} neither divides nor is "
            f"divisible by mode size {n} of coalesced A = {coalesce(a)}, so the points "
            f"A(i*{d}) carry across that mode and are not a shape:stride layout. fix: use a "
            "tiler stride that divides A's mode sizes (or a multiple of them)")
    else:
        n_last, d_last = modes[-1]
        remaining = [(n_last, d_last * rest)]
    # 2. Shape divisibility: take s points from the remaining modes, the last one unbounded.
    shapes: list[int] = []
    strides: list[int] = []
    rest_shape = s
    for j, (n, stride) in enumerate(remaining):
        if j == len(remaining) - 1 or rest_shape <= n:
            shapes.append(rest_shape)
            strides.append(stride)
            break
        if rest_shape % n != 0:
            raise ValueError(
                f"composition {a} ∘ {s}:{d} is not admissible (shape divisibility): "
                f"{rest_shape} points remain but mode {n}:{stride} of coalesced A = "
                f"{coalesce(a)} holds {n}, which does not divide {rest_shape}; the points would "
                "wrap into the next mode mid-way. fix: use a tiler size that is a multiple of "
                "A's leading mode sizes (or at most the first one)")
        shapes.append(n)
        strides.append(stride)
        rest_shape //= n
    if len(shapes) == 1:
        return Layout(shapes[0], strides[0])
    return Layout(tuple(shapes), tuple(strides))


def complement(a: Layout, cotarget: IntTuple | None = None) -> Layout:
    """The layout R of the offsets A does not reach, ordered by stride, up to `cotarget`.

    `(A, R)` is injective and its image covers [0, cotarget) (cotarget defaults to cosize A).
    Raises ValueError when A's modes overlap (a stride is not a multiple of the extent of the
    smaller modes), since no such R exists then.
    """
    m = a.cosize if cotarget is None else it.product(it.normalize(cotarget))
    leaves = [(s, d) for s, d in zip(it.flatten(a.shape), it.flatten(a.stride))
              if s != 1 and d != 0]
    leaves.sort(key=lambda p: (p[1], p[0]))
    shapes: list[int] = []
    strides: list[int] = []
    current = 1
    for s, d in leaves:
        if d % current != 0:
            raise ValueError(
                f"complement of {a}: mode {s}:{d} overlaps the modes below it (its stride {d} "
                f"is not a multiple of their extent {current}), so A is not a disjoint union of "
                "strided modes and has no complement. fix: use an injective layout whose sorted "
                "strides are multiples of the previous extents")
        shapes.append(d // current)
        strides.append(current)
        current = s * d
    shapes.append(it.ceil_div(m, current))
    strides.append(current)
    return coalesce(Layout(tuple(shapes), tuple(strides)))


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """A ∘ (B, complement(B, size A)): mode 0 is one B-tile, mode 1 enumerates the tiles.

    A tuple tiler divides A mode by mode (mode i becomes (tile_i, rest_i)).
    """
    if isinstance(tiler, tuple):
        if len(tiler) > a.rank:
            raise ValueError(f"logical_divide: tiler {tiler} has more modes than layout {a}")
        modes = [a[i] if tiler[i] is None else logical_divide(a[i], tiler[i])
                 for i in range(len(tiler))]
        modes += [a[i] for i in range(len(tiler), a.rank)]
        return make_layout(*modes)
    b = _as_layout(tiler, "logical_divide")
    return composition(a, make_layout(b, complement(b, a.size)))


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """logical_divide regrouped as ((tile modes...), (rest modes...))."""
    if not isinstance(tiler, tuple):
        return logical_divide(a, tiler)
    d = logical_divide(a, tiler)
    tiles = [d[i][0] for i in range(len(tiler))]
    rests = [d[i][1] for i in range(len(tiler))] + [d[i] for i in range(len(tiler), d.rank)]
    return make_layout(make_layout(*tiles), make_layout(*rests))


def logical_product(a: Layout, b: Layout) -> Layout:
    """(A, complement(A, size A · cosize B) ∘ B): A is the tile, B says where copies go."""
    b = _as_layout(b, "logical_product")
    return make_layout(a, composition(complement(a, a.size * b.cosize), b))


def _padded_modes(x: Layout, r: int) -> list[Layout]:
    return list(x.modes()) + [Layout(1, 0)] * (r - x.rank)


def blocked_product(a: Layout, b: Layout) -> Layout:
    """Mode i = (A_i, B_i'): A is a contiguous block repeated over B's grid.

    The rank is max(rank A, rank B) (missing modes are 1:0). For a compact A this is
    `((a0,b0),(a1,b1)...)` with offset A(i) + size(A)·B(j).
    """
    r = max(a.rank, b.rank)
    pa, pb = make_layout(*_padded_modes(a, r)), make_layout(*_padded_modes(b, r))
    rest = logical_product(pa, pb)[1]
    return make_layout(*(make_layout(pa[i], rest[i]) for i in range(r)))


def raked_product(a: Layout, b: Layout) -> Layout:
    """Mode i = (B_i', A_i): A's elements are interleaved (raked) across B's grid."""
    r = max(a.rank, b.rank)
    pa, pb = make_layout(*_padded_modes(a, r)), make_layout(*_padded_modes(b, r))
    rest = logical_product(pa, pb)[1]
    return make_layout(*(make_layout(rest[i], pa[i]) for i in range(r)))
