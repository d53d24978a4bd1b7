"""GPU tier: e4m3 conversions on the card, bit for bit against torch's float8_e4m3fn conversion
and against the interpreter (the kernels and inputs of tests/unit/test_fp8_convert.py).

Reference: torch's conversion of the value clamped to +-448 (our semantics: saturate, as PTX's
cvt.rn.satfinite); where torch's own unclamped .to() gives a number (every in-range value in
every torch release; all values in torch 2.13, which saturates too) the bytes must equal it.
NaN is compared as NaN (the card writes the canonical 0x7F, torch keeps the sign)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.unit.test_fp8_convert import (  # noqa: E402
    QUANTIZE,
    QUANTIZE_VEC,
    conversion_inputs,
    fp8_acc_store,
    fp8_dequantize,
    fp8_dequantize_vec,
    fp8_round_trip,
    small_integers,
)

pytestmark = hopper_only()

E4M3 = torch.float8_e4m3fn


def _assert_same_e4m3(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Two e4m3 tensors: the same byte where the reference is a number, NaN where it is NaN."""
    ref_nan = torch.isnan(ref.float())
    assert torch.equal(torch.isnan(ours.float()), ref_nan), f"{what}: NaN positions differ"
    a, b = ours.view(torch.uint8)[~ref_nan], ref.view(torch.uint8)[~ref_nan]
    bad = (a != b).nonzero()
    assert bad.numel() == 0, (f"{what}: {bad.numel()} bytes differ, first ours "
                              f"{a[bad[0]].item():#04x} torch {b[bad[0]].item():#04x}")


@pytest.mark.parametrize("kernels", [QUANTIZE, QUANTIZE_VEC], ids=["bytes", "packed"])
@pytest.mark.parametrize("src", ["f32", "bf16"])
@pytest.mark.parametrize("scale", [1.0, 0.375])
def test_quantize_matches_torch_bit_for_bit(kernels, src, scale):
    x32 = conversion_inputs()
    x = torch.from_numpy(x32).cuda().to(torch.float32 if src == "f32" else torch.bfloat16)
    y = torch.full(x.shape, 0.5, device="cuda").to(E4M3)
    kernels[src](x, y, scale)
    torch.cuda.synchronize()
    scaled = x.float() * scale
    _assert_same_e4m3(y, scaled.clamp(-448.0, 448.0).to(E4M3), "vs torch of the clamped value")
    plain = scaled.to(E4M3)  # torch's own overflow rule: saturate (2.13) or NaN (older)
    finite = ~torch.isnan(plain.float())
    assert torch.equal(y.view(torch.uint8)[finite], plain.view(torch.uint8)[finite])
    # the interpreter computes the same bytes
    x_host = x.float().cpu().numpy()
    y_interp = np.zeros_like(x_host)
    kernels[src].interpret(x_host, y_interp, scale)
    _assert_same_e4m3(y.cpu(), torch.from_numpy(y_interp).to(E4M3), "vs the interpreter")


@pytest.mark.parametrize("kernel", [fp8_dequantize, fp8_dequantize_vec], ids=["bytes", "packed"])
def test_dequantize_every_code(kernel):
    codes = torch.arange(256, dtype=torch.uint8).view(E4M3).repeat(3, 2).cuda()  # [3, 512]
    z = torch.full(codes.shape, 7.0, device="cuda")
    kernel(codes, z)
    torch.cuda.synchronize()
    ref = codes.float()
    assert torch.equal(torch.isnan(z), torch.isnan(ref))
    ok = ~torch.isnan(ref)
    assert torch.equal(z[ok], ref[ok]) and torch.equal(torch.signbit(z[ok]), torch.signbit(ref[ok]))


def test_round_trip_matches_the_interpreter():
    x_host = conversion_inputs()
    x = torch.from_numpy(x_host).cuda()
    z = torch.zeros_like(x)
    fp8_round_trip(x, z)
    torch.cuda.synchronize()
    z_interp = np.zeros_like(x_host)
    fp8_round_trip.interpret(x_host, z_interp)
    got = z.cpu().numpy()
    np.testing.assert_array_equal(got, z_interp)
    ok = ~np.isnan(z_interp)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(z_interp[ok]))


def test_accumulator_stored_as_e4m3():
    """A wgmma accumulator stored as e4m3 (16-bit pair stores; the ragged last tile takes the
    element path): exact integer sums, so torch's conversion of Q K^T is the reference."""
    q = torch.from_numpy(small_integers((100, 64), 1)).cuda()
    k = torch.from_numpy(small_integers((64, 64), 2)).cuda()
    o = torch.full((100, 64), 0.5, device="cuda").to(E4M3)
    fp8_acc_store(q.to(torch.bfloat16), k.to(torch.bfloat16), o)
    torch.cuda.synchronize()
    _assert_same_e4m3(o, (q @ k.T).clamp(-448.0, 448.0).to(E4M3), "accumulator store")
