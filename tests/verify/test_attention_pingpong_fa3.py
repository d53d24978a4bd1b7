"""Ping-pong (ordered) with FA3's overlap order (fa3_overlap), FA3's full configuration: one
turn (ag.ordered) around both GEMM issues of an iteration, S_j then P_{j-1} V_{j-1}, inside
the K and V steps, Q read from its shared-memory stage. Verifies with zero findings, turns
proven (ordered.turns), at the bench token "ppfa3"'s schedules: head dim 64 on 192 x 128 in
three warpgroups (P carried packed), head dim 128 at 128 x 128 in the grid and in the
persistent walks the default takes at short lengths (early Q release, the snake), and FA3's
128 x 176 with P packed. The seeded V-one-block-ahead bug is caught with the turns too
(tests/mutations/test_attention_fa3_carry.py). The FP8 (e4m3) kernel under the fp8 bench token
"ppfa3" verifies the same way (head dims 64 / 128 / 256, permuted V^T or not, 128 x 256)."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel
from tests.loading import load_script
from tests.verify.test_attention_schedules import _assert_clean

BENCH = load_script("gpu_attention_bench")

CASES = [("default+ppfa3+packp", 64, False, 16384), ("default+ppfa3+packp", 64, True, 2048),
         ("default+ppfa3", 64, False, 16384),
         ("default+ppfa3", 128, False, 16384), ("default+ppfa3", 128, True, 16384),
         ("default+ppfa3", 128, False, 1024), ("default+ppfa3", 128, False, 2048),
         ("default+ppfa3+packp", 128, True, 4096),
         ("default+ppfa3+packp+bn176+direct", 128, False, 16384),
         ("default+ppfa3+packp+bn176+direct", 128, True, 16384)]


@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}"
                              for v, d, c, n in CASES])
def test_ping_pong_with_fa3_overlap_verifies_clean(variant, head_dim, causal, seq_len):
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    assert s.ordered and s.fa3_overlap and s.problems_for(head_dim) == []
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=s))
    _assert_clean(report, s.epilogue, head_dim)
    assert any(d.code == "ordered.turns" for d in report.proven)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_with_the_next_q_prefetched(causal):
    """The persistent walk's prefetch of the next tile's Q (a box of Q's shared-memory stage,
    which ping-pong keeps with fa3_overlap) at head dim 128's 1k walk (early Q release)."""
    import dataclasses

    s = dataclasses.replace(BENCH.variant_schedule("default+ppfa3", 128, causal, 1024),
                            persistent=True, prefetch_next_q=True)
    report = verify.run(lower_only(attention_kernel(128, ag.bf16, causal, False), s=s))
    _assert_clean(report, s.epilogue, 128)
    assert any(d.code == "ordered.turns" for d in report.proven)


# FP8 (e4m3): the fp8 bench token "ppfa3" on fp8_schedule (FA3's FP8 configuration), with the
# permuted V^T (P's A fragment is S's own registers) and without it (quad shuffles), and with
# FA3's wider 128 x 256 key block at head dim 128 (builds with 76 / 80 B of spills, so a
# probe, not a default)
FP8_CASES = [("ppfa3", 128, False), ("ppfa3", 128, True), ("ppfa3+pvt", 128, False),
             ("ppfa3+pvt", 128, True), ("ppfa3+pvt+emu2", 128, True), ("ppfa3+bn256", 128, False),
             ("ppfa3", 64, False), ("ppfa3", 64, True), ("ppfa3+pvt", 64, False),
             ("ppfa3+pvt", 64, True), ("ppfa3", 256, False), ("ppfa3", 256, True)]


@pytest.mark.parametrize("variant,head_dim,causal", FP8_CASES,
                         ids=[f"fp8-{v}-d{d}-{'causal' if c else 'full'}"
                              for v, d, c in FP8_CASES])
def test_fp8_ping_pong_with_fa3_overlap_verifies_clean(variant, head_dim, causal):
    s = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert s.ordered and s.fa3_overlap and s.problems_for(head_dim, ag.e4m3) == []
    report = verify.run(lower_only(attention_kernel(head_dim, ag.e4m3, causal, False,
                                                    s.permuted_vt), s=s))
    _assert_clean(report, s.epilogue, head_dim)
    assert any(d.code == "ordered.turns" for d in report.proven)
