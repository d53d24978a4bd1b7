"""store.coverage's tile decomposition asks about a split-K unit as (tile, split)
(check_stores._unit_radix): a persistent walk over units u in [0, tiles * S) that stores
unit u's tile u / S of split u % S is asked whether distinct (u / S, u % S) store distinct
tiles, not distinct u (z3's non-linear core related u to its quotient and remainder first:
150-580 ms of MoE's split decode gate-up). Exact, so a tile stored twice is still caught."""

from __future__ import annotations

import types

import z3

from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.moe import decode_schedule, grouped_gemm_kernel
from argus.verify import check_stores, checker, solver
from argus.verify import obligation as OB
from argus.verify.model import Model
from argus.verify.tagdomain import free_consts
from tests.mutations.corpus import rewrite

TILE_CLAIM = "distinct units store distinct tiles"


def _split_gate_up():
    return lower_only(grouped_gemm_kernel(True, True), s=decode_schedule(8, split_k=4))


def _tile_obligation(kernel):
    obs, _ = checker.collect(Model(kernel))
    tiles = [dep for o in obs if o.code == "store.once" for dep, names in o.implied_by
             if TILE_CLAIM in names]
    assert len(tiles) == 1
    return tiles[0]


def test_split_units_are_asked_about_as_tile_and_split():
    kernel = _split_gate_up()
    tile = _tile_obligation(kernel)
    names = set().union(*(free_consts(c) for _, c in tile.claims))
    # the claims read launch parameters and the (tile, split) pairs of two units, no longer
    # the walked unit (the loop index) itself
    unit_parts = names - set(Model(kernel).params)
    assert unit_parts and all(".quotient" in n or ".remainder" in n for n in unit_parts), \
        sorted(names)
    assert solver.prove(tile.premises, [(n, c) for n, c in tile.claims if n == TILE_CLAIM],
                        theory=tile.tier).status == "proven"


def test_a_tile_stored_by_two_units_is_still_caught():
    """The seeded bug: the store's row origin replaced by its column origin (two units of
    different row tiles store one tile). Violated, decoded as two distinct units."""
    def column_for_row(op):
        offsets = list(op.offsets)
        offsets[2] = offsets[3]
        return op.replace(offsets=tuple(offsets))
    tile = _tile_obligation(rewrite(_split_gate_up(), O.Store, column_for_row))
    f = OB.run(tile, solver.Stats(), None)
    assert f.status == "violated" and TILE_CLAIM in f.witness["violated"], f.message
    (unit,), (other,) = f.witness["unit"].values(), f.witness["other_unit"].values()
    assert unit != other and 0 <= unit < f.witness["units"] and 0 <= other < f.witness["units"]
    assert "both store tile" in f.message


def test_the_radix_needs_a_parameter_a_factor_and_no_bare_unit():
    u, S, T1 = z3.Ints("u S T1")
    model = types.SimpleNamespace(params={"S": S}, premises=[S >= 1])
    F, got, split = check_stores._unit_radix(model, u, T1 * S, [u / S * 64, u % S])
    assert F.eq(S) and got.eq(z3.IntVal(1) * T1)
    assert "u" not in set().union(*(free_consts(split(t)) for t in (u / S, u % S)))
    assert check_stores._unit_radix(model, u, T1 * S, [u / S, u]) is None      # u bare
    assert check_stores._unit_radix(model, u, T1 * 8, [u / 8, u % 8]) is None  # no parameter
    assert check_stores._unit_radix(model, u, T1, [u / S, u % S]) is None      # no factor S
    assert check_stores._unit_radix(model, u, T1 * S, [u / S, u % T1]) is None  # two divisors
    loose = types.SimpleNamespace(params={"S": S}, premises=[S >= 0])
    assert check_stores._unit_radix(loose, u, T1 * S, [u / S, u % S]) is None  # S may be 0
    about_u = types.SimpleNamespace(params={"S": S}, premises=[S >= 1, u != 3])
    assert check_stores._unit_radix(about_u, u, T1 * S, [u / S, u % S]) is None  # u in a premise
