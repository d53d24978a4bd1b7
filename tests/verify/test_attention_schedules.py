"""The library attention kernels verify with zero findings: every schedule argus.ops.attention
picks (default_schedule: head dims 64, 128, 256; full and causal; short and long causal
queries at head dim 64; with and without the LSE output), and the plain loop (base_schedule)
with both epilogues and fp16, lowered and proven (compile_kernel refuses a kernel on any
verifier error). Nothing unknown either (but the coverage of several TMA-store sites, as for
the GEMM): the KV steps nested in Q's step, the separate K and V
rings, the masks under a uniform branch and the GQA head index are all modelled. So are the
"lpt" tile order (heads fastest in the grid) and two CTAs an SM (the `occ2` bench candidate).

The persistent walk (AttentionSchedule(persistent=True)) decodes its tiles with div/mod of
runtime extents; it verifies with zero findings too, full and causal (as the default walks
above; own_blocks, the "lpt" and "snake" orders and head dim 256:
tests/verify/test_persistent_causal_walk.py, test_persistent_own_blocks.py). Two false
positives it once raised are regression tests here: wgmma.k-once counted the unit loop around
P V as a k loop (the O accumulator is zeroed per unit: a loop is a reduction loop by its
accumulator's data flow, not by nesting), and pipe.totals compared trip x blocks(unit) of two
different units (under the causal mask a unit's KV block count depends on the unit: the totals
are sums, compared iteration by iteration)."""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import (SHORT_CAUSAL_64, AttentionSchedule, attention_kernel,
                                     base_schedule, default_schedule)

# the plain loop (base_schedule): both epilogues, fp16, the LSE output
CASES = [
    (64, ag.bf16, False, False, "direct"),
    (64, ag.bf16, True, True, "tma"),
    (128, ag.bf16, False, False, "direct"),
    (128, ag.bf16, True, False, "tma"),
    (128, ag.f16, True, True, "direct"),
    (256, ag.bf16, False, True, "direct"),   # (Q, the rings and O staging exceed 227 KB)
    (256, ag.bf16, True, False, "direct"),
]


# every schedule default_schedule can return, by (head_dim, causal, query length): short
# queries take other schedules (two CTAs at head dim 64; the persistent walk, with Q released
# early up to 1k, under full masks at 128 and 256; the snake-ordered walk for causal 128 up
# to 8k and 256 up to 4k, with own blocks at 256 from 2k)
DEFAULTS = [(64, False, None), (64, True, None), (64, True, SHORT_CAUSAL_64), (64, False, 1024),
            (128, False, None), (128, True, None), (256, False, None), (256, True, None),
            (256, True, 4096), (128, False, 1024), (128, False, 2048), (256, False, 1024),
            (256, False, 2048), (128, True, 1024), (128, True, 8192), (256, True, 1024),
            (256, True, 2048), (64, False, 4096)]


def _assert_clean(report, epilogue: str = "direct", head_dim: int = 64) -> None:
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    # the TMA-store epilogue stores head_dim / 64 column blocks from as many store sites;
    # coverage over several sites is not attempted (docs/verify.md), as for the GEMM
    allowed = {"store.coverage", "store.once"} if epilogue == "tma" and head_dim > 64 else set()
    # a query that runs out of solver time on a loaded machine is honest (docs/verify.md);
    # any other unknown (an unmodelled construct, a failed proof) is a finding
    unknown = [d for d in report.unknowns if d.code not in allowed
               and "z3: timeout" not in d.message and "no budget left" not in d.message]
    assert not unknown, "\n".join(str(d) for d in unknown)
    # a folded scale (the softmax diet) states qk_scale > 0 (ag.require, checked at every
    # launch), so the fold is proven, not a warning (tests/verify/test_softmax_fold.py)
    stats = [d for d in report.diagnostics if d.code == "softmax.stats" and d.severity != "note"]
    assert not stats, "\n".join(str(d) for d in stats)
    assert len(report.proven) >= 60


@pytest.mark.parametrize("head_dim,dtype,causal,lse,epilogue", CASES,
                         ids=[f"d{d}-{t.name}-{'causal' if c else 'full'}"
                              f"{'-lse' if l_ else ''}-{e}" for d, t, c, l_, e in CASES])
def test_attention_schedule_verifies_clean(head_dim, dtype, causal, lse, epilogue):
    schedule = dataclasses.replace(base_schedule(head_dim), epilogue=epilogue)
    kernel = lower_only(attention_kernel(head_dim, dtype, causal, lse), s=schedule)
    _assert_clean(verify.run(kernel), epilogue, head_dim)


def test_defaults_cover_every_choice():
    """DEFAULTS reaches every schedule default_schedule returns for the lengths the op sees."""
    listed = {(d, c, default_schedule(d, c, n)) for d, c, n in DEFAULTS}
    for d in (64, 128, 256):
        for causal in (False, True):
            for seq_len in (1, 100, 1024, 1025, 4096, 65536, None):
                assert (d, causal, default_schedule(d, causal, seq_len)) in listed


@pytest.mark.parametrize("lse", [False, True], ids=["out", "lse"])
@pytest.mark.parametrize("head_dim,causal,seq_len", DEFAULTS,
                         ids=[f"d{d}-{'causal' if c else 'full'}-S{n or 'any'}"
                              for d, c, n in DEFAULTS])
def test_default_schedule_verifies_clean(head_dim, causal, seq_len, lse):
    schedule = default_schedule(head_dim, causal, seq_len)
    kernel = lower_only(attention_kernel(head_dim, ag.bf16, causal, lse), s=schedule)
    _assert_clean(verify.run(kernel))


# 192-key blocks in the plain loop, bench candidates (`--variants bn192`), not defaults yet:
# FA3's head-dim-64 tile for full masks (hopper/tile_size.h: 192 x 192, three consumer
# warpgroups), and 128 x 192 at head dim 128 (FA3's notes call it "quite good too"); both
# build without spills (NVRTC 13.0)
WIDE_64 = dataclasses.replace(base_schedule(64), block_n=192)
WIDE_128 = dataclasses.replace(base_schedule(128), block_n=192)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim,schedule", [(64, WIDE_64), (128, WIDE_128)],
                         ids=["d64", "d128"])
def test_wide_candidates_verify_clean(head_dim, schedule, causal):
    assert schedule.problems_for(head_dim) == []
    kernel = lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=schedule)
    _assert_clean(verify.run(kernel))


@pytest.mark.parametrize("head_dim,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_ping_pong_verifies_clean(head_dim, causal):
    """Ordered sections (turns) around the K steps, Q in registers: proven like the default."""
    schedule = dataclasses.replace(base_schedule(head_dim), ordered=True)
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, causal, False),
                                   s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    unknown = [d for d in report.unknowns
               if "z3: timeout" not in d.message and "no budget left" not in d.message]
    assert not unknown, "\n".join(str(d) for d in unknown)
    assert any(d.code.startswith("ordered.") for d in report.proven)


def test_persistent_walk_verifies_clean():
    kernel = lower_only(attention_kernel(128, ag.bf16, False, False),
                        s=AttentionSchedule(persistent=True))
    _assert_clean(verify.run(kernel))


def test_causal_persistent_walk_verifies_clean():
    kernel = lower_only(attention_kernel(128, ag.bf16, True, False),
                        s=AttentionSchedule(persistent=True))
    _assert_clean(verify.run(kernel))


@pytest.mark.parametrize("lse", [False, True], ids=["out", "lse"])
@pytest.mark.parametrize("head_dim,causal,seq_len", DEFAULTS,
                         ids=[f"d{d}-{'causal' if c else 'full'}-S{n or 'any'}"
                              for d, c, n in DEFAULTS])
def test_softmax_diet_verifies_clean(head_dim, causal, seq_len, lse):
    """Each default schedule with exp2 on the SFU alone and the scale folded into the
    exponent (the bench's `default+fast`): the raw scores are masked before the scale, the
    row max is scaled after the reduction; the statistics (softmax.stats) are the same."""
    schedule = dataclasses.replace(default_schedule(head_dim, causal, seq_len),
                                   approx_exp2=True, fold_scale=True)
    kernel = lower_only(attention_kernel(head_dim, ag.bf16, causal, lse), s=schedule)
    _assert_clean(verify.run(kernel))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_three_warpgroups_at_head_dim_128_verify_clean(causal):
    """Bench candidate `3wg+fast`: the plain loop at 192 x 128 in three warpgroups at head dim
    128, with the softmax diet."""
    schedule = AttentionSchedule(block_m=192, block_n=128, consumers=3, producer_regs=32,
                                 consumer_regs=160, approx_exp2=True, fold_scale=True)
    assert schedule.problems_for(128) == []
    kernel = lower_only(attention_kernel(128, ag.bf16, causal, False), s=schedule)
    _assert_clean(verify.run(kernel), head_dim=128)


@pytest.mark.parametrize("head_dim,causal,seq_len", DEFAULTS,
                         ids=[f"d{d}-{'causal' if c else 'full'}-S{n or 'any'}"
                              for d, c, n in DEFAULTS])
def test_lpt_tile_order_verifies_clean(head_dim, causal, seq_len):
    """Each default schedule with tile_order "lpt" (the bench's `default+lpt`): the grid's
    axes swap (heads on x, m tiles on y), the tile a CTA computes is still its program ids."""
    schedule = dataclasses.replace(default_schedule(head_dim, causal, seq_len), tile_order="lpt")
    kernel = lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=schedule)
    _assert_clean(verify.run(kernel), schedule.epilogue, head_dim)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_two_ctas_an_sm_verify_clean(causal):
    """Bench candidate `occ2+fast` at head dim 64: two CTAs an SM (the occupancy hint), the
    plain loop at 128 x 64 in two 104-register consumer warpgroups, the softmax diet."""
    schedule = AttentionSchedule(block_m=128, block_n=64, consumers=2, consumer_regs=104,
                                 ctas_per_sm=2, approx_exp2=True, fold_scale=True)
    kernel = lower_only(attention_kernel(64, ag.bf16, causal, False), s=schedule)
    _assert_clean(verify.run(kernel))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_own_blocks_verify_clean(head_dim):
    """own_blocks on the causal defaults without ping-pong (head dim 64 short queries, 128,
    256): each warpgroup's loop reaches every key its rows may see (tag.assert), and the
    tile's other steps, released unread, keep the producer's and consumers' totals equal."""
    # the grid's own_blocks (head dims 128 / 256 walk in snake order at 1k: the long choice)
    seq_len = SHORT_CAUSAL_64 if head_dim == 64 else None
    schedule = dataclasses.replace(default_schedule(head_dim, True, seq_len), own_blocks=True)
    kernel = lower_only(attention_kernel(head_dim, ag.bf16, True, False), s=schedule)
    _assert_clean(verify.run(kernel), schedule.epilogue, head_dim)
