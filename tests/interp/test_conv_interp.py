"""argus.ops.conv2d's implicit-GEMM kernel in the numpy interpreter against torch float64
F.conv2d, at small shapes covering padding, stride, dilation, groups, bias, activations, both
epilogues, channels-last input, fp16 and the fp32 bf16 split; plus the verifier (zero findings)
and the op's input checks."""

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.errors import LaunchError
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op

DIRECT = ConvSchedule(bm=128, bn=64, bw=64, stages=2)
PROMOTED = ConvSchedule(bm=128, bn=64, bw=64, stages=2, promote=True)   # fp32 split's form
NARROW = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma")
# 2x1 clusters multicasting the weight tile; few SMs, so CTAs walk several units and a cluster
# pairs a last tile with one past the end
CLUSTER = ConvSchedule(bm=128, bn=64, bw=64, stages=2, cluster_m=2, num_sms=4)
CLUSTER_NARROW = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", cluster_m=2,
                              num_sms=4)
# input-row reuse across filter rows. num_sms=2: a CTA's tile whose last rows lie past its
# image's P is interpreted after the next image's tile (units alternate between the two CTAs),
# so storing those rows instead of dropping them overwrites right results (checked: 0.75
# relative error when out_row does not push them past NP)
HALO = ConvSchedule(bm=128, bn=64, bw=64, stages=2, halo=True, num_sms=2)
HALO_NARROW = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", halo=True,
                           cluster_m=2, num_sms=4)
HALO_CASES = [
    (3, 8, 3, 5, 16, 3, 3, 1, 1, 1, 1),       # P = 3: the second row block is half past P
    (2, 16, 7, 9, 24, 3, 3, 1, 1, 1, 1),
    (2, 16, 11, 12, 24, 3, 3, (1, 2), (2, 1), (2, 1), 2),   # dil_h 2, stride_w 2, groups
    (1, 8, 12, 12, 8, 3, 3, 1, (0, 1), (1, 2), 1),          # no row padding, dil_w 2
]
# the whole A tile as one (1, rows, bw, bk) box of the [N, H, W, C] input (2-d, stride 1, one
# group); tiles per image as for the halo, so the same num_sms=2 alternation checks that rows
# past P are dropped, and padding rows / columns come from the box leaving the tensor
ROWBOX = ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)
ROWBOX_NARROW = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", rowbox=True,
                             cluster_m=2, num_sms=4)
ROWBOX_CASES = [
    (3, 8, 3, 5, 16, 3, 3, 1, 1, 1, 1),       # P = 3: the second row block is half past P
    (2, 16, 7, 9, 24, 3, 3, 1, 1, 1, 1),
    (2, 16, 11, 12, 24, 3, 3, 1, (2, 1), (2, 1), 1),       # dil_h 2, padding 2
    (1, 8, 12, 12, 8, 3, 3, 1, (0, 1), (1, 2), 1),          # no row padding, dil_w 2
    (2, 72, 6, 7, 16, 1, 1, 1, 0, 1, 1),                    # 1x1, C past one 64-channel slice
    (1, 12, 5, 6, 8, 2, 3, 1, (1, 0), 1, 1),                # C not a multiple of 8, R even
]

# (N, C, H, W, K, R, S, stride, padding, dilation, groups)
CASES = [
    (1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1),
    (2, 16, 7, 9, 24, 3, 3, 2, 1, 1, 1),      # stride 2, W odd (padded copy), two images
    (1, 8, 8, 8, 16, 3, 3, 1, 2, 2, 1),       # dilation 2, padding 2
    (2, 16, 6, 5, 16, 1, 1, 1, 0, 1, 2),      # 1x1, groups 2
    (1, 32, 9, 10, 32, 5, 5, 2, 2, 1, 2),     # 5x5 stride 2 grouped
    (1, 8, 12, 12, 8, 3, 3, (2, 1), (0, 1), (1, 2), 1),   # per-axis stride/padding/dilation
    (1, 12, 5, 6, 8, 2, 3, 1, (1, 0), 1, 1),  # C not a multiple of 8 (zero-padded channels)
]


def _reference(x, w, b, stride, padding, dilation, groups):
    return F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding,
                    dilation, groups)


def _close(y, ref, rtol):
    err = (y.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= rtol * scale + 1e-6, f"max error {err} vs scale {scale}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [DIRECT, NARROW], ids=["direct", "tma_bw8"])
def test_conv2d_bf16_matches_float64(case, schedule):
    _check_case(case, schedule)


@pytest.mark.parametrize("case", [CASES[1], CASES[4], (3, 8, 3, 5, 16, 3, 3, 1, 1, 1, 1)],
                         ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [CLUSTER, CLUSTER_NARROW], ids=["direct", "tma_bw8"])
def test_cluster_multicast_weight_matches_float64(case, schedule):
    _check_case(case, schedule)


@pytest.mark.parametrize("case", HALO_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [HALO, HALO_NARROW], ids=["direct", "tma_bw8_cluster"])
def test_halo_row_reuse_matches_float64(case, schedule):
    _check_case(case, schedule)


@pytest.mark.parametrize("case", ROWBOX_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [ROWBOX, ROWBOX_NARROW],
                         ids=["direct", "tma_bw8_cluster"])
def test_rowbox_one_box_per_k_step_matches_float64(case, schedule):
    _check_case(case, schedule)


@pytest.mark.parametrize("stride,groups", [(2, 1), ((1, 2), 1), (1, 2), (9, 1)])
def test_rowbox_needs_one_group_and_strides_to_8(stride, groups):
    """A stride runs on the rowbox (element strides: tests/interp/test_conv_strided_rowbox.py),
    by default for 16-bit inputs (schedule_for's strided_rowbox, measured on the H200);
    groups and strides past the TMA unit's 8 never."""
    x = torch.randn(1, 8, 20, 20).bfloat16()
    w = torch.randn(8, 8 // groups, 3, 3).bfloat16()
    applies = groups == 1 and stride != 9
    if not applies:
        with pytest.raises(LaunchError, match="rowbox"):
            conv_op.conv2d_interpret(x, w, None, stride, 1, 1, groups, schedule=ROWBOX)
    # schedule_for asks for it only where it applies
    assert conv_op.schedule_for(x, w, stride, 1, 1, groups, rowbox=True).rowbox == applies
    assert conv_op.schedule_for(x, w, stride, 1, 1, groups).rowbox == applies
    assert not conv_op.schedule_for(x, w, stride, 1, 1, groups, strided_rowbox=False).rowbox \
        or stride == 1
    assert conv_op.schedule_for(x, torch.randn(8, 8, 3, 3).bfloat16(), 1, 1, 1, 1,
                                rowbox=True).rowbox


def test_rowbox_is_the_default_where_it_applies():
    """2-d, stride 1, one group: bf16 / fp16 and the fp32 bf16 split (its pieces run the
    same 16-bit kernel) and tf32 (fp32 operands) take rowbox unless rowbox=False; 3-d
    never, nor a strided or grouped tf32 convolution."""
    w = torch.randn(8, 8, 3, 3)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(1, 8, 6, 6, dtype=dtype)
        assert conv_op.schedule_for(x, w.to(dtype), 1, 1, 1, 1).rowbox, dtype
        assert not conv_op.schedule_for(x, w.to(dtype), 1, 1, 1, 1, rowbox=False).rowbox
    x = torch.randn(1, 8, 6, 6)
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1, precision="tf32").rowbox
    assert not conv_op.schedule_for(x, w, 1, 1, 1, 1, precision="tf32", rowbox=False).rowbox
    assert not conv_op.schedule_for(x, w, 2, 1, 1, 1, precision="tf32").rowbox
    assert not conv_op.schedule_for(torch.randn(1, 16, 6, 6), w, 1, 1, 1, 2,
                                    precision="tf32").rowbox
    x3, w3 = torch.randn(1, 8, 4, 6, 6).bfloat16(), torch.randn(8, 8, 3, 3, 3).bfloat16()
    assert not conv_op.schedule_for(x3, w3, 1, 1, 1, 1).rowbox


def test_halo_needs_unit_row_stride():
    x = torch.randn(1, 8, 6, 6).bfloat16()
    w = torch.randn(8, 8, 3, 3).bfloat16()
    with pytest.raises(ag.TraceError, match="stride_h 1"):
        conv_op.conv2d_interpret(x, w, None, 2, 1, schedule=HALO)


def _check_case(case, schedule):
    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    g = torch.Generator().manual_seed(hash(case) % 2**31)
    x = torch.randn(N, C, H, W, generator=g).bfloat16()
    w = torch.randn(K, C // groups, R, S, generator=g).bfloat16()
    y = conv_op.conv2d_interpret(x, w, None, stride, padding, dilation, groups,
                                 schedule=schedule)
    ref = _reference(x, w, None, stride, padding, dilation, groups)
    assert y.shape == ref.shape
    _close(y, ref, 1e-2)   # bf16 output rounding (2^-8) of fp32 sums of exact products


@pytest.mark.parametrize("case", [
    (1, 8, 4, 5, 6, 8, 3, 3, 3, 1, 1, 1, 1),
    (2, 16, 5, 6, 5, 8, 3, 1, 3, (2, 1, 1), (1, 0, 1), 1, 2),
    (1, 8, 6, 4, 4, 16, 2, 3, 2, 1, (2, 1, 0), (2, 1, 1), 1),
], ids=lambda c: "x".join(map(str, c)))
def test_conv3d_matches_float64(case):
    N, C, D, H, W, K, T, R, S, stride, padding, dilation, groups = case
    g = torch.Generator().manual_seed(21)
    x = torch.randn(N, C, D, H, W, generator=g).bfloat16()
    w = torch.randn(K, C // groups, T, R, S, generator=g).bfloat16()
    b = torch.randn(K, generator=g).bfloat16()
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation, groups, schedule=NARROW)
    ref = F.conv3d(x.double(), w.double(), b.double(), stride, padding, dilation, groups)
    assert y.shape == ref.shape
    _close(y, ref, 1e-2)


def test_depthwise_runs_as_grouped_gemms():
    # groups = C (KernelBench's depthwise tasks): correct, though Kg = 1 wastes the tile
    g = torch.Generator().manual_seed(14)
    x = torch.randn(2, 16, 7, 9, generator=g).bfloat16()
    w = torch.randn(16, 1, 3, 3, generator=g).bfloat16()
    y = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 16)
    _close(y, _reference(x, w, None, 1, 1, 1, 16), 1e-2)


def test_bias_relu_epilogue_and_channels_last_input():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 16, 7, 7, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(16, 16, 3, 3, generator=g).bfloat16()
    b = torch.randn(16, generator=g).bfloat16()
    y = conv_op.conv2d_interpret(x, w, b, 1, 1, 1, 1, activation="relu", schedule=DIRECT)
    _close(y, torch.relu(_reference(x, w, b, 1, 1, 1, 1)), 1e-2)


def test_fp16():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 8, 6, 7, generator=g).half()
    w = torch.randn(16, 8, 3, 3, generator=g).half()
    y = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 1, schedule=NARROW)
    assert y.dtype == torch.float16
    _close(y, _reference(x, w, None, 1, 1, 1, 1), 2e-3)


def test_promoted_fp32_split_is_strict_accurate():
    """The strict track's form (6 terms, every K step's partial promoted) on all-positive data,
    where truncation errors would add up: normwise error far below the 1e-5 floor."""
    g = torch.Generator().manual_seed(5)
    x = torch.rand(2, 16, 7, 6, generator=g)
    w = torch.rand(6, 16, 3, 3, generator=g)
    b = torch.randn(6, generator=g)
    y = conv_op.conv2d_interpret(x, w, b, 1, 1, 1, 1, schedule=PROMOTED, terms=6)
    ref = _reference(x, w, b, 1, 1, 1, 1)
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 1e-6


def test_schedule_for_promotes_fp32_only():
    x32, w32 = torch.randn(1, 8, 6, 6), torch.randn(8, 8, 3, 3)
    assert conv_op.schedule_for(x32, w32, 1, 1, 1, 1).promote
    assert not conv_op.schedule_for(x32.bfloat16(), w32.bfloat16(), 1, 1, 1, 1).promote


def test_fp32_bf16_split_is_near_fp32():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 8, 6, 6, generator=g)
    w = torch.randn(8, 8, 3, 3, generator=g)
    y = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 1, schedule=DIRECT)
    assert y.dtype == torch.float32
    # bf16 alone would be ~4e-3 relative; the 3-term split is ~1e-5
    _close(y, _reference(x, w, None, 1, 1, 1, 1), 1e-4)


def test_split_slots_are_the_agents_table():
    from argus.agent.split_numerics import SLOTS

    assert conv_op.SPLIT_SLOTS == SLOTS


@pytest.mark.parametrize("terms,bound", [(1, 1e-2), (3, 2e-5), (6, 1e-6)])
def test_fp32_split_terms(terms, bound):
    """Normwise error of the fp32 split against float64: 1 term is bf16 (~2e-3), 3 drop the
    2^-16 products (~5e-6), 6 keep every product down to 2^-16 (the strict track's)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 12, 7, 6, generator=g)
    w = torch.randn(10, 12, 3, 3, generator=g)
    b = torch.randn(10, generator=g)
    y = conv_op.conv2d_interpret(x, w, b, 1, 1, 1, 1, schedule=DIRECT, terms=terms)
    ref = _reference(x, w, b, 1, 1, 1, 1)
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err <= bound, (terms, err)
    if terms > 1:   # the split is what makes it fp32-like: bf16 alone errs 100x more
        plain = conv_op.conv2d_interpret(x, w, b, 1, 1, 1, 1, schedule=DIRECT, terms=1)
        assert ((plain.double() - ref).norm() / ref.norm()).item() > 20 * err


def test_bad_terms_is_a_clear_error():
    x, w = torch.randn(1, 8, 4, 4), torch.randn(8, 8, 3, 3)
    with pytest.raises(LaunchError, match="terms"):
        conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 1, terms=2)


# the honest unknowns of the warp-specialized GEMM family (tests/verify/test_library_schedules):
# coverage under a raster order is not attempted, store injectivity may time out
ALLOWED_UNKNOWN = {"store.coverage", "store.once"}


GEOM_2D = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=128)
# 2-d, stride 1, one group (rowbox); dilation 2 and padding 2 along H
GEOM_ROWBOX = ConvGeometry(3, 3, 1, 1, 2, 1, 2, 1, groups=1, cg_padded=128)
ROWBOX_PROMOTED = ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, promote=True)
GEOM_3D = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                       pad_d=1, dil_d=1)


@pytest.mark.parametrize("schedule,geom,dtypes", [
    (DIRECT, GEOM_2D, ()), (NARROW, GEOM_2D, ()), (NARROW, GEOM_3D, ()),
    (PROMOTED, GEOM_2D, ("bf16", "f32")), (CLUSTER_NARROW, GEOM_2D, ()),
    # ~4 min of solver time on the 2-core machine: the halo's 4 + 3 loads per stage
    pytest.param(HALO, ConvGeometry(3, 3, 1, 2, 1, 1, 2, 1, groups=2, cg_padded=128), (),
                 marks=pytest.mark.slow),
    # per-image row blocks: store.once is proven (argus/verify/once_split.py), not unknown
    (ROWBOX, GEOM_ROWBOX, ()), (ROWBOX_NARROW, GEOM_ROWBOX, ()),
    (ROWBOX_PROMOTED, GEOM_ROWBOX, ("bf16", "f32"))],
    ids=["direct", "tma_bw8", "3d", "promoted_f32", "cluster_tma_bw8", "halo_direct",
         "rowbox_direct", "rowbox_tma_bw8_cluster", "rowbox_promoted_f32"])
def test_kernel_verifies_with_zero_findings(schedule, geom, dtypes):
    kernel = conv_kernel(*(getattr(ag, d) for d in dtypes), bias=bool(dtypes))
    found = verify.check(kernel, include_proven=True, timeout_ms=20000, geom=geom, s=schedule)
    bad = [d for d in found if d.severity == "error" or
           (d.severity == "unknown" and d.code not in ALLOWED_UNKNOWN)]
    assert bad == [], [str(d) for d in bad]
    # rows of the flattened N * OD * P, direct or TMA-store epilogue (its row segments:
    # one block index inside the tile), clusters (the rank inside the unit index m of
    # m // q_tiles, m % q_tiles), per-image row blocks (rows past P pushed out; the kernel's
    # ag.require NP == N * P, the halo's NP == NH // H * P), the rowbox TMA epilogue's 8
    # row segments each pushed by its own flag (joined by the segment index): coverage
    # proven, not left unknown
    cov = [d for d in found if d.code == "store.coverage"]
    assert cov and all(d.severity == "note" for d in cov), [str(d) for d in cov]
    if schedule.rowbox:
        once = [d for d in found if d.code == "store.once"]
        assert once and all(d.severity == "note" for d in once), [str(d) for d in once]
    # groups never mix: proven, not skipped
    assert any(d.code == "wgmma.agree" and "A.grp == B.grp" in d.message and d.severity == "note"
               for d in found), [f"{d.severity} {d.code}" for d in found]


@pytest.mark.parametrize("padding,dilation,groups", [(0, 1, 1), (1, 1, 2), (1, 2, 1)])
def test_conv_transpose2d_stride1_gradient_form(padding, dilation, groups):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 16, 6, 7, generator=g).bfloat16()
    w = torch.randn(16, 24 // groups, 3, 3, generator=g).bfloat16()   # [C, K / groups, R, S]
    b = torch.randn(24, generator=g).bfloat16()
    y = conv_op.conv_transpose2d(x, w, b, 1, padding, 0, groups, dilation,
                                 run=lambda *a: conv_op.conv2d_interpret(*a, schedule=DIRECT))
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), 1, padding, 0, groups,
                             dilation)
    assert y.shape == ref.shape
    _close(y, ref, 1e-2)


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups,R", [
    (2, 1, 1, 1, 1, 3), (2, 0, 0, 1, 2, 4), ((3, 2), (1, 2), (2, 0), 1, 1, 3),
    (2, 1, 0, 2, 1, 3), (4, 0, 0, 1, 1, 3)])   # stride 4, 3 taps: phases no tap reaches
def test_conv_transpose2d_strided_phases(stride, padding, output_padding, dilation, groups,
                                         R):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 8, 5, 4, generator=g).bfloat16()
    w = torch.randn(8, 16 // groups, R, R, generator=g).bfloat16()
    b = torch.randn(16, generator=g).bfloat16()
    y = conv_op.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation,
                                 run=lambda *a: conv_op.conv2d_interpret(*a, schedule=DIRECT))
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), stride, padding,
                             output_padding, groups, dilation)
    assert y.shape == ref.shape
    _close(y, ref, 1e-2)


def test_conv_transpose3d_and_1d():
    g = torch.Generator().manual_seed(13)
    run = lambda *a: conv_op.conv2d_interpret(*a, schedule=DIRECT)   # noqa: E731
    x = torch.randn(1, 8, 3, 4, 5, generator=g).bfloat16()
    w = torch.randn(8, 8, 3, 2, 3, generator=g).bfloat16()
    for stride, padding, output_padding in ((1, 1, 0), ((2, 1, 2), (1, 0, 1), (1, 0, 0))):
        y = conv_op.conv_transpose3d(x, w, None, stride, padding, output_padding, run=run)
        ref = F.conv_transpose3d(x.double(), w.double(), None, stride, padding, output_padding)
        assert y.shape == ref.shape
        _close(y, ref, 1e-2)
    x1 = torch.randn(2, 8, 9, generator=g).bfloat16()
    w1 = torch.randn(8, 16, 3, generator=g).bfloat16()
    y1 = conv_op.conv_transpose1d(x1, w1, None, 3, 1, 1, 1, 2, run=run)
    ref1 = F.conv_transpose1d(x1.double(), w1.double(), None, 3, 1, 1, 1, 2)
    assert y1.shape == ref1.shape
    _close(y1, ref1, 1e-2)


def test_launch_errors():
    x = torch.randn(1, 8, 6, 6).bfloat16()
    w = torch.randn(8, 8, 3, 3).bfloat16()
    with pytest.raises(LaunchError, match="bfloat16, float16 or"):
        conv_op.check(x.double(), w.double(), None, 1, 0, 1, 1)
    with pytest.raises(LaunchError, match="groups=3 must divide"):
        conv_op.check(x, w, None, 1, 0, 1, 3)
    with pytest.raises(LaunchError, match="input channels per group"):
        conv_op.check(x, w, None, 1, 0, 1, 2)
    with pytest.raises(LaunchError, match="does not fit"):
        conv_op.check(x, torch.randn(8, 8, 9, 9).bfloat16(), None, 1, 0, 1, 1)
    with pytest.raises(LaunchError, match="bias has shape"):
        conv_op.check(x, w, torch.randn(3).bfloat16(), 1, 0, 1, 1)
    with pytest.raises(LaunchError, match="CUDA device"):
        conv_op.conv2d(x, w)


@pytest.mark.parametrize("dims,stride,bias,channels_last", [
    (2, 2, True, True), (2, 2, False, False), (2, (2, 3), True, False), (1, 4, True, False),
    (3, (2, 1, 2), False, False)])
def test_conv_transpose_kernel_is_stride_one_patch_convolution(dims, stride, bias,
                                                               channels_last, monkeypatch):
    """kernel == stride, no padding (UNet's 2x2 / 2 up-convolution): one 1x1 convolution with
    prod(stride) * K channels (`_patches`), not one per phase, and the result torch's."""
    g = torch.Generator().manual_seed(14)
    st = (stride,) * dims if isinstance(stride, int) else stride
    x = torch.randn(2, 8, *((3, 5, 4)[:dims]), generator=g).bfloat16()
    if channels_last and dims == 2:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(8, 16, *st, generator=g).bfloat16()
    b = torch.randn(16, generator=g).bfloat16() if bias else None
    calls = []

    def run(*a):
        calls.append(a)
        x_, w_, b_, s_, p_, d_, g_ = a
        conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[x_.dim()]
        return conv(x_.float(), w_.float(), None if b_ is None else b_.float(), s_, p_, d_,
                    g_).to(x_.dtype)
    fn = {1: conv_op.conv_transpose1d, 2: conv_op.conv_transpose2d,
          3: conv_op.conv_transpose3d}[dims]
    tfn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    y = fn(x, w, b, stride, 0, 0, 1, 1, run=run)
    ref = tfn(x.double(), w.double(), None if b is None else b.double(), stride)
    assert y.shape == ref.shape
    _close(y, ref, 1e-2)
    # torch's layout: channels-last for a channels-last x (interleaved into it), else NCHW
    assert y.is_contiguous(memory_format=torch.channels_last) if channels_last else \
        y.is_contiguous()
    assert len(calls) == 1, len(calls)                       # one convolution for all phases
    w1 = calls[0][1]
    phases = 1
    for s_ in st:
        phases *= s_
    assert w1.shape[:2] == (phases * 16, 8) and set(w1.shape[2:]) == {1}
    # neighbours that are not this case keep one convolution a phase
    calls.clear()
    y = conv_op.conv_transpose2d(x if dims == 2 else torch.randn(2, 8, 3, 5).bfloat16(),
                                 torch.randn(8, 16, 2, 2).bfloat16(), None, 2, 1, 0, 1, 1,
                                 run=run)
    assert len(calls) == 4


def test_conv_transpose_patches_with_the_interpreted_kernels():
    """The same through the interpreted convolution kernel (conv2d_interpret) and interleave."""
    g = torch.Generator().manual_seed(15)
    x = torch.randn(1, 16, 4, 5, generator=g).bfloat16()
    w = torch.randn(16, 8, 2, 2, generator=g).bfloat16()
    b = torch.randn(8, generator=g).bfloat16()
    y = conv_op.conv_transpose2d(x, w, b, 2, 0, 0, 1, 1,
                                 run=lambda *a: conv_op.conv2d_interpret(*a, schedule=DIRECT))
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), 2)
    assert y.shape == ref.shape
    _close(y, ref, 1e-2)
