"""The short table a solve run ends with: per level, how many of the selected tasks are solved.

Per level: the tasks selected (`N`), how many were judged, solved on the strict track (correct
to the task's precision, a verifiable task, Argus kernels not `no`) and on the relaxed track
(KernelBench's 1e-2 rule, hardened), the Argus share (solved tasks whose GPU time is >= 90% in
Argus kernels, `argus kernels: yes`), and the geometric mean speedup over eager PyTorch, over
eager with TF32 off and over torch.compile on the tasks solved on the strict track (and timed).
Eager's default runs cuDNN's fp32 convolutions in TF32, which the strict track would reject:
eager with TF32 off (fp32-accurate) is the strict track's like-for-like baseline, shown beside
it. The relaxed track's geomean stays against eager (TF32: the arithmetic it allows).
Percentages are of all selected tasks: a task not judged (the run stopped first) counts as
not solved.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from argus.bench.timing import geomean


def solved_relaxed(j: Any) -> bool:
    """`Judgment.solved_relaxed` (one definition for the table, the report and the CLI)."""
    return bool(j.solved_relaxed)


def level_rows(selected: dict[int, list[str]], judgments: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per level: `selected` maps a level to its selected task keys."""
    by_key = {j.task: j for j in judgments}
    rows = []
    for level in sorted(selected):
        keys = selected[level]
        js = [by_key[k] for k in keys if k in by_key]
        strict = [j for j in js if j.solved]
        relaxed = [j for j in js if solved_relaxed(j)]
        argus = [j for j in strict if j.argus_kernels == "yes"]
        eager = [j.speedup_eager for j in strict if j.speedup_eager]
        comp = [j.speedup_compile for j in strict if j.speedup_compile]
        notf32 = [j.speedup_eager_notf32 for j in strict if j.speedup_eager_notf32]
        # the relaxed track's speed: every relaxed pass the judge timed (strict passes and
        # those whose only strict failure is precision; judge._judge_sets)
        eager_relaxed = [j.speedup_eager for j in relaxed if j.speedup_eager]
        rows.append({"level": level, "selected": len(keys), "judged": len(js),
                     "strict": len(strict), "relaxed": len(relaxed), "argus": len(argus),
                     "geomean_eager": geomean(eager) if eager else None,
                     "geomean_compile": geomean(comp) if comp else None,
                     "timed": len(eager),
                     "geomean_eager_notf32": geomean(notf32) if notf32 else None,
                     "timed_notf32": len(notf32),
                     "geomean_eager_relaxed": geomean(eager_relaxed) if eager_relaxed else None,
                     "timed_relaxed": len(eager_relaxed)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    def pct(a: int, n: int) -> str:
        return f"{a}/{n} ({100.0 * a / n:.0f}%)" if n else "-"

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v else "-"

    lines = ["| level | tasks | judged | solved strict | solved relaxed | Argus >= 90% of GPU "
             "time (of strict) | strict: geomean vs eager | strict: geomean vs eager TF32 off | "
             "strict: geomean vs torch.compile | strict: timed | relaxed: geomean vs eager | "
             "relaxed: timed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['level']} | {r['selected']} | {r['judged']} | "
                     f"{pct(r['strict'], r['selected'])} | {pct(r['relaxed'], r['selected'])} | "
                     f"{pct(r['argus'], r['strict'])} | {x(r['geomean_eager'])} | "
                     f"{x(r.get('geomean_eager_notf32'))} | "
                     f"{x(r['geomean_compile'])} | {r['timed']} | "
                     f"{x(r.get('geomean_eager_relaxed'))} | {r.get('timed_relaxed', 0)} |")
    return "\n".join(lines) + "\n"


def phase_table(judgments: Iterable[Any], top: int = 20) -> str:
    """Where the judging time went over these judgments: per phase (Judgment.phases) the
    total, mean and largest seconds and the task that took longest, biggest totals first;
    then the counts summed (NVRTC compiles against cache hits: whether prebuilt kernels were
    found; gate entries and yields)."""
    totals: dict[str, list[tuple[float, str]]] = {}
    counts: dict[str, float] = {}
    for j in judgments:
        for name, seconds in (j.phases or {}).items():
            if name.startswith("#"):          # counts (compiles, programs), not seconds
                counts[name[1:].strip()] = counts.get(name[1:].strip(), 0.0) + float(seconds)
                continue
            totals.setdefault(name, []).append((float(seconds), j.task))
    if not totals:
        return ""
    lines = ["| phase | tasks | total s | mean s | max s (task) |", "|---|---|---|---|---|"]
    ranked = sorted(totals.items(), key=lambda kv: -sum(s for s, _ in kv[1]))[:top]
    for name, values in ranked:
        total = sum(s for s, _ in values)
        worst = max(values)
        lines.append(f"| {name} | {len(values)} | {total:.1f} | {total / len(values):.2f} | "
                     f"{worst[0]:.1f} ({worst[1]}) |")
    if counts:
        lines += ["", "Counts over these tasks: " + ", ".join(
            f"{name} {value:g}" for name, value in sorted(counts.items()))]
    return "\n".join(lines) + "\n"


__all__ = ["level_rows", "markdown", "phase_table", "solved_relaxed"]
