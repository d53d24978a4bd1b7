"""Consumer roles whose warpgroups take turns on the steps of one ring (issue 13 / 17
review: check_pipeline._cooperative read every role of several warpgroups without pipe.skip
as cooperative). Each CTA computes two 64 x 128 tiles side by side; consumer warpgroup h
multiplies tile h in its turn (`ag.when(h == wg)`), and the empty barrier counts one release
per step (ag.pipeline(stages), consumers=1). Seeded bugs are marked `# BUG:<name>` on the line
a fix edits (tests/mutations/seeded.py). Kept apart from the other kernel files so their line
numbers do not move."""

from __future__ import annotations

import contextlib

import argus as ag
from tests.mutations import ring_gemm as G

BN, BK, TM = 128, 64, 64


def make_turns(bug: str | None = None, stages: int = 2, skip: bool = True,
               ordered: bool = True):
    """skip=True: the warpgroup whose turn it is not moves its step counter past the other's
    steps (pipe.skip), so every warpgroup's counter follows the ring (the correct form).
    skip=False: the turns without pipe.skip: each warpgroup counts only its own steps, so
    warpgroup 1's first step waits on slot 0 for ring step 0 (warpgroup 0's tile)."""

    @ag.kernel(name="turns")
    def turns(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
              C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, TM), ag.cdiv(N, 2 * BN))
        sA = ag.smem((stages, TM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        if bug in ("both_consume", "both_plain"):
            ring = ag.pipeline(stages)  # BUG:both_consume BUG:both_plain (one release a step)
        else:
            ring = ag.pipeline(stages)
        k_tiles = ag.cdiv(K, BK)
        G.produce_pair(G.Ring(pid_m, pid_n, sA, sB, ring, k_tiles, TM, BN), A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for h in ag.range(2):
                if bug == "both_consume":
                    mine = wg >= 0  # BUG:both_consume
                else:
                    mine = h == wg  # BUG:no_skip (the turn; its skip is missing below)
                with ag.when(mine) if bug != "both_plain" else contextlib.nullcontext():
                    if ordered:
                        with ag.ordered("mma"):
                            acc = ag.zeros((TM, BN), ag.f32)
                            for k in ag.range(k_tiles):
                                with ring.consume() as st:
                                    ag.wgmma(sA[st], sB[st], acc)
                    else:
                        acc = ag.zeros((TM, BN), ag.f32)
                        for k in ag.range(k_tiles):
                            with ring.consume() as st:
                                ag.wgmma(sA[st], sB[st], acc)
                    ag.store(C, (pid_m * TM, (pid_n * 2 + h) * BN), acc.to(ag.bf16))
                if skip and bug not in ("both_consume", "both_plain"):
                    with ag.when(h != wg):
                        if bug == "skip_short":
                            ring.skip(k_tiles - 1)  # BUG:skip_short
                        else:
                            ring.skip(k_tiles)

    return turns
