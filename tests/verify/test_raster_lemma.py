"""The raster's injectivity proven as a lemma over free sizes (obligation.Lemma,
check_stores._raster_lemma; docs/verify.md "Raster injectivity as a lemma over free sizes")."""

from __future__ import annotations

import z3

from argus.errors import Loc
from argus.verify import check_stores, solver
from argus.verify.obligation import Lemma, Obligation, run
from argus.verify.tagdomain import free_consts


def _ob(premises, claims, lemma) -> Obligation:
    return Obligation("store.coverage", Loc.unknown(), "test", premises, claims,
                      lambda m, violated: (f"violated {violated}", {}), tier="NIA",
                      lemma=lemma)


def test_a_proven_lemma_and_side_prove_the_obligation_in_two_queries():
    x, v = z3.Ints("x v")
    lem = Lemma((v >= 0,), (("a", v + 1 > 0),), ("a",), (("x >= 0", x >= 0),))
    stats = solver.Stats()
    solver.clear_cache()
    f = run(_ob([x >= 3], [("a", x + 1 > 0), ("b", x > 1)], lem), stats, None)
    assert f.status == "proven" and stats.queries == 2


def test_a_residual_violation_falls_back_to_the_obligation_itself():
    x, v = z3.Ints("x v")
    lem = Lemma((v >= 0,), (("a", v + 1 > 0),), ("a",), (("x >= 0", x >= 0),))
    f = run(_ob([x >= 0], [("a", x + 1 > 0), ("b", x > 5)], lem), solver.Stats(), None)
    assert f.status == "violated" and "b" in f.witness["violated"]


def test_an_unproven_lemma_or_side_condition_is_no_proof():
    x, v = z3.Ints("x v")
    # the lemma does not hold (v unconstrained): the obligation is queried itself (proven)
    wrong = Lemma((), (("a", v + 1 > 0),), ("a",), ())
    assert run(_ob([x >= 0], [("a", x + 1 > 0)], wrong), solver.Stats(), None).status \
        == "proven"
    # a side condition that fails: the obligation itself, violated, decides
    side = Lemma((v >= 0,), (("a", v + 1 > 0),), ("a",), (("x >= 0", x >= 0),))
    f = run(_ob([x >= -5], [("a", x + 1 > 0)], side), solver.Stats(), None)
    assert f.status == "violated"


def test_sizes_spelled_two_ways_are_one_variable_and_kernels_share_the_lemma():
    def lemma(kg, stem):
        i, j = z3.Int(f"{stem}i"), z3.Int(f"{stem}j")
        n = (kg + 64 - 1) / 64            # the premises' spelling
        m = (63 + kg) / 64                 # the claim's (simplified) spelling
        claim = z3.Or(i == j, i / m != j / m, i % m != j % m)
        prem = [i >= 0, i < n * 2, j >= 0, j < n * 2, kg >= 1, kg < 100]
        return check_stores._raster_lemma(prem, ("distinct units store distinct tiles",
                                                 claim), {str(i), str(j)})
    a = lemma(z3.Int("KG"), "a")
    sizes = set().union(*(free_consts(p) for p in a.premises)) - {"ai", "aj"}
    assert len(sizes) == 1 and "KG" not in sizes      # one variable, KG gone
    assert len(a.side) == 1 and free_consts(a.side[0][1]) == {"KG"}
    # another kernel's instance (other names) is the same query up to renaming
    b = lemma(z3.Int("KH"), "b")
    assert solver.canonical(a.premises, a.claims).eq(solver.canonical(b.premises, b.claims))
    assert solver.prove(a.premises, a.claims).status == "proven"


def test_contradictory_premises_stay_unknown_through_the_lemma():
    # the residual claims simplify to true (no premise read, none checked): the obligation
    # itself is queried and its vacuous proof is refused, as without the lemma
    x, v = z3.Ints("x v")
    lem = Lemma((v >= 0,), (("a", v + 1 > 0),), ("a",), (("true", z3.BoolVal(True)),))
    f = run(_ob([x >= 1, x <= 0], [("a", x + 1 > 0)], lem), solver.Stats(), None)
    assert f.status == "unknown"
