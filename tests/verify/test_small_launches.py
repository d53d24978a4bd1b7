"""The bounded counterexample search behind an unknown non-linear query (solver step 5,
`solver._within_small_launches`): a model it returns is a real violation of the original
query, it finds violations that need a relation between launch parameters (not one small
value of each), it shows nothing outside its bounds, and `prove` reaches it only after the
unbounded query ran out of budget."""

import z3

from argus.verify import solver


def _row_block_query():
    """The seeded conv bug's shape in miniature: rows of a 4-row block at image * P + p, a
    block's rows past P not dropped, so with two images and P not a multiple of 4 block 0's
    row p >= P lands on image 1's row p - P. Units (image, block, row) and (image', block',
    row') store one row only if they are the same unit."""
    N, P = z3.Ints("N P")
    n1, b1, r1, n2, b2, r2 = z3.Ints("n1 b1 r1 n2 b2 r2")
    blocks = (P + 3) / 4

    def unit(n, b, r):
        return [n >= 0, n < N, b >= 0, b < blocks, r >= 0, r < 4]
    premises = [N >= 1, P >= 1] + unit(n1, b1, r1) + unit(n2, b2, r2)
    row1, row2 = n1 * P + b1 * 4 + r1, n2 * P + b2 * 4 + r2
    claims = [("distinct units store distinct rows",
               z3.Or(z3.And(n1 == n2, b1 == b2, r1 == r2), row1 != row2))]
    return premises, claims, [N, P]


def test_a_violation_needing_two_images_and_a_ragged_p_is_found_and_is_real():
    premises, claims, params = _row_block_query()
    out = solver._within_small_launches(premises, claims, solver.rlimit_of(1000), params,
                                        None, solver.rlimit_of(200))
    assert out is not None and out.status == "violated"
    m = out.model
    # the model satisfies the original query: premises and the negated claim
    assert all(z3.is_true(m.eval(p, model_completion=True)) for p in premises)
    assert z3.is_false(m.eval(claims[0][1], model_completion=True))
    n, p = (m.eval(x, model_completion=True).as_long() for x in params)
    assert n >= 2 and p % 4 != 0, (n, p)
    assert "in [-8, 8]" in out.reason and "minimized variable" in out.reason
    assert out.violated == ["distinct units store distinct rows"]


def test_nothing_is_shown_when_the_only_violation_is_past_the_bounds():
    x, y = z3.Ints("x y")
    premises = [x >= 1, y >= 1]
    # fails only for x * y > 2000: every parameter bounded by 32 keeps x * y <= 1024
    claims = [("small product", x * y <= 2000)]
    out = solver._within_small_launches(premises, claims, solver.rlimit_of(500), [x, y], None,
                                        solver.rlimit_of(100))
    assert out is None


def test_prove_keeps_the_unbounded_verdict_when_it_has_one():
    premises, claims, params = _row_block_query()
    out = solver.prove(premises, claims, minimize=params, theory="NIA")
    assert out.status == "violated"
    # found by the unbounded query: no bounded-search note
    assert "launch parameter" not in out.reason


def test_prove_tries_small_launches_after_an_unknown(monkeypatch):
    premises, claims, params = _row_block_query()
    real = solver._prove
    calls = []

    def unbounded_unknown(prem, cl, rlimit, minimize, stats, minimize_rlimit, theory, **kw):
        calls.append(len(prem))
        if len(prem) == len(premises):   # the unbounded query: out of budget
            return solver.Outcome("unknown", 1.0, reason="z3: canceled: out of budget")
        return real(prem, cl, rlimit, minimize, stats, minimize_rlimit, theory, **kw)
    monkeypatch.setattr(solver, "_prove", unbounded_unknown)
    monkeypatch.setattr(solver, "_quick_proof", lambda *a, **k: None)
    out = solver.prove(premises, claims, minimize=params, theory="NIA")
    assert out.status == "violated" and "after the unbounded query ran out" in out.reason
    assert calls[0] == len(premises) and calls[1] == len(premises) + len(params)
    # without launch parameters to bound there is nothing to search
    calls.clear()
    out = solver.prove(premises, claims, theory="NIA")
    assert out.status == "unknown" and calls == [len(premises)]
