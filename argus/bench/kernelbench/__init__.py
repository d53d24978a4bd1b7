"""KernelBench for Argus: find tasks, judge solutions so that cheating does not pay, report.

    from argus.bench import kernelbench as kb
    tasks = kb.discover(levels=[1], ids=[19, 23])          # ../shared/kernelbench by default
    j = kb.judge(tasks[0], "my_solution.py")                # one Judgment
    print(j.summary(), j.reasons)
    run = kb.run_suite(tasks, solutions="solutions/", out_dir="runs/today")  # resumable
    kb.write_reports(run.judgments, "runs/today")           # markdown, JSON, plot

Modules, one job each: tasks (discovery, loading), shrink (CPU sizes), inputs (input sets),
tolerance (error measures and tracks), probes (trivial answers), guards (in-process checks),
provenance (Argus kernels or PyTorch), worker / process (isolated subprocesses), judge,
baselines (eager / torch.compile, cached), roofline, runner (suites, resume), report, cli.

Attributes are imported lazily so that `argus --help` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Task": "tasks", "discover": "tasks", "default_root": "tasks", "task_from_path": "tasks",
    "load_task": "tasks", "parse_ids": "tasks", "KernelBenchError": "tasks",
    "SizeBudget": "shrink", "plan_sizes": "shrink",
    "JudgeOptions": "judge", "Judgment": "judge", "judge": "judge", "judge_solver": "judge",
    "judge_with": "judge", "ReferenceSession": "judge", "REASONS": "judge",
    "BaselineCache": "baselines", "BaselineRecord": "baselines",
    "measure_baseline": "baselines", "get_or_measure": "baselines",
    "run_suite": "runner", "RunResult": "runner", "find_solution": "runner",
    "write_reports": "report", "summarize_levels": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'argus.bench.kernelbench' has no attribute {name!r}")
    return getattr(importlib.import_module(f"argus.bench.kernelbench.{module}"), name)
