"""The shape of the conv receptive-field query (argus/kernels/conv.py _receptive_field, a tag
assertion; docs/verify.md "Conv receptive field: query size"), on the packed-taps kernel
(ConvSchedule.taps_per_slice=4: one assertion per atom, the costliest of the conv kernels'):

  * one read per A element: the assertion names its view once per field (a.tap, a.oh, a.nh,
    ...), and check_asserts reads each element once, so the query holds one writer instance
    (before: 37, one a field access, each a copy of the stage's 8-box disjunction: 220 KB of
    SMT-LIB a query against 17 KB);
  * the tap's filter row is the producer's term ((tap % (R * S)) // S, the copy tags fr/fs,
    pinned by tap == fr * S + fs), not a division of the assertion's own (a.tap // S).

The verdicts are the mutation tests' (tests/mutations/test_conv_mutations.py): these check
only that the query stays the small one."""

import z3

from argus.compiler import lower_only
from argus.kernels import conv as K
from argus.kernels.conv import ConvGeometry, ConvSchedule
from argus.verify import check_asserts
from argus.verify.model import Model


def _terms(roots):
    seen, out = set(), []
    stack = list(roots)
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        out.append(t)
        stack.extend(t.children())
    return out


def _packed_assertions():
    k = lower_only(K.conv_kernel.__wrapped__(), geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, 1, 16),
                   s=ConvSchedule(bm=128, bn=64, bw=64, stages=2, bk=16, taps_per_slice=4))
    obs, finds = check_asserts.obligations(Model(k))
    assert not finds, [f.message for f in finds]
    assert [ob.code for ob in obs] == ["tag.assert"] * 4      # one a packed atom
    return obs


def test_receptive_field_reads_each_element_once():
    for ob in _packed_assertions():
        terms = _terms(list(ob.premises) + [c for _, c in ob.claims])
        writers = {str(t) for t in terms
                   if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED
                   and "@w!" in str(t)}
        assert len(writers) == 1, sorted(writers)


def test_receptive_field_divides_the_tap_once():
    for ob in _packed_assertions():
        by_s = [t for t in _terms([c for _, c in ob.claims])
                if z3.is_app(t) and t.decl().kind() == z3.Z3_OP_IDIV
                and z3.is_int_value(t.arg(1)) and t.arg(1).as_long() == 3]
        assert by_s, "no filter-row division in the query"
        # every tap // S is the producer's (tap % 9) // 3, none the assertion's own
        assert all(z3.is_app(t.arg(0)) and t.arg(0).decl().kind() == z3.Z3_OP_MOD
                   for t in by_s), [str(t)[:120] for t in by_s
                                    if t.arg(0).decl().kind() != z3.Z3_OP_MOD]


def _query_sizes(schedule, geom=ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)):
    k = lower_only(K.conv_kernel.__wrapped__(), geom=geom, s=schedule)
    obs, finds = check_asserts.obligations(Model(k))
    assert not finds, [f.message for f in finds]
    sizes = []
    for ob in obs:
        s = z3.Solver()
        s.add(*ob.premises)
        s.add(z3.Not(z3.And([c for _, c in ob.claims])))
        sizes.append(len(s.sexpr()))
    return sizes


def test_narrow_box_query_holds_one_box():
    """A narrow per-row box's assertion (bw 16: one a box, 4 a warpgroup's rows) names the
    box's rows (rows_of), and its record keeps the writers that can hold them (box j of
    either warpgroup: check_asserts._pruned), so each query is about the size of the bw 64
    kernel's (one box a warpgroup): 7.4-8.3 against 7.4 KB of SMT-LIB; with all 8 boxes'
    writers 14.1 KB."""
    wide = _query_sizes(ConvSchedule(bm=128, bn=64, bw=64, stages=2))
    narrow = _query_sizes(ConvSchedule(bm=128, bn=64, bw=16, stages=2, epilogue="tma"))
    assert len(wide) == 1 and len(narrow) == 4
    assert all(n < 1.5 * wide[0] for n in narrow), (wide, narrow)


def test_narrow_box_query_unpruned_is_larger(monkeypatch):
    """The guard above can fail: the records unpruned (every box's writer) are larger."""
    from argus.verify import check_asserts as CA
    monkeypatch.setattr(CA, "_pruned", lambda rec, idx, premises: rec)
    wide = _query_sizes(ConvSchedule(bm=128, bn=64, bw=64, stages=2))
    narrow = _query_sizes(ConvSchedule(bm=128, bn=64, bw=16, stages=2, epilogue="tma"))
    assert all(n > 1.5 * wide[0] for n in narrow), (wide, narrow)


def test_3d_assertion_is_split_per_writer_and_2d_is_not():
    """check_asserts._by_writer: the 3-d receptive field ((n * D + d) * H + h: degree 3) is
    one claim per writer of the element (both warpgroups' boxes), asked one query each
    (Obligation.separately); as one claim it ran out of 5M units. The 2-d one (image * H:
    degree 2) stays one claim (as fast or faster joined)."""
    g3d = ConvGeometry(3, 3, 1, 2, 1, 1, 1, 1, groups=1, cg_padded=64, t=3, stride_d=2,
                       pad_d=1, dil_d=1)
    k = lower_only(K.conv_kernel.__wrapped__(), geom=g3d,
                   s=ConvSchedule(bm=128, bn=64, bw=64, stages=2))
    obs, finds = check_asserts.obligations(Model(k))
    assert not finds and len(obs) == 1
    (ob,) = obs
    assert ob.separately and len(ob.claims) == 2, (ob.separately, len(ob.claims))
    assert check_asserts._degree(ob.claims[0][1]) == 3
    # each claim is `case => claim with the case's covers resolved`, the cases differ
    assert all(z3.is_implies(c) for _, c in ob.claims)
    assert not z3.eq(ob.claims[0][1].arg(0), ob.claims[1][1].arg(0))
    assert not z3.eq(ob.claims[0][1].arg(1), ob.claims[1][1].arg(1))
    for ob in _packed_assertions():
        assert not ob.separately and len(ob.claims) == 1
        assert check_asserts._degree(ob.claims[0][1]) == 2


def test_separate_claims_report_the_violated_one():
    """Obligation.separately: each claim its own query; a violated one is reported by name
    with its model (a counterexample of the conjunction), all proven is proven."""
    from argus.verify import obligation as OB
    from argus.verify import solver

    x = z3.Int("x")

    def ob(claims):
        return OB.Obligation("tag.assert", None, "t", [x >= 0, x < 10], claims,
                             lambda m, v: (f"x = {m.eval(x)}", {"violated": v}),
                             separately=True)
    good = OB._prove_each(ob([("a", x >= 0), ("b", x < 10)]), solver.Stats(), None)
    assert good.status == "proven"
    bad = OB._prove_each(ob([("a", x >= 0), ("b", x < 5)]), solver.Stats(), None)
    assert bad.status == "violated" and bad.violated == ["b"]
    assert bad.model.eval(x).as_long() >= 5
