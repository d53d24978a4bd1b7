"""scripts/moe_l2_model.py, the CPU model of the MoE grouped GEMM's DRAM traffic: reuse in
lock-step, eviction by capacity, the orders' units each once, the walk's unit assignment."""

from __future__ import annotations

import pytest

from tests.loading import load_script

M = load_script("moe_l2_model")
# a small GEMM: 4 K blocks, 1 KB A boxes, 2 KB B boxes, no scales, 1 KB output tiles
G = M.Gemm("toy", 4, 1024, 2048, 0, 0, 1024)


def test_lockstep_units_share_the_weight_tile_read():
    # two m-tiles of one expert at one n-tile on two CTAs in lock-step: the weight tile's
    # blocks come from DRAM once, each A box once
    r = M.simulate(G, [0, 0], [(0, 0), (1, 0)], M.Walk(ctas=2))
    assert r["miss"]["B"] == 4 * 2048
    assert r["miss"]["A"] == 2 * 4 * 1024
    assert r["dram_write"] == 2 * 1024


def test_different_experts_do_not_share():
    r = M.simulate(G, [0, 1], [(0, 0), (1, 0)], M.Walk(ctas=2))
    assert r["miss"]["B"] == 2 * 4 * 2048


def test_capacity_evicts_between_units_of_one_cta():
    # one CTA runs both units one after the other: with room for the whole weight tile the
    # second unit hits; with room for one block's boxes only, it reads the tile again
    big = M.simulate(G, [0, 0], [(0, 0), (1, 0)], M.Walk(ctas=1), l2_bytes=1 << 20)
    small = M.simulate(G, [0, 0], [(0, 0), (1, 0)], M.Walk(ctas=1), l2_bytes=4096)
    assert big["miss"]["B"] == 4 * 2048
    assert small["miss"]["B"] == 2 * 4 * 2048


def test_orders_are_permutations_of_the_units():
    te = M.tile_experts([300, 0, 129, 1, 1000])     # 3, 0, 2, 1, 8 m-tiles
    assert te == [0, 0, 0, 2, 2, 3] + [4] * 8
    units = {(m, n) for m in range(len(te)) for n in range(3)}
    for name, make in M.ORDERS.items():
        order = make(te, 3)
        assert len(order) == len(units) and set(order) == units, name


def test_expert_order_keeps_an_expert_weight_tile_together():
    te = M.tile_experts([300, 129, 1000])
    order = M.expert_order(te, 4, 0)
    # each (expert, n-tile)'s m-tiles are consecutive in the sequence
    keys = [(te[m], n) for m, n in order]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(runs)) == 3 * 4


def test_grouped_order_is_the_kernel_raster():
    # group_m 2 over 3 m-tiles, 2 n-tiles: (0,0) (1,0) (0,1) (1,1), then the last m-tile
    assert M.grouped_order([0, 0, 0], 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


def test_static_and_dynamic_walks_agree_in_lockstep():
    # equal units without jitter: the dynamic walk hands out the static walk's waves
    te = M.tile_experts([500, 700, 260])
    order = M.grouped_order(te, 4, 2)
    s = M.simulate(G, te, order, M.Walk(ctas=5))
    d = M.simulate(G, te, order, M.Walk(ctas=5, dynamic=True))
    assert s["dram"] == d["dram"]


def test_repeated_unit_is_refused():
    with pytest.raises(ValueError, match="once"):
        M.simulate(G, [0], [(0, 0), (0, 0)], M.Walk(ctas=1))


@pytest.mark.parametrize("argv,named", [(["--orders", "expert g12"], "expert g16"),
                                        (["--walks", "Dynamic"], "dynamic")])
def test_an_unknown_order_or_walk_is_refused_by_the_parser(monkeypatch, capsys, argv, named):
    # before the routing is drawn (seconds of CPU), with the names it takes (a walk not
    # named "dynamic" ran the static walk under the name given)
    import sys
    monkeypatch.setattr(sys, "argv", ["moe_l2_model.py"] + argv)
    with pytest.raises(SystemExit) as exit_:
        M.main()
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err


def test_half_tiles_are_each_expert_last_tile_of_at_most_half_the_rows():
    # 300 rows: tiles of 128, 128, 44 (half); 129: 128, 1 (half); 64: half; 65 and 0: none
    assert M.half_tiles([300, 0, 129, 64, 65]) == {2, 4, 5}


def test_half_units_drift_the_static_walk_apart_not_the_dynamic_one():
    """h310 (docs/perf/moe.md): MoeFp8Schedule.half_tile_last's half units end early; on the
    static walk each puts its CTA ahead of the CTAs it shared weight tiles with, for good, so
    they read the tiles from DRAM again; the dynamic walk (and the grid) hands units out in
    order as CTAs free up and keeps the sharers together. 8 CTAs, 16 experts of 3 m-tiles,
    the last of each a half tile, lock-step otherwise; an L2 of 8 weight tiles."""
    g = M.Gemm("toy", 8, 1024, 4096, 0, 0, 1024)
    counts = [300] * 16
    te = M.tile_experts(counts)
    half = M.half_tiles(counts)
    assert len(half) == 16
    order = M.grouped_order(te, 4, 8)
    l2 = 8 * 8 * 4096

    def reads(dynamic, half_time):
        r = M.simulate(g, te, order, M.Walk(dynamic=dynamic, ctas=8), l2, half, half_time)
        return r["miss"]["B"], r["end"]

    static_full, static_half = reads(False, 1.0), reads(False, 0.6)
    dynamic_full, dynamic_half = reads(True, 1.0), reads(True, 0.6)
    assert static_half[0] >= 1.3 * static_full[0], (static_full, static_half)
    assert dynamic_half[0] <= 1.05 * dynamic_full[0], (dynamic_full, dynamic_half)
    # the half units still end the walk sooner on both (the model counts time in blocks)
    assert static_half[1] < static_full[1] and dynamic_half[1] < dynamic_full[1]
