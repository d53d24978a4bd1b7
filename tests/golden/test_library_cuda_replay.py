"""Process replay of the library's GEMM kernels: the generated CUDA of every schedule the
library can pick (the bf16/fp16 cases of tests/verify/test_library_schedules.py, the fp8 cases
of tests/unit/test_fp8_gemm.py for each output type) hashes to what library_cuda.txt records.

It guards the kernels built from argus/kernels/warp_specialized.py: a change to the skeleton or
to a kernel that moves no hash generates the same code for every library schedule. A lowering
or codegen change moves hashes by design; review the new code (ARGUS_DUMP=dir) and record the
hashes again with ARGUS_ACCEPT=1, like any golden file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import argus as ag
from argus import codegen, config
from argus.compiler import lower_only
from argus.ops.schedules import kernel_for
from tests.verify.test_library_schedules import CASES as GEMM_CASES

GOLDEN = Path(__file__).parent / "library_cuda.txt"


def _cases() -> list[tuple[str, object, object]]:
    """(key, kernel, schedule), each (kernel, schedule) once, in a stable order."""
    pytest.importorskip("torch")  # the fp8 cases live in a module that needs torch
    from argus.kernels.gemm_fp8 import gemm_fp8_kernel
    from tests.unit.test_fp8_gemm import CASES as FP8_CASES

    out = {}
    for problem, schedule in GEMM_CASES:
        kernel, schedule = kernel_for(problem, schedule)
        out.setdefault(f"{kernel.name} {schedule!r}", (kernel, schedule))
    for _, schedule in FP8_CASES:
        for dtype in (ag.bf16, ag.f16, ag.f32):
            if schedule.epilogue == "tma" and dtype.bits != 16:
                continue  # stmatrix stores 16-bit outputs only
            kernel = gemm_fp8_kernel(dtype)
            out.setdefault(f"{kernel.name} {schedule!r}", (kernel, schedule))
    return [(key, *out[key]) for key in sorted(out)]


def _hash(kernel, schedule) -> str:
    text = codegen.render(lower_only(kernel, s=schedule)).text
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_library_cuda_matches_recorded_hashes():
    got = {key: _hash(kernel, schedule) for key, kernel, schedule in _cases()}
    if config.accept_golden():
        GOLDEN.write_text("".join(f"{h} {key}\n" for key, h in got.items()))
    assert GOLDEN.exists(), f"missing {GOLDEN.name}; create it with ARGUS_ACCEPT=1"
    want = dict(line.split(" ", 1)[::-1] for line in GOLDEN.read_text().splitlines())
    changed = sorted(key for key in got if key in want and got[key] != want[key])
    added, removed = sorted(got.keys() - want.keys()), sorted(want.keys() - got.keys())
    assert not (changed or added or removed), (
        f"generated CUDA of library GEMM schedules moved: {len(changed)} changed, "
        f"{len(added)} new, {len(removed)} gone (of {len(got)}), e.g. "
        f"{(changed + added + removed)[0]}; if the change is meant (a lowering or codegen "
        f"change), review the code with ARGUS_DUMP=dir and rerun with ARGUS_ACCEPT=1")


def test_replay_covers_both_kernels_and_every_epilogue():
    keys = [key for key, _, _ in _cases()]
    assert any(k.startswith("gemm_fp8") for k in keys) and len(keys) >= 60
    assert any("epilogue='tma'" in k and k.startswith("gemm_fp8") for k in keys)
    assert any("swap_ab=True" in k for k in keys) \
        and any("store_cols=" in k and "store_cols=0)" not in k for k in keys)
