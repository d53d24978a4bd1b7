"""The library's fp8 GEMM: C = (A * scale_a) @ (W * scale_b)^T on Hopper's fp8 tensor cores.

A is [M, K] e4m3 (K contiguous), W is [N, K] e4m3 (K contiguous: the row-major weight of
`x @ W.T`); `scale_a` and `scale_b` are one-element float32 tensors (per-tensor scales, as
`torch._scaled_mm` takes them) and C is [M, N] bf16 / f16 / f32. PTX lets only 16-bit wgmma
operands be transposed, so both operands are K-major here (PTX ISA wgmma.mma_async, "Matrix
Descriptor"); there is no MN-major variant.

Built from the same warp-specialized skeleton as `argus.kernels.gemm`
(argus/kernels/warp_specialized.py): one producer warpgroup streams A and W tiles through a
STAGES-deep TMA ring of 128B-swizzled shared memory; each of `consumers` warpgroups multiplies
a 64-row slice with `wgmma.m64nNk32.f32.e4m3.e4m3`, BK = 128 e4m3 = one 128-byte swizzle row,
so a stage is four k32 instructions. Accumulation is fp32 over all of K
(per-tensor scales need no promotion); the epilogue multiplies the accumulator by
scale_a * scale_b, read from device memory once per consumer (no host sync), and converts to
the output type. Invariant: every element of C is written once, from fp32 accumulators of all
K, by the consumer that owns its rows.
"""

import functools
from dataclasses import dataclass

import argus as ag
from argus.dtypes import DType
from argus.kernels.warp_specialized import (OperandRing, Staging, TileScheduler,
                                            WarpSpecializedSchedule, store_tile,
                                            store_tile_staged)

BK_BYTES = 128  # one 128-byte swizzle row of e4m3: the K depth of a stage


@dataclass(frozen=True)
class Fp8GemmSchedule(WarpSpecializedSchedule):
    """What the fp8 GEMM lets a tuner choose: the skeleton's fields (argus/kernels/
    warp_specialized.py) with bk in e4m3 elements (= bytes), one 128-byte row."""

    bk: int = BK_BYTES

    def _problems(self) -> list[str]:
        problems = super()._problems()
        if self.pingpong:
            problems.append("pingpong is built for the bf16/fp16 GEMM only (argus/kernels/"
                            "gemm.py); the fp8 kernel runs cooperative consumers")
        if self.bk != BK_BYTES:
            problems.append(f"bk={self.bk}: a stage is one 128-byte swizzle row of e4m3, "
                            f"bk=128")
        if self.bn % 64 and self.epilogue == "tma":
            problems.append(f"the TMA-store epilogue stores 64-column blocks; bn={self.bn}")
        if self.cluster_m == 2 and (self.bn // 2) % 8:
            problems.append(f"cluster_m=2 multicasts half of W's {self.bn} rows per CTA: bn "
                            f"must be a multiple of 16")
        return problems

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
        sched = TileScheduler.launch(M, N, s.bm, s.bn, cluster=s.cluster_m,
                                     persistent=s.persistent, num_sms=s.num_sms,
                                     group_m=s.group_m)
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, ag.e4m3, s.consumers)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        if s.epilogue == "tma":  # one 128B-swizzled 64 x 64 staging block per 64 columns
            staging = Staging.alloc(s.consumers, rows, s.bn, out_dtype)

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for unit in sched.units():
                ring.load(k_steps, A, W, unit, rank=sched.rank, cluster=s.cluster_m)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            # per-tensor scales, read once from device memory (no host round trip)
            scale = ag.load_scalar(ScaleA, (0,)) * ag.load_scalar(ScaleB, (0,))

            def finish(tile):
                return (tile * scale).to(out_dtype)

            for unit in sched.units():
                acc = ring.mma(k_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                if s.epilogue == "tma":
                    # each block stored as soon as it is staged (the order measured on the
                    # GPU; the bf16 GEMM's whole-round runs are untried here)
                    store_tile_staged(C, unit, wg, acc, staging, bm=s.bm, bn=s.bn, rows=rows,
                                      finish=finish, run=1)
                else:
                    store_tile(C, unit, wg, acc, bm=s.bm, bn=s.bn, rows=rows, finish=finish)

    name = "gemm_fp8" if out_dtype == ag.bf16 else f"gemm_fp8_{out_dtype.name}"
    return ag.kernel(gemm_fp8, name=name)
