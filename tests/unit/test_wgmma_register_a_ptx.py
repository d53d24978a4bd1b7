"""A register A fragment of wgmma is written right before each wgmma, in every loop iteration.

The H200 bug this guards against: ping-pong attention (AttentionSchedule(ordered=True)) keeps Q
in registers, packed once per tile before the KV loop, and issues S = Q K^T with register-A wgmma
inside the loop. With an empty-asm operand fence, the PTX had `mov %r_a, %r_q` in the loop and
ptxas (NVRTC 13.0) coalesced the copy with the loop-invariant registers, then reused them for P
after the first wgmma retired and never restored them: from the second KV block on the kernel
computed S = P K^T (max error 0.25-0.33 at head dim 128, right for one KV block). At head dim 64
the register pressure is lower and the registers happened to survive. The device header's
fence_operand(uint32_t&) now copies with an identity prmt, which ptxas cannot coalesce away.

CPU only: NVRTC compiles the real kernel. The PTX test needs NVRTC; the SASS test (the
machine code that ran wrong) also needs nvdisasm (pip nvidia-cuda-nvdisasm, or on PATH).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess

import pytest

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
                       r"\{(%r\d+),\s*(%r\d+),\s*(%r\d+),\s*(%r\d+)\}")


def register_a_without_fresh_copy(ptx: str) -> list[str]:
    """For every register-A wgmma in `ptx`: each A register's last definition before it (in
    text order, no label in between) must be the identity prmt of the operand fence. Returns
    what is not (empty when every A register is defined right before its wgmma)."""
    lines = ptx.splitlines()
    bad = []
    for i, line in enumerate(lines):
        m = _WGMMA_RS.search(line)
        if not m:
            continue
        for reg in m.groups():
            define = re.compile(rf"^\s*[a-z][\w.]*\s+{re.escape(reg)}\s*,")
            for j in range(i - 1, -1, -1):
                text = lines[j].strip()
                if text.startswith("$L__") and text.endswith(":"):
                    bad.append(f"line {i + 1}: {reg} is not defined after the label {text}")
                    break
                if define.match(text):
                    if not re.match(rf"prmt\.b32\s+{re.escape(reg)},\s*{re.escape(reg)},\s*0,"
                                    rf"\s*0x3210;", text):
                        bad.append(f"line {i + 1}: {reg} last defined by '{text}'")
                    break
            else:
                bad.append(f"line {i + 1}: {reg} never defined")
    return bad


@needs_nvrtc
@pytest.mark.parametrize("head_dim,causal", [(128, False), (128, True), (64, False)])
def test_pingpong_register_a_is_copied_before_each_wgmma(head_dim, causal):
    ptx = _pingpong(head_dim, causal).binary.ptx
    assert _WGMMA_RS.search(ptx), "the ping-pong kernel issues register-A wgmma (S and P V)"
    assert register_a_without_fresh_copy(ptx) == []


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
    after = before.replace("\twgmma.fence", "\tprmt.b32 %r160, %r160, 0, 0x3210;\n\twgmma.fence")
    assert register_a_without_fresh_copy(after) == []


def _nvdisasm() -> str | None:
    found = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    return found if found and os.path.exists(found) else None


def clobbered_register_a(sass: str) -> list[str]:
    """SASS: for each register-A HGMMA of S (not .tnspB) inside a loop, an A register that the
    loop body writes after the HGMMA but not between the loop head and the HGMMA: the next
    iteration would read whatever the body left there."""
    lines = sass.splitlines()
    labels = {ln.strip()[:-1]: i for i, ln in enumerate(lines)
              if re.match(r"^\.L_x_\d+:$", ln.strip())}
    back = [(labels[m.group(1)], i) for i, ln in enumerate(lines)
            for m in [re.search(r"BRA `\((\.L_x_\d+)\)", ln)]
            if m and labels.get(m.group(1), len(lines)) < i]
    bad = []
    for h, ln in enumerate(lines):
        m = re.search(r"HGMMA\S* R\d+, R(\d+), gdesc\[[^\]]*\](?!\.tnspB)", ln)
        if not m:
            continue
        loops = [(a, b) for a, b in back if a <= h <= b]
        if not loops:
            continue
        head, tail = min(loops, key=lambda ab: ab[1] - ab[0])
        for r in range(int(m.group(1)), int(m.group(1)) + 4):
            w = re.compile(rf"^\s*/\*\w+\*/\s+(@!?P\d\s+)?[A-Z0-9_.]+\s+R{r},")
            if any(w.search(lines[j]) for j in range(h + 1, tail + 1)) and \
                    not any(w.search(lines[j]) for j in range(head, h)):
                bad.append(f"HGMMA line {h + 1}: R{r}")
    return bad


@needs_nvrtc
@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found (NVDISASM= or PATH)")
@pytest.mark.parametrize("head_dim,causal", [(128, False), (128, True), (64, True)])
def test_pingpong_sass_keeps_register_a_live(tmp_path, head_dim, causal):
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(_pingpong(head_dim, causal).binary.cubin)
    sass = subprocess.run([_nvdisasm(), "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    assert "HGMMA" in sass
    assert clobbered_register_a(sass) == []
