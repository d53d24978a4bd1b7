"""A role that produces into a pipeline runs on one elected thread: the full barriers count one
arrival (with its transaction bytes) per step, so 128 producing threads would arrive 128 times
and issue every TMA copy 128 times (the H200 failure of argus.ops.moe: its producer reads the
tile -> expert map with load.scalar, which kept the role on all 128 threads; the interpreter,
which runs a role once, was right). Rendered CUDA is checked on the CPU."""

from __future__ import annotations

import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.errors import CompileError


def _role(text: str, name: str) -> str:
    start = text.index(f"// role {name}")
    nxt = text.find("// role ", start + 1)
    return text[start:nxt if nxt > 0 else len(text)]


def _assert_elected(producer: str) -> None:
    """Every arrival and TMA copy of the producer sits inside its `if (gtid == 0)` block."""
    elect = producer.index("if (gtid == 0) {  // one thread issues the async copies")
    for pattern in (r"mbar_arrive_expect_tx", r"ag::tma_load_\dd", r"__ldg\("):
        hits = [m.start() for m in re.finditer(pattern, producer)]
        assert hits and all(h > elect for h in hits), pattern


def _gather_kernel():
    @ag.kernel
    def gather_rows(A: ag.Tensor["M", "K", ag.bf16], Rows: ag.Tensor["T", 1, ag.i32],
                    B: ag.Tensor["N", "K", ag.bf16], C: ag.Tensor["T64", "N", ag.bf16]):
        (pid,) = ag.grid(Rows.shape[0])
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sB = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2)
        steps = ag.cdiv(A.shape[1], 64)
        with ag.role("producer", warpgroups=1):
            row = ag.load_scalar(Rows, (pid, 0))     # a coordinate read from memory
            for k in ag.range(steps):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (row * 64, k * 64))
                    ag.tma.load(sB[st], B, (0, k * 64))
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            for k in ag.range(steps):
                with pipe.consume() as st:
                    acc = ag.wgmma(sA[st], sB[st], acc)
            ag.store(C, (pid * 64, 0), acc.to(ag.bf16))
    return gather_rows


def test_a_producer_reading_a_scalar_is_elected():
    text = codegen.render(lower_only(_gather_kernel())).text
    _assert_elected(_role(text, "producer"))


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("schedule", ["TINY", "PREFILL_TMA_CLUSTER"])
def test_moe_grouped_gemm_producer_is_elected(gated, schedule):
    from argus.kernels import moe as MK

    kernel = MK.grouped_gemm_kernel(gated)
    text = codegen.render(lower_only(kernel, s=getattr(MK, schedule))).text
    _assert_elected(_role(text, "producer"))


def test_a_producer_doing_per_thread_work_is_refused():
    @ag.kernel
    def busy_producer(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                      C: ag.Tensor["M", "N", ag.bf16], D: ag.Tensor["M", "K", ag.bf16]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        sA = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        sB = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(1)
        with ag.role("producer", warpgroups=1):
            ag.store(D, (pid * 64, 0), ag.load(A, (pid * 64, 0), (64, 64)))
            with pipe.produce() as st:
                ag.tma.load(sA[st], A, (pid * 64, 0))
                ag.tma.load(sB[st], B, (0, 0))
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            with pipe.consume() as st:
                acc = ag.wgmma(sA[st], sB[st], acc)
            ag.store(C, (pid * 64, 0), acc.to(ag.bf16))

    with pytest.raises(CompileError, match="produces into a pipeline"):
        codegen.render(lower_only(busy_producer))


def test_a_producer_with_a_loop_carried_coordinate_is_elected():
    """A producer that walks its K coordinate as a carried scalar (`kk = kk + 64`: a scalar
    var / assign) is index math and runs elected; it was refused as doing 'assign, var'."""
    @ag.kernel
    def carried_producer(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                         C: ag.Tensor["M", "N", ag.bf16]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sB = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2)
        steps = ag.cdiv(A.shape[1], 64)
        with ag.role("producer", warpgroups=1):
            kk = pid * 0
            for _k in ag.range(steps):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid * 64, kk))
                    ag.tma.load(sB[st], B, (0, kk))
                kk = kk + 64
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            for _k in ag.range(steps):
                with pipe.consume() as st:
                    acc = ag.wgmma(sA[st], sB[st], acc)
            ag.store(C, (pid * 64, 0), acc.to(ag.bf16))

    producer = _role(codegen.render(lower_only(carried_producer)).text, "producer")
    elect = producer.index("if (gtid == 0) {  // one thread issues the async copies")
    for pattern in (r"mbar_arrive_expect_tx", r"ag::tma_load_\dd", r" = \(v\d+ \+ 64\);"):
        hits = [m.start() for m in re.finditer(pattern, producer)]
        assert hits and all(h > elect for h in hits), pattern


def test_a_pipeline_step_outside_roles_is_refused_at_render():
    """Without roles every thread of the CTA would run the produce step (128 arrivals on a full
    barrier that counts one, every TMA copy 128 times) and the consume step's state was never
    declared (an NVRTC error naming pend/acc_row): a CompileError naming the step instead."""
    @ag.kernel
    def no_roles(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                 C: ag.Tensor["M", "N", ag.bf16]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sB = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2)
        acc = ag.zeros((64, 64), ag.f32)
        for k in ag.range(ag.cdiv(A.shape[1], 64)):
            with pipe.produce() as st:
                ag.tma.load(sA[st], A, (pid * 64, k * 64))
                ag.tma.load(sB[st], B, (0, k * 64))
            with pipe.consume() as st:
                acc = ag.wgmma(sA[st], sB[st], acc)
        ag.store(C, (pid * 64, 0), acc.to(ag.bf16))

    with pytest.raises(CompileError, match=r"pipeline step \(produce\) outside a warp role"):
        codegen.render(lower_only(no_roles))
