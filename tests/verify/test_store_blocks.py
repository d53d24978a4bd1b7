"""store.once over a tile stored in blocks (a Python-unrolled loop of stores, as the TMA-store
epilogues write 16- or 64-column blocks): blocks that tile one wider box are proven as that
box's store, in one query instead of one per pair of blocks; blocks that overlap, or boxes
that collide across CTAs, are still caught, and the witness names the block and its own
element."""

from __future__ import annotations

import argus as ag
from argus import verify

W = 16   # columns per stored block


def blocked_copy(step: int, box: int):
    """Y = X, each CTA's 4 x 64 tile stored as four 4 x 16 blocks `step` columns apart; CTA
    pid_n's tile starts at column pid_n * box."""
    @ag.kernel(threads=128)
    def copy(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], 4), ag.cdiv(X.shape[1], 64))
        for j in range(64 // W):
            x = ag.load(X, (pid_m * 4, pid_n * box + j * step), (4, W))
            ag.store(Y, (pid_m * 4, pid_n * box + j * step), x)
    return copy


def _once(report):
    return [f for f in report.findings if f.code == "store.once"]


def test_blocks_that_tile_a_box_are_one_query_and_proven():
    report = verify.run(blocked_copy(W, 64))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    once = _once(report)
    assert len(once) == 1 and once[0].status == "proven", once
    assert "4 blocks of 16" in once[0].subject


def test_overlapping_blocks_are_not_joined_and_caught():
    report = verify.run(blocked_copy(W // 2, 64))   # block j + 1 rewrites half of block j
    once = _once(report)
    assert len(once) > 1   # not a tiling: pairwise queries
    assert any(f.status == "violated" for f in once), once


def test_joined_box_colliding_across_ctas_names_the_block():
    report = verify.run(blocked_copy(W, 48))   # CTA n + 1's box starts inside CTA n's
    once = _once(report)
    assert len(once) == 1 and once[0].status == "violated", once
    wit = once[0].witness
    for part in (wit["first"], wit["second"]):
        assert 0 <= part["tile_element"][1] < W, part   # the block's own element
        assert "test_store_blocks.py" in part["store"]
    # the two instances write the same output element
    row = lambda p, cta: cta[0] * 4 + p["tile_element"][0]   # noqa: E731
    assert row(wit["first"], wit["first"]["cta"]) == row(wit["second"], wit["second"]["cta"])


def halves_transposed(row_step: int):
    """Y[h] = X^T for h in 0, 1, stored by two transposed sites one apart along Y's first dim
    (the shape of the MoE decode kernels' gate and up halves under swap-AB); CTA pid_m's tile
    starts at row pid_m * row_step of X."""
    @ag.kernel(threads=128)
    def halves(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor[2, "N", "M", ag.f32]):
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], 4), ag.cdiv(X.shape[1], 16))
        x = ag.load(X, (pid_m * row_step, pid_n * 16), (4, 16))
        for h in range(2):
            ag.store(Y, (h, pid_n * 16, pid_m * row_step), x, transposed=True)
    return halves


def test_transposed_halves_join_and_store_once_is_derived():
    """The two transposed sites join into one box (the new axis last, where `_placed` puts it
    on Y's first dim), and store.once follows from the tile decomposition with the site index
    inside the tile: no non-linear query of its own."""
    report = verify.run(halves_transposed(4))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    once = _once(report)
    assert len(once) == 1 and once[0].status == "proven", once
    assert "2 blocks of 1" in once[0].subject and once[0].tier == "derived", once[0]


def test_transposed_halves_colliding_across_ctas_are_caught():
    report = verify.run(halves_transposed(2))   # CTA m + 1's rows overlap CTA m's
    once = _once(report)
    assert len(once) == 1 and once[0].status == "violated", once
    wit = once[0].witness
    for part in (wit["first"], wit["second"]):
        assert len(part["tile_element"]) == 2, part   # the site's own (row, column) element
        assert "test_store_blocks.py" in part["store"]
