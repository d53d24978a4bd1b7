"""The agent's MoE family (argus/agent/families/moe.py): the (gate_up, down) schedule pair,
its rules (the kernel's and the layer's refusals, with reasons), the estimate's orderings, and
the family's candidate run through argus.ops.moe's expert path in the interpreter against the
float64 reference."""

import importlib

import pytest
import torch

from argus.agent.families import get_family
from argus.agent.families.moe import moe_task, pair

FAMILY = get_family("moe")
M = importlib.import_module("argus.ops.moe")


def errors(t, p):
    return [d for d in FAMILY.static_check(t, p) if d.severity == "error"]


def test_defaults_are_argus_ops_moes_own_choice():
    dec = moe_task(16, 4096, 14336, 8, 2)
    g, d = pair(dec, FAMILY.default_params(dec))
    assert (g, d) == M.decode_schedules(16, 2, 8, 4096, 14336)
    pre = moe_task(16384, 4096, 14336, 8, 2)
    g, d = pair(pre, FAMILY.default_params(pre))
    assert g == d == M.schedule_for(16384, 2, 8, 4096)
    for t in (dec, pre):
        for p in (FAMILY.default_params(t), FAMILY.naive_params(t)):
            assert not errors(t, p), FAMILY.static_check(t, p)


@pytest.mark.parametrize("t,kw,code,words", [
    (moe_task(4096, 4096, 14336, 8, 2), dict(bn=64, epilogue="tma"), "schedule_fields",
     "multiple of 128"),
    (moe_task(4096, 4096, 14336, 8, 2), dict(bm=128, bn=256, stages=8), "smem",
     "shared memory"),
    (moe_task(16, 4096, 200, 8, 2), dict(down_split=3), "k_slices", "split_k=3"),
    (moe_task(16, 4096, 14336, 8, 2), dict(bn=12), "schedule_fields", "multiple of 8"),
])
def test_rules_refuse_illegal_points_with_reasons(t, kw, code, words):
    p = {**FAMILY.default_params(t), **kw}
    found = errors(t, p)
    assert found and found[0].code == code, FAMILY.static_check(t, p)
    assert words in found[0].message and found[0].fix


def test_decode_threshold_is_a_warning():
    t = moe_task(4096, 1024, 512, 8, 2)
    p = {"swap_ab": True, "bn": 64, "gate_stages": 8, "down_stages": 8, "gate_split": 1,
         "down_split": 1}
    d = FAMILY.static_check(t, p)
    assert [x.code for x in d] == ["decode_threshold"] and d[0].severity == "warning"


def test_estimate_orders_obviously_better_points():
    dec = moe_task(1, 4096, 14336, 8, 2)
    est = lambda t, **kw: FAMILY.estimate(t, {**FAMILY.default_params(t), **kw}).ms  # noqa
    assert est(dec, gate_stages=8) < est(dec, gate_stages=2)     # too little in flight
    assert est(dec, down_stages=15) < est(dec, down_stages=2)
    e = FAMILY.estimate(dec, FAMILY.default_params(dec))
    assert e.kind == "estimate" and e.detail["gate_up_us"] >= 0.9 * e.detail["weight_floor_us"] \
        * 2 / 3
    pre = moe_task(16384, 4096, 14336, 8, 2)
    assert est(pre, bm=128, bn=256, stages=4) < est(pre, bm=64, bn=64, stages=2,
                                                    epilogue="direct", cluster_m=1)
    assert est(pre) < FAMILY.baseline_estimates(pre)["torch loop"].ms * 1.5


@pytest.mark.parametrize("T,E,k,H,I,kw", [
    (3, 4, 2, 128, 128, dict(bn=8, gate_stages=2, down_stages=3, gate_split=2, down_split=1)),
    (70, 4, 2, 64, 128, dict(bm=64, bn=128, stages=3, epilogue="tma", cluster_m=1)),
])
def test_candidate_runs_in_the_interpreter_and_matches_float64(T, E, k, H, I, kw):
    t = moe_task(T, H, I, E, k)
    p = {**FAMILY.default_params(t), **kw}
    assert FAMILY.legal(t, p), FAMILY.static_check(t, p)
    g = torch.Generator().manual_seed(T)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16()
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = torch.rand(T, E, generator=g).topk(k, dim=1).indices.int()
    weights = torch.rand(T, k, generator=g)
    out = FAMILY.run(t, p, x, w13, w2, ids, weights)
    exact = M.reference(x, w13, w2, ids, weights)
    rel = ((out.double() - exact).norm() / exact.norm()).item()
    assert not torch.isnan(out).any() and rel < 1e-2, rel
    assert "grouped_gemm_kernel(True" in FAMILY.render_kernel(t, p)


def test_moe_cards_name_fields_of_the_space():
    from argus.agent.knowledge import load_cards

    cards = [c for c in load_cards() if c.kind == "schedule" and c.id.startswith("moe.")]
    assert len(cards) >= 2
    for t in (moe_task(16, 4096, 14336, 8, 2), moe_task(16384, 4096, 14336, 8, 2)):
        sp = FAMILY.space(t)
        usable = [c for c in cards if all(n in sp for n in c.edit.search)]
        assert usable
        for c in usable:
            cands = FAMILY.expand(t, c, FAMILY.default_params(t))
            assert cands and any(FAMILY.legal(t, x) for x in cands), c.id
