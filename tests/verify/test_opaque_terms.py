"""The solver's opaque proof attempt (solver._opaque, solver._opaque_proof and `_quick_proof`'s
`opaque`): a query with its non-linear terms replaced by uninterpreted functions of their
arguments is a generalization of the query, so its proof is a proof; it never decides a
violation or an unknown, and a vacuous proof stays refused."""

from __future__ import annotations

import z3

from argus.verify import solver


def _query():
    a, b, n = z3.Ints("a b n")
    f = z3.Function("tile_expert", z3.IntSort(), z3.IntSort())
    return a, b, n, f


def test_products_and_symbolic_divisions_become_opaque_functions():
    a, b, n, f = _query()
    t = f((8 * (a / b) + n) / 8) + a * b + (a % 8) + (a % b)
    (out,) = solver._opaque([t])
    text = str(out)
    assert "argus!div2(a, b)" in text and "argus!mul2(a, b)" in text
    assert "argus!mod2(a, b)" in text and "a%8" in text.replace(" ", "")
    # linear terms and divisions by numerals are kept: the same AST
    assert solver._opaque([8 * a + n / 8])[0].eq(8 * a + n / 8)


def test_equal_arguments_give_equal_opaque_terms():
    """One function per operator and signature: `a / b` twice is one term (congruence)."""
    a, b, n, f = _query()
    premises = [n >= 0, n < 8, b >= 1]
    claim = f((8 * (a / b) + n) / 8) == f(a / b)
    assert solver._opaque_proof(premises, claim, solver.OPAQUE_RLIMIT)


def test_a_claim_that_needs_the_products_arithmetic_is_not_proven_opaque():
    a, b, _, _ = _query()
    assert not solver._opaque_proof([], a * a >= 0, solver.OPAQUE_RLIMIT)
    assert not solver._opaque_proof([a >= 1, b >= 1], a * b >= 1, solver.OPAQUE_RLIMIT)


def test_opaque_attempt_proves_and_never_decides_a_violation(monkeypatch):
    """With the plain core given no budget before it (OPAQUE_AFTER = 1), a routing-shaped claim
    is proven by the opaque attempt; the same claim with n allowed to reach 8 is violated,
    decided by the full path with its counterexample; contradictory premises give the
    vacuous-proof unknown, not a proof."""
    a, b, n, f = _query()
    monkeypatch.setattr(solver, "OPAQUE_AFTER", 1)
    monkeypatch.setenv("ARGUS_VERIFY_CACHE", "0")
    seen = []
    inner = solver._opaque_proof

    def recorded(*args):
        seen.append(inner(*args))
        return seen[-1]
    monkeypatch.setattr(solver, "_opaque_proof", recorded)
    claim = [("routed", f((8 * (a / b) + n) / 8) == f(a / b))]
    out = solver.prove([n >= 0, n < 8, b >= 1], claim)
    assert out.status == "proven" and seen == [True]
    seen.clear()
    out = solver.prove([n >= 0, n < 9, b >= 1], claim, minimize=[n])
    assert out.status == "violated" and out.violated == ["routed"]
    assert out.model.eval(n).as_long() == 8 and seen == [False]
    seen.clear()
    out = solver.prove([n >= 0, n < 8, b >= 1, a / b > 5, a / b < 3], claim)
    assert out.status == "unknown" and "contradictory" in out.reason and seen == [True]


def test_a_premise_is_made_opaque_once():
    """The model's premises recur in every query of a kernel: their opaque images are kept
    (and emptied with the proof cache), and a term walked before gives the same image."""
    a, b, n, f = _query()
    solver.clear_cache()
    premise = f(a / b) >= n
    first = solver._opaque([premise, n * b > 0])
    assert premise.get_id() in solver._OPAQUE_TERMS
    again = solver._opaque([premise])
    assert again[0].eq(first[0]) and "argus!div2(a, b)" in str(again[0])
    solver.clear_cache()
    assert not solver._OPAQUE_TERMS


def test_only_claims_applying_a_function_to_non_linear_terms_get_the_attempt():
    """Routing claims (tile_expert of the raster's tile index) get the opaque attempt; claims
    comparing non-linear terms with no function around them (store.coords on a grouped
    raster) and functions of linear terms (a loaded scalar `L(0, 0)`) keep the plain path."""
    a, b, n, f = _query()
    loaded = z3.Function("loaded", z3.IntSort(), z3.IntSort(), z3.IntSort())
    assert solver._applies_to_nonlinear([f(8 * (a / b) + n) == f(a / b)])
    assert not solver._applies_to_nonlinear([a / b == n * b])
    assert not solver._applies_to_nonlinear([loaded(0, 0) * a == f(a + 1)])


def test_a_full_term_cache_evicts_without_losing_this_calls_images(monkeypatch):
    """_opaque's term cache is bounded: inserting a call's new terms may evict a term the same
    call found cached; its image was read before the insert (a KeyError inside prove before)."""
    a, b, n, _ = _query()
    monkeypatch.setattr(solver, "_OPAQUE_TERMS", type(solver._OPAQUE_TERMS)())
    monkeypatch.setattr(solver, "_PROOFS_MAX", 2)
    p1, p2, p3 = a * b, a / b, a % b + n * b
    solver._opaque([p1])
    solver._opaque([p2])
    out = solver._opaque([p1, p3])          # p3's insert evicts p1 (the oldest)
    assert "argus!mul2(a, b)" in str(out[0])
    assert "argus!mod2(a, b)" in str(out[1]) and "argus!mul2(n, b)" in str(out[1])
