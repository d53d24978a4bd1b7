"""The verifier's tables keyed by z3 AST ids are per z3 context (`solver.context_table`): an
AST id is unique within one context only, and a verification run has a context of its own
(`solver.own_context`), so a caller that reads a run's terms after it (a test reading its
obligations' constants) looks them up beside the outer context's terms, whose ids collide
with theirs. Before, every lookup went to the one set of tables current then: a term of one
context found another context's entry under its id (its constants, its canonical renaming).
Each test builds terms of two contexts made the same way (fresh contexts number their terms
alike, so the ids collide by construction) and asks of the second what the first answered."""

from __future__ import annotations

import z3

from argus.verify import once_split, solver, tagdomain
from argus.verify.tagdomain import free_consts


def _run_terms(a: str, b: str):
    """`a + b > 0` and `a * 2 < b`, made inside a run's own context (the caller keeps them
    past the run, as a test keeps a run's obligations)."""
    with solver.own_context():
        x, y = z3.Int(a), z3.Int(b)
        return x + y > 0, x * 2 < y


def test_two_runs_terms_read_outside_them_get_their_own_constants():
    """The scenario found: obligations of two runs read after each (their contexts are
    fresh ones made alike, so the second run's terms have the first run's ids). Fails
    before: the second run's terms got the first run's constant names from the outer
    context's `_CONSTS`, where reading the first run's terms had put them."""
    first = _run_terms("first_a", "first_b")
    assert [free_consts(t) for t in first] == [{"first_a", "first_b"}] * 2
    second = _run_terms("second_u", "second_v")
    assert [t.get_id() for t in second] == [t.get_id() for t in first]   # the collision
    assert [free_consts(t) for t in second] == [{"second_u", "second_v"}] * 2
    assert once_split.consts(first[0]) == {"first_a", "first_b"}
    assert once_split.consts(second[0]) == {"second_u", "second_v"}
    # nothing of either run's context was kept in the outer tables
    assert not any(t.ctx is not z3.main_ctx() for t, _ in solver._CONSTS.values())
    assert not any(t.ctx is not z3.main_ctx() for t, _ in once_split._CONSTS.values())


def test_a_term_of_the_main_context_is_not_answered_from_another_contexts_entry():
    """The other direction: the outer tables keep a term of another context under its id;
    a main-context term with that id must not get its entry. Made so by building the
    same terms in two fresh contexts while one of them is z3's main one (a run)."""
    with solver.own_context():
        other = z3.Context()
        p = z3.Int("p_other", other) + z3.Int("q_other", other) > 0
        assert free_consts(p) == {"p_other", "q_other"}
    with solver.own_context():
        # a fresh main context, made as `other` was: the same ids for the same terms
        m = z3.Int("m_main") + z3.Int("n_main") > 0
        assert m.get_id() == p.get_id()
        assert free_consts(m) == {"m_main", "n_main"}
        assert free_consts(p) == {"p_other", "q_other"}


def _query(ctx, a: str, b: str):
    x, y = z3.Int(a, ctx), z3.Int(b, ctx)
    return [x >= 0, y > x], [("sum", x + y > 0)]


def test_canonical_renames_each_context_with_its_own_constants():
    """`canonical` of two alpha-equivalent queries of two contexts: the same text, each the
    query with its own constants renamed. Fails before: the second context's premises were
    found in `_CONSTS` under the first's ids, and the substitution of the first context's
    constants left the second's in place (or z3 refused the mixed asts)."""
    c1, c2 = z3.Context(), z3.Context()
    q1, q2 = _query(c1, "x1", "y1"), _query(c2, "x2", "y2")
    assert [p.get_id() for p in q1[0]] == [p.get_id() for p in q2[0]]   # the collision
    t1 = solver.canonical(*q1)
    t2 = solver.canonical(*q2)
    assert t1.ctx is c1 and t2.ctx is c2
    assert str(t1) == str(t2)
    assert free_consts(t2) == {"argus!c0", "argus!c1"}


def test_a_runs_outer_terms_keep_the_outer_tables():
    """A term made before a run and read during it is looked up in the tables the run put
    aside (its context's), not in the run's: the entry made outside is found, and nothing of
    the outer context enters the run's tables."""
    t = z3.Int("outer_a") + z3.Int("outer_b") > 0
    before = free_consts(t)
    outer_table = solver._CONSTS
    with solver.own_context():
        assert solver._CONSTS is not outer_table
        assert free_consts(t) == before == {"outer_a", "outer_b"}
        assert tagdomain.mentions(t, z3.Int("outer_a", t.ctx))
        assert not any(e[0].ctx is t.ctx for e in solver._CONSTS.values())
        assert solver.context_table(solver, "_CONSTS", t.ctx) is outer_table
    assert solver._CONSTS is outer_table
    assert t.get_id() in outer_table
