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


def _tile_queries(monkeypatch, kernel):
    """verify.check of `kernel`, with the tile obligations of store.coverage it ran."""
    seen = []
    run = obligation.run

    def spy(ob, *a, **k):
        if ob.code == "store.coverage" and ob.subject.startswith("tiles of "):
            seen.append(ob)
        return run(ob, *a, **k)
    monkeypatch.setattr(obligation, "run", spy)
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
