"""Ping-pong vs cooperative GEMM schedules vs cuBLAS on chosen shapes (H200), without the
whole tuning sweep of scripts/gpu_gemm_bench.py: each listed schedule and torch.matmul are
timed in alternating rounds (CUDA events, L2 flushed), medians printed as TFLOP/s and the
ratio to cuBLAS; with --sass, each ping-pong kernel's HGMMA count and spills.

    python3 scripts/gpu_gemm_pingpong.py --shapes 2048x7168x2048,512x8192x8192 [--sass]

--tail-splits 1,2,4 runs every listed schedule once per value of GemmSchedule.tail_splits (the
last partial wave in K slices; 1: as listed), e.g. the cooperative 128x256 schedule with and
without them:

    python3 scripts/gpu_gemm_pingpong.py --shapes 2048x7168x2048,4096x14336x4096 \
        --schedules "GemmSchedule(stages=4, epilogue='tma', cluster_m=2, store_cols=128)" \
        --tail-splits 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import time

COOPERATIVE = ["GemmSchedule(stages=4, epilogue='tma', cluster_m=2, store_cols=128)",
               "GemmSchedule(bn=128, stages=6, epilogue='tma', cluster_m=2)",
               "GemmSchedule(bn=224, stages=4, epilogue='tma', cluster_m=2, store_cols=192)"]
PINGPONG = ["GemmSchedule(bm=128, bn=128, stages=6, pingpong=True)",
            "GemmSchedule(bm=64, bn=256, stages=5, pingpong=True)",
            "GemmSchedule(bm=64, bn=256, stages=4, pingpong=True, group_m=16)"]


def main() -> int:
    import torch

    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul
    from argus.runtime.timing import measure_alternating

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="2048x7168x2048")
    ap.add_argument("--layouts", default="NN,NT")
    ap.add_argument("--schedules", default="all",
                    help="all, pingpong, cooperative, or GemmSchedule(...) texts split by ';'")
    ap.add_argument("--tail-splits", default="1",
                    help="comma-separated GemmSchedule.tail_splits values applied to every "
                         "schedule (1: the schedule as listed)")
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if args.schedules.startswith("GemmSchedule"):
        names = [t.strip() for t in args.schedules.split(";") if t.strip()]
    else:
        names = (PINGPONG if args.schedules != "cooperative" else []) + \
            (COOPERATIVE if args.schedules != "pingpong" else [])
    splits = [int(x) for x in args.tail_splits.split(",")]
    names = [t if n == 1 else t[:-1] + f", tail_splits={n})" for t in names for n in splits]
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        for layout in args.layouts.split(","):
            a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
            b = w.T if layout == "NT" else w.T.contiguous()  # NT: x @ W.T, NN: x @ W
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = a.double() @ b.double()
            for text in names:
                s = eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - our own list
                try:
                    out.fill_(float("nan"))
                    matmul(a, b, out, schedule=s)
                    err = ((out.double() - ref).norm() / ref.norm()).item()
                    ours, base = measure_alternating([lambda: matmul(a, b, out, schedule=s),
                                                      lambda: torch.matmul(a, b)], rounds=3)
                except Exception as e:  # noqa: BLE001 - record and go on
                    print(f"{layout} {shape} {text}: FAILED {type(e).__name__}: {e}", flush=True)
                    continue
                flop = 2 * m * n * k
                row = {"shape": shape, "layout": layout, "schedule": text, "rel_err": err,
                       "ours_ms": ours.median_ms, "cublas_ms": base.median_ms,
                       "ours_tflops": flop / ours.median_ms / 1e9,
                       "cublas_tflops": flop / base.median_ms / 1e9,
                       "ratio": base.median_ms / ours.median_ms}
                rows.append(row)
                print(f"{layout} {shape:>16} {text:70} {row['ours_tflops']:6.0f} vs "
                      f"{row['cublas_tflops']:6.0f} TFLOP/s  {row['ratio']:.3f}x  "
                      f"err {err:.1e}", flush=True)
    if args.sass:
        from argus.kernels.gemm import gemm_kernel
        from argus.runtime.sass import disassemble, instruction_histogram
        for text in [t for t in names if "pingpong=True" in t]:
            s = eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307
            ck = gemm_kernel().compile(s=s)
            hist = instruction_histogram(disassemble(ck.binary.cubin) or "")
            res = ck.resources
            print(f"SASS {text}: HGMMA {sum(v for x, v in hist.items() if x.startswith('HGMMA'))}"
                  f", registers {res.registers}, spills {res.spill_stores + res.spill_loads}",
                  flush=True)
    with open(os.path.join(args.out, "pingpong.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
