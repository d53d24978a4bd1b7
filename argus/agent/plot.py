"""The agent's plot of speed over iterations against the baselines, drawn by matplotlib and
written as SVG and PNG.

Speed is `reference_ms / time_ms` for every correct step (a dot), the running best as a step
line, failed steps as red crosses on the x axis, and each baseline as a dashed horizontal line.
The title says whether the times are measured or cost-model estimates. A matplotlib Figure is
used without pyplot: no global state, no display backend, safe in worker processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

BASELINE_COLORS = ("#888888", "#d9822b", "#7b52ab", "#2b8a3e")


def speed_figure(points: list[tuple[int, float | None]], baselines: dict[str, float], *,
                 title: str, ylabel: str):
    """points: (step, speed or None for a failure); baselines: label -> speed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.6, 4.2))
    ax = fig.add_subplot()
    ok = sorted((i, v) for i, v in points if v is not None)
    if ok:
        ax.scatter(*zip(*ok), s=16, alpha=0.55, color="#1971c2", label="candidate", zorder=3)
        steps, best, running = [], None, []
        for i, v in ok:
            best = v if best is None else max(best, v)
            steps.append(i)
            running.append(best)
        last = max([i for i, _ in points] + [steps[-1]])
        ax.step(steps + [last], running + [running[-1]], where="post", color="#1971c2",
                linewidth=2, label=f"best ({running[-1]:.3g})", zorder=2)
    failed = [i for i, v in points if v is None]
    if failed:
        ax.scatter(failed, [0] * len(failed), marker="x", color="#c92a2a", label="failed",
                   zorder=3, clip_on=False)
    for k, (label, v) in enumerate(sorted(baselines.items(), key=lambda kv: -kv[1])):
        ax.axhline(v, linestyle="--", color=BASELINE_COLORS[k % len(BASELINE_COLORS)],
                   label=f"{label} ({v:.3g})")
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.set_ylim(bottom=0)
    ax.grid(True, color="#e5e5e5")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def save(fig, paths: Iterable[Path]) -> list[Path]:
    """Write the figure to each path (the format from the suffix: .svg, .png)."""
    written = []
    for path in paths:
        fig.savefig(path, dpi=110, bbox_inches="tight")
        written.append(Path(path))
    return written


def write_speed_plots(points, baselines, stem: Path, *, title: str, ylabel: str) -> list[Path]:
    """stem.svg and stem.png of `speed_figure`."""
    fig = speed_figure(points, baselines, title=title, ylabel=ylabel)
    return save(fig, [stem.with_suffix(".svg"), stem.with_suffix(".png")])
