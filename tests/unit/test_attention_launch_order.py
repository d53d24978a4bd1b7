"""The prefill kernel's launch choices for short and causal sequences (issue 14): the tile
order (AttentionSchedule.tile_order: "lpt" hands the tiles out heads fastest, m tiles longest
first, batches slowest, in the grid (H, m tiles, B) instead of (m tiles, H, B)) and two CTAs an
SM (ctas_per_sm=2: the occupancy hint, rendered `__launch_bounds__(threads, 2)`, with the
registers setmaxnreg may hand out bounded by the CTA's allocation at entry). Tracing only, no
GPU; the interpreter runs them against float64 in tests/interp/test_attention_interp.py."""

from __future__ import annotations

import dataclasses

import pytest

import argus as ag
from argus.kernels.attention import AttentionSchedule, attention_kernel, default_schedule
from argus.runtime.interp.launch import grid_extents
from argus.target.limits import entry_registers

OCC2 = AttentionSchedule(block_m=128, block_n=64, consumers=2, consumer_regs=104, ctas_per_sm=2)


def _grid(schedule, causal=True, B=3, H=8, HKV=2, S=1000, SK=1000, D=64):
    kernel = attention_kernel(D, ag.bf16, causal, False).trace(s=schedule)
    return grid_extents(kernel, {"B": B, "H": H, "HKV": HKV, "S": S, "SK": SK})


@pytest.mark.parametrize("causal", [False, True])
def test_lpt_grid_puts_heads_on_x(causal):
    """The hardware hands out CTAs x fastest: "head" launches a head's 8 tiles together,
    "lpt" every head's tile of one m (the longest first under the causal mask) together."""
    head = dataclasses.replace(default_schedule(64, causal, 1000), tile_order="head")
    lpt = dataclasses.replace(head, tile_order="lpt")
    m_tiles = -(-1000 // head.block_m)
    assert _grid(head, causal) == (m_tiles, 8, 3)
    assert _grid(lpt, causal) == (8, m_tiles, 3)


def test_persistent_grid_fills_every_cta_slot():
    """The persistent walk launches num_sms x ctas_per_sm CTAs (or fewer tiles)."""
    walk = dataclasses.replace(OCC2, persistent=True, num_sms=132, tile_order="lpt")
    assert _grid(walk, B=16, H=32, S=1024, SK=1024) == (264,)
    assert _grid(walk, B=1, H=2, S=1024, SK=1024) == (16,)


def test_two_ctas_render_the_launch_bound():
    """ctas_per_sm=2 is the kernel's occupancy hint; the long-sequence default leaves it out."""
    two = attention_kernel(64, ag.bf16, True, False).trace(s=OCC2)
    one = attention_kernel(64, ag.bf16, True, False).trace(s=default_schedule(64, True, 16384))
    assert two.attr("min_ctas_per_sm") == 2
    assert one.attr("min_ctas_per_sm", None) is None


def test_two_ctas_bound_the_registers_by_the_entry_allocation():
    """384 threads enter at entry_registers(384, 2) = 80 each: setmaxnreg can hand the two
    consumer warpgroups 104 (24 + 2 x 104 = 232 <= 240), not 112 (248), though 248 x 128
    is below half the SM's registers."""
    assert entry_registers(384, 2) == 80
    assert OCC2.problems_for(64) == []
    with pytest.raises(ValueError, match="at most 240"):
        dataclasses.replace(OCC2, consumer_regs=112)


def test_two_ctas_bound_the_shared_memory():
    """Each of two CTAs gets at most half an SM's shared memory: four stages of 128-key
    blocks beside Q fit one CTA at head dim 64, not two."""
    wide = AttentionSchedule(block_m=64, block_n=128, consumers=1, consumer_regs=232,
                             stages=4, ctas_per_sm=2)
    problems = wide.problems_for(64)
    assert any("2 CTAs per SM" in p for p in problems), problems
    assert dataclasses.replace(wide, ctas_per_sm=1).problems_for(64) == []


@pytest.mark.parametrize("head_dim", [128, 256])
def test_two_ctas_of_two_warpgroups_take_head_dim_64_only(head_dim):
    """ptxas compiles the kernel at the 80 registers 384 threads enter with at two CTAs: it
    refuses head dim 128 (it asks 94); the message names the one-warpgroup shape that fits
    (tests/unit/test_attention_short_variants.py builds it)."""
    assert any("ptxas compiles the kernel at the 80" in p and "consumers=1" in p
               for p in OCC2.problems_for(head_dim))
    assert not any("ptxas" in p for p in OCC2.problems_for(64))


@pytest.mark.parametrize("bad,message", [({"tile_order": "row"}, "tile_order"),
                                         ({"ctas_per_sm": 3}, "ctas_per_sm=3"),
                                         ({"own_blocks": True, "ordered": True},
                                          "not combined with ping-pong")])
def test_bad_launch_fields_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(OCC2, **bad)
