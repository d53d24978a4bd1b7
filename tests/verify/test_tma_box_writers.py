"""A TMA box with several non-unit outer dims (ag.tma.load(box=...)) followed by another copy
into the same buffer in the same produce step. The model's unravelling of the first box once
reused the name of its peer-rank loop variable, so every later writer of the buffer was
filtered out as a multicast copy: a correct kernel whose A tile is two (8, 8, 64) boxes was
refused (wgmma.defined: 'A operand holds nothing'), and a wrong second box was seen only
through that false alarm. Now both boxes are modelled: the correct kernel verifies, a second
box at the first one's rows fails store.coords, and so does a first box one row block off."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify

BN, BK, STAGES = 128, 64, 2


def _two_boxes(first: int, second: int):
    @ag.kernel(name=f"two_boxes_{first}_{second}")
    def two_boxes(A: ag.Tensor["MB", "E", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                  C: ag.Tensor["M", "N", ag.bf16]):
        MB, E, K = A.shape
        N = B.shape[0]
        ag.tag_assume(lambda: ag.sym(E) == 8)
        ag.tag_assume(lambda: ag.sym(C.shape[0]) == ag.sym(MB) * 8)
        # A's rows come in blocks of 8: row mb * 8 + e of the flattened [M, K]
        ag.tag_tensor(A, row=lambda mb, e, k: mb * 8 + e)
        ag.tag_tensor(C, row=lambda m, n: m)
        pid_m, pid_n = ag.grid(ag.cdiv(MB, 16), ag.cdiv(N, BN))
        sA = ag.smem((STAGES, 128, BK), ag.bf16, swizzle=128)
        sB = ag.smem((STAGES, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(STAGES, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st].rows_of(0, 64), A, (pid_m * 16 + first, 0, k * BK),
                                box=(8, 8, BK))
                    ag.tma.load(sA[st].rows_of(64, 64), A, (pid_m * 16 + second, 0, k * BK),
                                box=(8, 8, BK))
                    ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * 128 + wg * 64, pid_n * BN), acc.to(ag.bf16))
    return two_boxes


def test_two_multidim_boxes_into_one_view_verify():
    report = verify.run(_two_boxes(0, 8).trace())
    assert not report.errors, "\n".join(str(d) for d in report.errors)


@pytest.mark.parametrize("first, second", [(0, 0), (1, 8)])
def test_a_misplaced_box_is_refused(first, second):
    report = verify.run(_two_boxes(first, second).trace())
    codes = {d.code for d in report.errors}
    assert codes == {"store.coords"}, [str(d) for d in report.errors]
