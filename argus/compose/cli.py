"""`argus kernelbench solve --level N [--ids ...] --out DIR`: compose every selected task into an
Argus solution, judge it, and write a table.

For each task: `compose_task` writes DIR/solutions/level<L>/<task file> (full, partial with the
ops left to torch named, or not captured); then the judge (`run_suite`, resumable: a task whose
task file and solution are unchanged is not judged again) checks every solution and writes
results.jsonl and report.*; finally DIR/solve.md joins both: per task the composition (kernels,
what runs in torch) and the verdicts on the strict and relaxed tracks. Without a GPU the judge
shrinks the sizes and the kernels run in the interpreter (Argus kernels, interpreted).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def add_solve(verbs, selection, judge_options) -> None:
    s = verbs.add_parser("solve", help="compose every task into Argus kernels, judge the "
                                       "solutions, write a table (resumable)")
    selection(s)
    s.add_argument("--out", default="kernelbench-solve",
                   help="folder: solutions/, compose.jsonl, results.jsonl, solve.md")
    s.add_argument("--fresh", action="store_true", help="do not resume an earlier run")
    s.add_argument("--compose-only", action="store_true",
                   help="write the solutions and the composition table; do not judge")
    s.add_argument("--skip-torch-ops", default="", metavar="OPS",
                   help="comma-separated op names (substrings, e.g. conv): a task whose "
                        "composition leaves a matching op to torch is listed but not judged "
                        "(--skip-torch-ops conv: the non-convolution tasks)")
    s.add_argument("--jobs", default="1",
                   help="tasks judged at once (auto: a default for this machine; > 1 judges "
                        "directly with timings serialized by a GPU gate, see "
                        "argus/bench/kernelbench/parallel.py)")
    s.add_argument("--budget-s", type=float, default=None,
                   help="wall seconds for judging: no task starts after, what runs is stopped "
                        "(a resumed run judges it)")
    s.add_argument("--gpu-mem-gb", type=float, default=None,
                   help="GPU memory the parallel tasks may share (default: the device's less "
                        "12 GB)")
    s.add_argument("--precision", choices=("fp32", "tf32"), default="fp32",
                   help="fp32 convolutions: fp32 (default) runs the bf16 split, fp32-accurate "
                        "(strict track); tf32 runs ONE tf32 product (argus.compose.conv "
                        "ConvRun(precision='tf32')): the arithmetic of PyTorch eager's cuDNN "
                        "convolution with TF32, a relaxed-track result that fails the strict "
                        "track by design, for each convolution whose chain passes the relaxed "
                        "rule in a compose-time self-check (argus/compose/precision.py; the "
                        "others keep the split). Use another --out than the fp32 run's")
    judge_options(s)


def skipped_for(unsupported, skip_ops: str) -> list[str]:
    """The ops left to torch that --skip-torch-ops names (substring match)."""
    wanted = [w.strip().lower() for w in skip_ops.split(",") if w.strip()]
    return [op for op in unsupported if any(w in str(op).lower() for w in wanted)]


def solve_schedules(precision: str) -> dict[str, Any] | None:
    """The SCHEDULES a solution is composed with for `--precision`: None (the defaults: fp32
    convolutions as the strict bf16 split) or, for "tf32", convolutions as one tf32 product
    (relaxed track); compose_task then gives the split back to each convolution whose chain
    fails the self-check (argus/compose/precision.py conv_schedules)."""
    if precision == "fp32":
        return None
    if precision == "tf32":
        from argus.compose.conv import ConvRun

        return {"conv": ConvRun(precision="tf32")}
    raise ValueError(f"--precision {precision!r}: fp32 or tf32")


def cmd_solve(args, tasks, options, run_suite, summarize=None) -> int:
    """`run_suite` is the judge's (argus.bench.kernelbench.runner, or its parallel form), and
    `summarize(rows, judged)` the per-level summary, passed in by the bench's command line:
    compose sits below bench and does not import it."""
    from argus.compose.solution import compose_task

    schedules = solve_schedules(getattr(args, "precision", "fp32") or "fp32")

    out = Path(args.out)
    sol_dir = out / "solutions"
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    for i, task in enumerate(tasks, 1):
        t0 = time.monotonic()
        comp = compose_task(task.path, schedules)
        skip = skipped_for(comp.unsupported, getattr(args, "skip_torch_ops", "") or "")
        row = {"task": task.key, "level": task.level, "id": task.problem_id,
               "name": task.path.stem, "status": comp.status, "steps": comp.steps,
               "unsupported": list(comp.unsupported), "error": comp.error,
               "skipped": f"torch runs {', '.join(skip)}" if skip else ""}
        if comp.source:
            target = sol_dir / f"level{task.level}" / task.path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text() != comp.source:
                target.write_text(comp.source)
            (target.with_suffix(".kernels.txt")).write_text(comp.kernels)
        rows[task.key] = row
        print(f"[compose {i}/{len(tasks)}] {comp.describe()} ({time.monotonic() - t0:.1f}s; "
              f"elapsed {time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)
    with open(out / "compose.jsonl", "w") as f:
        for row in rows.values():
            f.write(json.dumps(row) + "\n")
    judged: dict[str, Any] = {}
    selected = [t for t in tasks if not rows[t.key]["skipped"]]
    if len(selected) < len(tasks):
        print(f"[solve] {len(tasks) - len(selected)} tasks skipped (--skip-torch-ops "
              f"{args.skip_torch_ops}), {len(selected)} selected", file=sys.stderr, flush=True)
    if not args.compose_only:
        with_solution = [t for t in selected if rows[t.key]["status"] != "no capture"]
        if with_solution:
            result = run_suite(with_solution, sol_dir, out, options, resume=not args.fresh)
            judged = {j.task: j for j in result.judgments}
    table = solve_table(tasks, rows, judged)
    if summarize is not None and judged:
        table += "\n" + summarize(rows, judged)
    (out / "solve.md").write_text(table)
    print(table)
    return 0


def solve_table(tasks, rows: dict[str, dict[str, Any]], judged: dict[str, Any]) -> str:
    lines = ["| task | composed | kernels | torch runs | strict | relaxed | Argus kernels |",
             "|---|---|---|---|---|---|---|"]
    counts = {"full": 0, "partial": 0, "no capture": 0, "strict": 0, "relaxed": 0}
    for t in tasks:
        row = rows[t.key]
        counts[row["status"]] += 1
        j = judged.get(t.key)
        strict = relaxed = argus = "-"
        if row.get("skipped"):
            strict = relaxed = "skipped"
        if j is not None:
            strict = "yes" if j.correct else (j.reasons or ("no",))[0]
            relaxed = "yes" if j.correct_relaxed else (j.relaxed_reasons or ("no",))[0]
            argus = j.argus_kernels
            counts["strict"] += strict == "yes"
            counts["relaxed"] += relaxed == "yes"
        kernels = ", ".join(f"{v} {k}" for k, v in sorted(row["steps"].items())
                            if k != "torch ops") or "-"
        lines.append(f"| {t.key} {row['name']} | {row['status']} | {kernels} | "
                     f"{', '.join(row['unsupported']) or row['error'][:60] or '-'} | {strict} | "
                     f"{relaxed} | {argus} |")
    n = len(tasks)
    head = (f"{n} tasks: {counts['full']} fully composed, {counts['partial']} partial, "
            f"{counts['no capture']} not captured")
    if judged:
        head += f"; judged correct: {counts['strict']} strict, {counts['relaxed']} relaxed"
    return head + "\n\n" + "\n".join(lines) + "\n"


__all__ = ["add_solve", "cmd_solve", "skipped_for", "solve_table"]
