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
    # refused by MoeSchedule's declared range (wgmma N) before the class's own check
    (moe_task(16, 4096, 14336, 8, 2), dict(bn=12), "range", "multiple of 8"),
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


DEC, PRE = moe_task(16, 4096, 14336, 8, 2), moe_task(4096, 4096, 14336, 8, 2)
# the field of MoeSchedule each decode parameter holds (the gate-up's and the down's)
FIELD = {"gate_stages": "stages", "down_stages": "stages", "gate_split": "split_k",
         "down_split": "split_k"}


def test_the_space_is_moeschedules_declaration_in_its_two_roles():
    """MoeSchedule declares its ranges (families/declared.py, plus the warp-specialized
    skeleton's it inherits); prefill uses one schedule for both GEMMs, decode the gate-up's and
    the down's under their own parameter names, sharing the token tile. Every value the space
    searches is accepted by the declaration, and the pair is the kernel's own decode_schedule."""
    from argus.agent.families.declared import declare_library
    from argus.kernels.moe import MoeSchedule, decode_schedule
    from argus.schedule_space import space_of

    declare_library()   # the family registers MoeSchedule's ranges on first use: this test
    declared = space_of(MoeSchedule)   # must not depend on an earlier test having used it
    assert set(FAMILY.space(DEC)) == {"swap_ab", "bn", "gate_stages", "down_stages",
                                      "gate_split", "down_split"}
    assert set(FAMILY.space(PRE)) == {"swap_ab", "bm", "bn", "stages", "epilogue", "cluster_m"}
    for t in (DEC, PRE):
        for name, values in FAMILY.space(t).items():
            legal = declared.legal_of(FIELD.get(name, name))
            assert values and all(legal.accepts(v) for v in values), (name, values)
    p = dict(FAMILY.default_params(DEC), bn=16, gate_stages=6, down_stages=12, gate_split=2,
             down_split=1)
    assert pair(DEC, p) == (decode_schedule(16, 6, 2, pdl=True, prefetch=6),
                            decode_schedule(16, 12, 1, pdl=True, prefetch=12, pdl_combine=True))


@pytest.mark.parametrize("t", [DEC, PRE], ids=["decode", "prefill"])
def test_neighbors_are_one_declared_step_and_legal_or_out_of_shared_memory(t):
    p = FAMILY.default_params(t)
    near = FAMILY.neighbors(t, p)
    space = FAMILY.space(t)
    assert len(near) >= 5 and p not in near
    legal = 0
    for q in near:
        moved = [k for k in q if q[k] != p[k]]
        assert len(moved) == 1 and abs(space[moved[0]].index(q[moved[0]])
                                       - space[moved[0]].index(p[moved[0]])) == 1, (p, q)
        codes = [d.code for d in FAMILY.static_check(t, q) if d.severity == "error"]
        assert codes in ([], ["smem"]), (q, codes)
        legal += not codes
    assert legal >= len(near) - 1


def test_a_role_field_out_of_its_declared_range_is_refused_under_its_parameter_name():
    p = FAMILY.default_params(DEC)
    found = errors(DEC, dict(p, down_stages=0))
    assert [d.code for d in found] == ["range"] and found[0].counterexample == {"down_stages": 0}
    assert found[0].message.startswith("down: MoeSchedule.stages=0 is outside its declared "
                                       "values (>= 1)") and "down_stages" in found[0].message
    found = errors(DEC, dict(p, gate_split=17))
    assert [d.code for d in found] == ["range"] and "gate-up" in found[0].message \
        and "<= 16" in found[0].message and "gate_split" in found[0].fix
    # a shared field (the token tile) is one finding, not one per GEMM
    assert [d.code for d in errors(DEC, dict(p, bn=12))] == ["range"]


def test_shared_memory_comes_from_lowering_both_grouped_gemms():
    """No ring formula here: the lowering of both kernels reports it. With the TMA-store
    epilogue the down stages bn columns per tile and the gate-up bn/2 (silu(gate) * up)."""
    p = FAMILY.default_params(PRE)
    assert p["epilogue"] == "tma" and p["bm"] == 128 and p["bn"] == 256
    res = FAMILY.resources(PRE, p)
    gate_up, down = (k["smem"] for k in res["kernels"])
    assert down - gate_up == (256 - 128) * 128 * 2 and res["smem"] == down
    found = errors(PRE, dict(p, stages=8))
    assert [d.code for d in found] == ["smem"] and "smem_plan" in found[0].message


def test_a_role_searches_fewer_values_than_declared_never_others():
    from argus.agent.families.declared import declare_library
    from argus.kernels.moe import MoeSchedule
    from argus.schedule_space import space_of

    declare_library()
    space = space_of(MoeSchedule)
    assert space.choices({"out_bits": 16}, {"bn": (16, 32)})["bn"] == (16, 32)
    with pytest.raises(ValueError, match=r"MoeSchedule.bn are outside its declared values"):
        space.choices({"out_bits": 16}, {"bn": (12,)})
