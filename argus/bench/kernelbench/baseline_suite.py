"""Measure eager and torch.compile baselines for many tasks on one GPU, within a time budget.

torch.compile spends most of its time on the CPU (tracing, Inductor, Triton), so `jobs` baseline
worker processes compile different tasks in parallel, while GPU timing is serialized by a file
lock (each timing runs alone on the GPU, on CPU cores reserved for it). Per task a worker
loads the task, times it eagerly and eagerly with TF32 off (baselines.py), compiles it (warm-up)
and times the compiled module; the eager numbers survive when the compile later fails or runs
out of time. A cached task whose record predates eager-TF32-off has only that measured.

Robustness: a per-task timeout (a worker that exceeds it is killed and replaced), errors are
recorded and the run goes on, a global budget stops new work early enough to end in time and
kills what is still running at the deadline; every task not finished is listed with why.
Tasks are scheduled so that their estimated GPU memory (from the meta device) fits together.

Invariant: the result lists every requested task exactly once, finished or not.
"""

from __future__ import annotations

import os
import queue
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from argus.bench.kernelbench.baselines import (
    BaselineCache,
    BaselineRecord,
    Environment,
    first_set_seed,
    same_as_eager,
)
from argus.bench.kernelbench import gpumem
from argus.bench.kernelbench.process import Worker, WorkerError
from argus.bench.kernelbench.tasks import Task


@dataclass(frozen=True)
class SuiteOptions:
    jobs: int = 8
    budget_s: float = 450.0
    task_timeout_s: float = 240.0
    trials: int = 100
    warmup: int = 10
    compile: bool = True
    device: str = "cuda"
    seed: int = 0
    gpu_mem_gb: float = 100.0
    timing_cores: int = 2
    min_start_s: float = 25.0  # do not start a task with less time than this left


@dataclass
class TaskOutcome:
    task: Task
    eager: dict[str, Any] | None = None
    compile: dict[str, Any] | None = None
    compile_s: float | None = None
    eager_notf32: dict[str, Any] | None = None
    status: str = "not started"  # done | eager only | error | timeout | budget | not started
    #                              | cached (taken from the cache, not measured again)
    error: str = ""
    seconds: float = 0.0
    flags: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task.key, "name": self.task.name, "sha256": self.task.sha256,
                "status": self.status, "error": self.error[:2000], "eager": self.eager,
                "compile": self.compile, "compile_s": self.compile_s,
                "eager_notf32": self.eager_notf32, "seconds": self.seconds}


def estimate_bytes(task: Task) -> float:
    """GPU bytes a task needs while compiled and eager copies coexist (rough: 3x its tensors)."""
    return gpumem.estimate_bytes(task, gpumem.BASELINE_BYTES_PER_ELEMENT)


def run_baselines(tasks: list[Task], options: SuiteOptions = SuiteOptions(), *,
                  log_dir: Path | None = None, cache: BaselineCache | None = None,
                  progress: TextIO | None = sys.stderr) -> tuple[list[TaskOutcome], Environment]:
    """Measure baselines for `tasks`; returns one outcome per task, in task order."""
    started = time.monotonic()
    deadline = started + options.budget_s
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="argus-kb-baselines-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    lock_path = str(log_dir / "gpu.lock")
    ncpu = os.cpu_count() or 1
    reserved = list(range(min(options.timing_cores, max(0, ncpu - 1))))
    others = [c for c in range(ncpu) if c not in reserved] or None
    reserved_or_none = reserved or None
    env = Environment.current(options.device)
    outcomes = {t.key: TaskOutcome(t) for t in tasks}
    budget_bytes = options.gpu_mem_gb * 1e9
    need = {t.key: min(estimate_bytes(t), budget_bytes) for t in tasks}
    pending: queue.Queue[Task] = queue.Queue()
    known: dict[str, BaselineRecord] = {}
    for t in tasks:
        hit = cache.get(env, t.sha256) if cache is not None else None
        if hit is not None and hit.eager_ms is not None and (
                hit.compile_ms is not None or not options.compile):
            # measured before on this card and torch (the cache key): a resumed or repeated
            # run spends its budget on the tasks still missing
            if hit.eager_notf32 is None:
                known[t.key] = hit          # cached before eager-TF32-off: only that is missing
                pending.put(t)
                continue
            outcome = outcomes[t.key]
            outcome.eager, outcome.compile = hit.eager, hit.compile
            outcome.compile_s, outcome.status = hit.compile_s, "cached"
            outcome.eager_notf32 = hit.eager_notf32
            continue
        pending.put(t)
    memory = gpumem.GpuMemoryBudget(budget_bytes)
    requeue_lock = threading.Lock()
    done_count = [0]
    print_lock = threading.Lock()
    active: dict[int, Worker] = {}
    retried: set[str] = set()

    def say(text: str) -> None:
        if progress is not None:
            with print_lock:
                elapsed = time.monotonic() - started
                print(f"[{done_count[0]}/{len(tasks)} {elapsed:5.0f}s] {text}", file=progress,
                      flush=True)

    def left() -> float:
        return deadline - time.monotonic()

    def slot(slot_id: int) -> None:
        worker: Worker | None = None
        while True:
            try:
                task = pending.get_nowait()
            except queue.Empty:
                break
            outcome = outcomes[task.key]
            if left() < options.min_start_s:
                outcome.status = "budget"
                outcome.error = "not started: time budget exhausted"
                continue
            admitted_need = need[task.key]
            if not memory.acquire(admitted_need,
                                  until=deadline - options.min_start_s):
                outcome.status = "budget"
                outcome.error = "not started: time budget exhausted"
                continue
            t0 = time.monotonic()
            requeue = False
            try:
                if worker is None or worker.proc.poll() is not None:
                    worker = Worker("baseline", log_dir / f"worker{slot_id}.log",
                                    env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
                    active[slot_id] = worker
                _one_task(worker, task, outcome, options, lock_path, reserved_or_none, others,
                          left, known.get(task.key))
            except WorkerError as exc:
                # the step that failed: eager, then eager with TF32 off (set before compile)
                where = "eager" if not outcome.eager else \
                    "eager TF32 off" if outcome.eager_notf32 is None else "torch.compile"
                outcome.error = f"{where}: {exc.kind}: {str(exc)[:1500]}"
                if outcome.eager:
                    outcome.status = "eager only"
                elif left() <= 1:
                    outcome.status = "budget"
                else:
                    outcome.status = "timeout" if exc.kind == "timeout" else "error"
                if exc.kind in ("timeout", "crash", "out_of_memory") and worker is not None:
                    worker.close()  # a fresh process for the next task
                    worker = None
                if exc.kind == "out_of_memory" and not outcome.eager \
                        and task.key not in retried:
                    retried.add(task.key)  # once more later, alone on the GPU
                    outcome.status, outcome.error = "not started", ""
                    requeue = True
            finally:
                memory.release(admitted_need)
                if requeue:
                    with requeue_lock:
                        need[task.key] = budget_bytes
                        pending.put(task)
                outcome.seconds = time.monotonic() - t0
                if requeue:
                    say(f"{task.key} {task.name}: out of GPU memory, retrying alone later")
                    continue
                done_count[0] += 1
                say(_line(outcome))
                if cache is not None and outcome.eager and "median_ms" in outcome.eager:
                    cache.put(BaselineRecord(task.key, task.sha256, env, outcome.eager,
                                             outcome.compile, outcome.compile_s,
                                             flags=outcome.flags,
                                             eager_notf32=outcome.eager_notf32))
        if worker is not None:
            worker.close()
        active.pop(slot_id, None)

    threads = [threading.Thread(target=slot, args=(i,), daemon=True)
               for i in range(max(1, options.jobs))]
    for th in threads:
        th.start()
    join_until = deadline + 30  # every request is bounded by the deadline; 30 s of slack
    for th in threads:
        th.join(timeout=max(0.0, join_until - time.monotonic()))
    for worker in list(active.values()):  # past the deadline: stop what still runs
        worker.close()
    join_until = time.monotonic() + 10
    for th in threads:
        th.join(timeout=max(0.0, join_until - time.monotonic()))
    return [outcomes[t.key] for t in tasks], env


def _one_task(worker: Worker, task: Task, outcome: TaskOutcome, options: SuiteOptions,
              lock_path: str, reserved: list[int] | None, others: list[int] | None,
              left: Any, known: BaselineRecord | None = None) -> None:
    """Load, eager, eager with TF32 off, compile, release. `known`: a cached record with the
    eager and compile numbers but no eager-TF32-off one (cached before it existed): only that
    is measured, the rest kept."""
    def limit() -> float:
        return max(1.0, min(options.task_timeout_s, left()))

    t0 = time.monotonic()
    loaded = worker.request("load", limit(), task_path=str(task.path), device=options.device,
                            seed=options.seed, input_seed=first_set_seed(options.seed),
                            other_cores=others)
    outcome.flags = loaded.get("flags", {})
    how = dict(trials=options.trials, warmup=options.warmup, lock_path=lock_path,
               timing_cores=reserved, other_cores=others)
    outcome.eager = known.eager if known else worker.request("eager", limit(), **how)["eager"]
    outcome.status = "eager only"
    if known:
        # kept before the new timing: a timeout or crash in it must not write the record back
        # without its cached torch.compile numbers
        outcome.compile, outcome.compile_s = known.compile, known.compile_s
    try:
        outcome.eager_notf32 = worker.request("eager_notf32", limit(), **how)["eager_notf32"]
    except WorkerError as exc:
        if exc.kind in ("timeout", "crash"):
            raise
        outcome.eager_notf32 = {"error": f"eager, TF32 off: {exc.kind}: {str(exc)[:1500]}"}
    if known:
        outcome.status = "done"
    elif options.compile:
        remaining = max(1.0, min(options.task_timeout_s - (time.monotonic() - t0), left()))
        try:
            reply = worker.request("compile", remaining, trials=options.trials,
                                   warmup=options.warmup, lock_path=lock_path,
                                   timing_cores=reserved, other_cores=others)
            outcome.compile = reply["compile"]
            outcome.compile_s = reply.get("compile_s")
            outcome.status = "done"
        except WorkerError as exc:
            if exc.kind in ("timeout", "crash"):
                raise
            outcome.error = f"torch.compile: {exc.kind}: {str(exc)[:1500]}"
            outcome.compile = {"error": outcome.error}
    else:
        outcome.status = "done"
    worker.request("release", max(1.0, min(60.0, left())))


def _line(o: TaskOutcome) -> str:
    def ms(t: dict[str, Any] | None) -> str:
        return f"{t['median_ms']:.4g} ms" if t and "median_ms" in t else "-"

    notf32 = "= eager" if same_as_eager(o.eager_notf32) else ms(o.eager_notf32)
    text = f"{o.task.key} {o.task.name}: {o.status}; eager {ms(o.eager)}, " \
           f"eager TF32 off {notf32}, compile {ms(o.compile)} ({o.seconds:.0f}s)"
    if o.error:
        text += f" [{o.error.splitlines()[0][:120]}]"
    return text


def _clock(outcomes: list[TaskOutcome]) -> str:
    for o in outcomes:
        if o.eager and "clock" in o.eager:
            return str(o.eager["clock"])
    return "n/a"


def markdown(outcomes: list[TaskOutcome], env: Environment, options: SuiteOptions,
             wall_s: float) -> str:
    done = [o for o in outcomes if o.status in ("done", "cached")]
    unfinished = [o for o in outcomes if o.status not in ("done", "cached")]
    lines = ["# KernelBench baselines: eager and torch.compile", "",
             f"GPU `{env.gpu}`, torch {env.torch}, CUDA {env.cuda}; {len(outcomes)} tasks, "
             f"{len(done)} with both numbers, {len(unfinished)} not finished; wall "
             f"{wall_s:.0f} s with {options.jobs} parallel compile workers and a "
             f"{options.budget_s:.0f} s budget.", "",
             f"Timing: `argus.bench.timing.measure`, clock `{_clock(outcomes)}` (CUDA events "
             f"with whole-device synchronization, 256 MB L2 flush before each trial on a GPU), "
             f"{options.warmup} warm-ups, "
             f"{options.trials} trials), median and mean in milliseconds, on the task's own "
             "`get_inputs()` at upstream sizes, PyTorch's default numerics flags (cuDNN may use "
             "TF32 for convolutions); `eager TF32 off` with torch.backends.cuda.matmul."
             "allow_tf32 and cudnn.allow_tf32 False (fp32-accurate: the strict track's "
             "baseline), `= eager` where TF32 changes no output bit. torch.compile in default "
             "mode; `compile s` is the first call (compile + run). GPU timings were serialized "
             "by a lock while other tasks compiled on other CPU cores.", "",
             "| task | name | eager median ms | eager mean ms | eager TF32 off median ms | "
             "compile median ms | compile mean ms | compile vs eager | compile s | status |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def num(t: dict[str, Any] | None, key: str) -> str:
        return f"{float(t[key]):.4g}" if t and key in t else "-"

    for o in outcomes:
        speed = "-"
        if o.eager and o.compile and "median_ms" in o.eager and "median_ms" in o.compile:
            speed = f"{o.eager['median_ms'] / o.compile['median_ms']:.2f}x"
        notf32 = "= eager" if same_as_eager(o.eager_notf32) else num(o.eager_notf32,
                                                                       "median_ms")
        lines.append(f"| {o.task.key} | {o.task.name} | {num(o.eager, 'median_ms')} | "
                     f"{num(o.eager, 'mean_ms')} | {notf32} | {num(o.compile, 'median_ms')} | "
                     f"{num(o.compile, 'mean_ms')} | {speed} | "
                     f"{'-' if o.compile_s is None else f'{o.compile_s:.1f}'} | {o.status} |")
    if unfinished:
        lines += ["", "## Not finished", ""]
        for o in unfinished:
            why = o.error.splitlines()[0][:200] if o.error else ""
            lines.append(f"- {o.task.key} {o.task.name}: {o.status}" + (f" ({why})" if why
                                                                           else ""))
    return "\n".join(lines) + "\n"
