"""No false positives on library kernels: every GEMM schedule that argus.ops can pick
(`argus.ops.schedules.candidates`) for representative problems — both B layouts, batched and
not, skinny, mid-size and large M, 16- and 32-bit outputs, direct and TMA-store epilogues, 2x1
clusters with multicast B, scale-d zeroing — lowers and verifies without a violation, because
`compile_kernel` refuses a kernel on any verifier error (issue 3).

The unknowns allowed are the honest ones docs/verify.md lists for these kernels: output
coverage with several store sites (not attempted) or of a partial output (a tail-split GEMM's
C), and the non-linear store-injectivity and tile-count queries if they run out of budget on
a loaded machine (coverage under the grouped raster and the persistent walk is proven tile by
tile: tests/verify/test_coverage_and_stats.py). An unmodelled construct ("model") must not
appear.
"""

from __future__ import annotations

import dataclasses

import pytest

from argus import verify
from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, candidates, kernel_for, tail_split_candidates

ALLOWED_UNKNOWN = {"store.coverage", "store.once"}

PROBLEMS = [
    Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True),    # large: clusters, TMA store
    Problem(4096, 4096, 4096, 1, "bf16", "bf16", "kn", True),    # ... with MN-major B
    Problem(1024, 2048, 512, 8, "f16", "f16", "nk", False),      # batched, direct epilogue
    Problem(1024, 2048, 512, 8, "bf16", "bf16", "kn", True),     # batched MN-major
    Problem(32, 4096, 4096, 1, "bf16", "bf16", "nk", True),      # skinny M: weight streaming
    Problem(16, 8192, 8192, 1, "bf16", "bf16", "kn", True),      # ... swap-AB, W read MN-major
    Problem(200, 4096, 4096, 1, "bf16", "f32", "kn", False),     # mid M, f32 output
    Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True),    # 224-wide tiles fit the waves
    Problem(2048, 7168, 2048, 1, "bf16", "bf16", "kn", True),    # ... 192-wide, MN-major B
]

# schedules of the reproduction in the issue that candidates() does not list, and the
# tail-split schedules ops can run but no longer tunes over (slower on the H200)
EXTRA = [(dataclasses.replace(PROBLEMS[i], tma_store_ok=True),
          GemmSchedule(cluster_m=2, epilogue="tma", stages=3, persistent=False)) for i in (0, 1)]
EXTRA += [(p, s) for p in PROBLEMS for s in tail_split_candidates(p)]


def _short(s: GemmSchedule) -> str:
    default = GemmSchedule()
    return ",".join(f"{f.name}={getattr(s, f.name)}" for f in dataclasses.fields(s)
                    if getattr(s, f.name) != getattr(default, f.name)) or "default"


def _cases():
    out, seen = [], set()
    for p in PROBLEMS:
        for s in candidates(p):
            out.append((p, s))
    for p, s in EXTRA:
        out.append((p, s))
    unique = []
    for p, s in out:
        kernel, schedule = kernel_for(p, s)
        key = (kernel.name, schedule)
        if key not in seen:  # one kernel and schedule verified once
            seen.add(key)
            unique.append((p, s))
    return unique


CASES = _cases()


def test_cases_cover_the_schedule_space():
    kinds = {(p.b_layout, p.batch > 1) for p, _ in CASES}
    assert kinds == {("nk", False), ("kn", False), ("nk", True), ("kn", True)}
    scheds = [s for _, s in CASES]
    assert any(s.cluster_m == 2 and s.epilogue == "tma" for s in scheds)
    assert any(s.cluster_m == 2 and s.epilogue == "direct" for s in scheds)
    assert any(s.zero_by_wgmma for s in scheds)
    assert any(s.store_cols and s.bn % 64 for s in scheds)   # staging rounds, 16-column blocks
    assert any(s.store_cols and s.bn == 256 for s in scheds)
    assert any(not s.persistent for s in scheds)
    assert any(s.consumers == 1 for s in scheds)
    assert any(s.split_k > 1 for s in scheds)
    assert {p.b_layout for p, s in CASES if s.swap_ab} == {"nk", "kn"}
    assert any(s.bn == 224 for s in scheds) and any(s.bn == 192 for s in scheds)
    assert any(s.bn == 176 and s.epilogue == "tma" for s in scheds)
    assert any(s.tail_splits > 1 and s.epilogue == "direct" for s in scheds)


@pytest.mark.parametrize("problem,schedule", CASES,
                         ids=[f"{p.b_layout}{'-batched' if p.batch > 1 else ''}-"
                              f"{p.in_dtype}-{p.out_dtype}-{_short(s)}" for p, s in CASES])
def test_library_schedule_verifies_clean(problem, schedule):
    fn, schedule = kernel_for(problem, schedule)
    report = verify.run(lower_only(fn, s=schedule))
    # a tail-split kernel leaves C's last-wave tiles to its sum kernel on purpose
    # (partial_outputs); the verifier does not know partial outputs yet, so C's coverage is
    # the one error it may report (tests/unit/test_tail_splits.py)
    partial = [f" of {name} stored at " for name in fn.partial_outputs]
    errors = [d for d in report.errors
              if not (d.code == "store.coverage" and any(p in d.message for p in partial))]
    assert not errors, "\n".join(str(d) for d in errors)
    # its full-wave bound (total // clusters * clusters) makes C's queries non-linear: one
    # may run out of solver time, which is honest (docs/verify.md)
    unknown = {d.code for d in report.unknowns
               if not (partial and "z3: timeout" in d.message)}
    assert unknown <= ALLOWED_UNKNOWN, "\n".join(str(d) for d in report.unknowns)
    assert len(report.proven) >= 20
