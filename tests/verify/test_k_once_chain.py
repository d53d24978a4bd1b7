"""wgmma.k-once over sites of one accumulator chain (a loop's last K step peeled behind it,
FA3-order attention's last P V): their k counts as one reduction only when the chain is the
accumulator's one value. A GEMM whose loop stops one K block short and whose peeled last
block goes into `acc2 = acc * 1.0` is clean when acc2 is stored, and refused when acc (the
partial product, without the last block) is stored."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify

BM, BN, BK, STAGES = 64, 128, 64, 4


def _peeled_gemm(stored: str):
    @ag.kernel(name=f"peeled_gemm_{stored}")
    def peeled(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
               C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((STAGES, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((STAGES, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(STAGES, consumers=1)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=1, regs=232):
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles - 1):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(0, 64), sB[st], acc)
            acc2 = acc * 1.0
            with pipe.consume() as st:
                ag.wgmma(sA[st].rows_of(0, 64), sB[st], acc2)
            ag.store(C, (pid_m * BM, pid_n * BN), (acc2 if stored == "chain_end" else acc)
                     .to(ag.bf16))
    return peeled


@pytest.mark.parametrize("stored", ["chain_end", "mid_chain"])
def test_a_peeled_k_step_counts_only_for_the_value_that_holds_it(stored):
    report = verify.run(_peeled_gemm(stored).trace())
    k_once = [d for d in report.errors if d.code == "wgmma.k-once"]
    if stored == "chain_end":
        assert not report.errors, "\n".join(str(d) for d in report.errors)
    else:
        # the loop's site alone: k_tiles - 1 blocks of K, never the last
        assert k_once and any("never multiplied" in d.message for d in k_once), \
            [str(d) for d in report.errors]


def _forked_gemm():
    """Two accumulators from one zeros tile, each multiplying half of the K blocks (the
    chain forks): only `lo` is stored, so half of K is missing from C."""
    @ag.kernel(name="forked_gemm")
    def forked(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
               C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((STAGES, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((STAGES, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(STAGES, consumers=1)
        half = ag.cdiv(K, 2 * BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(2 * half):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=1, regs=232):
            zero = ag.zeros((64, BN), ag.f32)
            lo = zero * 1.0
            for k in ag.range(half):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(0, 64), sB[st], lo)
            hi = zero * 1.0
            for k in ag.range(half):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(0, 64), sB[st], hi)
            ag.store(C, (pid_m * BM, pid_n * BN), lo.to(ag.bf16))
    return forked


def test_two_accumulators_forked_from_one_zeros_tile_are_two_reductions():
    report = verify.run(_forked_gemm().trace())
    assert any(d.code == "wgmma.k-once" for d in report.errors), \
        [str(d) for d in report.errors]
