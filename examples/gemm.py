"""bf16 GEMM, C[M, N] = A[M, K] @ B[N, K]^T with fp32 accumulation, on Hopper's tensor cores.

Warp-specialized: one producer warpgroup (40 registers) streams A and B tiles through a
STAGES-deep TMA ring into 128B-swizzled shared memory; two consumer warpgroups (232 registers)
each multiply a 64-row half of the BM x BN tile with wgmma. Stages and mbarrier parity come
from the pipeline construct; the compiler derives them.
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


@ag.kernel
def gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
         C: ag.Tensor["M", "N", ag.bf16], s: GemmSchedule = GemmSchedule()):
    M, K = A.shape
    N = B.shape[0]
    pid_m, pid_n = ag.grid(ag.cdiv(M, s.bm), ag.cdiv(N, s.bn))
    sA = ag.smem((s.stages, s.bm, s.bk), ag.bf16, swizzle=128)
    sB = ag.smem((s.stages, s.bn, s.bk), ag.bf16, swizzle=128)
    pipe = ag.pipeline(s.stages, consumers=s.consumers)
    k_tiles = ag.cdiv(K, s.bk)

    with ag.role("producer", warpgroups=1, regs=s.producer_regs):
        for k in ag.range(k_tiles):
            with pipe.produce() as stage:
                ag.tma.load(sA[stage], A, (pid_m * s.bm, k * s.bk))
                ag.tma.load(sB[stage], B, (pid_n * s.bn, k * s.bk))

    rows = s.bm // s.consumers
    with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
        acc = ag.zeros((rows, s.bn), ag.f32)
        for k in ag.range(k_tiles):
            with pipe.consume() as stage:
                ag.wgmma(sA[stage].rows_of(wg * rows, rows), sB[stage], acc)
        ag.store(C, (pid_m * s.bm + wg * rows, pid_n * s.bn), acc.to(ag.bf16))


KERNEL = gemm
OUTPUT = 2
SIZES = {"small": (300, 520, 200), "large": (4096, 4096, 4096)}


def make_inputs(size="small", seed=0, device="cpu"):
    import torch

    M, N, K = SIZES[size] if isinstance(size, str) else size
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(device=device, dtype=torch.bfloat16)
    b = torch.randn(N, K, generator=g).to(device=device, dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan")).to(device=device, dtype=torch.bfloat16)
    return a, b, c


def constexprs(a, b, c):
    return {}


def reference(a, b, c):
    return a.double() @ b.double().T


def baseline(a, b, c):
    """cuBLAS through torch: C = A @ B^T."""
    import torch

    return torch.mm(a, b.T)


def flops(a, b, c):
    return 2 * a.shape[0] * b.shape[0] * a.shape[1]
