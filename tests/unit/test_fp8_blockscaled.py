"""Block-scaled fp8 and promotion without a GPU: gemm_fp8_blockscaled_kernel and the promoting
per-tensor kernel in the numpy interpreter against a float64 reference of the dequantized
product (M, N, K multiples of 128, ragged M and N, tiles straddling 128-column weight blocks,
clusters, both epilogues, persistent wrap-around), every block-scaled candidate verifying with
zero errors, a promotion that overwrites instead of adding caught by wgmma.k-once, NVRTC
building the kernels without spills, the schedules, and the op's argument checks."""

import dataclasses

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_blockscaled_smem_kernel, gemm_fp8_kernel)
from argus.ops import fp8_schedules
from argus.ops.fp8_schedules import Fp8Problem
from argus.runtime import nvrtc_available
from tests.fp8_k_loops import k_loop_kernel

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import (blockscaled_inputs, check_close, e4m3,  # noqa: E402
                                   interpret_blockscaled, verify_clean)

@pytest.mark.parametrize("m,n,k,out,schedule", [
    (128, 128, 256, ag.f32, Fp8GemmSchedule(bn=128, stages=2, promote=True)),
    (200, 256, 384, ag.bf16, Fp8GemmSchedule(bn=128, stages=3, promote=True)),      # ragged M
    # 160-wide tiles straddle 128-column weight blocks (two scales per tile); ragged N
    (130, 300, 256, ag.f32, Fp8GemmSchedule(bn=160, stages=2, promote=True)),
    (70, 250, 384, ag.f16, Fp8GemmSchedule(bn=112, stages=3, promote=True)),
    (190, 256, 256, ag.bf16, Fp8GemmSchedule(bn=128, stages=3, promote=True, cluster_m=2,
                                             epilogue="tma")),
    (100, 128, 256, ag.f32, Fp8GemmSchedule(bm=64, bn=64, consumers=1, stages=4,
                                            promote=True, persistent=False)),
    # 8 tiles on 2 persistent CTAs: the ring and the carried accumulator wrap across tiles
    (256, 256, 384, ag.bf16, Fp8GemmSchedule(bn=64, stages=2, num_sms=2, group_m=1,
                                             promote=True)),
])
def test_blockscaled_interpreter_matches_float64(m, n, k, out, schedule):
    c = interpret_blockscaled(m, n, k, out, schedule)
    # the per-block scales matter: one per-tensor scale would be far off
    a, w, sa, sb = blockscaled_inputs(m, n, k)
    flat = (a.double() @ w.double().T) * sa.mean().item() * sb.mean().item()
    assert (c.double() - flat).abs().max() > 0.1 * flat.abs().max()


@pytest.mark.parametrize("schedule", [
    Fp8GemmSchedule(bn=128, stages=3, promote=True),
    Fp8GemmSchedule(bn=128, stages=3, promote=True, epilogue="tma", cluster_m=2),
])
def test_per_tensor_promotion_in_the_interpreter(schedule):
    m, n, k = 190, 256, 384
    a, w = e4m3((m, k), 3.0, 5), e4m3((n, k), 0.5, 6)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    gemm_fp8_kernel(ag.bf16).interpret(a, w, torch.tensor([0.37]), torch.tensor([1.9]), c,
                                       s=schedule)
    scale = float(np.float32(np.float32(0.37) * np.float32(1.9)))
    check_close(c, a.double() * scale, w.double(), ag.bf16, k)


def test_schedule_refuses_promotion_past_the_register_budget():
    with pytest.raises(ValueError, match="register budget"):
        Fp8GemmSchedule(bn=192, promote=True)
    Fp8GemmSchedule(bn=160, promote=True)


def test_blockscaled_kernel_needs_promotion():
    with pytest.raises(ag.TraceError, match="promote=True"):
        gemm_fp8_blockscaled_kernel(ag.bf16).trace(s=Fp8GemmSchedule(bn=128))


# ----------------------------------------------------------------------------- verification


BLOCK_PROBLEMS = [Fp8Problem(4096, 7168, 2048, "bf16", True, True),
                  Fp8Problem(4096, 2112, 7168, "bf16", True, True),
                  Fp8Problem(128, 7168, 2048, "f32", True, True)]


def _block_cases():
    out = {}
    for p in BLOCK_PROBLEMS:
        for s in fp8_schedules.candidates(p):
            out.setdefault((p.out_dtype, s), p)
    return [(p, s) for (_, s), p in out.items()]


BLOCK_CASES = _block_cases()
OUT = {"bf16": ag.bf16, "f16": ag.f16, "f32": ag.f32}


@pytest.mark.parametrize("problem,schedule", BLOCK_CASES,
                         ids=[f"{p.out_dtype}-{s.bm}x{s.bn}-st{s.stages}-{s.epilogue}"
                              f"-c{s.cluster_m}{'-smem' if s.smem_scales else ''}"
                              for p, s in BLOCK_CASES])
def test_blockscaled_candidates_verify_clean(problem, schedule):
    """Every candidate in the kernel the op runs it with (smem_scales: the shared-memory
    scales kernel, scaled_matmul's choice)."""
    assert schedule.promote and (schedule.bn <= 160 or schedule.n_split == 2)
    kernel = (gemm_fp8_blockscaled_smem_kernel if schedule.smem_scales else
              gemm_fp8_blockscaled_kernel)
    verify_clean(lower_only(kernel(OUT[problem.out_dtype]), s=schedule))


def test_per_tensor_promotion_verifies_clean():
    verify_clean(lower_only(gemm_fp8_kernel(ag.bf16),
                             s=Fp8GemmSchedule(bn=128, stages=6, promote=True)))


def test_verifier_catches_a_promotion_that_overwrites():
    """`acc = part * s` instead of `acc = acc + part * s` keeps only the last K block: the
    partial is no longer summed over the K loop, so k-once sees 128 of K values."""
    from argus import verify

    def variant(add: bool):
        def k_loop(ring, k_steps, wg):
            acc = ag.zeros((64, 128), ag.f32)
            for k in ag.range(k_steps):
                with ring.pipe.consume() as stage:
                    part = ag.zeros((64, 128), ag.f32, by_wgmma=True)
                    ag.wgmma(ring.a[stage].rows_of(wg * 64, 64), ring.b[stage].rows_of(0, 128),
                             part)
                    acc = (acc + part * 0.5) if add else part * 0.5
            return acc
        return k_loop_kernel(f"promo_{'add' if add else 'overwrite'}", k_loop)

    codes = {d.code for d in verify.run(lower_only(variant(False))).errors}
    assert "wgmma.k-once" in codes
    assert not verify.run(lower_only(variant(True))).errors


# ----------------------------------------------------------------------------- NVRTC


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@needs_nvrtc
@pytest.mark.parametrize("kernel,schedule", [
    ("block", Fp8GemmSchedule(bn=160, stages=5, promote=True)),
    ("block", Fp8GemmSchedule(bn=128, stages=5, promote=True, cluster_m=2, epilogue="tma")),
    ("tensor", Fp8GemmSchedule(bn=128, stages=6, promote=True)),
])
def test_nvrtc_builds_promoting_kernels_without_spills(kernel, schedule):
    from argus.runtime.compile import compile_cuda

    kf = gemm_fp8_blockscaled_kernel(ag.bf16) if kernel == "block" else gemm_fp8_kernel()
    source = codegen.render(lower_only(kf, s=schedule))
    # the per-row scales are loaded in the accumulator's rows: no layout conversion
    assert "convert_layout" not in source.text
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert f"wgmma.mma_async.sync.aligned.m64n{schedule.bn}k32.f32.e4m3.e4m3" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


# ----------------------------------------------------------------------------- schedules


def test_block_candidates_are_legal_and_promote():
    for p in BLOCK_PROBLEMS:
        cands = fp8_schedules.candidates(p)
        assert fp8_schedules.heuristic(p) == cands[0]
        for s in cands:
            assert s.promote and s.smem_bytes <= 227 * 1024
            assert s.epilogue == "direct" or p.tma_epilogue_ok
    # the widest tile is not always best: 2112 columns fill the last wave better at 112 (the
    # rule without the wave pick) or in 192 x 128 c3 tiles (the wave pick, measured best)
    assert fp8_schedules._block_default(BLOCK_PROBLEMS[1]).bn == 112
    assert fp8_schedules.heuristic(BLOCK_PROBLEMS[1]) == fp8_schedules._C3_192_SMEM_TMA


def test_block_heuristic_picks_the_split_tile_where_it_measured_best():
    """docs/perf/fp8.md (H200, --variants --graphs --rounds 3 at 675fb54): the split 128 x 256
    with shared-memory scales led every block-scaled schedule at the five DeepSeek-V3 shapes;
    the default takes it at M >= 4096 with N >= 2048 in whole 256-column tiles. Before that
    (4dd5330) the split with global scales beat the overlap at M >= 4096, N <= 7168, K >= 2048:
    it stays the default where M is 4096 or more but N is under 2048. Elsewhere (N = 2112:
    the wave pick's 192 x 128 c3, tests/unit/test_fp8_wave_pick.py; M < 4096) no split."""
    smem = {(4096, 7168, 2048), (4096, 7168, 16384), (4096, 4096, 7168), (8192, 7168, 2048),
            (4096, 24576, 1536), (4096, 7168, 1536)}
    for m, n, k in smem:
        s = fp8_schedules.heuristic(Fp8Problem(m, n, k, "bf16", True, True))
        assert (s.bn, s.n_split, s.epilogue, s.stages, s.smem_scales) == \
            (256, 2, "tma", 3, True), (m, n, k)
    s = fp8_schedules.heuristic(Fp8Problem(4096, 1024, 4096, "bf16", True, True))
    assert (s.bn, s.n_split, s.stages, s.smem_scales) == (256, 2, 4, False)
    for m, n, k in ((2048, 7168, 2048), (4096, 2112, 7168)):
        s = fp8_schedules.heuristic(Fp8Problem(m, n, k, "bf16", True, True))
        assert s.n_split == 1, (m, n, k)
    # the direct epilogue (f32 out) is not where it was measured: unchanged
    assert fp8_schedules.heuristic(Fp8Problem(4096, 7168, 2048, "f32", True, True)).n_split == 1


def test_block_problems_have_their_own_cache_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    p = Fp8Problem(4096, 4096, 4096, "bf16", True)
    q = dataclasses.replace(p, block_scaled=True)
    assert p.key != q.key
    fp8_schedules.store_choice("NVIDIA H200", q, Fp8GemmSchedule(bn=144, stages=5,
                                                                  promote=True), 0.5)
    assert fp8_schedules.choose(q, "NVIDIA H200").bn == 144
    assert fp8_schedules.choose(p, "NVIDIA H200") == fp8_schedules.heuristic(p)
    # a choice without promotion is never used for block scales
    fp8_schedules.store_choice("NVIDIA H200", q, Fp8GemmSchedule(bn=128), 0.5)
    assert fp8_schedules.choose(q, "NVIDIA H200") == fp8_schedules.heuristic(q)


# ----------------------------------------------------------------------------- op checks


def test_scaled_matmul_block_scale_errors_without_a_gpu():
    from argus.errors import LaunchError
    from argus.ops import scaled_matmul

    a, w = e4m3((64, 256), 1.0, 0), e4m3((200, 256), 1.0, 1)
    sa, sb, one = torch.ones(64, 2), torch.ones(2, 2), torch.tensor(1.0)
    cases = [
        ((a, w, sa, one), "scale_b has shape \\(\\); .*scale_b \\[ceil\\(N/128\\), "
                          "ceil\\(K/128\\)\\] = \\[2, 2\\]"),
        ((a, w, one, sb), "scale_a has shape \\(\\); .*1x128"),
        ((a, w, torch.ones(64, 3), sb), "scale_a has shape \\(64, 3\\)"),
        ((a, w, sa, torch.ones(1, 2)), "scale_b has shape \\(1, 2\\)"),
        ((a, w, sa.double(), sb), "scale_a must be float32.*\n  fix: pass scale_a.float"),
        ((a, w, sa, sb.half()), "scale_b must be float32"),
        ((e4m3((64, 144), 1.0, 2), e4m3((200, 144), 1.0, 3), sa, sb),
         "K = 144 is not a multiple of 128"),
        ((a, w, sa, sb), "a is on cpu; Argus kernels run on a CUDA device"),
    ]
    for args, message in cases:
        with pytest.raises(LaunchError, match=message):
            scaled_matmul(*args)


def test_one_element_scales_of_any_rank_are_per_tensor():
    from argus.ops.scaled_matmul import _check_scales

    a, w = e4m3((64, 256), 1.0, 0), e4m3((200, 256), 1.0, 1)
    for sa, sb in ((torch.tensor(1.0), torch.tensor([2.0])),
                   (torch.ones(1, 1), torch.ones(1, 1))):
        assert _check_scales(a, w, sa, sb) is False
    assert _check_scales(a, w, torch.ones(64, 2), torch.ones(2, 2)) is True


def test_block_scale_views_read_scale_a_mn_major():
    from argus.ops.scaled_matmul import _block_scale_views

    sa = torch.arange(12.0).reshape(4, 3)                     # row-major [M, K/128]
    at, bt = _block_scale_views(sa, torch.ones(2, 3))
    assert at.shape == (3, 4) and at.stride(-1) == 1 and torch.equal(at, sa.t())
    mn_major = sa.t().contiguous().t()                         # DeepGEMM's layout: no copy
    at2, _ = _block_scale_views(mn_major, torch.ones(2, 3))
    assert at2.data_ptr() == mn_major.data_ptr() and torch.equal(at2, sa.t())
