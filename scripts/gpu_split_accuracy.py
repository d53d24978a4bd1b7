#!/usr/bin/env python3
"""Measure the bf16-split fp32 GEMM's error and time on the GPU against the accuracy model
(device run).

Run from the repository root on the GPU machine:

    python3 -u scripts/gpu_split_accuracy.py --out "$OUT"

For the square-matmul KernelBench task (fp32, N = 4096 unless --n) and each split in --configs
(split_terms x k_chunks, default 6x4 6x2 6x1 6x8 3x1 1x1), it renders the agent's KernelBench
solution (the GEMM family's ModelNew around the library GEMM with the default schedule), runs it
on the judge's first five input sets (task, normal, heavy, task, large: argus.bench.kernelbench
inputs) against the float64 reference, and records rel_l2 and max_elem with the judge's own
tolerance code, the strict verdict (floor 1e-5 / 1e-4), the error the tensor-core model
(argus/agent/split_numerics.py) predicts, and the time (argus.bench.timing, median of 100 trials,
L2 flushed). Files written to --out: split_accuracy.json, split_accuracy.md (the table),
progress.log. `--device cpu --n 256` is a smoke mode (interpreter, exact fp32 accumulation, so
its errors are not the tensor core's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def run_config(task, module, terms: int, chunks: int, sets, device: str, trials: int,
               scratch: Path) -> dict:
    import torch

    from argus.agent import split_numerics
    from argus.agent.evaluate import import_source
    from argus.agent.families import get_family
    from argus.bench.kernelbench import tolerance
    from argus.bench.timing import measure

    family = get_family("gemm")
    params = family.normalize(task, dict(family.default_params(task), split_terms=terms,
                                         k_chunks=chunks))
    sol = import_source(family.render_solution(task, family.render_kernel(task, params), params),
                        scratch, f"sol_{terms}x{chunks}")
    model = sol.ModelNew()
    rows = []
    for name, inputs, ref in sets:
        with torch.no_grad():
            out = model(*[x.clone() for x in inputs])
        if device == "cuda":
            torch.cuda.synchronize()
        err = tolerance.errors(out, ref)
        tol = tolerance.strict_tolerance(torch.float32, None)
        rows.append({"set": name, "rel_l2": err.rel_l2, "max_elem": err.max_elem,
                     "strict_ok": tolerance.strict_ok(err, tol), "relaxed_ok": err.relaxed_ok})
    k = task.dims["K"]
    timing = None
    if device == "cuda":
        args = sets[0][1]
        with torch.no_grad():
            timing = measure(lambda: model(*args), trials=trials, warmup=5, device="cuda",
                             allow_few_trials=True).median_ms
    return {"split_terms": terms, "k_chunks": chunks,
            "predicted_rel_l2": split_numerics.predicted_rel_l2(terms, k, chunks),
            "rule_ok": not any(d.severity == "error" for d in family.static_check(task, params)),
            "sets": rows, "worst_rel_l2": max(r["rel_l2"] for r in rows),
            "strict_ok": all(r["strict_ok"] for r in rows), "ms": timing}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "split-accuracy-out"))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--configs", default="6x4,6x2,6x1,6x8,3x1,1x1")
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from argus.bench.tee import Tee

    sys.stdout = Tee(sys.stdout, out / "progress.log")
    import torch

    from argus.agent.composer import compose
    from argus.bench.kernelbench import inputs as kb_inputs
    from argus.bench.kernelbench.tasks import load_task

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --n 256 for the smoke mode")
        return 2
    work = Path(tempfile.mkdtemp(prefix="argus-split-acc-"))
    path = work / "1_Square_matrix_multiplication_.py"
    from gpu_agent import EMBEDDED  # the KernelBench L1/1 task file, at our size

    task_text = EMBEDDED[path.name]
    assert "N = 2048 * 2" in task_text
    path.write_text(task_text.replace("N = 2048 * 2", f"N = {args.n}"))
    task = compose(path)
    module = load_task(path)
    sets = []
    for spec in kb_inputs.plan(5):
        base = kb_inputs.task_inputs(module, spec.seed)
        inputs, _ = kb_inputs.transform(base, spec.distribution, spec.seed)
        inputs = [x.to(args.device) for x in inputs]
        with torch.no_grad():
            ref = inputs[0].double() @ inputs[1].double()
        sets.append((f"{spec.index}:{spec.distribution}", inputs, ref))
    env = {"torch": torch.__version__, "device": args.device, "n": args.n,
           "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
    print(f"split accuracy run: {env}", flush=True)
    results = []
    for cfg in args.configs.split(","):
        terms, chunks = (int(v) for v in cfg.split("x"))
        t0 = time.monotonic()
        try:
            r = run_config(task, module, terms, chunks, sets, args.device, args.trials, work)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next config
            traceback.print_exc()
            r = {"split_terms": terms, "k_chunks": chunks, "error": f"{type(exc).__name__}: {exc}"}
        r["seconds"] = round(time.monotonic() - t0, 1)
        results.append(r)
        print(json.dumps(r, default=str), flush=True)
    lines = ["| terms x chunks | rule | predicted | " + " | ".join(s[0] for s in sets)
             + " | strict | ms |", "|---" * (len(sets) + 5) + "|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['split_terms']}x{r['k_chunks']} | error: {r['error'][:80]} |")
            continue
        errs = " | ".join(f"{s['rel_l2']:.2e}" for s in r["sets"])
        ms = f"{r['ms']:.4f}" if r["ms"] is not None else "-"
        lines.append(f"| {r['split_terms']}x{r['k_chunks']} | {'ok' if r['rule_ok'] else 'pruned'}"
                     f" | {r['predicted_rel_l2']:.2e} | {errs} | {r['strict_ok']} | {ms} |")
    table = "\n".join(lines)
    (out / "split_accuracy.json").write_text(json.dumps({"environment": env, "results": results},
                                                        indent=1, default=str) + "\n")
    (out / "split_accuracy.md").write_text(
        f"# bf16-split fp32 GEMM, N = {args.n}, {env.get('gpu', args.device)} ({env['time']})\n\n"
        "rel_l2 per judge input set (strict bound 1e-5); predicted: split_numerics' model.\n\n"
        + table + "\n")
    print("\n" + table)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
