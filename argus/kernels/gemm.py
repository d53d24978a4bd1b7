"""The library's bf16 GEMM kernel, C[M, N] = A[M, K] @ B[N, K]^T with fp32 accumulation, on Hopper's tensor cores.

Warp-specialized: one producer warpgroup (40 registers) streams A and B tiles through a
STAGES-deep TMA ring into 128B-swizzled shared memory; two consumer warpgroups (232 registers)
each multiply a 64-row half of the BM x BN tile with wgmma. Stages and mbarrier parity come
from the pipeline construct; the compiler derives them, and its step counters run on across
output tiles, so the persistent variant (one CTA per SM walking tiles in grouped order) stays
in phase and its producer loads the next tile while the consumers store this one.
"""

from dataclasses import dataclass

import argus as ag


@dataclass(frozen=True)
class GemmSchedule:
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    producer_regs: int = 40
    consumer_regs: int = 232
    persistent: bool = True
    num_sms: int = 132      # CTAs of the persistent grid (H100/H200 SXM: 132 SMs)
    group_m: int = 8        # grouped raster: GROUP_M tiles down M before moving along N
    epilogue: str = "direct"  # "direct": st.global from registers; "tma": stmatrix + TMA store


def tile_coords(tile, m_tiles, n_tiles, group_m: int):
    """Grouped raster order: consecutive tiles share B columns for group_m rows of tiles, so
    the B tiles they read stay in L2."""
    width = group_m * n_tiles
    group = tile // width
    first_m = group * group_m
    group_size = ag.minimum(m_tiles - first_m, group_m)
    within = tile % width
    return first_m + within % group_size, within // group_size


@ag.kernel
def gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
         C: ag.Tensor["M", "N", ag.bf16], s: GemmSchedule = GemmSchedule()):
    M, K = A.shape
    N = B.shape[0]
    m_tiles, n_tiles = ag.cdiv(M, s.bm), ag.cdiv(N, s.bn)
    tiles = m_tiles * n_tiles
    programs = ag.minimum(tiles, s.num_sms) if s.persistent else tiles
    (pid,) = ag.grid(programs)
    sA = ag.smem((s.stages, s.bm, s.bk), ag.bf16, swizzle=128)
    sB = ag.smem((s.stages, s.bn, s.bk), ag.bf16, swizzle=128)
    pipe = ag.pipeline(s.stages, consumers=s.consumers)
    k_tiles = ag.cdiv(K, s.bk)
    rows = s.bm // s.consumers
    blocks = s.bn // 64
    if s.epilogue == "tma":  # one 128B-swizzled 64 x 64 staging block per 64 output columns
        sC = ag.smem((s.consumers * blocks, rows, 64), ag.bf16, swizzle=128)

    with ag.role("producer", warpgroups=1, regs=s.producer_regs):
        for tile in ag.range(pid, tiles, programs):
            m, n = tile_coords(tile, m_tiles, n_tiles, s.group_m)
            for k in ag.range(k_tiles):
                with pipe.produce() as stage:
                    ag.tma.load(sA[stage], A, (m * s.bm, k * s.bk))
                    ag.tma.load(sB[stage], B, (n * s.bn, k * s.bk))

    with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
        for tile in ag.range(pid, tiles, programs):
            m, n = tile_coords(tile, m_tiles, n_tiles, s.group_m)
            acc = ag.zeros((rows, s.bn), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as stage:
                    ag.wgmma(sA[stage].rows_of(wg * rows, rows), sB[stage], acc)
            if s.epilogue == "tma":
                for j in range(blocks):
                    staging = sC[wg * blocks + j]
                    ag.stmatrix(staging, acc[:, 64 * j:64 * (j + 1)].to(ag.bf16))
                    ag.tma.store(C, (m * s.bm + wg * rows, n * s.bn + 64 * j), staging)
            else:
                ag.store(C, (m * s.bm + wg * rows, n * s.bn), acc.to(ag.bf16))
