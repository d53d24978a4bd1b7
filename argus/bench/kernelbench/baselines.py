"""Eager and torch.compile baseline times per task, measured on this card and cached.

A baseline is the task's own Model timed with `argus.bench.timing.measure` (whole device, L2
flushed, >= 100 trials), eagerly and after `torch.compile` (default mode), in a fresh baseline
worker process, on the task's own inputs (the same set-0 inputs the candidate is timed on),
with PyTorch's default numerics flags (cuDNN may use TF32 for convolutions: that favours the
baseline, never the solution). A third number, eager with TF32 off (`eager_notf32`: cuBLAS and
cuDNN in fp32), is the strict track's like-for-like baseline, since eager's default TF32
convolutions would fail the strict track themselves; it is timed only where TF32 changes the
forward's output bits, and is eager's own number elsewhere (worker.SAME_AS_EAGER).

Cache: one JSON file (default ~/.cache/argus/kernelbench/baselines.json) mapping a key to a
record. The key is (GPU name, torch version, CUDA version, task file sha256, mode), so a new
card, a new torch or an edited task never reuses stale numbers.

Invariant: a cached record is only returned for exactly the key it was measured under.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from argus.bench.kernelbench.process import Worker, WorkerError
from argus.bench.kernelbench.tasks import Task

DEFAULT_CACHE = Path("~/.cache/argus/kernelbench/baselines.json")


def default_cache_path() -> Path:
    env = os.environ.get("ARGUS_KERNELBENCH_CACHE")
    return Path(env).expanduser() if env else DEFAULT_CACHE.expanduser()


@dataclass(frozen=True)
class Environment:
    """What baseline numbers depend on besides the task."""

    gpu: str
    torch: str
    cuda: str

    @staticmethod
    def current(device: str = "cuda") -> Environment:
        import torch

        if device.startswith("cuda") and torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(torch.device(device))
        else:
            gpu = "cpu"
        return Environment(gpu=gpu, torch=torch.__version__, cuda=str(torch.version.cuda))


@dataclass(frozen=True)
class BaselineRecord:
    """Eager and compiled timings (Timing.to_json dicts) or their errors, for one task."""

    task_key: str
    task_sha256: str
    env: Environment
    eager: dict[str, Any] | None
    compile: dict[str, Any] | None
    compile_s: float | None = None
    measured_at: float = field(default_factory=time.time)
    flags: dict[str, str] = field(default_factory=dict)
    # None: not measured (a record cached before the field existed; measured on its next use)
    eager_notf32: dict[str, Any] | None = None

    @property
    def eager_ms(self) -> float | None:
        return _median(self.eager)

    @property
    def eager_notf32_ms(self) -> float | None:
        return self.eager_ms if same_as_eager(self.eager_notf32) else _median(self.eager_notf32)

    @property
    def compile_ms(self) -> float | None:
        return _median(self.compile)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task_key, "sha256": self.task_sha256,
                "env": {"gpu": self.env.gpu, "torch": self.env.torch, "cuda": self.env.cuda},
                "eager": self.eager, "compile": self.compile, "compile_s": self.compile_s,
                "measured_at": self.measured_at, "flags": self.flags,
                "eager_notf32": self.eager_notf32}

    @staticmethod
    def from_json(data: dict[str, Any]) -> BaselineRecord:
        return BaselineRecord(task_key=data["task"], task_sha256=data["sha256"],
                              env=Environment(**data["env"]), eager=data.get("eager"),
                              compile=data.get("compile"), compile_s=data.get("compile_s"),
                              measured_at=data.get("measured_at", 0.0),
                              flags=data.get("flags", {}),
                              eager_notf32=data.get("eager_notf32"))


def same_as_eager(t: dict[str, Any] | None) -> bool:
    """An eager-TF32-off entry that is eager's own number (TF32 changes no output bit)."""
    return bool(t) and "same_as_eager" in t


def _median(t: dict[str, Any] | None) -> float | None:
    if not t or "median_ms" not in t:
        return None
    return float(t["median_ms"])


def cache_key(env: Environment, sha256: str, mode: str = "default") -> str:
    return f"{env.gpu}|torch {env.torch}|cuda {env.cuda}|{sha256}|{mode}"


class BaselineCache:
    """The JSON cache file; reads lazily, writes atomically after every put."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path).expanduser() if path else default_cache_path()
        self._data: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            try:
                self._data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._data = {}
        return self._data

    def get(self, env: Environment, sha256: str, mode: str = "default"
            ) -> BaselineRecord | None:
        raw = self._load().get(cache_key(env, sha256, mode))
        return BaselineRecord.from_json(raw) if raw else None

    def put(self, record: BaselineRecord, mode: str = "default") -> None:
        with self._lock:
            self._put(record, mode)

    def _put(self, record: BaselineRecord, mode: str) -> None:
        data = self._load()
        data[cache_key(record.env, record.task_sha256, mode)] = record.to_json()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".baselines-")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def records(self) -> list[BaselineRecord]:
        return [BaselineRecord.from_json(v) for v in self._load().values()]


def first_set_seed(seed: int) -> int:
    """The seed of the judge's input set 0 (the task's own distribution), which is also the
    set a candidate is timed on: baselines are timed on exactly those inputs."""
    from argus.bench.kernelbench.inputs import plan

    return plan(1, seed)[0].seed


def measure_baseline(task: Task, *, device: str = "cuda", seed: int = 0, trials: int = 100,
                     warmup: int = 10,
                     modes: tuple[str, ...] = ("eager", "eager_notf32", "compile"),
                     timeout_s: float = 900.0, log_dir: Path | None = None) -> BaselineRecord:
    """Time the task's Model in a fresh baseline worker; errors are recorded, not raised."""
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="argus-kb-baseline-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    env = Environment.current(device)
    worker = Worker("baseline", log_dir / f"baseline-L{task.level}-{task.problem_id}.log")
    try:
        reply = worker.request("measure", timeout_s, task_path=str(task.path), device=device,
                               seed=seed, modes=list(modes), trials=trials, warmup=warmup,
                               input_seed=first_set_seed(seed))
        return BaselineRecord(task.key, task.sha256, env, reply.get("eager"),
                              reply.get("compile"), reply.get("compile_s"),
                              flags=reply.get("flags", {}),
                              eager_notf32=reply.get("eager_notf32"))
    except WorkerError as exc:
        err = {"error": f"{exc.kind}: {str(exc)[:1500]}"}
        return BaselineRecord(task.key, task.sha256, env, err, err, eager_notf32=err)
    finally:
        worker.close()


def get_or_measure(task: Task, cache: BaselineCache | None, *, device: str = "cuda",
                   seed: int = 0, trials: int = 100, warmup: int = 10,
                   timeout_s: float = 900.0, log_dir: Path | None = None) -> BaselineRecord:
    env = Environment.current(device)
    hit = cache.get(env, task.sha256) if cache is not None else None
    if hit is not None and hit.eager_ms is not None:
        if hit.eager_notf32 is not None:
            return hit
        # cached before eager-TF32-off existed: measure only that, keep the rest
        extra = measure_baseline(task, device=device, seed=seed, trials=trials,
                                 warmup=warmup, modes=("eager_notf32",),
                                 timeout_s=timeout_s, log_dir=log_dir)
        record = replace(hit, eager_notf32=extra.eager_notf32)
        if cache is not None and record.eager_notf32 is not None:
            cache.put(record)       # an error too, as a failed compile is: not retried
        return record
    record = measure_baseline(task, device=device, seed=seed, trials=trials, warmup=warmup,
                              timeout_s=timeout_s, log_dir=log_dir)
    if cache is not None and record.eager_ms is not None:
        cache.put(record)
    return record
