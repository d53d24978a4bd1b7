"""Ping-pong (ordered) with FA3's overlap order (fa3_overlap): the schedule takes the pair and
keeps Q in shared memory (q_in_registers only for the plain loop's ping-pong), still refuses
ping-pong with the older intra_wg_overlap order, and the FP8 kernel's only with Q in registers;
the bench token "ppfa3" (bf16 and fp8) sets only its fields; the generated loop is FA3's
(turn wait, S_j, P_{j-1} V_{j-1}, turn pass, wait 1, softmax, wait 0), e4m3 too; the shapes FA3
runs build without spills (NVRTC, sm_90a), and fp8_schedule's tiles with the turns. The interpreter and verifier checks: tests/interp and tests/verify
test_attention_pingpong_fa3*.py."""

import dataclasses

import pytest

import argus as ag
from argus.compiler import compile_kernel
from argus.kernels.attention import (AttentionSchedule, attention_kernel, base_schedule,
                                     default_schedule, smem_bytes)
from tests.unit.attention_candidates import BENCH, assert_builds_without_spills


def test_the_schedule_takes_the_pair_with_q_in_shared_memory():
    s = AttentionSchedule(ordered=True, fa3_overlap=True)
    assert not s.q_in_registers
    assert AttentionSchedule(ordered=True).q_in_registers
    # Q's stage is counted, and Q's register fragment is not
    assert smem_bytes(s, 128) == smem_bytes(AttentionSchedule(fa3_overlap=True), 128)
    assert smem_bytes(AttentionSchedule(ordered=True), 128) < smem_bytes(s, 128)
    assert not any("Q (" in p for p in AttentionSchedule(
        block_n=176, ordered=True, fa3_overlap=True, packed_p=True).problems_for(128))


def test_the_refusals_that_remain():
    with pytest.raises(ValueError, match="not combined with intra_wg_overlap"):
        AttentionSchedule(ordered=True, intra_wg_overlap=True)
    # FP8: the plain loop's ping-pong (Q in registers) only; with fa3_overlap Q stays in
    # shared memory and the FP8 kernel takes the turns (h308)
    assert AttentionSchedule(ordered=True, fa3_overlap=True)._fp8_problems() == []
    assert any("keeps Q in registers" in p for p in AttentionSchedule(ordered=True)
               ._fp8_problems())


def test_prefetch_next_q_with_q_in_shared_memory():
    """The walk's prefetch of the next Q is a box of Q's shared-memory stage: ping-pong with
    fa3_overlap has that stage (it was refused as "loads Q into registers"); the plain loop's
    ping-pong has none and stays refused. The declared constraint reads fa3_overlap too."""
    from argus.agent.families.declared import ATTENTION_CONSTRAINTS

    s = AttentionSchedule(ordered=True, fa3_overlap=True, persistent=True, prefetch_next_q=True)
    assert s.prefetch_next_q and not s.q_in_registers
    with pytest.raises(ValueError, match="in the plain loop loads Q into registers"):
        AttentionSchedule(ordered=True, persistent=True, prefetch_next_q=True)
    rule = next(c for c in ATTENTION_CONSTRAINTS if c.code == "prefetch_walk")
    assert "fa3_overlap" in rule.reads


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_len", [1024, 4096, 16384])
def test_the_token_sets_only_its_fields(causal, seq_len):
    got = BENCH.variant_schedule("default+ppfa3", 128, causal, seq_len)
    assert got == dataclasses.replace(default_schedule(128, causal, seq_len), ordered=True,
                                      fa3_overlap=True)
    # head dim 64: the default's tile, or base_schedule's one-CTA tile where it runs two
    got64 = BENCH.variant_schedule("default+ppfa3+packp", 64, causal, seq_len)
    d64 = default_schedule(64, causal, seq_len)
    base = base_schedule(64)
    assert got64.ordered and got64.fa3_overlap and got64.packed_p
    assert (got64.block_m, got64.block_n, got64.consumers, got64.ctas_per_sm) == \
        (base.block_m, base.block_n, base.consumers, 1)
    assert got64.epilogue == d64.epilogue and got64.persistent == d64.persistent


def test_the_token_at_head_dim_256_drops_own_blocks():
    """Head dim 256's causal default at 2k / 4k takes own_blocks, which ping-pong refuses (each
    warpgroup takes every step): the token leaves it out instead of raising."""
    for seq_len in (2048, 4096):
        assert default_schedule(256, True, seq_len).own_blocks
        got = BENCH.variant_schedule("default+ppfa3", 256, True, seq_len)
        assert got == dataclasses.replace(default_schedule(256, True, seq_len), ordered=True,
                                          fa3_overlap=True, own_blocks=False)
        assert got.problems_for(256) == []


def test_the_generated_loop_is_fa3s_order():
    s = dataclasses.replace(default_schedule(128), ordered=True)
    src = compile_kernel(attention_kernel(128, ag.bf16, False, False), verify=False,
                         s=s).source.text
    turn = src.index("my turn in ordered section 'mma'")
    passed = src.index("the next warpgroup's turn in ordered section 'mma'", turn)
    body = src[turn:passed]
    # S_j from shared memory, then P_{j-1} V_{j-1} from registers, both inside the turn
    assert "_ss(" in body and "_rs_tb(" in body and body.index("_ss(") < body.index("_rs_tb(")
    assert "wgmma_wait" not in body        # no group retired inside the turn
    after = src[passed:]
    assert after.index("wgmma_wait_pinned<1>") < after.index("wgmma_wait_pinned<0>")


CASES = [("default+ppfa3", 128, False, 16384), ("default+ppfa3", 128, True, 16384),
         ("default+ppfa3+packp+bn176+direct", 128, False, 16384),
         ("default+ppfa3+packp+bn176+direct", 128, True, 16384),
         ("default+ppfa3+packp", 64, False, 16384)]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}"
                              for v, d, c, n in CASES])
def test_builds_without_spills(variant, head_dim, causal, seq_len):
    """NVRTC 13.0 (docs/perf/attention.md, h304): head dim 64's causal 192 x 128 spills 20 /
    56 bytes and its TMA-store form 4 / 4, so only the full direct form is listed."""
    assert_builds_without_spills(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                 head_dim, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_fp8_token_sets_only_its_fields(head_dim, causal):
    from argus.kernels.attention import fp8_schedule

    got = BENCH.fp8_variant_schedule("ppfa3", head_dim, causal)
    assert got == dataclasses.replace(fp8_schedule(head_dim, causal), ordered=True,
                                      fa3_overlap=True)
    assert got.problems_for(head_dim, ag.e4m3) == []
    assert BENCH.fp8_variant_schedule("pvt+ppfa3", head_dim, causal) == \
        dataclasses.replace(got, permuted_vt=True)


def _fp8_compiled(variant, head_dim, causal):
    s = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    return s, compile_kernel(attention_kernel(head_dim, ag.e4m3, causal, False, s.permuted_vt),
                             verify=False, s=s)


@pytest.mark.parametrize("variant", ["narrow+ppfa3", "narrow+ppfa3+pvt"])
def test_the_fp8_loop_is_fa3s_order(variant):
    """FP8: both products are e4m3 wgmma, S_j from shared memory (_ss), P_{j-1} V_{j-1} with P
    in registers (_rs, V^T K-major: no _tb), both inside one turn, nothing retired in it."""
    _, compiled = _fp8_compiled(variant, 128, True)
    src = compiled.source.text
    turn = src.index("my turn in ordered section 'mma'")
    passed = src.index("the next warpgroup's turn in ordered section 'mma'", turn)
    body = src[turn:passed]
    assert body.count("_e4m3_ss(") == 4 and body.count("_e4m3_rs(") == 4, body
    assert body.rindex("_e4m3_ss(") < body.index("_e4m3_rs(")
    assert "wgmma_wait" not in body
    after = src[passed:]
    assert after.index("wgmma_wait_pinned<1>") < after.index("wgmma_wait_pinned<0>")


FP8_SPILL_CASES = [("ppfa3", 128, False), ("ppfa3", 128, True), ("ppfa3+pvt", 128, False),
                   ("ppfa3+pvt", 128, True), ("ppfa3", 64, False), ("ppfa3", 64, True),
                   ("ppfa3", 256, False), ("ppfa3", 256, True)]


@pytest.mark.parametrize("variant,head_dim,causal", FP8_SPILL_CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}"
                              for v, d, c in FP8_SPILL_CASES])
def test_fp8_builds_without_spills(variant, head_dim, causal):
    """NVRTC 13.0 (docs/perf/attention.md, h308): fp8_schedule's tiles with the turns build
    clean; FA3's wider 128 x 256 at head dim 128 spills 76 / 80 B (P carried in fp32, which
    spill_problems reports), so it is not listed."""
    s, compiled = _fp8_compiled(variant, head_dim, causal)
    res = compiled.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, (s, res)
    assert s.spill_problems(head_dim, ag.e4m3) == []


def test_fp8_128_x_256_is_named_a_spill():
    s = BENCH.fp8_variant_schedule("ppfa3+bn256", 128, False)
    assert s.problems_for(128, ag.e4m3) == [] and s.spill_problems(128, ag.e4m3)
