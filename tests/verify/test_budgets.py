"""Solver budgets are z3 resource units, never wall time (argus/verify/solver.py): a verdict
must not depend on how loaded the machine is. Checked two ways: no z3 solver the verifier
creates is given a wall-clock "timeout", and the answers are the same when the clock runs
10 s per reading (as on a machine too loaded to give the process any CPU)."""

import time

import z3

from argus import verify
from argus.verify import solver

QUERIES = [
    # proven by the quick attempt
    ([z3.Int("b_x") >= 0, z3.Int("b_x") < 8], [("x < 9", z3.Int("b_x") < 9)]),
    # violated: found, minimized and decoded by the full path
    ([z3.Int("b_y") >= 0, z3.Int("b_y") < 1 << 20], [("y < 1000", z3.Int("b_y") < 1000)]),
    # non-linear and hard: out of a small budget
    ([z3.Int("b_a") > 0, z3.Int("b_b") > 0, z3.Int("b_c") > 0],
     [("no FLT n=3", z3.Int("b_a") ** 3 + z3.Int("b_b") ** 3 != z3.Int("b_c") ** 3)]),
]


def _answers():
    solver.clear_cache()
    out = []
    for prem, claims in QUERIES:
        names = list({t.get_id(): t for p in prem for t in [p.arg(0)] if z3.is_const(t)}
                     .values())
        o = solver.prove(prem, claims, timeout_ms=20, minimize=names)
        out.append((o.status, tuple(o.violated),
                    tuple(solver.value(o.model, v) for v in names) if o.model else None))
    return out


def test_answers_do_not_depend_on_the_clock(monkeypatch):
    quiet = _answers()
    assert [a[0] for a in quiet] == ["proven", "violated", "unknown"]
    assert quiet[1][2] == (1000,)     # minimized
    clock = [0.0]

    def crawling():                   # every reading 10 s later than the last
        clock[0] += 10.0
        return clock[0]
    monkeypatch.setattr(time, "perf_counter", crawling)
    monkeypatch.setattr(time, "time", crawling)
    assert _answers() == quiet


def test_no_solver_gets_a_wall_clock_timeout(monkeypatch, examples):
    """Every z3 solver set up while verifying a kernel with pipelines, stores and a
    non-linear raster query: resource limits, each with only its wall-clock backstop."""
    from argus.compiler import lower_only

    gemm = examples("gemm")

    calls: list[tuple[str, object]] = []
    real = z3.Solver.set

    def record(self, *args, **keys):
        if len(args) >= 2:
            calls.append((str(args[0]), args[1]))
        calls.extend(keys.items())
        return real(self, *args, **keys)
    monkeypatch.setattr(z3.Solver, "set", record)
    solver.clear_cache()
    report = verify.run(lower_only(gemm.KERNEL))
    assert not report.errors
    limits = [v for k, v in calls if k == "rlimit"]
    assert limits
    # the only wall-clock timeouts are the backstops behind resource limits (solver.backstop_ms:
    # 20x the budget, for z3 checks that do not honour rlimit), never a budget of their own
    timeouts = [v for k, v in calls if k == "timeout"]
    allowed = {solver.backstop_ms(int(r)) for r in limits}
    assert all(t in allowed for t in timeouts), (timeouts, sorted(allowed))
    assert all(t >= solver.BACKSTOP_MIN_MS for t in timeouts)
