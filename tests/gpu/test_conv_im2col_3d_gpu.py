"""GPU tier: argus.ops.conv's im2col route in 3-d (the voxel gather
argus/kernels/conv_im2col.py `im2col_voxels_staged_kernel`, then argus.ops.matmul's GEMM) on the
H200 at KernelBench's shapes with 3 input channels (L1/60 and L1/66's Conv3d, L2/6's batch of
128 small volumes in chunks, L2/50's strided ConvTranspose3d phases), fp32 under tf32 and bf16:
the tf32 model's result (operands rounded to tf32, fp32 accumulation) within 1e-5, the bf16
result within one rounding of float64; the layout (NCDHW for L1's large NCDHW images, one GEMM
an image; channels-last for L2's small ones); replays equal. Speed: compose the tasks and run
scripts/gpu_kb_kernel_profile.py (per-kernel times, ours vs eager)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rand as _rand, rel as _rel  # noqa: E402

pytestmark = hopper_only()


# (what, N, C, D, H, W, K, kernel, stride, padding, bias, nchw result)
CASES = [
    ("L1/60", 16, 3, 64, 64, 64, 64, (3, 5, 7), 1, 0, False, True),
    ("L1/66", 8, 3, 16, 128, 128, 64, (3, 5, 7), 1, 0, False, True),
    ("L2/6", 128, 3, 16, 32, 32, 16, (3, 3, 3), 1, 0, True, False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_tf32_route_matches_the_tf32_model(case):
    import torch.nn.functional as F

    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.ops import conv as conv_ops

    _, N, C, D, H, W, K, k, stride, padding, bias, nchw = case
    x = torch.rand(N, C, D, H, W, device="cuda")
    w = _rand(K, C, *k, seed=1) / 8
    b = _rand(K, seed=2) if bias else None
    assert conv_ops.route(x, w, b, stride, padding, 1, precision="tf32") == "im2col"
    y = conv_ops.convolve(x, w, b, stride, padding, precision="tf32")
    ref = F.conv3d(round_to_tf32(x).double(), round_to_tf32(w).double(),
                   None if b is None else b.double(), stride, padding)
    assert y.shape == ref.shape and y.dtype == torch.float32
    assert _rel(y, ref) <= 1e-5
    assert y.is_contiguous() == nchw and (nchw or y.permute(0, 2, 3, 4, 1).is_contiguous())
    again = conv_ops.convolve(x, w, b, stride, padding, precision="tf32")
    assert torch.equal(again, y)


@pytest.mark.parametrize("cl", [False, True], ids=["ncdhw", "channels_last"])
def test_bf16_route_matches_float64(cl):
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    x = _rand(4, 3, 16, 48, 40, seed=3).bfloat16()
    if cl:
        x = x.to(memory_format=torch.channels_last_3d)
    w = (_rand(32, 3, 3, 5, 7, seed=4) / 18).bfloat16()
    b = _rand(32, seed=5).bfloat16()
    args = ((1, 2, 1), (1, 2, 3), (2, 1, 1))
    assert conv_ops.route(x, w, b, args[0], args[1], 1, dilation=args[2]) == "im2col"
    y = conv_ops.convolve(x, w, b, *args)
    ref = F.conv3d(x.double(), w.double(), b.double(), *args)
    assert y.dtype == torch.bfloat16 and _rel(y, ref) <= 2.0 ** -8


def test_strided_transposed_conv3d_on_l2_50():
    """L2/50's ConvTranspose3d (3 -> 16 channels, kernel 3, stride 2, padding 1): its 8 phase
    convolutions take the route; the result as the tf32 model's."""
    import functools

    import torch.nn.functional as F

    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.ops import conv as conv_ops

    x = torch.rand(128, 3, 16, 32, 32, device="cuda")
    w, b = _rand(3, 16, 3, 3, 3, seed=6) / 6, _rand(16, seed=7)
    run = functools.partial(conv_ops.convolve, precision="tf32", nchw=True)
    y = conv_ops.conv_transpose3d(x, w, b, 2, 1, run=run)
    ref = F.conv_transpose3d(round_to_tf32(x).double(), round_to_tf32(w).double(),
                             b.double(), 2, 1)
    assert y.shape == ref.shape and _rel(y, ref) <= 1e-5
