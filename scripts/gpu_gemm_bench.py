"""GEMM benchmark on the GPU: argus.ops.matmul vs torch.matmul (cuBLAS) in one run.

The sweep of HOPPER.md (x @ W "NN" with W [K, N] row-major, and x @ W.T "NT" with W [N, K])
plus K = 16384 and batched shapes. For each shape: tune (time the candidate schedules, cache
the winner on disk), check the result against a float64 reference on fresh random data, time
ours and cuBLAS (median of 100 trials, L2 flushed), and report TFLOP/s and the ratio; for
M <= 64 also the weight bandwidth against the device copy bandwidth measured in the same run.
Prints a short table last and writes gemm.json / gemm.md under --out.
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

SWEEP = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 28672, 8192),
         (8192, 8192, 28672), (4096, 14336, 4096), (2048, 7168, 2048), (512, 8192, 8192),
         (128, 8192, 8192), (16, 8192, 8192), (4095, 4097, 4096), (8192, 8192, 16384),
         (64, 8192, 8192)]  # the last: a second skinny (M <= 64) shape, not in HOPPER.md's table
BATCHED = [(8, 2048, 2048, 2048), (32, 1024, 1024, 1024)]


def log(msg: str) -> None:
    print(msg, flush=True)


def copy_bandwidth() -> float:
    import torch

    from argus.bench.timing import measure

    src = torch.empty(2 * 1024 ** 3, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), trials=20, warmup=3, allow_few_trials=True)
    return 2 * src.numel() / (t.median_ms * 1e-3)


def bench_case(batch, m, n, k, layout, bw, trials):
    import torch

    from argus.bench.timing import graph_replay_us, measure_alternating
    from argus.ops import matmul, tune_matmul

    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    lead = (batch,) if batch else ()
    a = torch.randn(*lead, m, k, device="cuda", generator=g).bfloat16()
    if layout == "NT":
        w = torch.randn(*lead, n, k, device="cuda", generator=g).bfloat16()
        b = w.transpose(-1, -2)
    else:
        b = torch.randn(*lead, k, n, device="cuda", generator=g).bfloat16()
    out = torch.full((*lead, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tuned = tune_matmul(a, b, out, trials=20, progress=None)
    best, tried = tuned.best, list(tuned.screened)
    out.fill_(float("nan"))
    matmul(a, b, out)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    del ref
    # alternating rounds: drift over a long run falls on ours and cuBLAS alike
    ours, base = measure_alternating([lambda: matmul(a, b, out), lambda: torch.matmul(a, b)],
                                     trials=trials)
    flops = 2 * (batch or 1) * m * n * k
    row = {"batch": batch, "M": m, "N": n, "K": k, "layout": layout, "rel_error": err,
           "ours_ms": ours.median_ms, "cublas_ms": base.median_ms,
           "ours_tflops": flops / ours.median_ms / 1e9,
           "cublas_tflops": flops / base.median_ms / 1e9,
           "ratio": base.median_ms / ours.median_ms, "schedule": repr(best),
           "candidates": [(ms, repr(s)) for ms, s in tried],
           "finalists": [(ms, repr(s)) for ms, s in tuned.finals]}
    if m * (batch or 1) <= 64:
        weight_bytes = n * k * 2
        row["weight_tb_s"] = weight_bytes / (ours.median_ms * 1e-3) / 1e12
        row["weight_bw_fraction"] = row["weight_tb_s"] * 1e12 / bw
        row["cublas_weight_bw_fraction"] = weight_bytes / (base.median_ms * 1e-3) / bw
        # the kernels alone, back to back (CUDA-graph replay): no per-call launch gap
        ours_us = graph_replay_us(lambda: matmul(a, b, out))
        base_us = graph_replay_us(lambda: torch.matmul(a, b))
        row["graph_us"], row["cublas_graph_us"] = ours_us, base_us
        row["graph_bw_fraction"] = weight_bytes / (ours_us * 1e-6) / bw
        row["cublas_graph_bw_fraction"] = weight_bytes / (base_us * 1e-6) / bw
    log(f"{layout} {'%dx' % batch if batch else ''}{m}x{n}x{k}: ours {row['ours_tflops']:.0f} "
        f"TFLOP/s, cuBLAS {row['cublas_tflops']:.0f}, ratio {row['ratio']:.2f}, err {err:.1e}, "
        f"{best}")
    for ms, s in sorted(tried, key=lambda r: r[0]):  # what tuning saw, fastest first
        log(f"    {ms * 1e3:8.1f} us  {s}")
    return row


def sass_report(rows) -> dict:
    from argus.kernels.gemm import GemmSchedule
    from argus.ops.schedules import Problem, kernel_for
    from argus.runtime.sass import disassemble, instruction_histogram

    report = {}
    kinds = {("nk" if r["layout"] == "NT" else "kn", r.get("batch") or 1, r["schedule"])
             for r in rows}
    for layout, batch, sched in sorted(kinds):
        s = eval(sched, {"GemmSchedule": GemmSchedule})  # noqa: S307 - our own repr
        kernel, s = kernel_for(Problem(1, 1, 1, batch, "bf16", "bf16", layout, True), s)
        ck = kernel.compile(s=s)
        sass = disassemble(ck.binary.cubin) or ""
        hist = instruction_histogram(sass) if sass else {}
        res = ck.resources
        report[f"{layout} {'batched ' if batch > 1 else ''}{sched}"] = {
            "HGMMA": sum(v for k, v in hist.items() if k.startswith("HGMMA")),
            "HMMA": sum(v for k, v in hist.items() if k.startswith("HMMA")),
            "spill_bytes": res.spill_stores + res.spill_loads, "registers": res.registers}
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", default="",
                        help="only these MxNxK shapes (comma-separated), e.g. 16x8192x8192")
    parser.add_argument("--no-batched", action="store_true")
    parser.add_argument("--batched", action="store_true",
                        help="with --shapes: run the batched shapes too")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    started = time.time()
    bw = copy_bandwidth()
    log(f"{torch.cuda.get_device_name()} torch {torch.__version__}: device copy {bw / 1e12:.2f} "
        f"TB/s (read + write)")
    rows = []
    sweep = SWEEP[:3] if args.quick else SWEEP
    if args.shapes:
        sweep = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    def keep_partial():  # a run cut short by a time limit still leaves what it measured
        (args.out / "gemm.partial.json").write_text(json.dumps(rows, indent=1, default=str))

    for (m, n, k) in sweep:
        for layout in ("NN", "NT"):
            try:
                rows.append(bench_case(0, m, n, k, layout, bw, args.trials))
            except Exception as e:  # noqa: BLE001 - record and continue
                log(f"{layout} {m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
                rows.append({"M": m, "N": n, "K": k, "layout": layout, "error": repr(e)})
            keep_partial()
    for (batch, m, n, k) in ([] if args.quick or args.no_batched or (args.shapes and not args.batched)
                                else BATCHED):
        for layout in ("NN", "NT"):
            try:
                rows.append(bench_case(batch, m, n, k, layout, bw, args.trials))
            except Exception as e:  # noqa: BLE001
                log(f"batched {layout} {batch}x{m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
                rows.append({"batch": batch, "M": m, "N": n, "K": k, "layout": layout,
                             "error": repr(e)})
            keep_partial()
    ok = [r for r in rows if "ratio" in r]
    geo = math.exp(sum(math.log(r["ratio"]) for r in ok) / len(ok)) if ok else float("nan")
    sass = sass_report(ok)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("ARGUS_COMMIT", "unknown"),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "copy_bandwidth_bytes_per_s": bw, "rows": rows, "geomean_ratio": geo,
              "min_ratio": min((r["ratio"] for r in ok), default=float("nan")), "sass": sass,
              "wall_s": time.time() - started}
    (args.out / "gemm.json").write_text(json.dumps(result, indent=1, default=str))
    lines = ["| shape (batch x) M x N x K | layout | Argus TFLOP/s | cuBLAS TFLOP/s | ratio | "
             "rel err | weight BW (M<=64) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = f"{str(r['batch']) + 'x' if r.get('batch') else ''}{r['M']}x{r['N']}x{r['K']}"
        if "ratio" not in r:
            lines.append(f"| {shape} | {r['layout']} | failed | | | | |")
            continue
        bwtxt = (f"{r['weight_bw_fraction']:.0%} (cuBLAS {r['cublas_weight_bw_fraction']:.0%}); "
                 f"graph replay {r['graph_bw_fraction']:.0%} (cuBLAS "
                 f"{r['cublas_graph_bw_fraction']:.0%})" if "weight_bw_fraction" in r else "")
        lines.append(f"| {shape} | {r['layout']} | {r['ours_tflops']:.0f} | "
                     f"{r['cublas_tflops']:.0f} | {r['ratio']:.2f} | {r['rel_error']:.1e} | "
                     f"{bwtxt} |")
    lines.append(f"\ngeomean ratio {geo:.3f}, min ratio {result['min_ratio']:.2f}; copy BW "
                 f"{bw / 1e12:.2f} TB/s; wall {result['wall_s']:.0f} s")
    lines.append("SASS: " + "; ".join(f"{k}: HGMMA {v['HGMMA']}, HMMA {v['HMMA']}, spills "
                                      f"{v['spill_bytes']}" for k, v in sass.items()))
    text = "\n".join(lines)
    (args.out / "gemm.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
