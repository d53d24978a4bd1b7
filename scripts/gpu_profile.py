"""One case's kernels, ours beside the baseline's, under Nsight Compute's hardware counters:
where the time goes inside a kernel (DRAM and L2 throughput, tensor-pipe use, why warps
stall), which timing alone cannot say. Each case first runs every call once outside the
profiled range (NVRTC builds, cuDNN plans, cuBLAS heuristics), then runs each call once
between cudaProfilerStart and Stop, so ncu (--profile-from-start off) sees only those
launches. ncu flushes the caches before each profiled kernel (its default cache control).

    ncu --clock-control none --profile-from-start off --csv --page raw \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy --section LaunchStats \
        python3 scripts/gpu_profile.py --case decode32 > decode32.csv
    python3 scripts/gpu_profile.py --summarize decode32.csv

Cases (bf16): decode32 / decode1 (argus.ops.attention decode, GQA 32:8, hd128, one token,
batch 32 x 8k keys / batch 1 x 32k keys, against torch SDPA's cuDNN backend), gemm4096
(argus.ops.matmul's 128x128 ping-pong TMA-store schedule and its cooperative 128x256
default against torch.matmul, 4096^3), prefill2k / prefill8k (argus.ops.attention's default
schedule, hd128, 16 heads, 16k tokens: batch 8 x 2048 / 2 x 8192, no mask, against cuDNN),
prefill64_4k (the same at hd64, 32 heads, batch 4 x 4096), fp8prefill8k (prefill8k plus
argus.ops.attention_fp8 on the e4m3 copies, V given transposed), moefp8 (argus.ops.moe's fp8
block-scaled layer at DeepSeek-V3 T = 16384, every kernel of the layer; beside it
argus.ops.scaled_matmul's dense block-scaled GEMM at the gate-up's and the down's shapes
(M = the routed rows: does the grouped walk lose to the dense one?; torch._scaled_mm at those
shapes is scripts/gpu_baseline_kernels.py's); profile only the GEMMs with ncu's --kernel-name
regex:"fp8|gemm|scaled"). The xu% / fma% / alu%
columns are the MUFU (exp2), FMA and ALU pipes' busy shares: the softmax's pipes.
--summarize prints one line per kernel: duration,
DRAM and L2 throughput, tensor-pipe use, issue slots, and the top stall reasons.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

# metric (ncu raw name) -> short label for --summarize; stall reasons are found by prefix
SUMMARY = [
    ("gpu__time_duration.sum", "us"),
    ("dram__cycles_active.avg.pct_of_peak_sustained_elapsed", "dram%"),
    ("dram__bytes.sum.per_second", "dram B/s"),
    ("lts__t_sectors.avg.pct_of_peak_sustained_elapsed", "l2sectors%"),
    ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "l2%"),
    ("lts__t_sector_hit_rate.pct", "l2hit%"),
    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "tensor%"),
    ("inst_executed", "inst"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm%"),
    ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue%"),
    ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", "xu%"),
    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "fma%"),
    ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active", "alu%"),
    ("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active", "lsu%"),
    ("sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active", "uniform%"),
    ("launch__registers_per_thread", "regs"),
    ("launch__grid_size", "grid"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "occ%"),
]
STALL_PREFIX = "smsp__average_warp_latency_issue_stalled_"
STALL_PREFIX2 = "smsp__average_warps_issue_stalled_"


def run_case(case: str) -> None:
    import torch

    import argus.ops

    torch.manual_seed(0)
    calls = []
    if case.startswith("decode"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        B, SK = (32, 8192) if case == "decode32" else (1, 32768)
        H, HKV, D = 32, 8, 128
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, HKV, SK, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, HKV, SK, D, device="cuda", dtype=torch.bfloat16)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                        enable_gqa=True)
        calls = [("ours", lambda: argus.ops.attention(q, k, v)), ("cudnn", cudnn)]
    elif case.startswith(("prefill", "fp8prefill")):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        S, D = {"prefill2k": (2048, 128), "prefill8k": (8192, 128), "prefill64_4k": (4096, 64),
                "fp8prefill8k": (8192, 128)}[case]
        B, H = 16384 // S, 16 * 128 // D
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        calls = [("ours", lambda: argus.ops.attention(q, k, v)), ("cudnn", cudnn)]
        if case.startswith("fp8"):
            from argus.ops.attention_fp8 import transposed_v

            def quant(x):
                s = x.abs().amax().float().item() / 448.0
                return (x.float() / s).to(torch.float8_e4m3fn), s
            (q8, qs), (k8, ks), (v8, vs) = quant(q), quant(k), quant(v)
            vt8 = transposed_v(v8, "bhsd", False)
            calls.insert(0, ("fp8", lambda: argus.ops.attention_fp8(
                q8, k8, vt8, q_scale=qs, k_scale=ks, v_scale=vs, v_transposed=True)))
    elif case == "gemm4096":
        from argus.kernels.gemm import GemmSchedule

        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
        pp = GemmSchedule(bm=128, bn=128, stages=6, pingpong=True, epilogue="tma",
                          store_cols=64)
        coop = GemmSchedule(stages=4, epilogue="tma", cluster_m=2, store_cols=128)
        calls = [("pingpong", lambda: argus.ops.matmul(a, b, out, schedule=pp)),
                 ("coop", lambda: argus.ops.matmul(a, b, out, schedule=coop)),
                 ("cublas", lambda: torch.matmul(a, b))]
    elif case == "moefp8":
        calls = moe_fp8_calls()
    else:
        raise SystemExit(f"unknown case {case!r}")
    for _, fn in calls:          # builds, plans and heuristics outside the profiled range
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in calls:
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()
    print(f"# {case}: profiled " + ", ".join(n for n, _ in calls), file=sys.stderr)


def moe_fp8_calls() -> list:
    """DeepSeek-V3's fp8 MoE layer at T = 16384 (the bench's weights and routing), and the
    dense block-scaled GEMMs of the same M, N, K as its two grouped GEMMs."""
    import torch

    import argus.ops
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_moe_bench import MODELS, fp8_weights

    E, k, H, I, routing = MODELS["deepseek-v3"]
    _, groups, topk_groups, rscale = routing
    T = 16384
    g = torch.Generator(device="cuda").manual_seed(16)
    w13, s13, w2, s2, d13, d2 = fp8_weights(E, H, I, g)
    del d13, d2
    bias = torch.randn(E, generator=g, device="cuda") * 0.1
    x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
    logits = torch.randn(T, E, generator=g, device="cuda")

    # MOE_FP8_VARIANT: one of gpu_moe_bench.fp8_variants() instead of the default schedule
    variant = os.environ.get("MOE_FP8_VARIANT")
    schedule = None
    if variant:
        from gpu_moe_bench import fp8_variants
        schedule = fp8_variants()[variant]

    def layer():
        return argus.ops.moe(x, w13, w2, logits, k, scoring="sigmoid", schedule=schedule,
                             e_score_correction_bias=bias, num_expert_group=groups,
                             topk_group=topk_groups, routed_scaling_factor=rscale,
                             w13_scale=s13, w2_scale=s2)
    calls = [("moe-fp8", layer)]
    rows = T * k
    for label, (n, kk) in {"gate-up": (2 * I, H), "down": (H, I)}.items():
        a = (torch.randn(rows, kk, device="cuda") / 4).to(torch.float8_e4m3fn)
        b = (torch.randn(n, kk, device="cuda") / 4).to(torch.float8_e4m3fn)
        sa = torch.rand(rows, kk // 128, device="cuda") + 0.5
        sb = torch.rand(n // 128, kk // 128, device="cuda") + 0.5
        out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
        calls.append((f"dense-{label}", lambda a=a, b=b, sa=sa, sb=sb, out=out:
                      argus.ops.scaled_matmul(a, b, sa, sb, out=out)))
    return calls


def summarize(path: str) -> None:
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        print(f"{path}: no kernel rows")
        return
    head, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(head)}
    for r in data:
        name = r[col.get("Kernel Name", 0)][:60]
        parts = []
        for metric, label in SUMMARY:
            if metric in col and r[col[metric]] not in ("", "n/a"):
                value = r[col[metric]].replace(",", "")
                unit = units[col[metric]]
                if metric == "gpu__time_duration.sum":
                    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0,
                             "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
                    value = f"{float(value) * scale:.1f}"
                parts.append(f"{label}={value}")
        stalls = []
        for i, metric in enumerate(head):
            if metric.startswith((STALL_PREFIX, STALL_PREFIX2)) and metric.endswith(".ratio") \
                    and r[i] not in ("", "n/a"):
                try:
                    stalls.append((float(r[i].replace(",", "")),
                                   metric.split("stalled_")[1].split("_per")[0]))
                except ValueError:
                    pass
        stalls.sort(reverse=True)
        parts.append("stalls " + " ".join(f"{n}={v:.2f}" for v, n in stalls[:6]))
        print(f"{name:60s} " + " ".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["decode32", "decode1", "gemm4096", "prefill2k",
                                           "prefill8k", "prefill64_4k", "fp8prefill8k",
                                           "moefp8"])
    parser.add_argument("--summarize", metavar="CSV")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
    elif args.case:
        run_case(args.case)
    else:
        parser.error("give --case or --summarize")
    return 0


if __name__ == "__main__":
    sys.exit(main())
