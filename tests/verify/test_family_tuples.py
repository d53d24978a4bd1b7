"""family.template(tuples=True): one template for a cluster whose numerals are not affine in
the member index (obligation.family_proofs). The FA3 d 256 kernels' wgmma.k-once "injective
with" pairs of 4 k-slices, sites (i, j) for i < j, read their two boxes at offsets 64 i and
64 j: 6 pairs that anti-unify pairwise but not as one affine family, each solved alone before
(h247). The numerals become a tuple of variables that take one member's values together
(a disjunction over the members), so a proof of the template proves every member; a false
member makes the template unproven and every member is asked itself.
"""

import z3

from argus.errors import Loc
from argus.verify import family, solver
from argus.verify import obligation as OB

PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def _pair(k: int, i: int, j: int, claim=None):
    """k-once's 'injective with' of k-slices i and j, as a toy: the k read by slice i at
    kk1 and by slice j at kk2 (64-wide boxes), each member with its own variables."""
    a, b = z3.Int(f"tuples!kk1_{k}"), z3.Int(f"tuples!kk2_{k}")
    prem = [a >= 0, a < 64, b >= 0, b < 64]
    claim = claim or (lambda a, b, oi, oj: a + oi != b + oj)
    return ([prem, [("distinct k", claim(a, b, 64 * i, 64 * j))]])


def _obs(pairs, claim=None):
    return [OB.Obligation("wgmma.k-once", Loc.unknown(), "k of wgmma: injective with",
                          *_pair(k, i, j, claim), lambda m, v: ("", {}))
            for k, (i, j) in enumerate(pairs)]


def test_pairs_are_no_affine_family_but_one_tuple_template():
    queries = [tuple(_pair(k, i, j)) for k, (i, j) in enumerate(PAIRS)]
    assert family.template(queries) is None   # 0, 0, 0, 64, 64, 128: not affine
    tmpl = family.template(queries, tuples=True)
    assert tmpl is not None
    assert solver.prove(*tmpl, proof_only=True).status == "proven"


def test_family_proofs_prove_the_pairs_with_one_query():
    obs = _obs(PAIRS)
    stats = solver.Stats()
    got = OB.family_proofs(obs, stats, None)
    # undone (no tuple template for a non-affine cluster): {} and 6 queries later
    assert sorted(got) == list(range(6)) and all(o.status == "proven" for o in got.values())
    assert stats.queries == 1


def test_a_false_member_is_not_proven_by_the_others():
    # slices (1, 1) read the same k at kk1 == kk2: not injective (k-once's own pair has a
    # same-instance disjunct; this toy has none), so the template is not proven and each
    # member is asked itself: that one violated, the others proven
    pairs = [(0, 1), (0, 2), (1, 1), (1, 3), (2, 3), (0, 3)]
    obs = _obs(pairs)
    assert OB.family_proofs(obs, solver.Stats(), None) == {}
    found = [OB.run(ob, solver.Stats(), None).status for ob in obs]
    assert found == ["proven", "proven", "violated", "proven", "proven", "proven"]


def test_a_members_numerals_stay_together():
    # a + 64 i < b + 64 j + 64 holds for i <= j (a < 64 <= b + 64) and fails for i > j:
    # a template that let each offset range over its own values apart (i = 2 with j = 1)
    # would not be proven; the disjunction ties each member's offsets together
    def claim(a, b, oi, oj):
        return a + oi < b + oj + 64
    pairs = [(0, 1), (1, 2), (0, 3), (2, 3)]
    queries = [tuple(_pair(k, i, j, claim)) for k, (i, j) in enumerate(pairs)]
    assert family.template(queries) is None
    tmpl = family.template(queries, tuples=True)
    assert solver.prove(*tmpl, proof_only=True).status == "proven"
    got = OB.family_proofs(_obs(pairs, claim), solver.Stats(), None)
    assert sorted(got) == [0, 1, 2, 3]
    # (2, 1) among them: false for a = 63, b = 0 (63 + 128 < 0 + 64 + 64 fails)
    bad = [(0, 1), (2, 1), (0, 3), (2, 3)]
    assert OB.family_proofs(_obs(bad, claim), solver.Stats(), None) == {}
    assert OB.run(_obs(bad, claim)[1], solver.Stats(), None).status == "violated"


def test_d256_attention_k_once_pairs_are_proven_by_templates(monkeypatch):
    """The FA3 d 256 default's k-once 'injective with' obligations (12: 6 pairs of the 4
    k-slices of QK^T, in two clusters of one shape) are proven by family templates."""
    import argus as ag
    from argus import verify
    from argus.compiler import lower_only
    from argus.kernels.attention import attention_kernel, default_schedule

    proven, asked = [], []
    orig = OB.family_proofs

    def spy(obs, stats, timeout_ms):
        out = orig(obs, stats, timeout_ms)
        pairs = [i for i, ob in enumerate(obs)
                 if ob.code == "wgmma.k-once" and "4 wgmma sites: injective with" in ob.subject]
        asked.extend(pairs)
        proven.extend(i for i in pairs if i in out)
        return out
    monkeypatch.setattr(OB, "family_proofs", spy)
    k = lower_only(attention_kernel(256, ag.bf16, False, False),
                   s=default_schedule(256, False, None))
    solver.clear_cache()
    report = verify.run(k)
    assert not report.errors and not report.unknowns
    assert len(asked) == 12 and proven == asked
