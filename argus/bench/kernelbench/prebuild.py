"""Compile every kernel a composed solution launches, ahead of time and without a GPU.

The judge's GPU calls are short (minutes of device time a session): a candidate that compiles
its kernels with NVRTC during its first run spends seconds of that time per task, and lets go
of the GPU gate around each compile. `prebuild_solution` runs a solution's forward on *meta*
tensors at the task's upstream sizes: the composed program is lowered exactly as on the GPU, and
every Argus launch compiles its kernel (and its launch-specialized variant) into the compile
cache (ARGUS_CACHE_DIR, argus/runtime/cache.py) instead of running it
(`CompiledKernel.build_for`). A judge on the GPU with that cache then finds each cubin by its
content key (the CUDA source, the options, the NVRTC build) and only loads it.

Why the keys match the GPU's: the CUDA source is a function of the kernel, its compile-time
values and the launch specialization (alignment facts of pointers, strides and shape
symbols); meta tensors have the GPU tensors' shapes, strides and dtypes, and data pointers that
are their offsets from a base of 0, while every GPU allocation is 512-byte aligned, so every
fact comes out the same. The candidate sees two input layouts: set 0 (and timing) as the
task's `get_inputs()` makes them, the re-distributed sets contiguous; both are built. What can
still differ is the compiler: the key holds NVRTC's library name and size, so the cache must be
built with the NVRTC build the GPU machine has (`compiler_id` is written to the cache's
manifest, and the judge's phase table counts "# nvrtc disk_hits" against "# nvrtc compiles").

`python -m argus.bench.kernelbench prebuild --solutions DIR [--level ...] [--jobs N]` builds every
task's solution, each in a process of its own (a failure is that task's, reported, never the
run's); a process builds many tasks (torch and Argus imported once).

Invariant: nothing here launches a kernel or allocates device memory; a prebuilt record is an
ordinary cache record (a wrong or missing one only costs a compile on the GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MANIFEST = "prebuild.json"


def compiler_id() -> str:
    """The NVRTC build compile_cuda puts in its keys ("" when NVRTC cannot be loaded)."""
    from argus.runtime.toolkit import ToolNotFound, load_nvrtc

    try:
        info = load_nvrtc()
    except ToolNotFound:
        return ""
    lib = Path(info.library)
    size = lib.stat().st_size if lib.exists() else 0
    return f"nvrtc {info.version[0]}.{info.version[1]} ({lib.name}, {size} bytes)"


def prebuild_solution(task_path: str | Path, solution_path: str | Path, seed: int = 0
                      ) -> dict[str, Any]:
    """Build the kernels of one solution's forward at the task's sizes (see the module
    docstring); returns the compile counters of this call and the layouts built."""
    import importlib.util

    import torch

    from argus.bench.kernelbench.tasks import load_task
    from argus.runtime.compile import compile_stats

    before = compile_stats()
    started = time.perf_counter()
    task = load_task(task_path)
    path = Path(solution_path).resolve()
    spec = importlib.util.spec_from_file_location("kernelbench_solution", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernelbench_solution"] = module
    spec.loader.exec_module(module)
    torch.manual_seed(seed)
    init_inputs = task.get_init_inputs()
    meta = torch.device("meta")
    with meta:
        torch.manual_seed(seed)
        model = module.ModelNew(*init_inputs)
        inputs = task.get_inputs()
    if isinstance(model, torch.nn.Module):
        model = model.to(meta)
    inputs = [x.to(meta) if isinstance(x, torch.Tensor) else x for x in inputs]
    layouts = [inputs]
    dense = [x.contiguous() if isinstance(x, torch.Tensor) else x for x in inputs]
    if any(isinstance(a, torch.Tensor) and a.stride() != b.stride()
           for a, b in zip(inputs, dense)):
        layouts.append(dense)       # the re-distributed sets (inputs.transform) are contiguous
    with torch.no_grad():
        for values in layouts:
            model(*values)
    after = compile_stats()
    return {"compiles": int(after["compiles"] - before["compiles"]),
            "disk_hits": int(after["disk_hits"] - before["disk_hits"]),
            "nvrtc_s": round(after["seconds"] - before["seconds"], 3),
            "layouts": len(layouts), "seconds": round(time.perf_counter() - started, 3)}


_WORKER = """
import json, sys, traceback
from argus.bench.kernelbench.prebuild import prebuild_solution
for line in sys.stdin:
    task, solution = json.loads(line)
    try:
        result = prebuild_solution(task, solution)
    except Exception as exc:
        tail = traceback.format_exc(limit=3).strip().splitlines()[-1]
        result = {"error": f"{type(exc).__name__}: {exc}"[:500] + f" ({tail[:200]})"}
    print("PREBUILD " + json.dumps(result), flush=True)
"""


def _run_batch(items: list[tuple[Path, Path]], timeout_s: float, done) -> None:
    """prebuild_solution for each (task, solution) in a process of its own, imported once for
    the batch: a solution that raises is that task's error; one that kills or hangs the
    process is too, and the rest of the batch goes on in a new process."""
    from argus.bench.kernelbench.tasks import repo_root

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo_root()),
                                                      env.get("PYTHONPATH", "")]))
    todo = list(items)
    while todo:
        proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env)
        try:
            while todo:
                task, solution = todo[0]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps([str(task), str(solution)]) + "\n")
                proc.stdin.flush()
                result = _read_result(proc, timeout_s)
                todo.pop(0)
                done(task, result)
                if "died" in result.get("error", ""):
                    break                       # a new process for the rest
        finally:
            proc.kill()
            proc.wait()


def _read_result(proc: subprocess.Popen, timeout_s: float) -> dict[str, Any]:
    import selectors

    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            proc.kill()
            return {"error": f"timed out after {timeout_s:.0f} s (process died: killed)"}
        line = proc.stdout.readline()
        if not line:
            return {"error": f"the process died (exit {proc.wait()})"}
        if line.startswith("PREBUILD "):
            return json.loads(line[len("PREBUILD "):])


def _one(task_path: Path, solution: Path, timeout_s: float) -> dict[str, Any]:
    """prebuild_solution in a fresh process."""
    out: list[dict[str, Any]] = []
    _run_batch([(Path(task_path), Path(solution))], timeout_s, lambda _t, r: out.append(r))
    return out[0]


def prebuild_all(tasks: list, solutions: Path | str, *, jobs: int = 2,
                 timeout_s: float = 600.0, progress=sys.stderr) -> dict[str, dict[str, Any]]:
    """prebuild_solution for every task with a solution in `solutions` (runner.find_solution's
    layouts) in `jobs` processes; writes the manifest (compiler, counts, per task) into the
    cache folder and returns the per-task results."""
    import threading

    from argus.bench.kernelbench.runner import find_solution
    from argus.runtime.cache import cache_dir

    todo = [(t, find_solution(t, solutions)) for t in tasks]
    todo = [(t, p) for t, p in todo if p is not None]
    by_path = {str(t.path): t for t, _ in todo}
    results: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    started = time.monotonic()

    def done(task_path: Path, r: dict[str, Any]) -> None:
        task = by_path[str(task_path)]
        with lock:
            results[task.key] = r
            n = len(results)
        if progress is not None:
            what = r.get("error") or (f"{r['compiles']} compiled, {r['disk_hits']} cached, "
                                      f"nvrtc {r['nvrtc_s']:.1f} s")
            print(f"[prebuild {n}/{len(todo)} {time.monotonic() - started:5.0f}s] "
                  f"{task.key} {task.name}: {what}", file=progress, flush=True)

    jobs = max(1, min(jobs, len(todo)))
    batches = [[(t.path, p) for t, p in todo[i::jobs]] for i in range(jobs)]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda b: _run_batch(b, timeout_s, done), batches))
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    here = compiler_id()
    tasks_built: dict[str, Any] = {}
    try:                    # an earlier build with the same NVRTC: its tasks' records stay
        earlier = json.loads((folder / MANIFEST).read_text())
        if earlier.get("compiler") == here:
            tasks_built.update(earlier.get("tasks", {}))
    except (OSError, ValueError):
        pass
    tasks_built.update(results)
    manifest = {"compiler": here, "arch": "sm_90a", "built_at": time.time(),
                "tasks": {k: tasks_built[k] for k in sorted(tasks_built)}}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return results


def check_manifest(folder: Path | str | None = None) -> str:
    """One line on a prebuilt cache against this machine's NVRTC: whether its keys can hit."""
    from argus.runtime.cache import cache_dir

    path = Path(folder) if folder else cache_dir()
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"no prebuilt kernels in {path} (no {MANIFEST})"
    here = compiler_id()
    built = manifest.get("compiler", "")
    n = len(manifest.get("tasks", {}))
    if built == here:
        return f"prebuilt kernels of {n} tasks in {path}, built with this NVRTC ({here})"
    return (f"WARNING: the prebuilt kernels in {path} were built with {built!r}, this machine "
            f"has {here!r}: every key misses and the candidates compile as before (build the "
            "cache with this NVRTC build)")


__all__ = ["MANIFEST", "check_manifest", "compiler_id", "prebuild_all", "prebuild_solution"]
