"""test_conv_raster_split.py, then test_tile_digit_split.py, in one process: the seeded raster
bug's store.once query (a counterexample exists) must still be refuted, within seconds.

z3's search depends on the ids of the terms a process made before (an id freed is reused), so
the first file changed the search of the second's `raster_full_groups` queries. In that order,
the portfolio's purify-arith attempt (solver._prove) spent minutes in z3's Diophantine handler,
which neither counts resource units nor polls the wall-clock backstop: pytest hung (each file
alone: 2-8 s). A query a quick attempt already found satisfiable now goes to the plain solver
first (solver._portfolio_order); docs/verify.md "A counterexample known to exist goes to the
plain solver first"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import z3

from argus.verify import solver

ROOT = Path(__file__).resolve().parents[2]
# the two files run in ~6 s CPU on the 2-core machine; the base tree hung > 5 minutes
LIMIT_S = 150


def test_the_raster_gap_is_refuted_after_the_conv_raster_tests():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "tests/verify/test_conv_raster_split.py", "tests/verify/test_tile_digit_split.py"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=LIMIT_S)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the two files did not finish in {LIMIT_S} s (in that order): "
                             f"{(e.stdout or b'')[-2000:]!r}") from None
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "9 passed" in proc.stdout, tail


def test_a_known_counterexample_of_a_nonlinear_query_tries_the_plain_solver_first():
    nia = solver._portfolio("NIA")
    assert solver._portfolio_order(nia, "NIA", False) == nia          # as before
    first, second = solver._portfolio_order(nia, "NIA", True)
    assert first == (z3.Solver, 1.0) and second == (solver._purified, 0.25)
    lia = solver._portfolio("LIA")
    assert solver._portfolio_order(lia, "LIA", True) == lia           # linear: unchanged
    assert solver._portfolio_order(solver._portfolio("QF_BV"), "QF_BV", True) == \
        solver._portfolio("QF_BV")


def test_the_reordered_portfolio_still_refutes_and_minimizes():
    """A sat non-linear query through prove: violated, with the least counterexample."""
    n, p, a, b = z3.Ints("ro_n ro_p ro_a ro_b")
    premises = [n >= 1, p >= 1, a >= 0, b >= 0, a < n * p, b < n * p]
    claims = [("distinct", z3.Or(a == b, a / p != b / p))]
    out = solver.prove(premises, claims, minimize=[n, p], theory="NIA")
    assert out.status == "violated" and out.violated == ["distinct"]
    assert solver.value(out.model, n) == 1 and solver.value(out.model, p) == 2
