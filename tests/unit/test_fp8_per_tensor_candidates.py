"""The per-tensor fp8 candidate sets (argus/ops/fp8_schedules.py): the wave-fitting widths
the bf16 set has (2048 x 7168: 448 tiles of 128 x 256 are 3.4 waves of 132 SMs) and the
128 x 128 TMA-store cluster tile; the promoting set (promoted_candidates: every schedule adds
each 128-K block's partial into fp32 on the CUDA cores, cuBLAS's accuracy, issue 18). Every
one is legal, fits shared memory, verifies clean, and builds for sm_90a without spills
(NVRTC, the launch variant of the shape; skipped without NVRTC)."""

from __future__ import annotations

import pytest

import argus as ag
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import gemm_fp8_kernel
from argus.ops import fp8_schedules
from argus.ops.fp8_schedules import Fp8Problem
from argus.runtime import nvrtc_available
from tests.fp8_blockscaled import verify_clean
from tests.loading import load_script

WAVE = Fp8Problem(2048, 7168, 2048, "bf16", True)
SQUARE = Fp8Problem(4096, 4096, 4096, "bf16", True)


def _new_plain(p):
    """The plain candidates added after the first five (the set before them)."""
    return fp8_schedules.candidates(p)[5:]


def test_wave_fitting_widths_only_where_the_last_wave_is_mostly_empty():
    widths = {s.bn for s in fp8_schedules.candidates(WAVE)}
    assert {176, 224} <= widths          # 656 / 512 tiles: 5.0 / 3.9 waves against 3.4
    for p in (SQUARE, Fp8Problem(8192, 28672, 8192, "bf16", True),
              Fp8Problem(4096, 14336, 4096, "bf16", True)):
        assert {s.bn for s in fp8_schedules.candidates(p)} <= {128, 256}, p
    # no TMA-store schedule where the output cannot take it
    direct = Fp8Problem(2048, 7168, 2048, "f32", False)
    assert all(s.epilogue == "direct" for s in fp8_schedules.candidates(direct))
    assert any(s.bn == 176 for s in fp8_schedules.candidates(direct))


@pytest.mark.parametrize("p", [WAVE, SQUARE, Fp8Problem(128, 8192, 8192, "bf16", True),
                               Fp8Problem(16, 8192, 8192, "bf16", True),
                               Fp8Problem(2048, 7168, 2048, "f32", False)],
                         ids=lambda p: p.key)
def test_every_candidate_is_legal_and_the_promoted_set_promotes(p):
    plain, promoted = fp8_schedules.candidates(p), fp8_schedules.promoted_candidates(p)
    assert len(set(plain)) == len(plain) and len(set(promoted)) == len(promoted)
    # a weight stream promotes by default (fp8_schedules.STREAM_PROMOTE) where its loop can:
    # all but split-K's partials; the other plain sets do not promote
    stream = fp8_schedules.weight_bound(p) and fp8_schedules.STREAM_PROMOTE
    assert all(s.promote == (stream and s.split_k == 1) for s in plain), plain
    assert all(s.promote for s in promoted)
    for s in plain + promoted:
        assert s.smem_bytes <= 227 * 1024, s
        assert s.epilogue == "direct" or p.tma_epilogue_ok, s
        assert not s.smem_scales, s      # a block-scale path: the per-tensor kernel has none


@pytest.mark.parametrize("schedule", _new_plain(WAVE), ids=repr)
def test_new_plain_candidates_verify_clean(schedule):
    verify_clean(lower_only(gemm_fp8_kernel(ag.bf16), s=schedule))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("schedule", _new_plain(WAVE) + fp8_schedules.promoted_candidates(WAVE),
                         ids=repr)
def test_builds_for_sm90a_without_spills(schedule):
    """The variant a 2048 x 7168 x 2048 launch on contiguous tensors runs (the aligned
    specialization), built by NVRTC: QGMMA's PTX, no local memory."""
    from argus import codegen
    from argus.analysis import alignment
    from argus.runtime.compile import compile_cuda

    k_loop = load_script("sass_fp8_k_loop")
    kernel = lower_only(gemm_fp8_kernel(ag.bf16), s=schedule)
    kernel = alignment.specialize(kernel, k_loop.launch_specialization(
        kernel, {"M": WAVE.m, "N": WAVE.n, "K": WAVE.k}))
    source = codegen.render(kernel)
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    assert "wgmma.mma_async.sync.aligned.m64n" in binary.ptx and ".e4m3.e4m3" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills and res.stack_frame == 0, res.summary()
