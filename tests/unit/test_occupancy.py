"""The occupancy hint (ag.occupancy, issue 14): the minimum CTAs per SM is kernel data, traced
into the kernel's attributes, checked by lowering against the SM's threads, registers and
shared memory (a clear CompileError when that many CTAs cannot fit), rendered by codegen as
`__launch_bounds__(threads, n)` and nothing else (the render decides nothing), and exposed on
the decode schedule (DecodeSchedule.ctas_per_sm) with its own legality rule."""

from __future__ import annotations

import pytest

import argus as ag
from argus.kernels.attention_decode import (DecodeSchedule, decode_kernel, decode_smem_bytes,
                                            num_splits)
from argus.target.limits import entry_registers, smem_per_sm_share


@ag.kernel
def staged(X: ag.Tensor["M", 64, ag.bf16], Y: ag.Tensor["M", 64, ag.bf16], ROWS: int = 64,
           CTAS: int = 2, CONSUMER: int = 232):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], 64))
    ag.occupancy(CTAS)
    sX = ag.smem((1, ROWS, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(1)
    with ag.role("load", warpgroups=1, regs=24):
        with pipe.produce() as st:
            ag.tma.load(sX[st].rows_of(0, 64), X, (pid * 64, 0))
    with ag.role("compute", warpgroups=1, regs=CONSUMER):
        with pipe.consume() as st:
            ag.stmatrix(sX[st].rows_of(0, 64), ag.ldmatrix(sX[st].rows_of(0, 64)) * 2.0)


def test_limits_helpers():
    assert entry_registers(256) == 256 and entry_registers(256, 2) == 128
    assert entry_registers(384) == 168
    # 228 KB an SM, 1 KB reserved per CTA; one CTA: the 227 KB opt-in limit
    assert smem_per_sm_share(1) == 232448 and smem_per_sm_share(2) == 233472 // 2 - 1024


def test_hint_is_traced_as_kernel_data():
    k = staged.lower()
    assert k.attr("min_ctas_per_sm") == 2
    # the entry budget at two CTAs is 128 registers: 232 is an increase, 24 a decrease
    heads = [op for op in k.walk() if type(op).__name__ == "SetMaxNReg"]
    assert sorted((op.regs, op.inc) for op in heads) == [(24, False), (232, True)]
    assert ag.KernelFunction.trace(staged).attr("min_ctas_per_sm") == 2


def test_shared_memory_two_ctas_cannot_hold_is_refused():
    # 14 x 8 KB stages of rows: 114688 B of buffer + barriers + 1 KB slack > 115712 B a CTA
    with pytest.raises(ag.CompileError, match=r"asks for 2 CTAs per SM, but each needs "
                                              r"115728 B .* more than the 115712 B") as e:
        staged.lower(ROWS=64 * 14)
    assert "ag.occupancy" in e.value.fix
    assert staged.lower(ROWS=64 * 13).attr("smem_bytes") + 1024 <= smem_per_sm_share(2)


def test_registers_the_share_cannot_hold_are_refused():
    with pytest.raises(ag.CompileError, match="more than the 21845 of an SM shared by 3 CTAs"):
        staged.lower(CTAS=3)
    with pytest.raises(ag.CompileError, match="more than the 32768 of an SM shared by 2"):
        staged.lower(CONSUMER=240)      # 24 + 240 > 256 registers x 128 threads


@pytest.mark.parametrize("bad", [0, 9, 1.5, True])
def test_bad_hints_are_trace_errors(bad):
    @ag.kernel
    def k(X: ag.Tensor["N", ag.f32]):
        ag.grid(1)
        ag.occupancy(bad)
        ag.store(X, (0,), ag.full((128,), 1.0))
    with pytest.raises(ag.TraceError, match="int in 1..8"):
        k.trace()


def test_hint_twice_or_nested_is_a_trace_error():
    @ag.kernel
    def twice(X: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        ag.occupancy(2)
        with ag.when(pid < 1):
            ag.occupancy(2)
        ag.store(X, (0,), ag.full((128,), 1.0))
    with pytest.raises(ag.TraceError, match="top level"):
        twice.trace()


def test_codegen_renders_the_hint_and_the_default():
    @ag.kernel(threads=128)
    def plain(X: ag.Tensor["N", ag.f32], CTAS: int = 0):
        ag.grid(1)
        if CTAS:
            ag.occupancy(CTAS)
        ag.store(X, (0,), ag.full((128,), 1.0))
    from argus.codegen.cuda import render
    assert "__launch_bounds__(128, 1)" in render(plain.lower()).text
    assert "__launch_bounds__(128, 3)" in render(plain.lower(CTAS=3)).text
    assert plain.lower().attr("min_ctas_per_sm") is None


def test_decode_schedule_rule():
    two = DecodeSchedule(block_n=64, stages=2, consumer_regs=232, ctas_per_sm=2)
    assert two.problems_for(128) == []
    assert decode_smem_bytes(two, 128) <= smem_per_sm_share(2)
    three = DecodeSchedule(block_n=64, stages=3, consumer_regs=232, ctas_per_sm=2)
    assert any("2 CTAs per SM leave 115712" in p for p in three.problems_for(128))
    with pytest.raises(ValueError, match="exceed 1/2 of an SM"):
        DecodeSchedule(block_n=64, stages=2, ctas_per_sm=2)       # 24 + 240 registers
    with pytest.raises(ValueError, match="1 or 2 CTAs per SM"):
        DecodeSchedule(ctas_per_sm=3)
    # the split rule fills two CTA slots an SM: batch 1 x 8 kv heads at 8k keys, 64-key blocks
    assert num_splits(8, 128, ctas_per_sm=2) == 32 and num_splits(8, 128) == 16


def test_decode_two_ctas_compiles_without_spills():
    """NVRTC + ptxas: the split decode kernel at two CTAs an SM launches at 128 registers a
    thread (the consumer grows to 232 by setmaxnreg) and spills nothing."""
    s = DecodeSchedule(block_n=64, stages=2, consumer_regs=232, ctas_per_sm=2)
    c = ag.compile(decode_kernel(128, ag.bf16, False, True), s=s, verify=False)
    assert "__launch_bounds__(256, 2)" in c.source.text
    assert "setmaxnreg_inc<232>" in c.source.text and "setmaxnreg_dec<24>" in c.source.text
    assert c.resources.registers <= 128, c.resources.summary()
    assert c.resources.spill_stores == 0 and c.resources.spill_loads == 0, \
        c.resources.summary()
