#!/usr/bin/env python3
"""Measure verification wall time per kernel (docs/verify.md, "Timings").

For every example kernel and every library kernel, trace and lower it once, then time
`argus.verify.run` on the lowered kernel (what `ag.compile` verifies) REPEAT times and report
the median wall time, the least CPU time of this process (z3 runs in it; less sensitive to other
processes on a shared machine than wall time), the number of solver queries and of those
actually solved (the rest are alpha-equivalent to an earlier proof: solver.canonical; "+N
derived": obligations proven from other proofs, not queried, `Obligation.implied_by`), the
proven/unknown counts and the slowest query. Solver budgets are z3 resource units, not wall
time (docs/verify.md "Budgets"): the answers, and so the work done, are the same at any load;
on a shared machine compare the CPU column (wall time grows with the load, CPU time much less).
The solver's proof cache is emptied before every run, so each run starts cold: only the
alpha-equivalent queries of the kernel itself are answered from its own earlier proofs (across
kernels and schedules of one process the cache helps more, which is not measured here).

`--set library` times every schedule the library ops can pick, as the clean-verification tests
enumerate them, and every conv schedule (`--set conv`: those alone; `conv()` below) (tests/verify/test_library_schedules.py: argus.ops.matmul's GEMM schedules;
tests/unit/test_fp8_*.py: fp8 per-tensor and block-scaled; tests/verify/
test_attention_schedules.py: attention and ping-pong; tests/moe/test_moe_verify.py: MoE).
Prints a markdown table. Usage: python scripts/verify_timings.py [--repeat 5] [--set library] [--only TEXT ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def examples():
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


def _short(s) -> str:
    default = type(s)()
    return ",".join(f"{f.name}={getattr(s, f.name)}" for f in dataclasses.fields(s)
                    if getattr(s, f.name) != getattr(default, f.name)) or "default"


def library():
    """Every library kernel and schedule the clean-verification tests enumerate."""
    import argus as ag
    from argus.kernels.attention import attention_kernel, base_schedule, default_schedule
    from argus.kernels.gemm_fp8 import (gemm_fp8_blockscaled_kernel,
                                        gemm_fp8_blockscaled_smem_kernel, gemm_fp8_kernel)
    from argus.ops.schedules import kernel_for
    from tests.moe.test_moe_verify import KERNELS as MOE
    from tests.unit.test_fp8_blockscaled import BLOCK_CASES
    from tests.unit.test_fp8_gemm import CASES as FP8
    from tests.verify.test_attention_schedules import CASES as ATTN
    from tests.verify.test_attention_schedules import DEFAULTS
    from tests.verify.test_library_schedules import CASES as GEMM

    out = {"bf16": ag.bf16, "f16": ag.f16, "f32": ag.f32}
    for p, s in GEMM:
        fn, s = kernel_for(p, s)
        yield f"matmul {p.b_layout}{' batched' if p.batch > 1 else ''} {p.in_dtype}->" \
              f"{p.out_dtype} {_short(s)}", fn, {"s": s}
    for p, s in FP8:
        yield f"fp8 {p.out_dtype} {_short(s)}", gemm_fp8_kernel(out[p.out_dtype]), {"s": s}
    for p, s in BLOCK_CASES:   # the kernel the op runs it with, as the test picks it
        kernel = gemm_fp8_blockscaled_smem_kernel if s.smem_scales else \
            gemm_fp8_blockscaled_kernel
        yield f"fp8 block-scaled {p.out_dtype} {_short(s)}", kernel(out[p.out_dtype]), {"s": s}
    for d, t, causal, lse, epi in ATTN:
        s = dataclasses.replace(base_schedule(d), epilogue=epi)
        yield f"attention d{d} {t.name}{' causal' if causal else ''}{' lse' if lse else ''} " \
              f"{epi}", attention_kernel(d, t, causal, lse), {"s": s}
    for d, causal in [(64, True), (128, False), (128, True)]:
        s = dataclasses.replace(base_schedule(d), ordered=True)
        yield f"attention ping-pong d{d}{' causal' if causal else ''}", \
            attention_kernel(d, ag.bf16, causal, False), {"s": s}
    for d, causal, seq_len in DEFAULTS:
        s = default_schedule(d, causal, seq_len)
        yield f"attention default d{d}{' causal' if causal else ''} S<={seq_len or 'any'} " \
              f"{_short(s)}", attention_kernel(d, ag.bf16, causal, False), {"s": s}
    for name, build in MOE:
        fn, kw = build()
        yield f"moe {name}", fn, kw


def conv():
    """Every conv schedule the conv op can pick (argus.ops.conv.schedule_for: direct / TMA-store
    epilogue, promoted fp32 split, 2x1 clusters, halo, rowbox, NCHW results, 3-d) and the
    opt-in packed taps (ConvSchedule.taps_per_slice=4), at the
    geometries of the verification tests (tests/interp/test_conv_interp.py,
    test_conv_nchw_epilogue.py, test_conv_nchw_tma_epilogue.py; docs/verify.md's conv table)."""
    import argus as ag
    from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel

    g2d = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=128)
    rowbox = ConvGeometry(3, 3, 1, 1, 2, 1, 2, 1, groups=1, cg_padded=128)
    g3d = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                       pad_d=1, dil_d=1)
    nchw = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)
    one = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
    halo = ConvGeometry(3, 3, 1, 2, 1, 1, 2, 1, groups=2, cg_padded=128)
    tf32 = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True)
    S = ConvSchedule
    for name, k, geom, s in [
            ("direct (bw 64)", conv_kernel(), g2d, S(bm=128, bn=64, bw=64, stages=2)),
            ("tma bw 8", conv_kernel(), g2d, S(bm=128, bn=64, bw=8, stages=2, epilogue="tma")),
            ("3-d, tma bw 8", conv_kernel(), g3d,
             S(bm=128, bn=64, bw=8, stages=2, epilogue="tma")),
            ("promoted (bf16 -> f32, bias)", conv_kernel(ag.bf16, ag.f32, bias=True), g2d,
             S(bm=128, bn=64, bw=64, stages=2, promote=True)),
            ("cluster 2, direct", conv_kernel(), g2d,
             S(bm=128, bn=64, bw=64, stages=2, cluster_m=2, num_sms=4)),
            ("cluster 2, tma bw 8", conv_kernel(), g2d,
             S(bm=128, bn=64, bw=8, stages=2, epilogue="tma", cluster_m=2, num_sms=4)),
            ("rowbox direct", conv_kernel(), rowbox,
             S(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)),
            ("rowbox tma bw 8, cluster 2", conv_kernel(), rowbox,
             S(bm=128, bn=64, bw=8, stages=2, epilogue="tma", rowbox=True, cluster_m=2,
               num_sms=4)),
            ("rowbox promoted", conv_kernel(ag.bf16, ag.f32, bias=True), rowbox,
             S(bm=128, bn=64, bw=64, stages=2, rowbox=True, promote=True)),
            ("halo direct", conv_kernel(), halo,
             S(bm=128, bn=64, bw=64, stages=2, halo=True, num_sms=2)),
            ("halo tma bw 8, cluster 2", conv_kernel(), halo,
             S(bm=128, bn=64, bw=8, stages=2, epilogue="tma", halo=True, cluster_m=2,
               num_sms=4)),
            ("nchw tf32", tf32, nchw, S(bm=128, bn=64, bk=32, bw=64, stages=2)),
            ("nchw rowbox, cluster 2 (bn 128)", tf32, one,
             S(bm=128, bn=128, bk=32, bw=64, stages=4, cluster_m=2, rowbox=True)),
            ("nchw split (bf16 -> f32)", conv_kernel(ag.bf16, ag.f32, True, nchw=True),
             ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=128),
             S(bm=128, bn=64, bk=64, bw=64, stages=2, promote=True)),
            ("nchw 3-d bf16", conv_kernel(nchw=True), g3d,
             S(bm=128, bn=64, bk=64, bw=64, stages=2)),
            ("nchw tf32, staged (tma) epilogue", tf32, nchw,
             S(bm=128, bn=64, bk=32, bw=64, stages=2, nchw_epilogue="tma")),
            ("nchw rowbox, cluster 2 (bn 128), staged epilogue", tf32, one,
             S(bm=128, bn=128, bk=32, bw=64, stages=4, cluster_m=2, rowbox=True,
               nchw_epilogue="tma")),
            ("nchw tf32, staged epilogue", tf32, nchw,
             S(bm=128, bn=64, bk=32, bw=64, stages=2, nchw_epilogue="staged")),
            # 3-d receptive field (docs/verify.md "Conv receptive field: 3-d"): the direct
            # and bw 32 boxes, and KernelBench level-2's conv3d pick (8 channels, fp32 as tf32:
            # 4 packed taps a step)
            ("3-d direct (bw 64)", conv_kernel(), g3d, S(bm=128, bn=64, bw=64, stages=2)),
            ("3-d, tma bw 32", conv_kernel(), g3d,
             S(bm=128, bn=64, bw=32, stages=2, epilogue="tma")),
            ("3-d packed taps x4 (tf32, C 8)", conv_kernel(ag.f32, ag.f32, precision="tf32"),
             ConvGeometry(3, 3, 1, 1, 0, 0, 1, 1, 1, 8, t=3),
             S(bm=128, bn=16, bk=8, bw=64, stages=6, taps_per_slice=4)),
            # opt-in (ConvSchedule.taps_per_slice; tests/interp/test_conv_packed_taps.py)
            ("packed taps x4 (C 16)", conv_kernel(),
             ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=16),
             S(bm=128, bn=64, bw=64, stages=2, bk=16, taps_per_slice=4))]:
        yield f"conv {name}", k, {"geom": geom, "s": s}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", action="append", default=[],
                    help="time the kernels whose name contains this text (repeatable: any)")
    ap.add_argument("--set", choices=("examples", "library", "conv", "all"),
                    default="examples")
    args = ap.parse_args()
    from argus import verify
    from argus.compiler import lower_only
    from argus.verify import solver

    sets = {"examples": [examples], "library": [library, conv], "conv": [conv],
            "all": [examples, library, conv]}[args.set]
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"median of {args.repeat} runs of verify.run on the lowered kernel\n")
    print("| kernel | median s | min s | CPU s | queries | solved | proven | unknown | "
          "slowest query |")
    print("|---|---|---|---|---|---|---|---|---|")
    total = []
    for make in sets:
        for name, kernel_fn, cx in make():
            if args.only and not any(text in name for text in args.only):
                continue
            k = lower_only(kernel_fn, **cx)
            times, cpu, report = [], [], None
            for _ in range(args.repeat):
                solver.clear_cache()
                t0, c0 = time.perf_counter(), time.process_time()
                report = verify.run(k)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            total.append(statistics.median(times))
            slow = max(report.findings, key=lambda f: f.ms)
            st = report.stats
            print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | "
                  f"{min(cpu):.2f} | {st.queries} | {st.queries - st.cached - st.rewritten}"
                  f"{f' (+{st.derived} derived)' if st.derived else ''} | "
                  f"{len(report.proven)} | {len(report.unknowns)} | "
                  f"{slow.code} {slow.ms:.0f} ms ({slow.tier}) |", flush=True)
    if total:
        print(f"\n{len(total)} kernels, {sum(total):.1f} s in total, "
              f"{sum(t > 1.0 for t in total)} above 1 s; load average now "
              f"{os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
