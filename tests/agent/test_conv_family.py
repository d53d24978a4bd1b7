"""The agent's convolution family (argus/agent/families/conv.py): the start is argus.ops.conv's
own schedule_for, the space is ConvSchedule's declaration, every searched point is legal or
refused with a reason that names what to change, the estimate's orderings, and candidates run
through argus.ops.conv.convolve in the interpreter against float64."""

import importlib
import random

import pytest
import torch
import torch.nn.functional as F

from argus.agent.families import FAMILIES, ScheduleFamily, get_family
from argus.agent.families.conv import ConvFamily, Layer, conv_task, schedule

FAMILY = get_family("conv")
C = importlib.import_module("argus.ops.conv")

C5 = conv_task(32, 512, 7, 7, 512, 3, 3, padding=1)                 # small image: bm 64
C4 = conv_task(32, 256, 14, 14, 256, 3, 3, padding=1)               # bm 128, rowbox, no cluster
STRIDED = conv_task(32, 128, 28, 28, 128, 3, 3, stride=2, padding=1)  # strided rowbox
FEW = conv_task(2, 16, 7, 7, 24, 3, 3, padding=1)                   # packed taps
GROUPED = conv_task(2, 16, 9, 10, 32, 3, 3, stride=2, padding=1, groups=2)  # no rowbox
LAYERS = [C5, C4, STRIDED, FEW, GROUPED]
IDS = ["c5", "c4", "strided", "few_channels", "grouped_strided"]


def errors(t, p):
    return [d for d in FAMILY.static_check(t, p) if d.severity == "error"]


def test_the_family_is_registered_as_a_schedule_family():
    assert isinstance(FAMILIES["conv"], ConvFamily) and FAMILY is FAMILIES["conv"]
    assert isinstance(FAMILY, ScheduleFamily)
    assert type(FAMILY).static_check is ScheduleFamily.static_check
    assert C5.signature().startswith("conv/bf16/")


WIDE = conv_task(8, 128, 64, 64, 128, 3, 3, padding=1)               # bw 64: the TMA store


@pytest.mark.parametrize("t", LAYERS + [WIDE], ids=IDS + ["wide"])
def test_the_start_is_schedule_fors_pick(t):
    """schedule_for's pick for a channels-last x: the family's kernel writes the channels-last
    result."""
    layer = Layer.of(t)
    x, w = layer.tensors()
    assert schedule(t, FAMILY.default_params(t)) == \
        C.schedule_for(x.to(memory_format=torch.channels_last), w, *layer.args)
    assert not errors(t, FAMILY.default_params(t)), FAMILY.static_check(t,
                                                                        FAMILY.default_params(t))
    assert not errors(t, FAMILY.naive_params(t)), FAMILY.static_check(t, FAMILY.naive_params(t))


def test_the_start_follows_the_layer():
    """Not one schedule for all: the small-image rule, the cluster, packed taps, rowbox."""
    picks = {i: FAMILY.default_params(t) for i, t in zip(IDS, LAYERS)}
    assert (picks["c5"]["bm"], picks["c4"]["bm"]) == (64, 128)
    # rowbox layers run without the cluster (stride 1 too, since stop 50); per-row boxes keep it
    assert (picks["c4"]["cluster_m"], picks["strided"]["cluster_m"],
            picks["grouped_strided"]["cluster_m"]) == (1, 1, 2)
    assert picks["few_channels"]["taps_per_slice"] > 1 and picks["c4"]["taps_per_slice"] == 1
    assert picks["c4"]["rowbox"] and not picks["grouped_strided"]["rowbox"]
    # a wide layer starts from the TMA-store epilogue its channels-last result takes in the
    # op (the NCHW pick, the direct store an NCHW result needs, is not what the kernel writes)
    wide = FAMILY.default_params(WIDE)
    assert (wide["bw"], wide["epilogue"], wide["cluster_m"]) == (64, "tma", 1)
    x, w = Layer.of(WIDE).tensors()
    assert C.schedule_for(x, w, *Layer.of(WIDE).args).epilogue == "direct"
    s = schedule(FEW, picks["few_channels"])
    assert s.bk == Layer.of(FEW).packed_bk() < 64 and schedule(C4, picks["c4"]).bk == 64


@pytest.mark.parametrize("t,rowbox", [(FEW, True), (GROUPED, False)], ids=["rowbox", "rows"])
def test_the_geometry_is_the_ops_own(t, rowbox):
    layer = Layer.of(t)
    x, w = layer.tensors("cpu", torch.Generator().manual_seed(0))
    for bk in (16, 64):
        geom = C.operands(x, w, None, *layer.args, bk=bk, rowbox=rowbox)[6]
        assert layer.geometry(bk) == geom


@pytest.mark.parametrize("t,kw,code,words", [
    # ConvSchedule._entry_register_problems: two consumers' 64 x 128 accumulators at 80
    (C5, dict(bm=128, ctas_per_sm=2), "schedule_fields", "ctas_per_sm=2"),
    (C5, dict(epilogue="direct"), "schedule_fields", "bw=8 must equal"),
    (GROUPED, dict(rowbox=True), "rowbox_layer", "one group"),
    (GROUPED, dict(taps_per_slice=2), "packed_grouped_stride", "taps_per_slice=2"),
    (conv_task(2, 16, 7, 7, 12, 3, 3, padding=1), dict(epilogue="tma"), "tma_store_channels",
     "12 output channels"),
    (C4, dict(bn=12), "range", "multiple of 8"),
    (C4, dict(bn=256, stages=6), "smem", "shared memory"),
    # the trace: a rowbox box 64 columns x stride 8 wide, past the TMA box's 256
    (conv_task(1, 16, 16, 600, 16, 1, 1, stride=8), dict(bm=128, bw=64, epilogue="direct",
                                                         rowbox=True, cluster_m=1),
     "lower", "past the TMA box's 256"),
])
def test_rules_refuse_illegal_points_with_reasons(t, kw, code, words):
    p = {**FAMILY.default_params(t), **kw}
    found = errors(t, p)
    assert found and found[0].code == code, FAMILY.static_check(t, p)
    assert words in found[0].message and found[0].fix


def _names_a_field(d, params) -> bool:
    """A refusal says which parameter to change: the declarations' counterexample holds the
    fields they read, the class's and the trace's messages name them as `field=value`; the
    shared-memory plan names the ring in its fix."""
    if d.code in ("smem", "regs_budget"):
        return "stages" in d.fix or "tiles" in d.fix
    if d.code in ("schedule_fields", "lower"):
        return any(f"{n}=" in d.message for n in params)
    return bool(d.counterexample) and set(d.counterexample) <= set(params)


@pytest.mark.parametrize("t", [C5, GROUPED], ids=["c5", "grouped_strided"])
def test_searched_points_are_legal_or_refused_naming_a_field(t):
    space = FAMILY.space(t)
    rng = random.Random(17)
    points = FAMILY.neighbors(t, FAMILY.default_params(t)) + \
        [{k: rng.choice(v) for k, v in space.items()} for _ in range(60)]
    legal, codes = 0, set()
    for p in points:
        assert set(p) == set(space) and all(p[k] in space[k] for k in p), p
        found = errors(t, p)
        legal += not found
        for d in found[:1]:
            codes.add(d.code)
            assert _names_a_field(d, p), (p, d)
    # a space that refuses everything, or nothing, would not be tested by this
    assert legal >= 10 and "schedule_fields" in codes, (legal, codes)


def test_the_space_is_convschedules_declaration_narrowed_by_the_layer():
    from argus.agent.families.declared import declare_library
    from argus.kernels.conv import ConvSchedule
    from argus.schedule_space import space_of

    declare_library()
    declared = space_of(ConvSchedule)
    for t in LAYERS:
        for name, values in FAMILY.space(t).items():
            assert values and all(declared.legal_of(name).accepts(v) for v in values), name
    assert FAMILY.space(C4)["rowbox"] == (False, True)
    # one-field constraints narrow the grouped column-strided layer's space
    assert FAMILY.space(GROUPED)["rowbox"] == (False,)
    assert FAMILY.space(GROUPED)["taps_per_slice"] == (1,)
    assert FAMILY.space(conv_task(1, 8, 8, 8, 12, 3, 3))["epilogue"] == ("direct",)


def test_two_ctas_an_sm_take_the_entry_registers():
    p = dict(FAMILY.default_params(C5), ctas_per_sm=2, stages=3)
    assert not errors(C5, p), FAMILY.static_check(C5, p)
    s = schedule(C5, p)
    assert (s.consumers, s.producer_regs, s.consumer_regs) == (1, 40, 216)


def test_estimate_ranks_worse_tiles_below_the_heuristic():
    est = lambda t, **kw: FAMILY.estimate(t, {**FAMILY.default_params(t), **kw})  # noqa
    e = est(C5)
    # 128-pixel tiles on a 7 x 7 image: 49 of 128 pixels real (rowbox_useful) against 49 / 64
    worse = est(C5, bm=128, stages=5)
    assert worse.ms > 1.3 * e.ms, (worse.ms, e.ms)
    assert worse.detail["useful"] == C.rowbox_useful(7, 7, 128, 8) and \
        e.detail["useful"] == C.rowbox_useful(7, 7, 64, 8)
    # the per-row producer's boxes bound c4's step (measured: 0.42x against 0.94x cuDNN)
    rows = est(C4, rowbox=False)
    assert rows.ms > 1.3 * est(C4).ms and rows.detail["producer_us"] > 0
    # the naive start (per-row boxes, 2 stages) models slower on ResNet's layers; not on the
    # tiny grouped strided one, whose start (per-row, bw 8: 16 boxes a step) the model finds
    # producer-bound: the search is there to find that
    for t in (C5, C4, STRIDED):
        assert FAMILY.estimate(t, FAMILY.naive_params(t)).ms > est(t).ms, t
    assert all(0 < est(t).detail["useful"] <= 1.0 for t in LAYERS)
    assert FAMILY.estimate(C4, dict(FAMILY.default_params(C4), bw=24)) is None


def _reference(t, x, w):
    layer = Layer.of(t)
    return F.conv2d(x.double(), w.double(), None, *layer.args)


@pytest.mark.parametrize("t", [FEW, GROUPED], ids=["few_channels", "grouped_strided"])
def test_candidates_run_in_the_interpreter_and_match_float64(t):
    """The start and one legal point a seeded sample of the space finds, which differs from
    it in the tile or the producer (so a second kernel form runs)."""
    rng = random.Random(3)
    space, start = FAMILY.space(t), FAMILY.default_params(t)
    other = None
    while other is None:
        p = {k: rng.choice(v) for k, v in space.items()}
        if (p["bm"], p["rowbox"], p["taps_per_slice"]) != \
                (start["bm"], start["rowbox"], start["taps_per_slice"]) and FAMILY.legal(t, p):
            other = p
    x, w = Layer.of(t).tensors("cpu", torch.Generator().manual_seed(1))
    exact = _reference(t, x, w)
    for p in (start, other):
        out = FAMILY.run(t, p, x, w)
        rel = ((out.double() - exact).norm() / exact.norm()).item()
        assert out.shape == exact.shape and rel < 1e-2, (p, rel)


def test_the_rendered_kernel_lowers():
    from argus.agent.families.schedule import lower_resources

    p = FAMILY.default_params(FEW)
    ns: dict = {}
    exec(compile(FAMILY.render_kernel(FEW, p), "<conv>", "exec"), ns)
    assert ns["SCHEDULE"] == schedule(FEW, p)
    assert isinstance(lower_resources(ns["KERNEL"], ns["CONSTEXPRS"]), dict)


def test_a_task_outside_the_family_is_refused():
    with pytest.raises(ValueError, match="16-bit"):
        conv_task(1, 8, 8, 8, 8, 3, 3, dtype="f32")
