"""The fp32 convolution as ONE tf32 product (argus.ops.conv `precision="tf32"`, compose's
ConvRun(precision="tf32"), the solve CLI's --precision tf32): the implicit-GEMM kernel in the
numpy interpreter against torch float64 F.conv2d / conv3d of the tf32-rounded inputs (fp32
accumulation only) and of the exact inputs (the tf32 bound, relaxed track), the schedule it
gets, its refusals, the verifier (zero findings) and NVRTC (`wgmma ... .tf32` in the PTX)."""

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.errors import LaunchError
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available

TF32 = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2)
TF32_CLUSTER = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2, cluster_m=2, num_sms=4)
TF32_ROWBOX = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2, rowbox=True, num_sms=2)

# (N, C, H, W, K, R, S, stride, padding, dilation, groups)
CASES = [
    (1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1),
    (2, 16, 7, 9, 24, 3, 3, 2, 1, 1, 1),      # stride 2, W odd (padded copy), two images
    (1, 12, 5, 6, 8, 2, 3, 1, (1, 0), 1, 1),  # C not a multiple of 4: zero-padded channels
    (1, 40, 9, 10, 32, 5, 5, 2, 2, 1, 2),     # 5x5 stride 2 grouped, Cg = 20 (one bk slice)
    (2, 6, 5, 5, 8, 3, 3, 1, 1, 1, 2),        # Cg = 3: pitch padded to 4 fp32 (16 bytes)
    (1, 72, 4, 5, 16, 1, 1, 1, 0, 1, 1),      # 1x1, C past two 32-channel slices
]


def _errors(y, x, w, b, *args, conv=F.conv2d):
    """(normwise error against the tf32-rounded inputs in float64, against the exact ones)."""
    bias = None if b is None else b.double()
    ref_t = conv(round_to_tf32(x).double(), round_to_tf32(w).double(), bias, *args)
    ref = conv(x.double(), w.double(), bias, *args)
    rel = lambda r: ((y.double() - r).norm() / r.norm()).item()   # noqa: E731
    return rel(ref_t), rel(ref)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [TF32, TF32_CLUSTER], ids=["direct", "cluster"])
def test_tf32_conv_matches_float64(case, schedule):
    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    g = torch.Generator().manual_seed(sum(case[:7]))
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C // groups, R, S, generator=g)
    b = torch.randn(K, generator=g)
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation, groups,
                                 schedule=schedule, precision="tf32")
    assert y.dtype == torch.float32
    exact_inputs, exact = _errors(y, x, w, b, stride, padding, dilation, groups)
    # fp32 accumulation of the tf32 products: ~1e-7; the tf32 rounding itself: ~3e-4 on
    # signed data (KernelBench's tf32 rung), far inside the relaxed track's 1e-2
    assert exact_inputs <= 1e-6, exact_inputs
    assert 3e-5 <= exact <= 2e-3, exact


TF32_ROWBOX_CLUSTER = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=3, rowbox=True,
                                   cluster_m=2, num_sms=4)
ROWBOX_CASES = [
    CASES[0],
    (2, 16, 7, 9, 24, 3, 3, 1, (2, 1), (2, 1), 1),    # dilated, padding 2 x 1
    (1, 8, 3, 70, 16, 3, 3, 1, 1, 1, 1),              # P = 3: a row block half past P; Q > 64
    (2, 72, 4, 5, 16, 1, 1, 1, 0, 1, 1),              # 1x1 over 72 channels (three bk slices)
    (1, 12, 5, 6, 8, 2, 3, 1, (1, 0), 1, 1),          # C = 12 (pitch-padded), R = 2
]


@pytest.mark.parametrize("case", ROWBOX_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [TF32_ROWBOX, TF32_ROWBOX_CLUSTER, None],
                         ids=["rowbox", "rowbox-cluster", "schedule_for"])
def test_tf32_conv_rowbox(case, schedule):
    """tf32 on the rowbox producer (one (1, rows, 64, 32) box of the rounded fp32 input per K
    step), schedule_for's default for 2-d stride-1 one-group convolutions: the float64
    convolution of the tf32-rounded operands."""
    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    g = torch.Generator().manual_seed(5)
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C // groups, R, S, generator=g)
    b = torch.randn(K, generator=g)
    if schedule is None:
        schedule = conv_op.schedule_for(x, w, stride, padding, dilation, groups,
                                        precision="tf32")
        # packed taps (few channels: schedule_for's 'auto') run without the cluster
        assert schedule.rowbox and schedule.cluster_m == (1 if schedule.taps_per_slice > 1 else 2)
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation, groups,
                                 schedule=schedule, precision="tf32")
    exact_inputs, exact = _errors(y, x, w, b, stride, padding, dilation, groups)
    assert exact_inputs <= 1e-6 and exact <= 2e-3, (exact_inputs, exact)


def test_tf32_conv1d_runs_on_rowbox():
    """A 1-d convolution is 2-d on a unit height: rowbox by default for tf32 too, as compose
    runs nn.Conv1d under ConvRun(precision="tf32")."""
    import torch.nn as nn

    from argus.compose.conv import ConvRun
    from argus.compose.runtime import Program

    x = torch.randn(2, 16, 40, generator=torch.Generator().manual_seed(6))
    w = torch.randn(24, 16, 5, generator=torch.Generator().manual_seed(7))
    s = conv_op.schedule_for(x.unsqueeze(2), w.unsqueeze(2), (1, 1), (0, 2), (1, 1), 1,
                             precision="tf32")
    assert s.rowbox
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(16, 24, 5, padding=2), nn.ReLU())
    with torch.no_grad():
        got = Program.build(model, [x], {"conv": ConvRun(precision="tf32")}).run(model, [x])
        c = model[0]
        ref_t = torch.relu(F.conv1d(round_to_tf32(x).double(), round_to_tf32(c.weight).double(),
                                    c.bias.double(), padding=2))
    assert ((got.double() - ref_t).norm() / ref_t.norm()).item() <= 1e-6


def _raw_tf32(monkeypatch):
    """argus.ops.conv's tf32 path as it was before its operands were rounded: the input's
    channels-last copy and the weight's repack hold the raw fp32 bits (the kernel's wgmma then
    drops their 13 low bits)."""
    def raw_input(x5, groups, cpad, wpad):
        N, C, D, H, W = x5.shape
        cg = C // groups
        grouped = x5.permute(0, 2, 3, 4, 1).reshape(N, D, H, W, groups, cg)
        return F.pad(grouped, (0, cpad, 0, 0, 0, wpad)).contiguous().reshape(
            N, D, H, W + wpad, groups * (cg + cpad))
    monkeypatch.setattr(conv_op, "_tf32_input", raw_input)
    monkeypatch.setattr(conv_op, "round_to_tf32", lambda t: t)
    monkeypatch.setattr(conv_op, "_REPEATS", {})     # no replay of a rounded call


def test_rounded_operands_halve_the_tf32_error(monkeypatch):
    """The tensor core (and the interpreter's wgmma: dtypes.truncate_to_tf32) reads an
    unrounded fp32 operand by dropping its 13 low bits, a bias toward zero: the raw operands
    err ~2.5x more normwise than operands rounded to nearest first (cvt.rna), which the op now
    does (the input by argus/kernels/conv_tf32.py, the weight in its repack). The rounded
    result is the float64 convolution of the rounded operands (cuDNN's TF32 arithmetic); the
    raw one that of the truncated operands."""
    from argus.dtypes import truncate_to_tf32

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 32, 8, 8, generator=g)
    w = torch.randn(32, 32, 3, 3, generator=g) / 17
    args = (1, 1, 1, 1)
    ref = F.conv2d(x.double(), w.double(), None, *args)
    rel = lambda y, r: ((y.double() - r).norm() / r.norm()).item()   # noqa: E731
    rounded = conv_op.conv2d_interpret(x, w, None, *args, schedule=TF32, precision="tf32")
    with monkeypatch.context() as m:
        _raw_tf32(m)
        raw = conv_op.conv2d_interpret(x, w, None, *args, schedule=TF32, precision="tf32")
    trunc = lambda t: torch.from_numpy(truncate_to_tf32(t.numpy()))   # noqa: E731
    ref_trunc = F.conv2d(trunc(x).double(), trunc(w).double(), None, *args)
    ref_round = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), None, *args)
    assert rel(raw, ref_trunc) <= 1e-6 and rel(rounded, ref_round) <= 1e-6
    err_raw, err_rounded = rel(raw, ref), rel(rounded, ref)
    assert err_raw > 2 * err_rounded, (err_raw, err_rounded)
    assert 1e-4 < err_rounded < 4e-4, err_rounded      # tf32's own error on signed data


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "grouped_pad", "stride_pad"])
def test_tf32_input_is_rounded_bit_for_bit(layout):
    """`_tf32_input` (the kernel's X): every value round_to_tf32 of the input's, in
    channels-last order, the TMA pitch padding zero, from each of its branches (the
    transposing kernel, the row kernel, torch's padded copy rounded in place)."""
    g = torch.Generator().manual_seed(1)
    groups, cpad, wpad = {"nchw": (1, 2, 0), "channels_last": (1, 3, 0),
                          "grouped_pad": (2, 1, 0), "stride_pad": (1, 0, 1)}[layout]
    C = {"nchw": 6, "channels_last": 5, "grouped_pad": 6, "stride_pad": 8}[layout]
    x = torch.randn(2, C, 1, 5, 7, generator=g) * 3
    x[0, 0, 0, 0, :3] = torch.tensor([1 + 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -12])  # ties
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last_3d)
    before = x.clone()
    X = conv_op._tf32_input(x, groups, cpad, wpad)
    assert torch.equal(x, before)                                 # the input is not touched
    N, _, D, H, W = x.shape
    cg = C // groups
    want = F.pad(round_to_tf32(x).permute(0, 2, 3, 4, 1).reshape(N, D, H, W, groups, cg),
                 (0, cpad, 0, 0, 0, wpad)).reshape(N, D, H, W + wpad, groups * (cg + cpad))
    assert X.is_contiguous() and X.shape == want.shape
    assert torch.equal(X.view(torch.int32), want.contiguous().view(torch.int32))
    assert X[0, 0, 0, 0, :1].item() == 1 + 2 ** -10                  # a tie rounds away
    assert torch.equal(conv_op.round_to_tf32(x).view(torch.int32),
                       round_to_tf32(x).contiguous().view(torch.int32))


def test_tf32_weight_is_rounded_once_per_version(monkeypatch):
    """The weight's repack holds round_to_tf32 of the weight (cached on the GPU per version:
    the rounding is not a per-call cost)."""
    g = torch.Generator().manual_seed(2)
    w = torch.randn(8, 12, 3, 3, generator=g)
    Wt = conv_op._weight_side(w, 1, 0, 32, tf32=True)
    want = conv_op.weight_operand(round_to_tf32(w).reshape(1, 8, 12, 9).permute(0, 3, 1, 2), 32)
    assert torch.equal(Wt, want)
    assert not torch.equal(conv_op._weight_side(w, 1, 0, 32), want)   # not tf32: raw bits


def test_compose_tf32_chain_is_as_accurate_as_cudnn_tf32():
    """The CPU analog of tests/gpu/test_tf32_gpu.py::test_composed_conv_tf32_is_eager_accurate
    (which failed on the GPU with raw operands: 1.47e-3 against its bar of 1.2e-3): the
    composed Conv -> ReLU -> strided Conv under ConvRun(precision="tf32") errs what cuDNN's TF32
    arithmetic errs (every convolution's operands rounded to tf32 to nearest, float64 after),
    within 25%, and clearly less than with truncated operands."""
    import torch.nn as nn

    from argus.compose.conv import ConvRun
    from argus.compose.runtime import Program
    from argus.dtypes import truncate_to_tf32

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(32, 16, 3, stride=2))
    x = torch.randn(2, 16, 8, 8)
    with torch.no_grad():
        want = model.double()(x.double())
        model.float()
        prog = Program.build(model, [x], {"conv": ConvRun(precision="tf32")})
        got = prog.run(model, [x])

        def emulate(rnd):
            c1, c2 = model[0], model[2]
            y = F.conv2d(rnd(x).double(), rnd(c1.weight).double(), c1.bias.double(), 1, 1)
            y = torch.relu(y).float()
            return F.conv2d(rnd(y).double(), rnd(c2.weight).double(), c2.bias.double(), 2)

        trunc = lambda t: torch.from_numpy(truncate_to_tf32(t.numpy()))   # noqa: E731
        rel = lambda y: ((y.double() - want).norm() / want.norm()).item()   # noqa: E731
        ours, cudnn, truncated = rel(got), rel(emulate(round_to_tf32)), rel(emulate(trunc))
    assert ours <= 1.25 * cudnn and truncated > 1.8 * ours, (ours, cudnn, truncated)


def test_rounding_kernels_verify_with_zero_findings():
    """The input kernels' loads and stores (the transposed store of every tile width, the
    padding columns written as zeros, masked edges) prove with neither errors nor unknowns."""
    from argus.compiler import lower_only
    from argus.kernels import conv_tf32

    for kernel in (conv_tf32.round_nhwc, conv_tf32.round_nhwc4, conv_tf32.round_nhwc8,
                   conv_tf32.round_nhwc16, conv_tf32.round_nhwc32, conv_tf32.round_rows):
        report = verify.run(lower_only(kernel))
        assert not report.errors and not report.unknowns, \
            "\n".join(str(d) for d in report.errors + report.unknowns)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_rounding_kernels(tmp_path, monkeypatch):
    """The input kernels compile for sm_90a and round with cvt.rna.tf32.f32."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.kernels import conv_tf32
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    for kernel in (conv_tf32.round_nhwc, conv_tf32.round_nhwc4, conv_tf32.round_rows):
        source = codegen.render(lower_only(kernel))
        binary = compile_cuda(source.text, [source.name], use_cache=False)
        assert "cvt.rna.tf32.f32" in binary.ptx
        assert not binary.resource(source.name).spills


def test_tf32_conv3d_bias_and_activation():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(1, 8, 4, 5, 6, generator=g)
    w = torch.randn(8, 8, 3, 3, 3, generator=g)
    b = torch.randn(8, generator=g)
    y = conv_op.conv2d_interpret(x, w, b, 1, 1, 1, 1, schedule=TF32, precision="tf32")
    exact_inputs, _ = _errors(y, x, w, b, 1, 1, 1, 1, conv=F.conv3d)
    assert exact_inputs <= 1e-6
    relu = conv_op.conv2d_interpret(x[..., :4, :5, :6], w, b, 1, 1, 1, 1, schedule=TF32,
                                    activation="relu", precision="tf32")
    assert torch.equal(relu, relu.clamp_min(0)) and (relu > 0).any()


@pytest.mark.parametrize("stride,padding,output_padding", [(1, 1, 0), (2, 1, 1)])
def test_tf32_conv_transpose2d(stride, padding, output_padding):
    """The gradient form (one stride-1 convolution, or one per output phase) with every
    convolution a tf32 product, as compose runs a transposed convolution under
    ConvRun(precision="tf32")."""
    import functools

    g = torch.Generator().manual_seed(stride)
    x = torch.randn(2, 8, 5, 6, generator=g)
    w = torch.randn(8, 6, 3, 3, generator=g)
    run = functools.partial(conv_op.conv2d_interpret, schedule=TF32, precision="tf32")
    y = conv_op.conv_transpose2d(x, w, None, stride, padding, output_padding, run=run)
    args = (stride, padding, output_padding)
    ref_t = F.conv_transpose2d(round_to_tf32(x).double(), round_to_tf32(w).double(), None,
                               *args)
    assert ((y.double() - ref_t).norm() / ref_t.norm()).item() <= 1e-6


def test_tf32_is_not_the_split():
    """precision="tf32" really is one tf32 product: the 3-term split of the same call is ~100x
    closer to fp32 (a test that would pass with the split in place of tf32 proves nothing)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 12, 7, 6, generator=g)
    w = torch.randn(10, 12, 3, 3, generator=g)
    tf32 = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 1, schedule=TF32, precision="tf32")
    split = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 1,
                                     schedule=ConvSchedule(bm=128, bn=64, bw=64, stages=2),
                                     terms=3)
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
    err = lambda y: ((y.double() - ref).norm() / ref.norm()).item()   # noqa: E731
    assert err(tf32) > 20 * err(split)


def test_schedule_for_tf32():
    x, w = torch.randn(2, 64, 16, 16), torch.randn(128, 64, 3, 3)
    s = conv_op.schedule_for(x, w, 1, 1, 1, 1, precision="tf32")
    assert (s.bk, s.bw, s.epilogue, s.promote, s.halo) == (32, 64, "direct", False, False)
    assert s.rowbox      # 2-d, stride 1, one group: the rowbox producer, as for 16-bit inputs
    assert (128 + s.bn) * s.bk * 4 * s.stages <= 200 * 1024
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1, precision="tf32", rowbox=True).rowbox
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1).bk == 64      # the split keeps its own


def test_refusals():
    x, w = torch.randn(1, 8, 6, 6), torch.randn(8, 8, 3, 3)
    with pytest.raises(LaunchError, match="the one choice is 'tf32', for float32 inputs"):
        conv_op.conv2d_interpret(x.bfloat16(), w.bfloat16(), None, 1, 1, precision="tf32")
    with pytest.raises(LaunchError, match="precision='bf16x3'"):
        conv_op.conv2d_interpret(x, w, None, 1, 1, precision="bf16x3")
    with pytest.raises(ag.TraceError, match="bk=64") as info:
        conv_op.conv2d_interpret(x, w, None, 1, 1, schedule=ConvSchedule(bm=128, bn=64, bw=64,
                                                                         stages=2),
                                 precision="tf32")
    assert "bk=32" in str(info.value.fix)
    with pytest.raises(ValueError, match="fp32 inputs run only as tf32"):
        conv_kernel(ag.f32, ag.f32)
    from argus.compose.conv import ConvRun
    with pytest.raises(ValueError, match="the one choice is 'tf32'"):
        ConvRun(precision="fp16")


# ----------------------------------------------------------------------------- compose


def test_compose_conv_run_tf32_on_the_interpreter():
    """A composed Conv2d task with ConvRun(precision="tf32"): one tf32 product (the split's
    error is ~100x smaller), within the relaxed track."""
    import torch.nn as nn

    from argus.compose.conv import ConvRun
    from argus.compose.runtime import Program

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1, groups=2), nn.ReLU(),
                          nn.Conv2d(8, 4, (1, 3), stride=(1, 2)))
    x = torch.randn(2, 6, 5, 7)
    with torch.no_grad():
        want = model.double()(x.double())
        model.float()
        got = {}
        for name, sched in (("tf32", {"conv": ConvRun(precision="tf32")}),
                            ("split", {"conv": ConvRun(terms=6)})):
            prog = Program.build(model, [x], sched)
            got[name] = ((prog.run(model, [x]).double() - want).norm() / want.norm()).item()
    assert got["tf32"] <= 2e-3 and got["tf32"] > 20 * got["split"], got


def test_solve_cli_precision_option():
    import argparse

    from argus.compose.cli import add_solve, solve_schedules
    from argus.compose.conv import ConvRun
    from argus.compose.solution import _composition

    parser = argparse.ArgumentParser()
    verbs = parser.add_subparsers(dest="verb")
    add_solve(verbs, lambda p: None, lambda p: None)
    assert parser.parse_args(["solve"]).precision == "fp32"
    assert parser.parse_args(["solve", "--precision", "tf32"]).precision == "tf32"
    with pytest.raises(SystemExit):
        parser.parse_args(["solve", "--precision", "bf16"])
    assert solve_schedules("fp32") is None
    sched = solve_schedules("tf32")
    assert sched == {"conv": ConvRun(precision="tf32")}
    # the solution file imports ConvRun and says which track it is for; the default one is
    # unchanged (no import line)
    class _Plan:    # what _composition reads of a Plan: the steps' kinds
        steps = [type("S", (), {"kind": "conv"})()]

    src = _composition("t", "class Model: pass\n", _Plan(), "", sched, ()).source
    assert "from argus.compose.conv import ConvRun" in src and "relaxed track only" in src
    assert "SCHEDULES = {'conv': ConvRun(terms=6, schedule=None, precision='tf32')}" in src
    plain = _composition("t", "class Model: pass\n", _Plan(), "", None, ()).source
    assert "ConvRun" not in plain and "SCHEDULES = {}" in plain
    ns: dict = {}
    lines = [ln for ln in src.splitlines()
             if ln.startswith(("from argus.compose.conv import", "SCHEDULES ="))]
    exec(compile("\n".join(lines), "solution", "exec"), ns)   # the footer's two lines run
    assert ns["SCHEDULES"] == sched


# ----------------------------------------------------------------------------- verifier, NVRTC

GEOM = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)


def test_tf32_kernel_verifies_with_zero_findings():
    """The lowered kernel: TMA boxes of 32 fp32, the tf32 descriptors' k8 steps of 32 bytes
    (wgmma.smem-layout), groups never mixed (wgmma.agree on grp), every product defined."""
    from argus.compiler import lower_only

    kernel = lower_only(conv_kernel(ag.f32, ag.f32, bias=True, precision="tf32"), geom=GEOM,
                        s=TF32)
    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    # the honest unknowns of the conv family (tests/interp/test_conv_interp.py)
    assert {d.code for d in report.unknowns} <= {"store.coverage", "store.once"}, \
        "\n".join(str(d) for d in report.unknowns)
    proven = {d.code for d in report.proven}
    assert {"wgmma.smem-layout", "wgmma.agree", "wgmma.defined", "tma.box"} <= proven, proven
    assert any(d.code == "wgmma.agree" and "A.grp == B.grp" in d.subject
               for d in report.proven)


def test_tf32_rowbox_kernel_verifies_with_zero_errors():
    """The rowbox tf32 kernel as schedule_for builds it (2x1 cluster, bk 32, the (1, 2, 64,
    32) fp32 box): no errors; store.once proven (argus/verify/once_split.py); store.coverage
    is the per-image tiles' known unknown (docs/perf/conv.md)."""
    from argus.compiler import lower_only

    geom = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
    s = ConvSchedule(bm=128, bn=128, bk=32, bw=64, stages=4, cluster_m=2, rowbox=True)
    report = verify.run(lower_only(conv_kernel(ag.f32, ag.f32, bias=True, precision="tf32"),
                                   geom=geom, s=s))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= {"store.coverage"}, \
        "\n".join(str(d) for d in report.unknowns)
    proven = {d.code for d in report.proven}
    assert {"wgmma.smem-layout", "tma.box", "store.once"} <= proven, proven


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_tf32_conv_for_sm90a(tmp_path, monkeypatch):
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    s = ConvSchedule(bm=128, bn=128, bk=32, bw=64, stages=6, cluster_m=2)
    source = codegen.render(lower_only(conv_kernel(ag.f32, ag.f32, bias=True,
                                                   precision="tf32"), geom=GEOM, s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in binary.ptx
    assert ".bf16.bf16" not in binary.ptx
    assert not binary.resource(source.name).spills


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_tf32_rowbox_conv_for_sm90a(tmp_path, monkeypatch):
    """schedule_for's tf32 rowbox kernel for a ResNet c3-like layer: tf32 wgmma, the A tile
    as one 4-d TMA box per K step (multicast weight), no spills."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    x, w = torch.randn(2, 128, 28, 28), torch.randn(128, 128, 3, 3)
    s = conv_op.schedule_for(x, w, 1, 1, 1, 1, precision="tf32")
    assert s.rowbox
    geom = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=128)
    source = codegen.render(lower_only(conv_kernel(ag.f32, ag.f32, bias=True,
                                                   precision="tf32"), geom=geom, s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in binary.ptx
    assert "cp.async.bulk.tensor.4d" in binary.ptx
    assert not binary.resource(source.name).spills


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "pitch_padded"])
def test_tf32_call_is_replayed_and_rounds_the_current_x(layout, monkeypatch):
    """A repeated tf32 call with the same tensors replays its launch (`_Repeat` with the
    rounding step: no checks, no operand preparation) and rounds x's current values again;
    a new weight version is prepared again. Grouped channel padding or W not a multiple of
    the stride (torch's padded copy) is not replayed."""
    conv_op._REPEATS.clear()
    C = 6 if layout == "pitch_padded" else 8
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, C, 5, 6, generator=g)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    w = torch.randn(8, C, 3, 3, generator=g)
    run = lambda: conv_op.conv2d_interpret(x, w, None, 1, 1, schedule=TF32_ROWBOX,  # noqa
                                           precision="tf32")
    check = lambda y: _errors(y, x, w, None, 1, 1, 1, 1)[0] <= 1e-6   # noqa: E731
    assert check(run())
    (entry,) = conv_op._REPEATS.values()
    assert entry.prep is not None and entry.prep.transpose == (layout != "channels_last")

    def refuse(*args, **kwargs):
        raise AssertionError("a repeated call prepared its operands again")

    with monkeypatch.context() as m:
        m.setattr(conv_op, "check", refuse)
        m.setattr(conv_op, "operands", refuse)
        x.copy_(torch.randn(x.shape, generator=g) * 3)
        assert check(run())
    with torch.no_grad():
        w.mul_(-2)                                       # a new weight version
    assert check(run())
    (again,) = conv_op._REPEATS.values()
    assert again is not entry
    conv_op._REPEATS.clear()
    # torch's padded copy (groups with padded channels): no replay
    xg, wg = torch.randn(1, 6, 4, 4, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    conv_op.conv2d_interpret(xg, wg, None, 1, 1, 1, 2, schedule=TF32, precision="tf32")
    assert not conv_op._REPEATS
