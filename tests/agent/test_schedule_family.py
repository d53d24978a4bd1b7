"""The generic family over Schedule classes (argus/agent/families/schedule.py): the GEMM and the
composed family derive their space and legality from the Schedule classes' declarations
(families/declared.py), with no dict rules of their own; their resources come from the lowering;
and, as base.py's invariant promises, every schedule the declarations accept lowers on a random
sample (the GEMM's refusals past the declarations are shared-memory ones only, which the family
reads from the lowering instead of declaring)."""

from __future__ import annotations

import random

import pytest

import argus as ag
from argus.agent.composer import compose
from argus.agent.evaluate import import_source
from argus.agent.families import ScheduleFamily, get_family, params_key
from argus.agent.families.declared import declare_library
from argus.agent.task import TaskSpec
from argus.compiler import lower_only
from argus.errors import CompileError
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.schedule_space import space_of

SOFTMAX_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1) * 2.0


def get_inputs():
    return [torch.randn(16, 300)]


def get_init_inputs():
    return []
"""


def gemm_task(out="bf16", layout="nk", M=1024, N=1024, K=1024):
    return TaskSpec("gemm", "t", "argus", "x", (("M", M), ("N", N), ("K", K)), out, "bf16",
                    options=(("in", "bf16"), ("out", out), ("b_layout", layout)))


def _legal_samples_render_and_lower(family, task, tmp_path, *, seed: int, prefix: str,
                                    count: int = 4) -> None:
    """`count` distinct random schedules of the family's space that it calls legal: each
    renders and its kernel lowers (raises otherwise)."""
    rng = random.Random(seed)
    tried, seen = 0, set()
    while tried < count:
        p = {k: rng.choice(v) for k, v in family.space(task).items()}
        key = tuple(sorted(p.items()))
        if key in seen or not family.legal(task, p):
            continue
        seen.add(key)
        tried += 1
        module = import_source(family.render_kernel(task, p), tmp_path, f"{prefix}{tried}")
        lower_only(module.KERNEL, **module.CONSTEXPRS)


def test_every_family_is_a_schedule_family_without_rules_of_its_own():
    """One generic family: every family's legality is ScheduleFamily's (declared ranges and
    constraints, the classes' checks, the compiler's resources); the dict rules are gone."""
    import argus.agent.families.base as base
    from argus.agent.families import FAMILIES

    assert set(FAMILIES) == {"gemm", "elementwise", "kernel", "composed", "attention", "moe",
                             "moe_fp8", "conv"}
    for name, family in FAMILIES.items():
        assert isinstance(family, ScheduleFamily), name
        assert type(family).static_check is ScheduleFamily.static_check, name
        assert not hasattr(family, "rules"), name
    assert not hasattr(base, "Rule")


def test_the_gemm_space_is_the_declaration():
    declare_library()
    family, task = get_family("gemm"), gemm_task()
    declared = space_of(GemmSchedule).choices(family.facts(task))
    assert family.space(task) == declared                 # the space is the declaration
    assert get_family("gemm").space(gemm_task(out="f32"))["epilogue"] == ("direct",)


@pytest.mark.parametrize("out,layout", [("bf16", "nk"), ("f32", "kn")])
def test_what_the_gemm_declarations_accept_lowers_or_runs_out_of_shared_memory(out, layout):
    """The declarations leave no structural hole: a random schedule they accept either lowers
    or is refused by a resource plan the family reads from the lowering: shared memory
    (reported as 'smem') or the registers the roles ask of an SM ('regs_budget', e.g. three
    208-register consumers); what the family calls legal always lowers."""
    family, task = get_family("gemm"), gemm_task(out, layout)
    declare_library()
    space = space_of(GemmSchedule)
    facts = family.facts(task)
    kernel = gemm_kernel(ag.bf16, getattr(ag, out), layout, False)
    rng = random.Random(11)
    accepted = lowered = smem = 0
    for _ in range(150):
        p = family.space(task)
        p = {k: rng.choice(v) for k, v in p.items()}
        if rng.random() < 0.6:
            p = family.normalize(task, p)
        if not space.accepts(p, facts):
            continue
        try:
            s = GemmSchedule(**p)
        except ValueError:
            continue      # the class's own checks (the family reports 'schedule_fields')
        accepted += 1
        try:
            lower_only(kernel, s=s)
            lowered += 1
            assert family.legal(task, p), family.static_check(task, p)
        except CompileError as exc:
            resource = "smem" if "shared memory" in str(exc) else \
                "regs_budget" if "registers per CTA" in str(exc) else None
            assert resource, (p, exc)
            smem += resource == "smem"
            assert [d.code for d in family.static_check(task, p)
                    if d.severity == "error"] == [resource], (p, exc)
    assert accepted >= 30 and lowered >= 15 and smem >= 1, (accepted, lowered, smem)


def test_gemm_resources_come_from_the_lowering():
    family, task = get_family("gemm"), gemm_task()
    p = family.normalize(task, family.default_params(task))
    res = family.resources(task, p)
    assert res["threads"] == 384 and res["registers_per_cta"] == 128 * (40 + 2 * 232)
    # the ring of 4 stages of (128 + 256) x 64 bf16 is most of it
    assert 4 * (128 + 256) * 64 * 2 < res["smem"] < 232448
    deeper = family.resources(task, dict(p, stages=3))
    assert deeper["smem"] < res["smem"]
    found = family.static_check(task, dict(p, consumer_regs=248, producer_regs=56))
    assert [d.code for d in found if d.severity == "error"] == ["regs_budget"], found


def test_neighbors_are_one_declared_step_away():
    family, task = get_family("gemm"), gemm_task()
    p = family.normalize(task, family.default_params(task))
    near = family.neighbors(task, p)
    assert near and p not in near
    space = family.space(task)
    for q in near:
        # one field one step along its choices; the fields that follow it (normalize) follow
        assert any(abs(space[k].index(q[k]) - space[k].index(p[k])) == 1
                   and family.normalize(task, {**p, k: q[k]}) == q
                   for k in space if q[k] != p[k]), (p, q)


def test_composed_schedules_the_declarations_accept_lower(tmp_path):
    """Composed family: a random sample of the tile schedules its declarations accept; each
    renders (argus.compose plans the program with it) and the candidate's kernel lowers."""
    path = tmp_path / "softmax_task.py"
    path.write_text(SOFTMAX_TASK)
    task = compose(path)
    family = get_family("composed")
    assert task.family == "composed" and set(family.space(task)) == {"rows", "bn", "threads"}
    _legal_samples_render_and_lower(family, task, tmp_path, seed=3, prefix="k")
    bad = dict(family.default_params(task), rows=16, bn=2048, threads=128)
    assert [d.code for d in family.static_check(task, bad)] == ["tile_registers"]


def test_the_llm_prompt_carries_the_declared_constraints():
    """The constraints are data, so a planner can read them: the LLM prompt lists each with its
    message template and the rule it cites."""
    from argus.agent.candidate import Candidate
    from argus.agent.llm.prompt import build_prompt
    from argus.agent.planner import PlanState

    family, task = get_family("gemm"), gemm_task()
    state = PlanState(task, family, "dense",
                      Candidate.of(family.normalize(task, family.default_params(task))))
    text = build_prompt(state, [], [], [])
    section = text.split("## Constraints between fields")[1].split("##")[0]
    assert "wgmma_rows (error; GemmSchedule): bm={bm} with {consumers}" in section
    assert "[rule: PTX wgmma: M = 64 per warpgroup]" in section
    assert "k_alignment" in section and "predicted_spill (warning" in section


def test_elementwise_schedule_declares_its_space_in_its_fields(tmp_path):
    """ElementwiseSchedule carries legal() metadata and CONSTRAINTS itself (no declare()); the
    family's space is that declaration, and what it accepts renders and lowers."""
    from argus.agent.families.elementwise import ElementwiseSchedule

    family = get_family("elementwise")
    task = TaskSpec("elementwise", "e", "kernelbench", "x", (("rows", 64), ("cols", 3000)), "f32",
                    "f32", expr="y = ag.maximum(x, 0.0)")
    assert ElementwiseSchedule.__dataclass_fields__["bn"].metadata
    assert family.space(task) == space_of(ElementwiseSchedule).choices(family.facts(task))
    _legal_samples_render_and_lower(family, task, tmp_path, seed=5, prefix="e")
    assert [d.code for d in family.static_check(task, {"rows": 1, "bn": 384, "threads": 256})] \
        == ["blocked_layout"]


def test_composed_estimate_follows_the_schedule_and_the_strict_split():
    """The composed estimate ranks tiles (one element per thread streams too few bytes to cover
    HBM latency), charges the split's products, and takes the compiler's registers; on the
    strict track only the 6-term split is legal (3 terms pass the exact CPU interpreter but
    not the tensor cores), so the planner cannot trade accuracy for the estimate's speed."""
    family = get_family("composed")
    task = TaskSpec("composed", "t", "kernelbench", "x", (("kernels", 2), ("matmuls", 1)), "f32",
                    "f32", metrics=(("bytes", float(1 << 28)), ("flops", 2.0 * 4096 ** 3)))
    naive = family.naive_params(task)
    est = lambda **kw: family.estimate(task, {**naive, **kw}).ms   # noqa: E731
    assert est(rows=4, bn=1024) < est()                        # 16 values per thread vs 1
    assert est(terms=1) < est(terms=6)
    assert est(rows=4, bn=1024) < family.estimate(task, {**naive, "rows": 4, "bn": 1024},
                                                  {"registers": 255}).ms
    assert family.space(task)["terms"] == (6,)
    assert [d.code for d in family.static_check(task, {**naive, "terms": 3})] == ["strict_split"]
    relaxed = TaskSpec("composed", "t", "kernelbench", "x", (("kernels", 2), ("matmuls", 1)),
                       "f32", "bf16", metrics=task.metrics)
    assert relaxed.track == "relaxed" and family.space(relaxed)["terms"] == (6, 3, 1)


def test_attention_space_is_declared_and_narrowed_per_task():
    """Attention: AttentionSchedule (declared by class) and AttentionPrecision (field
    metadata); one-field constraints narrow the precision knobs to the task's dtype and head
    dim, and the unprovable overlap order out of the search."""
    family = get_family("attention")
    assert isinstance(family, ScheduleFamily)

    def t(D, dtype):
        return TaskSpec("attention", "a", "kernelbench", "x",
                        (("B", 1), ("H", 2), ("HKV", 2), ("S", 256), ("SK", 256), ("D", D),
                         ("causal", 0)), dtype, "bf16")

    sp = family.space(t(64, "f32"))
    assert sp["qk_terms"] == (1, 3) and sp["operand"] == ("f16", "bf16")
    assert sp["intra_wg_overlap"] == (False,)
    assert family.space(t(128, "f32"))["qk_terms"] == (1,)          # 3 x 128 > 256
    assert family.space(t(64, "bf16"))["operand"] == ("bf16",)
    p = family.normalize(t(64, "bf16"), family.default_params(t(64, "bf16")))
    assert [d.code for d in family.static_check(t(64, "bf16"), dict(p, operand="f16"))] == \
        ["operand"]


CAPPED_KERNEL = '''"""A kernel that refuses BN > 2048 at trace time (its own Argus error)."""
import argus as ag


@ag.kernel(threads=128)
def capped(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], BN: int = 512,
           ROWS: int = 2):
    if BN > 2048:
        raise ag.TraceError(f"BN={BN}: this kernel takes at most 2048 columns",
                            fix="use BN <= 2048")
    pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
    x = ag.load(X, (pid_m * ROWS, pid_n * BN), (ROWS, BN))
    ag.store(Y, (pid_m * ROWS, pid_n * BN), x * 2.0)


KERNEL = capped
OUTPUT = 1


def make_inputs(size="small", seed=0, device="cpu"):
    import torch

    M, N = (8, 1000) if size == "small" else (512, 4096)
    return torch.randn(M, N).to(device), torch.empty(M, N).to(device)


def reference(x, y):
    return x.double() * 2


def bytes_moved(x, y):
    return 2 * x.numel() * 4
'''


def test_a_user_kernels_knobs_are_a_declared_schedule(tmp_path):
    """The generic kernel family: the kernel's power-of-two int compile-time parameters become
    a Schedule class whose fields declare their legal values; the space is that declaration, a
    neighbour is one step along one knob and legal, a value off the declaration is refused
    with the knob named, and the resources (the launch grid at the task's shape) and so the
    estimate come from lowering the file's own kernel."""
    from pathlib import Path

    from argus.agent.families.kernel import kernel_schedule

    family = get_family("kernel")
    task = compose(Path(__file__).parents[2] / "examples" / "elementwise.py")
    schedule = kernel_schedule(task.constexprs)
    assert schedule.__dataclass_fields__["BN"].metadata
    space = family.space(task)
    assert space == space_of(schedule).choices(family.facts(task))
    assert space == {"ROWS": (1, 2, 4, 8, 16, 32), "BN": (256, 512, 1024, 2048, 4096, 8192)}
    p = family.default_params(task)
    assert p == {"ROWS": 4, "BN": 1024} and family.legal(task, p)
    near = family.neighbors(task, p)
    assert sorted(map(params_key, near)) == sorted(map(params_key, (
        {"ROWS": 2, "BN": 1024}, {"ROWS": 8, "BN": 1024}, {"ROWS": 4, "BN": 512},
        {"ROWS": 4, "BN": 2048})))
    assert all(family.legal(task, q) for q in near)
    bad = family.static_check(task, dict(p, BN=96))
    assert [d.code for d in bad] == ["positive_pow2"] and bad[0].message.startswith("BN=96:")
    assert [d.code for d in family.static_check(task, dict(p, ROWS=0))][0] == "range"
    res = family.resources(task, p)
    assert res["threads"] == 256 and res["grid"] == [8192 // 4, 8192 // 1024]
    # without a worker's report the planner still ranks: one element per thread is slower
    assert family.estimate(task, {"ROWS": 1, "BN": 256}).ms > family.estimate(task, p).ms

    path = tmp_path / "capped.py"
    path.write_text(CAPPED_KERNEL)
    capped = compose(path)
    assert capped.family == "kernel" and family.space(capped)["BN"][-1] == 4096
    found = family.static_check(capped, {"BN": 4096, "ROWS": 2})
    assert [d.code for d in found] == ["lower"] and "at most 2048 columns" in found[0].message
    assert family.legal(capped, {"BN": 2048, "ROWS": 2})
    assert family.estimate(capped, {"BN": 4096, "ROWS": 2}) is None


@pytest.mark.parametrize("where", ["lower.run", "analysis.infer_layouts"])
def test_a_compiler_bug_is_not_a_refused_schedule(monkeypatch, where):
    """Only the kernel's own Python (its trace) and Argus errors refuse a schedule: a KeyError
    out of layout inference or a lowering pass is a compiler bug, and it reaches the caller
    (the worker reports it as an "error" outcome, the planner stops) instead of pruning the
    schedule as if the compiler had refused it."""
    import argus.analysis
    import argus.lower
    from argus.agent.families.schedule import lower_resources

    family, task = get_family("gemm"), gemm_task(M=1536)    # a task no other test caches
    p = family.normalize(task, family.default_params(task))
    kernel_fn, constexprs = family.build(task, p)
    assert isinstance(lower_resources(kernel_fn, constexprs, params=p), dict)

    def broken(*args, **kwargs):
        raise KeyError("a compiler bug")

    module, name = where.split(".")
    monkeypatch.setattr({"lower": argus.lower, "analysis": argus.analysis}[module], name, broken)
    with pytest.raises(KeyError, match="a compiler bug"):
        lower_resources(kernel_fn, constexprs, params=p)
    with pytest.raises(KeyError, match="a compiler bug"):
        family.static_check(task, p)


def test_the_kernels_own_python_refuses_a_schedule(tmp_path):
    """A kernel whose Python raises a plain exception at trace time refuses those values: a
    "lower" finding that names the exception, not a crash of the planner."""
    from argus.agent.families.schedule import lower_resources

    source = CAPPED_KERNEL.replace(
        'raise ag.TraceError(f"BN={BN}: this kernel takes at most 2048 columns",\n'
        '                            fix="use BN <= 2048")', 'raise ValueError("too wide")')
    assert 'raise ValueError("too wide")' in source
    kernel_fn = import_source(source + "\nCONSTEXPRS = {}\n", tmp_path, "picky").KERNEL
    found = lower_resources(kernel_fn, {"BN": 4096, "ROWS": 2}, kernel="picky",
                            params={"BN": 4096})
    assert found.code == "lower" and found.severity == "error"
    assert "raised ValueError: too wide" in found.message
    assert found.counterexample == {"BN": 4096}
    assert isinstance(lower_resources(kernel_fn, {"BN": 1024, "ROWS": 2}), dict)
