"""solver.prove(proof_only=True): for callers that read only whether a query is proven (a
family template, check_reduce's one-point question). A query the quick attempt refutes comes
back "violated" at once, with no model (none is searched for); a proven query, and a refuted
one asked without proof_only, are answered as before (the latter with its counterexample)."""

import z3

from argus.verify import solver


def test_a_refuted_query_is_violated_without_a_model_under_proof_only():
    x = z3.Int("proof_only!x")
    premises = [x >= 0, x < 10]
    claims = [("small", x < 5)]
    quick = solver.prove(premises, claims, proof_only=True)
    assert quick.status == "violated" and quick.model is None
    assert "proof_only" in quick.reason
    full = solver.prove(premises, claims, minimize=[x])
    assert full.status == "violated" and full.model is not None
    assert full.model.eval(x).as_long() == 5          # the least counterexample, minimized
    assert full.violated == ["small"]


def test_a_proven_query_is_the_same_with_or_without_proof_only():
    x, y = z3.Ints("proof_only!a proof_only!b")
    premises = [x >= 0, x < 10, y == 2 * x]
    claims = [("even bound", y < 20)]
    for proof_only in (False, True):
        out = solver.prove(premises, claims, proof_only=proof_only)
        assert out.status == "proven", (proof_only, out.reason)


def test_contradictory_premises_stay_unknown_under_proof_only():
    x = z3.Int("proof_only!c")
    out = solver.prove([x > 3, x < 2], [("anything", x == 7)], proof_only=True)
    assert out.status != "proven"                     # a vacuous proof is refused
