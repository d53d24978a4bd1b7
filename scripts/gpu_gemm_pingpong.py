"""Ping-pong vs cooperative GEMM schedules vs cuBLAS on chosen shapes (H200), without the
whole tuning sweep of scripts/gpu_gemm_bench.py: each listed schedule and torch.matmul are
timed in alternating rounds (CUDA events, L2 flushed), medians printed as TFLOP/s and the
ratio to cuBLAS, then per schedule the geomean and lowest ratio over the cases; with --sass,
each ping-pong kernel's HGMMA count, registers and spills.

    python3 scripts/gpu_gemm_pingpong.py --shapes 2048x7168x2048,512x8192x8192 [--sass]

--compare is the one-call comparison of issues 12 and 18 (about a minute on the H200): every
schedule first checked against float64 on ragged shapes (a CHECK line for each case that is
not ok: WRONG, or REFUSED where argus.ops.matmul refuses the schedule for that problem by
design, the TMA-store epilogue for C rows that are not 16-byte aligned, N = 1700; then one
count line; every case in the JSON), then the ping-pong schedules
(register and TMA-store epilogues, 5-7 stages) and the best cooperative schedule timed on
4096^3, 2048x7168x2048 and 8192^3, NN and NT, then (a second process) the 128-row ping-pong
tiles with the former last-group wgmma wait (below); every ping-pong kernel's SASS line; JSON
in $OUT:

    python3 -u scripts/gpu_gemm_pingpong.py --compare

A 128-row ping-pong tile issues two wgmma groups per K step (one per 64-row accumulator).
Its steps are whole steps (warp_specialized.py `mma_tile`: `consume(whole_step=True)`), so
lower/sync.py ends each with `wgmma.wait_group 2`: both stay queued on the tensor cores while
the warpgroup releases the previous slot, waits for the next full barrier and builds the next
descriptors, and the wait still retires every group of the previous step before its slot is
released (verifier: sync.release). CUTLASS does the same: one batch per k tile, waited with
K_PIPE_MMAS = 1 (include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp,
`mma`: warpgroup_commit_batch / warpgroup_wait<K_PIPE_MMAS>). --last-group-wait is the A/B
experiment: it clears `whole_step` before the sync pass, so the step ends with the former
`wgmma.wait_group 1`, which retires the step's first group too (half a step in flight).
History: the first H200 run of the wait_group 2 form (docs/perf/gemm.md, 2026-12-03 03:42,
then an IR rewrite named --whole-step-wait) printed "2 wrong or failed": those were the
TMA-store schedule's two refusals on 2900x1700x136 (NN, NT), which the CHECK lines counted as
failures; no wrong result (tests/unit/test_gemm_pingpong_script.py reproduces the refusal).

--tail-splits 1,2,4 runs every listed schedule once per value of GemmSchedule.tail_splits (the
last partial wave in K slices; 1: as listed), e.g. the cooperative 128x256 schedule with and
without them:

    python3 scripts/gpu_gemm_pingpong.py --shapes 2048x7168x2048,4096x14336x4096 \
        --schedules "GemmSchedule(stages=4, epilogue='tma', cluster_m=2, store_cols=128)" \
        --tail-splits 1,2,4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time

COOPERATIVE = ["GemmSchedule(stages=4, epilogue='tma', cluster_m=2, store_cols=128)",
               "GemmSchedule(bn=128, stages=6, epilogue='tma', cluster_m=2)",
               "GemmSchedule(bn=224, stages=4, epilogue='tma', cluster_m=2, store_cols=192)"]
PINGPONG = ["GemmSchedule(bm=128, bn=128, stages=6, pingpong=True)",
            "GemmSchedule(bm=64, bn=256, stages=5, pingpong=True)",
            "GemmSchedule(bm=64, bn=256, stages=4, pingpong=True, group_m=16)"]

# --compare: the shapes of docs/perf/gemm.md "Ping-pong vs cooperative" (2026-12-02 07:55)
COMPARE_SHAPES = "4096x4096x4096,2048x7168x2048,8192x8192x8192"
# in the first process: the old ping-pong schedules (register epilogue), the best cooperative
# one, and the new ping-pong schedules that need no lowering change: the TMA-store epilogue
# (CUTLASS's ping-pong stores through shared memory by TMA; a warpgroup's whole tile staged in
# its own slots, 64 or 128 columns at a time) and 7 stages (7 x 32 KB of 128x128 stages fit
# 227 KB without a staging buffer, as CUTLASS's StageCountAutoCarveout would fill it)
COMPARE_SCHEDULES = [
    "GemmSchedule(bm=128, bn=128, stages=6, pingpong=True)",
    "GemmSchedule(bm=64, bn=256, stages=4, pingpong=True, group_m=16)",
    "GemmSchedule(bm=128, bn=128, stages=6, pingpong=True, epilogue='tma', store_cols=64)",
    "GemmSchedule(bm=128, bn=128, stages=5, pingpong=True, epilogue='tma')",
    "GemmSchedule(bm=64, bn=256, stages=4, pingpong=True, epilogue='tma', group_m=16)",
    "GemmSchedule(bm=128, bn=128, stages=7, pingpong=True)",
    "GemmSchedule(stages=4, epilogue='tma', cluster_m=2, store_cols=128)",
    # the control: a cooperative tile with the ping-pong 128x128 tile's shared-memory bytes
    # per MMA (B read by two m64n128 per k16, 128 + 128 rows filled per 128x128 outputs)
    "GemmSchedule(bn=128, stages=6, epilogue='tma', cluster_m=2)",
]
# in the second process, with --last-group-wait (the former wait_group 1 of 128-row steps)
COMPARE_LAST_GROUP = [
    "GemmSchedule(bm=128, bn=128, stages=6, pingpong=True)",
    "GemmSchedule(bm=128, bn=128, stages=7, pingpong=True)",
    "GemmSchedule(bm=128, bn=128, stages=6, pingpong=True, epilogue='tma', store_cols=64)",
]
# --compare checks every schedule first on ragged shapes (M, N and K no multiple of the tile;
# 2.4 and 7.3 units per CTA of the 132-CTA grid at 128x128, so both warpgroups take turns),
# with the very kernels it then times: the TMA-store + cluster ping-pong variant failed a
# ragged case on the card (docs/perf/gemm.md run 3). N = 1700 gives C rows of 3400 bytes, which
# the TMA-store epilogue refuses (argus.ops.matmul: 16-byte aligned rows), so N = 1704 (3408
# bytes, still no multiple of 8 tiles' width) checks those schedules on the same ragged grid
RAGGED_SHAPES = "2900x1700x136,2900x1704x136,3000x5000x1056"


# ----------------------------------------------------------------------------- experiment


def last_group_wait(kernel):
    """The kernel with no consume step marked `whole_step` (run before the sync pass): every
    step that keeps its wgmma in flight then ends in `wgmma.wait_group 1`, which leaves only
    its last group queued (the lowering before whole steps). Steps with one group are
    unchanged either way."""
    from argus.ir import ops as O
    from argus.ir.core import Region

    def region(r):
        ops = []
        for op in r.ops:
            inner = _regions(op)
            if inner:
                op = op.replace(**{name: region(sub) for name, sub in inner.items()})
            if isinstance(op, O.Consume) and op.whole_step:
                op = op.replace(whole_step=False)
            ops.append(op)
        return Region(tuple(ops))

    return dataclasses.replace(kernel, body=region(kernel.body))


def _regions(op) -> dict:
    from argus.ir.core import Region

    return {f.name: getattr(op, f.name) for f in dataclasses.fields(op)
            if isinstance(getattr(op, f.name), Region)}


def install_last_group_wait() -> None:
    """Run `last_group_wait` right before the sync pass, in this process (and so before the
    verifier, codegen and the caches, which all key on what comes out)."""
    import argus.lower as lower

    if any(name == "last_group_wait" for name, _ in lower.PASSES):
        return
    passes = []
    for name, fn in lower.PASSES:
        if name == "sync":
            passes.append(("last_group_wait", last_group_wait))
        passes.append((name, fn))
    lower.PASSES = tuple(passes)


# ----------------------------------------------------------------------------- measurement


def sass_line(text: str, b_layout: str = "nk") -> str:
    """`SASS <schedule>: HGMMA n, registers r, spills s` for the kernel of one schedule."""
    import argus as ag
    from argus.kernels.gemm import GemmSchedule, gemm_kernel
    from argus.runtime.sass import disassemble, instruction_histogram

    s = eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - our own list
    ck = gemm_kernel(ag.bf16, ag.bf16, b_layout).compile(s=s)
    sass = disassemble(ck.binary.cubin)
    hist = instruction_histogram(sass or "")
    hgmma = sum(v for x, v in hist.items() if x.startswith("HGMMA")) if sass else "n/a"
    waits = "n/a"
    if sass:  # WARPGROUP.DEPBAR.LE gsb0, 0xN: the wgmma waits the kernel ends its steps with
        waits = ",".join(sorted(set(re.findall(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*(0x[0-9a-f]+)",
                                               sass)))) or "none"
    res = ck.resources
    return (f"SASS {text} [{b_layout}]: HGMMA {hgmma}, registers {res.registers}, spills "
            f"{res.spill_stores + res.spill_loads}, wgmma waits {waits}")


def summarize(rows: list[dict], tag: str = "") -> None:
    """Per schedule: geomean and lowest Argus / cuBLAS ratio over its measured cases."""
    by: dict[str, list[float]] = {}
    for row in rows:
        by.setdefault(row["schedule"], []).append(row["ratio"])
    for text, ratios in by.items():
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"SUMMARY{tag} {text:70} geomean {geo:.3f}  min {min(ratios):.3f}  "
              f"({len(ratios)} cases)", flush=True)


# argus.ops.matmul's refusal of a schedule for a problem (a LaunchError before any launch):
# the TMA-store epilogue stores C by rows of 16-byte aligned bulk copies
REFUSAL = "the TMA-store epilogue needs a 16-bit output with 16-byte aligned rows"


def check_rows(shapes: str, layouts: str, names: list[str], variant: str) -> list[dict]:
    """Each schedule against float64 on each shape and layout (C filled with NaN first), one
    row per case with its verdict: ok, WRONG (a wrong value, NaN left in C, or an error), or
    REFUSED (argus.ops.matmul refused the schedule for this problem by design: REFUSAL; no
    kernel ran, so nothing was checked). Prints the rows that are not ok."""
    import torch

    from argus.errors import LaunchError
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    rows = []
    for shape in shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        for layout in layouts.split(","):
            g = torch.Generator(device="cuda").manual_seed(m + n + k)
            a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
            w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
            b = w.T if layout == "NT" else w.T.contiguous()
            ref = a.double() @ b.double()
            for text in names:
                s = eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - our own list
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                try:
                    matmul(a, b, out, schedule=s)
                    torch.cuda.synchronize()
                    err = ((out.double() - ref).norm() / ref.norm()).item()
                    ok = not torch.isnan(out).any().item() and err < 1e-2
                    verdict, what = "ok" if ok else "WRONG", f"err {err:.1e}"
                except LaunchError as e:
                    verdict = "REFUSED" if REFUSAL in str(e) else "WRONG"
                    what = f"LaunchError: {str(e).splitlines()[0]}"
                except Exception as e:  # noqa: BLE001 - record and go on
                    verdict, what = "WRONG", f"{type(e).__name__}: {e}"
                rows.append({"shape": shape, "layout": layout, "schedule": text,
                             "variant": variant, "verdict": verdict, "what": what})
                if verdict != "ok":
                    print(f"CHECK {layout} {shape:>14} {variant:10} {text:70} {verdict}  "
                          f"{what}", flush=True)
    return rows


def check_summary(rows: list[dict], variant: str) -> str:
    """`CHECK [variant]: ok o, WRONG w, REFUSED r of n` (the log keeps it when rows are cut)."""
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("ok", "WRONG", "REFUSED")}
    return (f"CHECK [{variant}]: ok {count['ok']}, WRONG {count['WRONG']}, REFUSED "
            f"{count['REFUSED']} (argus.ops.matmul refuses, not run) of {len(rows)}")


def measure_rows(shapes: str, layouts: str, names: list[str], rounds: int,
                 variant: str) -> list[dict]:
    import torch

    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul
    from argus.runtime.timing import measure_alternating

    rows = []
    for shape in shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        for layout in layouts.split(","):
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
                                                      lambda: torch.matmul(a, b)],
                                                     rounds=rounds)
                except Exception as e:  # noqa: BLE001 - record and go on
                    print(f"{layout} {shape} {text}: FAILED {type(e).__name__}: {e}", flush=True)
                    continue
                flop = 2 * m * n * k
                row = {"shape": shape, "layout": layout, "schedule": text, "variant": variant,
                       "rel_err": err, "ours_ms": ours.median_ms, "cublas_ms": base.median_ms,
                       "ours_tflops": flop / ours.median_ms / 1e9,
                       "cublas_tflops": flop / base.median_ms / 1e9,
                       "ratio": base.median_ms / ours.median_ms}
                rows.append(row)
                bad = "  WRONG" if not err < 1e-2 else ""
                print(f"{layout} {shape:>16} {variant:10} {text:70} "
                      f"{row['ours_tflops']:6.0f} vs {row['cublas_tflops']:6.0f} TFLOP/s  "
                      f"{row['ratio']:.3f}x  err {err:.1e}{bad}", flush=True)
            del a, w, b, out, ref
            torch.cuda.empty_cache()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="2048x7168x2048")
    ap.add_argument("--layouts", default="NN,NT")
    ap.add_argument("--schedules", default="all",
                    help="all, pingpong, cooperative, or GemmSchedule(...) texts split by ';'")
    ap.add_argument("--tail-splits", default="1",
                    help="comma-separated GemmSchedule.tail_splits values applied to every "
                         "schedule (1: the schedule as listed)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds of 100 timed calls each (runtime/timing.py)")
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--last-group-wait", action="store_true",
                    help="experiment: 128-row ping-pong steps end in the former wait_group 1 "
                         "(module doc)")
    ap.add_argument("--compare", action="store_true",
                    help="the one-call comparison of issues 12 and 18 (module doc)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--check", default="",
                    help="ragged shapes (MxNxK,...) to check every schedule on first "
                         f"(--compare: every schedule on {RAGGED_SHAPES})")
    args = ap.parse_args()
    started = time.time()
    if args.compare:
        args.shapes, args.layouts, args.sass = COMPARE_SHAPES, "NN,NT", True
        args.schedules = ";".join(COMPARE_SCHEDULES)
        args.rounds = min(args.rounds, 2)  # ~1 minute in all
        args.check = args.check or RAGGED_SHAPES
    if args.last_group_wait:
        install_last_group_wait()
    variant = "last-group" if args.last_group_wait else "as-lowered"
    if args.schedules.startswith("GemmSchedule"):
        names = [t.strip() for t in args.schedules.split(";") if t.strip()]
    else:
        names = (PINGPONG if args.schedules != "cooperative" else []) + \
            (COOPERATIVE if args.schedules != "pingpong" else [])
    splits = [int(x) for x in args.tail_splits.split(",")]
    names = [t if n == 1 else t[:-1] + f", tail_splits={n})" for t in names for n in splits]

    import torch

    checks = []
    if args.check:  # every schedule timed below, on each ragged shape
        checks = check_rows(args.check, "NN,NT", names, variant)
        print(check_summary(checks, variant), flush=True)
    rows = measure_rows(args.shapes, args.layouts, names, args.rounds, variant)
    summarize(rows, f" [{variant}]")
    if args.sass:
        for text in [t for t in names if "pingpong=True" in t]:
            try:
                print(sass_line(text), flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"SASS {text}: FAILED {type(e).__name__}: {e}", flush=True)
    name = "pingpong_last_group.json" if args.last_group_wait else "pingpong.json"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "gpu": torch.cuda.get_device_name(), "variant": variant, "rows": rows,
                   "checks": checks}, f, indent=1)
    if args.compare:  # the lowering experiment in a process of its own (its own caches)
        child = [sys.executable, "-u", os.path.abspath(__file__), "--last-group-wait", "--sass",
                 "--shapes", args.shapes, "--layouts", args.layouts, "--rounds",
                 str(args.rounds), "--out", args.out, "--check", args.check,
                 "--schedules", ";".join(COMPARE_LAST_GROUP)]
        code = subprocess.run(child, check=False).returncode
        print(f"compare: done in {time.time() - started:.0f} s (last-group process exit "
              f"{code})", flush=True)
        return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
