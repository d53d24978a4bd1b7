"""The solver tiers: the C-like expression language (exact on ints and z3), the bit-vector
translation (exact or refused), honest outcomes (timeouts and vacuous premises are unknown),
minimized witnesses, and the F2 reduction-layout check."""

from __future__ import annotations

import random

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.verify import bvtier, exprs, solver

EXPRS = ["n % S", "(n / S) & 1", "((n / S) & 1) ^ 1", "n & 1", "(n + 1) % S",
         "n / S * S + n % S", "(n ^ 5) | 2", "n >= S && n < 2 * S || !(n == 3)"]


@given(n=st.integers(0, 10_000), S=st.integers(1, 9), text=st.sampled_from(EXPRS))
@settings(max_examples=300, deadline=None)
def test_expressions_mean_the_same_on_ints_and_z3(n, S, text):
    concrete = exprs.evaluate(text, exprs.Env({"n": n, "S": S}))
    N = z3.Int("n")
    sym = exprs.evaluate(text, exprs.Env({"n": N, "S": S}))
    got = z3.simplify(z3.substitute(sym if isinstance(sym, z3.ExprRef) else z3.IntVal(sym),
                                    (N, z3.IntVal(n))))
    if z3.is_bool(got):
        assert z3.is_true(got) == bool(concrete)
    else:
        assert got.as_long() == int(concrete)


def test_expression_errors_are_reported():
    with pytest.raises(exprs.ExprError):
        exprs.evaluate("n & m", exprs.Env({"n": z3.Int("n"), "m": z3.Int("m")}))
    with pytest.raises(exprs.ExprError):
        exprs.parse("n +")
    assert exprs.names(exprs.parse("%12 % S + n")) == {"%12", "S", "n"}


def _random_query(rng):
    x, y = z3.Ints("x y")
    bx, by = rng.randint(1, 2000), rng.randint(1, 2000)
    d = rng.choice([1, 2, 4, 64, 512])
    a, b = rng.randint(-5, 5), rng.randint(0, 300)
    prem = [x >= 0, x < bx, y >= -50, y < by]
    claim = (a * x + y) / d + (x % d) != b
    return prem, [("c", claim)]


def test_bit_vector_translation_agrees_with_integers():
    rng = random.Random(0)
    for _ in range(60):
        prem, claims = _random_query(rng)
        tr = bvtier.translate(prem, claims)
        assert tr is not None
        bp, bc, _, _, _, guarded = tr
        assert not guarded
        si, sb = z3.Solver(), z3.Solver()
        si.add(prem + [z3.Not(claims[0][1])])
        sb.add(bp + [z3.Not(bc[0][1])])
        assert si.check() == sb.check()


def test_bit_vector_translation_refuses_inexact_queries():
    x, y = z3.Ints("x y")
    assert bvtier.translate([x >= 0], [("c", x < 5)]) is None          # unbounded
    assert bvtier.translate([x >= 0, x < 9], [("c", x / 3 < 5)]) is None  # not a power of two
    assert bvtier.translate([x >= 0, x < 9, y >= 1, y < 4], [("c", x / y < 5)]) is None


def _guarded_query(bound: int = 8):
    """x bounded only where c != 1 (a read resolved against two writers: each writer's
    iteration is bounded only where it is the writer), and read only there."""
    x, c = z3.Ints("x c")
    prem = [c >= 0, c < 2, z3.Implies(c != 1, z3.And(x >= 0, x < 8))]
    return x, c, prem, [("c", z3.If(c == 1, 0, x) < bound)]


def test_variables_bounded_under_a_guard_are_translated_for_proofs():
    x, c, prem, claims = _guarded_query()
    tr = bvtier.translate(prem, claims)
    assert tr is not None and tr[5] == {"x"}
    rlimit = solver.default_rlimit()
    out = solver._prove_bv(prem, claims, rlimit, [], rlimit, None)
    assert out is not None and out.status == "proven" and out.theory.startswith("QF_BV"), out
    assert solver.prove(prem, claims).status == "proven"
    # a violation is decided by the integer tiers (a bit-vector model may give x a value its
    # guard would not allow): a real counterexample, x = 7 where c != 1
    _, _, prem, claims = _guarded_query(bound=7)
    assert solver._prove_bv(prem, claims, rlimit, [], rlimit, None) is None
    out = solver.prove(prem, claims)
    assert out.status == "violated", out
    assert out.model.eval(x).as_long() == 7 and out.model.eval(c).as_long() != 1


def test_variables_not_only_under_their_guard_stay_refused():
    x, c, prem, _ = _guarded_query()
    # x read where c == 1 too (its value matters there, unbounded): not exact
    assert bvtier.translate(prem, [("c", x < 8)]) is None
    assert solver.prove(prem, [("c", x < 8)]).status == "violated"
    # x in the guard itself
    assert bvtier.translate([c >= 0, c < 2, z3.Implies(x != 1, z3.And(x >= 0, x < 8))],
                            [("c", z3.If(x == 1, 0, x) < 8)]) is None
    # bounded by a term of a variable bounded nowhere
    y = z3.Int("y")
    assert bvtier.translate([c >= 0, c < 2, z3.Implies(c != 1, z3.And(x >= 0, x < y))],
                            [("c", z3.If(c == 1, 0, x - y) < 0)]) is None


def test_guarded_translation_agrees_with_integers_on_proofs():
    """Random guarded queries: whenever the bit-vector query is unsat, so is the integer one
    (the direction a proof needs)."""
    rng = random.Random(1)
    x, c, d = z3.Ints("x c d")
    for _ in range(80):
        k = rng.randint(1, 6)
        prem = [c >= 0, c < 3, d >= -4, d < 4,
                z3.Or(c == 1, z3.And(x >= rng.randint(-3, 0), x < rng.randint(1, 9)))]
        lhs = z3.If(c == 1, d, x * rng.choice([1, 2, 4]) + d) / rng.choice([1, 2, 4])
        claims = [("c", lhs < k)]
        tr = bvtier.translate(prem, claims)
        assert tr is not None and tr[5] == {"x"}
        bp, bc = tr[0], tr[1]
        si, sb = z3.Solver(), z3.Solver()
        si.add(prem + [z3.Not(claims[0][1])])
        sb.add(bp + [z3.Not(bc[0][1])])
        if sb.check() == z3.unsat:
            assert si.check() == z3.unsat
        else:
            assert si.check() == z3.sat   # here every guarded model has an in-range twin


def test_timeout_is_unknown_never_proven():
    # a non-linear query z3 cannot finish in 1 ms
    a, b, c = z3.Ints("a b c")
    prem = [a > 0, b > 0, c > 0]
    out = solver.prove(prem, [("no FLT n=3", a * a * a + b * b * b != c * c * c)], timeout_ms=1)
    assert out.status == "unknown"


def test_vacuous_premises_are_unknown():
    x = z3.Int("x")
    out = solver.prove([x > 3, x < 2], [("anything", x == 7)])
    assert out.status == "unknown" and "contradictory" in out.reason


def test_counterexamples_are_minimized():
    x, y = z3.Ints("x y")
    out = solver.prove([x >= 0, x < 1 << 20, y >= 0, y < 1 << 20],
                       [("x + y < 1000", x + y < 1000)], minimize=[x, y])
    assert out.status == "violated"
    assert (solver.value(out.model, x), solver.value(out.model, y)) == (0, 1000)


def test_row_reduction_layout_f2():
    """Quad shuffles (xor 1, 2) keep a wgmma accumulator row and see all its columns; xor 1
    alone misses columns; xor 4 mixes rows (INVARIANTS.md prototype check 4)."""
    import dataclasses

    from argus import dtypes
    from argus.ir import ops as O
    from argus.ir.core import Value
    from argus.ir.types import TileType
    from argus.verify import check_tiles

    @dataclasses.dataclass(frozen=True)
    class ReduceWithMasks(O.Reduce):
        shuffle_xor: tuple = (1, 2)

    src = Value(1, TileType(dtypes.f32, (64, 128), "wgmma_acc"))
    res = Value(2, TileType(dtypes.f32, (64, 1), "rowvec"))

    class _Site:  # only the op is read
        def __init__(self, op):
            self.op = op
    for masks, status in (((1, 2), "proven"), ((1,), "violated"), ((1, 2, 4), "violated")):
        op = ReduceWithMasks(res, src, "max", 1, shuffle_xor=masks)
        f = check_tiles._reduce_layout(None, _Site(op))
        assert f.status == status, (masks, f.message)
        assert f.tier == "F2"
    # N no power of two (block_n 192, 112, 80): no F2 layout, the same verdicts from the table
    for n in (192, 112, 80):
        wide = Value(1, TileType(dtypes.f32, (64, n), "wgmma_acc"))
        for masks, status in (((1, 2), "proven"), ((1,), "violated"), ((1, 2, 4), "violated"),
                              ((2,), "violated")):
            op = ReduceWithMasks(res, wide, "max", 1, shuffle_xor=masks)
            f = check_tiles._reduce_layout(None, _Site(op))
            assert (f.status, f.tier) == (status, "exhaustive"), (n, masks, f.message)


def test_least_point_model_of_premises():
    """satisfied_at_least_point: a model from the premises' lower bounds (no solver), or no
    answer; never a claim of satisfiability that is false."""
    M, i, j = z3.Ints("lp_M lp_i lp_j")
    chain = [M >= 1, i >= M + 2, j >= 2 * i, j < 10 * M, (j - i) % M == 0]
    assert solver.satisfied_at_least_point(chain)               # M=1, i=3, j=6
    assert not solver.satisfied_at_least_point(chain + [i < 3])  # contradictory: no answer
    assert not solver.satisfied_at_least_point([M >= 1, M != 1])  # satisfiable, not at 1
    # a non-linear query from contradictory premises is still refused as vacuous
    out = solver.prove([M >= 1, M * M < 1], [("c", i * M >= 0)], theory="NIA")
    assert out.status == "unknown" and "contradictory" in out.reason
