"""The library attention kernel (argus/kernels/attention.py) in the numpy interpreter against a
float64 torch reference: sequence lengths that are and are not multiples of the blocks, causal
(bottom-right when Sq != Skv, rows without keys zero) and full masks, GQA / MQA, the
[B, S, H, D] layout read through strided views, the log-sum-exp output, each schedule shape
(1, 2 and 3 consumer warpgroups, both epilogues, the persistent walk, the intra-warpgroup
overlap in both orders, ping-pong, the "lpt" tile order, two CTAs an SM, own_blocks)."""

import math

import pytest
import torch

import argus as ag
from argus.kernels.attention import (LOG2E, AttentionSchedule, attention_kernel, default_schedule,
                                     fa3_overlap_schedule)

SMALL = AttentionSchedule(block_m=128, block_n=64, consumers=2)


def reference(q, k, v, causal: bool):
    """float64 attention in [B, H, S, D] with GQA, FlashAttention's bottom-right causal mask;
    rows without a key are zero and their log-sum-exp -inf."""
    group = q.shape[1] // k.shape[1]
    kd = k.double().repeat_interleave(group, 1)
    vd = v.double().repeat_interleave(group, 1)
    s = q.double() @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        S, SK = q.shape[-2], k.shape[-2]
        keep = torch.ones(S, SK, dtype=torch.bool).tril(SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ vd, torch.logsumexp(s, -1)


def run(B, H, HKV, S, SK, D, causal, schedule, *, layout="bhsd", dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    if layout == "bhsd":
        q = torch.randn(B, H, S, D, generator=g).to(dtype)
        k, v = (torch.randn(B, HKV, SK, D, generator=g).to(dtype) for _ in range(2))
        o = torch.full((B, H, S, D), float("nan")).to(dtype)
        views = q, k, v, o
    else:  # [B, S, H, D] storage, the kernel reads the permuted [B, H, S, D] views
        q = torch.randn(B, S, H, D, generator=g).to(dtype)
        k, v = (torch.randn(B, SK, HKV, D, generator=g).to(dtype) for _ in range(2))
        o = torch.full((B, S, H, D), float("nan")).to(dtype)
        views = tuple(t.transpose(1, 2) for t in (q, k, v, o))
    lse = torch.full((B, H, S, 1), float("nan"))
    dt = ag.bf16 if dtype == torch.bfloat16 else ag.f16
    attention_kernel(D, dt, causal, True).interpret(*views, lse, LOG2E / math.sqrt(D),
                                                     s=schedule)
    want, want_lse = reference(*views[:3], causal)
    return views[3], want, lse[..., 0], want_lse


def assert_close(got, want, got_lse, want_lse):
    assert not torch.isnan(got.float()).any(), "rows left unwritten (NaN)"
    err = (got.double() - want).abs().max().item()
    assert err < 2e-2 * max(1.0, want.abs().max().item()), f"max abs error {err}"
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(got_lse), finite), "LSE -inf exactly where no key is seen"
    assert (got_lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("S,SK", [(64, 64), (100, 100), (200, 136), (130, 200), (64, 200)])
@pytest.mark.parametrize("causal", [False, True])
def test_lengths_and_masks(S, SK, causal):
    """Tails of query rows (not stored) and keys (masked to -inf), causal diagonals."""
    assert_close(*run(1, 2, 2, S, SK, 64, causal, SMALL))


@pytest.mark.parametrize("variant", ["default", "overlap", "fa3", "ping-pong"])
@pytest.mark.parametrize("causal", [False, True])
def test_more_queries_than_keys(causal, variant):
    """S > SK: under the causal mask the first S - SK rows see no key (zeros, LSE -inf), and
    whole tiles of them load no KV block at all."""
    schedule = AttentionSchedule(block_m=128, block_n=64, consumers=2,
                                 intra_wg_overlap=variant == "overlap",
                                 fa3_overlap=variant == "fa3",
                                 ordered=variant == "ping-pong")
    got, want, got_lse, want_lse = run(1, 1, 1, 200, 40, 64, causal, schedule)
    assert_close(got, want, got_lse, want_lse)
    if causal:
        assert (got[0, 0, :160].float() == 0).all()
        assert torch.isneginf(got_lse[0, 0, :160]).all()


@pytest.mark.parametrize("H,HKV", [(4, 2), (4, 1)])
def test_gqa_and_mqa(H, HKV):
    """Query head h reads kv head h // (H / HKV)."""
    assert_close(*run(2, H, HKV, 96, 72, 64, True, SMALL, seed=H + HKV))


def test_bshd_layout_through_strided_views():
    """[B, S, H, D] storage read and written through permuted views (no copies)."""
    assert_close(*run(2, 2, 1, 80, 150, 64, True, SMALL, layout="bshd"))


def test_fp16():
    assert_close(*run(1, 2, 1, 70, 90, 64, False, SMALL, dtype=torch.float16))


@pytest.mark.parametrize("schedule", [
    AttentionSchedule(block_m=64, block_n=32, consumers=1, stages=3),
    AttentionSchedule(block_m=192, block_n=128, consumers=3, producer_regs=32,
                      consumer_regs=160),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, epilogue="tma"),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, persistent=True, num_sms=3),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, intra_wg_overlap=True),
    AttentionSchedule(block_m=64, block_n=32, consumers=1, intra_wg_overlap=True,
                      persistent=True, num_sms=3),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, ordered=True),
    AttentionSchedule(block_m=192, block_n=64, consumers=3, producer_regs=32,
                      consumer_regs=160, ordered=True, persistent=True, num_sms=3),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, fa3_overlap=True),
    AttentionSchedule(block_m=64, block_n=32, consumers=1, fa3_overlap=True, stages=3,
                      persistent=True, num_sms=3),
    AttentionSchedule(block_m=192, block_n=64, consumers=3, producer_regs=32,
                      consumer_regs=160, fa3_overlap=True, epilogue="tma"),
    AttentionSchedule(block_m=192, block_n=192, consumers=3, producer_regs=32,
                      consumer_regs=160),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, fa3_overlap=True, tile_order="lpt"),
    AttentionSchedule(block_m=192, block_n=64, consumers=3, producer_regs=32,
                      consumer_regs=160, ordered=True, tile_order="lpt"),
    AttentionSchedule(block_m=64, block_n=32, consumers=1, fa3_overlap=True,
                      persistent=True, num_sms=3, tile_order="lpt"),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, consumer_regs=104, ctas_per_sm=2,
                      approx_exp2=True, fold_scale=True),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, consumer_regs=104, ctas_per_sm=2,
                      persistent=True, num_sms=2, tile_order="lpt"),
    AttentionSchedule(block_m=128, block_n=64, consumers=2, own_blocks=True),
    AttentionSchedule(block_m=192, block_n=64, consumers=3, producer_regs=32,
                      consumer_regs=160, fa3_overlap=True, own_blocks=True, persistent=True,
                      num_sms=3),
], ids=["1wg", "3wg", "tma-store", "persistent", "overlap", "overlap-persistent", "ping-pong",
        "ping-pong-3wg-persistent", "fa3", "fa3-1wg-persistent", "fa3-3wg-tma", "3wg-bn192",
        "fa3-lpt", "ping-pong-3wg-lpt", "fa3-1wg-persistent-lpt", "occ2", "occ2-persistent-lpt",
        "own", "fa3-3wg-own-persistent"])
@pytest.mark.parametrize("causal", [False, True])
def test_schedules(schedule, causal):
    """Every schedule shape computes the same attention (the persistent walk with 3 CTAs
    strides over 2 x 2 x 2 tiles, longest first under the causal mask; tile_order "lpt" walks
    heads fastest, 2 CTAs an SM at head dim 64 in 104 registers)."""
    assert_close(*run(2, 2, 1, 150, 170, 64, causal, schedule, seed=3))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("S,SK", [(130, 300), (300, 130), (256, 256)])
def test_own_blocks_with_the_default_schedules(head_dim, S, SK):
    """own_blocks on each causal default without ping-pong (the overlap order; 128 x 64 at
    head dim 256, where the first warpgroup skips a block every tile): Sq < Skv, Sq > Skv (the
    first rows see no key, whole warpgroups none), the diagonal on block edges."""
    import dataclasses
    schedule = dataclasses.replace(default_schedule(head_dim, True, 1024), own_blocks=True)
    assert_close(*run(1, 2, 1, S, SK, head_dim, True, schedule, seed=head_dim + S))


@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("causal", [False, True])
def test_lpt_order_over_heads_batches_and_tiles(causal, persistent):
    """tile_order "lpt" decodes (batch, head, m tile) from a grid or a unit where heads run
    fastest: 3 batches x 3 query heads (GQA 3:1) x 3 m tiles of 64 rows, a query tail, Sq <
    Skv (causal bottom-right); a wrong decode leaves rows NaN or reads another head's keys."""
    schedule = AttentionSchedule(block_m=64, block_n=32, consumers=1, tile_order="lpt",
                                 persistent=persistent, num_sms=4)
    assert_close(*run(3, 3, 1, 150, 170, 64, causal, schedule, seed=11))


def test_head_dim_128():
    assert_close(*run(1, 1, 1, 70, 100, 128, True, SMALL))


@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_128_wide_blocks(causal):
    """128 x 192 in the plain loop (bench candidate bn192 at head dim 128): 300 keys, a
    192-key block and a tail block."""
    schedule = AttentionSchedule(block_m=128, block_n=192, consumers=2)
    assert_close(*run(1, 2, 1, 130, 300, 128, causal, schedule, seed=7))


@pytest.mark.parametrize("num_sms", [1, 2, 3])
def test_persistent_causal_walk_with_one_key(num_sms):
    """The shape tests/verify/test_attention_schedules.py's xfail names (S = 129, SK = 1): the
    persistent walk's producer and consumers agree on every tile's KV steps (the interpreter
    would report a hang), the first tile's rows see no key."""
    schedule = AttentionSchedule(persistent=True, num_sms=num_sms)
    assert_close(*run(1, 1, 1, 129, 1, 128, True, schedule))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_overlap_schedule_per_head_dim(head_dim, causal):
    """fa3_overlap_schedule (the tile shapes the GPU run takes) at every head dim, GQA 2:1,
    lengths that are no multiple of the blocks, Sq < Skv (causal bottom-right)."""
    assert_close(*run(1, 4, 2, 130, 300, head_dim, causal,
                      fa3_overlap_schedule(head_dim, causal), seed=head_dim))


@pytest.mark.parametrize("head_dim,causal,seq_len", [
    (64, False, 130), (64, True, 130), (64, True, 4096), (128, False, 130), (128, True, 130),
    (256, False, 130), (256, True, 130)])
def test_default_schedules(head_dim, causal, seq_len):
    """Each schedule argus.ops.attention picks (default_schedule by head dim, mask and query
    length: at causal head dim 64 short and long queries take different ones), run at 130
    queries, GQA 2:1, 300 keys."""
    assert_close(*run(1, 4, 2, 130, 300, head_dim, causal,
                      default_schedule(head_dim, causal, seq_len), seed=head_dim + causal))


@pytest.mark.parametrize("head_dim,causal,seq_len", [
    (64, False, 130), (64, True, 130), (64, True, 4096), (128, False, 130), (128, True, 130),
    (256, True, 130)])
def test_default_schedules_with_the_softmax_diet(head_dim, causal, seq_len):
    """The default schedules with exp2 on the SFU alone (ftz) and the scale folded into the
    exponent (AttentionSchedule.approx_exp2, fold_scale: the bench's `default+fast`): the row
    max of the raw scores, masked keys -inf before the scale, rows past the keys zeros, LSE."""
    import dataclasses
    schedule = dataclasses.replace(default_schedule(head_dim, causal, seq_len),
                                   approx_exp2=True, fold_scale=True)
    assert_close(*run(1, 4, 2, 130, 300, head_dim, causal, schedule, seed=head_dim + causal))


def test_softmax_diet_with_queries_past_the_keys():
    """Causal with Sq > Skv: the first rows see no key (zeros, LSE -inf) under the folded
    scale too (-inf * scale stays -inf, the guard subtracts 0)."""
    import dataclasses
    schedule = dataclasses.replace(fa3_overlap_schedule(128, True), approx_exp2=True,
                                   fold_scale=True)
    assert_close(*run(1, 2, 1, 200, 70, 128, True, schedule))


@pytest.mark.parametrize("causal", [False, True])
def test_three_warpgroups_at_head_dim_128(causal):
    """Bench candidate `3wg+fast` at head dim 128: 192 query rows in three 160-register
    warpgroups, the plain loop (O + S = 128 registers: no spills, NVRTC 13.0) with the
    softmax diet; 130 queries (a tile partly past the end), GQA 2:1, 300 keys."""
    import dataclasses
    schedule = AttentionSchedule(block_m=192, block_n=128, consumers=3, producer_regs=32,
                                 consumer_regs=160, approx_exp2=True, fold_scale=True)
    assert_close(*run(1, 4, 2, 130, 300, 128, causal, schedule, seed=3 + causal))
