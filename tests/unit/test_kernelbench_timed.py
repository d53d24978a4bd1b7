"""The judge's timed calls (judge.py `timing_sets`, `_check_timed`; worker.py
CandidateRole.time), on the CPU: which calls are checked, what data each call gets, and
what the judge holds while they run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from argus.bench.kernelbench import judge as judge_mod
from argus.bench.kernelbench.judge import JudgeOptions, ReferenceSession
from argus.bench.kernelbench.tasks import KernelBenchError, discover
from argus.bench.kernelbench.worker import CandidateRole

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))
needs_tasks = pytest.mark.skipif(not (KB_DIR / "level1").is_dir(),
                                 reason=f"KernelBench tasks not found at {KB_DIR}")


def _candidate(model: torch.nn.Module) -> CandidateRole:
    """A candidate role in this process around `model` (what `init` makes of a solution)."""
    role = CandidateRole()
    role.model = model
    role.device = torch.device("cpu")
    role.exported = []
    return role


def _time(role: CandidateRole, sets: list[list[torch.Tensor]], tmp_path: Path, **kw):
    path = tmp_path / "timing.pt"
    torch.save([v for s in sets for v in s], path)
    args = dict(trials=2, warmup=3, flush_l2=False, profile=False, inputs_path=str(path),
                sets=len(sets), out_path=str(tmp_path / "timed.pt"))
    args.update(kw)
    return role.time(**args)


def test_every_timing_set_has_a_checked_timed_call(tmp_path):
    """With two sets and two timed calls after three warm-up calls, one shuffle of all five
    calls left both timed calls on one set 40% of the time, and the other set's timed calls
    (none) were never checked. Warm-up and timed calls are shuffled apart now: each set has a
    timed call, and one of each is checked, every time (20 draws: 0.6**20 before)."""
    role = _candidate(torch.nn.ReLU())
    sets = [[torch.rand(64)], [torch.randn(64)]]
    for _ in range(20):
        reply = _time(role, sets, tmp_path)
        assert sorted(c["set"] for c in reply["checked"]) == [0, 1], reply["checked"]
        assert all(c["call"] >= 0 for c in reply["checked"])     # timed calls, not warm-up


def test_a_timing_whose_checked_calls_miss_a_set_is_wrong():
    """A reply that checked only set 0 of two (a harness that lost a set, or fewer timed
    calls than sets) is timed_output_wrong: before, a set with no checked call passed."""
    timed = {"checked": [{"set": 0, "call": 1}]}
    wrong = judge_mod._check_timed(None, None, timed, Path("unused.pt"), [object(), object()],
                                   [])
    assert wrong is not None and wrong[0] == {"timed_output_wrong"} == wrong[1], wrong
    assert "sets [0]" in wrong[2][0]


@needs_tasks
def test_fewer_trials_than_timing_sets_is_refused():
    task = discover(KB_DIR, levels=[1], ids=[19])[0]
    with pytest.raises(KernelBenchError, match="trials=1"):
        ReferenceSession(task, JudgeOptions(device="cpu", trials=1))
    ReferenceSession(task, JudgeOptions(device="cpu", trials=1, timing=False)).close()


@needs_tasks
def test_a_result_cached_by_value_never_serves_a_timed_call():
    """The reviewer's second hole: a cache keyed by the input's values (not its identity)
    returned the right answer for every timed call after the first call on each of the two
    timing sets, so its timing measured a lookup (median ~0.1 ms against 25 ms of work).
    Every call is reflected by a key of its own now: the cache never hits, every timed call
    does the work, and the solution stays correct (what it returns is right)."""
    from argus.bench.kernelbench.judge import judge_with
    from argus.bench.kernelbench.shrink import SizeBudget

    options = JudgeOptions(device="cpu", timeout_s=180, cpu_timing=True, trials=10, warmup=2,
                           cpu_budget=SizeBudget(elements=1 << 16, flops=5e7))
    with ReferenceSession(discover(KB_DIR, levels=[1], ids=[19])[0], options) as session:
        cheat = judge_with(session, FIXTURES / "cached_by_value.py")
        honest = judge_with(session, FIXTURES / "relu_copy.py")
    assert cheat.correct and honest.correct, (cheat.reasons, cheat.detail, honest.detail)
    assert cheat.timing is not None
    assert cheat.timing["median_ms"] >= 20.0, cheat.timing        # the work, every call
    assert "timed call" not in cheat.detail


BF16_WHEN_UNWATCHED = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        if torch._C._len_torch_dispatch_stack() > 0:
            return y
        return y.to(torch.bfloat16).to(x.dtype)     # unwatched (timed): bf16-accurate
"""


@needs_tasks
def test_the_precision_class_counts_the_timed_calls(tmp_path):
    """The precision class was computed from the watched runs alone: a solution right on them
    and wrong (or bf16-accurate) in its timed calls was reported 'fp32' beside the reasons
    timed_output_wrong (or imprecise). The timed calls' errors are classed too now."""
    from argus.bench.kernelbench.judge import judge_with
    from argus.bench.kernelbench.shrink import SizeBudget

    solution = tmp_path / "bf16_unwatched.py"
    solution.write_text(BF16_WHEN_UNWATCHED)
    options = JudgeOptions(device="cpu", timeout_s=180, cpu_timing=True, trials=10, warmup=1,
                           cpu_budget=SizeBudget(elements=1 << 16, flops=5e7))
    with ReferenceSession(discover(KB_DIR, levels=[1], ids=[19])[0], options) as session:
        zeros = judge_with(session, FIXTURES / "honest_when_watched.py")
        bf16 = judge_with(session, solution)
    assert all(s.strict_ok for s in zeros.sets + bf16.sets)       # watched runs: right
    assert zeros.reason == "timed_output_wrong" and not zeros.solved
    assert zeros.precision == "worse than bf16", zeros.precision
    assert bf16.reasons == ("imprecise",) and bf16.correct_relaxed, (bf16.reasons, bf16.detail)
    assert not bf16.solved and bf16.precision == "bf16", bf16.precision


BF16_ALWAYS = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).to(torch.bfloat16).to(x.dtype)    # bf16-accurate everywhere
"""

OFF_BY_ONE = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1.0
"""


@needs_tasks
def test_a_relaxed_pass_is_timed_and_a_wrong_answer_is_not(tmp_path):
    """The relaxed track's speed bar needs the speed of a pass whose only strict failure is
    its precision (an fp32 task as a tf32 product): the judge times it (the strict geomeans
    still count strict passes only: summary.level_rows). A wrong answer is never timed."""
    from argus.bench.kernelbench.judge import judge_with
    from argus.bench.kernelbench.shrink import SizeBudget

    (tmp_path / "bf16.py").write_text(BF16_ALWAYS)
    (tmp_path / "wrong.py").write_text(OFF_BY_ONE)
    options = JudgeOptions(device="cpu", timeout_s=180, cpu_timing=True, trials=10, warmup=1,
                           cpu_budget=SizeBudget(elements=1 << 16, flops=5e7))
    with ReferenceSession(discover(KB_DIR, levels=[1], ids=[19])[0], options) as session:
        bf16 = judge_with(session, tmp_path / "bf16.py")
        wrong = judge_with(session, tmp_path / "wrong.py")
    assert bf16.reasons == ("imprecise",) and bf16.correct_relaxed, (bf16.reasons, bf16.detail)
    assert bf16.timing is not None and bf16.timing["median_ms"] > 0
    assert not wrong.correct_relaxed and wrong.timing is None
