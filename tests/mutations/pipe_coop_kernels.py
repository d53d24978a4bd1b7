"""Cooperative consumers that take turns inside a pipeline step (issue 13, "Verifier 2"):
every consumer warpgroup consumes every step of the ring (its empty barrier counts one
arrival per warpgroup) and issues its wgmma in an ordered section inside the step, as the
staggered fp8 promotion does; and ping-pong consumers whose turn is a set of warpgroups
(`wg != 0`, `wg >= 1`, `wg < 2`). Seeded bugs are marked `# BUG:<name>` on the line a fix
edits (tests/mutations/seeded.py). The GEMM's setup, producer and plain K loop are
tests/mutations/ring_gemm.py's. Kept apart from the other kernel files so their line numbers
do not move."""

from __future__ import annotations

import argus as ag
from tests.mutations import ring_gemm as G
from tests.mutations.ring_gemm import BM, BN


def make_coop_turns(bug: str | None = None, stages: int = 2):
    """Two consumer warpgroups of 64 rows each consume every K step of one ring and take
    turns issuing their wgmma inside the step (ag.ordered in the consume step)."""

    @ag.kernel(name="coop_turns")
    def coop_turns(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                   C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages)
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            if bug == "wg1_one_short":
                steps = r.k_tiles - wg  # BUG:wg1_one_short
            else:
                steps = r.k_tiles
            for k in ag.range(steps):
                if bug == "wg0_only":
                    mine = wg == 0  # BUG:wg0_only
                elif bug is None or bug == "wg1_one_short":
                    mine = wg < 2   # every warpgroup of the two: the count names wg, equal
                else:
                    mine = wg >= 0
                with ag.when(mine):
                    with r.ring.consume() as st:
                        with ag.ordered("mma"):
                            ag.wgmma(r.sA[st].rows_of(wg * 64, 64), r.sB[st], acc)
            ag.store(C, (r.pid_m * BM + wg * 64, r.pid_n * BN), acc.to(ag.bf16))

    return coop_turns


def make_coop_plain(bug: str | None = None, stages: int = 2):
    """The same split without turns: a consume under `ag.when(wg == 0)` still leaves the
    ring's empty barrier (two arrivals per phase) waiting for warpgroup 1."""

    @ag.kernel(name="coop_plain")
    def coop_plain(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                   C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages)
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            G.mainloop(r, wg, acc)
            if bug == "tail_wg0":
                with ag.when(wg == 0):  # BUG:tail_wg0
                    with r.ring.consume() as st:
                        ag.wgmma(r.sA[st].rows_of(wg * 64, 64), r.sB[st], acc)
            ag.store(C, (r.pid_m * BM + wg * 64, r.pid_n * BN), acc.to(ag.bf16))

    return coop_plain


def make_set_turn(bug: str | None = None, when: str = "ne0", warpgroups: int = 2):
    """Warpgroup 0 scales its rows and hands them through shared memory to the warpgroup
    that stores the sum; who stores is a set of warpgroups (`wg != 0`, `wg >= 1`, ...) that
    holds exactly one of them (`two_store`: two, stored twice, store.once; `none_store`:
    none, store.coverage)."""

    @ag.kernel(threads=128 * (warpgroups + 1), name="set_turn")
    def set_turn(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 64))
        sX = ag.smem((64, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=warpgroups,
                     regs=160 if warpgroups == 2 else 152) as wg:
            x = ag.load(X, (b * 64, 0), (64, 64))
            rows = ag.arange(64)[:, None]
            if bug == "two_store":
                last = wg >= 1  # BUG:two_store
            elif bug == "none_store":
                last = wg > 1  # BUG:none_store
            elif when == "ne0":
                last = wg != 0
            elif when == "ge1":
                last = wg >= 1
            else:
                last = wg >= warpgroups - 1
            if bug == "handoff_unordered":
                with ag.when(wg == 0):
                    ag.store_shared(sX.view(), x * 2.0)  # BUG:handoff_unordered
                with ag.when(last):
                    y = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
                    ag.store(Y, (b * 64, 0), x + y)
            else:
                with ag.ordered("handoff"):
                    with ag.when(wg == 0):
                        ag.store_shared(sX.view(), x * 2.0)
                    with ag.when(last):
                        y = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
                        ag.store(Y, (b * 64, 0), x + y)  # BUG:two_store (stored twice)

    return set_turn


def make_set_staging(bug: str | None = None, when: str = "ne0"):
    """Both consumer warpgroups load the same tile; the warpgroups a set-turn selects write
    it to one shared staging tile and TMA-store it: one warpgroup (`wg != 0`, `wg < 1`) is
    race free, every warpgroup (`wg >= 0`) writes the same staging rows unordered."""

    @ag.kernel(threads=384, name="set_staging")
    def set_staging(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 64))
        sY = ag.smem((64, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            x = ag.load(X, (b * 64, 0), (64, 64))
            if bug == "all_stage":
                mine = wg >= 0  # BUG:all_stage
            elif when == "ne0":
                mine = wg != 0
            else:
                mine = wg < 1
            with ag.when(mine):
                ag.store_shared(sY.view(), x * 2.0)  # BUG:all_stage (the racing write)
                ag.tma.store(Y, (b * 64, 0), sY.view())

    return set_staging
