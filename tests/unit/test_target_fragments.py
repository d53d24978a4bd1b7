"""Register fragments of wgmma, mma.sync and ldmatrix/stmatrix: the PTX formulas, the CuTe
TV layouts and the F2 layouts are cross-checked exhaustively, and with z3 proofs."""

from __future__ import annotations

import numpy as np
import pytest
import z3

from argus.layout import F2Layout, z3enc
from argus.target import sm90

ALL_N = range(8, 257, 8)
POW2_N = (8, 16, 32, 64, 128, 256)


def grid(*sizes: int) -> list[np.ndarray]:
    return [g.ravel() for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]


@pytest.mark.parametrize("n", ALL_N)
def test_wgmma_acc_formula_equals_clayout_and_inverse(n):
    t, i = grid(128, n // 2)
    row, col = sm90.wgmma_acc_coord(t, i)
    # CLayout_64xN maps (thread, register) -> row + 64 * col
    assert (sm90.wgmma_acc_layout(n)((t, i)) == row + 64 * col).all()
    # a bijection onto the 64 x N tile
    assert sorted((row + 64 * col).tolist()) == list(range(64 * n))
    t2, i2 = sm90.wgmma_acc_index(row, col)
    assert (t2 == t).all() and (i2 == i).all()
    # spot values straight from PTX ISA §9.7.15.5.1.1.1: thread 37 = warp 1, lane 5 (g=1, q=1)
    assert sm90.wgmma_acc_coord(37, 0) == (17, 2)
    assert sm90.wgmma_acc_coord(37, 3) == (25, 3)


@pytest.mark.parametrize("n", POW2_N)
def test_wgmma_acc_f2_matches_formula(n):
    f2 = sm90.wgmma_acc_f2(n)
    reg, lane, warp = grid(n // 2, 32, 4)
    out = f2.apply(register=reg, lane=lane, warp=warp)
    row, col = sm90.wgmma_acc_coord(32 * warp + lane, reg)
    assert (out["row"] == row).all() and (out["col"] == col).all()
    assert f2.is_injective() and f2.is_surjective()
    # the F2 view of CLayout_64xN: packed input (register, lane, warp) = register + (N/2)*t
    clayout = sm90.wgmma_acc_layout(n)
    t, i = grid(128, n // 2)
    packed_in = i + (n // 2) * t
    assert (f2.table()[packed_in] == clayout((t, i))).all()


def test_wgmma_acc_f2_rejects_non_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        sm90.wgmma_acc_f2(24)
    with pytest.raises(ValueError, match="multiple of 8"):
        sm90.wgmma_acc_layout(20)


def test_wgmma_acc_formula_equals_clayout_proved_by_z3():
    n = 256
    t, r = z3enc.bitvec("t", 16), z3enc.bitvec("r", 16)
    row, col = sm90.wgmma_acc_coord(t, r)
    clayout = z3enc.layout_term(sm90.wgmma_acc_layout(n), (t, r))
    pre = [z3.ULT(t, 128), z3.ULT(r, n // 2)]
    assert z3enc.find_counterexample(clayout == row + 64 * col, pre) is None
    t2, r2 = sm90.wgmma_acc_index(row, col)
    assert z3enc.find_counterexample(z3.And(t2 == t, r2 == r), pre) is None
    f2 = z3enc.f2_terms(sm90.wgmma_acc_f2(n), {"register": r, "lane": t & 31,
                                               "warp": z3.LShR(t, 5)})
    assert z3enc.find_counterexample(z3.And(f2["row"] == row, f2["col"] == col), pre) is None
    # an mma.sync-style formula (no +8 row for d2/d3) is refuted with a witness
    bad_row = 16 * z3.LShR(t, 5) + z3.LShR(t & 31, 2)
    cex = z3enc.find_counterexample(bad_row == row, pre, variables=[t, r])
    assert cex is not None and (cex["r"] // 2) % 2 == 1


def test_wgmma_register_a_fragment():
    t, i = grid(128, 8)
    row, k = sm90.wgmma_a_coord(t, i)
    assert (sm90.wgmma_a_layout()((t, i)) == row + 64 * k).all()
    assert sorted((row + 64 * k).tolist()) == list(range(64 * 16))
    # the 16-column slab j of an f32 accumulator is exactly the A operand (FA3's P·V)
    for j in range(4):
        acc_row, acc_col = sm90.wgmma_acc_coord(t, i + 8 * j)
        assert (acc_row == row).all() and (acc_col - 16 * j == k).all()
    assert sm90.wgmma_a_f2() == sm90.wgmma_acc_f2(16)
    assert sm90.wgmma_a_index(*sm90.wgmma_a_coord(77, 6)) == (77, 6)


def test_mma16816_fragments_match_cute_layouts():
    lane, i = grid(32, 8)
    row, k = sm90.mma16816_a_coord(lane, i)
    assert (sm90.mma16816_a_layout()((lane, i)) == row + 16 * k).all()
    assert sorted((row + 16 * k).tolist()) == list(range(256))
    lane, i = grid(32, 4)
    k, n = sm90.mma16816_b_coord(lane, i)
    assert (sm90.mma16816_b_layout()((lane, i)) == n + 8 * k).all()
    assert sorted((n + 8 * k).tolist()) == list(range(128))
    row, col = sm90.mma16816_c_coord(lane, i)
    assert (sm90.mma16816_c_layout()((lane, i)) == row + 16 * col).all()
    assert sorted((row + 16 * col).tolist()) == list(range(128))
    # wgmma d_0..d_3 repeat the mma.sync C pattern per warp; d_4.. move to the next 8 columns
    for lane_ in range(32):
        for i_ in range(4):
            assert sm90.wgmma_acc_coord(lane_, i_) == sm90.mma16816_c_coord(lane_, i_)
    assert sm90.wgmma_acc_coord(0, 4) == (0, 8)


def test_ldmatrix_fragment_and_address_lanes():
    assert list(sm90.ldmatrix_addr_lanes(1)) == list(range(8))
    assert list(sm90.ldmatrix_addr_lanes(2)) == list(range(16))
    assert list(sm90.ldmatrix_addr_lanes(4)) == list(range(32))
    with pytest.raises(ValueError):
        sm90.ldmatrix_addr_lanes(3)
    for lane in range(32):
        j, r = sm90.ldmatrix_lane_role(lane)
        assert sm90.ldmatrix_addr_lane(j, r) == lane
    lane, half = grid(32, 2)
    for trans in (False, True):
        row, col = sm90.ldmatrix_coord(lane, half, trans=trans)
        assert sorted((row * 8 + col).tolist()) == list(range(64))   # each element once
    row, col = sm90.ldmatrix_coord(lane, half)
    trow, tcol = sm90.ldmatrix_coord(lane, half, trans=True)
    assert (row == tcol).all() and (col == trow).all()               # .trans transposes
    assert sm90.stmatrix_coord is sm90.ldmatrix_coord


def simulate_ldmatrix(smem: dict[int, int], addrs: dict[int, int], num: int, trans: bool):
    """What each lane receives, driven only by the ldmatrix fragment formula."""
    out = {}
    for lane in range(32):
        for j in range(num):
            for half in (0, 1):
                row, col = sm90.ldmatrix_coord(lane, half, trans=trans)
                out[lane, j, half] = smem[addrs[sm90.ldmatrix_addr_lane(j, row)] + 2 * col]
    return out


def test_ldmatrix_x4_feeds_mma_a_and_x2_feeds_mma_b():
    # a 16x16 bf16 A tile, row-major with 32-byte rows; element value = row * 16 + k
    a_smem = {r * 32 + 2 * k: r * 16 + k for r in range(16) for k in range(16)}
    addrs = {}
    for lane in range(32):
        r, k0 = sm90.ldmatrix_x4_mma_a_src(lane)
        addrs[lane] = r * 32 + 2 * k0
    got = simulate_ldmatrix(a_smem, addrs, 4, False)
    for lane in range(32):
        for i in range(8):
            row, k = sm90.mma16816_a_coord(lane, i)
            assert got[lane, i // 2, i % 2] == row * 16 + k
    # an 8x16 B tile stored N x K (K contiguous): value = n * 16 + k
    b_smem = {n * 32 + 2 * k: n * 16 + k for n in range(8) for k in range(16)}
    addrs = {}
    for lane in range(16):
        n, k0 = sm90.ldmatrix_x2_mma_b_src(lane)
        addrs[lane] = n * 32 + 2 * k0
    got = simulate_ldmatrix(b_smem, addrs, 2, False)
    for lane in range(32):
        for i in range(4):
            k, n = sm90.mma16816_b_coord(lane, i)
            assert got[lane, i // 2, i % 2] == n * 16 + k


def test_ldmatrix_trans_feeds_mma_b_from_k_major_rows():
    # B stored K x N (N contiguous, 16-byte rows of 8 n); .trans hands each lane a column
    b_smem = {k * 16 + 2 * n: n * 16 + k for k in range(16) for n in range(8)}
    addrs = {lane: lane * 16 for lane in range(16)}        # matrix j = k rows 8j..8j+7
    got = simulate_ldmatrix(b_smem, addrs, 2, True)
    for lane in range(32):
        for i in range(4):
            k, n = sm90.mma16816_b_coord(lane, i)
            assert got[lane, i // 2, i % 2] == n * 16 + k


def test_f2_from_function_of_mma_c():
    f2 = F2Layout.from_function(lambda register, lane: sm90.mma16816_c_coord(lane, register),
                                (("register", 4), ("lane", 32)), (("row", 16), ("col", 8)))
    assert f2.is_injective()
    # packed input = register + 4 * lane, packed output = row + 16 * col: CuTe's CLayout
    lane, reg = grid(32, 4)
    assert (f2.table()[reg + 4 * lane] == sm90.mma16816_c_layout()((lane, reg))).all()


@pytest.mark.parametrize("n", [64, 256])
def test_stmatrix_x4_epilogue_puts_accumulators_where_wgmma_says(n):
    # simulate stmatrix.x4 of packed registers p0..p0+3 by each warp into a row-major tile
    stored = {}
    for t in range(128):
        for p0 in range(0, n // 4, 4):
            for j in range(4):
                for half in (0, 1):
                    lane = t % 32
                    row, col = sm90.stmatrix_coord(lane, half)
                    src_t = 32 * (t // 32) + sm90.ldmatrix_addr_lane(j, row)
                    r0, c0 = sm90.stmatrix_x4_wgmma_acc_src(src_t, p0)
                    stored[r0, c0 + col] = (t, 2 * (p0 + j) + half)
    assert len(stored) == 64 * n
    for (row, col), (t, i) in stored.items():
        assert sm90.wgmma_acc_coord(t, i) == (row, col)
    assert sm90.wgmma_acc_f16_coord(5, 3, 1) == sm90.wgmma_acc_coord(5, 7)
