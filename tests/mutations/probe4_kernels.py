"""A fourth held-out style probe (issue 13, "Verifier 2"; 2026-12-05): synchronization and
hardware contracts, written from the issue's class list as an outside author would (a
persistent ring whose slot is computed from k, a producer that runs one tile more, ping-pong
consumers taking turns per tile, a ring released by the wrong number of warpgroups, a
staging buffer two warpgroups share, a slot read after its step, a cluster multicast whose
parts miss a peer's rows, register budgets, an exchange between warpgroups), each with seeded
bugs marked `# BUG:<name>` on the line a fix edits. The plain GEMM pieces (setup, producer, K
loop) are tests/mutations/ring_gemm.py's. Kept apart from the other kernel files so their line
numbers do not move."""

from __future__ import annotations

import argus as ag
from tests.mutations import ring_gemm as G

BM, BN, BK = G.BM, G.BN, G.BK


def make_persistent_ring(bug: str | None = None, stages: int = 3, num_sms: int = 132,
                         epilogue: str = "tma"):
    """A persistent GEMM: tiles walked row-major by a stride of the grid, one ring across
    every tile (its counter carries from tile to tile), a TMA-store epilogue through one
    staging tile per consumer warpgroup, reused by every tile."""

    @ag.kernel(name="persistent_ring")
    def persistent_ring(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                        C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        tiles_n = ag.cdiv(N, BN)
        total = ag.cdiv(M, BM) * tiles_n
        programs = ag.minimum(total, num_sms)
        (pid,) = ag.grid(programs)
        k_tiles = ag.cdiv(K, BK)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        if bug == "staging_shared":
            sC = ag.smem((1, 64, BN), ag.bf16)  # BUG:staging_shared
        else:
            sC = ag.smem((2, 64, BN), ag.bf16)
        ring = ag.pipeline(stages, consumers=2)
        with ag.role("producer", warpgroups=1, regs=40):
            if bug == "producer_extra_tile":
                last = total + programs  # BUG:producer_extra_tile
            else:
                last = total
            for t in ag.range(pid, last, programs):
                for k in ag.range(k_tiles):
                    with ring.produce() as st:
                        ag.tma.load(sA[st], A, ((t // tiles_n) * BM, k * BK))
                        ag.tma.load(sB[st], B, ((t % tiles_n) * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for t in ag.range(pid, total, programs):
                acc = ag.zeros((64, BN), ag.f32)
                for k in ag.range(k_tiles):
                    with ring.consume() as st:
                        if bug == "slot_from_k":
                            slot = k % stages  # BUG:slot_from_k
                        else:
                            slot = st
                        ag.wgmma(sA[slot].rows_of(wg * 64, 64), sB[slot], acc)
                row = (t // tiles_n) * BM + wg * 64
                if epilogue == "tma":
                    if bug == "staging_shared":
                        stage_c = sC[0]
                    else:
                        stage_c = sC[wg]
                    ag.stmatrix(stage_c, acc.to(ag.bf16))
                    ag.tma.store(C, (row, (t % tiles_n) * BN), stage_c)
                else:
                    ag.store(C, (row, (t % tiles_n) * BN), acc.to(ag.bf16))

    return persistent_ring


def make_pingpong_pair(bug: str | None = None, stages: int = 2):
    """Each CTA computes two 64 x 128 tiles side by side; consumer warpgroup h multiplies
    tile h in its ordered turn while the other skips those ring steps (a ping-pong ring
    released by one warpgroup per step)."""
    TM = 64

    @ag.kernel(name="pingpong_pair")
    def pingpong_pair(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                      C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, TM), ag.cdiv(N, 2 * BN))
        sA = ag.smem((stages, TM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        if bug == "released_by_two":
            ring = ag.pipeline(stages, consumers=2)  # BUG:released_by_two
        else:
            ring = ag.pipeline(stages)
        k_tiles = ag.cdiv(K, BK)
        G.produce_pair(G.Ring(pid_m, pid_n, sA, sB, ring, k_tiles, TM, BN), A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for h in ag.range(2):
                if bug == "turn_skips_wg1":
                    mine = h // 2 == wg  # BUG:turn_skips_wg1
                else:
                    mine = h == wg
                with ag.when(mine):
                    with ag.ordered("mma"):
                        acc = ag.zeros((TM, BN), ag.f32)
                        for k in ag.range(k_tiles):
                            with ring.consume() as st:
                                ag.wgmma(sA[st], sB[st], acc)
                    ag.store(C, (pid_m * TM, (pid_n * 2 + h) * BN), acc.to(ag.bf16))
                with ag.when(h != wg if bug != "turn_skips_wg1" else h // 2 != wg):
                    if bug == "skip_short":
                        ring.skip(k_tiles - 1)  # BUG:skip_short
                    else:
                        ring.skip(k_tiles)

    return pingpong_pair


def make_twice_from_slot(bug: str | None = None, stages: int = 2):
    """C = 2 A @ B^T in two accumulators (a stand-in for two products of one slot, such as a
    gated pair): each K step's slot feeds two wgmmas."""

    @ag.kernel(name="twice_from_slot")
    def twice_from_slot(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                        C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages)
        sA, sB = r.sA, r.sB
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            acc2 = ag.zeros((64, BN), ag.f32)
            slot = ag.scalar(0)
            for k in ag.range(r.k_tiles):
                with r.ring.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
                    slot = st
                    if bug != "reread_after_step":
                        ag.wgmma(sA[slot].rows_of(wg * 64, 64), sB[slot], acc2)
                if bug == "reread_after_step":
                    ag.wgmma(sA[slot].rows_of(wg * 64, 64), sB[slot], acc2)  # BUG:reread_after_step
            ag.store(C, (r.pid_m * BM + wg * 64, r.pid_n * BN), (acc + acc2).to(ag.bf16))

    return twice_from_slot


def make_cluster_quarters(bug: str | None = None, stages: int = 2):
    """Clusters of 2 CTAs along M sharing B: each CTA loads its part of B's rows and multicasts
    it to both; A is each CTA's own."""

    @ag.kernel(name="cluster_quarters", cluster=(2, 1, 1))
    def cluster_quarters(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                         C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(2 * ag.cdiv(M, 2 * BM), ag.cdiv(N, BN), cluster=2)
        rank = ag.cluster_rank()
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        if bug == "part_quarter":
            part = BN // 4  # BUG:part_quarter
        else:
            part = BN // 2
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with ring.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    ag.tma.load(sB[st].rows_of(rank * part, part), B,  # BUG:part_quarter (the box it sizes)
                                (pid_n * BN + rank * part, k * BK), multicast=True)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with ring.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return cluster_quarters


def make_three_consumers(bug: str | None = None, stages: int = 2):
    """A 192-row tile: three consumer warpgroups of 64 rows, one producer; registers split
    with setmaxnreg (4 x 128 threads share the SM's 64K registers)."""
    TM = 192

    @ag.kernel(name="three_consumers")
    def three_consumers(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                        C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages, rows=TM, consumers=3)
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=3, regs=176 if bug == "regs_over_budget" else 152) as wg:  # BUG:regs_over_budget
            acc = ag.zeros((64, BN), ag.f32)
            G.mainloop(r, wg, acc)
            if bug == "rows_overlap":
                ag.store(C, (r.pid_m * TM + wg * 32, r.pid_n * BN), acc.to(ag.bf16))  # BUG:rows_overlap
            else:
                ag.store(C, (r.pid_m * TM + wg * 64, r.pid_n * BN), acc.to(ag.bf16))

    return three_consumers


def make_row_handoff(bug: str | None = None):
    """Warpgroup 0 scales its rows and hands them to warpgroup 1 through shared memory, which
    adds them to its own and stores the sum (the two turns of an ordered section)."""

    @ag.kernel(threads=384, name="row_handoff")
    def row_handoff(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 64))
        sX = ag.smem((64, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            x = ag.load(X, (b * 64, 0), (64, 64))
            rows = ag.arange(64)[:, None]
            if bug == "handoff_unordered":
                with ag.when(wg == 0):
                    ag.store_shared(sX.view(), x * 2.0)  # BUG:handoff_unordered
                with ag.when(wg == 1):
                    y = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
                    ag.store(Y, (b * 64, 0), x + y)
            else:
                with ag.ordered("handoff"):
                    with ag.when(wg == 0):
                        ag.store_shared(sX.view(), x * 2.0)
                    with ag.when(wg == 1):
                        y = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
                        ag.store(Y, (b * 64, 0), x + y)

    return row_handoff


def make_cluster_leader(bug: str | None = None, stages: int = 2):
    """Clusters of 2 CTAs along M sharing B: the rank-0 CTA multicasts the whole B tile to
    both (the other loads only its own A)."""

    @ag.kernel(name="cluster_leader", cluster=(2, 1, 1))
    def cluster_leader(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                       C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(2 * ag.cdiv(M, 2 * BM), ag.cdiv(N, BN), cluster=2)
        rank = ag.cluster_rank()
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with ring.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    with ag.when(rank == 0):
                        if bug == "leader_half":
                            ag.tma.load(sB[st].rows_of(0, BN // 2), B, (pid_n * BN, k * BK), multicast=True)  # BUG:leader_half
                        else:
                            ag.tma.load(sB[st], B, (pid_n * BN, k * BK), multicast=True)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with ring.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return cluster_leader


def make_pingpong_three(bug: str | None = None, stages: int = 2, num_sms: int = 132,
                        walk: str = "count", full_grid: bool = False):
    """A persistent walk of 64 x 128 tiles taken in turns by three consumer warpgroups
    (tile i of this CTA by warpgroup i % 3), one producer. walk="count": i over this CTA's
    tile count, ag.cdiv(total - pid, programs), t = pid + i * programs; walk="written": that
    count written out, (total - pid + programs - 1) // programs; walk="range": t over
    range(pid, total, programs), i = (t - pid) // programs. full_grid: num_sms programs
    whatever the tile count (total - pid < 0 on the programs past the last tile: no tile)."""
    TM = 64

    @ag.kernel(name="pingpong_three")
    def pingpong_three(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                       C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        tiles_n = ag.cdiv(N, BN)
        total = ag.cdiv(M, TM) * tiles_n
        programs = num_sms if full_grid else ag.minimum(total, num_sms)
        (pid,) = ag.grid(programs)
        if bug == "count_floor":
            mine_count = (total - pid) // programs  # BUG:count_floor
        elif walk == "written":
            mine_count = (total - pid + programs - 1) // programs
        else:
            mine_count = ag.cdiv(total - pid, programs)
        sA = ag.smem((stages, TM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(stages)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for u in ag.range(pid, total, programs) if walk == "range" else ag.range(mine_count):
                t = u if walk == "range" else pid + u * programs
                for k in ag.range(k_tiles):
                    with ring.produce() as st:
                        ag.tma.load(sA[st], A, ((t // tiles_n) * TM, k * BK))
                        ag.tma.load(sB[st], B, ((t % tiles_n) * BN, k * BK))
        with ag.role("consumer", warpgroups=3, regs=152) as wg:
            for u in ag.range(pid, total, programs) if walk == "range" else ag.range(mine_count):
                t = u if walk == "range" else pid + u * programs
                i = (u - pid) // programs if walk == "range" else u
                if bug == "turn_mod_two":
                    turn = i % 2  # BUG:turn_mod_two
                else:
                    turn = i % 3
                with ag.when(turn == wg):
                    with ag.ordered("mma"):
                        acc = ag.zeros((TM, BN), ag.f32)
                        for k in ag.range(k_tiles):
                            with ring.consume() as st:
                                ag.wgmma(sA[st], sB[st], acc)
                    ag.store(C, ((t // tiles_n) * TM, (t % tiles_n) * BN), acc.to(ag.bf16))
                with ag.when(turn != wg):
                    ring.skip(k_tiles)

    return pingpong_three


def make_role_handoff(bug: str | None = None):
    """A producer role computes a row scale and hands it to the consumer role through shared
    memory (the consumer multiplies its rows by it)."""

    @ag.kernel(threads=256, name="role_handoff")
    def role_handoff(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 64))
        sX = ag.smem((64, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            ag.store_shared(sX.view(), ag.load(X, (b * 64, 0), (64, 64)) * 2.0)  # BUG:across_roles
        with ag.role("consumer", warpgroups=1, regs=232):
            y = ag.gather(sX.view(), (ag.arange(64)[:, None], ag.arange(64)[None, :]), other=0.0)
            ag.store(Y, (b * 64, 0), y)

    return role_handoff
