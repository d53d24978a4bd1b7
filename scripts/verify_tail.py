#!/usr/bin/env python3
"""Probe the heavy tail of a kernel's verification time (docs/verify.md, "Receptive-field
queries: the tail").

z3's effort on a query moves with the names of its constants and with the state of the
process's z3 context, so one kernel verified in another process (or after other kernels)
can take several times its usual time. scripts/verify_timings.py reports the least CPU of
a few runs in one state; this verifies each kernel under several states and reports the
worst: before each run the fresh-variable counter of argus.verify.tagdomain (`fresh_int`:
the suffix of every instance variable, `m!g157`) starts at another offset, which renames
every instance variable of the run, and the runs follow each other in one process (its
context grows as a long verification session's does). Run it under other PYTHONHASHSEED
values too (the order of some walks, and so of the queries, follows Python's hashing).

Per kernel and offset: the CPU seconds of verify.run (time.process_time; the proof cache
emptied first, as verify_timings does), the slowest obligation of `--code` (default
tag.assert: the conv receptive field) and the slowest of any code, and the findings that
are not proven (a tail that ran out of budget shows here as unknown).

Usage: python scripts/verify_tail.py --set conv --only "3-d, tma bw 32" --offsets 0,100000,200000
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("examples", "library", "conv"), default="conv")
    ap.add_argument("--only", action="append", default=[],
                    help="the kernels whose name contains this text (repeatable: any)")
    ap.add_argument("--offsets", default="0,100000,200000,300000",
                    help="comma-separated starts of tagdomain's fresh-variable counter")
    ap.add_argument("--code", default="tag.assert",
                    help="the obligation code whose slowest instance is reported")
    args = ap.parse_args()
    import verify_timings as VT

    from argus import verify
    from argus.compiler import lower_only
    from argus.verify import obligation, solver, tagdomain

    timed: list[tuple[str, float]] = []
    run = obligation.run

    def timed_run(ob, *a, **k):
        c0 = time.process_time()
        f = run(ob, *a, **k)
        timed.append((ob.code, time.process_time() - c0))
        return f
    obligation.run = timed_run
    make = {"examples": VT.examples, "library": VT.library, "conv": VT.conv}[args.set]
    offsets = [int(x) for x in args.offsets.split(",")]
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED', 'random')}\n")
    print(f"| kernel | offset | CPU s | slowest {args.code} ms | slowest query | not proven |")
    print("|---|---|---|---|---|---|")
    worst: list[tuple[float, str]] = []
    for name, kernel_fn, cx in make():
        if args.only and not any(text in name for text in args.only):
            continue
        k = lower_only(kernel_fn, **cx)
        cpus = []
        for off in offsets:
            tagdomain._fresh = itertools.count(off)
            solver.clear_cache()
            timed.clear()
            c0 = time.process_time()
            report = verify.run(k)
            cpu = time.process_time() - c0
            cpus.append(cpu)
            mine = max((t for c, t in timed if c == args.code), default=0.0)
            code, top = max(timed, key=lambda x: x[1]) if timed else ("-", 0.0)
            bad = [f for f in report.findings if f.status != "proven"]
            print(f"| {name} | {off} | {cpu:.2f} | {mine * 1e3:.0f} | {code} {top * 1e3:.0f} ms "
                  f"| {len(bad)} |", flush=True)
        worst.append((max(cpus), f"{name}: least {min(cpus):.2f}, worst {max(cpus):.2f} s"))
    print()
    for _, line in sorted(worst, reverse=True):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
