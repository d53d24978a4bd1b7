"""The main job: trace, verify, compile and run every example kernel, and say what ran where.

With a Hopper GPU each example runs on the device and is checked against a float64 reference
on fresh random data (and timed against its PyTorch baseline with `--bench`); without one the
CUDA is still generated and built with NVRTC to an sm_90a cubin, and the kernel runs in the
numpy interpreter, which the report says plainly.

Example files follow one protocol: KERNEL (an @ag.kernel), OUTPUT (index of the output
tensor), make_inputs(size, seed, device), constexprs(*inputs), reference(*inputs) (float64),
and optionally baseline(*inputs), flops(*inputs), bytes_moved(*inputs).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_EXAMPLES = ("elementwise", "softmax", "rmsnorm", "flash_attention", "gemm")


@dataclass
class ExampleResult:
    name: str
    mode: str                     # "gpu" or "interpreter"
    shape: str
    rel_error: float
    ok: bool
    compile_s: float = 0.0
    verify_s: float = 0.0
    registers: int = 0
    spills: int = 0
    diagnostics: list = field(default_factory=list)
    ours_ms: float | None = None
    baseline_ms: float | None = None
    tflops: float | None = None
    baseline_tflops: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.ours_ms and self.baseline_ms:
            return self.baseline_ms / self.ours_ms
        return None


def load_example(name_or_path: str) -> ModuleType:
    """An example by name (examples/NAME.py) or any Python file by path, imported as a module.

    A missing file or one that is not Python is a FileNotFoundError / ValueError naming it and
    the examples there are; a syntax error in it propagates as SyntaxError (file and line)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = EXAMPLES_DIR / f"{name_or_path}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no example or file {name_or_path!r} (looked for {path}); "
                                f"examples: {', '.join(DEFAULT_EXAMPLES)}")
    if path.suffix != ".py":
        raise ValueError(f"{name_or_path} is not a Python file: kernels and examples are .py "
                         f"files (see docs/dsl.md, 'Example files')")
    spec = importlib.util.spec_from_file_location(f"argus_example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    except Exception:  # noqa: BLE001 - no torch CUDA at all
        return False


def relative_error(out, ref) -> float:
    out64 = out.detach().double().cpu()
    ref64 = ref.detach().double().cpu()
    if not bool(out64.isfinite().all()):
        return math.inf
    denom = ref64.norm().item() or 1.0
    return (out64 - ref64).norm().item() / denom


TOLERANCE = {"f32": 1e-5, "bf16": 1e-2, "f16": 5e-3}


def run_example(module: ModuleType, *, size: str = "small", seed: int = 0,
                device: str | None = None, bench: bool = False) -> ExampleResult:
    """Compile and run one example; on GPU (device="cuda") or in the interpreter ("cpu")."""
    from argus import compiler, verify as verifier
    from argus.compiler import lower_only

    device = device or ("cuda" if gpu_available() else "cpu")
    kernel_fn = module.KERNEL
    inputs = module.make_inputs(size, seed=seed, device=device)
    consts = module.constexprs(*inputs)
    out = inputs[module.OUTPUT]
    t0 = time.perf_counter()
    lowered = lower_only(kernel_fn, **consts)
    diags = verifier.check(lowered) if hasattr(verifier, "check") else []
    verify_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = compiler.compile_kernel(kernel_fn, verify=False, **consts)
    compile_s = time.perf_counter() - t0
    res = compiled.resources
    if device == "cuda":
        import torch

        compiled(*inputs)
        torch.cuda.synchronize()
        mode = "gpu"
    else:
        kernel_fn.interpret(*inputs, **consts)
        mode = "interpreter"
    ref = module.reference(*inputs)
    err = relative_error(out, ref)
    dtype = str(out.dtype).replace("torch.", "")
    tol = TOLERANCE.get({"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(dtype, ""),
                        1e-2)
    result = ExampleResult(
        name=module.__name__.replace("argus_example_", ""), mode=mode,
        shape="x".join(str(d) for d in out.shape), rel_error=err, ok=err <= tol,
        compile_s=compile_s, verify_s=verify_s, registers=res.registers,
        spills=res.spill_stores + res.spill_loads,
        diagnostics=[d for d in diags if d.severity in ("error", "unknown")])
    if bench and mode == "gpu":
        _bench(module, compiled, inputs, result)
    return result


def _bench(module, compiled, inputs, result: ExampleResult) -> None:
    from argus.runtime.timing import measure

    ours = measure(lambda: compiled(*inputs), trials=100, warmup=10)
    result.ours_ms = ours.median_ms
    if hasattr(module, "baseline"):
        base = measure(lambda: module.baseline(*inputs), trials=100, warmup=10)
        result.baseline_ms = base.median_ms
    if hasattr(module, "flops"):
        f = module.flops(*inputs)
        result.tflops = f / (result.ours_ms * 1e-3) / 1e12
        if result.baseline_ms:
            result.baseline_tflops = f / (result.baseline_ms * 1e-3) / 1e12


def format_table(results: list[ExampleResult]) -> str:
    rows = ["| example | ran on | shape | rel. error vs f64 | ok | regs | spills | ours ms | "
            "baseline ms | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        fmt = (lambda x: f"{x:.4f}" if x is not None else "-")
        ratio = f"{r.ratio:.2f}x" if r.ratio else "-"
        rows.append(f"| {r.name} | {r.mode} | {r.shape} | {r.rel_error:.2e} | "
                    f"{'yes' if r.ok else 'NO'} | {r.registers} | {r.spills} | {fmt(r.ours_ms)} | "
                    f"{fmt(r.baseline_ms)} | {ratio} |")
    return "\n".join(rows)


def status_word(r: ExampleResult) -> str:
    """"ok" only for what holds: the numbers, and the proof when nothing is left unknown (an
    unknown invariant, such as output coverage under a raster order, is not a pass)."""
    errs = sum(d.severity == "error" for d in r.diagnostics)
    unknown = sum(d.severity == "unknown" for d in r.diagnostics)
    if not r.ok:
        return "WRONG"
    if errs:
        return "VIOLATED"
    if unknown:
        return f"numerics ok, {unknown} invariant(s) unknown (not proven)"
    return "ok"


def main(examples=DEFAULT_EXAMPLES, size: str = "small", bench: bool = False) -> int:
    gpu = gpu_available()
    where = "the GPU" if gpu else "the numpy interpreter (no Hopper GPU found)"
    print(f"argus demo: tracing, verifying and compiling {len(examples)} example kernels for "
          f"sm_90a with NVRTC; running them on {where}.", flush=True)
    results = []
    for i, name in enumerate(examples, 1):
        print(f"[{i}/{len(examples)}] {name} ...", end=" ", flush=True)
        r = run_example(load_example(name), size=size, bench=bench)
        results.append(r)
        status = status_word(r)
        print(f"{status}: rel. error {r.rel_error:.2e} on {r.mode}, verify {r.verify_s:.2f} s, "
              f"compile {r.compile_s:.2f} s, {r.registers} registers, {r.spills} B spilled"
              + (f", {len(r.diagnostics)} verifier findings" if r.diagnostics else ""),
              flush=True)
        for d in r.diagnostics:
            print("   ", str(d).replace("\n", "\n    "))
    print()
    print(format_table(results))
    if not gpu:
        print("\nNo Hopper GPU here: the kernels were compiled to sm_90a cubins but executed by "
              "the interpreter." + (" --bench timed nothing: timing needs the GPU."
                                    if bench else ""))
    errors = [d for r in results for d in r.diagnostics if d.severity == "error"]
    return 0 if all(r.ok for r in results) and not errors else 1
