"""obligation._clusters: the site families' grouping (an unrolled op's claims at its sites,
never consecutive). All queries one template when they anti-unify together; else one cluster a
subject (label) with FAMILY_MIN members or more and a template; the rest (rare subjects, or a
subject without one template) pooled with the first cluster of the rest whose first member
they anti-unify with, so a pair of one shape is asked once."""

import z3

from argus.verify import family
from argus.verify.obligation import _clusters


def _shape_a(k):      # x + k > k - 1 under x >= 0: numerals differ, one formula
    x = z3.Int("clusters!x")
    return ([x >= 0], [("a", x + k > k - 1)])


def _shape_b(k):      # another formula: a product
    y = z3.Int("clusters!y")
    return ([y >= 0, y < 8], [("b", y * 2 + k >= k)])


def _shape_c():       # a third, alone
    z = z3.Int("clusters!z")
    return ([z == 3], [("c", z % 2 == 1)])


def test_queries_of_one_formula_are_one_cluster_with_its_template():
    queries = [_shape_a(k) for k in range(4)]
    clusters, made = _clusters(queries, ["s"] * 4)
    assert clusters == [[0, 1, 2, 3]] and set(made) == {0}


def test_subjects_with_a_template_then_rare_ones_pooled_by_shape():
    assert family.FAMILY_MIN == 3
    queries = [_shape_a(0), _shape_b(1), _shape_a(1), _shape_a(2), _shape_b(5), _shape_c()]
    labels = ["wgmma", "ring.p0", "wgmma", "wgmma", "ring.p1", "ring.p2"]
    clusters, made = _clusters(queries, labels)
    # the wgmma subject's 3 sites: one template; the ring's points, one a subject: the two
    # of one shape pooled, the third alone (asked itself)
    assert clusters == [[0, 2, 3], [1, 4], [5]]
    assert set(made) == {0}
    assert family.template([queries[1], queries[4]]) is not None
    assert family.template([queries[1], queries[5]]) is None
