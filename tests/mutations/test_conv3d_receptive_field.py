"""The 3-d receptive field of the implicit-GEMM convolution (argus/kernels/conv.py
_receptive_field, 3-d branch; docs/verify.md "Conv receptive field: 3-d"): each A element a
wgmma multiplies is input voxel (od * stride_d + t * dil_d - pad_d, p * stride_h + r * dil_h -
pad_h, q * stride_w + s * dil_w - pad_w) of its output voxel (n, od, p, q) and tap (t, r, s),
read at X's flattened row (n * D + d) * H + h, or, outside the volume (padding) or past the
last tap, a zero read from outside the tensor.

Seeded bugs in the producer's depth coordinates (monkeypatched into a fresh, uncached
kernel), each a tag.assert error naming the consumer thread and the assertion's line:

  * the depth tap read as the tap's fastest digit (tap % T) instead of tap // (R * S);
  * the depth stride off by one (stride_d + 1);
  * the depth dilation off by one (dil_d + 1);
  * depth padding not zero: an input depth outside [0, D) not pushed past the tensor (the
    neighbouring image's planes read instead of zeros).

And the unmutated 3-d kernels the conv op picks (bw 64 direct; packed taps, tf32, 8
channels: KernelBench level-2's conv3d layers; narrow bw 32 boxes) are proven, nothing
left unknown: the assertion is proven per writer of the element (check_asserts._by_writer).
"""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import conv as K
from argus.kernels.conv import ConvGeometry, ConvSchedule
from argus.verify import check_asserts
from argus.verify.model import Model

# 3x3x3, depth stride 2, depth padding 1, column stride 2 (scripts/verify_timings.py's g3d)
GEOM_3D = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                       pad_d=1, dil_d=1)
DIRECT = ConvSchedule(bm=128, bn=64, bw=64, stages=2)


def _errors(found):
    bad = [d for d in found if d.code == "tag.assert" and d.severity == "error"]
    assert bad, [f"{d.severity} {d.code}: {d.message[:160]}" for d in found]
    assert all("receptive field" in str(d) for d in bad), [str(d)[-300:] for d in bad]
    return bad


def _names_thread_and_line(d):
    """Who (the consumer's warpgroup and thread) and where (the assertion's conv.py line)."""
    w = d.counterexample
    assert w.get("role") == "consumer" and "warpgroup" in w and "thread" in w, w
    assert "conv.py:" in str(d.loc), d.loc
    assert w["tags"], w


def _mutated_depth(monkeypatch, changes):
    right = K._input_coords

    def wrong(geom, *args, **kw):   # BUG: the producer's depth index map with `changes`
        return right(dataclasses.replace(geom, **changes(geom)), *args, **kw)
    monkeypatch.setattr(K, "_input_coords", wrong)


def test_depth_tap_read_as_the_fastest_digit_is_an_error(monkeypatch):
    def fastest(geom, g, out_row, q0, tap, c0, H, P, NH, D, OD, past=0):
        # the producer's 3-d coordinates (K._input_coords) with one change:
        taps2d = geom.r * geom.s
        dt = tap % geom.t   # BUG: the depth tap read as the tap's fastest digit
        r, t = (tap % taps2d) // geom.s, tap % geom.s
        plane, v = K._column(geom, g, q0, t)
        p = out_row % P
        h = p * geom.stride_h + r * geom.dil_h - geom.pad_h
        image = out_row // P
        od = image % OD
        depth = od * geom.stride_d + dt * geom.dil_d - geom.pad_d
        n = image // OD
        row = K._row(n * D + depth, h, H, NH, geom.pad_d * H + geom.pad_h,
                     K._plus(K._outside(depth, D), past))
        return K._BoxCoords((row, plane, v, c0), image, p, n, od)
    monkeypatch.setattr(K, "_input_coords", fastest)
    bad = _errors(verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_3D, s=DIRECT))
    _names_thread_and_line(bad[0])
    tags = bad[0].counterexample["tags"][0]
    # the witness: a tap whose depth digit differs from its fastest digit
    assert tags["tap"] // 9 != tags["tap"] % 3, tags


def test_depth_stride_off_by_one_is_an_error(monkeypatch):
    _mutated_depth(monkeypatch, lambda g: dict(stride_d=g.stride_d + 1))
    bad = _errors(verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_3D, s=DIRECT))
    _names_thread_and_line(bad[0])


def test_depth_dilation_off_by_one_is_an_error(monkeypatch):
    _mutated_depth(monkeypatch, lambda g: dict(dil_d=g.dil_d + 1))
    bad = _errors(verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_3D, s=DIRECT))
    _names_thread_and_line(bad[0])
    # dilation matters only from the second depth tap on
    assert bad[0].counterexample["tags"][0]["fd"] >= 1, bad[0].counterexample["tags"]


def test_depth_padding_not_zero_is_an_error(monkeypatch):
    # BUG: an input depth outside [0, D) is not pushed past the tensor (only rows outside
    # [0, H) are): the depth padding reads the neighbouring image's planes
    monkeypatch.setattr(K, "_row", lambda image, h, H, NH, push, outside_depth=0:
                        image * H + h + K._outside(h, H) * (NH + push))
    bad = _errors(verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_3D, s=DIRECT))
    _names_thread_and_line(bad[0])
    w = bad[0].counterexample
    tags = w["tags"][0]
    d = tags["od"] * GEOM_3D.stride_d + tags["fd"] * GEOM_3D.dil_d - GEOM_3D.pad_d
    # the witness: an input depth outside the volume, read inside the tensor
    assert (d < 0 or d >= w["shapes"]["D"]) and 0 <= tags["nh"] < w["shapes"]["NH"], (d, w)


@pytest.mark.parametrize("name,kernel,geom,schedule,asserts", [
    ("direct", lambda: K.conv_kernel(), GEOM_3D, DIRECT, 1),
    # KernelBench level-2 conv3d (3x3x3, 8 input channels, fp32 as tf32): schedule_for's pick,
    # 4 packed taps a step (one assertion an atom)
    ("packed_tf32", lambda: K.conv_kernel(ag.f32, ag.f32, precision="tf32"),
     ConvGeometry(3, 3, 1, 1, 0, 0, 1, 1, 1, 8, t=3),
     ConvSchedule(bm=128, bn=16, bk=8, bw=64, stages=6, taps_per_slice=4), 4),
    # narrow per-row boxes (bw 32: one assertion a box, 2 of a warpgroup's 64 rows; bw 16,
    # 4 of them, proven too but not stated by default: K.NARROW_CHECK_MIN_BW_3D)
    ("narrow_bw32", lambda: K.conv_kernel(), GEOM_3D,
     ConvSchedule(bm=128, bn=64, bw=32, stages=2, epilogue="tma"), 2)])
def test_the_3d_receptive_field_is_proven(name, kernel, geom, schedule, asserts):
    found = verify.check(kernel(), include_proven=True, geom=geom, s=schedule)
    assert not [d for d in found if d.severity != "note"], \
        [str(d)[:300] for d in found if d.severity != "note"]
    # (one note per assertion line: the proven atoms' notes share it)
    assert any(d.code == "tag.assert" and "receptive field" in str(d) for d in found)
    lowered = lower_only(kernel(), geom=geom, s=schedule)
    obs, finds = check_asserts.obligations(Model(lowered))
    assert not finds and len(obs) == asserts, (len(obs), finds)
    # each assertion asked per writer of its element: the two warpgroups' boxes
    assert all(ob.separately and len(ob.claims) == 2 for ob in obs), \
        [(ob.separately, len(ob.claims)) for ob in obs]
