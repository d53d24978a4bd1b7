"""A small fp8 GEMM whose consumer K loop a test writes: the verifier's k-once tests seed a
wrong K loop (a partial that overwrites instead of summing) and check that wgmma.k-once sees it
(tests/unit/test_fp8_blockscaled.py, tests/moe/test_moe_fp8_layer.py).

Invariant: everything but the K loop is the skeleton's (argus/kernels/warp_specialized.py), the
same in every test, so a finding can only come from the loop the test wrote."""

import argus as ag
from argus.kernels.warp_specialized import OperandRing, TileScheduler, store_tile


def k_loop_kernel(name: str, k_loop) -> ag.KernelFunction:
    """C[M, N] (f32) = A[M, K] W[N, K]^T (e4m3) on persistent 128 x 128 tiles: a 2-stage ring of
    128-deep K blocks filled by one producer warpgroup, two consumer warpgroups; per unit the
    consumer stores `k_loop(ring, k_steps, wg)`, a [64, 128] f32 tile of warpgroup wg's rows,
    as it is."""

    def kernel(A: ag.Tensor["M", "K", ag.e4m3], W: ag.Tensor["N", "K", ag.e4m3],
               C: ag.Tensor["M", "N", ag.f32]):
        M, K = A.shape
        sched = TileScheduler.launch(M, W.shape[0], 128, 128)
        ring = OperandRing.alloc(2, 128, 128, 128, ag.e4m3, 2)
        k_steps = ring.k_steps(K)
        with ag.role("producer", warpgroups=1, regs=40):
            for unit in sched.units():
                ring.load(k_steps, A, W, unit)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for unit in sched.units():
                acc = k_loop(ring, k_steps, wg)
                store_tile(C, unit, wg, acc, bm=128, bn=128, rows=64, finish=lambda t: t)

    return ag.kernel(kernel, name=name)
