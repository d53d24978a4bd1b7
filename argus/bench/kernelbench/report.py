"""Reports of a suite run: per-level metrics, a per-task table, as markdown, JSON and a plot.

Per level (denominator: every task of the level that the run covered, as upstream fast_p):
- fast_0:             solved share (strict track, verifiable task, not shown to be PyTorch's)
- fast_1 vs eager:    solved and faster than eager PyTorch
- fast_1 vs compile:  solved and faster than torch.compile
- geomean speedups over solved tasks with timings, vs eager, vs eager with TF32 off and vs
  torch.compile. Eager runs at PyTorch's default flags (cuDNN fp32 convolutions in TF32), which
  would fail the strict track itself; eager with TF32 off (fp32-accurate cuDNN / cuBLAS) is the
  strict track's like-for-like baseline, reported beside it (baselines.py)
- beside them: strict-correct share with any code, the relaxed track (KernelBench's old 1e-2
  rule), degenerate and stochastic tasks (listed, never counted as solved), precision classes.

The plot is an SVG written with the standard library (outcomes per level, and per-task speedups
when there are timings), drawn by matplotlib as SVG and PNG.

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

from argus.bench.kernelbench.baselines import same_as_eager
from argus.bench.kernelbench.judge import REASONS, Judgment
from argus.bench.timing import geomean


@dataclass(frozen=True)
class LevelSummary:
    level: int
    tasks: int
    solved: int
    correct_any_code: int
    solved_relaxed: int     # Judgment.solved_relaxed: the relaxed track's solved count
    fast_0: float
    fast_1_eager: float | None
    fast_1_compile: float | None
    geomean_eager: float | None
    geomean_compile: float | None
    timed: int
    geomean_eager_notf32: float | None = None    # strict-solved tasks vs eager, TF32 off
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
        timed_n = [j for j in solved if j.speedup_eager_notf32 is not None]
        f1e = sum(1 for j in timed if j.speedup_eager and j.speedup_eager > 1) / n if timed \
            else None
        f1c = sum(1 for j in timed_c if j.speedup_compile and j.speedup_compile > 1) / n \
            if timed_c else None
        out.append(LevelSummary(
            level=level, tasks=n, solved=len(solved),
            correct_any_code=sum(1 for j in js if j.correct and j.verifiable),
            solved_relaxed=sum(1 for j in js if j.solved_relaxed),
            fast_0=len(solved) / n if n else 0.0, fast_1_eager=f1e, fast_1_compile=f1c,
            geomean_eager=_finite(geomean([j.speedup_eager for j in timed])) if timed else None,
            geomean_compile=_finite(geomean([j.speedup_compile for j in timed_c]))
            if timed_c else None,
            timed=len(timed),
            geomean_eager_notf32=_finite(geomean([j.speedup_eager_notf32 for j in timed_n]))
            if timed_n else None,
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
    if same_as_eager(t):
        return "= eager"        # TF32 changes no output bit: eager's number stands for it
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
                 ">= 5 mixed input sets; relaxed = KernelBench's old allclose(1e-2). "
                 "Baselines, on the same card and software (measured here or cached per GPU, "
                 "torch, CUDA and task file): eager = PyTorch eager at its default flags "
                 "(cuDNN runs fp32 convolutions in TF32, not fp32-accurate); eager TF32 off = "
                 "the same with torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 "
                 "False (fp32-accurate: the strict track's like-for-like baseline; `= eager` "
                 "where TF32 changes no output bit); torch.compile in default mode. The "
                 "geomeans are over tasks solved on the strict track.")
    if any(j.sizes.startswith("reduced") for j in judgments):
        lines.append("")
        lines.append("**Some tasks ran at reduced sizes on the CPU** (correctness only; see the "
                     "sizes column): these are not results at upstream sizes.")
    lines += ["", "## Per level", "",
              "| level | tasks | fast_0 (solved) | fast_1 vs eager | fast_1 vs torch.compile | "
              "strict: geomean vs eager | strict: geomean vs eager TF32 off | "
              "strict: geomean vs compile | correct, any code | relaxed track | "
              "degenerate | stochastic |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in levels:
        lines.append(
            f"| {s.level} | {s.tasks} | {_pct(s.fast_0)} ({s.solved}) | {_pct(s.fast_1_eager)} "
            f"| {_pct(s.fast_1_compile)} | {_x(s.geomean_eager)} | "
            f"{_x(s.geomean_eager_notf32)} | {_x(s.geomean_compile)} | "
            f"{s.correct_any_code} | {s.solved_relaxed} | {len(s.degenerate)} | "
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
              "eager ms | eager TF32 off ms | compile ms | vs eager | vs eager TF32 off | "
              "vs compile | notes |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
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
            f"{_ms(j.eager)} | {_ms(j.eager_notf32)} | {_ms(j.compiled)} | "
            f"{_x(j.speedup_eager)} | {_x(j.speedup_eager_notf32)} | "
            f"{_x(j.speedup_compile)} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def to_json(judgments: list[Judgment], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    import dataclasses

    return {"meta": meta or {},
            "levels": [dataclasses.asdict(s) for s in summarize_levels(judgments)],
            "tasks": [j.to_json() for j in judgments]}


# ----------------------------------------------------------------------------- plot


OUTCOME_COLORS = {"solved": "#2e7d32", "correct, not Argus": "#9e9d24",
                  "not verifiable": "#8d6e63", "incorrect": "#c62828"}


def figure(judgments: list[Judgment]):
    """Outcomes per level (stacked bars) and, when timed, speedups per task vs eager and
    torch.compile (log scale): one matplotlib Figure (no pyplot, no display needed)."""
    from matplotlib.figure import Figure

    levels = summarize_levels(judgments)
    timed = sorted((j for j in judgments if j.speedup_eager is not None),
                   key=lambda j: (j.level, j.problem_id))
    rows = 2 if timed else 1
    fig = Figure(figsize=(max(7.6, len(timed) * 0.2), 1.6 + 0.5 * len(levels)
                          + (3.6 if timed else 0)))
    axes = fig.subplots(rows, 1, squeeze=False,
                        height_ratios=[1 + 0.5 * len(levels)] + ([3.6] if timed else []))
    ax = axes[0][0]
    ax.set_title("KernelBench outcomes per level", fontsize=11)
    labels = [f"level {s.level}" for s in levels]
    left = [0.0] * len(levels)
    for name, color in OUTCOME_COLORS.items():
        counts = []
        for s in levels:
            js = [j for j in judgments if j.level == s.level]
            counts.append(sum(1 for j in js if _outcome(j) == name))
        bars = ax.barh(labels, counts, left=left, color=color, label=name)
        ax.bar_label(bars, labels=[str(n) if n else "" for n in counts], label_type="center",
                     color="white", fontsize=8)
        left = [a + b for a, b in zip(left, counts)]
    ax.invert_yaxis()
    ax.set_xlabel("tasks")
    ax.legend(fontsize=8, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    if timed:
        ax = axes[1][0]
        ax.set_title("Speedup per task (log scale)", fontsize=11)
        xs = range(len(timed))
        ax.bar([x - 0.2 for x in xs], [j.speedup_eager for j in timed], 0.4,
               color="#2e7d32", label="vs eager")
        ax.bar([x + 0.2 for x in xs], [j.speedup_compile or 0 for j in timed], 0.4,
               color="#1565c0", label="vs torch.compile")
        ax.set_yscale("log")
        ax.axhline(1.0, color="black", linewidth=0.8)
        # the judge also times a relaxed-only pass (its one strict failure `imprecise`): its
        # bar is the relaxed track's speed, marked so it never reads as a strict one's
        ax.set_xticks(list(xs), [f"{j.task} {j.task_name[:14]}"
                                 + ("" if j.correct else " (relaxed)") for j in timed],
                      rotation=90, fontsize=6)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _outcome(j: Judgment) -> str:
    if j.solved:
        return "solved"
    if not j.verifiable:
        return "not verifiable"
    return "correct, not Argus" if j.correct else "incorrect"


def write_reports(judgments: list[Judgment], out_dir: Path | str,
                  meta: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write report.md, report.json, report.svg and report.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"time": time.time(), **(meta or {})}
    paths = {"markdown": out / "report.md", "json": out / "report.json",
             "svg": out / "report.svg"}
    paths["markdown"].write_text(markdown(judgments, meta))
    paths["json"].write_text(json.dumps(to_json(judgments, meta), indent=1))
    paths["png"] = out / "report.png"
    fig = figure(judgments)
    for kind in ("svg", "png"):
        fig.savefig(paths[kind], dpi=120, bbox_inches="tight")
    return paths
