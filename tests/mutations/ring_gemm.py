"""The producer/consumer GEMM every seeded-bug kernel file repeats (pipe_coop_kernels.py,
probe4_kernels.py, heldout_kernels.py): C = A @ B^T with A [M, K], B [N, K], a TMA ring of
`stages` slots filled by one producer warpgroup, and consumer warpgroups of 64 rows each.

A kernel calls these pieces for the parts its bug does not touch and writes the rest inline,
so a seeded bug reads as its one-line difference from the correct kernel, marked
`# BUG:<name>` in the kernel's own file (the line a fix edits; the verifier's findings name
it there). Nothing here carries a bug switch: a bug in the producer or the consumer's loop is
written out in its kernel."""

from __future__ import annotations

from typing import NamedTuple

import argus as ag

BM, BN, BK = 128, 128, 64


class Ring(NamedTuple):
    pid_m: object
    pid_n: object
    sA: object                # (stages, rows, BK) stages of A
    sB: object                # (stages, cols, BK) stages of B
    ring: object              # the pipeline
    k_tiles: object
    rows: int                 # the CTA tile's rows (64 per consumer warpgroup)
    cols: int


def ring_gemm(A, B, stages: int, *, rows: int = BM, cols: int = BN, consumers: int = 2,
              n_tiles=None) -> Ring:
    """The grid over (M / rows, N / cols) (N / cols: `n_tiles` when given), the two stage
    buffers and the ring; call it at the top of the kernel body."""
    M, K = A.shape
    n_tiles = ag.cdiv(B.shape[0], cols) if n_tiles is None else n_tiles
    pid_m, pid_n = ag.grid(ag.cdiv(M, rows), n_tiles)
    sA = ag.smem((stages, rows, BK), ag.bf16, swizzle=128)
    sB = ag.smem((stages, cols, BK), ag.bf16, swizzle=128)
    ring = ag.pipeline(stages, consumers=consumers)
    k_tiles = ag.cdiv(K, BK)
    return Ring(pid_m, pid_n, sA, sB, ring, k_tiles, rows, cols)


def produce(r: Ring, A, B) -> None:
    """The producer role: one warpgroup loads A's and B's tiles of every K step into the
    ring."""
    with ag.role("producer", warpgroups=1, regs=40):
        for k in ag.range(r.k_tiles):
            with r.ring.produce() as st:
                ag.tma.load(r.sA[st], A, (r.pid_m * r.rows, k * BK))
                ag.tma.load(r.sB[st], B, (r.pid_n * r.cols, k * BK))


def produce_pair(r: Ring, A, B) -> None:
    """The producer role of a CTA that computes two column tiles side by side (its grid's
    pid_n counts pairs of `cols` columns): every K step of tile 0, then every K step of tile
    1, into one ring (the turn-taking and ping-pong kernels' consumers take a tile each)."""
    with ag.role("producer", warpgroups=1, regs=40):
        for h in ag.range(2):
            for k in ag.range(r.k_tiles):
                with r.ring.produce() as st:
                    ag.tma.load(r.sA[st], A, (r.pid_m * r.rows, k * BK))
                    ag.tma.load(r.sB[st], B, ((r.pid_n * 2 + h) * r.cols, k * BK))


def mainloop(r: Ring, wg, acc) -> None:
    """A consumer warpgroup's K loop: every step of the ring, its 64 rows of A."""
    for k in ag.range(r.k_tiles):
        with r.ring.consume() as st:
            ag.wgmma(r.sA[st].rows_of(wg * 64, 64), r.sB[st], acc)


def unit_steps(u):
    """The K steps of unit u of the walk kernels: they vary with the unit."""
    return u % 3 + 1


def produce_walk(r: Ring, A, B, *walk, steps=unit_steps) -> None:
    """The producer role of a walk over units: unit u loads steps(u) K steps of A's rows and
    B's first columns (unit_steps: varying with the unit), `walk` is ag.range's arguments
    over the units. Its count is a sum over the unit loop (Model.steps_over), or with steps
    that are the same for every unit the walk's trip count times them, which check_pipeline
    pairs with the consumers' unit by unit (walk_turn_kernels.py: warpgroups that take the
    units in turns; walk_own_steps_kernels.py: cooperative warpgroups that consume their own
    steps of each unit)."""
    with ag.role("producer", warpgroups=1, regs=40):
        for u in ag.range(*walk):
            for k in ag.range(steps(u)):
                with r.ring.produce() as st:
                    ag.tma.load(r.sA[st], A, (r.pid_m * r.rows, k * BK))
                    ag.tma.load(r.sB[st], B, (0, k * BK))
