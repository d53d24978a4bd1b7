"""Which kernels the baselines run, and how long each takes: cuBLAS for bf16 GEMMs
(torch.matmul, x @ W.T and x @ W) and torch._scaled_mm for fp8 (per-tensor and 1x128 / 128x128
block scales). cuBLAS's kernel names carry its tile, cluster and stage choices
(e.g. ..._tilesize128x256x64_cluster2x1x1_...), which tell what a shape where it beats us
needs. One profiled call each (torch.profiler, CUDA activity), after a warm-up call.

    python3 scripts/gpu_baseline_kernels.py --gemm 2048x7168x2048,2048x5120x27648 \
        --fp8 4096x7168x2048,4096x2112x7168
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def kernels(fn) -> list[tuple[str, float]]:
    """(kernel name, device us) of one call of fn, after one unprofiled call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name, e.device_time) for e in prof.events()
            if e.device_type.name == "CUDA" and e.device_time > 0]


def shapes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemm", default="", help="MxNxK,... bf16 (NT = x @ W.T, NN = x @ W)")
    ap.add_argument("--fp8", default="", help="MxNxK,... fp8 per-tensor and block-scaled")
    args = ap.parse_args()
    rows = []
    for m, n, k in shapes(args.gemm):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        wt = w.t().contiguous()
        rows.append((f"bf16 NT {m}x{n}x{k}", m * n * k, kernels(lambda: x @ w.t())))
        rows.append((f"bf16 NN {m}x{n}x{k}", m * n * k, kernels(lambda: x @ wt)))
    if args.fp8:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gpu_fp8_bench import quantize_blocks
    for m, n, k in shapes(args.fp8):
        x = torch.randn(m, k, device="cuda") * 3.0
        w = torch.randn(n, k, device="cuda") * 0.05
        a, w8, sa, sb = quantize_blocks(x, w)
        one = torch.ones((), device="cuda")
        rows.append((f"fp8 tensor {m}x{n}x{k}", m * n * k, kernels(
            lambda: torch._scaled_mm(a, w8.t(), scale_a=one, scale_b=one,
                                     out_dtype=torch.bfloat16))))
        try:
            rows.append((f"fp8 block {m}x{n}x{k}", m * n * k, kernels(
                lambda: torch._scaled_mm(a, w8.t(), scale_a=sa, scale_b=sb.t(),
                                         out_dtype=torch.bfloat16))))
        except Exception as e:  # noqa: BLE001 - this torch may lack the block mode
            print(f"fp8 block {m}x{n}x{k}: {type(e).__name__}: {str(e)[:200]}")
    for label, mnk, ks in rows:
        for name, us in ks:
            print(f"{label:28s} {us:9.1f} us {2 * mnk / us / 1e6:7.1f} TFLOP/s  {name[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
