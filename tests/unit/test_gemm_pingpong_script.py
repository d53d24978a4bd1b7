"""scripts/gpu_gemm_pingpong.py before it spends device time: every schedule of its --compare
call is legal and lowers for both B layouts, and its --whole-step-wait experiment (a 128-row
ping-pong tile's K step ends in wgmma.wait_group 2 instead of 1, so both of its groups stay
queued, as CUTLASS keeps a whole k tile in flight) is a wait the verifier proves, while one
group too many in flight is refused."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import argus as ag
import argus.lower
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.errors import VerificationError
from argus.ir import ops as O
from argus.kernels.gemm import GemmSchedule, gemm_kernel

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "gpu_gemm_pingpong.py"
_SPEC = importlib.util.spec_from_file_location("gpu_gemm_pingpong", _PATH)
script = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(script)


def _schedule(text: str) -> GemmSchedule:
    return eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - the script's own list


def _step_waits(kernel) -> list[int]:
    """The wgmma.wait_group of every consume step that keeps its wgmma in flight."""
    return [x.pending for op in kernel.walk()
            if isinstance(op, O.Consume) and op.wgmma_in_flight == 1
            for x in op.body.ops if isinstance(x, O.WgmmaWait)]


@pytest.mark.parametrize("text", script.COMPARE_SCHEDULES + script.COMPARE_WHOLE_STEP)
@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_compare_schedules_lower_for_both_layouts(text, b_layout):
    kernel = lower_only(gemm_kernel(ag.bf16, ag.bf16, b_layout), s=_schedule(text))
    assert kernel.attr("smem_bytes") <= 232448  # the opt-in limit: 7 stages of 128x128 fit


def test_whole_step_wait_waits_for_the_previous_step_only():
    s = GemmSchedule(bm=128, bn=128, stages=6, pingpong=True)
    lowered = lower_only(gemm_kernel(), s=s)
    assert _step_waits(lowered) == [1]  # lower/sync.py today: half of this step retired too
    fixed = script.whole_step_wait(lowered)
    assert _step_waits(fixed) == [2]    # two m64 groups per step, both left in flight
    assert "ag::wgmma_wait<2>();" in codegen.render(fixed).text
    # one group per step (64-row tiles, cooperative): nothing to change
    for one in (GemmSchedule(bm=64, bn=256, stages=5, pingpong=True), GemmSchedule()):
        k = lower_only(gemm_kernel(), s=one)
        assert _step_waits(script.whole_step_wait(k)) == _step_waits(k) == [1]


def _patched_passes(monkeypatch, extra=None):
    passes = []
    for name, fn in argus.lower.PASSES:
        passes.append((name, fn))
        if name == "sync":
            passes.append(("whole_step_wait", script.whole_step_wait))
            if extra is not None:
                passes.append(("seeded", extra))
    monkeypatch.setattr(argus.lower, "PASSES", tuple(passes))


def test_whole_step_wait_is_proved_and_one_group_too_many_is_refused(monkeypatch, tmp_path):
    pytest.importorskip("z3")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))  # verify now, not a cached verdict
    s = GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, num_sms=4)
    _patched_passes(monkeypatch)
    compiled = compile_kernel(gemm_kernel(), verify=1, s=s)
    assert "ag::wgmma_wait<2>();" in compiled.source.text
    assert not compiled.diagnostics  # no violation and no "unknown"

    def one_too_many(kernel):  # wait_group 3: the previous step's last group may be in flight
        import dataclasses

        from argus.ir.core import Region

        def region(r):
            ops = []
            for op in r.ops:
                inner = script._regions(op)
                if inner:
                    op = op.replace(**{n: region(x) for n, x in inner.items()})
                if isinstance(op, O.WgmmaWait) and op.pending == 2:
                    op = op.replace(pending=3)
                ops.append(op)
            return Region(tuple(ops))
        return dataclasses.replace(kernel, body=region(kernel.body))

    _patched_passes(monkeypatch, one_too_many)
    with pytest.raises(VerificationError, match="sync.release"):
        compile_kernel(gemm_kernel(), verify=1, s=s)
