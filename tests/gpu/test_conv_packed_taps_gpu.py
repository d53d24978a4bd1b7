"""GPU tier: packed taps (ConvSchedule.taps_per_slice: several K slices a pipeline step, each
its own 32 / 64 / 128-byte swizzled atom and wgmma) on the H200: the interpreter tier's
shapes (tests/interp/test_conv_packed_taps.py: 2-d and 3-d, C 3..128, strides, padding,
dilation, groups, the tail step, rowbox, bf16 / fp16 / tf32) compiled and run, against
float64 torch within the same bounds, and L2/8's and c2's shapes (smaller batches) against
the one-tap schedule. The first device run of a wgmma on 32-byte-swizzled operands (L2/8's
bk 8 tf32 atoms): a wrong descriptor shows here as a large error."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.interp.test_conv_packed_taps import CASES, _ids  # noqa: E402

pytestmark = hopper_only()


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_packed_taps_match_torch_on_the_gpu(case):
    import torch.nn.functional as F

    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.ops import conv as conv_op

    xs, K, k, st, pd, dl, g, dt, prec, taps = case
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(xs, generator=gen, device="cuda").to(dt)
    w = torch.randn((K, xs[1] // g, *k), generator=gen, device="cuda").to(dt)
    b = torch.randn(K, generator=gen, device="cuda").to(dt)
    s = conv_op.schedule_for(x, w, st, pd, dl, g, precision=prec, taps_per_slice=taps)
    assert s.taps_per_slice > 1
    y = conv_op.convolve(x, w, b, st, pd, dl, g, schedule=s, precision=prec)
    conv = F.conv3d if len(xs) == 5 else F.conv2d
    rnd = round_to_tf32 if prec == "tf32" else (lambda t: t)
    ref = conv(rnd(x).double(), rnd(w).double(), b.double(), st, pd, dl, g)
    assert _rel(y, ref) <= (1e-6 if prec == "tf32" else 4e-3), s


@pytest.mark.parametrize("xs,ws,padding,dtype,precision,taps", [
    ((8, 8, 16, 64, 64), (16, 8, 3, 3, 3), 0, torch.float32, "tf32", "auto"),  # L2/8, batch 8
    ((4, 64, 56, 56), (64, 64, 3, 3), 1, torch.bfloat16, None, 2)],           # c2, batch 4
    ids=["l2_8", "c2"])
def test_packed_taps_agree_with_one_tap_a_step(xs, ws, padding, dtype, precision, taps):
    from argus.ops import conv as conv_op

    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(xs, generator=gen, device="cuda").to(dtype)
    w = (torch.randn(ws, generator=gen, device="cuda") * 0.1).to(dtype)
    one = conv_op.schedule_for(x, w, 1, padding, 1, 1, precision=precision, taps_per_slice=1)
    packed = conv_op.schedule_for(x, w, 1, padding, 1, 1, precision=precision,
                                  taps_per_slice=taps)
    assert packed.taps_per_slice > 1 and one.taps_per_slice == 1
    y1 = conv_op.convolve(x, w, None, 1, padding, schedule=one, precision=precision)
    y2 = conv_op.convolve(x, w, None, 1, padding, schedule=packed, precision=precision)
    # the same products in the same K order (the tail's are zeros): equal up to the output's
    # rounding of a differently scheduled fp32 sum
    assert _rel(y2, y1.double()) <= (1e-6 if precision == "tf32" else 4e-3)
