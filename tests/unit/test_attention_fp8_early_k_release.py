"""FA3's early K release on the FP8 forward (AttentionSchedule.early_k_release, fp8 bench token
"ekr", h328): no FP8 default takes it; the token sets only its field; P V's register-A groups
(one per V^T atom: 7 at 224 keys, 3 at 192) are kept in flight past K_j's step (each fence
a_scope 1), K_j's end waits wait_group(atoms) -- S_j retired, every P V atom still in flight --
and releases K_j before the softmax's exp2, V_{j-1}'s end waits 0 and releases V_{j-1}; the
kernel builds for sm_90a without spills or local memory; ptxas keeps the order in the SASS
(DEPBAR atoms, K's arrive, every MUFU.EX2 of the block, DEPBAR 0, V's arrive) and no
instruction writes a P V atom's A registers while it may read them; one unmasked KV block
runs the default's GEMM, SFU, float and sync instructions (scripts/sass_attention_loop.py
--fp8)."""

import dataclasses
import re

import pytest

import argus as ag
from argus.compiler import compile_kernel, lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel, fp8_schedule, fp8_vt_atom
from argus.runtime import nvrtc_available
from argus.runtime.sass import have_disassembler, k_loop, register_a_hazards, sass_text
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
needs_sass = pytest.mark.skipif(not have_disassembler(), reason="nvdisasm not found "
                                "(NVDISASM=, PATH, or the nvidia-cuda-nvdisasm wheel)")


def _schedule(variant="pvt+ekr", head_dim=128, causal=False):
    return BENCH.fp8_variant_schedule(variant, head_dim, causal)


def _kernel(s, head_dim=128, causal=False, lse=False):
    return attention_kernel(head_dim, ag.e4m3, causal, lse, s.permuted_vt)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_no_fp8_default_takes_it_and_the_token_sets_only_its_field(head_dim):
    for causal in (False, True):
        s = fp8_schedule(head_dim, causal)
        assert not s.early_k_release
        ekr = _schedule("pvt+ekr", head_dim, causal)
        assert ekr == dataclasses.replace(_schedule("pvt", head_dim, causal),
                                          early_k_release=True)
        assert ekr.problems_for(head_dim, ag.e4m3) == []
        assert ekr.rescale_after_pv      # the FP8 default's late rescale, kept


def test_ping_pong_is_still_refused():
    with pytest.raises(ValueError, match="built without ping-pong"):
        _schedule("pvt+ppfa3+ekr")


@pytest.mark.parametrize("causal", [False, True], ids=["full-224", "causal-192"])
def test_every_p_v_atom_outlives_the_k_step(causal):
    """The loop's P V fences carry a_scope 1, one per V^T atom; the peeled last P V's 0."""
    s = _schedule(causal=causal)
    atoms = s.block_n // fp8_vt_atom(s.block_n)
    kernel = lower_only(_kernel(s, causal=causal), s=s)
    scopes = sorted(op.a_scope for op in kernel.walk()
                    if isinstance(op, O.WgmmaFence) and op.a_registers)
    assert scopes == [0] * atoms + [1] * atoms
    default = lower_only(_kernel(_schedule("pvt", causal=causal), causal=causal),
                         s=_schedule("pvt", causal=causal))
    assert {op.a_scope for op in default.walk() if isinstance(op, O.WgmmaFence)} == {0}


def _source(variant="pvt+ekr", causal=False) -> str:
    s = _schedule(variant, causal=causal)
    return compile_kernel(_kernel(s, causal=causal), verify=False, s=s).source.text


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True], ids=["full-224", "causal-192"])
def test_the_cuda_order(causal):
    """In V's step: ra0.. declared (one per atom), then (K's step) S's issue, the atoms' rs
    issues, wait<atoms>, K's release, the softmax's exp2, wait_pinned<0> with the atoms' pins
    and V's release."""
    s = _schedule(causal=causal)
    atoms = s.block_n // fp8_vt_atom(s.block_n)
    text = _source(causal=causal)
    src = text[text.index("// in flight past its issue's scope"):]
    assert text.count("// in flight past its issue's scope") == atoms
    last_issue = src.rindex("_rs(", 0, src.index(f"ag::wgmma_wait<{atoms}>();"))
    wait_k = src.index(f"ag::wgmma_wait<{atoms}>();")
    k_release = src.index("ag::mbar_arrive(&empty", wait_k)
    exp2 = src.index("exp2", k_release)
    wait0 = src.index("ag::wgmma_wait_pinned<0>();")
    pin = src.index(f"ag::pin_operands(ra{atoms - 1}[0]);", wait0)
    v_release = src.index("ag::mbar_arrive(&empty", pin)
    assert last_issue < wait_k < k_release < exp2 < wait0 < pin < v_release
    # S's group, then one group per atom (a 64-key atom is two k32 issues in one group)
    assert src[:wait_k].count("ag::wgmma_commit();") == 1 + atoms
    assert src[:wait_k].count("_rs(") == s.block_n // 32
    assert "wgmma_wait" not in src[wait_k + len(f"ag::wgmma_wait<{atoms}>();"):wait0]
    pipe = re.compile(r"ag::mbar_arrive\(&empty(\d+)\[")
    assert pipe.match(src, k_release).group(1) != pipe.match(src, v_release).group(1)


BUILDS = [("pvt+ekr", 128, False), ("pvt+ekr", 128, True), ("ekr", 128, False),
          ("pvt+ekr+narrow", 128, True), ("pvt+ekr", 64, False), ("pvt+ekr", 256, True)]


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("variant,head_dim,causal", BUILDS,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}" for v, d, c in BUILDS])
@pytest.mark.parametrize("lse", [False, True], ids=["o", "lse"])
def test_builds_without_spills_or_local_memory(variant, head_dim, causal, lse):
    s = _schedule(variant, head_dim, causal)
    built = compile_kernel(_kernel(s, head_dim, causal, lse), verify=False, s=s)
    res = built.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert not re.search(r"\b(?:LDL|STL)\b", sass_text(built.binary.cubin))


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full-224", "causal-192"])
def test_the_sass_keeps_the_order_and_the_a_registers(causal):
    s = _schedule(causal=causal)
    atoms = s.block_n // fp8_vt_atom(s.block_n)
    built = compile_kernel(_kernel(s, causal=causal), verify=False, s=s)
    sass = sass_text(built.binary.cubin)
    assert register_a_hazards(sass) == []
    loop = k_loop(sass, "QGMMA", also=("MUFU.EX2",))
    at = {name: [i for i, x in enumerate(loop) if re.search(pattern, x)]
          for name, pattern in (("wait_k", rf"WARPGROUP\.DEPBAR\.LE gsb0, 0x{atoms:x}\b"),
                                ("wait0", r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b"),
                                ("arrive", r"SYNCS\.ARRIVE"), ("ex2", r"MUFU\.EX2"),
                                ("pv", r"QGMMA\.\S+ R\d+, R\d+, gdesc"))}
    assert len(at["wait_k"]) == len(at["wait0"]) == 1 and len(at["arrive"]) == 2, at
    assert len(at["pv"]) >= atoms
    assert max(at["pv"]) < at["wait_k"][0] < at["arrive"][0] < min(at["ex2"])
    assert max(at["ex2"]) < at["wait0"][0] < at["arrive"][1]


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_kv_block_runs_the_default_float_work(causal):
    """The same GEMM, SFU, float and sync instructions a block as the FP8 default; what moves
    is the address / predicate work around the two releases (718 -> 712 full, 620 -> 614
    causal, NVRTC 13.0)."""
    loop = load_script("sass_attention_loop")
    before = loop.loop_report("pvt", 128, causal, 16384, fp8=True)
    after = loop.loop_report("pvt+ekr", 128, causal, 16384, fp8=True)
    for cls in ("HGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "MUFU.EX2", "FFMA", "FMUL",
                "FADD", "FMNMX", "F2FP", "SHFL", "BAR", "SYNCS"):
        assert before[cls] == after[cls], cls
    assert after["total"] <= before["total"]
    assert after["spill"] == after["local"] == 0
