"""The interpreter (the executable semantics) against torch in float64, for every example,
on fresh random data, at odd sizes, with outputs poisoned with NaN beforehand."""

import pytest
import torch

from argus.demo import relative_error


@pytest.mark.parametrize("shape", [(1, 1), (7, 129), (37, 1500), (130, 4097)])
def test_elementwise(examples, shape):
    ex = examples("elementwise")
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g)
    bias = torch.randn(1, shape[1], generator=g)
    y = torch.full(shape, float("nan"))
    ex.KERNEL.interpret(x, bias, y, scale=1.0)
    assert relative_error(y, ex.reference(x, bias, y)) < 1e-6


@pytest.mark.parametrize("shape", [(1, 1), (5, 1000), (33, 3000), (3, 5000)])
def test_softmax(examples, shape):
    ex = examples("softmax")
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 5
    y = torch.full(shape, float("nan"))
    ex.KERNEL.interpret(x, y, **ex.constexprs(x, y))
    assert relative_error(y, ex.reference(x, y)) < 1e-6


@pytest.mark.parametrize("shape", [(1, 8, 16), (7, 129, 72), (129, 300, 64), (300, 520, 200)])
def test_gemm(examples, shape):
    ex = examples("gemm")
    a, b, c = ex.make_inputs(shape, seed=5)
    ex.KERNEL.interpret(a, b, c, s=ex.GemmSchedule(num_sms=3))
    assert relative_error(c, ex.reference(a, b, c)) < 1e-2
    assert not torch.isnan(c.float()).any(), "every output element must be written"


def test_gemm_non_persistent_three_stages(examples):
    ex = examples("gemm")
    a, b, c = ex.make_inputs((200, 300, 320), seed=9)
    ex.KERNEL.interpret(a, b, c, s=ex.GemmSchedule(persistent=False, stages=3))
    assert relative_error(c, ex.reference(a, b, c)) < 1e-2


def test_interpreter_detects_pipeline_deadlock():
    import argus as ag
    from argus.runtime.interp import InterpError

    @ag.kernel
    def starved(A: ag.Tensor["M", "K", ag.bf16], C: ag.Tensor["M", "K", ag.bf16]):
        (pid,) = ag.grid(1)
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(1):                      # produces one tile …
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (0, 0))
        with ag.role("consumer", warpgroups=1, regs=232):
            for k in ag.range(2):                      # … but consumes two
                with pipe.consume() as st:
                    acc = ag.zeros((64, 64), ag.f32)
                    ag.wgmma(sA[st], sA[st], acc)

    a = torch.randn(64, 64).to(torch.bfloat16)
    c = torch.zeros(64, 64).to(torch.bfloat16)
    with pytest.raises(InterpError, match="deadlock"):
        starved.interpret(a, c)


@pytest.mark.parametrize("schedule", [
    dict(zero_by_wgmma=True), dict(cluster_m=2), dict(cluster_m=2, epilogue="tma", stages=3),
    dict(bm=64, bn=64, consumers=1, stages=12),
    dict(bm=64, bn=64, consumers=1, stages=3, k_atoms=4),
    dict(bm=128, bn=128, stages=3, k_atoms=2)])
def test_gemm_schedules_in_interpreter(examples, schedule):
    """Every schedule knob computes the same function (clusters run their CTAs together)."""
    from argus.compiler import lower_only

    ex = examples("gemm")
    s = ex.GemmSchedule(num_sms=4, **schedule)
    a, b, c = ex.make_inputs((300, 520, 136), seed=13)
    ex.KERNEL.interpret(a, b, c, s=s)
    assert relative_error(c, ex.reference(a, b, c)) < 1e-2
    lower_only(ex.KERNEL, s=s)  # and it lowers


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_batched_gemm_with_clusters_in_interpreter(layout):
    """Batched operands multicast B with 3-d TMA copies; the pair of CTAs shares the batch."""
    import argus as ag
    from argus.kernels.gemm import GemmSchedule, gemm_kernel

    g = torch.Generator().manual_seed(5)
    a = torch.randn(3, 300, 136, generator=g).bfloat16()
    w = (torch.randn(3, 256, 136, generator=g) if layout == "nk"
         else torch.randn(3, 136, 256, generator=g)).bfloat16()
    c = torch.full((3, 300, 256), float("nan")).bfloat16()
    s = GemmSchedule(bn=128, stages=5, epilogue="tma", cluster_m=2, num_sms=4)
    gemm_kernel(ag.bf16, ag.bf16, layout, True).interpret(a, w, c, s=s)
    ref = a.double() @ (w.double().transpose(-1, -2) if layout == "nk" else w.double())
    assert relative_error(c, ref) < 1e-2


@pytest.mark.parametrize("bh,s,sk,d,causal", [
    (2, 100, 100, 64, False), (1, 70, 130, 64, True), (1, 130, 70, 128, True),
    (1, 64, 200, 128, False), (1, 1, 1, 64, False), (1, 65, 64, 64, True)])
def test_flash_attention(examples, bh, s, sk, d, causal):
    """Online softmax with carried row max and sum, P from registers, masks from ag.arange;
    rows that see no key (causal, S > SK) are zero."""
    ex = examples("flash_attention")
    g = torch.Generator().manual_seed(s * 7 + sk)
    q, k, v = (torch.randn(bh, n, d, generator=g).bfloat16() for n in (s, sk, sk))
    o = torch.full((bh, s, d), float("nan")).bfloat16()
    ex.attention_kernel(d, causal).interpret(q, k, v, o)
    ref = ex.reference(q, k, v, o, causal=causal)
    assert not torch.isnan(o.float()).any()
    assert relative_error(o, ref) < 1e-2


@pytest.mark.parametrize("shape", [(1, 1), (9, 5000), (3, 2048), (2, 7000)])
def test_softmax_online(examples, shape):
    """Rows longer than one tile: running max and sum carried across column blocks."""
    ex = examples("softmax_online")
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(11)) * 4
    y = torch.full(shape, float("nan"))
    ex.KERNEL.interpret(x, y)
    assert relative_error(y, ex.reference(x, y)) < 1e-6
