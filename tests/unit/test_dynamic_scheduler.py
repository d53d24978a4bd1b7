"""The dynamic persistent scheduler on the dense GEMM (GemmSchedule(scheduler="dynamic"),
docs/design/dynamic_scheduler.md): each CTA's producer draws its next unit from a global
work counter (atom.inc with wrap = total) and hands it to the consumers in its ring's payload
words; each CTA runs as many units as on the static walk.

What is tested here: the interpreter's result bit-for-bit equal to the static walk's on ragged
shapes (the CTAs run one after another, so CTA 0 draws the first units: a permutation of the
static walk's assignment, each tile computed by the same ops), the counter left at zero and a
second launch on it right again; the pipeline payload words (a word per slot, written before
the full barrier is armed, read inside the consume step); the schedule's and the kernel's
checks; NVRTC building the kernel for sm_90a without spills, with the atom.inc draw by the
elected producer thread; and what the verifier proves of it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.runtime import nvrtc_available


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16()


def _operands(layout, batch, m, n, k):
    lead = (batch,) if batch > 1 else ()
    a, w = _rand(*lead, m, k, seed=m + k), _rand(*lead, n, k, seed=n)
    return a, (w if layout == "nk" else w.transpose(-1, -2).contiguous())


# ragged M, N and K; more units than CTAs (several units a CTA), fewer, a batch, B [K, N]
CASES = [
    ("nk", 1, 300, 520, 192, GemmSchedule(bm=128, bn=128, num_sms=3)),
    ("nk", 1, 200, 136, 80, GemmSchedule(bm=64, bn=64, consumers=1, stages=2, num_sms=4)),
    ("nk", 1, 130, 260, 64, GemmSchedule(bm=128, bn=256, num_sms=16)),
    ("kn", 2, 150, 192, 100, GemmSchedule(bm=128, bn=128, num_sms=3, group_m=2)),
    ("nk", 1, 260, 300, 128, GemmSchedule(bm=128, bn=128, num_sms=2, epilogue="tma")),
]


@pytest.mark.parametrize("layout,batch,m,n,k,s", CASES)
def test_dynamic_walk_equals_the_static_walk_bit_for_bit(layout, batch, m, n, k, s):
    a, b = _operands(layout, batch, m, n, k)
    lead = (batch,) if batch > 1 else ()
    static = torch.full((*lead, m, n), float("nan")).bfloat16()
    dynamic = torch.full((*lead, m, n), float("nan")).bfloat16()
    gemm_kernel(b_layout=layout, batched=batch > 1).interpret(a, b, static, s=s)
    work = torch.zeros(1, dtype=torch.int32)
    kernel = gemm_kernel(b_layout=layout, batched=batch > 1, dynamic=True)
    run = dataclasses.replace(s, scheduler="dynamic")
    kernel.interpret(a, b, dynamic, work, s=run)
    assert not torch.isnan(dynamic.float()).any(), "a tile no CTA drew"
    assert torch.equal(static, dynamic)
    assert work.tolist() == [0], "the launch's draws leave the counter at zero"
    again = torch.full_like(dynamic, float("nan"))
    kernel.interpret(a, b, again, work, s=run)    # the next launch on the same counter
    assert torch.equal(again, static) and work.tolist() == [0]


def test_a_counter_left_elsewhere_rotates_the_units_each_still_once():
    """A counter at c in [0, total) at launch: the draws are c, c+1, .. mod total, still every
    unit once (atom.inc wraps), and the launch leaves it at c again."""
    a, b = _operands("nk", 1, 300, 520, 192)
    s = GemmSchedule(bm=128, bn=128, num_sms=3)
    static = torch.zeros(300, 520).bfloat16()
    gemm_kernel().interpret(a, b, static, s=s)
    out = torch.full((300, 520), float("nan")).bfloat16()
    work = torch.tensor([5], dtype=torch.int32)
    gemm_kernel(dynamic=True).interpret(a, b, out, work,
                                        s=dataclasses.replace(s, scheduler="dynamic"))
    assert torch.equal(out, static) and work.tolist() == [5]


def test_the_payload_words_carry_a_value_per_fill():
    """ag.pipeline(payload=True): each consume step reads what the produce step that filled
    its slot put there (a 2-slot ring over 5 steps: the words are reused); the consumer marks
    Y at the word it read."""
    @ag.kernel(partial_outputs=("Y",))
    def relay(X: ag.Tensor[("R", "C", ag.bf16)], Y: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        buf = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1, payload=True)
        with ag.role("producer", warpgroups=1):
            for i in ag.range(5):
                with pipe.produce(payload=i * 7 + 1) as stage:
                    ag.tma.load(buf[stage], X, (0, 0))
        with ag.role("consumer", warpgroups=1):
            for i in ag.range(5):
                with pipe.consume() as stage:
                    word = pipe.payload(stage)
                    ag.store(Y, (word,), ag.full((1,), 1.0))

    y = torch.zeros(32)
    relay.interpret(torch.zeros(64, 64).bfloat16(), y)
    assert y.nonzero().flatten().tolist() == [1, 8, 15, 22, 29]


def test_the_payload_is_read_only_inside_a_consume_step():
    @ag.kernel
    def bad(Y: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        pipe = ag.pipeline(2, consumers=1, payload=True)
        with ag.role("producer", warpgroups=1):
            with pipe.produce(payload=3):
                pass
        with ag.role("consumer", warpgroups=1):
            with pipe.consume() as stage:
                pass
            pipe.payload(stage)

    with pytest.raises(TraceError, match="outside a consume step"):
        bad.trace()


def test_a_payload_needs_a_payload_pipeline():
    @ag.kernel
    def bad(Y: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1):
            with pipe.produce(payload=3):
                pass

    with pytest.raises(TraceError, match="without payload words"):
        bad.trace()


def test_the_schedule_and_the_kernel_check_the_scheduler():
    with pytest.raises(ValueError, match="scheduler='fifo'"):
        GemmSchedule(scheduler="fifo")
    for bad in (dict(persistent=False), dict(cluster_m=2), dict(tail_splits=2),
                dict(pingpong=True, bm=128, bn=128)):
        with pytest.raises(ValueError, match="scheduler='dynamic'"):
            GemmSchedule(scheduler="dynamic", **bad)
    with pytest.raises(TraceError, match="dynamic=True"):
        lower_only(gemm_kernel(), s=GemmSchedule(scheduler="dynamic"))
    with pytest.raises(TraceError, match="dynamic=False"):
        lower_only(gemm_kernel(dynamic=True), s=GemmSchedule())
    assert GemmSchedule().scheduler == "static"


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("s", [GemmSchedule(scheduler="dynamic"),
                               GemmSchedule(scheduler="dynamic", epilogue="tma", bn=192),
                               GemmSchedule(scheduler="dynamic", bm=128, bn=128, stages=6)])
def test_dynamic_gemm_compiles_for_sm90a_without_spills(s):
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(gemm_kernel(dynamic=True), s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert binary.arch == "sm_90a" and not res.spills, res.summary()
    assert binary.ptx.count("atom.acq_rel.gpu.global.inc.u32") == 1, "one draw a unit"
    # the draw is the elected producer thread's: no group barrier around it, and the word is
    # written before the full barrier is armed
    text = source.text
    assert text.index("pay") < text.index("mbar_arrive_expect_tx")
    produce = text[text.index("role producer"):text.index("role consumer")]
    assert "named_barrier_sync" not in produce
    assert produce.index("] = v") < produce.index("mbar_arrive_expect_tx")


def test_the_static_kernels_render_as_before():
    """No payload words, no draw: the default kernel's CUDA has neither."""
    from argus import codegen

    text = codegen.render(lower_only(gemm_kernel(), s=GemmSchedule())).text
    assert "pay" not in text and "atom_inc" not in text
