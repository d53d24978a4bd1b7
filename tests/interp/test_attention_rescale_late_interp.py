"""O's rescale after P V retires (rescale_late: ping-pong on FA3's overlap order always, the
overlap order alone with rescale_after_pv, bench token "olate") in the numpy interpreter
against float64: several KV blocks a tile (O rescaled each iteration, the first block's zero O
never scaled), the persistent walk's early Q release (the last P V peeled after Q's step), P
carried packed, the causal diagonal, GQA, tiles of one KV block or no key seen, and the FP8
kernel (whose P V applied alpha too). The ping-pong cases are
test_attention_pingpong_fa3_interp.py's, which now run this order."""

import dataclasses

import pytest

from argus.kernels.attention import AttentionSchedule
from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

# (variant, head_dim, causal, the bench length that picks the default, (B, H, HKV, S, SK))
CASES = [("default+olate", 128, False, 16384, (1, 2, 1, 150, 400)),
         ("default+olate", 128, True, 16384, (1, 2, 2, 300, 400)),
         ("default+olate", 128, False, 1024, (2, 2, 1, 200, 300)),       # walk, early Q release
         ("default+olate+packp", 128, True, 4096, (2, 2, 1, 260, 300)),  # snake walk
         ("default+olate", 256, True, 16384, (1, 1, 1, 200, 260))]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len,shape", CASES,
                         ids=[f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-S{c[3]}"
                              for c in CASES])
def test_rescale_after_pv_against_float64(variant, head_dim, causal, seq_len, shape):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                   num_sms=3)
    assert schedule.rescale_late and not schedule.ordered
    B, H, HKV, S, SK = shape
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule, seed=S + SK + causal))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_more_queries_than_keys(causal):
    """One KV block a tile (the loop, and with it every late rescale, runs zero times) and,
    under the causal mask, whole tiles that see no key."""
    schedule = AttentionSchedule(block_m=128, block_n=64, consumers=2, fa3_overlap=True,
                                 rescale_after_pv=True)
    assert_close(*run(1, 1, 1, 200, 40, 64, causal, schedule))


# head dims 64 (128 x 128, two warpgroups) and 256 (128 x 64): fp8_schedule's overlap order
# there takes the late rescale only with the token (their default scales O at P V's issue);
# several KV blocks a tile, so O is rescaled each iteration
FP8_CASES = [("olate", 128, True, (1, 2, 1, 300, 400), True),
             ("olate", 128, False, (2, 2, 2, 200, 260), False),
             ("olate", 64, False, (1, 2, 1, 150, 400), True),
             ("olate", 64, True, (1, 2, 2, 260, 300), False),
             ("olate", 256, False, (1, 1, 1, 100, 260), False),
             ("olate", 256, True, (1, 2, 1, 200, 230), True)]


@pytest.mark.parametrize("variant,head_dim,causal,shape,permuted", FP8_CASES,
                         ids=[f"fp8-{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-"
                              f"{'pvt' if c[4] else 'shfl'}" for c in FP8_CASES])
def test_fp8_rescale_after_pv_against_float64(variant, head_dim, causal, shape, permuted,
                                              monkeypatch):
    from tests.interp.test_attention_fp8_interp import check_schedule

    schedule = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert schedule.rescale_late
    check_schedule(schedule, shape, head_dim, causal, permuted, monkeypatch)
