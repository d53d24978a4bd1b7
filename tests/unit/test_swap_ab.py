"""Swap-AB (GemmSchedule.swap_ab) and the transposed accumulator store it rests on: the
interpreter matches float64, the verifier proves the library's swapped schedules and catches a
transposed store placed wrongly, codegen writes C[r0 + col][c0 + row], and bad requests are
refused with a reason."""

from __future__ import annotations

import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.ops.schedules import Problem, candidates, heuristic


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16()


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("m,n,k,batch,schedule", [
    (13, 200, 384, 0, GemmSchedule(bm=64, bn=16, consumers=1, stages=4, swap_ab=True)),
    # two consumers, a 2x1 cluster multicasting the tokens, ragged everything
    (40, 300, 200, 0, GemmSchedule(bm=128, bn=32, consumers=2, stages=3, swap_ab=True,
                                   cluster_m=2)),
    (5, 130, 256, 3, GemmSchedule(bm=64, bn=16, consumers=1, stages=2, k_atoms=2,
                                  swap_ab=True)),
])
def test_swapped_gemm_matches_float64_in_the_interpreter(layout, m, n, k, batch, schedule):
    """x @ W.T (W [N, K], the weights K-major) and x @ W (W [K, N], read MN-major by wgmma's
    transposed-A mode)."""
    lead = (batch,) if batch else ()
    a, w = _rand(*lead, m, k, seed=m), _rand(*lead, n, k, seed=n)
    b = w if layout == "nk" else w.transpose(-1, -2).contiguous()
    c = torch.full((*lead, m, n), float("nan"), dtype=torch.bfloat16)
    gemm_kernel(ag.bf16, ag.bf16, layout, bool(batch)).interpret(a, b, c, s=schedule)
    exact = a.double() @ w.double().transpose(-1, -2)
    assert not torch.isnan(c).any()
    assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_library_swap_schedules_verify_clean(layout):
    p = Problem(16, 8192, 8192, 1, "bf16", "bf16", layout, True)
    swapped = [s for s in candidates(p) if s.swap_ab and s.split_k == 1]
    assert {s.bn for s in swapped} == {16}
    report = verify.run(lower_only(gemm_kernel(ag.bf16, ag.bf16, layout), s=swapped[0]))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"store.coords", "wgmma.k-once"} <= proven, proven
    if layout == "kn":   # the MN-major A operand's descriptor against what TMA wrote
        assert "wgmma.smem-layout" in proven, proven


def _transposed_store_kernel(swap_offsets: bool):
    """A warp-specialized wgmma GEMM whose 64 x 64 tiles are stored as C^T (C is [N, M]);
    with swap_offsets the store's offsets are exchanged, so elements land on the wrong
    coordinates."""
    @ag.kernel(name="gemm_ct")
    def gemm_ct(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                C: ag.Tensor["N", "M", ag.f32]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, 64), ag.cdiv(N, 64))
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sB = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1)
        k_tiles = ag.cdiv(K, 64)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * 64, k * 64))
                    ag.tma.load(sB[st], B, (pid_n * 64, k * 64))
        with ag.role("consumer", warpgroups=1, regs=232):
            acc = ag.zeros((64, 64), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sA[st], sB[st], acc)
            # acc[i, j] is C^T's (m, n) = (pid_m*64 + i, pid_n*64 + j): it goes to C[n, m]
            offsets = (pid_m * 64, pid_n * 64) if swap_offsets else (pid_n * 64, pid_m * 64)
            ag.store(C, offsets, acc, transposed=True)
    return gemm_ct


def test_the_verifier_checks_where_a_transposed_store_lands():
    good = verify.run(lower_only(_transposed_store_kernel(False)))
    assert not [d for d in good.errors if d.code == "store.coords"], good.errors
    bad = verify.run(lower_only(_transposed_store_kernel(True)))
    assert any(d.code == "store.coords" for d in bad.errors)


def test_interpreter_and_codegen_of_a_transposed_store():
    kern = _transposed_store_kernel(False)
    a, b = _rand(70, 128, seed=1), _rand(100, 128, seed=2)
    c = torch.full((100, 70), float("nan"))
    kern.interpret(a, b, c)
    assert torch.allclose(c.double(), (a.double() @ b.double().T).T, rtol=1e-5, atol=1e-4)
    text = codegen.render(lower_only(kern)).text
    # accumulator (acc_row, acc_col) goes to C[r0 + acc_col][c0 + acc_row]
    stores = [line for line in text.splitlines() if "base[(long long)(" in line]
    assert len(stores) == 32                       # 64 x 64 f32 tile: 32 registers a thread
    for line in stores:
        index = line.split("base[(long long)", 1)[1]
        row, col = index.split("* C_s0 + ", 1)
        assert "acc_col" in row and "acc_row" not in row, line
        assert "acc_row" in col and "acc_col" not in col, line
    # the flag survives the IR's text form
    ir = lower_only(kern)
    assert "transposed" in print_kernel(ir)
    assert print_kernel(parse_kernel(print_kernel(ir))) == print_kernel(ir)


def test_bad_swap_requests_are_refused():
    with pytest.raises(ValueError, match="swap_ab"):
        GemmSchedule(swap_ab=True, epilogue="tma")
    with pytest.raises(TraceError, match="2-d tile"):
        @ag.kernel(threads=128)
        def k(X: ag.Tensor["M", ag.f32]):
            ag.grid(1)
            ag.store(X, (0,), ag.load(X, (0,), (128,)), transposed=True)
        k.trace()


def test_codegen_renders_a_transposed_store_of_a_loaded_tile():
    """Any register tile stores transposed (issue 17; tests/unit/test_transposed_store.py):
    V x V blocks a thread, loaded as chunks of its rows, stored as chunks of the destination's
    rows (a [4, 128] tile over 128 threads: 2 x 2 blocks, 8-byte accesses; 4 x 4 blocks would
    be 32, leaving threads without one)."""
    @ag.kernel(threads=128)
    def k(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["N", "M", ag.f32]):
        ag.grid(1)
        ag.store(Y, (0, 0), ag.load(X, (0, 0), (4, 128)), transposed=True)
    text = codegen.render(lower_only(k)).text
    assert "ag::ld_global_f32x2(" in text and "ag::st_global_f32x2(" in text, text


def test_mn_major_a_operand_requests_are_checked():
    """trans_a needs a [K][W] atom per W rows and a K-major B; fp8 (W = 128 > M) never fits."""
    def kernel(a_rows, trans_b=False, dtype=ag.bf16):
        @ag.kernel(threads=128)
        def k(X: ag.Tensor["M", "N", ag.f32]):
            ag.grid(1)
            cols = 128 // dtype.bytes           # one 128-byte swizzle span
            sa = ag.smem((a_rows, cols), dtype, swizzle=128)
            sb = ag.smem((64 if trans_b else 16, cols), dtype, swizzle=128)
            ag.wgmma(sa, sb, ag.zeros((64, 64 if trans_b else 16), ag.f32), trans_b=trans_b,
                     trans_a=True)
        return k
    kernel(64).trace()                               # one [64][64] atom: K = 64
    with pytest.raises(TraceError, match="MN-major wgmma A"):
        kernel(32).trace()
    with pytest.raises(TraceError, match="trans_b=True"):
        kernel(64, trans_b=True).trace()
    with pytest.raises(TraceError, match="MN-major wgmma A"):   # a 128-element span > M
        kernel(64, dtype=ag.e4m3).trace()


def test_mn_major_b_operand_requests_are_checked():
    """trans_b needs the [K, N] tile as N/W atoms of [K][W] stacked along the rows (W = one
    swizzle span), for A in shared memory and A in registers alike, each form with its fix."""
    def kernel(b_rows, swizzle=128, register_a=False):
        @ag.kernel(threads=128)
        def k(X: ag.Tensor["M", "N", ag.f32]):
            ag.grid(1)
            sb = ag.smem((b_rows, 64), ag.bf16, swizzle=swizzle)
            if register_a:
                with ag.role("consumer", warpgroups=1):
                    a = ag.zeros((64, 16)).to(ag.bf16)
                    ag.wgmma(a, sb, ag.zeros((64, 64), ag.f32), trans_b=True)
            else:
                sa = ag.smem((64, 16), ag.bf16)
                ag.wgmma(sa, sb, ag.zeros((64, 64), ag.f32), trans_b=True)
        return k
    for register_a, fix in ((False, "box per 64 columns"), (True, "N/64 boxes of")):
        kernel(16, register_a=register_a).trace()        # one [16][64] atom: N = 64, K = 16
        for rows, swizzle in ((32, 128), (16, 0)):       # a second atom K does not fill; no span
            with pytest.raises(TraceError, match="MN-major wgmma B") as err:
                kernel(rows, swizzle, register_a).trace()
            assert fix in str(err.value), (register_a, str(err.value))


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_untuned_skinny_problems_start_swapped(layout):
    """Without a tuning entry, M <= 32 gets the swap-AB schedule that won on the H200, with the
    smallest token tile that holds M; M = 64 keeps the unswapped weight-streaming tiles."""
    for m, tokens in ((1, 16), (16, 16), (17, 32), (32, 32)):
        p = Problem(m, 8192, 8192, 1, "bf16", "bf16", layout, True)
        h = heuristic(p)
        assert h.swap_ab and h.bn == tokens and h.k_atoms == 2 and h in candidates(p)
    assert not heuristic(Problem(64, 8192, 8192, 1, "bf16", "bf16", layout, True)).swap_ab
