"""The untuned matmul path on the GPU: what a user gets on the first call of a shape nobody tuned
(issue 18 item 1), against cuBLAS in the same process.

For each shape, with an empty tuning cache (a fresh $ARGUS_CACHE_DIR): the first
`argus.ops.matmul` call's wall time and how many kernels it compiled (the model's choice is one
kernel), its error against float64, then ours (untuned: argus/ops/gemm_model.py's pick) and
torch.matmul timed in alternating rounds (argus.runtime.timing.measure_alternating, L2
flushed). The shapes are the GEMM sweep of docs/perf/gemm.md plus held-out LLM projections the
model was not fitted on (Llama-3-8B, Qwen2-7B, the issue's 3000x5000x2000 x @ W). Prints a
markdown table, the geomean and the lowest ratio (bar: geomean >= 0.97, none below 0.90).

`--record FILE`: also time every tuning candidate of each shape (20 calls each) and write the
rows in argus/ops/gemm_model_data.json's format, so the model can be refitted on them
(argus.ops.gemm_model.fit) and its pick compared with the measured best (printed per shape).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SWEEP = [(1, 4096, 4096, 4096), (1, 8192, 8192, 8192), (1, 16384, 8192, 8192),
         (1, 8192, 28672, 8192), (1, 8192, 8192, 28672), (1, 4096, 14336, 4096),
         (1, 2048, 7168, 2048), (1, 512, 8192, 8192), (1, 8192, 8192, 16384),
         (8, 2048, 2048, 2048), (32, 1024, 1024, 1024)]
# not in the fit (argus/ops/gemm_model_data.json) but 4096^3, a sweep shape kept to compare
# with earlier runs: LLM projections x @ W.T, and the issue's
HELD_OUT = [(1, 2048, 6144, 4096), (1, 4096, 4096, 4096), (1, 8192, 28672, 4096),
            (1, 8192, 4096, 14336), (1, 4096, 37888, 3584), (1, 4096, 3584, 18944),
            (1, 3000, 5000, 2000), (1, 1000, 1500, 4096), (1, 2048, 1024, 4096)]


def log(msg: str) -> None:
    print(msg, flush=True)


def _operands(batch, m, n, k, layout):
    import torch

    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    lead = (batch,) if batch > 1 else ()
    a = torch.randn(*lead, m, k, device="cuda", generator=g).bfloat16()
    if layout == "NT":
        b = torch.randn(*lead, n, k, device="cuda", generator=g).bfloat16().transpose(-1, -2)
    else:
        b = torch.randn(*lead, k, n, device="cuda", generator=g).bfloat16()
    return a, b


def bench_case(batch, m, n, k, layout, trials, record):
    import torch

    import argus as ag
    from argus.ops import matmul
    from argus.ops.matmul import problem_of
    from argus.ops.schedules import candidates, untuned
    from argus.runtime.timing import measure, measure_alternating

    a, b = _operands(batch, m, n, k, layout)
    out = torch.full((*a.shape[:-1], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    compiles = []
    original = ag.KernelFunction.compile

    def counting(self, *args, **kwargs):
        compiles.append(self.name)
        return original(self, *args, **kwargs)

    ag.KernelFunction.compile = counting
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        matmul(a, b, out)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
    finally:
        ag.KernelFunction.compile = original
    problem, _ = problem_of(a, b, out)
    chosen = untuned(problem)
    ref = a.double() @ b.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    del ref
    ours, base = measure_alternating([lambda: matmul(a, b, out), lambda: torch.matmul(a, b)],
                                     trials=trials)
    flops = 2 * batch * m * n * k
    row = {"batch": batch, "M": m, "N": n, "K": k, "layout": layout, "rel_error": err,
           "first_call_s": first_s, "kernels_compiled": len(compiles),
           "ours_ms": ours.median_ms, "cublas_ms": base.median_ms,
           "ratio": base.median_ms / ours.median_ms, "schedule": repr(chosen)}
    log(f"{layout} {batch}x{m}x{n}x{k}: untuned {flops / ours.median_ms / 1e9:.0f} TFLOP/s, "
        f"cuBLAS {flops / base.median_ms / 1e9:.0f}, ratio {row['ratio']:.3f}, err {err:.1e}, "
        f"first call {first_s:.2f} s, {len(compiles)} kernel(s) compiled, {chosen}")
    if record:
        points = []
        for s in candidates(problem):
            if s.split_k > 1:
                continue
            try:
                t = measure(lambda s=s: matmul(a, b, out, schedule=s), trials=20, warmup=5,
                            allow_few_trials=True)
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run is reported
                log(f"    failed {s}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                continue
            points.append({"batch": batch, "m": m, "n": n, "k": k,
                           "b_layout": "kn" if layout == "NN" else "nk",
                           "schedule": dataclasses.asdict(s), "us": t.median_ms * 1e3,
                           "commit": os.environ.get("ARGUS_COMMIT", "unknown"),
                           "source": f"scripts/gpu_gemm_untuned.py --record, "
                                     f"{torch.cuda.get_device_name()}"})
        best = min(points, key=lambda p: p["us"])
        picked = next((p for p in points if p["schedule"] == dataclasses.asdict(chosen)), None)
        row["candidates_us"] = [(p["us"], repr(p["schedule"])) for p in points]
        if picked:
            row["pick_over_best"] = picked["us"] / best["us"]
            log(f"    model's pick {picked['us']:.1f} us, measured best {best['us']:.1f} us "
                f"({row['pick_over_best']:.3f}x)")
        row["points"] = points
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--layouts", default="NT,NN")
    parser.add_argument("--shapes", default="", help="BxMxNxK or MxNxK, comma-separated")
    parser.add_argument("--record", type=Path, default=None,
                        help="also time every candidate; write model data rows here")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # an empty tuning cache: every call below takes the untuned path
    os.environ["ARGUS_CACHE_DIR"] = tempfile.mkdtemp(prefix="argus-untuned-")
    import torch

    started = time.time()
    log(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    shapes = [(s, "sweep") for s in SWEEP] + [(s, "held-out") for s in HELD_OUT]
    if args.shapes:
        shapes = []
        for text in args.shapes.split(","):
            dims = tuple(int(x) for x in text.split("x"))
            shapes.append(((1, *dims) if len(dims) == 3 else dims, "given"))
    rows = []
    for (batch, m, n, k), kind in shapes:
        for layout in args.layouts.split(","):
            try:
                row = bench_case(batch, m, n, k, layout, args.trials, args.record is not None)
                row["set"] = kind
                rows.append(row)
            except Exception as e:  # noqa: BLE001 - record and continue
                log(f"{layout} {batch}x{m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
                rows.append({"batch": batch, "M": m, "N": n, "K": k, "layout": layout,
                             "error": repr(e), "set": kind})
            torch.cuda.empty_cache()
    ok = [r for r in rows if "ratio" in r]
    lines = ["| set | (batch x) M x N x K | layout | untuned / cuBLAS | first call s | kernels "
             "compiled | rel err | schedule |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = f"{r['batch']}x{r['M']}x{r['N']}x{r['K']}"
        if "ratio" not in r:
            lines.append(f"| {r['set']} | {shape} | {r['layout']} | failed | | | | |")
            continue
        lines.append(f"| {r['set']} | {shape} | {r['layout']} | {r['ratio']:.3f} | "
                     f"{r['first_call_s']:.2f} | {r['kernels_compiled']} | {r['rel_error']:.1e} "
                     f"| `{r['schedule'].replace('GemmSchedule', '')}` |")
    for kind in ("sweep", "held-out", "given"):
        sub = [r["ratio"] for r in ok if r["set"] == kind]
        if sub:
            lines.append(f"\n{kind}: geomean {math.exp(sum(map(math.log, sub)) / len(sub)):.3f}, "
                         f"lowest {min(sub):.3f} over {len(sub)} cases")
    if ok:
        every = [r["ratio"] for r in ok]
        lines.append(f"all: geomean {math.exp(sum(map(math.log, every)) / len(every)):.3f}, "
                     f"lowest {min(every):.3f}; most kernels compiled by one first call: "
                     f"{max(r['kernels_compiled'] for r in ok)}; "
                     f"wall {time.time() - started:.0f} s")
    text = "\n".join(lines)
    (args.out / "untuned.md").write_text(text + "\n")
    (args.out / "untuned.json").write_text(json.dumps(rows, indent=1, default=str))
    if args.record is not None:
        points = [p for r in ok for p in r.get("points", [])]
        args.record.write_text(json.dumps({"about": "per-candidate timings from "
                                           "scripts/gpu_gemm_untuned.py --record",
                                           "points": points}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
