"""Timing for the bench: the measuring primitives of argus.runtime.timing (one implementation,
re-exported here under the names the bench, the judge, the scripts and docs use), plus what the
bench reads from measurements: the side-stream judgement and the geometric mean of speedups.

The primitives live in runtime/ because argus.ops times its tuning candidates too, and ops sits
below the bench (ARCHITECTURE.md §2). Importing this module imports argus.runtime.timing, which
captures the genuine clocks (see its docstring).
"""

from __future__ import annotations

import math

from argus.runtime.timing import (
    CLOCK_CPU,
    CLOCK_CUDA,
    CPU_FLUSH_BYTES,
    L2_FLUSH_BYTES,
    MIN_TRIALS,
    Timing,
    graph_replay_us,
    measure,
    measure_alternating,
    summarize,
)

__all__ = ["CLOCK_CPU", "CLOCK_CUDA", "CPU_FLUSH_BYTES", "L2_FLUSH_BYTES", "MIN_TRIALS", "Timing",
           "geomean", "graph_replay_us", "measure", "measure_alternating", "side_stream_suspect",
           "summarize"]


def side_stream_suspect(timing: Timing, *, abs_ms: float = 0.02, rel: float = 0.25) -> bool:
    """True when much of the measured time ran outside the launch stream.

    A kernel that hides work on a side stream looks fast to events on the launch stream but not
    to whole-device timing. The margin (20 us or 25% of the stream time, whichever is larger)
    absorbs the jitter of the host-side synchronization that whole-device timing includes.
    """
    if timing.stream_median_ms is None:
        return False
    return timing.escaped_ms > max(abs_ms, rel * timing.stream_median_ms)


def geomean(values: list[float]) -> float:
    """Geometric mean of positive numbers (nan for an empty list)."""
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return float("nan")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
