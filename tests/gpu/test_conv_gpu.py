"""GPU tier: argus.ops.conv2d / conv1d / conv3d / conv_transpose2d against a float64 F.conv*
reference on fresh random data — padding, stride, dilation, groups, bias, both epilogues
(narrow layers take bw < 64 with the TMA-store epilogue), NCHW and channels-last input,
bf16 / fp16 / fp32 (bf16 split), fused bias + activation — the torch.library op under
torch.compile, and the clear errors."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _rel(out, ref):
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _rand(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


# (N, C, H, W, K, R, S, stride, padding, dilation, groups)
CASES = [
    (2, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1),       # ResNet c2 3x3 (bw 64, direct)
    (4, 128, 28, 28, 128, 3, 3, 2, 1, 1, 1),     # strided, Q = 14 (bw 16, TMA store)
    (2, 256, 14, 14, 256, 1, 1, 1, 0, 1, 1),     # 1x1
    (2, 3, 224, 224, 64, 7, 7, 2, 3, 1, 1),      # stem: C = 3 zero-padded to 8, W odd stride
    (1, 64, 33, 47, 96, 5, 3, (2, 1), (2, 1), (1, 2), 1),
    (2, 64, 20, 20, 64, 3, 3, 1, 1, 1, 4),       # grouped
    (1, 32, 9, 130, 40, 3, 3, 1, 1, 2, 2),       # Q > 64: several column tiles; Kg = 20
    # c4- and c5-shaped stride-1 3x3 layers at odd batch (test_halo_schedule runs them too)
    (3, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1),
    (3, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv2d_bf16(case, channels_last):
    import torch.nn.functional as F

    from argus.ops import conv2d

    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    x = _rand(N, C, H, W, seed=1)
    w = _rand(K, C // groups, R, S, seed=2) / (C // groups * R * S) ** 0.5
    b = _rand(K, seed=3)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    y = conv2d(x, w, b, stride, padding, dilation, groups)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation, groups)
    assert y.shape == ref.shape and y.dtype == x.dtype
    assert _rel(y, ref) < 1e-2


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.float32, 1e-4)])
def test_conv2d_dtypes(dtype, tol):
    import torch.nn.functional as F

    from argus.ops import conv2d

    x = _rand(2, 48, 17, 19, dtype=dtype, seed=4)
    w = _rand(80, 48, 3, 3, dtype=dtype, seed=5) / 20
    y = conv2d(x, w, None, 1, 1)
    assert y.dtype == dtype
    assert _rel(y, F.conv2d(x.double(), w.double(), None, 1, 1)) < tol


def test_conv1d():
    import torch.nn.functional as F

    from argus.ops import conv1d

    x = _rand(4, 32, 301, seed=6)
    w = _rand(64, 32, 5, seed=7) / 12
    y = conv1d(x, w, None, 2, 3, 2)
    assert _rel(y, F.conv1d(x.double(), w.double(), None, 2, 3, 2)) < 1e-2


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation,groups", [
    ((2, 16, 5, 12, 12), (1, 3, 3), 1, (0, 1, 1), 1, 1),
    ((2, 32, 9, 20, 18), (3, 3, 3), 1, 1, 1, 1),
    ((1, 64, 8, 17, 16), (3, 5, 3), (2, 1, 2), (1, 2, 1), (1, 1, 2), 2),
])
def test_conv3d(shape, kernel, stride, padding, dilation, groups):
    import torch.nn.functional as F

    from argus.ops import conv3d

    x = _rand(*shape, seed=8)
    w = _rand(48, shape[1] // groups, *kernel, seed=9) / 20
    b = _rand(48, seed=10)
    y = conv3d(x, w, b, stride, padding, dilation, groups)
    ref = F.conv3d(x.double(), w.double(), b.double(), stride, padding, dilation, groups)
    assert y.shape == ref.shape and _rel(y, ref) < 1e-2


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups",
                         [(1, 1, 0, 1, 1), (1, 0, 0, 2, 2), (2, 1, 1, 1, 1), ((2, 3), 1, 0, 2, 2)])
def test_conv_transpose2d(stride, padding, output_padding, dilation, groups):
    import torch.nn.functional as F

    from argus.ops import conv_transpose2d

    x = _rand(2, 64, 30, 31, seed=12)
    w = _rand(64, 96 // groups, 3, 3, seed=13) / 24
    b = _rand(96, seed=14)
    y = conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), stride, padding,
                             output_padding, groups, dilation)
    assert y.shape == ref.shape and _rel(y, ref) < 1e-2


@pytest.mark.parametrize("activation", ["relu", "gelu_tanh"])
def test_fused_bias_activation(activation):
    import torch.nn.functional as F

    from argus.ops import conv2d

    x = _rand(2, 64, 28, 28, seed=15).to(memory_format=torch.channels_last)
    w = _rand(128, 64, 3, 3, seed=16) / 24
    b = _rand(128, seed=17)
    ref = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    ref = torch.relu(ref) if activation == "relu" else F.gelu(ref, approximate="tanh")
    y = conv2d(x, w, b, 1, 1, activation=activation)
    assert _rel(y, ref) < 1e-2


def test_conv_transpose3d_and_1d():
    import torch.nn.functional as F

    from argus.ops import conv_transpose1d, conv_transpose3d

    x = _rand(2, 32, 6, 10, 9, seed=18)
    w = _rand(32, 16, 3, 3, 3, seed=19) / 16
    for stride, padding, output_padding in ((1, 1, 0), (2, 1, 1), ((2, 1, 2), (0, 1, 1), 0)):
        y = conv_transpose3d(x, w, None, stride, padding, output_padding)
        ref = F.conv_transpose3d(x.double(), w.double(), None, stride, padding, output_padding)
        assert y.shape == ref.shape and _rel(y, ref) < 1e-2
    x1 = _rand(4, 64, 100, seed=20)
    w1 = _rand(64, 32, 5, seed=21) / 16
    y1 = conv_transpose1d(x1, w1, None, 3, 2, 1, 1, 2)
    ref1 = F.conv_transpose1d(x1.double(), w1.double(), None, 3, 2, 1, 1, 2)
    assert y1.shape == ref1.shape and _rel(y1, ref1) < 1e-2


@pytest.mark.parametrize("dims,stride,K,dtype,channels_last,bias", [
    (2, 2, 96, torch.bfloat16, False, True), (2, 2, 40, torch.bfloat16, True, True),
    (2, (2, 3), 64, torch.float32, False, True), (3, (2, 1, 2), 32, torch.bfloat16, False, True),
    (1, 4, 48, torch.bfloat16, False, True),
    # channels-last x: ONE launch, the 1x1 GEMM's epilogue writes the channels-last output
    # depth-to-space (convolve(shuffle=)); a 3-d depth stride keeps the interleave
    (2, 2, 64, torch.bfloat16, True, False), (2, (3, 2), 24, torch.float16, True, True),
    (2, 2, 40, torch.float32, True, True), (3, (1, 2, 2), 32, torch.bfloat16, True, True),
    (3, 2, 16, torch.bfloat16, True, False), (1, 4, 48, torch.bfloat16, True, True)])
def test_conv_transpose_kernel_is_stride(dims, stride, K, dtype, channels_last, bias,
                                         monkeypatch):
    """kernel == stride, no padding (UNet's 2x2 / 2 up-convolution) against float64: an NCHW x
    as the one 1x1 convolution with prod(stride) * K channels (`_patches`) and the interleave
    of its channel slices (channels-last slices from the 16-bit routes, NCHW ones from the
    fp32 split); a channels-last x as ONE 1x1 implicit GEMM writing the output depth-to-space
    (no interleave; 3-d with a depth stride: the interleave into a channels-last output). The
    result's memory format is cuDNN's (torch's on the same x)."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_op
    from argus.ops import conv_transpose1d, conv_transpose2d, conv_transpose3d

    st = (stride,) * dims if isinstance(stride, int) else stride
    x = _rand(2, 64, *((6, 10, 9)[:dims] if dims == 3 else (30, 31)[:dims]), dtype=dtype,
              seed=30)
    if channels_last:
        x = x.permute(0, 2, 1).contiguous().permute(0, 2, 1) if dims == 1 else \
            x.contiguous(memory_format=torch.channels_last if dims == 2 else
                         torch.channels_last_3d)
    w = _rand(64, K, *st, dtype=dtype, seed=31) / 8
    b = _rand(K, dtype=dtype, seed=32) if bias else None
    ours = {1: conv_transpose1d, 2: conv_transpose2d, 3: conv_transpose3d}[dims]
    theirs = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    interleaves = []
    interleave = conv_op._interleave
    monkeypatch.setattr(conv_op, "_interleave",
                        lambda *a: (interleaves.append(1), interleave(*a))[1])
    for _ in range(2):                     # the second call: the derived weight and bias kept
        y = ours(x, w, b, stride)
        ref = theirs(x.double(), w.double(), None if b is None else b.double(), stride)
        assert y.shape == ref.shape and _rel(y, ref) < 1e-2
    if dims == 1:
        assert y.is_contiguous()           # torch's 1-d result, whatever x's strides
    else:
        cudnn = theirs(x, w, b, stride)
        fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
        assert y.is_contiguous() == cudnn.is_contiguous()
        assert y.is_contiguous(memory_format=fmt) == cudnn.is_contiguous(memory_format=fmt)
    shuffled = channels_last and (dims < 3 or st[0] == 1)
    assert bool(interleaves) == (not shuffled), interleaves


def test_custom_op_under_torch_compile():
    import torch.nn.functional as F

    from argus.ops import conv2d

    x = _rand(2, 64, 14, 14, seed=10)
    w = _rand(64, 64, 3, 3, seed=11) / 24

    @torch.compile(fullgraph=True)
    def f(x, w):
        return torch.relu(conv2d(x, w, None, 1, 1))

    y = f(x, w)
    assert _rel(y, torch.relu(F.conv2d(x.double(), w.double(), None, 1, 1))) < 1e-2


def test_errors():
    from argus.errors import LaunchError
    from argus.ops import conv2d, conv3d

    x = _rand(1, 8, 6, 6)
    with pytest.raises(LaunchError, match="groups=3"):
        conv2d(x, _rand(8, 8, 3, 3), groups=3)
    with pytest.raises(LaunchError, match="bfloat16, float16 or"):
        conv2d(x.double(), _rand(8, 8, 3, 3).double())
    with pytest.raises(LaunchError, match="CUDA device"):
        conv2d(x.cpu(), _rand(8, 8, 3, 3).cpu())
    with pytest.raises(LaunchError, match="does not fit"):
        conv3d(_rand(1, 8, 2, 6, 6), _rand(8, 8, 3, 3, 3))


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[2]],
                         ids=lambda c: "x".join(map(str, c)))
def test_channels_last_weight_read_in_place_and_replayed(case):
    """A channels-last bf16 weight (whole 64-channel taps) is the kernel's operand itself: a
    write through weight.data (no version bump) is seen by the next call, which replays the
    prepared launch; twelve results kept alive (twelve result addresses, more than an entry
    keeps plans for) are each right."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    x = _rand(N, C, H, W, seed=30).to(memory_format=torch.channels_last)
    w = (_rand(K, C, R, S, seed=31) / (C * R * S) ** 0.5).to(memory_format=torch.channels_last)
    b = _rand(K, seed=32)
    args = (stride, padding, dilation, groups)
    ys = [conv_ops.conv2d(x, w, b, *args) for _ in range(12)]
    ref = F.conv2d(x.double(), w.double(), b.double(), *args)
    assert all(_rel(y, ref) < 1e-2 for y in ys)
    assert len(conv_ops._REPEATS) >= 1
    w.data.mul_(-2)                                     # no version bump
    y = conv_ops.conv2d(x, w, b, *args)
    ref2 = F.conv2d(x.double(), w.double(), b.double(), *args)
    assert _rel(y, ref2) < 1e-2


@pytest.mark.parametrize("case", [CASES[0], CASES[5], CASES[6], CASES[7], CASES[8]],
                         ids=lambda c: "x".join(map(str, c)))
def test_halo_schedule(case, monkeypatch):
    """The halo row reuse (schedule_for(..., halo=True); opt-in until measured): tiles partly
    past an image's P rows (c4: bw 16, 8 rows per tile for P = 14; c5: bw 8, 16 rows for
    P = 7), groups, dilation 2, Q > 64, against float64. Compiled without the verifier (it
    takes minutes on this kernel; tests/interp/test_conv_interp.py runs it)."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    monkeypatch.setenv("ARGUS_VERIFY", "0")
    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    x = _rand(N, C, H, W, seed=40).to(memory_format=torch.channels_last)
    w = _rand(K, C // groups, R, S, seed=41) / (C // groups * R * S) ** 0.5
    b = _rand(K, seed=42)
    s = conv_ops.schedule_for(x, w, stride, padding, dilation, groups, halo=True)
    assert s.halo
    y = conv_ops.convolve(x, w, b, stride, padding, dilation, groups, schedule=s)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation, groups)
    assert y.shape == ref.shape and _rel(y, ref) < 1e-2


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[7], CASES[8],
                                  (1, 32, 9, 130, 40, 3, 3, 1, 1, 2, 1)],
                         ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("rowbox", [None, False], ids=["default", "opt_out"])
def test_rowbox_schedule(case, rowbox):
    """One (1, rows, bw, 64) TMA box per K step for the A tile: schedule_for's default where it
    applies (2-d, stride 1, one group), and rowbox=False (one box per output row) as the
    opt-out: c2 (bw 64, direct store), 1x1, c4 and c5 at odd batch (tiles partly past an
    image's P rows), dilation 2 with Q > 64 (several column tiles), against float64.
    Compiled with the verifier as configured (ARGUS_VERIFY; on by default): store.once on
    per-image tiles is proven in seconds (argus/verify/once_split.py)."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    x = _rand(N, C, H, W, seed=50).to(memory_format=torch.channels_last)
    w = _rand(K, C // groups, R, S, seed=51) / (C // groups * R * S) ** 0.5
    b = _rand(K, seed=52)
    s = conv_ops.schedule_for(x, w, stride, padding, dilation, groups, rowbox=rowbox)
    assert s.rowbox == (rowbox is None)
    y = conv_ops.convolve(x, w, b, stride, padding, dilation, groups, schedule=s)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation, groups)
    assert y.shape == ref.shape and _rel(y, ref) < 1e-2
