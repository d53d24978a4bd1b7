"""Packed taps (ConvSchedule.taps_per_slice: several K slices, filter taps of few channels,
in one pipeline step, each its own swizzled atom and wgmma) in the numpy interpreter against
torch float64 conv2d / conv3d: 2-d and 3-d, C in {3, 4, 8, 16, 64}, strides, padding,
dilation, groups, the tail step (taps not a multiple of taps_per_slice) and the rowbox
producer; the schedules `schedule_for(taps_per_slice="auto")` picks for KernelBench L2/8 and
ResNet-50's c2; and a tail that reads zeros, not a wrapped tap (an inf input stays in its
receptive field)."""

import pytest
import torch
import torch.nn.functional as F

from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.ops import conv as conv_op

# (x shape, K, kernel, stride, padding, dilation, groups, dtype, precision, taps_per_slice)
CASES = [
    ((2, 3, 7, 9), 16, (3, 3), 1, 1, 1, 1, torch.bfloat16, None, "auto"),       # C 3: 4 a step
    ((2, 4, 9, 10), 8, (3, 3), 2, 1, 1, 1, torch.bfloat16, None, 4),
    ((1, 8, 9, 11), 16, (3, 3), 1, 2, 2, 1, torch.bfloat16, None, "auto"),      # dilation 2
    ((2, 16, 6, 8), 16, (3, 3), 1, 1, 1, 2, torch.bfloat16, None, 3),           # groups 2
    ((1, 16, 6, 7), 24, (5, 3), (2, 1), (2, 1), 1, 1, torch.bfloat16, None, 2),
    ((2, 64, 6, 8), 64, (3, 3), 1, 1, 1, 1, torch.bfloat16, None, 2),           # c2: rowbox
    ((2, 8, 5, 6, 7), 16, (3, 3, 3), 1, 0, 1, 1, torch.float32, "tf32", "auto"),  # L2/8
    ((1, 4, 5, 7, 6), 8, (3, 3, 3), 2, 1, 1, 1, torch.float32, "tf32", "auto"),
    ((1, 3, 4, 6, 9), 16, (2, 3, 3), (1, 2, 2), 1, (1, 1, 2), 1, torch.bfloat16, None, 4),
    ((1, 8, 4, 5, 6), 8, (3, 3, 3), 1, 1, 1, 2, torch.float32, "tf32", 5),      # groups, 3-d
    ((1, 128, 4, 5), 16, (3, 3), 1, 1, 1, 1, torch.bfloat16, None, 2),         # 2 slices a tap
    ((1, 96, 4, 5), 16, (3, 3), 2, 1, 1, 1, torch.bfloat16, None, 4),           # slices + tail
    ((4, 8, 1, 20), 8, (1, 5), 1, (0, 2), 1, 1, torch.float16, None, "auto"),   # conv1d fold
]


def _ids(case):
    xs, K, k, st, pd, dl, g, dt, prec, taps = case
    return f"{len(xs) - 2}d-C{xs[1]}-k{'x'.join(map(str, k))}-s{st}-p{pd}-d{dl}-g{g}-" \
           f"{prec or str(dt)[6:]}-t{taps}"


def _run(case, seed=0, x=None):
    xs, K, k, st, pd, dl, g, dt, prec, taps = case
    gen = torch.Generator().manual_seed(seed)
    if x is None:
        x = torch.randn(xs, generator=gen).to(dt)
    w = torch.randn((K, xs[1] // g, *k), generator=gen).to(dt)
    b = torch.randn(K, generator=gen).to(dt)
    s = conv_op.schedule_for(x, w, st, pd, dl, g, precision=prec, taps_per_slice=taps)
    assert s.taps_per_slice > 1
    y = conv_op.convolve(x, w, b, st, pd, dl, g, schedule=s, precision=prec)
    conv = F.conv3d if len(xs) == 5 else F.conv2d
    rnd = round_to_tf32 if prec == "tf32" else (lambda t: t)
    ref = conv(rnd(x).double(), rnd(w).double(), b.double(), st, pd, dl, g)
    return y, ref, s


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_packed_taps_match_torch(case):
    y, ref, s = _run(case)
    assert y.shape == ref.shape
    err = ((y.double() - ref).norm() / ref.norm()).item()
    # tf32: fp32 accumulation of exact products of rounded inputs; bf16: the bf16 result
    assert err <= (1e-6 if case[8] == "tf32" else 4e-3), (err, s)


def test_auto_schedules_for_l2_8_and_c2():
    x = torch.empty(128, 8, 16, 64, 64, device="meta")
    w = torch.empty(16, 8, 3, 3, 3, device="meta")
    s = conv_op.schedule_for(x, w, 1, 0, 1, 1, precision="tf32")    # "auto", the default
    assert (s.bk, s.taps_per_slice, s.bn, s.cluster_m) == (8, 4, 16, 1)   # 4 taps of 8 a step
    assert conv_op.schedule_for(x, w, 1, 0, 1, 1, precision="tf32",
                                taps_per_slice=1).taps_per_slice == 1    # the opt-out
    x = torch.empty(32, 64, 56, 56, dtype=torch.bfloat16, device="meta")
    w = torch.empty(64, 64, 3, 3, dtype=torch.bfloat16, device="meta")
    # 64 bf16 channels fill a 128-byte step: "auto" keeps one tap a step (a rowbox layer: no
    # cluster since stop 50)
    base = conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=1)
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1) == base
    assert (base.taps_per_slice, base.cluster_m) == (1, 1)
    s = conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=2)
    assert (s.bk, s.taps_per_slice, s.rowbox) == (64, 2, True)   # 2 taps of 64 a step
    # 3 bf16 channels (padded to 8: a 32-byte atom): 4 taps a step
    x = torch.empty(8, 3, 32, 32, dtype=torch.bfloat16, device="meta")
    w = torch.empty(16, 3, 3, 3, dtype=torch.bfloat16, device="meta")
    assert conv_op.schedule_for(x, w, 1, 1, 1, 1).taps_per_slice == 4


def test_the_tail_step_reads_zeros_not_a_wrapped_tap():
    # 3-d, 27 taps, 4 a step: the last step's slice 27 lies past the last tap (as a tap, depth
    # 3: one plane past the filter). An inf in input plane 4 reaches only output planes 2 and
    # 3 (torch's non-finite pattern), not plane 1, where a wrapped tap 3 would read it
    # (0 * inf = nan); tests/mutations/test_conv_mutations.py unmasks it and sees plane 1
    case = ((1, 8, 6, 5, 5), 8, (3, 3, 3), 1, 0, 1, 1, torch.bfloat16, None, 4)
    x = torch.randn(case[0], generator=torch.Generator().manual_seed(3)).bfloat16()
    x[0, :, 4, 2, 2] = float("inf")
    y, ref, _ = _run(case, x=x)
    assert torch.equal(torch.isfinite(y), torch.isfinite(ref))
    assert torch.isfinite(y[0, :, 1]).all() and not torch.isfinite(y[0, :, 2]).all()


@pytest.mark.parametrize("xs,ws,padding,dtype,precision,taps,wgmma", [
    ((128, 8, 16, 64, 64), (16, 8, 3, 3, 3), 0, torch.float32, "tf32", "auto", 4),  # L2/8: 4 x k8
    ((32, 64, 56, 56), (64, 64, 3, 3), 1, torch.bfloat16, None, 2, 8)],    # c2: 2 atoms x 4 k16
    ids=["l2_8-tf32", "c2-bf16"])
def test_packed_kernel_verifies_and_builds_without_spills(xs, ws, padding, dtype, precision,
                                                          taps, wgmma):
    """The op's own compile on meta tensors (verified at the default level, then NVRTC for
    sm_90a, never launched): no verifier error, no spills, each atom's wgmma in the PTX."""
    import re

    from argus.runtime import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    x = torch.empty(xs, dtype=dtype, device="meta")
    w = torch.empty(ws, dtype=dtype, device="meta")
    s = conv_op.schedule_for(x, w, 1, padding, 1, 1, precision=precision,
                             taps_per_slice=taps)
    conv_op._COMPILED.clear()
    conv_op.convolve(x, w, None, 1, padding, schedule=s, precision=precision)
    (compiled,) = conv_op._COMPILED.values()
    res = compiled.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    # the static count: at least one k-step's wgmma per atom (a short K loop may be unrolled)
    count = len(re.findall(r"wgmma\.mma_async", compiled.binary.ptx))
    assert count >= wgmma and count % wgmma == 0, count


@pytest.mark.parametrize("geom_args,bk,taps,rowbox", [
    ((3, 3, 1, 1, 1, 1, 1, 1, 1, 16), 16, 4, False),            # 2-d, C <= 16, tail step
    ((3, 3, 1, 1, 1, 1, 1, 1, 2, 16), 16, 3, False),            # groups 2 (grp agrees)
    ((3, 3, 1, 2, 1, 1, 1, 2, 1, 16), 16, 4, False),            # strides, dilation
    ((3, 3, 1, 1, 0, 0, 1, 1, 1, 16, 3), 16, 4, False),         # 3-d
    ((3, 3, 1, 1, 1, 1, 1, 1, 1, 64), 64, 2, True)])            # c2's rowbox producer
def test_packed_kernel_has_no_verifier_error(geom_args, bk, taps, rowbox):
    from argus import verify
    from argus.kernels import conv as K
    from argus.kernels.conv import ConvGeometry, ConvSchedule

    s = ConvSchedule(bm=128, bn=64, bw=64, stages=2, bk=bk, taps_per_slice=taps,
                     rowbox=rowbox)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=ConvGeometry(*geom_args), s=s)
    assert not [d for d in found if d.severity == "error"], \
        [f"{d.code}: {d.message[:160]}" for d in found if d.severity == "error"]


def test_packed_grouped_column_strided_layer_is_refused_with_the_reason():
    """A user's ConvSchedule(taps_per_slice > 1) for a grouped layer with a column stride
    (which schedule_for never packs): a TraceError naming taps_per_slice, the groups, the
    stride and the fix, instead of the verifier's false wgmma.k-once error on the GPU."""
    import argus as ag
    from argus.kernels.conv import ConvSchedule

    x = torch.randn(1, 16, 6, 8).bfloat16()
    w = torch.randn(16, 8, 3, 3).bfloat16()
    s = ConvSchedule(bm=128, bn=64, bw=64, stages=2, bk=16, taps_per_slice=4)
    with pytest.raises(ag.TraceError, match=r"taps_per_slice=4.*groups=2.*stride_w=2") as err:
        conv_op.conv2d_interpret(x, w, None, 2, 1, 1, 2, schedule=s)
    assert "taps_per_slice=1" in str(err.value)
    # schedule_for keeps one tap a step for it, which runs
    assert conv_op.schedule_for(x, w, 2, 1, 1, 2, taps_per_slice=4).taps_per_slice == 1


@pytest.mark.parametrize("bad", [0, -2, "four", True, 2.0])
def test_bad_taps_per_slice_is_refused_for_every_layer(bad):
    """schedule_for checks taps_per_slice before deciding whether the layer packs: a bad
    value is a LaunchError even for a layer that keeps one tap a step (the fp32 split)."""
    from argus.errors import LaunchError

    for dtype in (torch.bfloat16, torch.float32):      # packs / keeps one tap (the split)
        x = torch.empty(2, 8, 9, 9, dtype=dtype, device="meta")
        w = torch.empty(16, 8, 3, 3, dtype=dtype, device="meta")
        with pytest.raises(LaunchError, match=r"taps_per_slice=.* is an int >= 1 or 'auto'"):
            conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=bad)


def test_taps_per_slice_past_two_stages_of_shared_memory_is_refused():
    """schedule_for(taps_per_slice=n) with n too large for two ring stages in a CTA's shared
    memory: a LaunchError naming the taps and the largest that fits, not a schedule whose
    compile then fails on shared memory ("use fewer pipeline stages or smaller tiles")."""
    from argus.errors import LaunchError
    from argus.target.limits import SMEM_PER_CTA_OPTIN

    x = torch.empty(2, 64, 16, 16, dtype=torch.bfloat16, device="meta")
    w = torch.empty(128, 64, 3, 3, dtype=torch.bfloat16, device="meta")
    with pytest.raises(LaunchError, match=r"taps_per_slice=9 .*\n  fix: taps_per_slice <= 3"):
        conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=9)
    with pytest.raises(LaunchError, match=r"taps_per_slice=4 "):
        conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=4)
    s = conv_op.schedule_for(x, w, 1, 1, 1, 1, taps_per_slice=3)   # the largest that fits
    assert s.taps_per_slice == 3 and s.stages == 2
    # two stages of 3 taps and the 128 x 128 bf16 staging: under a CTA's shared memory
    assert 2 * (s.bm + s.bn) * 3 * s.bk * 2 + 128 * s.bn * 2 < SMEM_PER_CTA_OPTIN
