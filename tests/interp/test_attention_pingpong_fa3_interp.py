"""Ping-pong (ordered) with FA3's overlap order (fa3_overlap): FA3's full configuration, the
consumer warpgroups taking turns around both GEMM issues of an iteration (S_j, then
P_{j-1} V_{j-1}) inside the K and V steps, Q from its shared-memory stage. In the numpy
interpreter against float64: the bench token "ppfa3" on the default at head dim 64 (192 x 128,
three warpgroups, P carried packed) and 128 (128 x 128 in the grid and in the persistent
walks, and FA3's 128 x 176 with P packed); ragged lengths with several KV blocks a tile (the
turns go round several times and P crosses the back edge), GQA 2:1, the LSE, the causal
diagonal, and tiles of one KV block (no turn taken) or none of their keys seen."""

import dataclasses

import pytest

from argus.kernels.attention import AttentionSchedule
from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

# (variant, head_dim, causal, the bench length that picks the default, (B, H, HKV, S, SK))
CASES = [("default+ppfa3+packp", 64, False, 16384, (1, 2, 1, 250, 400)),
         ("default+ppfa3+packp", 64, True, 2048, (1, 2, 2, 300, 330)),
         ("default+ppfa3", 128, False, 16384, (1, 2, 1, 150, 400)),
         ("default+ppfa3", 128, True, 16384, (1, 2, 1, 300, 400)),
         ("default+ppfa3", 128, False, 1024, (2, 2, 1, 200, 300)),    # walk, early Q release
         ("default+ppfa3+packp", 128, True, 4096, (2, 2, 1, 260, 300)),   # snake walk
         ("default+ppfa3+packp+bn176+direct", 128, True, 16384, (1, 2, 1, 300, 400))]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len,shape", CASES,
                         ids=[f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-S{c[3]}"
                              for c in CASES])
def test_ping_pong_with_fa3_overlap_against_float64(variant, head_dim, causal, seq_len, shape):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                   num_sms=3)
    assert schedule.ordered and schedule.fa3_overlap and not schedule.q_in_registers
    B, H, HKV, S, SK = shape
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule, seed=S + SK + causal))


def test_with_the_next_q_prefetched():
    """The walk's prefetch of the next tile's Q (an L2 hint into Q's stage's box: the results
    must not change) with the turns, three CTAs walking two batches' tiles."""
    schedule = dataclasses.replace(BENCH.variant_schedule("default+ppfa3", 128, True, 1024),
                                   persistent=True, prefetch_next_q=True, num_sms=3)
    assert_close(*run(2, 2, 1, 200, 300, 128, True, schedule, seed=7))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_more_queries_than_keys(causal):
    """One KV block a tile (the loop, and with it every turn, runs zero times) and, under the
    causal mask, whole tiles that see no key."""
    schedule = AttentionSchedule(block_m=128, block_n=64, consumers=2, ordered=True,
                                 fa3_overlap=True)
    got, want, got_lse, want_lse = run(1, 1, 1, 200, 40, 64, causal, schedule)
    assert_close(got, want, got_lse, want_lse)


# FP8 (e4m3, argus.ops.attention_fp8's run_fp8 in the interpreter): the fp8 bench token
# "ppfa3" on fp8_schedule (FA3's FP8 configuration: 128 x 128 at head dim 128 with the TMA
# store, 128 x 128 at 64, 128 x 64 at 256), with the op's permuted V^T (P's A fragment is
# S's own registers) and without it (P gathered by quad shuffles), against float64 attention
# on the dequantized inputs at the FP8 tests' tolerance (tests/interp/test_attention_fp8_interp)
FP8_CASES = [("ppfa3", 128, False, (1, 2, 1, 150, 400), True),
             ("ppfa3", 128, True, (1, 2, 1, 300, 400), True),
             ("ppfa3", 128, True, (2, 2, 2, 200, 260), False),
             ("ppfa3", 64, True, (1, 2, 1, 150, 300), True),
             ("ppfa3", 64, False, (1, 2, 2, 200, 300), False),
             ("ppfa3", 256, False, (1, 1, 1, 100, 200), True)]


@pytest.mark.parametrize("variant,head_dim,causal,shape,permuted", FP8_CASES,
                         ids=[f"fp8-{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-"
                              f"{'pvt' if c[4] else 'shfl'}" for c in FP8_CASES])
def test_fp8_ping_pong_with_fa3_overlap_against_float64(variant, head_dim, causal, shape,
                                                        permuted, monkeypatch):
    from tests.interp.test_attention_fp8_interp import check_schedule

    schedule = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert schedule.ordered and schedule.fa3_overlap and not schedule.q_in_registers
    check_schedule(schedule, shape, head_dim, causal, permuted, monkeypatch)
