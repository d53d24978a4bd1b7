"""Register fragment layouts of sm_90a matrix instructions: which thread/register holds which
matrix element.

Job: the single source of truth for wgmma m64nNk16 accumulators and register A operands,
mma.sync m16n8k16 A/B/C fragments and ldmatrix/stmatrix (INVARIANTS.md §2.1, §2.4, §2.5).
Each formula is written once with `argus.layout.arith`, so codegen calls it with Python ints,
the interpreter with numpy arrays and the verifier with z3 bit-vectors. The equivalent CuTe
shape:stride TV layouts and F2 layouts are derived here too, and tests cross-check all of them
exhaustively.

Notation: a warpgroup thread t in [0, 128) (t = %tid % 128 for an aligned warpgroup), warp
w = t/32, lane l = t%32, group g = l/4, thread-in-group q = l%4.
"""

from __future__ import annotations

import functools
from typing import Any

from argus.layout import arith
from argus.layout.f2 import F2Layout
from argus.layout.shape_stride import Layout
from argus.target import limits

# ---- wgmma m64nNk16 (PTX ISA §9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16")


def _check_n(n: int) -> None:
    if not limits.wgmma_n_is_valid(n):
        raise ValueError(f"wgmma N={n} is not a multiple of 8 in [8, 256] (PTX ISA §9.7.15)")


def wgmma_acc_coord(t: Any, i: Any) -> tuple[Any, Any]:
    """(row, col) of f32 accumulator register d_i (i in [0, N/2)) of warpgroup thread t.

    row = 16w + g + 8((i/2)%2),  col = 2q + (i%2) + 8(i/4). For an .f16 accumulator, register
    j packs the elements of d_{2j}, d_{2j+1} in this order.
    """
    w, lane = arith.div(t, 32), arith.mod(t, 32)
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    row = 16 * w + g + 8 * arith.mod(arith.div(i, 2), 2)
    col = 2 * q + arith.mod(i, 2) + 8 * arith.div(i, 4)
    return row, col


def wgmma_acc_f16_coord(t: Any, j: Any, half: Any) -> tuple[Any, Any]:
    """(row, col) of half `half` (0 = low 16 bits) of .f16x2 accumulator register j, j in
    [0, N/4): the element order of the f32 accumulator, two per register."""
    return wgmma_acc_coord(t, 2 * j + half)


def wgmma_acc_index(row: Any, col: Any) -> tuple[Any, Any]:
    """Inverse of `wgmma_acc_coord`: the (thread, register) holding accumulator (row, col)."""
    w, g, half = arith.div(row, 16), arith.mod(row, 8), arith.mod(arith.div(row, 8), 2)
    q = arith.div(arith.mod(col, 8), 2)
    i = arith.mod(col, 2) + 2 * half + 4 * arith.div(col, 8)
    return 32 * w + 4 * g + q, i


def wgmma_acc_layout(n: int) -> Layout:
    """CuTe `CLayout_64xN`: (thread, register) -> row + 64*col of the 64xN accumulator.

    ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512))  (cute/atom/mma_traits_sm90_gmma.hpp)
    """
    _check_n(n)
    return Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))


@functools.cache
def wgmma_acc_f2(n: int) -> F2Layout:
    """The accumulator as an F2 layout {register, lane, warp} -> {row, col}; N a power of two.
    Built from `wgmma_acc_coord` (checked linear on the whole domain) and cached."""
    _check_n(n)
    if not arith.is_pow2(n):
        raise ValueError(f"wgmma_acc_f2: N={n} is not a power of two, so the fragment is not an "
                         "F2 layout; use wgmma_acc_layout (shape:stride) or wgmma_acc_coord")
    return F2Layout.from_function(
        lambda register, lane, warp: wgmma_acc_coord(32 * warp + lane, register),
        (("register", n // 2), ("lane", 32), ("warp", 4)), (("row", 64), ("col", n)))


def wgmma_a_coord(t: Any, i: Any) -> tuple[Any, Any]:
    """(row, k) of element a_i (i in [0, 8)) of the register A operand (RS form, f16/bf16,
    m64k16): the accumulator pattern restricted to 16 columns, so an f32 accumulator slab of 16
    columns converts in place into the next wgmma's A (FlashAttention-3's P·V)."""
    return wgmma_acc_coord(t, i)


def wgmma_a_index(row: Any, k: Any) -> tuple[Any, Any]:
    """Inverse of `wgmma_a_coord`."""
    return wgmma_acc_index(row, k)


def wgmma_a_layout() -> Layout:
    """CuTe `ALayout_64x16` (== CLayout_64x16): (thread, element) -> row + 64*k."""
    return wgmma_acc_layout(16)


def wgmma_a_f2() -> F2Layout:
    """The register A operand as an F2 layout {register, lane, warp} -> {row, col=k}."""
    return wgmma_acc_f2(16)


# ---- wgmma m64nNk32 with an 8-bit A from registers (e4m3/e5m2; CuTe `ALayout_64x32`,
# cute/atom/mma_traits_sm90_gmma.hpp; per warp the mma.m16n8k32 A fragment, PTX ISA
# §9.7.14.5.7 / §9.7.15.5.1.1.2)

A8_ELEMENTS = 16      # e4m3 elements of one k32 A fragment per thread: 4 registers x 4 bytes


def wgmma_a8_coord(t: Any, i: Any) -> tuple[Any, Any]:
    """(row, k) of element a_i (i in [0, 16)) of the 8-bit register A operand (m64k32):
    register i / 4, byte i % 4 (lowest first). row = 16w + g + 8((i/4)%2),
    k = 4q + i%4 + 16(i/8). Unlike the 16-bit fragment this is *not* the f32 accumulator
    pattern restricted to 32 columns: a thread holds 4 consecutive k per 16, the accumulator
    2 per 8, so P of S = Q K^T moves between the threads of a quad (`ACC_TO_A8`)."""
    w, lane = arith.div(t, 32), arith.mod(t, 32)
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    row = 16 * w + g + 8 * arith.mod(arith.div(i, 4), 2)
    k = 4 * q + arith.mod(i, 4) + 16 * arith.div(i, 8)
    return row, k


def wgmma_a8_layout() -> Layout:
    """CuTe `ALayout_64x32`: (thread, element) -> row + 64*k."""
    return Layout(((4, 8, 4), (4, 2, 2)), ((256, 1, 16), (64, 8, 1024)))


class AccToA8:
    """The plan that turns 32 columns of a 64-row f32 tile in the accumulator pattern
    (`wgmma_acc_coord`) into the four registers of the 8-bit A fragment of one k32 step
    (`wgmma_a8_coord`), as data codegen renders: for A register r of k32 step kk, every
    thread

    1. packs the four accumulator registers `word(kk, r)` (byte 0 first) into one 32-bit
       word: its two column pairs of the 8-column blocks 4kk + 2(r/2) and the next, in row
       half r % 2;
    2. reads that word from the quad lanes `src_quad(q, s)` = 2(q % 2) + s, s = 0 and 1
       (two warp shuffles; a lane's quad position is q = lane % 4);
    3. keeps bytes `SELECT[q / 2]` of the two (byte_perm: nibble n picks result byte n, 0-3
       from the first word, 4-7 from the second): the lower pair (block 4kk + 2(r/2)) when
       q < 2, the upper one otherwise.

    `check()` proves the plan against both coordinate formulas for every thread and element
    (tests/unit/test_fp8_register_a.py)."""

    SHUFFLES = 2
    SELECT = (0x5410, 0x7632)
    # what codegen renders, as C expressions of the warpgroup thread index `gtid` (also
    # Python: `check` evaluates them against src_quad and SELECT): the first source lane (the
    # device helper reads it and `| 1`), and the condition that picks SELECT[1] (q / 2 == 1)
    SOURCE_LANE = "(gtid & ~3) | ((gtid & 1) << 1)"
    SELECT_UPPER = "(gtid & 2)"

    @staticmethod
    def word(kk: int, r: int) -> tuple[int, int, int, int]:
        half, h = r % 2, r // 2
        b0 = 4 * kk + 2 * h
        return tuple(e + 2 * half + 4 * b for b in (b0, b0 + 1) for e in (0, 1))

    @staticmethod
    def src_quad(q: int, s: int) -> int:
        return 2 * (q % 2) + s

    @classmethod
    def delivered(cls, t: int, kk: int, r: int) -> list[tuple[int, int]]:
        """(thread, accumulator register) of the four bytes thread t ends up with in A
        register r of step kk, simulating the plan."""
        q = t % 4
        words = [[(t - q + cls.src_quad(q, s), reg) for reg in cls.word(kk, r)]
                 for s in range(cls.SHUFFLES)]
        pool = words[0] + words[1]
        sel = cls.SELECT[q // 2]
        return [pool[(sel >> (4 * n)) & 0xF] for n in range(4)]

    @classmethod
    def check(cls, k_steps: int = 1) -> None:
        """Raise AssertionError unless every thread's every A byte of `k_steps` k32 steps
        is the accumulator element of the same (row, 32 kk + k)."""
        for t in range(128):
            q = t % 4
            src = eval(cls.SOURCE_LANE, {"__builtins__": {}}, {"gtid": t})  # noqa: S307
            assert (src, src | 1) == tuple(t - q + cls.src_quad(q, s) for s in range(2)), t
            upper = eval(cls.SELECT_UPPER, {"__builtins__": {}}, {"gtid": t})  # noqa: S307
            assert bool(upper) == (q // 2 == 1), t
            for kk in range(k_steps):
                for r in range(4):
                    for n, (src_t, reg) in enumerate(cls.delivered(t, kk, r)):
                        row, k = wgmma_a8_coord(t, 4 * r + n)
                        got = wgmma_acc_coord(src_t, reg)
                        assert (row, 32 * kk + k) == got, (t, kk, r, n, got)


ACC_TO_A8 = AccToA8


def acc_order_col(k: Any) -> Any:
    """The tile column that k-position k of an 8-bit register A reads when the A fragment is
    taken in the accumulator's own order (`AccOrderA8`): inside each 32-column group, k's bits
    (b0, b1, b2, b3, b4) go to the column with bits (b0, b2, b3, b1, b4), i.e.
    k = 32c + 16h + 4q + 2a + e  ->  32c + 16h + 8a + 2q + e. A bijection of each 32-group
    (a bit permutation), so a product that sums over k is unchanged when B's k rows are
    permuted the same way: FP8 attention's V^T with its keys in this order (the op's
    transposing copy, argus/ops/attention_fp8.py)."""
    # one reduction of k itself (k mod 16), the rest on that bounded remainder: the verifier's
    # solver then sees (j * BN + kk) mod 16 once, not four div/mod terms of a symbolic sum
    r = arith.mod(k, 16)
    e, a, q = arith.mod(r, 2), arith.mod(arith.div(r, 2), 2), arith.div(r, 4)
    return k - r + 8 * a + 2 * q + e


def acc_order_col32(k: Any) -> Any:
    """The tile column that k-position k of a tf32 (32-bit) register A reads when the A
    fragment is taken in the accumulator's own order: the m64k8 tf32 A fragment gives thread
    (row r, quad position q) k-positions q and q + 4 (rows r and r + 8: registers a0..a3), the
    accumulator pattern gives it columns 2q and 2q + 1 of each 8-column chunk, so registers
    (4kk, 4kk+2, 4kk+1, 4kk+3) of the tile are the fragment of k8 step kk, no shuffle:
    k = 8c + 4h + q  ->  8c + 2q + h. A bijection of each 8-group, so the product is unchanged
    when B's k rows are permuted the same way (the pointwise conv's weight,
    argus/kernels/conv_pointwise_nchw.py)."""
    r = arith.mod(k, 8)
    h, q = arith.div(r, 4), arith.mod(r, 4)
    return k - r + 2 * q + h


# the registers of the accumulator pattern that make k8 step kk's tf32 A registers a0..a3
# (codegen/cuda/mma.py packs ra[kk][r] = tile register 4 kk + ACC_ORDER_A32[r])
ACC_ORDER_A32 = (0, 2, 1, 3)


def wgmma_a32_coord(t: Any, i: Any) -> tuple[Any, Any]:
    """(row, k) of element a_i (i in [0, 4)) of the tf32 register A operand (m64k8, PTX ISA
    "Register fragments: wgmma .m64nNk8", the mma.m16n8k8 .tf32 A layout per warp):
    row = 16w + g + 8(i%2), k = q + 4(i/2)."""
    w, lane = arith.div(t, 32), arith.mod(t, 32)
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    return 16 * w + g + 8 * arith.mod(i, 2), q + 4 * arith.div(i, 2)


def check_acc_order_a32(k_steps: int = 4) -> None:
    """Proof by enumeration that the packing ACC_ORDER_A32 gives k-position k of step kk the
    tile column acc_order_col32(8 kk + k) in the same row: what the interpreter and the
    verifier assume (O.Wgmma.a_acc_order with an f32 A)."""
    assert sorted(acc_order_col32(k) for k in range(8)) == list(range(8))
    for t in range(128):
        for kk in range(k_steps):
            for r in range(4):
                row, k = wgmma_a32_coord(t, r)
                got = wgmma_acc_coord(t, 4 * kk + ACC_ORDER_A32[r])
                assert (row, acc_order_col32(8 * kk + k)) == got, (t, kk, r, got)


def acc_order_for(bits: int):
    """`acc_order_col` of a register A of `bits`-bit elements (8: fp8, 32: tf32)."""
    return acc_order_col32 if bits == 32 else acc_order_col


def acc_order_k(col: Any) -> Any:
    """Inverse of `acc_order_col`: the k-position that reads tile column `col`."""
    e, q = arith.mod(col, 2), arith.mod(arith.div(col, 2), 4)
    a, rest = arith.mod(arith.div(col, 8), 2), arith.div(col, 16)
    return 16 * rest + 4 * q + 2 * a + e


class AccOrderA8:
    """The shuffle-free plan for FP8 attention's P: the four registers of k32 step kk of the
    8-bit A fragment read tile columns in the order `acc_order_col`, so every thread already
    holds its bytes in the accumulator pattern (`wgmma_acc_coord`): A register r of step kk
    packs the thread's own accumulator registers `word(kk, r)` (the same four AccToA8 packs
    before its two quad shuffles and byte_perm), byte 0 first. Nothing moves between lanes;
    the price is that B's k rows must be in the same order (V^T's keys permuted inside each
    32-key group, done by the op's transposing copy for free).

    The same idea as FlashAttention-3 (hopper/utils.h permute_Cregs_fp8, applied in
    hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp when V is not column-major): FA3 swaps 64-bit
    register pairs of S inside each thread, and its in-kernel transpose of V writes V^T in the
    matching key order; with V given column-major it shuffles instead (permute_Aregs_fp8,
    our AccToA8). Here the permutation is an index map on k (`acc_order_col`) that the
    interpreter and the verifier apply too (O.Wgmma.a_acc_order), and the op writes V^T in
    it. `check()` proves the plan for all 128 threads (tests/unit/test_fp8_register_a.py)."""

    SHUFFLES = 0

    @staticmethod
    def word(kk: int, r: int) -> tuple[int, int, int, int]:
        return AccToA8.word(kk, r)

    @classmethod
    def check(cls, k_steps: int = 1) -> None:
        """Raise AssertionError unless every thread's A byte n of register r of every k32
        step holds, from its own accumulator registers, the element at (row, column
        acc_order_col(32 kk + k)) of the tile, (row, k) = wgmma_a8_coord(t, 4 r + n)."""
        assert sorted(acc_order_col(k) for k in range(32)) == list(range(32))
        for k in range(32 * k_steps):
            assert acc_order_k(acc_order_col(k)) == k, k
        for t in range(128):
            for kk in range(k_steps):
                for r in range(4):
                    for n, reg in enumerate(cls.word(kk, r)):
                        row, k = wgmma_a8_coord(t, 4 * r + n)
                        got = wgmma_acc_coord(t, reg)
                        assert (row, acc_order_col(32 * kk + k)) == got, (t, kk, r, n, got)


ACC_ORDER_A8 = AccOrderA8


# ---- mma.sync m16n8k16, f16/bf16 (PTX ISA §9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with
# floating point type"); lane l of one warp.


def mma16816_a_coord(lane: Any, i: Any) -> tuple[Any, Any]:
    """(row, k) of a_i, i in [0, 8) (4 x .f16x2 registers; register j holds a_{2j}, a_{2j+1})."""
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    return g + 8 * arith.mod(arith.div(i, 2), 2), 2 * q + arith.mod(i, 2) + 8 * arith.div(i, 4)


def mma16816_b_coord(lane: Any, i: Any) -> tuple[Any, Any]:
    """(k, n) of b_i, i in [0, 4) (2 x .f16x2 registers)."""
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    return 2 * q + arith.mod(i, 2) + 8 * arith.div(i, 2), g


def mma16816_c_coord(lane: Any, i: Any) -> tuple[Any, Any]:
    """(row, col) of c_i / d_i, i in [0, 4) (.f32 registers)."""
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    return g + 8 * arith.div(i, 2), 2 * q + arith.mod(i, 2)


def mma16816_a_layout() -> Layout:
    """CuTe SM80_16x8x16 ALayout: (lane, value) -> row + 16*k."""
    return Layout(((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128)))


def mma16816_b_layout() -> Layout:
    """CuTe SM80_16x8x16 BLayout: (lane, value) -> n + 8*k."""
    return Layout(((4, 8), (2, 2)), ((16, 1), (8, 64)))


def mma16816_c_layout() -> Layout:
    """CuTe SM80_16x8x16 CLayout: (lane, value) -> row + 16*col."""
    return Layout(((4, 8), (2, 2)), ((32, 1), (16, 8)))


# ---- ldmatrix / stmatrix .m8n8 .b16 (PTX ISA §9.7.14.5.15 "ldmatrix", §9.7.14.5.16 "stmatrix")
# .x1/.x2/.x4 move 1/2/4 8x8 matrices of 16-bit elements; lanes 8j..8j+7 supply the 8 row
# addresses (16 bytes each) of matrix j; destination register j of every lane holds two elements
# of matrix j. stmatrix is the exact inverse with the same fragment and address provisioning.

LDMATRIX_NUMS = (1, 2, 4)


def ldmatrix_coord(lane: Any, half: Any, trans: bool = False) -> tuple[Any, Any]:
    """(row, col) inside matrix j of the element `half` (0 = low 16 bits, 1 = high) of register j
    of `lane`. Rows are the 8 addressed 16-byte rows, cols the 8 b16 elements of a row.

    Plain: (l/4, 2(l%4) + half). With .trans: (2(l%4) + half, l/4), i.e. the lane gets a
    column of the stored matrix. The same for every register j (= matrix j).
    """
    g, q = arith.div(lane, 4), arith.mod(lane, 4)
    if trans:
        return 2 * q + half, g
    return g, 2 * q + half


stmatrix_coord = ldmatrix_coord


def ldmatrix_addr_lane(matrix: Any, row: Any) -> Any:
    """The lane whose address operand gives row `row` of matrix `matrix` (8*matrix + row)."""
    return 8 * matrix + row


def ldmatrix_lane_role(lane: Any) -> tuple[Any, Any]:
    """Inverse of `ldmatrix_addr_lane`: (matrix, row) whose address `lane` supplies."""
    return arith.div(lane, 8), arith.mod(lane, 8)


def ldmatrix_addr_lanes(num: int) -> range:
    """Lanes whose address operands are read by .x{num} (.x1: 0-7, .x2: 0-15, .x4: 0-31)."""
    if num not in LDMATRIX_NUMS:
        raise ValueError(f"ldmatrix/stmatrix .x{num}: num must be 1, 2 or 4")
    return range(8 * num)


def ldmatrix_x4_mma_a_src(lane: Any) -> tuple[Any, Any]:
    """(row, first k) of the 16-byte row that `lane` addresses when ldmatrix.x4 loads a 16x16
    row-major (K-contiguous) A tile for mma.m16n8k16: matrix j covers rows 8(j%2)..+8 and
    k 8(j/2)..+8, so register j = (a_{2j}, a_{2j+1}) of `mma16816_a_coord`."""
    j, r = ldmatrix_lane_role(lane)
    return r + 8 * arith.mod(j, 2), 8 * arith.div(j, 2)


def ldmatrix_x2_mma_b_src(lane: Any) -> tuple[Any, Any]:
    """(n, first k) of the 16-byte row that `lane` (0-15) addresses when ldmatrix.x2 loads an
    8x16 (N x K, K-contiguous) B tile for mma.m16n8k16: matrix j covers k 8j..+8, so register
    j = (b_{2j}, b_{2j+1}) of `mma16816_b_coord`."""
    j, r = ldmatrix_lane_role(lane)
    return r, 8 * j


def stmatrix_x4_wgmma_acc_src(t: Any, p0: Any) -> tuple[Any, Any]:
    """(row, first col) of the 16-byte row of the 64xN output tile whose address warpgroup
    thread t supplies when its warp stores packed accumulator registers p0..p0+3 (p0 % 4 == 0;
    packed register p = bf16x2 of d_{2p}, d_{2p+1}) with stmatrix.x4.

    Matrix j = register p0+j covers rows 16w + 8(j%2) .. +8 and cols 8(p0+j)/2 .. +8, which
    is where `wgmma_acc_coord` puts those elements (the epilogue path of HOPPER.md §2.1).
    """
    w, lane = arith.div(t, 32), arith.mod(t, 32)
    j, r = ldmatrix_lane_role(lane)
    p = p0 + j
    return 16 * w + 8 * arith.mod(p, 2) + r, 8 * arith.div(p, 2)
