"""A small, independent reference for CuTe's layout algebra, for differential tests.

Written from the documented semantics (CuTe docs "02_layout_algebra", the post-conditions in
CUTLASS test/unit/cute/core/{composition,complement,inverse_left,inverse_right,
logical_divide,logical_product}.cpp and test/python/pycute/test_*.py), not from argus.layout:
it imports nothing from argus, and it works on layouts as FUNCTIONS over their domain where it
can (a layout is found from its points, never derived symbolically), so a bug in argus's
symbolic constructions does not repeat here.

A reference layout is a pair (shape, stride) of nested tuples of ints. Conventions (the same
ones argus.layout documents):

* evaluation is CuTe C++'s: a 1-D index is split colexicographically and the LAST leaf takes
  the rest of the index (no modulo), so layouts extend past their domain;
* a layout's function on its domain determines its coalesced form uniquely (`from_points`);
  composition gives each leaf of B that coalesced form of A(B_leaf(i)); a one-point leaf
  1:d becomes 1:A(d) (the stride to the next point);
* complement is CuTe's sorted-gap construction; when nothing is left it is 1:E, E the extent;
* anything the reference cannot represent raises `NotALayout` (never a guess).
"""

from __future__ import annotations

import functools
import math


class NotALayout(ValueError):
    """The requested result is not a shape:stride layout (or not defined by CuTe)."""


# ---- nested int tuples ---------------------------------------------------------------------
def leaves(t):
    if isinstance(t, tuple):
        out = []
        for x in t:
            out.extend(leaves(x))
        return out
    return [t]


def size_of(shape) -> int:
    return math.prod(leaves(shape))


def rebuild(like, values):
    """A tree shaped like `like` with its leaves taken from `values` in order."""
    it = iter(values)

    def go(t):
        return tuple(go(x) for x in t) if isinstance(t, tuple) else next(it)

    return go(like)


def modes(lay):
    shape, stride = lay
    if isinstance(shape, tuple):
        return [(s, d) for s, d in zip(shape, stride)]
    return [lay]


def make(*layouts):
    return (tuple(s for s, _ in layouts), tuple(d for _, d in layouts))


def flat(modes_list):
    """Layout from a list of (size, stride) leaves: an int layout when there is one."""
    if not modes_list:
        return (1, 0)
    if len(modes_list) == 1:
        return modes_list[0]
    return (tuple(s for s, _ in modes_list), tuple(d for _, d in modes_list))


# ---- evaluation ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _leaf_pairs(lay):
    return tuple(zip(leaves(lay[0]), leaves(lay[1])))


def evaluate(lay, index: int) -> int:
    """CuTe C++ evaluation of a 1-D index (last leaf unbounded)."""
    pairs = _leaf_pairs(lay)
    out = 0
    for s, d in pairs[:-1]:
        out += (index % s) * d
        index //= s
    return out + index * pairs[-1][1]


def table(lay, n: int | None = None) -> list[int]:
    return [evaluate(lay, i) for i in range(size_of(lay[0]) if n is None else n)]


def is_injective(lay) -> bool:
    t = table(lay)
    return len(set(t)) == len(t)


def cosize(lay) -> int:
    return max(table(lay)) + 1


# ---- function -> layout ------------------------------------------------------------------
def from_points(points: list[int]):
    """The coalesced layout whose table is `points` (which starts with 0), or NotALayout.

    A coalesced layout has no size-1 modes and no neighbours with d1 == s0*d0, so its first
    mode is exactly the leading run of equal steps; the rest is the layout of the block
    starts, and every block must be the first one shifted."""
    if points[0] != 0:
        raise NotALayout("a layout maps 0 to 0")
    found = []
    pts = list(points)
    while len(pts) > 1:
        step = pts[1]
        run = 1
        while run < len(pts) and pts[run] == run * step:
            run += 1
        if len(pts) % run:
            raise NotALayout(f"run of {run} does not divide {len(pts)}")
        for start in range(0, len(pts), run):
            for i in range(run):
                if pts[start + i] != pts[start] + pts[i]:
                    raise NotALayout("blocks are not shifted copies")
        found.append((run, step))
        pts = pts[::run]
    return flat(found)


def coalesce(lay):
    return from_points(table(lay))


def compatible(small, big) -> bool:
    """CuTe's compatible(B, R) on shapes: same size, and every leaf of B is a leaf or a
    subtree of R of the same size."""
    if isinstance(small, tuple):
        return (isinstance(big, tuple) and len(small) == len(big)
                and all(compatible(x, y) for x, y in zip(small, big)))
    return size_of(big) == small


# ---- composition ---------------------------------------------------------------------------
def composition(a, b):
    if isinstance(b, tuple) and not _is_layout(b):
        return by_mode(a, b, composition)
    if b is None:
        return a
    if isinstance(b, int):
        b = (b, 1)
    shape, stride = b

    def per_leaf(s, d):
        if s == 1:
            return (1, evaluate(a, d) if d else 0)
        return from_points([evaluate(a, i * d) for i in range(s)])

    def go(s, d):
        if isinstance(s, tuple):
            parts = [go(x, y) for x, y in zip(s, d)]
            return (tuple(p[0] for p in parts), tuple(p[1] for p in parts))
        return per_leaf(s, d)

    result = go(shape, stride)
    for i in range(size_of(shape)):
        if evaluate(result, i) != evaluate(a, evaluate(b, i)):
            raise NotALayout("A is not additive over B's modes")
    return result


class Tiler(tuple):
    """A tuple of tilers (so that a tiler tuple is told apart from a (shape, stride) pair)."""


def _is_layout(x) -> bool:
    return not isinstance(x, Tiler)


def by_mode(a, tiler, op):
    parts = modes(a)
    if len(tiler) > len(parts):
        raise NotALayout("tiler has more modes than the layout")
    out = [parts[i] if tiler[i] is None else op(parts[i], tiler[i]) for i in range(len(tiler))]
    return make(*(out + parts[len(tiler):]))


# ---- complement ----------------------------------------------------------------------------
def complement(a, cotarget: int | None = None):
    """CuTe: sort the non-trivial leaves by stride; before each, a gap mode
    floor(d / extent):extent; then ceil(M / extent):extent."""
    m = cosize(a) if cotarget is None else cotarget
    live = sorted((d, s) for s, d in zip(leaves(a[0]), leaves(a[1])) if s > 1 and d > 0)
    found = []
    extent = 1
    for d, s in live:
        if d < extent:
            raise NotALayout("modes overlap or interleave")
        found.append((d // extent, extent))
        extent = d * s
    found.append((-(-m // extent), extent))
    kept = [(s, d) for s, d in found if s > 1]
    if not kept:
        return (1, extent)
    merged = [kept[0]]
    for s, d in kept[1:]:
        if merged[-1][0] * merged[-1][1] == d:
            merged[-1] = (merged[-1][0] * s, merged[-1][1])
        else:
            merged.append((s, d))
    return flat(merged)


# ---- inverses ------------------------------------------------------------------------------
def right_inverse(lay):
    """Chain the coalesced modes by stride 1, s_a, s_a*s_b, ...; R gives each chained mode
    its compact (column-major) index stride in the coalesced layout."""
    canon = modes(coalesce(lay))
    index_stride = []
    acc = 1
    for s, _ in canon:
        index_stride.append(acc)
        acc *= s
    chain = []
    used = set()
    current = 1
    while True:
        nxt = [k for k, (s, d) in enumerate(canon) if d == current and s > 1 and k not in used]
        if not nxt:
            break
        k = nxt[0]
        used.add(k)
        chain.append((canon[k][0], index_stride[k]))
        current *= canon[k][0]
    return flat(chain)


def left_inverse(lay):
    """CuTe's right_inverse((L, complement L)) when that inverts L on its points (exactly, or
    up to L's broadcast modes: L(R(L(i))) == L(i) with R(L(i)) in L's domain); otherwise the
    mixed-radix reading of the sorted strides, when it inverts L; otherwise NotALayout."""
    points = table(lay)
    size = len(points)

    def inverts(r):
        # R(y) must be an index in L's domain (not one that L's extension past its domain
        # happens to map to y) with L(R(y)) == y; for injective L, R(L(i)) == i
        return all(0 <= evaluate(r, y) < size and evaluate(lay, evaluate(r, y)) == y
                   for y in points) and (
            len(set(points)) < size or all(evaluate(r, y) == i for i, y in enumerate(points)))

    cute = right_inverse(make(lay, complement(lay)))
    if inverts(cute):
        return cute
    index_stride, acc = [], 1
    for s in leaves(lay[0]):
        index_stride.append(acc)
        acc *= s
    live = sorted((d, s, index_stride[k]) for k, (s, d)
                  in enumerate(zip(leaves(lay[0]), leaves(lay[1]))) if s > 1 and d > 0)
    if any(hi[0] % lo[0] for lo, hi in zip(live, live[1:])):
        raise NotALayout("uneven gaps and strides that do not divide each other")
    radix = [(live[0][0], 0)] + [(hi[0] // lo[0], lo[2]) for lo, hi in zip(live, live[1:])]
    radix.append((live[-1][1], live[-1][2]))
    r = coalesce(flat(radix))
    if not inverts(r):
        raise NotALayout("the mixed-radix reading does not invert L")
    return r


# ---- divides and products --------------------------------------------------------------------
def logical_divide(a, tiler):
    if isinstance(tiler, Tiler):
        return by_mode(a, tiler, logical_divide)
    if tiler is None:
        return a
    b = (tiler, 1) if isinstance(tiler, int) else tiler
    return composition(a, make(b, complement(b, size_of(a[0]))))


def zip2_by(lay, guide):
    if isinstance(guide, Tiler):
        parts = modes(lay)
        split = [zip2_by(parts[i], guide[i]) for i in range(len(guide))]
        first = make(*(modes(x)[0] for x in split))
        second = make(*([modes(x)[1] for x in split] + parts[len(guide):]))
        return make(first, second)
    if len(modes(lay)) != 2:
        raise NotALayout("expected a (tile, rest) mode")
    return lay


def zipped_divide(a, tiler):
    return zip2_by(logical_divide(a, tiler), tiler)


def tiled_divide(a, tiler):
    z = modes(zipped_divide(a, tiler))
    return make(z[0], *modes(z[1]))


def flat_divide(a, tiler):
    z = modes(zipped_divide(a, tiler))
    return make(*modes(z[0]), *modes(z[1]))


def logical_product(a, tiler):
    if isinstance(tiler, Tiler):
        return by_mode(a, tiler, logical_product)
    if tiler is None:
        return a
    b = (tiler, 1) if isinstance(tiler, int) else tiler
    return make(a, composition(complement(a, size_of(a[0]) * cosize(b)), b))


def zipped_product(a, tiler):
    return zip2_by(logical_product(a, tiler), tiler)


def tiled_product(a, tiler):
    z = modes(zipped_product(a, tiler))
    return make(z[0], *modes(z[1]))


def flat_product(a, tiler):
    z = modes(zipped_product(a, tiler))
    return make(*modes(z[0]), *modes(z[1]))


def _padded(lay, r):
    return make(*(modes(lay) + [(1, 0)] * (r - len(modes(lay)))))


def blocked_product(a, b):
    r = max(len(modes(a)), len(modes(b)))
    pa, pb = _padded(a, r), _padded(b, r)
    rest = modes(modes(logical_product(pa, pb))[1])
    return make(*(make(modes(pa)[i], rest[i]) for i in range(r)))


def raked_product(a, b):
    r = max(len(modes(a)), len(modes(b)))
    pa, pb = _padded(a, r), _padded(b, r)
    rest = modes(modes(logical_product(pa, pb))[1])
    return make(*(make(rest[i], modes(pa)[i]) for i in range(r)))
