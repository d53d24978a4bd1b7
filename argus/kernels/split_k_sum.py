"""The second half of a split-K GEMM: C = sum over s of P[s], in fp32, then one rounding.

A split-K matmul (`GemmSchedule.split_k`) runs the batched GEMM kernel over `splits` disjoint
K slices, writing each slice's fp32 partial product into P[s] (the verifier proves, per slice,
that every output element sums its slice's k exactly once). This kernel adds the partials in a
fixed order (s = 0, 1, ...), so the result is deterministic and rounded to the output dtype
once, as in an unsplit GEMM.

Each CTA of 256 threads owns a ROWS x BN tile of C; the partials of one tile are read with one
load per slice. The pass moves splits x M x N x 4 bytes, small next to the weights of the skinny
GEMMs split-K is for.

`tail_sum_kernel` is the same sum for a GEMM that splits only the tiles of its last, partial
wave (`GemmSchedule.tail_splits`, argus/kernels/gemm.py): the partials are a compact workspace
P[s, q] of the tail tiles' bm x bn blocks, and tail tile q's place in C is found by planning the
GEMM's own walk (`TileScheduler.plan` / `tail_tile`, argus/kernels/warp_specialized.py), so the
two kernels agree on it by running the same code.

`scaled_split_k_sum_kernel` is split_k_sum for the fp8 GEMM's split-K (argus.ops.scaled_matmul):
the same fixed-order fp32 sum, times the per-tensor scales once, then the rounding.
"""

import functools

import argus as ag
from argus.dtypes import DType
from argus.kernels.warp_specialized import TileScheduler

MAX_SPLITS = 16


@functools.lru_cache(maxsize=None)
def split_k_sum_kernel(out_dtype: DType, splits: int) -> ag.KernelFunction:
    """The reduction for `splits` partials into a C of `out_dtype` (cached per kind)."""
    if not 2 <= splits <= MAX_SPLITS:
        raise ValueError(f"split_k_sum: splits={splits} must be in [2, {MAX_SPLITS}]")

    def split_k_sum(P: ag.Tensor[(splits, "M", "N", ag.f32)],
                    C: ag.Tensor[("M", "N", out_dtype)], ROWS: int = 2, BN: int = 512):
        pid_m, pid_n = ag.grid(ag.cdiv(C.shape[0], ROWS), ag.cdiv(C.shape[1], BN))
        row0, col0 = pid_m * ROWS, pid_n * BN
        total = ag.load(P, (0, row0, col0), (ROWS, BN))
        for s in range(1, splits):   # a fixed order: the same sum on every run
            total = total + ag.load(P, (s, row0, col0), (ROWS, BN))
        ag.store(C, (row0, col0), total.to(out_dtype))

    return ag.kernel(split_k_sum, threads=256, name=f"split_k_sum_{out_dtype.name}_{splits}")


@functools.cache
def scaled_split_k_sum_kernel(out_dtype: DType, splits: int) -> ag.KernelFunction:
    """split_k_sum for the fp8 GEMM's per-tensor scales: C = (sum over s of P[s]) * (scale_a *
    scale_b), the partials added in slice order in fp32, the scales (one-element f32 tensors,
    read on the device) applied once in fp32 after the sum, then one rounding: the product the
    unsplit kernel's epilogue computes, from the same fp32 partial sums (cached per kind)."""
    if not 2 <= splits <= MAX_SPLITS:
        raise ValueError(f"scaled_split_k_sum: splits={splits} must be in [2, {MAX_SPLITS}]")

    def scaled_split_k_sum(P: ag.Tensor[(splits, "M", "N", ag.f32)],
                           ScaleA: ag.Tensor[1, ag.f32], ScaleB: ag.Tensor[1, ag.f32],
                           C: ag.Tensor[("M", "N", out_dtype)], ROWS: int = 2, BN: int = 512):
        pid_m, pid_n = ag.grid(ag.cdiv(C.shape[0], ROWS), ag.cdiv(C.shape[1], BN))
        row0, col0 = pid_m * ROWS, pid_n * BN
        total = ag.load(P, (0, row0, col0), (ROWS, BN))
        for s in range(1, splits):   # a fixed order: the same sum on every run
            total = total + ag.load(P, (s, row0, col0), (ROWS, BN))
        scale = ag.load_scalar(ScaleA, (0,)) * ag.load_scalar(ScaleB, (0,))
        ag.store(C, (row0, col0), (total * scale).to(out_dtype))

    return ag.kernel(scaled_split_k_sum, threads=256,
                     name=f"scaled_split_k_sum_{out_dtype.name}_{splits}")


@functools.lru_cache(maxsize=None)
def tail_sum_kernel(out_dtype: DType, splits: int, batched: bool = False) -> ag.KernelFunction:
    """C's tail tiles = the sum over s of P[s, q] in fp32, then one rounding: the second half
    of a GEMM with tail splits. P is [splits, tail tiles, bm, bn] (whole tiles; rows and
    columns past C's edge are dropped by the store). The walk's geometry (bm, bn, cluster,
    group_m, num_sms) is the GEMM schedule's (cached per kind)."""
    if not 2 <= splits <= MAX_SPLITS:
        raise ValueError(f"tail_sum: splits={splits} must be in [2, {MAX_SPLITS}]")
    lead = ("Bt",) if batched else ()

    def tail_sum(P: ag.Tensor[(splits, "T", "TM", "TN", ag.f32)],
                 C: ag.Tensor[(*lead, "M", "N", out_dtype)], bm: int = 128, bn: int = 256,
                 cluster: int = 1, group_m: int = 8, num_sms: int = 132):
        walk = TileScheduler.plan(C.shape[-2], C.shape[-1], bm, bn,
                                  batch=C.shape[0] if batched else None, cluster=cluster,
                                  num_sms=num_sms, group_m=group_m, tail_splits=splits)
        # 2048 elements per CTA (8 per thread) in a block of whole tile rows and columns:
        # power-of-two sides that divide the tile, so a block never reaches the next tile
        cols = bn & -bn if bn & -bn <= 256 else 256
        rows = min(bm & -bm, max(1, 2048 // cols))
        q, rb, cb = ag.grid(walk.tail_tiles, bm // rows, bn // cols)
        unit = walk.tail_tile(q)
        row0, col0 = rb * rows, cb * cols
        total = ag.load(P, (0, q, row0, col0), (rows, cols))
        for s in range(1, splits):   # a fixed order: the same sum on every run
            total = total + ag.load(P, (s, q, row0, col0), (rows, cols))
        ag.store(C, (*unit.batch, unit.m * bm + row0, unit.n * bn + col0), total.to(out_dtype))

    name = f"tail_sum_{out_dtype.name}_{splits}" + ("_batched" if batched else "")
    return ag.kernel(tail_sum, threads=256, name=name, partial_outputs=("C",))
