"""cluster_m=2 (full masks: a 2-CTA cluster on adjacent m tiles of one head, each CTA loading
half of every K and V box and multicasting it to both) in the numpy interpreter against
float64: lengths no multiple of the blocks, Sq != Skv, GQA 2:1, the LSE, odd m tile counts
(the pair's last CTA computes rows past S for its peer's loads and stores none), the grid
and the persistent walk over pairs (more pairs than clusters). A CTA that took only its own
half of a box would multiply zeros or stale rows; O starts as NaN, so a tile left unstored
fails."""

import dataclasses

import pytest

from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

# (B, H, HKV, S, SK, num_sms): m tiles of 128 rows 3 (odd), 2 and 1 (a pair of one real tile)
SHAPES = [(2, 2, 1, 300, 200, 3), (1, 4, 2, 200, 330, 4), (2, 2, 2, 100, 150, 2)]


@pytest.mark.parametrize("B,H,HKV,S,SK,num_sms", SHAPES,
                         ids=[f"{s[3]}x{s[4]}-sms{s[5]}" for s in SHAPES])
@pytest.mark.parametrize("variant,head_dim,seq_len", [
    ("default+cl2", 128, 1024),        # the persistent walk with early Q release, in pairs
    ("default+cl2", 128, 2048),        # the walk without it
    ("default+cl2", 128, 4096),        # the grid (FA3's overlap, TMA store)
    ("default+grid+cl2", 256, 1024),   # the grid at 128 x 64 (the walk spills at 256)
    ("default+cl2", 64, 1024),         # two CTAs an SM, the plain loop
    ("default+cl2", 64, 4096)])        # ping-pong at 192 x 128
def test_cluster_pair(variant, head_dim, seq_len, B, H, HKV, S, SK, num_sms):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, False, seq_len),
                                   num_sms=num_sms)
    assert schedule.cluster_m == 2
    assert_close(*run(B, H, HKV, S, SK, head_dim, False, schedule,
                      seed=S + SK + head_dim + seq_len))
