"""Bitwise ops on integer tiles and runtime integer scalars (& | ^ << >>, argus/ir/numeric.py
BITWISE): the interpreter against torch (i32, i64) and numpy (u32, which torch cannot shift)
on random values with negatives and shifts by 0, 8, 24 and 31; the CUDA rendering (a signed
<< through the unsigned type, C's undefined overflow avoided) built for sm_90a by NVRTC; the
bounds the i32 / i64 rule reads (`x & 255` in [0, 255], a wrapping shift never widened);
and the TraceErrors for float and boolean operands and out-of-range shift counts."""

import numpy as np
import pytest

import argus as ag
from argus import dtypes, verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.numeric import int_result
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")

COUNTS = (0, 8, 24, 31)
N = 96


def _ops(x, y, n, counts=COUNTS):
    """The expressions each kernel stores, written once for the tiles (x, y: [32, 1] tiles,
    n: a runtime scalar) and once for the reference (torch / numpy arrays and a Python int):
    the same Python operators either way."""
    out = [x & y, x | y, x ^ y, x & 0xFF, 0x0F0F | x, n ^ x, (x >> 24) & 255]
    out += [x << k for k in counts] + [x >> k for k in counts]
    out += [((x >> 8) & 255) << 24 | (x & 255), x >> (y & 7), (y & 15) << (x & 7)]
    return out


def _kernel(dtype, ncols: int):
    @ag.kernel(threads=32, name=f"bitwise_{dtype.name}")
    def bitwise(X: ag.Tensor["N", dtype], Y: ag.Tensor["N", dtype],
                Z: ag.Tensor["N", ncols, dtype], n: ag.i32):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 32))
        r = pid * 32 + ag.arange(32)[:, None]
        x, y = ag.gather(X, (r,), other=0), ag.gather(Y, (r,), other=0)
        for j, z in enumerate(_ops(x, y, n)):
            ag.store(Z, (pid * 32, j), z.to(dtype))   # an i32 n beside a u32 x: i64
    return bitwise


def _random(np_dtype, seed):
    info = np.iinfo(np_dtype)
    rng = np.random.default_rng(seed)
    x = rng.integers(info.min, info.max, N, dtype=np_dtype, endpoint=True)
    x[:4] = [0, -1 if info.min < 0 else info.max, info.min, info.max]
    return x


NCOLS = len(_ops(np.zeros(1, np.int32), np.zeros(1, np.int32), 0))


@pytest.mark.parametrize("dtype", [ag.i32, ag.i64])
def test_signed_tiles_interpret_as_torch(dtype):
    np_dtype = dtype.np_dtype()
    x, y = _random(np_dtype, 1), _random(np_dtype, 2)
    n = -123456789
    z = np.zeros((N, NCOLS), np_dtype)
    _kernel(dtype, NCOLS).interpret(x, y, z, n)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    # torch's << of a signed tensor wraps like the device; its >> is arithmetic
    for j, want in enumerate(_ops(tx, ty, n)):
        assert np.array_equal(z[:, j], want.numpy()), f"column {j}: {z[:4, j]} {want[:4]}"


def test_u32_shifts_are_logical():
    x, y = _random(np.uint32, 3), _random(np.uint32, 4)
    n = 0x5EADBEEF
    z = np.zeros((N, NCOLS), np.uint32)
    _kernel(ag.u32, NCOLS).interpret(x, y, z, n)
    for j, want in enumerate(_ops(x, y, np.uint32(n))):
        assert np.array_equal(z[:, j], np.asarray(want, np.uint32)), f"column {j}"
    # the top bit is not copied down: x[1] = 0xFFFFFFFF >> 31 is 1 (an i32 gives -1)
    assert z[1, 7 + len(COUNTS) + COUNTS.index(31)] == 1


def test_runtime_scalars_are_bitwise_and_booleans_stay_logical():
    @ag.kernel(threads=32)
    def scalars(Z: ag.Tensor[8, ag.i32], a: ag.i32, b: ag.i32):
        ag.grid(1)
        vals = [a & b, a | b, a ^ b, a << 24, a >> 3, 0xFF & a, 1 << (b & 15)]
        with ag.when((a < b) & (b < 100)):   # booleans: still the logical and
            ag.store(Z, (7,), ag.full((1,), 1, ag.i32))
        for j, s in enumerate(vals):
            ag.store(Z, (j,), ag.full((1,), 0, ag.i32) + s)

    for a, b in ((-7, 12345), (2**31 - 1, -1), (-2**31, 31)):
        z = np.zeros(8, np.int32)
        scalars.interpret(z, a, b)
        ta, tb = torch.tensor(a, dtype=torch.int32), torch.tensor(b, dtype=torch.int32)
        want = [ta & tb, ta | tb, ta ^ tb, ta << 24, ta >> 3, 0xFF & ta, 1 << (tb & 15)]
        assert [int(v) for v in z[:7]] == [int(w) for w in want], (a, b)
        assert z[7] == (a < b < 100)
    fns = {op.fn for op in scalars.trace().walk() if isinstance(op, O.Arith)}
    assert {"bitand", "bitor", "bitxor", "shl", "shr", "and"} <= fns


def test_bounds_of_masks_and_shifts():
    i32 = dtypes.i32
    tile, const = (lambda lo, hi: (i32, (lo, hi), False)), (lambda c: (i32, (c, c), True))
    coord = (i32, None, False)
    assert int_result("bitand", [coord, const(255)]) == (i32, (0, 255))
    assert int_result("bitand", [tile(-5, 5), tile(-3, 3)]) == (i32, None)
    assert int_result("bitor", [tile(0, 255), tile(0, 256)]) == (i32, (0, 511))
    assert int_result("shr", [tile(-1024, 1023), const(8)]) == (i32, (-4, 3))
    assert int_result("shl", [tile(0, 255), const(8)]) == (i32, (0, 255 << 8))
    # past i32 the shift wraps: no bound, and no i64 either (the bits are what was asked for)
    assert int_result("shl", [tile(0, 255), const(24)]) == (i32, None)
    assert int_result("shl", [tile(0, 255), coord]) == (i32, None)
    # a shift keeps its left operand's type whatever the count's
    assert int_result("shr", [(dtypes.u32, None, False), coord])[0] == dtypes.u32


@pytest.mark.parametrize("expr, match", [
    (lambda x, f, n: f & 1, "integer tiles"),
    (lambda x, f, n: x << f, "integer tiles"),
    (lambda x, f, n: x & 1.5, "integer tiles"),
    (lambda x, f, n: x ^ (x < 3), "integer tiles"),
    (lambda x, f, n: (x < 3) ^ (x < 4), "integer tiles"),
    (lambda x, f, n: x << 32, r"shift count 32 is outside \[0, 32\)"),
    (lambda x, f, n: x >> -1, "shift count -1"),
    (lambda x, f, n: x & (1 << 40), "does not fit"),
    (lambda x, f, n: n & 1.0, "integer tiles"),
])
def test_non_integer_operands_are_refused(expr, match):
    @ag.kernel(threads=32)
    def bad(Z: ag.Tensor[32, ag.i32], s: ag.f32):
        ag.grid(1)
        x = ag.arange(32)
        f = x.to(ag.f32)
        ag.store(Z, (0,), expr(x, f, s).to(ag.i32))

    with pytest.raises(TraceError, match=match) as info:
        bad.trace()
    assert "fix" in str(info.value) or info.value.fix


def test_the_kernel_verifies_clean():
    report = verify.run(lower_only(_kernel(ag.i32, NCOLS)))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)


@needs_nvrtc
@pytest.mark.parametrize("dtype", [ag.i32, ag.u32, ag.i64])
def test_builds_for_sm90a_with_unsigned_left_shifts(dtype):
    compiled = ag.compile(_kernel(dtype, NCOLS))
    text = str(getattr(compiled.source, "text", compiled.source))
    unsigned = {"i32": "unsigned", "u32": None, "i64": "unsigned long long"}[dtype.name]
    shifts = [line for line in text.splitlines() if "<<" in line]
    assert shifts
    if unsigned:   # every signed << goes through the unsigned type (no C UB)
        assert all(f"({unsigned})(" in line for line in shifts), shifts[0]
    assert compiled.resources.spill_stores == 0
