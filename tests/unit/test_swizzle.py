"""Swizzle<B,M,S> and ComposedLayout: definition, involution, periods, Hopper byte modes."""

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.layout import (
    SWIZZLE_32B,
    SWIZZLE_64B,
    SWIZZLE_128B,
    SWIZZLE_NONE,
    ComposedLayout,
    Layout,
    Swizzle,
    z3enc,
)

FAST = settings(max_examples=100, deadline=None)


@st.composite
def swizzles(draw):
    b = draw(st.integers(0, 4))
    m = draw(st.integers(0, 5))
    s = draw(st.integers(b, 6)) * draw(st.sampled_from([1, -1]))
    if s < 0 and m < -s:          # keep the destination bits non-negative
        m = -s
    return Swizzle(b, m, s if b else max(s, 0))


def reference(sw: Swizzle, x: int) -> int:
    """CuTe's definition, bit by bit."""
    out = x
    for i in range(sw.bits):
        if sw.shift >= 0:
            src, dst = sw.base + sw.shift + i, sw.base + i
        else:
            src, dst = sw.base + i, sw.base - sw.shift + i
        out ^= ((x >> src) & 1) << dst
    return out


@FAST
@given(swizzles())
def test_swizzle_matches_definition_and_is_an_involution(sw):
    p = sw.period
    xs = np.arange(max(1 << 12, p), dtype=np.int64)
    ys = sw(xs)
    picks = np.r_[0:2048, np.random.default_rng(0).integers(0, xs.size, 256)]
    assert ys[picks].tolist() == [reference(sw, int(x)) for x in xs[picks]]
    assert (sw(ys) == xs).all()
    assert sorted(ys.tolist()) == xs.tolist()              # a permutation of [0, period)
    assert (sw(xs + p) == ys + p).all()                     # repeats every period


def test_hopper_byte_modes():
    assert (SWIZZLE_32B.params, SWIZZLE_64B.params, SWIZZLE_128B.params) == (
        (1, 4, 3), (2, 4, 3), (3, 4, 3))
    assert [Swizzle.for_bytes(b).period for b in (32, 64, 128)] == [256, 512, 1024]
    assert SWIZZLE_NONE.is_identity and SWIZZLE_NONE(12345) == 12345
    assert Swizzle.for_bytes(128, 2) == Swizzle(3, 3, 3)        # bf16 element units
    assert Swizzle.for_bytes(64, 4) == Swizzle(2, 2, 3)
    # 128B: 16-byte chunk j of 128-byte row r lands at chunk j ^ (r % 8)
    for r in range(16):
        for j in range(8):
            for byte in (0, 5, 15):
                addr = r * 128 + j * 16 + byte
                assert SWIZZLE_128B(addr) == r * 128 + ((j ^ (r % 8)) * 16) + byte
    # 64B: two 64-byte rows share a 128-byte line, phase (row/2) % 4
    for r in range(16):
        for j in range(4):
            addr = r * 64 + j * 16
            assert SWIZZLE_64B(addr) == r * 64 + ((j ^ ((r // 2) % 4)) * 16)


def test_element_units_agree_with_byte_units():
    for sw_bytes in (32, 64, 128):
        for elem in (1, 2, 4):
            byte_sw, elem_sw = Swizzle.for_bytes(sw_bytes), Swizzle.for_bytes(sw_bytes, elem)
            for off in range(4096):
                assert byte_sw(off * elem) == elem_sw(off) * elem


def test_invalid_swizzles_raise():
    with pytest.raises(ValueError, match="involution"):
        Swizzle(3, 4, 2)
    with pytest.raises(ValueError, match="Hopper"):
        Swizzle.for_bytes(256)
    with pytest.raises(ValueError, match="power of two"):
        Swizzle.for_bytes(128, 3)


def test_composed_layout_and_absolute_anchor():
    atom = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1)))   # bf16 128B K atom
    assert atom.size == 512 and atom.shape == (8, 64)
    for r in range(8):
        for c in range(64):
            assert atom((r, c)) == r * 64 + (((c // 8) ^ r) * 8) + c % 8
    assert sorted(atom.table().tolist()) == list(range(512))
    # swz(base + x) == base + swz(x) only when base is a multiple of the period
    lay = Layout((8, 64), (64, 1))
    aligned = ComposedLayout(Swizzle(3, 3, 3), 512, lay)
    assert (aligned.table() == atom.table() + 512).all()
    shifted = ComposedLayout(Swizzle(3, 3, 3), 256, lay)
    assert (shifted.table() != atom.table() + 256).any()


def test_swizzle_on_z3_bitvectors_only():
    x = z3enc.bitvec("x", 20)
    term = z3enc.swizzle_term(SWIZZLE_128B, x)
    for v in (0, 0x3A7, 0x12345 & 0xFFFFF):
        val = z3.simplify(z3.substitute(term, (x, z3.BitVecVal(v, 20)))).as_long()
        assert val == SWIZZLE_128B(v)
    assert z3enc.find_counterexample(z3enc.swizzle_term(SWIZZLE_128B, term) == x) is None
    with pytest.raises(TypeError, match="bit-vector"):
        z3enc.swizzle_term(SWIZZLE_128B, z3.Int("i"))
    with pytest.raises(TypeError, match="BitVec"):
        SWIZZLE_128B(z3.Int("i"))
