"""The whole-step wgmma wait of ping-pong GEMMs (ir.ops.Consume.whole_step, lower/sync.py) is
proven on every ping-pong schedule the library can pick (tests/verify/test_library_schedules.py
CASES) and on those scripts/gpu_gemm_pingpong.py --compare times: each K step ends in
wait_group N, N = the step's m64 groups (2 for 128-row tiles, 1 for 64-row ones), and every
release of a slot is proven to follow the retirement of the wgmma groups that read it
(sync.release), with no violation and no unknown beyond the library's allowed ones."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.ops.schedules import kernel_for
from tests.verify.test_library_schedules import ALLOWED_UNKNOWN, CASES, _short
from tests.loading import load_script

pytest.importorskip("z3")

script = load_script("gpu_gemm_pingpong")


def _cases() -> list[tuple[str, object, GemmSchedule]]:
    out: dict[str, tuple[object, GemmSchedule]] = {}
    for problem, schedule in CASES:
        if schedule.pingpong:
            kernel, run = kernel_for(problem, schedule)
            out.setdefault(f"{kernel.name}-{_short(run)}", (kernel, run))
    for text in script.COMPARE_SCHEDULES:
        s = eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - the script's own list
        if s.pingpong:
            for b_layout in ("nk", "kn"):
                kernel = gemm_kernel(ag.bf16, ag.bf16, b_layout)
                out.setdefault(f"{kernel.name}-{_short(s)}", (kernel, s))
    return [(key, *out[key]) for key in sorted(out)]


PINGPONG = _cases()


def test_cases_cover_both_tile_heights_and_epilogues():
    scheds = [s for _, _, s in PINGPONG]
    assert {s.bm for s in scheds} == {64, 128}
    assert {s.epilogue for s in scheds} == {"direct", "tma"}
    assert len(PINGPONG) >= 8


@pytest.mark.parametrize("key,kernel,schedule", PINGPONG, ids=[k for k, _, _ in PINGPONG])
def test_whole_steps_are_proven(key, kernel, schedule):
    lowered = lower_only(kernel, s=schedule)
    steps = [op for op in lowered.walk() if isinstance(op, O.Consume) and op.wgmma_in_flight]
    assert steps and all(op.whole_step for op in steps)
    groups = schedule.bm // 64 * schedule.k_atoms
    for op in steps:  # the step's closing wait leaves all of its groups in flight
        waits = [x.pending for x in op.body.ops if isinstance(x, O.WgmmaWait)]
        assert waits == [groups], (key, waits)
    report = verify.run(lowered, include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= ALLOWED_UNKNOWN, \
        "\n".join(str(d) for d in report.unknowns)
    releases = [f for f in report.findings if f.code == "sync.release"]
    assert releases and all(f.status == "proven" for f in releases), releases
