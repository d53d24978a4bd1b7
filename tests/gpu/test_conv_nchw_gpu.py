"""GPU tier: the implicit-GEMM convolution's NCHW epilogue (conv_kernel(nchw=True): the
accumulator stored transposed into an NCHW-contiguous result, no transpose pass) on the H200.
The NCHW result must be bit for bit the channels-last kernel's (the same products and
accumulation order, only the store differs: any coverage hole or misplaced element shows),
contiguous, and within the tf32 / split bound of float64 F.conv1d / conv2d / conv3d; partial
tiles (K not a multiple of bn, Q not a multiple of 64, P past the last row block) included."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rand as _rand, rel as _rel, tf32 as _tf32  # noqa: E402

pytestmark = hopper_only()


# (x shape, weight shape, stride, padding, dilation, groups, activation)
CASES = [
    ((4, 64, 1, 4099), (128, 64, 1, 3), (1, 1), (0, 1), 1, 1, "none"),   # conv1d, ragged Q
    ((2, 64, 37, 70), (96, 64, 3, 3), 1, 1, 1, 1, "relu"),                # K = 96: partial n tile
    ((2, 32, 29, 67), (64, 32, 3, 5), 2, (1, 2), 1, 1, "none"),           # strided
    ((2, 48, 20, 66), (64, 24, 3, 3), 1, 2, 2, 2, "gelu_tanh"),           # grouped, dilated
    ((2, 16, 6, 10, 70), (32, 16, 3, 3, 3), 1, 1, 1, 1, "none"),          # conv3d
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0] + c[1][:1])))
@pytest.mark.parametrize("precision", ["tf32", None], ids=["tf32", "split3"])
def test_nchw_epilogue_equals_channels_last_and_float64(case, precision):
    import torch.nn.functional as F

    from argus.ops.conv import convolve

    xs, ws, stride, padding, dilation, groups, act = case
    x = _rand(*xs, seed=1)
    w = _rand(*ws, seed=2) / (ws[1] * ws[2] * ws[3]) ** 0.5
    b = _rand(ws[0], seed=3)
    args = (stride, padding, dilation, groups)
    y = convolve(x, w, b, *args, activation=act, precision=precision)
    assert y.is_contiguous(), y.stride()
    y_cl = convolve(x, w, b, *args, activation=act, precision=precision, nchw=False)
    assert not y_cl.is_contiguous()
    assert torch.equal(y, y_cl.contiguous())
    conv = F.conv3d if x.dim() == 5 else F.conv2d
    prep = _tf32 if precision == "tf32" else (lambda t: t)
    ref = conv(prep(x).double(), prep(w).double(), b.double(), *args)
    ref = {"none": ref, "relu": F.relu(ref), "gelu_tanh": F.gelu(ref, approximate="tanh")}[act]
    # tf32: the products of tf32-rounded operands are exact in fp32, the error is the fp32
    # accumulation's over K = C * taps (576 here: ~sqrt(K) * 2^-24 ~ 1.4e-6 typical; the H200
    # measured 1.04e-6), so a bound of a few 1e-6, not 1e-6
    assert _rel(y, ref) <= (4e-6 if precision == "tf32" else 1e-4)
    again = convolve(x, w, b, *args, activation=act, precision=precision)   # the replay
    assert again.is_contiguous() and torch.equal(again, y)
    cl = convolve(x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else
                                torch.channels_last_3d), w, b, *args, activation=act,
                  precision=precision)
    assert not cl.is_contiguous() and torch.equal(cl, y_cl)


def test_bf16_direct_epilogue_nchw():
    import torch.nn.functional as F

    from argus.ops.conv import convolve

    x = _rand(4, 64, 30, 72, seed=4).bfloat16()
    w = (_rand(128, 64, 3, 3, seed=5) / 24).bfloat16()
    y = convolve(x, w, None, 1, 1, 1, 1)
    assert y.is_contiguous() and y.dtype == torch.bfloat16
    assert torch.equal(y, convolve(x, w, None, 1, 1, 1, 1, nchw=False).contiguous())
    assert _rel(y, F.conv2d(x.double(), w.double(), None, 1, 1)) < 1e-2


def test_composed_conv_runs_no_transpose_after_the_kernel(monkeypatch):
    """compose's conv step under ConvRun(precision="tf32") on the GPU: the result is the
    kernel's NCHW buffer, no Argus transpose launched."""
    from argus.compose import conv as compose_conv
    from argus.compose.launch import transpose
    from argus.compose.runtime import Program

    model = torch.nn.Conv1d(64, 128, 3, padding=1).cuda()
    x = _rand(4, 64, 4096, seed=6)
    launched = []
    real = compose_conv._run
    monkeypatch.setattr(compose_conv, "_run",
                        lambda k, a, **kw: launched.append(k) or real(k, a, **kw))
    prog = Program.build(model, [x], schedules={"conv": compose_conv.ConvRun(precision="tf32")})
    with torch.no_grad():
        y = prog.run(model, [x])
        ref = model.double()(x.double())
    assert y.is_contiguous() and _rel(y, ref) < 2e-3
    assert not any(k is transpose for k in launched)
