"""The implicit-GEMM convolution writes an NCHW result straight from its epilogue
(conv_kernel(nchw=True): the accumulator stored transposed, as cuDNN's fprop writes NCHW), so
an NCHW input's convolution needs no transpose pass after the kernel: the numpy interpreter
against torch float64 F.conv1d / 2d / 3d / conv_transpose* (tf32, the fp32 bf16 split, bf16),
the result's memory format (eager's: NCHW in -> NCHW-contiguous out, channels-last in ->
channels-last out), bias and activation epilogues, odd sizes; the verifier (no errors, the
conv family's store.coverage unknown only); NVRTC for sm_90a; compose's conv step launching
no transpose."""

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available

TF32 = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2)
TF32_ROWBOX = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2, rowbox=True, cluster_m=2,
                           num_sms=4)
SPLIT = ConvSchedule(bm=128, bn=64, bk=64, bw=64, stages=2, promote=True)
BF16 = ConvSchedule(bm=128, bn=64, bk=64, bw=64, stages=2)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _rel(y, r):
    return ((y.double() - r).norm() / r.norm()).item()


def _act(t, activation):
    return {"none": t, "relu": F.relu(t), "gelu_tanh": F.gelu(t, approximate="tanh"),
            "sigmoid": torch.sigmoid(t), "tanh": torch.tanh(t)}[activation]


def _layout(y, x):
    """The eager memory format the result must have for input x (NCHW-contiguous x ->
    contiguous, a channels-last x -> channels-last), asserted with a message that says
    which."""
    if x.is_contiguous():
        assert y.is_contiguous(), f"NCHW input gave strides {y.stride()} (shape {y.shape})"
    else:
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        assert y.is_contiguous(memory_format=fmt), \
            f"channels-last input gave strides {y.stride()} (shape {y.shape})"


# (N, C, H, W, K, R, S, stride, padding, dilation, groups, bias, activation)
CASES_2D = [
    (1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, True, "relu"),
    (2, 16, 7, 9, 24, 3, 3, 2, 1, 1, 1, True, "none"),        # stride 2, odd W, 2 images
    (1, 12, 5, 6, 8, 2, 3, 1, (1, 0), 1, 1, False, "tanh"),    # C = 12 (pitch padded), R = 2
    (1, 40, 9, 10, 32, 5, 5, 2, 2, 1, 2, True, "gelu_tanh"),   # grouped, Cg = 20
    (2, 8, 3, 70, 72, 3, 3, 1, 1, 1, 1, True, "sigmoid"),      # Q = 70 > 64, K = 72 > bn
    (3, 6, 5, 7, 5, 3, 3, 1, 1, 2, 1, True, "none"),           # K = 5: a partial channel tile
]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: "x".join(map(str, c[:7])))
def test_tf32_conv2d_result_layout_and_values(case, channels_last):
    N, C, H, W, K, R, S, stride, padding, dilation, groups, bias, act = case
    g = _gen(sum(case[:7]))
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C // groups, R, S, generator=g)
    b = torch.randn(K, generator=g) if bias else None
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    y = conv_op.convolve(x, w, b, stride, padding, dilation, groups, activation=act,
                         schedule=TF32, precision="tf32")
    _layout(y, x)
    ref = _act(F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(),
                        None if b is None else b.double(), stride, padding, dilation, groups),
               act)
    assert _rel(y, ref) <= 1e-6


@pytest.mark.parametrize("case", [CASES_2D[0], CASES_2D[4], CASES_2D[5]],
                         ids=lambda c: "x".join(map(str, c[:7])))
def test_tf32_rowbox_cluster_nchw(case):
    """The rowbox producer (per-image row blocks: rows past P are pushed past N * P, so in
    the NCHW view their image index is past N and the store drops them) with a 2x1 cluster
    (stride 1, one group: the cases rowbox takes)."""
    N, C, H, W, K, R, S, stride, padding, dilation, groups, _, act = case
    g = _gen(7)
    x, w = torch.randn(N, C, H, W, generator=g), torch.randn(K, C, R, S, generator=g)
    b = torch.randn(K, generator=g)
    y = conv_op.convolve(x, w, b, stride, padding, dilation, groups, activation=act,
                         schedule=TF32_ROWBOX, precision="tf32")
    assert y.is_contiguous()
    ref = _act(F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(),
                        stride, padding, dilation, groups), act)
    assert _rel(y, ref) <= 1e-6


def test_tf32_conv1d_and_conv3d_nchw():
    """conv1d (2-d on a unit height) and conv3d (the depth folded into the NCDHW view's plane
    axis: [G, N, OD * P, Kg, Q]) on NCHW / NCDHW inputs: contiguous results."""
    g = _gen(3)
    x1, w1, b1 = torch.randn(2, 8, 131, generator=g), torch.randn(12, 8, 3, generator=g), \
        torch.randn(12, generator=g)
    y1 = conv_op.convolve(x1.unsqueeze(2), w1.unsqueeze(2), b1, (1, 2), (0, 1), 1, 1,
                          schedule=TF32, precision="tf32").squeeze(2)
    assert y1.is_contiguous()
    ref1 = F.conv1d(round_to_tf32(x1).double(), round_to_tf32(w1).double(), b1.double(), 2, 1)
    assert _rel(y1, ref1) <= 1e-6
    x3, w3 = torch.randn(2, 4, 5, 6, 7, generator=g), torch.randn(6, 4, 3, 2, 3, generator=g)
    b3 = torch.randn(6, generator=g)
    for x in (x3, x3.to(memory_format=torch.channels_last_3d)):
        y3 = conv_op.convolve(x, w3, b3, (2, 1, 1), 1, 1, 1, activation="relu",
                              schedule=TF32, precision="tf32")
        _layout(y3, x)
        ref3 = F.relu(F.conv3d(round_to_tf32(x3).double(), round_to_tf32(w3).double(),
                               b3.double(), (2, 1, 1), 1))
        assert _rel(y3, ref3) <= 1e-6


def test_fp32_split_and_bf16_nchw():
    """The fp32 bf16 split (3 terms, promoted) and bf16 on the direct epilogue write NCHW too;
    nchw=False keeps the channels-last result (the same values)."""
    g = _gen(11)
    x, w, b = torch.randn(2, 10, 5, 9, generator=g), torch.randn(12, 10, 3, 3, generator=g), \
        torch.randn(12, generator=g)
    ref = F.relu(F.conv2d(x.double(), w.double(), b.double(), 1, 1))
    y = conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu", schedule=SPLIT)
    assert y.is_contiguous() and y.dtype == torch.float32
    assert _rel(y, ref) <= 1e-4
    y_cl = conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu", schedule=SPLIT, nchw=False)
    assert y_cl.is_contiguous(memory_format=torch.channels_last) and not y_cl.is_contiguous()
    assert torch.equal(y, y_cl)
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    yb = conv_op.convolve(xb, wb, bb, 1, 1, 1, 1, schedule=BF16)
    assert yb.is_contiguous() and yb.dtype == torch.bfloat16
    refb = F.conv2d(xb.double(), wb.double(), bb.double(), 1, 1)
    assert _rel(yb, refb) <= 1e-2


@pytest.mark.parametrize("schedule", [
    ConvSchedule(bm=128, bn=64, bw=64, stages=2, halo=True, num_sms=2),
    ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)], ids=["halo", "rowbox"])
def test_bf16_per_image_tiles_nchw(schedule):
    """The 16-bit per-image tile producers (halo, rowbox): P = 3 rows in 2-row blocks, so
    every image's second block has a row past P, dropped by the NCHW view's P bound."""
    g = _gen(16)
    x = torch.randn(2, 16, 3, 66, generator=g).bfloat16()
    w = (torch.randn(24, 16, 3, 3, generator=g) / 12).bfloat16()
    b = torch.randn(24, generator=g).bfloat16()
    y = conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu", schedule=schedule)
    assert y.is_contiguous()
    ref = F.relu(F.conv2d(x.double(), w.double(), b.double(), 1, 1))
    assert _rel(y, ref) <= 1e-2
    assert torch.equal(y, conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu",
                                           schedule=schedule, nchw=False).contiguous())


def test_narrow_16bit_tma_epilogue_keeps_channels_last():
    """A 16-bit layer narrower than 33 columns runs the TMA-store epilogue (bw < 64): no NCHW
    store there, the result stays channels-last (what `_nchw_result` documents)."""
    g = _gen(12)
    x, w = torch.randn(1, 16, 6, 7, generator=g).bfloat16(), \
        torch.randn(16, 16, 3, 3, generator=g).bfloat16()
    s = conv_op.schedule_for(x, w, 1, 1, 1, 1)
    assert s.epilogue == "tma"
    y = conv_op.convolve(x, w, None, 1, 1, 1, 1, schedule=s)
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()


@pytest.mark.parametrize("stride,output_padding", [(1, 0), (2, 1)])
def test_conv_transpose_results_are_nchw(stride, output_padding):
    g = _gen(13)
    x, w, b = torch.randn(2, 6, 5, 7, generator=g), torch.randn(6, 4, 3, 3, generator=g), \
        torch.randn(4, generator=g)
    run = lambda *a: conv_op.convolve(*a, schedule=TF32, precision="tf32")   # noqa: E731
    y = conv_op.conv_transpose2d(x, w, b, stride, 1, output_padding, run=run)
    assert y.is_contiguous()
    ref = F.conv_transpose2d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(),
                             stride, 1, output_padding)
    assert _rel(y, ref) <= 1e-6
    x1, w1 = torch.randn(2, 6, 9, generator=g), torch.randn(6, 4, 3, generator=g)
    y1 = conv_op.conv_transpose1d(x1, w1, b, stride, 1, output_padding, run=run)
    assert y1.is_contiguous()
    ref1 = F.conv_transpose1d(round_to_tf32(x1).double(), round_to_tf32(w1).double(),
                              b.double(), stride, 1, output_padding)
    assert _rel(y1, ref1) <= 1e-6


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("n", [3, 1])
def test_rowbox_conv1d_folds_the_batch_into_rows(n, channels_last, monkeypatch):
    """conv1d on the rowbox producer (2-row tiles of one image): the N one-row images run as
    one image of N rows (`_fold_rows`: the kernel sees H = P = N, X [1, N, W, C], Out's rows
    K * Q apart in the NCHW result), so no tile's second row block lies past its image; odd
    N leaves the last tile half past the rows (dropped). Both layouts, bias and activation,
    the replayed launch."""
    sizes = []
    real = conv_op._Repeat.Run.__call__
    monkeypatch.setattr(conv_op._Repeat.Run, "__call__",
                        lambda self, X, Wt, view, b, sz, dev: sizes.append(sz) or
                        real(self, X, Wt, view, b, sz, dev))
    g = _gen(17 + n)
    x, w, b = torch.randn(n, 8, 70, generator=g), torch.randn(12, 8, 3, generator=g), \
        torch.randn(12, generator=g)
    x4 = x.unsqueeze(2)
    if channels_last:
        x4 = x4.to(memory_format=torch.channels_last)
    calls = [conv_op.convolve(x4, w.unsqueeze(2), b, 1, (0, 1), 1, 1, activation="tanh",
                              schedule=TF32_ROWBOX, precision="tf32").squeeze(2)
             for _ in range(2)]
    assert sizes and all(sz == (n, n, 1, 1) for sz in sizes), sizes
    ref = torch.tanh(F.conv1d(round_to_tf32(x).double(), round_to_tf32(w).double(),
                              b.double(), 1, 1))
    for y in calls:
        assert y.is_contiguous() != channels_last
        assert _rel(y, ref) <= 1e-6
    assert torch.equal(calls[0], calls[1])


def _count_replays(monkeypatch) -> list:
    """Record the nchw argument of every `_Repeat` hit (a prepared launch found for the call,
    which convolve then replays), as the call passed it to `_Repeat.find` (not read back from
    the entry, whose `args` is `_exact`'s form)."""
    hits: list = []
    real = conv_op._Repeat.find

    def find(x, w, b, args):
        hit = real(x, w, b, args)
        if type(hit) is conv_op._Repeat:
            hits.append(args[-1])
        return hit

    monkeypatch.setattr(conv_op._Repeat, "find", find)
    return hits


def test_replayed_call_keeps_the_nchw_layout(monkeypatch):
    """A repeated call (`_Repeat`: the prepared launch) writes the same NCHW result, and it was
    replayed (the first call prepares, the second is a hit)."""
    conv_op._REPEATS.clear()
    hits = _count_replays(monkeypatch)
    g = _gen(14)
    x, w, b = torch.randn(1, 8, 6, 66, generator=g), torch.randn(8, 8, 3, 3, generator=g), \
        torch.randn(8, generator=g)
    first = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=TF32, precision="tf32")
    assert hits == [], "the first call cannot be a replay"
    again = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=TF32, precision="tf32")
    assert hits == [None], f"the repeated call was not replayed (hits: {hits})"
    assert first.is_contiguous() and again.is_contiguous()
    assert torch.equal(first, again)


def test_nchw_is_part_of_the_replay_key(monkeypatch):
    """The same tensors with nchw=None (eager's: NCHW for an NCHW x) then nchw=False
    (channels-last always): the second call is no replay of the first (nchw is in `_Repeat`'s
    key), its layout differs, its values are the same."""
    conv_op._REPEATS.clear()
    hits = _count_replays(monkeypatch)
    g = _gen(15)
    x, w, b = torch.randn(1, 8, 6, 66, generator=g), torch.randn(8, 8, 3, 3, generator=g), \
        torch.randn(8, generator=g)
    first = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=TF32, precision="tf32", nchw=None)
    last = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=TF32, precision="tf32", nchw=False)
    assert hits == [], f"nchw=False replayed the nchw=None launch (hits: {hits})"
    assert first.is_contiguous(), first.stride()
    assert last.is_contiguous(memory_format=torch.channels_last) and \
        not last.is_contiguous(), last.stride()
    assert torch.equal(first, last)
    again = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=TF32, precision="tf32", nchw=False)
    assert hits == [False] and torch.equal(again, last) and \
        again.is_contiguous(memory_format=torch.channels_last)


def test_nchw_needs_the_direct_epilogue():
    s = ConvSchedule(bm=128, bn=64, bw=16, stages=2, epilogue="tma")
    with pytest.raises(ag.TraceError, match="epilogue='direct'"):
        verify.check(conv_kernel(nchw=True), geom=ConvGeometry(3, 3, cg_padded=64), s=s)


GEOM = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)


@pytest.mark.parametrize("which", ["tf32", "tf32_rowbox_cluster", "split", "bf16_3d"])
def test_nchw_kernel_verifies(which):
    """No errors; store.once (no element stored twice) and store.coords proven for the
    transposed store, and store.coverage too where the rows are the flattened N * OD * P
    ones (the (image, row) pair r // OP, r % OP seen as one row r:
    check_stores._merge_radix_dims) and for the rowbox + cluster schedule (the cluster rank
    inside the unit index m of m // q_tiles, m % q_tiles, and the image's block b of
    b // per_image, b % per_image, each pair one tile index: check_stores._pair_radix_dims;
    the kernel states Out.shape[2] == P for per-image tiles)."""
    from argus.compiler import lower_only

    if which == "tf32":
        k, geom, s = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True), GEOM, TF32
    elif which == "tf32_rowbox_cluster":
        k = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True)
        geom = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
        s = ConvSchedule(bm=128, bn=128, bk=32, bw=64, stages=4, cluster_m=2, rowbox=True)
    elif which == "split":
        k = conv_kernel(ag.bf16, ag.f32, True, nchw=True)
        geom = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=128)
        s = SPLIT
    else:                       # 3-d: the image index (n * OD + od) // (OD * P) = n
        k = conv_kernel(nchw=True)
        geom = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                            pad_d=1, dil_d=1)
        s = BF16
    report = verify.run(lower_only(k, geom=geom, s=s))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= {"store.coverage"}, \
        "\n".join(str(d) for d in report.unknowns)
    assert {"store.once", "store.coords", "wgmma.agree"} <= {d.code for d in report.proven}
    assert "store.coverage" in {d.code for d in report.proven}
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtypes", [("f32", "f32", "tf32"), ("bf16", "f32", None)],
                         ids=["tf32", "split"])
def test_nvrtc_builds_the_nchw_conv_for_sm90a(dtypes, tmp_path, monkeypatch):
    """schedule_for's tf32 / split schedules with the NCHW store: compiles for sm_90a without
    spills, and the store is scalar st.global.f32 (one element per pixel of a channel: 8 lanes
    write 8 consecutive floats), no paired v2 stores of the channels-last epilogue."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    idt, odt, precision = dtypes
    x = torch.randn(2, 64, 1, 300)
    w = torch.randn(128, 64, 1, 3)
    s = conv_op.schedule_for(x, w, 1, (0, 1), 1, 1, precision=precision)
    geom = ConvGeometry(1, 3, 1, 1, 0, 1, 1, 1, groups=1, cg_padded=64)
    kernel = conv_kernel(getattr(ag, idt), getattr(ag, odt), True, precision=precision,
                         nchw=True)
    source = codegen.render(lower_only(kernel, geom=geom, s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    assert "st.global.f32" in binary.ptx and "st.global.v2.f32" not in binary.ptx
    assert not binary.resource(source.name).spills


def test_compose_conv_step_launches_no_transpose(monkeypatch):
    """compose's conv step (tf32 and the strict split) on an NCHW input: the result is the
    kernel's own NCHW buffer; no Argus transpose runs after the convolution (the split's
    input packing transposes x once before it, as before)."""
    from argus.compose import conv as compose_conv
    from argus.compose.launch import transpose
    from argus.compose.runtime import Program

    model = torch.nn.Conv1d(8, 12, 3, padding=1)
    x = torch.randn(2, 8, 70, generator=_gen(15))
    launched = []
    real = compose_conv._run

    def record(kernel, args, **kw):
        launched.append(kernel)
        return real(kernel, args, **kw)

    monkeypatch.setattr(compose_conv, "_run", record)
    with torch.no_grad():
        ref = model.double()(x.double())
        model.float()
        for run, bound, transposes in ((compose_conv.ConvRun(precision="tf32"), 2e-3, 0),
                                       (compose_conv.ConvRun(), 1e-5, 1)):
            launched.clear()
            prog = Program.build(model, [x], schedules={"conv": run})
            y = prog.run(model, [x])
            assert y.is_contiguous() and _rel(y, ref) <= bound
            assert sum(k is transpose for k in launched) == transposes, \
                (run, [getattr(k, "name", k) for k in launched])


def _wide_layer(k=64, dtype=torch.bfloat16, last=True, groups=1):
    x = torch.empty(8, 64, 128, 128, dtype=dtype, device="meta")
    if last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.empty(k, 64 // groups, 3, 3, dtype=dtype, device="meta")
    return conv_op.schedule_for(x, w, 1, 1, 1, groups)


def test_wide_rowbox_layers_of_a_channels_last_x_take_the_tma_epilogue():
    """schedule_for's wide TMA-store rule (stop 50, docs/perf/conv.md "The TMA-store epilogue
    on wide layers"): a channels-last x's wide (bw 64) 16-bit rowbox layer, 16-byte channel
    rows (Kg % 8 == 0), stores through the TMA at 6 stages, no cluster, and its ring and
    staging fit a CTA's shared memory; an NCHW x (its result written channels-first from
    registers), odd K, groups and fp32 keep the direct epilogue."""
    from argus.compiler import lower_only
    from argus.target.limits import SMEM_PER_CTA_OPTIN

    for k, dtype in [(64, torch.bfloat16), (128, torch.bfloat16), (64, torch.float16)]:
        s = _wide_layer(k, dtype)
        assert (s.epilogue, s.bw, s.bm, s.stages, s.cluster_m, s.rowbox) == \
            ("tma", 64, 128, 6, 1, True), (k, dtype, s)
        ring = s.stages * (s.bm + s.bn) * s.bk * 2 + s.bm * s.bn * 2
        assert ring <= SMEM_PER_CTA_OPTIN - 2048, (k, ring)
        # the lowering's shared-memory plan takes it (the GPU ran it: docs/perf/conv.md)
        lower_only(conv_kernel(ag.bf16, ag.bf16, False), geom=ConvGeometry(3, 3, 1, 1, 1, 1,
                   cg_padded=64), s=s)
    assert _wide_layer(last=False).epilogue == "direct"           # NCHW x: channels-first
    assert _wide_layer(k=36).epilogue == "direct"                 # 72-byte channel rows
    assert _wide_layer(groups=2).epilogue == "direct"             # no rowbox
    assert _wide_layer(dtype=torch.float32).epilogue == "direct"  # the fp32 split
