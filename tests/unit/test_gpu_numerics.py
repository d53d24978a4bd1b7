"""tests/gpu/numerics.py's torch model of tf32 rounding (cvt.rna.tf32.f32: 10 mantissa bits,
to nearest, ties away from zero; non-finite values unchanged), which the GPU tier compares
the tf32 kernels against, checked on the CPU: known bit patterns (ties each way, carries into
the exponent and past the largest finite value, signed zeros, subnormals, inf, NaN payloads of
either sign) and random bit patterns of every exponent against an independent float64 model
of the rounding. Also `rel` on a known error and on a zero reference."""

import math
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.gpu.numerics import rel, tf32  # noqa: E402


def _bits_to_tensor(bits):
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.int32)).view(torch.float32)


def _tensor_bits(t):
    return [b & 0xFFFFFFFF for b in t.contiguous().view(torch.int32).tolist()]


# (input bits, cvt.rna's bits): the 13 dropped bits are the low 13 (0x1FFF), half is 0x1000
KNOWN = [
    (0x3F800000, 0x3F800000),   # 1.0: exact
    (0x3F800FFF, 0x3F800000),   # below half: down
    (0x3F801000, 0x3F802000),   # tie, kept bit even: away from zero (nearest-even stays)
    (0x3F803000, 0x3F804000),   # tie, kept bit odd: away from zero (nearest-even alike)
    (0x3F801001, 0x3F802000),   # above half: up
    (0xBF801000, 0xBF802000),   # negative tie: away from zero (larger magnitude)
    (0xBF800FFF, 0xBF800000),   # negative below half: toward zero
    (0x3FFFF000, 0x40000000),   # carry into the exponent: 1.99975586 -> 2.0
    (0x7F7FEFFF, 0x7F7FE000),   # largest finite tf32
    (0x7F7FF000, 0x7F800000),   # tie past the largest finite tf32: +inf
    (0x7F7FFFFF, 0x7F800000),   # FLT_MAX: +inf
    (0xFF7FF000, 0xFF800000),   # -inf
    (0x00000000, 0x00000000),   # +0
    (0x80000000, 0x80000000),   # -0 keeps its sign
    (0x00000001, 0x00000000),   # smallest subnormal: +0
    (0x80000FFF, 0x80000000),   # negative subnormal below half: -0
    (0x00001000, 0x00002000),   # subnormal tie: up to the smallest tf32 subnormal
    (0x80001000, 0x80002000),   # negative subnormal tie: away from zero
    (0x007FF000, 0x00800000),   # largest subnormals: the smallest normal
    (0x807FFFFF, 0x80800000),
    (0x7F800000, 0x7F800000),   # +inf
    (0xFF800000, 0xFF800000),   # -inf
    (0x7FC00000, 0x7FC00000),   # quiet NaN
    (0x7F800001, 0x7F800001),   # NaN whose payload is only dropped bits (the add would make inf)
    (0x7FFFF000, 0x7FFFF000),   # NaN the add would carry into the sign bit (-0.0)
    (0xFFFFFFFF, 0xFFFFFFFF),   # negative NaN, all payload bits (the add would wrap to +0)
    (0xFFC01234, 0xFFC01234),
]


def test_tf32_known_bit_patterns():
    x = _bits_to_tensor([b for b, _ in KNOWN])
    got = _tensor_bits(tf32(x))
    for (b, want), g in zip(KNOWN, got):
        assert g == want, f"tf32(0x{b:08X}) = 0x{g:08X}, cvt.rna gives 0x{want:08X}"


def _rna_model(bits: int) -> int:
    """cvt.rna.tf32.f32 in float64 arithmetic: the value's quantum at tf32 precision (2^(e-10)
    for a binade [2^e, 2^(e+1)), e >= -126; the subnormals' 2^-136), |x| / quantum rounded half
    up, overflow past FLT_MAX to inf."""
    x = struct.unpack("<f", struct.pack("<I", bits))[0]
    if not math.isfinite(x):
        return bits
    mag = abs(x)
    e = max(math.frexp(mag)[1] - 1, -126) if mag else -126
    quantum = 2.0 ** (e - 10)
    r = math.floor(mag / quantum + 0.5) * quantum          # exact in float64
    r = math.copysign(r, x)
    if abs(r) > 3.4028234663852886e38:
        r = math.copysign(math.inf, x)
    return struct.unpack("<I", struct.pack("<f", r))[0]


def test_tf32_against_float64_model_on_random_bits():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, size=20000, dtype=np.uint64).astype(np.uint32)
    # every exponent, and the near-tie mantissas (low 13 bits around 0x1000) many times
    bits[:512] = (np.arange(512, dtype=np.uint32) << 23) | rng.integers(
        0, 1 << 23, size=512, dtype=np.uint64).astype(np.uint32)
    near = rng.integers(0x0FFE, 0x1003, size=4000, dtype=np.uint64).astype(np.uint32)
    bits[512:4512] = (bits[512:4512] & np.uint32(0xFFFFE000)) | near
    got = _tensor_bits(tf32(_bits_to_tensor(bits)))
    bad = [(int(b), g) for b, g in zip(bits, got) if g != _rna_model(int(b))]
    assert not bad, [f"0x{b:08X} -> 0x{g:08X}, model 0x{_rna_model(b):08X}" for b, g in bad[:5]]


def test_tf32_keeps_shape_and_reads_strided_input():
    x = torch.randn(5, 7, 3).permute(2, 0, 1)
    y = tf32(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    for a, b in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist()):
        bits = struct.unpack("<I", struct.pack("<f", a))[0]
        assert struct.unpack("<I", struct.pack("<f", b))[0] == _rna_model(bits)


def test_rel():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert rel(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert rel(ref.float(), ref) == 0.0
    zero = torch.zeros(2, dtype=torch.float64)
    assert math.isfinite(rel(torch.tensor([1.0, 0.0]), zero)) and rel(torch.ones(2), zero) > 1e29
