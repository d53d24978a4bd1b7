"""The verifier's CPU time as the time-bound tests measure it: verify.run with a cold proof
cache, up to `runs` times, stopping at the first run within its bound.

The bounds are stated for the 2-core development machine (issue 13's bar: <= 1 s CPU per
library kernel there). CPU time is steadier than wall time under other processes' load, but not
across machines nor across moments of a shared one: the project's CI machine ran the attention
kernels at 1.8-2.4 s CPU, and a full-suite run here under five other test sessions at
2.0-2.3 s, where this machine takes 0.5-0.9 s alone or in the same full suite at lower load
(2026-12-03, CI of cbde2ce and two local runs). So every run is preceded by a fixed reference
workload, a mix of the verifier's two kinds of work (hashing small Python records; z3 queries
against a solver with pushed facts), and that run's bound is the stated one times how much
slower the reference just ran than on the development machine, never less than the stated one:
a slow or briefly crowded machine scales both, a faster one keeps the stated bound.

"""

from __future__ import annotations

import time

import z3

from argus import verify
from argus.verify import solver

# the reference workload's CPU seconds on the development machine, least of 8 runs at load
# average 1.8-2.3, 2026-12-03 12:15 UTC: 0.27-0.37
REFERENCE_DEV_CPU_S = 0.27


def _reference_workload() -> tuple[int, int]:
    records: dict[tuple, int] = {}
    for i in range(400_000):
        key = (i % 977, (i * 7) % 131, f"t{i % 53}")
        records[key] = records.get(key, 0) + len(key[2])
    xs = [z3.Int(f"timing_reference_{i}") for i in range(120)]
    s = z3.Solver()
    for a, b in zip(xs, xs[1:]):
        s.add(b >= a + 1, b <= a + 8)
    satisfiable = 0
    for i in range(0, 120, 3):
        s.push()
        s.add(xs[i] * 3 + xs[-1] < 2 * xs[0] + i)
        satisfiable += s.check() == z3.sat
        s.pop()
    return len(records), satisfiable


def slowdown_now() -> float:
    """How many times slower than the development machine this process runs the reference
    workload right now, at least 1."""
    c0 = time.process_time()
    _reference_workload()
    return max(1.0, (time.process_time() - c0) / REFERENCE_DEV_CPU_S)


def least_cpu_verify(kernel, runs: int, dev_bound_s: float):
    """(the last run's report, the CPU seconds of each run, each run's bound: the development
    machine's `dev_bound_s` times slowdown_now() measured just before that run). Stops at the
    first run within its bound; `within` tells whether one was."""
    times, bounds, report = [], [], None
    for _ in range(runs):
        bounds.append(dev_bound_s * slowdown_now())
        solver.clear_cache()
        c0 = time.process_time()
        report = verify.run(kernel)
        times.append(time.process_time() - c0)
        if times[-1] <= bounds[-1]:
            break
    return report, times, bounds


def within(times, bounds) -> bool:
    return any(t <= b for t, b in zip(times, bounds))


def runs_text(times, bounds) -> str:
    return ", ".join(f"{t:.2f} s (bound {b:.2f})" for t, b in zip(times, bounds))
