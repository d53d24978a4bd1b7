"""A persistent walk whose cooperative consumer warpgroups each consume their own number of
steps per unit and release the unit's other steps unread (the shape of attention's causal
walk with own_blocks, without attention): pipe.totals pairs each warpgroup's sum over the
unit loop with the producer's, unit by unit (check_pipeline._Pair). Seeded bugs are marked
`# BUG:<name>`. Kept apart from the other kernel files so their line numbers do not move."""

from __future__ import annotations

import argus as ag
from tests.mutations import ring_gemm as G
from tests.mutations.ring_gemm import BK

UNITS_STEP = 4   # the walk's stride over units (a persistent grid of 4 programs per row)


def make_walk_own_steps(bug: str | None = None, stages: int = 2):
    """Unit u of the walk has u % 3 + 1 K steps; consumer warpgroup wg computes
    min(u % 3 + wg, u % 3 + 1) of them (warpgroup 0 one fewer) and releases the rest."""

    @ag.kernel(name="walk_own_steps")
    def walk_own_steps(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                       C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages, n_tiles=UNITS_STEP)
        units = ag.cdiv(A.shape[1], BK)
        G.produce_walk(r, A, B, r.pid_n, units, UNITS_STEP)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, G.BN), ag.f32)
            for u in ag.range(r.pid_n, units, UNITS_STEP):
                loaded = u % 3 + 1
                mine = ag.minimum(u % 3 + wg, loaded)
                for k in ag.range(mine):
                    with r.ring.consume() as st:
                        ag.wgmma(r.sA[st].rows_of(wg * 64, 64), r.sB[st], acc)
                if bug == "wg0_one_release_short":
                    unread = loaded - mine - 1 + wg  # BUG:wg0_one_release_short
                elif bug == "wg1_one_release_extra":
                    unread = loaded - mine + wg  # BUG:wg1_one_release_extra
                else:
                    unread = loaded - mine
                for _ in ag.range(unread):
                    with r.ring.consume():
                        pass
            ag.store(C, (r.pid_m * G.BM + wg * 64, r.pid_n * G.BN), acc.to(ag.bf16))

    return walk_own_steps
