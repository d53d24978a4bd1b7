"""The second half of a split-K GEMM: C = sum over s of P[s], in fp32, then one rounding.

A split-K matmul (`GemmSchedule.split_k`) runs the batched GEMM kernel over `splits` disjoint
K slices, writing each slice's fp32 partial product into P[s] (the verifier proves, per slice,
that every output element sums its slice's k exactly once). This kernel adds the partials in a
fixed order (s = 0, 1, ...), so the result is deterministic and rounded to the output dtype
once, as in an unsplit GEMM.

Each CTA of 256 threads owns a ROWS x BN tile of C; the partials of one tile are read with one
load per slice. The pass moves splits x M x N x 4 bytes, small next to the weights of the skinny
GEMMs split-K is for.
"""

import functools

import argus as ag
from argus.dtypes import DType

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
