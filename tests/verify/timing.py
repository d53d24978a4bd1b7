"""The verifier's CPU time as the time-bound tests measure it: verify.run with a cold proof
cache, up to `runs` times, stopping at the first run within the bound.

The bounds are stated for the 2-core development machine (issue 13's bar: <= 1 s CPU per
library kernel there). CPU time is steadier than wall time under other processes' load, but not
across machines: the project's CI machine ran the attention kernels at 1.8-2.4 s CPU where the
development machine takes 0.6-0.9 s (stop 29, commit cbde2ce). So a bound is scaled by how much
slower this process runs a fixed reference workload, a mix of the verifier's two kinds of work
(hashing small Python records, and z3 queries against a solver with pushed facts), than the
development machine runs it. The scale is never below 1: a faster machine keeps the stated bound."""

from __future__ import annotations

import functools
import time

import z3

from argus import verify
from argus.verify import solver

# the reference workload's CPU seconds on the development machine, least of 5 runs, idle
# (load average 0.2-0.6), 2026-12-03: 0.077-0.080
REFERENCE_DEV_CPU_S = 0.08


def _reference_workload() -> tuple[int, int]:
    records: dict[tuple, int] = {}
    for i in range(150_000):
        key = (i % 977, (i * 7) % 131, f"t{i % 53}")
        records[key] = records.get(key, 0) + len(key[2])
    xs = [z3.Int(f"timing_reference_{i}") for i in range(60)]
    s = z3.Solver()
    for a, b in zip(xs, xs[1:]):
        s.add(b >= a + 1, b <= a + 8)
    satisfiable = 0
    for i in range(0, 60, 3):
        s.push()
        s.add(xs[i] * 3 + xs[-1] < 2 * xs[0] + i)
        satisfiable += s.check() == z3.sat
        s.pop()
    return len(records), satisfiable


@functools.cache
def machine_slowdown(runs: int = 5) -> float:
    """How many times slower than the development machine this process runs the reference
    workload (least of `runs`), at least 1."""
    times = []
    for _ in range(runs):
        c0 = time.process_time()
        _reference_workload()
        times.append(time.process_time() - c0)
    return max(1.0, min(times) / REFERENCE_DEV_CPU_S)


def least_cpu_verify(kernel, runs: int, dev_bound_s: float):
    """(the last run's report, the CPU seconds of each run, the bound on this machine: the
    development machine's `dev_bound_s` times machine_slowdown())."""
    bound_s = dev_bound_s * machine_slowdown()
    times, report = [], None
    for _ in range(runs):
        solver.clear_cache()
        c0 = time.process_time()
        report = verify.run(kernel)
        times.append(time.process_time() - c0)
        if min(times) <= bound_s:
            break
    return report, times, bound_s
