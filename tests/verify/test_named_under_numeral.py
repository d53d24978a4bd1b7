"""The named-divisions attempt through purify-arith where the claims read every quotient by a
variable only through a division by a numeral (argus/verify/solver.py
`_divides_by_variable_under_numeral`, `_quick_named`'s `purify`; docs/verify.md "Named
quotients under numeral divisions"): MoE positions' store.coverage claim "image in range" of
`pid * span + i + e0`, span = `((N + C - 1) / C + 31) / 32 * 32`. The named query in the plain
core missed it after its whole budget (0.8-1.0 s); named and purified, ~20 ms."""

import z3

from argus.verify import solver


def _positions_query():
    N, C, pid, i, e0 = z3.Ints("N C pid i e0")
    span = ((N + C - 1) / C + 32 - 1) / 32 * 32
    tiles = ((span - 0 + 32 - 1) / 32)
    premises = [N >= 1, N < 2**24, C >= 1, C < 2**24, pid >= 0, pid < C,
                0 <= i, i < span, (i - 0) % 32 == 0, e0 >= 0, e0 < 32]
    pos = pid * span + i + e0
    claims = [("image in [0, |domain|)",
               z3.And(pos >= 0, pos < 1 * z3.If(tiles > 0, tiles, 0) * (C - 0) * 32))]
    return premises, claims


def test_criterion():
    x, P, N, C = z3.Ints("x P N C")
    under = solver._divides_by_variable_under_numeral
    assert under([((N + C - 1) / C + 31) / 32 * 32 > x])
    assert under([((x / P) % 4) == 1])
    assert not under([x / P >= 0])                       # the conv tile scheduler's out_row / P
    assert not under([(x / P) / 2 + x / P >= 0])          # one occurrence not below a numeral
    assert not under([x / 32 >= 0])                       # no division by a variable
    assert not under([])


def test_named_query_purified_proves_positions_claim():
    premises, claims = _positions_query()
    solver.clear_cache()
    rl = solver.default_rlimit()
    out = solver._quick_named(premises, claims, 100_000, rl, 0.0, purify=True)
    assert out is not None and out.status == "proven"
    # the plain core on the same named query, same budget: no proof
    assert solver._quick_named(premises, claims, 100_000, rl, 0.0) is None


def test_prove_takes_the_purified_named_attempt(monkeypatch):
    premises, claims = _positions_query()
    seen = []
    real = solver._quick_named

    def spy(*a, **kw):
        seen.append(kw.get("purify", False))
        return real(*a, **kw)
    monkeypatch.setattr(solver, "_quick_named", spy)
    solver.clear_cache()
    out = solver.prove(premises, claims)
    assert out.status == "proven"
    assert seen == [True]
