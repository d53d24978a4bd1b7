"""The fused-combine split decode kernel (decode_kernel(..., fused=True); DecodeSchedule
fused_combine=True) through the op's host path in the numpy interpreter, against float64:
each split stores its partial, draws a ticket from its (batch, kv head, warpgroup) counter,
and the warpgroup that draws the last merges the splits into O and LSE, in one launch.
Random data (never zeros), GQA up to 64 packed rows (one consumer warpgroup), causal or not,
KV lengths off the block, an empty split, splits that are not a power of two (the merge's
padded splits read as weight 0), head dims 64 / 128 / 256; the counters are left at zero."""

import math

import pytest
import torch

from argus.errors import LaunchError
from argus.kernels.attention_decode import DecodeSchedule, num_splits
from argus.ops.attention_decode import run_decode
from tests.interp.test_attention_decode_interp import assert_close, reference

FUSED = DecodeSchedule(block_n=64, stages=2, fused_combine=True)


def run_fused(B, H, HKV, S, SK, D, causal, *, splits=None, schedule=FUSED, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, S, D, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(B, HKV, SK, D, generator=g).to(torch.bfloat16) for _ in range(2))
    launches = []

    def execute(kernel_fn, compile_time, tensors, scalars):
        launches.append((kernel_fn.trace(**compile_time).name, tensors))
        kernel_fn.interpret(*tensors, **scalars, **compile_time)

    out, lse = run_decode(q, k, v, causal, 1.0 / math.sqrt(D), "bhsd", True,
                          splits=splits, schedule=schedule, execute=execute)
    want, want_lse = reference(q, k, v, causal)
    return (out, want, lse, want_lse), launches


def _check(launches, fused_launches: int):
    names = [n for n, _ in launches]
    assert not any("combine" in n for n in names), names        # no second launch
    fused = [(n, t) for n, t in launches if n.endswith("_fused")]
    assert len(fused) == fused_launches, names
    for _, tensors in fused:
        assert int(tensors[-1].abs().sum()) == 0, "every counter is back at zero"


@pytest.mark.parametrize("S", [1, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_fused(S, causal):
    """GQA 4:1, 1001 keys (16 blocks of 64, the last ragged), splits by the heuristic."""
    assert num_splits(2, math.ceil(1001 / 64)) > 1
    got, launches = run_fused(1, 8, 2, S, 1001, 64, causal)
    assert_close(*got)
    _check(launches, 1)


@pytest.mark.parametrize("splits", [2, 3, 4])
def test_forced_splits_and_an_empty_one(splits):
    """300 keys in 5 blocks: 3 splits (pad 4: one padded split of weight 0), 4 splits of
    2, 2, 1 and 0 blocks (the empty split stores zeros and LSE -inf and still draws its
    ticket, so the counter reaches its wrap)."""
    got, launches = run_fused(2, 4, 2, 2, 300, 64, True, splits=splits)
    assert_close(*got)
    _check(launches, 1)


def test_64_packed_rows():
    """GQA 4:1 x 16 tokens = 64 packed rows, all of the one consumer warpgroup's: 16 merge
    chunks of 4 rows (merge_rows(4, 64) = 16 at 4 padded splits: 4 chunks)."""
    got, launches = run_fused(1, 8, 2, 16, 700, 64, True, splits=3)
    assert_close(*got)
    _check(launches, 1)


def test_more_than_64_rows_is_refused():
    """The fused merge takes one consumer warpgroup (DecodeSchedule's rule)."""
    with pytest.raises(ValueError, match="one consumer warpgroup"):
        DecodeSchedule(block_n=64, stages=2, consumers=2, fused_combine=True)
    with pytest.raises(LaunchError, match="cannot run 80 packed rows"):
        run_fused(1, 16, 1, 5, 150, 64, True, splits=2)


@pytest.mark.parametrize("D", [128, 256])
def test_head_dims(D):
    got, launches = run_fused(1, 4, 1, 2, 333, D, False, splits=2,
                              schedule=DecodeSchedule(block_n=64, stages=2,
                                                      fused_combine=True))
    assert_close(*got)
    _check(launches, 1)


def test_one_split_takes_the_direct_kernel():
    got, launches = run_fused(1, 4, 2, 1, 100, 64, False, splits=1)
    assert_close(*got)
    assert [n for n, _ in launches] == ["attention_decode_d64_bf16"]


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_any_split_may_arrive_last(order, monkeypatch):
    """The interpreter runs CTAs in grid order (split 0 first, so the last split merges);
    run them reversed (split 0 arrives last and merges) and shuffled: the same answer."""
    import itertools
    import random
    import types

    from argus.runtime.interp import machine

    def product(*ranges):
        items = list(itertools.product(*ranges))
        if order == "reversed":
            return iter(items[::-1])
        random.Random(5).shuffle(items)
        return iter(items)
    monkeypatch.setattr(machine, "itertools", types.SimpleNamespace(product=product))
    got, launches = run_fused(2, 8, 2, 1, 1001, 64, True, splits=5)
    assert_close(*got)
    _check(launches, 1)


def test_two_ctas_an_sm_schedule_through_the_op():
    """DecodeSchedule.ctas_per_sm = 2 (the bench's bn64+st2+occ2): the op's split rule fills
    two CTA slots an SM (num_splits(..., ctas_per_sm=2)), fused or not; the interpreter
    ignores the occupancy hint itself, so this checks the host path and the kernels'
    arithmetic at that split count against float64."""
    for fused in (False, True):
        s = DecodeSchedule(block_n=64, stages=2, consumer_regs=232, ctas_per_sm=2,
                           fused_combine=fused)
        got, launches = run_fused(1, 8, 8, 1, 4096, 64, False, schedule=s)
        assert_close(*got)
        part = launches[0][1][3]                     # OP [B * HKV, SPLITS, GS, D]
        assert part.shape[1] == num_splits(8, 64, ctas_per_sm=2) == 2 * num_splits(8, 64)
        assert len(launches) == (1 if fused else 2)
