"""Every GPU of a host: one worker process per GPU, work sent to idle GPUs, one writer.

`GpuPool` starts `python -m argus.bench.kernelbench.gpus` once per GPU with
CUDA_VISIBLE_DEVICES set to that GPU alone, and keeps each worker holding at most `slots` jobs
(tasks): a worker with fewer is idle, and the next job of the queue (largest first, as the
caller ordered it) goes to it. Inside a worker a *runner* (`module:function`) does the work:
`parallel.serve_judge` runs parallel.py's slots on its GPU (its own GPU gate, so a timing never
shares its GPU with another timing; GPUs time at the same time), `serve_baselines` the eager and
torch.compile baselines. Each finished job comes back at once as one line on the worker's
stdout and is handed to the caller's `done` here (who appends it to results.jsonl and fsyncs),
so a worker killed later loses no finished job; this process is the only writer of the run's
store and of the baseline cache (each worker reads and writes a copy of the cache, its new
records come back with the job and are merged here).

A worker that dies (exit, signal, no `ready` in time) is a GPU failure: recorded with its log
tail, its unfinished jobs queued again (first in line, for another GPU while one is live), the
worker started again on the same GPU up to `restarts` times, then the GPU is retired. A job
that was on a dying worker `job_crashes` times is given up (the caller records it as failed)
so that one task that kills its worker cannot take every GPU down. At the budget no job starts; what still runs is
stopped and left out (a resumed run does it).

Protocol, one JSON line each: parent -> worker `start` (runner, pickled config), `job` (id,
pickled payload), `end` (no more jobs: finish and exit; end of stdin without `end` means the
parent is gone: stop now); worker -> parent `ready`, `done` (id, record), `say` (text),
`error` (the runner raised). The worker's own stdout (prints of what it runs) goes to its log.

Invariant: a job id is handed to `done` or `give_up` at most once; every job is either handed
over or listed in `PoolResult.left`.

Several hosts are not scheduled here (see docs/kernelbench.md, "Several GPUs"): one host's
processes are enough for a node, and a cluster belongs to an existing engine such as Ray.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import queue
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from argus.bench.kernelbench.process import close_pipes, how_it_ended, kill_session
from argus.bench.kernelbench.tasks import KernelBenchError, repo_root

VISIBLE = "CUDA_VISIBLE_DEVICES"


# ------------------------------------------------------------------ which GPUs: --gpus N|all
def resolve_gpus(spec: str | int | None, *, visible: str | None = None,
                 count: Callable[[], int] | None = None) -> tuple[str, ...]:
    """The CUDA_VISIBLE_DEVICES entries of `--gpus N|all` (the first N GPUs this process
    sees, in its own CUDA_VISIBLE_DEVICES order when that is set); () for no --gpus.
    `visible` and `count` default to the environment and torch.cuda.device_count()."""
    if spec is None or str(spec).strip() == "":
        return ()
    text = str(spec).strip().lower()
    if visible is None:
        visible = os.environ.get(VISIBLE)
    if count is None:
        def count() -> int:
            import torch

            return torch.cuda.device_count()
    n = count()
    if visible is not None:
        entries = [e.strip() for e in visible.split(",") if e.strip()][:n]
    else:
        entries = [str(i) for i in range(n)]
    if not entries:
        raise KernelBenchError(f"--gpus {spec}: no GPU is visible here"
                               + (f" ({VISIBLE}={visible!r})" if visible is not None else ""),
                               fix="run on a GPU machine, or leave --gpus out (one process, "
                                   "on the CPU without a GPU)")
    if text == "all":
        return tuple(entries)
    try:
        wanted = int(text)
    except ValueError:
        raise KernelBenchError(f"--gpus {spec!r} is neither a number nor all",
                               fix="pass --gpus 8 or --gpus all (choose the cards with "
                                   f"{VISIBLE})") from None
    if wanted < 1 or wanted > len(entries):
        raise KernelBenchError(f"--gpus {wanted}: this process sees {len(entries)} GPU(s) "
                               f"({', '.join(entries)})",
                               fix=f"pass --gpus 1 to {len(entries)} or --gpus all")
    return tuple(entries[:wanted])


def check_device(device: str, gpus: Sequence[str]) -> None:
    """--device cuda:N names one card of this process, --gpus a worker per card: not both."""
    if gpus and device.startswith("cuda:"):
        raise KernelBenchError(f"--device {device} with --gpus: each GPU worker sees one card "
                               "as cuda", fix="pass --device cuda (or auto) with --gpus, and "
                               f"choose the cards with {VISIBLE}")


# ------------------------------------------------------------------------- the parent side
@dataclass(frozen=True)
class PoolOptions:
    slots: int = 1                 # jobs a GPU worker holds at once (parallel.py's slots)
    budget_s: float | None = None  # wall seconds for the whole pool
    min_start_s: float = 0.0       # no job is sent with less time than this left
    restarts: int = 2              # a GPU whose worker died more often than this is retired
    job_crashes: int = 2           # a job on this many dying workers is given up
    start_timeout_s: float = 600.0  # a worker that is not ready by then has failed
    grace_s: float = 15.0          # past the budget, workers get this long to stop


@dataclass(frozen=True)
class GpuFailure:
    gpu: str
    at_s: float                    # seconds into the pool's run
    why: str                       # exit status and the tail of the worker's log
    requeued: tuple[str, ...]      # jobs queued again
    given_up: tuple[str, ...]      # jobs handed to give_up (on too many dying workers)
    retired: bool                  # the GPU gets no more work

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PoolResult:
    failures: tuple[GpuFailure, ...]
    left: tuple[str, ...]          # jobs neither done nor given up (budget, no GPU left)
    per_gpu: dict[str, int] = field(default_factory=dict)   # jobs done per GPU


def _pack(obj: Any) -> str:
    return base64.b64encode(pickle.dumps(obj)).decode()


def _unpack(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


class _GpuWorker:
    """One worker process pinned to one GPU (its own session: only its group is signalled)."""

    def __init__(self, gpu: str, runner: str, config: Any, log_path: Path):
        self.gpu = gpu
        self.log_path = log_path
        env = dict(os.environ)
        root = str(repo_root())
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
        env["PYTHONUNBUFFERED"] = "1"
        env[VISIBLE] = gpu
        env.pop("ARGUS_GPU_GATE", None)   # each GPU has its own gate (the runner sets it)
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "argus.bench.kernelbench.gpus", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
            start_new_session=True)
        self.started = time.monotonic()
        self.ready = False
        self.ended = False
        self.assigned: dict[str, Any] = {}
        self._buffer = b""
        self.send({"op": "start", "runner": runner, "config": _pack(config)})

    def send(self, msg: dict[str, Any]) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.send({"op": "end"})
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def read(self) -> list[dict[str, Any]] | None:
        """The complete lines available; None at end of file (the worker closed stdout)."""
        assert self.proc.stdout is not None
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue          # not ours (the worker's stdout goes to its log)
        return out

    def log_tail(self, chars: int = 2000) -> str:
        try:
            self._log.flush()
            return self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return ""

    def status(self) -> str:
        try:
            return how_it_ended(self.proc.wait(timeout=5))
        except subprocess.TimeoutExpired:
            return how_it_ended(None)

    def kill(self) -> None:
        kill_session(self.proc)

    def close(self) -> None:
        self.kill()
        close_pipes(self.proc)
        self._log.close()


class GpuPool:
    """See the module docstring. `config_for(gpu, index)` is the runner's config for a worker
    (called at every start, so a restarted worker gets fresh state, e.g. the budget left)."""

    def __init__(self, gpus: Sequence[str], runner: str, config_for: Callable[[str, int], Any],
                 workdir: Path | str, options: PoolOptions = PoolOptions(),
                 say: Callable[[str], None] = lambda text: None):
        if not gpus:
            raise ValueError("GpuPool needs at least one GPU")
        if len(set(gpus)) != len(gpus):
            raise KernelBenchError(f"GPUs {list(gpus)} name one card twice",
                                   fix="give each GPU once (two workers on one card would "
                                       "time at the same time)")
        self.gpus = tuple(gpus)
        self.runner = runner
        self.config_for = config_for
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.options = options
        self.say = say

    def run(self, jobs: Sequence[tuple[str, Any]],
            done: Callable[[str, dict[str, Any], str], None],
            give_up: Callable[[str, str], None]) -> PoolResult:
        """Do `jobs` ((id, payload), in the order they should start); `done(id, record, gpu)`
        for each finished one, `give_up(id, why)` for one that took too many workers down."""
        if not jobs:
            return PoolResult((), (), {})          # nothing to do: no worker is started
        opts = self.options
        started = time.monotonic()
        deadline = started + opts.budget_s if opts.budget_s else None
        pending: deque[tuple[str, Any]] = deque(jobs)
        finished: set[str] = set()
        crashes: Counter[str] = Counter()
        crashed_on: dict[str, set[str]] = {}        # job -> GPUs whose worker died with it
        deaths: Counter[str] = Counter()
        per_gpu: Counter[str] = Counter()
        failures: list[GpuFailure] = []
        live: dict[str, _GpuWorker] = {}
        sel = selectors.DefaultSelector()

        def left() -> float:
            return float("inf") if deadline is None else deadline - time.monotonic()

        def start(index: int, gpu: str) -> None:
            log = self.workdir / f"gpu{index}.log"
            worker = _GpuWorker(gpu, self.runner, self.config_for(gpu, index), log)
            live[gpu] = worker
            assert worker.proc.stdout is not None
            sel.register(worker.proc.stdout, selectors.EVENT_READ, worker)

        def stop(worker: _GpuWorker) -> None:
            sel.unregister(worker.proc.stdout)
            live.pop(worker.gpu, None)
            worker.close()

        def failed(worker: _GpuWorker, why: str) -> None:
            """A GPU failure: its jobs again (or given up), the worker again (or retired)."""
            stop(worker)
            deaths[worker.gpu] += 1
            requeued, dropped = [], []
            for job_id, payload in reversed(list(worker.assigned.items())):
                crashes[job_id] += 1
                crashed_on.setdefault(job_id, set()).add(worker.gpu)
                if crashes[job_id] >= opts.job_crashes:
                    dropped.append(job_id)
                    finished.add(job_id)
                    give_up(job_id, f"the worker of GPU {worker.gpu} judging it died "
                                    f"({crashes[job_id]} times): {why}")
                else:
                    requeued.append(job_id)
                    pending.appendleft((job_id, payload))     # first in line again
            retired = deaths[worker.gpu] > opts.restarts
            failures.append(GpuFailure(worker.gpu, time.monotonic() - started, why,
                                       tuple(reversed(requeued)), tuple(dropped), retired))
            self.say(f"GPU {worker.gpu} failed ({why.splitlines()[0]}); "
                     f"{len(requeued)} job(s) queued again"
                     + (", GPU retired" if retired else ", worker started again"))
            if not retired and left() > opts.min_start_s:
                start(self.gpus.index(worker.gpu), worker.gpu)

        def take_for(gpu: str) -> tuple[str, Any] | None:
            """The first pending job for this GPU: one whose worker died on it waits for
            another GPU while one is live (a failing GPU must not get good jobs given up)."""
            elsewhere = any(g != gpu and not w.ended for g, w in live.items())
            for i, (job_id, payload) in enumerate(pending):
                if not elsewhere or gpu not in crashed_on.get(job_id, ()):
                    del pending[i]
                    return job_id, payload
            return None

        def ended(worker: _GpuWorker) -> None:
            """Its stdout closed: a clean exit after `end`, or a death."""
            try:
                code = worker.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            if worker.ended and code == 0:
                stop(worker)
                return          # what it still held was stopped by the budget: left out
            failed(worker, f"{worker.status()}\n{worker.log_tail()}")

        for index, gpu in enumerate(self.gpus):
            start(index, gpu)
        try:
            while live:
                if left() <= -opts.grace_s:
                    for worker in list(live.values()):
                        stop(worker)                 # past the budget and its grace
                    break
                may_start = left() >= opts.min_start_s
                for worker in list(live.values()):
                    while may_start and pending and not worker.ended and \
                            len(worker.assigned) < opts.slots:
                        item = take_for(worker.gpu)
                        if item is None:
                            break
                        job_id, payload = item
                        worker.assigned[job_id] = payload
                        if not worker.send({"op": "job", "id": job_id,
                                            "job": _pack(payload)}):
                            break                    # dying: its end of file comes next
                busy = any(w.assigned for w in live.values())
                if left() <= 0 or not busy and (not pending or not may_start):
                    for worker in live.values():
                        worker.end()                 # nothing left for anyone: finish
                for key, _ in sel.select(timeout=0.5):
                    worker = key.data
                    if worker.gpu not in live or live[worker.gpu] is not worker:
                        continue
                    msgs = worker.read()
                    for msg in msgs or ():
                        op = msg.get("op")
                        if op == "ready":
                            worker.ready = True
                            self.say(f"GPU {worker.gpu}: worker ready ({msg.get('device')}, "
                                     f"{time.monotonic() - worker.started:.1f}s)")
                        elif op == "done":
                            job_id = msg["id"]
                            worker.assigned.pop(job_id, None)
                            if job_id not in finished:
                                finished.add(job_id)
                                per_gpu[worker.gpu] += 1
                                done(job_id, msg["record"], worker.gpu)
                        elif op == "say":
                            self.say(f"GPU {worker.gpu}: {msg.get('text', '')}")
                        elif op == "error":
                            self.say(f"GPU {worker.gpu}: its runner failed: "
                                     f"{msg.get('text', '')[:2000]}")
                    if msgs is None:
                        ended(worker)
                for worker in list(live.values()):
                    if not worker.ready and \
                            time.monotonic() - worker.started > opts.start_timeout_s:
                        worker.kill()
                        failed(worker, f"not ready within {opts.start_timeout_s:.0f} s\n"
                                       f"{worker.log_tail()}")
        finally:
            for worker in list(live.values()):
                stop(worker)
            sel.close()
        return PoolResult(tuple(failures), tuple(j for j, _ in jobs if j not in finished),
                          dict(per_gpu))


# ----------------------------------------------------------------- judging: run and solve
def judge_on_gpus(todo: list, options: Any, parallel: Any, record: Callable[..., None],
                  say: Callable[[str], None]) -> dict[str, Any]:
    """parallel.run_parallel's judging with one worker per GPU of `parallel.gpus`, each running
    `parallel.jobs` slots (parallel.serve_judge); `record(task, judgment, line)` gets every
    task judged, here, once. Returns what the report's meta says about the GPUs."""
    from argus.bench.kernelbench import gpumem
    from argus.bench.kernelbench.baselines import BaselineCache, BaselineRecord
    from argus.bench.kernelbench.judge import Judgment
    from argus.bench.kernelbench.runner import judge_failure
    from argus.bench.kernelbench.runner import _sha

    check_device(options.device, parallel.gpus)
    # the pool's end as a wall time: the workers' budgets end with it, however long they take
    # to start (time.time, not monotonic clocks, which processes need not share)
    deadline = time.time() + parallel.budget_s if parallel.budget_s else None
    work = Path(options.workdir) if options.workdir else Path(tempfile.mkdtemp(
        prefix="argus-kb-gpus-"))
    cache = BaselineCache(options.baseline_cache)
    on_cpu = options.device == "cpu"
    need = {t.key: 0.0 if on_cpu else gpumem.estimate_bytes(t, gpumem.JUDGE_BYTES_PER_ELEMENT,
                                                            scratch=True)
            for t, _ in todo}
    ordered = sorted(todo, key=lambda tp: -need[tp[0].key])   # largest first, as on one GPU
    by_key = {t.key: (t, p) for t, p in todo}

    def config_for(gpu: str, index: int) -> dict[str, Any]:
        folder = work / f"gpu{index}"
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / "baselines.json"          # this worker's copy; new records come back
        try:
            copy.write_bytes(cache.path.read_bytes())
        except OSError:
            copy.unlink(missing_ok=True)
        return {"options": replace(options, workdir=str(folder / "judge"),
                                   baseline_cache=str(copy)),
                "parallel": replace(parallel, gpus=()), "deadline": deadline}

    def done(key: str, line: dict[str, Any], gpu: str) -> None:
        for mode, raw in line.pop("baselines", ()):
            rec = BaselineRecord.from_json(raw)
            if cache.get(rec.env, rec.task_sha256, mode) is None:
                cache.put(rec, mode)
        task, _ = by_key[key]
        record(task, Judgment.from_json(line["judgment"]), {**line, "gpu": gpu})

    def give_up(key: str, why: str) -> None:
        task, path = by_key[key]
        j = judge_failure(task, options.device, RuntimeError(why))
        record(task, j, {"task": task.key, "sha256": task.sha256, "solution": str(path),
                         "solution_sha256": _sha(path), "solver": False,
                         "judgment": j.to_json(), "seconds": 0.0, "gpu": None})

    pool = GpuPool(parallel.gpus, "argus.bench.kernelbench.parallel:serve_judge", config_for,
                   work, PoolOptions(slots=max(1, parallel.jobs), budget_s=parallel.budget_s,
                                     min_start_s=parallel.min_start_s), say)
    say(f"judging {len(todo)} task(s) on {len(parallel.gpus)} GPU(s) "
        f"({VISIBLE}={','.join(parallel.gpus)}), {parallel.jobs} slot(s) each; logs in {work}")
    result = pool.run([(t.key, (t, p)) for t, p in ordered], done, give_up)
    if result.left:
        say(f"not judged (a resumed run judges them): {', '.join(result.left)}")
    return {"gpus": list(parallel.gpus), "tasks_per_gpu": result.per_gpu,
            "gpu_failures": [f.to_json() for f in result.failures],
            "not_judged": list(result.left)}


# --------------------------------------------------------------------- eager and compile
def baselines_on_gpus(tasks: list, options: Any, gpus: Sequence[str], *, cache: Any,
                      log_dir: Path | None = None, say: Callable[[str], None] = lambda t: None
                      ) -> tuple[list, Any]:
    """baseline_suite.run_baselines with one worker per GPU, each running `options.jobs`
    compile workers (serve_baselines); the same outcomes, in task order, and the cache
    written here. Timing cores are not reserved (each worker would reserve the same ones)."""
    from argus.bench.kernelbench.baseline_suite import TaskOutcome, estimate_bytes
    from argus.bench.kernelbench.baselines import BaselineRecord, Environment

    check_device(options.device, gpus)
    deadline = time.time() + options.budget_s           # see judge_on_gpus
    work = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="argus-kb-baselines-"))
    work.mkdir(parents=True, exist_ok=True)
    env = Environment.current(options.device)
    outcomes = {t.key: TaskOutcome(t) for t in tasks}
    todo = []
    for t in tasks:
        hit = cache.get(env, t.sha256)
        if hit is not None and hit.eager_ms is not None and hit.eager_notf32 is not None \
                and (hit.compile_ms is not None or not options.compile):
            o = outcomes[t.key]
            o.eager, o.compile, o.compile_s, o.status = hit.eager, hit.compile, \
                hit.compile_s, "cached"
            o.eager_notf32 = hit.eager_notf32
            continue
        todo.append(t)
    todo.sort(key=lambda t: -estimate_bytes(t))
    by_key = {t.key: t for t in todo}

    def config_for(gpu: str, index: int) -> dict[str, Any]:
        folder = work / f"gpu{index}"
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / "baselines.json"
        try:
            copy.write_bytes(cache.path.read_bytes())
        except OSError:
            copy.unlink(missing_ok=True)
        return {"suite": replace(options, timing_cores=0), "deadline": deadline,
                "log_dir": str(folder), "cache": str(copy)}

    def done(key: str, rec: dict[str, Any], gpu: str) -> None:
        o = outcomes[key]
        o.eager, o.compile, o.compile_s = rec["eager"], rec["compile"], rec["compile_s"]
        o.eager_notf32 = rec.get("eager_notf32")
        o.status, o.error, o.seconds = rec["status"], rec["error"], rec["seconds"]
        o.flags = rec.get("flags", {})
        if o.eager and "median_ms" in o.eager:
            cache.put(BaselineRecord(key, by_key[key].sha256, Environment(**rec["env"]),
                                     o.eager, o.compile, o.compile_s, flags=o.flags,
                                     eager_notf32=o.eager_notf32))

    def give_up(key: str, why: str) -> None:
        outcomes[key].status, outcomes[key].error = "error", why

    pool = GpuPool(gpus, "argus.bench.kernelbench.gpus:serve_baselines", config_for, work,
                   PoolOptions(slots=max(1, options.jobs), budget_s=options.budget_s,
                               min_start_s=options.min_start_s), say)
    result = pool.run([(t.key, t) for t in todo], done, give_up)
    for key in result.left:
        if outcomes[key].status == "not started":
            outcomes[key].status, outcomes[key].error = "budget", "not finished in the budget"
    for failure in result.failures:
        say(f"GPU {failure.gpu} failed at {failure.at_s:.0f}s: {failure.why.splitlines()[0]}")
    return [outcomes[t.key] for t in tasks], env


def serve_baselines(config: dict[str, Any], feed: Feed, done: Callable[[str, dict], None],
                    say: Callable[[str], None]) -> None:
    """A GPU worker's runner for baselines: `suite.jobs` threads, each measuring one task at a
    time through run_baselines (one lock file per GPU: timings alone on it), admitted by the
    GPU memory they are estimated to need."""
    from argus.bench.kernelbench import gpumem
    from argus.bench.kernelbench.baseline_suite import _line, estimate_bytes, run_baselines
    from argus.bench.kernelbench.baselines import BaselineCache

    suite = config["suite"]
    log_dir = Path(config["log_dir"])
    cache = BaselineCache(config["cache"])
    deadline = time.monotonic() + max(0.0, config["deadline"] - time.time())
    memory = gpumem.GpuMemoryBudget(suite.gpu_mem_gb * 1e9)

    def slot() -> None:
        while (task := feed.get()) is not None:
            need = min(estimate_bytes(task), memory.budget)
            if not memory.acquire(need, until=deadline - suite.min_start_s):
                continue                           # the budget: left out, not recorded
            try:
                left = deadline - time.monotonic()
                outcomes, env = run_baselines([task], replace(suite, jobs=1, budget_s=left),
                                              log_dir=log_dir, cache=cache, progress=None)
            finally:
                memory.release(need)
            o = outcomes[0]
            if o.status in ("budget", "not started"):
                continue
            done(task.key, {**o.to_json(), "flags": o.flags, "env": asdict(env)})
            say(_line(o))

    threads = [threading.Thread(target=slot, daemon=True) for _ in range(max(1, suite.jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


# ------------------------------------------------------------------------- the worker side
class Feed:
    """The jobs a worker's runner gets: `get()` blocks for the next payload and returns None
    once the parent sent `end` (then `aborted` is False) or is gone (True). Thread-safe:
    several threads of a runner may take from it."""

    _END = object()

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self.aborted = False
        self._ended = False

    def put(self, payload: Any) -> None:
        self._queue.put(payload)

    def finish(self, aborted: bool) -> None:
        self.aborted = aborted
        self._queue.put(self._END)

    def get(self) -> Any:
        item = self._queue.get()
        if item is self._END:
            self._queue.put(self._END)          # for the other threads that take
            return None
        return item


def serve() -> int:
    """A GPU worker: read `start`, run the runner over the jobs that come, answer on stdout."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                      # what the runner prints goes to the log, not the pipe
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(msg: dict[str, Any]) -> None:
        with lock:
            proto.write(json.dumps(msg, default=str) + "\n")
            proto.flush()

    first = sys.stdin.readline()
    if not first:
        return 0
    start = json.loads(first)
    config = _unpack(start["config"])
    runner = load_callable(start["runner"])
    feed = Feed()

    def read() -> None:
        for line in sys.stdin:
            msg = json.loads(line)
            if msg["op"] == "job":
                feed.put(_unpack(msg["job"]))
            elif msg["op"] == "end":
                feed.finish(aborted=False)
                return
        feed.finish(aborted=True)      # end of file without `end`: the parent is gone

    threading.Thread(target=read, daemon=True).start()
    send({"op": "ready", "pid": os.getpid(), "device": _device_name()})
    try:
        runner(config, feed, lambda job_id, record: send({"op": "done", "id": job_id,
                                                          "record": record}),
               lambda text: send({"op": "say", "text": text}))
    except BaseException:
        import traceback

        send({"op": "error", "text": traceback.format_exc()})
        raise
    proto.close()
    sys.stderr.flush()
    os._exit(0)        # skips torch's interpreter teardown (seconds); the runner closed its own


def load_callable(spec: str) -> Callable[..., Any]:
    """`module:function`, imported."""
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _device_name() -> str:
    """This worker's card, without initializing CUDA when torch is not imported yet."""
    visible = os.environ.get(VISIBLE, "")
    if "torch" not in sys.modules:
        return f"{VISIBLE}={visible}"
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, {VISIBLE}={visible}"
    return f"no GPU, {VISIBLE}={visible}"


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        sys.exit(serve())
    print("usage: python -m argus.bench.kernelbench.gpus serve  (started by GpuPool)",
          file=sys.stderr)
    sys.exit(2)
