"""RegisterLayout (argus/target/register_layouts.py): every layout covers its tile exactly once
per replica, agrees with target/fragments.py, its F2 form agrees with its table, names
round-trip through build, and reduction plans / broadcast maps are what codegen needs."""

from __future__ import annotations

import itertools

import pytest

from argus.ir.types import TileType, parse_type
from argus.target import fragments
from argus.target import register_layouts as RL

LAYOUTS = [
    ("blocked", (4, 1024), 128), ("blocked", (37, 256), 128), ("blocked", (64, 32), 128),
    ("blocked", (2, 3, 5, 7), 128), ("blocked", (1, 1), 256), ("blocked", (8, 768), 384),
    ("blocked", (128,), 128), ("blocked", (2, 2, 2, 128), 128), ("rowvec", (8, 1), 128),
    ("wgmma_acc", (64, 64), 128), ("wgmma_acc", (64, 176), 128), ("wgmma_acc", (64, 8), 128),
    ("wgmma_a", (64, 32), 128), ("slice(wgmma_acc,1,64)", (64, 1), 128),
    ("slice(wgmma_acc,0,64)", (1, 176), 128), ("slice(blocked,0,8)", (1, 256), 128),
    ("expand(blocked,0)", (1, 512), 128), ("squeeze(slice(wgmma_acc,1,64),1)", (64,), 128),
    ("slice(slice(blocked,2,128),0,2)", (1, 4, 1), 128),
]


@pytest.mark.parametrize("name,shape,threads", LAYOUTS)
def test_covers_tile_exactly_once_per_replica(name, shape, threads):
    lay = RL.build(name, shape, threads)
    assert lay.check_exact() is None


@pytest.mark.parametrize("name,shape,threads", LAYOUTS)
def test_name_round_trips_through_tile_type(name, shape, threads):
    t = TileType(__import__("argus").f32, shape, name)
    assert parse_type(str(t)) == t


@pytest.mark.parametrize("n", [8, 64, 176, 256])
def test_wgmma_acc_agrees_with_fragments(n):
    lay = RL.wgmma_acc(n)
    for t in range(128):
        for i in range(n // 2):
            assert lay.coord(t, i) == tuple(fragments.wgmma_acc_coord(t, i))


def test_wgmma_a_agrees_with_fragments():
    lay = RL.wgmma_a(16)
    for t, i in itertools.product(range(128), range(8)):
        assert lay.coord(t, i) == tuple(fragments.wgmma_a_coord(t, i))


@pytest.mark.parametrize("name,shape,threads", [x for x in LAYOUTS
                                                if RL.build(*x).is_f2()])
def test_f2_form_agrees_with_table(name, shape, threads):
    lay = RL.build(name, shape, threads)
    f2 = lay.f2()
    names = lay.dim_names()
    for t, r in itertools.product(range(threads), range(lay.nregs)):
        got = f2.apply(register=r, lane=t % 32, warp=t // 32)
        assert tuple(got[n] for n in names) == lay.coord(t, r)


def test_wgmma_acc_f2_is_the_fragment_f2():
    assert RL.wgmma_acc(64).f2() == fragments.wgmma_acc_f2(64)


def test_c_expressions_match_python_coordinates():
    for name, shape, threads in LAYOUTS:
        lay = RL.build(name, shape, threads)
        for r in range(min(lay.nregs, 8)):
            exprs = lay.coord_c(r, "t")
            for t in range(0, threads, 7):
                got = tuple(eval(e.replace("t", str(t))) for e in exprs)  # noqa: S307
                assert got == lay.coord(t, r), (name, shape, r, t, exprs)


def test_acc_row_reduction_stays_in_the_quad_and_row_slice_has_two_registers():
    plan = RL.wgmma_acc(64).reduction_plan(1)
    assert plan.lane_masks == (2, 1) and plan.warp_bits == ()
    assert plan.result.nregs == 2
    col = RL.wgmma_acc(64).reduction_plan(0)
    assert col.lane_masks == (16, 8, 4) and col.warp_bits == (5, 6)


def test_broadcast_maps():
    acc = RL.wgmma_acc(64)
    row = RL.slice_(acc, 1)
    assert row.broadcast_map(acc) == tuple((i // 2) % 2 for i in range(32))
    blocked = RL.blocked((4, 1024), 128)
    assert RL.build("rowvec", (4, 1), 128).broadcast_map(blocked) == \
        tuple(i // 8 for i in range(32))
    assert RL.blocked((4, 1), 128).broadcast_map(acc) is None
    assert RL.broadcast_layout(acc, (64, 1)).broadcast_map(acc) is not None
