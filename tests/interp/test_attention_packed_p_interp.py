"""packed_p (bench token "packp", h295: P_{j-1} carried across the fa3 loop's back edge as the
packed bf16 A fragment) in the numpy interpreter against float64, at the wider key blocks it
lets build (tests/unit/test_attention_packed_p.py has the lowering, CUDA, spill and token
checks): FA3's 128 x 176 at head dim 128 (the direct epilogue: the TMA staging tile does not
fit beside 176-key stages), 128 x 160 with the default's TMA-store epilogue, and head dim
256's 128 x 80; ragged query and key lengths (a KV tail in a partial block, several blocks a
tile so P crosses the back edge), GQA 2:1, the LSE, the causal diagonal."""

import dataclasses

import pytest

from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

CASES = [("default+packp+bn176+direct", 128, False, (1, 2, 1, 150, 400)),
         ("default+packp+bn176+direct", 128, True, (1, 2, 1, 300, 400)),
         ("default+packp+bn160", 128, False, (1, 2, 1, 150, 330)),
         ("default+packp+bn160", 128, True, (2, 2, 1, 200, 330)),
         ("default+packp+bn80+direct", 256, True, (1, 2, 1, 200, 250))]


@pytest.mark.parametrize("variant,head_dim,causal,shape", CASES,
                         ids=[f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}" for c in CASES])
def test_packed_p_against_float64(variant, head_dim, causal, shape):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, 4096),
                                   num_sms=3)
    assert schedule.packed_p and schedule.fa3_overlap
    B, H, HKV, S, SK = shape
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule, seed=S + SK + causal))


# FP8 (h313): P carried as e4m3 words, on a permuted V^T (the words are P V's A registers) and
# on the natural one (each word gathered from two quad lanes at the issue); several KV blocks
# a tile, so P crosses the back edge
FP8_CASES = [("pvt+packp", 128, True, (1, 2, 1, 300, 400), True),
             ("pvt+packp", 128, False, (2, 2, 2, 200, 260), True),
             ("packp", 128, True, (1, 2, 1, 200, 330), False),
             # the wider key blocks (V^T in 3 x 64, 7 x 32 and 2 x 128-key atoms, P V issued
             # per atom from views of P's words): a KV tail in a partial block, 2-4 blocks
             ("pvt+packp+bn192", 128, True, (1, 2, 1, 300, 700), True),
             ("pvt+packp+bn224", 128, False, (1, 2, 1, 150, 500), True),
             ("packp+bn224", 128, True, (1, 1, 1, 200, 470), False),
             ("pvt+packp+bn256", 128, True, (1, 2, 1, 260, 600), True)]


@pytest.mark.parametrize("variant,head_dim,causal,shape,permuted", FP8_CASES,
                         ids=[f"fp8-{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-"
                              f"{'pvt' if c[4] else 'shfl'}" for c in FP8_CASES])
def test_fp8_packed_p_against_float64(variant, head_dim, causal, shape, permuted,
                                      monkeypatch):
    from tests.interp.test_attention_fp8_interp import check_schedule

    schedule = dataclasses.replace(BENCH.fp8_variant_schedule(variant, head_dim, causal),
                                   num_sms=3)
    assert schedule.packed_p and schedule.fa3_overlap
    check_schedule(schedule, shape, head_dim, causal, permuted, monkeypatch)
