"""The cost model ranks schedules the way the published Hopper step ladder does, labels every
number as an estimate, and the GEMM family's static rules are sound: every schedule they accept
also lowers (so pruning never lets an illegal schedule through to a run)."""

from __future__ import annotations

import random

import pytest

import argus as ag
from argus.agent import cost_model
from argus.agent.families import get_family
from argus.agent.task import TaskSpec
from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule, gemm_kernel

BASE = dict(bm=128, bn=256, bk=64, stages=4, consumers=2, producer_regs=40, consumer_regs=232,
            persistent=True, num_sms=132, group_m=8, epilogue="direct")


def est(M=4096, N=4096, K=4096, **kw):
    return cost_model.gemm_estimate(M, N, K, {**BASE, **kw})


def test_gemm_ladder_ordering():
    naive = est(bm=64, bn=64, consumers=1, stages=2, persistent=False)
    deeper = est(bm=64, bn=64, consumers=1, stages=6, persistent=False)
    t128 = est(bn=128, stages=5, persistent=False)
    t256 = est(persistent=False)
    pers = est()
    assert naive.ms > deeper.ms > t128.ms > t256.ms > pers.ms
    assert naive.ms / pers.ms > 4                       # the ladder spans ~2.3x (317 -> 764)
    assert naive.bound == "latency" and pers.bound == "compute"
    assert 500 < pers.detail["tflops"] < 900            # near cuBLAS (700-800), below peak
    assert pers.kind == "estimate" and "estimate" in pers.label()


def test_small_problems_prefer_smaller_tiles_and_spills_cost():
    big_tile = est(M=128, N=8192, K=8192)
    small_tile = est(M=128, N=8192, K=8192, bm=64, consumers=1, bn=128)
    assert small_tile.ms < big_tile.ms                  # wave quantization
    assert est(consumer_regs=152).ms > est().ms          # 128 accumulators at 152 registers


def test_memory_bound_model():
    kw = dict(bytes_moved=8 << 26, ctas=1 << 16, threads=256)
    one = cost_model.memory_bound_estimate(elems_per_thread=1, **kw)
    sixteen = cost_model.memory_bound_estimate(elems_per_thread=16, **kw)
    assert one.ms > 2 * sixteen.ms                      # too few bytes in flight
    floor = (8 << 26) / cost_model.H200.hbm_bytes_s * 1e3
    assert sixteen.ms >= floor                          # never beats the copy bandwidth
    assert cost_model.copy_bound_ms(8 << 26).ms == pytest.approx(sixteen.ms, rel=0.2)


@pytest.mark.parametrize("out,layout", [("bf16", "nk"), ("f32", "kn")])
def test_gemm_rules_are_sound_against_the_lowering(out, layout):
    task = TaskSpec("gemm", "t", "argus", "x", (("M", 1024), ("N", 1024), ("K", 1024)), out,
                    "bf16", options=(("in", "bf16"), ("out", out), ("b_layout", layout)))
    family = get_family("gemm")
    space = family.space(task)
    kernel = gemm_kernel(ag.bf16, getattr(ag, out), layout, False)
    rng = random.Random(7)
    accepted = 0
    for _ in range(200):
        p = {k: rng.choice(v) for k, v in space.items()}
        if rng.random() < 0.6:
            p = family.normalize(task, p)
        if not family.legal(task, p):
            continue
        accepted += 1
        lower_only(kernel, s=GemmSchedule(**p))         # raises if the rules were unsound
    assert accepted >= 20


def test_swap_ab_is_a_legal_agent_choice_for_skinny_gemms():
    """The agent can turn swap_ab (the gemm.swap_ab_small_m card): 16-token tiles are legal
    with it and not without; it needs the direct epilogue and no cluster; the cost model
    tiles the transposed problem."""
    task = TaskSpec("gemm", "t", "argus", "x", (("M", 16), ("N", 8192), ("K", 8192)), "bf16",
                    "bf16", options=(("in", "bf16"), ("out", "bf16"), ("b_layout", "kn")))
    family = get_family("gemm")
    assert True in family.space(task)["swap_ab"] and 16 in family.space(task)["bn"]
    p = family.normalize(task, dict(family.default_params(task), bm=64, bn=16, stages=16,
                                    swap_ab=True, epilogue="direct", cluster_m=1))
    assert family.legal(task, p)
    lower_only(gemm_kernel(ag.bf16, ag.bf16, "kn", False), s=GemmSchedule(**p))
    assert not family.legal(task, dict(p, swap_ab=False))             # 16-wide without swap
    assert not family.legal(task, dict(p, epilogue="tma"))
    assert not family.legal(task, dict(p, cluster_m=2))
    est = cost_model.gemm_estimate(16, 8192, 8192, p)
    assert est.detail["tiles"] == 8192 // 64                          # N / bm weight tiles
