"""The library's fp8 GEMM: C = (A * scale_a) @ (W * scale_b)^T on Hopper's fp8 tensor cores.

A is [M, K] e4m3 (K contiguous), W is [N, K] e4m3 (K contiguous: the row-major weight of
`x @ W.T`); `scale_a` and `scale_b` are one-element float32 tensors (per-tensor scales, as
`torch._scaled_mm` takes them) and C is [M, N] bf16 / f16 / f32. PTX lets only 16-bit wgmma
operands be transposed, so both operands are K-major here (PTX ISA wgmma.mma_async, "Matrix
Descriptor"); there is no MN-major variant.

Same warp-specialized structure as `argus.kernels.gemm`: one producer warpgroup streams A and
W tiles through a STAGES-deep TMA ring of 128B-swizzled shared memory; each of `consumers`
warpgroups multiplies a 64-row slice with `wgmma.m64nNk32.f32.e4m3.e4m3`, BK = 128 e4m3 = one
128-byte swizzle row, so a stage is four k32 instructions. Accumulation is fp32 over all of K
(per-tensor scales need no promotion); the epilogue multiplies the accumulator by
scale_a * scale_b, read from device memory once per consumer (no host sync), and converts to
the output type. Invariant: every element of C is written once, from fp32 accumulators of all
K, by the consumer that owns its rows.
"""

import functools
from dataclasses import dataclass

import argus as ag
from argus.dtypes import DType
from argus.kernels.gemm import tile_coords

BK_BYTES = 128  # one 128-byte swizzle row of e4m3: the K depth of a stage


@dataclass(frozen=True)
class Fp8GemmSchedule:
    """What the fp8 GEMM lets a tuner choose. bk is in e4m3 elements (= bytes)."""

    bm: int = 128
    bn: int = 256
    bk: int = 128
    stages: int = 4
    consumers: int = 2
    producer_regs: int = 40
    consumer_regs: int = 232
    persistent: bool = True
    num_sms: int = 132      # CTAs of the persistent grid (H100/H200 SXM: 132 SMs)
    group_m: int = 8        # grouped raster: GROUP_M tiles down M before moving along N
    epilogue: str = "direct"  # "direct": st.global from registers; "tma": stmatrix + TMA store
    cluster_m: int = 1      # 2: CTA pairs on vertically adjacent tiles share W by TMA multicast
    zero_by_wgmma: bool = False  # scale-d = 0 on the first wgmma instead of zeroing registers

    def __post_init__(self) -> None:
        problems = []
        if self.bk != BK_BYTES:
            problems.append(f"bk={self.bk}: a stage is one 128-byte swizzle row of e4m3, "
                            f"bk=128")
        if self.consumers < 1 or self.bm != 64 * self.consumers:
            problems.append(f"each consumer warpgroup owns 64 rows: bm={self.bm} needs "
                            f"consumers={self.bm // 64}")
        if self.bn % 8 or not 8 <= self.bn <= 256:
            problems.append(f"bn={self.bn}: wgmma N is a multiple of 8 in [8, 256]")
        if self.bn > 256 or (self.bn % 64 and self.epilogue == "tma"):
            problems.append(f"the TMA-store epilogue stores 64-column blocks; bn={self.bn}")
        if self.epilogue not in ("direct", "tma"):
            problems.append(f"epilogue={self.epilogue!r} is not 'direct' or 'tma'")
        if self.stages < 1:
            problems.append(f"stages={self.stages} < 1")
        if self.cluster_m not in (1, 2):
            problems.append(f"cluster_m={self.cluster_m}: the kernel pairs at most 2 CTAs")
        elif self.cluster_m == 2 and (self.bn // 2) % 8:
            problems.append(f"cluster_m=2 multicasts half of W's {self.bn} rows per CTA: bn "
                            f"must be a multiple of 16")
        if self.group_m < 1 or self.num_sms < self.cluster_m:
            problems.append(f"group_m={self.group_m}, num_sms={self.num_sms} must be positive")
        if problems:
            raise ValueError("Fp8GemmSchedule: " + "; ".join(problems))

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the tiles (the compiler adds barriers and alignment)."""
        ring = self.stages * (self.bm + self.bn) * self.bk
        staging = self.bm * self.bn * 2 if self.epilogue == "tma" else 0
        return ring + staging


@functools.cache
def gemm_fp8_kernel(out_dtype: DType = ag.bf16) -> ag.KernelFunction:
    """The fp8 GEMM kernel for one output type (cached: one KernelFunction per type)."""
    if out_dtype not in (ag.bf16, ag.f16, ag.f32):
        raise ValueError(f"the fp8 GEMM writes bf16, f16 or f32, not {out_dtype}")

    def gemm_fp8(A: ag.Tensor["M", "K", ag.e4m3],
                 W: ag.Tensor["N", "K", ag.e4m3],
                 ScaleA: ag.Tensor[1, ag.f32],
                 ScaleB: ag.Tensor[1, ag.f32],
                 C: ag.Tensor["M", "N", out_dtype],
                 s: Fp8GemmSchedule = Fp8GemmSchedule()):
        M, K = A.shape
        N = W.shape[0]
        cs = s.cluster_m
        if s.epilogue == "tma" and out_dtype.bits != 16:
            raise ag.TraceError(f"the TMA-store epilogue (stmatrix) stores 16-bit outputs, "
                                f"not {out_dtype}", fix="use Fp8GemmSchedule(epilogue='direct')")
        # A unit of work is `cs` vertically adjacent tiles, one per CTA of a cluster.
        m_tiles, n_tiles = ag.cdiv(M, s.bm), ag.cdiv(N, s.bn)
        m_units = ag.cdiv(m_tiles, cs) if cs > 1 else m_tiles
        total = m_units * n_tiles
        clusters = ag.minimum(total, s.num_sms // cs) if s.persistent else total
        (pid,) = ag.grid(clusters * cs, cluster=cs)
        rank = ag.cluster_rank() if cs > 1 else 0
        first, programs = (pid // cs, clusters) if cs > 1 else (pid, clusters)
        sA = ag.smem((s.stages, s.bm, s.bk), ag.e4m3, swizzle=128)
        sW = ag.smem((s.stages, s.bn, s.bk), ag.e4m3, swizzle=128)
        pipe = ag.pipeline(s.stages, consumers=s.consumers)
        k_tiles = ag.cdiv(K, s.bk)
        rows = s.bm // s.consumers
        blocks = s.bn // 64
        if s.epilogue == "tma":  # one 128B-swizzled 64 x 64 staging block per 64 columns
            sC = ag.smem((s.consumers * blocks, rows, 64), out_dtype, swizzle=128)

        def locate(tile):
            """(m tile, n tile) of a flat unit index, for this CTA."""
            mu, n = tile_coords(tile, m_units, n_tiles, s.group_m)
            return mu * cs + rank, n

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for tile in ag.range(first, total, programs):
                m, n = locate(tile)
                for k in ag.range(k_tiles):
                    with pipe.produce() as stage:
                        ag.tma.load(sA[stage], A, (m * s.bm, k * s.bk))
                        if cs > 1:  # each CTA loads 1/cs of the W rows for all
                            part = s.bn // cs
                            ag.tma.load(sW[stage].rows_of(rank * part, part), W,
                                        (n * s.bn + rank * part, k * s.bk), multicast=True)
                        else:
                            ag.tma.load(sW[stage], W, (n * s.bn, k * s.bk))

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            # per-tensor scales, read once from device memory (no host round trip)
            scale = ag.load_scalar(ScaleA, (0,)) * ag.load_scalar(ScaleB, (0,))
            for tile in ag.range(first, total, programs):
                m, n = locate(tile)
                acc = ag.zeros((rows, s.bn), ag.f32, by_wgmma=s.zero_by_wgmma)
                for k in ag.range(k_tiles):
                    with pipe.consume() as stage:
                        ag.wgmma(sA[stage].rows_of(wg * rows, rows), sW[stage], acc)
                if s.epilogue == "tma":
                    for j in range(blocks):
                        staging = sC[wg * blocks + j]
                        ag.stmatrix(staging,
                                    (acc[:, 64 * j:64 * (j + 1)] * scale).to(out_dtype))
                        ag.tma.store(C, (m * s.bm + wg * rows, n * s.bn + 64 * j), staging)
                else:
                    ag.store(C, (m * s.bm + wg * rows, n * s.bn), (acc * scale).to(out_dtype))

    name = "gemm_fp8" if out_dtype == ag.bf16 else f"gemm_fp8_{out_dtype.name}"
    return ag.kernel(gemm_fp8, name=name)
