"""`default+tma` at head dim 64 (the stmatrix + TMA-store epilogue on the hd64 defaults; not a
default: tests/unit/test_attention_tma_hd64.py builds and verifies it) in the numpy interpreter
against float64: both forms the token takes, two CTAs an SM (128 x 64 tiles, "lpt" order) and
ping-pong at 192 x 128 (O stacked into each warpgroup's staging slots), with ragged query and
key lengths (row tails the TMA store clips, a KV tail), GQA 2:1, Sq > Skv, and the LSE. O
starts as NaN, so a row or column block the staged store misses fails here."""

import pytest

from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")


@pytest.mark.parametrize("causal,seq_len", [(False, 1024), (True, 2048), (False, 2048)],
                         ids=["occ2-full", "occ2-causal", "pingpong-full"])
@pytest.mark.parametrize("S,SK", [(300, 330), (200, 90)])
def test_default_tma_at_head_dim_64(causal, seq_len, S, SK):
    schedule = BENCH.variant_schedule("default+tma", 64, causal, seq_len)
    assert schedule.epilogue == "tma" and schedule.store_cols == 0
    assert_close(*run(2, 2, 1, S, SK, 64, causal, schedule, seed=S + causal))
