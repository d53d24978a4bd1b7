#!/usr/bin/env python3
"""Memory-bound kernels against the copy ceiling, torch eager and torch.compile (device run).

Run from the repository root on a Hopper GPU:

    python3 -u scripts/gpu_memory_bound.py [--out "$OUT"] [--rows 8192 --cols 8192]

In one process, on M x N fp32 (default 8192 x 8192), it measures
  - the device copy bandwidth: torch `y.copy_(x)`, bytes read + written over the time;
  - examples/elementwise.py (bias + tanh-GELU), examples/rmsnorm.py (one CTA per row, the whole
    row in one tile), examples/softmax.py (one CTA per row, N columns in one tile) and
    examples/softmax_online.py (one CTA per row walking it in blocks of BN columns: the
    example's own BN, then each --online-bn width that gives more than one block per pass) and
    examples/softmax_lanes.py (the same walk with the running maximum and sum kept per lane,
    combined after the loop: no reduction across threads inside it; BN 4096, then each
    --online-bn width),
each side by side with its torch eager baseline (the example's `baseline`) and torch.compile of
that same function. Timing: argus.bench.timing.measure (CUDA events, whole-device sync, 256 MB
L2 flush before every trial, median of >= 100 trials), in alternating rounds so that clock drift
falls on all variants alike; the spread between rounds is reported (a difference smaller than
it is noise). Correctness: every variant against the example's float64 reference on fresh
random data (never zeros), with the output poisoned with NaN before each checked run; the
Argus kernel is checked again on a second draw after timing.

Columns: ms (median), GB/s (the example's bytes_moved over the time), % of the copy
bandwidth, and `x eager` / `x compile` = their time over ours (above 1: we are faster).
With --out, writes memory_bound.json (all numbers, per-round medians) and the generated CUDA
of each Argus kernel as launched (the launch-specialized variant the arguments select,
analysis/alignment.py). The short table is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOL_F32 = 1e-5
EXAMPLES = ("elementwise", "rmsnorm", "softmax", "softmax_online", "softmax_lanes")
# softmax_online walks rows of any length in column blocks (loop-carried running max and sum);
# the one-tile softmax stops at the largest row that fits in registers.
PENDING: tuple = ()


def relative_error(out, ref) -> float:
    out64, ref64 = out.detach().double(), ref.detach().double()
    if not bool(out64.isfinite().all()):
        return math.inf
    return ((out64 - ref64).norm() / (ref64.norm() + 1e-300)).item()


def timed_rounds(fns: dict, rounds: int, trials: int, warmup: int) -> dict:
    """{name: (pooled median ms, [per-round medians])}, rounds alternating over the names."""
    from argus.bench.timing import measure

    samples: dict[str, list[float]] = {k: [] for k in fns}
    medians: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = measure(fn, trials=trials, warmup=warmup)
            samples[name].extend(t.samples_ms)
            medians[name].append(t.median_ms)
    return {k: (statistics.median(samples[k]), medians[k]) for k in fns}


def copy_bandwidth(M: int, N: int, rounds: int, trials: int) -> dict:
    import torch

    x = torch.randn(M, N, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    assert torch.equal(x, y)
    nbytes = 2 * x.numel() * x.element_size()
    ms, per_round = timed_rounds({"copy": lambda: y.copy_(x)}, rounds, trials, 10)["copy"]
    return {"ms": ms, "rounds_ms": per_round, "bytes": nbytes, "gbs": nbytes / ms / 1e6}


def sass_widths(binary) -> str:
    """Global load/store opcodes in the kernel's SASS (LDG.E.128 = 16-byte loads), if a
    disassembler is installed."""
    from argus.runtime import disassemble

    sass = disassemble(binary.cubin)
    if not sass:
        return "no disassembler"
    ops = re.findall(r"\b((?:LDG|STG)[.\w]*)", sass)
    return ", ".join(f"{op} x{ops.count(op)}" for op in sorted(set(ops)))


def run_example(name: str, M: int, N: int, rounds: int, trials: int, out: Path | None,
                overrides: dict | None = None, with_compile: bool = True) -> dict:
    """One example timed against eager and (with_compile) torch.compile; the row of the
    table. Sweeps of one kernel's variants pass with_compile=False: torch.compile of the
    same baseline is the same number each time."""
    import torch

    from argus.compiler import compile_kernel
    from argus.demo import load_example

    ex = load_example(name)
    ex.SIZES["bench"] = (M, N)
    inputs = ex.make_inputs("bench", seed=1, device="cuda")
    consts = {**ex.constexprs(*inputs), **(overrides or {})}
    label = name + "".join(f" {k}={v}" for k, v in (overrides or {}).items())
    row: dict = {"name": label, "shape": f"{M}x{N}"}
    row["constexprs"] = {k: v for k, v in consts.items()}
    nbytes = ex.bytes_moved(*inputs)
    row["bytes"] = nbytes

    t0 = time.perf_counter()
    compiled = compile_kernel(ex.KERNEL, **consts)
    row["compile_s"] = time.perf_counter() - t0
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    spec = compiled.specialization(tensors, compiled.bind(tensors))
    source, binary = compiled.variant(spec)   # what a launch with these arguments runs
    row["specialization"] = repr(spec)
    try:
        row["resources"] = binary.resource(source.name).summary()
    except KeyError as e:  # a report missing for the variant must not lose the timing row
        row["resources"] = f"(no ptxas report: {e})"
    row["sass"] = sass_widths(binary)
    if out is not None:
        (out / f"{label.replace(' ', '_').replace('=', '')}.cu").write_text(source.text)

    ref = ex.reference(*inputs)

    def check_ours(tag: str, args, expected) -> None:
        args[ex.OUTPUT].fill_(float("nan"))  # every element must be written
        compiled(*args)
        torch.cuda.synchronize()
        row[f"err_{tag}"] = relative_error(args[ex.OUTPUT], expected)

    check_ours("ours", inputs, ref)
    fns = {"ours": lambda: compiled(*inputs), "eager": lambda: ex.baseline(*inputs)}
    row["err_eager"] = relative_error(ex.baseline(*inputs), ref)
    try:
        if not with_compile:
            raise RuntimeError("torch.compile not run (with_compile=False)")
        t0 = time.perf_counter()
        compiled_torch = torch.compile(ex.baseline)
        got = compiled_torch(*inputs)
        torch.cuda.synchronize()
        row["torch_compile_s"] = time.perf_counter() - t0
        row["err_compile"] = relative_error(got, ref)
        fns["compile"] = lambda: compiled_torch(*inputs)
    except Exception as exc:  # noqa: BLE001 - reported, the other variants still run
        row["compile_error"] = f"{type(exc).__name__}: {exc}"
    del ref
    torch.cuda.empty_cache()

    for k, (ms, per_round) in timed_rounds(fns, rounds, trials, 10).items():
        row[f"{k}_ms"] = ms
        row[f"{k}_rounds_ms"] = per_round
        row[f"{k}_gbs"] = nbytes / ms / 1e6
    # a second draw after timing: the same function on different data, output poisoned again
    fresh = ex.make_inputs("bench", seed=2, device="cuda")
    check_ours("ours_fresh", fresh, ex.reference(*fresh))
    row["ok"] = all(row[k] <= TOL_F32 for k in ("err_ours", "err_ours_fresh"))
    return row


def spread(per_round: list[float]) -> float:
    return (max(per_round) - min(per_round)) / statistics.median(per_round)


def table(copy: dict, rows: list[dict]) -> str:
    cbw = copy["gbs"]
    lines = [f"copy bandwidth (torch y.copy_(x), read + write): {cbw:.0f} GB/s "
             f"({copy['ms']:.4f} ms, round spread {spread(copy['rounds_ms']):.1%})", "",
             "| kernel | variant | ms | GB/s | % copy BW | x eager | x compile | rel err | "
             "round spread |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | FAILED: {r['error'][:120]} | | | | | | | |")
            continue
        for k in ("ours", "eager", "compile"):
            if f"{k}_ms" not in r:
                lines.append(f"| {r['name']} | {k} | - | - | - | - | - | "
                             f"{r.get('compile_error', '')[:60]} | |")
                continue
            ms = r[f"{k}_ms"]
            vs_e = f"{r['eager_ms'] / ms:.2f}x" if k == "ours" else "-"
            vs_c = f"{r['compile_ms'] / ms:.2f}x" if k == "ours" and "compile_ms" in r else "-"
            err = r.get(f"err_{k}", math.nan)
            lines.append(f"| {r['name']} {r['shape']} | {k} | {ms:.4f} | {r[f'{k}_gbs']:.0f} | "
                         f"{100 * r[f'{k}_gbs'] / cbw:.1f}% | {vs_e} | {vs_c} | {err:.1e} | "
                         f"{spread(r[f'{k}_rounds_ms']):.1%} |")
    for name, why in PENDING:
        lines.append(f"| {name} | not yet: {why} | | | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--online-bn", default="2048,4096",
                        help="softmax_online / softmax_lanes block widths measured besides "
                             "the example's own "
                             "(those below the row length: more than one block per pass)")
    parser.add_argument("--out", default=None, help="folder for memory_bound.json and the .cu")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu_memory_bound: needs a CUDA GPU", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(), "capability": torch.cuda.get_device_capability()}
    print(f"gpu_memory_bound: {env}", flush=True)
    copy = copy_bandwidth(args.rows, args.cols, args.rounds, args.trials)
    print(f"copy: {copy['gbs']:.0f} GB/s", flush=True)
    rows = []
    runs = [(name, None) for name in args.examples.split(",")]
    for looped in ("softmax_online", "softmax_lanes"):     # lanes: statistics kept per lane
        if looped in args.examples.split(","):
            runs += [(looped, {"BN": int(bn)}) for bn in args.online_bn.split(",")
                     if bn and int(bn) < args.cols]
    for name, overrides in runs:
        print(f"[{name}{'' if not overrides else f' {overrides}'}] ...", flush=True)
        try:
            r = run_example(name, args.rows, args.cols, args.rounds, args.trials, out,
                            overrides)
            print(f"[{name}] {r['resources']}; SASS global ops: {r['sass']}; "
                  f"errors ours {r['err_ours']:.1e} / fresh {r['err_ours_fresh']:.1e} / eager "
                  f"{r['err_eager']:.1e} / compile {r.get('err_compile', math.nan):.1e}"
                  + ("" if r["ok"] else "  <-- WRONG RESULT"), flush=True)
        except Exception as exc:  # noqa: BLE001 - one failing kernel must not hide the others
            traceback.print_exc()
            r = {"name": name, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(r)
    if out is not None:
        (out / "memory_bound.json").write_text(json.dumps(
            {"env": env, "copy": copy, "rows": rows}, indent=1, default=str))
    print()
    print(table(copy, rows))
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
