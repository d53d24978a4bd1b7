"""Causal attention at key blocks wider than the query tile (block_n > block_m): the tiles
whose KV loop runs zero trips (tests/interp/test_attention_causal_wide_keys_interp.py holds the
interpreter's check against float64 at those shapes). Investigated at h327 (2026-12-07): the
verifier is sound there and reports no false finding. The schedules verify with no error, and
two seeded bugs that matter only at those tiles are reported, each with a counterexample at a
zero-trip shape that the interpreter confirms:

  * the diagonal split (`_unmasked_blocks`) taken at the warpgroup's last row instead of its
    first: the block holding the diagonal counts as unmasked. tag.assert ("an unmasked block
    holds only keys a query may see") at S = 63, SK = 128: one 128-key block, the fa3 loop
    `range(1, 1)` empty, the peeled block 0 unmasked; in the interpreter rows see future keys;
  * FA3's order without `at_least` (the producer loads `_kv_blocks` blocks with no minimum of
    one, while the consumer's peeled step always takes one): a tile whose rows see no key (Sq
    > Skv) loads nothing. pipe.totals (producer 0 steps, consumer 1) at S = 65, SK = 1; the
    interpreter deadlocks there.

The bugs are seeded in a copy of argus/kernels/attention.py (tests/loading.load_edited)."""

from __future__ import annotations

import math

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.runtime.interp.machine import InterpError
from argus.kernels import attention as A
from tests.interp.test_attention_causal_wide_keys_interp import SCHEDULES, loop_trips
from tests.interp.test_attention_interp import reference
from tests.loading import load_edited
from tests.mutations.seeded import names_thread

BUGS = {
    "diagonal_at_last_row": [(
        "full = ag.minimum(full, ag.maximum(r0 + SK - S + 1, 0) // block_n)",
        "full = ag.minimum(full, ag.maximum(r0 + 64 + SK - S, 0) // block_n)  "
        "# BUG:diagonal_at_last_row")],
    "no_block_at_least": [(
        "first = 1 if s.intra_wg_overlap or s.fa3_overlap else 0",
        "first = 0  # BUG:no_block_at_least")],
}
FA3_64x128 = SCHEDULES["64x128-fa3"]


def _module(tmp_path, bug):
    return load_edited(A, BUGS[bug] if bug else [], tmp_path / f"attention_{bug or 'same'}.py")


def _interpret(module, S: int, SK: int, s):
    g = torch.Generator().manual_seed(S + SK)
    q = torch.randn(1, 1, S, 64, generator=g).bfloat16()
    k, v = (torch.randn(1, 1, SK, 64, generator=g).bfloat16() for _ in range(2))
    o = torch.full((1, 1, S, 64), float("nan")).bfloat16()
    module.attention_kernel(64, ag.bf16, True, False).interpret(
        q, k, v, o, A.LOG2E / math.sqrt(64), s=s)
    want, _ = reference(q, k, v, True)
    return (o.double() - want).abs().max().item()


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_wide_key_blocks_verify_clean_under_the_causal_mask(name):
    report = verify.run(lower_only(A.attention_kernel(64, ag.bf16, True, False),
                                   s=SCHEDULES[name]), include_proven=True)
    assert not report.errors and not report.unknowns, [str(d) for d in report.diagnostics
                                                       if d.severity != "info"]
    # the causal claims were posed, not skipped
    said = {f.subject for f in report.findings if f.code == "tag.assert"
            and f.status == "proven"}
    for claim in ("the KV loop reaches every key a query may see",
                  "an unmasked block holds only keys a query may see",
                  "the mask keeps exactly the keys a query may see"):
        assert any(claim in m for m in said), claim


def test_fp8_causal_default_has_wider_key_blocks_and_verifies_clean():
    """FP8's causal default at head dim 128 is 128 x 192 (packed P, FA3's order): the library's
    own block_n > block_m schedule."""
    s = A.fp8_schedule(128, True)
    assert s.block_n > s.block_m
    report = verify.run(lower_only(A.attention_kernel(128, ag.e4m3, True, False), s=s))
    assert not report.errors and not report.unknowns, [str(d) for d in report.diagnostics
                                                       if d.severity != "info"]


def test_the_diagonal_split_at_the_last_row_is_reported_at_a_zero_trip_tile(tmp_path):
    module = _module(tmp_path, "diagonal_at_last_row")
    kernel = lower_only(module.attention_kernel(64, ag.bf16, True, False), s=FA3_64x128)
    report = verify.run(kernel)
    bad = [d for d in report.errors if d.code == "tag.assert"
           and "an unmasked block holds only keys a query may see" in d.message]
    assert bad, [str(d) for d in report.errors]
    d = bad[0]
    assert names_thread(d, kernel)
    shapes = d.counterexample["shapes"]
    S, SK = shapes["S"], shapes["SK"]
    # a key past the row's last one (s + SK - S) in a block the split left unmasked, at a
    # shape where the tile reads one block: the fa3 loop runs zero trips
    tags = d.counterexample["tags"][0]
    assert tags["sk"] < SK and tags["sk"] > tags["s"] + SK - S, d.counterexample
    assert 0 in loop_trips(FA3_64x128, S, SK), (S, SK)
    # the seeded bug is real at the verifier's shape (the reference: float64)
    assert _interpret(module, S, SK, FA3_64x128) > 0.1
    assert _interpret(_module(tmp_path, None), S, SK, FA3_64x128) < 2e-2


@pytest.mark.parametrize("S,SK", [(63, 128), (128, 128), (200, 200)])
def test_the_diagonal_split_at_the_last_row_is_wrong_in_the_interpreter(tmp_path, S, SK):
    """Shapes where a tile reads one block (the fa3 loop empty) whose diagonal the bug leaves
    unmasked: S = 63 under SK = 128, the second tile of 128 (and 200, longer)."""
    assert 0 in loop_trips(FA3_64x128, S, SK)
    assert _interpret(_module(tmp_path, "diagonal_at_last_row"), S, SK, FA3_64x128) > 0.1


def test_a_peeled_block_without_its_load_is_reported_at_a_keyless_tile(tmp_path):
    module = _module(tmp_path, "no_block_at_least")
    kernel = lower_only(module.attention_kernel(64, ag.bf16, True, False), s=FA3_64x128)
    report = verify.run(kernel)
    bad = [d for d in report.errors if d.code == "pipe.totals"]
    assert bad, [str(d) for d in report.errors]
    ce = bad[0].counterexample
    assert ce["producer_steps"] == 0 and ce["consumer_steps"] == 1, ce
    S, SK = ce["shapes"]["S"], ce["shapes"]["SK"]
    # a tile whose rows see no key (its last row's last key q0 + block_m - 1 + SK - S < 0):
    # the producer's loop runs zero trips there
    BM = FA3_64x128.block_m
    assert any(q0 + BM + SK - S <= 0 for q0 in range(0, S, BM)), ce
    with pytest.raises(InterpError, match="deadlock"):
        _interpret(module, S, SK, FA3_64x128)
