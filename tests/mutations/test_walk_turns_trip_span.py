"""The trip form of check_pipeline._Pair (a producer whose count is the walk's trip count x the
same steps per unit, Model.trip_steps) pairs the consumers' sums iteration by iteration only
over the same iterations (h303's review of 9e3df130). Warpgroups taking the units in turns
without pipe.skip (_turn_obligations): a producer walk one unit short, starting at unit 1, or
capped at 100 units fills fewer steps than they consume, and pipe.arrivals must say so; a walk
over as many units from 1 (the same trip count) is proven. Without the span claim ('same
iterations') the per-unit claim alone (2 == 2 in every unit) proves the short walks too
(checked by hand: those three cases fail with it dropped)."""

from __future__ import annotations

import pytest

import argus as ag
from argus.verify import check_pipeline, solver
from argus.verify import obligation as OB
from argus.verify.model import Model
from tests.mutations import ring_gemm as G
from tests.mutations.ring_gemm import BK

SUBJECT = "the turns of consumer role 'consumer' vs producer"


def _kernel(walk):
    """Producer: 2 steps per unit over ag.range(*walk(units)); consumers: 2 warpgroups take
    units 0 .. units - 1 in turns (u % 2), 2 steps a unit, without pipe.skip (so the turns'
    obligations pair each step's arrivals with the producer's trip count x 2)."""

    @ag.kernel(name="walk_turns_trip_span")
    def k(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
          C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, 2, rows=64, consumers=1, n_tiles=1)
        units = ag.cdiv(A.shape[1], BK)
        G.produce_walk(r, A, B, *walk(units), steps=lambda u: 2)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, G.BN), ag.f32)
            for u in ag.range(units):
                with ag.when(u % 2 == wg):
                    with ag.ordered("mma"):
                        for _ in ag.range(2):
                            with r.ring.consume() as st:
                                ag.wgmma(r.sA[st], r.sB[st], acc)
            ag.store(C, (r.pid_m * r.rows, wg * G.BN), acc.to(ag.bf16))

    return k


@pytest.mark.parametrize("walk,status", [
    (lambda u: (u,), "proven"), (lambda u: (1, u + 1), "proven"),
    (lambda u: (u - 1,), "violated"), (lambda u: (1, u), "violated"),
    (lambda u: (ag.minimum(u, 100),), "violated")],
    ids=["same-walk", "same-trip-from-1", "one-unit-short", "from-1", "capped-at-100"])
def test_a_trip_count_producer_pairs_only_the_same_iterations(walk, status):
    obs, finds = check_pipeline.obligations(Model(_kernel(walk).trace()))
    assert not [f for f in finds if f.code.startswith("pipe.") and f.status == "unknown"]
    arrivals = [OB.run(ob, solver.Stats(), None) for ob in obs
                if ob.code == "pipe.arrivals" and SUBJECT in ob.subject]
    assert arrivals, "no turns' pipe.arrivals obligation"
    assert {o.status for o in arrivals} == {status}, [(o.status, o.message) for o in arrivals]
