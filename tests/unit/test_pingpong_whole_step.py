"""The 128-row ping-pong GEMM's whole K steps (ir.ops.Consume.whole_step: wgmma.wait_group 2
at each step's end, both m64 groups left in flight) build with NVRTC without spills and
without ptxas serializing the wgmma or injecting a wait of its own, and compute the product
in the interpreter (which runs the sync ops as no-ops: it checks the values, the verifier
the order: tests/verify/test_pingpong_whole_step.py)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.runtime import nvrtc_available


def _step_waits(kernel) -> list[int]:
    return [x.pending for op in kernel.walk() if isinstance(op, O.Consume) and op.whole_step
            for x in op.body.ops if isinstance(x, O.WgmmaWait)]


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("schedule", [
    GemmSchedule(bm=128, bn=128, stages=6, pingpong=True),
    GemmSchedule(bm=128, bn=128, stages=6, pingpong=True, epilogue="tma", store_cols=64),
], ids=["direct", "tma-store"])
def test_nvrtc_builds_whole_steps_without_spills_or_serialization(schedule):
    from argus.runtime.compile import compile_cuda

    kernel = lower_only(gemm_kernel(), s=schedule)
    assert _step_waits(kernel) == [2]
    source = codegen.render(kernel)
    assert "ag::wgmma_wait<2>();" in source.text
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    # C7514: ptxas serialized the wgmma (an accumulator touched while in flight); C7517: it
    # injected a wait of its own (the wait_group 2 would then not be what runs)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log


def test_whole_steps_compute_the_product_in_the_interpreter():
    torch = pytest.importorskip("torch")
    # ragged M, N and K; 4 units on 2 CTAs, so both warpgroups take turns and skip steps
    m, n, k = 200, 96, 320
    s = GemmSchedule(bm=128, bn=64, stages=3, pingpong=True, num_sms=2)
    assert _step_waits(lower_only(gemm_kernel(), s=s)) == [2]
    g = torch.Generator().manual_seed(7)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    gemm_kernel().interpret(a, w, c, s=s)
    exact = a.double() @ w.double().T
    assert not torch.isnan(c).any()
    assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3
