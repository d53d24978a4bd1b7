"""store.coverage's tile query asked about a unit's quotient and remainder
(check_stores._digit_split) and about tile indices with the tile size divided out
(check_stores._tile_index); docs/verify.md "Coverage of a raster: the unit's digits".

A persistent grouped raster reads its unit u only as u / (group_m * tiles_n) and
u % (group_m * tiles_n): the tile obligation ranges over that pair, not over u (z3's
non-linear core spent 0.15-0.5 s per kernel relating u to them). The split is exact: a seeded
raster bug is still refuted with the same finding, from the split query."""

from __future__ import annotations

import random

import pytest
import z3

from argus import verify
from argus.verify import check_stores, obligation
from tests.mutations import kernels as K


@pytest.fixture(autouse=True)
def _budget(monkeypatch):
    monkeypatch.setenv("ARGUS_VERIFY_TIMEOUT_MS", "20000")


def spy_tile_obligations(monkeypatch) -> list:
    """The list the tile obligations of store.coverage run from now on are appended to."""
    seen = []
    run = obligation.run

    def spy(ob, *a, **k):
        if ob.code == "store.coverage" and ob.subject.startswith("tiles of "):
            seen.append(ob)
        return run(ob, *a, **k)
    monkeypatch.setattr(obligation, "run", spy)
    return seen


def _tile_queries(monkeypatch, kernel):
    """verify.check of `kernel`, with the tile obligations of store.coverage it ran."""
    seen = spy_tile_obligations(monkeypatch)
    return verify.check(kernel), seen


def _names(ob) -> set[str]:
    out: set[str] = set()
    for t in list(ob.premises) + [c for _, c in ob.claims]:
        out |= check_stores.free_consts(t)
    return out


def test_the_raster_unit_is_split_and_coverage_is_proven(monkeypatch):
    diags, seen = _tile_queries(monkeypatch, K.make_persistent_gemm(None).trace())
    assert not [d for d in diags if d.code == "store.coverage"], diags
    tiles = [ob for ob in seen if ob.subject.endswith("each once")]
    assert tiles, "no tile obligation"
    for ob in tiles:
        names = _names(ob)
        # the walked unit is gone: its quotient and remainder (and their second copies) stand
        assert any(".quotient" in n for n in names) and any(".remainder" in n for n in names), \
            names


def test_a_raster_gap_is_still_refuted_from_the_split_query(monkeypatch):
    diags, seen = _tile_queries(monkeypatch,
                                K.make_persistent_gemm("raster_full_groups").trace())
    found = [d for d in diags if d.code == "store.coverage" and d.severity == "error"]
    assert found and any("both store tile" in d.message for d in found), diags
    # the counterexample names the units as the kernel walks them (q * F + r read back)
    assert any("other_unit" in d.counterexample for d in found)
    assert any(".quotient" in n for ob in seen for n in _names(ob))


def test_tile_index_divides_the_multiples_exactly():
    g, x, y = z3.Ints("g x y")
    q, rest = check_stores._tile_index(1024 * g + 128 * x + y, 128)
    assert "/" not in str(z3.simplify(q - (y / 128)))   # 8 g + x + y / 128
    rng = random.Random(0)
    base = 1024 * g + 128 * x + y
    for _ in range(200):
        vals = [(v, z3.IntVal(rng.randint(-500, 500))) for v in (g, x, y)]
        got = z3.simplify(z3.substitute(q, *vals)).as_long()
        want = z3.simplify(z3.substitute(base / 128, *vals)).as_long()
        assert got == want
        assert z3.simplify(z3.substitute(rest % 128 == base % 128, *vals)) == z3.BoolVal(True)
    # nothing divisible: the division as it was
    q2, rest2 = check_stores._tile_index(3 * g + x, 128)
    assert q2.eq(((3 * g + x) / 128)) and rest2.eq(3 * g + x)
    assert check_stores._tile_index(x, 1)[0].eq(x)


class _Premises:
    """The one field of a Model that `_digit_split` reads."""

    def __init__(self, premises):
        self.premises = premises


def _raster(premises, F, extra=None, bound=None):
    """A walked unit u in [0, 2 * F) (or [0, bound(F))) read as u / F and u % F (plus
    `extra` in dim 0)."""
    u = z3.Int("ds_u")
    own = [u >= 0, u < (bound(F) if bound else 2 * F)]
    moving = [(0, 128 * (u / F) + (extra(u) if extra else 0), 128), (1, 64 * (u % F), 64)]
    return _Premises(premises), [u], own, moving, {"u": u}


def _split(premises, F, extra=None, bound=None):
    model, parts, own, moving, unit_term = _raster(premises, F, extra, bound)
    out = check_stores._digit_split(model, parts, own, moving, unit_term)
    return parts, out


def test_digit_split_needs_a_divisor_at_least_one():
    """The split is exact where F >= 1 at every instance: with F == 0 allowed the pair's
    range 0 <= r < F is empty and would hide the units of those instances, unless the units'
    own range 0 <= u < F * K is empty there too (`_empty_at_zero`, h248: then F >= 0 is
    enough; a range that is not a multiple of F, or F without a bound >= 0, is not split)."""
    N, P = z3.Ints("ds_N ds_P")
    tiles = (N + 255) / 256
    for premises, F, split, bound in (
            ([N >= 1], 8 * tiles, True, None), ([N >= 0], 8 * tiles, False, 1),
            ([N >= 0], 8 * tiles, True, None),
            ([P >= 1], P, True, None), ([P >= 0], P, False, 1), ([P >= 0], P, True, None),
            ([], P, False, None), ([], P, False, 1)):
        extra_bound = None if bound is None else (lambda F, b=bound: 2 * F + b)
        parts, (new_parts, _, moving, _) = _split(premises, F, bound=extra_bound)
        assert (len(new_parts) == 2) == split, (premises, F, bound)
        if not split:
            assert new_parts == parts
        else:
            assert not any("ds_u" in check_stores.free_consts(b) for _, b, _ in moving)


def test_digit_split_keeps_a_unit_read_otherwise_or_named_by_a_premise():
    P = z3.Int("ds_P")
    u = z3.Int("ds_u")
    # read as u itself too: not split
    parts, (new_parts, *_) = _split([P >= 1], P, extra=lambda u: u)
    assert new_parts == parts
    # a premise names u (a program id's range): not split
    parts, (new_parts, *_) = _split([P >= 1, u <= 100], P)
    assert new_parts == parts


def test_digit_split_is_exact_on_a_concrete_instance():
    """At N = 300 (F = 16): the split's (q, r) satisfying its range constraints store exactly
    the tiles the units u in [0, 32) store, one pair per unit, and unit_term reads each pair
    back as its unit."""
    N = z3.Int("ds_N")
    F = 8 * ((N + 255) / 256)
    _, (parts, own, moving, unit_term) = _split([N >= 1], F)
    q, r = parts
    at = [(N, z3.IntVal(300))]

    def ev(t, *vals):
        return z3.simplify(z3.substitute(t, *(at + list(vals))))
    u = z3.Int("ds_u")
    _, _, _, orig_moving, _ = _raster([N >= 1], F)
    want = sorted(tuple(ev(b, (u, z3.IntVal(k))).as_long() for _, b, _ in orig_moving)
                  for k in range(32))
    got, units = [], []
    for qv in range(-3, 6):
        for rv in range(-3, 20):
            vals = [(q, z3.IntVal(qv)), (r, z3.IntVal(rv))]
            if all(z3.is_true(ev(c, *vals)) for c in own):
                got.append(tuple(ev(b, *vals).as_long() for _, b, _ in moving))
                units.append(ev(unit_term["u"], *vals).as_long())
    assert sorted(got) == want
    assert sorted(units) == list(range(32))
