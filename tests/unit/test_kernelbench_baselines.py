"""KernelBench baselines: the cache, the parallel suite (on the CPU, with toy tasks, so that
the scheduling, time budget and reporting run in CI) and the GPU script's refusal without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argus.bench.kernelbench.baseline_suite import SuiteOptions, markdown, run_baselines
from argus.bench.kernelbench.baselines import BaselineCache, BaselineRecord, Environment
from argus.bench.kernelbench.tasks import discover

REPO = Path(__file__).resolve().parents[2]

TOY = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x) * {k}
n = 4096
def get_inputs():
    return [torch.rand(n)]
def get_init_inputs():
    return []
"""


@pytest.fixture()
def toy_tasks(tmp_path):
    folder = tmp_path / "kb" / "level1"
    folder.mkdir(parents=True)
    for k in (1, 2, 3):
        (folder / f"{k}_Toy{k}.py").write_text(TOY.format(k=k))
    folder.joinpath("4_Broken.py").write_text("import torch\nclass Model:\n    pass\n"
                                              "def get_inputs():\n    return []\n"
                                              "def get_init_inputs():\n    return [1]\n")
    return discover(tmp_path / "kb")


def test_cache_key_includes_card_software_and_task(tmp_path):
    cache = BaselineCache(tmp_path / "c.json")
    env = Environment("NVIDIA H200", "2.11.0", "12.8")
    rec = BaselineRecord("L1/1", "a" * 64, env, {"median_ms": 1.0}, {"median_ms": 0.5}, 12.0)
    cache.put(rec)
    again = BaselineCache(tmp_path / "c.json")
    assert again.get(env, "a" * 64).compile_ms == 0.5
    assert again.get(Environment("NVIDIA H100", "2.11.0", "12.8"), "a" * 64) is None
    assert again.get(Environment("NVIDIA H200", "2.12.0", "12.8"), "a" * 64) is None
    assert again.get(env, "b" * 64) is None
    assert json.loads((tmp_path / "c.json").read_text())


def test_parallel_suite_on_cpu_records_every_task(toy_tasks, tmp_path):
    options = SuiteOptions(jobs=2, budget_s=120, trials=5, warmup=1, device="cpu",
                           compile=False, min_start_s=1)
    cache = BaselineCache(tmp_path / "cache.json")
    t0 = time.monotonic()
    outcomes, env = run_baselines(toy_tasks, options, log_dir=tmp_path / "logs", cache=cache,
                                  progress=None)
    by_key = {o.task.key: o for o in outcomes}
    assert [o.task.key for o in outcomes] == ["L1/1", "L1/2", "L1/3", "L1/4"]
    for key in ("L1/1", "L1/2", "L1/3"):
        assert by_key[key].status == "done" and by_key[key].eager["clock"] == "cpu-perf-counter"
    assert by_key["L1/4"].status == "error" and by_key["L1/4"].error
    assert len(cache.records()) == 3
    text = markdown(outcomes, env, options, time.monotonic() - t0)
    assert "| L1/1 | Toy1 |" in text and "## Not finished" in text and "L1/4 Broken" in text


def test_a_second_suite_measures_only_what_the_cache_lacks(toy_tasks, tmp_path):
    """The baselines of a device call are carried to the next (keyed by card, torch and
    task text): a repeated run takes cached tasks from the cache, measures the rest."""
    options = SuiteOptions(jobs=1, budget_s=120, trials=5, warmup=1, device="cpu",
                           compile=False, min_start_s=1)
    cache = BaselineCache(tmp_path / "cache.json")
    run_baselines(toy_tasks[:2], options, log_dir=tmp_path / "a", cache=cache, progress=None)
    first = {r.task_key: r.measured_at for r in cache.records()}
    assert set(first) == {"L1/1", "L1/2"}
    outcomes, env = run_baselines(toy_tasks[:3], options, log_dir=tmp_path / "b",
                                  cache=BaselineCache(tmp_path / "cache.json"), progress=None)
    by_key = {o.task.key: o for o in outcomes}
    assert by_key["L1/1"].status == by_key["L1/2"].status == "cached"
    assert by_key["L1/1"].eager["median_ms"] > 0
    assert by_key["L1/3"].status == "done"
    again = {r.task_key: r.measured_at for r in BaselineCache(tmp_path / "cache.json").records()}
    assert again["L1/1"] == first["L1/1"] and "L1/3" in again      # not measured again
    assert "3 with both numbers" in markdown(outcomes, env, options, 1.0)


def test_suite_stops_at_its_budget(toy_tasks, tmp_path):
    options = SuiteOptions(jobs=1, budget_s=0.5, trials=5, warmup=1, device="cpu",
                           compile=False, min_start_s=5)
    t0 = time.monotonic()
    outcomes, _ = run_baselines(toy_tasks, options, log_dir=tmp_path, progress=None)
    assert time.monotonic() - t0 < 30
    assert {o.status for o in outcomes} == {"budget"}


def test_gpu_script_refuses_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run for minutes")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_kernelbench_baselines.py"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr


def test_gpu_script_end_to_end_as_a_cpu_smoke_test(toy_tasks, tmp_path):
    root = toy_tasks[0].path.parent.parent
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_kernelbench_baselines.py"),
                           "--out", str(out), "--root", str(root), "--levels", "1", "--device", "cpu",
                           "--no-compile", "--trials", "5", "--warmup", "1", "--jobs", "2",
                           "--budget-s", "120"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "kernelbench-baselines.json").read_text())
    assert data["counts"] == {"done": 3, "error": 1} and len(data["tasks"]) == 4
    table = (out / "kernelbench-baselines.md").read_text()
    assert "| L1/3 | Toy3 |" in table and "## Not finished" in table
    assert json.loads((out / "baselines-cache.json").read_text())
    assert "L1/2 Toy2: done" in (out / "progress.log").read_text()


# ------------------------------------------------------------------ eager with TF32 off
# A task whose output (and speed) depends on the TF32 switches, as an fp32 convolution's does
# on a GPU: on the CPU the switches change nothing in PyTorch, so the toy reads them itself.
TF32_TOY = """import time
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        if torch.backends.cudnn.allow_tf32:
            return torch.relu(x)
        time.sleep(0.004)              # the fp32-accurate path: slower, and other bits
        return torch.relu(x) * 2
n = 4096
def get_inputs():
    return [torch.rand(n)]
def get_init_inputs():
    return []
"""


@pytest.fixture()
def tf32_tasks(tmp_path):
    folder = tmp_path / "kbt" / "level1"
    folder.mkdir(parents=True)
    folder.joinpath("1_Toy1.py").write_text(TOY.format(k=1))
    folder.joinpath("2_Tf32Toy.py").write_text(TF32_TOY)
    return discover(tmp_path / "kbt")


def test_eager_tf32_off_is_timed_where_tf32_changes_the_output_and_cached(tf32_tasks,
                                                                          tmp_path):
    from argus.bench.kernelbench.baselines import get_or_measure, measure_baseline

    plain, sensitive = tf32_tasks
    cache = BaselineCache(tmp_path / "c.json")
    for task in tf32_tasks:
        cache.put(measure_baseline(task, device="cpu", trials=5, warmup=1,
                                   modes=("eager", "eager_notf32"), log_dir=tmp_path / "logs"))
    again = BaselineCache(tmp_path / "c.json")
    env = Environment.current("cpu")
    rec = again.get(env, sensitive.sha256)
    # timed with both switches off (the toy sleeps only then), eager with them at default
    assert rec.eager_notf32["median_ms"] > 3.0 > rec.eager_ms
    assert rec.eager_notf32_ms == rec.eager_notf32["median_ms"]
    # no output bit changes: eager's own number stands for it, marked, not timed again
    same = again.get(env, plain.sha256)
    assert "same_as_eager" in same.eager_notf32 and "median_ms" not in same.eager_notf32
    assert same.eager_notf32_ms == same.eager_ms
    # a complete record is a hit: nothing measured (measure_baseline would need a GPU worker
    # with compile here; the record comes back as cached)
    hit = get_or_measure(sensitive, again, device="cpu", trials=5, warmup=1)
    assert hit == rec


def test_a_cache_from_before_eager_tf32_off_loads_and_measures_only_that(tf32_tasks, tmp_path):
    """Records written before the field existed load (eager_notf32 None); the judge's
    get_or_measure and the suite then time eager with TF32 off alone, keep the cached eager
    and torch.compile numbers, and write the completed record back."""
    from argus.bench.kernelbench.baselines import cache_key, get_or_measure

    plain, sensitive = tf32_tasks
    env = Environment.current("cpu")
    old = {}
    for task in tf32_tasks:
        rec = BaselineRecord(task.key, task.sha256, env, {"median_ms": 123.0},
                             {"median_ms": 45.0}, 9.0, measured_at=1.0)
        data = rec.to_json()
        del data["eager_notf32"]                  # the old format
        old[cache_key(env, task.sha256)] = data
    (tmp_path / "old.json").write_text(json.dumps(old))
    cache = BaselineCache(tmp_path / "old.json")
    loaded = cache.get(env, sensitive.sha256)
    assert loaded.eager_ms == 123.0 and loaded.eager_notf32 is None
    assert loaded.eager_notf32_ms is None

    got = get_or_measure(sensitive, cache, device="cpu", trials=5, warmup=1,
                         log_dir=tmp_path / "logs")
    assert (got.eager_ms, got.compile_ms, got.measured_at) == (123.0, 45.0, 1.0)
    assert got.eager_notf32["median_ms"] > 3.0
    assert BaselineCache(tmp_path / "old.json").get(env, sensitive.sha256) == got

    # the suite (the `baselines` verb and the solve run's baselines-first path: _one_task)
    options = SuiteOptions(jobs=1, budget_s=120, trials=5, warmup=1, device="cpu",
                           compile=True, min_start_s=1)
    outcomes, _ = run_baselines([plain], options, log_dir=tmp_path / "suite",
                                cache=BaselineCache(tmp_path / "old.json"), progress=None)
    (o,) = outcomes
    assert o.status == "done" and o.eager == {"median_ms": 123.0}
    assert o.compile == {"median_ms": 45.0} and "same_as_eager" in o.eager_notf32
    rec = BaselineCache(tmp_path / "old.json").get(env, plain.sha256)
    assert rec.compile_ms == 45.0 and rec.eager_notf32_ms == 123.0
    assert "| = eager |" in markdown(outcomes, env, options, 1.0)


def test_eager_tf32_off_restores_the_switches(tf32_tasks):
    """The baseline role times eager with TF32 off in its own process and puts both switches
    back as they were, also when they were not PyTorch's defaults."""
    import torch

    from argus.bench.kernelbench.worker import BaselineRole

    sensitive = tf32_tasks[1]
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        for flags in ((True, True), (False, True)):
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
            reply = BaselineRole().measure(str(sensitive.path), "cpu", 0, ["eager_notf32"],
                                           trials=5, warmup=1)
            assert reply["eager_notf32"]["median_ms"] > 3.0
            assert (torch.backends.cuda.matmul.allow_tf32,
                    torch.backends.cudnn.allow_tf32) == flags
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_a_cached_record_keeps_its_compile_numbers_when_eager_tf32_off_times_out(
        tf32_tasks, tmp_path, monkeypatch):
    """A record cached before eager-TF32-off whose new timing times out (the worker is
    killed): the suite writes it back with its cached torch.compile numbers (eager_notf32 still
    missing, so the next run tries again), and the error names the step that failed."""
    import types

    from argus.bench.kernelbench import baseline_suite
    from argus.bench.kernelbench.process import WorkerError

    class TimesOut:
        def __init__(self, *args, **kwargs):
            self.proc = types.SimpleNamespace(poll=lambda: None)

        def request(self, command, timeout, **kwargs):
            if command == "eager_notf32":
                raise WorkerError("timeout", "eager_notf32 ran past its limit")
            assert command == "load", command    # eager and compile come from the cache
            return {"flags": {}}

        def close(self):
            pass

    monkeypatch.setattr(baseline_suite, "Worker", TimesOut)
    plain = tf32_tasks[0]
    env = Environment.current("cpu")
    cache = BaselineCache(tmp_path / "old.json")
    cache.put(BaselineRecord(plain.key, plain.sha256, env, {"median_ms": 123.0},
                             {"median_ms": 45.0}, 9.0, measured_at=1.0))
    options = SuiteOptions(jobs=1, budget_s=60, trials=5, warmup=1, device="cpu",
                           compile=True, min_start_s=1)
    outcomes, _ = run_baselines([plain], options, log_dir=tmp_path / "suite",
                                cache=BaselineCache(tmp_path / "old.json"), progress=None)
    (o,) = outcomes
    assert o.error.startswith("eager TF32 off: timeout"), o.error
    rec = BaselineCache(tmp_path / "old.json").get(env, plain.sha256)
    assert (rec.eager_ms, rec.compile_ms, rec.compile_s) == (123.0, 45.0, 9.0)
    assert rec.eager_notf32 is None
