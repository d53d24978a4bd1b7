"""What `argus optimize` leaves in --out: the best kernel's DSL source (kernel.py), its CUDA
(kernel.cu), the KernelBench solution (solution.py, for KernelBench tasks), report.md and
report.json (trajectory, diagnostics, timings, proven invariants, the final judgment), and
speed.svg and speed.png (speed over iterations against the baselines, drawn by matplotlib).

Honesty rules: every time carries its kind ("measured" or "estimate"); speedups are only
computed between times of the same kind; the precision the kernel computes in is stated next
to the result; an unproven invariant ("unknown") is listed as such, never as proven.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from argus.agent.plot import write_speed_plots
from argus.agent.result import RunResult


def _reference(result: "RunResult") -> tuple[str, float | None, str]:
    """(label, ms, kind) that speeds are measured against in the plot."""
    kind = "measured" if result.device.startswith("cuda") else "estimate"
    for name, label in (("eager", "eager PyTorch"), ("baseline", "the PyTorch baseline")):
        b = result.baselines.get(name)
        if b and b.get("ms") and b.get("kind") == kind:
            return label, float(b["ms"]), kind
    first = result.first_ok
    if first is not None:
        return "the starting schedule", first.outcome.time_ms, kind
    return "", None, kind


def speedups(result: "RunResult") -> dict[str, float]:
    """Best vs each baseline and vs the start, same kind of time only."""
    best = result.best
    out: dict[str, float] = {}
    if best is None:
        return out
    for name, b in result.baselines.items():
        if b.get("ms") and b.get("kind") == best.outcome.time_kind:
            out[f"vs {name}"] = float(b["ms"]) / best.outcome.time_ms
    first = result.first_ok
    if first is not None and first.outcome.time_kind == best.outcome.time_kind:
        out["vs start"] = first.outcome.time_ms / best.outcome.time_ms
    return out


def report_json(result: "RunResult") -> dict[str, Any]:
    best = result.best
    art = result.artifacts or {}
    return {
        "run_id": result.run_id, "task": result.task.to_json(),
        "signature": result.task.signature(), "device": result.device,
        "time_kind": "measured" if result.device.startswith("cuda") else "estimate",
        "precision": result.task.precision_note,
        "config": result.config.to_json(), "stop_reason": result.stop_reason,
        "resumed_at": result.resumed_at, "seconds": result.seconds,
        "baselines": result.baselines, "baseline_estimates": result.estimates,
        "speedups": speedups(result),
        "best": best.to_json() if best else None,
        "resources": art.get("resources"),
        "invariants": {"proven": art.get("proven", []), "findings": art.get("findings", [])},
        "judgment": result.judgment,
        "steps": [s.to_json() for s in result.steps],
        "failures": _failure_counts(result),
        "written": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _failure_counts(result: "RunResult") -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in result.steps:
        if not s.outcome.ok:
            counts[s.outcome.status] = counts.get(s.outcome.status, 0) + 1
    return counts


def _fmt_ms(ms: float | None, kind: str = "") -> str:
    if ms is None:
        return "-"
    return f"{ms:.4f}" + (f" ({kind})" if kind else "")


def report_md(result: "RunResult") -> str:
    task, best, cfg = result.task, result.best, result.config
    kind = "measured" if result.device.startswith("cuda") else "estimate"
    lines = [f"# argus optimize: {task.name}", "",
             f"- task: `{task.path}` ({task.origin}, family {task.family}, "
             f"{', '.join(f'{k}={v}' for k, v in task.shape)})",
             f"- run `{result.run_id}`" + (f", resumed at step {result.resumed_at}"
                                           if result.resumed_at else "")
             + f"; {len(result.steps)} steps; stopped by {result.stop_reason}",
             f"- planner {cfg.planner} ({cfg.strategy}), feedback **{cfg.feedback}**, "
             f"budget {cfg.iterations} iterations" + (f" / {cfg.minutes:g} min"
                                                      if cfg.minutes else ""),
             f"- precision: {task.precision_note}",
             "- times: " + ("measured on the GPU (argus.bench.timing: median, L2 flushed)"
                            if kind == "measured" else
                            "**cost-model estimates** (no Hopper GPU here): they rank "
                            "candidates, they are not timings"), ""]
    lines += ["## Result", "", "| | ms | kind |", "|---|---|---|"]
    for name, b in result.baselines.items():
        lines.append(f"| baseline: {name} | {_fmt_ms(b.get('ms'))} | {b.get('kind')} |")
    if result.baselines is not result.estimates:
        for name, b in result.estimates.items():
            if name not in result.baselines or result.baselines[name] is not b:
                lines.append(f"| cost model of {name} | {_fmt_ms(b.get('ms'))} | estimate |")
    first = result.first_ok
    if first:
        lines.append(f"| start (step {first.index}) | {_fmt_ms(first.outcome.time_ms)} | "
                     f"{first.outcome.time_kind} |")
    if best:
        lines.append(f"| **best (step {best.index})** | **{_fmt_ms(best.outcome.time_ms)}** | "
                     f"{best.outcome.time_kind} |")
    lines.append("")
    sp = speedups(result)
    if sp:
        lines.append("Speedup of the best candidate: " + ", ".join(
            f"{v:.2f}x {k}" for k, v in sp.items()) + f" ({kind} times).")
        lines.append("")
    if best:
        lines += ["Best schedule: `" + ", ".join(f"{k}={v!r}" for k, v in
                                                 sorted(best.candidate.params_dict.items()))
                  + "`" + (" (with LLM-written source)" if best.candidate.source else ""), ""]
    else:
        lines += ["**No correct candidate was found.**", ""]
    if result.judgment:
        j = result.judgment
        lines += ["## Final judgment (hardened KernelBench judge)", ""]
        if "error" in j:
            lines.append(f"The judge failed: {j['error']}")
        else:
            lines += [f"- correct (strict track): {j.get('correct')}; relaxed track: "
                      f"{j.get('correct_relaxed')}; precision class: {j.get('precision')}",
                      f"- reasons: {', '.join(j.get('reasons') or []) or 'none'}",
                      f"- sizes: {j.get('sizes') or 'upstream'}; argus kernels: "
                      f"{j.get('argus_kernels')}",
                      f"- speedup vs eager: {j.get('speedup_eager')}; vs torch.compile: "
                      f"{j.get('speedup_compile')}"]
        lines.append("")
    lines += ["## Trajectory", "",
              "| step | planner | card | changes vs start | outcome | time ms | reward | gain | "
              "pruned |", "|---|---|---|---|---|---|---|---|---|"]
    start = result.steps[0].candidate.params_dict if result.steps else {}
    for s in result.steps:
        o = s.outcome
        changes = ", ".join(f"{k}={v}" for k, v in sorted(s.candidate.params_dict.items())
                            if start.get(k) != v) or ("(start)" if s.index == 0 else "-")
        if s.candidate.source:
            changes += " +source"
        outcome = "ok" if o.ok else o.failure().replace("|", "/")[:90]
        lines.append(f"| {s.index} | {s.planner} | {s.card} | {changes} | {outcome} | "
                     f"{_fmt_ms(o.time_ms, o.time_kind if o.time_ms is not None else '')} | "
                     f"{s.reward:+.3f} | {s.gain:+.3f} | {len(s.pruned)} |")
    lines.append("")
    failed = [s for s in result.steps if not s.outcome.ok]
    events = [s for s in result.steps if s.events]
    if failed or events:
        lines += ["## Diagnostics and events", ""]
        for s in failed:
            lines.append(f"- step {s.index} ({s.card}): {s.outcome.failure()}")
            for d in s.outcome.diagnostics[:3]:
                if d.get("severity") in ("error", "unknown"):
                    text = f"  - {d.get('severity')} {d.get('code')}: {str(d.get('message'))[:200]}"
                    if d.get("counterexample"):
                        text += " — counterexample: " + ", ".join(
                            f"{k}={v}" for k, v in list(d["counterexample"].items())[:8])
                    lines.append(text)
        for s in events:
            for e in s.events:
                lines.append(f"- step {s.index} event: {e[:200]}")
        lines.append("")
    art = result.artifacts or {}
    lines += ["## Invariants of the best kernel", ""]
    if art.get("proven"):
        lines += [f"Proven by argus.verify ({len(art['proven'])}):", ""]
        lines += [f"- {p}" for p in art["proven"][:60]]
    else:
        lines.append("No invariant was reported as proven for the best kernel.")
    unknown = [d for d in art.get("findings", []) if d.get("severity") in ("unknown", "error")]
    if unknown:
        lines += ["", "Not proven (unknown: never counted as proven):", ""]
        lines += [f"- {d.get('code')}: {str(d.get('message'))[:200]}" for d in unknown[:30]]
    if art.get("resources"):
        r = art["resources"]
        lines += ["", f"Resources: {r.get('registers')} registers, {r.get('spill_stores')} B "
                      f"spill stores, {r.get('smem')} B dynamic shared memory, "
                      f"{r.get('threads')} threads."]
    lines += ["", "## Files", "", "- `kernel.py`: the best kernel's DSL source",
              "- `kernel.cu`: its generated CUDA",
              "- `solution.py`: the KernelBench ModelNew (KernelBench tasks)",
              "- `report.json`: this report as data; `speed.svg`: speed over iterations",
              "- `run.json`: resume state (rerun the same command to continue)"]
    return "\n".join(lines) + "\n"


def write_outputs(result: "RunResult") -> list[str]:
    out = Path(result.out_dir)
    written = []
    art = result.artifacts or {}
    if art.get("kernel_source"):
        (out / "kernel.py").write_text(art["kernel_source"])
        written.append("kernel.py")
    if art.get("cuda"):
        (out / "kernel.cu").write_text(art["cuda"])
        written.append("kernel.cu")
    if art.get("solution_source"):
        (out / "solution.py").write_text(art["solution_source"])
        written.append("solution.py")
    label, ref_ms, kind = _reference(result)
    points = [(s.index, (ref_ms / s.outcome.time_ms) if s.outcome.ok and s.outcome.time_ms
               and ref_ms and s.outcome.time_kind == kind else None) for s in result.steps]
    lines: dict[str, float] = {}
    if ref_ms:
        for name, b in result.baselines.items():
            if b.get("ms") and b.get("kind") == kind:
                lines[name] = ref_ms / float(b["ms"])
        first = result.first_ok
        if first is not None and first.outcome.time_kind == kind:
            lines["start"] = ref_ms / first.outcome.time_ms
    what = "measured" if kind == "measured" else "cost-model estimates"
    title = f"{result.task.name}: speed over iterations ({what})"
    ylabel = f"speedup vs {label}" if label else "speedup"
    for path in write_speed_plots(points, lines, out / "speed", title=title, ylabel=ylabel):
        written.append(path.name)
    data = report_json(result)
    data["files"] = written + ["report.md", "report.json", "run.json"]
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    (out / "report.md").write_text(report_md(result))
    return data["files"]


def summary_line(result: "RunResult") -> str:
    best = result.best
    if best is None:
        return f"argus optimize: no correct candidate in {len(result.steps)} steps; see " \
               f"{result.out_dir}/report.md"
    sp = speedups(result)
    text = ", ".join(f"{v:.2f}x {k}" for k, v in sp.items())
    return (f"argus optimize: best {best.outcome.time_ms:.4f} ms ({best.outcome.time_kind}) at "
            f"[{best.index + 1}/{len(result.steps)}] [{text}]; wrote {result.out_dir}/report.md")
