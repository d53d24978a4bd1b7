"""Tiles converted to e4m3 and stored, and e4m3 tensors loaded: the interpreter against torch,
the CUDA rendering compiled by NVRTC for sm_90a (no GPU; tests/gpu/test_fp8_convert_gpu.py
runs the same kernels on the card).

The conversion's semantics (argus.dtypes.round_to, ag::f32_to_e4m3): round to nearest even,
values beyond the e4m3 range and infinities saturate to +-448, NaN stays NaN. That is PTX's
cvt.rn.satfinite, cuda_fp8.h's __NV_SATFINITE, and torch 2.13's .to(torch.float8_e4m3fn);
torch releases before pytorch PR 178817 made |x| > 464 and infinities NaN instead, so the
reference below is torch's conversion of the value clamped to +-448 (the same in every torch).
"""

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")

BM, BN = 16, 128


def _quantize_kernel(src, threads: int = 128):
    """Y = (X * scale) rounded to e4m3: a `src` tile converted with .to(ag.e4m3) and stored.
    At 128 threads a thread holds one column of the [16, 128] tile (byte stores); at 32 it
    holds chunks of 4 consecutive columns (4-byte vector stores of packed e4m3)."""

    @ag.kernel(threads=threads, name=f"fp8_quantize_{src.name}_{threads}")
    def quantize(X: ag.Tensor["M", "N", src], Y: ag.Tensor["M", "N", ag.e4m3],
                 scale: ag.Scalar[ag.f32]):
        pm, pn = ag.grid(ag.cdiv(X.shape[0], BM), ag.cdiv(X.shape[1], BN))
        x = ag.load(X, (pm * BM, pn * BN), (BM, BN))
        # scaled in f32 (a bf16 tile times a scalar would round to bf16 first)
        ag.store(Y, (pm * BM, pn * BN), (x.to(ag.f32) * scale).to(ag.e4m3))

    return quantize


def _dequantize_kernel(threads: int = 128):
    """Z = Y widened to f32 (an e4m3 tensor loaded; 4-byte vector loads at 32 threads)."""

    @ag.kernel(threads=threads, name=f"fp8_dequantize_{threads}")
    def dequantize(Y: ag.Tensor["M", "N", ag.e4m3], Z: ag.Tensor["M", "N", ag.f32]):
        pm, pn = ag.grid(ag.cdiv(Y.shape[0], BM), ag.cdiv(Y.shape[1], BN))
        ag.store(Z, (pm * BM, pn * BN), ag.load(Y, (pm * BM, pn * BN), (BM, BN)).to(ag.f32))

    return dequantize


@ag.kernel(threads=128)
def fp8_round_trip(X: ag.Tensor["M", "N", ag.f32], Z: ag.Tensor["M", "N", ag.f32]):
    """Z = 2 * e4m3(X) in f32: the converted tile used in arithmetic, never stored as e4m3."""
    pm, pn = ag.grid(ag.cdiv(X.shape[0], BM), ag.cdiv(X.shape[1], BN))
    x = ag.load(X, (pm * BM, pn * BN), (BM, BN))
    ag.store(Z, (pm * BM, pn * BN), x.to(ag.e4m3).to(ag.f32) * 2.0)


QUANTIZE = {d.name: _quantize_kernel(d) for d in (ag.f32, ag.bf16)}
QUANTIZE_VEC = {d.name: _quantize_kernel(d, threads=32) for d in (ag.f32, ag.bf16)}
fp8_dequantize = _dequantize_kernel()
fp8_dequantize_vec = _dequantize_kernel(threads=32)
SPECIAL = [0.0, -0.0, 1e-9, -1e-9, 2.0 ** -10, 2.0 ** -9, 1.5 * 2.0 ** -9, 2.0 ** -6,
           1.0625, 1.1875, 15.5, 440.0, 447.9, 448.0, 449.0, 463.9, 464.0, 464.1, 479.0,
           480.0, 500.0, 1e6, 3e38, np.inf, -np.inf, np.nan, -448.0, -464.1, -1e6]


def conversion_inputs(rows: int = 37, cols: int = 300) -> np.ndarray:
    """Every finite e4m3 value, both sides of every midpoint and the midpoints, the special
    cases above (saturation, ties at the top, subnormals, signed zeros, NaN) and random normal
    values over the whole range, as a [rows, cols] f32 array (ragged against the tiles)."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    vals = np.unique(codes[np.isfinite(codes)])
    vals = np.concatenate([vals, -vals])
    vals.sort()
    mids = ((vals[1:] + vals[:-1]) / 2).astype(np.float32)
    head = np.concatenate([vals, mids, np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf)),
                           np.array(SPECIAL, np.float32)]).astype(np.float32)
    rng = np.random.default_rng(16)
    tail = (rng.standard_normal(rows * cols - head.size) * 10.0 ** rng.uniform(
        -4, 3, rows * cols - head.size)).astype(np.float32)
    return np.concatenate([head, tail]).reshape(rows, cols)


def torch_e4m3(x: np.ndarray) -> np.ndarray:
    """torch's float8_e4m3fn conversion of x saturated to +-448, back in f32 (NaN kept)."""
    return torch.from_numpy(np.clip(x, -448.0, 448.0)).to(torch.float8_e4m3fn).float().numpy()


def _same(ours: np.ndarray, ref: np.ndarray) -> None:
    """Equal as values, NaN where the reference is NaN, and the sign of zero kept."""
    np.testing.assert_array_equal(ours, ref)  # NaN exactly where the reference has NaN
    keep = ~np.isnan(ref)
    np.testing.assert_array_equal(np.signbit(ours[keep]), np.signbit(ref[keep]))


def _bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).float().numpy()


@pytest.mark.parametrize("src", ["f32", "bf16"])
@pytest.mark.parametrize("scale", [1.0, 0.375])
def test_quantize_interprets_as_torch(src, scale):
    x = conversion_inputs()
    if src == "bf16":
        x = _bf16(x)  # the interpreter holds bf16 tensors as their f32 values
    y = np.full_like(x, 7.0)
    QUANTIZE[src].interpret(x, y, scale)
    ref = torch_e4m3((x.astype(np.float32) * np.float32(scale)).astype(np.float32))
    _same(y, ref)


def test_saturation_and_specials_in_the_interpreter():
    x = np.array([[1e6, -1e6, np.inf, -np.inf, np.nan, 464.0, 464.1, -480.0, 2.0 ** -10,
                   -2.0 ** -10, 1.5 * 2.0 ** -9, 1.0625]], np.float32)
    y = np.zeros_like(x)
    QUANTIZE["f32"].interpret(x, y, 1.0)
    want = [448.0, -448.0, 448.0, -448.0, np.nan, 448.0, 448.0, -448.0, 0.0, -0.0,
            2.0 ** -8, 1.0]
    np.testing.assert_array_equal(y[0], np.array(want, np.float32))
    assert np.signbit(y[0, 9]) and not np.signbit(y[0, 8])


def test_dequantize_and_round_trip_interpret_as_torch():
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    y = np.tile(codes, (3, 2))  # [3, 512]: every e4m3 value (NaN included) in every column
    z = np.zeros_like(y)
    fp8_dequantize.interpret(y, z)
    _same(z, y)
    x = conversion_inputs()
    z = np.zeros_like(x)
    fp8_round_trip.interpret(x, z)
    _same(z, 2.0 * torch_e4m3(x))


def test_rendering_converts_once_per_store():
    """A converted tile stored as e4m3 renders one saturating conversion per element (the
    store's, not a round trip before it); a converted tile used in arithmetic renders the round
    trip; a load widens. Chunks of 4 consecutive e4m3 columns are one 32-bit access."""
    text = codegen.render(lower_only(QUANTIZE["f32"])).text
    assert "ag::f32_to_e4m3(" in text and "ag::e4m3_to_f32(" not in text
    assert "pack_e4m3x4" not in text  # a column a thread: byte stores
    text = codegen.render(lower_only(fp8_round_trip)).text
    assert "ag::e4m3_to_f32(ag::f32_to_e4m3(" in text
    text = codegen.render(lower_only(fp8_dequantize)).text
    assert "ag::e4m3_to_f32(Y[" in text
    text = codegen.render(lower_only(QUANTIZE_VEC["bf16"])).text
    assert "ag::st_global_b32(Y + ge, ag::pack_e4m3x4(gv0, gv1, gv2, gv3));" in text
    assert "ag::e4m3_to_f32(" not in text   # no round trip before the packed store either
    assert "ag::f32_to_e4m3(gv3)" in text   # the scalar path of a ragged or unaligned chunk
    text = codegen.render(lower_only(fp8_dequantize_vec)).text
    assert "ag::unpack_e4m3x4(gw0, " in text and "ag::e4m3_to_f32(Y[" in text


@pytest.mark.parametrize("src", ["f32", "bf16"])
def test_vector_kernels_interpret_as_torch(src):
    """The 32-thread kernels (same IR semantics, another layout): the interpreter agrees."""
    x = conversion_inputs()
    if src == "bf16":
        x = _bf16(x)
    y = np.zeros_like(x)
    QUANTIZE_VEC[src].interpret(x, y, 0.375)
    _same(y, torch_e4m3((x * np.float32(0.375)).astype(np.float32)))
    z = np.zeros_like(y)
    fp8_dequantize_vec.interpret(y, z)
    _same(z, y)


ALL_KERNELS = [QUANTIZE["f32"], QUANTIZE["bf16"], QUANTIZE_VEC["f32"], QUANTIZE_VEC["bf16"],
               fp8_dequantize, fp8_dequantize_vec, fp8_round_trip]
STORES_E4M3 = {k.name for k in ALL_KERNELS if "quantize" in k.name and "de" not in k.name}


@needs_nvrtc
@pytest.mark.parametrize("kernel", ALL_KERNELS, ids=lambda k: k.name)
def test_nvrtc_compiles_e4m3_conversions_for_sm90a(kernel):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(kernel))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and binary.cubin[:4] == b"\x7fELF"
    if "dequantize" not in kernel.name:
        assert "cvt.rn.satfinite.e4m3x2.f32" in binary.ptx
    if kernel.name not in STORES_E4M3:
        assert "cvt.rn.f16x2.e4m3x2" in binary.ptx
    assert not binary.resource(source.name).spills


@ag.kernel
def fp8_acc_store(Q: ag.Tensor["M", 64, ag.bf16], K: ag.Tensor[64, 64, ag.bf16],
                  O: ag.Tensor["M", 64, ag.e4m3]):
    """O = e4m3(Q K^T): a wgmma accumulator stored as e4m3 (pairs of adjacent columns as one
    16-bit store where aligned, as the gate-up epilogue of the fp8 MoE path will need)."""
    (pid,) = ag.grid(ag.cdiv(Q.shape[0], 64))
    sK = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(1, consumers=1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sK[st], K, (0, 0))
    with ag.role("consumer", warpgroups=1):
        q = ag.load(Q, (pid * 64, 0), (64, 64))
        s = ag.zeros((64, 64))
        with pipe.consume() as st:
            s = ag.wgmma(q, sK[st], s)
        ag.store(O, (pid * 64, 0), s.to(ag.e4m3))


def small_integers(shape, seed: int) -> np.ndarray:
    """Values in -3..3: every product sum of 64 terms is exact in f32 (order-free)."""
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float32)


def test_accumulator_stored_as_e4m3_interprets_as_torch():
    q, k = small_integers((100, 64), 1), small_integers((64, 64), 2)
    o = np.full((100, 64), 7.0, np.float32)
    fp8_acc_store.interpret(q, k, o)
    _same(o, torch_e4m3((q.astype(np.float64) @ k.T.astype(np.float64)).astype(np.float32)))
    text = codegen.render(lower_only(fp8_acc_store)).text
    assert "ag::st_global_b16(" in text and "ag::pack_e4m3x2(" in text
    assert "ag::e4m3_to_f32(" not in text   # converted once, by the store


@needs_nvrtc
def test_accumulator_e4m3_store_builds_for_sm90a():
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(fp8_acc_store))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "cvt.rn.satfinite.e4m3x2.f32" in binary.ptx and "st.global.b16" in binary.ptx
    assert not binary.resource(source.name).spills
