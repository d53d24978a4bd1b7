"""The FA3-order attention loop (AttentionSchedule.fa3_overlap) in the PTX NVRTC makes for
sm_90a: in the KV loop, P V's register-A wgmma is issued, then `wgmma.wait_group 1`, then the
softmax's exp2 (one `ex2.approx` per S element of the thread, plus alpha), and only then
`wgmma.wait_group 0`; every register-A operand is defined right before its wgmma (the fence of
tests/unit/test_wgmma_register_a_ptx.py). This is what lower/sync.py and codegen promise. With
nvdisasm (NVDISASM= or PATH; pip nvidia-cuda-nvdisasm), the SASS too: ptxas keeps the exp2
between the P V HGMMA and its wait (the wait is pinned: without it ptxas hoisted the wait above
the softmax, docs/perf/attention.md)."""

from __future__ import annotations
import os
import re

import pytest

from argus.runtime import nvrtc_available
from argus.runtime.sass import have_disassembler
from tests.unit.test_wgmma_register_a_ptx import register_a_without_fresh_copy
from tests.loading import load_script

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _ptx(head_dim: int, causal: bool) -> str:
    from argus.kernels.attention import attention_kernel, fa3_overlap_schedule
    old = os.environ.get("ARGUS_VERIFY")
    os.environ["ARGUS_VERIFY"] = "0"   # the carried P's key tags are not proven yet
    try:
        s = fa3_overlap_schedule(head_dim, causal)
        return attention_kernel(head_dim, causal=causal).compile(s=s).binary.ptx
    finally:
        if old is None:
            os.environ.pop("ARGUS_VERIFY", None)
        else:
            os.environ["ARGUS_VERIFY"] = old


def loop_order(ptx: str) -> list[str]:
    """The PTX's events in text order: 'rs' (a register-A wgmma), 'w<N>' (wait_group N), 'e'
    (an ex2.approx), compressed to runs ('e' once per run, with its count after a colon)."""
    events = []
    for line in ptx.splitlines():
        if "wgmma.mma_async" in line and re.search(r"\},\s*\{%r\d+", line):
            events.append("rs")
        elif m := re.search(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", line):
            events.append(f"w{m.group(1)}")
        elif "ex2.approx" in line:
            events.append("e")
    out: list[str] = []
    for e in events:
        if out and out[-1].split(":")[0] == e and e in ("e", "rs"):
            name, n = (out[-1].split(":") + ["1"])[:2]
            out[-1] = f"{name}:{int(n) + 1}"
        else:
            out.append(e)
    return out


@needs_nvrtc
@pytest.mark.parametrize("head_dim,causal", [(128, False), (128, True), (256, False)])
def test_softmax_exp2_sits_between_wait_1_and_wait_0(head_dim, causal):
    from argus.kernels.attention import fa3_overlap_schedule

    block_n = fa3_overlap_schedule(head_dim, causal).block_n
    order = loop_order(_ptx(head_dim, causal))
    # the loop: P V issued, wait 1 (S_j retired), the softmax's exp2 of S_j (block_n / 2 per
    # thread, and alpha's 2), wait 0 (P V retired)
    want = ["w1", f"e:{block_n // 2 + 2}", "w0"]
    found = [i for i in range(len(order) - 3)
             if order[i].startswith("rs") and order[i + 1:i + 4] == want]
    assert found, order


@needs_nvrtc
def test_fa3_register_a_is_defined_before_each_wgmma():
    ptx = _ptx(128, True)
    # P's A registers are defined in the loop block before each issue, by the pack itself:
    # lowering pins them (no identity prmt copy, lower/sync.py _a_copy)
    assert register_a_without_fresh_copy(ptx, pinned=True) == []


def test_loop_order_reads_runs():
    ptx = "\n".join([
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, {%r1, %r2, %r3, %r4}, x;",
        "wgmma.wait_group.sync.aligned 1;", "ex2.approx.f32 %f2, %f3;",
        "ex2.approx.f32 %f4, %f5;", "wgmma.wait_group.sync.aligned 0;"])
    assert loop_order(ptx) == ["rs", "w1", "e:2", "w0"]


@needs_nvrtc
@pytest.mark.skipif(not have_disassembler(), reason="nvdisasm not found (NVDISASM=, PATH, "
                    "CUDA or the nvidia-cuda-nvdisasm wheel)")
@pytest.mark.parametrize("head_dim,causal", [(64, True), (128, False), (128, True),
                                             (256, False)])
def test_sass_keeps_the_softmax_beside_p_v(head_dim, causal):
    """In the machine code too: ptxas neither serializes the wgmma (C7512) nor moves the
    pinned wait 0 above the softmax, so the loop's P V group has the exp2 of S_j (block_n/2
    per thread, and alpha's 2) between its HGMMA and its WARPGROUP.DEPBAR 0x0."""
    from argus.kernels.attention import fa3_overlap_schedule

    tool = load_script("sass_attention_overlap")
    schedule = fa3_overlap_schedule(head_dim, causal)
    old = os.environ.get("ARGUS_VERIFY")
    os.environ["ARGUS_VERIFY"] = "0"
    try:
        head, *groups = tool.overlap_report(head_dim, causal, schedule)
    finally:
        if old is None:
            os.environ.pop("ARGUS_VERIFY", None)
        else:
            os.environ["ARGUS_VERIFY"] = old
    assert "not serialized" in head, head
    exps = [int(re.search(r"(\d+) MUFU.EX2", g).group(1)) for g in groups]
    assert max(exps) >= schedule.block_n // 2 + 2, groups
