"""GPU tier: the tf32 pointwise convolution of an NCHW input read in place (argus/kernels/
conv_pointwise_nchw.py: TMA boxes of x as the register-A tf32 wgmma, one launch for all
images), directly and through argus.ops.conv's pointwise route, against the float64 conv of
the tf32-rounded operands (the register A fragment's k order, the weight's permutation and the
swizzled transposed reads are only proven right by the hardware: a wrong order would still be
a plausible-looking sum, so the bound is the tf32 model's fp32-accumulation error, ~1e-7) and
against eager's TF32 conv (the same arithmetic: within 4x of the tf32 model's own error)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rel as _rel, tf32 as _tf32  # noqa: E402

pytestmark = hopper_only()


# (N, C, H, W, K): KernelBench L1/87's channels on smaller images, pixel counts not a multiple
# of the 128-pixel tile, C = 3 (zero-filled channels), C = 100 (two ring stages), K = 96, bias
CASES = [(4, 64, 256, 256, 128, False), (3, 64, 129, 132, 96, False),
         (2, 3, 64, 68, 128, False), (2, 100, 33, 36, 64, False), (2, 32, 50, 40, 64, True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_pointwise_nchw_kernel(case):
    import torch.nn.functional as F

    from argus.kernels.conv_pointwise_nchw import KV, pointwise_nchw_kernel, stages_for
    from argus.ops import conv as conv_ops

    N, C, H, W, K, bias = case
    g = torch.Generator(device="cuda").manual_seed(sum(case))
    x = torch.randn(N, C, H, W, generator=g, device="cuda")
    w = torch.randn(K, C, 1, 1, generator=g, device="cuda") / C ** 0.5
    b = torch.randn(K, generator=g, device="cuda") if bias else None
    kp = -(-C // KV) * KV
    Wp = conv_ops._pointwise_nchw_weight(w, kp)
    out = torch.full((N, K, H, W), float("nan"), device="cuda")   # every element written
    kernel = pointwise_nchw_kernel(kp, K, stages=stages_for(kp, K), bias=bias,
                                   activation="relu" if bias else None).compile()
    args = (x.view(N, C, H * W), Wp, out.view(N, K, H * W))
    kernel(*args, b.view(1, K)) if bias else kernel(*args)
    ref = F.conv2d(_tf32(x).double(), _tf32(w).double(), None if b is None else b.double())
    if bias:
        ref = ref.clamp_min(0)
    assert _rel(out, ref) <= 1e-6
    exact = F.conv2d(x.double(), w.double(), None if b is None else b.double())
    if bias:
        exact = exact.clamp_min(0)
    assert _rel(out, exact) > 2e-5          # tf32, not a silent fp32 path


def test_route_on_an_l1_87_like_problem(monkeypatch):
    """convolve(precision="tf32") of an NCHW x of 2^16 pixels per image takes the one kernel:
    NCHW-contiguous result, the tf32 model's accuracy, eager TF32's arithmetic, and the
    replayed call equal to the first."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, K = 4, 64, 256, 256, 128
    g = torch.Generator(device="cuda").manual_seed(87)
    x = torch.randn(N, C, H, W, generator=g, device="cuda")
    w = torch.randn(K, C, 1, 1, generator=g, device="cuda") / C ** 0.5
    monkeypatch.setattr(conv_ops, "NCHW_POINTWISE_IN_PLACE", True)   # the default (on since 12-04)
    assert H * W >= conv_ops.NCHW_POINTWISE_PIXELS and conv_ops._pointwise_nchw_applies(x, w)
    y = conv_ops.convolve(x, w, precision="tf32")
    assert y.is_contiguous() and y.shape == (N, K, H, W)
    ref = F.conv2d(x.double(), w.double())
    model = _rel(F.conv2d(_tf32(x).double(), _tf32(w).double()), ref)
    assert _rel(y, F.conv2d(_tf32(x).double(), _tf32(w).double())) <= 1e-6
    assert _rel(y, ref) <= 1.25 * model + 1e-6
    assert torch.equal(conv_ops.convolve(x, w, precision="tf32"), y)
