"""A register A fragment of wgmma is written right before each wgmma, in every loop iteration.

The H200 bug this guards against: ping-pong attention (AttentionSchedule(ordered=True)) keeps Q
in registers, packed once per tile before the KV loop, and issues S = Q K^T with register-A wgmma
inside the loop. With an empty-asm operand fence, the PTX had `mov %r_a, %r_q` in the loop and
ptxas (NVRTC 13.0) coalesced the copy with the loop-invariant registers, then reused them for P
after the first wgmma retired and never restored them: from the second KV block on the kernel
computed S = P K^T (max error 0.25-0.33 at head dim 128, right for one KV block). At head dim 64
the register pressure is lower and the registers happened to survive. The device header's
fence_operands(uint32_t[]) copies with an identity prmt, which ptxas cannot coalesce away.

Since h314 lowering chooses the fence per wgmma (WgmmaFence.a_copy, lower/sync.py _a_copy):
the copy where the A fragment is defined outside the loop issuing the wgmma (Q), the pin
(pin_operands: an empty asm, no instruction) where the loop defines or rewrites it (P, packed
at the issue or carried packed across the back edge). The tests below check both kinds: in the
IR, in the PTX (Q's registers copied right before each S wgmma, P's not) and in the SASS of
every kind of library attention schedule with register A (no A register written while its
wgmma may read it; Q's never overwritten in the loop without being restored).

CPU only: NVRTC compiles the real kernel. The PTX test needs NVRTC; the SASS test (the
machine code that ran wrong) also needs nvdisasm (pip nvidia-cuda-nvdisasm, or on PATH).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess

import pytest

import argus as ag
from argus.runtime import nvrtc_available

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _pingpong(head_dim: int, causal: bool):
    """The ping-pong attention kernel as the library compiles it (verification off: this is
    about the machine code, and the proof is tested in tests/verify)."""
    from argus.kernels.attention import attention_kernel, base_schedule
    old = os.environ.get("ARGUS_VERIFY")
    os.environ["ARGUS_VERIFY"] = "0"
    try:
        s = dataclasses.replace(base_schedule(head_dim), ordered=True)
        return attention_kernel(head_dim, causal=causal).compile(s=s)
    finally:
        if old is None:
            os.environ.pop("ARGUS_VERIFY", None)
        else:
            os.environ["ARGUS_VERIFY"] = old


_WGMMA_RS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.\S+\s*\{[^}]*\},\s*"
                       r"\{(%r\d+),\s*(%r\d+),\s*(%r\d+),\s*(%r\d+)\}"
                       r"(?:,\s*%rd\d+,\s*p,\s*\d+,\s*\d+,\s*(\d))?")


def register_a_without_fresh_copy(ptx: str, trans_b: int | None = None,
                                  pinned: bool = False) -> list[str]:
    """For every register-A wgmma in `ptx` (with `trans_b`, only those with that imm-trans-b:
    0 for S = Q K^T, 1 for P V): each A register's last definition before it (in text order,
    no label in between) must be the identity prmt of the operand fence (`pinned`: must be
    another instruction, the pack itself: the pin fence adds none). Returns what is not
    (empty when every A register is defined right before its wgmma)."""
    lines = ptx.splitlines()
    bad = []
    for i, line in enumerate(lines):
        m = _WGMMA_RS.search(line)
        if not m or (trans_b is not None and m.group(5) != str(trans_b)):
            continue
        for reg in m.groups()[:4]:
            define = re.compile(rf"^\s*[a-z][\w.]*\s+{re.escape(reg)}\s*,")
            for j in range(i - 1, -1, -1):
                text = lines[j].strip()
                if text.startswith("$L__") and text.endswith(":"):
                    bad.append(f"line {i + 1}: {reg} is not defined after the label {text}")
                    break
                if define.match(text):
                    copy = re.match(rf"prmt\.b32\s+{re.escape(reg)},\s*{re.escape(reg)},"
                                    rf"\s*0,\s*0x3210;", text)
                    if bool(copy) == pinned:
                        bad.append(f"line {i + 1}: {reg} last defined by '{text}'")
                    break
            else:
                bad.append(f"line {i + 1}: {reg} never defined")
    return bad


def _issues(ptx: str, trans_b: int) -> int:
    return sum(m.group(5) == str(trans_b) for m in _WGMMA_RS.finditer(ptx))


@needs_nvrtc
@pytest.mark.parametrize("head_dim,causal", [(128, False), (128, True), (64, False)])
def test_pingpong_register_a_is_copied_before_each_wgmma(head_dim, causal):
    """Q's fragment (S = Q K^T, loop-invariant) is copied right before every S wgmma; P's
    (P V, packed in the loop) is not: its fence is the pin, no instruction."""
    ptx = _pingpong(head_dim, causal).binary.ptx
    assert _issues(ptx, 0) and _issues(ptx, 1), "ping-pong issues S and P V with register A"
    assert register_a_without_fresh_copy(ptx, trans_b=0) == []
    assert len(register_a_without_fresh_copy(ptx, trans_b=1)) == 4 * _issues(ptx, 1)
    assert register_a_without_fresh_copy(ptx, trans_b=1, pinned=True) == []


def test_the_ptx_check_fails_on_the_miscompiled_pattern():
    """The PTX the empty-asm fence produced: the A register is a mov of the hoisted pack."""
    before = """
\tcvt.rn.bf16x2.f32 \t%r91, %f2, %f1;
$L__BB0_74:
\tmov.u32 \t%r160, %r91;
\twgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1, %f2}, {%r160, %r160, %r160, %r160}, %rd1, p, 1, 1, 0;
"""
    assert register_a_without_fresh_copy(before)
    assert register_a_without_fresh_copy(before, trans_b=0)
    assert register_a_without_fresh_copy(before, trans_b=1) == []   # no P V issue there
    after = before.replace("\twgmma.fence", "\tprmt.b32 %r160, %r160, 0, 0x3210;\n\twgmma.fence")
    assert register_a_without_fresh_copy(after) == []
    assert register_a_without_fresh_copy(after, pinned=True)
    pinned = before.replace("\tmov.u32 \t%r160, %r91;", "\tcvt.rn.bf16x2.f32 \t%r160, %f4, %f3;")
    assert register_a_without_fresh_copy(pinned, pinned=True) == []
    assert register_a_without_fresh_copy(before, pinned=True) == []   # a mov in the block


def _fences(kernel) -> list[tuple[bool, bool]]:
    """(trans_b of the wgmma, a_copy of its fence) for every register-A wgmma of a lowered
    kernel."""
    from argus.ir import ops as O
    out = []
    for op in kernel.walk():
        for region in op.regions() if hasattr(op, "regions") else ():
            ops = region.ops
            out += [(ops[i + 1].trans_b, f.a_copy) for i, f in enumerate(ops[:-1])
                    if isinstance(f, O.WgmmaFence) and f.a_registers]
    return out


def _lowered(schedule, head_dim=128, causal=False):
    from argus.kernels.attention import attention_kernel
    return attention_kernel(head_dim, causal=causal).lower(s=schedule)


def test_lowering_copies_only_the_loop_invariant_fragment(monkeypatch):
    """The fence kind is lowering's decision: ping-pong copies Q (S, trans_b False) and pins P;
    FA3's order (P packed at the issue, or carried packed: packed_p) pins every P; and
    ARGUS_WGMMA_A_FENCE=copy copies everywhere (the fence before h314)."""
    from argus.kernels.attention import base_schedule, default_schedule
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    pingpong = _fences(_lowered(dataclasses.replace(base_schedule(128), ordered=True)))
    assert {(False, True), (True, False)} == set(pingpong)
    for packed in (False, True):
        fa3 = _fences(_lowered(dataclasses.replace(default_schedule(128), packed_p=packed)))
        assert fa3 and set(fa3) == {(True, False)}
    monkeypatch.setenv("ARGUS_WGMMA_A_FENCE", "copy")
    forced = _fences(_lowered(dataclasses.replace(base_schedule(128), ordered=True)))
    assert {copy for _, copy in forced} == {True}


@ag.kernel
def looped(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", "SK", 64, ag.bf16],
           V: ag.Tensor["BH", "SK", 64, ag.bf16], O: ag.Tensor["BH", "S", 64, ag.f32]):
    """S = Q K^T (Q loaded before the KV loop), S2 = (2 Q) K^T (computed in the loop from Q
    alone: an invariant ptxas may hoist) and O += (S + S2) V, one 64-key block a step."""
    pid, bh = ag.grid(ag.cdiv(Q.shape[1], 64), Q.shape[0])
    blocks = ag.cdiv(K.shape[1], 64)
    sK = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    sV = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(2, consumers=1)
    with ag.role("producer", warpgroups=1):
        for j in ag.range(blocks):
            with pipe.produce() as st:
                ag.tma.load(sK[st], K, (bh, j * 64, 0))
                ag.tma.load(sV[st], V, (bh, j * 64, 0))
    with ag.role("consumer", warpgroups=1):
        q = ag.load(Q, (bh, pid * 64, 0), (64, 64))
        o = ag.zeros((64, 64))
        for j in ag.range(blocks):
            with pipe.consume() as st:
                s = ag.wgmma(q, sK[st], ag.zeros((64, 64)))
                s2 = ag.wgmma((q.to(ag.f32) * 2.0).to(ag.bf16), sK[st], ag.zeros((64, 64)))
                o = ag.wgmma((s + s2).to(ag.bf16), sV[st], o, trans_b=True)
        ag.store(O, (bh, pid * 64, 0), o)


def test_lowering_copies_what_the_loop_does_not_change(monkeypatch):
    """Q (defined before the loop) and 2 Q (computed in the loop from Q alone) are copied;
    P (from this step's wgmma accumulators) is pinned; a wgmma in no loop is pinned."""
    from argus.compiler import lower_only
    from tests.unit.test_wgmma_register_a import two_gemms
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    assert _fences(lower_only(looped)) == [(False, True), (False, True), (True, False)]
    assert {copy for _, copy in _fences(lower_only(two_gemms))} == {False}



@ag.kernel
def reloaded(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", "SK", 64, ag.bf16],
             O: ag.Tensor["BH", "S", 64, ag.f32]):
    """S = Q K^T with Q loaded inside the KV loop at the tile's fixed address, and
    S2 = Q_j K^T with Q_j loaded at the loop's block (an address that changes each step)."""
    pid, bh = ag.grid(ag.cdiv(Q.shape[1], 64), Q.shape[0])
    blocks = ag.cdiv(K.shape[1], 64)
    sK = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(2, consumers=1)
    with ag.role("producer", warpgroups=1):
        for j in ag.range(blocks):
            with pipe.produce() as st:
                ag.tma.load(sK[st], K, (bh, j * 64, 0))
    with ag.role("consumer", warpgroups=1):
        o = ag.zeros((64, 64))
        for j in ag.range(blocks):
            with pipe.consume() as st:
                q = ag.load(Q, (bh, pid * 64, 0), (64, 64))
                s = ag.wgmma(q, sK[st], ag.zeros((64, 64)))
                qj = ag.load(Q, (bh, j * 64, 0), (64, 64))
                s2 = ag.wgmma(qj, sK[st], ag.zeros((64, 64)))
                o = o + s + s2
        ag.store(O, (bh, pid * 64, 0), o)


def test_a_fixed_address_reload_is_copied(monkeypatch):
    """A global load at a loop-invariant address inside the loop is an invariant the compilers
    may hoist (the tensors are __restrict__: NVVM already emits it as ld.global.nc), and
    hoisted it is Q's shape, which the pin miscompiled: copied. A load at the loop's block is
    redefined every iteration whatever the compilers do: pinned (lower/sync.py _loop_defs)."""
    from argus.compiler import lower_only
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    assert _fences(lower_only(reloaded)) == [(False, True), (False, False)]


@needs_nvrtc
def test_a_fixed_address_reload_is_copied_in_the_ptx(monkeypatch):
    """The machine-level side of the decision above: the fixed-address Q's registers are
    defined by the identity prmt right before each of its wgmma, Q_j's by the load's own
    conversion (no instruction of the fence)."""
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    ptx = reloaded.compile().binary.ptx
    issues = [m.start() for m in _WGMMA_RS.finditer(ptx)]
    assert len(issues) == 8, "4 k-steps of S, then 4 of S2, each with register A"
    split = ptx[:issues[4]].rfind("\n")
    assert register_a_without_fresh_copy(ptx[:split]) == []
    # the 16 registers last defined by a prmt copy are S's (above): none of S2's is
    assert len(register_a_without_fresh_copy(ptx, pinned=True)) == 16


def test_a_fence_built_without_lowering_copies():
    """WgmmaFence.a_copy defaults to the copy, right for any fragment (the pin is right only
    for one the loop redefines): IR built or parsed without lowering's decision gets it; the
    printed IR names lowering's pins alone, and parses back to the same fences."""
    from argus.compiler import lower_only
    from argus.ir import ops as O
    from argus.ir.parser import parse_kernel
    from argus.ir.printer import print_kernel
    assert O.WgmmaFence((), a_registers=True).a_copy is True
    lowered = lower_only(looped)
    text = print_kernel(lowered)
    assert text.count("a_copy=false") == 1 and "a_copy=true" not in text
    assert _fences(parse_kernel(text)) == _fences(lowered) == \
        [(False, True), (False, True), (True, False)]


def _nvdisasm() -> str | None:
    """nvdisasm as argus.runtime.toolkit finds it (NVDISASM=, PATH, CUDA, the pip wheel)."""
    from argus.runtime.toolkit import find_tool

    return find_tool("nvdisasm")


def _invariant(line: str) -> bool:
    """S = Q K^T with A in registers (HGMMA without .tnspB): ping-pong's loop-invariant Q."""
    return "HGMMA" in line and ".tnspB" not in line


def test_the_sass_check_finds_both_hazards():
    """register_a_hazards on hand-written SASS: Q's registers reused in the loop (commit
    9879b96's miscompile), an A register written while its group is in flight, and P carried
    across the back edge (written after the wait, read by the next iteration: no finding)."""
    from argus.runtime.sass import register_a_hazards

    def sass(body):
        return "\n".join(f"        /*{16 * i:04x}*/                   {x} ;" if not x.endswith(":")
                         else x for i, x in enumerate(body))
    s_issue = "HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR8], RZ, !UPT, gsb0"
    pv_issue = "HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR8].tnspB, R88, gsb0"
    reused = [".L_x_1:", "WARPGROUP.ARRIVE", s_issue, "WARPGROUP.DEPBAR.LE gsb0, 0x0",
              "F2FP.BF16.F32.PACK_AB R152, R25, R24", "@P0 BRA `(.L_x_1)", "EXIT"]
    assert register_a_hazards(sass(reused), _invariant) == \
        ["line 3 (HGMMA A R152): R152 overwritten in the loop after it, not restored before "
         "the next issue"]
    restored = reused[:1] + ["PRMT R152, R200, 0x3210, RZ"] + reused[1:]
    assert register_a_hazards(sass(restored), _invariant) == []
    in_flight = [".L_x_1:", "WARPGROUP.ARRIVE", pv_issue, "F2FP.BF16.F32.PACK_AB R153, R25, R24",
                 "WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P0 BRA `(.L_x_1)", "EXIT"]
    # and R152, R154, R155, which this loop never writes, hold a stale P
    assert register_a_hazards(sass(in_flight), _invariant) == \
        ["line 3 (HGMMA A R152): R153 written at line 4 while in flight"] + \
        [f"line 3 (HGMMA A R152): R{r} not written in the loop around it (stale)"
         for r in (152, 154, 155)]
    carried = [".L_x_1:", "WARPGROUP.ARRIVE", pv_issue, "WARPGROUP.DEPBAR.LE gsb0, 0x0",
               "F2FP.BF16.F32.PACK_AB R152, R25, R24", "F2FP.BF16.F32.PACK_AB R153, R25, R24",
               "F2FP.BF16.F32.PACK_AB R154, R25, R24", "F2FP.BF16.F32.PACK_AB R155, R25, R24",
               "@P0 BRA `(.L_x_1)", "EXIT"]
    assert register_a_hazards(sass(carried), _invariant) == []
    # the same write, but the wait (wait 1 with no newer group) does not retire the P V group
    kept = [x.replace("0x0", "0x1") for x in carried]
    assert register_a_hazards(sass(kept), _invariant)[0].endswith("while in flight")


def _library_schedules():
    """One of each kind of library attention schedule with register-A wgmma (the full list
    and the PRMT counts: scripts/sass_wgmma_a_fence.py)."""
    from argus.kernels.attention import base_schedule, default_schedule, fp8_schedule
    pp = dataclasses.replace(base_schedule(128), ordered=True)
    return [
        ("pingpong d128 full", 128, False, False, pp),
        ("pingpong d128 causal", 128, True, False, pp),
        ("default d64 causal (pingpong)", 64, True, False, default_schedule(64, True)),
        ("default d64 causal 2k (two CTAs)", 64, True, False, default_schedule(64, True, 2048)),
        ("default d128 full (fa3)", 128, False, False, default_schedule(128, False)),
        ("default d256 causal", 256, True, False, default_schedule(256, True)),
        ("fa3 packed_p d128", 128, False, False,
         dataclasses.replace(default_schedule(128, False), packed_p=True)),
        ("ppfa3 d128", 128, False, False,
         dataclasses.replace(default_schedule(128, False), ordered=True)),
        ("fp8 d128 causal", 128, True, True, fp8_schedule(128, True)),
    ]


@needs_nvrtc
@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found (NVDISASM=, PATH, CUDA or the pip wheel)")
@pytest.mark.parametrize("case", range(9))
def test_library_attention_sass_keeps_register_a_live(tmp_path, monkeypatch, case):
    from argus import dtypes
    from argus.kernels.attention import attention_kernel
    from argus.runtime.sass import register_a_hazards
    name, head_dim, causal, fp8, s = _library_schedules()[case]
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    kernel = attention_kernel(head_dim, dtypes.e4m3 if fp8 else dtypes.bf16, causal, False,
                              s.permuted_vt).compile(s=s)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(kernel.binary.cubin)
    sass = subprocess.run([_nvdisasm(), "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r"[HQ]GMMA\S* R\d+, R\d+, gdesc", sass), name
    assert register_a_hazards(sass, _invariant) == [], name


@ag.kernel
def nested(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", "SK", 64, ag.bf16],
           V: ag.Tensor["BH", "SK", 64, ag.bf16], O: ag.Tensor["BH", "S", 64, ag.f32]):
    """A persistent walk's shape: Q loaded in the outer (unit) loop, so it changes there, and
    read by S's wgmma in the inner KV loop, where it is invariant; P made in the inner loop."""
    pid, bh = ag.grid(ag.cdiv(Q.shape[1], 128), Q.shape[0])
    blocks = ag.cdiv(K.shape[1], 64)
    sK = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    sV = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(2, consumers=1)
    with ag.role("producer", warpgroups=1):
        for u in ag.range(2):
            for j in ag.range(blocks):
                with pipe.produce() as st:
                    ag.tma.load(sK[st], K, (bh, j * 64, 0))
                    ag.tma.load(sV[st], V, (bh, j * 64, 0))
    with ag.role("consumer", warpgroups=1):
        for u in ag.range(2):
            q = ag.load(Q, (bh, pid * 128 + u * 64, 0), (64, 64))
            o = ag.zeros((64, 64))
            for j in ag.range(blocks):
                with pipe.consume() as st:
                    s = ag.wgmma(q, sK[st], ag.zeros((64, 64)))
                    o = ag.wgmma(s.to(ag.bf16), sV[st], o, trans_b=True)
            ag.store(O, (bh, pid * 128 + u * 64, 0), o)


def test_lowering_asks_the_innermost_loop_issuing_the_wgmma(monkeypatch):
    """The fence follows the innermost loop around the issue: Q, which the outer loop reloads
    (it varies there) but the KV loop only reads, is copied; P is pinned."""
    from argus.compiler import lower_only
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    assert _fences(lower_only(nested)) == [(False, True), (True, False)]
