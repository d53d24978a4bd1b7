"""packed_p in the FP8 forward (h313): FA3's overlap loop carries P_{j-1} across its back edge
as e4m3 words, four a 32-bit register in the order the 8-bit A fragment reads them
(lower/packed.py; word 4kk + r packs target/fragments.py AccToA8.word(kk, r)), block_n / 8
registers a thread instead of block_n / 2 fp32. Checked on the CPU: what the pass packs, the
CUDA (words made once after the softmax, carried, handed to P V's wgmma as they are with a
permuted V^T and gathered from quad lanes without), the pass's rule on other uses, NVRTC's
spills, the bench token. The interpreter against float64 is
tests/interp/test_attention_packed_p_interp.py, the verifier tests/verify/
test_attention_packed_p.py. The CUDA of the schedules without it did not move (hashed before
and after, 42 attention kernels: FP8 at every head dim, both V^T orders, bf16 with and
without packed_p)."""

from __future__ import annotations

import dataclasses
import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.ir import parser, printer
from argus.ir.types import TileType
from argus.kernels.attention import attention_kernel, fp8_schedule
from argus.lower import packed
from argus.runtime import nvrtc_available
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _schedule(causal=False, permuted=True, **kw):
    return dataclasses.replace(fp8_schedule(128, causal), permuted_vt=permuted, packed_p=True,
                               **kw)


def _lowered(s, causal=False):
    return lower_only(attention_kernel(128, ag.e4m3, causal, False, s.permuted_vt), s=s)


def _packed_types(kernel):
    return [r.type for op in kernel.walk() for r in op.results()
            if isinstance(r.type, TileType) and r.type.packed]


def test_the_carried_p_is_e4m3_words_and_nothing_else():
    types = _packed_types(_lowered(_schedule()))
    # P's web (its zero init's convert, the vars of the regions it crosses, P_0's and P_j's
    # converts), all e4m3 in the accumulator layout
    assert len(types) >= 4
    assert {(t.dtype, t.shape, t.layout) for t in types} == {(ag.e4m3, (64, 128), "wgmma_acc")}
    # without packed_p nothing is packed (P converted at the issue)
    assert not _packed_types(_lowered(dataclasses.replace(_schedule(), packed_p=False)))


@pytest.mark.parametrize("permuted", [True, False], ids=["pvt", "shfl"])
def test_the_cuda_packs_p_once_and_hands_the_words_to_the_wgmma(permuted):
    s = _schedule(permuted=permuted)
    text = codegen.render(_lowered(s)).text
    # P's words: 128 keys, 16 words a thread (fp32 would be 64 registers)
    assert len(re.findall(r"ag::uint32_t t\d+\[16\];", text)) >= 3
    a_regs = re.findall(r"ra\d*\[\d+\]\[\d+\] = (.+);", text)
    assert len(a_regs) == 2 * 16, a_regs[:4]    # the loop's P V and the peeled last
    if permuted:   # AccOrderA8: the carried word itself
        assert all(re.fullmatch(r"t\d+\[\d+\]", e) for e in a_regs), a_regs[:4]
    else:          # AccToA8: the carried word, gathered from two quad lanes
        assert all(re.fullmatch(r"ag::quad_gather_b16x2\(t\d+\[\d+\], a8_src, a8_sel\)", e)
                   for e in a_regs), a_regs[:4]
    # every word packs the four registers A register r of k32 step kk reads (AccToA8.word)
    packs = re.findall(r"t\d+\[(\d+)\] = ag::pack_e4m3x4\(t\d+\[(\d+)\], t\d+\[(\d+)\], "
                       r"t\d+\[(\d+)\], t\d+\[(\d+)\]\);", text)
    assert packs
    from argus.target.fragments import AccToA8
    for w, *regs in packs:
        w = int(w)
        assert tuple(map(int, regs)) == AccToA8.word(w // 4, w % 4), (w, regs)
    # unpacked, P is packed at the issue instead (no word arrays)
    plain = codegen.render(_lowered(dataclasses.replace(s, packed_p=False))).text
    assert not re.search(r"ag::uint32_t t\d+\[", plain)


def test_another_use_keeps_the_float_form():
    """One more reader of the carried e4m3 P (a negation) that takes elements: the web stays
    in float registers (the rule's 'every use' clause, as for bf16)."""
    text = printer.print_kernel(_lowered(_schedule())).replace(", packed>", ">")
    assert packed.packed_values(parser.parse_kernel(text))
    p = re.findall(r"wgmma\(acc=%[\w.]+, a=(%p\.\d+),", text)[0]
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{p}:"))
    indent = line[:len(line) - len(line.lstrip())]
    extra = f'{indent}%999999:tile<e4m3, 64x128, wgmma_acc> = ew(args=({p})) {{fn="neg"}}'
    assert not packed.packed_values(parser.parse_kernel(text.replace(line, line + "\n" + extra,
                                                                     1)))


def test_bench_token():
    s = BENCH.fp8_variant_schedule("pvt+packp", 128, False)
    assert s.packed_p and s.permuted_vt and s.fa3_overlap and s.rescale_after_pv
    assert not BENCH.fp8_variant_schedule("pvt", 128, False).packed_p
    assert s.problems_for(128, ag.e4m3) == []


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("permuted", [True, False], ids=["pvt", "shfl"])
def test_builds_without_spills(causal, permuted):
    s = _schedule(causal, permuted)
    res = compile_kernel(attention_kernel(128, ag.e4m3, causal, True, permuted), s=s,
                         verify=False).resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res
