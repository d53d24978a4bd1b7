"""The running row sum kept as each thread's partial (AttentionSchedule.defer_row_sum, bench
token "sumend", h321): no default takes it; it is refused off FA3's overlap order and at a
block_n not a multiple of 8; in the generated CUDA the sum's quad shuffles leave the KV loop
(once after it instead), the row max keeps its own; it builds without spills where the
default does (the causal snake walk at 2k / 4k: 8 B a thread); and in the SASS one unmasked KV
block at head dim 128 runs 4 SHFL and 8 instructions fewer, nothing else moving but the FADD /
FFMA of the sum (scripts/sass_attention_loop.py)."""

import dataclasses
import re

import pytest

import argus as ag
from argus.compiler import compile_kernel
from argus.kernels.attention import (AttentionSchedule, attention_kernel, default_schedule,
                                     fp8_schedule)
from argus.runtime import nvrtc_available
from argus.runtime.sass import have_disassembler
from tests.loading import load_script
from tests.unit.attention_candidates import BENCH, assert_builds_without_spills

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
# a butterfly of the row sum: `tA[i] = (tA[i] + __shfl_xor_sync(...))`; the max's reads max_nan
SUM_SHUFFLE = re.compile(r"= \(t\d+\[\d+\] \+ __shfl_xor_sync\(")
MAX_SHUFFLE = re.compile(r"= ag::max_nan\(t\d+\[\d+\], __shfl_xor_sync\(")


def _source(s, head_dim=128, causal=False):
    return compile_kernel(attention_kernel(head_dim, ag.bf16, causal, False), verify=False,
                          s=s).source.text


def test_the_field_and_its_refusals():
    assert not AttentionSchedule().defer_row_sum
    AttentionSchedule(fa3_overlap=True, defer_row_sum=True)
    with pytest.raises(ValueError, match="defer_row_sum=True is built for FA3's overlap order"):
        AttentionSchedule(ordered=True, defer_row_sum=True)
    with pytest.raises(ValueError, match="block_n=100 is not a multiple of 8"):
        AttentionSchedule(fa3_overlap=True, block_n=100, defer_row_sum=True)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_no_default_takes_it(head_dim):
    for causal in (False, True):
        for seq_len in (None, 1024, 2048, 4096, 16384):
            assert not default_schedule(head_dim, causal, seq_len).defer_row_sum
        assert not fp8_schedule(head_dim, causal).defer_row_sum


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_token_sets_only_its_field(causal):
    for n in (2048, 4096, 16384):
        assert BENCH.variant_schedule("default+sumend", 128, causal, n) == dataclasses.replace(
            default_schedule(128, causal, n), defer_row_sum=True)


@needs_nvrtc
@pytest.mark.parametrize("seq_len", [16384, 1024], ids=["grid", "walk"])
def test_the_sum_shuffles_leave_the_loop(seq_len):
    """Default: the sum's 4 butterflies a thread at each softmax site (the peeled first block
    and the loop's); with the field: 4 once, after the KV loop, and the max's unchanged."""
    s = default_schedule(128, False, seq_len)
    before, after = _source(s), _source(dataclasses.replace(s, defer_row_sum=True))
    sites = len(MAX_SHUFFLE.findall(before)) // 4
    assert sites >= 2
    assert len(SUM_SHUFFLE.findall(before)) == 4 * sites
    assert len(SUM_SHUFFLE.findall(after)) == 4
    assert len(MAX_SHUFFLE.findall(after)) == 4 * sites
    last_sum = max(m.start() for m in SUM_SHUFFLE.finditer(after))
    assert last_sum > max(m.start() for m in MAX_SHUFFLE.finditer(after))


CLEAN = [("default+sumend", 128, False, 2048), ("default+sumend", 128, False, 4096),
         ("default+sumend", 128, False, 16384), ("default+sumend", 128, True, 16384),
         ("default+sumend", 128, False, 1024), ("default+sumend", 256, False, 16384),
         ("default+sumend", 256, True, 2048),
         ("default+sumend+packp+bn176+direct", 128, False, 16384),
         ("default+sumend+packp+bn176+direct", 128, True, 16384)]


@needs_nvrtc
@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CLEAN,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}"
                              for v, d, c, n in CLEAN])
def test_builds_without_spills(variant, head_dim, causal, seq_len):
    assert_builds_without_spills(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                 head_dim, causal)


@needs_nvrtc
@pytest.mark.parametrize("seq_len", [2048, 4096])
def test_the_causal_snake_walk_spills_at_most_8_bytes(seq_len):
    """NVRTC 13.0: the default (snake walk, tma store) builds clean; with the partial's two
    more registers (4 a thread, not 2) 8 B stored / 8 B loaded."""
    s = BENCH.variant_schedule("default+sumend", 128, True, seq_len)
    res = compile_kernel(attention_kernel(128, ag.bf16, True, False), verify=False,
                         s=s).resources
    assert res.spill_stores <= 8 and res.spill_loads <= 8, res


@needs_nvrtc
@pytest.mark.skipif(not have_disassembler(), reason="nvdisasm not found (NVDISASM=, PATH, "
                                                    "or the nvidia-cuda-nvdisasm wheel)")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_kv_block_runs_eight_instructions_fewer(causal):
    loop = load_script("sass_attention_loop")
    before = loop.loop_report("default", 128, causal, 16384)
    after = loop.loop_report("default+sumend", 128, causal, 16384)
    assert before["SHFL"] == 8 and after["SHFL"] == 4
    assert before["FADD"] - after["FADD"] == 6 and after["FFMA"] - before["FFMA"] == 2
    assert before["total"] - after["total"] == 8
    for cls in set(before) | set(after):
        if cls not in ("SHFL", "FADD", "FFMA", "total"):
            assert before[cls] == after[cls], cls
