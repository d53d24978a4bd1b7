"""FA3's early K release (AttentionSchedule.early_k_release, bench token "ekr"): S_j and
P_{j-1} V_{j-1} issued in K_j's step inside V_{j-1}'s, K_j released before the softmax of S_j.
In the numpy interpreter against float64, O and the LSE: head dims 64 / 128 / 256, full and
causal, ragged query and key lengths (tails masked), several KV blocks a tile, one block a
tile, tiles that see no key, the persistent walk with early Q release, P carried packed, GQA,
f16, and O rescaled after P V retires (olate). A P V issued with the wrong P (this block's
instead of the previous one's) or the wrong V stage fails every multi-block case here."""

import dataclasses

import pytest
import torch

from argus.kernels.attention import AttentionSchedule
from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

# (variant, head_dim, causal, the bench length that picks the default, (B, H, HKV, S, SK))
CASES = [("default+ekr", 128, False, 16384, (1, 2, 1, 150, 400)),
         ("default+ekr", 128, True, 16384, (1, 2, 2, 300, 400)),
         ("default+ekr", 128, False, 1024, (2, 2, 1, 200, 300)),       # walk, early Q
         ("default+ekr+packp", 128, True, 4096, (2, 2, 1, 260, 300)),  # snake, P packed
         ("default+ekr", 256, False, 16384, (1, 1, 1, 130, 200)),
         ("default+ekr", 256, True, 2048, (1, 1, 1, 200, 260)),        # snake + own_blocks
         ("fa3+ekr", 64, False, 16384, (1, 2, 1, 100, 333)),
         ("fa3+ekr", 64, True, 16384, (1, 1, 1, 260, 190)),
         # O rescaled after P V retires (rescale_after_pv, h328): P V in place into loop's O
         ("default+ekr+olate", 128, False, 16384, (1, 2, 1, 150, 400)),
         ("default+ekr+olate+packp", 128, True, 2048, (2, 2, 1, 260, 300))]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len,shape", CASES,
                         ids=[f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-S{c[3]}"
                              for c in CASES])
def test_early_k_release_against_float64(variant, head_dim, causal, seq_len, shape):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                   num_sms=3)
    assert schedule.early_k_release
    B, H, HKV, S, SK = shape
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule, seed=S + SK + causal))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_more_queries_than_keys(causal):
    """One KV block a tile (the loop runs no trip) and, under the causal mask, whole tiles
    that see no key: O zeros and the LSE -inf there."""
    schedule = AttentionSchedule(block_m=128, block_n=64, consumers=2, fa3_overlap=True,
                                 early_k_release=True)
    assert_close(*run(1, 1, 1, 200, 40, 64, causal, schedule))


def test_fp16():
    schedule = dataclasses.replace(BENCH.variant_schedule("default+ekr", 128, False, 16384),
                                   num_sms=3)
    assert_close(*run(1, 2, 1, 70, 290, 128, False, schedule, dtype=torch.float16))
