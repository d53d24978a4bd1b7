"""The staged-block race checks fold stage equalities that no integers satisfy (model.
_never_equal, the gcd test: sum(c_i * t_i) + k = 0 has no integer solution when gcd(c_i)
does not divide k). The fold replaces a query by False only where the equation really has no
solution (checked here against brute force), and the TMA-store GEMM's 187 race pairs, whose
stages are 8 * wg + j per block, then pose a query only for blocks sharing a stage."""

from __future__ import annotations

import itertools
import random

import z3

from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, kernel_for
from argus.verify import check_smem, solver
from argus.verify.model import Model, _never_equal, _stage_eq


def test_gcd_fold_only_when_no_integer_solution():
    rng = random.Random(13)
    x, y = z3.Ints("x y")
    folded = 0
    for _ in range(300):
        ca, cb = rng.choice([1, 2, 3, 4, 6, 8, -4]), rng.choice([1, 2, 3, 4, 6, 8, -8])
        ka, kb = rng.randrange(-10, 11), rng.randrange(-10, 11)
        a, b = ca * x + ka, cb * y + kb
        never = _never_equal(a, b)
        # brute force over a window wide enough to hit a solution whenever one exists (the
        # solutions of ca*x - cb*y = kb - ka repeat with period lcm-sized steps below 100)
        solvable = any(ca * i + ka == cb * j + kb
                       for i, j in itertools.product(range(-60, 61), repeat=2))
        assert not (never and solvable), (a, b)
        if never:
            folded += 1
            assert z3.is_false(_stage_eq(a, b))
    assert folded > 20   # the test exercises the fold


def test_stages_that_may_meet_are_not_folded():
    wg, wg2 = z3.Ints("wg wg2")
    assert z3.is_false(_stage_eq(8 * wg + 1, 8 * wg2 + 3))
    for a, b in [(8 * wg + 1, 8 * wg2 + 9), (4 * wg + 2, 6 * wg2), (wg + 1, wg2),
                 (8 * wg + wg2, 8 * wg2 + 3)]:
        eq = _stage_eq(a, b)
        assert not z3.is_false(eq), (a, b)


def test_tma_store_race_pairs_fold_to_few_queries():
    problem = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    fn, schedule = kernel_for(problem, GemmSchedule(bn=176, stages=5, epilogue="tma",
                                                    cluster_m=2, store_cols=128))
    obs = check_smem._races(Model(lower_only(fn, s=schedule)))
    assert len(obs) > 150
    left = [o for o in obs if not all(z3.is_true(z3.simplify(c)) for _, c in o.claims)]
    assert 0 < len(left) <= 40, len(left)   # 31: blocks sharing a stage, solved and proven
    solver.clear_cache()
    assert all(solver.prove(o.premises, o.claims).status == "proven" for o in left)
