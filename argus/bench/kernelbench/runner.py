"""Run a suite: judge a solution for every selected task, resumably, with progress on stderr.

Solutions come from a directory (`find_solution` knows the usual layouts) or from a solver
callback `solver(task) -> source text | path`. Each finished task appends one JSON line to
`OUT/results.jsonl` (flushed and fsynced), so an interrupted run resumes where it stopped: a
task is skipped when the file already holds a judgment of the same task text (sha256) and, for
solution files, the same solution text. Reports (report.py) are rewritten at the end.

Invariant: results.jsonl is append-only; the latest line for a task is the one that counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from argus.bench.kernelbench.judge import (
    JudgeOptions,
    Judgment,
    ReferenceSession,
    judge_with,
    materialize_solution,
)
from argus.bench.kernelbench.tasks import Task

Solver = Callable[[Task], "str | Path"]
RESULTS = "results.jsonl"


@dataclass(frozen=True)
class RunResult:
    out_dir: Path
    judgments: tuple[Judgment, ...]   # one per task (resumed or new), in task order
    resumed: tuple[str, ...]          # task keys taken from an earlier run
    missing: tuple[str, ...]          # task keys without a solution


def find_solution(task: Task, solutions_dir: Path | str) -> Path | None:
    """The solution file for a task. Accepted layouts, first match wins:
    level<L>/<task file name>, level<L>/<id>.py, level<L>/<id>_*.py, level<L>_<id>.py,
    L<L>_<id>.py, <task file name> (a directory of one level)."""
    d = Path(solutions_dir)
    level = f"level{task.level}"
    for path in (d / level / task.path.name, d / level / f"{task.problem_id}.py",
                 d / f"{level}_{task.problem_id}.py", d / f"L{task.level}_{task.problem_id}.py"):
        if path.is_file():
            return path
    matches = sorted((d / level).glob(f"{task.problem_id}_*.py")) if (d / level).is_dir() else []
    if len(matches) == 1:
        return matches[0]
    flat = d / task.path.name
    return flat if flat.is_file() else None


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_results(out_dir: Path | str) -> dict[str, dict[str, Any]]:
    """Latest record per task key from OUT/results.jsonl (torn last lines are ignored)."""
    path = Path(out_dir) / RESULTS
    latest: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return latest
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        latest[record["task"]] = record
    return latest


def _append(out_dir: Path, record: dict[str, Any]) -> None:
    with open(out_dir / RESULTS, "a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def missing_judgment(task: Task, device: str) -> Judgment:
    return Judgment(task=task.key, task_name=task.name, task_path=str(task.path),
                    task_sha256=task.sha256, solution="", device=device, correct=False,
                    correct_relaxed=False, reasons=("no_solution",),
                    relaxed_reasons=("no_solution",), detail="no solution file found",
                    precision="n/a", degenerate=(), degenerate_relaxed=(), stochastic=False,
                    argus_kernels="n/a", argus_evidence="", sizes="", level=task.level,
                    problem_id=task.problem_id)



def judge_failure(task: Task, device: str, exc: Exception) -> Judgment:
    """A judgment for a task whose judging raised in this process (the in-process reference
    or a comparison ran out of GPU memory beside other tasks: out_of_memory, retried with more
    memory, then alone)."""
    from argus.bench.kernelbench.worker import out_of_memory

    kind = "out_of_memory" if out_of_memory(exc) else "task_error"
    j = missing_judgment(task, device)
    return replace(j, reasons=(kind,), relaxed_reasons=(kind,),
                   detail=f"the judge raised {type(exc).__name__}: {str(exc)[:1500]}")

def _fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def run_suite(tasks: list[Task], solutions: Path | str | Solver, out_dir: Path | str,
              options: JudgeOptions = JudgeOptions(), *, resume: bool = True,
              progress: TextIO | None = sys.stderr, write_reports: bool = True) -> RunResult:
    """Judge every task's solution; see the module docstring for resume rules."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    previous = load_results(out) if resume else {}
    if not resume and (out / RESULTS).exists():
        (out / RESULTS).rename(out / f"{RESULTS}.{int(time.time())}.bak")
    judgments: list[Judgment] = []
    resumed: list[str] = []
    missing: list[str] = []
    started = time.monotonic()
    fresh_done = 0
    device = options.resolved_device()
    bar = None
    if progress is not None and getattr(progress, "isatty", lambda: False)():
        from argus.runtime.progress import Progress

        bar = Progress(len(tasks), "kernelbench run", stream=progress).__enter__()
    for index, task in enumerate(tasks, 1):
        t0 = time.monotonic()
        solution_path: Path | None
        if callable(solutions) and not isinstance(solutions, (str, Path)):
            solution_path = None
        else:
            solution_path = find_solution(task, solutions)
        solution_sha = _sha(solution_path) if solution_path else None
        record = previous.get(task.key)
        if record and record.get("sha256") == task.sha256 and (
                solution_path is None and record.get("solver") or
                solution_sha is not None and record.get("solution_sha256") == solution_sha):
            judgments.append(Judgment.from_json(record["judgment"]))
            resumed.append(task.key)
            _progress(progress, index, len(tasks), judgments[-1], "resumed", started,
                      fresh_done, len(tasks) - index, bar)
            continue
        if solution_path is None and callable(solutions) and not isinstance(solutions,
                                                                              (str, Path)):
            try:
                solution_path = materialize_solution(task, solutions(task), out / "solutions")
            except Exception as exc:  # a failing solver is that task's failure, not the run's
                j = missing_judgment(task, device)
                j = Judgment.from_json({**j.to_json(), "reasons": ["solver_error"],
                                        "relaxed_reasons": ["solver_error"],
                                        "detail": f"solver raised {type(exc).__name__}: {exc}"})
                judgments.append(j)
                _append(out, {"task": task.key, "sha256": task.sha256, "solver": True,
                              "judgment": j.to_json()})
                continue
            solution_sha = _sha(solution_path)
        if solution_path is None:
            j = missing_judgment(task, device)
            missing.append(task.key)
        else:
            with ReferenceSession(task, options) as session:
                j = judge_with(session, solution_path)
        judgments.append(j)
        fresh_done += 1
        _append(out, {"task": task.key, "sha256": task.sha256, "solution": str(solution_path),
                      "solution_sha256": solution_sha,
                      "solver": not isinstance(solutions, (str, Path)),
                      "judgment": j.to_json(), "seconds": time.monotonic() - t0})
        _progress(progress, index, len(tasks), j, f"{time.monotonic() - t0:.1f}s", started,
                  fresh_done, len(tasks) - index, bar)
    if bar is not None:
        bar.__exit__(None, None, None)
    result = RunResult(out, tuple(judgments), tuple(resumed), tuple(missing))
    if write_reports:
        from argus.bench.kernelbench.report import write_reports as _write

        _write(list(judgments), out, meta={"device": device, "options": _options_json(options)})
    return result


def _options_json(options: JudgeOptions) -> dict[str, Any]:
    import dataclasses

    data = dataclasses.asdict(options)
    return json.loads(json.dumps(data, default=str))


def _progress(stream: TextIO | None, index: int, total: int, j: Judgment, took: str,
              started: float, done_fresh: int, left: int, bar=None) -> None:
    if stream is None:
        return
    if bar is not None:          # a terminal: the line above a rich progress bar with ETA
        bar.advance(f"[{index}/{total}] {j.summary()} ({took})")
        return
    elapsed = time.monotonic() - started
    eta = f", eta {_fmt_s(elapsed / done_fresh * left)}" if done_fresh else ""
    print(f"[{index}/{total}] {j.summary()} ({took}; elapsed {_fmt_s(elapsed)}{eta})",
          file=stream, flush=True)

