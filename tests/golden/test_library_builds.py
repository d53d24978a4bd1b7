"""Every GEMM schedule argus.ops can pick builds for sm_90a with NVRTC, with 0 bytes spilled
and a register count setmaxnreg can serve: a schedule or codegen change that makes a tuned
choice spill is caught here, in CI, not on the GPU (an interior-store fast path once did)."""

from __future__ import annotations

import pytest

from argus.compiler import compile_kernel
from argus.ops.schedules import kernel_for
from tests.verify.test_library_schedules import CASES, _short


@pytest.mark.parametrize("problem,schedule", CASES,
                         ids=[f"{p.b_layout}{'-batched' if p.batch > 1 else ''}-"
                              f"{p.in_dtype}-{p.out_dtype}-{_short(s)}" for p, s in CASES])
def test_library_schedule_builds_without_spills(problem, schedule):
    kernel, schedule = kernel_for(problem, schedule)
    compiled = compile_kernel(kernel, verify=False, s=schedule)
    res = compiled.resources
    assert compiled.binary.cubin[:4] == b"\x7fELF"
    assert res.spill_stores == 0 and res.spill_loads == 0, (schedule, res)
    assert res.registers <= 65536 // (128 * (1 + schedule.consumers)) // 8 * 8, res
    assert "wgmma.mma_async" in compiled.binary.ptx
