"""GPU tier: the convolution's ping-pong consumers (ConvSchedule.pingpong: two consumer
warpgroups on whole tiles in turns, ordered main loops, one's epilogue under the other's K
loop; argus/kernels/conv.py, the interpreter tier tests/interp/test_conv_pingpong.py) against
torch's float64 F.conv2d on the device, through argus.ops.conv.convolve: the interpreter
tier's cases and schedules (few SMs: every CTA walks several units, odd walks) and the UNet
3x3 layers of scripts/gpu_conv_bench.py --unet at batch 2 under the bench's own ping-pong
rows (the full persistent grid, bm 128, direct and TMA-store epilogues), bias + ReLU, a
channels-last and an NCHW result; each also no worse than the default schedule beyond
rounding order."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.interp.test_conv_pingpong import CASES, IDS, SCHEDULES  # noqa: E402

pytestmark = hopper_only()

# (N, C, H, W, K): the UNet 3x3 pad-1 layers on 64^2 images and larger, batch 2
UNET = [(2, 64, 256, 256, 64), (2, 64, 128, 128, 128), (2, 128, 128, 128, 128),
        (2, 128, 64, 64, 256), (2, 256, 64, 64, 256)]


def _ids(c):
    return "x".join(map(str, c))


def _operands(N, C, H, W, K, R, S, seed, channels_last=True):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(N, C, H, W, generator=gen, device="cuda").bfloat16()
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, generator=gen, device="cuda") / (C * R * S) ** 0.5).bfloat16()
    b = torch.randn(K, generator=gen, device="cuda").bfloat16()
    return x, w, b


def _check(x, w, b, stride, padding, dilation, s):
    import torch.nn.functional as F

    from argus.ops import conv as conv_op

    y = conv_op.convolve(x, w, b, stride, padding, dilation, 1, activation="relu", schedule=s)
    base = conv_op.convolve(x, w, b, stride, padding, dilation, 1, activation="relu")
    torch.cuda.synchronize()
    ref = torch.relu(F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation))
    assert y.shape == ref.shape
    err = ((y.double() - ref).norm() / ref.norm()).item()
    err_base = ((base.double() - ref).norm() / ref.norm()).item()
    # bf16 output of fp32 sums: one rounding of the output (2^-8)
    assert err <= 4e-3, (err, err_base)
    assert err <= 1.5 * err_base + 1e-4, (err, err_base)
    return y


@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
def test_pingpong_interpreter_cases_on_the_gpu(case, schedule):
    N, C, H, W, K, R, S, st, pd, dl = case
    x, w, b = _operands(N, C, H, W, K, R, S, seed=sum(case[:7]))
    _check(x, w, b, st, pd, dl, schedule)


@pytest.mark.parametrize("layer", UNET, ids=_ids)
@pytest.mark.parametrize("epilogue", [None, "tma"], ids=["direct", "tma"])
def test_pingpong_unet_layers_on_the_gpu(layer, epilogue):
    """The bench's rows (scripts/gpu_conv_bench.py `_pingpong` on schedule_for's rowbox
    without the cluster): the full persistent grid of 132 CTAs."""
    from tests.interp.test_conv_pingpong import _bench
    from argus.ops import conv as conv_op

    N, C, H, W, K = layer
    x, w, b = _operands(N, C, H, W, K, 3, 3, seed=C + K + H)
    one = dataclasses.replace(conv_op.schedule_for(x, w, 1, 1, 1, 1, rowbox=True), cluster_m=1)
    step = (128 + one.bn) * one.bk * one.taps_per_slice * 2
    s = _bench()._pingpong(one, step, epilogue)
    assert s.pingpong and s.bm == 128
    _check(x, w, b, 1, 1, 1, s)


@pytest.mark.parametrize("schedule", [SCHEDULES[0], SCHEDULES[2]], ids=["bm128", "bm64"])
def test_pingpong_nchw_result_on_the_gpu(schedule):
    """An NCHW-contiguous input: the result written channels-first from registers."""
    x, w, b = _operands(2, 64, 33, 70, 96, 3, 3, seed=5, channels_last=False)
    y = _check(x, w, b, 1, 1, 1, schedule)
    assert y.is_contiguous()
