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
from argus.kernels.attention import FP8_BLOCK_N, attention_kernel, fp8_schedule, fp8_vt_atom
from argus.lower import packed
from argus.runtime import nvrtc_available
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _schedule(causal=False, permuted=True, **kw):
    # the 128-key tile (P in fp32 there) with P packed: the wide default's tiles are below
    return dataclasses.replace(fp8_schedule(128, causal, wide_keys=False), permuted_vt=permuted,
                               packed_p=True, **kw)


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
    s = BENCH.fp8_variant_schedule("narrow+pvt+packp", 128, False)
    assert s.packed_p and s.permuted_vt and s.fa3_overlap and s.rescale_after_pv
    assert s.block_n == 128
    assert not BENCH.fp8_variant_schedule("narrow+pvt", 128, False).packed_p
    assert s.problems_for(128, ag.e4m3) == []
    # the default at head dim 128 is packed at the wide key blocks (224 full, 192 causal)
    for causal, keys in ((False, 224), (True, 192)):
        wide = BENCH.fp8_variant_schedule("pvt", 128, causal)
        assert wide.packed_p and wide.block_n == keys and wide.problems_for(128, ag.e4m3) == []


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("permuted", [True, False], ids=["pvt", "shfl"])
def test_builds_without_spills(causal, permuted):
    s = _schedule(causal, permuted)
    res = compile_kernel(attention_kernel(128, ag.e4m3, causal, True, permuted), s=s,
                         verify=False).resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res


# -- wider key blocks (h313): V^T's stage in atoms of the widest swizzle span dividing block_n

def test_v_t_atoms_are_the_widest_span_dividing_the_block():
    assert {bn: fp8_vt_atom(bn) for bn in FP8_BLOCK_N} == \
        {64: 64, 128: 128, 192: 64, 224: 32, 256: 128}
    for bn in FP8_BLOCK_N:
        narrow = fp8_schedule(128, wide_keys=False)
        assert dataclasses.replace(narrow, block_n=bn)._fp8_problems() == []
    assert "block_n=160" in dataclasses.replace(narrow, block_n=160)._fp8_problems()[0]


@pytest.mark.parametrize("block_n,atoms,swizzle", [(192, 3, 64), (224, 7, 32), (256, 2, 128)])
def test_wide_blocks_issue_p_v_per_atom_from_p_words(block_n, atoms, swizzle):
    s = _schedule(block_n=block_n)
    text = codegen.render(_lowered(s)).text
    # P's words: block_n / 8 a thread
    assert re.search(rf"ag::uint32_t t\d+\[{block_n // 8}\];", text)
    # one register-A wgmma per atom (K = the atom's keys), the loop's and the peeled last
    issues = re.findall(r"ag::wgmma_m64n128k32_f32_e4m3_rs\(", text)
    assert len(issues) == 2 * block_n // 32
    # the atoms read consecutive words of P (a view at the atom's first k32 step): every
    # word of the carried P once per P V
    words = [int(w) for w in re.findall(r"ra\d*\[\d+\]\[\d+\] = t\d+\[(\d+)\];", text)]
    assert sorted(words) == sorted(list(range(block_n // 8)) * 2)
    # V^T's stage: `atoms` B descriptors a P V, swizzled by the atom's span (bytes)
    descs = re.findall(r"const ag::uint64_t db = ag::make_smem_desc\(v\d+, (\d+),", text)
    assert descs.count(str(swizzle)) >= 2 * atoms, descs
    # the atoms' groups stay in flight together (one chain on O): the softmax's wait leaves
    # every atom's P V pending (lower/sync.py: a word view retires nothing)
    assert f"ag::wgmma_wait_pinned<{atoms}>();" in text
    assert s.problems_for(128, ag.e4m3) == [] and swizzle == fp8_vt_atom(block_n)


@pytest.mark.parametrize("head_dim,kw,spills", [
    (128, dict(block_n=128), False), (128, dict(block_n=192), True),
    (128, dict(block_n=224), True), (128, dict(block_n=256), True),
    (128, dict(block_n=128, packed_p=True), False), (128, dict(block_n=192, packed_p=True), False),
    (128, dict(block_n=224, packed_p=True), False), (128, dict(block_n=256, packed_p=True), True),
    (256, dict(block_n=64), False), (256, dict(block_n=128), True),
    (256, dict(block_n=128, packed_p=True), False),
])
def test_fp8_spill_problems_follow_the_measured_spills(head_dim, kw, spills):
    """spill_problems at FP8 against NVRTC 13.0 (docs/perf/attention.md h313, two 240-register
    consumers): fp32 P spills at 128 x 192 (360 B of stores) and wider at head dim 128 and at
    128 x 128 at 256 (700 B); packed as e4m3 none up to 128 x 224 at 128 and 128 x 128 at
    256, and 144 B at 128 x 256 since P's fence is a pin (e749f1cc)
    (test_wide_blocks_build_without_spills_only_when_packed builds them)."""
    s = dataclasses.replace(fp8_schedule(head_dim, wide_keys=False), **kw)
    assert s.problems_for(head_dim, ag.e4m3) == []
    found = s.spill_problems(head_dim, ag.e4m3)
    assert bool(found) == spills, found
    if spills and not s.packed_p:
        assert "packed_p=True" in found[0]


@needs_nvrtc
@pytest.mark.parametrize("block_n", [192, 224, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_wide_blocks_build_without_spills_only_when_packed(block_n, causal):
    """Two 240-register consumer warpgroups at head dim 128 (the default's TMA-store
    epilogue, permuted V^T): no local memory with P carried as e4m3 words up to 224 keys;
    with fp32 P every one of these spills (360-908 B of stores, NVRTC 13.0). At 256 keys the
    packed loop spills too since P's register-A fence is a pin (e749f1cc: 144 B; none with
    the copy it replaced), as spill_problems says (FA3_CARRY_SLACK_FP8)."""
    s = _schedule(causal, block_n=block_n)
    kernel = attention_kernel(128, ag.e4m3, causal, False, True)
    res = compile_kernel(kernel, s=s, verify=False).resources
    assert bool(s.spill_problems(128, ag.e4m3)) == (block_n == 256)
    if block_n == 256:
        assert res.spill_stores > 0, res
        return
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    if block_n == 192 and not causal:
        res = compile_kernel(kernel, s=dataclasses.replace(s, packed_p=False),
                             verify=False).resources
        assert res.spill_stores > 0, res
