"""The TMA-store epilogue protocol in generated CUDA: one proxy fence per run of stores, no
read-wait between a store and the next one, the wait deferred to the group's next stmatrix
(and a full wait before the role ends); a kernel whose stored buffer other code writes keeps
the wait right after each store."""

from __future__ import annotations

import re

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule, gemm_kernel


def _consumer(text: str) -> str:
    return text[text.index("// role consumer"):]


def test_gemm_epilogue_defers_the_read_wait():
    src = codegen.render(lower_only(gemm_kernel(), s=GemmSchedule(epilogue="tma", stages=3)))
    body = _consumer(src.text)
    issues = [m.start() for m in re.finditer(r"ag::tma_store_2d\(", body)]
    waits = [m.start() for m in re.finditer(r"tma_store_wait_read<0>", body)]
    stmatrix = [m.start() for m in re.finditer(r"stmatrix_x4_addr", body)]
    assert len(issues) == 4 and len(waits) == 1            # one wait per tile, four stores
    assert waits[0] < min(stmatrix)                        # ... before the tile's first stmatrix
    assert body.count("fence_view_async_shared") == 1      # one fence for the run of stores
    assert all(s < min(issues) for s in stmatrix)          # every block staged before issuing
    assert "ag::tma_store_wait<0>();  // bulk stores done before exit" in body


def test_a_buffer_written_by_tma_keeps_the_synchronous_wait():
    @ag.kernel
    def bounce(A: ag.Tensor["M", "K", ag.bf16], C: ag.Tensor["M", "K", ag.bf16]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        buf = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(1)
        with ag.role("producer", warpgroups=1):
            with pipe.produce() as st:
                ag.tma.load(buf[st], A, (pid * 64, 0))
        with ag.role("consumer", warpgroups=1):
            with pipe.consume() as st:
                ag.tma.store(C, (pid * 64, 0), buf[st])

    body = _consumer(codegen.render(lower_only(bounce)).text)
    store = body.index("ag::tma_store_2d(")
    assert "tma_store_wait_read<0>" in body[store:store + 200]


def test_the_wait_survives_a_loop_that_may_not_run():
    """A loop whose body writes smem but stores nothing may run zero times: the store issued
    before it is still pending after it (review finding)."""
    @ag.kernel
    def zero_trip(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                  C: ag.Tensor["M", "N", ag.bf16], D: ag.Tensor["M", "N", ag.bf16]):
        (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sB = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sC = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2)
        steps = ag.cdiv(A.shape[1], 64)
        with ag.role("producer", warpgroups=1):
            for k in ag.range(steps):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid * 64, k * 64))
                    ag.tma.load(sB[st], B, (0, k * 64))
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            for k in ag.range(steps):
                with pipe.consume() as st:
                    ag.wgmma(sA[st], sB[st], acc)
            ag.stmatrix(sC[0], acc.to(ag.bf16))
            ag.tma.store(C, (pid * 64, 0), sC[0])
            for i in ag.range(A.shape[0] - 64):        # zero trips when M <= 64
                ag.stmatrix(sC[1], acc.to(ag.bf16))
            ag.stmatrix(sC[0], acc.to(ag.bf16))
            ag.tma.store(D, (pid * 64, 0), sC[0])

    body = _consumer(codegen.render(lower_only(zero_trip)).text)
    loop = body.index("for (int v", body.index("ag::tma_store_2d("))
    after_loop = body[body.index("\n        }", loop):]
    assert "tma_store_wait_read<0>" in after_loop[:after_loop.index("stmatrix_x4_addr")]


def test_stmatrix_and_tma_store_need_the_whole_warpgroup():
    from argus.errors import TraceError

    @ag.kernel
    def divergent(C: ag.Tensor["M", "N", ag.bf16]):
        (pid,) = ag.grid(1)
        sC = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            with ag.when(ag.thread_index() < 32):
                ag.stmatrix(sC[0], acc.to(ag.bf16))

    import pytest
    with pytest.raises(TraceError, match="stmatrix is guarded"):
        divergent.trace()


def test_narrow_tma_store_blocks_match_float64_in_the_interpreter():
    """Tiles 224 or 176 wide store through 32- or 16-column staging blocks (64- / 32-byte
    swizzle): the interpreter result is right, the blocks and swizzles are what codegen emits,
    and widths that are not a multiple of 16 are refused."""
    import pytest
    import torch

    for bn, width, (m, n, k) in ((224, 32, (130, 500, 256)), (176, 16, (300, 400, 192))):
        s = GemmSchedule(bn=bn, stages=3, epilogue="tma", cluster_m=2)
        g = torch.Generator().manual_seed(bn)
        a = torch.randn(m, k, generator=g).bfloat16()
        w = torch.randn(n, k, generator=g).bfloat16()
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        gemm_kernel().interpret(a, w, c, s=s)
        ref = a.double() @ w.double().T
        assert not torch.isnan(c).any()
        assert ((c.double() - ref).norm() / ref.norm()).item() < 4e-3
        text = codegen.render(lower_only(gemm_kernel(), s=s)).text
        assert text.count("ag::tma_store_2d(") == bn // width
        assert f"ag::swizzle_smem_addr(stm_base + 0, {2 * width})" in text
    with pytest.raises(ValueError, match="blocks of 64, 32 or 16"):
        GemmSchedule(bn=200, epilogue="tma")


def test_staging_in_rounds_waits_between_rounds_and_matches_float64():
    """store_cols smaller than the tile stages it in rounds: each round after the first waits
    for the previous round's bulk stores to have read the buffer, the result is right in the
    interpreter (ragged edges included), and the buffer is the round's size."""
    import pytest
    import torch

    for bn, cols, zero, (m, n, k) in ((176, 112, False, (300, 400, 192)),
                                      (256, 128, False, (200, 300, 128)),
                                      (192, 64, True, (130, 250, 128))):   # with scale-d = 0
        s = GemmSchedule(bn=bn, stages=3, epilogue="tma", cluster_m=2, store_cols=cols,
                         zero_by_wgmma=zero)
        g = torch.Generator().manual_seed(bn + cols)
        a = torch.randn(m, k, generator=g).bfloat16()
        w = torch.randn(n, k, generator=g).bfloat16()
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        gemm_kernel().interpret(a, w, c, s=s)
        ref = a.double() @ w.double().T
        assert not torch.isnan(c).any(), (bn, cols)
        assert ((c.double() - ref).norm() / ref.norm()).item() < 4e-3, (bn, cols)

        body = _consumer(codegen.render(lower_only(gemm_kernel(), s=s)).text)
        width = next(w for w in (64, 32, 16) if bn % w == 0)
        rounds = -(-bn // cols)
        issues = [x.start() for x in re.finditer(r"ag::tma_store_2d\(", body)]
        waits = [(x.start(), int(x.group(1)))
                 for x in re.finditer(r"tma_store_wait_read<(\d+)>", body)]
        assert len(issues) == bn // width
        assert len(waits) == rounds               # one before each round's first stmatrix
        staged = cols // width
        for r, (later, pending) in enumerate(waits[1:], 1):   # ... the later ones after
            assert any(i < later for i in issues)             # earlier stores, leaving in
            prev = min(staged, bn // width - (r - 1) * staged)  # flight only the previous
            cur = min(staged, bn // width - r * staged)         # round's stores of slots
            assert pending == max(0, prev - cur), (bn, cols, r, pending)  # this one skips
    full = GemmSchedule(bn=176, epilogue="tma")
    staged = GemmSchedule(bn=176, epilogue="tma", store_cols=112)
    smem = {x: codegen.render(lower_only(gemm_kernel(), s=x)).dynamic_smem
            for x in (full, staged)}
    assert smem[full] - smem[staged] == 2 * 64 * (176 - 112) * 2   # two consumers' staging
    with pytest.raises(ValueError, match="needs epilogue='tma'"):
        GemmSchedule(bn=176, store_cols=112)
    with pytest.raises(ValueError, match="multiple of the 16-column store block"):
        GemmSchedule(bn=176, epilogue="tma", store_cols=100)
    with pytest.raises(ValueError, match="multiple of the 64-column store block"):
        GemmSchedule(bn=256, epilogue="tma", store_cols=512)
