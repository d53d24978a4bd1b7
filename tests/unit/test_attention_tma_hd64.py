"""The stmatrix + TMA-store epilogue at head dim 64 (bench token "tma": `default+tma`), not a
default (hd64 stores O from registers at every length): the candidate h290 built without
spills but did not verify. Two forms, as default_schedule picks them: two CTAs an SM (128 x
64 tiles, 384 threads entering with 80 registers; full masks up to 1k, causal up to 4k) and
ping-pong at 192 x 128 (three warpgroups; 2k full and up: store_tile_stacked). Each builds for
sm_90a without spills (NVRTC) and verifies with no errors and no unknowns, proving the
staging's obligations (the stmatrix -> bulk-store fence, the slots' reuse) besides the direct
form's. The interpreter runs them against float64 in
tests/interp/test_attention_tma_hd64_interp.py; tests/gpu/test_attention_gpu.py
test_short_prefill_levers on a GPU."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from argus.kernels.attention import default_schedule
from tests.unit.attention_candidates import (BENCH, assert_builds_without_spills,
                                             verified_without_errors)

# (causal, query length): two CTAs an SM (full 1k, causal 2k), ping-pong (full 2k)
CANDIDATES = [(False, 1024), (True, 2048), (False, 2048)]
IDS = [f"d64-{'causal' if c else 'full'}-{n}" for c, n in CANDIDATES]
# what staging O in shared memory for the TMA unit adds to the verifier's obligations
STAGING = {"proxy.fence", "sync.store-read", "smem.race"}


def test_the_token_sets_only_the_epilogue_on_both_forms():
    forms = set()
    for causal, seq_len in CANDIDATES:
        base = BENCH.variant_schedule("default+direct", 64, causal, seq_len)
        s = BENCH.variant_schedule("default+tma", 64, causal, seq_len)
        assert s == default_schedule(64, causal, seq_len)   # the default since the H100 run
        assert s == dataclasses.replace(base, epilogue="tma")
        forms.add((s.ctas_per_sm, s.ordered))
    assert forms == {(2, False), (1, True)}         # two CTAs an SM, and ping-pong


@pytest.mark.parametrize("causal,seq_len", CANDIDATES, ids=IDS)
def test_builds_without_spills(causal, seq_len):
    assert_builds_without_spills(BENCH.variant_schedule("default+tma", 64, causal, seq_len),
                                 64, causal)


@pytest.mark.parametrize("causal,seq_len", CANDIDATES, ids=IDS)
def test_verifies_with_zero_findings(causal, seq_len):
    tma = verified_without_errors(BENCH.variant_schedule("default+tma", 64, causal, seq_len),
                                  64, causal)
    assert not tma.unknowns, "\n".join(str(d) for d in tma.unknowns)
    direct = verified_without_errors(BENCH.variant_schedule("default+direct", 64, causal,
                                                            seq_len), 64, causal)
    proven, before = Counter(d.code for d in tma.proven), Counter(d.code for d in direct.proven)
    added = {code for code in proven if proven[code] > before[code]}
    assert STAGING <= added, (proven - before)
