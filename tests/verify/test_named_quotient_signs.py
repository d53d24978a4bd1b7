"""The named-divisions attempt's sign facts and substituted equalities (argus/verify/solver.py
`_quotient_signs`, `_quick_named`; docs/verify.md "Named quotients' signs"):

  * each named pair (q, r) = (t / d, t % d) carries, where d > 0, the linear facts
    `t >= 0 => 0 <= q <= t, r <= t` and `t < 0 => q < 0`, which are theorems of z3's
    division (checked here) and let the linear part of the arithmetic read a quotient's sign
    without the product q * d (with every product opaque, the sign claim is proven from them
    alone, and not without them);
  * the named query is built after the premises' equalities between variables are
    substituted (`G == 1`: no `P * G` left in a divisor)."""

import z3

from argus.verify import solver


def _named(terms):
    solver.clear_cache()
    return solver._divisions_named(terms)


def test_sign_facts_are_theorems_of_division():
    t, d = z3.Ints("t d")
    (q_term, r_term), facts = _named([t / d, t % d])
    q, r = z3.Ints("argus!q0 argus!r0")
    assert q_term.eq(q) and r_term.eq(r)
    for fact in facts:
        s = z3.Solver()
        s.add(z3.Not(z3.substitute(fact, (q, t / d), (r, t % d))))
        assert s.check() == z3.unsat, fact


def test_sign_of_a_named_quotient_is_linear():
    """`x / P >= 0` from `x >= 0, P >= 1` with the named query's products opaque: the sign
    facts alone prove it (linear reasoning), the defining facts alone do not (the sign came
    from nlsat, through the product q * P)."""
    x, P, H = z3.Ints("x P H")
    claim = (x / P) * H + x % P >= 0
    (*prem, goal), facts = _named([P >= 1, x >= 0, H >= 1, claim])
    signs = solver._quotient_signs(x, P, *z3.Ints("argus!q0 argus!r0"))
    assert all(any(f.eq(g) for g in facts) for f in signs)

    def linear_proof(fs) -> bool:
        *ps, g = solver._opaque(prem + fs + [goal])
        s = z3.SimpleSolver()
        s.add(*ps)
        # the product's sign, as z3's non-linear lemmas give it, so that only the quotient's
        # sign is left to the facts
        m = g.arg(0).arg(0)
        s.add(z3.Implies(z3.And(m.arg(0) >= 0, m.arg(1) >= 0), m >= 0))
        s.add(z3.Not(g))
        return s.check() == z3.unsat
    assert linear_proof(facts)
    defining = [f for f in facts if not any(f.eq(g) for g in signs)]
    assert len(defining) == 4
    assert not linear_proof(defining)


def test_named_query_has_the_equalities_substituted():
    x, P, G = z3.Ints("x P G")
    seen = []
    real = solver._divisions_named
    solver._divisions_named = lambda terms: seen.append(list(terms)) or real(terms)
    try:
        solver.clear_cache()
        out = solver._quick_named([G == 1, P >= 1, x >= 0], [("q", x / (P * G) >= 0)],
                                  solver.NAMED_RLIMIT, solver.NAMED_RLIMIT, 0.0)
    finally:
        solver._divisions_named = real
    assert out is not None and out.status == "proven"
    names = set()
    for t in seen[0]:
        names |= {str(c) for c in z3.z3util.get_vars(t)}
    assert "G" not in names and {"x", "P"} <= names
