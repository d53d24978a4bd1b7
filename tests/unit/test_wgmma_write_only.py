"""A wgmma instruction that reads nothing of its accumulator (scale-d = 0) binds the
accumulator's registers write-only ("=f"), as lowering marks it (ir.ops.Wgmma.acc_write_only,
lower/accumulators.py): the first k instruction of an overwriting wgmma (fp8 promotion's
partial carried across steps) and of a wgmma into a fresh by_wgmma partial (the N-split
step's halves). An accumulator zeroed by the first step of a K loop keeps the read-write form
with its runtime scale-d (`1 - t_zero`): the next steps accumulate into it."""

import re

import argus as ag
from argus import codegen
from argus.codegen.wgmma import WgmmaSpec
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel
from argus.kernels.gemm import GemmSchedule, gemm_kernel


def test_write_only_wrapper_binds_outputs_only():
    spec = WgmmaSpec(n=128, a_dtype="e4m3", b_dtype="e4m3", write_only=True)
    text = spec.source()
    assert spec.name.endswith("_wo") and '"+f"' not in text and text.count('"=f"') == 64
    assert "int scale_d" not in text and '"r"(0)' in text
    rw = WgmmaSpec(n=128, a_dtype="e4m3", b_dtype="e4m3").source()
    assert rw.count('"+f"') == 64 and "int scale_d" in rw


def _calls(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if re.search(r"ag::wgmma_m64n\d+k\d+_\w+\(t\d+,", line)]


def test_split_halves_first_instruction_is_write_only():
    s = Fp8GemmSchedule(bn=256, stages=3, promote=True, n_split=2, epilogue="tma")
    kernel = lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s)
    marked = [op for op in kernel.walk() if isinstance(op, O.Wgmma) and op.acc_write_only]
    assert len(marked) == 2   # the two halves' fresh partials
    calls = _calls(codegen.render(kernel).text)
    # per half: the write-only first k32, then three that accumulate (scale-d = 1)
    assert [c.split("(")[0].endswith("_wo") for c in calls] == [True, False, False, False] * 2
    assert not any("_zero)" in c for c in calls)


def test_overwriting_partials_are_write_only():
    s = Fp8GemmSchedule(bn=128, stages=5, promote=True, overlap=True, epilogue="tma",
                        cluster_m=2)
    kernel = lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s)
    wgmma = [op for op in kernel.walk() if isinstance(op, O.Wgmma)]
    assert wgmma and all(op.overwrite and op.acc_write_only for op in wgmma)
    text = codegen.render(kernel).text
    assert not any(c.endswith(", 0);") for c in _calls(text))   # no read-write scale-d 0 left


def test_k_loop_accumulator_stays_read_write():
    kernel = lower_only(gemm_kernel(), s=GemmSchedule(stages=4, zero_by_wgmma=True))
    assert not any(op.acc_write_only for op in kernel.walk() if isinstance(op, O.Wgmma))
    text = codegen.render(kernel).text
    assert "_wo(" not in text and re.search(r"1 - t\d+_zero\);", text)
