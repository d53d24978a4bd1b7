"""GPU tier: the pixel gathers compiled for the H200, plain (argus/kernels/conv_im2col.py
`im2col_pixels_kernel`, `im2col_pixel_planes_kernel`: one output pixel a thread, ag.gather and
16-byte global stores) and staged (`im2col_pixels_staged_kernel`,
`im2col_pixel_planes_staged_kernel`: ag.gather into "rows" tiles, ag.store_shared and TMA
stores of each CTA's rows of A; the default since 2026-12-04) and span
(`im2col_pixels_span_kernel`, `im2col_pixel_planes_span_kernel`: the staged kernels with each
filter row's input span loaded once a CTA into shared memory and gathered from there, A viewed
[N * P, Q, pitch]): A bit for bit the warp kernels'
A (the interpreter checks the same on the CPU; this checks the generated CUDA: the gather's
guards and offsets, the vector or shared stores, the proxy fence and barrier before the copies,
a partial last CTA's rows dropped), on the stems and odd shapes, and the route through each
(IM2COL_GATHER) against float64. Speed: scripts/gpu_conv_bench.py --stem --gather
warp,pixels,staged,span."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rand as _rand  # noqa: E402

pytestmark = hopper_only()


# (N, C, H, W, K, R, S, stride, padding, dilation, channels_last, dtype)
CASES = [
    (32, 3, 224, 224, 64, 7, 7, 2, 3, 1, True, torch.bfloat16),      # ResNet-50's stem
    (8, 3, 224, 224, 64, 7, 7, 2, 3, 1, False, torch.bfloat16),      # NCHW x
    (16, 3, 224, 224, 96, 11, 11, 4, 2, 1, True, torch.bfloat16),    # L1/50's layer
    (3, 5, 61, 63, 40, 3, 5, (1, 3), (2, 1), (2, 1), True, torch.float16),
    (2, 3, 40, 37, 16, 7, 7, 2, 3, 1, True, torch.float32),          # tf32: rounded in A
    (2, 3, 29, 31, 8, 3, 7, (2, 1), (4, 3), 1, False, torch.bfloat16),  # NCHW, pad > R
]


# IM2COL_GATHER -> the _Gather kinds it takes (row runs, plane runs)
GATHERS = {"pixels": ("pixels", "pixel_planes"), "staged": ("staged", "staged_planes"),
           "span": ("span", "span_planes")}


@pytest.mark.parametrize("gather", GATHERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:11])))
def test_pixel_gather_equals_the_warp_gather(case, gather, monkeypatch):
    from argus import dtypes
    from argus.ops import conv as conv_ops

    N, C, H, W, K, R, S, stride, padding, dilation, cl, dtype = case
    x = _rand(N, C, H, W, seed=1).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = _rand(K, C, R, S, seed=2).to(dtype)
    dt = {torch.bfloat16: dtypes.bf16, torch.float16: dtypes.f16,
          torch.float32: dtypes.f32}[dtype]
    out = {}
    for choice in ("warp", gather):
        monkeypatch.setattr(conv_ops, "IM2COL_GATHER", choice)
        g = conv_ops._Gather.of(x, w, stride, padding, dilation)
        assert (g.kind in GATHERS[gather]) == (choice == gather)
        A = torch.full((g.m, g.pitch), 7.0, dtype=dtype, device="cuda")
        g.kernel(dt).compile(**g.constexprs())(g.x_view(x), g.a_view(A))
        torch.cuda.synchronize()
        out[choice] = A
    assert torch.equal(out["warp"], out[gather])
    assert not bool((out[gather] == 7).any())            # every element written


@pytest.mark.parametrize("gather", GATHERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:11])))
def test_route_through_the_pixel_gather_matches_float64(case, gather, monkeypatch):
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    monkeypatch.setattr(conv_ops, "IM2COL_GATHER", gather)
    N, C, H, W, K, R, S, stride, padding, dilation, cl, dtype = case
    x = _rand(N, C, H, W, seed=3).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = (_rand(K, C, R, S, seed=4) / (C * R * S) ** 0.5).to(dtype)
    b = _rand(K, seed=5).to(dtype)
    prec = "tf32" if dtype == torch.float32 else None
    assert conv_ops.route(x, w, b, stride, padding, 1, precision=prec,
                          dilation=dilation) == "im2col"
    y = conv_ops.convolve(x, w, b, stride, padding, dilation=dilation, precision=prec)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation)
    bound = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -10, torch.float32: 1e-3}[dtype]
    assert ((y.double() - ref).norm() / ref.norm()).item() <= bound
    again = conv_ops.convolve(x, w, b, stride, padding, dilation=dilation, precision=prec)
    assert torch.equal(y, again)                       # the replayed call
