"""O's rescale after P V retires (AttentionSchedule.rescale_late): ping-pong on FA3's overlap
order always takes it, the overlap order alone only with rescale_after_pv (bench token
"olate"), so no default changes; refused off the overlap order. In the generated CUDA the
turn holds the two GEMM issues and no multiply of O (bf16 and e4m3), and O's multiply by
alpha follows P V's `wgmma.wait 0`; without the field the overlap order still scales O at P
V's issue. Spills: tests/unit/test_attention_pingpong_fa3.py and below."""

import dataclasses
import re

import pytest

import argus as ag
from argus.compiler import compile_kernel
from argus.kernels.attention import (AttentionSchedule, attention_kernel, default_schedule,
                                     fp8_schedule)
from tests.unit.attention_candidates import BENCH, assert_builds_without_spills

# an element-wise product of two register arrays, `tA[i] = (tB[i] * tC[j]);`: O * alpha's
# head_dim / 2 lines a thread (address arithmetic is on scalars)
PRODUCT = re.compile(r"^\s*t\d+\[\d+\] = \(t\d+\[\d+\] \* t\d+\[\d+\]\);$", re.M)


def _source(s, head_dim=128, causal=False, dtype=ag.bf16):
    return compile_kernel(attention_kernel(head_dim, dtype, causal, False, s.permuted_vt),
                          verify=False, s=s).source.text


def _turn(src):
    turn = src.index("my turn in ordered section 'mma'")
    return turn, src.index("the next warpgroup's turn in ordered section 'mma'", turn)


def test_the_field_and_its_refusal():
    assert AttentionSchedule(ordered=True, fa3_overlap=True).rescale_late
    assert AttentionSchedule(fa3_overlap=True, rescale_after_pv=True).rescale_late
    assert not AttentionSchedule(fa3_overlap=True).rescale_late
    assert not AttentionSchedule(ordered=True).rescale_late      # the plain loop's ping-pong
    with pytest.raises(ValueError, match="rescale_after_pv=True .* needs fa3_overlap=True"):
        AttentionSchedule(rescale_after_pv=True)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_only_the_fp8_defaults_take_it(head_dim):
    for causal in (False, True):
        for seq_len in (None, 1024, 2048, 4096, 16384):
            assert not default_schedule(head_dim, causal, seq_len).rescale_late
        # the FP8 default takes the late rescale at every head dim, without the turns
        # (measured, fp8_schedule's docstring); the bf16 defaults nowhere
        fp8 = fp8_schedule(head_dim, causal)
        assert fp8.rescale_late and fp8.rescale_after_pv
        assert not fp8.ordered


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_token_sets_only_its_field(causal):
    got = BENCH.variant_schedule("default+olate", 128, causal, 16384)
    assert got == dataclasses.replace(default_schedule(128, causal, 16384),
                                      rescale_after_pv=True)
    assert BENCH.fp8_variant_schedule("pvt+olate", 128, causal) == dataclasses.replace(
        fp8_schedule(128, causal), permuted_vt=True, rescale_after_pv=True)


@pytest.mark.parametrize("variant,dtype", [("default+ppfa3", ag.bf16),
                                           ("default+ppfa3+packp", ag.bf16),
                                           ("pvt+ppfa3", ag.e4m3), ("ppfa3", ag.e4m3)])
def test_the_turn_holds_no_multiply_of_o(variant, dtype):
    s = BENCH.fp8_variant_schedule(variant, 128, True) if dtype == ag.e4m3 else \
        BENCH.variant_schedule(variant, 128, True, 16384)
    src = _source(s, causal=True, dtype=dtype)
    turn, passed = _turn(src)
    assert not PRODUCT.findall(src[turn:passed])
    # O * alpha_j after P V's wait 0, before the next iteration's turn
    after = src[passed:]
    wait0 = after.index("wgmma_wait_pinned<0>")
    assert len(PRODUCT.findall(after[wait0:])) >= 64


def test_the_order_before_the_change_put_it_in_the_turn():
    """The same check finds O's 64 products at P V's issue when the rescale is not late (the
    overlap order alone): the count above can fail."""
    s = default_schedule(128, False, 16384)
    assert s.fa3_overlap and not s.rescale_late
    assert len(PRODUCT.findall(_loop_top_to_pv(_source(s)))) == 64
    late = _source(dataclasses.replace(s, rescale_after_pv=True))
    assert not PRODUCT.findall(_loop_top_to_pv(late))


def _loop_top_to_pv(src):
    """The KV loop's text from its top (j from 1) to P_{j-1} V_{j-1}'s first wgmma."""
    top = re.search(r"for \(int v\d+ = 1; ", src).start()
    return src[top:src.index("_rs_tb(", top)]


CASES = [("default+olate", 128, False), ("default+olate", 128, True),
         ("default+olate", 256, False), ("default+olate", 256, True),
         ("default+packp+bn176+direct+olate", 128, True)]


@pytest.mark.parametrize("variant,head_dim,causal", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}" for v, d, c in CASES])
def test_builds_without_spills(variant, head_dim, causal):
    assert_builds_without_spills(BENCH.variant_schedule(variant, head_dim, causal, 16384),
                                 head_dim, causal)


def test_head_dim_64_ping_pong_spills_less():
    """192 x 128, three warpgroups, P packed, causal (NVRTC 13.0): 20 / 56 bytes with O scaled
    at P V's issue (h304), 4 / 4 with the rescale after P V's wait (h309)."""
    s = BENCH.variant_schedule("default+ppfa3+packp", 64, True, 16384)
    res = compile_kernel(attention_kernel(64, ag.bf16, True, False), verify=False,
                         s=s).resources
    assert res.spill_stores <= 4 and res.spill_loads <= 4, res


# FP8 at head dims 64 (128 x 128, two warpgroups) and 256 (128 x 64): fp8_schedule's overlap
# order there rescales O behind P V's wait since 2026-12-07 (as at head dim 128); the fp8 token
# "oearly" moves it back to P V's issue, "olate" is their default (h315, then fp8late58)
@pytest.mark.parametrize("head_dim", [64, 256])
def test_the_fp8_tokens_at_head_dims_64_and_256(head_dim):
    for causal in (False, True):
        default = fp8_schedule(head_dim, causal)
        assert default.fa3_overlap and default.rescale_late
        early = BENCH.fp8_variant_schedule("pvt+oearly", head_dim, causal)
        assert early == dataclasses.replace(default, permuted_vt=True, rescale_after_pv=False)
        assert not early.rescale_late and early.problems_for(head_dim, ag.e4m3) == []
        assert BENCH.fp8_variant_schedule("pvt+olate", head_dim, causal) == \
            BENCH.fp8_variant_schedule("pvt", head_dim, causal) != early


def _fp8_loop_top_to_pv(s, head_dim, causal):
    """The FP8 KV loop's text from its top to P_{j-1} V_{j-1}'s first (e4m3, register-A)
    wgmma."""
    src = _source(s, head_dim, causal, ag.e4m3)
    top = re.search(r"for \(int v\d+ = 1; ", src).start()
    return src[top:src.index("_e4m3_rs(", top)]


@pytest.mark.parametrize("head_dim", [64, 256])
def test_fp8_olate_takes_o_off_p_vs_issue(head_dim):
    """With "oearly" the loop multiplies O's head_dim / 2 registers a thread before P V's
    issue; the default none there (they follow P V's wait 0, as at head dim 128)."""
    early = BENCH.fp8_variant_schedule("pvt+oearly", head_dim, True)
    late = BENCH.fp8_variant_schedule("pvt", head_dim, True)
    assert len(PRODUCT.findall(_fp8_loop_top_to_pv(early, head_dim, True))) == head_dim // 2
    assert not PRODUCT.findall(_fp8_loop_top_to_pv(late, head_dim, True))


FP8_BUILD_CASES = [(v, d, c) for v in ("olate", "pvt+olate") for d in (64, 256)
                   for c in (False, True)] + [("pvt+ppfa3", 64, False), ("pvt+ppfa3", 64, True)]


@pytest.mark.parametrize("variant,head_dim,causal", FP8_BUILD_CASES,
                         ids=[f"fp8-{v}-d{d}-{'causal' if c else 'full'}"
                              for v, d, c in FP8_BUILD_CASES])
def test_fp8_builds_without_spills(variant, head_dim, causal):
    """NVRTC 13.0, sm_90a (h315): the late rescale on fp8_schedule's hd64 / hd256 tiles, and
    the turns (which always take it) on hd64's permuted V^T, build with no spill stores or
    loads, in the registers a thread of the CTA enters with."""
    from argus.target.limits import entry_registers

    s = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert s.rescale_late and s.spill_problems(head_dim, ag.e4m3) == []
    res = compile_kernel(attention_kernel(head_dim, ag.e4m3, causal, False, s.permuted_vt),
                         verify=False, s=s).resources
    assert res.spill_stores == 0 and res.spill_loads == 0, (s, res)
    assert res.registers <= entry_registers(128 * (1 + s.consumers), s.ctas_per_sm), res


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_fp8_head_dim_64_turn_holds_no_multiply_of_o(causal):
    """Ping-pong on hd64's FP8 overlap order (128 x 128, two warpgroups taking turns): the turn
    holds the GEMM issues alone, O's 32 products a thread follow P V's wait 0."""
    s = BENCH.fp8_variant_schedule("pvt+ppfa3", 64, causal)
    src = _source(s, 64, causal, ag.e4m3)
    turn, passed = _turn(src)
    assert not PRODUCT.findall(src[turn:passed])
    after = src[passed:]
    assert len(PRODUCT.findall(after[after.index("wgmma_wait_pinned<0>"):])) >= 32
