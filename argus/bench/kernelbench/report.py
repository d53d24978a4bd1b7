"""Reports of a suite run: per-level metrics, a per-task table, as markdown, JSON and a plot.

Per level (denominator: every task of the level that the run covered, as upstream fast_p):
- fast_0:             solved share (strict track, verifiable task, not shown to be PyTorch's)
- fast_1 vs eager:    solved and faster than eager PyTorch
- fast_1 vs compile:  solved and faster than torch.compile
- geomean speedups over solved tasks with timings, vs eager and vs torch.compile
- beside them: strict-correct share with any code, the relaxed track (KernelBench's old 1e-2
  rule), degenerate and stochastic tasks (listed, never counted as solved), precision classes.

The plot is an SVG written with the standard library (outcomes per level, and per-task speedups
when there are timings); when matplotlib is importable a PNG of the speedups is added.

Invariant: every number in a report is computed from the judgments passed in, nothing else.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.bench.kernelbench.judge import REASONS, Judgment
from argus.bench.timing import geomean


@dataclass(frozen=True)
class LevelSummary:
    level: int
    tasks: int
    solved: int
    correct_any_code: int
    correct_relaxed: int
    fast_0: float
    fast_1_eager: float | None
    fast_1_compile: float | None
    geomean_eager: float | None
    geomean_compile: float | None
    timed: int
    degenerate: tuple[str, ...] = ()
    stochastic: tuple[str, ...] = ()
    reasons: dict[str, int] = field(default_factory=dict)
    precision: dict[str, int] = field(default_factory=dict)
    argus: dict[str, int] = field(default_factory=dict)
    reduced_sizes: int = 0


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def summarize_levels(judgments: list[Judgment]) -> list[LevelSummary]:
    out = []
    for level in sorted({j.level for j in judgments}):
        js = [j for j in judgments if j.level == level]
        n = len(js)
        solved = [j for j in js if j.solved]
        timed = [j for j in solved if j.speedup_eager is not None]
        timed_c = [j for j in solved if j.speedup_compile is not None]
        f1e = sum(1 for j in timed if j.speedup_eager and j.speedup_eager > 1) / n if timed \
            else None
        f1c = sum(1 for j in timed_c if j.speedup_compile and j.speedup_compile > 1) / n \
            if timed_c else None
        out.append(LevelSummary(
            level=level, tasks=n, solved=len(solved),
            correct_any_code=sum(1 for j in js if j.correct and j.verifiable),
            correct_relaxed=sum(1 for j in js if j.correct_relaxed and j.verifiable),
            fast_0=len(solved) / n if n else 0.0, fast_1_eager=f1e, fast_1_compile=f1c,
            geomean_eager=_finite(geomean([j.speedup_eager for j in timed])) if timed else None,
            geomean_compile=_finite(geomean([j.speedup_compile for j in timed_c]))
            if timed_c else None,
            timed=len(timed),
            degenerate=tuple(f"{j.task} ({', '.join(j.degenerate)})" for j in js
                             if j.degenerate),
            stochastic=tuple(j.task for j in js if j.stochastic),
            reasons=dict(Counter(j.reason for j in js if j.reason)),
            precision=dict(Counter(j.precision for j in js)),
            argus=dict(Counter(j.argus_kernels for j in js)),
            reduced_sizes=sum(1 for j in js if j.sizes.startswith("reduced"))))
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _ms(t: dict[str, Any] | None) -> str:
    if not t or "median_ms" not in t:
        return "err" if t and "error" in t else "-"
    return f"{float(t['median_ms']):.4g}"


def _verdict(j: Judgment) -> str:
    if not j.correct:
        return j.reason
    if j.solved:
        return "solved"
    if not j.verifiable:
        return "correct, task not verifiable"
    return "correct, not Argus" if j.argus_kernels == "no" else "correct"


def markdown(judgments: list[Judgment], meta: dict[str, Any] | None = None) -> str:
    meta = meta or {}
    levels = summarize_levels(judgments)
    lines = ["# KernelBench run", ""]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta.get("time", time.time())))
    lines.append(f"Run {when}, device `{meta.get('device', '?')}`. "
                 "Strict track = accurate to the task's dtype against a float64 reference on "
                 ">= 5 mixed input sets; relaxed = KernelBench's old allclose(1e-2).")
    if any(j.sizes.startswith("reduced") for j in judgments):
        lines.append("")
        lines.append("**Some tasks ran at reduced sizes on the CPU** (correctness only; see the "
                     "sizes column): these are not results at upstream sizes.")
    lines += ["", "## Per level", "",
              "| level | tasks | fast_0 (solved) | fast_1 vs eager | fast_1 vs torch.compile | "
              "geomean vs eager | geomean vs compile | correct, any code | relaxed track | "
              "degenerate | stochastic |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in levels:
        lines.append(
            f"| {s.level} | {s.tasks} | {_pct(s.fast_0)} ({s.solved}) | {_pct(s.fast_1_eager)} "
            f"| {_pct(s.fast_1_compile)} | {_x(s.geomean_eager)} | {_x(s.geomean_compile)} | "
            f"{s.correct_any_code} | {s.correct_relaxed} | {len(s.degenerate)} | "
            f"{len(s.stochastic)} |")
    for s in levels:
        if s.degenerate or s.stochastic:
            lines += ["", f"Level {s.level}, not verifiable (never counted as solved):"]
            lines += [f"- degenerate: {d}" for d in s.degenerate]
            lines += [f"- stochastic: {t}" for t in s.stochastic]
    reasons = Counter(j.reason for j in judgments if j.reason)
    if reasons:
        lines += ["", "## Rejections by reason", "", "| reason | tasks | meaning |",
                  "|---|---|---|"]
        lines += [f"| {r} | {n} | {REASONS.get(r, '')} |" for r, n in reasons.most_common()]
    lines += ["", "## Per task", "",
              "| task | name | verdict | relaxed | precision | argus kernels | sizes | ms | "
              "eager ms | compile ms | vs eager | vs compile | notes |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for j in sorted(judgments, key=lambda j: (j.level, j.problem_id)):
        verdict = _verdict(j)
        notes = []
        if j.degenerate:
            notes.append("degenerate: " + ", ".join(j.degenerate))
        if j.stochastic:
            notes.append("stochastic")
        notes.extend(j.suspect)
        lines.append(
            f"| {j.task} | {j.task_name} | {verdict} | {'pass' if j.correct_relaxed else 'fail'}"
            f" | {j.precision} | {j.argus_kernels} | {j.sizes or '-'} | {_ms(j.timing)} | "
            f"{_ms(j.eager)} | {_ms(j.compiled)} | {_x(j.speedup_eager)} | "
            f"{_x(j.speedup_compile)} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def to_json(judgments: list[Judgment], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    import dataclasses

    return {"meta": meta or {},
            "levels": [dataclasses.asdict(s) for s in summarize_levels(judgments)],
            "tasks": [j.to_json() for j in judgments]}


# ----------------------------------------------------------------------------- plot


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_plot(judgments: list[Judgment]) -> str:
    """Outcomes per level (stacked bars) and, when timed, speedups per task (log scale)."""
    levels = summarize_levels(judgments)
    colors = {"solved": "#2e7d32", "correct, not Argus": "#9e9d24",
              "not verifiable": "#8d6e63", "incorrect": "#c62828"}
    width, bar_h, gap = 760, 26, 12
    parts: list[str] = []
    y = 40
    parts.append('<text x="10" y="24" font-size="16" font-family="sans-serif">'
                 'KernelBench outcomes per level</text>')
    for s in levels:
        js = [j for j in judgments if j.level == s.level]
        counts = {
            "solved": sum(1 for j in js if j.solved),
            "correct, not Argus": sum(1 for j in js if j.correct and j.verifiable
                                      and not j.solved),
            "not verifiable": sum(1 for j in js if not j.verifiable),
            "incorrect": sum(1 for j in js if not j.correct and j.verifiable),
        }
        x = 90.0
        parts.append(f'<text x="10" y="{y + 18}" font-size="13" font-family="sans-serif">'
                     f'level {s.level}</text>')
        for name, n in counts.items():
            w = (width - 110) * n / max(1, len(js))
            if w > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                             f'fill="{colors[name]}"><title>{_esc(name)}: {n}</title></rect>')
                if w > 24:
                    parts.append(f'<text x="{x + 4:.1f}" y="{y + 18}" font-size="12" '
                                 f'fill="white" font-family="sans-serif">{n}</text>')
            x += w
        y += bar_h + gap
    lx = 90
    for name, color in colors.items():
        parts.append(f'<rect x="{lx}" y="{y}" width="12" height="12" fill="{color}"/>'
                     f'<text x="{lx + 16}" y="{y + 11}" font-size="12" '
                     f'font-family="sans-serif">{_esc(name)}</text>')
        lx += 170
    y += 30
    timed = [j for j in judgments if j.speedup_eager is not None]
    if timed:
        parts.append(f'<text x="10" y="{y + 14}" font-size="16" font-family="sans-serif">'
                     f'Speedup per task (log scale; green: vs eager, blue: vs torch.compile)'
                     f'</text>')
        y += 30
        lo, hi = math.log10(0.1), math.log10(10.0)
        scale = (width - 200) / (hi - lo)
        x0 = 160 + (0 - lo) * scale
        top = y
        for j in sorted(timed, key=lambda j: (j.level, j.problem_id)):
            parts.append(f'<text x="10" y="{y + 10}" font-size="10" font-family="monospace">'
                         f'{_esc(j.task)} {_esc(j.task_name[:14])}</text>')
            for k, (val, color) in enumerate(((j.speedup_eager, "#2e7d32"),
                                              (j.speedup_compile, "#1565c0"))):
                if val is None or val <= 0:
                    continue
                xv = 160 + (min(max(math.log10(val), lo), hi) - lo) * scale
                xa, xb = sorted((x0, xv))
                parts.append(f'<rect x="{xa:.1f}" y="{y + 5 * k}" width="{max(1, xb - xa):.1f}" '
                             f'height="5" fill="{color}"><title>{val:.2f}x</title></rect>')
            y += 13
        parts.append(f'<line x1="{x0:.1f}" y1="{top - 4}" x2="{x0:.1f}" y2="{y}" '
                     f'stroke="black"/>')
        for tick in (0.1, 0.5, 1, 2, 10):
            xt = 160 + (math.log10(tick) - lo) * scale
            parts.append(f'<text x="{xt:.1f}" y="{y + 14}" font-size="10" '
                         f'font-family="sans-serif" text-anchor="middle">{tick}x</text>')
        y += 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" '
            f'viewBox="0 0 {width} {y + 10}"><rect width="100%" height="100%" fill="white"/>'
            + "".join(parts) + "</svg>\n")


def _png_plot(judgments: list[Judgment], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    timed = sorted((j for j in judgments if j.speedup_eager is not None),
                   key=lambda j: (j.level, j.problem_id))
    if not timed:
        return False
    fig, ax = plt.subplots(figsize=(max(6, len(timed) * 0.18), 4))
    xs = range(len(timed))
    ax.bar([x - 0.2 for x in xs], [j.speedup_eager for j in timed], 0.4, label="vs eager")
    ax.bar([x + 0.2 for x in xs], [j.speedup_compile or 0 for j in timed], 0.4,
           label="vs torch.compile")
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs), [j.task for j in timed], rotation=90, fontsize=6)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_reports(judgments: list[Judgment], out_dir: Path | str,
                  meta: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write report.md, report.json and report.svg (+ report.png with matplotlib)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"time": time.time(), **(meta or {})}
    paths = {"markdown": out / "report.md", "json": out / "report.json",
             "svg": out / "report.svg"}
    paths["markdown"].write_text(markdown(judgments, meta))
    paths["json"].write_text(json.dumps(to_json(judgments, meta), indent=1))
    paths["svg"].write_text(svg_plot(judgments))
    if _png_plot(judgments, out / "report.png"):
        paths["png"] = out / "report.png"
    return paths
