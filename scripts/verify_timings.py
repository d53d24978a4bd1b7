#!/usr/bin/env python3
"""Measure verification wall time per kernel (docs/verify.md, "Timings").

For every example kernel and every library kernel, trace and lower it once, then time
`argus.verify.run` on the lowered kernel (what `ag.compile` verifies) REPEAT times and report
the median, the number of solver queries, the proven/unknown counts and the slowest query.
The solver's proof cache is emptied before every run, so each run solves every query (the
cache only helps when several kernels or schedules are verified in one process).
Prints a markdown table. Usage: python scripts/verify_timings.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def kernels():
    import elementwise
    import flash_attention
    import gemm as gemm_example
    import rmsnorm
    import softmax
    import softmax_online

    from argus.kernels import gemm as G

    yield "examples/gemm.py (persistent WS GEMM, 128x256x64, 4 stages)", gemm_example.KERNEL, {}
    yield "examples/softmax.py", softmax.KERNEL, {}
    yield "examples/elementwise.py", elementwise.KERNEL, {}
    yield "examples/rmsnorm.py", rmsnorm.KERNEL, {}
    yield "examples/softmax_online.py", softmax_online.KERNEL, {}
    yield "examples/flash_attention.py (d 64)", flash_attention.attention_kernel(64), {}
    yield "examples/flash_attention.py (d 128, causal)", \
        flash_attention.attention_kernel(128, causal=True), {}
    yield "kernels/gemm: B [K, N] (MN-major wgmma B)", G.gemm_kernel(b_layout="kn"), {}
    yield "kernels/gemm: batched", G.gemm_kernel(batched=True), {}
    yield "kernels/gemm: non-persistent", G.gemm, {"s": G.GemmSchedule(persistent=False)}
    yield "kernels/gemm: stmatrix + TMA-store epilogue", G.gemm, \
        {"s": G.GemmSchedule(epilogue="tma", stages=3)}
    yield "kernels/gemm: batched, B [Bt, K, N]", G.gemm_kernel(b_layout="kn", batched=True), {}
    yield "kernels/gemm: 2x1 cluster, B multicast", G.gemm, {"s": G.GemmSchedule(cluster_m=2)}
    yield "kernels/gemm: 2x1 cluster, B [K, N] multicast", G.gemm_kernel(b_layout="kn"), \
        {"s": G.GemmSchedule(cluster_m=2)}
    yield "kernels/gemm: 2x1 cluster + TMA store, non-persistent", G.gemm, \
        {"s": G.GemmSchedule(cluster_m=2, epilogue="tma", stages=3, persistent=False)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="", help="substring of the kernel names to time")
    args = ap.parse_args()
    from argus import verify
    from argus.compiler import lower_only
    from argus.verify import solver

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"median of {args.repeat} runs of verify.run on the lowered kernel\n")
    print("| kernel | median s | min s | queries | proven | unknown | slowest query |")
    print("|---|---|---|---|---|---|---|")
    for name, kernel_fn, cx in kernels():
        if args.only not in name:
            continue
        k = lower_only(kernel_fn, **cx)
        times, report = [], None
        for _ in range(args.repeat):
            solver.clear_cache()
            t0 = time.perf_counter()
            report = verify.run(k)
            times.append(time.perf_counter() - t0)
        slow = max(report.findings, key=lambda f: f.ms)
        print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | "
              f"{report.stats.queries} | {len(report.proven)} | {len(report.unknowns)} | "
              f"{slow.code} {slow.ms:.0f} ms ({slow.tier}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
