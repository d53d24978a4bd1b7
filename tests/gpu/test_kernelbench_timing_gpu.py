"""GPU tier for the judge's timed-call check (argus/bench/kernelbench/judge.py `timing_sets`,
`_check_timed`; worker.py CandidateRole.time): the solution is timed on one set of argument
tensors refilled with two input sets it has not seen, in a shuffled order, each call's set
reflected by a key of its own (inputs.reflect, drawn on the GPU), and one timed call of each
set is compared with a float64 reference of that call's inputs, recomputed by the judge. On a
reduced ReLU (512 x 65536), through files and judging `direct` (inputs staged by CUDA IPC, the
timed calls' outputs handed back by IPC and copied on receipt): an honest copy is correct and
timed with CUDA events (the judge recomputes the candidate's reflections bit for bit: no
input_mutated), a solution that caches its output by input tensor identity and one that
computes only while watched both fail with `timed_output_wrong`, though every watched run was
right, and one that caches by value never hits its cache (timed on its 25 ms of work)."""

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
@pytest.mark.parametrize("direct", [False, True])
def test_timed_calls_are_checked_on_unseen_sets(direct):
    from argus.bench.kernelbench.judge import JudgeOptions, ReferenceSession, judge_with
    from argus.bench.kernelbench.tasks import discover

    task = discover(KB, levels=[1], ids=[19])[0]
    options = JudgeOptions(device="cuda", overrides={"batch_size": 512, "dim": 65536},
                           baselines=False, profile=False, timeout_s=300, trials=100,
                           direct=direct)
    with ReferenceSession(task, options) as session:
        honest = judge_with(session, FIXTURES / "relu_copy.py")
        cheat = judge_with(session, FIXTURES / "cached_by_identity.py")
        sneaky = judge_with(session, FIXTURES / "honest_when_watched.py")
        by_value = judge_with(session, FIXTURES / "cached_by_value.py")
    assert honest.correct, (honest.reasons, honest.detail)
    assert by_value.correct, (by_value.reasons, by_value.detail)
    assert by_value.timing["median_ms"] >= 20.0, by_value.timing
    assert honest.timing and honest.timing["clock"] == "cuda-events+device-sync"
    assert "check of the timed calls" in honest.phases, honest.phases
    if direct:
        assert "# ipc fallbacks to files" not in honest.phases, honest.phases
    for j in (cheat, sneaky):
        assert all(s.strict_ok for s in j.sets), j.detail        # watched runs: right
        assert j.reason == "timed_output_wrong", (j.reasons, j.detail)
        assert "timed call" in j.detail and not j.correct_relaxed
        assert j.precision == "worse than bf16", j.precision
