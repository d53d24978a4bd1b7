#!/usr/bin/env python3
"""The fp8 MoE path's activation quantization against the copy ceiling and torch (device run).

Run from the repository root on a Hopper GPU:

    python3 -u scripts/gpu_fp8_quant_bench.py [--out "$OUT"]

For bf16 x [M, K] (DeepSeek-V3's K = 7168; M = 16, 1024, 4096, 16384) it times, in one process:
  - copy: torch `y.copy_(x)` of the same bf16 tensor (the bandwidth ceiling of this run);
  - ours 32 / ours 128: argus/kernels/moe_fp8.py quantize_1x128 at one warp a CTA (the default,
    argus.ops.quantize_fp8) and at 128 threads;
  - torch: DeepGEMM's eager per-token-group cast (amax per 128 columns, x * (448 / amax), e4m3).
Bytes moved: M K x 2 (read) + M K (e4m3 written) + M K / 128 x 4 (scales). Timing:
argus.runtime.timing.measure (CUDA events, L2 flushed before every trial, median of >= 100).
Correctness first: every Argus variant's e4m3 bytes and scales against
argus.ops.quantize_fp8.reference (the kernels' rounding: correctly rounded f32 divisions), bit
for bit (a mismatch prints MISMATCH and skips that variant's timing).

Prints one row per (M, variant): ms, GB/s, % of copy bandwidth. With --out, writes
fp8_quant_bench.json. No numbers in the repository come from this script until it is run.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argus as ag  # noqa: E402
from argus.kernels.moe_fp8 import (AMAX_FLOOR, E4M3_MAX, GROUP,  # noqa: E402
                                   quantize_1x128_kernel)
from argus.ops.quantize_fp8 import reference  # noqa: E402
from argus.runtime.timing import measure  # noqa: E402

E4M3 = torch.float8_e4m3fn


def torch_quantize(x: torch.Tensor):
    """The timed torch baseline: DeepGEMM's per_token_cast_to_fp8 in f32 eager ops (its last
    bits differ from ours: on CUDA torch divides by a Python number as a reciprocal product)."""
    xt = x.float().view(x.shape[0], -1, GROUP)
    amax = xt.abs().amax(dim=2).clamp(min=AMAX_FLOOR)
    q = (xt * (E4M3_MAX / amax.unsqueeze(2))).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.view(x.shape), (amax / E4M3_MAX).t()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--k", type=int, default=7168)
    ap.add_argument("--rows", type=int, nargs="*", default=[16, 1024, 4096, 16384])
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()
    k = args.k
    results = []
    print(f"{torch.cuda.get_device_name()}, K = {k}, bf16 in, e4m3 + f32 scales out")
    print(f"{'M':>6} {'variant':>10} {'ms':>9} {'GB/s':>8} {'% copy':>7}")
    for m in args.rows:
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        moved = m * k * 2 + m * k + m * (k // GROUP) * 4
        y = torch.empty_like(x)
        copy = measure(lambda: y.copy_(x), trials=args.trials)
        copy_bw = 2 * m * k * 2 / copy.median_ms / 1e6
        rows = [("copy", copy.median_ms, 2 * m * k * 2)]
        q_ref, s_ref = reference(x)           # the kernels' rounding, bit for bit
        q_ref, s_ref = q_ref.view(m, k), s_ref.t()
        for threads in (32, 128):
            kernel = quantize_1x128_kernel(ag.bf16, 4, threads)
            xq = torch.empty(m, k // GROUP, GROUP, device="cuda", dtype=E4M3)
            scale_t = torch.empty(k // GROUP, (m + 3) // 4 * 4, device="cuda")
            x3 = x.view(m, -1, GROUP)
            kernel(x3, xq, scale_t)
            torch.cuda.synchronize()
            bad_q = int((xq.view(m, k).view(torch.uint8) != q_ref.view(torch.uint8)).sum())
            bad_s = int((scale_t[:, :m] != s_ref).sum())
            if bad_q or bad_s:
                print(f"{m:>6} {'ours ' + str(threads):>10} MISMATCH against the reference: "
                      f"{bad_q} e4m3 bytes and {bad_s} scales differ")
                continue
            t = measure(lambda: kernel(x3, xq, scale_t), trials=args.trials)
            rows.append((f"ours {threads}", t.median_ms, moved))
        t = measure(lambda: torch_quantize(x), trials=args.trials)
        rows.append(("torch", t.median_ms, moved))
        for name, ms, nbytes in rows:
            bw = nbytes / ms / 1e6
            print(f"{m:>6} {name:>10} {ms:>9.4f} {bw:>8.1f} {100 * bw / copy_bw:>6.1f}%")
            results.append({"m": m, "k": k, "variant": name, "ms": ms, "gb_s": bw,
                            "copy_gb_s": copy_bw})
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fp8_quant_bench.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
