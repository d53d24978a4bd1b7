"""The small-image rule (argus.ops.conv.SMALL_IMAGE_RULE, issue 17): rowbox schedules of 64
pixels with one consumer warpgroup for images whose rows fill little of a 128-pixel tile
(ResNet-50 c5, 7 x 7): correct in the interpreter against torch float64, verified with zero
findings, picked by schedule_for only where the useful fraction gains, other layers kept."""

import dataclasses

import pytest
import torch

import argus as ag
import argus.compiler  # noqa: F401 (ag.compiler.front_end below; run alone, nothing imports it)
from argus import verify
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op
from tests.interp.test_conv_interp import ALLOWED_UNKNOWN, GEOM_ROWBOX, _check_case

# 8 rows x 8 columns a tile, one consumer; few SMs so CTAs walk several units and a
# cluster pairs a last tile with one past the end
SMALL = ConvSchedule(bm=64, bn=64, bw=8, stages=2, consumers=1, epilogue="tma", rowbox=True,
                     cluster_m=2, num_sms=4)
SMALL_NOCLUSTER = dataclasses.replace(SMALL, cluster_m=1, num_sms=2)
# two CTAs an SM (ConvSchedule.ctas_per_sm): the persistent grid is num_sms x 2 CTAs
SMALL_2SM = dataclasses.replace(SMALL, num_sms=2, ctas_per_sm=2, consumer_regs=216)
SMALL_CASES = [
    (3, 16, 7, 7, 24, 3, 3, 1, 1, 1, 1),      # c5's 7 x 7: one 8-row tile per image
    (2, 8, 12, 5, 16, 3, 3, 1, 1, 1, 1),      # P = 12: the second tile half past P
    (2, 72, 7, 7, 8, 1, 1, 1, 0, 1, 1),       # 1x1, C past one 64-channel slice
]


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("schedule", [SMALL, SMALL_NOCLUSTER, SMALL_2SM],
                         ids=["cluster", "nocluster", "two_per_sm"])
def test_small_image_tiles_match_float64(case, schedule):
    _check_case(case, schedule)


@pytest.mark.parametrize("schedule", [SMALL, SMALL_2SM], ids=["one_per_sm", "two_per_sm"])
def test_small_image_tiles_verify_with_zero_findings(schedule):
    found = verify.check(conv_kernel(), include_proven=True, timeout_ms=20000,
                         geom=GEOM_ROWBOX, s=schedule)
    bad = [d for d in found if d.severity == "error" or
           (d.severity == "unknown" and d.code not in ALLOWED_UNKNOWN)]
    assert bad == [], [str(d) for d in bad]
    for code in ("store.coverage", "store.once"):
        got = [d for d in found if d.code == code]
        assert got and all(d.severity == "note" for d in got), [str(d) for d in got]


def _pick(N, C, H, W, K, R, S, pad):
    x = torch.zeros(N, C, H, W, dtype=torch.bfloat16)
    return conv_op.schedule_for(x, torch.zeros(K, C, R, S, dtype=torch.bfloat16), 1, pad, 1, 1)


def test_useful_fraction():
    assert conv_op.rowbox_useful(7, 7, 128, 8) == 49 / 128
    assert conv_op.rowbox_useful(7, 7, 64, 8) == 49 / 64
    assert conv_op.rowbox_useful(14, 14, 128, 16) == conv_op.rowbox_useful(14, 14, 64, 16) \
        == 196 / 256


def test_schedule_for_takes_64_pixel_tiles_on_small_images_only(monkeypatch):
    c5 = _pick(32, 512, 7, 7, 512, 3, 3, 1)
    assert (c5.bm, c5.consumers, c5.bn, c5.bw, c5.rowbox, c5.cluster_m) == \
        (64, 1, 128, 8, True, 1), c5     # no cluster: measured faster
    assert c5.stages == 6
    # c2 / c3 / c4 (3x3, stride 1): bm 128, two consumers, as before the rule
    for shape in [(32, 64, 56, 56, 64, 3, 3, 1), (32, 128, 28, 28, 128, 3, 3, 1),
                  (32, 256, 14, 14, 256, 3, 3, 1)]:
        s = _pick(*shape)
        assert (s.bm, s.consumers) == (128, 2), (shape, s)
    # the constant turns it off: c5 gets the bm 128 schedule back
    monkeypatch.setattr(conv_op, "SMALL_IMAGE_RULE", False)
    old = _pick(32, 512, 7, 7, 512, 3, 3, 1)
    assert (old.bm, old.consumers, old.stages) == (128, 2, 5), old


def test_a_filter_past_the_image_is_not_a_division_by_zero():
    """P = 0 (2 input rows, a 3-row filter, no padding): the rule's useful fraction has no
    tiles to divide by; schedule_for returns the schedule it did before the rule (`check`
    refuses the layer at launch with its own message)."""
    s = _pick(2, 16, 2, 16, 32, 3, 3, 0)
    assert (s.bm, s.consumers) == (128, 2), s


def test_two_ctas_per_sm_renders_the_hint_and_checks_registers():
    src = ag.compiler.front_end(conv_kernel(), geom=GEOM_ROWBOX, s=SMALL_2SM)
    assert "__launch_bounds__(256, 2)" in str(getattr(src, "text", src))
    one = ag.compiler.front_end(conv_kernel(), geom=GEOM_ROWBOX, s=SMALL)
    assert "__launch_bounds__(256, 1)" in str(getattr(one, "text", one))
    # 256 threads enter with 128 registers at 2 CTAs an SM: 40 + 232 does not fit 2 x 128
    with pytest.raises(ValueError, match="ctas_per_sm=2: 256 threads enter with 128"):
        dataclasses.replace(SMALL_2SM, consumer_regs=232)
    with pytest.raises(ValueError, match="ctas_per_sm=3"):
        dataclasses.replace(SMALL, ctas_per_sm=3)
