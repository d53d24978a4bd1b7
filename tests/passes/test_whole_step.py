"""Whole consume steps (ir.ops.Consume.whole_step) through the passes: the DSL records the
request (`pipe.consume(whole_step=True)`, a bool), lower/pipeline.py keeps it only where the
step keeps its wgmma in flight, and lower/sync.py ends such a step in wgmma.wait_group N,
N = the step's groups still in flight (at most target.limits.WGMMA_WAIT_MAX), where a plain
step waits with 1; the deeper waits verify clean."""

from __future__ import annotations

import pytest

from argus import analysis, verify
from argus.compiler import lower_only
from argus.dsl.pipe import Pipe
from argus.errors import TraceError
from argus.ir import ops as O
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.lower import PASSES
from argus.lower import pipeline as pipeline_pass
from argus.target.limits import WGMMA_WAIT_MAX


def _steps(kernel) -> list[O.Consume]:
    return [op for op in kernel.walk() if isinstance(op, O.Consume)]


def _closing_waits(kernel) -> list[int]:
    return [x.pending for op in _steps(kernel) for x in op.body.ops
            if isinstance(x, O.WgmmaWait)]


@pytest.mark.parametrize("schedule,whole,waits", [
    (GemmSchedule(), False, [1]),                                       # cooperative: 1 group
    (GemmSchedule(bm=64, bn=256, stages=5, pingpong=True), True, [1]),  # one m64 group
    (GemmSchedule(bm=128, bn=128, stages=6, pingpong=True), True, [2]),
    (GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, k_atoms=2), True, [4]),
    # 8 groups: the wait leaves WGMMA_WAIT_MAX in flight and retires one more
    (GemmSchedule(bm=128, bn=64, stages=2, pingpong=True, k_atoms=4), True, [WGMMA_WAIT_MAX]),
], ids=["cooperative", "pp64", "pp128", "pp128-k2", "pp128-k4-capped"])
def test_a_whole_step_waits_for_all_but_its_own_groups(schedule, whole, waits):
    kernel = lower_only(gemm_kernel(), s=schedule)
    assert [op.whole_step for op in _steps(kernel)] == [whole]
    assert _closing_waits(kernel) == waits


@pytest.mark.parametrize("schedule", [
    GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, k_atoms=2, num_sms=4),
    GemmSchedule(bm=128, bn=64, stages=2, pingpong=True, k_atoms=4, num_sms=4),
], ids=["wait4", "wait7-capped"])
def test_deeper_whole_step_waits_verify_clean(schedule):
    pytest.importorskip("z3")
    report = verify.run(lower_only(gemm_kernel(), s=schedule), include_proven=True)
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    releases = [f for f in report.findings if f.code == "sync.release"]
    assert releases and all(f.status == "proven" for f in releases)


def _through_pipeline(overlap: bool):
    """The ping-pong GEMM through the passes up to the pipeline protocol, with or without
    wgmma overlap across steps."""
    s = GemmSchedule(bm=128, bn=128, stages=3, pingpong=True)
    kernel = analysis.infer_layouts(gemm_kernel().trace(s=s))
    for name, fn in PASSES:
        if name == "pipeline_protocol":
            return pipeline_pass.run(kernel, wgmma_overlap=overlap)
        kernel = fn(kernel)
    raise AssertionError("no pipeline_protocol pass")


def test_the_request_is_recorded_and_kept_only_where_groups_stay_in_flight():
    traced = gemm_kernel().trace(s=GemmSchedule(bm=128, bn=128, stages=3, pingpong=True))
    assert [op.whole_step for op in _steps(traced)] == [True]   # the kernel's request
    kept = _steps(_through_pipeline(True))
    assert [(op.wgmma_in_flight, op.whole_step) for op in kept] == [(1, True)]
    # a step that retires its groups before it ends keeps no whole step either
    dropped = _steps(_through_pipeline(False))
    assert [(op.wgmma_in_flight, op.whole_step) for op in dropped] == [(0, False)]


def test_whole_step_is_a_bool():
    with pytest.raises(TraceError, match="whole_step is True or False"):
        with Pipe(None).consume(whole_step=1):
            pass
