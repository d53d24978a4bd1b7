"""Divisions by a symbolic size named in the solver's quick path (argus/verify/solver.py
`_divisions_named`, `_quick_named`; docs/verify.md "Verifier speed: divisions by a symbolic
size named"):

  * the rewrite: every `t / d`, `t % d` by a non-numeral d becomes a fresh pair (q, r), one
    per (t, d), with `t == q*d + r, 0 <= r < |d|` where d != 0, and nothing else changes;
  * exactness: a claim that is false stays unproven (the named query's model is never
    reported; the full path decides), and so does one that holds only by z3's reading of a
    division by zero;
  * the packed-taps conv (ConvSchedule.taps_per_slice=4): its four receptive-field tag
    assertions are proven on the named query, without the portfolio (at a8f90c7 each went
    through the plain core, purify-arith, a renamed draw and the portfolio: 0.8-0.9 s)."""

import z3

from argus.compiler import lower_only
from argus.kernels import conv as K
from argus.kernels.conv import ConvGeometry, ConvSchedule
from argus.verify import check_asserts, solver
from argus.verify.model import Model


def _divides_by_variable(term) -> bool:
    seen, stack = set(), [term]
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_app(t) and t.decl().kind() in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) \
                and not z3.is_int_value(t.arg(1)):
            return True
        stack.extend(t.children())
    return False


def test_divisions_named_one_pair_per_dividend_and_divisor():
    x, P, H = z3.Ints("x P H")
    solver.clear_cache()    # the pairs' names count from 0 again
    terms = [x / P * H + x % P >= 0, (x + 1) / P == x / P, x % 4 == 0]
    named, facts = solver._divisions_named(terms)
    assert not any(_divides_by_variable(t) for t in named)
    assert named[2].eq(terms[2])          # a division by a numeral is kept
    assert len(facts) == 8 * 2            # (x, P) and (x + 1, P): two pairs, 8 facts each
    # the facts pin the pair to z3's division wherever P != 0
    s = z3.Solver()
    q, r = z3.Ints("argus!q0 argus!r0")
    s.add(facts + [P != 0, z3.Or(q != x / P, r != x % P)])
    assert s.check() == z3.unsat


def test_named_query_proves_what_holds():
    x, P = z3.Ints("x P")
    solver.clear_cache()
    out = solver.prove([P >= 1, x >= 0], [("split", (x / P) * P + x % P == x),
                                          ("next", (x + 1) / P - x / P <= 1)])
    assert out.status == "proven", out.reason


def test_named_query_never_proves_what_fails():
    x, P = z3.Ints("x P")
    solver.clear_cache()
    out = solver.prove([P >= 2, x >= 0], [("last", x % P < P - 1)], minimize=[x, P])
    assert out.status == "violated"
    # z3 reads x / 0 as an unspecified function: nothing about it is provable, and the
    # named pair is free there
    out = solver.prove([P == 0, x >= 0], [("by zero", x / P + x % P * P == 0)])
    assert out.status != "proven"


def _packed_named_path() -> dict:
    """The packed-taps conv's receptive-field obligations proven from a cold cache: how many
    went to the portfolio, and the named attempts' outcomes (run in a fresh process by the
    test below)."""
    k = lower_only(K.conv_kernel.__wrapped__(), geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, 1, 16),
                   s=ConvSchedule(bm=128, bn=64, bw=64, stages=2, bk=16, taps_per_slice=4))
    obs, finds = check_asserts.obligations(Model(k))
    portfolio, named = [], []
    real_prove, real_named = solver._prove, solver._quick_named
    solver._prove = lambda *a, **kw: portfolio.append(1) or real_prove(*a, **kw)
    solver._quick_named = lambda *a, **kw: named.append(real_named(*a, **kw)) or named[-1]
    try:
        solver.clear_cache()
        statuses = [solver.prove(ob.premises, ob.claims).status for ob in obs]
    finally:
        solver._prove, solver._quick_named = real_prove, real_named
    return {"findings": [f.message for f in finds], "codes": [ob.code for ob in obs],
            "statuses": statuses, "portfolio": len(portfolio),
            "named": [o.status if o is not None else None for o in named]}


def test_packed_receptive_field_proven_on_named_query():
    """In a fresh process: z3's effort on a query depends on the process's history (its AST
    ids, what was hash-consed before), so which attempt proves a query can differ after
    thousands of other tests (the CI run of 1795500 sent one of the four to the portfolio,
    still proven; the same tree's clean-clone run and this file alone did not). The proof
    itself never depends on it; this test is about the path, so it runs from a cold start."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", "import json; from tests.verify.test_named_divisions import "
         "_packed_named_path as f; print(json.dumps(f()))"],
        cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["findings"], got["findings"]
    assert got["codes"] == ["tag.assert"] * 4
    assert got["statuses"] == ["proven"] * 4
    assert got["portfolio"] == 0, "a receptive-field query fell through to the portfolio"
    assert got["named"] == ["proven"] * 4
