"""k-once over several wgmma sites: a pipeline stage that holds k_atoms K-slices issues one
wgmma per slice into the same accumulator, so "every k multiplied exactly once" is a property
of the union of those sites (argus/verify/check_wgmma.py `_siblings`). The library GEMM with
k_atoms > 1 proves it; a kernel whose slices overlap or leave gaps is refused with a witness."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule, gemm_kernel


def _errors(kernel):
    return [d for d in verify.check(kernel) if d.severity == "error"]


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("schedule", [
    GemmSchedule(bm=64, bn=64, consumers=1, stages=4, k_atoms=2),
    GemmSchedule(bm=64, bn=128, consumers=1, stages=2, k_atoms=4),
    GemmSchedule(bm=128, bn=128, stages=2, k_atoms=2, cluster_m=2)])
def test_gemm_with_k_atoms_verifies(layout, schedule):
    assert _errors(lower_only(gemm_kernel(b_layout=layout), s=schedule)) == []


def _sliced_gemm(slice_k):
    """A 64x64 GEMM whose stages hold two 64-deep K slices; `slice_k(k, atom)` is the K
    coordinate the producer loads into slice `atom` of step `k`."""
    @ag.kernel
    def sliced(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
               C: ag.Tensor["M", "N", ag.f32]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        sA = ag.smem((2, 128, 64), ag.bf16, swizzle=128)
        sB = ag.smem((2, 128, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2)
        steps = ag.cdiv(A.shape[1], 128)
        with ag.role("producer", warpgroups=1):
            for k in ag.range(steps):
                with pipe.produce() as st:
                    for atom in range(2):
                        ag.tma.load(sA[st].rows_of(64 * atom, 64), A, (pid * 64, slice_k(k, atom)))
                        ag.tma.load(sB[st].rows_of(64 * atom, 64), B, (0, slice_k(k, atom)))
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            for k in ag.range(steps):
                with pipe.consume() as st:
                    for atom in range(2):
                        ag.wgmma(sA[st].rows_of(64 * atom, 64), sB[st].rows_of(64 * atom, 64),
                                 acc)
            ag.store(C, (pid * 64, 0), acc)
    return lower_only(sliced)


def test_disjoint_slices_prove_k_once():
    kernel = _sliced_gemm(lambda k, atom: (2 * k + atom) * 64)
    assert [e for e in _errors(kernel) if e.code == "wgmma.k-once"] == []


def test_overlapping_slices_are_multiplied_twice():
    errors = _errors(_sliced_gemm(lambda k, atom: k * 128))   # both slices load the same k
    once = [e for e in errors if e.code == "wgmma.k-once"]
    assert once, errors
    assert any("multiplied twice" in e.message for e in once)
    assert any({"first", "second", "k"} <= set(e.counterexample) for e in once)


def test_slices_with_gaps_leave_k_unmultiplied():
    errors = _errors(_sliced_gemm(lambda k, atom: (4 * k + atom) * 64))  # skips half of K
    assert any(e.code == "wgmma.k-once" for e in errors), errors


def _fused_gemm(steps_div, guard_last=False):
    """acc = A @ B^T + X @ Y^T over the same K, one accumulator, two wgmma sites per step."""
    @ag.kernel
    def fused(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
              X: ag.Tensor["M", "K", ag.bf16], Y: ag.Tensor["N", "K", ag.bf16],
              C: ag.Tensor["M", "N", ag.f32]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        bufs = [ag.smem((2, 64, 64), ag.bf16, swizzle=128) for _ in range(4)]
        pipe = ag.pipeline(2)
        steps = ag.cdiv(A.shape[1], steps_div)
        with ag.role("producer", warpgroups=1):
            for k in ag.range(steps):
                with pipe.produce() as st:
                    for buf, t, row in zip(bufs, (A, B, X, Y), (pid * 64, 0, pid * 64, 0)):
                        ag.tma.load(buf[st], t, (row, k * 64))
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            for k in ag.range(steps):
                with pipe.consume() as st:
                    ag.wgmma(bufs[0][st], bufs[1][st], acc)
                    if guard_last:
                        with ag.when(k + 1 < steps):   # skips the last K tile of X @ Y^T
                            ag.wgmma(bufs[2][st], bufs[3][st], acc)
                    else:
                        ag.wgmma(bufs[2][st], bufs[3][st], acc)
            ag.store(C, (pid * 64, 0), acc)
    return lower_only(fused)


def test_two_products_over_the_same_k_are_separate_reductions():
    """Sites reading different tensors are not slices of one K: each covers K on its own."""
    assert [e for e in _errors(_fused_gemm(64)) if e.code == "wgmma.k-once"] == []
    assert any(e.code == "wgmma.k-once" for e in _errors(_fused_gemm(128)))  # half of K


def test_a_wgmma_skipped_by_a_guard_does_not_prove_k_once():
    errors = [e for e in _errors(_fused_gemm(64, guard_last=True)) if e.code == "wgmma.k-once"]
    assert any("skipped" in e.message and "iteration" in e.counterexample for e in errors), errors
