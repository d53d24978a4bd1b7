"""The agent's fp8 MoE family (argus/agent/families/moe_fp8.py): registration, the declared space
(MoeFp8Schedule's fields, families/declared.py MOE_FP8), the start point (argus.ops.moe's
fp8_schedule_for at the task's card class: the H100's and the H200's), every point the search
proposes legal or refused with a reason that names what to change, the calibrated estimate's
ordering of the measured schedules (each card class's model against that card's measurements),
and a candidate run through argus.ops.moe's fp8 expert path
in the interpreter against float64."""

import dataclasses
import random

import pytest
import torch

from argus.agent.families import FAMILIES, get_family
from argus.agent.cost_model import COPY_EFFICIENCY, H200
from argus.agent.families.moe_fp8 import (FIELDS, GRID_MEASURED_US, H200_LAYER_TFLOPS,
                                          MEASURED_LAYER_MS, QUANTIZE_OUT_MEASURED_US,
                                          MoeFp8Family, grid_factor, grid_ratio, h200_layer_ms,
                                          measured_schedule, moe_fp8_task, params_of,
                                          promotion_scale, schedule_of, task_card,
                                          units_per_cta)
from argus.agent.task import TaskSpec
from argus.kernels import moe_fp8 as K
from argus.ops import moe_module as M

FAMILY = get_family("moe_fp8")
CARD_H100, CARD_H200 = M.CARD_H100, M.CARD_H200

# DeepSeek-V3 prefill: the calibration point, an H100 measurement (the H100 class's cost model,
# named: unnamed, a task takes the current device's class, and the H200's model differs)
DSV3 = moe_fp8_task(16384, 7168, 2048, 256, 8, card=CARD_H100)
SMALL = moe_fp8_task(16, 7168, 2048, 256, 8)       # decode-sized: FP8_SMALL


def errors(t, p):
    return [d for d in FAMILY.static_check(t, p) if d.severity == "error"]


def test_registered_beside_the_bf16_family():
    assert isinstance(FAMILY, MoeFp8Family) and FAMILIES["moe_fp8"] is FAMILY
    assert "moe" in FAMILIES and FAMILIES["moe"] is not FAMILY
    assert DSV3.family == "moe_fp8" and DSV3.dtype == "e4m3" and DSV3.track == "strict"
    assert FAMILY.baseline_estimates(DSV3)["torch._grouped_mm (bf16)"].ms > 0


def test_the_space_is_moefp8schedules_declaration():
    """Every searched value is accepted by MoeFp8Schedule's declared space (its own MOE_FP8
    entries over MoeSchedule's and the skeleton's), bk is 128 e4m3, and neither swap_ab nor
    split_k is searched (the class refuses both)."""
    from argus.agent.families.declared import declare_library
    from argus.schedule_space import space_of

    declare_library()
    declared = space_of(K.MoeFp8Schedule)
    space = FAMILY.space(DSV3)
    assert tuple(space) == FIELDS
    for name, values in space.items():
        assert values and all(declared.legal_of(name).accepts(v) for v in values), name
    assert declared.legal_of("bk").choices == (128,)
    assert not declared.legal_of("swap_ab").searched and not declared.legal_of("split_k").searched
    assert space["persistent"] == (False, True)
    # the same-expert pair multicast is not searched: measured slower (its reason says so)
    assert "pair_multicast" not in space and not declared.legal_of("pair_multicast").searched
    assert "slower" in declared.legal_of("pair_multicast").rule
    notes = FAMILY.constraint_notes(DSV3)
    for code in ("decode_threshold", "unit_grid"):
        assert any(n.startswith(code) and "fp8_schedule_for" in n for n in notes), code


# the split 128 x 256 on one CTA a unit, without and with the gate-up quantizing h itself (the
# latter fp8_schedule_for's unit-grid form, argus/ops/moe.py FP8_PREFILL_UNIT_GRID)
GRID = dataclasses.replace(K.FP8_PREFILL_SPLIT_SMEM_TMA, persistent=False)
GRID_Q = dataclasses.replace(GRID, quantize_out=True)
WALK = K.FP8_PREFILL_SPLIT_SMEM_TMA
WALK_Q = dataclasses.replace(WALK, quantize_out=True)

# fp8_schedule_for at DeepSeek-V3 (E 256, k 8, H 7168, I 2048: T / 32 rows an expert) and at a
# few experts (Mixtral's E 8, k 2, H 4096, I 14336: T / 4 rows an expert): FP8_SMALL below 32
# rows an expert, from 32 to 128 the fused quantize on the unit grid (the H100 class) or on the
# walk (the H200 class: "BAND" below), the walk above
DSV3_DIMS, FEW_DIMS = (256, 8, 7168, 2048), (8, 2, 4096, 14336)
BAND = {CARD_H100: GRID_Q, CARD_H200: WALK_Q}
RULE = [(16, DSV3_DIMS, K.FP8_SMALL), (63, DSV3_DIMS, K.FP8_SMALL),
        (64, DSV3_DIMS, K.FP8_SMALL), (1023, DSV3_DIMS, K.FP8_SMALL), (1024, DSV3_DIMS, BAND),
        (2048, DSV3_DIMS, BAND), (4096, DSV3_DIMS, BAND), (4097, DSV3_DIMS, WALK),
        (8192, DSV3_DIMS, WALK), (16384, DSV3_DIMS, WALK),
        (1, FEW_DIMS, K.FP8_SMALL), (127, FEW_DIMS, K.FP8_SMALL), (128, FEW_DIMS, BAND),
        (512, FEW_DIMS, BAND), (513, FEW_DIMS, WALK), (1024, FEW_DIMS, WALK)]


@pytest.mark.parametrize("card", [CARD_H100, CARD_H200])
@pytest.mark.parametrize("T,dims,want", RULE, ids=[f"T{T}-E{d[0]}" for T, d, _ in RULE])
def test_start_point_is_fp8_schedule_for(T, dims, want, card):
    """The start is argus.ops.moe.fp8_schedule_for's schedule at the task's card at every size
    (the 64 x 128 tile below FP8_BIG_TILE_ROWS rows an expert; up to FP8_UNIT_GRID_MAX_ROWS
    the split 128 x 256 with the gate-up quantizing h itself, on one CTA a unit on the H100
    class and on the walk on the H200 class; the walk with the separate quantize above), and
    it draws no warning."""
    E, k, H, I = dims
    want = want[card] if isinstance(want, dict) else want
    t = moe_fp8_task(T, H, I, E, k, card=card)
    assert task_card(t) == card and FAMILY.facts(t)["card"] == card
    assert M.fp8_schedule_for(T, k, E, card) == want
    assert schedule_of(t, FAMILY.default_params(t)) == want
    assert params_of(want) == FAMILY.default_params(t)
    for p in (FAMILY.default_params(t), FAMILY.naive_params(t)):
        assert not errors(t, p), FAMILY.static_check(t, p)
    assert not [d for d in FAMILY.static_check(t, FAMILY.default_params(t))], "start warns"


def test_the_rule_is_read_from_argus_ops_moe(monkeypatch):
    """The family copies no threshold: moving argus/ops/moe.py's moves its start, its facts and
    the promotion card's applicability."""
    from argus.agent.knowledge import load_cards

    t = moe_fp8_task(1024, 7168, 2048, 256, 8, card=CARD_H100)          # 32 rows an expert
    promotion = {c.id: c for c in load_cards()}["moe_fp8.promotion"]
    assert FAMILY.facts(t)["big_tile_rows"] == M.FP8_BIG_TILE_ROWS
    assert FAMILY.facts(t)["unit_grid_max_rows"] == M.FP8_UNIT_GRID_MAX_ROWS
    assert promotion.applies(t.features())
    monkeypatch.setattr(M, "FP8_BIG_TILE_ROWS", 64)
    assert FAMILY.default_params(t) == params_of(K.FP8_SMALL)
    assert not promotion.applies(t.features())
    monkeypatch.setattr(M, "FP8_UNIT_GRID_MAX_ROWS", 16)
    big = moe_fp8_task(4096, 7168, 2048, 256, 8, card=CARD_H100)        # 128 rows an expert
    big_h200 = moe_fp8_task(4096, 7168, 2048, 256, 8, card=CARD_H200)
    for task in (big, big_h200):
        assert FAMILY.default_params(task) == params_of(K.FP8_PREFILL_SPLIT_SMEM_TMA)
        assert not FAMILY.facts(task)["rule_quantize_out"]
    # each card's band form is argus/ops/moe.py's (FP8_PREFILL_UNIT_GRID,
    # FP8_PREFILL_WALK_FUSED_QUANTIZE), not a copy, and so is which card runs the grid
    monkeypatch.setattr(M, "FP8_UNIT_GRID_MAX_ROWS", 4096)
    monkeypatch.setattr(M, "FP8_PREFILL_UNIT_GRID", GRID)
    monkeypatch.setattr(M, "FP8_PREFILL_WALK_FUSED_QUANTIZE", WALK)
    assert FAMILY.default_params(big) == params_of(GRID)
    assert FAMILY.default_params(big_h200) == params_of(WALK)
    assert not FAMILY.facts(big)["rule_quantize_out"]
    monkeypatch.setattr(M, "fp8_unit_grid_pays", lambda card: True)
    assert FAMILY.default_params(big_h200) == params_of(GRID)
    assert FAMILY.facts(big_h200)["unit_grid_pays"]


def test_the_tile_threshold_is_a_warning():
    p = {**FAMILY.default_params(SMALL), "bm": 128, "bn": 128, "stages": 6}
    found = FAMILY.static_check(SMALL, p)
    assert [d.code for d in found] == ["decode_threshold"] and found[0].severity == "warning"
    assert "bm=64" in found[0].fix and "fp8_schedule_for" in found[0].fix
    # 32 rows an expert (FP8_BIG_TILE_ROWS) takes the 128-row tile: 64 rows warn there
    t = moe_fp8_task(1024, 7168, 2048, 256, 8, card=CARD_H100)
    p = {**FAMILY.default_params(t), "bm": 64, "bn": 128, "n_split": 1, "stages": 8,
         "smem_scales": False, "epilogue": "direct", "persistent": False,
         "quantize_out": False}
    found = FAMILY.static_check(t, p)
    assert [d.code for d in found] == ["decode_threshold"], found
    assert "bm=128" in found[0].fix and "FP8_BIG_TILE_ROWS" in found[0].message


@pytest.mark.parametrize("card,T,want", [
    (CARD_H100, 16, True), (CARD_H100, 1024, False), (CARD_H100, 4096, False),
    (CARD_H100, 4097, True), (CARD_H100, 8192, True), (CARD_H100, 16384, True),
    # the H200 class: the walk at every size (the unit grid measured slower there)
    (CARD_H200, 16, True), (CARD_H200, 1024, True), (CARD_H200, 4096, True),
    (CARD_H200, 4097, True), (CARD_H200, 16384, True)])
def test_the_grid_rule_is_a_warning(card, T, want):
    """persistent against fp8_schedule_for's at the task's card: on the H100 class the unit
    grid from FP8_BIG_TILE_ROWS up to FP8_UNIT_GRID_MAX_ROWS rows an expert, the walk
    elsewhere; on the H200 class the walk everywhere; the other is a warning that names the
    rule, the card and the fix, never an error."""
    t = moe_fp8_task(T, 7168, 2048, 256, 8, card=card)
    start = FAMILY.default_params(t)
    assert start["persistent"] is want
    found = FAMILY.static_check(t, {**start, "persistent": not want})
    assert [d.code for d in found] == ["unit_grid"] and found[0].severity == "warning"
    assert f"use persistent={want}" in found[0].fix and f"the {card} class" in found[0].fix
    assert "argus/ops/moe.py fp8_schedule_for" in found[0].fix
    assert "FP8_UNIT_GRID_MAX_ROWS" in found[0].message
    assert ("runs the persistent walk at every size" in found[0].message) == (card == CARD_H200)


@pytest.mark.parametrize("card", [CARD_H100, CARD_H200])
@pytest.mark.parametrize("T,want", [(1024, True), (4096, True), (4097, False),
                                    (16384, False)])
def test_the_fused_quantize_rule_is_a_warning(T, want, card):
    """quantize_out against fp8_schedule_for's at the task's card: the gate-up quantizes h
    itself up to FP8_UNIT_GRID_MAX_ROWS rows an expert (FP8_PREFILL_UNIT_GRID on the H100
    class, FP8_PREFILL_WALK_FUSED_QUANTIZE on the H200 class), the walk above keeps the
    separate quantize; the other is a warning naming the rule and the fix, never an error. A
    schedule that cannot fuse (not the rule's n_split / bn) is not told to."""
    t = moe_fp8_task(T, 7168, 2048, 256, 8, card=card)
    start = FAMILY.default_params(t)
    assert start["quantize_out"] is want
    found = FAMILY.static_check(t, {**start, "quantize_out": not want})
    assert [d.code for d in found] == ["gate_up_quantize"] and found[0].severity == "warning"
    assert f"use quantize_out={want}" in found[0].fix and f"the {card} class" in found[0].fix
    assert "argus/ops/moe.py fp8_schedule_for" in found[0].fix + found[0].message
    band = {CARD_H100: "FP8_PREFILL_UNIT_GRID", CARD_H200: "FP8_PREFILL_WALK_FUSED_QUANTIZE"}
    assert all((name in found[0].message) == (c == card) for c, name in band.items())
    # the other grid with the other quantize: two warnings, one a field
    both = FAMILY.static_check(t, {**start, "quantize_out": not want,
                                   "persistent": not start["persistent"]})
    assert sorted(d.code for d in both) == ["gate_up_quantize", "unit_grid"]
    assert all(d.severity == "warning" for d in both)
    # the 128 x 128 (no fused form): quantize_out=False draws no quantize warning
    plain = {**start, "bn": 128, "n_split": 1, "quantize_out": False, "stages": 4}
    assert "gate_up_quantize" not in [d.code for d in FAMILY.static_check(t, plain)]
    assert errors(t, {**plain, "quantize_out": True})[0].code == "schedule_fields"


@pytest.mark.parametrize("kw,code,words", [
    (dict(n_split=1), "schedule_fields", "bn=256 exceeds the register budget"),
    (dict(cluster_m=2), "schedule_fields", "no clusters"),
    (dict(overlap=True), "schedule_fields", "overlap"),
    (dict(stages=4), "smem", "shared memory"),
    # the op's own refusal (gate_up_fits): the gate-up's 96-row halves straddle a scale block
    (dict(bn=192, smem_scales=False, epilogue="direct"), "fp8_layer", "bn/2"),
])
def test_refusals_name_what_to_change(kw, code, words):
    p = {**FAMILY.default_params(DSV3), **kw}
    found = errors(DSV3, p)
    assert found and found[0].code == code, FAMILY.static_check(DSV3, p)
    assert words in found[0].message and found[0].fix


def test_the_ops_shape_refusal():
    t = moe_fp8_task(4096, 7168, 2000, 256, 8)   # I not a multiple of 128
    found = errors(t, FAMILY.default_params(t))
    assert found[0].code == "fp8_layer" and "multiples of 128" in found[0].message
    assert "pad H and I" in found[0].fix


def _named(d) -> bool:
    """A refusal names what to change: a parameter of the space, or shared memory."""
    text = d.message + " " + d.fix
    return bool(d.fix) and (any(f in text for f in FIELDS) or "shared memory" in text)


def test_every_proposed_point_is_legal_or_refused_with_a_reason():
    """The neighbours of both starts and the naive point, the cards' expansions, and a seeded
    sample of the whole space: each legal, or refused by an error that names a parameter to
    change (or shared memory)."""
    from argus.agent.knowledge import load_cards

    cards = [c for c in load_cards() if FAMILY.applies(c)]
    assert {c.id for c in cards} >= {"moe_fp8.promotion", "moe_fp8.tile"}
    proposed = []
    for t in (DSV3, SMALL):
        for start in (FAMILY.default_params(t), FAMILY.naive_params(t)):
            proposed += [(t, q) for q in FAMILY.neighbors(t, start)]
            for c in cards:
                proposed += [(t, q) for q in FAMILY.expand(t, c, start)]
    rng = random.Random(7)
    space = FAMILY.space(DSV3)
    proposed += [(DSV3, {k: rng.choice(v) for k, v in space.items()}) for _ in range(40)]
    legal = 0
    for t, q in proposed:
        found = errors(t, q)
        assert all(_named(d) for d in found), (q, found)
        if not found:
            legal += 1
            assert FAMILY.estimate(t, q) is not None
    assert legal >= 20, legal


def test_estimate_orders_the_measured_schedules_as_measured():
    """At DeepSeek-V3 T = 16384 the estimate orders the six measured forms as the H100 run did
    (docs/perf/moe.md: 859 > 778 > 713 > 691 > 603 > 495 TFLOP/s), and each is its
    measurement (the calibration), labelled an estimate."""
    order = [K.FP8_PREFILL_SPLIT_SMEM_TMA, K.FP8_PREFILL_SPLIT_SMEM, K.FP8_PREFILL_SPLIT_TMA,
             K.FP8_PREFILL_SPLIT, K.FP8_PREFILL, dataclasses.replace(K.FP8_PREFILL,
                                                                     smem_scales=True)]
    est = [FAMILY.estimate(DSV3, params_of(s)) for s in order]
    assert all(e.kind == "estimate" for e in est)
    ms = [e.ms for e in est]
    assert ms == sorted(ms), ms
    measured = sorted(v for _, v in MEASURED_LAYER_MS.values())
    assert ms == pytest.approx(measured, rel=1e-9)
    assert est[0].detail["tflops"] == pytest.approx(859, abs=1)
    # off the measured forms the structural model still orders the obvious
    e = lambda **kw: FAMILY.estimate(DSV3, {**FAMILY.default_params(DSV3), **kw}).ms  # noqa
    assert e() < e(stages=2) and e() < e(bm=64)
    assert e() < FAMILY.estimate(DSV3, FAMILY.naive_params(DSV3)).ms
    assert e() < FAMILY.baseline_estimates(DSV3)["torch._grouped_mm (bf16)"].ms
    assert FAMILY.estimate(DSV3, {**FAMILY.default_params(DSV3), "n_split": 1}) is None


def _mean(xs):
    return sum(xs) / len(xs)


def test_the_grid_factor_is_fitted_to_the_measured_gemms():
    """persistent=False multiplies the GEMMs by GRID_MEASURED_US's grid / walk ratio at the
    walk's units a CTA: each size's alternated-rounds pair where there is one (else its plain
    runs' means), the T = 1024..4096 mean at their shared point, exactly; between the points
    log-linear, outside the nearest. The fit crosses 1 between 128 and 256 rows an expert
    (T = 4096 and 8192), where argus/ops/moe.py's FP8_UNIT_GRID_MAX_ROWS puts the rule. The
    walk's factor is 1, so the T = 16384 calibration is untouched."""
    low = _mean([grid_ratio(T) for T in GRID_MEASURED_US if T <= 4096])
    assert grid_ratio(1024) == 3582 / 3932 and grid_ratio(2048) == 3853 / 4500
    dims = lambda T: moe_fp8_task(T, 7168, 2048, 256, 8).dims  # noqa: E731
    for T in (256, 1024, 2048, 4096):
        assert grid_factor(dims(T), GRID) == pytest.approx(low, rel=1e-12)
    assert grid_factor(dims(8192), GRID) == pytest.approx(7183 / 6998, rel=1e-12)
    for T in (16384, 65536):
        assert grid_factor(dims(T), GRID) == pytest.approx(12245 / 11724, rel=1e-12)
    assert low < 1.0 < grid_factor(dims(8192), GRID) < grid_factor(dims(16384), GRID)
    # the rule's threshold lies between the last grid size and the first walk one
    rows = lambda T: M.fp8_rows_per_expert(T, 8, 256)  # noqa: E731
    assert rows(4096) <= M.FP8_UNIT_GRID_MAX_ROWS < rows(8192)
    assert grid_factor(dims(16384), K.FP8_PREFILL_SPLIT_SMEM_TMA) == 1.0
    walk = FAMILY.estimate(DSV3, params_of(K.FP8_PREFILL_SPLIT_SMEM_TMA))
    assert walk.ms == pytest.approx(MEASURED_LAYER_MS[("split", True, "tma")][1], rel=1e-9)
    assert walk.detail["grid_factor"] == 1.0 and walk.detail["quantize_out_factor"] == 1.0


@pytest.mark.parametrize("persistent", [True, False])
def test_quantize_out_moves_the_gemms_by_the_measured_ratio(persistent):
    """quantize_out: the glue loses quantize_1x128 (h read in bf16 and written in e4m3, one
    launch), the gate-up writes e4m3 (the structural model), and the GEMMs move by
    QUANTIZE_OUT_MEASURED_US's fused / separate ratio at each measured size (T = 1024 and 4096
    share a point: their mean there, where the weights' floor binds the structural model with
    or without the e4m3 write, so its ratio is 1), on the walk and on the grid."""
    sep = dataclasses.replace(WALK, persistent=persistent)
    fused = dataclasses.replace(sep, quantize_out=True)
    measured = QUANTIZE_OUT_MEASURED_US[persistent]
    low = _mean([f / s for T, (s, f) in measured.items() if T <= 4096])
    for T, (s_us, f_us) in measured.items():
        t = moe_fp8_task(T, 7168, 2048, 256, 8, card=CARD_H100)
        a, b = (FAMILY.estimate(t, params_of(x)) for x in (sep, fused))
        gemms = lambda e: e.detail["gate_up_ms"] + e.detail["down_ms"]  # noqa: E731
        assert gemms(b) / gemms(a) == pytest.approx(low if T <= 4096 else f_us / s_us,
                                                     rel=1e-9), T
        d = t.dims
        h_quantize = d["T"] * d["top_k"] * d["I"] * 3       # bf16 in, e4m3 out
        assert a.detail["glue_ms"] > b.detail["glue_ms"]
        assert a.detail["glue_ms"] - b.detail["glue_ms"] == pytest.approx(
            (h_quantize / (COPY_EFFICIENCY * H200.hbm_bytes_s) + H200.launch_s) * 1e3)
        assert b.detail["quantize_out_factor"] != 1.0 and a.detail["quantize_out_factor"] == 1.0


# the whole DeepSeek-V3 fp8 layer, ms (H100, 2026-12-06, `scripts/gpu_moe_bench.py --fp8`,
# docs/perf/moe.md), plain order: (walk, grid) of the split 128 x 256 and of FP8_SMALL. The
# split's pair at T = 8192 (walk 8.597, grid 8.394) traded places in the alternated run below
# (ALTERNATED_LAYER_MS), which the rule and the estimate follow; FP8_SMALL's pair there (walk
# 14.999, grid 13.490) the estimate does not reproduce (its grid factor is the split's, one
# function of the output a CTA walks: 1.026 there), left out
LAYER_GRID_MS = {1024: ((4.090, 3.761), (4.244, 4.147)), 2048: ((4.798, 4.388), (6.161, 5.646)),
                 4096: ((5.678, 5.537), (9.018, 8.029)), 8192: (None, None),
                 16384: ((13.717, 14.670), None)}

# the newest and least biased layer data: the same run as QUANTIZE_OUT_MEASURED_US and the
# alternated pairs of GRID_MEASURED_US (H100, 2026-12-06, `scripts/gpu_moe_bench.py --fp8
# --rounds 3`: the paths alternate and rotate which goes first, median of 3 rounds), ms:
# {T: {(persistent, quantize_out): ms}} of the split 128 x 256 smem TMA tile
ALTERNATED_LAYER_MS = {
    1024: {(True, False): 4.326, (True, True): 4.235, (False, False): 3.957,
           (False, True): 3.851},
    4096: {(True, False): 6.042, (True, True): 6.036, (False, False): 5.655,
           (False, True): 5.550},
    8192: {(True, False): 8.247, (True, True): 8.581, (False, False): 8.666,
           (False, True): 8.510},
    16384: {(True, False): 14.346, (True, True): 14.304, (False, False): 15.187,
            (False, True): 14.944},
}
# the two forms within this of each other are a tie: at T = 16384 the walk (fp8_schedule_for's)
# and the fused walk measured 14.346 and 14.304 ms (0.3%), while their GEMM kernels alone put
# the fused walk 7.6% slower (QUANTIZE_OUT_MEASURED_US)
TIE = 0.005


def _split(persistent, quantize_out):
    return dataclasses.replace(WALK, persistent=persistent, quantize_out=quantize_out)


@pytest.mark.parametrize("T", sorted(set(LAYER_GRID_MS) | set(ALTERNATED_LAYER_MS)))
def test_the_estimate_picks_the_grid_where_it_was_measured_faster(T):
    """Of each measured walk / grid pair the estimate prefers the one the H100 ran faster: the
    split's (separate quantize) in the alternated run, the grid up to 128 rows an expert, the
    walk from 256 (T = 8192), as fp8_schedule_for does; the plain runs' pairs of the split (T =
    2048) and of FP8_SMALL (T = 1024-4096). The T = 16384 grid over the walk within 2% of the
    alternated run's (15.187 / 14.346)."""
    t = moe_fp8_task(T, 7168, 2048, 256, 8, card=CARD_H100)
    pairs = [(tile, m) for tile, m in zip((WALK, K.FP8_SMALL), LAYER_GRID_MS.get(T, (None,) * 2))
             if m is not None]
    if T in ALTERNATED_LAYER_MS:
        alt = ALTERNATED_LAYER_MS[T]
        pairs = [(WALK, (alt[(True, False)], alt[(False, False)]))] + [
            (tile, m) for tile, m in pairs if tile is not WALK]
    assert pairs
    for tile, measured in pairs:
        walk, grid = (FAMILY.estimate(t, params_of(dataclasses.replace(tile, persistent=p))).ms
                      for p in (True, False))
        assert (grid < walk) == (measured[1] < measured[0]), (T, tile.bm, walk, grid)
    if T == 16384:
        walk, grid = (FAMILY.estimate(t, params_of(_split(p, False))) for p in (True, False))
        alt = ALTERNATED_LAYER_MS[T]
        assert grid.ms / walk.ms == pytest.approx(alt[(False, False)] / alt[(True, False)],
                                                  rel=0.02)
        assert "grid_factor" in grid.detail and grid.detail["units_per_cta"] > 100


@pytest.mark.parametrize("T", sorted(ALTERNATED_LAYER_MS))
def test_the_estimates_best_measured_form_is_the_measured_best(T):
    """Of the four forms of the split measured in alternated rounds at each size (walk or grid,
    the separate quantize or the gate-up's own: ALTERNATED_LAYER_MS, the newest and least
    biased layer data), the estimate's fastest is fp8_schedule_for's choice and the H100's
    fastest (at T = 16384 within TIE of it: the walk and the fused walk tie there): the grid
    with the fused quantize from 32 to 128 rows an expert, the walk from 256. FP8_SMALL's forms
    (measured slower in the plain runs) the estimate puts behind it too."""
    t = moe_fp8_task(T, 7168, 2048, 256, 8, card=CARD_H100)
    measured = ALTERNATED_LAYER_MS[T]
    est = {key: FAMILY.estimate(t, params_of(_split(*key))).ms for key in measured}
    best = min(est, key=est.get)
    assert _split(*best) == M.fp8_schedule_for(T, 8, 256, CARD_H100)
    fastest = min(measured.values())
    assert measured[best] <= fastest * (1 + TIE), (best, measured)
    if T != 16384:
        assert measured[best] == fastest
    for p in (True, False):
        small = dataclasses.replace(K.FP8_SMALL, persistent=p)
        assert FAMILY.estimate(t, params_of(small)).ms > est[best]


@pytest.mark.parametrize("T,E,k,H,I,kw,card", [
    (200, 3, 2, 256, 128, {}, CARD_H100),                                 # the split smem TMA start
    (150, 3, 2, 256, 128, {}, CARD_H100),        # 100 rows an expert: FP8_PREFILL_UNIT_GRID's start
    (150, 3, 2, 256, 128, {}, CARD_H200),        # FP8_PREFILL_WALK_FUSED_QUANTIZE's start
    (200, 3, 2, 128, 256, dict(bn=128, n_split=1, smem_scales=False, stages=4, overlap=True),
     CARD_H100),
    (40, 4, 2, 128, 128, {}, CARD_H100),                                  # FP8_SMALL
])
def test_candidate_runs_in_the_interpreter_and_matches_float64(T, E, k, H, I, kw, card):
    from tests.moe.test_moe_fp8_layer import _problem, _rel

    t = moe_fp8_task(T, H, I, E, k, card=card)
    p = {**FAMILY.default_params(t), **kw}
    assert FAMILY.legal(t, p), FAMILY.static_check(t, p)
    if T == 150:                            # the gate-up writes h in e4m3 and its scales itself
        assert p["quantize_out"] and p["persistent"] == (card == CARD_H200)
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=T + H)
    out = FAMILY.run(t, p, x, w13, w2, s13, s2, ids, weights)
    exact = M.reference_fp8(x, w13, w2, s13, s2, ids, weights)
    assert not torch.isnan(out).any() and _rel(out, exact) < 1e-2, _rel(out, exact)
    src = FAMILY.render_kernel(t, p)
    assert "SCHEDULE = MoeFp8Schedule(" in src and "KERNEL = grouped_gemm_fp8" in src
    ns = {}
    exec(compile(src, "<rendered>", "exec"), ns)
    assert ns["SCHEDULE"] == schedule_of(t, p)


def test_legal_samples_render_and_lower(tmp_path):
    """As for the other families (test_schedule_family.py): random schedules the family calls
    legal render, and the rendered gate-up kernel lowers."""
    from tests.agent.test_schedule_family import _legal_samples_render_and_lower

    _legal_samples_render_and_lower(FAMILY, DSV3, tmp_path, seed=5, prefix="moe_fp8_", count=4)
    # the unit-grid start's gate-up is the quantizing kernel, as argus.ops.moe builds it (h's
    # scales K-major: the smem-scale down's layout), and lowers
    from argus.agent.evaluate import import_source
    from argus.compiler import lower_only

    t = moe_fp8_task(1024, 7168, 2048, 256, 8)
    src = FAMILY.render_kernel(t, FAMILY.default_params(t))
    assert "KERNEL = grouped_gemm_fp8_smem_kernel(True, True, True)" in src
    module = import_source(src, tmp_path, "moe_fp8_grid_start")
    lower_only(module.KERNEL, **module.CONSTEXPRS)


def test_the_cards_apply_where_fp8_schedule_for_takes_their_tiles():
    """The promotion card (the split 128 x 256, its scale paths and quantize_out) applies from
    FP8_BIG_TILE_ROWS (32) rows an expert on average, fp8_schedule_for's threshold; the tile
    card (which also searches persistent) everywhere."""
    from argus.agent.knowledge import load_cards

    cards = {c.id: c for c in load_cards() if "moe_fp8" in c.families}
    promotion, tile = cards["moe_fp8.promotion"], cards["moe_fp8.tile"]
    assert promotion.applies(DSV3.features()) and not promotion.applies(SMALL.features())
    assert tile.applies(DSV3.features()) and tile.applies(SMALL.features())
    edge = moe_fp8_task(32, 7168, 2048, 256, 8)        # 256 entries on 256 experts: 1 row each
    assert not promotion.applies(edge.features())
    for T, E in ((1024, 256), (16, 4)):                 # 32 rows an expert: the split's start
        assert promotion.applies(moe_fp8_task(T, 7168, 2048, E, 8).features()), (T, E)
    for T, E in ((1023, 256), (15, 4)):
        assert not promotion.applies(moe_fp8_task(T, 7168, 2048, E, 8).features()), (T, E)
    assert "persistent" in tile.edit.search
    # the fused quantize needs the split 128 x 256: the promotion card searches it
    assert "quantize_out" in promotion.edit.search and "quantize_out" not in tile.edit.search


def test_shared_memory_comes_from_lowering_both_grouped_gemms():
    """The compiler's plan of both kernels: the start's 3 stages of 48 KB, the scale stages and
    one half's TMA-store staging fit; 4 stages do not (the refusal names the gate-up kernel)."""
    res = FAMILY.resources(DSV3, FAMILY.default_params(DSV3))
    assert [k["smem"] for k in res["kernels"]] and len(res["kernels"]) == 2
    assert 3 * 48 * 1024 < res["smem"] <= 232448
    found = errors(DSV3, {**FAMILY.default_params(DSV3), "stages": 4})
    assert found[0].code == "smem" and "moe_fp8_gate_up_smem" in found[0].message
    # with quantize_out the gate-up stores e4m3 from registers: no TMA-store staging
    grid = moe_fp8_task(1024, 7168, 2048, 256, 8)
    up, down = (k["smem"] for k in FAMILY.resources(grid, FAMILY.default_params(grid))["kernels"])
    assert up < down == res["smem"]


def test_the_task_names_its_card():
    """moe_fp8_task records the card class as the task's `card` option (JSON round trip, a
    feature the cards' `when` can read); unnamed, argus.ops.moe.default_card's (here without
    CUDA: the H100 class); a card the rule has no form for is refused; a task written before
    the option reads its rule at default_card."""
    from argus.errors import LaunchError

    t = moe_fp8_task(2048, 7168, 2048, 256, 8, card=CARD_H200)
    assert t.opts["card"] == CARD_H200 and TaskSpec.from_json(t.to_json()) == t
    f = t.features()
    assert f["card"] == CARD_H200 and f["fp8_unit_grid"] == 0
    assert moe_fp8_task(2048, 7168, 2048, 256, 8, card=CARD_H100).features()["fp8_unit_grid"] == 1
    assert moe_fp8_task(2048, 7168, 2048, 256, 8).opts["card"] == M.default_card()
    if not torch.cuda.is_available():
        assert M.default_card() == CARD_H100
    with pytest.raises(LaunchError, match="card='b200'"):
        moe_fp8_task(2048, 7168, 2048, 256, 8, card="b200")
    old = dataclasses.replace(t, options=())
    assert task_card(old) == M.default_card()
    assert FAMILY.default_params(old) == params_of(M.fp8_schedule_for(2048, 8, 256))


@pytest.mark.parametrize("device_card", [CARD_H100, CARD_H200])
def test_an_unnamed_card_is_argus_ops_moe_s(monkeypatch, device_card):
    """A task without the `card` option (written before it) is read at argus.ops.moe's
    card_or_default, by the family (task_card, facts, start) and by TaskSpec.features alike:
    both follow the current device's class (default_card, faked here, since a CPU host only
    ever answers the H100 class), and a named card wins over it."""
    monkeypatch.setattr(M, "default_card", lambda: device_card)
    assert M.card_or_default(None) == device_card
    other = CARD_H200 if device_card == CARD_H100 else CARD_H100
    assert M.card_or_default(other) == other
    named = moe_fp8_task(2048, 7168, 2048, 256, 8, card=other)
    old = dataclasses.replace(named, options=())
    assert task_card(old) == old.features()["card"] == FAMILY.facts(old)["card"] == device_card
    assert old.features()["fp8_unit_grid"] == int(device_card == CARD_H100)
    assert FAMILY.default_params(old) == params_of(M.fp8_schedule_for(2048, 8, 256,
                                                                      device_card))
    assert task_card(named) == named.features()["card"] == other


@pytest.mark.parametrize("T", [1024, 2048, 4096])
def test_the_h200_start_is_the_rule_and_its_estimates_best(T):
    """On the H200 class the start is the rule's walk with quantize_out (measured there: 238 /
    377 / 590 TFLOP/s at T = 1024 / 2048 / 4096 against the unit grid's 230 / 370 / 555), and
    the H200's estimate prefers it too, while the H100's estimate of the same schedules still
    prefers the unit grid (each card's model is its own fit). The H200 start draws no
    warning; the H100 start on an H200 task does (the grid)."""
    h100, h200 = (moe_fp8_task(T, 7168, 2048, 256, 8, card=c) for c in (CARD_H100, CARD_H200))
    assert FAMILY.default_params(h200) == params_of(WALK_Q) != FAMILY.default_params(h100)
    assert not FAMILY.static_check(h200, FAMILY.default_params(h200))
    est = {c: {s: FAMILY.estimate(t, params_of(s)).ms for s in (WALK_Q, GRID_Q, WALK, GRID)}
           for c, t in ((CARD_H100, h100), (CARD_H200, h200))}
    assert min(est[CARD_H200], key=est[CARD_H200].get) == WALK_Q
    assert min(est[CARD_H100], key=est[CARD_H100].get) == GRID_Q
    assert FAMILY.estimate(h200, params_of(WALK_Q)).detail["card"] == CARD_H200
    found = FAMILY.static_check(h200, FAMILY.default_params(h100))
    assert [d.code for d in found] == ["unit_grid"] and "use persistent=True" in found[0].fix


# the H200's measured gap above which its estimate must order two schedules as measured
H200_GAP = 0.03


def _h200_pairs():
    """(T, faster, slower, gap) of every pair of H200_LAYER_TFLOPS's schedules at a T whose
    measured layers (each schedule's mean, h200_layer_ms) differ by more than H200_GAP."""
    out = []
    for T in sorted(H200_LAYER_TFLOPS):
        ms = h200_layer_ms(T)
        for a in ms:
            for b in ms:
                if ms[b] > ms[a] * (1 + H200_GAP):
                    out.append((T, a, b, ms[b] / ms[a] - 1))
    return out


def _estimates(card, T):
    t = moe_fp8_task(T, 7168, 2048, 256, 8, card=card)
    return {n: FAMILY.estimate(t, params_of(measured_schedule(n))).ms
            for n in H200_LAYER_TFLOPS[T]}


def test_the_h200_table_is_the_docs_and_its_schedules_the_families():
    """H200_LAYER_TFLOPS holds docs/perf/moe.md's H200 rows (spot values) under the schedules
    the columns ran: grid_fq is FP8_PREFILL_UNIT_GRID (the table's default in the band on the
    tree measured), walk_fq FP8_PREFILL_WALK_FUSED_QUANTIZE, each a legal point of the space."""
    assert H200_LAYER_TFLOPS[4096]["walk_fq"] == (590,)
    assert H200_LAYER_TFLOPS[4096]["grid"] == (566, 525)
    assert H200_LAYER_TFLOPS[16384]["walk"] == (800, 803)
    assert measured_schedule("grid_fq") == M.FP8_PREFILL_UNIT_GRID == GRID_Q
    assert measured_schedule("walk_fq") == M.FP8_PREFILL_WALK_FUSED_QUANTIZE == WALK_Q
    assert measured_schedule("small") == K.FP8_SMALL
    t = moe_fp8_task(4096, 7168, 2048, 256, 8, card=CARD_H200)
    for name in ("walk", "walk_fq", "grid", "grid_fq", "small"):
        assert not errors(t, params_of(measured_schedule(name))), name
    assert h200_layer_ms(4096)["walk"] == pytest.approx(
        2.0 * 4096 * 8 * 3 * 7168 * 2048 / ((575 + 569) / 2 * 1e12) * 1e3)


def _pair_kind(a: str, b: str) -> str:
    """How the H200 fit relates to a pair of H200_LAYER_TFLOPS's columns: "small" with FP8_SMALL
    on one side (no H200 factor is fitted to it: its estimate is the structural model with the
    H100's promotion factor times the walk's one scale), "fitted" for split forms that differ in
    one of persistent / quantize_out (the H200 grid or quantize_out factor is fitted to this
    very ratio), "cross" for split forms that differ in both (a product of two fitted factors)."""
    if "small" in (a, b):
        return "small"
    sa, sb = measured_schedule(a), measured_schedule(b)
    return "cross" if (sa.persistent != sb.persistent and
                       sa.quantize_out != sb.quantize_out) else "fitted"


def test_the_h200_estimate_ranks_the_h200_table_as_measured():
    """Of every pair of schedules measured on the H200 more than 3% apart at a T (whole layer,
    docs/perf/moe.md "fp8 prefill rule per card"), the H200 class's estimate puts the faster
    first. What that checks, honestly: the H200 fit was made from this same table. Its grid
    and quantize_out factors are fitted to the split forms' measured ratios (`_pair_kind`
    "fitted"), so those pairs hold by construction: exactly at a T with a knot of its own
    (T = 8192, 16384: asserted below), and up to averaging where T = 1024 / 2048 / 4096 share
    one knot (one m-tile an expert), the mean of their ratios. The cross pairs (walk against
    grid_fq, walk_fq against grid) compose two fitted factors: exact again at an own knot, at
    the shared one a check that the averaged factors still compose in the measured order.
    FP8_SMALL's pairs are the one independent check: nothing in the H200 fit is fitted to its
    column. The H100 class's estimate misorders some of the same pairs (the unit grid it
    prefers in the band lost there), so the check also tells the two fits apart."""
    pairs = _h200_pairs()
    assert len(pairs) >= 20 and {T for T, *_ in pairs} == set(H200_LAYER_TFLOPS)
    h100_wrong = []
    for T, fast, slow, gap in pairs:
        est = _estimates(CARD_H200, T)
        assert est[fast] < est[slow], (T, fast, slow, f"measured {gap:.1%} apart", est)
        other = _estimates(CARD_H100, T)
        if not other[fast] < other[slow]:
            h100_wrong.append((T, fast, slow))
    assert (4096, "walk", "grid_fq") in h100_wrong and (1024, "walk", "grid_fq") in h100_wrong

    # the split forms' pairs at a T with a knot of its own: the estimate's ratio is the measured
    # one, fitted and cross alike (what "by construction" means above); at the shared knot's T
    # the averaged factors leave the fitted pairs off their measured ratios
    ms = {T: h200_layer_ms(T) for T in H200_LAYER_TFLOPS}
    points = [units_per_cta(moe_fp8_task(T, 7168, 2048, 256, 8, card=CARD_H200).dims, WALK)
              for T in sorted(H200_LAYER_TFLOPS)]
    own = [T for T, u in zip(sorted(H200_LAYER_TFLOPS), points) if points.count(u) == 1]
    assert own == [8192, 16384]
    for T in sorted(H200_LAYER_TFLOPS):
        est = _estimates(CARD_H200, T)
        devs = {(a, b): est[b] / est[a] / (ms[T][b] / ms[T][a]) - 1
                for a in est for b in est if a != b and _pair_kind(a, b) != "small"}
        fitted = [abs(v) for (a, b), v in devs.items() if _pair_kind(a, b) == "fitted"]
        assert fitted, T
        if T in own:
            assert max(map(abs, devs.values())) < 1e-9, (T, devs)
        else:
            assert max(fitted) > 1e-3, (T, devs)

    # the cross pairs measured more than 3% apart at the shared knot, each ordered by the
    # H200 estimate (at an own knot they are exact, above)
    cross = {(T, fast, slow) for T, fast, slow, _ in pairs
             if _pair_kind(fast, slow) == "cross" and T not in own}
    assert cross == {(1024, "walk", "grid_fq"), (4096, "walk", "grid_fq"),
                     (4096, "walk_fq", "grid")}
    for T, fast, slow in cross:
        est = _estimates(CARD_H200, T)
        assert est[fast] < est[slow], (T, fast, slow, est)

    # FP8_SMALL: measured the slowest wherever it ran, by more than 3% against every split
    # form, and estimated the slowest there too (no H200 factor fitted to it)
    with_small = [T for T in sorted(H200_LAYER_TFLOPS) if "small" in H200_LAYER_TFLOPS[T]]
    assert with_small == [1024, 2048, 4096, 8192]
    small_pairs = {(T, fast) for T, fast, slow, _ in pairs if slow == "small"}
    assert small_pairs == {(T, n) for T in with_small for n in H200_LAYER_TFLOPS[T]
                           if n != "small"}
    assert not [p for p in pairs if p[1] == "small"]
    for T in with_small:
        est = _estimates(CARD_H200, T)
        assert max(est, key=est.get) == "small", (T, est)


def test_the_h200_fit_is_calibrated_on_its_walk():
    """At the calibration point the H200 estimate of the walk is its H200 measurement (the
    mean of its two), the H100's its H100 one; the H200 promotion factors are the H100's
    times one scale (promotion_scale), and a card without a fit is refused."""
    from argus.errors import LaunchError

    h200 = moe_fp8_task(16384, 7168, 2048, 256, 8, card=CARD_H200)
    walk = FAMILY.estimate(h200, params_of(WALK))
    assert walk.ms == pytest.approx(h200_layer_ms(16384)["walk"], rel=1e-9)
    assert FAMILY.estimate(DSV3, params_of(WALK)).ms == pytest.approx(
        MEASURED_LAYER_MS[("split", True, "tma")][1], rel=1e-9)
    assert promotion_scale(CARD_H100) == promotion_scale() == 1.0
    assert walk.detail["promotion_scale"] == promotion_scale(CARD_H200) != 1.0
    assert grid_factor(h200.dims, WALK, CARD_H200) == 1.0
    assert grid_factor(h200.dims, GRID, CARD_H200) != grid_factor(h200.dims, GRID, CARD_H100)
    with pytest.raises(LaunchError, match="card='b200'"):
        grid_factor(h200.dims, GRID, "b200")
    # the torch baseline at each card's measured rate
    base = {c: FAMILY.baseline_estimates(moe_fp8_task(16384, 7168, 2048, 256, 8, card=c))
            ["torch._grouped_mm (bf16)"].ms for c in (CARD_H100, CARD_H200)}
    flops = 2.0 * 16384 * 8 * 3 * 7168 * 2048
    assert base == {CARD_H100: pytest.approx(flops / 309e9),
                    CARD_H200: pytest.approx(flops / 313e9)}


@pytest.mark.parametrize("T", sorted(H200_LAYER_TFLOPS))
def test_the_h200_estimates_best_split_form_is_the_h200_rule(T):
    """Of the split's four forms (walk or grid, either quantize) the H200 estimate's fastest
    is argus.ops.moe.fp8_schedule_for's on the H200 class at every T of the table: the walk
    with quantize_out from 32 to 128 rows an expert, the walk above; and it is within 3% of
    the fastest measured there (the measured best among the forms measured at T)."""
    t = moe_fp8_task(T, 7168, 2048, 256, 8, card=CARD_H200)
    forms = (WALK, WALK_Q, GRID, GRID_Q)
    est = {s: FAMILY.estimate(t, params_of(s)).ms for s in forms}
    best = min(est, key=est.get)
    assert best == M.fp8_schedule_for(T, 8, 256, CARD_H200)
    ms = h200_layer_ms(T)
    by_schedule = {measured_schedule(n): v for n, v in ms.items()}
    if best in by_schedule:
        assert by_schedule[best] <= min(by_schedule[s] for s in forms if s in by_schedule) * \
            (1 + H200_GAP)
