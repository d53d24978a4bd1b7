"""The verifier's repeated work across the row segments of an unrolled store (docs/verify.md
"Verifier speed: recent models, remembered rewrites"): a vacuity check is first tried at a
recent model's point (solver.satisfied_by_recent_model), and once_split's rewrites of the
model's premises are remembered across the segments (once_split._memo). Structural guards on
the rowbox TMA-store conv (8 row segments), and the point check's unit cases."""

from __future__ import annotations

import z3

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.verify import family, once_split, solver


def _rowbox_tma():
    geom = ConvGeometry(3, 3, 1, 1, 2, 1, 2, 1, groups=1, cg_padded=128)
    s = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", rowbox=True, cluster_m=2,
                     num_sms=4)
    return lower_only(conv_kernel(), geom=geom, s=s)


def test_rowbox_tma_segments_share_models_and_rewrites(monkeypatch):
    """Most vacuity checks of the kernel are answered by a recent model's point, not by a
    solver search; the digit steps (`np0 % P` of the tile origin) are proven once for the 8
    segments, not once per segment. Fails without either mechanism (searches 40 of 40,
    digit proofs 8); the segments' pushed-out steps are one family query (family.py).
    """
    k = _rowbox_tma()
    searches, points, steps = [], [], []
    remember, point, proven = solver._remember_model, solver.satisfied_by_recent_model, \
        once_split._proven

    def rec_search(premises, m):
        searches.append(len(premises))
        return remember(premises, m)

    def rec_point(premises):
        ok = point(premises)
        points.append(ok)
        return ok

    def rec_step(prem, claims, *a, **kw):
        steps.append(claims[0][0])
        return proven(prem, claims, *a, **kw)
    monkeypatch.setattr(solver, "_remember_model", rec_search)
    monkeypatch.setattr(solver, "satisfied_by_recent_model", rec_point)
    monkeypatch.setattr(once_split, "_proven", rec_step)
    templated, template = [], family.template

    def rec_template(queries):
        templated.append(len(queries))
        return template(queries)
    monkeypatch.setattr(family, "template", rec_template)
    solver.clear_cache()
    report = verify.run(k)
    assert not report.errors and not report.unknowns
    assert "store.coverage" in {d.code for d in report.proven}
    hits = sum(points)
    assert hits >= 20 and hits >= 3 * len(searches), (hits, len(points), len(searches))
    assert steps.count("digit in [0, radix)") <= 2, steps
    # the 8 row segments' 'pushed out of bounds' steps: one template query for all 8
    # (once_split.drive_all, family.py; the first segment's folded `+ 0` read as `r + 0`
    # since h235, asked alone before: 7 templated then); none of them through
    # once_split._proven one at a time any more
    assert steps.count("pushed out of bounds") == 0, steps
    assert 8 in templated, str(templated)


def test_recent_model_point_is_checked_not_trusted():
    """A remembered point answers 'satisfiable' only where the premises hold at it."""
    solver.clear_cache()
    x, y = z3.Ints("vr_x vr_y")
    s = z3.SimpleSolver()
    prem = [x >= 5, y == x + 1]
    s.add(prem)
    assert s.check() == z3.sat
    solver._remember_model(prem, s.model())
    a, b = z3.Ints("vr_a vr_b")   # other names, same positions: the point transfers
    assert solver.satisfied_by_recent_model([a >= 3, b == a + 1])
    assert not solver.satisfied_by_recent_model([a >= 3, b == a + 2])
    assert not solver.satisfied_by_recent_model([a <= 0, a >= 1])   # contradictory
    solver.clear_cache()
    assert not solver.satisfied_by_recent_model([a >= 3, b == a + 1])


def test_generalize_shares_fresh_division_variables():
    """A division rewritten in an earlier call keeps its fresh variable, and every query gets
    the facts of the fresh variables it mentions (and only those)."""
    solver.clear_cache()
    blk, per, other = z3.Ints("vg_blk vg_per vg_other")
    inst = {"vg_blk"}
    base = [blk >= 0, per >= 1, other >= 0]
    p1, c1 = once_split.generalize(base + [blk / per < 4], [("c", blk % per + blk / per >= 0)],
                                     inst)
    p2, c2 = once_split.generalize(base + [blk / per < 4], [("c", blk / per >= 0)], inst)
    q1 = {str(v) for v in once_split.consts(z3.And(p1))} - {"vg_blk", "vg_per", "vg_other"}
    q2 = {str(v) for v in once_split.consts(z3.And(p2))} - {"vg_blk", "vg_per", "vg_other"}
    shared = q1 & q2
    assert len(shared) == 1, (q1, q2)   # blk / per: one variable in both queries
    r = (q1 - shared).pop()             # blk % per: only in the first query
    assert any(str(f) == f"{r} < vg_per" for f in p1), [str(f) for f in p1]
    assert not any(r in str(f) for f in p2), [str(f) for f in p2]


def test_pinned_search_keeps_the_shared_premises_values():
    """After a point misses, the constants of the premises shared with the last remembered
    query are pinned to its values and the rest searched: a model found that way answers
    'satisfiable'; pins that exclude every model answer nothing (the full search decides)."""
    solver.clear_cache()
    n, e = z3.Ints("vp_n vp_e")
    shared = [n >= 4, n <= 64]
    s = z3.SimpleSolver()
    first = shared + [e >= 0, e < n]
    s.add(first)
    assert s.check() == z3.sat
    solver._remember_model(first, s.model())
    pinned_n = s.model()[n].as_long()
    f = z3.Int("vp_f")
    # the point (n, e) of the first query puts f = e, which misses f >= n - 1 unless e is last
    later = shared + [f >= pinned_n - 1, f < n]
    assert solver._pinned_model_found(later, solver.default_rlimit())
    assert solver._RECENT_MODELS[0][1][0] == pinned_n   # n kept its value
    # satisfiable (n = f = pinned_n + 1), but not with n pinned: nothing answered, the full
    # search decides; a query sharing no premise pins nothing
    excluded = shared + [f == n, f >= pinned_n + 1]
    assert not solver._pinned_model_found(excluded, solver.default_rlimit())
    check = z3.SimpleSolver()
    check.add(excluded)
    assert check.check() == z3.sat
    assert not solver._pinned_model_found([f >= 0], solver.default_rlimit())


def _no_solver(monkeypatch):
    """Make every solver construction fail: what follows is answered without a search."""
    def refuse(*a, **kw):
        raise AssertionError("a solver was made")
    for name in ("SimpleSolver", "Solver", "SolverFor"):
        monkeypatch.setattr(z3, name, refuse)


def test_model_premises_take_the_models_values_and_are_not_evaluated(monkeypatch):
    """h249: a query premise that is one of a recent model's own premises (same term) is not
    evaluated, and the model's constants keep their values whatever the query's order; the
    other premises are still evaluated at the point (checked, not trusted). Fails with the
    old positional point (the reordered query below missed) or with the model's premises
    trusted beyond their own constants' values."""
    solver.clear_cache()
    x, y, z = z3.Ints("vk_x vk_y vk_z")
    s = z3.SimpleSolver()
    prem = [x == 3, y == 7]
    s.add(prem)
    assert s.check() == z3.sat
    solver._remember_model(prem, s.model())
    _no_solver(monkeypatch)
    # reordered, with a site premise first: by position y would take x's 3 (and z 3)
    assert solver.satisfied_by_recent_model([z >= 0, y == 7, x == 3])
    assert not solver._POINT_VALUES.get((y.get_id(), (7,))), "a model premise was evaluated"
    assert solver.satisfied_by_recent_model([y == 7])              # a subset: nothing evaluated
    assert len(solver._POINT_VALUES) == 1                         # (z >= 0 only)
    # a premise that is not the model's is evaluated at the model's values: false there
    assert not solver.satisfied_by_recent_model([x == 3, y == 8])
    assert not solver.satisfied_by_recent_model([x == 3, x + y == 11])
    assert not solver.satisfied_by_recent_model([y == 7, z > y, z < x])   # unsat
    # the model's premises with the new one's constants fresh: the point gives z the value
    # at its position (the model's third constant: none, so 0)
    assert solver.satisfied_by_recent_model([x == 3, y == 7, z == 0])
    assert not solver.satisfied_by_recent_model([x == 3, y == 7, z == 1])


def test_decided_sets_answer_subsets_and_supersets(monkeypatch):
    """h249 (`solver._known_answer`): a set the vacuity check found unsatisfiable makes every
    set containing its premises unsatisfiable, one found satisfiable every set of some of its
    premises satisfiable, without a solver; nothing else is answered (a set with a premise
    more than a satisfiable one, or a part of an unsatisfiable one, is searched). Fails with
    the table undone (a solver is made) or keyed unsoundly."""
    solver.clear_cache()
    x, y, z = z3.Ints("vd_x vd_y vd_z")
    contra = [x >= 1, y >= x, y <= 0]
    assert solver._vacuity(contra, 10**6, z3.Solver) == z3.unsat
    sat = [x >= 1, y >= x, z == y * y]    # non-linear: no point of a kept model answers it
    assert solver._vacuity(sat, 10**6, z3.Solver) == z3.sat
    assert not solver._RECENT_MODELS   # (`_vacuity` keeps no model: the set table answers)
    with monkeypatch.context() as mp:
        _no_solver(mp)
        assert solver._vacuity(contra + [z >= 0], 10**6, z3.Solver) == z3.unsat
        assert solver._vacuity([y <= 0, z == 2] + contra, 10**6, z3.Solver) == z3.unsat
        assert solver._vacuity(sat[1:], 10**6, z3.Solver) == z3.sat
        assert solver._model_search(None, sat[::-1], 10**6) == z3.sat
        assert solver._model_search(None, contra + [z == 1], 10**6) == z3.unsat
        assert solver.premises_satisfiable([z == y * y, x >= 1])
        assert solver._known_answer(contra[1:]) is None          # part of a contradiction
        assert solver._known_answer(sat + [z <= 0]) is None      # more than a satisfiable set
        assert solver._known_answer([x >= 1, y <= 0]) is None
    # the unanswered ones still get the solver's answer
    assert solver._vacuity(contra[1:], 10**6, z3.Solver) == z3.sat
    assert solver._vacuity(sat + [z <= 0, x >= 2], 10**6, z3.Solver) == z3.unsat
    solver.clear_cache()
    assert solver._known_answer(contra + [z >= 0]) is None

