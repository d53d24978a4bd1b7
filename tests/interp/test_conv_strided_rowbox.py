"""The strided rowbox (issue 17): ConvSchedule.rowbox on a convolution with a stride, the A
tile one TMA box of the [N, H, W, C] input read with the tensor map's element strides
(ag.tma.load(elem_strides=), TmaLoad.elem_strides, cuTensorMapEncodeTiled's elementStrides).

Checked here: the numpy interpreter (which reads every stride-th element of the traversed box)
against torch float64 F.conv2d on small strided cases (stride 2 and 3, per-axis, padding,
dilation, 1x1, few channels with packed taps, bf16, the fp32 split and tf32); the verifier
(zero findings, the receptive-field assertion proven); the opt-in in schedule_for; the DSL's,
the kernel's and the tensor-map check's refusals; the launch ABI (a strided box is its own
tensor map, the unstrided kernels' ABI unchanged)."""

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.errors import LaunchError
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op
from argus.runtime.tma import check_tensor_map

ROWBOX = ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)
ROWBOX_NARROW = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", rowbox=True,
                             cluster_m=2, num_sms=4)

# (N, C, H, W, K, R, S, stride, padding, dilation, groups)
CASES = [
    (2, 16, 7, 9, 24, 3, 3, 2, 1, 1, 1),            # stride 2, W odd (padded copy), 2 images
    (1, 8, 10, 11, 16, 3, 3, 3, 1, 1, 1),           # stride 3
    (1, 8, 12, 12, 8, 3, 3, (2, 1), (0, 1), (1, 2), 1),   # per-axis stride / padding / dil
    (1, 8, 13, 12, 8, 3, 3, (1, 3), (2, 1), (2, 1), 1),   # stride along W only, dil_h 2
    (2, 12, 9, 8, 8, 1, 1, 2, 0, 1, 1),             # 1x1 downsample, C not a multiple of 8
    (2, 72, 6, 7, 16, 3, 3, 2, 1, 1, 1),            # C past one 64-channel slice
]
# a stem in small: 3 channels, 7x7 / 2, padding 3 (schedule_for packs 4 taps a step)
STEM = (2, 3, 20, 22, 16, 7, 7, 2, 3, 1, 1)


def _operands(case, dtype=torch.bfloat16, seed=3):
    N, C, H, W, K, R, S, *_ = case
    g = torch.Generator().manual_seed(seed + sum(case[:7]))
    x = torch.randn(N, C, H, W, generator=g).to(dtype)
    w = torch.randn(K, C, R, S, generator=g).to(dtype)
    return x, w


def _rel(y, x, w, case):
    stride, padding, dilation, groups = case[7:]
    ref = F.conv2d(x.double(), w.double(), None, stride, padding, dilation, groups)
    assert y.shape == ref.shape
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [ROWBOX, ROWBOX_NARROW], ids=["direct", "tma_bw8_cluster"])
def test_strided_rowbox_matches_float64(case, schedule):
    x, w = _operands(case)
    y = conv_op.conv2d_interpret(x, w, None, *case[7:], schedule=schedule)
    # bf16 output rounding (2^-8) of fp32 sums of exact products
    assert _rel(y, x, w, case) <= 1e-2


def test_strided_rowbox_is_not_the_unstrided_box():
    """The same kernel with the element strides dropped (a box of consecutive pixels) is far
    off: the cases above check the strides, not a box that happens to agree."""
    from argus.kernels import conv as K
    case = CASES[0]
    x, w = _operands(case)
    right = conv_op.conv2d_interpret(x, w, None, *case[7:], schedule=ROWBOX)
    assert _rel(right, x, w, case) <= 1e-2
    keep = (conv_op.conv_kernel, K._rowbox_strides)
    try:
        conv_op.conv_kernel = K.conv_kernel.__wrapped__
        K._rowbox_strides = lambda geom: None
        wrong = conv_op.conv2d_interpret(x, w, None, *case[7:], schedule=ROWBOX)
    finally:
        conv_op.conv_kernel, K._rowbox_strides = keep
    assert _rel(wrong, x, w, case) > 0.1


@pytest.mark.parametrize("case", [CASES[0], CASES[2], STEM], ids=lambda c: "x".join(map(str, c)))
def test_schedule_for_strided_rowbox_matches_float64(case):
    """schedule_for(strided_rowbox=True)'s own schedules (the stem's packed taps, bw 8 / 16
    tiles with the TMA-store epilogue and the 2x1 cluster, the small-image rule's bm 64)."""
    x, w = _operands(case)
    s = conv_op.schedule_for(x, w, *case[7:], strided_rowbox=True)
    assert s.rowbox
    if case is STEM:
        assert s.taps_per_slice > 1
    y = conv_op.conv2d_interpret(x, w, None, *case[7:], schedule=s)
    assert _rel(y, x, w, case) <= 1e-2


def test_fp32_split_and_tf32_on_the_strided_rowbox():
    """fp32 inputs: the bf16 split (promoted partials, fp32 output) and tf32 (fp32 operands
    read as tf32: fp32 boxes with element strides 2)."""
    case = CASES[0]
    x, w = _operands(case, torch.float32)
    split = conv_op.schedule_for(x, w, *case[7:], strided_rowbox=True)
    assert split.rowbox and split.promote
    y = conv_op.conv2d_interpret(x, w, None, *case[7:], schedule=split)
    assert y.dtype == torch.float32 and _rel(y, x, w, case) <= 1e-5
    tf32 = conv_op.schedule_for(x, w, *case[7:], strided_rowbox=True, precision="tf32")
    assert tf32.rowbox                 # (16 channels: 2 packed taps of bk 16 a step)
    y = conv_op.conv2d_interpret(x, w, None, *case[7:], schedule=tf32, precision="tf32")
    assert 1e-6 <= _rel(y, x, w, case) <= 5e-3


def test_schedule_for_default_16bit_only_without_cluster():
    x, w = _operands(CASES[0])
    # the default for 16-bit inputs (measured on the H200), without the 2x1 cluster
    s = conv_op.schedule_for(x, w, 2, 1, 1, 1)
    assert s.rowbox and s.cluster_m == 1
    assert not conv_op.schedule_for(x, w, 2, 1, 1, 1, strided_rowbox=False).rowbox
    assert not conv_op.schedule_for(x, w, 2, 1, 1, 1, rowbox=False).rowbox
    # unstrided rowbox layers run without it too (since stop 50: the UNet layers); per-row
    # boxes keep it
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=1).cluster_m == 1
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1, rowbox=False, taps_per_slice=1).cluster_m == 2
    # fp32 (the bf16 split) and tf32: not measured with it, off unless asked
    xf, wf = x.float(), w.float()
    assert not conv_op.schedule_for(xf, wf, 2, 1, 1, 1).rowbox
    assert not conv_op.schedule_for(xf, wf, 2, 1, 1, 1, precision="tf32").rowbox
    assert conv_op.schedule_for(xf, wf, 2, 1, 1, 1, strided_rowbox=True).rowbox
    assert conv_op.schedule_for(x, w, 2, 1, 1, 1, strided_rowbox=True).rowbox
    assert not conv_op.schedule_for(x, w, 2, 1, 1, 1, strided_rowbox=True, rowbox=False).rowbox
    # grouped, 3-d and strides past the TMA unit's 8 keep the per-row boxes
    assert not conv_op.schedule_for(x, torch.randn(24, 8, 3, 3).bfloat16(), 2, 1, 1, 2,
                                    strided_rowbox=True).rowbox
    x3, w3 = torch.randn(1, 8, 4, 9, 9).bfloat16(), torch.randn(8, 8, 3, 3, 3).bfloat16()
    assert not conv_op.schedule_for(x3, w3, 2, 1, 1, 1, strided_rowbox=True).rowbox
    assert not conv_op.schedule_for(torch.randn(1, 8, 40, 40).bfloat16(), w[:, :8], 9, 1, 1, 1,
                                    strided_rowbox=True).rowbox
    assert conv_op.strided_rowbox_fits(2, 2, 2, 64) and conv_op.strided_rowbox_fits(2, 2, 2, 128)
    assert not conv_op.strided_rowbox_fits(3, 3, 2, 128)     # 384 columns traversed
    assert not conv_op.strided_rowbox_fits(9, 1, 2, 64)      # an element stride past 8


def test_refusals():
    x, w = _operands(CASES[0])
    # groups: still refused (the plane axis of the grouped view is not a dim of [N, H, W, C])
    with pytest.raises(LaunchError, match="rowbox"):
        conv_op.conv2d_interpret(x, torch.randn(24, 8, 3, 3).bfloat16(), None, 2, 1, 1, 2,
                                 schedule=ROWBOX)
    # a box traversing more than 256 columns: bw 64 at stride_w 5
    with pytest.raises(ag.TraceError, match="256"):
        verify.check(conv_kernel(), geom=ConvGeometry(3, 3, 1, 5, 1, 1, 1, 1, 1, 64), s=ROWBOX)
    assert not conv_op.schedule_for(torch.randn(1, 8, 9, 700).bfloat16(), w[:, :8], (1, 5), 1,
                                    1, 1, strided_rowbox=True).rowbox


def test_tensor_map_check_encodes_box_times_stride():
    """check_tensor_map: boxDim = landed elements x stride (the driver's "to load N elements
    along dim i, boxDim[i] must be set to N * elementStrides[i]"), strides innermost first,
    the bytes landing what the view holds; the refusals name the fix."""
    spec = check_tensor_map((2, 20, 22, 16), (20 * 22 * 16, 22 * 16, 16, 1), dtype="bf16",
                            address=0, box=(1, 2, 64, 16), swizzle_bytes=32,
                            elem_strides=(1, 2, 2, 1))
    assert spec.box == (16, 128, 4, 1) and spec.elem_strides == (1, 2, 2, 1)
    assert spec.box_bytes == 2 * 64 * 16 * 2
    plain = check_tensor_map((2, 20, 22, 16), (20 * 22 * 16, 22 * 16, 16, 1), dtype="bf16",
                             address=0, box=(1, 2, 64, 16), swizzle_bytes=32)
    assert plain.box == (16, 64, 2, 1) and plain.elem_strides == ()
    for strides, match in (((1, 2, 2, 2), "innermost"), ((1, 9, 1, 1), "1, 8"),
                           ((1, 2, 5, 1), "traverses")):
        with pytest.raises(LaunchError, match=match):
            check_tensor_map((2, 20, 22, 16), (20 * 22 * 16, 22 * 16, 16, 1), dtype="bf16",
                             address=0, box=(1, 2, 64, 16), swizzle_bytes=32,
                             elem_strides=strides)


def test_dsl_refuses_bad_element_strides(monkeypatch):
    """ag.tma.load(elem_strides=): one int in [1, 8] per dim, the innermost 1, box x stride
    at most 256 (traced through the conv kernel with its strides replaced)."""
    from argus.compiler import lower_only
    from argus.kernels import conv as K
    geom = ConvGeometry(3, 3, 2, 2, 1, 1, 1, 1, groups=1, cg_padded=64)
    for bad in ((1, 2, 2, 2), (1, 9, 1, 1), (1, 2, 8, 1), (1, 2, 2)):
        monkeypatch.setattr(K, "_rowbox_strides", lambda g, bad=bad: bad)
        with pytest.raises(ag.TraceError, match="elem_strides"):
            lower_only(K.conv_kernel.__wrapped__(), geom=geom, s=ROWBOX)
    monkeypatch.undo()
    lower_only(K.conv_kernel.__wrapped__(), geom=geom, s=ROWBOX)     # the right ones trace


STRIDED_GEOMS = [
    ConvGeometry(3, 3, 2, 2, 1, 1, 1, 1, groups=1, cg_padded=128),
    ConvGeometry(3, 3, 3, 2, 1, 0, 1, 2, groups=1, cg_padded=64),   # stride 3 x 2, dil_w 2
]


@pytest.mark.parametrize("geom", STRIDED_GEOMS, ids=["s2_pad1", "s3x2_dilw2"])
@pytest.mark.parametrize("schedule", [ROWBOX, ROWBOX_NARROW], ids=["direct", "tma_bw8_cluster"])
def test_strided_rowbox_verifies_with_zero_findings(geom, schedule):
    """Every obligation proven (no error, no unknown): store.coverage and store.once of the
    per-image row blocks, wgmma.agree / k-once of the (tap, channel) pairs, and the
    receptive-field assertion over the strided box's elements (the model places element i
    of a dim at coords + i * stride)."""
    found = verify.check(conv_kernel(), include_proven=True, timeout_ms=20000, geom=geom,
                         s=schedule)
    bad = [str(d) for d in found if d.severity != "note"]
    assert bad == [], bad
    proven = {d.code for d in found}
    assert {"store.coverage", "store.once", "wgmma.agree", "wgmma.k-once"} <= proven, proven
    assert any(d.code == "tag.assert" and "receptive field" in str(d) for d in found)


def test_abi_strided_map_and_unstrided_unchanged():
    """The strided A box is a tensor map of its own with the element strides in the launch
    ABI; a stride-1 rowbox kernel's ABI carries none (its CUDA is what it was)."""
    from argus.compiler import compile_kernel
    from argus.runtime import nvrtc_available
    if not nvrtc_available():
        pytest.skip("no NVRTC")
    geom = STRIDED_GEOMS[0]
    src = compile_kernel(conv_kernel(), verify=False, geom=geom, s=ROWBOX).source
    maps = [a for a in src.abi if a.kind == "tmap"]
    assert [a.elem_strides for a in maps if a.tensor == "X"] == [(1, 2, 2, 1)]
    assert all(a.elem_strides == () for a in maps if a.tensor != "X")
    flat = compile_kernel(conv_kernel(), verify=False, s=ROWBOX,
                          geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1,
                                            cg_padded=128)).source
    assert all(a.elem_strides == () for a in flat.abi if a.kind == "tmap")
