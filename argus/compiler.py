"""THE pipeline: Python kernel → traced IR → layouts → lowered IR → verified → CUDA → cubin.

(The file is compiler.py because `ag.pipeline` is the DSL's mbarrier ring.)

Read `compile_kernel` to know what happens to a kernel. `ARGUS_DUMP=dir` writes the IR after
every step plus the CUDA, PTX, cubin and resource report; `ARGUS_VERIFY=0` skips verification,
`ARGUS_VERIFY=2` re-runs it after every lowering pass.

Verification runs on the *lowered* kernel, because lowering makes the decisions the verifier
must prove (mbarrier parity and stage expressions, expect-tx bytes, descriptors, the smem
plan) and codegen renders exactly those decisions.

A verdict is remembered: a lowered kernel this Argus verified before (same printed IR, same
CUDA, same `argus_fingerprint`) is not verified again; the on-disk record (runtime/cache.py,
kind "verified") holds its diagnostics. Only clean verdicts are recorded (no error, no unknown),
so a kernel the verifier refuses is checked again every time. This is what makes a prebuilt
kernel's first call in a new process cheap (argus/ops/prebuild.py): NVRTC's own disk cache
skips the compile, this skips the proof.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from argus import analysis, codegen, config, lower
from argus.compiled import CompiledKernel
from argus.errors import Diagnostic, Loc, VerificationError
from argus.ir.core import Kernel
from argus.ir.printer import print_kernel


def compile_kernel(kernel_fn, *, verify: bool | None = None, dump: str | Path | None = None,
                   **constexprs: Any) -> CompiledKernel:
    steps: list[tuple[str, Kernel]] = []
    record = _recorder(steps, dump)
    level = config.verify_level() if verify is None else int(verify)

    kernel = kernel_fn.trace(**constexprs)
    record("trace", kernel)
    kernel = analysis.infer_layouts(kernel)
    record("infer_layouts", kernel)
    kernel = lower.run(kernel, on_step=_checked(record, level))
    source, diagnostics = _verified_source(kernel, level)
    binary = _compile(source)
    compiled = CompiledKernel(kernel_fn, kernel, source, binary, tuple(diagnostics))
    if dump is not None or config.dump_dir() is not None:
        compiled.dump(Path(dump or config.dump_dir()), steps)
    return compiled


def lower_only(kernel_fn, **constexprs: Any) -> Kernel:
    """Trace, infer layouts and lower, without verifying or compiling (tests, tools)."""
    return lower.run(analysis.infer_layouts(kernel_fn.trace(**constexprs)))


def front_end(kernel_fn, **constexprs: Any) -> codegen.Source:
    """Every stage of `compile_kernel` that judges the kernel itself, short of the verifier and
    NVRTC: trace, infer layouts, lower, render CUDA. `KernelFunction.interpret` runs it first,
    so a kernel the interpreter runs is one these stages accept, and one they refuse is refused
    by both with the same exception."""
    return codegen.render(lower_only(kernel_fn, **constexprs))


def _compile(source: codegen.Source):
    from argus.runtime.compile import compile_cuda

    return compile_cuda(source.text, [source.name], filename=f"{source.name}.cu")


def _verify(kernel: Kernel, level: int) -> list:
    if level <= 0:
        return []
    try:
        from argus import verify
    except ImportError:  # the verifier package is optional while it is being built
        return []
    if not hasattr(verify, "check"):
        return []
    diagnostics = verify.check(kernel)
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        raise VerificationError(errors)
    return diagnostics


def _verified_source(kernel: Kernel, level: int) -> tuple[codegen.Source, list]:
    """The kernel's CUDA and the verifier's diagnostics, from the "verified" record of an
    earlier identical kernel when there is one (level 1 only: level 2 asks for every check)."""
    if level != 1:
        diagnostics = _verify(kernel, level)
        return codegen.render(kernel), diagnostics
    from argus.runtime import cache

    try:
        source = codegen.render(kernel)
    except Exception:  # noqa: BLE001 - verify first: its finding explains more than codegen's
        diagnostics = _verify(kernel, level)
        return codegen.render(kernel), diagnostics
    key = _verified_key(kernel, source)
    record = cache.load(key, kind="verified")
    if record is not None:
        try:
            return source, [_diagnostic(d) for d in record["diagnostics"]]
        except (KeyError, TypeError, ValueError):
            pass  # written by another version: verify again
    diagnostics = _verify(kernel, level)
    if _verifier_present() and not any(d.severity in ("error", "unknown") for d in diagnostics):
        cache.store(key, {"diagnostics": [d.to_json() for d in diagnostics]}, kind="verified")
    return source, diagnostics


def _verifier_present() -> bool:
    """Whether `_verify` really ran the verifier (it returns no finding when the package or
    z3 is missing, which is no verdict to remember)."""
    import sys

    return hasattr(sys.modules.get("argus.verify"), "check")


def _verified_key(kernel: Kernel, source: codegen.Source) -> str:
    """What the verdict depends on: the lowered IR as printed (ops, layouts, attrs), the CUDA
    rendered from it, and this Argus (its sources, z3's version)."""
    import hashlib

    from argus.runtime.cache import argus_fingerprint

    digest = hashlib.sha256()
    for part in ("verified v1", argus_fingerprint(), print_kernel(kernel), source.text):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _diagnostic(data: dict) -> Diagnostic:
    return Diagnostic(data["severity"], data["code"], data["message"], Loc(**data["loc"]),
                      data.get("kernel", ""), dict(data.get("counterexample", {})),
                      data.get("fix", ""))


def _recorder(steps: list, dump) -> Callable[[str, Kernel], None]:
    def record(name: str, kernel: Kernel) -> None:
        steps.append((name, kernel))
    return record


def _checked(record, level: int):
    def on_step(name: str, kernel: Kernel) -> None:
        record(name, kernel)
        if level >= 2:
            _verify(kernel, level)
    return on_step


__all__ = ["compile_kernel", "front_end", "lower_only", "print_kernel"]
