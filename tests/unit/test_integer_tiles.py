"""Integer tiles are integers end to end: index tiles, masks and integer arithmetic past 2^24
(where a float register stops being exact) compute exactly in the interpreter, render as
integer C++ registers (int / long long) with explicit casts where an index feeds float math,
and build for sm_90a with NVRTC. The i32 / i64 rule of argus/ir/numeric.py: i64 where a bound
says i32 could overflow (an element offset row * N + col), i32 otherwise.
tests/gpu/test_integer_tiles_gpu.py runs the same kernels on the device."""

from __future__ import annotations

import re

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.errors import TraceError
from argus.ir import ops as O

BIG = (1 << 24) + 1          # the first integer a float32 cannot hold


@ag.kernel
def index_past_2_24(X: ag.Tensor["M", "N", ag.f32], Idx: ag.Tensor["M", "N", ag.i32],
                    Y: ag.Tensor["M", "N", ag.f32], base: ag.Scalar[ag.i32],
                    limit: ag.Scalar[ag.i32]):
    """idx = base + row * 256 + col (an index tile past 2^24), stored; a mask idx < limit;
    the index also feeds float math through an explicit conversion."""
    (b,) = ag.grid(1)
    x = ag.load(X, (0, 0), (4, 256))
    idx = ag.arange(4)[:, None] * 256 + ag.arange(256)[None, :] + base
    ag.store(Idx, (0, 0), idx)
    y = ag.where(idx < limit, x, idx.to(ag.f32) - x)
    ag.store(Y, (0, 0), y)


@ag.kernel
def full_and_sum(S: ag.Tensor["M", 1, ag.i32], F: ag.Tensor["M", "N", ag.i32]):
    """An i32 fill of 2^24 + 1 (a float literal would read 2^24) and its row sums across
    warps (the warps' partials meet in shared memory: integer slots, not float)."""
    (b,) = ag.grid(1)
    f = ag.full((4, 256), BIG, ag.i32) + ag.arange(4)[:, None]
    ag.store(F, (0, 0), f)
    ag.store(S, (0, 0), (f - (BIG - 65536)).sum(axis=1))


@ag.kernel
def element_offsets(Off: ag.Tensor["M", "N", ag.i64], r0: ag.Scalar[ag.i32],
                    stride: ag.Scalar[ag.i32]):
    """(r0 + row) * stride + col: the element offset of a large tensor, which i32 would
    wrap (8 x 2^30 > 2^31): the rule makes the product i64."""
    (b,) = ag.grid(1)
    rows = ag.arange(4)[:, None] + r0
    ag.store(Off, (0, 0), rows * stride + ag.arange(256)[None, :])


def _tile_types(kernel, **kw) -> dict[str, str]:
    """fn -> result dtype of every elementwise op of the traced kernel (the last of each)."""
    return {op.fn: op.result.type.dtype.name for op in kernel.trace(**kw).walk()
            if isinstance(op, O.Elementwise)}


def test_index_tile_past_2_24_is_exact_in_the_interpreter():
    X = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    Idx = np.zeros((4, 256), np.int32)
    Y = np.zeros_like(X)
    base, limit = (1 << 24) - 300, BIG
    index_past_2_24.interpret(X, Idx, Y, base, limit)
    ref = base + np.arange(4)[:, None] * 256 + np.arange(256)[None, :]
    np.testing.assert_array_equal(Idx, ref)
    # 2^24 and 2^24 + 1 are distinct keys: the mask tells them apart
    np.testing.assert_array_equal(Y == X, ref < limit)
    assert (ref == BIG - 1).any() and (ref == BIG).any()
    np.testing.assert_array_equal(Y[ref >= limit],
                                  (ref.astype(np.float32) - X)[ref >= limit])


def test_index_tile_renders_as_integer_registers():
    src = codegen.render(lower_only(index_past_2_24)).text
    # the index tile (used twice, so stored) is an int array; nothing truncates through float
    idx_regs = re.findall(r"\bint (t\d+)\[", src)
    assert idx_regs, src
    assert "(float)(int)" not in src
    # the mask compares integers: no float conversion on either side of `<`
    mask = [ln for ln in src.splitlines() if "< limit" in ln]
    assert mask and all("(float)" not in ln for ln in mask), mask
    # the index enters float math through an explicit cast at the use
    assert re.search(r"\(float\)t\d+\[\d+\]", src)
    c = compile_kernel(index_past_2_24, verify=False)
    assert c.binary.cubin[:4] == b"\x7fELF"


def test_integer_fill_and_warp_sums_are_exact():
    S, F = np.zeros((4, 1), np.int32), np.zeros((4, 256), np.int32)
    full_and_sum.interpret(S, F)
    f = BIG + np.arange(4)[:, None] + np.zeros((1, 256), np.int64)
    np.testing.assert_array_equal(F, f)
    np.testing.assert_array_equal(S, (f - (BIG - 65536)).sum(axis=1, keepdims=True))
    lowered = lower_only(full_and_sum)
    src = codegen.render(lowered).text
    assert f"= {BIG};" in src and "1.6777216e+07f" not in src
    scratch = [op.result.type for op in lowered.walk() if isinstance(op, O.SmemAlloc)]
    assert scratch and all(t.dtype.name == "i32" for t in scratch), scratch
    assert "float4" not in src    # the partials are read back as int4
    compile_kernel(full_and_sum, verify=False)


def test_element_offsets_widen_to_i64():
    assert _tile_types(element_offsets)["mul"] == "i64"
    Off = np.zeros((4, 256), np.int64)
    element_offsets.interpret(Off, 5, 1 << 30)
    ref = (5 + np.arange(4)[:, None]).astype(np.int64) * (1 << 30) + np.arange(256)[None, :]
    np.testing.assert_array_equal(Off, ref)
    assert Off.max() > 2 ** 32
    src = codegen.render(lower_only(element_offsets)).text
    assert "(long long)" in src
    compile_kernel(element_offsets, verify=False)


def test_bounded_index_arithmetic_stays_i32():
    """Products the bounds prove small, and a coordinate scaled by a constant, stay i32."""
    types = _tile_types(index_past_2_24)
    assert types["mul"] == "i32" and types["add"] == "i32"

    @ag.kernel
    def k(Y: ag.Tensor["M", "N", ag.i32]):
        (b,) = ag.grid(1)
        ag.store(Y, (0, 0), ag.arange(4)[:, None] * ag.arange(256)[None, :] * 3)

    assert _tile_types(k)["mul"] == "i32"


def test_integer_division_truncates_toward_zero():
    @ag.kernel
    def k(Y: ag.Tensor["M", "N", ag.i32]):
        (b,) = ag.grid(1)
        ag.store(Y, (0, 0), (ag.arange(256)[None, :] - 128) / 7 + ag.full((1, 1), BIG, ag.i32))

    Y = np.zeros((1, 256), np.int32)
    k.interpret(Y)
    x = np.arange(256) - 128
    np.testing.assert_array_equal(Y[0], np.trunc(x / 7).astype(np.int64) + BIG)
    compile_kernel(k, verify=False)


def test_float_operands_of_integer_math_are_refused():
    @ag.kernel
    def k(Y: ag.Tensor["M", "N", ag.i32]):
        (b,) = ag.grid(1)
        ag.store(Y, (0, 0), ag.arange(256)[None, :] + 0.5)

    with pytest.raises(TraceError, match=r"to\(ag.f32\)"):
        k.interpret(np.zeros((1, 256), np.int32))


@ag.kernel
def float_to_int(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.i32],
                 Z: ag.Tensor["M", "N", ag.i64]):
    (b,) = ag.grid(1)
    x = ag.load(X, (0, 0), (1, 8))
    ag.store(Y, (0, 0), x.to(ag.i32))
    ag.store(Z, (0, 0), x.to(ag.i64))


CONVERT_X = np.array([[-2.7, 2.7, 3e9, -3e9, np.nan, np.inf, 2.0 ** 40, -0.5]], np.float32)


def test_float_to_integer_conversion_is_the_devices_cvt_rzi():
    """Toward zero, clamped to the integer's range, NaN to 0 (i32) or INT64_MIN (i64) (PTX
    cvt.rzi), in the interpreter as the generated `(int)` / `(long long)` casts do on the device."""
    Y, Z = np.zeros((1, 8), np.int32), np.zeros((1, 8), np.int64)
    float_to_int.interpret(CONVERT_X, Y, Z)
    imax, imin = 2 ** 31 - 1, -2 ** 31
    np.testing.assert_array_equal(Y[0], [-2, 2, imax, imin, 0, imax, imax, 0])
    # NaN into a 64-bit integer is INT64_MIN on the device (PTX ISA 9.0, cvt: NaN gives 0
    # only where the source is not f64 and the destination not 64-bit)
    np.testing.assert_array_equal(Z[0], [-2, 2, 3_000_000_000, -3_000_000_000, -2 ** 63,
                                         2 ** 63 - 1, 2 ** 40, 0])
    src = codegen.render(lower_only(float_to_int)).text
    assert "(int)t" in src and "(long long)t" in src


@ag.kernel
def decode_causal_mask(Keep: ag.Tensor["M", "N", ag.i32], r0: ag.Scalar[ag.i32],
                       q_len: ag.Scalar[ag.i32], k0: ag.Scalar[ag.i32], SK: ag.Scalar[ag.i32]):
    """A decode causal mask past 2^24 keys, in integers: packed row r is token r % q_len,
    whose last key is SK - q_len + token; key k is kept when k <= that."""
    (b,) = ag.grid(1)
    token = (r0 + ag.arange(8)[:, None]) % q_len
    key = k0 + ag.arange(256)[None, :]
    ag.store(Keep, (0, 0), ag.where(key <= token + (SK - q_len), ag.full((1, 1), 1, ag.i32), 0))


def test_remainder_of_integer_tiles_builds_an_exact_decode_mask():
    assert _tile_types(decode_causal_mask)["mod"] == "i32"   # no product: stays i32
    Keep = np.zeros((8, 256), np.int32)
    SK, q_len = (1 << 24) + 3, 4
    r0, k0 = 9, SK - 200
    decode_causal_mask.interpret(Keep, r0, q_len, k0, SK)
    token = (r0 + np.arange(8)[:, None]) % q_len
    ref = (k0 + np.arange(256)[None, :] <= token + SK - q_len).astype(np.int32)
    np.testing.assert_array_equal(Keep, ref)
    assert 0 < ref.sum() < ref.size
    src = codegen.render(lower_only(decode_causal_mask)).text
    assert re.search(r"% q_len\)", src) and "(float)" not in src
    compile_kernel(decode_causal_mask, verify=False)
    with pytest.raises(TraceError, match="integer tiles"):
        @ag.kernel
        def k(Y: ag.Tensor["M", "N", ag.f32]):
            (b,) = ag.grid(1)
            ag.store(Y, (0, 0), ag.full((1, 256), 3.0) % 2.0)

        k.interpret(np.zeros((1, 256), np.float32))


def test_negative_remainders_follow_c():
    @ag.kernel
    def k(Y: ag.Tensor["M", "N", ag.i32]):
        (b,) = ag.grid(1)
        x = ag.arange(256)[None, :] - 128
        ag.store(Y, (0, 0), x % 7 + (x / 7) * 7 - x)   # C: (x / y) * y + x % y == x

    Y = np.ones((1, 256), np.int32)
    k.interpret(Y)
    np.testing.assert_array_equal(Y, 0)
    x = np.arange(256) - 128
    Y2 = np.zeros((1, 256), np.int32)

    @ag.kernel
    def r(Y: ag.Tensor["M", "N", ag.i32]):
        (b,) = ag.grid(1)
        ag.store(Y, (0, 0), (ag.arange(256)[None, :] - 128) % 7)

    r.interpret(Y2)
    np.testing.assert_array_equal(Y2[0], np.fmod(x, 7))


@ag.kernel(threads=32)
def int_cumsum(X: ag.Tensor["M", "N", ag.i32], Y: ag.Tensor["M", "N", ag.i32],
               E: ag.Tensor["M", 128, ag.i32], T: ag.Tensor["M", 1, ag.i32]):
    """Integer scans: a running sum carried over blocks past 2^24, a reverse exclusive max
    (its identity the i32 minimum)."""
    (p,) = ag.grid(1)
    carry = ag.full((4, 1), 0, ag.i32)
    for j in ag.range(ag.cdiv(X.shape[1], 128)):
        x = ag.load(X, (0, j * 128), (4, 128), other=0)
        y, carry = ag.scan(x, "sum", 1, carry)
        ag.store(Y, (0, j * 128), y)
    x = ag.load(X, (0, 0), (4, 128), other=0)
    e, _ = ag.scan(x, fn="max", axis=1, reverse=True, exclusive=True)
    ag.store(E, (0, 0), e)
    ag.store(T, (0, 0), carry)


def test_integer_scans_are_exact():
    X = (np.random.default_rng(1).integers(0, 3, (4, 300)) + (1 << 17)).astype(np.int32)
    Y, E, T = np.zeros_like(X), np.zeros((4, 128), np.int32), np.zeros((4, 1), np.int32)
    int_cumsum.interpret(X, Y, E, T)
    np.testing.assert_array_equal(Y, np.cumsum(X.astype(np.int64), 1))
    assert Y.max() > BIG   # past 2^24 (300 x 2^17): odd sums a float could not hold
    np.testing.assert_array_equal(T[:, 0], X.astype(np.int64).sum(1))
    suffix = np.maximum.accumulate(X[:, :128][:, ::-1], 1)[:, ::-1]
    np.testing.assert_array_equal(E[:, :127], suffix[:, 1:])
    assert (E[:, 127] == -2 ** 31).all()
    src = codegen.render(lower_only(int_cumsum)).text
    assert "int run" in src and "float run" not in src and "max(" in src
    compile_kernel(int_cumsum, verify=False)


def test_scalar_integer_arithmetic_wraps_as_on_the_device():
    """An i32 scalar product past 2^31 wraps in the generated `int` arithmetic; the
    interpreter computes the same (an i64 tile product keeps it: the rule's point)."""
    @ag.kernel
    def k(Y: ag.Tensor["M", "N", ag.i32], a: ag.Scalar[ag.i32], b: ag.Scalar[ag.i32]):
        (p,) = ag.grid(1)
        ag.store(Y, (0, 0), ag.full((1, 2), 0, ag.i32) + (a * b + 1) // 65536)

    Y = np.zeros((1, 2), np.int32)
    k.interpret(Y, 1 << 16, (1 << 15) + 1)   # 2^31 + 2^16 + 1 wraps to -2^31 + 2^16 + 1
    np.testing.assert_array_equal(Y, -32766)   # C division of the wrapped value (not 32769)


@ag.kernel
def int_minimum_fills(Y: ag.Tensor["M", "N", ag.i32], Z: ag.Tensor["M", "N", ag.i64]):
    (b,) = ag.grid(1)
    ag.store(Y, (0, 0), ag.full((1, 8), -2 ** 31, ag.i32))
    ag.store(Z, (0, 0), ag.full((1, 8), -2 ** 63, ag.i64))


def test_integer_minimum_literals_keep_their_signed_type():
    """-9223372036854775808LL is the negation of an unsigned literal in C++ (the magnitude does
    not fit a long long), and -2147483648 that of a long long: a compare or max() against one
    inlined would change type. The type's minimum is spelled (-MAX - 1)."""
    src = codegen.render(lower_only(int_minimum_fills)).text
    assert "9223372036854775808" not in src and "2147483648" not in src
    assert "(-9223372036854775807LL - 1)" in src and "(-2147483647 - 1)" in src
    Y, Z = np.zeros((1, 8), np.int32), np.zeros((1, 8), np.int64)
    int_minimum_fills.interpret(Y, Z)
    assert (Y == -2 ** 31).all() and (Z == -2 ** 63).all()
