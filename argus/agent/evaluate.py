"""Evaluate one candidate stage by stage, inside the worker process: load its DSL source, run the
family's static check (declared ranges, then the lowering), lower, verify, compile (NVRTC),
check correctness, and measure.

Dense feedback is the point: every stage that fails returns at once with its class and its
diagnostics (a verifier counterexample comes back before anything is compiled or run), and a
correct candidate gets a GPU timing or, without a GPU, the cost model's estimate, labelled.

Correctness uses the hardened checks of KERNELBENCH.md. For a KernelBench task: the task's
Model in float64 is the reference, on input sets with mixed distributions (the judge's own
`inputs.plan`), at sizes shrunk to a budget when needed (the judge's `shrink.plan_sizes`), with
fresh allocations poisoned so that an output the kernel never wrote is caught, and the judge's
tolerance rules decide the strict and relaxed tracks. For an Argus example file: its
`make_inputs` (NaN-filled outputs) on several seeds against its float64 `reference`. Without a
GPU the kernel runs in the numpy interpreter. Input sets and references depend only on the
task, so one worker computes them once and reuses them for every candidate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from argus.agent.candidate import Candidate, Outcome
from argus.agent.families import get_family
from argus.agent.task import TaskSpec
from argus.errors import ArgusError, CompileError, Diagnostic, TraceError

RESOURCE_CODES = frozenset({"smem", "regs_budget", "registers", "grid_y", "tma_box"})
# Static-check codes that predict a wrong answer (not an illegal schedule): a correctness failure.
ACCURACY_CODES = frozenset({"split_accuracy"})


@dataclass(frozen=True)
class EvalOptions:
    """How to evaluate. device: "cpu" (interpreter + cost model) or "cuda"."""

    device: str = "cpu"
    stop_after: str = "measure"        # "verify" for screening (no compile, no run)
    verify: bool = True
    include_proven: bool = False
    check_sets: int = 3
    track: str = "strict"
    trials: int = 100
    warmup: int = 10
    cpu_elements: int = 1 << 16
    cpu_flops: float = 5e7
    gpu_elements: int = 1 << 27
    gpu_flops: float = 2e12
    scratch: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> "EvalOptions":
        names = {f.name for f in dataclasses.fields(EvalOptions)}
        return EvalOptions(**{k: v for k, v in data.items() if k in names})


def _diag_json(d: Diagnostic) -> dict[str, Any]:
    return d.to_json()


def _error_diag(exc: BaseException, code: str, kernel: str) -> dict[str, Any]:
    loc = getattr(exc, "loc", None)
    text = str(exc)
    message, _, fix = text.partition("\n  fix: ")
    d = Diagnostic("error", code, message.strip(), kernel=kernel, fix=fix.strip())
    if loc is not None:
        d = dataclasses.replace(d, loc=loc)
    return d.to_json()


def _classify(exc: BaseException, from_llm: bool) -> str:
    text = str(exc)
    if isinstance(exc, CompileError) and ("shared memory" in text or "registers" in text):
        return "resource"
    if isinstance(exc, TraceError):
        return "source" if from_llm else "compile"
    return "compile"


def import_source(text: str, directory: Path, stem: str):
    """Execute DSL source from a file in `directory` (so tracebacks and DSL locations point at
    real lines) and return the module."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.py"
    path.write_text(text)
    name = f"argus_agent_candidate_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    for attr in ("KERNEL", "CONSTEXPRS"):
        if not hasattr(module, attr):
            raise AttributeError(f"the candidate source defines no {attr}; a candidate module "
                                 "must define KERNEL (an @ag.kernel) and CONSTEXPRS (a dict)")
    return module


@contextlib.contextmanager
def _env(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Evaluator:
    """Evaluates candidates; keeps per-task input sets and references across candidates."""

    def __init__(self) -> None:
        self._contexts: dict[tuple[str, str], Any] = {}
        self._verified: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def context(self, task: TaskSpec, opts: EvalOptions):
        key = (task.dumps(), opts.device)
        if key not in self._contexts:
            cls = _KernelBenchContext if task.origin == "kernelbench" else _ExampleContext
            self._contexts[key] = cls(task, opts)
        return self._contexts[key]

    def artifacts(self, task: TaskSpec, cand: Candidate, opts: EvalOptions) -> dict[str, Any]:
        """What a user keeps of the best candidate: its DSL source, the KernelBench solution,
        the generated CUDA, resources, and the verifier's proven invariants and findings."""
        family = get_family(task.family)
        source = cand.source or family.render_kernel(task, cand.params_dict)
        solution = family.render_solution(task, source, cand.params_dict) \
            if task.origin == "kernelbench" else None
        module = import_source(solution or source, Path(opts.scratch or "."),
                               f"best_{cand.key}")
        constexprs = self._constexprs(task, module, opts)
        from argus.compiler import lower_only

        lowered = lower_only(module.KERNEL, **constexprs)
        found = self._verify_cached(task, cand, lowered) if opts.verify else []
        with _env(ARGUS_VERIFY="0"):
            compiled = module.KERNEL.compile(**constexprs)
        res = compiled.resources
        return {"kernel_source": source, "solution_source": solution,
                "cuda": compiled.source.text, "kernel_name": compiled.source.name,
                "resources": {"registers": res.registers, "spill_stores": res.spill_stores,
                              "spill_loads": res.spill_loads,
                              "smem": compiled.source.dynamic_smem,
                              "threads": compiled.source.threads},
                "proven": [f"{d['code']}: {d['message']}" for d in found
                           if d["severity"] == "note"],
                "findings": [d for d in found if d["severity"] != "note"]}

    def baseline(self, task: TaskSpec, opts: EvalOptions) -> dict[str, Any]:
        """Time an Argus example's own `baseline` (what a PyTorch user writes) on the GPU."""
        if task.origin != "argus":
            return {}
        ctx = self.context(task, opts)
        return ctx.measure_baseline(opts)

    def _verify_cached(self, task: TaskSpec, cand: Candidate, lowered) -> list[dict[str, Any]]:
        """Verify once per candidate in this worker (screening, evaluation and artifacts share
        the result), always collecting the proven invariants too."""
        key = (task.signature(), cand.key)
        if key not in self._verified:
            self._verified[key] = _verify(lowered, True, task.name)
        return self._verified[key]

    def _constexprs(self, task: TaskSpec, module, opts: EvalOptions) -> dict[str, Any]:
        constexprs = dict(module.CONSTEXPRS)
        if task.origin == "argus":
            constexprs = self.context(task, opts).base_constexprs(constexprs)
        return constexprs

    def evaluate(self, task: TaskSpec, cand: Candidate, opts: EvalOptions) -> Outcome:
        seconds: dict[str, float] = {}
        family = get_family(task.family)
        params = cand.params_dict
        from_llm = cand.source is not None
        diagnostics: list[dict[str, Any]] = []

        # load ------------------------------------------------------------------------------
        t0 = time.perf_counter()
        try:
            source = cand.source or family.render_kernel(task, params)
            solution = family.render_solution(task, source, params) \
                if task.origin == "kernelbench" else None
            module = import_source(solution or source, Path(opts.scratch or "."),
                                   f"cand_{cand.key}")
            kernel_fn = module.KERNEL
            constexprs = self._constexprs(task, module, opts)
        except BaseException as exc:  # noqa: BLE001 - any failure of foreign source is data
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not from_llm:
                raise
            return Outcome("source", "load", message=_short_tb(exc), seconds=seconds,
                           diagnostics=(_error_diag(exc, "source.load", task.name),))
        seconds["load"] = time.perf_counter() - t0
        if not from_llm:
            static = family.static_check(task, params)
            diagnostics += [_diag_json(d) for d in static]
            errors = [d for d in static if d.severity == "error"]
            if errors:
                code = errors[0].code
                status = "resource" if code in RESOURCE_CODES else \
                    "correctness" if code in ACCURACY_CODES else "compile"
                return Outcome(status, "lower", message=str(errors[0]),
                               diagnostics=tuple(diagnostics), seconds=seconds)

        # lower -----------------------------------------------------------------------------
        t0 = time.perf_counter()
        try:
            from argus.compiler import lower_only

            lowered = lower_only(kernel_fn, **constexprs)
        except ArgusError as exc:
            return Outcome(_classify(exc, from_llm), "lower", message=str(exc),
                           diagnostics=tuple(diagnostics + [_error_diag(exc, "lower",
                                                                         task.name)]),
                           seconds=seconds)
        except Exception as exc:  # noqa: BLE001
            status = "source" if from_llm else "error"
            return Outcome(status, "lower", message=_short_tb(exc), seconds=seconds,
                           diagnostics=tuple(diagnostics + [_error_diag(exc, "lower.exception",
                                                                         task.name)]))
        seconds["lower"] = time.perf_counter() - t0
        resources = _lowered_resources(lowered, task)

        # verify ----------------------------------------------------------------------------
        proven: list[str] = []
        if opts.verify:
            t0 = time.perf_counter()
            found = self._verify_cached(task, cand, lowered)
            seconds["verify"] = time.perf_counter() - t0
            proven = [f"{d['code']}: {d['message']}" for d in found if d["severity"] == "note"] \
                if opts.include_proven else []
            found = [d for d in found if d["severity"] != "note"]
            diagnostics += found
            errors = [d for d in found if d["severity"] == "error"]
            if errors:
                return Outcome("verification", "verify", message=_diag_line(errors[0]),
                               diagnostics=tuple(diagnostics), resources=resources,
                               seconds=seconds, proven=tuple(proven))
        estimate = family.estimate(task, params, resources) if not from_llm or params else None
        if opts.stop_after == "verify":
            return Outcome("ok", "verify", diagnostics=tuple(diagnostics), resources=resources,
                           estimate=estimate.to_json() if estimate else None, seconds=seconds,
                           time_ms=estimate.ms if estimate else None,
                           time_kind="estimate" if estimate else "", proven=tuple(proven))

        # compile ---------------------------------------------------------------------------
        t0 = time.perf_counter()
        try:
            with _env(ARGUS_VERIFY="0"):   # verified above; KERNEL.compile caches the result
                compiled = kernel_fn.compile(**constexprs)
            res = compiled.resources
            resources.update(registers=res.registers, spill_stores=res.spill_stores,
                             spill_loads=res.spill_loads, smem=compiled.source.dynamic_smem,
                             threads=compiled.source.threads)
            cuda_source = compiled.source.text
        except ArgusError as exc:
            return Outcome(_classify(exc, from_llm), "compile", message=str(exc)[:4000],
                           diagnostics=tuple(diagnostics + [_error_diag(exc, "compile",
                                                                         task.name)]),
                           resources=resources, seconds=seconds, proven=tuple(proven))
        seconds["compile"] = time.perf_counter() - t0
        if resources.get("spill_stores") or resources.get("spill_loads"):
            diagnostics.append(Diagnostic(
                "warning", "resource.spill", f"ptxas spilled {resources['spill_stores']} B "
                f"stores / {resources['spill_loads']} B loads", kernel=task.name,
                fix="raise consumer_regs or use a narrower tile").to_json())
        estimate = family.estimate(task, params, resources) if params else estimate

        # check -----------------------------------------------------------------------------
        t0 = time.perf_counter()
        try:
            ctx = self.context(task, opts)
            check = ctx.check(module, constexprs, opts)
        except Exception as exc:  # noqa: BLE001 - a raising candidate is a wrong candidate
            return Outcome("correctness", "check", message=_short_tb(exc),
                           diagnostics=tuple(diagnostics), resources=resources,
                           seconds=seconds, proven=tuple(proven))
        seconds["check"] = time.perf_counter() - t0
        correct = check["strict_ok"] if opts.track == "strict" else check["relaxed_ok"]
        common = dict(diagnostics=tuple(diagnostics), resources=resources, correct=correct,
                      strict_ok=check["strict_ok"], relaxed_ok=check["relaxed_ok"],
                      errors=check["errors"], check_sizes=check["sizes"], seconds=seconds,
                      proven=tuple(proven), estimate=estimate.to_json() if estimate else None)
        if not correct:
            return Outcome("correctness", "check", message=check["message"], **common)

        # measure ---------------------------------------------------------------------------
        if opts.device.startswith("cuda"):
            t0 = time.perf_counter()
            timing = ctx.measure(module, constexprs, opts)
            seconds["measure"] = time.perf_counter() - t0
            return Outcome("ok", "measure", message=_cuda_note(cuda_source),
                           time_ms=timing.median_ms, time_kind="measured",
                           timing=timing.to_json(), **common)
        if estimate is None:
            return Outcome("ok", "check", message="no GPU and no cost model for this kernel: "
                           "correct, but not timed", **common)
        return Outcome("ok", "measure", message=estimate.label(), time_ms=estimate.ms,
                       time_kind="estimate", **common)


def _cuda_note(cuda_source: str) -> str:
    return f"{len(cuda_source.splitlines())} lines of CUDA"


def _diag_line(d: dict[str, Any]) -> str:
    text = f"{d.get('code')}: {d.get('message')}"
    if d.get("counterexample"):
        text += " | counterexample: " + ", ".join(f"{k}={v}" for k, v in
                                                   d["counterexample"].items())
    return text


def _short_tb(exc: BaseException, limit: int = 3000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def _verify(lowered, include_proven: bool, kernel: str) -> list[dict[str, Any]]:
    """The verifier's findings as JSON; an internal failure of the verifier is an "unknown"
    (nothing proven), never a pass and never the candidate's fault."""
    try:
        from argus import verify
    except ImportError:
        return [Diagnostic("unknown", "verify.unavailable", "argus.verify is not installed: "
                           "nothing was proven", kernel=kernel).to_json()]
    check = getattr(verify, "check", None)
    if check is None:
        return [Diagnostic("unknown", "verify.unavailable", "argus.verify has no check(): "
                           "nothing was proven", kernel=kernel).to_json()]
    try:
        try:
            found = check(lowered, include_proven=include_proven)
        except TypeError:
            found = check(lowered)
    except Exception as exc:  # noqa: BLE001 - a verifier bug must not stop the search
        return [Diagnostic("unknown", "verify.internal_error",
                           f"the verifier failed ({type(exc).__name__}: {exc}); nothing was "
                           "proven for this candidate", kernel=kernel,
                           fix="report this as a verifier bug").to_json()]
    return [d.to_json() for d in found]


def _lowered_resources(lowered, task: TaskSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    attrs = dict(lowered.attrs) if hasattr(lowered, "attrs") else {}
    if "threads" in attrs:
        out["threads"] = attrs["threads"]
    try:
        from argus.runtime.interp import grid_extents

        symbols = dict(task.dims)
        if task.family == "elementwise":
            symbols = {"M": task.dims["rows"], "N": task.dims["cols"]}
        grid = grid_extents(lowered, symbols)
        out["grid"] = list(grid)
        out["ctas"] = math.prod(grid)
    except Exception:  # noqa: BLE001 - the grid is a nicety for the cost model
        pass
    return out


# ----------------------------------------------------------------------------- task contexts


def _first_tensor(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"the forward returned {type(out).__name__}, not a tensor")


class _KernelBenchContext:
    """A KernelBench task: shrunk module for checks, float64 reference, cached input sets."""

    def __init__(self, task: TaskSpec, opts: EvalOptions):
        import torch

        from argus.bench.kernelbench.shrink import SizeBudget, plan_sizes
        from argus.bench.kernelbench.tasks import load_task

        self.task = task
        self.device = torch.device(opts.device)
        gpu = self.device.type == "cuda"
        budget = SizeBudget(elements=opts.gpu_elements if gpu else opts.cpu_elements,
                            flops=opts.gpu_flops if gpu else opts.cpu_flops)
        self.plan = plan_sizes(task.path, budget)
        self.module = load_task(task.path, self.plan.overrides)
        torch.manual_seed(0)
        self.init = list(self.module.get_init_inputs())
        torch.manual_seed(0)
        self.reference = self.module.Model(*self.init).to(self.device).double()
        self.sets: dict[int, tuple[list[Any], Any, str]] = {}
        self.timing_inputs: list[Any] | None = None

    def input_set(self, index: int, n_sets: int):
        import torch

        from argus.bench.kernelbench import inputs as kb_inputs

        if index in self.sets:
            return self.sets[index]
        spec = kb_inputs.plan(max(n_sets, index + 1))[index]
        base = kb_inputs.task_inputs(self.module, spec.seed)
        for dist, absolute in ((spec.distribution, False), (spec.distribution, True),
                               ("task", False)):
            inputs, _ = kb_inputs.transform(base, dist, spec.seed, absolute=absolute)
            inputs = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]
            with torch.no_grad():
                ref = _first_tensor(self.reference(*kb_inputs.to_float64(inputs)))
            if bool(torch.isfinite(ref).all()):
                break
        self.sets[index] = (inputs, ref, dist + ("(abs)" if absolute else ""))
        return self.sets[index]

    def new_model(self, module):
        import torch

        torch.manual_seed(0)
        model = module.ModelNew(*self.init)
        return model.to(self.device) if isinstance(model, torch.nn.Module) else model

    def check(self, module, constexprs, opts: EvalOptions) -> dict[str, Any]:
        import torch

        from argus.bench.kernelbench import tolerance

        try:
            from argus.bench.kernelbench.guards import PoisonMode
        except ImportError:  # pragma: no cover
            PoisonMode = contextlib.nullcontext  # type: ignore[misc,assignment]
        model = self.new_model(module)
        worst: dict[str, Any] = {"rel_l2": 0.0, "max_elem": 0.0}
        strict_all, relaxed_all, messages, degenerate = True, True, [], []
        for i in range(opts.check_sets):
            inputs, ref, dist = self.input_set(i, opts.check_sets)
            args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            with torch.no_grad(), PoisonMode():
                out = _first_tensor(model(*args))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            if tuple(out.shape) != tuple(ref.shape):
                raise ValueError(f"input set {i}: output shape {tuple(out.shape)}, reference "
                                 f"{tuple(ref.shape)}")
            err = tolerance.errors(out.detach(), ref)
            tol = tolerance.strict_tolerance(_task_dtype(self.task), None)
            s_ok, r_ok = tolerance.strict_ok(err, tol), bool(err.relaxed_ok)
            if tolerance.errors(torch.zeros_like(ref), ref).relaxed_ok:
                degenerate.append(dist)
            strict_all &= s_ok
            relaxed_all &= r_ok
            worst["rel_l2"] = max(worst["rel_l2"], err.rel_l2)
            worst["max_elem"] = max(worst["max_elem"], err.max_elem)
            if not (s_ok and r_ok):
                messages.append(f"set {i} ({dist}): rel_l2 {err.rel_l2:.3g} (strict bound "
                                f"{tol.tol_l2:.1g}), max_elem {err.max_elem:.3g} (bound "
                                f"{tol.tol_elem:.1g}), relaxed {'pass' if r_ok else 'FAIL'}")
        worst["degenerate_sets"] = degenerate
        return {"strict_ok": strict_all, "relaxed_ok": relaxed_all, "errors": worst,
                "sizes": self.plan.describe(), "message": "; ".join(messages)}

    def measure(self, module, constexprs, opts: EvalOptions):
        import torch

        from argus.bench.kernelbench import inputs as kb_inputs
        from argus.bench.kernelbench.tasks import load_task
        from argus.bench.timing import measure

        if self.timing_inputs is None:
            full = load_task(self.task.path) if self.plan.overrides else self.module
            self.timing_inputs = [x.to(self.device) if isinstance(x, torch.Tensor) else x
                                  for x in kb_inputs.task_inputs(full, 0)]
        model = self.new_model(module)
        args = self.timing_inputs
        with torch.no_grad():
            return measure(lambda: model(*args), trials=opts.trials, warmup=opts.warmup,
                           device=self.device, allow_few_trials=True)


def _task_dtype(task: TaskSpec):
    import torch

    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}.get(
        task.dtype, torch.float32)


class _ExampleContext:
    """An Argus example file: make_inputs / reference / OUTPUT on several seeds."""

    def __init__(self, task: TaskSpec, opts: EvalOptions):
        from argus.demo import load_example

        self.task = task
        self.example = load_example(task.path)
        self.device = opts.device

    def _constexprs(self, inputs, constexprs):
        base = dict(self.example.constexprs(*inputs)) if hasattr(self.example, "constexprs") \
            else {}
        base.update(constexprs)
        return base

    def base_constexprs(self, constexprs):
        """The example's compile-time values (for its small inputs) under the candidate's."""
        inputs = self.example.make_inputs("small", seed=0, device="cpu")
        return self._constexprs(inputs, constexprs)

    def measure_baseline(self, opts: EvalOptions) -> dict[str, Any]:
        from argus.bench.timing import measure

        if not hasattr(self.example, "baseline") or not self.device.startswith("cuda"):
            return {}
        inputs = self.example.make_inputs("large", seed=0, device=self.device)
        t = measure(lambda: self.example.baseline(*inputs), trials=opts.trials,
                    warmup=opts.warmup, allow_few_trials=True)
        return {"baseline": {"ms": t.median_ms, "kind": "measured", "timing": t.to_json()}}

    def check(self, module, constexprs, opts: EvalOptions) -> dict[str, Any]:
        import torch

        from argus.demo import TOLERANCE, relative_error

        kernel_fn = module.KERNEL
        worst, messages, ok = 0.0, [], True
        out_dtype = ""
        for seed in range(opts.check_sets):
            inputs = self.example.make_inputs("small", seed=seed, device=self.device)
            consts = self._constexprs(inputs, constexprs)
            if self.device.startswith("cuda"):
                kernel_fn.compile(**consts)(*inputs)
                torch.cuda.synchronize()
            else:
                kernel_fn.interpret(*inputs, **consts)
            out = inputs[self.example.OUTPUT]
            err = relative_error(out, self.example.reference(*inputs))
            out_dtype = str(out.dtype).replace("torch.", "")
            tol = TOLERANCE.get({"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(
                out_dtype, ""), 1e-2)
            worst = max(worst, err)
            if not err <= tol:
                ok = False
                messages.append(f"seed {seed}: relative error {err:.3g} > {tol:g} ({out_dtype})")
        return {"strict_ok": ok, "relaxed_ok": ok or worst <= 1e-2,
                "errors": {"rel_l2": worst}, "sizes": "example size 'small'",
                "message": "; ".join(messages)}

    def measure(self, module, constexprs, opts: EvalOptions):
        from argus.bench.timing import measure

        inputs = self.example.make_inputs("large", seed=0, device=self.device)
        compiled = module.KERNEL.compile(**self._constexprs(inputs, constexprs))
        return measure(lambda: compiled(*inputs), trials=opts.trials, warmup=opts.warmup,
                       allow_few_trials=True)
