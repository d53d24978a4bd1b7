"""Judge one solution of one KernelBench task: correctness, integrity, provenance, speed.

`judge(task, solution)` returns a frozen `Judgment`. Steps:

1. A reference worker loads the task (shrunk on the CPU), builds Model from the seeded
   get_init_inputs(), and for each input set (inputs.py) writes the inputs and computes the
   float64 reference plus calibration runs (task dtype with TF32 off, TF32-rounded, bf16). The
   judge loads each reference into its own memory and deletes the file at once.
2. A candidate worker (another process) imports the solution, builds ModelNew with the same seed
   (and the reference's weights when its state_dict has the same keys and shapes), then runs it
   on each input file with poisoned allocations; it never receives a reference.
3. The judge compares every output with the reference (tolerance.py), runs the probes
   (probes.py) and gathers reasons. The strict track decides `correct`.
4. On a GPU, a correct solution is timed (timing.py, whole device, L2 flush, >= 100 trials),
   and so is one whose only strict failure is `imprecise` (a relaxed-track pass: the relaxed
   track's speed; the strict numbers count strict passes only), on two input sets it has not
   seen, refilled into the same argument tensors before every call
   and reflected there by a key of each call's own (inputs.reflect: no two calls see the same
   values, so neither a result cached by tensor identity nor one cached by value serves a
   call), and one timed call per set is checked against a reference of that call's inputs,
   recomputed here (`timing_sets`, `_check_timed`); its kernels are profiled
   (provenance.py), and baselines come from the cache or are measured: eager and
   torch.compile at PyTorch's default flags, and eager with TF32 off (the strict track's
   like-for-like baseline: fp32-accurate cuDNN / cuBLAS; baselines.py).

Reason codes (REASONS) are stable strings; `Judgment.reasons` lists them by priority, the first
being the main one. `correct` is True iff there is no reason. `solved` additionally needs a
verifiable task (no degenerate probe, not stochastic) and no proof that the work is PyTorch's.

Invariant: the candidate and the reference never share a process, and a judgment never reports
correct when any input set failed the strict track.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from argus.bench.kernelbench import inputs as kb_inputs
from argus.bench.kernelbench import probes, provenance, roofline, tolerance
from argus.bench.kernelbench.baselines import BaselineCache, BaselineRecord, get_or_measure
from argus.bench.kernelbench.process import LocalWorker, Worker, WorkerError
from argus.bench.kernelbench.worker import _DTYPES, same_fingerprints
from argus.bench.kernelbench.shrink import SizeBudget
from argus.bench.kernelbench.tasks import KernelBenchError, Task, task_from_path
from argus.bench.timing import Timing, side_stream_suspect
from argus.runtime.gpu_gate import gate, wait_counts

REASONS: dict[str, str] = {
    # the task itself
    "task_error": "the task file failed to load or its reference failed to run",
    "too_large_for_cpu": "the task does not fit a CPU run even after shrinking its sizes",
    "stochastic_task": "the reference output changes with the RNG seed (dropout in train "
                       "mode): no deterministic answer to compare with",
    # the solution
    "no_solution": "no solution file was found for the task",
    "solver_error": "the solver callback raised instead of producing a solution",
    "load_error": "the solution file failed to import or defines no ModelNew",
    "init_error": "ModelNew(*get_init_inputs()) raised",
    "runtime_error": "the forward raised an exception",
    "out_of_memory": "the solution ran out of memory",
    "timeout": "the solution did not finish within the time limit",
    "crash": "the solution's process died (segfault, abort or kill)",
    # integrity
    "timer_tampering": "the solution replaced a clock or judging function (time.perf_counter, "
                       "torch.cuda.Event, torch.cuda.synchronize, ...)",
    "global_state_changed": "the solution changed global numerics flags (TF32, matmul "
                            "precision, default dtype, ...)",
    "side_stream_work": "work ran outside the launch stream without joining it (device time "
                        "far above stream time)",
    "output_aliases_input": "the output shares memory with an input",
    "input_mutated": "the forward modified its inputs",
    # output
    "shape_mismatch": "the output's structure or shape differs from the reference",
    "dtype_mismatch": "the output's dtype differs from the task's",
    "uninitialized_output": "the output holds poisoned memory the solution never wrote (e.g. "
                            "torch.empty_like returned as is)",
    "nonfinite_output": "NaN or inf where the reference is finite",
    "zeros_output": "the output is all zeros and the reference is not",
    "constant_output": "the output is one constant and the reference is not",
    "echo_input": "the output is an input returned unchanged",
    "cached_output": "the output is bitwise the output for an earlier, different input set",
    "timed_output_wrong": "an output of a timed call is wrong although the watched runs were "
                          "right (a result cached across calls on the same tensors, or work "
                          "done only while watched)",
    "mismatch": "the output is wrong (fails even the relaxed 1e-2 allclose)",
    "imprecise": "the output passes the relaxed track but is not accurate to the task's dtype "
                 "(e.g. TF32 or bf16 arithmetic on an fp32 task)",
}
_PRIORITY = {name: i for i, name in enumerate(REASONS)}
# The distributions of the input sets a solution is timed on (`ReferenceSession.timing_sets`).
TIMING_DISTRIBUTIONS = ("task", "normal")
# What preparing a set holds per element of a floating input beside the input itself, at its
# peak: its float64 copy (8), the tf32 rung's fp32 copy (4) and the bf16 rung's (2). Inputs in
# a file (their dtypes unknown here) count 8 bytes per byte: a 16-bit input's share.
_PREPARE_EXTRA_BYTES_PER_FLOAT = 8 + 4 + 2
_PREPARE_BYTES_PER_FILE_BYTE = 8
# Reasons that fail both tracks (the others are about accuracy and are judged per track).
INTEGRITY_REASONS = frozenset(
    list(REASONS)[:list(REASONS).index("input_mutated") + 1]
    + ["shape_mismatch", "dtype_mismatch", "uninitialized_output"])


@dataclass(frozen=True)
class JudgeOptions:
    """How to judge. `device`: auto | cpu | cuda | cuda:N. `cpu_scale`: "auto" (shrink huge
    tasks on the CPU to `cpu_budget`), "none" (upstream sizes) or explicit overrides."""

    device: str = "auto"
    sets: int = 5
    seed: int = 0
    cpu_scale: str = "auto"
    cpu_budget: SizeBudget = SizeBudget()
    overrides: dict[str, int] | None = None
    timing: bool = True
    cpu_timing: bool = False
    trials: int = 100
    warmup: int = 10
    profile: bool = True
    baselines: bool = True
    baseline_cache: str | None = None
    timeout_s: float = 600.0
    candidate_timeout_s: float | None = None  # per forward / timing step (default timeout_s)
    workdir: str | None = None
    keep_files: bool = False
    ref_cache_bytes: int = 1 << 30
    # direct: the reference runs in the judge's own process and its references never leave
    # it; the candidate copies the judge's input tensors (CUDA IPC handles; a file on the CPU)
    # and hands its outputs over by CUDA IPC (a file on the CPU, or when the handles cannot be
    # mapped). Upstream sizes move several GB per set: through files that took minutes per
    # task. The candidate still runs in its own process.
    direct: bool = False

    def resolved_device(self) -> str:
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise KernelBenchError(f"device {self.device} requested but CUDA is not available",
                                   fix="use --device cpu (correctness only) or run on a GPU")
        return self.device


@dataclass(frozen=True)
class SetResult:
    """One input set: what was fed and how the candidate fared (per output tensor)."""

    index: int
    seed: int
    distribution: str
    kinds: tuple[str, ...]
    errors: tuple[dict[str, Any], ...]
    tolerances: tuple[dict[str, Any], ...]
    native: tuple[dict[str, Any], ...]
    strict_ok: bool
    relaxed_ok: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Judgment:
    """The verdict on one solution of one task (see module docstring and REASONS)."""

    task: str
    task_name: str
    task_path: str
    task_sha256: str
    solution: str
    device: str
    correct: bool
    correct_relaxed: bool
    reasons: tuple[str, ...]
    relaxed_reasons: tuple[str, ...]
    detail: str
    precision: str
    degenerate: tuple[str, ...]
    degenerate_relaxed: tuple[str, ...]
    stochastic: bool
    argus_kernels: str
    argus_evidence: str
    sizes: str
    overrides: dict[str, int] = field(default_factory=dict)
    sets: tuple[SetResult, ...] = ()
    weights: str = ""
    torch_ops: tuple[str, ...] = ()
    timing: dict[str, Any] | None = None
    eager: dict[str, Any] | None = None
    compiled: dict[str, Any] | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    roofline_ms: float | None = None
    suspect: tuple[str, ...] = ()
    seconds: float = 0.0
    level: int = 0
    problem_id: int = 0
    phases: dict[str, float] = field(default_factory=dict)   # where `seconds` went
    # eager with TF32 off (baselines.py; {"same_as_eager": ...} where TF32 changes nothing)
    eager_notf32: dict[str, Any] | None = None
    speedup_eager_notf32: float | None = None

    @property
    def reason(self) -> str:
        return self.reasons[0] if self.reasons else ""

    @property
    def verifiable(self) -> bool:
        return not self.degenerate and not self.stochastic

    @property
    def solved(self) -> bool:
        """Correct on a verifiable task, and not shown to run PyTorch instead of Argus."""
        return self.correct and self.verifiable and self.argus_kernels != "no"

    @property
    def solved_relaxed(self) -> bool:
        """Solved on the relaxed track: correct at KernelBench's 1e-2 on a task that check can
        verify (no probe passes it on every set), or solved on the strict track. A strict pass
        is a relaxed pass (tolerance.py); where 1e-2 cannot tell a trivial answer from the
        right one (L2/56: a sum of 32768 sigmoids is within 0.6% of its mean for any input, so
        a constant passes 1e-2) the relaxed track falls back to the strict check, whose probes
        fail. A task degenerate on the strict track too, or stochastic, is never solved: by
        `verifiable` here, not only through tolerance.py making a strict probe pass a relaxed
        one (a judgment built or read with degenerate but no degenerate_relaxed stays out)."""
        relaxed_verifiable = self.verifiable and not self.degenerate_relaxed
        return self.argus_kernels != "no" and (
            (self.correct_relaxed and relaxed_verifiable) or self.solved)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["sets"] = [dataclasses.asdict(s) for s in self.sets]
        data["solved"] = self.solved
        data["solved_relaxed"] = self.solved_relaxed
        data["verifiable"] = self.verifiable
        return _jsonable(data)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Judgment:
        names = {f.name for f in dataclasses.fields(Judgment)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["sets"] = tuple(SetResult(**{**s, "kinds": tuple(s["kinds"]),
                                            "errors": tuple(s["errors"]),
                                            "tolerances": tuple(s["tolerances"]),
                                            "native": tuple(s["native"]),
                                            "reasons": tuple(s.get("reasons", ()))})
                               for s in data.get("sets", []))
        for key in ("reasons", "relaxed_reasons", "degenerate", "degenerate_relaxed",
                    "torch_ops", "suspect"):
            kwargs[key] = tuple(kwargs.get(key, ()))
        return Judgment(**kwargs)

    def summary(self) -> str:
        head = f"{self.task} {self.task_name}: "
        if self.correct:
            head += f"correct (strict, {self.precision})"
        else:
            head += f"incorrect: {self.reason}"
            head += " (relaxed track: pass)" if self.correct_relaxed else ""
        if self.degenerate:
            head += f"; task degenerate for {', '.join(self.degenerate)}"
        if self.stochastic:
            head += "; task is stochastic"
        head += f"; argus kernels: {self.argus_kernels}"
        if self.speedup_eager is not None:
            head += f"; {self.speedup_eager:.2f}x vs eager"
        if self.speedup_eager_notf32 is not None:
            head += f", {self.speedup_eager_notf32:.2f}x vs eager with TF32 off"
        if self.speedup_compile is not None:
            head += f", {self.speedup_compile:.2f}x vs torch.compile"
        return head


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def _errors_from_json(d: dict[str, Any]) -> tolerance.Errors:
    return tolerance.Errors(rel_l2=float(d["rel_l2"]), max_elem=float(d["max_elem"]),
                            relaxed_ok=bool(d["relaxed_ok"]),
                            nonfinite_mismatch=int(d.get("nonfinite_mismatch", 0)),
                            exact=bool(d.get("exact", False)))


def _sort_reasons(reasons: set[str] | list[str]) -> tuple[str, ...]:
    return tuple(sorted(set(reasons), key=lambda r: _PRIORITY.get(r, len(_PRIORITY))))


# ----------------------------------------------------------------------------- reference side


@dataclass
class _RefSet:
    spec: kb_inputs.InputSpec
    reply: dict[str, Any]
    inputs_path: Path
    ref: list[torch.Tensor] | None
    tols: list[tolerance.Tolerance]
    probe_strict: set[str] = field(default_factory=set)
    probe_relaxed: set[str] = field(default_factory=set)
    probes_done: bool = False
    inputs: list[Any] | None = None      # direct judging: the inputs, in this process
    # a big set once compared: its reference in the outputs' dtypes, for the next set's stale
    # probe only (`ReferenceSession.keep_stale`; the float64 reference is gone)
    stale: list[torch.Tensor] | None = None

    @property
    def present(self) -> bool:
        return self.ref is not None and (self.inputs is not None or self.inputs_path.exists())


@dataclass(frozen=True)
class _TimingBase:
    """A timing set: its spec and how it was drawn (the distribution and absolute values of
    the correctness set of the same distribution, fallbacks included)."""

    spec: kb_inputs.InputSpec
    distribution: str
    absolute: bool


def _no_hold_while_waiting_for(thread: threading.Thread) -> None:
    """A thread preparing a set enters the GPU gate; waiting for it while this thread holds
    the gate's shared hold deadlocks once a timing queues at the turnstile (it waits for this
    hold, the preparation waits behind it). A caller that does is a bug: said at once."""
    from argus.runtime.gpu_gate import holding_shared

    if thread.is_alive() and holding_shared():
        raise RuntimeError("kernelbench judge: waiting for a set prepared ahead while holding "
                           "the GPU gate's shared hold (a deadlock once a timing queues); fix: "
                           "leave the hold first (_judge_sets: hold.leave())")


class ReferenceSession:
    """The reference side of judging one task; reusable for several solutions of that task."""

    _phase_lock = threading.Lock()  # phases are added by the judge's and prefetch threads

    def __init__(self, task: Task | Path | str, options: JudgeOptions = JudgeOptions(), *,
                 reference: Worker | None = None, candidate: Worker | None = None,
                 baseline_cache: BaselineCache | None = None):
        """`reference`: a reference worker to reuse (it stays open at close); `candidate`: a
        candidate process started ahead (its torch import overlapped other work); both are
        what a parallel run passes from one task to the next."""
        self.task = task if isinstance(task, Task) else task_from_path(task)
        if options.sets < 5:
            raise KernelBenchError(f"JudgeOptions.sets={options.sets}: a judgment needs at "
                                   "least 5 input sets", fix="use sets>=5 (the default is 5)")
        if options.timing and options.trials < len(TIMING_DISTRIBUTIONS):
            raise KernelBenchError(f"JudgeOptions.trials={options.trials}: the timed calls "
                                   f"must check each of the {len(TIMING_DISTRIBUTIONS)} timing "
                                   "sets", fix=f"use trials>={len(TIMING_DISTRIBUTIONS)} (the "
                                   "default is 100) or timing=False")
        self.options = options
        self.device = options.resolved_device()
        self.compare_device = torch.device(self.device)
        base = Path(options.workdir) if options.workdir else None
        if base:
            base.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"argus-kb-L{self.task.level}-"
                                                f"{self.task.problem_id}-", dir=base))
        for sub in ("inputs", "refs", "outputs", "logs", "shared"):
            (self.dir / sub).mkdir()
        self.specs = kb_inputs.plan(options.sets, options.seed)
        self.sets: dict[int, _RefSet] = {}
        self.worker: Worker | None = None
        self.info: dict[str, Any] | None = None
        self.error: WorkerError | None = None
        self.stochastic = False
        self._started = False
        self._spare: Worker | None = candidate
        self._candidates_started = 0
        self._reused_reference = reference
        self.baseline_cache = baseline_cache
        self.phases: dict[str, float] = {}
        self.ipc_error = ""       # why CUDA IPC fell back to files, if it did
        self._handed: Any = None   # cudaipc.StagedInputs of the last hand-over
        # sets being prepared ahead in a thread of their own (`prefetch`): key -> (thread,
        # box with "entries" or "error"); the reference worker serves one request at a time,
        # so every other request of this session waits for them first (`_join_ahead`)
        self._ahead: dict[Any, tuple[threading.Thread, dict[str, Any]]] = {}

    def candidate_worker(self) -> Worker:
        """A fresh candidate process; the next one is started now so that its torch import
        overlaps with judging (every solution still gets a process of its own)."""
        worker = self._spare if self._spare is not None and self._spare.proc.poll() is None \
            else self._new_candidate()
        self._spare = None
        if self._candidates_started:  # a second solution: keep one warm from now on
            self._spare = self._new_candidate()
        self._candidates_started += 1
        return worker

    def _new_candidate(self) -> Worker:
        return Worker("candidate", self.dir / "logs" / f"candidate-{time.time_ns()}.log",
                      cwd=self.dir / "outputs", forked=True)

    # -- lifecycle
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        opts = self.options
        overrides = opts.overrides
        budget = None
        if self.device == "cpu" and overrides is None and opts.cpu_scale == "auto":
            budget = {"elements": opts.cpu_budget.elements, "flops": opts.cpu_budget.flops}
        t0 = time.perf_counter()
        if opts.direct:
            self.worker = LocalWorker("reference")
        elif self._reused_reference is not None and self._reused_reference.proc.poll() is None:
            self.worker = self._reused_reference
        else:
            self.worker = Worker("reference", self.dir / "logs" / "reference.log", cwd=self.dir)
        try:
            self.info = self.worker.request(
                "init", opts.timeout_s, task_path=str(self.task.path), device=self.device,
                seed=opts.seed, overrides=overrides, cpu_budget=budget,
                workdir=str(self.dir / "shared"))
        except WorkerError as exc:
            self.error = exc
        self.add_phase("reference start", time.perf_counter() - t0)

    def add_phase(self, name: str, seconds: float) -> None:
        with self._phase_lock:      # a prefetch thread adds its reference phases too
            self.phases[name] = self.phases.get(name, 0.0) + float(seconds)

    def close(self) -> None:
        # the workers, the buffers and the folder go whatever fails first (a preparation
        # ahead that raises in _drop_ahead left the worker processes running)
        try:
            self._drop_ahead()
        finally:
            for worker in (self.worker, self._spare):
                if worker is not None and worker is not self._reused_reference:
                    worker.close()
            self.worker = self._spare = None
            self.sets.clear()           # direct judging: the references and inputs live here
            self._free_handed()
            if self.options.direct and self.device != "cpu":
                # this task's references and inputs go back to the driver, not to this
                # process's cache: on the H200 the judge's cache grew to 124 GB of the card's
                # 140 while candidates and the hand-over buffers (cudaMalloc, outside the
                # cache) ran out
                torch.cuda.empty_cache()
            if not self.options.keep_files:
                shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ReferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sets
    def get(self, index: int) -> _RefSet:
        """Input set `index` with its reference loaded (re-prepared if it was evicted)."""
        assert self.worker is not None and self.info is not None
        cached = self.sets.get(index)
        if cached is not None and cached.present:
            return cached
        ahead = self._take_ahead(index)
        self._join_ahead()          # the worker serves one request at a time
        entry = ahead[0] if ahead else self._prepare(self.specs[index],
                                                     check_stochastic=index == 0)
        if cached is not None:
            entry.probe_strict, entry.probe_relaxed = cached.probe_strict, cached.probe_relaxed
            entry.probes_done = cached.probes_done
        self.sets[index] = entry
        return entry

    # -- preparing ahead
    def small(self, entry: _RefSet) -> bool:
        """Whether the task's sets are small enough to prepare ahead: all its sets' float64
        references fit `ref_cache_bytes` (what the session keeps anyway), and so does what
        preparing one set holds at its peak (its inputs, their float64 copies, the rungs'), so
        one more set in memory while the candidate runs is little beside the memory estimate
        (gpumem.JUDGE_BYTES_PER_ELEMENT, which does not count one)."""
        if entry.ref is None:
            return False
        nbytes = sum(r.numel() * r.element_size() for r in entry.ref)
        # preparing a set holds its inputs, their float64 copies and the precision rungs'
        # copies at once, beside the candidate's run: a reduction's reference is small while
        # its inputs are not (L1/47-53 at 8 GB of inputs ran out of memory on the H200 with
        # the judge's process at 116 GB, every one of them alone)
        preparing = self._preparation_bytes(entry)
        if preparing is None:   # unknown: not prepared ahead (0 would always pass the bound)
            return False
        return nbytes * (len(self.specs) + len(TIMING_DISTRIBUTIONS)) <= \
            self.options.ref_cache_bytes and preparing <= self.options.ref_cache_bytes

    def give_back_cached(self) -> None:
        """Return this process's cached GPU blocks (the comparison's and the references'
        temporaries) to the device before a big set's candidate call: cached blocks are memory
        no other process can use (L1/21 ran out of memory alone on the H200, the candidate at
        24.6 GB wanting 12 more while the judge's process held 104 GB). Milliseconds; for
        small sets the call is skipped (they are prepared ahead instead, in use)."""
        if self.device != "cpu" and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    @staticmethod
    def _preparation_bytes(entry: _RefSet) -> int | None:
        """What preparing the set holds at its peak, from its inputs in this process (direct
        judging: per tensor, a floating one with its float64 and rung copies) or in their file;
        None when the file cannot be read (the caller then does not prepare ahead)."""
        if entry.inputs is not None:
            return sum(v.numel() * (v.element_size() + (_PREPARE_EXTRA_BYTES_PER_FLOAT
                                                        if v.is_floating_point() else 0))
                       for v in entry.inputs if isinstance(v, torch.Tensor))
        try:
            return _PREPARE_BYTES_PER_FILE_BYTE * entry.inputs_path.stat().st_size
        except OSError:
            return None

    def prefetch(self, key: Any) -> None:
        """Prepare set `key` (an index) in a thread of its own, while the candidate runs: its
        float64 reference (and its gate waits) then overlap the candidate's work instead of
        following it. `get` takes the result; a
        preparation that failed is done again there, in the judge's thread (it ran beside the
        candidate, which may have held the memory it lacked; and a session judges several
        solutions, so a failure kept would be replayed to a later one): what fails then is
        raised, as if prepared then."""
        if key in self._ahead or (isinstance(key, int) and (
                key >= len(self.specs) or (key in self.sets and self.sets[key].present))):
            return
        self._join_ahead()          # one request at a time
        specs = [self.specs[key]]
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["entries"] = [self._prepare(spec) for spec in specs]
            except BaseException as exc:  # noqa: BLE001 - re-raised where the set is taken
                box["error"] = exc

        thread = threading.Thread(target=work, name=f"kb-prefetch-{key}", daemon=True)
        thread.start()
        self._ahead[key] = (thread, box)

    def _take_ahead(self, key: Any) -> list[_RefSet] | None:
        """The sets prepared ahead under `key` (waited for), None when none were asked or the
        preparation failed (the caller prepares them now: `prefetch`)."""
        item = self._ahead.pop(key, None)
        if item is None:
            return None
        thread, box = item
        t0 = time.perf_counter()
        _no_hold_while_waiting_for(thread)
        thread.join()
        self.add_phase("reference sets waited for (prepared ahead)", time.perf_counter() - t0)
        if "error" in box:
            self.add_phase("# preparations ahead failed, done again", 1.0)
            return None
        return box["entries"]

    def preparing(self) -> bool:
        """Whether a set is being prepared ahead right now (a thread that enters the gate)."""
        return any(thread.is_alive() for thread, _ in self._ahead.values())

    def _join_ahead(self) -> None:
        """Wait for every preparation still running (their results stay to be taken)."""
        for thread, _ in list(self._ahead.values()):
            _no_hold_while_waiting_for(thread)
            thread.join()

    def _prepare(self, spec: kb_inputs.InputSpec, check_stochastic: bool = False, *,
                 absolute: bool = False, reflect: int | None = None,
                 distribution: str | None = None) -> _RefSet:
        """Input set `spec` and its float64 reference, from the reference worker (`reflect`:
        a timed call's, see `timed_reference`)."""
        assert self.worker is not None and self.info is not None
        index = spec.index
        inputs_path = self.dir / "inputs" / f"set{index}.pt"
        ref_path = self.dir / "refs" / f"set{index}.pt"
        direct = self.options.direct
        if direct:   # a file handed over before holds the inputs of an earlier preparation
            inputs_path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        reply = self.worker.request(
            "prepare", self.options.timeout_s, index=index, seed=spec.seed,
            distribution=distribution or spec.distribution,
            inputs_path=None if direct else str(inputs_path),
            ref_path=None if direct else str(ref_path), calibrate=False,
            check_stochastic=check_stochastic, absolute=absolute, reflect=reflect)
        inputs = None
        if direct:
            tensors = reply.pop("tensors")
            ref = [r.to(self.compare_device) for r in tensors["ref"]]
            inputs = tensors["inputs"]
        else:
            # tensors only (weights_only): the file lies where a candidate's process can write
            ref = torch.load(ref_path, map_location=self.compare_device, weights_only=True)
            ref_path.unlink()  # the reference never stays where a candidate could read it
        for name, seconds in reply.get("phases", {}).items():
            self.add_phase(f"reference {name}", seconds)
        self.add_phase("reference sets", time.perf_counter() - t0)
        if reply.get("stochastic"):
            self.stochastic = True
        tols = [tolerance.strict_tolerance(meta["dtype"], _errors_from_json(native))
                for meta, native in zip(reply["outputs"], reply["calibration"]["native"])]
        return _RefSet(spec, reply, inputs_path, ref, tols, inputs=inputs)

    def rungs(self, index: int) -> dict[str, tolerance.Errors | None]:
        """PyTorch's own errors at TF32 and at bf16 on set `index`, worst output first: what
        places a solution that fails the strict track in its precision class. `get` skips
        them (a correct solution is fp32 whatever they are, and at upstream sizes they cost
        two more forwards and comparisons per set); the set is prepared again with them here,
        a pure function of its seed, and its tensors dropped at once."""
        assert self.worker is not None
        self._join_ahead()          # the worker serves one request at a time
        spec = self.specs[index]
        direct = self.options.direct
        inputs_path = self.dir / "inputs" / f"rungs{index}.pt"
        ref_path = self.dir / "refs" / f"rungs{index}.pt"
        t0 = time.perf_counter()
        try:
            reply = self.worker.request(
                "prepare", self.options.timeout_s, index=index, seed=spec.seed,
                distribution=spec.distribution,
                inputs_path=None if direct else str(inputs_path),
                ref_path=None if direct else str(ref_path), calibrate=True,
                check_stochastic=False)
        finally:
            inputs_path.unlink(missing_ok=True)
            ref_path.unlink(missing_ok=True)
        reply.pop("tensors", None)
        self.add_phase("reference rungs (precision class)", time.perf_counter() - t0)
        calib = reply["calibration"]
        return {name: _worst(calib.get(name)) for name in ("tf32", "bf16")}

    def keep_stale(self, index: int) -> None:
        """Once set `index` is compared, a big set keeps only what the next set's stale probe
        needs: its reference in the outputs' dtypes (half a float32 task's float64 bytes; a
        stale answer would be returned in them), never a reference to compare with again."""
        entry = self.sets.get(index)
        if entry is None or entry.ref is None or not self._big(entry):
            return
        entry.stale = [r.to(_DTYPES.get(meta["dtype"], r.dtype))
                       for r, meta in zip(entry.ref, entry.reply["outputs"])]
        entry.ref = None

    def _big(self, entry: _RefSet) -> bool:
        assert entry.ref is not None
        nbytes = sum(r.numel() * r.element_size() for r in entry.ref)
        return nbytes * len(self.specs) > self.options.ref_cache_bytes

    def release(self, index: int) -> None:
        """Drop a big reference from memory (it is re-prepared when needed again)."""
        entry = self.sets.get(index)
        if entry is None:
            return
        if entry.stale is not None:     # big, and its reference gone already (`keep_stale`)
            entry.stale = entry.inputs = None
            if index != 0:
                entry.inputs_path.unlink(missing_ok=True)
        if entry.ref is None:
            return
        nbytes = sum(r.numel() * r.element_size() for r in entry.ref)
        if nbytes * len(self.specs) > self.options.ref_cache_bytes:
            entry.ref = None
            entry.inputs = None
            if index != 0:
                entry.inputs_path.unlink(missing_ok=True)

    def release_inputs(self, index: int) -> None:
        """Drop a big set's inputs held in this process (direct judging) once its own
        comparison is done; its reference stays for the next set's stale probe."""
        entry = self.sets.get(index)
        if entry is not None:
            self.drop_big_inputs(entry)

    def drop_big_inputs(self, entry: _RefSet) -> None:
        """`release_inputs` for any set (a timing set too)."""
        if entry.inputs is None or entry.ref is None:
            return
        nbytes = sum(r.numel() * r.element_size() for r in entry.ref)
        if nbytes * len(self.specs) > self.options.ref_cache_bytes:
            entry.inputs = None

    def load_inputs(self, entry: _RefSet, device: Any = None) -> list[Any]:
        """The set's inputs: those held here, else read from its file onto `device` (default:
        the comparison's device)."""
        if entry.inputs is not None:
            return entry.inputs
        return torch.load(entry.inputs_path, map_location=device or self.compare_device,
                          weights_only=True)    # plain values: a candidate can write there

    def input_args(self, entry: _RefSet) -> dict[str, Any]:
        """How a candidate gets this set's inputs: always the judge's own tensors, never a
        recipe to draw them again (a candidate's process must not have to reproduce the
        reference's random stream). Through files, or judging `direct` on a GPU by CUDA IPC
        handles of the tensors this process holds (the candidate copies them before its
        forward; `shared_intact` checks afterwards that they were not written through the
        handles)."""
        if not self.options.direct:
            return {"inputs_path": str(entry.inputs_path)}
        assert entry.inputs is not None, "direct judging: the set's inputs are held here"
        return self.hand_over(entry.inputs, entry.inputs_path)

    def hand_over(self, values: list[Any], path: Path) -> dict[str, Any]:
        """Copies of `values` in a CUDA buffer of their own whose IPC handle the candidate maps
        (`cudaipc.StagedInputs`, alive until `free_hand_over` or the next hand-over), or
        `values` written to `path` (on the CPU, or when a tensor cannot be shared: any failure
        here falls back to the file)."""
        from argus.bench.kernelbench.cudaipc import StagedInputs
        from argus.bench.kernelbench.worker import _DTYPES

        if self.device != "cpu":
            try:
                # never a handle of the judge's own tensors: a torch IPC handle opens the whole
                # allocator segment, which also holds float64 references and other tasks' sets.
                # The copies are GPU work: inside the gate (callers hand over outside the
                # judge's hold, just before the candidate's request), not beside a timing
                with gate().shared():
                    self._free_handed()
                    self._handed = StagedInputs(values, _DTYPES)
                # plain values only: the request's JSON would turn any other object (a dtype)
                # into its str(), and the candidate's forward would get that string
                json.dumps(self._handed.handles)
                return {"shared": self._handed.handles}
            except Exception as exc:  # noqa: BLE001 - not shareable: through a file instead
                self._free_handed()
                self.add_phase("# input hand-overs by file", 1.0)
                self.ipc_error = self.ipc_error or f"inputs: {type(exc).__name__}: {exc}"
        if not path.exists():
            torch.save([v.detach().cpu() if isinstance(v, torch.Tensor) else v
                        for v in values], path)
        return {"inputs_path": str(path)}

    def _free_handed(self) -> None:
        handed, self._handed = self._handed, None
        if handed is not None:
            handed.free()

    def free_hand_over(self) -> None:
        """Free the staged copies of the last hand-over once the candidate's request that read
        them has returned (the candidate copies them and unmaps the buffer before its
        forward): not held through the comparison and the next set's reference, nor, for the
        two timing sets, through the check and the baselines until the session closes."""
        if self._handed is not None:
            with gate().shared():       # re-entrant: no entry of its own inside a hold
                self._free_handed()

    def shared_intact(self, entry: _RefSet) -> bool:
        """Direct judging on a GPU: the inputs this process shared with the candidate still
        have the fingerprints they were drawn with (the candidate mapped them, and could have
        written through the mapping)."""
        from argus.bench.kernelbench.worker import _fingerprint

        if not self.options.direct or self.device == "cpu" or entry.inputs is None:
            return True
        return same_fingerprints([_fingerprint(v) for v in entry.inputs],
                                 entry.reply.get("fingerprints") or [])

    def _timing_specs(self) -> list[kb_inputs.InputSpec]:
        n = len(self.specs)
        return [kb_inputs.InputSpec(n + k, self.options.seed * 1000 + 17 * (n + k) + 1, dist)
                for k, dist in enumerate(TIMING_DISTRIBUTIONS)]

    def _drop_ahead(self) -> None:
        """Forget finished preparations nobody took (their tensors go)."""
        self._join_ahead()
        self._ahead.clear()

    def timing_sets(self) -> tuple[dict[str, Any], list[_TimingBase]]:
        """What the candidate is timed on: input sets it has not seen (new seeds; the task's
        own distribution, which is what upstream and the baselines time, and a normal one, so
        that a signed set is timed too), drawn as the correctness set of the same distribution
        was (its fallback to absolute values or the task's own), without a reference: the
        candidate reflects a set by a key of its own for every call (`inputs.reflect`), and
        the judge computes references only for the calls it checks (`timed_reference`).
        Returns the arguments of the candidate's `time` (the sets' inputs concatenated, handed
        over in one piece; the judge keeps none of them) and the sets."""
        self._join_ahead()
        self._drop_ahead()
        assert self.worker is not None
        bases = []
        values: list[Any] = []
        t0 = time.perf_counter()
        # direct judging draws them in this thread: one shared hold for both sets and the
        # hand-over's copies (a reference worker process enters the gate itself)
        hold = _SharedHold()
        try:
            if self.options.direct:
                hold.enter()
            for spec in self._timing_specs():
                drawn = next((e.reply.get("gen") or {} for e in self.sets.values()
                              if e.spec.distribution == spec.distribution), {})
                base = _TimingBase(spec, str(drawn.get("distribution", spec.distribution)),
                                   bool(drawn.get("absolute", False)))
                path = self.dir / "inputs" / f"set{spec.index}.pt"
                path.unlink(missing_ok=True)
                reply = self.worker.request(
                    "make_inputs", self.options.timeout_s, seed=spec.seed,
                    distribution=base.distribution, absolute=base.absolute,
                    inputs_path=None if self.options.direct else str(path))
                # through files, the sets only go from one file to another: never onto the GPU
                values += reply["tensors"] if self.options.direct else \
                    torch.load(path, map_location="cpu", weights_only=True)
                path.unlink(missing_ok=True)
                bases.append(base)
            self.add_phase("reference timing sets (inputs)", time.perf_counter() - t0)
            path = self.dir / "inputs" / "timing.pt"
            path.unlink(missing_ok=True)
            if self.options.direct:
                args = self.hand_over(values, path)
            else:
                torch.save([v.detach().cpu() if isinstance(v, torch.Tensor) else v
                            for v in values], path)
                args = {"inputs_path": str(path)}
        finally:
            hold.leave()
        del values                  # handed over: the candidate has its copies now
        return {**args, "sets": len(bases)}, bases

    def drop_timed(self, entry: _RefSet) -> None:
        """Forget a checked timed call's inputs and reference (and their file)."""
        entry.ref = entry.inputs = None
        entry.inputs_path.unlink(missing_ok=True)

    def timed_reference(self, base: _TimingBase, key: int) -> _RefSet:
        """The inputs of a checked timed call (timing set `base` reflected by `key`, as the
        candidate reflected it) and their float64 reference."""
        return self._prepare(base.spec, absolute=base.absolute, reflect=key,
                             distribution=base.distribution)

    def run_probes(self, entry: _RefSet, inputs: list[Any], previous: _RefSet | None) -> None:
        """Which trivial answers would pass on this set (and stale ones across sets)."""
        assert entry.ref is not None
        if not entry.probes_done:
            for k, (ref, tol) in enumerate(zip(entry.ref, entry.tols)):
                dtype = _DTYPES.get(entry.reply["outputs"][k]["dtype"])
                for name, probe in probes.iter_probes(ref, inputs, dtype):
                    strict, relaxed = probes.probe_passes(probe, ref, tol)
                    if strict:
                        entry.probe_strict.add(name)
                    if relaxed:
                        entry.probe_relaxed.add(name)
            entry.probes_done = True
        # a big previous set is held only as its stale answer (`keep_stale`): compared in
        # both directions as it is, or the two would hold 16 bytes an element
        earlier = previous.ref if previous is not None and previous.ref is not None else \
            previous.stale if previous is not None else None
        if previous is not None and earlier is not None:
            for a, b in ((entry.ref, earlier), (earlier, entry.ref)):
                tols = entry.tols if a is entry.ref else previous.tols
                target = entry if a is entry.ref else previous
                for ra, rb, tol in zip(a, b, tols):
                    if ra.shape != rb.shape:
                        continue
                    strict, relaxed = probes.probe_passes(rb, ra, tol)
                    if strict:
                        target.probe_strict.add("stale")
                    if relaxed:
                        target.probe_relaxed.add("stale")

    def degenerate(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Probes passing on every set (strict, relaxed)."""
        done = [s for s in self.sets.values() if s.probes_done]
        if not done:
            return (), ()
        strict = set.intersection(*(s.probe_strict for s in done))
        relaxed = set.intersection(*(s.probe_relaxed for s in done))
        return tuple(sorted(strict)), tuple(sorted(relaxed))


# ----------------------------------------------------------------------------- judging


def judge(task: Task | Path | str, solution: Path | str,
          options: JudgeOptions = JudgeOptions()) -> Judgment:
    """Judge one solution file (a module defining ModelNew) against one task file."""
    with ReferenceSession(task, options) as session:
        return judge_with(session, solution)


def judge_solver(task: Task | Path | str, solver: Callable[[Task], str | Path],
                 options: JudgeOptions = JudgeOptions(), save_to: Path | None = None
                 ) -> Judgment:
    """Ask `solver(task)` for a solution (source text or a path) and judge it."""
    task = task if isinstance(task, Task) else task_from_path(task)
    path = materialize_solution(task, solver(task), save_to)
    return judge(task, path, options)


def materialize_solution(task: Task, produced: str | Path, save_to: Path | None) -> Path:
    """A solver's output as a file: a path is used as is, source text is written out."""
    if isinstance(produced, Path) or (isinstance(produced, str) and "\n" not in produced
                                      and produced.endswith(".py") and Path(produced).exists()):
        return Path(produced)
    target_dir = Path(save_to) if save_to else Path(tempfile.mkdtemp(prefix="argus-kb-sol-"))
    target = target_dir / f"level{task.level}" / f"{task.stem}.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(str(produced))
    return target


def _failure(session: ReferenceSession, solution: str, kind: str, detail: str,
             started: float, **extra: Any) -> Judgment:
    task = session.task
    info = session.info or {}
    deg, deg_relaxed = session.degenerate()
    static = provenance.static_verdict(Path(solution)) if Path(solution).exists() else None
    base = dict(
        task=task.key, task_name=task.name, task_path=str(task.path), task_sha256=task.sha256,
        solution=solution, device=session.device, correct=False, correct_relaxed=False,
        reasons=(kind,), relaxed_reasons=(kind,), detail=detail, precision="n/a",
        degenerate=deg, degenerate_relaxed=deg_relaxed, stochastic=session.stochastic,
        argus_kernels=static.verdict if static else "unknown",
        argus_evidence=static.evidence if static else "",
        sizes=info.get("sizes", ""), overrides=info.get("overrides", {}) or {},
        seconds=time.perf_counter() - started, level=task.level, problem_id=task.problem_id,
        phases=_rounded(session.phases))
    base.update(extra)
    return Judgment(**base)


def _rounded(phases: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in sorted(phases.items(), key=lambda kv: -kv[1])}


def judge_with(session: ReferenceSession, solution: Path | str) -> Judgment:
    """Judge a solution against a (possibly shared) reference session."""
    started = time.perf_counter()
    solution = str(Path(solution).resolve())
    waited = wait_counts()
    cand = session.candidate_worker()  # starts importing torch while the reference works
    try:
        return _with_gate_waits(_judge_with(session, solution, cand, started), waited)
    finally:
        cand.close()


def _with_gate_waits(j: Judgment, before: dict[str, float]) -> Judgment:
    """The judgment with what this thread (the judge's side of the task: references, probes,
    comparisons) waited at the GPU gate added to its phase table (the candidate's waits come
    with its runs' phases)."""
    phases = dict(j.phases)
    for k, v in wait_counts().items():
        delta = v - before.get(k, 0.0)
        if delta:
            phases[f"judge gate {k[:-2]}" if k.endswith(" s") else f"# judge gate {k}"] = delta
    return dataclasses.replace(j, phases=_rounded(phases))


def _judge_with(session: ReferenceSession, solution: str, cand: Worker, started: float
                ) -> Judgment:
    session.start()
    if session.error is not None:
        kind = session.error.kind if session.error.kind in REASONS else "task_error"
        return _failure(session, solution, kind, str(session.error), started)
    assert session.info is not None
    try:
        first = session.get(0)
    except WorkerError as exc:
        return _failure(session, solution, _reference_kind(exc),
                        f"reference failed: {exc}", started)
    out_nbytes = [m["nbytes"] for m in first.reply["outputs"]]
    return _judge_candidate(session, cand, solution, out_nbytes, started)


def _judge_candidate(session: ReferenceSession, cand: Worker, solution: str,
                     out_nbytes: list[int], started: float) -> Judgment:
    opts = session.options
    info = session.info or {}
    clock = _Clock(session)
    try:
        with clock("candidate init (wait, import, ModelNew)"):
            init = cand.request("init", opts.timeout_s, solution_path=solution,
                                init_path=info["init_path"], state_path=info["state_path"],
                                seed=opts.seed, device=session.device, out_nbytes=out_nbytes)
        if init.get("boot_s") is not None:
            session.add_phase("candidate boot (python, torch, harness)", init["boot_s"])
    except WorkerError as exc:
        return _failure(session, solution, _kind(exc), str(exc), started)
    # The judge's shared hold of the GPU gate runs from a set's comparison through the next
    # set's reference and probes: one entry per set instead of three (each entry waits behind
    # every timing queued at the gate). Never held across a request to another process that
    # enters the gate itself (the candidate, and the reference worker when not judging
    # `direct`): a timing queued at the turnstile would wait for this hold while this thread
    # waits for that process, which waits for the timing.
    hold = _SharedHold()
    try:
        return _judge_sets(session, cand, solution, started, init, hold)
    finally:
        hold.leave()


def _judge_sets(session: ReferenceSession, cand: Worker, solution: str, started: float,
                init: dict[str, Any], hold: "_SharedHold") -> Judgment:
    opts = session.options
    info = session.info or {}
    clock = _Clock(session)
    reasons: set[str] = set()
    relaxed_reasons: set[str] = set()
    details: list[str] = []
    if init.get("tamper"):
        reasons.add("timer_tampering")
        details.append("replaced at import: " + ", ".join(init["tamper"]))
    if init.get("flags"):
        reasons.add("global_state_changed")
        details.append("changed at import: " + "; ".join(init["flags"]))
    set_results: list[SetResult] = []
    cand_errors: list[tolerance.Errors] = []
    fingerprints: list[tuple[Any, ...]] = []
    set_prints: dict[int, list[tuple[Any, ...]]] = {}
    torch_ops: dict[str, int] = {}
    argus_ops = 0
    previous: _RefSet | None = None
    want_timing = opts.timing and (session.device != "cpu" or opts.cpu_timing)
    for spec in session.specs:
        if not opts.direct or session.preparing():
            # the reference worker process (or the thread preparing this set ahead, waited
            # for in `get`) enters the gate itself
            hold.leave()
        try:
            entry = session.get(spec.index)
        except WorkerError as exc:
            return _failure(session, solution, _reference_kind(exc), f"reference failed on "
                            f"set {spec.index}: {exc}", started)
        hold.enter()
        inputs = session.load_inputs(entry)
        with clock("probes"):
            session.run_probes(entry, inputs, previous)
        with clock("input hand-over"):
            # staged inside this hold (its copies are GPU work): no gate entry of its own
            args = session.input_args(entry)
        hold.leave()                         # the candidate's run enters the gate itself
        if session.small(entry) and spec.index + 1 < len(session.specs):
            # the next set's reference is prepared while the candidate runs this one
            session.prefetch(spec.index + 1)
        else:
            session.give_back_cached()
        out_path = session.dir / "outputs" / f"out{spec.index}.pt"
        try:
            with clock("candidate first run (incl. lowering, compiles)" if spec.index == 0
                       else "candidate runs"):
                run = cand.request("run", opts.candidate_timeout_s or opts.timeout_s,
                                   index=spec.index, seed=spec.seed, out_path=str(out_path),
                                   export=opts.direct, **args)
            _run_phases(session, run, spec.index == 0)
            altered = _altered_inputs(session, entry, run)
            if altered:
                return _failure(session, solution, "input_mutated", altered, started,
                                weights=init.get("weights", ""))
            with clock("output transfer"):
                outs = _receive_outputs(session, cand, run, out_path)
        except WorkerError as exc:
            return _failure(session, solution, _kind(exc),
                            f"set {spec.index} ({entry.reply['distribution']}): {exc}", started,
                            weights=init.get("weights", ""))
        for k, v in run.get("compute_ops", {}).items():
            torch_ops[k] = torch_ops.get(k, 0) + v
        argus_ops += int(run.get("argus_ops", 0))
        with clock("compare"):
            hold.enter()                    # kept through the next set's reference
            session.free_hand_over()        # read by the run: not kept to the next hand-over
            result = _compare_set(entry, inputs, outs, run, fingerprints)
            set_prints[spec.index] = [probes.fingerprint(o) for o in outs]
        # the name `inputs` too: a big set's inputs are let go of by `release_inputs` below,
        # and this name would hold them beside the next set's preparation (L1/87: 4 GiB)
        del outs, inputs
        set_results.append(result[0])
        reasons |= result[1]
        relaxed_reasons |= result[2]
        details.extend(result[3])
        cand_errors.append(result[4])
        fingerprints.extend(set_prints[spec.index])
        if previous is not None:
            session.release(previous.spec.index)
        if opts.direct and spec.index != session.specs[-1].index:
            session.release_inputs(spec.index)   # the next set's stale probe needs only ref
        if spec.index != session.specs[-1].index:
            session.keep_stale(spec.index)
        previous = entry
    hold.leave()            # before timing: its exclusive hold would wait for this one
    if previous is not None:
        session.release(previous.spec.index)
    if session.stochastic:
        reasons.add("stochastic_task")
        relaxed_reasons.add("stochastic_task")
    deg, deg_relaxed = session.degenerate()
    strict_all = all(s.strict_ok for s in set_results) and not reasons
    failed_rungs: list[str] = []

    def rung(i: int) -> dict[str, tolerance.Errors | None]:
        """The lower-precision rungs of set i, only for a class below fp32 and only as far as
        the class is undecided (`precision_class_lazy`)."""
        if failed_rungs:
            return {}
        try:
            return session.rungs(session.specs[i].index)
        except WorkerError as exc:
            failed_rungs.append(str(exc))   # without them the class is "worse than bf16"
            return {}

    precision = tolerance.precision_class_lazy(cand_errors, rung, strict_all)

    # provenance: static first, then the profiler on a GPU
    prov = provenance.static_verdict(Path(solution))
    if prov is None and session.device == "cpu":
        prov = provenance.without_gpu(torch_ops, argus_ops)
    timing_json = eager = compiled = eager_notf32 = None
    speedup_eager = speedup_compile = speedup_eager_notf32 = bound = None
    suspect: list[str] = []
    # a relaxed-track pass whose only strict failure is its precision (e.g. an fp32 task run
    # as one tf32 product) is timed too: the relaxed track's speed bar needs its number. The
    # strict geomeans count strict passes only (summary.level_rows, report.summarize_levels);
    # the timed calls are checked like any (a wrong one takes the relaxed pass away)
    relaxed_pass = reasons == {"imprecise"} and not relaxed_reasons
    if (not reasons or relaxed_pass) and want_timing:
        try:
            with clock("timing sets (inputs)"):
                timing_args, timing_sets = session.timing_sets()
            out_path = session.dir / "outputs" / "timed.pt"
            session.give_back_cached()
            with clock("timing (incl. gate wait, profile)"):
                timed = cand.request("time",
                                     max(opts.candidate_timeout_s or opts.timeout_s, 60.0),
                                     trials=opts.trials, warmup=opts.warmup, flush_l2=True,
                                     profile=opts.profile and session.device != "cpu",
                                     out_path=str(out_path), export=opts.direct,
                                     **timing_args)
            # the two sets' staged inputs, read at the call's start (after a failure they go
            # at close, once the candidate is closed)
            session.free_hand_over()
            for name, seconds in (timed.get("phases") or {}).items():
                session.add_phase(f"timing {name}", seconds)
            with clock("check of the timed calls"):
                wrong = _check_timed(session, cand, timed, out_path, timing_sets, fingerprints)
            if wrong:
                reasons |= wrong[0]
                relaxed_reasons |= wrong[1]
                details.extend(wrong[2])
                precision = _timed_precision(precision, wrong, cand_errors, rung)
        except WorkerError as exc:
            return _failure(session, solution, _kind(exc), f"while timing: {exc}", started)
        if timed.get("tamper"):
            reasons.add("timer_tampering")
            details.append("replaced while running: " + ", ".join(timed["tamper"]))
        if timed.get("flags"):
            reasons.add("global_state_changed")
            details.append("changed while running: " + "; ".join(timed["flags"]))
        timing_json = timed["timing"]
        t = Timing.from_json(timing_json)
        if side_stream_suspect(t):
            reasons.add("side_stream_work")
            details.append(f"device time {t.median_ms:.4f} ms vs launch-stream time "
                           f"{t.stream_median_ms:.4f} ms")
        if timed.get("kernels") is not None and prov is None:
            prov = provenance.from_kernels([(k, float(us)) for k, us in timed["kernels"]])
        if session.device != "cpu":
            bound = roofline.bound_ms(t.device, info.get("flops"), info.get("elements"),
                                      precision)
            if roofline.beyond_roofline(t.median_ms, bound):
                suspect.append("beyond_roofline")
            if opts.baselines:
                with clock("baselines (cached or measured)"):
                    record = _baseline(session)
                eager, compiled = record.eager, record.compile
                eager_notf32 = record.eager_notf32
                if record.eager_ms:
                    speedup_eager = record.eager_ms / t.median_ms
                if record.eager_notf32_ms:
                    speedup_eager_notf32 = record.eager_notf32_ms / t.median_ms
                if record.compile_ms:
                    speedup_compile = record.compile_ms / t.median_ms
    if prov is None:
        prov = provenance.Provenance("unknown", "not profiled (timing disabled or incorrect)")
    relaxed_reasons |= reasons & INTEGRITY_REASONS
    ordered = _sort_reasons(reasons)
    return Judgment(
        task=session.task.key, task_name=session.task.name, task_path=str(session.task.path),
        task_sha256=session.task.sha256, solution=solution, device=session.device,
        correct=not ordered, correct_relaxed=not relaxed_reasons, reasons=ordered,
        relaxed_reasons=_sort_reasons(relaxed_reasons),
        detail="; ".join(dict.fromkeys(details))[:4000], precision=precision,
        degenerate=deg, degenerate_relaxed=deg_relaxed, stochastic=session.stochastic,
        argus_kernels=prov.verdict, argus_evidence=prov.evidence,
        sizes=info.get("sizes", ""), overrides=info.get("overrides", {}) or {},
        sets=tuple(set_results), weights=init.get("weights", ""),
        torch_ops=tuple(sorted(torch_ops)), timing=timing_json, eager=eager, compiled=compiled,
        speedup_eager=speedup_eager, speedup_compile=speedup_compile, roofline_ms=bound,
        suspect=tuple(suspect), seconds=time.perf_counter() - started,
        level=session.task.level, problem_id=session.task.problem_id,
        phases=_rounded(session.phases), eager_notf32=eager_notf32,
        speedup_eager_notf32=speedup_eager_notf32)


class _SharedHold:
    """The judge thread's shared hold of the GPU gate, entered at most once at a time and left
    explicitly (see `_judge_candidate`)."""

    def __init__(self) -> None:
        self._held: Any = None

    def enter(self) -> None:
        if self._held is None:
            held = gate().shared()
            held.__enter__()
            self._held = held

    def leave(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)


class _Clock:
    """`with clock(name):` adds the block's seconds to the session's phase table."""

    def __init__(self, session: ReferenceSession):
        self.session = session

    def __call__(self, name: str) -> Any:
        import contextlib

        @contextlib.contextmanager
        def block() -> Any:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.session.add_phase(name, time.perf_counter() - t0)

        return block()


def _run_phases(session: ReferenceSession, run: dict[str, Any], first: bool) -> None:
    """The candidate's own account of a run (inputs, forward, checks, output transfer, and on
    the first run the composed program's lowering and the NVRTC compiles it caused; names
    starting with "#" are counts, not seconds)."""
    for name, seconds in (run.get("phases") or {}).items():
        label = ("first run " if first else "runs ") + name
        session.add_phase(label if not name.startswith(("nvrtc", "compose", "#")) else name,
                          seconds)


def _receive_outputs(session: ReferenceSession, cand: Worker, run: dict[str, Any],
                     out_path: Path) -> list[torch.Tensor]:
    """The candidate's outputs in this process: mapped from its CUDA IPC handles (direct), or
    read from the file it wrote (also when the handles cannot be mapped here)."""
    handles = run.get("ipc")
    if handles is not None:
        try:
            return _copy_exported(session, cand, handles)
        except Exception as exc:  # noqa: BLE001 - fall back to the file
            session.add_phase("# ipc fallbacks to files", 1.0)
            if not session.ipc_error:
                import sys

                print(f"kernelbench: {session.task.key}: CUDA IPC of the outputs failed "
                      f"({type(exc).__name__}: {exc}); outputs go through files",
                      file=sys.stderr, flush=True)
            session.ipc_error = f"{type(exc).__name__}: {exc}"
            cand.request("save_exported", session.options.timeout_s, out_path=str(out_path))
            _drop_exported(cand)            # written to the file: the candidate lets go
    # the file comes from the candidate's process (its code can write it): tensors only, never
    # an unpickled object, which could run code in the judge
    try:
        outs = torch.load(out_path, map_location=session.compare_device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the candidate's failure
        raise WorkerError("shape_mismatch", "the candidate's outputs file is not a list of "
                          f"tensors: {type(exc).__name__}: {str(exc)[:300]}") from exc
    finally:
        out_path.unlink(missing_ok=True)
    return outs


def _copy_exported(session: ReferenceSession, cand: Worker, handles: list[dict[str, Any]]
                   ) -> list[torch.Tensor]:
    """Copies of the outputs the candidate exported (CUDA IPC), in this process's memory. The
    candidate keeps the exported memory and its code could still write there after handing it
    over (a thread, a kernel queued on another stream): what is compared is this snapshot,
    never the mapping. The mapping is let go of, and the candidate told so, at once."""
    from argus.bench.kernelbench.worker import open_shared_cuda

    with gate().shared():           # GPU work: the copies
        mapped = [open_shared_cuda(h) for h in handles]
        outs = [m.to(session.compare_device, copy=True) for m in mapped]
        if any(o.is_cuda for o in outs):
            torch.cuda.current_stream(outs[0].device).synchronize()   # before unmapping
        del mapped
    _drop_exported(cand)
    return outs


# How long the candidate may take to let go of its exported outputs (torch.cuda.ipc_collect and
# empty_cache: milliseconds). Never waited for inside the GPU gate: a candidate that stalls
# here holds up nothing but its own judgment (its next request finds it killed).
DROP_TIMEOUT_S = 20.0


def _drop_exported(cand: Worker) -> None:
    try:
        cand.request("drop", DROP_TIMEOUT_S)
    except WorkerError:
        pass


def _check_timed(session: ReferenceSession, cand: Worker, timed: dict[str, Any],
                 out_path: Path, sets: list[_TimingBase], fingerprints: list[tuple[Any, ...]]
                 ) -> tuple[set[str], set[str], list[str],
                            list[tuple[tolerance.Errors, int, bool]]] | None:
    """Compare the outputs the candidate kept from its timed calls (one call per timing set,
    picked at random there) with references of those calls' inputs (the set reflected by the
    call's key, recomputed here): (strict reasons, relaxed reasons, details, worst errors per
    call with the watched set whose precision rungs it is classed by and whether it passed
    the strict track), None when all are right. A timed call that fails the relaxed track is
    `timed_output_wrong` on both tracks (the same solution was right on every watched run);
    one accurate only to the relaxed track is judged like any set (`imprecise`). One call's
    reference at a time, each dropped once compared."""
    checked = timed.get("checked") or []
    seen = sorted(int(pick["set"]) for pick in checked)
    if seen != list(range(len(sets))):
        if timed.get("ipc") is not None:
            _drop_exported(cand)            # nothing of it is compared
        return ({"timed_output_wrong"}, {"timed_output_wrong"},
                [f"the timing kept outputs of timed calls on sets {seen}, not one of each of "
                 f"the {len(sets)} timing sets: a set whose timed calls were never checked"],
                [])
    strict: set[str] = set()
    relaxed: set[str] = set()
    details: list[str] = []
    errors: list[tuple[tolerance.Errors, int, bool]] = []
    outs: list[Any] | None = None
    per_call = 0
    # direct judging prepares the references in this thread: one shared hold before the
    # outputs are received, one from there on (never across a request to another process
    # that enters the gate: a reference worker's, or the candidate's drop)
    hold = _SharedHold()
    try:
        for i, pick in enumerate(checked):
            base = sets[int(pick["set"])]
            if session.options.direct:
                hold.enter()
            entry = session.timed_reference(base, int(pick["key"]))
            if outs is None:
                # received after the first call's reference: that float64 forward does not
                # run beside every kept output in this process (the candidate's copies are let
                # go of once received)
                hold.leave()
                outs = _receive_outputs(session, cand, timed, out_path)
                per_call = len(outs) // len(checked)
                if per_call * len(checked) != len(outs):
                    return ({"shape_mismatch"}, {"shape_mismatch"},
                            [f"timed calls: {len(outs)} outputs do not split into "
                             f"{len(checked)} calls"], [])
            # the precision rungs of a timed call: those of the watched set of its distribution
            like = next((k for k, spec in enumerate(session.specs)
                         if spec.distribution == base.spec.distribution), 0)
            hold.enter()
            worst, accurate = _check_timed_call(session, entry, pick,
                                                outs[i * per_call:(i + 1) * per_call],
                                                fingerprints, strict, relaxed, details)
            if not session.options.direct:
                hold.leave()            # the next reference comes from the worker process
            errors.append((worst, like, accurate))
            for k in range(i * per_call, (i + 1) * per_call):
                outs[k] = None          # compared: not held through the next reference
            session.drop_timed(entry)
            del entry
    finally:
        hold.leave()
    return (strict, relaxed, details, errors) if strict or relaxed else None


def _timed_precision(precision: str, wrong: tuple[set[str], set[str], list[str],
                                                  list[tuple[tolerance.Errors, int, bool]]],
                     watched: list[tolerance.Errors],
                     rung: Callable[[int], dict[str, tolerance.Errors | None]]) -> str:
    """The precision class once the timed calls are checked: the watched sets' errors and the
    timed calls' together (a timed call classed by the rungs of the watched set of its
    distribution), so that a timed call's failure is never reported as an fp32 solution."""
    calls = wrong[3]
    if "timed_output_wrong" in wrong[0] and not calls:
        return "worse than bf16"            # no call could be compared: nothing is known
    if all(accurate for _, _, accurate in calls):
        return precision                    # the timed outputs were fp32-accurate
    rungs_of = list(range(len(watched))) + [like for _, like, _ in calls]
    return tolerance.precision_class_lazy(watched + [e for e, _, _ in calls],
                                          lambda i: rung(rungs_of[i]), False)


def _check_timed_call(session: ReferenceSession, entry: _RefSet, pick: dict[str, Any],
                      outs: list[torch.Tensor], fingerprints: list[tuple[Any, ...]],
                      strict: set[str], relaxed: set[str], details: list[str]
                      ) -> tuple[tolerance.Errors, bool]:
    """One kept timed call of `_check_timed`, its reasons and details added to the sets; its
    worst errors returned, and whether its outputs passed the strict track."""
    assert entry.ref is not None
    inputs = session.load_inputs(entry)
    where = (f"timed call {pick['call']} (an unseen {entry.reply['distribution']} set, "
             f"reflected by the call's key, in the tensors of every call)")
    if not same_fingerprints(pick.get("fingerprints") or [],
                             entry.reply.get("fingerprints") or []):
        strict.add("input_mutated")
        relaxed.add("input_mutated")
        details.append(f"{where}: its inputs differ from the judge's for that set and key "
                       f"(fingerprints {pick.get('fingerprints')} vs "
                       f"{entry.reply.get('fingerprints')}): altered in the candidate's process")
    run = {"aliases": pick.get("aliases") or [], "mutated": pick.get("mutated") or []}
    _, s_reasons, r_reasons, s_details, worst = _compare_set(entry, inputs, outs, run,
                                                             fingerprints)
    integrity = s_reasons & INTEGRITY_REASONS
    strict |= integrity
    relaxed |= integrity
    if r_reasons - integrity:
        strict.add("timed_output_wrong")
        relaxed.add("timed_output_wrong")
    else:
        strict |= s_reasons
    details.extend(f"{where}: {d}" for d in s_details)
    return worst, not (s_reasons - integrity)


def _altered_inputs(session: ReferenceSession, entry: _RefSet, run: dict[str, Any]) -> str:
    """Why the inputs of a run were not the judge's ("" when they were): what the candidate
    received (its fingerprints) must be what the reference was computed on, and the judge's
    own tensors, when it shared them, must be unchanged. The candidate is handed the judge's
    inputs, so an honest run always matches; a mismatch means something in its process altered
    them (or wrote into the judge's through the shared mapping)."""
    want = entry.reply.get("fingerprints") or []
    if not same_fingerprints(run.get("fingerprints") or [], want):
        return (f"set {entry.spec.index}: the inputs the candidate received differ from the "
                f"judge's (altered in its process before the forward): fingerprints "
                f"{run.get('fingerprints')} vs {want} (shape, sum, sum of squares, sum of "
                "magnitudes)")
    if not session.shared_intact(entry):
        return (f"set {entry.spec.index}: the judge's input tensors, shared with the candidate "
                "by CUDA IPC, were changed through the mapping")
    return ""


def _reference_kind(exc: WorkerError) -> str:
    """A reference that ran out of GPU memory (beside other tasks) is out_of_memory, which a
    parallel run retries alone; any other reference failure is the task's (task_error)."""
    return "out_of_memory" if exc.kind == "out_of_memory" else "task_error"


def _kind(exc: WorkerError) -> str:
    return exc.kind if exc.kind in REASONS else "runtime_error"


def _worst(calib: list[dict[str, Any]] | None) -> tolerance.Errors | None:
    if not calib:
        return None
    errs = [_errors_from_json(c) for c in calib]
    return max(errs, key=lambda e: e.rel_l2)


def _baseline(session: ReferenceSession) -> BaselineRecord:
    opts = session.options
    cache = session.baseline_cache or BaselineCache(opts.baseline_cache)
    return get_or_measure(session.task, cache, device=session.device, seed=opts.seed,
                          trials=opts.trials, warmup=opts.warmup,
                          timeout_s=max(opts.timeout_s, 900.0), log_dir=session.dir / "logs")


def _compare_set(entry: _RefSet, inputs: list[Any], outs: list[torch.Tensor],
                 run: dict[str, Any], fingerprints: list[tuple[Any, ...]]
                 ) -> tuple[SetResult, set[str], set[str], list[str], tolerance.Errors]:
    """Compare one set's outputs; returns (result, strict reasons, relaxed reasons, details,
    worst errors)."""
    assert entry.ref is not None
    where = f"set {entry.spec.index} ({entry.reply['distribution']})"
    reasons: set[str] = set()
    relaxed: set[str] = set()
    details: list[str] = []
    if run.get("tamper"):
        reasons.add("timer_tampering")
        details.append("replaced during forward: " + ", ".join(run["tamper"]))
    if run.get("flags"):
        reasons.add("global_state_changed")
        details.append("changed during forward: " + "; ".join(run["flags"]))
    if run.get("aliases"):
        reasons.add("output_aliases_input")
        details.append(f"{where}: output shares memory with input(s) {run['aliases']}")
    if run.get("mutated"):
        reasons.add("input_mutated")
        details.append(f"{where}: input(s) {run['mutated']} modified by the forward")
    if not run.get("plain_tensors", True):
        reasons.add("shape_mismatch")
        details.append(f"{where}: output is a tensor subclass, not a plain torch.Tensor")
    errors_json: list[dict[str, Any]] = []
    strict_ok = relaxed_ok = True
    worst = tolerance.Errors(0.0, 0.0, True)
    metas = entry.reply["outputs"]
    if len(outs) != len(entry.ref):
        reasons.add("shape_mismatch")
        details.append(f"{where}: {len(outs)} outputs, the reference has {len(entry.ref)}")
        strict_ok = relaxed_ok = False
    else:
        for k, (out, ref, tol, meta) in enumerate(zip(outs, entry.ref, entry.tols, metas)):
            if tuple(out.shape) != tuple(ref.shape):
                reasons.add("shape_mismatch")
                details.append(f"{where}: output {k} has shape {tuple(out.shape)}, expected "
                               f"{tuple(ref.shape)}")
                strict_ok = relaxed_ok = False
                continue
            if str(out.dtype) != meta["dtype"]:
                reasons.add("dtype_mismatch")
                details.append(f"{where}: output {k} is {out.dtype}, the task's is "
                               f"{meta['dtype']}")
            err = tolerance.errors(out, ref)
            errors_json.append(err.to_json())
            if err.rel_l2 > worst.rel_l2 or not math.isfinite(err.rel_l2):
                worst = err
            s_ok = tolerance.strict_ok(err, tol)
            r_ok = err.relaxed_ok or s_ok  # the relaxed track is never the stricter one
            poisoned = run.get("poison", [0] * len(outs))[k]
            if poisoned:
                reasons.add("uninitialized_output")
                relaxed.add("uninitialized_output")
                details.append(f"{where}: {poisoned} of {out.numel()} elements of output {k} "
                               "hold poisoned memory the solution never wrote")
            if s_ok and r_ok:
                continue
            why = None
            if err.nonfinite_mismatch:
                why = "nonfinite_output"
            else:
                why = probes.trivial_kind(out, ref, inputs, fingerprints)
            if not r_ok:
                relaxed_ok = False
                relaxed.add(why or "mismatch")
            if not s_ok:
                strict_ok = False
                reasons.add(why or ("imprecise" if r_ok else "mismatch"))
                details.append(f"{where}: output {k} rel_l2={err.rel_l2:.3g} "
                               f"(strict bound {tol.tol_l2:.3g}), max_elem={err.max_elem:.3g} "
                               f"(bound {tol.tol_elem:.3g})"
                               + (f" [{why}]" if why else ""))
    result = SetResult(
        index=entry.spec.index, seed=entry.spec.seed, distribution=entry.reply["distribution"],
        kinds=tuple(entry.reply["kinds"]), errors=tuple(errors_json),
        tolerances=tuple(t.to_json() for t in entry.tols),
        native=tuple(entry.reply["calibration"]["native"]),
        strict_ok=strict_ok and not reasons, relaxed_ok=relaxed_ok,
        reasons=_sort_reasons(reasons))
    return result, reasons, relaxed, details, worst
