"""z3 encodings agree with Python evaluation, prove equalities, and refuse slow encodings."""

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.layout import (
    ComposedLayout,
    F2Layout,
    Layout,
    Swizzle,
    arith,
    composition,
    inttuple,
    z3enc,
)

FAST = settings(max_examples=40, deadline=None)


def evaluate(term, assignment: dict) -> int:
    subs = [(var, z3.BitVecVal(v, var.size()) if z3.is_bv(var) else z3.IntVal(v))
            for var, v in assignment.items()]
    return z3.simplify(z3.substitute(term, *subs)).as_long()


@st.composite
def pow2_layouts(draw):
    n = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from([1, 2, 4, 8])) for _ in range(n))
    stride = tuple(draw(st.integers(0, 64)) for _ in range(n))
    return Layout(shape, stride)


@st.composite
def general_layouts(draw):
    n = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(n))
    stride = tuple(draw(st.integers(0, 50)) for _ in range(n))
    return Layout(shape, stride)


@FAST
@given(pow2_layouts(), st.data())
def test_bitvector_layout_term_matches_python(lay, data):
    x = z3enc.bitvec("x", 24)
    term = z3enc.layout_term(lay, x)
    for _ in range(8):
        v = data.draw(st.integers(0, lay.size - 1))
        assert evaluate(term, {x: v}) == lay(v)


@FAST
@given(general_layouts(), st.data())
def test_int_layout_term_matches_python(lay, data):
    x = z3enc.intvar("x")
    term = z3enc.layout_term(lay, x)
    for _ in range(8):
        v = data.draw(st.integers(0, lay.size - 1))
        assert evaluate(term, {x: v}) == lay(v)


def test_bitvector_division_by_non_power_of_two_is_refused():
    x = z3enc.bitvec("x", 24)
    with pytest.raises(ValueError, match="z3.Int"):
        z3enc.layout_term(Layout((3, 4), (1, 3)), x)
    # coordinates given per mode need no division, so any size is fine
    i, j = z3enc.bitvec("i", 24), z3enc.bitvec("j", 24)
    assert evaluate(z3enc.layout_term(Layout((3, 5), (1, 3)), (i, j)), {i: 2, j: 4}) == 14
    with pytest.raises(ValueError, match="power of two"):
        arith.div(x, 6)
    with pytest.raises(TypeError, match="mix"):
        z3enc.layout_term(Layout((4, 4), (1, 4)), (i, z3enc.bitvec("k", 16)))


def test_composed_and_f2_terms_match_tables():
    cl = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1)))
    f2 = F2Layout.from_layout(cl)
    x = z3enc.bitvec("x", 16)
    ct = z3enc.composed_term(cl, x)
    ft = z3enc.f2_terms(f2, {"index": x})["offset"]
    table = cl.table()
    for v in np.random.default_rng(1).integers(0, 512, 24):
        assert evaluate(ct, {x: int(v)}) == table[v] == evaluate(ft, {x: int(v)})
    # and the two encodings are provably equal on the whole domain
    assert z3enc.find_counterexample(ct == ft, [z3.ULT(x, 512)]) is None


def test_prove_composition_equals_pointwise_composition():
    a = Layout(((4, 8), 16), ((1, 64), 4))
    b = Layout((8, 16), (4, 32))
    r = composition(a, b)
    x = z3enc.bitvec("x", 20)
    lhs = z3enc.layout_term(r, x)
    rhs = z3enc.layout_term(a, z3enc.layout_term(b, x))
    assert z3enc.find_counterexample(lhs == rhs, [z3.ULT(x, b.size)]) is None


def test_counterexample_is_reported():
    x = z3enc.bitvec("x", 12)
    lay = Layout((4, 8), (8, 1))
    wrong = Layout((4, 8), (1, 4))
    cex = z3enc.find_counterexample(z3enc.layout_term(lay, x) == z3enc.layout_term(wrong, x),
                                    [z3.ULT(x, 32)], variables=[x])
    assert cex is not None and lay(cex["x"]) != wrong(cex["x"])


def test_f2_terms_requires_all_inputs_as_bitvectors():
    f2 = F2Layout.identity("lane", 32)
    with pytest.raises(KeyError):
        z3enc.f2_terms(f2, {})
    with pytest.raises(TypeError):
        z3enc.f2_terms(f2, {"lane": z3.Int("l")})
    lane = z3enc.bitvec("lane", 8)
    out = z3enc.f2_terms(f2, {"lane": lane})["lane"]
    assert z3enc.find_counterexample(out == (lane & 31)) is None


def test_nested_layout_terms():
    lay = Layout(((4, 8, 4), (2, 2, 8)), ((128, 1, 16), (64, 8, 512)))
    t, r = z3enc.bitvec("t", 16), z3enc.bitvec("r", 16)
    term = z3enc.layout_term(lay, (t, r))
    for tv, rv in [(0, 0), (37, 5), (127, 31)]:
        assert evaluate(term, {t: tv, r: rv}) == lay((tv, rv))
    assert inttuple.depth(lay.shape) == 2
