"""Does every kernel argus.compose launches pass the verifier? Measured on the CPU.

A composed model compiles its template kernels with `kernel.compile(**constexprs)` on CUDA
tensors (argus/compose/launch.py `run`), and compile verifies unless ARGUS_VERIFY=0. GPU judge
runs set ARGUS_VERIFY=0, so a template the verifier refuses (a real bug or a false alarm) would
only show to a user with default settings, as a VerificationError. This script finds them:

  1. collect: run each selected KernelBench task's composed `ModelNew` on the CPU at small
     sizes (the interpreter; `KernelFunction.interpret` is wrapped to record every launched
     kernel with its compile-time values), keeping one launch per distinct traced kernel (the
     printed IR without source locations or the kernel's name: the same template with the
     same compile-time values is verified once);
  2. verify: lower each distinct kernel and run `argus.verify.check` on it (what `ag.compile`
     runs before NVRTC); with --compile, also build it with NVRTC for sm_90a (no GPU needed).

Prints one line per distinct kernel (ok / error / unknown, the rule and the first line of the
finding) and the totals; --json writes every finding. Compile-time values may depend on sizes
(a row block of min(1024, pow2(columns))): shrunk tasks launch the small-size variants, which
is what --elements trades against run time.

    .venv/bin/python scripts/compose_verify.py --level 1 --level 2 [--ids 1-20] [--no-conv]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


@dataclass
class Launch:
    """One distinct (kernel, compile-time values) and the tasks that launched it."""

    kernel: Any                      # the KernelFunction
    constexprs: dict
    tasks: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        consts = ", ".join(f"{k}={v}" for k, v in sorted(self.constexprs.items()))
        return f"{self.kernel.name}({consts})"


def kernel_key(kernel, constexprs: dict) -> str:
    """The traced kernel's IR without locations and without its name: generated templates get
    per-task names and file tags, yet the same text is the same proof obligation."""
    from argus.ir.printer import print_kernel

    text = print_kernel(kernel.trace(**constexprs), with_locs=False)
    text = re.sub(r"^kernel @\S+\(", "kernel @_(", text, count=1)
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def recording(launches: dict[str, Launch], task: str = ""):
    """Within the block, every `KernelFunction.interpret` call also records its kernel and
    compile-time values in `launches` (keyed by `kernel_key`), then interprets as usual."""
    from argus.kernel_api import KernelFunction

    original = KernelFunction.interpret

    def interpret(self, *arrays, **kw):
        _, constexprs = self._split(kw)
        try:
            key = kernel_key(self, constexprs)
        except Exception:  # noqa: BLE001 - a kernel that does not trace fails in interpret
            key = None
        if key is not None:
            launch = launches.setdefault(key, Launch(self, dict(constexprs)))
            if task and task not in launch.tasks:
                launch.tasks.append(task)
        return original(self, *arrays, **kw)

    KernelFunction.interpret = interpret
    try:
        yield launches
    finally:
        KernelFunction.interpret = original


def run_task(task, budget) -> str:
    """Run the task's composed model once on the CPU (shrunk to `budget`); '' or the error."""
    import torch

    from argus.bench.kernelbench import inputs as kb_inputs
    from argus.bench.kernelbench.shrink import plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose.runtime import ComposedModel

    module = load_task(task.path, plan_sizes(task.path, budget).overrides)
    torch.manual_seed(0)
    init = list(module.get_init_inputs())

    class ModelNew(ComposedModel):
        MODEL = module.Model

    torch.manual_seed(0)
    new = ModelNew(*init)
    xs = kb_inputs.task_inputs(module, 0)
    with torch.no_grad():
        new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
    return ""


@dataclass
class Verdict:
    status: str                      # ok, error, unknown, refused (lowering or NVRTC failed)
    rules: list[str]
    first: str                       # the first finding's message, one line
    seconds: float
    findings: list[dict] = field(default_factory=list)


def verify_launch(launch: Launch, compile_too: bool = False) -> Verdict:
    """Lower the kernel and run the verifier on it, as `ag.compile` does before NVRTC; with
    `compile_too` also build the CUDA for sm_90a (verification off: it just ran)."""
    import argus as ag
    from argus import verify

    t0 = time.perf_counter()
    try:
        lowered = launch.kernel.lower(**launch.constexprs)
        diags = verify.check(lowered)
        if compile_too:
            ag.compile(launch.kernel, verify=False, **launch.constexprs)
    except Exception as exc:  # noqa: BLE001 - a refused kernel is this kernel's row
        msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return Verdict("refused", [], msg[:300], time.perf_counter() - t0)
    bad = [d for d in diags if d.severity in ("error", "unknown")]
    status = "error" if any(d.severity == "error" for d in bad) else \
        "unknown" if bad else "ok"
    rules = sorted({d.code for d in bad})
    first = str(bad[0].message).splitlines()[0][:300] if bad else ""
    return Verdict(status, rules, first, time.perf_counter() - t0,
                   [d.to_json() for d in bad])


def main(argv=None) -> int:
    from argus.bench.kernelbench.shrink import SizeBudget
    from argus.bench.kernelbench.tasks import discover, parse_ids

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", action="append", type=int, default=[])
    ap.add_argument("--ids", default=None)
    ap.add_argument("--no-conv", action="store_true", help="skip convolution tasks")
    ap.add_argument("--elements", type=int, default=1 << 13,
                    help="CPU size budget per task (elements in all tensors)")
    ap.add_argument("--flops", type=float, default=2e6)
    ap.add_argument("--compile", action="store_true", help="also build each kernel with NVRTC")
    ap.add_argument("--json", default=None, help="write every launch and finding here")
    args = ap.parse_args(argv)
    tasks = [t for t in discover(levels=args.level or [1, 2], ids=parse_ids(args.ids))
             if not (args.no_conv and "conv" in t.path.stem.lower())]
    budget = SizeBudget(args.elements, args.flops)

    launches: dict[str, Launch] = {}
    failed_tasks: list[tuple[str, str]] = []
    t0 = time.monotonic()
    for t in tasks:
        with recording(launches, t.key):
            try:
                run_task(t, budget)
            except Exception as exc:  # noqa: BLE001 - the kernels it launched still count
                failed_tasks.append((t.key, f"{type(exc).__name__}: {str(exc)[:100]}"))
                if "-v" in sys.argv:
                    traceback.print_exc()
    print(f"collected {len(launches)} distinct kernels from {len(tasks)} tasks in "
          f"{time.monotonic() - t0:.0f} s ({len(failed_tasks)} tasks did not run on the CPU)",
          file=sys.stderr, flush=True)

    counts: dict[str, int] = {}
    rows = []
    for launch in launches.values():
        v = verify_launch(launch, args.compile)
        counts[v.status] = counts.get(v.status, 0) + 1
        where = ", ".join(launch.tasks[:4]) + (" ..." if len(launch.tasks) > 4 else "")
        line = f"{v.status:8s} {v.seconds:5.1f}s {launch.label} [{where}]"
        if v.status != "ok":
            line += f"\n         {', '.join(v.rules)}: {v.first}"
        print(line, flush=True)
        rows.append({"kernel": launch.kernel.name, "constexprs": repr(launch.constexprs),
                     "tasks": launch.tasks, "status": v.status, "rules": v.rules,
                     "seconds": round(v.seconds, 2), "findings": v.findings or v.first})
    print("totals: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    for key, err in failed_tasks:
        print(f"task did not run: {key}: {err}")
    if args.json:
        Path(args.json).write_text(json.dumps({"kernels": rows, "failed_tasks": failed_tasks},
                                              indent=1, default=str))
    return 0 if set(counts) <= {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main())
