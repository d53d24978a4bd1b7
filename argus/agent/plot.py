"""A dependency-free SVG plot of speed over iterations against the baselines (and a PNG copy
when matplotlib happens to be installed).

Speed is `reference_ms / time_ms` for every correct step (a dot), the running best as a step
line, failed steps as red crosses on the x axis, and each baseline as a dashed horizontal line.
The title says whether the times are measured or cost-model estimates.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

W, H = 760, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 46, 52


def _nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def speed_svg(points: list[tuple[int, float | None]], baselines: dict[str, float], *,
              title: str, ylabel: str) -> str:
    """points: (step, speed or None for a failure); baselines: label -> speed."""
    n = max([p[0] for p in points] + [1])
    ys = [p[1] for p in points if p[1] is not None] + list(baselines.values())
    ymax = _nice_max(max(ys + [1.0]) * 1.08)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + pw * (i / n if n else 0)

    def y(v: float) -> float:
        return TOP + ph * (1 - v / ymax)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']
    for k in range(6):
        v = ymax * k / 5
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   'stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    ticks = sorted({round(n * k / min(n, 10)) for k in range(min(n, 10) + 1)})
    for t in ticks:
        out.append(f'<text x="{x(t):.1f}" y="{TOP + ph + 18}" text-anchor="middle">{t}</text>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + ph}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{TOP + ph}" y2="{TOP + ph}" '
               'stroke="black"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">iteration</text>')
    out.append(f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + ph / 2})">{escape(ylabel)}</text>')
    colors = ["#888888", "#d9822b", "#7b52ab", "#2b8a3e"]
    used: list[float] = []

    def label_y(want: float) -> float:
        """A label position at least 13 px away from the labels already placed."""
        yy = want
        while any(abs(yy - u) < 13 for u in used):
            yy += 13
        used.append(yy)
        return yy

    for i, (label, v) in enumerate(sorted(baselines.items(), key=lambda kv: -kv[1])):
        c = colors[i % len(colors)]
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="{c}" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{LEFT + pw + 6}" y="{label_y(y(v) + 4):.1f}" fill="{c}">'
                   f'{escape(label)} ({v:.3g})</text>')
    best, path = None, []
    for i, v in sorted(points):
        if v is None:
            cx, cy = x(i), TOP + ph
            out.append(f'<path d="M{cx - 4:.1f},{cy - 4:.1f} L{cx + 4:.1f},{cy + 4:.1f} '
                       f'M{cx - 4:.1f},{cy + 4:.1f} L{cx + 4:.1f},{cy - 4:.1f}" '
                       'stroke="#c92a2a" stroke-width="2"/>')
            continue
        out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3.5" fill="#1971c2" '
                   'fill-opacity="0.55"/>')
        if best is None or v > best:
            if best is not None:
                path.append(f"L{x(i):.1f},{y(best):.1f}")
            best = v
            path.append(("M" if len(path) == 0 else "L") + f"{x(i):.1f},{y(best):.1f}")
    if path:
        path.append(f"L{x(n):.1f},{y(best):.1f}")
        out.append(f'<path d="{" ".join(path)}" fill="none" stroke="#1971c2" '
                   'stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 6}" y="{label_y(y(best) - 8):.1f}" '
                   f'fill="#1971c2">best ({best:.3g})</text>')
    out.append(f'<text x="{LEFT + pw + 6}" y="{TOP + ph + 4}" fill="#c92a2a">x failed</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_png_if_possible(points, baselines, path: Path, *, title: str, ylabel: str) -> bool:
    """A PNG twin of the SVG, only when matplotlib is importable (never required)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - optional
        return False
    fig, ax = plt.subplots(figsize=(7.6, 4.2))
    ok = [(i, v) for i, v in points if v is not None]
    if ok:
        ax.scatter(*zip(*ok), s=14, alpha=0.6, label="candidate")
    bad = [i for i, v in points if v is None]
    if bad:
        ax.scatter(bad, [0] * len(bad), marker="x", color="red", label="failed")
    for label, v in baselines.items():
        ax.axhline(v, linestyle="--", label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
