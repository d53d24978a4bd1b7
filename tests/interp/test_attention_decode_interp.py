"""Decode attention (argus/kernels/attention_decode.py through argus/ops/attention_decode.py's
host path) in the numpy interpreter against a float64 reference: 1, 8 and 16 query tokens,
GQA / MQA (the group x tokens packed as one tile's rows, two consumer warpgroups above 64
rows, row chunks above 128), KV lengths that are not multiples of the block, splits > 1
(chosen by num_splits, forced, and one split left without blocks), the direct one-split path,
causal masks (bottom-right: the last Sq positions), tokens that see no key, the [B, S, H, D]
layout, fp16, head dims 64 / 128 / 256 and the log-sum-exp."""

import math

import pytest
import torch

from argus.kernels.attention_decode import DecodeSchedule, num_splits
from argus.ops.attention_decode import run_decode
from tests.interp.test_attention_interp import reference


def interpret(kernel_fn, compile_time, tensors, scalars):
    kernel_fn.interpret(*tensors, **scalars, **compile_time)


def run(B, H, HKV, S, SK, D, causal, *, layout="bhsd", dtype=torch.bfloat16, splits=None,
        schedule=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    if layout == "bhsd":
        q = torch.randn(B, H, S, D, generator=g).to(dtype)
        k, v = (torch.randn(B, HKV, SK, D, generator=g).to(dtype) for _ in range(2))
        views = q, k, v
    else:  # [B, S, H, D] storage
        q = torch.randn(B, S, H, D, generator=g).to(dtype)
        k, v = (torch.randn(B, SK, HKV, D, generator=g).to(dtype) for _ in range(2))
        views = tuple(t.transpose(1, 2) for t in (q, k, v))
    out, lse = run_decode(q, k, v, causal, 1.0 / math.sqrt(D), layout, True, splits=splits,
                          schedule=schedule, execute=interpret)
    want, want_lse = reference(*views, causal)
    got = out if layout == "bhsd" else out.transpose(1, 2)
    assert tuple(out.shape) == tuple(q.shape)
    return got, want, lse, want_lse


def assert_close(got, want, got_lse, want_lse):
    assert not torch.isnan(got.float()).any(), "rows left unwritten (NaN)"
    err = (got.double() - want).abs().max().item()
    assert err < 2e-2 * max(1.0, want.abs().max().item()), f"max abs error {err}"
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(got_lse), finite), "LSE -inf exactly where no key is seen"
    assert (got_lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("S", [1, 8, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_tokens_and_masks(S, causal):
    """GQA 4:1 (4 x S packed rows), 1001 keys (not a multiple of 128), splits chosen by the
    heuristic (two (batch, kv head) units: more than one split)."""
    assert num_splits(2, math.ceil(1001 / 128)) > 1
    assert_close(*run(1, 8, 2, S, 1001, 64, causal))


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_forced_splits(splits):
    """splits=1: the direct path (no combine); 4 splits of 5 blocks: 2, 2, 1 and an empty
    split (zeros, LSE -inf, weighed 0 by the combine)."""
    schedule = DecodeSchedule(block_n=64, stages=2)
    assert_close(*run(2, 4, 2, 2, 300, 64, True, splits=splits, schedule=schedule))


def test_mqa_two_warpgroups():
    """MQA: 8 query heads x 16 tokens = 128 packed rows, two consumer warpgroups."""
    assert_close(*run(1, 8, 1, 16, 200, 64, True))


def test_row_chunks():
    """32 query heads on one kv head x 5 tokens = 160 packed rows: two launches over row
    chunks of 125 and 35 rows (chunks start at a multiple of Sq, so tokens stay r % Sq)."""
    assert_close(*run(1, 32, 1, 5, 150, 64, True))


@pytest.mark.parametrize("causal", [False, True])
def test_more_tokens_than_keys(causal):
    """Sq = 8 > Skv = 5: under the causal mask the first 3 tokens see no key (zeros, -inf)."""
    assert_close(*run(1, 2, 1, 8, 5, 64, causal))


@pytest.mark.parametrize("S", [1, 4])
def test_bshd_layout(S):
    """[B, S, H, D] in place for k and v; q's packed rows are a copy when S > 1 (two strides),
    and the output comes back in [B, S, H, D]."""
    assert_close(*run(2, 4, 2, S, 130, 64, True, layout="bshd"))


def test_fp16():
    assert_close(*run(1, 4, 2, 3, 129, 64, False, dtype=torch.float16))


@pytest.mark.parametrize("D", [128, 256])
def test_head_dims(D):
    assert_close(*run(1, 4, 1, 2, 140, D, True, splits=2))


def test_no_keys():
    got, want, lse, _ = run(1, 2, 1, 1, 0, 64, False)
    assert torch.equal(got, torch.zeros_like(got)) and torch.isinf(lse).all()


@pytest.mark.parametrize("stagger", [3, 7])
@pytest.mark.parametrize("causal", [False, True])
def test_staggered_walk(stagger, causal):
    """DecodeSchedule.stagger: CTA u walks its 16 blocks from min((u % 8) x stagger, 16) and
    wraps (the tail block and, causal, the diagonal block land mid-walk); 6 (batch, kv head)
    CTAs take 6 different rotations (stagger 7: 0, 7, 14, then 16 = in order). One split: the
    staggered walk is for the direct kernel."""
    schedule = DecodeSchedule(block_n=64, stages=2, stagger=stagger)
    assert_close(*run(3, 8, 2, 4, 1001, 64, causal, splits=1, schedule=schedule))


@pytest.mark.parametrize("block_n,stagger,splits,causal", [(176, 0, 3, False),
                                                           (176, 2, 1, True),
                                                           (192, 0, 1, True)])
def test_blocks_of_176_and_192_keys(block_n, stagger, splits, causal):
    """The bench's bn176+st2 / bn192+st2 variants (FA3's 176-key blocks at hd128): blocks that
    are not a power of two, split (1001 keys: 6 blocks, 2 a split) or direct and staggered."""
    schedule = DecodeSchedule(block_n=block_n, stages=2, stagger=stagger)
    assert_close(*run(2, 8, 2, 3, 1001, 128, causal, splits=splits, schedule=schedule))


@pytest.mark.parametrize("blocks", [1, 2, 5, 16])
@pytest.mark.parametrize("stagger", [0, 3])
def test_two_streams(blocks, stagger):
    """DecodeSchedule.streams=2: the direct kernel walks its two halves alternately (0, h, 1,
    h + 1, ...), alone or after the staggered rotation, odd and even block counts (the key
    tail block lands mid-walk), causal."""
    schedule = DecodeSchedule(block_n=64, stages=2, stagger=stagger, streams=2)
    assert_close(*run(3, 8, 2, 2, 64 * blocks - 7, 64, True, splits=1, schedule=schedule))
