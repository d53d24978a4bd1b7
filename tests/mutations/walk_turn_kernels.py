"""A walk over units whose consumer warpgroups take the units in turns (`ag.when(u % 2 ==
wg)`), one release per step (ag.pipeline(stages), consumers=1), and whose steps per unit
vary with the unit (u % 3 + 1): each warpgroup's step count is a sum over the unit loop
(Model.steps_over) of another form than the producer's, which check_pipeline pairs unit by
unit (_pair_sums; the turns' obligations, _turn_obligations). Seeded bugs are marked
`# BUG:<name>` on the line a fix edits. Kept apart from the other kernel files so their line
numbers do not move.

skip=True is the correct form (the warpgroup whose turn it is not moves its counter past the
unit's steps: pipe.skip). skip=False is the turns without pipe.skip, wrong in every kernel
(tests/mutations/test_pipe_turns.py): each step is still consumed once (pipe.arrivals holds)
but a warpgroup's counter misses the other's units (pipe.totals is violated)."""

from __future__ import annotations

import argus as ag
from tests.mutations import ring_gemm as G
from tests.mutations.ring_gemm import BK


def make_walk_turns(bug: str | None = None, stages: int = 2, skip: bool = True,
                    steps=G.unit_steps):
    """Unit u (of cdiv(K, BK)) has steps(u) K steps (u % 3 + 1), all consumed by warpgroup
    u % 2. steps=lambda u: 2: the same steps in every unit, the producer's count a trip
    count (check_pipeline._Pair's trip form), each warpgroup's still a sum (its turns)."""

    @ag.kernel(name="walk_turns")
    def walk_turns(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                   C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages, rows=64, consumers=1, n_tiles=1)
        units = ag.cdiv(A.shape[1], BK)
        G.produce_walk(r, A, B, units, steps=steps)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, G.BN), ag.f32)
            for u in ag.range(units):
                if bug == "one_step_more":
                    n = steps(u) + 1  # BUG:one_step_more
                else:
                    n = steps(u)
                if bug == "both_take_a_unit":
                    mine = (u % 2 == wg) | (u % 3 == 0)  # BUG:both_take_a_unit
                else:
                    mine = u % 2 == wg
                with ag.when(mine):
                    with ag.ordered("mma"):
                        for k in ag.range(n):
                            with r.ring.consume() as st:
                                ag.wgmma(r.sA[st], r.sB[st], acc)
                if skip:
                    with ag.when(u % 2 != wg):
                        r.ring.skip(n)
            ag.store(C, (r.pid_m * r.rows, wg * G.BN), acc.to(ag.bf16))

    return walk_turns
