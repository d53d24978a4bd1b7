"""The block-scaled default's tile pick by waves (argus/ops/fp8_schedules.py `wave_pick`,
issue 18, 2026-12-05) without a GPU: at each H200-measured shape the rule picks the measured
winner of the split 128 x 256 and the 192 x 128 c3 tile; a predicted tie, and every shape
outside the measured box (small M, narrow N, f32 out), keeps the rule before it; both tiles the
rule can return lower, verify clean and build through NVRTC for sm_90a without spills."""

import dataclasses

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import gemm_fp8_blockscaled_kernel, gemm_fp8_blockscaled_smem_kernel
from argus.ops import fp8_schedules as F
from argus.ops.fp8_schedules import Fp8Problem
from argus.runtime import nvrtc_available
from tests.loading import load_script

# TFLOP/s on the H200 (2026-12-05, tree 1795500, scripts/gpu_fp8_bench.py --variants --graphs
# --rounds 3, median of the rounds; docs/perf/fp8.md "Tile pick by waves"): (split 128x256
# smem scales, serial 192x128 c3 smem scales) per M x N x K
MEASURED = {(4096, 7168, 2048): (1149, 1073), (4096, 24576, 1536): (1084, 1039),
            (4096, 7168, 16384): (1120, 1017), (4096, 2112, 7168): (910, 1100),
            (4096, 4096, 7168): (1169, 1045)}
VARIANT_NAMES = ("split 128x256 smem scales", "serial 192x128 c3 smem scales")


def _block(m, n, k, out="bf16", tma=True) -> Fp8Problem:
    return Fp8Problem(m, n, k, out, tma, True)


def test_the_fit_reads_the_measured_rows_of_the_benchmarked_schedules():
    """The two candidates are the --variants schedules the table measured, and the fit reads
    that table: a schedule edited in one place and not the other fails here."""
    variants = dict(load_script("gpu_fp8_bench").variant_schedules())
    assert F.WAVE_CANDIDATES == tuple(variants[name] for name in VARIANT_NAMES)
    assert F.WAVE_FIT_ROWS == MEASURED
    # the fitted full-wave rates lie between the per-shape ones (geometric mean)
    for i, rate in enumerate(F.WAVE_RATES):
        per_shape = [row[i] / F.tile_fill(m, n, F.WAVE_CANDIDATES[i], 132)
                     for (m, n, _), row in MEASURED.items()]
        assert min(per_shape) < rate < max(per_shape)


@pytest.mark.parametrize("mnk", list(MEASURED), ids=[f"{m}x{n}x{k}" for m, n, k in MEASURED])
def test_default_picks_the_measured_winner(mnk):
    split_tflops, c3_tflops = MEASURED[mnk]
    winner = F.WAVE_CANDIDATES[0 if split_tflops > c3_tflops else 1]
    p = _block(*mnk)
    assert F.heuristic(p) == winner, (mnk, F.heuristic(p))
    # the model's own answer is that winner or a tie (then the rule before decided)
    assert F.wave_pick(*mnk, 132) in (winner, None)


def test_the_wave_model_explains_n_2112():
    """4096 x 2112: nine 256-column tiles a row, the last a quarter used (288 tiles, 3 waves
    of which the last holds 24); 17 of 128 columns with 22 rows of 192 (374 tiles, 3 waves):
    two thirds of the split's tile-waves compute output, 8/9 of the c3's."""
    split, c3 = F.WAVE_CANDIDATES
    assert F.waves(4096, 2112, 128, 256, 132) == 3
    assert F.waves(4096, 2112, 192, 128, 132, cluster_m=2) == 3
    assert F.tile_fill(4096, 2112, split, 132) == pytest.approx(2 / 3)
    assert F.tile_fill(4096, 2112, c3, 132) == pytest.approx(8 / 9)
    t_split, t_c3 = (F.wave_time_us(4096, 2112, 7168, s, r, 132)
                     for s, r in zip(F.WAVE_CANDIDATES, F.WAVE_RATES))
    assert t_c3 < (1 - F.WAVE_TIE) * t_split
    # where the split's tile-waves are as full (4096 x 4096: 512 tiles, 3.9 waves) it wins
    assert F.wave_pick(4096, 4096, 7168, 132) == split


@pytest.mark.parametrize("mnk", [(4096, 24576, 1536), (16384, 2112, 7168)])
def test_a_tie_keeps_the_default_before_the_wave_pick(mnk):
    """Both tiles' waves equally full (fill 32/33): the rates alone, 3% apart, inside WAVE_TIE.
    At 4096x24576 the default before was the split (the measured winner, 1084 / 1039); at
    16384x2112 it was the 112-wide serial tile, neither candidate: kept as it was."""
    times = [F.wave_time_us(*mnk, s, r, 132) for s, r in zip(F.WAVE_CANDIDATES, F.WAVE_RATES)]
    assert min(times) > (1 - F.WAVE_TIE) * max(times)
    assert F.wave_pick(*mnk, 132) is None
    p = _block(*mnk)
    assert F.heuristic(p) == F._block_default(p)
    if mnk[1] % 256:
        assert F.heuristic(p) not in F.WAVE_CANDIDATES
    else:
        assert F.heuristic(p) == F.WAVE_CANDIDATES[0]


@pytest.mark.parametrize("problem", [
    _block(16, 7168, 2048), _block(64, 2112, 7168), _block(128, 7168, 2048),
    _block(256, 2112, 7168), _block(2048, 2112, 7168), _block(4096, 1024, 4096),
    _block(4096, 2112, 7168, out="f32"), _block(4096, 2112, 7168, tma=False)],
    ids=["m16", "m64", "m128", "m256", "m2048", "n1024", "f32-out", "misaligned-out"])
def test_outside_the_measured_box_the_default_is_unchanged(problem):
    """Decode-like M, M < 4096, narrow N or an output without the TMA epilogue: nothing timed
    both candidates there, so the rule before decides (even where the model alone would take
    the c3 tile: at M <= 256 it would, on its 192-row tiles' fewer waves)."""
    assert not F.in_wave_pick_box(problem)
    assert F.heuristic(problem) == F._block_default(problem)
    assert F.heuristic(problem) not in F.WAVE_CANDIDATES
    if problem.m <= 64:
        assert (F.heuristic(problem).bm, F.heuristic(problem).bn) == (64, 64)
    elif problem.m <= 256:
        assert (F.heuristic(problem).bm, F.heuristic(problem).bn) == (128, 64)


def test_wave_pick_is_a_function_of_the_sm_count():
    """The same shape on fewer SMs: 4096 x 2112 on 96 SMs takes the split's 288 tiles in 3
    full waves and the c3's 374 in 4, both 11/12 full (the ragged columns): a tie."""
    assert F.wave_pick(4096, 2112, 7168, 132) == F.WAVE_CANDIDATES[1]
    assert F.wave_pick(4096, 2112, 7168, 96) is None


def test_the_c3_pick_is_a_legal_tuning_candidate():
    for mnk in ((4096, 2112, 7168), (8192, 2112, 7168)):
        p = _block(*mnk)
        cands = F.candidates(p)
        assert F.heuristic(p) == cands[0] == F._C3_192_SMEM_TMA
        assert all(s.smem_bytes <= 227 * 1024 for s in cands)
    s = F._C3_192_SMEM_TMA
    # 512 threads: a 32-register producer warpgroup and three of 160 fill the 64K registers
    assert 128 * (s.producer_regs + s.consumers * s.consumer_regs) <= 65536
    # an MN-major scale_a (or the kill switch) runs the same tile reading global scales
    assert F.without_smem_scales(s) == dataclasses.replace(s, smem_scales=False)


PICKS = [("smem", F.WAVE_CANDIDATES[0]), ("smem", F.WAVE_CANDIDATES[1]),
         ("global", F.without_smem_scales(F.WAVE_CANDIDATES[1]))]
PICK_IDS = ["split-smem", "c3-smem", "c3-global"]


def _kernel(kind):
    return (gemm_fp8_blockscaled_smem_kernel if kind == "smem" else
            gemm_fp8_blockscaled_kernel)(ag.bf16)


@pytest.mark.parametrize("kind,schedule", PICKS, ids=PICK_IDS)
def test_picks_verify_clean(kind, schedule):
    pytest.importorskip("torch")    # tests/fp8_blockscaled.py needs it
    from tests.fp8_blockscaled import verify_clean

    verify_clean(lower_only(_kernel(kind), s=schedule))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("kind,schedule", PICKS, ids=PICK_IDS)
def test_nvrtc_builds_the_picks_without_spills(kind, schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(_kernel(kind), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert f"wgmma.mma_async.sync.aligned.m64n{schedule.piece}k32.f32.e4m3.e4m3" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
