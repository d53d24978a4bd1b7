"""Static walk vs dynamic walk vs one CTA a tile (docs/design/dynamic_scheduler.md) on the dense
bf16 GEMM, with cuBLAS as the yardstick, all in the same alternated rounds.

For each shape, layout and base schedule: the variants `walk` (the schedule as given, the
static persistent walk), `dynamic` (scheduler="dynamic": CTAs draw units from a work counter)
and `grid` (persistent=False: one CTA a tile, the hardware hands tiles out in launch order),
each first checked against float64 (a WRONG line, and no timing, if not within 1e-2), then
timed with torch.matmul in alternating rounds (argus.runtime.timing.measure_alternating, CUDA
events, L2 flushed between calls), medians printed as TFLOP/s and the ratio to the static
walk; then per variant the geomean of that ratio. JSON in $OUT/gemm_dynamic.json.

    python3 -u scripts/gpu_gemm_dynamic.py
    python3 -u scripts/gpu_gemm_dynamic.py --shapes 4096x4096x4096 --layouts NT \
        --schedules "GemmSchedule(bn=128, stages=6)"

The L2 question behind it (docs/perf/moe.md: the walk's CTAs drift apart) is ncu's: e.g.
`ncu --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum` on one call of each variant
(scripts/gpu_ncu_gemm.py profiles one schedule).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the dense shapes of docs/perf/gemm.md's sweeps and LLM projections; K deep and shallow
SHAPES = "4096x4096x4096,8192x8192x8192,2048x7168x2048,4096x14336x4096,8192x28672x4096," \
         "16384x8192x8192,512x8192x8192,3000x5000x2000"
# the cooperative library tiles without clusters (the dynamic prototype runs cluster_m = 1)
SCHEDULES = ["GemmSchedule(stages=4, epilogue='tma', store_cols=128)",
             "GemmSchedule(bn=128, stages=6, epilogue='tma')",
             "GemmSchedule(stages=4)"]
VARIANTS = {"walk": {}, "dynamic": {"scheduler": "dynamic"}, "grid": {"persistent": False}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--layouts", default="NT,NN", help="NT: x @ W.T (W [N, K]); NN: x @ W")
    ap.add_argument("--schedules", default=";".join(SCHEDULES),
                    help="GemmSchedule(...) texts split by ';'")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()

    import dataclasses

    import torch

    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul
    from argus.runtime.timing import measure_alternating

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        for layout in args.layouts.split(","):
            a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
            b = w.T if layout == "NT" else w.T.contiguous()
            ref = a.double() @ b.double()
            outs = {}
            for text in [t.strip() for t in args.schedules.split(";") if t.strip()]:
                base = eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - our list
                fns, names = [], []
                for v in variants:
                    s = dataclasses.replace(base, **VARIANTS[v])
                    out = outs.setdefault(v, torch.empty(m, n, device="cuda",
                                                         dtype=torch.bfloat16))
                    try:
                        out.fill_(float("nan"))
                        matmul(a, b, out, schedule=s)
                        err = ((out.double() - ref).norm() / ref.norm()).item()
                    except Exception as e:  # noqa: BLE001 - record and go on
                        print(f"{layout} {shape} {v} {text}: FAILED {type(e).__name__}: {e}",
                              flush=True)
                        continue
                    if not err < 1e-2:
                        print(f"{layout} {shape} {v} {text}: WRONG err {err:.2e}", flush=True)
                        continue
                    fns.append(lambda s=s, out=out: matmul(a, b, out, schedule=s))
                    names.append(v)
                fns.append(lambda: torch.matmul(a, b))
                timings = measure_alternating(fns, rounds=args.rounds)
                flop = 2 * m * n * k
                ms = {v: t.median_ms for v, t in zip(names + ["cublas"], timings)}
                walk_ms = ms.get("walk")
                for v in names + ["cublas"]:
                    row = {"shape": shape, "layout": layout, "schedule": text, "variant": v,
                           "ms": ms[v], "tflops": flop / ms[v] / 1e9,
                           "vs_walk": walk_ms / ms[v] if walk_ms else None}
                    rows.append(row)
                    print(f"{layout} {shape:>17} {text:58} {v:8} {row['tflops']:6.0f} TFLOP/s"
                          + (f"  {row['vs_walk']:.3f}x walk" if walk_ms else ""), flush=True)
            del a, w, b, ref, outs
            torch.cuda.empty_cache()
    for v in variants + ["cublas"]:
        ratios = [r["vs_walk"] for r in rows if r["variant"] == v and r["vs_walk"]]
        if ratios:
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"{v:8} vs walk: geomean {geo:.3f}, min {min(ratios):.3f}, "
                  f"max {max(ratios):.3f} over {len(ratios)} cases", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemm_dynamic.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
