"""Seeded bugs: the newest value of a wgmma accumulator read, inside its reduction loop, by
an op that is not part of the accumulator's chain (tests/mutations/test_chain_head_reads.py).
A read there sees a partial product: the k of the iterations still to come are missing from
it. The ring GEMM (ring_gemm.py) with one consumer loop written out; each bug is the marked
`# BUG:<name>` line(s)."""

from __future__ import annotations

import argus as ag
from tests.mutations import ring_gemm as G

BN = G.BN


def make_gemm_chain_read(bug: str | None = None):
    """C = A @ B^T, one 64-row accumulator per consumer warpgroup.
    `snapshot`: the epilogue stores a copy of acc taken at the top of each K step (before
    that step's wgmma): C misses the last K block. `twice`: the step's old acc (copied before
    the wgmma) is added back after it: every earlier K block is counted again each step.
    `store_mid`: the partial acc stored to C inside the loop, then again after it (C is
    right at the end, but written by every step: a store the output sees mid-reduction)."""

    @ag.kernel(name="gemm_chain_read")
    def gemm_chain_read(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                        C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, 2)
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            snap = ag.zeros((64, BN), ag.f32)
            for k in ag.range(r.k_tiles):
                with r.ring.consume() as st:
                    if bug == "snapshot":
                        snap = acc + 0.0  # BUG:snapshot
                    if bug == "twice":
                        prev = acc + 0.0  # BUG:twice
                    acc = ag.wgmma(r.sA[st].rows_of(wg * 64, 64), r.sB[st], acc)
                    if bug == "twice":
                        acc = acc + prev  # BUG:twice
                    if bug == "store_mid":
                        ag.store(C, (r.pid_m * G.BM + wg * 64, r.pid_n * BN),  # BUG:store_mid
                                 acc.to(ag.bf16))  # BUG:store_mid
            out = snap if bug == "snapshot" else acc
            ag.store(C, (r.pid_m * G.BM + wg * 64, r.pid_n * BN), out.to(ag.bf16))

    return gemm_chain_read


def make_promoted_chain_read(bug: str | None = None):
    """fp8 promotion's shape (gemm_fp8.py's serial promoted loop, tests/fp8_k_loops.py's
    skeleton): each K block overwrites a partial that is added into the fp32 sum. `snapshot`:
    the tile stored is a copy of the sum taken before the block's promotion (the last block
    never reaches C); `twice`: the sum before the promotion added back after it.
    `alias_snapshot`: the copy taken in an `ag.when` block, into a variable that starts as the
    sum itself (`snap = acc` before the loop: both variables from one zeros tile)."""
    from tests.fp8_k_loops import k_loop_kernel

    def k_loop(ring, k_steps, wg):
        acc = ag.zeros((64, BN), ag.f32)
        part = ag.zeros((64, BN), ag.f32)
        snap = acc if bug == "alias_snapshot" else ag.zeros((64, BN), ag.f32)
        for k in ag.range(k_steps):
            with ring.pipe.consume() as stage:
                ag.wgmma(ring.a[stage].rows_of(wg * 64, 64), ring.b[stage].rows_of(0, BN),
                         part, trans_b=False, overwrite=True)
            if bug == "snapshot":
                snap = acc + 0.0  # BUG:snapshot
            if bug == "alias_snapshot":
                with ag.when(k == 0):  # BUG:alias_snapshot
                    snap = acc  # BUG:alias_snapshot
            prev = acc + 0.0 if bug == "twice" else None  # BUG:twice
            acc = acc + part * 0.5
            if bug == "twice":
                acc = acc + prev  # BUG:twice
        return snap if bug in ("snapshot", "alias_snapshot") else acc

    return k_loop_kernel(f"promoted_chain_read_{bug or 'clean'}", k_loop)


def make_gemm_region_rescale(bug: str | None = None):
    """The ring GEMM with acc rescaled inside an `ag.when` block of its K loop (`acc = acc *
    1.0` on the first step): the block's variable takes acc and is assigned back into it, so
    it continues the chain; h316's read rule refused it (the variable was no value of the
    chain). `snapshot`: the block also copies acc into a variable carried out of the loop, and
    the epilogue stores the copy (C misses every K block after the first)."""

    @ag.kernel(name="gemm_region_rescale")
    def gemm_region_rescale(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                            C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, 2)
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            snap = ag.zeros((64, BN), ag.f32)
            for k in ag.range(r.k_tiles):
                with r.ring.consume() as st:
                    acc = ag.wgmma(r.sA[st].rows_of(wg * 64, 64), r.sB[st], acc)
                with ag.when(k == 0):
                    acc = acc * 1.0
                    if bug == "snapshot":
                        snap = acc + 0.0  # BUG:snapshot
            out = snap if bug == "snapshot" else acc
            ag.store(C, (r.pid_m * G.BM + wg * 64, r.pid_n * BN), out.to(ag.bf16))

    return gemm_region_rescale


def make_interval_chain_read(bug: str | None = None):
    """Interval promotion's shape (gemm_fp8.py `interval_promoted_mma`, every = 2): each group
    of two K blocks starts the partial afresh (the first block's wgmma overwrites it), the
    second accumulates, and the group's sum is added into the fp32 sum; the blocks past the
    last whole group are promoted one by one. The partial-read rule skips the group loop only
    because every iteration overwrites the partial first (check_wgmma.py
    `_overwritten_each_iteration`).
    `top_read`: the partial copied at the top of a group, before its overwrite (it holds the
    previous group's whole sum, as the promotion read it; the copy is added to nothing).
    `mid_group`: the partial copied after the group's first block, before its second, and the
    copy added into the sum (a partial read mid-reduction inside an iteration that overwrote
    it). `guarded`: the overwrite only in the first group (`ag.when(g == 0)`, a later group
    accumulates onto the earlier ones, which the promotion adds again), and the partial
    copied at the top of the group: the loop no longer overwrites it on every path, so the
    read sees a partial carried across groups. `nested`: the overwrite in a loop of its own
    (`ag.range(1)`: a loop, which the rule takes as one that may run zero times), the same
    read before it."""
    from tests.fp8_k_loops import k_loop_kernel

    def k_loop(ring, k_steps, wg):
        acc = ag.zeros((64, BN), ag.f32)
        part = ag.zeros((64, BN), ag.f32)
        seen = ag.zeros((64, BN), ag.f32)

        def block(first: bool) -> None:
            with ring.pipe.consume() as stage:
                ag.wgmma(ring.a[stage].rows_of(wg * 64, 64), ring.b[stage].rows_of(0, BN),
                         part, trans_b=False, overwrite=first)

        for g in ag.range(k_steps // 2):
            if bug in ("top_read", "guarded", "nested"):
                seen = part + 0.0  # BUG:top_read BUG:guarded BUG:nested
            if bug == "guarded":
                with ag.when(g == 0):  # BUG:guarded
                    block(True)
                with ag.when(g != 0):
                    block(False)
            elif bug == "nested":
                for _ in ag.range(1):  # BUG:nested
                    block(True)
            else:
                block(True)
            if bug == "mid_group":
                seen = part + 0.0  # BUG:mid_group
            block(False)
            acc = acc + part * 0.5
            if bug == "mid_group":
                acc = acc + seen * 0.0  # BUG:mid_group
        for t in ag.range(k_steps % 2):
            block(True)
            acc = acc + part * 0.5
        return acc + seen * 0.0 if bug == "top_read" else acc

    return k_loop_kernel(f"interval_chain_read_{bug or 'clean'}", k_loop)
