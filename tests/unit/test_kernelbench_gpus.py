"""KernelBench on every GPU of a host (gpus.py), on the CPU with fake GPUs: each "GPU" is a real
worker process started by the pool with CUDA_VISIBLE_DEVICES set to a fake entry ("f0", "f1",
...), running parallel.py's slots and GPU gate; only the judging of a task is a fake
(`fake_judge`, plugged in through ParallelOptions.judge_hook), which follows instructions
written in the solution file (sleep, take the gate's exclusive side as a timing does, kill its
own worker) and logs what it did, where. One test runs the real judge through the pool.

What is checked: `--gpus N|all` resolution; tasks go to idle GPUs; a dead worker is a recorded
GPU failure, its task judged again elsewhere and no finished task lost or judged twice; a task
that kills every worker it runs on is given up, not allowed to take all GPUs down; timings
never overlap on one GPU (but do across GPUs); results land in one results.jsonl, a rerun
resumes; 1 and N workers (and the in-process path) give identical judgments."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from argus.bench.kernelbench.gpus import GpuPool, PoolOptions, resolve_gpus
from argus.bench.kernelbench.tasks import KernelBenchError, Task

HOOK = "tests.unit.test_kernelbench_gpus:fake_judge"


# --------------------------------------------------------------------------- the fake judge
def fake_judge(task, path, options, slot):
    """Judge `task` by the instructions in its solution file (JSON): sleep `work` seconds
    (`first_work` the first time), then `timing` seconds inside the GPU gate's exclusive side; `crash`: "once" kills this
    worker the first time (a marker file remembers), "always" every time. Each judging
    appends one event (task, GPU, pid, times) to events.jsonl beside the solutions folder."""
    from argus.bench.kernelbench.judge import Judgment
    from argus.bench.kernelbench.runner import missing_judgment
    from argus.runtime.gpu_gate import GpuGate

    spec = json.loads(Path(path).read_text())
    root = Path(path).parent.parent.parent
    marker = root / f"crashed-{task.problem_id}"
    if spec.get("crash") == "always" or spec.get("crash") == "once" and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)        # the GPU worker dies mid-task
    t0 = time.time()
    first = root / f"started-{task.problem_id}"
    again = first.exists()
    first.touch()
    time.sleep(spec.get("work", 0.0) if again else spec.get("first_work", spec.get("work", 0.0)))
    timing = None
    if spec.get("timing"):
        with GpuGate().exclusive():
            a = time.time()
            time.sleep(spec["timing"])
            timing = (a, time.time())
    event = {"task": task.key, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(),
             "start": t0, "end": time.time(), "timing": timing}
    with open(root / "events.jsonl", "a") as fh:
        fh.write(json.dumps(event) + "\n")
    base = missing_judgment(task, options.device).to_json()
    ok = bool(spec.get("correct", True))
    return Judgment.from_json({**base, "solution": str(path), "correct": ok,
                               "correct_relaxed": ok,
                               "reasons": [] if ok else ["runtime_error"],
                               "relaxed_reasons": [] if ok else ["runtime_error"],
                               "detail": f"fake judgment of {spec}", "precision": "fp32"})


def _tasks(root: Path, specs: list[dict]) -> tuple[list[Task], Path]:
    """Task files 1..n and solutions with the fake judge's instructions."""
    (root / "tasks" / "level1").mkdir(parents=True)
    (root / "solutions" / "level1").mkdir(parents=True)
    tasks = []
    for i, spec in enumerate(specs, 1):
        path = root / "tasks" / "level1" / f"{i}_Fake.py"
        path.write_text(f"# fake task {i}\n")
        (root / "solutions" / "level1" / path.name).write_text(json.dumps(spec))
        tasks.append(Task(1, i, f"{i}_Fake", path,
                          hashlib.sha256(path.read_bytes()).hexdigest()))
    return tasks, root / "solutions"


def _run(tasks, sols, out, gpus=(), jobs=1, **kw):
    from argus.bench.kernelbench.judge import JudgeOptions
    from argus.bench.kernelbench.parallel import ParallelOptions, run_parallel

    return run_parallel(tasks, sols, out, JudgeOptions(device="cpu", workdir=str(out) + "-work"),
                        ParallelOptions(jobs=jobs, gpus=tuple(gpus), judge_hook=HOOK, **kw),
                        progress=None)


def _events(root: Path) -> list[dict]:
    path = root / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def _meta(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())["meta"]


# ------------------------------------------------------------------------------ resolution
def test_gpus_resolve_to_the_visible_cards_in_order():
    assert resolve_gpus(None, count=lambda: 8) == ()
    assert resolve_gpus("all", visible=None, count=lambda: 3) == ("0", "1", "2")
    assert resolve_gpus("2", visible=None, count=lambda: 3) == ("0", "1")
    assert resolve_gpus(1, visible="5,3,GPU-abc", count=lambda: 3) == ("5",)
    assert resolve_gpus("ALL", visible="5,3,GPU-abc", count=lambda: 3) == ("5", "3", "GPU-abc")
    assert resolve_gpus("all", visible="4,6", count=lambda: 1) == ("4",)  # what CUDA sees
    with pytest.raises(KernelBenchError, match="sees 2 GPU"):
        resolve_gpus("3", visible=None, count=lambda: 2)
    with pytest.raises(KernelBenchError, match="no GPU is visible"):
        resolve_gpus("1", visible=None, count=lambda: 0)
    with pytest.raises(KernelBenchError, match="neither a number nor all"):
        resolve_gpus("some", visible=None, count=lambda: 2)
    with pytest.raises(KernelBenchError, match="once"):
        GpuPool(("0", "0"), HOOK, lambda g, i: None, "/tmp/unused")


def test_device_cuda_n_and_gpus_are_refused_together():
    from argus.bench.kernelbench.gpus import check_device

    check_device("cuda", ("0", "1"))
    check_device("cuda:1", ())
    with pytest.raises(KernelBenchError, match="--device cuda:1 with --gpus"):
        check_device("cuda:1", ("0", "1"))


# ------------------------------------------------------------------------------ scheduling
def test_tasks_go_to_idle_gpus_and_each_worker_sees_only_its_gpu(tmp_path):
    """Task 1 takes 5 s, the five others 0.2 s each, on 2 GPUs of one slot each: the GPU busy
    with task 1 gets at most one other (the workers start a second or so apart), the idle one
    the rest; every task is judged once, by a worker that saw its own GPU alone."""
    specs = [{"work": 5.0}] + [{"work": 0.2}] * 5
    tasks, sols = _tasks(tmp_path, specs)
    out = tmp_path / "out"
    run = _run(tasks, sols, out, gpus=("f0", "f1"))
    assert len(run.judgments) == 6 and all(j.correct for j in run.judgments)
    events = _events(tmp_path)
    assert sorted(e["task"] for e in events) == sorted(t.key for t in tasks)
    lines = _lines(out)
    assert sorted(x["task"] for x in lines) == sorted(t.key for t in tasks)
    by_task = {e["task"]: e for e in events}
    for line in lines:                       # the pool's record names the GPU that judged it
        assert line["gpu"] == by_task[line["task"]]["gpu"]
    pids = {}
    for e in events:
        pids.setdefault(e["pid"], set()).add(e["gpu"])
    assert len(pids) == 2 and all(len(g) == 1 for g in pids.values())   # one GPU per worker
    long_gpu = by_task["L1/1"]["gpu"]
    on_long = [e for e in events if e["gpu"] == long_gpu]
    assert len(on_long) <= 2, on_long
    assert _meta(out)["tasks_per_gpu"] == {g: sum(e["gpu"] == g for e in events)
                                           for g in ("f0", "f1")}


def test_one_timing_at_a_time_per_gpu_and_timings_on_several_gpus_at_once(tmp_path):
    specs = [{"work": 0.05, "timing": 0.25}] * 10
    tasks, sols = _tasks(tmp_path, specs)
    _run(tasks, sols, tmp_path / "out", gpus=("f0", "f1"), jobs=3)
    events = _events(tmp_path)
    assert len(events) == 10
    spans = {g: sorted(tuple(e["timing"]) for e in events if e["gpu"] == g)
             for g in ("f0", "f1")}
    assert all(spans.values()), spans
    for g, ss in spans.items():
        for (a0, a1), (b0, b1) in zip(ss, ss[1:]):
            assert b0 >= a1 - 1e-3, f"two timings overlap on GPU {g}: {ss}"
    across = any(a0 < b1 and b0 < a1 for a0, a1 in spans["f0"] for b0, b1 in spans["f1"])
    assert across, spans                     # the gate is per GPU, not one for the host


# --------------------------------------------------------------------------------- failures
def test_a_dead_worker_is_a_recorded_gpu_failure_and_its_task_is_judged_again(tmp_path):
    """One GPU (the path of --gpus 1), one slot: tasks 1 and 2 are judged, task 3 kills the
    worker once. The failure is in the report's meta, task 3 is judged by the restarted
    worker, tasks 1 and 2 are neither lost nor judged again."""
    specs = [{"work": 0.1}, {"work": 0.1}, {"work": 0.1, "crash": "once"}, {"work": 0.1}]
    tasks, sols = _tasks(tmp_path, specs)
    out = tmp_path / "out"
    run = _run(tasks, sols, out, gpus=("f0",))
    assert [j.task for j in run.judgments] == ["L1/1", "L1/2", "L1/3", "L1/4"]
    assert all(j.correct for j in run.judgments)
    events = _events(tmp_path)
    assert sorted(e["task"] for e in events) == ["L1/1", "L1/2", "L1/3", "L1/4"]  # once each
    assert len({e["pid"] for e in events}) == 2                  # a new worker after the crash
    assert sorted(x["task"] for x in _lines(out)) == ["L1/1", "L1/2", "L1/3", "L1/4"]
    failures = _meta(out)["gpu_failures"]
    assert len(failures) == 1
    assert failures[0]["gpu"] == "f0" and "SIGKILL" in failures[0]["why"]
    assert failures[0]["requeued"] == ["L1/3"] and not failures[0]["retired"]


def test_a_task_that_kills_every_worker_is_given_up_and_the_others_are_judged(tmp_path):
    specs = [{"work": 0.1}, {"crash": "always"}, {"work": 0.1}, {"work": 0.1}]
    tasks, sols = _tasks(tmp_path, specs)
    out = tmp_path / "out"
    run = _run(tasks, sols, out, gpus=("f0", "f1"))
    by = {j.task: j for j in run.judgments}
    assert by["L1/2"].reason == "task_error" and "died" in by["L1/2"].detail
    assert all(by[k].correct for k in ("L1/1", "L1/3", "L1/4"))
    failures = _meta(out)["gpu_failures"]
    assert len(failures) == 2                     # two workers, then it was given up
    assert [f["given_up"] for f in failures] == [[], ["L1/2"]]
    assert sorted(x["task"] for x in _lines(out)) == ["L1/1", "L1/2", "L1/3", "L1/4"]


def test_a_gpu_whose_worker_keeps_dying_is_retired_and_its_work_left_for_a_resume(tmp_path):
    """A runner that dies at once on GPU f1: f1 is retired after its restarts, f0 does all the
    work. With f0 failing too, nothing is judged and every job is left, none lost."""
    import sys

    jobs = [(f"j{i}", i) for i in range(5)]
    done: dict[str, str] = {}
    pool = GpuPool(("f0", "f1"), "tests.unit.test_kernelbench_gpus:square_runner",
                   lambda gpu, i: {"die_on": ("f1",)}, tmp_path / "pool",
                   PoolOptions(slots=2, restarts=1), say=lambda t: print(t, file=sys.stderr))
    result = pool.run(jobs, lambda j, rec, gpu: done.setdefault(j, (rec["square"], gpu)),
                      lambda j, why: pytest.fail(f"{j} given up: {why}"))
    assert done == {f"j{i}": (i * i, "f0") for i in range(5)}
    assert result.left == ()
    assert [f.gpu for f in result.failures] == ["f1", "f1"]
    assert [f.retired for f in result.failures] == [False, True]
    pool = GpuPool(("f0", "f1"), "tests.unit.test_kernelbench_gpus:square_runner",
                   lambda gpu, i: {"die_on": ("f0", "f1")}, tmp_path / "pool2",
                   PoolOptions(slots=2, restarts=0))
    result = pool.run(jobs, lambda *a: pytest.fail("nothing can be done"),
                      lambda j, why: None)
    assert sorted(result.left) == [j for j, _ in jobs]
    assert all(f.retired for f in result.failures) and len(result.failures) == 2


def square_runner(config, feed, done, say):
    """A runner for GpuPool alone: squares numbers; dies at once on the GPUs of `die_on`."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in config["die_on"]:
        os.kill(os.getpid(), signal.SIGKILL)
    while (n := feed.get()) is not None:
        done(f"j{n}", {"square": n * n})


# ----------------------------------------------------------------------- merging, resuming
def test_one_and_several_gpus_judge_alike_into_one_resumable_store(tmp_path):
    specs = [{"work": 0.1}, {"work": 0.1, "correct": False}, {"work": 0.2}, {"work": 0.05},
             {"work": 0.1, "correct": False}]
    tasks, sols = _tasks(tmp_path, specs)
    here = _run(tasks, sols, tmp_path / "here", jobs=2)               # in this process
    one = _run(tasks, sols, tmp_path / "one", gpus=("f0",), jobs=2)
    three = _run(tasks, sols, tmp_path / "three", gpus=("f0", "f1", "f2"))
    as_json = [[j.to_json() for j in r.judgments] for r in (here, one, three)]
    assert as_json[0] == as_json[1] == as_json[2]
    assert [j.correct for j in three.judgments] == [True, False, True, True, False]
    lines = _lines(tmp_path / "three")
    assert sorted(x["task"] for x in lines) == [t.key for t in tasks]
    assert {x["gpu"] for x in lines} <= {"f0", "f1", "f2"}
    judged = len(_events(tmp_path))
    again = _run(tasks, sols, tmp_path / "three", gpus=("f0", "f1", "f2"))
    assert set(again.resumed) == {t.key for t in tasks}
    assert len(_events(tmp_path)) == judged                            # nothing judged again
    assert len(_lines(tmp_path / "three")) == len(tasks)
    assert [j.to_json() for j in again.judgments] == as_json[0]


@pytest.mark.slow
def test_a_budget_stops_the_pool_and_a_resumed_run_judges_only_what_is_left(tmp_path):
    """One GPU, one slot, a 20 s budget: task 1 is judged, task 2 would take 60 s the first
    time (so it runs into the budget and is stopped), task 3 never starts. Only task 1 is
    recorded; the resumed run judges tasks 2 and 3 and not task 1 again."""
    specs = [{"work": 0.1}, {"work": 0.1, "first_work": 60.0}, {"work": 0.1}]
    tasks, sols = _tasks(tmp_path, specs)
    out = tmp_path / "out"
    t0 = time.monotonic()
    first = _run(tasks, sols, out, gpus=("f0",), budget_s=20.0, min_start_s=0.0)
    assert time.monotonic() - t0 < 20.0 + 15.0       # stopped at the budget (and its grace)
    assert [j.task for j in first.judgments] == ["L1/1"]
    assert [x["task"] for x in _lines(out)] == ["L1/1"]
    assert _meta(out)["not_judged"] == ["L1/2", "L1/3"]
    rest = _run(tasks, sols, out, gpus=("f0",))
    assert rest.resumed == ("L1/1",) and len(rest.judgments) == 3
    assert sorted(e["task"] for e in _events(tmp_path)) == ["L1/1", "L1/2", "L1/3"]


# ------------------------------------------------------------------------- the real judge
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR",
                             Path(__file__).resolve().parents[3] / "shared" / "kernelbench"))


@pytest.mark.slow
@pytest.mark.skipif(not (KB_DIR / "level1").is_dir(), reason=f"no KernelBench at {KB_DIR}")
def test_the_real_judge_through_two_gpu_workers_agrees_with_the_serial_run(tmp_path):
    pytest.importorskip("torch")
    from argus.bench.kernelbench.judge import JudgeOptions
    from argus.bench.kernelbench.parallel import ParallelOptions, run_parallel
    from argus.bench.kernelbench.runner import run_suite
    from argus.bench.kernelbench.shrink import SizeBudget
    from argus.bench.kernelbench.tasks import discover

    tasks = discover(KB_DIR, levels=[1], ids=[19, 24])
    sols = tmp_path / "solutions" / "level1"
    sols.mkdir(parents=True)
    relu = tasks[0].path.read_text() + "\nclass ModelNew(Model):\n    pass\n"
    (sols / tasks[0].path.name).write_text(relu)
    (sols / tasks[1].path.name).write_text(tasks[1].path.read_text()
                                          + "\nclass ModelNew(Model):\n"
                                            "    def forward(self, x):\n"
                                            "        return torch.zeros_like(x)\n")
    options = JudgeOptions(device="cpu", timeout_s=180,
                           cpu_budget=SizeBudget(elements=1 << 16, flops=2e7))
    serial = run_suite(tasks, sols.parent, tmp_path / "serial", options, progress=None,
                       write_reports=False)
    pooled = run_parallel(tasks, sols.parent, tmp_path / "pooled", options,
                          ParallelOptions(jobs=1, gpus=("f0", "f1")), progress=None)
    for s, p in zip(serial.judgments, pooled.judgments):
        assert (p.task, p.correct, p.correct_relaxed, p.reasons) == \
            (s.task, s.correct, s.correct_relaxed, s.reasons)
        assert [x.errors for x in p.sets] == [x.errors for x in s.sets], p.task
    assert pooled.judgments[0].correct and pooled.judgments[1].reason == "zeros_output"
    assert {x["gpu"] for x in _lines(tmp_path / "pooled")} <= {"f0", "f1"}


# ------------------------------------------------------------------------ the command line
def test_gpus_is_an_option_of_run_solve_and_baselines_and_reaches_the_runner(monkeypatch):
    from argus.bench.kernelbench import cli, gpus

    parser = cli.build_parser()
    for verb in (["run", "--solutions", "s"], ["solve"], ["baselines"]):
        args = parser.parse_args(["kernelbench", *verb, "--gpus", "all"])
        assert args.gpus == "all"
    assert parser.parse_args(["kernelbench", "run", "--solutions", "s"]).gpus is None
    monkeypatch.setattr(gpus, "resolve_gpus", lambda spec: ("f0", "f1") if spec else ())
    args = parser.parse_args(["kernelbench", "run", "--solutions", "s", "--gpus", "2",
                              "--jobs", "3"])
    runner = cli._runner(args, cli._options(args), "run")
    assert runner.keywords["parallel"].gpus == ("f0", "f1")
    assert runner.keywords["parallel"].jobs == 3
    args = parser.parse_args(["kernelbench", "run", "--solutions", "s"])
    assert cli._runner(args, cli._options(args), "run") is None     # the serial runner


def test_gpus_without_a_gpu_is_a_usage_error_that_says_what_to_do(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.device_count():
        pytest.skip("this machine has a GPU")
    from argus.bench.kernelbench import cli

    tasks, sols = _tasks(tmp_path, [{"work": 0.0}])
    code = cli.entry(["kernelbench", "run", "--root", str(tmp_path / "tasks"), "--level", "1",
                      "--solutions", str(sols), "--out", str(tmp_path / "out"),
                      "--gpus", "1"])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--gpus 1: no GPU is visible" in err and "fix:" in err
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_optimize_takes_one_gpu_and_refuses_several(monkeypatch, capsys):
    import argparse

    from argus.agent import cli as agent_cli
    from argus.bench.kernelbench import gpus

    parser = argparse.ArgumentParser()
    agent_cli.register(parser.add_subparsers())
    assert parser.parse_args(["optimize", "t.py", "--gpus", "1"]).gpus == "1"
    monkeypatch.setattr(gpus, "resolve_gpus", lambda spec: ("3", "5")[:int(spec)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert agent_cli._pin_gpus("2") == 2
    assert "one candidate at a time" in capsys.readouterr().err
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,5"
    assert agent_cli._pin_gpus("1") == 0
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


# ------------------------------------------------------------------------------- baselines
TINY_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * {scale}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_baselines_on_two_gpu_workers_measure_every_task_into_one_cache(tmp_path):
    """`baselines --gpus`: the eager times of two tiny tasks measured by two workers (CPU
    clock here; torch.compile off), every task once, the cache written by this process only,
    and a second call takes both from the cache without starting a measurement."""
    pytest.importorskip("torch")
    from argus.bench.kernelbench.baseline_suite import SuiteOptions
    from argus.bench.kernelbench.baselines import BaselineCache, Environment
    from argus.bench.kernelbench.gpus import baselines_on_gpus

    (tmp_path / "level1").mkdir()
    tasks = []
    for i in (1, 2):
        path = tmp_path / "level1" / f"{i}_Tiny.py"
        path.write_text(TINY_TASK.format(scale=i))
        tasks.append(Task(1, i, f"{i}_Tiny", path, hashlib.sha256(path.read_bytes()).hexdigest()))
    options = SuiteOptions(jobs=1, budget_s=300, task_timeout_s=120, trials=3, warmup=1,
                           compile=False, device="cpu", min_start_s=0.0)
    cache = BaselineCache(tmp_path / "cache.json")
    outcomes, env = baselines_on_gpus(tasks, options, ("f0", "f1"), cache=cache,
                                      log_dir=tmp_path / "logs")
    assert [o.status for o in outcomes] == ["done", "done"], [o.error for o in outcomes]
    assert all(o.eager["median_ms"] > 0 for o in outcomes)
    fresh = BaselineCache(tmp_path / "cache.json")          # what the file holds
    for t in tasks:
        assert fresh.get(Environment.current("cpu"), t.sha256).eager_ms is not None
    again, _ = baselines_on_gpus(tasks, options, ("f0", "f1"), cache=fresh,
                                 log_dir=tmp_path / "logs2")
    assert [o.status for o in again] == ["cached", "cached"]
    assert not list((tmp_path / "logs2").glob("gpu*.log"))    # no worker was started
