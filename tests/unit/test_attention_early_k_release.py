"""FA3's early K release (AttentionSchedule.early_k_release, bench token "ekr", h324): no
default takes it; it is refused off FA3's overlap order and with ping-pong (since h328 not
with the late rescale, nor in the FP8 kernel: tests/unit/test_attention_fp8_early_k_release.py);
lowering keeps P_{j-1} V_{j-1}'s register-A group in
flight past K_j's step (WgmmaFence.a_scope = 1, printed and parsed back); the CUDA waits
wait_group 1 before K's release and runs the softmax before wait_group 0 and V's release, its
packed A registers declared in V's step; it builds without spills, ptxas keeps that order in
the SASS (DEPBAR 1, K's arrive, every MUFU.EX2 of the block, DEPBAR 0, V's arrive) and no
instruction writes P V's A registers while the group may read them
(argus.runtime.sass.register_a_hazards); one unmasked KV block runs the default's
instruction classes (scripts/sass_attention_loop.py)."""

import dataclasses
import re

import pytest

import argus as ag
from argus.compiler import compile_kernel, lower_only
from argus.ir import ops as O
from argus.kernels.attention import (AttentionSchedule, attention_kernel, default_schedule,
                                     fp8_schedule)
from argus.runtime import nvrtc_available
from argus.runtime.sass import have_disassembler, k_loop, register_a_hazards, sass_text
from tests.loading import load_script
from tests.unit.attention_candidates import BENCH, assert_builds_without_spills

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
needs_sass = pytest.mark.skipif(not have_disassembler(), reason="nvdisasm not found "
                                "(NVDISASM=, PATH, or the nvidia-cuda-nvdisasm wheel)")


def test_the_field_and_its_refusals():
    assert not AttentionSchedule().early_k_release
    AttentionSchedule(fa3_overlap=True, early_k_release=True)
    with pytest.raises(ValueError, match="early_k_release=True reorders FA3's overlap loop"):
        AttentionSchedule(early_k_release=True)
    with pytest.raises(ValueError, match="built without ping-pong"):
        AttentionSchedule(fa3_overlap=True, ordered=True, consumers=2, early_k_release=True)
    # with the late rescale (h328: k-once follows O accumulated in place) and in the FP8
    # kernel (one P V group per V^T atom, tests/unit/test_attention_fp8_early_k_release.py)
    AttentionSchedule(fa3_overlap=True, rescale_after_pv=True, early_k_release=True)
    s = dataclasses.replace(fp8_schedule(128), early_k_release=True)
    assert s.problems_for(128, ag.e4m3) == []


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_no_default_takes_it(head_dim):
    for causal in (False, True):
        for seq_len in (None, 1024, 2048, 4096, 16384):
            assert not default_schedule(head_dim, causal, seq_len).early_k_release
        assert not fp8_schedule(head_dim, causal).early_k_release


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_token_sets_only_its_field(causal):
    for n in (2048, 4096, 16384):
        assert BENCH.variant_schedule("default+ekr", 128, causal, n) == dataclasses.replace(
            default_schedule(128, causal, n), early_k_release=True)


def _lowered(variant="default+ekr", head_dim=128, causal=False, seq_len=16384):
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    return lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=s)


def test_lowering_keeps_p_v_in_flight_past_k_step():
    """Only P_{j-1} V_{j-1} of the loop outlives its step (a_scope 1); the default has none;
    the field prints and parses back."""
    from argus.ir.parser import parse_kernel
    from argus.ir.printer import print_kernel

    def scopes(k):
        return [op.a_scope for op in k.walk() if isinstance(op, O.WgmmaFence) and op.a_registers]

    kernel = _lowered()
    assert sorted(scopes(kernel)) == [0, 1]     # the loop's P V, the peeled last P V
    assert set(scopes(_lowered("default"))) == {0}
    text = print_kernel(kernel)
    assert text.count("a_scope=1") == 1 and "a_scope=0" not in text
    assert scopes(parse_kernel(text)) == scopes(kernel)


def _loop_source(variant="default+ekr", head_dim=128, causal=False, seq_len=16384) -> str:
    s = BENCH.variant_schedule(variant, head_dim, causal, seq_len)
    text = compile_kernel(attention_kernel(head_dim, ag.bf16, causal, False), verify=False,
                          s=s).source.text
    start = text.index("// in flight past its issue's scope")
    return text[start:]


@needs_nvrtc
@pytest.mark.parametrize("head_dim,causal", [(128, False), (128, True), (256, False)])
def test_the_cuda_order(head_dim, causal):
    """In V's step: ra0 declared, then (K's step) S's and P V's issues, wait<1>, K's release
    (the step's own slot), the softmax's exp2, then wait_pinned<0> with ra0's pins and V's
    release."""
    src = _loop_source(head_dim=head_dim, causal=causal)
    issue = src.index("_rs_tb(")
    wait1 = src.index("ag::wgmma_wait<1>();")
    k_release = src.index("ag::mbar_arrive(&empty", wait1)
    exp2 = src.index("exp2", k_release)
    wait0 = src.index("ag::wgmma_wait_pinned<0>();")
    pin = src.index("ag::pin_operands(ra0[0]);", wait0)
    v_release = src.index("ag::mbar_arrive(&empty", pin)
    assert issue < wait1 < k_release < exp2 < wait0 < pin < v_release
    assert "wgmma_wait" not in src[wait1 + len("ag::wgmma_wait<1>();"):wait0]
    # the K release is K's pipeline, V's the other
    pipe = re.compile(r"ag::mbar_arrive\(&empty(\d+)\[")
    assert pipe.match(src, k_release).group(1) != pipe.match(src, v_release).group(1)


CLEAN = [("default+ekr", 128, False, 2048), ("default+ekr", 128, False, 4096),
         ("default+ekr", 128, False, 16384), ("default+ekr", 128, True, 16384),
         ("default+ekr", 128, True, 2048), ("default+ekr", 256, False, 16384),
         ("default+ekr", 256, True, 2048), ("default+ekr+packp", 128, False, 16384),
         ("default+ekr+packp+bn176+direct", 128, False, 16384),
         ("default+ekr+olate", 128, False, 16384), ("default+ekr+olate", 128, True, 2048)]


@needs_nvrtc
@pytest.mark.parametrize("variant,head_dim,causal,seq_len", CLEAN,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-S{n}"
                              for v, d, c, n in CLEAN])
def test_builds_without_spills(variant, head_dim, causal, seq_len):
    assert_builds_without_spills(BENCH.variant_schedule(variant, head_dim, causal, seq_len),
                                 head_dim, causal)


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("variant", ["default+ekr", "default+ekr+packp"])
def test_the_sass_keeps_the_order_and_the_a_registers(variant):
    s = BENCH.variant_schedule(variant, 128, False, 16384)
    built = compile_kernel(attention_kernel(128, ag.bf16, False, False), verify=False, s=s)
    sass = sass_text(built.binary.cubin)
    assert register_a_hazards(sass) == []
    loop = k_loop(sass, "HGMMA", also=("MUFU.EX2",))
    at = {name: [i for i, x in enumerate(loop) if re.search(pattern, x)]
          for name, pattern in (("wait1", r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1"),
                                ("wait0", r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0"),
                                ("arrive", r"SYNCS\.ARRIVE"), ("ex2", r"MUFU\.EX2"),
                                ("pv", r"HGMMA\.\S+ R\d+, R\d+, gdesc"))}
    assert len(at["wait1"]) == len(at["wait0"]) == 1 and len(at["arrive"]) == 2
    assert max(at["pv"]) < at["wait1"][0] < at["arrive"][0] < min(at["ex2"])
    assert max(at["ex2"]) < at["wait0"][0] < at["arrive"][1]


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_kv_block_runs_the_default_float_work(causal):
    """The same GEMM, SFU, float and sync instructions a block as the default; what moves is
    the address / predicate work around the two releases (a few instructions: 481 -> 475 at
    16k, NVRTC 13.0)."""
    loop = load_script("sass_attention_loop")
    before = loop.loop_report("default", 128, causal, 16384)
    after = loop.loop_report("default+ekr", 128, causal, 16384)
    for cls in ("HGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "MUFU.EX2", "FFMA", "FMUL",
                "FADD", "FMNMX", "F2FP", "SHFL", "BAR", "SYNCS"):
        assert before[cls] == after[cls], cls
    assert after["total"] <= before["total"] and after["spill"] == 0
