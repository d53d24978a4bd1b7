"""The tf32 schedule's output-channel tile for layers of few output channels
(argus.ops.conv.tf32_bn: the narrowest of 16 / 32 / 64 that holds Kg): the schedule it gives
and the implicit-GEMM kernel at bn 16 and 32 in the numpy interpreter against torch float64
conv2d / conv3d of the tf32-rounded inputs (KernelBench L2/8's Conv3d 8 -> 16 at small
sizes; ragged Kg that a 16- or 32-wide tile overhangs; groups; NCDHW and channels-last
results), and an sm_90a build of L2/8's kernel without spills."""

import pytest
import torch
import torch.nn.functional as F

from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.kernels.conv import ConvSchedule
from argus.ops import conv as conv_op


@pytest.mark.parametrize("kg,bn", [(1, 16), (8, 16), (16, 16), (17, 32), (24, 32), (32, 32),
                                   (33, 64), (64, 64), (65, 128), (512, 128)])
def test_tf32_bn_is_the_narrowest_tile_that_holds_kg(kg, bn):
    assert conv_op.tf32_bn(kg) == bn


@pytest.mark.parametrize("K,groups,bn", [(16, 1, 16), (24, 1, 32), (16, 2, 16), (48, 1, 64),
                                         (96, 1, 128)])
def test_schedule_for_tf32_takes_the_rule(K, groups, bn):
    x = torch.empty(2, 8, 6, 10, 10, device="meta")
    w = torch.empty(K, 8 // groups, 3, 3, 3, device="meta")
    s = conv_op.schedule_for(x, w, 1, 0, 1, groups, precision="tf32", taps_per_slice=1)
    assert s.bn == bn and s.bk == 32 and s.cluster_m == 2
    # the default packs these 8- and 4-channel layers (taps_per_slice "auto"): the same bn,
    # 4 taps of 8 channels a 32-deep step, no cluster
    s = conv_op.schedule_for(x, w, 1, 0, 1, groups, precision="tf32")
    assert (s.bn, s.bk, s.taps_per_slice, s.cluster_m) == (bn, 8, 4, 1)


def _check(y, x, w, b, conv, *args):
    ref_t = conv(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(), *args)
    assert y.shape == ref_t.shape
    err = ((y.double() - ref_t).norm() / ref_t.norm()).item()
    assert err <= 1e-6, err          # fp32 accumulation of the tf32 products


# (N, C, D, H, W, K, kernel, stride, padding, groups)
CASES_3D = [
    (1, 8, 4, 5, 66, 16, 3, 1, 0, 1),       # L2/8's layer: C 8, K 16, 3x3x3, Q 64 + ragged rows
    (2, 8, 3, 4, 9, 24, 3, 1, 1, 1),        # Kg 24 in a 32-wide tile, padding, two images
    (1, 8, 4, 4, 7, 12, (2, 3, 3), 2, 1, 2),  # grouped: Kg 6 a group in a 16-wide tile, stride 2
]


@pytest.mark.parametrize("case", CASES_3D, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("nchw", [True, False], ids=["ncdhw", "channels_last"])
def test_conv3d_narrow_tiles_match_float64(case, nchw):
    N, C, D, H, W, K, k, stride, padding, groups = case
    kk = (k,) * 3 if isinstance(k, int) else k
    g = torch.Generator().manual_seed(sum(case[:6]))
    x = torch.randn(N, C, D, H, W, generator=g)
    w = torch.randn(K, C // groups, *kk, generator=g)
    b = torch.randn(K, generator=g)
    s = conv_op.schedule_for(x, w, stride, padding, 1, groups, precision="tf32")
    assert s.bn == conv_op.tf32_bn(K // groups) < 64
    y = conv_op.convolve(x, w, b, stride, padding, 1, groups, precision="tf32", schedule=s,
                         nchw=nchw)
    _check(y, x, w, b, F.conv3d, stride, padding, 1, groups)


def test_conv2d_rowbox_narrow_tile_matches_float64():
    # 2-d stride 1: the rowbox producer with a 16-wide tile
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 8, 5, 70, generator=g)
    w = torch.randn(16, 8, 3, 3, generator=g)
    b = torch.randn(16, generator=g)
    s = conv_op.schedule_for(x, w, 1, 1, 1, 1, precision="tf32")
    assert s.bn == 16 and s.rowbox
    y = conv_op.convolve(x, w, b, 1, 1, precision="tf32", schedule=s)
    _check(y, x, w, b, F.conv2d, 1, 1)


def test_l2_8_kernel_builds_without_spills():
    from argus.runtime import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    # KernelBench L2/8's shape on meta tensors: compiled ahead of time, never launched
    x = torch.empty(128, 8, 16, 64, 64, device="meta")
    w = torch.empty(16, 8, 3, 3, 3, device="meta")
    b = torch.empty(16, device="meta")
    conv_op._COMPILED.clear()
    conv_op.convolve(x, w, b, precision="tf32")
    (compiled,) = conv_op._COMPILED.values()
    _, key = next(iter(conv_op._COMPILED))     # a BuildMemo's keys: (build choices, key)
    assert key[5].bn == 16
    res = compiled.resources if hasattr(compiled, "resources") else None
    if res is None:
        pytest.skip("the compiled kernel reports no resources")
    assert res.spill_stores == 0 and res.spill_loads == 0, res
