"""GPU tier for direct judging (argus/bench/kernelbench/judge.py, JudgeOptions.direct): the
reference in the judge's process, inputs drawn by the GPU's generator in the candidate too,
outputs handed over by CUDA IPC. On a reduced ReLU (batch 512 x 65536): the verdicts and the
per-set errors equal those of the worker-and-files path, the outputs really went by IPC (no
fallback to files), the poisoned-memory and echo checks still catch their fixtures, and the
timing ran under the gate."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"
KB = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))


@pytest.mark.gpu
@pytest.mark.skipif(not (KB / "level1").is_dir(), reason="KernelBench tasks not found")
def test_direct_judging_on_the_gpu_matches_files_and_uses_ipc():
    from argus.bench.kernelbench.judge import JudgeOptions, ReferenceSession, judge_with
    from argus.bench.kernelbench.tasks import discover

    task = discover(KB, levels=[1], ids=[19])[0]
    files = JudgeOptions(device="cuda", overrides={"batch_size": 512, "dim": 65536},
                         baselines=False, profile=False, timeout_s=300, trials=20)
    with ReferenceSession(task, files) as session:
        by_files = judge_with(session, FIXTURES / "relu_copy.py")
    with ReferenceSession(task, dataclasses.replace(files, direct=True)) as session:
        direct = judge_with(session, FIXTURES / "relu_copy.py")
        empty = judge_with(session, FIXTURES / "empty_like.py")
        echo = judge_with(session, FIXTURES / "echo.py")
    assert by_files.correct and direct.correct, (direct.reasons, direct.detail)
    assert [s.distribution for s in by_files.sets] == [s.distribution for s in direct.sets]
    assert [s.errors for s in by_files.sets] == [s.errors for s in direct.sets]
    assert "# ipc fallbacks to files" not in direct.phases, direct.phases
    assert "# input hand-overs by file" not in direct.phases, direct.phases
    assert direct.timing and direct.timing["clock"] == "cuda-events+device-sync"
    assert "timing measure" in direct.phases
    assert empty.reason == "uninitialized_output", (empty.reasons, empty.detail)
    assert echo.reason == "echo_input", (echo.reasons, echo.detail)
