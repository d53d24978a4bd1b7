"""The agent's attention family (argus/agent/families/attention.py): SDPA tasks are routed to
it (and L1/97, head dim 1024, is refused with its reason and falls back to argus.compose), its
rules refuse what the kernel refuses with reasons, its estimate orders obviously better and
worse schedules, and its KernelBench candidate runs in the interpreter against torch float64."""

import math
from pathlib import Path

import pytest
import torch

from argus.agent.families import get_family
from argus.agent.families.attention import kernel_head_dim
from argus.agent.task import TaskSpec

L1_97 = (Path(__file__).resolve().parents[3] / "shared/kernelbench/level1"
         / "97_ScaledDotProductAttention.py")

SDPA_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V{kwargs})


batch_size = {B}
num_heads = {H}
sequence_length = {S}
embedding_dimension = {D}


def get_inputs():
    Q = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension)
    K = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension)
    V = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension)
    return [Q, K, V]


def get_init_inputs():
    return []
"""

FAMILY = get_family("attention")


def sdpa_file(tmp_path, B=2, H=4, S=256, D=64, kwargs=""):
    path = tmp_path / f"sdpa_{B}_{H}_{S}_{D}.py"
    path.write_text(SDPA_TASK.format(B=B, H=H, S=S, D=D, kwargs=kwargs))
    return path


def task(B=4, H=16, S=4096, D=128, causal=False, dtype="bf16", origin="argus"):
    return TaskSpec("attention", "t", origin, "x",
                    (("B", B), ("H", H), ("HKV", H), ("S", S), ("SK", S), ("D", D),
                     ("causal", int(causal))), dtype, "bf16", options=(("scale", None),))


def point(**kw):
    p = {"block_m": 128, "block_n": 128, "stages": 2, "consumers": 2, "producer_regs": 24,
         "consumer_regs": 240, "persistent": False, "num_sms": 132, "epilogue": "direct",
         "ordered": False, "intra_wg_overlap": False, "fa3_overlap": False, "qk_terms": 1}
    p.update(kw)
    return FAMILY.normalize(task(), p)


def codes(t, p):
    return {d.code for d in FAMILY.static_check(t, p) if d.severity == "error"}


# ----------------------------------------------------------------------------- routing


def test_sdpa_task_is_routed_to_the_attention_family(tmp_path):
    from argus.agent.composer import compose

    t = compose(sdpa_file(tmp_path, D=96, kwargs=", is_causal=True"))
    assert t.family == "attention"
    assert t.dims == {"B": 2, "H": 4, "HKV": 4, "S": 256, "SK": 256, "D": 96, "causal": 1}
    assert t.track == "relaxed"          # a float32 task on the 16-bit kernel
    assert kernel_head_dim(96) == 128 and "padded from 96" in t.note


@pytest.mark.skipif(not L1_97.exists(), reason="no KernelBench checkout beside the repo")
def test_l1_97_is_recognized_and_refused_with_its_head_dim():
    """L1/97 is SDPA at head dim 1024 (fp32): the attention kernel takes head dims up to 256,
    so the attention family refuses it with the reason and argus.compose takes it."""
    from argus.agent.composer import compose

    t = compose(L1_97)
    assert t.family == "composed"
    assert "not the attention family" in t.note and "head dim 1024" in t.note
    # the family's own rule says the same for the task's shapes
    spec = task(B=32, H=32, S=512, D=1024, dtype="f32", origin="kernelbench")
    assert "head_dim" in codes(spec, FAMILY.default_params(spec))


def test_sdpa_with_a_mask_tensor_is_not_the_attention_family(tmp_path):
    from argus.agent.composer import SdpaRefused, _match_kernelbench

    path = sdpa_file(tmp_path, kwargs=", dropout_p=0.1")
    with pytest.raises(SdpaRefused, match="dropout"):
        _match_kernelbench(path)


# ----------------------------------------------------------------------------- rules


def test_snake_needs_the_walk():
    """tile_order 'snake' orders the persistent walk's rounds: with persistent=False it is an
    error naming the rule and the fix (AttentionSchedule refuses it too)."""
    t = task(D=128, S=2048, causal=True)
    start = FAMILY.normalize(t, FAMILY.default_params(t))
    assert start["tile_order"] == "snake" and start["persistent"]
    found = FAMILY.static_check(t, {**start, "persistent": False})
    assert "snake_walk" in [d.code for d in found]
    bad = next(d for d in found if d.code == "snake_walk")
    assert bad.severity == "error" and "persistent=True" in bad.fix


def test_default_and_naive_points_are_legal():
    # the short full defaults at 128 / 256 release Q early (fa3_overlap's), the causal ones
    # walk in snake order: the naive point (no overlap, the grid) must turn those off too
    for t in (task(), task(D=64), task(D=256, causal=True), task(D=64, S=1000, causal=True),
              task(D=128, S=1024), task(D=256, S=1024), task(D=256, S=2048, causal=True),
              task(D=64, S=1024, dtype="f32", origin="kernelbench")):
        for p in (FAMILY.default_params(t), FAMILY.naive_params(t)):
            p = FAMILY.normalize(t, p)
            assert not codes(t, p), (t.dims, p, FAMILY.static_check(t, p))


@pytest.mark.parametrize("kw,code,words", [
    (dict(block_m=128, block_n=256, stages=4), "smem", "shared memory"),
    (dict(block_m=192, block_n=192, ordered=True), "registers", "consumer_regs"),
    (dict(ordered=True, own_blocks=True), "schedule_fields", "ping-pong"),
    (dict(block_n=100), "range", "multiple of 16"),      # the declared range of block_n
    (dict(intra_wg_overlap=True), "unproven", "verifier"),
])
def test_rules_refuse_illegal_points_with_reasons(kw, code, words):
    t = task(D=256 if code == "smem" else 128 if code != "registers" else 128)
    p = point(**kw)
    found = [d for d in FAMILY.static_check(t, p) if d.severity == "error"]
    assert found and found[0].code == code, found
    assert words in found[0].message and found[0].fix


def test_rules_reuse_the_kernels_refusals():
    """Every point the rules accept constructs and passes problems_for and spill_problems;
    every one the kernel refuses or would spill, the rules refuse (over the whole space at
    head dims 64/128/256)."""
    import itertools

    from argus.kernels.attention import AttentionSchedule

    for D in (64, 128, 256):
        t = task(D=D)
        sp = FAMILY.space(t)
        for bm, bn, st, ordered, fa3 in itertools.product(sp["block_m"], sp["block_n"],
                                                           sp["stages"], (False, True),
                                                           (False, True)):
            p = point(block_m=bm, block_n=bn, stages=st, ordered=ordered, fa3_overlap=fa3)
            try:
                s = AttentionSchedule(**{k: v for k, v in p.items() if k != "qk_terms"})
                kernel_ok = not s.problems_for(D) and not s.spill_problems(D)
            except ValueError:
                kernel_ok = False
            assert FAMILY.legal(t, p) == kernel_ok, (D, p)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_persistent_walk_draws_no_finding(causal):
    """The persistent walk verifies with zero findings, full and causal, in every tile order
    and with own_blocks (tests/verify/test_persistent_causal_walk.py,
    test_persistent_own_blocks.py): the rules draw no finding, not even a warning, there."""
    t = task(causal=causal)
    for order in ("head", "lpt", "snake"):
        for own in (False, True) if causal else (False,):
            walk = point(persistent=True, tile_order=order, own_blocks=own, fa3_overlap=True)
            found = FAMILY.static_check(t, walk)
            assert not found, (order, own, [(d.code, d.severity, d.message) for d in found])
def test_store_rounds_and_the_q_prefetch_are_searched():
    """store_cols and prefetch_next_q (h290's short-prefill levers) are in the space: the
    rounds the search tries at a head dim are those AttentionSchedule.problems_for takes at the
    library's default there with the TMA-store epilogue (dividing the head dim, fewer columns
    than it, the staging tile within shared memory), and the prefetch is one step from a
    default that walks (hd128 1k full: the walk with Q released early)."""
    from argus.agent.families.attention import schedule_of

    for D, rounds in ((64, (0,)), (128, (0, 64)), (256, (0, 64, 128))):
        t = task(D=D, S=1024)
        sp = FAMILY.space(t)
        assert sp["store_cols"] == rounds and sp["prefetch_next_q"] == (False, True)
        start = FAMILY.normalize(t, FAMILY.default_params(t))
        # the library's default: rounds of 128 columns at hd256 (the whole tile does not fit)
        assert (start["store_cols"], start["prefetch_next_q"]) == (128 if D == 256 else 0, False)
        for v in rounds[1:]:
            p = FAMILY.normalize(t, dict(start, epilogue="tma", store_cols=v))
            assert p["store_cols"] == v and not codes(t, p), (D, v)
            assert schedule_of(p).problems_for(D) == []
    # head dim 256: the whole staging tile does not fit beside Q and the rings, rounds do
    t = task(D=256, S=1024)
    start = FAMILY.normalize(t, FAMILY.default_params(t))
    assert codes(t, dict(start, epilogue="tma", store_cols=0)) == {"smem"}
    # the prefetch at hd128 1k full: a neighbour of the default, legal
    t = task(D=128, S=1024)
    start = FAMILY.normalize(t, FAMILY.default_params(t))
    assert start["persistent"] and not start["ordered"]
    near = [x for x in FAMILY.neighbors(t, start) if x["prefetch_next_q"]]
    assert near and all(FAMILY.legal(t, x) for x in near)


def test_normalize_keeps_store_rounds_to_the_tma_epilogue():
    """Staging rounds exist only with the TMA-store epilogue, and one round of the whole head
    dim is the whole tile (store_cols=0), as the GEMM family's normalize does."""
    t = task(D=128)
    base = point(epilogue="tma")
    assert FAMILY.normalize(t, dict(base, epilogue="direct", store_cols=64))["store_cols"] == 0
    assert FAMILY.normalize(t, dict(base, store_cols=128))["store_cols"] == 0
    assert FAMILY.normalize(t, dict(base, store_cols=64))["store_cols"] == 64


@pytest.mark.parametrize("D,kw,code", [
    (128, dict(prefetch_next_q=True, persistent=False), "prefetch_walk"),
    (64, dict(block_m=192, block_n=128, ordered=True, persistent=True, prefetch_next_q=True),
     "prefetch_walk"),
    (256, dict(block_n=64, epilogue="direct", store_cols=128), "store_cols_epilogue"),
    (128, dict(packed_p=True), "packed_p_order"),
    (64, dict(block_m=192, block_n=128, ordered=True, packed_p=True), "packed_p_order"),
    (128, dict(rescale_after_pv=True), "rescale_late_order"),
    (64, dict(block_m=192, block_n=128, ordered=True, rescale_after_pv=True),
     "rescale_late_order"),
], ids=["prefetch-grid", "prefetch-pingpong", "rounds-direct", "packp-plain", "packp-pingpong",
        "olate-plain", "olate-pingpong"])
def test_the_levers_are_refused_in_the_schedules_words(D, kw, code):
    """An illegal combination of the new fields is refused by the declared constraint (before
    anything is built), with the reason AttentionSchedule itself raises."""
    from argus.agent.families.attention import schedule_of

    t = task(D=D)
    p = dict(point(), **kw)      # not normalized: normalize would drop store_cols with direct
    found = [d for d in FAMILY.static_check(t, p) if d.severity == "error"]
    assert [d.code for d in found] == [code], found
    with pytest.raises(ValueError) as raised:
        schedule_of(p)
    assert found[0].message in str(raised.value) and found[0].fix


def test_store_rounds_the_head_dim_does_not_take():
    """store_cols=128 at head dim 64: outside the task's rounds (the declared constraint, which
    names them); a float32 head-dim-64 task also runs at 256 (qk_terms=3), where 128 is a
    round, so there the point's own head dim is judged by problems_for: reported as the
    schedule's refusal at head dim 64 (not as registers)."""
    p = dict(point(), block_n=64, epilogue="tma", store_cols=128)   # fits at head dim 256
    found = FAMILY.static_check(task(D=64), p)
    assert [d.code for d in found] == ["store_cols_head_dim"]
    assert "at head dim 64" in found[0].message and "rounds of" not in found[0].message
    assert "(0,)" in found[0].fix
    f32 = task(D=64, dtype="f32", origin="kernelbench")
    assert 128 in FAMILY.space(f32)["store_cols"]
    narrow = [d for d in FAMILY.static_check(f32, dict(p, qk_terms=1)) if d.severity == "error"]
    assert [d.code for d in narrow] == ["schedule_fields"]
    assert "does not divide head_dim=64" in narrow[0].message
    assert not [d for d in FAMILY.static_check(f32, dict(p, qk_terms=3))
                if d.severity == "error"]


def test_the_levers_rules_are_the_kernels():
    """Over store_cols, the epilogue, the prefetch, the walk and ping-pong from each head dim's
    short default: the family accepts exactly what AttentionSchedule constructs and
    problems_for takes, except a round of the whole head dim, which the search leaves to
    store_cols=0 (normalize maps it there)."""
    import itertools

    from argus.agent.families.attention import schedule_of

    for D in (64, 128, 256):
        t = task(D=D, S=1024)
        start = FAMILY.default_params(t)
        for cols, ep, pf, walk, ordered in itertools.product(
                (0, 64, 128), ("direct", "tma"), (False, True), (False, True), (False, True)):
            p = dict(start, store_cols=cols, epilogue=ep, prefetch_next_q=pf,
                     persistent=walk, ordered=ordered)
            try:
                kernel_ok = not schedule_of(p).problems_for(D)
            except ValueError:
                kernel_ok = False
            if cols == D and kernel_ok:
                assert not FAMILY.legal(t, p) and FAMILY.legal(t, FAMILY.normalize(t, p))
            else:
                assert FAMILY.legal(t, p) == kernel_ok, (D, p, FAMILY.static_check(t, p))


def test_packed_p_rules_are_the_kernels():
    """packed_p (P_{j-1} carried as the packed 16-bit A fragment, h295) over the loop orders,
    block_n and each head dim's short and long defaults: the family accepts exactly what
    AttentionSchedule constructs, problems_for takes and spill_problems does not flag.
    Packing is what lets FA3's wider key blocks fit (NVRTC 13.0 spills, docs/perf/attention.md
    h295, h302): 144 / 160 / 176 at head dim 128 and 80 at 256 only packed (176 spilled 120 B
    packed until h302 packed P after P V's wait); the defaults' 128 / 64 either way."""
    import itertools

    from argus.agent.families.attention import schedule_of

    for D, S in itertools.product((64, 128, 256), (1024, 8192)):
        t = task(D=D, S=S)
        start = FAMILY.normalize(t, FAMILY.default_params(t))
        assert start["packed_p"] is False and FAMILY.space(t)["packed_p"] == (False, True)
        for bn, packed, fa3, ordered in itertools.product(
                (64, 80, 96, 128, 144, 160, 176), (False, True), (False, True), (False, True)):
            p = dict(start, block_n=bn, packed_p=packed, fa3_overlap=fa3, ordered=ordered,
                     early_q_release=start["early_q_release"] and fa3)
            try:
                s = schedule_of(p)
                kernel_ok = not s.problems_for(D) and not s.spill_problems(D)
            except ValueError:
                kernel_ok = False
            assert FAMILY.legal(t, p) == kernel_ok, (D, p, FAMILY.static_check(t, p))
    fits = lambda D, bn, packed: FAMILY.legal(  # noqa: E731
        task(D=D), point(block_n=bn, fa3_overlap=True, packed_p=packed))
    for D, bn in ((128, 144), (128, 160), (128, 176), (256, 80)):
        assert fits(D, bn, True) and not fits(D, bn, False), (D, bn)
    assert fits(128, 128, False) and fits(256, 64, False)
    refused = [d for d in FAMILY.static_check(task(D=128), point(block_n=160, fa3_overlap=True))
               if d.severity == "error"]
    assert [d.code for d in refused] == ["registers"]
    assert "packed_p=True" in refused[0].message and "packed_p=True" in refused[0].fix


def test_rescale_after_pv_is_proposed_and_its_rule_is_the_kernels():
    """rescale_after_pv (h309's late rescale of O, FP8's hd128 default; bf16 measured 0-7%
    behind at hd128) is a searched lever: one step from each fa3 default (hd128 / 256) the
    search proposes it, and ping-pong on the overlap order (ordered + fa3_overlap, FA3's full
    configuration) beside it, both accepted; over the loop orders the family accepts exactly
    what AttentionSchedule constructs and problems_for / spill_problems take; ping-pong on the
    overlap order always rescales late, so normalize keeps that point's field False (one
    kernel, searched once); the estimate counts nothing for it."""
    import itertools

    import argus as ag
    from argus.agent.families.attention import schedule_of
    from argus.compiler import lower_only
    from argus.kernels.attention import attention_kernel

    for D, S, causal in ((128, 4096, False), (128, 16384, True), (256, 4096, False)):
        t = task(D=D, S=S, causal=causal)
        start = FAMILY.normalize(t, FAMILY.default_params(t))
        assert start["fa3_overlap"] and not start["rescale_after_pv"]
        assert FAMILY.space(t)["rescale_after_pv"] == (False, True)
        near = FAMILY.neighbors(t, start)
        late = [x for x in near if x["rescale_after_pv"]]
        turns = [x for x in near if x["ordered"] and x["fa3_overlap"]]
        assert late and turns and all(FAMILY.legal(t, x) for x in late + turns), (D, S)
        assert all(schedule_of(x).rescale_late for x in late + turns)
        assert FAMILY.estimate(t, late[0]).ms == FAMILY.estimate(t, start).ms
        assert FAMILY.normalize(t, dict(turns[0], rescale_after_pv=True)) == turns[0]
        for rescale, fa3, ordered in itertools.product((False, True), repeat=3):
            p = dict(start, rescale_after_pv=rescale, fa3_overlap=fa3, ordered=ordered,
                     early_q_release=start["early_q_release"] and fa3)
            try:
                s = schedule_of(p)
                kernel_ok = not s.problems_for(D) and not s.spill_problems(D)
            except ValueError:
                kernel_ok = False
            assert FAMILY.legal(t, p) == kernel_ok, (D, p, FAMILY.static_check(t, p))
    # an accepted point lowers (the kernel's own checks at trace time)
    t = task(D=128, S=4096)
    late = next(x for x in FAMILY.neighbors(t, FAMILY.normalize(t, FAMILY.default_params(t)))
                if x["rescale_after_pv"])
    lower_only(attention_kernel(128, ag.bf16, False, False), s=schedule_of(late))


def test_an_illegal_rescale_is_refused_before_anything_is_built(monkeypatch):
    """rescale_after_pv=True off the overlap order: the declared constraint refuses it in the
    schedule's words while no schedule of the point is constructed (the task's facts build
    the library defaults; nothing with the point's field, no lowering)."""
    from argus.agent.families.attention import schedule_of
    from argus.kernels.attention import AttentionSchedule

    t = task(D=128)
    p = dict(point(), rescale_after_pv=True)
    checks = AttentionSchedule.__post_init__

    def built(self):
        assert not self.rescale_after_pv, "the point's schedule was constructed"
        checks(self)

    def lowered(*args, **kwargs):
        raise AssertionError("the point was lowered")

    with monkeypatch.context() as m:
        m.setattr(AttentionSchedule, "__post_init__", built)
        m.setattr(FAMILY, "resources", lowered)
        found = [d for d in FAMILY.static_check(t, p) if d.severity == "error"]
    assert [d.code for d in found] == ["rescale_late_order"]
    assert "fa3_overlap=True" in found[0].fix
    with pytest.raises(ValueError) as raised:
        schedule_of(p)
    assert found[0].message in str(raised.value)


def test_packed_p_is_not_predicted_faster():
    """No GPU measurement of packed_p yet: the estimate gives a packed point the time of the
    same point with P in fp32 (a wider block_n it makes legal is costed as any block_n)."""
    t = task(D=128, S=4096)
    for bn in (128, 144, 160):
        fp32 = FAMILY.estimate(t, point(block_n=bn, fa3_overlap=True))
        packed = FAMILY.estimate(t, point(block_n=bn, fa3_overlap=True, packed_p=True))
        assert packed.ms == fp32.ms, bn


# ----------------------------------------------------------------------------- estimate


def test_estimate_orders_obviously_better_points():
    t = task(B=4, H=16, S=4096, D=128)
    est = lambda **kw: FAMILY.estimate(t, point(**kw)).ms  # noqa: E731
    assert est(block_n=128) < est(block_n=64)                   # wgmma N efficiency
    assert est(block_m=128) < est(block_m=64)                   # one consumer idles
    assert est(fa3_overlap=True) < est()                        # softmax under P V
    assert est(block_n=64, stages=3) <= est(block_n=64, stages=2)
    causal = task(B=4, H=16, S=4096, D=128, causal=True)
    assert FAMILY.estimate(causal, point()).ms < 0.6 * est()    # half the blocks
    e = FAMILY.estimate(t, point(fa3_overlap=True))
    assert e.kind == "estimate" and 300 < e.detail["tflops"] < 900


def test_estimate_beats_fp32_sdpa_and_counts_glue():
    t = task(B=32, H=32, S=512, D=128, dtype="f32", origin="kernelbench")
    ours = FAMILY.estimate(t, point(fa3_overlap=True))
    base = FAMILY.baseline_estimates(t)["eager"]
    assert ours.ms < base.ms and ours.detail["glue_us"] > 0


# ----------------------------------------------------------------------------- the candidate


def test_candidate_runs_in_the_interpreter_and_matches_float64(tmp_path):
    """The rendered KernelBench solution (argus.ops.attention on a GPU, the same kernel in the
    interpreter here) at a small SDPA task, against torch float64, for the split and plain
    Q K^T and a padded head dim."""
    from argus.agent.composer import compose
    from argus.agent.evaluate import import_source

    t = compose(sdpa_file(tmp_path, B=1, H=2, S=80, D=48, kwargs=", is_causal=True"))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 80, 48, generator=g) * 2 for _ in range(3))
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(48)
    s = s.masked_fill(~torch.ones(80, 80, dtype=torch.bool).tril(), float("-inf"))
    want = torch.softmax(s, -1) @ v.double()
    for terms, bound in ((3, 5e-3), (1, 3e-2)):
        p = FAMILY.normalize(t, {**FAMILY.naive_params(t), "qk_terms": terms,
                                 "block_m": 128, "block_n": 64})
        assert FAMILY.legal(t, p)
        src = FAMILY.render_solution(t, FAMILY.render_kernel(t, p), p)
        assert "argus.ops.attention(" in src
        mod = import_source(src, tmp_path, f"sol{terms}")
        got = mod.ModelNew()(q, k, v)
        assert got.shape == want.shape and got.dtype == torch.float32
        err = ((got.double() - want).norm() / want.norm()).item()
        assert err < bound, (terms, err)


def test_points_the_rules_accept_also_lower():
    """The rules only prune: a random sample of accepted points lowers (tracing runs the
    kernel's own checks), so the planner never spends a run on what the compiler rejects."""
    import random

    import argus as ag
    from argus.agent.families.attention import schedule_of
    from argus.compiler import lower_only
    from argus.kernels.attention import attention_kernel

    rng = random.Random(0)
    for D, causal in ((64, False), (128, True), (256, False)):
        t = task(D=D, causal=causal)
        sp = FAMILY.space(t)
        accepted = 0
        for _ in range(20000):    # hd256: ~1 point in 600 is legal (the fa3 spill rule)
            p = FAMILY.normalize(t, {k: rng.choice(v) for k, v in sp.items()})
            if not FAMILY.legal(t, p):
                continue
            lower_only(attention_kernel(D, ag.bf16, causal, False), s=schedule_of(p))
            accepted += 1
            if accepted == 4:
                break
        assert accepted == 4, D


def test_attention_cards_name_fields_of_the_space():
    from argus.agent.knowledge import load_cards

    sp = FAMILY.space(task(D=64, dtype="f32", origin="kernelbench"))
    cards = [c for c in load_cards() if c.kind == "schedule" and "attention" in c.families]
    assert len(cards) >= 4
    for c in cards:
        for k, v in c.edit.set:
            assert k in sp and v in sp[k], (c.id, k, v)
        for name in c.edit.search:
            assert any(v in sp[name] for v in c.param(name).values), (c.id, name)
        # the card's search from the library default proposes legal candidates on a task it
        # applies to (hd128 full, else causal, else hd64 short)
        t = next(x for x in (task(D=128), task(D=128, causal=True), task(D=64, S=1024))
                 if c.applies(x.features()))
        cands = FAMILY.expand(t, c, FAMILY.normalize(t, FAMILY.default_params(t)))
        assert any(FAMILY.legal(t, x) for x in cands), c.id


def test_optimize_writes_a_solution_through_argus_ops_attention(tmp_path):
    """`argus optimize` on a small SDPA task: the attention family's loop runs on the CPU
    (interpreter checks, estimates) and the solution it writes calls argus.ops.attention."""
    from argus.agent.composer import compose
    from argus.agent.loop import OptimizeConfig, optimize

    t = compose(sdpa_file(tmp_path, B=1, H=2, S=64, D=32))
    cfg = OptimizeConfig(iterations=2, device="cpu", judge="off", baselines="off",
                         db=str(tmp_path / "exp.sqlite"), timeout_s=300, verbose=False)
    result = optimize(t, tmp_path / "run", cfg)
    assert result.best is not None and result.best.outcome.time_kind == "estimate"
    solution = (tmp_path / "run" / "solution.py").read_text()
    assert "argus.ops.attention(q, k, v" in solution and "SCHEDULE = AttentionSchedule(" \
        in solution


def test_space_searches_the_measured_knobs_and_the_model_sees_two_ctas():
    """tile_order (snake: the causal walk's default at hd128 / 256 since 2026-12-06), own_blocks,
    ctas_per_sm and exp2_emulate are in the action space (each a
    measured default somewhere: docs/perf/attention.md), the two-CTA card proposes legal
    candidates at head dim 64, and the estimate credits the second CTA with hiding each tile's
    start, Q load and O store (the gain measured at short lengths)."""
    from argus.agent.knowledge import load_cards

    t = task(D=64, S=1024)
    sp = FAMILY.space(t)
    assert set(sp["tile_order"]) == {"head", "lpt", "snake"}
    assert set(sp["own_blocks"]) == {False, True}
    assert 2 in sp["ctas_per_sm"] and 104 in sp["consumer_regs"] and 2 in sp["exp2_emulate"]
    card = next(c for c in load_cards() if c.id == "attn.two_ctas")
    start = FAMILY.normalize(t, FAMILY.naive_params(t))
    cands = [x for x in FAMILY.expand(t, card, start) if FAMILY.legal(t, x)]
    assert cands and all(x["ctas_per_sm"] == 2 and x["consumer_regs"] == 104 for x in cands)
    one = dict(cands[0], ctas_per_sm=1)
    assert FAMILY.estimate(t, cands[0]).ms < FAMILY.estimate(t, one).ms
    # at head dim 128 two CTAs do not fit: the kernel's own resource report refuses them
    t128 = task(D=128, S=1024)
    big = FAMILY.normalize(t128, dict(FAMILY.default_params(t128), block_m=128, block_n=64,
                                      ctas_per_sm=2, producer_regs=24, consumer_regs=104,
                                      fa3_overlap=False))
    assert not FAMILY.legal(t128, big)
