"""CuTe's and pycute's unit-test cases for the layout algebra, and Triton's for F2 compose,
written for argus.layout from the documented semantics (not copied): each helper checks the
post-conditions that the named CUTLASS/Triton test checks, and each case list follows that
file's cases. Sources (NVIDIA/cutlass): test/unit/cute/core/{composition, complement,
inverse_left, inverse_right, logical_divide, logical_product}.cpp and
test/python/pycute/test_{composition, complement, left_inverse, right_inverse, product,
logical_product}.py; CuTe docs "02_layout_algebra"; triton-lang/triton
unittest/Tools/LinearLayoutTest.cpp (compose). Cases with negative strides, swizzles or
ScaledBasis strides (CuTe "beta") are out of scope: argus layouts have none of them.
"""

from __future__ import annotations

import pytest

from argus.layout import (
    F2Layout,
    Layout,
    coalesce,
    complement,
    filter_zeros,
    composition,
    flat_divide,
    inttuple,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    right_inverse,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from argus.layout import filter as layout_filter
from tests.layout import cute_reference as ref

L = Layout


# ---- composition.cpp / test_composition.py -------------------------------------------------
def check_composition(a: Layout, b: Layout) -> Layout:
    r = composition(a, b)
    assert ref.compatible(b.shape, r.shape), (a, b, r)              # compatible(B, R)
    for c in range(b.size):                                         # R(c) == A(B(c))
        assert r(c) == a(b(c)), (a, b, r, c)
    return r


COMPOSITION_CASES = [
    (L(1, 0), L(1, 0)), (L(1, 0), L(1, 1)), (L(1, 1), L(1, 0)), (L(1, 1), L(1, 1)),
    (L(4), L(4)), (L(4, 2), L(4)), (L(4, 0), L(4)), (L(4), L(4, 0)), (L(4), L(1, 0)),
    (L(4), L(2)), (L(4, 2), L(2)), (L(4), L(2, 2)), (L(4, 2), L(2, 2)),
    (L((4, 3)), L(12)), (L(12), L((4, 3))), (L(12, 2), L((4, 3))),
    (L(12), L((4, 3), (3, 1))), (L(12, 2), L((4, 3), (3, 1))), (L(12), L((2, 3), (2, 4))),
    (L((4, 3)), L((4, 3))), (L((4, 3)), L(6)), (L((4, 3)), L(6, 2)),
    (L((4, 3)), L((6, 2), (2, 1))), (L((4, 3)), L((4, 3), (3, 1))),
    (L((4, 3), (3, 1)), L((4, 3))), (L((4, 3), (3, 1)), L(12)), (L((4, 3), (3, 1)), L(6, 2)),
    (L((4, 3), (3, 1)), L((6, 2), (2, 1))),
    (L((8, 8)), L(((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)))),
    (L((8, 8), (8, 1)), L(((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)))),
    (L(((4, 2),), ((1, 16),)), L((4, 2), (2, 1))),
    (L((2, 2), (2, 1)), L((2, 2), (2, 1))),
    (L((4, 8, 2)), L((2, 2, 2), (2, 8, 1))),
    (L((4, 8, 2), (2, 8, 1)), L((2, 2, 2), (1, 8, 2))),
    (L((4, 8, 2), (2, 8, 1)), L((4, 2, 2), (2, 8, 1))),
    # dynamic shapes/strides
    (L(12, 1), L(4, 1)), (L((12, 3), (1, 24)), L(4, 1)), (L(16, 2), L(4, 2)),
    (L((128, 24, 5), (1, 128, 3072)), L(64, 2)), (L((128, 24, 5), (1, 128, 3072)), L(480, 32)),
    # cosize(B) > size(A): A extends past its domain along its last leaf
    (L(1, 0), L(4)), (L(1, 1), L(4)), (L(4), L(4, 2)),
    (L((4, 3), (3, 1)), L(24)),                # last mode gets extended
    (L((4, 3), (3, 1)), L(8)),                 # ... even without last-mode divisibility
    (L((4, 3, 1), (3, 1, 0)), L(24)),          # capped with 1:0: extends in stride 0
    (L(3, 1), L(4, 1)), (L((48, 24, 5), (1, 128, 3072)), L(32, 1)),
]


@pytest.mark.parametrize("a,b", COMPOSITION_CASES, ids=lambda x: str(x))
def test_cute_composition_cases(a, b):
    check_composition(a, b)


def test_composition_exact_results():
    # CuTe docs, 02_layout_algebra: (6,2):(8,2) o (4,3):(3,1)
    assert composition(L((6, 2), (8, 2)), L((4, 3), (3, 1))) == L(((2, 2), 3), ((24, 2), 8))
    # past A's domain C++ extends A's last leaf, even a size-1 one with stride 0
    assert composition(L((4, 3, 1), (3, 1, 0)), 24) == L((4, 3, 2), (3, 1, 0))
    assert composition(L((4, 3), (3, 1)), 8) == L((4, 2), (3, 1))
    assert composition(L((4, 1), (1, 7)), 8) == L((4, 2), (1, 7))
    # by-mode tilers, an int tiler meaning n:1, None keeping a mode
    assert composition(L((4, 6), (6, 1)), (L(2, 2), None)) == L((2, 6), (12, 1))
    assert composition(L((4, 6), (1, 4)), 12) == L(12, 1)


def test_representable_compositions_are_not_refused():
    # CuTe's divisibility conditions fail, but the points are a layout compatible with B
    a = L((4, 3), (1, 10))
    assert composition(a, L(2, 6)) == L(2, 12)                # points 0, 12
    assert composition(a, L(2, 3)) == L(2, 3)                 # points 0, 3 (inside mode 4)
    assert composition(L((6, 5), (1, 3)), L(2, 4)) == L(2, 4)
    # two modes of B whose images add without carrying in A's mixed radix
    assert composition(L((4, 3), (1, 10)), L((2, 3), (2, 4))) == L((2, 3), (2, 10))


def test_unrepresentable_compositions_say_why():
    with pytest.raises(ValueError, match=r"\[0, 1, 2, 3, 10, 11\].*4 does not divide 6"):
        composition(L((4, 3), (1, 10)), L(6, 1))
    with pytest.raises(ValueError, match="not a layout with B's modes"):
        composition(L((3, 2), (0, 1)), L((2, 2), (1, 2)))


# ---- complement.cpp / test_complement.py ---------------------------------------------------
def check_complement(a: Layout, cotarget=None) -> Layout:
    m = a.cosize if cotarget is None else ref.size_of(cotarget)
    r = complement(a, cotarget)
    completed = make_layout(a, r)
    live = [(s, d) for s, d in zip(ref.leaves(a.shape), ref.leaves(a.stride)) if s > 1 and d]
    filtered_size = ref.size_of(tuple(s for s, _ in live)) if live else 1
    assert completed.cosize >= m                                          # (1)
    assert r.cosize <= -(-m // a.cosize) * a.cosize                        # (2)
    rt = [int(v) for v in r.table()]
    image = {int(v) for v in a.table()}
    for i in range(1, r.size):
        assert rt[i - 1] < rt[i]                                           # (3) ordered
        assert rt[i] not in image                                          # (4) disjoint
    assert r.size <= r.cosize
    assert r.size >= m // filtered_size
    assert completed.cosize <= r.cosize + a.cosize
    assert r.cosize >= m // filtered_size
    assert complement(completed).size == 1                 # no codomain left over
    return r


COMPLEMENT_CASES = [
    (L(1, 0), [None, 2, 5, (2, 2)]), (L(1, 1), [None, 2, 5, (2, 2)]),
    (L(1, 2), [1, 2, 8, 5, (2, 2)]), (L(4, 0), [1, 2, 8]), (L(4, 1), [1, 2, 8]),
    (L(4, 2), [1, None, 16, 19, (2, 2)]), (L(4, 4), [1, None, 17, (2, 2)]),
    (L((2, 4)), [None]), (L((2, 3)), [None]), (L((2, 4), (1, 4)), [None]),
    (L((2, 4), (1, 6)), [None]), (L((2, 4, 8), (8, 1, 64)), [None]),
    (L((2, 4, 8), (8, 1, 0)), [None, 460]),
    (L(((2, 2), (2, 2)), ((1, 4), (8, 32))), [None]),
    (L(((2, 2), (2, 2)), ((1, 32), (8, 4))), [None]),
    # uneven gaps: injective layouts whose sorted strides are not multiples of the extent
    (L((4, 6), (1, 6)), [None]), (L((4, 2), (1, 10)), [None]), (L((4, 2), (1, 16)), [None]),
    (L(12), [1, None, 53, 128]), (L(12, 2), [1, None, 53, 128]),
    (L((3, 6), (1, 3)), [None]), (L((3, 6), (1, 9)), [None]), (L((3, 6), (1, 10)), [None]),
    (L(64), [(32, 4, 4)]),
    # test_complement.py
    (L((2, 4), (1, 2)), [None]), (L((2, 3), (1, 2)), [None]), (L((2, (3, 4)), (3, (1, 6))), [None]),
    (L((4, 10), (1, 10)), [None]),
]


@pytest.mark.parametrize("a,cotargets", COMPLEMENT_CASES, ids=lambda x: str(x))
def test_cute_complement_cases(a, cotargets):
    for cot in cotargets:
        check_complement(a, cot)


def test_complement_exact_results_and_refusals():
    assert complement(L((4, 6), (1, 6))) == L(1, 36)        # nothing fits in the uneven gaps
    assert complement(L((4, 2), (1, 10))) == L(2, 4)        # floor(10 / 4) = 2 of stride 4
    assert complement(L(4, 2), 24) == L((2, 3), (1, 8))
    # complement.cpp's "fails due to non-injective layout" cases, with the true reason
    with pytest.raises(ValueError, match="not injective.*offset 8"):
        complement(L(((2, 2), (2, 2)), ((1, 8), (8, 4))))
    with pytest.raises(ValueError, match="injective but its modes interleave"):
        complement(L((2, 2), (2, 3)))


# ---- inverse_left.cpp / inverse_right.cpp / test_*_inverse.py --------------------------------
LEFT_INVERSE_CASES = [
    L(1, 0), L((1, 1), (0, 0)), L(1, 1), L(4, 1), L(4, 2), L((8, 4)), coalesce(L((8, 4), (4, 1))),
    L((2, 4, 6)), L((2, 4, 6), (4, 1, 8)), L((4, 2), (1, 16)), L((8, 4), (1, 8)),
    layout_filter(L((8, 4), (4, 1))),
    L((2, 4, 6), (1, 2, 8)),
    # uneven gaps, injective (CuTe needs only injectivity): a mixed-radix inverse
    L((4, 2), (1, 10)), L((4, 6), (1, 6)), L((3, 6), (1, 9)), L((2, 4), (1, 6)),
]


@pytest.mark.parametrize("lay", LEFT_INVERSE_CASES, ids=str)
def test_cute_left_inverse_cases(lay):
    inv = left_inverse(lay)
    for i in range(lay.size):
        assert inv(lay(i)) == i, (lay, inv, i)


def test_filter_drops_broadcast_and_unit_modes():
    # CuTe's filter, used by inverse_left.cpp and complement.cpp
    assert layout_filter(L((8, 4), (4, 1))) == L((8, 4), (4, 1))
    assert layout_filter(L((2, 4, 4, 6), (4, 1, 0, 8))) == L((2, 4, 6), (4, 1, 8))
    assert layout_filter(L(((4, 1), 3), ((0, 7), 0))) == L(1, 0)
    assert layout_filter(L((4, 2), (1, 4))) == L(8, 1)
    assert filter_zeros(L((4, 3), (0, 2))) == L((1, 3), (0, 2))


def test_left_inverse_of_a_broadcast_layout_is_the_quasi_inverse():
    for lay in (L((4, 2), (1, 0)), L((2, 4, 4, 6), (4, 1, 0, 8)), L((3, 7), (0, 0))):
        inv = left_inverse(lay)
        for i in range(lay.size):                             # L o R o L == L, in L's domain
            assert 0 <= inv(lay(i)) < lay.size and lay(inv(lay(i))) == lay(i)
    # uneven gap plus a broadcast mode: R(6) must be index 1, not an index past L's domain
    # that L's extension happens to map to 6 (CuTe's construction would give R = 4:24)
    lay = L(((6, 4), 4), ((6, 0), 1))
    assert left_inverse(lay) == L((6, 6), (24, 1))
    with pytest.raises(ValueError, match="not injective"):   # repeats without a broadcast
        left_inverse(L((4, 2), (1, 2)))


RIGHT_INVERSE_CASES = [
    L(1, 0), L(1, 1), L(4, 0), L(((1, 1),), ((0, 0),)), L(((3, 7),), ((0, 0),)), L(4, 1),
    L(4, 2), L((2, 4), (0, 2)), L((8, 4)), L((8, 4), (4, 1)), L((2, 4, 6)),
    L((2, 4, 6), (4, 1, 8)), L((2, 4, 4, 6), (4, 1, 0, 8)), L((4, 2), (1, 16)),
    L((4, 2), (1, 5)), L((4, 2), (1, 4)), L((8, 4), (1, 8)), L((2, 4, 6), (1, 2, 8)),
]


@pytest.mark.parametrize("lay", RIGHT_INVERSE_CASES, ids=str)
def test_cute_right_inverse_cases(lay):
    inv = right_inverse(lay)
    for i in range(inv.size):
        assert lay(inv(i)) == i, (lay, inv, i)
    if lay.is_compact():
        assert inv.size == lay.size


# ---- logical_divide.cpp ----------------------------------------------------------------------
LOGICAL_DIVIDE_CASES = [
    (L(1, 0), L(1, 0)), (L(1, 0), L(1, 1)), (L(1, 1), L(1, 0)), (L(1, 1), L(1, 1)),
    (L(6, 1), L(2, 1)), (L(6, 1), L(2, 3)), (L(6, 1), L((2, 3), (3, 1))),
    (L(6, 2), L(2, 1)), (L(6, 2), L(2, 3)), (L(6, 2), L((2, 3), (3, 1))),
    (L((6, 6), (1, 12)), L((6, 3), (3, 1))), (L((6, 6), (12, 1)), L((6, 3), (3, 1))),
    (L(32), L(2, 8)), (L((4, 1), (1, 1)), L(2, 1)), (L((4, 1), (1, 1)), L(2, 2)),
    (L((8, 8), (1, 8)), L(32, 2)), (L((8, 8), (8, 1)), L(32, 2)),
    (L(2), L(32)), (L(48), L(32)), (L(96), L(32, 2)), (L(32), L(48)),
]


@pytest.mark.parametrize("a,b", LOGICAL_DIVIDE_CASES, ids=lambda x: str(x))
def test_cute_logical_divide_cases(a, b):
    r = logical_divide(a, b)
    assert r.rank == 2 and ref.compatible(b.shape, r[0].shape)
    full = make_layout(b, complement(b, a.size))
    for c in range(full.size):
        assert r(c) == a(full(c))


def test_logical_divide_dynamic_expectations():
    # logical_divide.cpp "enforcement for dynamic cases"
    assert logical_divide(L(2), L(32)) == L((32, 1), (1, 32))
    assert logical_divide(L(48), L(32)) == L((32, 2), (1, 32))
    assert logical_divide(L(32), L(48)) == L((48, 1), (1, 48))
    # CuTe docs example
    assert logical_divide(L((4, 2, 3), (2, 1, 8)), L(4, 2)) == \
        L(((2, 2), (2, 3)), ((4, 1), (2, 8)))


def test_zipped_divide_with_nested_tuple_tilers():
    # zip2_by: ((A,a),((B,b),(C,c)),d) by (X,(X,X)) -> ((A,(B,C)),(a,(b,c),d))
    a = L((8, (4, 6), 5), (1, (8, 32), 192))
    z = zipped_divide(a, (4, (2, 3)))
    assert z == L(((4, (2, 3)), (2, (2, 2), 5)), ((1, (8, 32)), (4, (16, 96), 192)))
    assert sorted(int(v) for v in z.table()) == sorted(int(v) for v in a.table())
    assert tiled_divide(a, (4, (2, 3))) == make_layout(z[0], z[1][0], z[1][1], z[1][2])
    assert flat_divide(a, (4, (2, 3))) == make_layout(z[0][0], z[0][1], z[1][0], z[1][1],
                                                      z[1][2])
    # flat tuple tilers are unchanged
    assert zipped_divide(L((8, 6), (1, 8)), (4, 3)) == L(((4, 3), (2, 2)), ((1, 8), (4, 24)))


# ---- logical_product.cpp / test_product.py / test_logical_product.py ------------------------
LOGICAL_PRODUCT_CASES = [
    (L(1, 0), L(1, 0)), (L(1, 1), L(1, 0)), (L(1, 0), L(1, 1)), (L(1, 1), L(1, 1)),
    (L(3, 1), L(4, 0)), (L(3, 0), L(4, 1)), (L(3, 0), L(4, 0)), (L(3, 2), L(4, 1)),
    (L(3), L((2, 4))), (L((2, 4)), L(3)), (L((8, (2, 2))), L(4, 2)),
    (L((2, 2)), L((3, 3), (3, 1))), (L(3, 32), L(32)), (L(3, 2), L(4)), (L(3, 32), L(128)),
    (L(3, 32), L((8, 8))), (L(3, 32), L((8, 8), (8, 1))),
    (L(((4, 2),), ((1, 16),)), L((4, 4))), (L(((4, 2),), ((1, 16),)), L((4, 2), (2, 1))),
    (L(((2, 2), (2, 2)), ((1, 4), (8, 32))), L((2, 2), (1, 2))),
    (L(((2, 2), (2, 2)), ((1, 4), (8, 32))), L((2, 2), (2, 1))),
    (L(((4, 6),), ((1, 6),)), L(3, 1)),        # uneven gap in the block
    (L((2, 5), (5, 1)), L(4)), (L((4, 8), (1, 4)), L(16)),
    (L(((2, 2), (2, 2)), ((1, 4), (8, 32))), L(4)),
]


@pytest.mark.parametrize("a,b", LOGICAL_PRODUCT_CASES, ids=lambda x: str(x))
def test_cute_logical_product_cases(a, b):
    r = logical_product(a, b)
    assert r.rank == 2 and r[0] == a and ref.compatible(b.shape, r[1].shape)
    assert r.size == a.size * b.size


def test_logical_product_tilers():
    a = L((2, 5), (5, 1))
    assert logical_product(a, 4) == L(((2, 5), 4), ((5, 1), 10))
    assert logical_product(a, 4) == logical_product(a, L(4))
    assert logical_product(a, (4, 2)) == logical_product(a, (L(4), L(2)))
    assert logical_product(a, (4, 2)) == make_layout(logical_product(a[0], L(4)),
                                                     logical_product(a[1], L(2)))
    assert logical_product(a, None) is a
    assert zipped_product(a, 4) == zipped_product(a, L(4))
    assert tiled_product(a, 4) == tiled_product(a, L(4))
    assert zipped_product(a, 4).size == tiled_product(a, 4).size == a.size * 4


# ---- test_int_tuple.py -------------------------------------------------------------------------
def test_int_tuple_helpers():
    assert inttuple.product(2) == 2 and inttuple.product((3, 2)) == 6
    assert inttuple.product(((2, 3), 4)) == 24
    assert inttuple.inner_product(2, 3) == 6 and inttuple.inner_product((1, 2), (3, 2)) == 7
    assert inttuple.inner_product(((2, 3), 4), ((2, 1), 2)) == 15
    assert inttuple.shape_div((3, 4), 6) == (1, 2)
    assert inttuple.shape_div((3, 4), 12) == (1, 1)
    assert inttuple.shape_div((3, 4), 36) == (1, 1)
    assert inttuple.shape_div(((3, 4), 6), 36) == ((1, 1), 2)
    assert inttuple.shape_div((6, (3, 4)), 36) == (1, (1, 2))
    assert inttuple.prefix_products(2) == 1 and inttuple.prefix_products((3, 2, 4)) == (1, 3, 6)
    assert inttuple.prefix_products(((2, 3), (2, 1, 2), (5, 2, 1))) == \
        ((1, 2), (6, 12, 12), (24, 120, 240))
    with pytest.raises(ValueError, match="divisibility"):
        inttuple.shape_div(4, 6)
    # an empty mode stays empty (CuTe: a / b, 0 here; pycute: ceil_div(0, b) == 0)
    assert inttuple.shape_div(0, 4) == 0 and inttuple.shape_div((0, 8), (2, 4)) == (0, 2)


# ---- Triton LinearLayoutTest.cpp: compose ------------------------------------------------------
def test_f2_compose_accepts_a_narrower_inner_output():
    inner = F2Layout.identity("in", 4, "mid")                       # outputs 0..3
    outer = F2Layout.from_bases({"mid": [(1,), (4,), (2,)]}, (("out", 8),))
    both = outer.compose(inner)
    assert both.in_dims == (("in", 4),) and both.out_dims == (("out", 8),)
    for x in range(4):
        assert both.apply(**{"in": x}) == outer.apply(mid=x)


def test_f2_compose_triton_case():
    # LinearLayoutTest.Compose: Triton's l1.compose(l2) is l2 after l1, argus's l2.compose(l1);
    # l1's output out1 has size 2 and feeds l2's input out1 of size 4 (narrower is fine)
    l1 = F2Layout.from_bases({"in1": [(1, 1), (0, 1)], "in2": [(1, 0), (1, 2)]},
                             (("out1", 2), ("out2", 4)))
    l2 = F2Layout.from_bases({"out1": [(2, 2), (1, 0)], "out2": [(1, 1), (2, 1)]},
                             (("out3", 4), ("out4", 4)))
    assert l2.compose(l1) == F2Layout.from_bases(
        {"in1": [(3, 3), (1, 1)], "in2": [(2, 2), (0, 3)]}, (("out3", 4), ("out4", 4)))


def test_f2_compose_refuses_dropping_bits_and_names_both_sizes():
    inner = F2Layout.identity("in", 8, "mid")                       # outputs 0..7
    outer = F2Layout.identity("mid", 4, "out")                      # reads 2 bits
    with pytest.raises(ValueError, match="inner output 'mid' has size 8 but the outer "
                                         "layout's input 'mid' has size 4"):
        outer.compose(inner)


def test_a_refused_product_names_the_product_and_its_placement():
    """8:3 leaves offsets (3,3):(1,24) free below 64: 8 copies fit no layout of them. The error
    is the product's (with the placement it built), not only the inner composition's."""
    with pytest.raises(ValueError) as info:
        logical_product(L(8, 3), L(8, 1))
    msg = str(info.value)
    assert msg.startswith("logical_product(8:3, 8:1)") and "(3,3):(1,24)" in msg
    assert msg.count("fix:") == 1
