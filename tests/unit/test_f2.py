"""F2 linear layouts: construction, evaluation, algebra, and exhaustive cross-checks against the
shape:stride and swizzled layouts they are converted from."""

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.layout import ComposedLayout, F2Layout, Layout, Swizzle, inttuple, z3enc

FAST = settings(max_examples=100, deadline=None)


@st.composite
def pow2_disjoint_layouts(draw):
    """Power-of-two modes whose strides are disjoint bit ranges (so the map is F2-linear),
    in a random mode order, some with stride 0 (broadcast)."""
    n = draw(st.integers(1, 4))
    bits = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    zero = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    strides, pos = [], 0
    for b, g, z in zip(bits, gaps, zero):
        strides.append(0 if (z and b) else 1 << (pos + g))
        pos += g + b
    perm = draw(st.permutations(range(n)))
    shape = tuple(1 << bits[p] for p in perm)
    stride = tuple(strides[p] for p in perm)
    return Layout(shape, stride)


@st.composite
def random_f2(draw, in_bits=(2, 3), out_bits=(3, 2)):
    ins = tuple((f"i{k}", 1 << b) for k, b in enumerate(in_bits))
    outs = tuple((f"o{k}", 1 << b) for k, b in enumerate(out_bits))
    bases = tuple(tuple(tuple(draw(st.integers(0, s - 1)) for _, s in outs) for _ in range(b))
                  for b in in_bits)
    return F2Layout(ins, outs, bases)


def test_construction_and_validation():
    lay = F2Layout.from_bases({"lane": [(1, 0), (2, 0)], "register": [(0, 1)]},
                              (("row", 4), ("col", 2)))
    assert lay.in_dims == (("lane", 4), ("register", 2))
    assert lay.apply(lane=3, register=1) == {"row": 3, "col": 1}
    assert lay(lane=2, register=0) == {"row": 2, "col": 0}
    with pytest.raises(ValueError, match="power of two"):
        F2Layout((("x", 3),), (("y", 4),), (((1,),),))
    with pytest.raises(ValueError, match="outside"):
        F2Layout((("x", 2),), (("y", 4),), (((4,),),))
    with pytest.raises(KeyError, match="missing"):
        lay.apply(lane=1)


@FAST
@given(pow2_disjoint_layouts())
def test_from_layout_matches_shape_stride_exhaustively(lay):
    f2 = F2Layout.from_layout(lay)
    assert (f2.table() == lay.table()).all()
    assert f2.in_bits == inttuple.product(lay.shape).bit_length() - 1


def test_from_layout_rejects_carries_and_non_powers_of_two():
    with pytest.raises(ValueError, match="carries"):
        F2Layout.from_layout(Layout((2, 2), (3, 1)))
    with pytest.raises(ValueError, match="carries"):
        F2Layout.from_layout(Layout((4, 2), (1, 2)))
    with pytest.raises(ValueError, match="power of two"):
        F2Layout.from_layout(Layout((3, 2), (1, 4)))
    with pytest.raises(ValueError, match="offset"):
        F2Layout.from_layout(ComposedLayout(Swizzle(3, 4, 3), 1024, Layout(1024, 1)))


def test_swizzled_layouts_convert_exhaustively():
    for sw_bytes in (32, 64, 128):
        for elem in (1, 2, 4):
            w = sw_bytes // elem
            for inner in (Layout((8, w), (w, 1)), Layout((w, 8), (1, w)),
                          Layout(((8, 4), w), ((w, 8 * w), 1))):
                cl = ComposedLayout(Swizzle.for_bytes(sw_bytes, elem), 0, inner)
                f2 = F2Layout.from_layout(cl)
                assert (f2.table() == cl.table()).all()
                assert f2.is_injective() and f2.is_surjective()
                inv = f2.invert()
                ident = F2Layout.identity("index", inner.size)
                assert inv.compose(f2).reshape_outs((("index", inner.size),)) == ident
    bare = F2Layout.from_layout(Swizzle(3, 4, 3), size=2048)
    assert (bare.table() == Swizzle(3, 4, 3)(np.arange(2048))).all()


@FAST
@given(random_f2(), st.data())
def test_compose_is_function_composition(inner, data):
    outer_in = inner.out_dims
    outer = data.draw(random_f2(in_bits=tuple(s.bit_length() - 1 for _, s in outer_in),
                                out_bits=(2, 2)))
    outer = F2Layout(outer_in, outer.out_dims, outer.bases)
    both = outer.compose(inner)
    for x0 in range(4):
        for x1 in range(8):
            mid = inner.apply(i0=x0, i1=x1)
            assert both.apply(i0=x0, i1=x1) == outer.apply(mid)


@FAST
@given(random_f2(in_bits=(3, 2), out_bits=(2, 3)))
def test_invert_is_two_sided_when_full_rank(lay):
    if not lay.is_injective():
        with pytest.raises(ValueError, match="not invertible"):
            lay.invert()
        return
    inv = lay.invert()
    table = lay.table()
    assert (inv.table()[table] == np.arange(table.size)).all()
    assert (table[inv.table()] == np.arange(table.size)).all()


@FAST
@given(random_f2(), random_f2(in_bits=(1,), out_bits=(1, 2)))
def test_product_stacks_bits(a, b):
    b = F2Layout((("i1", 2),), (("o1", 2), ("extra", 4)), b.bases)
    p = a * b
    assert p.in_dims == (("i0", 4), ("i1", 16))
    assert p.out_dims == (("o0", 8), ("o1", 8), ("extra", 4))
    for x0 in range(4):
        for x1 in range(16):
            lo, hi = x1 % 8, x1 // 8
            ra = a.apply(i0=x0, i1=lo)
            rb = b.apply(i1=hi)
            got = p.apply(i0=x0, i1=x1)
            assert got["o0"] == ra["o0"]
            assert got["o1"] == ra["o1"] ^ (rb["o1"] << 2)
            assert got["extra"] == rb["extra"]


def test_from_function_checks_linearity():
    lin = F2Layout.from_function(lambda a, b: (a ^ (b << 1), b), (("a", 8), ("b", 4)),
                                 (("x", 16), ("y", 4)))
    assert lin.apply(a=5, b=3) == {"x": 5 ^ 6, "y": 3}
    with pytest.raises(ValueError, match="not F2-linear"):
        F2Layout.from_function(lambda a: (a + (a >> 1),), (("a", 8),), (("x", 16),))
    with pytest.raises(ValueError, match="affine"):
        F2Layout.from_function(lambda a: (a ^ 1,), (("a", 8),), (("x", 8),))


def test_reshape_and_equality():
    f2 = F2Layout.from_layout(Layout((32, 4), (1, 32)))
    split = f2.reshape_ins((("lane", 32), ("warp", 4)))
    assert split.apply(lane=5, warp=2) == {"offset": 69}
    assert split.reshape_ins((("index", 128),)) == f2
    assert split != f2


def test_apply_on_numpy_and_z3_agrees_with_ints():
    lay = F2Layout.from_layout(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1))))
    xs = np.arange(512)
    assert (lay.apply(index=xs)["offset"] == lay.table()).all()
    x = z3enc.bitvec("x", 16)
    term = z3enc.f2_terms(lay, {"index": x})["offset"]
    generic = lay.apply(index=x)["offset"]
    for v in (0, 1, 77, 300, 511):
        sub = (x, z3.BitVecVal(v, 16))
        assert z3.simplify(z3.substitute(term, sub)).as_long() == lay.table()[v]
        assert z3.simplify(z3.substitute(generic, sub)).as_long() == lay.table()[v]
