"""Property tests of the shape:stride algebra: composition, complement, divide, products and
inverses are checked point-wise against their defining equations, never against themselves."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.layout import (
    Layout,
    blocked_product,
    coalesce,
    complement,
    composition,
    inttuple,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    make_ordered_layout,
    raked_product,
    right_inverse,
    zipped_divide,
)

# ARGUS_HYP=5000 runs a deeper search (used while developing the algebra)
FAST = settings(max_examples=int(os.environ.get("ARGUS_HYP", "200")), deadline=None)
SIZES = st.sampled_from([1, 2, 3, 4, 6, 8])


def nest(leaves: list[int], data) -> object:
    """Group a flat list of leaves into a random shallow tree (structure only)."""
    if len(leaves) <= 1 or not data.draw(st.booleans()):
        return tuple(leaves) if len(leaves) > 1 else leaves[0]
    cut = data.draw(st.integers(1, len(leaves) - 1))
    return (nest(leaves[:cut], data), nest(leaves[cut:], data))


@st.composite
def any_layout(draw, max_rank=4, max_stride=48):
    n = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(SIZES, min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(0, max_stride), min_size=n, max_size=n))
    data = draw(st.data())
    shape = nest(shapes, data)
    return Layout(shape, inttuple.unflatten(strides, shape))


@st.composite
def disjoint_layout(draw, max_rank=3):
    """Injective layout made of non-overlapping strided modes (has a complement)."""
    n = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(st.sampled_from([2, 3, 4]), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=n, max_size=n))
    strides, extent = [], 1
    for s, g in zip(shapes, gaps):
        strides.append(extent * g)
        extent = extent * g * s
    perm = draw(st.permutations(range(n)))
    shapes = [shapes[p] for p in perm]
    strides = [strides[p] for p in perm]
    shape = nest(shapes, draw(st.data()))
    return Layout(shape, inttuple.unflatten(strides, shape))


@st.composite
def compact_layout(draw, max_rank=3):
    n = draw(st.integers(1, max_rank))
    shapes = draw(st.lists(SIZES, min_size=n, max_size=n))
    order = draw(st.permutations(range(n)))
    shape = tuple(shapes) if n > 1 else shapes[0]
    return make_ordered_layout(shape, tuple(order) if n > 1 else order[0])


def values(layout: Layout) -> list[int]:
    return [int(v) for v in layout.table()]


# ---- composition ---------------------------------------------------------------------------
def check_composition(a: Layout, b: Layout) -> bool:
    """True if composed (then checked point-wise), False if refused as no layout.

    Past A's domain A is evaluated as CuTe C++ does (its last leaf takes the rest)."""
    try:
        r = composition(a, b)
    except ValueError as exc:
        assert "not a shape:stride layout" in str(exc) or "not a layout with B's modes" in str(exc)
        return False
    assert r.size == b.size
    for x in range(b.size):
        assert r(x) == a(b(x)), (a, b, r, x)
    return True


@FAST
@given(any_layout(), any_layout(max_rank=2))
def test_composition_is_pointwise_or_rejected(a, b):
    check_composition(a, b)


@FAST
@given(compact_layout(), st.data())
def test_composition_with_divisor_tilers_is_admissible(a, data):
    # stride = (product of leading mode sizes) * (a divisor c of the next size), size = the
    # rest of that mode times whole following modes: the divisibility conditions hold
    sizes = list(inttuple.flatten(coalesce(a).shape))
    k = data.draw(st.integers(0, len(sizes) - 1))
    c = data.draw(st.sampled_from([x for x in range(1, sizes[k] + 1) if sizes[k] % x == 0]))
    m = data.draw(st.integers(0, len(sizes) - k - 1))
    d = int(np.prod(sizes[:k])) * c
    s = sizes[k] // c * int(np.prod(sizes[k + 1:k + 1 + m]))
    if k + m == len(sizes) - 1:
        s *= data.draw(st.integers(1, 3))       # the last mode is unbounded
    assert check_composition(a, Layout(s, d))
    assert check_composition(a, Layout((s, 2), (d, d * s)))


def test_composition_examples():
    a, b = Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))
    assert composition(a, b) == Layout(((2, 2), 3), ((24, 2), 8))     # CuTe docs
    assert composition(Layout((4, 8), (8, 1)), Layout(8, 4)) == Layout(8, 1)
    assert composition(Layout((4, 8), (8, 1)), Layout(8, 2)) == Layout((2, 4), (16, 1))
    assert composition(Layout(20, 2), (Layout(5, 4))) == Layout(5, 8)
    assert composition(Layout((4, 6), (1, 4)), 12) == Layout(12, 1)
    # by-mode tiler: mode 0 by 2:2, mode 1 untouched
    assert composition(Layout((4, 6), (6, 1)), (Layout(2, 2), None)) == Layout((2, 6), (12, 1))


def test_unrepresentable_composition_raises_instead_of_lying():
    a = Layout((4, 3), (1, 10))
    # stride 3 does not divide mode 4: the points 0, 3, 12 are no layout of size 3
    with pytest.raises(ValueError, match="stride divisibility"):
        composition(a, Layout(3, 3))
    # 6 points do not fit the first mode of 4 and 4 does not divide 6: 0,1,2,3,10,11
    with pytest.raises(ValueError, match="shape divisibility"):
        composition(a, Layout(6, 1))
    # modes of B whose offsets carry into each other in A's mixed radix: A(B(1,1)) = A(3) = 1,
    # but A∘B0 = A∘(2:1) and A∘B1 = A∘(2:2) are both 2:0, so no layout with B's modes has it
    with pytest.raises(ValueError, match="not a layout with B's modes"):
        composition(Layout((3, 2), (0, 1)), Layout((2, 2), (1, 2)))
    # the representable cases work, including ones CuTe's divisibility conditions refuse:
    # stride 6 neither divides nor is a multiple of mode 4, but two points are a layout
    assert composition(a, Layout(3, 1)) == Layout(3, 1)
    assert composition(a, Layout(2, 3)) == Layout(2, 3)
    assert composition(a, Layout(2, 6)) == Layout(2, 12)


# ---- complement ----------------------------------------------------------------------------
@FAST
@given(disjoint_layout(), st.integers(1, 300))
def test_complement_is_disjoint_and_covers(a, cotarget):
    r = complement(a, cotarget)
    both = make_layout(a, r)
    image = values(both)
    assert len(set(image)) == len(image), "A and its complement overlap"
    assert set(range(cotarget)) <= set(image), "complement does not cover the cotarget"
    strides = inttuple.flatten(r.stride)
    assert list(strides) == sorted(strides)


@FAST
@given(any_layout())
def test_complement_rejects_repeats_or_interleaving_or_works(a):
    try:
        r = complement(a)
    except ValueError as exc:
        assert "not injective" in str(exc) or "interleave" in str(exc)
        return
    # stride-0 and size-1 leaves do not take part; with the rest, (A, R) is a disjoint cover
    live = [(s, d) for s, d in zip(inttuple.flatten(a.shape), inttuple.flatten(a.stride))
            if s > 1 and d > 0]
    a_live = Layout(tuple(s for s, _ in live), tuple(d for _, d in live)) if live else Layout(1, 0)
    image = values(make_layout(a_live, r))
    assert len(set(image)) == len(image)
    rt = values(r)
    assert rt == sorted(set(rt)) and not set(rt[1:]) & set(values(a))


def test_complement_examples():
    assert complement(Layout(4, 2), 24) == Layout((2, 3), (1, 8))
    assert complement(Layout((2, 2), (1, 6))) == Layout(3, 2)
    # nothing left: one point, with the stride where the next copy of A would start
    assert complement(Layout(4, 1), 4) == Layout(1, 4)
    # uneven gaps (CuTe complement.cpp): floor(stride / extent) fills what fits
    assert complement(Layout((4, 2), (1, 10))) == Layout(2, 4)
    assert complement(Layout((4, 6), (1, 6))) == Layout(1, 36)
    with pytest.raises(ValueError, match="not injective"):
        complement(Layout((4, 2), (1, 2)))
    with pytest.raises(ValueError, match="interleave"):
        complement(Layout((2, 2), (2, 3)))


# ---- logical divide / products -------------------------------------------------------------
@FAST
@given(compact_layout(), disjoint_layout(max_rank=2))
def test_logical_divide_is_composition_with_complement(a, b):
    try:
        d = logical_divide(a, b)
    except ValueError:
        return
    full = make_layout(b, complement(b, a.size))
    for x in range(full.size):
        assert d(x) == a(full(x))
    if a.size % full.size == 0 and full.size == a.size:
        assert sorted(values(d)) == sorted(values(a))     # a re-ordering of the same offsets


def test_logical_divide_examples():
    a = Layout((4, 2, 3), (2, 1, 8))
    assert logical_divide(a, Layout(4, 2)) == Layout(((2, 2), (2, 3)), ((4, 1), (2, 8)))  # CuTe docs
    tiled = logical_divide(Layout((8, 6), (1, 8)), (Layout(4, 1), Layout(3, 1)))
    assert tiled == Layout(((4, 2), (3, 2)), ((1, 4), (8, 24)))
    z = zipped_divide(Layout((8, 6), (1, 8)), (Layout(4, 1), Layout(3, 1)))
    assert z == Layout(((4, 3), (2, 2)), ((1, 8), (4, 24)))
    assert sorted(values(z)) == list(range(48))


@FAST
@given(compact_layout(max_rank=2), compact_layout(max_rank=2))
def test_logical_product_of_compact_layouts(a, b):
    p = logical_product(a, b)
    assert p.size == a.size * b.size
    for i in range(a.size):
        for j in range(b.size):
            assert p((i, j)) == a(i) + a.size * b(j)
    assert p.is_compact()


@FAST
@given(compact_layout(max_rank=2), compact_layout(max_rank=2))
def test_blocked_and_raked_products_are_bijections(a, b):
    for prod in (blocked_product(a, b), raked_product(a, b)):
        assert prod.size == a.size * b.size
        assert prod.is_compact()
        assert prod.rank == max(a.rank, b.rank)


def test_blocked_and_raked_product_examples():
    a, b = Layout((2, 2), (1, 2)), Layout((3, 4), (1, 3))
    blocked = blocked_product(a, b)
    raked = raked_product(a, b)
    assert blocked == Layout(((2, 3), (2, 4)), ((1, 4), (2, 12)))
    assert raked == Layout(((3, 2), (4, 2)), ((4, 1), (12, 2)))
    # element (i, j) of the 6x8 result: blocked keeps 2x2 blocks contiguous, raked interleaves
    assert blocked((1, 0)) == 1 and blocked((2, 0)) == 4
    assert raked((1, 0)) == 4 and raked((3, 0)) == 1


# ---- inverses ------------------------------------------------------------------------------
@FAST
@given(any_layout())
def test_right_inverse_satisfies_its_equation(lay):
    r = right_inverse(lay)
    for i in range(r.size):
        assert lay(r(i)) == i
    # maximal: the next offset is not produced by extending the chain
    assert r.size == 1 or r.size <= lay.size


@FAST
@given(compact_layout())
def test_right_inverse_of_bijection_is_two_sided(lay):
    r = right_inverse(lay)
    assert r.size == lay.size
    for i in range(lay.size):
        assert lay(r(i)) == i and r(lay(i)) == i


@FAST
@given(disjoint_layout())
def test_left_inverse_satisfies_its_equation(lay):
    r = left_inverse(lay)
    for i in range(lay.size):
        assert r(lay(i)) == i


def test_inverse_examples_and_errors():
    assert right_inverse(Layout((4, 8), (8, 1))) == Layout((8, 4), (4, 1))
    assert right_inverse(Layout(4, 2)) == Layout(1, 0)
    assert left_inverse(Layout(4, 2)) == Layout((2, 4), (4, 1))
    # broadcast modes: CuTe's quasi-inverse, L∘R∘L == L
    quasi = left_inverse(Layout((4, 2), (1, 0)))
    assert all(Layout((4, 2), (1, 0))(quasi(Layout((4, 2), (1, 0))(i))) == i % 4
               for i in range(8))
    with pytest.raises(ValueError, match="not injective"):
        left_inverse(Layout((4, 2), (1, 2)))


def test_random_compositions_are_often_admissible():
    # guard: the strategies above produce admissible compositions often enough to matter
    ok = 0
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = Layout(tuple(int(x) for x in rng.choice([2, 3, 4, 6], 3)),
                   tuple(int(x) for x in rng.integers(1, 30, 3)))
        b = Layout(int(rng.choice([2, 3, 4])), int(rng.choice([1, 2, 3, 4, 6])))
        ok += check_composition(a, b)
    assert ok > 100
