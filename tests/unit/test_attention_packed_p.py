"""packed_p (h295): FA3's overlap loop carries P_{j-1} across its back edge as the packed bf16
A fragment (lower/packed.py stores a carried 16-bit A fragment two elements a 32-bit
register) instead of fp32 packed at the issue. Checked on the CPU: which values the pass
packs (and that any other use keeps the float form), the IR type's text round trip, the CUDA
(words declared, carried and handed to the wgmma without a repack), the spills NVRTC reports
(docs/perf/attention.md, h295's section), the bench token, and that the schedule is refused
where no loop carries a 16-bit P. The default schedules' CUDA is unchanged (packed_p is off:
hashed before and after, 116 kernels)."""

from __future__ import annotations

import dataclasses
import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.ir import parser, printer
from argus.ir.types import TileType, parse_type
from argus.kernels.attention import (AttentionSchedule, attention_kernel, default_schedule,
                                    fp8_schedule)
from argus.lower import packed
from argus.runtime import nvrtc_available
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _schedule(head_dim=128, causal=False, block_n=None, **kw):
    s = dataclasses.replace(default_schedule(head_dim, causal), packed_p=True, **kw)
    return dataclasses.replace(s, block_n=block_n) if block_n else s


def _lowered(s, head_dim=128, causal=False, dtype=ag.bf16):
    return lower_only(attention_kernel(head_dim, dtype, causal, False), s=s)


def _packed_types(kernel):
    return [r.type for op in kernel.walk() for r in op.results()
            if isinstance(r.type, TileType) and r.type.packed]


@pytest.mark.parametrize("dtype", [ag.bf16, ag.f16])
def test_the_carried_p_is_packed_and_nothing_else(dtype):
    kernel = _lowered(_schedule(), dtype=dtype)
    types = _packed_types(kernel)
    # P's web: its zero init's convert, the var of each region it crosses (the tile, the K
    # step, the loop, the K and V steps), the converts of P_0 and P_j
    assert len(types) >= 5
    assert {(t.dtype, t.shape, t.layout) for t in types} == {(dtype, (64, 128), "wgmma_acc")}
    # every packed value is read only as a var init, an assign or a wgmma's register A
    ids = {r.id for op in kernel.walk() for r in op.results()
           if isinstance(r.type, TileType) and r.type.packed}
    users = {}
    for op in kernel.walk():
        for v in op.operands():
            users.setdefault(v.id, []).append(op)
    for op in kernel.walk():
        for v in op.operands():
            if v.id in ids:
                assert packed._allowed_use(op, v, users), op
    # fp32 carried (the default): nothing packed
    assert not _packed_types(_lowered(default_schedule(128, False)))


def test_a_packed_type_prints_and_parses():
    t = TileType(ag.bf16, (64, 176), "wgmma_acc", packed=True)
    assert str(t) == "tile<bf16, 64x176, wgmma_acc, packed>" and parse_type(str(t)) == t
    assert parse_type("tile<f32, 64x1, slice(wgmma_acc,1,64)>").packed is False
    kernel = _lowered(_schedule())
    again = parser.parse_kernel(printer.print_kernel(kernel))
    assert len(_packed_types(again)) == len(_packed_types(kernel))


def _wgmma_p_var(text: str) -> str:
    """The name of the var the loop's P V wgmma reads as its register A operand."""
    names = re.findall(r"wgmma\(acc=%[\w.]+, a=(%p\.\d+),", text)
    assert names, "no register-A wgmma reading a carried P"
    return names[0]


def test_another_use_keeps_the_float_form():
    """The same kernel with one more reader of the carried P (a negation): the web is not
    packed, since that reader takes elements (the rule's 'every use' clause)."""
    text = printer.print_kernel(_lowered(_schedule())).replace(", packed>", ">")
    kernel = parser.parse_kernel(text)
    assert packed.packed_values(kernel)          # the rule finds the web again
    p = _wgmma_p_var(text)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{p}:"))
    indent = line[:len(line) - len(line.lstrip())]
    extra = f'{indent}%999999:tile<bf16, 64x128, wgmma_acc> = ew(args=({p})) {{fn="neg"}}'
    kernel = parser.parse_kernel(text.replace(line, line + "\n" + extra, 1))
    assert not packed.packed_values(kernel)


def test_the_cuda_carries_words_and_hands_them_to_the_wgmma():
    text = codegen.render(_lowered(_schedule())).text
    words = re.findall(r"ag::uint32_t (t\d+)\[32\];", text)   # 128 keys: 32 words
    # P's web as words: its var, carries and converts (since h302 the loop's convert follows
    # the V step, which no longer carries P: one array fewer than the 5 before)
    assert len(words) >= 4
    # the P V issues take the carried words as they are: no repack of P at the issue
    a_regs = re.findall(r"(ra\d*)\[\d+\]\[\d+\] = (.+);", text)
    assert a_regs and all(re.fullmatch(r"t\d+\[\d+\]", e) for _, e in a_regs), a_regs[:4]
    # fp32 carried: packed at the issue, no word arrays
    plain = codegen.render(_lowered(default_schedule(128, False))).text
    assert "ag::uint32_t t" not in plain and "= ag::pack_bf16x2(" in plain


def test_the_schedule_is_refused_without_a_carried_p():
    with pytest.raises(ValueError, match="packed_p=True .* needs fa3_overlap=True"):
        dataclasses.replace(default_schedule(64, False), packed_p=True)
    # the FP8 kernel carries it as e4m3 words since h313 (tests/unit/test_attention_fp8_packed_p.py)
    assert dataclasses.replace(fp8_schedule(128, False), packed_p=True)._fp8_problems() == []


def test_bench_tokens():
    s = BENCH.variant_schedule("default+packp+bn160", 128, False, 4096)
    assert s.packed_p and s.block_n == 160 and s.fa3_overlap and s.epilogue == "tma"
    assert BENCH.variant_schedule("default+packp+bn80+direct", 256, True, 4096).block_n == 80
    assert not BENCH.variant_schedule("default", 128, False, 4096).packed_p
    with pytest.raises(ValueError, match="more than one key block size"):
        BENCH.variant_schedule("default+packp+bn160+bn176", 128, False, 4096)


@needs_nvrtc
@pytest.mark.parametrize("head_dim,block_n,causal", [(128, 160, False), (128, 160, True),
                                                     (256, 80, False), (256, 80, True)])
def test_fa3s_wider_tiles_build_without_spills_only_when_packed(head_dim, block_n, causal):
    """hd128 128 x 160 (the TMA-store epilogue, as the default) and hd256 128 x 80 (FA3's
    tile): no spills with P packed; with fp32 P ptxas spills (432 / 436 B and 60 / 20 B of
    stores, full / causal, NVRTC 13.0), so the packing is what makes them fit."""
    # hd256 at 128 x 80: the O staging rounds of the default's TMA store do not fit beside
    # Q and two K / V stages of 80 keys (263168 B > 232448): FA3's tile stores directly
    extra = dict(epilogue="direct", store_cols=0) if head_dim == 256 else {}
    s = _schedule(head_dim, causal, block_n, **extra)
    kernel = attention_kernel(head_dim, ag.bf16, causal, False)
    res = compile_kernel(kernel, s=s, verify=False).resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    res = compile_kernel(kernel, s=dataclasses.replace(s, packed_p=False),
                         verify=False).resources
    assert res.spill_stores > 0, res


@needs_nvrtc
def test_the_pack_and_unpack_expressions_compile():
    """codegen's pair expressions for both 16-bit dtypes (emit.pack_c / unpack_c: a reader of
    a packed tile that is not a word copy gets the unpacked element) build with NVRTC."""
    from argus.codegen.cuda.emit import pack_c, unpack_c
    from argus.runtime.compile import compile_cuda

    lines = ['#include "argus_sm90.cuh"',
             'extern "C" __global__ void k(float* out, float a, float b) {']
    for i, dt in enumerate((ag.bf16, ag.f16)):
        lines += [f"  const ag::uint32_t w{i} = {pack_c('a', 'b', dt)};",
                  f"  out[{2 * i}] = {unpack_c(f'w{i}', 0, dt)};",
                  f"  out[{2 * i + 1}] = {unpack_c(f'w{i}', 1, dt)};"]
    assert compile_cuda("\n".join(lines + ["}"]), ["k"]).cubin


@pytest.mark.parametrize("head_dim,kw,spills", [
    (128, dict(block_n=128), False), (128, dict(block_n=144), True),
    (128, dict(block_n=160), True), (128, dict(block_n=144, packed_p=True), False),
    (128, dict(block_n=160, packed_p=True), False), (128, dict(block_n=176, packed_p=True), False),
    (128, dict(block_n=192, packed_p=True), True),
    (256, dict(block_n=64), False), (256, dict(block_n=80), True),
    (256, dict(block_n=80, packed_p=True), False),
    (64, dict(block_m=192, consumers=3, producer_regs=32, consumer_regs=160, block_n=96,
              packed_p=True), False),
    (64, dict(block_m=192, consumers=3, producer_regs=32, consumer_regs=160, block_n=96), True),
    (64, dict(block_m=192, consumers=3, producer_regs=32, consumer_regs=160, block_n=128,
              packed_p=True), True),
])
def test_spill_problems_follow_the_measured_spills(head_dim, kw, spills):
    """AttentionSchedule.spill_problems (the agent leaves these points out) against the
    NVRTC 13.0 spill table of docs/perf/attention.md (h295): the fa3 loop's O, S and carried
    P (fp32 or packed) in FA3_CARRY_SLACK less than consumer_regs build clean, more spill;
    problems_for still takes every one of them (they build and run)."""
    s = AttentionSchedule(fa3_overlap=True, **kw)
    assert s.problems_for(head_dim) == []
    found = s.spill_problems(head_dim)
    assert bool(found) == spills, found
    if spills and not s.packed_p:
        assert "packed_p=True" in found[0]
