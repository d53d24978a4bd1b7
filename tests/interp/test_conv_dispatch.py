"""argus.ops.conv's dispatch (`route`): which kernel family each convolution runs on, and the
two routes besides the implicit GEMM, in the numpy interpreter against torch float64:

- "depthwise" (fp32, one input channel per group, 2-d / 1-d): argus/kernels/conv_depthwise.py,
  exact fp32 on the CUDA cores, under tf32 and the split alike (before: the implicit GEMM, one
  group per 64-wide tile: 0.02-0.07x cuDNN TF32 on the H200 at 2baa4ab);
- "pointwise" (1x1, stride 1, no padding, one group, no bias or activation): argus.ops.matmul's
  GEMM on [N*H*W, C] x [C, K]: fp32 under tf32 on operands rounded once by the conv's own pass
  (before: the implicit GEMM, 0.39x on L1/87), and bf16 / fp16 with C a multiple of 8 on x read
  in place when channels-last (before: the implicit GEMM, 0.37-0.74x cuDNN on ResNet-50's 1x1
  layers at 8c072d7), the result channels-last as the implicit GEMM's.
"""

import pytest
import torch
import torch.nn.functional as F

from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.kernels.conv import ConvSchedule
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available


def _rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# (what, x shape, weight shape, bias, stride, padding, groups, activation, schedule, precision,
# dtype, channels_last) -> route
ROUTES = [
    ("depthwise tf32", (2, 8, 9, 9), (8, 1, 3, 3), False, 1, 1, 8, "none", None, "tf32",
     torch.float32, False, "depthwise"),
    ("depthwise split", (2, 8, 9, 9), (8, 1, 3, 3), True, 1, 1, 8, "relu", None, None,
     torch.float32, False, "depthwise"),
    ("depthwise x2 stride 2", (1, 4, 9, 8), (8, 1, 3, 3), True, 2, 1, 4, "none", None, "tf32",
     torch.float32, True, "depthwise"),
    ("depthwise bf16", (2, 8, 9, 9), (8, 1, 3, 3), False, 1, 1, 8, "none", None, None,
     torch.bfloat16, False, "implicit_gemm"),
    ("depthwise 3-d", (1, 4, 3, 5, 5), (4, 1, 3, 3, 3), False, 1, 1, 4, "none", None, "tf32",
     torch.float32, False, "implicit_gemm"),
    ("depthwise with a schedule", (2, 8, 9, 9), (8, 1, 3, 3), False, 1, 1, 8, "none",
     ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2), "tf32", torch.float32, False,
     "implicit_gemm"),
    ("grouped, 2 channels a group", (2, 8, 9, 9), (8, 2, 3, 3), False, 1, 1, 4, "none", None,
     "tf32", torch.float32, False, "implicit_gemm"),
    ("pointwise tf32 NCHW", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "none", None, "tf32",
     torch.float32, False, "pointwise"),
    ("pointwise tf32 NHWC", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "none", None, "tf32",
     torch.float32, True, "pointwise"),
    ("pointwise split", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "none", None, None,
     torch.float32, False, "implicit_gemm"),
    ("pointwise bf16 NCHW", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "none", None, None,
     torch.bfloat16, False, "pointwise"),
    ("pointwise bf16 NHWC", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "none", None, None,
     torch.bfloat16, True, "pointwise"),
    ("pointwise fp16 NHWC", (2, 64, 5, 7), (20, 64, 1, 1), False, (1, 1), (0, 0), 1, "none",
     None, None, torch.float16, True, "pointwise"),
    ("pointwise bf16 conv1d form", (2, 16, 1, 9), (24, 16, 1, 1), False, 1, 0, 1, "none", None,
     None, torch.bfloat16, False, "pointwise"),
    ("pointwise bf16, C not a multiple of 8", (2, 12, 5, 7), (24, 12, 1, 1), False, 1, 0, 1,
     "none", None, None, torch.bfloat16, True, "implicit_gemm"),
    ("pointwise bf16 with bias", (2, 16, 5, 7), (24, 16, 1, 1), True, 1, 0, 1, "none", None,
     None, torch.bfloat16, True, "implicit_gemm"),
    ("pointwise bf16 relu", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "relu", None, None,
     torch.bfloat16, True, "implicit_gemm"),
    ("pointwise bf16 with a schedule", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "none",
     ConvSchedule(bm=128, bn=64, bk=64, bw=8, stages=4, epilogue="tma"), None, torch.bfloat16,
     True, "implicit_gemm"),
    ("1x1 bf16 stride 2", (2, 16, 6, 8), (24, 16, 1, 1), False, 2, 0, 1, "none", None, None,
     torch.bfloat16, True, "implicit_gemm"),
    ("1x1 bf16 stride (1, 2)", (2, 16, 6, 8), (24, 16, 1, 1), False, (1, 2), 0, 1, "none", None,
     None, torch.bfloat16, True, "implicit_gemm"),
    ("1x1 bf16 padded", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, (0, 1), 1, "none", None, None,
     torch.bfloat16, True, "implicit_gemm"),
    ("1x1 bf16 grouped", (2, 16, 5, 7), (24, 8, 1, 1), False, 1, 0, 2, "none", None, None,
     torch.bfloat16, True, "implicit_gemm"),
    ("1x1x1 bf16 3-d", (2, 16, 3, 5, 7), (24, 16, 1, 1, 1), False, 1, 0, 1, "none", None, None,
     torch.bfloat16, False, "implicit_gemm"),
    ("3x3 bf16", (2, 16, 5, 7), (24, 16, 3, 3), False, 1, 1, 1, "none", None, None,
     torch.bfloat16, True, "implicit_gemm"),
    ("1x3 bf16", (2, 16, 5, 7), (24, 16, 1, 3), False, 1, 0, 1, "none", None, None,
     torch.bfloat16, True, "implicit_gemm"),
    ("pointwise with bias", (2, 16, 5, 7), (24, 16, 1, 1), True, 1, 0, 1, "none", None, "tf32",
     torch.float32, False, "implicit_gemm"),
    ("pointwise relu", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 0, 1, "relu", None, "tf32",
     torch.float32, False, "implicit_gemm"),
    ("1x1 stride 2", (2, 16, 6, 8), (24, 16, 1, 1), False, 2, 0, 1, "none", None, "tf32",
     torch.float32, False, "implicit_gemm"),
    ("1x1 padded", (2, 16, 5, 7), (24, 16, 1, 1), False, 1, 1, 1, "none", None, "tf32",
     torch.float32, False, "implicit_gemm"),
    ("1x1 grouped", (2, 16, 5, 7), (24, 8, 1, 1), False, 1, 0, 2, "none", None, "tf32",
     torch.float32, False, "implicit_gemm"),
    ("3x3 tf32", (2, 16, 5, 7), (24, 16, 3, 3), False, 1, 1, 1, "none", None, "tf32",
     torch.float32, False, "implicit_gemm"),
]


@pytest.mark.parametrize("case", ROUTES, ids=[c[0] for c in ROUTES])
def test_route(case):
    """The dispatch decision per case (a function of shapes, dtypes and arguments)."""
    (_, xs, ws, bias, stride, padding, groups, act, schedule, precision, dtype, cl,
     want) = case
    x = torch.empty(xs, dtype=dtype, device="meta")
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = torch.empty(ws, dtype=dtype, device="meta")
    b = torch.empty(ws[0], dtype=dtype, device="meta") if bias else None
    assert conv_op.route(x, w, b, stride, padding, groups, act, schedule, precision) == want


def _spy(monkeypatch):
    """Record which family `convolve` ran: the depthwise and pointwise entries, and the
    implicit GEMM's kernel lookup."""
    taken = []
    for name, label in (("_depthwise", "depthwise"), ("_pointwise_tf32", "pointwise"),
                        ("_pointwise_16bit", "pointwise"), ("conv_kernel", "implicit_gemm")):
        real = getattr(conv_op, name)
        monkeypatch.setattr(conv_op, name,
                            lambda *a, _r=real, _l=label, **k: taken.append(_l) or _r(*a, **k))
    monkeypatch.setattr(conv_op, "_REPEATS", {})
    return taken


@pytest.mark.parametrize("precision", [None, "tf32"])
def test_convolve_runs_the_routed_kernel(precision, monkeypatch):
    """convolve follows `route`: a depthwise problem never reaches the implicit GEMM; a
    ConvSchedule passed keeps it there (the bench's "before" column)."""
    taken = _spy(monkeypatch)
    x, w = _t(1, 4, 6, 6, seed=1), _t(4, 1, 3, 3, seed=2)
    conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 4, precision=precision)
    assert taken == ["depthwise"]
    taken.clear()
    s = ConvSchedule(bm=128, bn=64, bk=32 if precision else 64, bw=64, stages=2,
                     promote=precision is None)
    conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 4, precision=precision, schedule=s)
    assert taken == ["implicit_gemm"]


def test_pointwise_runs_matmuls_gemm(monkeypatch):
    """The tf32 1x1 route runs argus.ops.matmul's GEMM kernel (schedules.kernel_for), never the
    implicit GEMM, on operands rounded once (no second rounding pass: the GEMM reads the conv's
    rounded buffer)."""
    import importlib

    from argus.ops import schedules

    # the module (argus.ops re-exports the function matmul under the module's name)
    matmul_op = importlib.import_module("argus.ops.matmul")

    taken = _spy(monkeypatch)
    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())  # no memo hit
    gemms = []
    real = schedules.kernel_for
    monkeypatch.setattr(schedules, "kernel_for", lambda *a: gemms.append(a[0]) or real(*a))
    monkeypatch.setattr(matmul_op, "_tf32_k_major",
                        lambda *a: pytest.fail("matmul's rounding passes ran"))
    x, w = _t(2, 16, 5, 7, seed=3), _t(24, 16, 1, 1, seed=4)
    y = conv_op.conv2d_interpret(x, w, precision="tf32")
    assert taken == ["pointwise"]
    (problem,) = gemms
    assert (problem.m, problem.n, problem.k, problem.in_dtype) == (70, 24, 16, "tf32")
    ref_t = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double())
    assert _rel(y, ref_t) <= 1e-6


# (N, C, H, W, multiplier, R, S, stride, padding, dilation, bias, activation)
DEPTHWISE = [
    (2, 3, 9, 10, 1, 3, 3, 1, 0, 1, False, "none"),               # L1/82's form
    (1, 4, 9, 8, 2, 3, 3, 2, 1, 1, True, "none"),                 # multiplier 2, stride 2
    (1, 4, 7, 6, 1, 3, 2, 1, (2, 0), (2, 1), False, "none"),      # dilated, asymmetric
    (2, 2, 5, 37, 1, 1, 7, (1, 3), (0, 3), 1, True, "relu"),      # W % stride_w != 0: a copy
    (1, 3, 11, 9, 1, 3, 3, (3, 2), 1, 1, False, "none"),          # H % stride_h != 0: a copy
    (1, 2, 40, 140, 1, 3, 7, 1, (1, 3), 1, True, "sigmoid"),      # Q > 128: two column tiles
    (2, 1, 6, 6, 4, 3, 3, 1, 1, 1, False, "none"),                # C = 1 = groups, K = 4
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "x".join(map(str, c[:10])))
@pytest.mark.parametrize("precision", [None, "tf32"])
def test_depthwise_matches_float64(case, precision):
    """Exact fp32 (a sum of R * S fp32 products per output), so ~1e-7 against float64 under
    either precision (tf32 asks for at most cuDNN TF32's error, ~3e-4; exact meets it); the
    result NCHW-contiguous."""
    N, C, H, W, mult, R, S, stride, padding, dilation, bias, act = case
    x, w = _t(N, C, H, W, seed=5), _t(C * mult, 1, R, S, seed=6)
    b = _t(C * mult, seed=7) if bias else None
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation, C, activation=act,
                                 precision=precision)
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding,
                   dilation, C)
    ref = {"none": ref, "relu": ref.relu(), "sigmoid": ref.sigmoid()}[act]
    assert y.shape == ref.shape and y.is_contiguous() and y.dtype == torch.float32
    assert _rel(y, ref) <= 1e-6


def test_depthwise_channels_last_input_conv1d_and_transposed():
    """A channels-last input (copied to NCHW), conv1d's unit height, and a stride-1 transposed
    depthwise convolution (the gradient form runs a depthwise conv2d) on the depthwise route."""
    x = _t(2, 6, 8, 9, seed=8).to(memory_format=torch.channels_last)
    w = _t(6, 1, 3, 3, seed=9)
    y = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 6, precision="tf32")
    assert _rel(y, F.conv2d(x.double(), w.double(), None, 1, 1, 1, 6)) <= 1e-6
    x1, w1 = _t(2, 5, 30, seed=10), _t(5, 1, 4, seed=11)
    y1 = conv_op.conv2d_interpret(x1.unsqueeze(2), w1.unsqueeze(2), None, 1, (0, 2), 1, 5)
    assert _rel(y1.squeeze(2), F.conv1d(x1.double(), w1.double(), None, 1, 2, 1, 5)) <= 1e-6
    xt, wt = _t(1, 4, 5, 6, seed=12), _t(4, 1, 3, 3, seed=13)
    yt = conv_op.conv_transpose2d(xt, wt, None, 1, 1, 0, 4, run=conv_op.conv2d_interpret)
    assert _rel(yt, F.conv_transpose2d(xt.double(), wt.double(), None, 1, 1, 0, 4)) <= 1e-6


# (N, C, H, W, K, channels_last)
POINTWISE = [
    (2, 16, 5, 7, 24, False),
    (1, 72, 4, 5, 40, True),       # C past two 32-channel slices, K ragged
    (2, 10, 3, 3, 8, False),       # C = 10: channels zero-padded to 12 (16-byte rows)
    (1, 6, 2, 9, 5, True),
]


@pytest.mark.parametrize("case", POINTWISE, ids=lambda c: "x".join(map(str, c)))
def test_pointwise_matches_float64(case):
    """The GEMM of the tf32-rounded operands with fp32 accumulation: ~1e-7 against the float64
    convolution of the rounded inputs, the tf32 bound (~3e-4) against the exact ones; the
    result channels-last (NCHW shape), as the implicit GEMM's (images this small take the
    flat GEMM whatever x's layout)."""
    N, C, H, W, K, cl = case
    x, w = _t(N, C, H, W, seed=14), _t(K, C, 1, 1, seed=15)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    y = conv_op.conv2d_interpret(x, w, precision="tf32")
    ref_t = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double())
    ref = F.conv2d(x.double(), w.double())
    assert y.shape == ref.shape and y.permute(0, 2, 3, 1).is_contiguous()
    assert _rel(y, ref_t) <= 1e-6
    assert _rel(y, ref) <= 2e-3


@pytest.mark.parametrize("case", POINTWISE[:3], ids=lambda c: "x".join(map(str, c)))
def test_pointwise_nchw_form_matches_float64(case, monkeypatch):
    """An NCHW x with NCHW_POINTWISE_PIXELS or more pixels per image (lowered here to reach the
    form at interpreter sizes): one GEMM per image, Y[n] = Wr @ Xr[n]^T (M = K, N = H * W,
    K = C padded to 4), into an NCHW-contiguous result; a channels-last x keeps the flat GEMM
    and its channels-last result. Both the tf32 model's result, also when replayed."""
    monkeypatch.setattr(conv_op, "NCHW_POINTWISE_PIXELS", 8)
    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())
    monkeypatch.setattr(conv_op, "_REPEATS", {})
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm", lambda *a: problems.append(
        tuple(t.shape for t in a)) or real(*a))
    N, C, H, W, K, cl = case
    x, w = _t(N, C, H, W, seed=24), _t(K, C, 1, 1, seed=25)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    y = conv_op.conv2d_interpret(x, w, precision="tf32")
    ref_t = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double())
    assert _rel(y, ref_t) <= 1e-6
    Cp = C + (-C % 4)
    if cl:
        assert y.permute(0, 2, 3, 1).is_contiguous()
        assert problems == [((N * H * W, Cp), (K, Cp), (N * H * W, K))]
    else:
        assert y.is_contiguous()
        assert problems == [((K, Cp), (H * W, Cp), (K, H * W))]
    x.copy_(_t(*x.shape, seed=26))
    replayed = conv_op.conv2d_interpret(x, w, precision="tf32")
    assert len(problems) == 1           # replayed: no preparation
    ref_t = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double())
    assert _rel(replayed, ref_t) <= 1e-6 and replayed.stride() == y.stride()


def test_custom_op_fake_matches_the_routes_layout():
    """The torch.library op's fake (torch.compile's view of the result) says what the kernels
    write: NCHW-contiguous for an fp32 depthwise convolution and for the implicit GEMM on an
    NCHW input (its channels-first epilogue), channels-last for a channels-last input and for
    a 16-bit layer narrow enough for the TMA-store epilogue (Q = 9)."""
    op = conv_op._op()
    x = torch.empty(2, 8, 9, 9, device="meta")
    dw = op(x, torch.empty(8, 1, 3, 3, device="meta"), None, [1, 1], [1, 1], [1, 1], 8, "none")
    assert dw.shape == (2, 8, 9, 9) and dw.is_contiguous()
    w = torch.empty(16, 8, 3, 3, device="meta")
    full = op(x, w, None, [1, 1], [1, 1], [1, 1], 1, "none")
    assert full.shape == (2, 16, 9, 9) and full.is_contiguous()
    cl = op(x.to(memory_format=torch.channels_last), w, None, [1, 1], [1, 1], [1, 1], 1, "none")
    assert cl.permute(0, 2, 3, 1).is_contiguous() and not cl.is_contiguous()
    x16, w16 = torch.empty(2, 16, 9, 9, device="meta"), torch.empty(16, 16, 3, 3, device="meta")
    narrow = op(x16.bfloat16(), w16.bfloat16(), None, [1, 1], [1, 1], [1, 1], 1, "none")
    assert narrow.permute(0, 2, 3, 1).is_contiguous() and not narrow.is_contiguous()


def test_depthwise_kernel_verifies_with_zero_errors():
    """The depthwise kernel's masked loads and stores prove (store.once: the grid covers Y with
    disjoint tiles) with no error or unknown."""
    from argus import verify
    from argus.compiler import lower_only
    from argus.kernels.conv_depthwise import DepthwiseGeometry, depthwise_kernel

    for bias, act, geom, bh, bw in ((False, "none", DepthwiseGeometry(3, 3), 8, 128),
                                    (True, "relu", DepthwiseGeometry(3, 7, 2, 2, 1, 3, 1, 2, 2),
                                     4, 32)):
        report = verify.run(lower_only(depthwise_kernel(bias, act, bw), geom=geom, BH=bh,
                                       BW=bw))
        assert not report.errors and not report.unknowns, \
            "\n".join(str(d) for d in report.errors + report.unknowns)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_depthwise_kernel(tmp_path, monkeypatch):
    """The depthwise kernel compiles for sm_90a with no spills and no tensor-core op (FFMA)."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.kernels.conv_depthwise import DepthwiseGeometry, depthwise_kernel
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    source = codegen.render(lower_only(depthwise_kernel(True, "none", 128),
                                       geom=DepthwiseGeometry(3, 3, pad_h=1, pad_w=1), BH=8,
                                       BW=128))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "wgmma" not in binary.ptx and "fma.rn.f32" in binary.ptx
    assert not binary.resource(source.name).spills


@pytest.mark.parametrize("kind", ["depthwise", "depthwise_bias", "pointwise_nchw",
                                  "pointwise_nhwc"])
def test_repeated_call_replays_and_reads_the_current_x(kind, monkeypatch):
    """A repeated call with the same tensors skips the checks and the route's preparation
    (`_RouteRepeat`, found as _Repeat's entries are) and computes on x's current values: the
    same result as a freshly prepared call."""
    taken = _spy(monkeypatch)
    if kind.startswith("depthwise"):
        x, w = _t(2, 4, 7, 8, seed=16), _t(4, 1, 3, 3, seed=17)
        b = _t(4, seed=18) if kind == "depthwise_bias" else None
        args, want = (b, 1, 1, 1, 4), "depthwise"
    else:
        x, w = _t(2, 12, 5, 6, seed=19), _t(8, 12, 1, 1, seed=20)
        if kind == "pointwise_nhwc":
            x = x.to(memory_format=torch.channels_last)
        args, want = (None,), "pointwise"
    first = conv_op.conv2d_interpret(x, w, *args, precision="tf32")
    assert taken == [want] and len(conv_op._REPEATS) == 1
    again = conv_op.conv2d_interpret(x, w, *args, precision="tf32")
    assert taken == [want] and torch.equal(again, first)          # replayed, not prepared
    x.copy_(_t(*x.shape, seed=21))
    replayed = conv_op.conv2d_interpret(x, w, *args, precision="tf32")
    assert taken == [want]
    conv_op._REPEATS.clear()
    fresh = conv_op.conv2d_interpret(x, w, *args, precision="tf32")
    assert taken == [want, want] and torch.equal(replayed, fresh)
    assert not torch.equal(fresh, first)


def test_copied_input_is_not_replayed(monkeypatch):
    """A depthwise x the route copies (W not a multiple of the stride: zero-padded) is not
    remembered: the replay reads x in place, so it would read a stale copy."""
    taken = _spy(monkeypatch)
    x, w = _t(1, 3, 7, 9, seed=22), _t(3, 1, 3, 3, seed=23)
    for _ in range(2):
        conv_op.conv2d_interpret(x, w, None, 2, 1, 1, 3)
    assert taken == ["depthwise", "depthwise"] and not conv_op._REPEATS


# bf16 / fp16 1x1 convolutions on matmul's 16-bit GEMM: (N, C, H, W, K, channels_last, dtype)
POINTWISE_16 = [
    (2, 64, 12, 12, 40, True, torch.bfloat16),   # M = 288: the modelled 128-row tiles, TMA store
    (1, 72, 4, 5, 40, True, torch.float16),      # M = 20: swap-AB; C past one 64-deep slice
    (2, 8, 3, 3, 8, False, torch.bfloat16),      # NCHW x: copied to channels-last once
    (2, 16, 5, 7, 20, True, torch.bfloat16),     # K = 20: rows not 16-byte aligned, direct store
    (1, 24, 3, 5, 12, False, torch.float16),
]
# one rounding of a 16-bit result (2^-8 / 2^-11 relative at most) plus fp32 accumulation
_ROUNDING = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _x16(N, C, H, W, cl, dtype, seed):
    x = _t(N, C, H, W, seed=seed).to(dtype)
    return x.to(memory_format=torch.channels_last) if cl else x


@pytest.mark.parametrize("case", POINTWISE_16, ids=lambda c: "x".join(map(str, c[:6])) +
                         str(c[6])[6:])
def test_pointwise_16bit_matches_float64(case, monkeypatch):
    """A bf16 / fp16 1x1 convolution on the pointwise route: the float64 convolution of the
    same 16-bit inputs rounded once to the dtype (normwise within one rounding), the result in
    x's dtype with NCHW shape in channels-last memory, the same layout and (within one
    rounding) the same values as the implicit GEMM (a ConvSchedule passed: the opt-out); the
    GEMM reads a channels-last x and the weight in place (their own memory), an NCHW x from one
    channels-last copy."""
    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())
    monkeypatch.setattr(conv_op, "_REPEATS", {})
    taken = _spy(monkeypatch)
    seen = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: seen.append(tuple(a)) or real(*a))
    N, C, H, W, K, cl, dtype = case
    x = _x16(N, C, H, W, cl, dtype, seed=30)
    w = (_t(K, C, 1, 1, seed=31) / C ** 0.5).to(dtype)
    y = conv_op.conv2d_interpret(x, w)
    assert taken == ["pointwise"]
    ref = F.conv2d(x.double(), w.double())
    assert y.shape == ref.shape and y.dtype == dtype
    assert y.permute(0, 2, 3, 1).is_contiguous()
    assert _rel(y, ref) <= _ROUNDING[dtype]
    ((A, Wk, out2),) = seen
    assert tuple(A.shape) == (N * H * W, C) and tuple(Wk.shape) == (K, C)
    assert tuple(out2.shape) == (N * H * W, K)
    assert (A.data_ptr() == x.data_ptr()) == cl            # in place iff channels-last
    assert Wk.data_ptr() == w.data_ptr()
    s = conv_op.schedule_for(x, w, 1, 0, 1, 1)
    # the implicit GEMM's channels-last result (nchw=False: an NCHW x would get its NCHW
    # epilogue by default, which this route does not have)
    implicit = conv_op.convolve(x, w, schedule=s, nchw=False)
    assert taken == ["pointwise", "implicit_gemm"]
    assert implicit.stride() == y.stride() and implicit.dtype == y.dtype
    assert _rel(y, implicit.double()) <= _ROUNDING[dtype]


def test_pointwise_16bit_runs_matmuls_gemm(monkeypatch):
    """The 16-bit 1x1 route runs argus.ops.matmul's 16-bit GEMM kernel (schedules.kernel_for)
    on the problem x @ W.T (B K-major, M = N*H*W, N = K, K = C) with the schedule matmul would
    choose, never the implicit GEMM."""
    from argus.ops import schedules

    taken = _spy(monkeypatch)
    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())
    gemms = []
    real = schedules.kernel_for
    monkeypatch.setattr(schedules, "kernel_for",
                        lambda *a: gemms.append(a) or real(*a))
    x = _x16(2, 32, 5, 7, True, torch.bfloat16, seed=32)
    w = _t(24, 32, 1, 1, seed=33).bfloat16()
    y = conv_op.conv2d_interpret(x, w)
    assert taken == ["pointwise"]
    ((problem, chosen),) = gemms
    assert (problem.m, problem.n, problem.k, problem.batch, problem.in_dtype,
            problem.out_dtype, problem.b_layout) == (70, 24, 32, 1, "bf16", "bf16", "nk")
    assert chosen == schedules.choose(problem, None)
    assert _rel(y, F.conv2d(x.double(), w.double())) <= _ROUNDING[torch.bfloat16]


def test_pointwise_gemm_never_takes_a_split_k_schedule(monkeypatch):
    """A tuned split-K (or tail-split) choice for the GEMM's problem gives way to the problem's
    heuristic schedule (one kernel: one launch plan, buildable on meta tensors), and the
    result is still the convolution."""
    import dataclasses

    from argus.ops import schedules

    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())
    monkeypatch.setattr(conv_op, "_REPEATS", {})
    split = schedules.GemmSchedule(bm=64, bn=64, consumers=1, stages=4, split_k=2,
                                   epilogue="direct")
    monkeypatch.setattr(schedules, "choose", lambda p, gpu: split)
    x = _x16(1, 32, 4, 4, True, torch.bfloat16, seed=34)
    w = _t(16, 32, 1, 1, seed=35).bfloat16()
    y = conv_op.conv2d_interpret(x, w)
    # a BuildMemo's stored keys are (build choices, the caller's key)
    (((_, problem), (chosen, _)),) = conv_op._POINTWISE.items()
    assert chosen == schedules.heuristic(problem[0])
    assert chosen.split_k == 1 and chosen.tail_splits == 1
    assert chosen != dataclasses.replace(split, split_k=1)
    assert _rel(y, F.conv2d(x.double(), w.double())) <= _ROUNDING[torch.bfloat16]


@pytest.mark.parametrize("cl", [True, False], ids=["nhwc", "nchw"])
def test_pointwise_16bit_replays_and_reads_the_current_tensors(cl, monkeypatch):
    """A repeated bf16 1x1 call with the same tensors replays (`_RouteRepeat`: no checks, no
    preparation) on x's current values, a channels-last x in place and an NCHW x copied again;
    an in-place update of the weight (its version) is a new call, prepared afresh and seen."""
    taken = _spy(monkeypatch)
    x = _x16(2, 16, 5, 6, cl, torch.bfloat16, seed=36)
    w = _t(24, 16, 1, 1, seed=37).bfloat16()
    first = conv_op.conv2d_interpret(x, w)
    assert taken == ["pointwise"] and len(conv_op._REPEATS) == 1
    again = conv_op.conv2d_interpret(x, w)
    assert taken == ["pointwise"] and torch.equal(again, first)       # replayed
    assert again.stride() == first.stride()
    x.copy_(_x16(2, 16, 5, 6, cl, torch.bfloat16, seed=38))
    replayed = conv_op.conv2d_interpret(x, w)
    assert taken == ["pointwise"]
    assert _rel(replayed, F.conv2d(x.double(), w.double())) <= _ROUNDING[torch.bfloat16]
    assert not torch.equal(replayed, first)
    with torch.no_grad():
        w.mul_(-2)                                                     # bumps w's version
    updated = conv_op.conv2d_interpret(x, w)
    assert taken == ["pointwise", "pointwise"]                         # prepared again
    assert torch.equal(updated, -2 * replayed)                         # exact: a power of 2


def test_custom_op_fake_matches_the_16bit_pointwise_layout():
    """The torch.library op's fake says channels-last for a bf16 1x1 convolution (routed
    pointwise), NCHW or channels-last x alike: the strides the route's result has."""
    op = conv_op._op()
    for cl in (False, True):
        x = _x16(2, 16, 5, 7, cl, torch.bfloat16, seed=39)
        w = _t(24, 16, 1, 1, seed=40).bfloat16()
        assert conv_op.route(x, w, None, 1, 0, 1) == "pointwise"
        fake = op(x.to("meta"), w.to("meta"), None, [1, 1], [0, 0], [1, 1], 1, "none")
        real = conv_op.conv2d_interpret(x, w)
        assert fake.shape == real.shape and fake.stride() == real.stride()
        assert fake.dtype == real.dtype == torch.bfloat16


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_pointwise_16bit_builds_on_meta_tensors(monkeypatch):
    """convolve on meta tensors (ahead-of-time compile, no GPU) builds the GEMM the route
    launches on the GPU and returns the result's layout; nothing runs."""
    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())
    monkeypatch.setattr(conv_op, "_REPEATS", {})
    x = torch.empty(4, 64, 14, 14, dtype=torch.bfloat16, device="meta") \
        .to(memory_format=torch.channels_last)
    w = torch.empty(256, 64, 1, 1, dtype=torch.bfloat16, device="meta")
    from argus.compiled import CompiledKernel

    built = []
    real = CompiledKernel.build_for
    monkeypatch.setattr(CompiledKernel, "build_for", lambda self, *a: built.append(
        (self.kernel.name, tuple(tuple(t.shape) for t in a))) or real(self, *a))
    y = conv_op.convolve(x, w)
    assert y.is_meta and y.shape == (4, 256, 14, 14) and y.permute(0, 2, 3, 1).is_contiguous()
    assert built == [("gemm", ((784, 64), (256, 64), (784, 256)))]
