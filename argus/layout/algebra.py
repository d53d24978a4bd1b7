"""The shape:stride layout algebra: composition, complement, divides and products (CuTe's).

Job: build new layouts from old ones with CuTe C++'s semantics (include/cute/layout.hpp and
the CuTe docs "02_layout_algebra"), so that a kernel written against CuTe's algebra means the
same thing here. The defining equations, checked by tests/layout against an independent
reference on thousands of random layouts:

* `composition(A, B)(c) == A(B(c))` for every c in B's domain, the result is compatible with
  B (B's mode structure, each leaf possibly split), and A is evaluated the C++ way past its
  domain: the last leaf of A takes the rest of the index (A = (4,3,1):(3,1,0) extends in
  stride 0, A = 3:1 extends as x -> x);
* `complement(A, M)` is CuTe's: A's modes sorted by stride, the gaps filled with modes of
  shape floor(stride / extent below), plus a last mode up to M. (A, R) is injective and R is
  increasing and disjoint from A; it covers [0, M) only when every gap divides evenly;
* `left_inverse(L)` is CuTe's `right_inverse((L, complement L))`, a quasi-inverse
  (L∘R∘L == L) when L repeats offsets through stride-0 modes (argus.layout.inverse);
* `logical_divide(A, B) = A ∘ (B, complement(B, size A))`; `zipped_divide`, `tiled_divide`,
  `flat_divide` regroup it by the tiler's (possibly nested) modes;
* `logical_product(A, B) = (A, complement(A, size A · cosize B) ∘ B)`; `zipped_product`,
  `tiled_product`, `flat_product`, `blocked_product`, `raked_product` regroup it.

Invariant kept: never a wrong answer. CuTe C++ with dynamic ints can return a layout that is
not A∘B when its divisibility conditions fail (NVIDIA/cutlass discussion #3288); with static
ints it refuses them at compile time. Here such a composition is returned when it is still a
shape:stride layout compatible with B (found from its points), and otherwise refused with a
ValueError that shows the points and why no layout has them. Negative strides (CuTe "beta")
are not supported: `Layout` refuses them.
"""

from __future__ import annotations

import numpy as np

from argus.layout import inttuple as it
from argus.layout.inttuple import IntTuple
from argus.layout.shape_stride import Layout, coalesce, make_layout

# A tiler: a layout, an int n (meaning n:1), None (keep the mode), or a tuple of tilers
# applied mode by mode.
Tiler = Layout | int | tuple | None

# Point-wise fallbacks (finding a composition from its points, checking additivity) look at
# no more points than this; beyond it the error says that the check was not attempted.
_MAX_POINTS = 1 << 20


def _as_layout(x: Layout | int, what: str) -> Layout:
    if isinstance(x, Layout):
        return x
    if it.is_int(x):
        return Layout(int(x), 1)
    raise TypeError(f"{what}: expected a Layout, an int or a tuple of tilers, got {x!r}")


def _by_mode(a: Layout, tiler: tuple, op, what: str) -> Layout:
    """Apply `op(mode_i, tiler_i)` to the first len(tiler) modes of A; None keeps a mode."""
    if len(tiler) > a.rank:
        raise ValueError(
            f"{what}: tiler {tiler} has {len(tiler)} modes but layout {a} has rank {a.rank}. "
            "fix: give at most one tiler per mode of the layout (None keeps a mode)")
    modes = [a[i] if tiler[i] is None else op(a[i], tiler[i]) for i in range(len(tiler))]
    modes += [a[i] for i in range(len(tiler), a.rank)]
    return make_layout(*modes)


def _extension_modes(a: Layout) -> list[tuple[int, int]]:
    """A coalesced, keeping how A extends past its domain: the returned last mode is
    unbounded and A(x) = sum of digit_j(x) * stride_j in the mixed radix of the other modes.

    Plain `coalesce` drops a trailing size-1 leaf; C++ evaluation lets the last leaf take the
    rest of the index, so (4,3,1):(3,1,0) extends in stride 0. That leaf is kept here (merged
    into the mode before it only when the merge keeps the extension: s0 * d0 == d_last)."""
    leaves = list(zip(it.flatten(a.shape), it.flatten(a.stride)))
    out: list[tuple[int, int]] = []
    for pos, (s, d) in enumerate(leaves):
        if s == 1 and pos < len(leaves) - 1:
            continue
        if out and out[-1][0] * out[-1][1] == d:
            out[-1] = (out[-1][0] * s, out[-1][1])
        else:
            out.append((s, d))
    return out


def _layout(modes: list[tuple[int, int]]) -> Layout:
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


# ---- composition ---------------------------------------------------------------------------
def composition(a: Layout, b: Tiler) -> Layout:
    """R = A ∘ B with R(c) == A(B(c)) on B's domain; R has B's mode structure.

    `b` may be a Layout, an int n (= n:1), or a tuple of tilers applied to A's modes one by
    one (None keeps a mode; modes of A beyond the tuple are kept), as in CuTe. Raises
    ValueError when A∘B is not a shape:stride layout compatible with B, showing why.
    """
    if isinstance(b, tuple):
        return _by_mode(a, b, composition, "composition")
    if b is None:
        return a
    b = _as_layout(b, "composition")
    if it.is_tuple(b.shape):
        result = make_layout(*(composition(a, mode) for mode in b.modes()))
        _check_additive(a, b, result)
        return result
    return _compose_leaf(a, b.shape, b.stride)


def _check_additive(a: Layout, b: Layout, result: Layout) -> None:
    """(A∘B0, A∘B1, ...) is A∘B only if A(y0 + y1 + ...) == A(y0) + A(y1) + ... for y_k in
    the image of B_k. Cheap sufficient test first: adding the mixed-radix digits of the y_k
    (radices = A's coalesced mode sizes, the last unbounded) never carries. Otherwise compare
    every point and report the first one that differs."""
    radices = [n for n, _ in _extension_modes(a)][:-1]
    if b.rank <= 1 or not radices:      # one mode, or A is one unbounded mode (linear)
        return
    worst = np.zeros(len(radices), dtype=np.int64)
    for mode in b.modes():
        rest = mode.table()
        for j, n in enumerate(radices):
            worst[j] += int((rest % n).max())
            rest = rest // n
    if all(int(w) < n for w, n in zip(worst, radices)):
        return
    if b.size > _MAX_POINTS:
        raise ValueError(
            f"composition {a} ∘ {b}: the offsets of B's modes carry into each other in A's "
            f"mixed radix (coalesced A = {_layout(_extension_modes(a))}), so (A∘B0, A∘B1, ...) "
            f"may differ from A∘B, and B has {b.size} points, too many to compare one by one. "
            "fix: compose with each mode of B separately")
    idx = np.arange(b.size, dtype=np.int64)
    want = np.asarray(a(b(idx)), dtype=np.int64)
    got = result.table()
    bad = np.nonzero(want != got)[0]
    if bad.size:
        i = int(bad[0])
        crd = it.idx2crd(i, b.shape)
        raise ValueError(
            f"composition {a} ∘ {b} is not a layout with B's modes: at B coordinate "
            f"{it.to_str(crd)} (index {i}) B gives offset {int(b(i))} and A gives "
            f"{int(want[i])}, but a layout is additive over its modes and the modes alone give "
            f"{int(got[i])} (the offsets of B's modes carry into each other in A's mixed radix, "
            f"coalesced A = {_layout(_extension_modes(a))}). fix: compose with each mode of B "
            "separately, or choose B whose modes address disjoint digits of A")


def _compose_leaf(a: Layout, s: int, d: int) -> Layout:
    """A ∘ (s:d): the points A(0), A(d), ..., A((s-1)d) as a layout of size s.

    CuTe's construction first (divide A's coalesced modes by d, then take s points from what
    is left, the last mode unbounded); where its divisibility conditions fail, the points
    themselves decide (`_layout_of_points`)."""
    if s == 1:
        # one point; keep the stride to the next point as CuTe's dynamic layouts do
        return Layout(1, int(a(d)) if d else 0)
    if d == 0:
        return Layout(s, 0)
    modes = _extension_modes(a)
    # 1. Stride: "divide A by d" walking its bounded modes.
    rest = d
    remaining: list[tuple[int, int]] = []
    for j, (n, stride) in enumerate(modes[:-1]):
        if rest % n == 0:                  # d steps over this whole mode
            rest //= n
            continue
        if n % rest == 0:                  # d lands inside this mode: keep n/d of it
            remaining = [(n // rest, stride * rest)] + modes[j + 1:]
            break
        if (s - 1) * rest < n:             # all s points stay inside this mode
            return Layout(s, stride * rest)
        return _layout_of_points(a, s, d, (
            f"CuTe's stride divisibility fails: divided by the modes below it, the stride is "
            f"{rest}, which neither divides nor is a multiple of mode {n}:{stride} of "
            f"coalesced A = {_layout(modes)}"))
    else:
        remaining = [(1, modes[-1][1] * rest)]     # past every bounded mode: the last one
    # 2. Shape: take s points from the remaining modes, the last one unbounded.
    out: list[tuple[int, int]] = []
    rest_shape = s
    for j, (n, stride) in enumerate(remaining):
        if j == len(remaining) - 1 or rest_shape <= n:
            out.append((rest_shape, stride))
            break
        if rest_shape % n != 0:
            # A's modes are coalesced, so the points run n steps of `stride` and then jump:
            # a layout of size s with that run needs n | s (see _layout_of_points).
            return _layout_of_points(a, s, d, (
                f"CuTe's shape divisibility fails: {rest_shape} points remain but mode "
                f"{n}:{stride} of coalesced A = {_layout(modes)} holds {n}, which does not "
                f"divide {rest_shape}"))
        out.append((n, stride))
        rest_shape //= n
    return _layout(out)


def _layout_of_points(a: Layout, s: int, d: int, why: str) -> Layout:
    """The layout of size s whose table is A(0), A(d), ..., A((s-1)d), if there is one.

    A layout's function determines its coalesced form: the first mode's size is the length of
    the initial arithmetic run (T[i] == i*T[1]), it must divide s, every block of that length
    must repeat the first shifted by its start, and the block starts are again a layout. So
    this search is complete: when it fails, no shape:stride layout has these points."""
    if s > _MAX_POINTS:
        raise ValueError(
            f"composition {a} ∘ {s}:{d}: {why}, and the {s} points are too many to search for "
            "another layout with them. fix: use a tiler whose stride and size divide A's mode "
            "sizes (or are multiples of them)")
    points = np.asarray(a(np.arange(s, dtype=np.int64) * d), dtype=np.int64)
    modes: list[tuple[int, int]] = []
    table = points
    while table.size > 1:
        step = int(table[1])
        run = np.nonzero(table != step * np.arange(table.size, dtype=np.int64))[0]
        n = int(run[0]) if run.size else table.size
        head = [int(v) for v in points[:min(s, 12)]]
        shown = f"{head}{' ...' if s > 12 else ''}"
        if table.size % n:
            raise ValueError(
                f"composition {a} ∘ {s}:{d} is not a shape:stride layout ({why}): the points "
                f"A(i*{d}) for i < {s} are {shown}; in a layout of size {table.size} the "
                f"leading run of {n} points with step {step} is a whole mode, and {n} does not "
                f"divide {table.size}. fix: use a tiler whose stride and size divide A's mode "
                "sizes (or are multiples of them)")
        blocks = table.reshape(-1, n)
        if not (blocks == blocks[:, :1] + blocks[:1, :]).all():
            raise ValueError(
                f"composition {a} ∘ {s}:{d} is not a shape:stride layout ({why}): the points "
                f"A(i*{d}) for i < {s} are {shown}; their blocks of {n} are not shifted copies "
                "of the first block, as the modes of a layout would be. fix: use a tiler whose "
                "stride and size divide A's mode sizes (or are multiples of them)")
        modes.append((n, step))
        table = blocks[:, 0]
    return coalesce(_layout(modes or [(1, 0)]))


# ---- complement ----------------------------------------------------------------------------
def complement(a: Layout, cotarget: IntTuple | None = None) -> Layout:
    """CuTe's complement: the offsets A leaves out, as an increasing layout, up to `cotarget`.

    A's modes (size-1 and stride-0 leaves dropped) are sorted by stride; before each mode s:d
    a mode floor(d / E) : E fills the gap above the extent E of the modes below it, and a last
    mode ceil(M / E) : E reaches M = size(cotarget) (default cosize A). (A, R) is injective,
    R increases and meets A only at 0; (A, R) covers [0, M) exactly when every gap divides
    evenly. When nothing is left (size 1) the result is 1:E, the stride where the next copy
    of A would start (CuTe's dynamic layouts keep it too).

    Raises ValueError, saying which, when A is not injective, or when it is injective but its
    modes interleave (a stride below the extent of the smaller modes): CuTe's construction
    needs sorted strides each at least the extent below them.
    """
    m = a.cosize if cotarget is None else it.product(it.normalize(cotarget, "cotarget"))
    live = sorted(((d, s) for s, d in zip(it.flatten(a.shape), it.flatten(a.stride))
                   if s != 1 and d != 0))
    shapes: list[int] = []
    strides: list[int] = []
    extent = 1
    for d, s in live:
        if d < extent:
            _raise_no_complement(a, d, s, extent, live)
        shapes.append(d // extent)
        strides.append(extent)
        extent = s * d
    shapes.append(it.ceil_div(m, extent))
    strides.append(extent)
    result = coalesce(Layout(tuple(shapes), tuple(strides)))
    return Layout(1, extent) if result.size == 1 else result


def _raise_no_complement(a: Layout, d: int, s: int, extent: int,
                         live: list[tuple[int, int]]) -> None:
    live_layout = _layout([(sz, st) for st, sz in live])
    size = live_layout.size
    if size <= _MAX_POINTS:
        table = live_layout.table()
        order = np.argsort(table, kind="stable")
        dup = np.nonzero(np.diff(table[order]) == 0)[0]
        if dup.size:
            i, j = int(order[dup[0]]), int(order[dup[0] + 1])
            raise ValueError(
                f"complement of {a}: the layout is not injective (its non-broadcast modes "
                f"{live_layout} give offset {int(table[i])} at indices {i} and {j}), so no "
                "complement R can make (A, R) injective. fix: take the complement of an "
                "injective layout (stride-0 modes are fine, they are left out)")
        raise ValueError(
            f"complement of {a}: the layout is injective but its modes interleave: mode "
            f"{s}:{d} has stride {d}, below the extent {extent} of the smaller-stride modes, so "
            "CuTe's complement (sorted modes, each stride at least the extent below it, the "
            "gaps filled in between) does not apply. fix: take the complement of a layout "
            "whose modes do not interleave (in stride order, each stride at least the extent "
            "of the modes below it)")
    raise ValueError(
        f"complement of {a}: mode {s}:{d} has stride {d}, below the extent {extent} of the "
        "smaller-stride modes, so the modes overlap or interleave and CuTe's complement does "
        "not apply (the layout has too many points to tell which). fix: use a layout whose "
        "sorted strides are each at least the extent of the smaller modes")


# ---- divides -------------------------------------------------------------------------------
def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """A ∘ (B, complement(B, size A)): mode 0 is one B-tile, mode 1 enumerates the tiles.

    A tuple tiler divides A mode by mode (mode i becomes (tile_i, rest_i)); None keeps a mode.
    """
    if isinstance(tiler, tuple):
        return _by_mode(a, tiler, logical_divide, "logical_divide")
    if tiler is None:
        return a
    b = _as_layout(tiler, "logical_divide")
    return composition(a, make_layout(b, complement(b, a.size)))


def _zip2_by(lay: Layout, guide: Tiler, what: str) -> Layout:
    """CuTe's zip2_by: where the guide has a tuple, gather the modes' first halves into one
    mode and their second halves (plus the modes beyond the guide) into another, recursively:
    ((A,a),((B,b),(C,c)),d) by (X,(X,X)) -> ((A,(B,C)),(a,(b,c),d))."""
    if isinstance(guide, tuple):
        if len(guide) > lay.rank:
            raise ValueError(f"{what}: tiler {guide} has more modes than layout {lay}")
        split = [_zip2_by(lay[i], guide[i], what) for i in range(len(guide))]
        tiles = make_layout(*(x[0] for x in split))
        rests = make_layout(*(x[1] for x in split), *(lay[i] for i in range(len(guide),
                                                                                lay.rank)))
        return make_layout(tiles, rests)
    if guide is None:
        raise ValueError(
            f"{what}: a None (keep) tiler mode has no tile/rest split. fix: tile that mode "
            "with its full size (an int) instead")
    if lay.rank != 2:
        raise ValueError(f"{what}: expected a (tile, rest) mode, got {lay}")
    return lay


def _unpack_rest(zipped: Layout) -> Layout:
    """((tile...), (rest...)) -> ((tile...), rest_0, rest_1, ...): the tiled_* form."""
    return make_layout(zipped[0], *zipped[1].modes())


def _unpack_both(zipped: Layout) -> Layout:
    """((tile...), (rest...)) -> (tile_0, ..., rest_0, ...): the flat_* form."""
    return make_layout(*zipped[0].modes(), *zipped[1].modes())


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """logical_divide regrouped as ((tile modes...), (rest modes...)), nested like the tiler."""
    return _zip2_by(logical_divide(a, tiler), tiler, "zipped_divide")


def tiled_divide(a: Layout, tiler: Tiler) -> Layout:
    """((tile modes...), rest_0, rest_1, ...): zipped_divide with the rest modes unpacked."""
    return _unpack_rest(zipped_divide(a, tiler))


def flat_divide(a: Layout, tiler: Tiler) -> Layout:
    """(tile_0, tile_1, ..., rest_0, rest_1, ...): zipped_divide with both modes unpacked."""
    return _unpack_both(zipped_divide(a, tiler))


# ---- products ------------------------------------------------------------------------------
def logical_product(a: Layout, tiler: Tiler) -> Layout:
    """(A, complement(A, size A · cosize B) ∘ B): A is the tile, B says where copies go.

    A tuple tiler multiplies A mode by mode; None keeps a mode; an int n means n:1.
    """
    if isinstance(tiler, tuple):
        return _by_mode(a, tiler, logical_product, "logical_product")
    if tiler is None:
        return a
    b = _as_layout(tiler, "logical_product")
    placement = complement(a, a.size * b.cosize)
    try:
        return make_layout(a, composition(placement, b))
    except ValueError as e:
        raise ValueError(
            f"logical_product({a}, {b}): B places the copies of A through complement(A, "
            f"size A · cosize B) = {placement}, the offsets A leaves free, and that placement "
            f"is refused: {str(e).split('. fix: ')[0]}. fix: a B whose size and stride "
            f"fit those modes (divide them or are multiples of them), or an A without gaps "
            f"(compact, e.g. stride 1), whose free offsets are one stride") from e


def zipped_product(a: Layout, tiler: Tiler) -> Layout:
    """logical_product regrouped as ((block modes...), (tiler modes...)), like the tiler."""
    return _zip2_by(logical_product(a, tiler), tiler, "zipped_product")


def tiled_product(a: Layout, tiler: Tiler) -> Layout:
    """((block modes...), rest_0, rest_1, ...)."""
    return _unpack_rest(zipped_product(a, tiler))


def flat_product(a: Layout, tiler: Tiler) -> Layout:
    """(block_0, block_1, ..., rest_0, rest_1, ...)."""
    return _unpack_both(zipped_product(a, tiler))


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
