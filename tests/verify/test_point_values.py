"""The verifier's per-query fixed costs (docs/verify.md "Verifier speed: premises evaluated
once at a point, purified proofs' vacuity checks at a point, tag.assume grounds by the C API"):

* `solver.satisfied_by_recent_model` evaluates each premise on its own and remembers its value
  per (premise, values of its constants): a kernel's queries repeat its model's premises;
* `solver._vacuity` (the vacuity check after a purify-arith or portfolio proof) tries a recent
  model's point before it builds a solver;
* `Model.axiom_instances` finds the tag.assume grounds by a walk of the C API, in the order
  of the old walk of Python wrappers, and builds each instance once per model.

Structural: each fails on the parent commit f7029ba (no table, a solver built, no
`_opaque_grounds`)."""

from __future__ import annotations

import itertools

import z3

from argus.compiler import lower_only
from argus.verify import solver
from argus.verify.model import Model, _as_bool, _opaque_grounds
from tests.verify.test_tags_codegen import _gemm


def _remember(premises):
    s = z3.Solver()
    s.add(*premises)
    assert s.check() == z3.sat
    solver._remember_model(premises, s.model())


def test_point_values_are_remembered_per_premise():
    solver.clear_cache()
    x, y = z3.Ints("pv_x pv_y")
    base = [x >= 1, y >= x, x + y <= 10]
    _remember(base)
    # the model's own premises (or some of them) hold at it: nothing evaluated (h249)
    assert solver.satisfied_by_recent_model(base)
    assert solver.satisfied_by_recent_model(base[1:])
    assert not solver._POINT_VALUES
    # a premise the model's lack: only it is evaluated, once, and not again when asked again
    assert solver.satisfied_by_recent_model([x <= 9] + base)
    n = len(solver._POINT_VALUES)
    assert n == 1
    assert solver.satisfied_by_recent_model([x <= 9] + base)
    assert len(solver._POINT_VALUES) == n
    assert solver.satisfied_by_recent_model(base + [x <= 10])
    assert len(solver._POINT_VALUES) == n + 1
    # a premise false at the point answers nothing (the solver decides), and so do
    # contradictory premises, whatever was remembered
    assert not solver.satisfied_by_recent_model(base + [x >= 11])
    assert not solver.satisfied_by_recent_model([x >= 1, x <= 0])
    solver.clear_cache()
    assert not solver._POINT_VALUES
    assert not solver.satisfied_by_recent_model(base)


def test_vacuity_check_tries_a_recent_point_first(monkeypatch):
    solver.clear_cache()
    x, y = z3.Ints("vp_x vp_y")
    premises = [x >= 1, y >= x]
    # no point remembered: the plain core searches (and its model is not kept)
    assert solver._vacuity(premises, 10**6, z3.Solver) == z3.sat
    assert not solver._RECENT_MODELS
    _remember([x >= 1, y >= 1])

    def no_solver(*a, **k):
        raise AssertionError("a solver was built although a recent point satisfies them")
    monkeypatch.setattr(solver.z3, "SimpleSolver", no_solver)
    assert solver._vacuity(premises + [y <= 2 * y], 10**6, no_solver) == z3.sat
    monkeypatch.undo()
    # contradictory premises are never answered by a point: unsat stays the solver's answer
    assert solver._vacuity([x >= 1, x <= 0], 10**6, z3.Solver) == z3.unsat
    solver.clear_cache()


def _wrapper_walk(model, terms):
    """Model.axiom_instances as it was (f7029ba): a walk of Python wrappers."""
    grounds, seen, todo = [], set(), list(terms)
    while todo:
        t = todo.pop()
        if not isinstance(t, z3.ExprRef) or t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_app(t) and t.num_args() and t.decl().name() in model.tag_fns and \
                model.tag_fns[t.decl().name()][0] == "opaque":
            for a in t.children():
                if all(not z3.eq(a, g) for g in grounds):
                    grounds.append(a)
        todo.extend(t.children())
    return grounds, [_as_bool(model.eval_tag_expr(op.expr, op.args, xs=combo))
                     for op, _ in model.axioms if op.nvars
                     for combo in itertools.product(grounds, repeat=op.nvars)]


def test_axiom_instances_same_as_the_wrapper_walk_and_built_once():
    model = Model(lower_only(_gemm(True)))
    route = model.tag_fns["owner"][2]
    a, b = z3.Ints("ax_a ax_b")
    terms = [route(a) + route(b * 2) >= 0, z3.Exists([a], route(a + 1) == b),
             route(route(b)) == a, a + b > 0]
    grounds, want = _wrapper_walk(model, terms)
    assert len(grounds) == 5   # a, 2 b, a + 1 (under the quantifier), route(b), b
    assert [g.get_id() for g in _opaque_grounds(terms, {"owner"})] == \
        [g.get_id() for g in grounds]
    got = model.axiom_instances(terms)
    assert len(got) == len(want) == 5
    assert all(g.eq(w) for g, w in zip(got, want))
    again = model.axiom_instances(list(reversed(terms)))
    assert sorted(t.get_id() for t in again) == sorted(t.get_id() for t in got)
    assert all(any(t is s for s in got) for t in again)   # the same instances, not rebuilt
    assert model.axiom_instances([a + b > 0]) == []
