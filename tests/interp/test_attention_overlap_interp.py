"""The intra-warpgroup overlap (the bench token `overlap`: AttentionSchedule(intra_wg_overlap=
True), the last key block's softmax after the loop) in the numpy interpreter against float64
at head dims 64, 128 and 256, full and causal: key lengths one past a block (129, 65: the
tail block after the loop holds a single key), below one block, several blocks with a tail;
Sq != Skv (causal bottom-right), GQA 2:1, the LSE. The verifier's reduce.coverage errors on
the full mask ("128 values of sk but the tensor has 129") were false positives
(tests/verify/test_attention_overlap_coverage.py): these runs are the kernel's side of it."""

import pytest

from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")


@pytest.mark.parametrize("S,SK", [(129, 129), (64, 129), (130, 65), (200, 257), (100, 300),
                                  (40, 20)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_overlap_against_float64(head_dim, causal, S, SK):
    schedule = BENCH.variant_schedule("overlap", head_dim, causal)
    assert schedule.intra_wg_overlap and not schedule.fa3_overlap
    assert_close(*run(1, 2, 1, S, SK, head_dim, causal, schedule, seed=S + SK + head_dim))
