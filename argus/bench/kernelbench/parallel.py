"""Judge many tasks at once on one GPU, with clean timings, within a time budget.

`run_parallel` is `runner.run_suite` for a GPU machine: `jobs` slots (threads of this process)
each judge one task at a time, so that what is slow and does not need the GPU to itself
overlaps across tasks: process start-up and imports, lowering and NVRTC compiles, torch.compile
of the baselines. What times the GPU runs alone, through one `GpuGate` (argus/runtime/
gpu_gate.py) that every process of the run shares by the ARGUS_GPU_GATE file:

- exclusive: the judge's timing of a solution, the eager and torch.compile baselines' timings;
- shared: references, correctness runs, comparisons, profiles (together, never during a
  timing); a correctness run lets go of it while Argus compiles a kernel (compose/launch.py).

Per slot, per task: the task's baselines in the slot's baseline process (kept across tasks; the
judge then reads them from the shared cache), then the judge, `direct` (the reference inside
this process, the candidate copies its inputs, outputs by CUDA IPC) with a candidate process
forked by the candidates' fork server (process.Zygote: torch and the harness imported once per
run, a candidate starts in milliseconds) while the previous task was judged. Tasks are admitted
by their estimated GPU memory (gpumem.py: inputs, float64 references, the candidate's copies) and
by the device's free memory, so the device rarely runs out; a task that does run out is tried
again as if it needed twice its estimate, then alone. Largest first (they pack worst), smaller
ones fill the memory left.

Results: one line per task appended to OUT/results.jsonl as soon as it is judged (resumable
like run_suite); at `budget_s` no task starts any more and what still runs is stopped and left
out (a resumed run judges it). Invariant: a task's line is written once it is fully judged, or
never.

Several GPUs (`ParallelOptions.gpus`, gpus.py): the same `judge_tasks` runs in one worker
process per GPU, fed tasks by the pool through its `TaskQueue` (`serve_judge`), with the GPU
gate, memory budget and fork server of its own card; this process only plans, records and
reports.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from argus.bench.kernelbench import gpumem
from argus.bench.kernelbench.baseline_suite import SuiteOptions, TaskOutcome, _one_task
from argus.bench.kernelbench.baselines import BaselineCache, BaselineRecord, Environment
from argus.bench.kernelbench.judge import JudgeOptions, Judgment, ReferenceSession, judge_with
from argus.bench.kernelbench.process import CANDIDATE_PRELOAD, Worker, WorkerError
from argus.bench.kernelbench.runner import (
    RunResult,
    _append,
    _sha,
    find_solution,
    judge_failure,
    load_results,
    missing_judgment,
)
from argus.bench.kernelbench.tasks import Task
from argus.runtime.gpu_gate import ENV as GATE_ENV


@dataclass(frozen=True)
class ParallelOptions:
    jobs: int = 4
    budget_s: float | None = None        # wall seconds for the whole run (None: no limit)
    min_start_s: float = 20.0            # do not start a task with less time than this left
    gpu_mem_gb: float | None = None      # memory tasks may share (default: the device's less
    reserve_gb: float = 12.0             # reserve_gb for contexts and allocator slack)
    baselines_first: bool = True         # time each task's baselines in the slot first
    gpus: tuple[str, ...] = ()           # one worker process per GPU (CUDA_VISIBLE_DEVICES
    #                                      entries, gpus.py); () judges in this process
    judge_hook: str | None = None        # "module:function(task, path, options, slot) ->
    #                                      Judgment" judges instead (fakes in scheduling tests)


def default_jobs(device: str, gpus: int = 1) -> int:
    """Slots per GPU on this machine: a GPU run needs few CPU cores per slot in steady state
    (NVRTC and torch.compile are single-threaded per process, imports overlap), two cores kept
    for the timing process and this one; with several GPUs the cores are shared among them."""
    cores = (os.cpu_count() or 2) // max(1, gpus)
    return max(1, min(8 if device.startswith("cuda") else 4, cores // 2))


MAX_PASSES = 6   # smaller tasks may start before the largest waiting one this many times


def pick_first_fit(queue: list, need_of, memory: gpumem.GpuMemoryBudget,
                   head_passed: list[int], max_passes: int = MAX_PASSES):
    """Remove and return the first item of `queue` whose memory fits now (admitted in
    `memory`); None when the queue is empty, False when nothing fits yet. Items behind the
    head pass it at most `max_passes` times (`head_passed[0]` counts), then the head waits
    for its memory and nothing passes it: the largest task is never starved."""
    if not queue:
        return None
    for i, item in enumerate(queue):
        if i > 0 and head_passed[0] >= max_passes:
            break
        if memory.try_acquire(need_of(item)):
            head_passed[0] = head_passed[0] + 1 if i > 0 else 0
            return queue.pop(i)
    return False


def out_of_memory_retry(need: float, budget: float, tries: int) -> float | None:
    """The memory to admit a task with again after it ran out of GPU memory with `need` for the
    `tries`-th time, or None when it already ran alone (out of memory is then its verdict). Twice
    the estimate first:
    most tasks that run out do so because a neighbour overshot its own estimate (run 7 on the
    H200 ran all 62 such tasks alone, one after another, and judged none of them in its
    budget); then alone."""
    if need >= budget:
        return None
    return budget if tries > 1 or need * 2 >= budget or need <= 0 else need * 2


class SlotClosed(RuntimeError):
    """The run stopped (its time budget): a closed slot starts no process any more."""


class _Slot:
    """One slot's processes, kept across its tasks. Once closed (the budget reached, from the
    run's main thread) it starts none: a worker started meanwhile by the slot's thread is
    killed at once, so no task goes on past the budget in processes nobody stops."""

    def __init__(self, index: int, log_dir: Path, scratch: Path):
        self.index = index
        self.log_dir = log_dir
        self.scratch = scratch
        self.baseline: Worker | None = None
        self.spare: Worker | None = None
        self.current: Worker | None = None
        self.closed = False
        self._lock = threading.Lock()

    def _adopt(self, worker: Worker) -> Worker:
        """`worker`, unless the slot was closed while it started (then killed, SlotClosed)."""
        with self._lock:
            if not self.closed:
                return worker
        worker.close()
        raise SlotClosed(f"slot {self.index} is closed (the run's time budget was reached)")

    def candidate(self) -> Worker:
        """The candidate started ahead (or a new one), and the next one started now."""
        worker = self.spare if self.spare is not None and self.spare.proc.poll() is None \
            else self._adopt(self._new_candidate())
        spare = self._adopt(self._new_candidate())
        with self._lock:
            if self.closed:
                spare.close()
                worker.close()
                raise SlotClosed(f"slot {self.index} is closed (the run's time budget was "
                                 "reached)")
            self.spare, self.current = spare, worker
        return worker

    def _new_candidate(self) -> Worker:
        return Worker("candidate", self.log_dir / f"slot{self.index}-candidate-"
                      f"{time.time_ns()}.log", cwd=self.scratch,
                      env={"ARGUS_KB_PRELOAD": CANDIDATE_PRELOAD}, forked=True)

    def baseline_worker(self) -> Worker:
        if self.baseline is None or self.baseline.proc.poll() is not None:
            worker = self._adopt(Worker("baseline", self.log_dir / f"slot{self.index}-"
                                        "baseline.log",
                                        env={"TORCHINDUCTOR_COMPILE_THREADS": "1"}))
            with self._lock:
                if self.closed:
                    worker.close()
                    raise SlotClosed(f"slot {self.index} is closed")
                self.baseline = worker
        return self.baseline

    def close(self) -> None:
        with self._lock:
            self.closed = True
            workers = (self.baseline, self.spare, self.current)
            self.baseline = self.spare = self.current = None
        for w in workers:
            if w is not None:
                w.close()


class TaskQueue:
    """The tasks waiting for a slot, largest estimated GPU memory first (they pack worst; small
    ones fill the memory left), picked by `pick_first_fit`. Closed once no task will be added:
    a run's own queue from the start, a GPU worker's when the pool says it sends no more
    (gpus.py). Aborted: whoever fed it is gone, nothing more is judged."""

    def __init__(self, items: list[tuple[Task, Path]], need_of, *, closed: bool = True):
        self._need_of = need_of
        self.need: dict[str, float] = {}
        self.items: list[tuple[Task, Path]] = []
        self.closed = closed
        self.aborted = False
        self.head_passed = [0]
        self._cond = threading.Condition()
        for item in items:
            self._insert(item)

    def _insert(self, item: tuple[Task, Path]) -> None:
        need = self.need.setdefault(item[0].key, self._need_of(item[0]))
        i = len(self.items)
        while i > 0 and self.need[self.items[i - 1][0].key] < need:
            i -= 1                                  # behind every larger or equal one
        self.items.insert(i, item)

    def add(self, item: tuple[Task, Path]) -> None:
        with self._cond:
            self._insert(item)
            self._cond.notify_all()

    def retry(self, item: tuple[Task, Path], need: float) -> None:
        """Again later (out of memory) as if it needed `need`: at the end, never passed."""
        with self._cond:
            self.need[item[0].key] = need
            self.items.append(item)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self.closed = self.aborted = True
            self.items.clear()
            self._cond.notify_all()

    def take(self, memory: gpumem.GpuMemoryBudget):
        """The next task that fits (its memory admitted); None when none will come any more,
        False when none fits yet or none has come yet."""
        with self._cond:
            item = pick_first_fit(self.items, lambda it: self.need[it[0].key], memory,
                                  self.head_passed)
            return False if item is None and not self.closed else item

    def wait(self, memory: gpumem.GpuMemoryBudget, timeout: float) -> None:
        """Until a task comes (when none waits) or memory is released (when none fits)."""
        with self._cond:
            if not self.items and not self.closed:
                self._cond.wait(timeout)
                return
        memory.wait_for_release(timeout)


def run_parallel(tasks: list[Task], solutions: Path | str, out_dir: Path | str,
                 options: JudgeOptions = JudgeOptions(),
                 parallel: ParallelOptions = ParallelOptions(), *, resume: bool = True,
                 progress: TextIO | None = sys.stderr, write_reports: bool = True
                 ) -> RunResult:
    """Judge every task's solution in `solutions` (a folder, see runner.find_solution) with
    `parallel.jobs` slots; see the module docstring. With `parallel.gpus`, one worker process
    per GPU runs those slots on its GPU and this process records what they judge (gpus.py)."""
    started = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    previous = load_results(out) if resume else {}
    device = options.resolved_device() if not parallel.gpus else \
        "cuda" if options.device == "auto" else options.device     # the workers' device
    judgments: dict[str, Judgment] = {}
    resumed: list[str] = []
    missing: list[str] = []
    todo: list[tuple[Task, Path]] = []
    for task in tasks:
        path = find_solution(task, solutions)
        if path is None:
            judgments[task.key] = missing_judgment(task, device)
            missing.append(task.key)
            continue
        record = previous.get(task.key)
        if record and record.get("sha256") == task.sha256 and \
                record.get("solution_sha256") == _sha(path):
            judgments[task.key] = Judgment.from_json(record["judgment"])
            resumed.append(task.key)
            continue
        todo.append((task, path))
    lock = threading.Lock()
    done = [0]

    def say(text: str) -> None:
        if progress is not None:
            with lock:
                print(f"[{done[0]}/{len(todo)} {time.monotonic() - started:5.0f}s] {text}",
                      file=progress, flush=True)

    def record(task: Task, j: Judgment, line: dict) -> None:
        with lock:
            judgments[task.key] = j
            done[0] += 1
            _append(out, line)

    meta: dict = {"device": device, "jobs": parallel.jobs}
    if parallel.gpus:
        from argus.bench.kernelbench.gpus import judge_on_gpus

        meta.update(judge_on_gpus(todo, options, parallel, record, say))
    else:
        judge_tasks(todo, options, parallel, record, say)
    ordered = tuple(judgments[t.key] for t in tasks if t.key in judgments)
    result = RunResult(out, ordered, tuple(resumed), tuple(missing))
    if write_reports:
        from argus.bench.kernelbench.report import write_reports as _write

        _write(list(ordered), out, meta=meta)
    return result


def judge_tasks(todo: list[tuple[Task, Path]], options: JudgeOptions,
                parallel: ParallelOptions, record, say, feed=None) -> None:
    """Judge `todo` (and what `feed` brings, when given: a GPU worker's tasks, see gpus.py)
    with `parallel.jobs` slots on this process's device. `record(task, judgment, line)` gets
    every task fully judged, once, with its results.jsonl line; a task stopped by the budget
    or an abort is not recorded. `say(text)` gets progress lines."""
    started = time.monotonic()
    deadline = started + parallel.budget_s if parallel.budget_s else None
    device = options.resolved_device()
    work = Path(options.workdir) if options.workdir else Path(tempfile.mkdtemp(
        prefix="argus-kb-parallel-"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    gate_path = str(work / "gpu.gate")
    saved_gate = os.environ.get(GATE_ENV)
    os.environ[GATE_ENV] = gate_path      # this process and every worker it starts share it
    options = replace(options, direct=True, workdir=str(work))
    cache = BaselineCache(options.baseline_cache)
    env = Environment.current(device) if not parallel.judge_hook else None
    hook = _load_hook(parallel.judge_hook) if parallel.judge_hook else None
    memory = gpumem.GpuMemoryBudget(
        gpumem.device_budget_bytes(device, parallel.reserve_gb, parallel.gpu_mem_gb),
        free_bytes=gpumem.device_free_bytes(device) if parallel.gpu_mem_gb is None else None)

    def need_of(task: Task) -> float:
        if device == "cpu":
            return 0.0
        n = gpumem.estimate_bytes(task, gpumem.JUDGE_BYTES_PER_ELEMENT, scratch=True)
        # A task estimated above half the memory runs alone from the start: beside it only
        # small tasks would fit, and the estimates of such tasks fell short on the H200 (L1/38
        # and L1/39, 94.5 GB, ran out of memory alone within 128 GB; while the 71 GB
        # activations ran, their neighbours ran out), so pairing them cost more retries than
        # it saved.
        return memory.budget if n > memory.budget / 2 else n

    queue = TaskQueue(todo, need_of, closed=feed is None)
    if feed is not None:
        def pump() -> None:
            while (item := feed.get()) is not None:
                queue.add(item)
            if feed.aborted:
                queue.abort()
            else:
                queue.close()

        threading.Thread(target=pump, daemon=True).start()
    stopped = threading.Event()
    oom_tries: dict[str, int] = {}
    slots = [_Slot(i, work / "logs", work / f"slot{i}") for i in range(max(1, parallel.jobs))]
    for slot in slots:
        slot.scratch.mkdir(parents=True, exist_ok=True)

    def left() -> float:
        return float("inf") if deadline is None else deadline - time.monotonic()

    def work_slot(slot: _Slot) -> None:
        while not stopped.is_set():
            if left() < parallel.min_start_s:
                return
            item = queue.take(memory)
            if item is None:
                return
            if item is False:
                queue.wait(memory, 0.5)
                continue
            task, path = item
            need = queue.need[task.key]
            t0 = time.monotonic()
            try:
                if hook is not None:
                    j = hook(task, path, options, slot.index)
                else:
                    if options.baselines and options.timing and device != "cpu" and \
                            parallel.baselines_first:
                        _measure_baseline(slot, task, options, cache, env, left, gate_path)
                    session = ReferenceSession(task, options, candidate=slot.candidate(),
                                               baseline_cache=cache)
                    try:
                        j = judge_with(session, path)
                    finally:
                        session.close()
                        slot.current = None
                        _release_gpu_cache()
            except Exception as exc:  # noqa: BLE001 - the judge's own failure ends this task
                j = judge_failure(task, device, exc)   # only, never the slot
            finally:
                memory.release(need)
            if stopped.is_set():
                return                                # past the deadline: not recorded
            again = None
            if j.reason == "out_of_memory":
                oom_tries[task.key] = oom_tries.get(task.key, 0) + 1
                again = out_of_memory_retry(need, memory.budget, oom_tries[task.key])
            if again is not None:
                queue.retry((task, path), again)
                say(f"{task.key} {task.name}: out of GPU memory, again later " +
                    ("alone" if again >= memory.budget
                     else f"as if it needed {again / 1e9:.0f} GB"))
                continue
            record(task, j, {"task": task.key, "sha256": task.sha256, "solution": str(path),
                             "solution_sha256": _sha(path), "solver": False,
                             "judgment": j.to_json(), "seconds": time.monotonic() - t0,
                             "slot": slot.index})
            say(f"{j.summary()} ({time.monotonic() - t0:.1f}s; slowest phases: "
                f"{_top_phases(j)})")

    threads = [threading.Thread(target=work_slot, args=(s,), daemon=True) for s in slots]
    try:
        for th in threads:
            th.start()
        for th in threads:
            while th.is_alive() and not stopped.is_set():
                th.join(timeout=1.0)
                if (left() <= 0 or queue.aborted) and not stopped.is_set():
                    stopped.set()
                    say("time budget reached: stopping the tasks still running"
                        if left() <= 0 else "the pool is gone: stopping the tasks still running")
                    for slot in slots:
                        slot.close()
            if stopped.is_set():
                break       # the threads end on their own (their processes are killed)
    finally:
        stopped.set()
        for slot in slots:
            slot.close()
        for th in threads:
            th.join(timeout=5.0)
        if saved_gate is None:
            os.environ.pop(GATE_ENV, None)
        else:
            os.environ[GATE_ENV] = saved_gate


def serve_judge(config: dict, feed, done, say) -> None:
    """A GPU worker's runner (gpus.py): `judge_tasks` over what the pool sends, each task's
    line handed to `done` with the baseline records of its task (the parent merges them into
    the shared cache; this worker reads and writes its own copy)."""
    options: JudgeOptions = config["options"]
    parallel: ParallelOptions = config["parallel"]

    def record(task: Task, j: Judgment, line: dict) -> None:
        done(task.key, {**line, "baselines": _cached_records(options.baseline_cache, task)})

    if config.get("deadline") is not None:        # the pool's end (a wall time)
        parallel = replace(parallel, budget_s=max(0.0, config["deadline"] - time.time()))
    judge_tasks([], options, parallel, record, say, feed=feed)


def _cached_records(path: str | None, task: Task) -> list[tuple[str, dict]]:
    """(mode, record) of every record the cache file holds for this task's text."""
    import json

    try:
        data = json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return []
    return [(key.rsplit("|", 1)[1], raw) for key, raw in data.items()
            if f"|{task.sha256}|" in key]


def _load_hook(spec: str):
    """`module:function`, imported (a fake judge for tests of the scheduling)."""
    from argus.bench.kernelbench.gpus import load_callable

    return load_callable(spec)


def _measure_baseline(slot: _Slot, task: Task, options: JudgeOptions, cache: BaselineCache,
                      env: Environment, left, gate_path: str) -> None:
    """The task's eager, eager-TF32-off and torch.compile times in the slot's baseline
    process, into the cache (skipped when the cache has them; only eager-TF32-off measured for
    a record cached before it existed). The timings take the gate's exclusive side; the
    compile runs beside other slots' work."""
    hit = cache.get(env, task.sha256)
    if hit is not None and hit.eager_ms is not None and hit.eager_notf32 is not None:
        return
    known = hit if hit is not None and hit.eager_ms is not None else None
    outcome = TaskOutcome(task)
    suite = SuiteOptions(jobs=1, task_timeout_s=max(options.timeout_s, 120.0),
                         trials=options.trials, warmup=options.warmup, device=options.device
                         if options.device != "auto" else "cuda", seed=options.seed)
    try:
        _one_task(slot.baseline_worker(), task, outcome, suite, gate_path, None, None, left,
                  known)
    except WorkerError as exc:
        outcome.error = f"{exc.kind}: {str(exc)[:1500]}"
        if slot.baseline is not None:
            slot.baseline.close()
            slot.baseline = None
    if outcome.eager and "median_ms" in outcome.eager:
        cache.put(BaselineRecord(task.key, task.sha256, env, outcome.eager, outcome.compile,
                                 outcome.compile_s, flags=outcome.flags,
                                 eager_notf32=outcome.eager_notf32))


def _release_gpu_cache() -> None:
    """Give this process's cached GPU blocks back (the direct reference's float64 tensors), so
    that the memory admitted for the next task is really free."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _top_phases(j: Judgment, n: int = 3) -> str:
    items = sorted(((k, v) for k, v in j.phases.items() if not k.startswith("#")),
                   key=lambda kv: -kv[1])[:n]                   # "# ..." are counts
    return ", ".join(f"{k} {v:.1f}s" for k, v in items) or "-"


__all__ = ["ParallelOptions", "TaskQueue", "default_jobs", "judge_tasks", "pick_first_fit",
           "run_parallel"]
