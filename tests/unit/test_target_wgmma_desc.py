"""wgmma shared-memory descriptors: bit encoding, and the address formula cross-checked against
the PTX canonical layouts built as shape:stride layouts and against the swizzle atoms."""

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.layout import Layout, Swizzle, z3enc
from argus.target import sm90

FAST = settings(max_examples=200, deadline=None)
ADDR = st.integers(0, (1 << 14) - 1).map(lambda v: v << 4)


@FAST
@given(ADDR, ADDR, ADDR, st.sampled_from([0, 32, 64, 128]), st.integers(0, 7))
def test_encode_decode_round_trip(start, lbo, sbo, sw, base_offset):
    desc = sm90.encode_wgmma_desc(start, lbo, sbo, sw, base_offset)
    assert 0 <= desc < 1 << 64
    back = sm90.decode_wgmma_desc(desc)
    assert back == sm90.WgmmaDesc(start, lbo, sbo, sw, base_offset)
    assert back.encode() == desc
    # field positions (PTX ISA §9.7.15.5.1.2.2)
    assert desc & 0x3FFF == start >> 4
    assert desc >> 16 & 0x3FFF == lbo >> 4
    assert desc >> 32 & 0x3FFF == sbo >> 4
    assert desc >> 49 & 7 == base_offset
    assert desc >> 62 == {0: 0, 128: 1, 64: 2, 32: 3}[sw]


def test_known_descriptor_value():
    # CUTLASS-style K-major SW128 descriptor: start 0x400, LBO 16 (unused), SBO 1024
    desc = sm90.encode_wgmma_desc(0x400, 16, 1024, 128)
    assert desc == (1 << 62) | (64 << 32) | (1 << 16) | 0x40


def test_swizzle_field_is_inverted_against_the_tma_enum():
    assert sm90.WGMMA_SWIZZLE_FIELD[64] == sm90.tma_swizzle_enum(64) == 2
    assert sm90.WGMMA_SWIZZLE_FIELD[0] == sm90.tma_swizzle_enum(0) == 0
    assert sm90.WGMMA_SWIZZLE_FIELD[128] == 1 and sm90.tma_swizzle_enum(128) == 3
    assert sm90.WGMMA_SWIZZLE_FIELD[32] == 3 and sm90.tma_swizzle_enum(32) == 1


def test_descriptor_errors():
    with pytest.raises(ValueError, match="16-byte aligned"):
        sm90.encode_wgmma_desc(0x408, 16, 1024, 128)
    with pytest.raises(ValueError, match="18 bits"):
        sm90.encode_wgmma_desc(1 << 18, 16, 1024, 128)
    with pytest.raises(ValueError, match="not 0, 32, 64 or 128"):
        sm90.encode_wgmma_desc(0, 16, 1024, 256)
    with pytest.raises(ValueError, match="3 bits"):
        sm90.encode_wgmma_desc(0, 16, 1024, 128, base_offset=8)
    with pytest.raises(ValueError, match="reserved"):
        sm90.decode_wgmma_desc(1 << 14)


def test_base_offset_rule():
    assert sm90.wgmma_base_offset(0x2000, 128) == 0
    assert sm90.wgmma_base_offset(0x2200, 128) == 4
    assert sm90.wgmma_base_offset(0x2200, 64) == 0
    assert sm90.wgmma_base_offset(0x2180, 32) == 3      # (0x2180 >> 7) & 7
    with pytest.raises(NotImplementedError, match="base offset"):
        sm90.wgmma_smem_addr(0, 0, start=0x2200, lbo=16, sbo=1024, swizzle_bytes=128,
                             elem_bytes=2, base_offset=4)
    with pytest.raises(ValueError, match="mid-pattern"):
        sm90.wgmma_smem_addr(0, 0, start=0x2200, lbo=16, sbo=1024, swizzle_bytes=128,
                             elem_bytes=2)


def canonical(major: str, sw: int, e: int, lbo: int, sbo: int, m: int, k: int) -> Layout:
    """The PTX canonical layout table (INVARIANTS.md §2.2), in elements, as a Layout."""
    t = 16 // e
    c = sw // 16
    if major == "K":
        if sw == 0:
            return Layout(((8, m), (t, k)), ((t, sbo // e), (1, lbo // e)))
        return Layout(((8, m), (t, k)), ((c * t, sbo // e), (1, t)))
    if sw == 0:
        return Layout(((t, 1, m), (8, k)), ((1, t, sbo // e), (t, lbo // e)))
    return Layout(((t, c, m), (8, k)), ((1, t, lbo // e), (c * t, sbo // e)))


CASES = [  # (major, swizzle, elem bytes, lbo, sbo)
    ("K", 0, 2, 128, 256), ("K", 0, 1, 128, 256), ("K", 0, 4, 1024, 128),
    ("K", 32, 2, 16, 256), ("K", 64, 2, 16, 512), ("K", 128, 2, 16, 1024),
    ("K", 128, 1, 16, 1024), ("K", 128, 4, 16, 1024),
    ("MN", 0, 2, 1024, 128), ("MN", 32, 2, 512, 256), ("MN", 64, 2, 1024, 512),
    ("MN", 128, 2, 2048, 1024), ("MN", 128, 4, 2048, 1024),
]


@pytest.mark.parametrize(("major", "sw", "e", "lbo", "sbo"), CASES)
def test_address_formula_equals_canonical_layout(major, sw, e, lbo, sbo):
    t = 16 // e
    start = 0x4000 + 32           # inside the first row of a 1024-aligned pattern
    if major == "K":
        mn_n, k_n, m, k = 64, 2 * t, 8, 2
    else:
        c = max(1, sw // 16)
        mn_n, k_n, m, k = 2 * c * t, 16, 2, 2
        start = 0x4000
    lay = canonical(major, sw, e, lbo, sbo, m, k)
    mn, kk = (g.ravel() for g in np.meshgrid(np.arange(mn_n), np.arange(k_n), indexing="ij"))
    want = Swizzle.for_bytes(sw)(start + e * lay((mn, kk)))
    got = sm90.wgmma_smem_addr(mn, kk, start=start, lbo=lbo, sbo=sbo, swizzle_bytes=sw,
                               elem_bytes=e, major=major)
    assert (got == want).all()
    desc = sm90.WgmmaDesc(start, lbo, sbo, sw)
    assert desc.addr(3, 5, e, major) == got[3 * k_n + 5]
    assert len(set(got.tolist())) == got.size          # no two elements share a byte


@pytest.mark.parametrize("sw", [0, 32, 64, 128])
@pytest.mark.parametrize("e", [1, 2, 4])
@pytest.mark.parametrize("major", ["K", "MN"])
def test_swizzle_atom_matches_descriptor_addresses(sw, e, major):
    atom = sm90.smem_swizzle_atom(sw, e, major)
    w = (sw or 16) // e
    base = 0x8000
    # one atom, dense: SBO/LBO only step between atoms, which a single atom never uses
    mn_n, k_n = (8, w) if major == "K" else (w, 8)
    if major == "K":
        k_n = min(k_n, 2 * (16 // e)) if sw == 0 else k_n
    mn, kk = (g.ravel() for g in np.meshgrid(np.arange(mn_n), np.arange(k_n), indexing="ij"))
    lbo, sbo = (128, 1024) if sw == 0 else (16 * 1024, 8 * max(sw, 16))
    got = sm90.wgmma_smem_addr(mn, kk, start=base, lbo=lbo, sbo=sbo, swizzle_bytes=sw,
                               elem_bytes=e, major=major)
    if sw == 0:   # the no-swizzle "atom" is one 8 x 16-byte core matrix
        inside = (mn < 8) & (kk < 16 // e) if major == "K" else (mn < 16 // e) & (kk < 8)
        mn, kk, got = mn[inside], kk[inside], got[inside]
    assert (got == base + e * atom((mn, kk))).all()


def test_symbolic_start_proves_k_step_advance():
    # reading k-block kb through start + 32*kb equals reading column 16*kb + kk of the atom
    start, mn, kb, kk = (z3enc.bitvec(n, 20) for n in ("start", "mn", "kb", "kk"))
    pre = [start & 1023 == 0, z3.ULT(start, 1 << 17), z3.ULT(mn, 64), z3.ULT(kb, 4),
           z3.ULT(kk, 16)]
    lhs = sm90.wgmma_smem_addr(mn, kk, start=start + 32 * kb, lbo=16, sbo=1024,
                               swizzle_bytes=128, elem_bytes=2)
    atom = sm90.smem_swizzle_atom(128, 2)
    rhs = start + 2 * z3enc.composed_term(atom, (mn & 7, kb * 16 + kk)) + 1024 * z3.LShR(mn, 3)
    assert z3enc.find_counterexample(lhs == rhs, pre) is None
    assert z3enc.find_counterexample(sm90.wgmma_start_is_anchored(start + 32 * kb, 128),
                                     pre) is None


def test_bad_major_and_elem():
    with pytest.raises(ValueError, match="major"):
        sm90.wgmma_smem_addr(0, 0, start=0, lbo=16, sbo=1024, swizzle_bytes=128,
                             elem_bytes=2, major="M")
    with pytest.raises(ValueError, match="1, 2 or 4"):
        sm90.wgmma_smem_addr(0, 0, start=0, lbo=16, sbo=1024, swizzle_bytes=128, elem_bytes=8)
