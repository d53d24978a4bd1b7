"""The implicit-GEMM convolution's staged NCHW epilogues (ConvSchedule(nchw_epilogue='tma' or
'staged')): each consumer warpgroup's accumulator is written transposed into 128-byte swizzled
shared memory (ag.store_shared(transposed=True): [channels][32 f32 / 64 16-bit pixels] atoms)
and copied out by TMA stores of NCHW boxes ('tma'), or read back (ag.load_shared(transposed=
True)) so that a warp holds 32 consecutive pixels of a channel and stored transposed, one
128-byte run of a channel row a warp store ('staged', fp32: no alignment condition), instead
of being stored transposed from registers.

The numpy interpreter against torch float64 on odd shapes (pixels not a multiple of the tile,
partial channel tiles, batch > 1, groups, 3-d, the conv1d batch fold, bias and activations,
tf32 / the fp32 bf16 split / bf16), equal to the register epilogue bit for bit; the fallback
to the register store where no tensor map can address the result (rows not 16-byte aligned);
schedule_for's ring depth making room for the stage; the verifier (no errors, store.once /
store.coords / store.coverage proven as for the register store; 'staged': sync.exchange
proven, and reported when the barrier between the stage's writes and reads is removed);
NVRTC for sm_90a (no spills; 'tma': no st.global of the result, bulk tensor stores;
'staged': 64 scalar st.global a thread, each warp's one contiguous run)."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available
from tests.interp.test_conv_nchw_epilogue import _act, _gen, _rel  # the register store's file

TF32 = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2, nchw_epilogue="tma")
TF32_STAGED = dataclasses.replace(TF32, nchw_epilogue="staged")
TF32_ROWBOX = ConvSchedule(bm=128, bn=64, bk=32, bw=64, stages=2, rowbox=True, cluster_m=2,
                           num_sms=4, nchw_epilogue="tma")
SPLIT = ConvSchedule(bm=128, bn=64, bk=64, bw=64, stages=2, promote=True, nchw_epilogue="tma")
BF16 = ConvSchedule(bm=128, bn=64, bk=64, bw=64, stages=2, nchw_epilogue="tma")


def _registers(s):
    return dataclasses.replace(s, nchw_epilogue="registers")


@pytest.fixture
def epilogues(monkeypatch):
    """The nchw_epilogue of every launch convolve makes (`_Repeat.Run`)."""
    conv_op._REPEATS.clear()        # a replayed launch would not pass through Run
    seen: list = []
    real = conv_op._Repeat.Run.__call__

    def call(self, *a):
        seen.append(self.schedule.nchw_epilogue if self.nchw else "channels-last")
        FOLDS.append(self.fold)
        return real(self, *a)
    FOLDS.clear()
    monkeypatch.setattr(conv_op._Repeat.Run, "__call__", call)
    return seen


FOLDS: list = []        # each launch's `fold` (the conv1d batch fold), beside `epilogues`


# (N, C, H, W, K, R, S, stride, padding, dilation, groups, bias, activation); every Q a
# multiple of 4 (16-byte fp32 rows: the TMA store applies)
CASES_2D = [
    (1, 8, 6, 8, 8, 3, 3, 1, 1, 1, 1, True, "relu"),           # Q = 8: most of a tile past Q
    (2, 16, 7, 7, 24, 3, 3, 2, 1, 1, 1, True, "none"),         # stride 2, Q = 4, 2 images
    (2, 8, 3, 70, 72, 3, 3, 1, (1, 2), 1, 1, True, "sigmoid"),  # Q = 72 > 64, K = 72 > bn
    (3, 6, 5, 14, 5, 3, 3, 1, 1, 2, 1, True, "none"),          # K = 5: a partial channel tile
    (1, 40, 9, 14, 32, 5, 5, 2, 2, 1, 2, True, "gelu_tanh"),   # grouped, Cg = 20, Q = 7 -> no
]


@pytest.mark.parametrize("epilogue", ["tma", "staged"])
@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: "x".join(map(str, c[:7])))
def test_tf32_conv2d_values_and_equal_to_the_register_store(case, epilogue, epilogues):
    """Both staged epilogues against float64 and the register store; the last case (Q = 7,
    28-byte rows) runs 'staged' only ('tma' falls back there: the next test)."""
    if epilogue == "tma" and case is CASES_2D[4]:
        pytest.skip("Q = 7: no tensor map (test_unaligned_rows_fall_back_to_the_register_store)")
    N, C, H, W, K, R, S, stride, padding, dilation, groups, bias, act = case
    g = _gen(sum(case[:7]))
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C // groups, R, S, generator=g)
    b = torch.randn(K, generator=g) if bias else None
    y = conv_op.convolve(x, w, b, stride, padding, dilation, groups, activation=act,
                         schedule=dataclasses.replace(TF32, nchw_epilogue=epilogue),
                         precision="tf32")
    assert epilogues == [epilogue], epilogues
    assert y.is_contiguous()
    ref = _act(F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(),
                        None if b is None else b.double(), stride, padding, dilation, groups),
               act)
    assert _rel(y, ref) <= 1e-6
    again = conv_op.convolve(x, w, b, stride, padding, dilation, groups, activation=act,
                             schedule=_registers(TF32), precision="tf32")
    assert epilogues[-1] == "registers" and torch.equal(y, again)


def test_unaligned_rows_fall_back_to_the_register_store(epilogues):
    """Q = 7 fp32 (28-byte channel rows): no tensor map addresses them, so convolve runs the
    register store (same values); a channels-last result ignores the field."""
    N, C, H, W, K, R, S, stride, padding, dilation, groups, bias, act = CASES_2D[4]
    g = _gen(5)
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C // groups, R, S, generator=g)
    b = torch.randn(K, generator=g)
    y = conv_op.convolve(x, w, b, stride, padding, dilation, groups, activation=act,
                         schedule=TF32, precision="tf32")
    assert y.shape[-1] == 7 and epilogues == ["registers"], epilogues
    ref = _act(F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(),
                        stride, padding, dilation, groups), act)
    assert y.is_contiguous() and _rel(y, ref) <= 1e-6
    y_cl = conv_op.convolve(x.to(memory_format=torch.channels_last), w, b, stride, padding,
                            dilation, groups, activation=act, schedule=TF32, precision="tf32")
    assert epilogues[-1] == "channels-last" and torch.equal(y_cl, y)


def test_tf32_conv1d_batch_fold_and_conv3d(epilogues):
    """conv1d on the rowbox producer with a 2x1 cluster (`_fold_rows`: N one-row images as
    one image of N rows, the Out view [G, 1, N, Kg, Q] with rows K * Q apart; odd N leaves
    the last tile's second row past N, dropped by the box's bound) and conv3d (NCDHW: the
    depth folded into the view's plane axis), with biases and activations."""
    g = _gen(3)
    x1, w1, b1 = torch.randn(3, 8, 132, generator=g), torch.randn(12, 8, 3, generator=g), \
        torch.randn(12, generator=g)
    y1 = conv_op.convolve(x1.unsqueeze(2), w1.unsqueeze(2), b1, 1, (0, 1), 1, 1,
                          activation="tanh", schedule=TF32_ROWBOX, precision="tf32").squeeze(2)
    assert y1.shape[-1] == 132 and y1.is_contiguous()
    ref1 = torch.tanh(F.conv1d(round_to_tf32(x1).double(), round_to_tf32(w1).double(),
                               b1.double(), 1, 1))
    assert _rel(y1, ref1) <= 1e-6
    x3, w3 = torch.randn(2, 4, 5, 6, 8, generator=g), torch.randn(6, 4, 3, 2, 3, generator=g)
    b3 = torch.randn(6, generator=g)
    y3 = conv_op.convolve(x3, w3, b3, (2, 1, 1), 1, 1, 1, activation="relu", schedule=TF32,
                          precision="tf32")
    assert y3.shape[-1] == 8 and y3.is_contiguous()
    ref3 = F.relu(F.conv3d(round_to_tf32(x3).double(), round_to_tf32(w3).double(),
                           b3.double(), (2, 1, 1), 1))
    assert _rel(y3, ref3) <= 1e-6
    assert epilogues == ["tma", "tma"] and FOLDS == [True, False], (epilogues, FOLDS)


def test_fp32_split_and_bf16(epilogues):
    """The fp32 bf16 split (an fp32 output: 32-pixel atoms) and bf16 (one 64-pixel atom a
    warpgroup), each equal to its register store; the split on 'staged' too, and a 16-bit
    result on 'staged' falls back to the register store (the read-back is 32-bit)."""
    g = _gen(11)
    x, w, b = torch.randn(2, 10, 5, 12, generator=g), torch.randn(12, 10, 3, 3, generator=g), \
        torch.randn(12, generator=g)
    ref = F.relu(F.conv2d(x.double(), w.double(), b.double(), 1, 1))
    y = conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu", schedule=SPLIT)
    assert y.is_contiguous() and _rel(y, ref) <= 1e-4
    assert torch.equal(y, conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu",
                                           schedule=_registers(SPLIT)))
    xb, wb, bb = torch.randn(2, 16, 3, 72, generator=g).bfloat16(), \
        (torch.randn(24, 16, 3, 3, generator=g) / 12).bfloat16(), \
        torch.randn(24, generator=g).bfloat16()
    yb = conv_op.convolve(xb, wb, bb, 1, 1, 1, 1, schedule=BF16)
    refb = F.conv2d(xb.double(), wb.double(), bb.double(), 1, 1)
    assert yb.is_contiguous() and yb.dtype == torch.bfloat16 and _rel(yb, refb) <= 1e-2
    assert torch.equal(yb, conv_op.convolve(xb, wb, bb, 1, 1, 1, 1,
                                            schedule=_registers(BF16)))
    assert epilogues == ["tma", "registers", "tma", "registers"], epilogues
    staged = conv_op.convolve(x, w, b, 1, 1, 1, 1, activation="relu",
                              schedule=dataclasses.replace(SPLIT, nchw_epilogue="staged"))
    assert torch.equal(staged, y)
    staged_b = conv_op.convolve(xb, wb, bb, 1, 1, 1, 1,
                                schedule=dataclasses.replace(BF16, nchw_epilogue="staged"))
    assert torch.equal(staged_b, yb)
    assert epilogues[4:] == ["staged", "registers"], epilogues


def test_schedule_field_and_ring_depth():
    with pytest.raises(ValueError, match="nchw_epilogue='smem' is not one of"):
        ConvSchedule(nchw_epilogue="smem")
    x, w = torch.randn(2, 64, 1, 300), torch.randn(128, 64, 1, 3)
    plain = conv_op.schedule_for(x, w, 1, 0, 1, 1, precision="tf32")
    staged = conv_op.schedule_for(x, w, 1, 0, 1, 1, precision="tf32", nchw_epilogue="tma")
    assert plain.nchw_epilogue == conv_op.NCHW_EPILOGUE == "registers"   # opt-in
    assert staged.nchw_epilogue == "tma"
    # 2 x [128, 64] f32 of stage (64 KiB) beside 32 KiB a ring stage: 4 stages, not 6
    assert (plain.stages, staged.stages) == (6, 4)
    assert staged.stages * (128 + 128) * 32 * 4 + conv_op.nchw_staging_bytes(
        "tma", 128, 4) <= conv_op._SMEM_BUDGET


GEOM = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)


@pytest.mark.parametrize("which", ["tf32", "tf32_rowbox_cluster", "split", "bf16_3d",
                                   "tf32_staged", "split_staged"])
def test_nchw_tma_kernel_verifies(which):
    """No errors; store.once, store.coords (the staged transpose: view element (r, c) is
    accumulator element ((r // bn) * W + c, r % bn)) and store.coverage proven, as for the
    register store; the rowbox + cluster schedule leaves store.coverage unknown there too."""
    from argus.compiler import lower_only

    if which == "tf32":
        k, geom, s = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True), GEOM, TF32
    elif which == "tf32_rowbox_cluster":
        k = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True)
        geom = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
        s = ConvSchedule(bm=128, bn=128, bk=32, bw=64, stages=4, cluster_m=2, rowbox=True,
                         nchw_epilogue="tma")
    elif which == "split":
        k = conv_kernel(ag.bf16, ag.f32, True, nchw=True)
        geom = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=128)
        s = SPLIT
    elif which == "tf32_staged":
        k, geom, s = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True), GEOM, \
            TF32_STAGED
    elif which == "split_staged":
        k = conv_kernel(ag.bf16, ag.f32, True, nchw=True)
        geom = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=128)
        s = dataclasses.replace(SPLIT, nchw_epilogue="staged")
    else:
        k = conv_kernel(nchw=True)
        geom = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                            pad_d=1, dil_d=1)
        s = BF16
    report = verify.run(lower_only(k, geom=geom, s=s))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {d.code for d in report.proven}
    assert {"store.once", "store.coords", "wgmma.agree"} <= proven
    assert ({"sync.exchange"} if "staged" in which else
            {"proxy.fence", "sync.store-read", "tma.box"}) <= proven
    if which == "tf32_rowbox_cluster":
        assert {d.code for d in report.unknowns} <= {"store.coverage"}
    else:
        assert "store.coverage" in proven
        assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtypes", [("f32", "f32", "tf32"), ("bf16", "f32", None)],
                         ids=["tf32", "split"])
def test_nvrtc_builds_the_staged_nchw_conv_for_sm90a(dtypes, tmp_path, monkeypatch):
    """schedule_for's tf32 / split schedules with nchw_epilogue='tma': compiles for sm_90a
    without spills; the result leaves by bulk tensor stores (5-d: the NCHW view), no
    st.global.f32; the stage is written by one st.shared.f32 per accumulator register."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    idt, odt, precision = dtypes
    x = torch.randn(2, 64, 1, 300)
    w = torch.randn(128, 64, 1, 3)
    s = conv_op.schedule_for(x, w, 1, (0, 1), 1, 1, precision=precision, nchw_epilogue="tma")
    geom = ConvGeometry(1, 3, 1, 1, 0, 1, 1, 1, groups=1, cg_padded=64)
    kernel = conv_kernel(getattr(ag, idt), getattr(ag, odt), True, precision=precision,
                         nchw=True)
    source = codegen.render(lower_only(kernel, geom=geom, s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    assert "st.global.f32" not in binary.ptx and "st.global.v2.f32" not in binary.ptx
    assert "cp.async.bulk.tensor.5d.global.shared" in binary.ptx
    # [64 pixels, 128 channels] f32 a warpgroup: 64 registers a thread
    assert binary.ptx.count("st.shared.f32") >= 64
    assert not binary.resource(source.name).spills


def test_staged_read_back_needs_its_barriers():
    """Seeded: the group barrier lower/sync.py puts between the stage's transposed writes and
    the read-back (read after write), or the one before the next tile's writes (write after
    read), removed: the verifier reports sync.exchange."""
    from argus.compiler import lower_only
    from argus.ir import ops as O
    from argus.ir.core import Region, _region_names

    k = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True)
    kernel = lower_only(k, geom=GEOM, s=TF32_STAGED)
    notes = [op.note for op in kernel.walk() if isinstance(op, O.GroupBarrier)]
    assert "the load_shared reads other threads' shared writes" in notes, notes
    for note in ("the load_shared reads other threads' shared writes",
                 "every thread's gather read the buffer before it is rewritten"):
        def drop(region, note=note):
            ops = []
            for op in region.ops:
                if isinstance(op, O.GroupBarrier) and op.note == note:
                    continue
                subs = {n: drop(getattr(op, n)) for n in _region_names(type(op))
                        if isinstance(getattr(op, n), Region)}
                ops.append(op.replace(**subs) if subs else op)
            return Region(tuple(ops))
        report = verify.run(dataclasses.replace(kernel, body=drop(kernel.body)))
        assert any(d.code == "sync.exchange" for d in report.errors), \
            (note, [str(d) for d in report.errors])


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_staged_read_back(tmp_path, monkeypatch):
    """'staged' on schedule_for's tf32 schedule: no spills; the stage is read back as a
    vblocks(1, 32) tile (a warp = 32 consecutive pixels of one channel: lane-contiguous
    addresses in the rendered store) and the result leaves by 64 scalar st.global.f32 a
    thread, no bulk store."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    x, w = torch.randn(2, 64, 1, 300), torch.randn(128, 64, 1, 3)
    s = conv_op.schedule_for(x, w, 1, (0, 1), 1, 1, precision="tf32", nchw_epilogue="staged")
    geom = ConvGeometry(1, 3, 1, 1, 0, 1, 1, 1, groups=1, cg_padded=64)
    kernel = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True)
    source = codegen.render(lower_only(kernel, geom=geom, s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "(gtid & 31)" in source.text      # the pixel index of a store: the lane
    assert binary.ptx.count("st.global.f32") == 64
    assert "cp.async.bulk.tensor.5d.global.shared" not in binary.ptx
    assert not binary.resource(source.name).spills


@pytest.mark.parametrize("epilogue", ["tma", "staged"])
@pytest.mark.parametrize("bn,K", [(16, 16), (16, 5), (32, 24)])
def test_narrow_channel_tiles_stage_too(bn, K, epilogue, epilogues):
    """The tf32 schedule's bn follows the output channels since 2846380 (ops.conv.tf32_bn: 16
    or 32 for few channels): the staged epilogues' boxes at those widths, against float64 and
    the register store."""
    g = _gen(bn + K)
    x = torch.randn(2, 8, 6, 12, generator=g)
    w = torch.randn(K, 8, 3, 3, generator=g)
    b = torch.randn(K, generator=g)
    s = dataclasses.replace(TF32, bn=bn, nchw_epilogue=epilogue)
    y = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=s, precision="tf32")
    assert epilogues == [epilogue], epilogues
    ref = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(), 1, 1)
    assert y.is_contiguous() and _rel(y, ref) <= 1e-6
    again = conv_op.convolve(x, w, b, 1, 1, 1, 1, schedule=_registers(s), precision="tf32")
    assert epilogues[-1] == "registers" and torch.equal(y, again)
