"""store.coverage's raster query asks "distinct units store distinct tiles" for ordered pairs
only (u <lex v, check_stores._tile_obligation): symmetry breaking, sound because the query's
premises are the same for both copies of the unit variables. This checks that condition on the
library's rasters (plain, batched, clustered, MoE's expert walk): swapping the two copies maps
the premise set onto itself, and the claim's other half is the swapped pair's."""

from __future__ import annotations

import pytest
import z3

from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule
from argus.kernels.moe import PREFILL_TMA, grouped_gemm_kernel
from argus.ops.schedules import Problem, kernel_for
from argus.verify import checker
from argus.verify.model import Model

SQUARE = Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True)
BATCHED_KN = Problem(1024, 2048, 512, 8, "bf16", "bf16", "kn", True)


def _gemm(problem, schedule):
    fn, s = kernel_for(problem, schedule)
    return lower_only(fn, s=s)


KERNELS = {
    "gemm": lambda: _gemm(SQUARE, GemmSchedule()),
    "gemm cluster tma": lambda: _gemm(SQUARE, GemmSchedule(cluster_m=2, epilogue="tma",
                                                           stages=3)),
    "batched kn": lambda: _gemm(BATCHED_KN, GemmSchedule(bn=128, stages=6, pingpong=True)),
    "moe gate_up tma": lambda: lower_only(grouped_gemm_kernel(True), s=PREFILL_TMA),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_tile_query_premises_are_symmetric(name):
    model = Model(KERNELS[name]())
    obs, _ = checker.collect(model)
    # reported, or only the dependency of a store.once derived from it (MoE's partial tiles)
    every = obs + [dep for o in obs for dep, _ in o.implied_by]
    tiles = [o for o in every
             if any(n == "distinct units store distinct tiles" for n, _ in o.claims)]
    assert tiles
    for ob in tiles:
        claim = dict(ob.claims)["distinct units store distinct tiles"]
        consts = {}
        todo = [claim]
        while todo:
            t = todo.pop()
            if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                consts[t.decl().name()] = t
            todo.extend(t.children())
        copies = {n: c for n, c in consts.items() if "@2" in n}
        assert copies, "the claim names the second copy of the units"
        swap = []
        for n, v in copies.items():
            u = consts.get(n.split("@2")[0])
            assert u is not None, f"{n} has no first copy in the claim"
            swap += [(u, v), (v, u)]
        # with the tag.assume instances verify.run adds (checker.run's `prepare`)
        premises = list(ob.premises) + model.axiom_instances(
            [c for _, c in ob.claims] + list(ob.premises))
        swapped = {z3.substitute(p, *swap).get_id() for p in premises}
        assert swapped == {p.get_id() for p in premises}
        # the ordered pair's claim, swapped, is the claim of the reverse order
        first, second = claim.arg(0), z3.substitute(claim.arg(0), *swap)
        s = z3.Solver()
        s.add(z3.Not(z3.Xor(first, second)), z3.And([u != v for u, v in swap[::2]]))
        assert s.check() == z3.unsat, "the pair's order is strict and total on distinct units"
