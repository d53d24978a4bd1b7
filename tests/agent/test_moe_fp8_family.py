"""The agent's fp8 MoE family (argus/agent/families/moe_fp8.py): registration, the declared space
(MoeFp8Schedule's fields, families/declared.py MOE_FP8), the start point (argus.ops.moe's
fp8_schedule_for), every point the search proposes legal or refused with a reason that names
what to change, the calibrated estimate's ordering of the measured schedules, and a candidate
run through argus.ops.moe's fp8 expert path in the interpreter against float64."""

import dataclasses
import importlib
import random

import pytest
import torch

from argus.agent.families import FAMILIES, get_family
from argus.agent.families.moe_fp8 import (FIELDS, MEASURED_LAYER_MS, MoeFp8Family,
                                          moe_fp8_task, params_of, schedule_of)
from argus.kernels import moe_fp8 as K

FAMILY = get_family("moe_fp8")
M = importlib.import_module("argus.ops.moe")

DSV3 = moe_fp8_task(16384, 7168, 2048, 256, 8)     # DeepSeek-V3 prefill: the calibration point
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
    assert any("decode_threshold" in n and "fp8_schedule_for" in n
               for n in FAMILY.constraint_notes(DSV3))


@pytest.mark.parametrize("t,want", [(DSV3, K.FP8_PREFILL_SPLIT_SMEM_TMA), (SMALL, K.FP8_SMALL)],
                         ids=["prefill", "small"])
def test_start_point_is_fp8_schedule_for(t, want):
    d = t.dims
    assert M.fp8_schedule_for(d["T"], d["top_k"], d["E"]) == want
    assert schedule_of(t, FAMILY.default_params(t)) == want
    assert params_of(want) == FAMILY.default_params(t)
    for p in (FAMILY.default_params(t), FAMILY.naive_params(t)):
        assert not errors(t, p), FAMILY.static_check(t, p)
    assert not [d for d in FAMILY.static_check(t, FAMILY.default_params(t))], "start warns"


def test_the_tile_threshold_is_a_warning():
    p = {**FAMILY.default_params(SMALL), "bm": 128, "bn": 128, "stages": 6}
    found = FAMILY.static_check(SMALL, p)
    assert [d.code for d in found] == ["decode_threshold"] and found[0].severity == "warning"
    assert "bm=64" in found[0].fix


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


@pytest.mark.parametrize("T,E,k,H,I,kw", [
    (200, 3, 2, 256, 128, {}),                                       # the split smem TMA start
    (200, 3, 2, 128, 256, dict(bn=128, n_split=1, smem_scales=False, stages=4, overlap=True)),
    (40, 4, 2, 128, 128, {}),                                        # FP8_SMALL
])
def test_candidate_runs_in_the_interpreter_and_matches_float64(T, E, k, H, I, kw):
    from tests.moe.test_moe_fp8_layer import _problem, _rel

    t = moe_fp8_task(T, H, I, E, k)
    p = {**FAMILY.default_params(t), **kw}
    assert FAMILY.legal(t, p), FAMILY.static_check(t, p)
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


def test_the_cards_apply_where_fp8_schedule_for_takes_their_tiles():
    """The promotion card (the split 128 x 256 and its scale paths) applies from 128 rows an
    expert on average, fp8_schedule_for's threshold; the tile card everywhere."""
    from argus.agent.knowledge import load_cards

    cards = {c.id: c for c in load_cards() if "moe_fp8" in c.families}
    promotion, tile = cards["moe_fp8.promotion"], cards["moe_fp8.tile"]
    assert promotion.applies(DSV3.features()) and not promotion.applies(SMALL.features())
    assert tile.applies(DSV3.features()) and tile.applies(SMALL.features())
    edge = moe_fp8_task(32, 7168, 2048, 256, 8)        # 256 entries on 256 experts: 1 row each
    assert not promotion.applies(edge.features())


def test_shared_memory_comes_from_lowering_both_grouped_gemms():
    """The compiler's plan of both kernels: the start's 3 stages of 48 KB, the scale stages and
    one half's TMA-store staging fit; 4 stages do not (the refusal names the gate-up kernel)."""
    res = FAMILY.resources(DSV3, FAMILY.default_params(DSV3))
    assert [k["smem"] for k in res["kernels"]] and len(res["kernels"]) == 2
    assert 3 * 48 * 1024 < res["smem"] <= 232448
    found = errors(DSV3, {**FAMILY.default_params(DSV3), "stages": 4})
    assert found[0].code == "smem" and "moe_fp8_gate_up_smem" in found[0].message
