"""check_asserts._by_writer splits a tag assertion into one claim per writer of the elements it
reads (`case_i => claim_i`) and Obligation.separately proves them one query each. That is
sound only if the cases cover every writer combination and each claim_i is the claim under its
case: then the conjunction of the split claims is the claim itself. These tests check that
equivalence with z3 on synthetic records (one record of three writers, two records of two,
records sharing a cover) and, on the 3-d conv kernel's real obligation, that its cases are
exhaustive. Dropping a case (the last, the If spine's default branch) makes them fail."""

from __future__ import annotations

import z3

from argus.compiler import lower_only
from argus.kernels import conv as K
from argus.kernels.conv import ConvGeometry, ConvSchedule
from argus.verify import check_asserts
from argus.verify.model import Model
from argus.verify.tagdomain import Record


def _spine(covers, values):
    """A field as the writers' selection builds it: If(c0, v0, If(c1, v1, ... v_last))."""
    term = values[-1]
    for c, v in reversed(list(zip(covers[:-1], values[:-1]))):
        term = z3.If(c, v, term)
    return term


def _record(covers):
    return Record(provenance=tuple((c, f"writer {i}") for i, c in enumerate(covers)))


def _valid(f) -> bool:
    s = z3.Solver()
    s.set("timeout", 20_000)
    s.add(z3.Not(f))
    return s.check() == z3.unsat


def _setup(shared: bool = False):
    x, y, z, w = z3.Ints("x y z w")
    a = [z3.Int(f"a{i}") for i in range(3)]
    b = [z3.Int(f"b{i}") for i in range(2)]
    c = [x > 3, x < -2, y == 5]            # the covers of one record's writers (not disjoint)
    d = [c[0] if shared else z > 1, w >= 0]
    rec_a, rec_b = _record(c), _record(d)
    # degree 3 (a product of three non-numeral factors), so _by_writer splits it
    claim = _spine(c, a) * _spine(d, b) * z + y == w * 7
    return claim, [rec_a, rec_b]


def test_split_claims_are_the_claim():
    for shared in (False, True):
        claim, records = _setup(shared)
        claims = check_asserts._by_writer("c", claim, records)
        assert len(claims) == 3 * 2, len(claims)
        assert _valid(z3.And([f for _, f in claims]) == claim), shared


def test_a_dropped_case_is_not_the_claim():
    """The check above can fail: without the default branch's case the conjunction is weaker
    than the claim (a writer's value never asked about)."""
    claim, records = _setup()
    claims = check_asserts._by_writer("c", claim, records[:1])
    assert len(claims) == 3
    assert _valid(z3.And([f for _, f in claims]) == claim)
    assert not _valid(z3.And([f for _, f in claims[:-1]]) == claim)


def test_conv_3d_cases_are_exhaustive():
    """The 3-d receptive field's real obligation: its writer cases' conditions cover every
    assignment (their disjunction is valid), so the split claims prove the assertion."""
    g3d = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                       pad_d=1, dil_d=1)
    k = lower_only(K.conv_kernel.__wrapped__(), geom=g3d,
                   s=ConvSchedule(bm=128, bn=64, bw=64, stages=2))
    (ob,) = check_asserts.obligations(Model(k))[0]
    assert ob.separately and len(ob.claims) > 1
    conds = [c.arg(0) for _, c in ob.claims]
    assert all(z3.is_implies(c) for _, c in ob.claims)
    assert _valid(z3.Or(conds))
    assert not _valid(z3.Or(conds[:-1]))
