"""family.template: one query for steps that differ in numerals affine in their index
(docs/verify.md, "Verifier speed: one query for a family of row-segment steps")."""

import dataclasses

import z3

from argus.verify import family, once_split, solver


def _segment(k: int, e: z3.ArithRef):
    """Row segment k's step, as check_stores asks it: row r + k of a tile of P rows is pushed
    out (flag 1) when r + k >= P; the element is in bounds when r + k + N * flag < N."""
    r, p, n = z3.Ints("r P N")
    row = r if k == 0 else r + k   # as z3.simplify leaves segment 0: no `+ 0`
    flag = z3.If(row >= p, 1, 0)
    prem = [r >= 0, r < 8, p >= 8, n >= p, e >= 0, e < 64, row + n * flag < n]
    return prem, [("pushed out of bounds", flag == 0)]


def test_template_of_affine_numerals_and_own_variables():
    qs = [_segment(k, z3.Int(f"e{k}")) for k in range(1, 8)]
    tmpl = family.template(qs)
    assert tmpl is not None
    prem, claims = tmpl
    assert [n for n, _ in claims] == ["pushed out of bounds"]
    # the members' own element variables became one fresh constant, the index a fresh j
    names = set().union(*(once_split.consts(p) for p in prem))
    assert not any(f"e{k}" in names for k in range(1, 8))
    assert solver.prove(prem, claims).status == "proven"
    # member k is the template at j = k - 1: the template with j pinned proves it too
    j = next(z3.Int(x) for x in names if x.startswith("family.j"))
    for k in range(7):
        assert solver.prove(prem + [j == k], claims).status == "proven"


def test_a_folded_zero_offset_is_read_as_plus_zero():
    # segment 0 folds its `+ 0` away (`r`, not `r + 0`): read as `r + 0`, it is member 0
    # of the 8 segments' template (h235; before, it was a query of its own)
    qs = [_segment(k, z3.Int(f"e{k}")) for k in range(8)]
    tmpl = family.template(qs)
    assert tmpl is not None
    prem, claims = tmpl
    assert solver.prove(prem, claims).status == "proven"
    names = set().union(*(once_split.consts(p) for p in prem))
    j = next(z3.Int(x) for x in names if x.startswith("family.j"))
    for k in range(8):
        assert solver.prove(prem + [j == k], claims).status == "proven"
    # the numeral on either side of the sum (`128 + x`, as a packed step's atoms spell it)
    x, y = z3.Ints("x y")
    q = [([x >= 0], [("c", (z3.IntVal(128 * k) + y if k else y) + x >= 0)]) for k in range(3)]
    assert family.template(q) is not None
    # read as `+ 0`, the offsets must still be affine in the index: 0, 1, 3 are not
    q = [([x >= 0], [("c", (x + k if k else x) >= 0)]) for k in (0, 1, 3)]
    assert family.template(q) is None


def test_structure_or_non_affine_numerals_give_no_template():
    e = z3.Int("e")
    # another shape: `r + 1 >= P` against `r + 1 > P` (another operator)
    a, b = _segment(1, e), _segment(2, e)
    r, p = z3.Ints("r P")
    other = (b[0], [("pushed out of bounds", z3.If(r + 2 > p, 1, 0) == 0)])
    assert family.template([a, other]) is None
    # numerals 1, 2, 4: not affine in the index
    assert family.template([_segment(k, e) for k in (1, 2, 4)]) is None
    # different claim names
    a, b = _segment(1, e), _segment(2, e)
    assert family.template([a, (b[0], [("other", b[1][0][1])])]) is None


def test_families_are_runs_of_one_shape():
    e = z3.Int("e")
    qs = [_segment(k, e) for k in range(8)]
    assert family.families(qs) == [[0, 1, 2, 3, 4, 5, 6, 7]]   # segment 0 too (`r + 0`)


def test_a_false_member_leaves_the_template_unproven():
    # without the in-bounds premise, r + 3 >= 8 is possible: member 3 is false
    r, p = z3.Ints("r P")
    qs = [([r >= 0, r < 8, p >= 8], [("pushed out of bounds", z3.If(r + k >= p, 1, 0) == 0)])
          for k in range(1, 4)]
    tmpl = family.template(qs)
    assert tmpl is not None
    assert solver.prove(*tmpl).status != "proven"


def test_drive_all_answers_like_drive():
    # the same generators driven one by one and as a family return the same values
    def steps(k):
        prem, claims = _segment(k, z3.Int(f"el{k}"))
        proven = yield prem, claims, {f"el{k}", "r"}, None
        return proven

    one = [once_split.drive(steps(k)) for k in range(8)]
    together = once_split.drive_all([steps(k) for k in range(8)])
    assert one == together == [True] * 8


def _assert_ob(k: int, bound: int = 8):
    """A tag assertion of atom k (numeral k in its claim), as check_asserts builds one."""
    from argus.errors import Loc
    from argus.verify.obligation import Obligation

    r, p = z3.Ints("r P")
    e = z3.Int(f"a{k}")
    prem = [r >= 0, r < bound, p >= 16, e >= 0, e < 4]
    return Obligation("tag.assert", Loc.unknown(), f"atom {k}", prem,
                      [("atom row", r + k + e < p)], lambda m, v: ("", {}))


def test_family_proofs_of_consecutive_assertions():
    from argus.verify import obligation as OB

    obs = [_assert_ob(k) for k in range(1, 5)]
    stats = solver.Stats()
    got = OB.family_proofs(obs, stats, None)
    assert sorted(got) == [0, 1, 2, 3] and all(o.status == "proven" for o in got.values())
    assert stats.queries == 1
    # false members (r + k + e < 16 fails for r = 11, e = 3, k >= 2): no family proof;
    # each obligation is then solved itself, atom 1 proven and the others violated
    obs = [_assert_ob(k, bound=12) for k in range(1, 5)]
    assert OB.family_proofs(obs, solver.Stats(), None) == {}
    found = [OB.run(ob, solver.Stats(), None).status for ob in obs]
    assert found == ["proven", "violated", "violated", "violated"]
    # a tag assertion's claim is named by its text, where the unrolled index shows: the
    # names label the claims only, so such members are one family too (h235)
    obs = [dataclasses.replace(ob, claims=[(f"r + {k} + e < P", c) for _, c in ob.claims])
           for k, ob in enumerate((_assert_ob(k) for k in range(1, 5)), 1)]
    stats = solver.Stats()
    got = OB.family_proofs(obs, stats, None)
    assert sorted(got) == [0, 1, 2, 3] and stats.queries == 1


def test_store_coords_families_and_premise_free_templates():
    from argus.errors import Loc
    from argus.verify import obligation as OB

    # the row segments' store.coords of an unrolled TMA-store epilogue are families too
    obs = [dataclasses.replace(_assert_ob(k), code="store.coords") for k in range(1, 5)]
    stats = solver.Stats()
    got = OB.family_proofs(obs, stats, None)
    assert sorted(got) == [0, 1, 2, 3] and stats.queries == 1
    # a template whose claim z3's simplifier turns into true holds for all values, as its
    # instances do: proven without reading (or checking) the premises, as each member would
    # be alone (solver.prove, step 0), here contradictory ones
    r = z3.Int("r")
    obs = [OB.Obligation("store.coords", Loc.unknown(), f"segment {k}", [r >= k, r < k],
                         [("same row", r + k == k + r)], lambda m, v: ("", {}))
           for k in range(4)]
    stats = solver.Stats()
    got = OB.family_proofs(obs, stats, None)
    assert sorted(got) == [0, 1, 2, 3] and stats.rewritten == 1
    assert [OB.run(ob, solver.Stats(), None).status for ob in obs] == ["proven"] * 4


def test_halo_tma_row_segments_store_coords_one_query(monkeypatch):
    """The halo TMA conv's 8 row segments' store.coords: one template query, every member's
    premises shown satisfiable (family.satisfiable: the model search of a member's own quick
    proof; by a recent model or the least point, 7 of 8 were not, ~80 ms each, and were
    asked themselves; by a recent model or a pinned search, 6 of 8 in some processes)."""
    from argus import verify
    from argus.compiler import lower_only
    from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
    from argus.verify import obligation as OB

    geom = ConvGeometry(3, 3, 1, 2, 1, 1, 2, 1, groups=2, cg_padded=128)
    s = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", halo=True, cluster_m=2,
                     num_sms=4)
    k = lower_only(conv_kernel(), geom=geom, s=s)
    proofs, family_proofs = [], OB.family_proofs

    def rec(obs, *a):
        out = family_proofs(obs, *a)
        proofs.append(sorted(obs[i].code for i in out))
        return out
    monkeypatch.setattr(OB, "family_proofs", rec)
    solver.clear_cache()
    report = verify.run(k)
    assert not report.errors and not report.unknowns
    # its wgmma sites' claims are families too (obligation.SITE_FAMILY_CODES); the 8 row
    # segments' store.coords are the ones this test is about
    assert len(proofs) == 1 and \
        [c for c in proofs[0] if c not in OB.SITE_FAMILY_CODES] == ["store.coords"] * 8, proofs
