"""Causal attention with key blocks wider than the query tile (block_n > block_m, or wider than
a warpgroup's 64 rows) in the numpy interpreter against the float64 reference: the shapes
where a tile's KV loop runs zero trips. The plain loop's `range(blocks)` is empty for a tile
whose rows see no key (Sq > Skv: blocks = 0); FA3's overlap order peels block 0 in front of
`range(1, blocks)`, which is empty for every tile that reads one block (a single block wider
than every key the tile may see, e.g. Sq = Skv = 64 under 128-key blocks); `unmasked` (the
diagonal split, `_unmasked_blocks`) is 0 there, so the peeled block is the masked one.
Checked at h327 (2026-12-07): the kernel is right at every such shape, and the verifier
proves the same schedules clean and reports seeded bugs at these shapes
(tests/mutations/test_attention_causal_zero_trip.py)."""

from __future__ import annotations

import pytest

from argus.kernels.attention import AttentionSchedule
from tests.interp.test_attention_interp import assert_close, run

SCHEDULES = {
    "64x128": AttentionSchedule(block_m=64, block_n=128, consumers=1),
    "64x128-overlap": AttentionSchedule(block_m=64, block_n=128, consumers=1,
                                        intra_wg_overlap=True),
    "64x128-fa3": AttentionSchedule(block_m=64, block_n=128, consumers=1, fa3_overlap=True),
    "64x176-fa3": AttentionSchedule(block_m=64, block_n=176, consumers=1, fa3_overlap=True),
    "64x256-fa3-persistent": AttentionSchedule(block_m=64, block_n=256, consumers=1,
                                               fa3_overlap=True, persistent=True, num_sms=3),
    "128x192-fa3-own": AttentionSchedule(block_m=128, block_n=192, consumers=2,
                                         fa3_overlap=True, own_blocks=True),
    "128x256-own": AttentionSchedule(block_m=128, block_n=256, consumers=2, own_blocks=True),
}
SHAPES = [(200, 200), (300, 130), (130, 300), (64, 64), (40, 300), (300, 40)]


def loop_trips(s: AttentionSchedule, S: int, SK: int) -> list[int]:
    """Per query tile, the trips of its consumer's KV loop (the kernel's _kv_blocks, less the
    block FA3's order or the S-ahead overlap peels in front of the loop)."""
    first = 1 if s.fa3_overlap or s.intra_wg_overlap else 0
    trips = []
    for q0 in range(0, S, s.block_m):
        blocks = min(-(-SK // s.block_n), max(-(-(q0 + s.block_m + SK - S) // s.block_n), first))
        trips.append(blocks - first)
    return trips


def test_the_shapes_run_zero_trip_loops():
    """Each schedule meets a tile whose KV loop runs no trip at one of the shapes, and one
    whose loop runs at least one (else the test would not exercise the loop at all)."""
    for name, s in SCHEDULES.items():
        trips = [t for S, SK in SHAPES for t in loop_trips(s, S, SK)]
        assert 0 in trips and max(trips) >= 1, (name, trips)


@pytest.mark.parametrize("S,SK", SHAPES, ids=[f"S{a}-SK{b}" for a, b in SHAPES])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_wide_key_blocks_under_the_causal_mask(name, S, SK):
    assert_close(*run(1, 2, 1, S, SK, 64, True, SCHEDULES[name], seed=S + SK))
