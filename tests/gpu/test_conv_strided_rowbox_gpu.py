"""GPU tier: the strided rowbox (ConvSchedule.rowbox on a strided convolution, the A tile one
TMA box read with the tensor map's element strides) on the H200. The first device run of
element-strided boxes: the pipeline's full barrier expects the bytes that land in shared
memory (the box's landed elements, boxDim / stride along each strided dim); a byte count the
hardware credits differently hangs the kernel here (run it under a timeout: gpu_round2.sh's
run_step), and a wrong traversal shows as a large error against float64.

Cases: the interpreter tier's (tests/interp/test_conv_strided_rowbox.py: strides 2 and 3,
per-axis strides, padding, dilation, 1x1 downsamples, the few-channel stem with packed taps)
and ResNet-50's strided layers at batch 2, bf16, fp16, the fp32 split and tf32, each through
schedule_for(strided_rowbox=True) and, beside it, the unstrided default it would replace."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.interp.test_conv_strided_rowbox import CASES, STEM  # noqa: E402

pytestmark = hopper_only()

# (N, C, H, W, K, R, S, stride, padding, dilation, groups): ResNet-50's strided layers, batch 2
RESNET = [
    (2, 3, 224, 224, 64, 7, 7, 2, 3, 1, 1),         # stem 7x7/2
    (2, 128, 56, 56, 128, 3, 3, 2, 1, 1, 1),        # c3 3x3 128/2
    (2, 256, 56, 56, 512, 1, 1, 2, 0, 1, 1),        # c3 1x1/2 downsample
    (2, 256, 28, 28, 256, 3, 3, 2, 1, 1, 1),        # c4 3x3 256/2
    (2, 512, 14, 14, 512, 3, 3, 2, 1, 1, 1),        # c5 3x3 512/2 (small-image bm 64)
]


def _ids(c):
    return "x".join(map(str, c))


def _run(case, dtype, precision=None):
    import torch.nn.functional as F

    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.ops import conv as conv_op

    N, C, H, W, K, R, S, st, pd, dl, g = case
    gen = torch.Generator(device="cuda").manual_seed(sum(case[:7]))
    x = torch.randn(N, C, H, W, generator=gen, device="cuda").to(dtype)
    w = torch.randn(K, C // g, R, S, generator=gen, device="cuda").to(dtype)
    b = torch.randn(K, generator=gen, device="cuda").to(dtype)
    s = conv_op.schedule_for(x, w, st, pd, dl, g, precision=precision, strided_rowbox=True)
    assert s.rowbox, "schedule_for(strided_rowbox=True) kept the per-row boxes"
    y = conv_op.convolve(x, w, b, st, pd, dl, g, schedule=s, precision=precision)
    torch.cuda.synchronize()
    rnd = round_to_tf32 if precision == "tf32" else (lambda t: t)
    ref = F.conv2d(rnd(x).double(), rnd(w).double(), b.double(), st, pd, dl, g)
    assert y.shape == ref.shape
    base = conv_op.convolve(x, w, b, st, pd, dl, g, precision=precision)   # today's default
    err = ((y.double() - ref).norm() / ref.norm()).item()
    err_base = ((base.double() - ref).norm() / ref.norm()).item()
    return err, err_base


@pytest.mark.parametrize("case", CASES + [STEM] + RESNET, ids=_ids)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_strided_rowbox_matches_float64_on_the_gpu(case, dtype):
    err, err_base = _run(case, getattr(torch, dtype))
    # 16-bit outputs of fp32 sums of exact products: one rounding of the output (2^-8 / 2^-11)
    assert err <= (4e-3 if dtype == "bfloat16" else 1e-3), (err, err_base)
    # same products, same fp32 accumulation: no worse than the default beyond rounding order
    assert err <= 1.5 * err_base + 1e-4, (err, err_base)


@pytest.mark.parametrize("case", [CASES[0], RESNET[1]], ids=_ids)
def test_strided_rowbox_fp32_split_and_tf32_on_the_gpu(case):
    err, err_base = _run(case, torch.float32)
    assert err <= 1e-5, (err, err_base)            # the bf16 split: fp32-accurate
    err, err_base = _run(case, torch.float32, precision="tf32")
    assert err <= 8e-6, (err, err_base)            # tf32-rounded operands, fp32 sums
