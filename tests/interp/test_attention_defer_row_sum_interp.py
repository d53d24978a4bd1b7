"""The running row sum kept as each thread's partial (AttentionSchedule.defer_row_sum, bench
token "sumend"): P's columns folded by 8-column windows every KV block, rescaled by alpha, and
reduced across the row once after the loop (FA3's online_softmax, the sum's warp reduce in
finalize). In the numpy interpreter against float64, O and the LSE (which reads the reduced
sum): several KV blocks a tile, the causal diagonal and the key tail (masked windows add
zeros), the persistent walk with early Q release, P carried packed on the snake walk, FA3's
128 x 176 (22 windows), head dim 256, GQA, tiles that see no key, and f16."""

import dataclasses

import pytest
import torch

from argus.kernels.attention import AttentionSchedule
from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

# (variant, head_dim, causal, the bench length that picks the default, (B, H, HKV, S, SK))
CASES = [("default+sumend", 128, False, 16384, (1, 2, 1, 150, 400)),
         ("default+sumend", 128, True, 16384, (1, 2, 2, 300, 400)),
         ("default+sumend", 128, False, 1024, (2, 2, 1, 200, 300)),       # walk, early Q
         ("default+sumend+packp", 128, True, 4096, (2, 2, 1, 260, 300)),  # snake, P packed
         ("default+sumend+packp+bn176+direct", 128, False, 16384, (1, 1, 1, 130, 500)),
         ("default+sumend", 256, True, 16384, (1, 1, 1, 200, 260))]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len,shape", CASES,
                         ids=[f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-S{c[3]}"
                              for c in CASES])
def test_defer_row_sum_against_float64(variant, head_dim, causal, seq_len, shape):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                   num_sms=3)
    assert schedule.defer_row_sum
    B, H, HKV, S, SK = shape
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule, seed=S + SK + causal))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_more_queries_than_keys(causal):
    """One KV block a tile and, under the causal mask, whole tiles that see no key: the
    reduced sum is 0 there, so O is zeros and the LSE -inf."""
    schedule = AttentionSchedule(block_m=128, block_n=64, consumers=2, fa3_overlap=True,
                                 defer_row_sum=True)
    assert_close(*run(1, 1, 1, 200, 40, 64, causal, schedule))


def test_fp16():
    schedule = dataclasses.replace(BENCH.variant_schedule("default+sumend", 128, False, 16384),
                                   num_sms=3)
    assert_close(*run(1, 2, 1, 70, 290, 128, False, schedule, dtype=torch.float16))
