#!/usr/bin/env python3
"""Measure eager and torch.compile baselines for the KernelBench tasks on this GPU (device run).

Run from the repository root on the GPU machine:

    python3 -u scripts/gpu_kernelbench_baselines.py --out "$OUT" --budget-s 420

It times every level-1 and level-2 task of ../shared/kernelbench (or --root) eagerly and under
torch.compile with argus.bench.timing (whole-device CUDA events, 256 MB L2 flush, 100 trials),
compiling in --jobs parallel processes while GPU timings take turns on a lock, and writes to
--out:
    kernelbench-baselines.json   every task: status, eager/compile Timing, errors; environment
    kernelbench-baselines.md     the table for docs/perf/kernelbench-baselines.md
    baselines-cache.json         the same numbers in the judge's baseline-cache format
    progress.log                 the progress lines (also on stderr)
    logs/                        one log per worker process
It stops starting tasks when the budget runs low, kills what still runs at the deadline, and
lists every task it could not finish with the reason. Progress goes to stderr, unbuffered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _import_harness() -> None:
    """Import argus.bench.kernelbench even when argus/__init__ needs packages this machine
    lacks (the harness itself needs only torch)."""
    try:
        import argus  # noqa: F401
    except Exception as exc:
        print(f"note: argus package not importable ({type(exc).__name__}: {exc}); loading "
              "argus.bench alone", file=sys.stderr)
        for name in [m for m in sys.modules if m == "argus" or m.startswith("argus.")]:
            del sys.modules[name]
        for name, sub in (("argus", "argus"), ("argus.bench", "argus/bench")):
            stub = types.ModuleType(name)
            stub.__path__ = [str(ROOT / sub)]
            sys.modules[name] = stub




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--root", default=None, help="KernelBench folder (default: "
                        "../shared/kernelbench or $ARGUS_KERNELBENCH_DIR)")
    parser.add_argument("--levels", default="1,2")
    parser.add_argument("--ids", default=None, help="e.g. 1,2,5-9 (default: all)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="global wall-clock budget for measuring (default 420)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="parallel worker processes (default: CPU cores - 3, at most 13)")
    parser.add_argument("--task-timeout-s", type=float, default=240.0)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--gpu-mem-gb", type=float, default=100.0,
                        help="estimated GPU memory the parallel tasks may use together")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--device", default="cuda",
                        help="cuda (default); cpu only for a labelled smoke test of the script")
    args = parser.parse_args(argv)

    started = time.monotonic()
    _import_harness()
    import torch

    from argus.bench.kernelbench.baseline_suite import SuiteOptions, markdown, run_baselines
    from argus.bench.kernelbench.baselines import BaselineCache
    from argus.bench.kernelbench.tasks import KernelBenchError, discover, parse_ids
    from argus.bench.tee import Tee

    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA device visible; this script measures GPU baselines "
              "(--device cpu runs a labelled smoke test)", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    try:
        tasks = discover(args.root, levels=levels, ids=parse_ids(args.ids))
    except KernelBenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    jobs = args.jobs or max(1, min(13, (os.cpu_count() or 4) - 3))
    options = SuiteOptions(jobs=jobs, budget_s=args.budget_s - (time.monotonic() - started),
                           task_timeout_s=args.task_timeout_s, trials=args.trials,
                           warmup=args.warmup, compile=not args.no_compile,
                           gpu_mem_gb=args.gpu_mem_gb, device=args.device)
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{len(tasks)} tasks from {tasks[0].path.parent.parent if tasks else args.root}, "
          f"{jobs} workers, budget {options.budget_s:.0f} s, device {gpu}, "
          f"torch {torch.__version__}", file=sys.stderr, flush=True)
    cache = BaselineCache(out / "baselines-cache.json")  # written after every task
    progress = Tee(sys.stderr, out / "progress.log")
    try:
        outcomes, env = run_baselines(tasks, options, log_dir=out / "logs", cache=cache,
                                      progress=progress)
    except BaseException:
        (out / "FAILED.txt").write_text(traceback.format_exc())
        print(f"error: the run failed; partial numbers are in {out}/baselines-cache.json\n"
              + traceback.format_exc(), file=sys.stderr, flush=True)
        return 1
    wall = time.monotonic() - started
    report = {
        "env": {"gpu": env.gpu, "torch": env.torch, "cuda": env.cuda,
                "python": sys.version.split()[0], "cpus": os.cpu_count()},
        "options": {"jobs": jobs, "budget_s": args.budget_s, "trials": args.trials,
                    "warmup": args.warmup, "task_timeout_s": args.task_timeout_s,
                    "compile": not args.no_compile},
        "wall_s": wall,
        "counts": {status: sum(1 for o in outcomes if o.status == status)
                   for status in sorted({o.status for o in outcomes})},
        "tasks": [o.to_json() for o in outcomes],
    }
    (out / "kernelbench-baselines.json").write_text(json.dumps(report, indent=1))
    (out / "kernelbench-baselines.md").write_text(markdown(outcomes, env, options, wall))
    print(f"done in {wall:.0f} s: {report['counts']}; wrote {out}", file=sys.stderr,
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
