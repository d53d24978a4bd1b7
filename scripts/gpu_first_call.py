#!/usr/bin/env python3
"""First-call host time of argus.ops.matmul on the GPU, cold and after `argus prebuild`
(issue 18 deliverable 1: "a first call costs < 0.5 s"), split by phase.

Every shape is measured in a fresh Python process (torch, argus and argus.ops imported and a
CUDA context made before the clock starts, so those imports and context creation are not
counted; the lazy imports of the compiler, the runtime, cuda-bindings and z3 on the first call
are). Two caches:

  cold      an empty ARGUS_CACHE_DIR: trace, lower, verify, NVRTC, cubin load, launch
  prebuilt  a cache filled by `argus prebuild` for the kinds of the shapes below first

The first call is timed to the end of the launch and synchronize (the kernel itself is
microseconds to a few milliseconds; the printed second call says how much of the first call it
is). Shapes are held-out ones (none of them on prebuild's grid).

Where the time goes: the child wraps each step of the first call with a timer that counts its
own time only (a step's nested steps and the imports it triggers are counted to them), so the
phases add up to the first call, less "other" (matmul's own checks, torch, the wrappers):

  import        Python imports the first call triggers (compiler, runtime, cuda-bindings, z3)
  choose        the schedule choice (tuning cache, analytic model)
  trace/lower   tracing, layout inference, lowering
  verify        the verifier or its remembered verdict (fingerprint, key, disk read)
  codegen       rendering the CUDA (also the launch specialization's render, if any)
  cubin         NVRTC, or its disk cache (loading NVRTC for its version is part of the key)
  coverage      the launch check that the stores cover the output (z3 unless remembered)
  special.      the launch specialization (alignment facts) apart from its render
  tma           TMA descriptors (cuTensorMapEncodeTiled)
  load          cubin load (cuModuleLoadData, cuModuleGetFunction, context)
  smem          the dynamic shared-memory opt-in
  launch        cuLaunchKernelEx, and the synchronize after it

    python3 scripts/gpu_first_call.py [--verify 0|1] [--skip-cold] [--emulate]

--verify defaults to $ARGUS_VERIFY (1 when unset), for the prebuild and every child alike.
--emulate runs on a machine without a GPU: CPU tensors, and stand-ins for the device-only calls
(argument checks, TMA encoding, module load and launch), to check the breakdown itself.

The phase table also counts the on-disk records each call looked up, by kind and hit / miss
("verified miss" after a prebuild at the same verify level: the verdict was not found, and the
verifier ran again). Prints one row per shape and cache, the phase table, then `worst prebuilt
first call: X s (bar 0.5 s)`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (M, N, K, B layout): held-out shapes of issue 18 and LLM projections off the grid
SHAPES = [(3000, 5000, 2000, "kn"), (2048, 7168, 2000, "nk"), (8000, 4096, 14000, "nk"),
          (16, 8000, 8000, "nk"), (100, 11000, 4000, "kn"), (777, 4000, 3000, "nk")]

PHASES = ("import", "choose", "trace/lower", "verify", "codegen", "cubin", "coverage",
          "special.", "tma", "load", "smem", "launch", "other")

_CHILD = r"""
import builtins, functools, importlib, json, sys, time
sys.path.insert(0, {root!r})
emulate = {emulate!r}
import torch, argus, argus.ops
mm = sys.modules["argus.ops.matmul"]  # argus.ops.matmul is also the function
from argus.dsl.kernel import KernelDef

phases = dict.fromkeys({phases!r}, 0.0)
stack = []

def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        stack.append(0.0)
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            phases[name] += spent - stack.pop()
            if stack:
                stack[-1] += spent
    return wrapper

# steps in modules the first call imports lazily are wrapped right after their import, so that
# importing them here does not take their import out of the clock
LAZY = [("argus.compiler", None, "_verified_source", "verify"),
        ("argus.analysis", None, "infer_layouts", "trace/lower"),
        ("argus.lower", None, "run", "trace/lower"),
        ("argus.codegen", None, "render", "codegen"),
        ("argus.runtime.compile", None, "compile_cuda", "cubin"),
        ("argus.runtime.coverage", None, "check_launch", "coverage"),
        ("argus.compiled", "CompiledKernel", "variant", "special."),
        ("argus.runtime.tma", None, "make_tensor_map", "tma"),
        ("argus.runtime.driver", None, "get_function", "load"),
        ("argus.runtime.driver", None, "_opt_in_smem", "smem"),
        ("argus.runtime.driver", "LaunchPlan", "__call__", "launch")]
pending = list(LAZY)

def wrap_imported():
    for entry in list(pending):
        module, cls, attr, name = entry
        owner = sys.modules.get(module)
        if owner is not None and cls:
            owner = getattr(owner, cls, None)
        if owner is not None and hasattr(owner, attr):  # else: still being imported
            fn = getattr(owner, attr)
            setattr(owner, attr, counting_load(fn) if name is None else timed(name, fn))
            pending.remove(entry)

records = {{}}  # on-disk cache lookups by kind: "hit" / "miss" counts

def counting_load(load):
    @functools.wraps(load)
    def wrapper(key, kind="cubin"):
        record = load(key, kind)
        name = kind + (" hit" if record is not None else " miss")
        records[name] = records.get(name, 0) + 1
        return record
    return wrapper

LAZY.append(("argus.runtime.cache", None, "load", None))
pending.append(LAZY[-1])
real_import = builtins.__import__

def counted_import(name, globals=None, locals=None, fromlist=(), level=0):
    mod = sys.modules.get(name) if level == 0 else None
    if mod is not None and all(hasattr(mod, f) for f in fromlist or ()):
        return real_import(name, globals, locals, fromlist, level)
    result = timed("import", real_import)(name, globals, locals, fromlist, level)
    if pending:
        wrap_imported()
    return result

KernelDef.trace = timed("trace/lower", KernelDef.trace)
mm.choose = timed("choose", mm.choose)
wrap_imported()
m, n, k, layout = {shape!r}
if emulate:  # no GPU: CPU tensors and stand-ins for what only the device can do
    import dataclasses
    device = "cpu"
    mm._check = lambda *a: None
    mm.device_name = lambda d: "NVIDIA H200"
    torch.cuda.current_device = lambda: None
    torch.cuda.synchronize = lambda *a: None
    import argus.runtime.args, argus.runtime.driver, argus.runtime.tma
    argus.runtime.args.check_tensor_arg = lambda *a, **k: None
    argus.runtime.tma.make_tensor_map = lambda t, **k: None
    @dataclasses.dataclass(frozen=True)
    class StandIn:
        args: tuple = ()
        def __call__(self):
            pass
    argus.runtime.driver.prepare_launch = lambda *a, **k: StandIn()
    wrap_imported()
else:
    device = "cuda"
    torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
b = w.t() if layout == "nk" else torch.randn(k, n, device=device, dtype=torch.bfloat16)
torch.cuda.synchronize()
from argus.runtime.compile import compile_stats
before = set(sys.modules)
builtins.__import__ = counted_import
c0 = time.process_time(); t0 = time.perf_counter()
out = argus.ops.matmul(a, b)
s0 = time.perf_counter(); torch.cuda.synchronize(); phases["launch"] += time.perf_counter() - s0
first = time.perf_counter() - t0; cpu = time.process_time() - c0
builtins.__import__ = real_import
phases["other"] = first - sum(v for key, v in phases.items() if key != "other")
imported = sorted(set(sys.modules) - before)
t1 = time.perf_counter(); argus.ops.matmul(a, b, out); torch.cuda.synchronize()
second = time.perf_counter() - t1
if emulate:
    err = 0.0
else:
    ref = (a.double() @ b.double())
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
print(json.dumps({{"first_s": first, "cpu_s": cpu, "second_s": second, "rel_err": err,
                  "z3": "z3" in sys.modules, "verifier": "argus.verify.checker" in sys.modules,
                  "modules_imported": len(imported), "phases": phases, "records": records,
                  **compile_stats()}}))
"""


def run_child(shape, cache: str, verify: str, emulate: bool) -> dict:
    env = dict(os.environ, ARGUS_CACHE_DIR=cache, ARGUS_VERIFY=verify)
    code = _CHILD.format(root=str(ROOT), shape=shape, phases=PHASES, emulate=emulate)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=600)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--verify", default=os.environ.get("ARGUS_VERIFY", "1"),
                        choices=("0", "1"))
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--emulate", action="store_true",
                        help="no GPU: CPU tensors and stand-ins for the device calls")
    parser.add_argument("--shapes", default="", help="MxNxK:LAYOUT,... (default: the held-out set)")
    parser.add_argument("--prebuilt", default="",
                        help="a cache `argus prebuild` filled before (default: prebuild now)")
    args = parser.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [(*(int(x) for x in s.split(":")[0].split("x")), s.split(":")[1])
                  for s in args.shapes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="argus-first-call-"))
    prebuilt = args.prebuilt or str(tmp / "prebuilt")
    kinds = sorted({f"bf16:{layout}:tma" for *_, layout in shapes})
    cmd = [sys.executable, "-m", "argus", "prebuild"] + [x for kd in kinds for x in ("--kind", kd)]
    env = dict(os.environ, ARGUS_CACHE_DIR=prebuilt, ARGUS_VERIFY=args.verify,
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [  # keep the caller's site dirs
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    print(f"verify level {args.verify}{', emulated (no GPU)' if args.emulate else ''}; "
          f"prebuild:", " ".join(cmd[1:]) if not args.prebuilt else f"given, {prebuilt}",
          flush=True)
    if not args.prebuilt:
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else
              done.stderr[-2000:])
    print("| M x N x K | B | cache | first call s | its CPU s | second call s | z3 imported "
          "| verifier imported | NVRTC compiles | cubin disk hits | rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst, colds, rows = 0.0, 0, []
    for shape in shapes:
        for label in (() if args.skip_cold else ("cold",)) + ("prebuilt",):
            colds += label == "cold"
            cache = prebuilt if label == "prebuilt" else str(tmp / f"cold-{colds}")
            r = run_child(shape, cache, args.verify, args.emulate)
            m, n, k, layout = shape
            if "error" in r:
                print(f"| {m}x{n}x{k} | {layout} | {label} | error: {r['error']} |")
                worst = float("inf")
                continue
            if label == "prebuilt":
                worst = max(worst, r["first_s"])
            rows.append((f"{m}x{n}x{k} {layout}", label, r))
            print(f"| {m}x{n}x{k} | {layout} | {label} | {r['first_s']:.3f} | {r['cpu_s']:.3f} "
                  f"| {r['second_s'] * 1e3:.2f} ms | {'yes' if r['z3'] else 'no'} | "
                  f"{'yes' if r['verifier'] else 'no'} | {r['compiles']} | {r['disk_hits']} | "
                  f"{r['rel_err']:.1e} |", flush=True)
    print("\nphases of the first call, seconds (each step's own time; see the docstring):\n")
    print("| shape | cache | " + " | ".join(PHASES) + " | modules imported | cache records |")
    print("|---|---|" + "---|" * (len(PHASES) + 2))
    for shape, label, r in rows:
        cells = " | ".join(f"{r['phases'][p]:.3f}" for p in PHASES)
        found = ", ".join(f"{k} {v}" for k, v in sorted(r["records"].items()))
        print(f"| {shape} | {label} | {cells} | {r['modules_imported']} | {found} |")
    print(f"\nworst prebuilt first call: {worst:.3f} s (bar 0.5 s)")
    return 0 if worst < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
