"""tile_order "snake" (the persistent walk, every second round handed to the CTAs in reverse:
the causal tiles evened out per CTA) in the numpy interpreter against float64: lengths that
are no multiple of the blocks, causal Sq != Skv (bottom-right, rows without keys zero), GQA
2:1, the LSE, and walks whose last round is partial and odd (reversed over the units it has)
or even. O starts as NaN, so a tile the decode skips or a unit decoded twice fails."""

import dataclasses

import pytest

from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")


# (B, H, HKV, S, SK, num_sms): units = B x H x m tiles; with 3 CTAs (head dims 128 / 256:
# one CTA an SM; 64: two CTAs an SM, so 6) the rounds end partial, odd or even
SHAPES = [(2, 2, 1, 300, 300, 3),    # 2 x 2 x 3 = 12 units: rounds of 3, the fourth odd
          (1, 4, 2, 200, 330, 3),    # 4 x 2 = 8 units: 3 + 3 + 2 (the last even, partial)
          (2, 2, 2, 330, 150, 2)]    # Sq > Skv: tiles whose rows see no key


@pytest.mark.parametrize("B,H,HKV,S,SK,num_sms", SHAPES,
                         ids=[f"{s[3]}x{s[4]}-sms{s[5]}" for s in SHAPES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant,head_dim", [("default+snake+earlyq", 128),
                                              ("default+snake", 128),
                                              ("default+snake+earlyq", 256),
                                              ("default+snake", 64)])
def test_snake_walk(variant, head_dim, causal, B, H, HKV, S, SK, num_sms):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, 1024),
                                   num_sms=num_sms)
    assert schedule.persistent and schedule.tile_order == "snake"
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule,
                      seed=S + SK + head_dim + causal))


@pytest.mark.parametrize("variant", ["default+snake", "default+snake+earlyq"])
def test_snake_with_own_blocks(variant):
    """Head dim 256's causal default at 1k < S <= 4k has own_blocks (each warpgroup computes
    only the blocks its rows see): with the snake the walk releases the rest unread, per
    unit, in the reversed rounds too. (The verifier leaves pipe.totals unknown for own_blocks
    in any persistent walk, snake or not: the per-unit split blocks + (loaded - blocks).)"""
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, 256, True, 2048), num_sms=3)
    assert schedule.own_blocks and schedule.tile_order == "snake"
    assert_close(*run(2, 2, 1, 300, 330, 256, True, schedule, seed=256))
