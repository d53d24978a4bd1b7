"""The subprocess side of judging: `python -m argus.bench.kernelbench.worker ROLE`.

Roles, each in its own process so that the candidate never shares memory with the reference:
- reference: loads the task (with CPU size overrides), makes input sets, runs the task's Model in
  float64 (the reference) and in its own dtype, TF32-rounded and bf16 (calibration), and writes
  inputs and reference outputs to files.
- candidate: snapshots clocks and global flags, imports the solution, builds ModelNew, and runs it
  on input files under poisoned allocation; reports aliasing, input mutation, poison, tampering;
  times it and profiles its kernels on a GPU.
- baseline: times the task's Model eagerly and under torch.compile.

Protocol: one JSON command per line on stdin, one JSON reply per line on the original stdout.
Anything the task or solution prints goes to stderr (fd 1 is redirected there), so it cannot
corrupt the protocol. Replies are {"ok": true, ...} or {"ok": false, "kind": reason, "error": ...}.

Invariant: the candidate process never receives a reference output.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from argus.bench import timing  # imported first: it captures the genuine clocks
from argus.bench.kernelbench import guards, tolerance
from argus.bench.kernelbench import inputs as kb_inputs
from argus.bench.kernelbench.shrink import SizeBudget, meta_cost, plan_sizes
from argus.bench.kernelbench.tasks import load_task


class WorkerFailure(Exception):
    """A failure with a reason code (load_error, init_error, runtime_error, ...)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _as_list(out: Any) -> tuple[list[torch.Tensor], str]:
    if isinstance(out, torch.Tensor):
        return [out], "tensor"
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), f"{type(out).__name__}:{len(out)}"
    raise WorkerFailure("shape_mismatch", f"forward returned {type(out).__name__}, expected a "
                                          "tensor or a tuple of tensors")


def _to_device(values: list[Any], device: torch.device) -> list[Any]:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _release_cached(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _cpu(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [o.detach().to("cpu").contiguous().clone() for o in outs]


class _NoTF32:
    """TF32 off for the duration (the native-precision calibration run)."""

    def __enter__(self) -> None:
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc: object) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


# ----------------------------------------------------------------------------- reference


class ReferenceRole:
    def __init__(self) -> None:
        self.module: Any = None
        self.device = torch.device("cpu")

    def init(self, task_path: str, device: str, seed: int, overrides: dict[str, int] | None,
             cpu_budget: dict[str, float] | None, workdir: str) -> dict[str, Any]:
        self.device = torch.device(device)
        plan_desc = "upstream sizes"
        original: dict[str, int] = {}
        if overrides is None and cpu_budget is not None:
            budget = SizeBudget(int(cpu_budget["elements"]), float(cpu_budget["flops"]))
            plan = plan_sizes(task_path, budget)
            overrides, original, plan_desc = plan.overrides, plan.original, plan.describe()
            cost = plan.cost_after
            if cost is not None and not plan.fits and (
                    cost.elements > 16 * budget.elements or cost.flops > 16 * budget.flops):
                raise WorkerFailure("too_large_for_cpu",
                                    f"task is too large for a CPU run even after shrinking "
                                    f"({cost.elements} elements, {cost.flops:.3g} FLOPs)")
        elif overrides:
            plan_desc = "sizes overridden: " + ", ".join(f"{k}={v}" for k, v in overrides.items())
        self.overrides = dict(overrides or {})
        try:
            self.module = load_task(task_path, self.overrides)
        except Exception as exc:
            raise WorkerFailure("task_error", str(exc)) from exc
        torch.manual_seed(seed)
        init_inputs = self.module.get_init_inputs()
        torch.manual_seed(seed)
        model = self.module.Model(*init_inputs)
        self.model = model.to(self.device)
        self.m64 = copy.deepcopy(self.model).to(torch.float64)
        self.m_tf32 = copy.deepcopy(self.model)
        with torch.no_grad():
            for t in list(self.m_tf32.parameters()) + list(self.m_tf32.buffers()):
                if t.dtype == torch.float32:
                    t.copy_(tolerance.round_to_tf32(t))
        self.m_bf16 = copy.deepcopy(self.model).to(torch.bfloat16)
        shared = Path(workdir)
        init_path = shared / "init_inputs.pt"
        state_path = shared / "model_state.pt"
        torch.save(list(init_inputs), init_path)
        torch.save({k: v.detach().cpu() for k, v in self.model.state_dict().items()}, state_path)
        try:
            cost = meta_cost(task_path, self.overrides)
            flops, elements = cost.flops, cost.io_elements
        except Exception:
            flops, elements = None, None
        return {"overrides": self.overrides, "original": original, "sizes": plan_desc,
                "init_path": str(init_path), "state_path": str(state_path), "flops": flops,
                "elements": elements,
                "params": sum(p.numel() for p in self.model.parameters())}

    def _forward(self, model: torch.nn.Module, args: list[Any], seed: int
                 ) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        with torch.no_grad():
            outs, _ = _as_list(model(*args))
        _sync(self.device)
        return outs

    def prepare(self, index: int, seed: int, distribution: str, inputs_path: str,
                ref_path: str, calibrate: bool = True, check_stochastic: bool = False
                ) -> dict[str, Any]:
        raw = kb_inputs.task_inputs(self.module, seed)
        attempts = [(distribution, False)]
        if distribution != "task":
            attempts += [(distribution, True), ("task", False)]
        used, kinds, ref = "task", [], None
        for dist, absolute in attempts:
            values, kinds = kb_inputs.transform(raw, dist, seed, absolute)
            dev_values = _to_device(values, self.device)
            ref = self._forward(self.m64, kb_inputs.to_float64(dev_values), seed)
            used = dist + ("(abs)" if absolute else "")
            finite = all(bool(torch.isfinite(r).all()) for r in ref if r.is_floating_point())
            if finite or dist == "task":
                break
        assert ref is not None
        with _NoTF32():
            native = self._forward(self.model, dev_values, seed)
        calib: dict[str, Any] = {"native": [tolerance.errors(n, r).to_json()
                                            for n, r in zip(native, ref)]}
        if calibrate:
            calib["tf32"] = self._rung(self.m_tf32, [tolerance.round_to_tf32(v)
                                                     if isinstance(v, torch.Tensor) else v
                                                     for v in dev_values], ref, seed)
            calib["bf16"] = self._rung(self.m_bf16, [
                v.to(torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v for v in dev_values], ref, seed)
        stochastic = None
        if check_stochastic:
            again = self._forward(self.m64, kb_inputs.to_float64(dev_values), seed + 7777)
            stochastic = any(not tolerance.errors(a, r).exact and
                             tolerance.errors(a, r).rel_l2 > 1e-9 for a, r in zip(again, ref))
        torch.save([v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in values],
                   inputs_path)
        torch.save(_cpu(ref), ref_path)
        meta = [{"shape": list(n.shape), "dtype": str(n.dtype),
                 "nbytes": n.numel() * n.element_size()} for n in native]
        del ref, native, dev_values
        _release_cached(self.device)  # the judge and the candidate share this GPU
        return {"distribution": used, "kinds": kinds, "outputs": meta, "calibration": calib,
                "stochastic": stochastic}

    def _rung(self, model: torch.nn.Module, args: list[Any], ref: list[torch.Tensor],
              seed: int) -> list[dict[str, Any]] | None:
        try:
            with _NoTF32():
                outs = self._forward(model, args, seed)
            return [tolerance.errors(o.to(r.dtype) if o.is_floating_point() else o, r).to_json()
                    for o, r in zip(outs, ref)]
        except Exception:
            return None


# ----------------------------------------------------------------------------- candidate


class CandidateRole:
    def __init__(self) -> None:
        self.clocks = guards.capture_clocks()
        self.flags: dict[str, str] = {}
        self.model: Any = None
        self.device = torch.device("cpu")
        self.out_nbytes: list[int] = []

    def _integrity(self) -> dict[str, list[str]]:
        return {"tamper": guards.changed_clocks(self.clocks),
                "flags": guards.changed_flags(self.flags)}

    def init(self, solution_path: str, init_path: str, state_path: str, seed: int, device: str,
             out_nbytes: list[int]) -> dict[str, Any]:
        self.device = torch.device(device)
        self.out_nbytes = list(out_nbytes)
        if self.device.type == "cuda":
            torch.cuda.init()
        self.flags = guards.capture_flags()
        path = Path(solution_path).resolve()
        sys.path.insert(0, str(path.parent))
        try:
            spec = importlib.util.spec_from_file_location("kernelbench_solution", path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules["kernelbench_solution"] = module
            spec.loader.exec_module(module)
        except Exception as exc:
            raise WorkerFailure("load_error", f"importing {path} failed: "
                                              f"{type(exc).__name__}: {exc}") from exc
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            raise WorkerFailure("load_error", f"{path} defines no ModelNew")
        init_inputs = torch.load(init_path, weights_only=False)
        try:
            torch.manual_seed(seed)
            model = model_new(*init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
        except Exception as exc:
            raise WorkerFailure("init_error", f"ModelNew(*get_init_inputs()) failed: "
                                              f"{type(exc).__name__}: {exc}") from exc
        weights = "seeded init"
        if isinstance(model, torch.nn.Module):
            ref_state = torch.load(state_path, weights_only=False)
            own = model.state_dict()
            if own.keys() == ref_state.keys() and all(
                    own[k].shape == ref_state[k].shape for k in own):
                model.load_state_dict(ref_state)
                weights = "copied from the reference Model (same state_dict keys)"
        self.model = model
        return {"weights": weights, **self._integrity()}

    def run(self, index: int, seed: int, inputs_path: str, out_path: str,
            poison: bool = True) -> dict[str, Any]:
        """One forward on an input file. poison=False runs it exactly as timing does (no
        dispatch mode), to catch solutions that behave only while they are watched."""
        values = _to_device(torch.load(inputs_path, weights_only=False), self.device)
        saved = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
        if self.device.type == "cuda" and poison:
            guards.poison_cuda_free_memory(self.out_nbytes, self.device)
        mode = guards.PoisonMode() if poison else guards.NullMode()
        try:
            with torch.no_grad(), mode:
                torch.manual_seed(seed)
                raw = self.model(*values)
            _sync(self.device)
        except Exception as exc:
            tb = traceback.format_exc(limit=6)
            raise WorkerFailure("runtime_error", f"forward raised {type(exc).__name__}: {exc}\n"
                                                 f"{tb}") from exc
        outs, structure = _as_list(raw)
        plain = all(type(o) in (torch.Tensor, torch.nn.Parameter) for o in outs)
        aliased = guards.aliases(outs, values)
        mutated = [i for i, (v, s) in enumerate(zip(values, saved))
                   if isinstance(v, torch.Tensor) and not guards.same_bits(v, s)]
        poison = [guards.poison_count(o) for o in outs]
        torch.save(_cpu(outs), out_path)
        devices = [str(o.device) for o in outs]
        del raw, outs, values, saved
        _release_cached(self.device)
        return {"structure": structure, "plain_tensors": plain, "aliases": aliased,
                "mutated": mutated, "poison": poison, "compute_ops": mode.compute_ops(),
                "argus_ops": mode.argus_ops, "devices": devices, **self._integrity()}

    def time(self, inputs_path: str, trials: int, warmup: int, flush_l2: bool,
             profile: bool) -> dict[str, Any]:
        values = _to_device(torch.load(inputs_path, weights_only=False), self.device)
        model = self.model

        def call() -> None:
            model(*values)

        with torch.no_grad():
            t = timing.measure(call, trials=trials, warmup=warmup, flush_l2=flush_l2,
                               device=self.device, allow_few_trials=True, keep_samples=False)
            kernels = _profile_kernels(call) if profile and self.device.type == "cuda" else None
        return {"timing": t.to_json(), "kernels": kernels, **self._integrity()}


def _profile_kernels(call: Callable[[], None], iters: int = 3) -> list[list[Any]]:
    """[(kernel name, total microseconds)] of the GPU work in `iters` calls."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for evt in prof.events():
        dev_type = str(getattr(evt, "device_type", ""))
        if "CUDA" not in dev_type:
            continue
        time_range = getattr(evt, "time_range", None)
        if time_range is not None:
            us = time_range.elapsed_us()
        else:
            us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        kernels[evt.name] = kernels.get(evt.name, 0.0) + float(us or 0.0)
    return [[k, v] for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])]


# ----------------------------------------------------------------------------- baseline


class _GpuLock:
    """Exclusive use of the GPU for timing, across baseline processes (an flock on a file).
    While held, the process moves to the CPU cores reserved for timing, so that parallel
    torch.compile work on the other cores does not delay its kernel launches."""

    def __init__(self, path: str | None, timing_cores: list[int] | None,
                 other_cores: list[int] | None):
        self.path, self.timing_cores, self.other_cores = path, timing_cores, other_cores
        self.fd: int | None = None

    def __enter__(self) -> None:
        if self.path:
            import fcntl

            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        self._affinity(self.timing_cores)

    def __exit__(self, *exc: object) -> None:
        self._affinity(self.other_cores)
        if self.fd is not None:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    @staticmethod
    def _affinity(cores: list[int] | None) -> None:
        if cores and hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, set(cores))
            except OSError:
                pass


class BaselineRole:
    """Times the task's Model. `measure` does eager and compile in one call (used by the judge);
    `load`, `eager`, `compile`, `release` split it for the parallel baseline suite, so that an
    interrupted compile still leaves the eager number."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] | None = None

    def load(self, task_path: str, device: str, seed: int, input_seed: int | None = None,
             other_cores: list[int] | None = None) -> dict[str, Any]:
        _GpuLock._affinity(other_cores)
        self.release()
        dev = torch.device(device)
        module = load_task(task_path)
        torch.manual_seed(seed)
        init_inputs = module.get_init_inputs()
        torch.manual_seed(seed)
        model = module.Model(*init_inputs).to(dev)
        values = _to_device(kb_inputs.task_inputs(
            module, seed if input_seed is None else input_seed), dev)
        _sync(dev)
        self.loaded = {"model": model, "values": values, "device": dev}
        return {"flags": guards.capture_flags(),
                "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}

    def _time(self, fn: Callable[[], Any], trials: int, warmup: int, lock: _GpuLock
              ) -> dict[str, Any]:
        assert self.loaded is not None
        with torch.no_grad(), lock:
            t = timing.measure(fn, trials=trials, warmup=warmup, device=self.loaded["device"],
                               allow_few_trials=True, keep_samples=False)
        return t.to_json()

    def eager(self, trials: int, warmup: int, lock_path: str | None = None,
              timing_cores: list[int] | None = None, other_cores: list[int] | None = None
              ) -> dict[str, Any]:
        assert self.loaded is not None, "load first"
        model, values = self.loaded["model"], self.loaded["values"]
        lock = _GpuLock(lock_path, timing_cores, other_cores)
        return {"eager": self._time(lambda: model(*values), trials, warmup, lock)}

    def compile(self, trials: int, warmup: int, lock_path: str | None = None,
                timing_cores: list[int] | None = None, other_cores: list[int] | None = None,
                mode: str | None = None) -> dict[str, Any]:
        assert self.loaded is not None, "load first"
        model, values, dev = self.loaded["model"], self.loaded["values"], self.loaded["device"]
        t0 = time.perf_counter()
        compiled = torch.compile(model, mode=mode) if mode else torch.compile(model)
        with torch.no_grad():
            compiled(*values)  # compiles (in parallel with other workers), outside the lock
        _sync(dev)
        compile_s = time.perf_counter() - t0
        lock = _GpuLock(lock_path, timing_cores, other_cores)
        return {"compile": self._time(lambda: compiled(*values), trials, warmup, lock),
                "compile_s": compile_s}

    def release(self) -> dict[str, Any]:
        self.loaded = None
        try:
            torch._dynamo.reset()
        except Exception:
            pass
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {}

    def measure(self, task_path: str, device: str, seed: int, modes: list[str], trials: int,
                warmup: int, compile_mode: str | None = None, input_seed: int | None = None
                ) -> dict[str, Any]:
        dev = torch.device(device)
        module = load_task(task_path)
        torch.manual_seed(seed)
        init_inputs = module.get_init_inputs()
        torch.manual_seed(seed)
        model = module.Model(*init_inputs).to(dev)
        values = _to_device(kb_inputs.task_inputs(
            module, seed if input_seed is None else input_seed), dev)
        result: dict[str, Any] = {"flags": guards.capture_flags()}
        for mode in modes:
            try:
                fn: Any = model
                t0 = time.perf_counter()
                if mode == "compile":
                    fn = torch.compile(model, mode=compile_mode) if compile_mode \
                        else torch.compile(model)
                    with torch.no_grad():
                        fn(*values)
                    _sync(dev)
                    result["compile_s"] = time.perf_counter() - t0
                with torch.no_grad():
                    t = timing.measure(lambda: fn(*values), trials=trials, warmup=warmup,
                                       device=dev, allow_few_trials=True, keep_samples=False)
                result[mode] = t.to_json()
            except Exception as exc:
                result[mode] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        return result


# ----------------------------------------------------------------------------- main loop

ROLES: dict[str, Callable[[], Any]] = {"reference": ReferenceRole, "candidate": CandidateRole,
                                       "baseline": BaselineRole}


def serve(role_name: str) -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints from tasks and solutions go to stderr, never into the protocol
    sys.stdout = sys.stderr
    role = ROLES[role_name]()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "exit":
            break
        started = time.perf_counter()
        try:
            reply = {"ok": True, **getattr(role, op)(**cmd)}
        except WorkerFailure as exc:
            reply = {"ok": False, "kind": exc.kind, "error": str(exc)}
        except torch.OutOfMemoryError as exc:  # type: ignore[attr-defined]
            reply = {"ok": False, "kind": "out_of_memory", "error": str(exc)[:2000]}
        except Exception as exc:
            reply = {"ok": False, "kind": "worker_error",
                     "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc(limit=8)}
        reply["seconds"] = time.perf_counter() - started
        proto.write(json.dumps(reply, default=str) + "\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ROLES:
        print(f"usage: python -m argus.bench.kernelbench.worker {{{'|'.join(ROLES)}}}",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(sys.argv[1]))
