"""The verifier's fixed costs outside the solver (docs/verify.md, "Verifier speed: the FA3
attention defaults' overheads", h244):

* `verify.run` pauses Python's cyclic garbage collector for the run (`checker.
  collector_paused`) and restores it after, also when the run raises;
* `family.anti_unify` answers the pairwise "one formula?" questions of `families` and
  `obligation._clusters` by `template`'s walk without making a term, and agrees with
  `template` on every case of tests/verify/test_family.py's shapes;
* `solver.satisfied_by_recent_model` makes a point's numerals once per value (`_NUMERALS`).

Structural: each fails when its mechanism is undone (the collector left on, anti_unify
built as `template(...) is not None`, an IntVal made per constant per premise)."""

from __future__ import annotations

import gc

import pytest
import z3

import argus as ag
from argus import verify
from argus.verify import checker, family, solver
from tests.verify.test_family import _segment


@ag.kernel(threads=256)
def _add(X: ag.Tensor[4, 1024, ag.f32], Y: ag.Tensor[4, 1024, ag.f32],
         OUT: ag.Tensor[4, 1024, ag.f32], BN: int = 1024):
    (p0,) = ag.grid(4)
    ag.store(OUT, (p0, 0), ag.load(X, (p0, 0), (BN,)) + ag.load(Y, (p0, 0), (BN,)))


def test_run_pauses_the_collector_and_restores_it(monkeypatch):
    seen = []
    prove = solver.prove

    def spy(*a, **kw):
        seen.append(gc.isenabled())
        return prove(*a, **kw)
    monkeypatch.setattr(solver, "prove", spy)
    was = gc.isenabled()
    try:
        gc.enable()
        report = verify.run(_add)
        assert seen and not any(seen)        # off while the queries ran
        assert gc.isenabled()                # on again after
        assert not [f for f in report.findings if f.status != "proven"]
        gc.disable()                         # a caller's own setting is kept
        verify.run(_add)
        assert not gc.isenabled()
        gc.enable()
        with pytest.raises(ZeroDivisionError):
            with checker.collector_paused():
                assert not gc.isenabled()
                raise ZeroDivisionError
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def _family_cases():
    e = z3.Int("e")
    r, p = z3.Ints("r P")
    x, y = z3.Ints("x y")
    a, b = _segment(1, e), _segment(2, e)
    return [
        [_segment(k, z3.Int(f"e{k}")) for k in range(1, 8)],       # affine, own variables
        [_segment(k, z3.Int(f"e{k}")) for k in range(8)],          # a folded `+ 0`
        [([x >= 0], [("c", (z3.IntVal(128 * k) + y if k else y) + x >= 0)])
         for k in range(3)],
        [([x >= 0], [("c", (x + k if k else x) >= 0)]) for k in (0, 1, 3)],   # not affine
        [a, (b[0], [("pushed out of bounds", z3.If(r + 2 > p, 1, 0) == 0)])],  # operator
        [_segment(k, e) for k in (1, 2, 4)],                       # numerals not affine
        [a, (b[0], [("other", b[1][0][1])])],                      # claim names
        [_segment(1, e), _segment(5, e)],                          # any pair is affine
    ]


def test_anti_unify_agrees_with_template_and_makes_no_term(monkeypatch):
    cases = _family_cases()
    expected = [family.template(q) is not None for q in cases]
    assert expected == [True, True, True, False, False, False, False, True]

    def no_terms(*a, **kw):
        raise AssertionError("anti_unify made a term")
    monkeypatch.setattr(family, "fresh_int", no_terms)
    monkeypatch.setattr(family.z3, "FreshConst", no_terms)
    monkeypatch.setattr(family.z3, "Sum", no_terms)
    assert [family.anti_unify(q) for q in cases] == expected
    # families' runs, asked pairwise through anti_unify, are those of the shapes
    e = z3.Int("e")
    assert family.families([_segment(k, e) for k in range(8)]) == [list(range(8))]


def test_point_numerals_are_made_once_per_value():
    solver.clear_cache()
    solver._NUMERALS.clear()
    xs = z3.Ints("np_a np_b np_c np_d")
    premises = [xs[0] >= 2, xs[1] == xs[0], xs[2] >= xs[1], xs[3] == xs[2] + 0]
    s = z3.Solver()
    s.add(*premises, xs[0] == 2, xs[2] == 2)
    assert s.check() == z3.sat
    solver._remember_model(premises, s.model())
    # (a premise first that the model's premises lack: every premise is evaluated, h249)
    assert solver.satisfied_by_recent_model([xs[0] <= 100] + premises)
    # four constants, every one 2 at the point: one numeral, shared by the five premises
    assert len(solver._NUMERALS) == 1
    assert [z3.simplify(t).as_long() for t in solver._NUMERALS.values()] == [2]
    # a premise the point falsifies answers nothing (the solver searches, as before)
    assert not solver.satisfied_by_recent_model(premises + [xs[3] >= 3])
