"""GPU tier: argus.ops.conv's depthwise and pointwise routes (`route`) on the H200 against float64
F.conv2d: the depthwise kernel (exact fp32 on the CUDA cores, under tf32 and the split, the
public conv2d / conv1d and the torch.library op under torch.compile) and the tf32 1x1 GEMM
(argus.ops.matmul's kernel on the conv's rounded operands, flat or one GEMM per image; within
1.25x of the tf32 model's error, not fp32-accurate, repeated calls equal), and the bf16 / fp16
1x1 GEMM (matmul's 16-bit kernel on x's [N*H*W, C] view: within one rounding of float64).
Speed: scripts/gpu_conv_bench.py --cases depthwise,pointwise and --pointwise16."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rand as _rand, rel as _rel, tf32 as _tf32  # noqa: E402

pytestmark = hopper_only()


# (N, C, H, W, multiplier, R, S, stride, padding, dilation, bias)
DEPTHWISE = [
    (2, 64, 130, 150, 1, 3, 3, 1, 0, 1, False),     # L1/82's form, several column tiles
    (4, 8, 64, 64, 1, 3, 1, 1, 0, 1, True),         # L1/83's 3x1
    (2, 32, 40, 70, 1, 3, 7, 1, (1, 3), 1, False),  # L1/85's 3x7, padded
    (8, 96, 56, 56, 1, 3, 3, 2, 1, 1, True),        # MobileNet stride 2
    (2, 16, 33, 31, 2, 5, 5, (2, 3), 2, (1, 2), True),  # multiplier 2, H and W padded copies
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "x".join(map(str, c[:10])))
@pytest.mark.parametrize("precision", [None, "tf32"])
def test_depthwise_route_is_exact_fp32(case, precision):
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, mult, R, S, stride, padding, dilation, bias = case
    x, w = _rand(N, C, H, W, seed=1), _rand(C * mult, 1, R, S, seed=2) / (R * S) ** 0.5
    b = _rand(C * mult, seed=3) if bias else None
    args = (stride, padding, dilation, C)
    assert conv_ops.route(x, w, b, stride, padding, C, precision=precision) == "depthwise"
    y = conv_ops.convolve(x, w, b, *args, precision=precision)
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), *args)
    assert y.is_contiguous() and _rel(y, ref) < 1e-6
    assert torch.equal(conv_ops.convolve(x, w, b, *args, precision=precision), y)


def test_depthwise_public_ops_and_compile():
    """conv2d (channels-last input), conv1d and the torch.library op under torch.compile (its
    fake says NCHW-contiguous, as the kernel writes) on the depthwise route."""
    import torch.nn.functional as F

    import argus.ops as ops

    x, w = _rand(2, 32, 20, 24, seed=4), _rand(32, 1, 3, 3, seed=5) / 3
    ref = F.conv2d(x.double(), w.double(), None, 1, 1, 1, 32)
    y = ops.conv2d(x.to(memory_format=torch.channels_last), w, None, 1, 1, 1, 32)
    assert _rel(y, ref) < 1e-6
    x1, w1 = _rand(2, 16, 100, seed=6), _rand(16, 1, 5, seed=7) / 2
    assert _rel(ops.conv1d(x1, w1, None, 1, 2, 1, 16),
                F.conv1d(x1.double(), w1.double(), None, 1, 2, 1, 16)) < 1e-6
    compiled = torch.compile(lambda a, b: ops.conv2d(a, b, None, 1, 1, 1, 32).relu())
    assert _rel(compiled(x, w), ref.relu()) < 1e-6


# (N, C, H, W, K, channels_last)
POINTWISE = [(1, 64, 128, 128, 128, False), (2, 64, 128, 130, 96, False),
             (8, 1024, 14, 14, 256, False),
             (8, 512, 7, 7, 2048, True), (4, 70, 9, 11, 36, False)]


@pytest.mark.parametrize("case", POINTWISE, ids=lambda c: "x".join(map(str, c)))
def test_pointwise_route_is_tf32_accurate(case):
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, K, cl = case
    x, w = _rand(N, C, H, W, seed=8), _rand(K, C, 1, 1, seed=9) / C ** 0.5
    if cl:
        x = x.to(memory_format=torch.channels_last)
    assert conv_ops.route(x, w, None, 1, 0, 1, precision="tf32") == "pointwise"
    y = conv_ops.convolve(x, w, precision="tf32")
    ref = F.conv2d(x.double(), w.double())
    model = _rel(F.conv2d(_tf32(x).double(), _tf32(w).double()), ref)
    err = _rel(y, ref)
    if cl or H * W < conv_ops.NCHW_POINTWISE_PIXELS:
        assert y.permute(0, 2, 3, 1).is_contiguous()      # the flat GEMM
    else:
        assert y.is_contiguous()                           # one GEMM per image
    assert err <= 1.25 * model + 1e-6 and err > 2e-5, (err, model)
    assert torch.equal(conv_ops.convolve(x, w, precision="tf32"), y)


# bf16 / fp16 1x1 convolutions (N, C, H, W, K, channels_last, dtype): ResNet-50's shapes at a
# smaller batch, a ragged K (direct epilogue), an NCHW x (one channels-last copy), one image
_POINTWISE_16 = [(4, 64, 56, 56, 256, True, "bf16"), (4, 1024, 14, 14, 256, True, "bf16"),
                 (4, 512, 7, 7, 2048, True, "f16"), (2, 256, 28, 28, 64, False, "bf16"),
                 (3, 72, 9, 11, 36, True, "bf16"), (1, 128, 17, 13, 96, False, "f16")]
_ONE_ROUNDING = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}


@pytest.mark.parametrize("case", _POINTWISE_16, ids=lambda c: "x".join(map(str, c)))
def test_pointwise_16bit_route(case):
    """The bf16 / fp16 1x1 route (matmul's 16-bit GEMM on x's [N*H*W, C] view): within one
    rounding of the dtype of float64 (normwise), the implicit GEMM's layout (NCHW shape,
    channels-last memory) and values (within one rounding; a ConvSchedule passed keeps that
    route), a repeated call (the replay) equal to the first, x changed in place seen."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, K, cl, dt = case
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
    x = _rand(N, C, H, W, seed=10).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = (_rand(K, C, 1, 1, seed=11) / C ** 0.5).to(dtype)
    assert conv_ops.route(x, w, None, 1, 0, 1) == "pointwise"
    y = conv_ops.convolve(x, w)
    ref = F.conv2d(x.double(), w.double())
    assert y.dtype == dtype and y.shape == ref.shape and y.permute(0, 2, 3, 1).is_contiguous()
    assert _rel(y, ref) <= _ONE_ROUNDING[dt], _rel(y, ref)
    s = conv_ops.schedule_for(x, w, 1, 0, 1, 1)
    implicit = conv_ops.convolve(x, w, schedule=s)
    assert implicit.stride() == y.stride() and _rel(y, implicit.double()) <= _ONE_ROUNDING[dt]
    assert torch.equal(conv_ops.convolve(x, w), y)                   # replayed
    x.copy_(_rand(N, C, H, W, seed=12).to(dtype))
    assert _rel(conv_ops.convolve(x, w), F.conv2d(x.double(), w.double())) <= \
        _ONE_ROUNDING[dt]


def test_pointwise_16bit_public_ops_compile_and_graph():
    """ops.conv2d / conv1d (eager), the torch.library op under torch.compile (its fake's
    layout is the route's) and a CUDA graph capture of a prepared call, on the 1x1 route."""
    import torch.nn.functional as F

    import argus.ops as ops
    from argus.ops import conv as conv_ops

    x = _rand(8, 256, 14, 14, seed=13).bfloat16().to(memory_format=torch.channels_last)
    w = (_rand(512, 256, 1, 1, seed=14) / 16).bfloat16()
    ref = F.conv2d(x.double(), w.double())
    y = ops.conv2d(x, w)
    assert _rel(y, ref) <= 2.0 ** -8 and y.permute(0, 2, 3, 1).is_contiguous()
    x1, w1 = _rand(4, 64, 300, seed=15).bfloat16(), (_rand(128, 64, 1, seed=16) / 8).bfloat16()
    assert _rel(ops.conv1d(x1, w1), F.conv1d(x1.double(), w1.double())) <= 2.0 ** -8
    compiled = torch.compile(lambda a, b: ops.conv2d(a, b).relu())
    z = compiled(x, w)
    assert _rel(z, ref.relu()) <= 2.0 ** -8
    conv_ops.convolve(x, w)                 # prepared (and remembered) before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = conv_ops.convolve(x, w)
    x.copy_(_rand(8, 256, 14, 14, seed=17).bfloat16())
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(captured, F.conv2d(x.double(), w.double())) <= 2.0 ** -8
