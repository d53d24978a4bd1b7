"""ConvSchedule at two CTAs an SM (ctas_per_sm=2, issue 17): ptxas compiles the whole kernel
at the registers a thread enters with (argus.target.limits.entry_registers: 128 for one
consumer warpgroup, 80 for two), so a consumer's 64 x bn fp32 accumulator (bn / 2 a thread)
plus conv.WGMMA_ENTRY_MARGIN must fit that count (ConvSchedule._entry_register_problems).
Checked against NVRTC for sm_90a on ResNet-50 c5 (3x3, 512 channels): every schedule the
check accepts builds without spills within the entry count, the small-image candidates of
docs/perf/conv.md among them; every schedule it refuses, built with the check switched off,
is refused by ptxas ("Insufficient registers")."""

from __future__ import annotations

import dataclasses

import pytest

from argus.compiler import compile_kernel
from argus.errors import CompileError
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.target.limits import entry_registers

C5 = ConvGeometry(3, 3, 1, 1, 1, 1, cg_padded=512)
# argus.ops.conv.SMALL_IMAGE_RULE's c5 schedule, at two CTAs an SM (consumers 216: 40 + 216
# within 2 x 128)
RULE_2SM = ConvSchedule(bm=64, bn=128, bw=8, stages=3, consumers=1, epilogue="tma",
                        rowbox=True, cluster_m=2, ctas_per_sm=2, consumer_regs=216)
TWO_CONSUMERS = dict(bm=128, consumers=2, bw=8, stages=2, cluster_m=1, producer_regs=40,
                     consumer_regs=96)
DIRECT = dict(epilogue="direct", bw=64, rowbox=False, cluster_m=1, stages=2)

ACCEPTED = {
    # docs/perf/conv.md "Small images: 64-pixel rowbox tiles for c5": 128 registers, no spills
    "doc_bn128_3stages": {},
    "doc_bn64_6stages": dict(bn=64, stages=6),
    # the largest accumulators that fit: 96 + 26 <= 128, 48 + 26 / 52 + 26 <= 80
    "one_consumer_bn192": dict(bn=192, stages=2, cluster_m=1),
    "one_consumer_bn200_direct": dict(bn=200, **DIRECT),
    "two_consumers_bn96": dict(bn=96, **TWO_CONSUMERS),
    "two_consumers_bn104_direct": dict(TWO_CONSUMERS, bn=104, **DIRECT),
    # promote's second accumulator: no more at entry (80 + 80 > 128, yet it builds)
    "promote_bn160": dict(bn=160, stages=2, cluster_m=1, promote=True),
}
REFUSED = {
    # ptxas: "register target of 90 / 82 / 130 / 90" (accumulator + 26)
    "two_consumers_bn128": dict(bn=128, **TWO_CONSUMERS),
    "two_consumers_bn112_direct": dict(TWO_CONSUMERS, bn=112, **DIRECT),
    "one_consumer_bn208_direct": dict(bn=208, **DIRECT),
    "promote_two_consumers_bn128": dict(bn=128, promote=True, **TWO_CONSUMERS),
}


def _build(schedule: ConvSchedule):
    return compile_kernel(conv_kernel(), verify=False, geom=C5, s=schedule)


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_accepted_schedule_builds_without_spills_at_entry(name):
    s = dataclasses.replace(RULE_2SM, **ACCEPTED[name])
    res = _build(s).resources
    entry = entry_registers(128 * (1 + s.consumers), s.ctas_per_sm)
    assert res.registers <= entry, (s, res)
    assert res.spill_stores == 0 and res.spill_loads == 0, (s, res)


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_schedule_is_refused_by_ptxas_too(name, monkeypatch):
    with pytest.raises(ValueError, match="ptxas compiles the kernel at the") as err:
        dataclasses.replace(RULE_2SM, **REFUSED[name])
    msg = str(err.value)
    assert "fp32 accumulator" in msg and "use bn <=" in msg and "ctas_per_sm=1" in msg, msg
    # the same schedule without the check: NVRTC refuses it (or spills)
    monkeypatch.setattr(ConvSchedule, "_entry_register_problems", lambda self: [])
    s = dataclasses.replace(RULE_2SM, **REFUSED[name])
    try:
        res = _build(s).resources
    except CompileError as e:
        assert "Insufficient registers" in str(e), str(e)[-800:]
        return
    assert res.spill_stores or res.spill_loads, (s, res)


def test_the_bn_the_message_names_is_accepted():
    """The fix the message gives (bn <= fit, or one consumer warpgroup) is a schedule the
    check takes."""
    with pytest.raises(ValueError) as err:
        dataclasses.replace(RULE_2SM, **REFUSED["two_consumers_bn128"])
    msg = str(err.value)
    fit = int(msg.split("use bn <= ")[1].split()[0])
    one = int(msg.split("bn <= ")[2].split(")")[0])
    assert (fit, one) == (96, 192), msg   # TMA epilogue: multiples of 16
    dataclasses.replace(RULE_2SM, **dict(REFUSED["two_consumers_bn128"], bn=fit))
    dataclasses.replace(RULE_2SM, bn=one, cluster_m=1, stages=2)
    with pytest.raises(ValueError):
        dataclasses.replace(RULE_2SM, **dict(REFUSED["two_consumers_bn128"], bn=fit + 16))


def test_one_cta_an_sm_is_not_checked_against_the_entry_count():
    """ctas_per_sm=1: 255 registers at entry and setmaxnreg's budget; the default schedules
    (bm 128, two consumers, bn 128 and more) are unaffected."""
    s = dataclasses.replace(RULE_2SM, ctas_per_sm=1, **dict(TWO_CONSUMERS, bn=256,
                                                            consumer_regs=232))
    assert s._entry_register_problems() == []
