"""The subprocess side of judging: `python -m argus.bench.kernelbench.worker ROLE`.

Roles, each in its own process so that the candidate never shares memory with the reference:
- reference: loads the task (with CPU size overrides), makes input sets, runs the task's Model in
  float64 (the reference) and in its own dtype, TF32-rounded and bf16 (calibration), and writes
  inputs and reference outputs to files.
- candidate: snapshots clocks and global flags, imports the solution, builds ModelNew, and runs it
  on input files under poisoned allocation; reports aliasing, input mutation, poison, tampering;
  times it and profiles its kernels on a GPU.
- baseline: times the task's Model eagerly, eagerly with TF32 off, and under torch.compile.

Protocol: one JSON command per line on stdin, one JSON reply per line on the original stdout.
Anything the task or solution prints goes to stderr (fd 1 is redirected there), so it cannot
corrupt the protocol. Replies are {"ok": true, ...} or {"ok": false, "kind": reason, "error": ...}.

Invariant: the candidate process never receives a reference output.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import os
import pickle
import sys
import threading
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
from argus.runtime.gpu_gate import GpuGate, gate, wait_counts

# The reference role also runs inside the judge's process (`direct` judging, one thread per
# task): the RNG and the TF32 switches are process-wide, so seeding and the forwards that
# depend on the seed hold this lock.
RNG_LOCK = threading.RLock()


class WorkerFailure(Exception):
    """A failure with a reason code (load_error, init_error, runtime_error, ...)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says the GPU ran out of memory: torch's OutOfMemoryError from its caching
    allocator, or a CUDA error raised by a kernel launch or another library's allocation
    (torch.AcceleratorError "CUDA error: out of memory"), which beside other judged tasks
    is the card being full, not the task's fault: both are retried (parallel.py
    `out_of_memory_retry`: twice the estimate, then alone)."""
    if isinstance(exc, torch.OutOfMemoryError):  # type: ignore[attr-defined]
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


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


def _release_before_drawing(device: torch.device) -> None:
    """Give the cached blocks back before a set's tensors are drawn. The caching allocator
    splits a free cached block for a smaller request, and a segment with one block in use
    cannot be given back: judging directly KernelBench L1/87, set 1's draw and its inputs
    (4 GiB each) were carved out of the 16 GiB segment that set 0's float64 reference had just
    freed, and the 12 GiB around the inputs stayed reserved by the judge's process through
    set 1's candidate run (44.6 GiB where its tensors take 32), which then ran out of memory
    (issue 17).
    Drawn into fresh segments, what a set frees whole is given back whole (`_release_cached`
    at the end of `prepare`). Milliseconds, once a set. Called inside the GPU gate's shared
    hold: cudaFree waits for the device, and a timing holds the gate alone."""
    _release_cached(device)


def _gen_device(device: torch.device) -> torch.device | None:
    """Where input sets are drawn: on the GPU when judging on one (upstream inputs of several
    GB take minutes with the CPU's generator), else on the CPU as the task makes them."""
    return device if device.type == "cuda" else None


FINGERPRINT_CHUNK = 1 << 24      # elements: no float64 copy of a multi-GB input


def _fingerprint(value: Any) -> list[Any] | None:
    """A cheap summary of an input (shape, then sum, sum of squares and sum of magnitudes in
    float64), to check that a candidate made the same inputs as the reference. The sum of
    magnitudes scales the comparison: a sum whose terms cancel (a signed heavy-tailed set) is
    tiny against its rounding error."""
    if not isinstance(value, torch.Tensor):
        return None
    v = value.detach().reshape(-1)
    chunk = FINGERPRINT_CHUNK
    total = square = magnitude = 0.0
    for i in range(0, v.numel(), chunk):
        part = v[i:i + chunk]
        if v.is_floating_point():
            part = part.double()
            total += float(part.sum())
            square += float(part.square().sum())
            magnitude += float(part.abs().sum())
        else:
            total += float(part.long().sum())
            magnitude += float(part.long().abs().sum())
    return [list(value.shape), total, square, magnitude]


def same_fingerprints(a: list[Any], b: list[Any]) -> bool:
    """Fingerprints equal up to float64 summation order."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if list(x[0]) != list(y[0]) or len(x) != len(y):
            return False
        # a float64 sum of n float32 terms differs between summation orders by at most about
        # n * 2^-53 * sum|x|: compare the sum against its magnitude, each sum against itself
        scale = max(1.0, abs(float(x[-1])), abs(float(y[-1])))
        for i, (p, q) in enumerate(zip(x[1:], y[1:]), 1):
            ref = scale if i == 1 else max(1.0, abs(float(p)), abs(float(q)))
            if abs(float(p) - float(q)) > 1e-9 * ref:
                return False
    return True


class _Phases:
    """Adds the seconds of `with clock(name):` blocks to a dict (the judgment's phase table)."""

    def __init__(self, into: dict[str, float]):
        self.into = into

    def __call__(self, name: str) -> "_Phase":
        return _Phase(self.into, name)


class _Phase:
    def __init__(self, into: dict[str, float], name: str):
        self.into, self.name = into, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.into[self.name] = self.into.get(self.name, 0.0) + time.perf_counter() - self.t0


def _argus_counters() -> dict[str, float]:
    """Compile counters of Argus in this process, when the solution loaded Argus: NVRTC
    compiles and their seconds (argus.runtime.compile) and the composed runtime's lowering
    (argus.compose.runtime). Read from sys.modules: the harness never imports Argus itself."""
    out: dict[str, float] = {}
    compile_mod = sys.modules.get("argus.runtime.compile")
    if compile_mod is not None and hasattr(compile_mod, "compile_stats"):
        for k, v in compile_mod.compile_stats().items():
            # seconds are phases; counts are kept beside them under "# ..."
            out["nvrtc seconds" if k == "seconds" else f"# nvrtc {k}"] = float(v)
    compose_mod = sys.modules.get("argus.compose.runtime")
    if compose_mod is not None and hasattr(compose_mod, "STATS"):
        for k, v in compose_mod.STATS.items():
            out["compose lowering" if k == "lowering_s" else f"# compose {k}"] = float(v)
    # the GPU gate: seconds this thread waited to enter it (behind queued timings) and how often
    # it entered or let go around a compile
    for k, v in wait_counts().items():
        out[f"gate {k[:-2]}" if k.endswith(" s") else f"# gate {k}"] = float(v)
    return out


def _counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


def _cpu(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [o.detach().to("cpu").contiguous().clone() for o in outs]


class _NoTF32:
    """TF32 off for the duration (the calibration runs; the baseline's eager-TF32-off timing).
    The switches are process-wide and the judge's process prepares several tasks' references at
    once (one thread each): the first to enter switches TF32 off, the last to leave restores it,
    so no thread turns it back on under another's calibration. Nothing else in that process
    depends on TF32 (the float64 reference and the comparisons do not; candidates and baselines
    run in processes of their own, a baseline process one task at a time)."""

    _lock = threading.Lock()
    _depth = 0
    _saved: tuple[bool, bool] = (False, True)

    def __enter__(self) -> None:
        with _NoTF32._lock:
            if _NoTF32._depth == 0:
                _NoTF32._saved = (torch.backends.cuda.matmul.allow_tf32,
                                  torch.backends.cudnn.allow_tf32)
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
            _NoTF32._depth += 1

    def __exit__(self, *exc: object) -> None:
        with _NoTF32._lock:
            _NoTF32._depth -= 1
            if _NoTF32._depth == 0:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = \
                    _NoTF32._saved


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
        with RNG_LOCK:
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
        # Not seeded: seeding is process-wide and other threads of the judge's process draw
        # their input sets under RNG_LOCK meanwhile. A forward that draws random numbers
        # (dropout) differs between two runs, which is what the stochastic check detects.
        with torch.no_grad():
            outs, _ = _as_list(model(*args))
        _sync(self.device)
        return outs

    def make_inputs(self, seed: int, distribution: str, absolute: bool,
                    inputs_path: str | None = None) -> dict[str, Any]:
        """An input set without its reference (timing's inputs when the judge no longer holds
        set 0): returned under "tensors" in the judge's process, or written to `inputs_path`."""
        with gate().shared():
            _release_before_drawing(self.device)
            with RNG_LOCK:
                raw = kb_inputs.task_inputs(self.module, seed, _gen_device(self.device))
                values, _ = kb_inputs.transform(raw, distribution, seed, absolute)
            values = _to_device(values, self.device)
            if inputs_path is None:
                return {"tensors": values}
            torch.save([v.detach().cpu() if isinstance(v, torch.Tensor) else v
                        for v in values], inputs_path)
            return {}

    def prepare(self, index: int, seed: int, distribution: str, inputs_path: str | None,
                ref_path: str | None, calibrate: bool = True, check_stochastic: bool = False,
                absolute: bool = False, reflect: int | None = None) -> dict[str, Any]:
        """Input set `index` and its float64 reference. With paths, both are written to files
        (a reference worker process); without (the role inside the judge's process), the
        tensors are returned under "tensors" and never leave the process. Either way the
        candidate gets these very inputs (never draws its own), and "fingerprints" let it and
        the judge check what it received. RNG_LOCK covers only the drawing (seed, get_inputs,
        re-distribution): the forwards of several tasks' references run at once.

        `reflect`: a timed call's inputs, the set (`distribution`, `absolute` as the timing
        drew it, no other tried) reflected by that call's key (`inputs.reflect`)."""
        phases: dict[str, float] = {}
        clock = _Phases(phases)
        with gate().shared():
            _release_before_drawing(self.device)
            with clock("inputs"), RNG_LOCK:
                drawn: list[Any] | None = kb_inputs.task_inputs(self.module, seed,
                                                                _gen_device(self.device))
            attempts = [(distribution, absolute)]
            if distribution != "task" and reflect is None and not absolute:
                attempts += [(distribution, True), ("task", False)]
            used, kinds, ref, gen = "task", [], None, {}
            for dist, absolute in attempts:
                ref = dev_values = None     # a failed attempt's go before the next one's
                with clock("inputs"):
                    if drawn is None:       # dropped for an earlier attempt's forward
                        with RNG_LOCK:
                            drawn = kb_inputs.task_inputs(self.module, seed,
                                                          _gen_device(self.device))
                    with RNG_LOCK:
                        values, kinds = kb_inputs.transform(drawn, dist, seed, absolute)
                    dev_values = _to_device(values, self.device)
                    if reflect is not None:
                        dev_values = kb_inputs.reflect(
                            dev_values, kb_inputs.reflection_plan(dev_values), reflect,
                            out=[v.clone() if isinstance(v, torch.Tensor) and v is r else v
                                 for v, r in zip(dev_values, drawn)])
                        kinds = [k + " reflected" for k in kinds]
                    # the task's own draw is not held through the float64 forward (4 bytes a
                    # float32 element): an attempt after this one draws it again (a pure
                    # function of the seed)
                    del values
                    drawn = None
                with clock("float64 reference"):
                    ref = self._forward(self.m64, kb_inputs.to_float64(dev_values), seed)
                used = dist + ("(abs)" if absolute else "")
                gen = {"seed": seed, "distribution": dist, "absolute": absolute}
                finite = all(bool(torch.isfinite(r).all()) for r in ref if r.is_floating_point())
                if finite or dist == "task":
                    break
            assert ref is not None and dev_values is not None
            with clock("calibration"):
                with _NoTF32():
                    native = self._forward(self.model, dev_values, seed)
                calib: dict[str, Any] = {"native": [tolerance.errors(n, r).to_json()
                                                    for n, r in zip(native, ref)]}
                meta = [{"shape": list(n.shape), "dtype": str(n.dtype),
                         "nbytes": n.numel() * n.element_size()} for n in native]
                del native                  # before the rungs: at upstream sizes GBs each
                if calibrate:
                    calib["tf32"] = self._rung(self.m_tf32, [
                        tolerance.round_to_tf32(v) if isinstance(v, torch.Tensor) else v
                        for v in dev_values], ref, seed)
                    calib["bf16"] = self._rung(self.m_bf16, [
                        v.to(torch.bfloat16) if isinstance(v, torch.Tensor)
                        and v.is_floating_point() else v for v in dev_values], ref, seed)
            stochastic = None
            if check_stochastic:
                with clock("stochastic check"):
                    again = self._forward(self.m64, kb_inputs.to_float64(dev_values),
                                          seed + 7777)
                    stochastic = any(not tolerance.errors(a, r).exact and
                                     tolerance.errors(a, r).rel_l2 > 1e-9
                                     for a, r in zip(again, ref))
                    del again
            fingerprints = [_fingerprint(v) for v in dev_values]
            reply: dict[str, Any] = {"distribution": used, "kinds": kinds, "outputs": meta,
                                     "calibration": calib, "stochastic": stochastic,
                                     "gen": gen, "fingerprints": fingerprints,
                                     "phases": phases}
            if inputs_path is None or ref_path is None:
                reply["tensors"] = {"inputs": dev_values, "ref": ref}
                # the float64 input copies and calibration outputs are free now: give their
                # blocks back, so that the candidate's run has them (the judge's process would
                # otherwise keep its peak reserved for the rest of the task)
                _release_cached(self.device)
                return reply
            with clock("files"):
                torch.save([v.detach().cpu() if isinstance(v, torch.Tensor) else v
                            for v in dev_values], inputs_path)
                torch.save(_cpu(ref), ref_path)
        del ref, dev_values
        _release_cached(self.device)  # the judge and the candidate share this GPU
        return reply

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
        """Import the solution and build ModelNew. The candidate never makes input sets: it
        receives the judge's (`run`, `time`), so nothing in its process (a library that draws
        a random number, a solution that reseeds) can make its inputs differ from the ones
        the reference was computed on."""
        self.device = torch.device(device)
        self.out_nbytes = list(out_nbytes)
        self.exported: list[torch.Tensor] = []
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
            if out_of_memory(exc):
                raise WorkerFailure("out_of_memory", "ModelNew(*get_init_inputs()) ran out of "
                                                     f"GPU memory: {str(exc)[:600]}") from exc
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

    def _inputs(self, inputs_path: str | None, shared: list[dict[str, Any]] | None
                ) -> tuple[list[Any], float]:
        """(inputs on the device, seconds): read from the judge's file, or copied out of the
        judge's CUDA tensors (`shared`: per input a CUDA IPC handle or a plain value), into
        memory of this process; the judge's tensors are let go of before the forward."""
        t0 = time.perf_counter()
        if shared is not None:
            from argus.bench.kernelbench.cudaipc import open_staged

            values = open_staged(shared, _DTYPES)
            _sync(self.device)
        else:
            assert inputs_path is not None
            values = _to_device(torch.load(inputs_path, weights_only=False), self.device)
        return values, time.perf_counter() - t0

    def run(self, index: int, seed: int, inputs_path: str | None = None,
            out_path: str | None = None, poison: bool = True,
            shared: list[dict[str, Any]] | None = None, export: bool = False) -> dict[str, Any]:
        """One forward on an input set (the judge's: a file or `shared` CUDA tensors, copied
        here; "fingerprints" in the reply say what was received). poison=False runs it
        exactly as timing does (no dispatch mode), to catch solutions that behave only while
        they are watched. The outputs go to `out_path`, or with `export` (CUDA) stay here and
        are shared with the judge through CUDA IPC handles (`ipc` in the reply) until the next
        request; `save_exported` writes them to a file instead when the judge cannot map them."""
        self.exported = []
        phases: dict[str, float] = {}
        counters = _argus_counters()
        with gate().shared():       # GPU work from here on (a compile inside lets go of it)
            values, phases["inputs"] = self._inputs(inputs_path, shared)
            fingerprints = [_fingerprint(v) for v in values]
            saved = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
            t0 = time.perf_counter()
            if self.device.type == "cuda" and poison:
                guards.poison_cuda_free_memory(self.out_nbytes, self.device)
            mode = guards.PoisonMode() if poison else guards.NullMode()
            try:
                with torch.no_grad(), mode:
                    torch.manual_seed(seed)
                    raw = self.model(*values)
                _sync(self.device)
            except Exception as exc:
                # beside other judged tasks the card can be full: out_of_memory is retried
                # alone by the parallel judge (alone, it is the solution's failure)
                if out_of_memory(exc):
                    raise WorkerFailure("out_of_memory", f"forward ran out of GPU memory: "
                                                         f"{str(exc)[:600]}") from exc
                tb = traceback.format_exc(limit=6)
                raise WorkerFailure("runtime_error", f"forward raised {type(exc).__name__}: "
                                                     f"{exc}\n{tb}") from exc
            phases["forward"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            outs, structure = _as_list(raw)
            plain = all(type(o) in (torch.Tensor, torch.nn.Parameter) for o in outs)
            aliased = guards.aliases(outs, values)
            mutated = [i for i, (v, s) in enumerate(zip(values, saved))
                       if isinstance(v, torch.Tensor) and not guards.same_bits(v, s)]
            poison_counts = [guards.poison_count(o) for o in outs]
            phases["checks"] = time.perf_counter() - t1
            devices = [str(o.device) for o in outs]
            t2 = time.perf_counter()
            reply = self._hand_outputs(outs, out_path, export)
            phases["output transfer"] = time.perf_counter() - t2
            del raw, outs, values, saved
            if not self.exported:
                _release_cached(self.device)
        phases.update(_counter_delta(counters, _argus_counters()))
        return {"structure": structure, "plain_tensors": plain, "aliases": aliased,
                "mutated": mutated, "poison": poison_counts, "compute_ops": mode.compute_ops(),
                "argus_ops": mode.argus_ops, "devices": devices, "phases": phases,
                "fingerprints": fingerprints, **reply, **self._integrity()}

    def _hand_outputs(self, outs: list[torch.Tensor], out_path: str | None, export: bool
                      ) -> dict[str, Any]:
        """Hand `outs` to the judge: with `export` (CUDA) kept here and shared by CUDA IPC
        handles ({"ipc": [...]}, until the next request), else written to `out_path`."""
        reply: dict[str, Any] = {}
        if export and self.device.type == "cuda" and all(o.numel() for o in outs):
            try:
                self.exported = [o.detach().contiguous() if o.device.type == "cuda"
                                 else o.detach().to(self.device).contiguous() for o in outs]
                reply["ipc"] = [share_cuda(o) for o in self.exported]
                _sync(self.device)
            except Exception as exc:  # noqa: BLE001 - not shareable: the file instead
                print(f"outputs not shareable by CUDA IPC ({type(exc).__name__}: {exc}); "
                      "writing them to a file", file=sys.stderr)
                self.exported = []
                reply.pop("ipc", None)
        if "ipc" not in reply:
            assert out_path is not None
            torch.save(_cpu(outs), out_path)
        return reply

    def save_exported(self, out_path: str) -> dict[str, Any]:
        """The exported outputs of the last run, written to a file (the judge could not map
        their IPC handles)."""
        torch.save(_cpu(self.exported), out_path)
        return {}

    def drop(self) -> dict[str, Any]:
        """Let go of the exported outputs (the judge has compared them)."""
        self.exported = []
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()        # blocks the judge has let go of are freed now
        _release_cached(self.device)
        return {}

    def time(self, trials: int, warmup: int, flush_l2: bool, profile: bool,
             inputs_path: str | None = None, shared: list[dict[str, Any]] | None = None,
             sets: int = 1, out_path: str | None = None, export: bool = False
             ) -> dict[str, Any]:
        """Time the forward with the GPU to itself (the gate's exclusive hold), then profile
        its kernels (shared: the profile only needs kernel names and shares).

        The inputs are `sets` input sets, concatenated. Every call (warm-up and timed) gets the
        same argument tensors, refilled before it (outside the timed region) with one of the
        sets in a shuffled order, reflected by a key of the call's own (`inputs.reflect`): no
        two calls see the same values, so a result cached by the tensors' identity is another
        call's answer and one cached by their values is never a hit. For each set, the outputs
        of one timed call picked at random are kept and handed to the judge (`_hand_outputs`;
        "checked" in the reply says which set, call and key each is, with the fingerprints of
        its inputs), which recomputes that call's inputs and their reference and compares."""
        import random

        self.exported = []
        model = self.model
        rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        phases: dict[str, float] = {}
        with torch.no_grad():
            t0 = time.perf_counter()
            with gate().shared():
                loaded = self._inputs(inputs_path, shared)[0]
                if sets < 1 or len(loaded) % sets:
                    raise WorkerFailure("worker_error", f"time: {len(loaded)} inputs do not "
                                                        f"make {sets} sets")
                n = len(loaded) // sets
                pool = [loaded[k * n:(k + 1) * n] for k in range(sets)]
                # the storage the solution sees in every call: refilled, never replaced
                values = [v.clone() if isinstance(v, torch.Tensor) else v for v in pool[0]]
                plans = [kb_inputs.reflection_plan(p) for p in pool]
                calls = warmup + trials
                if trials < sets:
                    raise WorkerFailure("worker_error", f"time: {trials} timed calls cannot "
                                                        f"check each of {sets} input sets")
                # warm-up and timed calls shuffled apart: every set has timed calls, one of
                # which is checked (one shuffle of all calls could leave a set to warm-up only)
                warm = [k % sets for k in range(warmup)]
                timed = [k % sets for k in range(trials)]
                rng.shuffle(warm)
                rng.shuffle(timed)
                order = warm + timed
                # a key per call, and one for the call that warms up before the measurement
                keys = [rng.getrandbits(62) for _ in range(calls + 1)]
                picks = {k: rng.choice([c for c in range(warmup, calls) if order[c] == k])
                         for k in range(sets)}
                picked = set(picks.values())
                kept: dict[int, list[torch.Tensor]] = {}
                checks: dict[int, dict[str, Any]] = {}
                state: dict[str, Any] = {"calls": 0, "out": None, "warming": True,
                                         "prints": None}

                def keep_last() -> None:
                    done = state["calls"] - 1       # the call that produced state["out"]
                    if done in picked and done not in kept and not state["warming"]:
                        outs, _ = _as_list(state["out"])
                        before = state["prints"]
                        # unwatched, as in the correctness runs: shared memory, changed inputs
                        checks[done] = {
                            "set": order[done], "call": done - warmup, "key": keys[done],
                            "fingerprints": before,
                            "aliases": guards.aliases(outs, values),
                            "mutated": [i for i, (v, p) in enumerate(zip(values, before))
                                        if isinstance(v, torch.Tensor)
                                        and not same_fingerprints([_fingerprint(v)], [p])]}
                        kept[done] = [o.detach().clone() for o in outs]

                def setup() -> None:
                    keep_last()
                    state["out"] = None             # the solution's outputs are not kept alive
                    c = 0 if state["warming"] else state["calls"] % calls
                    key = keys[calls] if state["warming"] else keys[c]
                    values[:] = kb_inputs.reflect(pool[order[c]], plans[order[c]], key,
                                                  out=values)
                    state["prints"] = [_fingerprint(v) for v in values] \
                        if c in picked and not state["warming"] else None

                def call() -> None:
                    state["out"] = model(*values)
                    state["calls"] += 1

                setup()
                call()                      # compiled already; warm outside the exclusive hold
                _sync(self.device)
                state["calls"] = 0          # the measured sequence starts now
                state["warming"] = False
            t1 = time.perf_counter()
            with gate().exclusive():
                t2 = time.perf_counter()
                t = timing.measure(call, trials=trials, warmup=warmup, flush_l2=flush_l2,
                                   device=self.device, allow_few_trials=True,
                                   keep_samples=False, setup=setup)
                keep_last()
                state["out"] = None
            t3 = time.perf_counter()
            kernels = None
            if profile and self.device.type == "cuda":
                with gate().shared():
                    kernels = _profile_kernels(call)
            t4 = time.perf_counter()
            state["out"] = None
            checked = [checks[c] for c in sorted(kept)]
            with gate().shared():
                reply = self._hand_outputs([o for c in sorted(kept) for o in kept[c]],
                                           out_path, export) if kept else {}
            del kept, pool, loaded, values
            # the sets, the argument tensors and the solution's blocks go back now (exported
            # outputs stay allocated until the judge's drop): the judge computes the first
            # checked call's reference before it receives them
            _release_cached(self.device)
            t5 = time.perf_counter()
        phases = {"warm": t1 - t0, "gate wait": t2 - t1, "measure": t3 - t2, "profile": t4 - t3,
                  "output transfer": t5 - t4}
        return {"timing": t.to_json(), "kernels": kernels, "phases": phases,
                "checked": checked, **reply, **self._integrity()}


def share_cuda(t: torch.Tensor) -> dict[str, Any]:
    """A CUDA tensor as a CUDA IPC handle another process can map: the fields of torch's own
    reduction as JSON (bytes in base64), so that the judge never unpickles what a candidate
    sent. The tensor must stay alive here until the other process has let go of it."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

    rebuild, args = reduce_tensor(t)
    if rebuild is not rebuild_cuda_tensor:
        raise WorkerFailure("runtime_error", f"output on {t.device} cannot be shared by CUDA "
                                             "IPC")
    (_, size, stride, offset, _, dtype, device, handle, size_bytes, offset_bytes, _,
     counter_handle, counter_offset, event_handle, event_sync) = args

    def b64(x: bytes | None) -> str | None:
        return None if x is None else base64.b64encode(x).decode("ascii")

    return {"shape": list(size), "stride": list(stride), "offset": int(offset),
            "dtype": str(dtype), "device": int(device), "handle": b64(handle),
            "size_bytes": int(size_bytes), "offset_bytes": int(offset_bytes),
            "counter_handle": b64(counter_handle), "counter_offset": int(counter_offset),
            "event_handle": b64(event_handle), "event_sync": bool(event_sync)}


_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                               torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                               torch.bool)}


def open_shared_cuda(h: dict[str, Any]) -> torch.Tensor:
    """The tensor of a `share_cuda` handle from another process (raises when it cannot be
    mapped). Only plain values are taken from the handle; classes and functions are ours."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    def raw(x: str | None) -> bytes | None:
        return None if x is None else base64.b64decode(x)

    dtype = _DTYPES[str(h["dtype"])]
    shape = [int(x) for x in h["shape"]]
    expected, step = [], 1
    for extent in reversed(shape):          # contiguous strides only
        expected.insert(0, step)
        step *= max(extent, 1)
    numel = 1
    for extent in shape:
        numel *= extent
    itemsize = torch.empty((), dtype=dtype).element_size()
    if [int(x) for x in h["stride"]] != expected or int(h["offset"]) < 0 or \
            (int(h["offset"]) + numel) * itemsize > int(h["size_bytes"]):
        raise ValueError("shared output: its shape and strides do not fit its allocation")
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size([int(x) for x in h["shape"]]),
        tuple(int(x) for x in h["stride"]), int(h["offset"]), torch.storage.TypedStorage, dtype,
        int(h["device"]), raw(h["handle"]), int(h["size_bytes"]), int(h["offset_bytes"]), False,
        raw(h["counter_handle"]), int(h["counter_offset"]), raw(h["event_handle"]),
        bool(h["event_sync"]))


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
        # the exclusive side of a GpuGate on `path` (or the process's gate without one)
        self.gate = GpuGate(path) if path else gate()

    def __enter__(self) -> None:
        self.hold = self.gate.exclusive()     # a fresh context manager per use
        self.hold.__enter__()
        self._affinity(self.timing_cores)

    def __exit__(self, *exc: object) -> None:
        self._affinity(self.other_cores)
        self.hold.__exit__(*exc)

    @staticmethod
    def _affinity(cores: list[int] | None) -> None:
        if cores and hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, set(cores))
            except OSError:
                pass


# What `eager_notf32` records for a task whose output TF32 does not change (no fp32 convolution
# or matmul that cuDNN / cuBLAS would run in TF32): eager's own number stands for it
# (BaselineRecord.eager_notf32_ms), instead of a second timing of the same kernels.
SAME_AS_EAGER = {"same_as_eager": "TF32 off changes no output bit of the forward"}


def _eager_notf32(fn: Callable[[], Any], time_it: Callable[[Callable[[], Any]], dict[str, Any]]
                  ) -> dict[str, Any]:
    """Eager with TF32 off (torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 False,
    restored after): the fp32-accurate arithmetic the strict track holds a solution to, so its
    like-for-like baseline (eager's default lets cuDNN run fp32 convolutions in TF32). Timed
    only where TF32 changes the forward's output bits (SAME_AS_EAGER otherwise); a forward
    whose output varies from call to call (atomics, dropout) counts as changed: timed."""
    with torch.no_grad():
        default = fn()
        with _NoTF32():
            off = fn()
    try:
        a, b = _as_list(default)[0], _as_list(off)[0]
        if len(a) == len(b) and all(guards.same_bits(x, y) for x, y in zip(a, b)):
            return dict(SAME_AS_EAGER)
    except WorkerFailure:
        pass                                  # not tensors: cannot tell, so time it
    del default, off
    with _NoTF32():
        return time_it(fn)


class BaselineRole:
    """Times the task's Model. `measure` does eager, eager with TF32 off and compile in one
    call (used by the judge); `load`, `eager`, `eager_notf32`, `compile`, `release` split it for
    the parallel baseline suite, so that an interrupted compile still leaves the eager numbers."""

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
        with gate().shared():
            model = module.Model(*init_inputs).to(dev)
            values = _to_device(kb_inputs.task_inputs(
                module, seed if input_seed is None else input_seed, _gen_device(dev)), dev)
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

    def eager_notf32(self, trials: int, warmup: int, lock_path: str | None = None,
                     timing_cores: list[int] | None = None,
                     other_cores: list[int] | None = None) -> dict[str, Any]:
        assert self.loaded is not None, "load first"
        model, values = self.loaded["model"], self.loaded["values"]
        lock = _GpuLock(lock_path, timing_cores, other_cores)
        return {"eager_notf32": _eager_notf32(
            lambda: model(*values), lambda fn: self._time(fn, trials, warmup, lock))}

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
            module, seed if input_seed is None else input_seed, _gen_device(dev)), dev)
        result: dict[str, Any] = {"flags": guards.capture_flags()}

        def time_it(call: Callable[[], Any]) -> dict[str, Any]:
            with torch.no_grad(), gate().exclusive():
                return timing.measure(call, trials=trials, warmup=warmup, device=dev,
                                      allow_few_trials=True, keep_samples=False).to_json()

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
                if mode == "eager_notf32":
                    result[mode] = _eager_notf32(lambda: model(*values), time_it)
                    continue
                result[mode] = time_it(lambda: fn(*values))
            except Exception as exc:
                result[mode] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        return result


# ----------------------------------------------------------------------------- main loop

ROLES: dict[str, Callable[[], Any]] = {"reference": ReferenceRole, "candidate": CandidateRole,
                                       "baseline": BaselineRole}


def serve(role_name: str, boot_s: float | None = None) -> int:
    """Answer commands until stdin closes. `boot_s`: seconds the process took to start and
    import torch and the harness, reported with the first reply."""
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
        except Exception as exc:
            if out_of_memory(exc):
                reply = {"ok": False, "kind": "out_of_memory", "error": str(exc)[:2000]}
            else:
                reply = {"ok": False, "kind": "worker_error",
                         "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc(limit=8)}
        reply["seconds"] = time.perf_counter() - started
        if boot_s is not None:
            reply["boot_s"], boot_s = boot_s, None
        proto.write(json.dumps(reply, default=str) + "\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ROLES:
        print(f"usage: python -m argus.bench.kernelbench.worker {{{'|'.join(ROLES)}}}",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(sys.argv[1]))
