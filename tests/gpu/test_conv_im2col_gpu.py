"""GPU tier: argus.ops.conv's im2col route (bf16 / fp16 convolutions with few input channels:
the gather kernel argus/kernels/conv_im2col.py, then argus.ops.matmul's GEMM) on the H200,
at ResNet-50's stem and KernelBench L1/50's (AlexNet's 11x11/4) shapes, against float64
F.conv2d: within one rounding of the 16-bit result, the same layout as the implicit GEMM's,
repeated (replayed) calls equal, the public conv2d and the torch.library op under
torch.compile. Speed: scripts/gpu_conv_bench.py --stem."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rand as _rand, rel as _rel  # noqa: E402

pytestmark = hopper_only()


# (N, C, H, W, K, R, S, stride, padding, dilation, bias, channels_last, dtype)
STEMS = [
    (32, 3, 224, 224, 64, 7, 7, 2, 3, 1, False, True, torch.bfloat16),    # ResNet-50's stem
    (8, 3, 224, 224, 64, 7, 7, 2, 3, 1, False, False, torch.bfloat16),    # NCHW x
    (16, 3, 224, 224, 96, 11, 11, 4, 2, 1, True, True, torch.bfloat16),   # L1/50's layer
    (4, 5, 61, 64, 40, 3, 5, (1, 2), (2, 1), (2, 1), True, True, torch.float16),
]


@pytest.mark.parametrize("case", STEMS, ids=lambda c: "x".join(map(str, c[:12])))
def test_im2col_route_matches_float64(case):
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, K, R, S, stride, padding, dilation, bias, cl, dtype = case
    x = _rand(N, C, H, W, seed=1).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = (_rand(K, C, R, S, seed=2) / (C * R * S) ** 0.5).to(dtype)
    b = _rand(K, seed=3).to(dtype) if bias else None
    args = (stride, padding, dilation)
    assert conv_ops.route(x, w, b, stride, padding, 1, dilation=dilation) == "im2col"
    y = conv_ops.convolve(x, w, b, *args)
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), *args)
    bound = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    assert y.shape == ref.shape and y.dtype == dtype and _rel(y, ref) <= bound
    assert y.permute(0, 2, 3, 1).is_contiguous()
    # replayed on the same tensors: the same result; on new values of x: the new result
    assert torch.equal(conv_ops.convolve(x, w, b, *args), y)
    x.copy_(_rand(*x.shape, seed=4).to(dtype))
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), *args)
    assert _rel(conv_ops.convolve(x, w, b, *args), ref) <= bound


@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "channels_last"])
def test_tf32_route_on_l1_50(cl):
    """KernelBench L1/50's layer in fp32 under tf32 (the per-tap gather for KernelBench's NCHW
    x, the row runs for a channels-last one): the tf32 model's result (operands rounded to
    nearest, the bias as two tf32 pieces), within cuDNN TF32's error of the exact result."""
    import torch.nn.functional as F

    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.ops import conv as conv_ops

    x = torch.rand(16, 3, 224, 224, device="cuda")
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w, b = _rand(96, 3, 11, 11, seed=7) / 20, _rand(96, seed=8)
    assert conv_ops.route(x, w, b, 4, 2, 1, precision="tf32") == "im2col"
    y = conv_ops.convolve(x, w, b, 4, 2, precision="tf32")
    ref_t = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(), 4, 2)
    assert y.dtype == torch.float32 and _rel(y, ref_t) <= 1e-5


def test_public_conv2d_and_compiled_op():
    """argus.ops.conv2d (eager) and the torch.library op under torch.compile give the route's
    result on the stem."""
    import argus.ops as ops

    x = _rand(4, 3, 224, 224, seed=5).bfloat16().to(memory_format=torch.channels_last)
    w = (_rand(64, 3, 7, 7, seed=6) / 12).bfloat16()
    eager = ops.conv2d(x, w, None, 2, 3)
    compiled = torch.compile(lambda x, w: ops.conv2d(x, w, None, 2, 3))(x, w)
    assert torch.equal(eager, compiled)
