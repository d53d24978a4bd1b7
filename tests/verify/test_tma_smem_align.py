"""The shared-memory address of a TMA copy must be a multiple of 128 B (CUDA C++ Programming
Guide, "Tensor Memory Access", alignment). smem.align once checked the per-stage offset only of
swizzled buffers, so an unswizzled f32 (stages, 2, 4) buffer — 32 B a stage — loaded with
ag.tma.load per pipeline stage verified clean and faulted on the H200 (fixed in the fp8
kernel by 921453c, which pads each scale stage to 128 B). Now every stage and row offset a TMA
copy uses is checked, swizzled or not."""

from __future__ import annotations

import argus as ag
from argus import verify

STAGES = 2


def _staged_scales(rows: int):
    @ag.kernel(name=f"staged_scales_{rows}")
    def staged(S: ag.Tensor["R", "C", ag.f32], O_: ag.Tensor["R", "C", ag.f32]):
        R = S.shape[0]
        ag.tag_assume(lambda: ag.sym(S.shape[1]) == 4)
        ag.tag_assume(lambda: ag.sym(O_.shape[1]) == 4)
        ag.tag_assume(lambda: ag.sym(O_.shape[0]) == ag.sym(R))
        (pid,) = ag.grid(1)
        sS = ag.smem((STAGES, rows, 4), ag.f32)
        pipe = ag.pipeline(STAGES, consumers=1)
        n = ag.cdiv(R, rows)
        with ag.role("producer", warpgroups=1, regs=40):
            for i in ag.range(n):
                with pipe.produce() as st:
                    ag.tma.load(sS[st], S, (i * rows, 0))
        with ag.role("consumer", warpgroups=1, regs=232):
            for i in ag.range(n):
                with pipe.consume() as st:
                    v = ag.load_shared(sS[st])
                    ag.store(O_, (i * rows, 0), v)
    return staged


def _align_errors(report):
    return [d for d in report.errors if d.code == "smem.align"]


def test_unswizzled_32_byte_stages_under_tma_are_refused():
    report = verify.run(_staged_scales(2), lower=True)
    errs = _align_errors(report)
    assert errs, [str(d) for d in report.errors]
    text = "\n".join(str(d) for d in errs)
    assert "stage size 32 B" in text, text
    assert "pad each stage to a multiple of 128 bytes" in text, text
    assert "tma.load" in text, text


def test_unswizzled_128_byte_stages_under_tma_are_clean():
    report = verify.run(_staged_scales(8), lower=True)
    assert not _align_errors(report), [str(d) for d in _align_errors(report)]
    assert not report.errors, "\n".join(str(d) for d in report.errors)


def test_the_fp8_kernels_unpadded_scale_stages_are_refused(monkeypatch):
    """The kernel the bug came from: its weight-scale buffer with 2 rows of 4 f32 a stage (as
    before 921453c) instead of SB_ROWS (128 B a stage)."""
    from argus.compiler import lower_only
    from argus.kernels import gemm_fp8
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_smem_kernel

    s = Fp8GemmSchedule(promote=True, smem_scales=True, bn=128, stages=4)
    monkeypatch.setattr(gemm_fp8, "SB_ROWS", 2)
    report = verify.run(lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16), s=s))
    text = "\n".join(str(d) for d in _align_errors(report))
    assert "stage size 32 B" in text and "pad each stage" in text, \
        [str(d) for d in report.errors]
