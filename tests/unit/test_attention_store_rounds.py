"""Two short-prefill levers (h290, no GPU: candidates for scripts/gpu_attention_bench.py),
neither a default:

* `store_cols` (token "tmaN"): the stmatrix + TMA-store epilogue staging N columns of O a
  round. At head dim 256 a whole 128 x 256 staging tile (64 KB) does not fit beside Q (64 KB)
  and two K and V stages (128 KB); two rounds of 128 columns (32 KB) do, so head dim 256 can
  leave the direct epilogue (64 four-byte st.global a thread, each warp store 16 bytes in 8
  rows).
* `prefetch_next_q` (token "pfq", implies the persistent walk): the producer prefetches the Q
  tile of its next unit into L2 as each unit's loads start, so the Q load at a tile boundary
  (after the last S) does not wait on HBM.

Each builds for sm_90a without spills (NVRTC), verifies with zero findings (errors and
unknowns), and the default schedules keep both off. The interpreter runs them against float64
and checks the prefetched boxes in tests/interp/test_attention_store_rounds_interp.py."""

from __future__ import annotations

import dataclasses

import pytest

import argus as ag
from argus.compiler import compile_kernel, front_end
from argus.kernels.attention import (AttentionSchedule, attention_kernel, default_schedule,
                                     smem_bytes)
from argus.target.limits import smem_per_sm_share
from tests.unit.attention_candidates import (BENCH, assert_builds_without_spills,
                                             verified_without_errors)

# (variant, head dim, causal, query length): the rows the GPU run compares with "default"
CANDIDATES = [("default+tma128", 256, False, 1024), ("default+tma128", 256, True, 1024),
              ("default+tma128", 256, False, 4096), ("default+tma128", 256, True, 2048),
              ("default+tma128+pfq", 256, False, 1024), ("default+tma128+pfq", 256, True, 1024),
              ("default+tma128+pfq", 256, True, 2048), ("default+pfq", 128, False, 1024),
              ("default+pfq", 128, True, 2048)]
IDS = [f"{v}-d{d}-{'causal' if c else 'full'}-{n}" for v, d, c, n in CANDIDATES]


def _schedule(variant: str, head_dim: int, causal: bool, seq_len: int) -> AttentionSchedule:
    return BENCH.variant_schedule(variant, head_dim, causal, seq_len)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_len", [1024, 2048, 4096])
def test_the_tokens_set_only_their_fields(causal, seq_len):
    for d in (128, 256):
        base = default_schedule(d, causal, seq_len)
        assert _schedule("default+tma128", d, causal, seq_len) == \
            dataclasses.replace(base, epilogue="tma", store_cols=128)
        assert _schedule("default+tma64", d, causal, seq_len).store_cols == 64
        # "pfq" takes the walk where the default is the grid (head dim 256 at 4k full)
        assert _schedule("default+pfq", d, causal, seq_len) == \
            dataclasses.replace(base, prefetch_next_q=True, persistent=True)
        assert _schedule("default+tma128+pfq", d, causal, seq_len) == \
            dataclasses.replace(base, epilogue="tma", store_cols=128, prefetch_next_q=True,
                                persistent=True)


def test_defaults_keep_the_prefetch_off_and_round_only_at_256():
    """The Q prefetch lost on the H100 (docs/perf/attention.md): no default takes it; the
    store rounds are hd256's TMA-store default (the whole tile does not fit there)."""
    for d in (64, 128, 256):
        for causal in (False, True):
            for n in (None, 512, 1024, 2048, 4096, 8192, 16384):
                s = default_schedule(d, causal, n)
                assert not s.prefetch_next_q, (d, causal, n)
                rounds = 128 if d == 256 and s.epilogue == "tma" else 0
                assert s.store_cols == rounds, (d, causal, n)


def test_rounds_fit_head_dim_256_where_the_whole_tile_does_not():
    """Q 64 KB + 2 x 2 stages of 64 x 256 (128 KB) + 1 KB: a 64 KB staging tile exceeds the
    227 KB a CTA may take, a 32 KB one (two rounds of 128 columns) fits."""
    base = dataclasses.replace(default_schedule(256, False, 1024), epilogue="direct",
                               store_cols=0)     # the default before the H100 run
    whole = dataclasses.replace(base, epilogue="tma")
    rounds = dataclasses.replace(base, epilogue="tma", store_cols=128)
    assert rounds == default_schedule(256, False, 1024)
    assert smem_bytes(whole, 256) > smem_per_sm_share(1) >= smem_bytes(rounds, 256)
    assert any("shared memory" in p for p in whole.problems_for(256))
    assert rounds.problems_for(256) == []
    # the default's direct epilogue stages nothing
    assert smem_bytes(base, 256) == smem_bytes(rounds, 256) - 128 * 128 * 2
    # the launch's own count (buffers aligned, barriers) within the limit too
    launch = front_end(attention_kernel(256, ag.bf16, False, False), s=rounds).dynamic_smem
    assert smem_bytes(rounds, 256) - 1024 < launch <= smem_per_sm_share(1)


def test_what_the_fields_refuse():
    with pytest.raises(ValueError, match="store_cols=128.*epilogue='tma'"):
        AttentionSchedule(store_cols=128)                    # the direct epilogue
    with pytest.raises(ValueError, match="a multiple of 64"):
        AttentionSchedule(epilogue="tma", store_cols=96)
    with pytest.raises(ValueError, match="store_cols=-64 must be an int >= 0"):
        AttentionSchedule(epilogue="tma", store_cols=-64)    # (-64 % 64 == 0)
    assert any("does not divide head_dim=64" in p for p in
               AttentionSchedule(epilogue="tma", store_cols=128).problems_for(64))
    with pytest.raises(ValueError, match="needs persistent=True"):
        AttentionSchedule(prefetch_next_q=True)
    with pytest.raises(ValueError, match="ping-pong"):
        AttentionSchedule(block_m=192, consumers=3, producer_regs=32, consumer_regs=160,
                          ordered=True, persistent=True, prefetch_next_q=True)


def _source(s: AttentionSchedule, head_dim: int, causal: bool) -> str:
    return compile_kernel(attention_kernel(head_dim, ag.bf16, causal, False), verify=False,
                          s=s).source.text


def test_the_generated_code():
    """Two rounds of stmatrix + two 64-column bulk stores per warpgroup (four store sites),
    the default none; the prefetch: one box of Q a 64-column atom, under the guard that a
    next unit exists."""
    base = dataclasses.replace(default_schedule(256, False, 1024), epilogue="direct",
                               store_cols=0)
    rounds = _source(dataclasses.replace(base, epilogue="tma", store_cols=128), 256, False)
    direct = _source(base, 256, False)
    assert rounds.count("tma_store_4d") == 4 and direct.count("tma_store_4d") == 0
    assert "tma_prefetch" not in rounds
    pf = _source(_schedule("default+tma128+pfq", 256, False, 1024), 256, False)
    assert pf.count("tma_prefetch_4d") == 4
    pf128 = _source(_schedule("default+pfq", 128, True, 2048), 128, True)
    assert pf128.count("tma_prefetch_4d") == 2


@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CANDIDATES, ids=IDS)
def test_candidate_builds_without_spills(variant, head_dim, causal, seq_len):
    assert_builds_without_spills(_schedule(variant, head_dim, causal, seq_len), head_dim,
                                 causal)


@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CANDIDATES, ids=IDS)
def test_candidate_verifies_with_zero_findings(variant, head_dim, causal, seq_len):
    report = verified_without_errors(_schedule(variant, head_dim, causal, seq_len), head_dim,
                                     causal)
    unknown = [d for d in report.unknowns
               if "z3: timeout" not in d.message and "no budget left" not in d.message]
    assert not unknown, "\n".join(str(d) for d in unknown)
    assert len(report.proven) >= 200
