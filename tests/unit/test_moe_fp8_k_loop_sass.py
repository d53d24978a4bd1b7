"""The fp8 MoE grouped GEMMs' K loop is the dense block-scaled kernel's (issue 16 / 18): at the
prefill default above 128 rows an expert (FP8_PREFILL_SPLIT_SMEM_TMA, the gate-up and the down
at DeepSeek-V3's T = 16384 launch) the innermost loop around the QGMMAs has the dense "split
128x256 smem scales" loop's QGMMA and FFMA per K block, at most SLACK more other instructions,
no local memory, and the down's unit loop outside the K loop (accumulator reset, epilogue) is
no longer than the dense one's plus SLACK. docs/perf/moe.md "The fp8 grouped GEMMs against the
dense split" (2026-12-07): 231 / 231 / 231 instructions per K block, 95 bookkeeping each, 367
against 392 per unit. Needs NVRTC and nvdisasm or cuobjdump (else skipped)."""
import pytest

from argus.runtime import nvrtc_available
from argus.runtime.toolkit import find_tool
from tests.loading import load_script

SCRIPT = load_script("sass_fp8_k_loop")
needs_tools = pytest.mark.skipif(
    not nvrtc_available() or not (find_tool("nvdisasm") or find_tool("cuobjdump")),
    reason="needs NVRTC and a disassembler (nvdisasm / cuobjdump)")
SLACK = 4


def test_moe_schedules_measure_the_prefill_default():
    from argus.ops.moe import CARD_H100, CARD_H200, fp8_schedule_for

    named = dict(SCRIPT.moe_schedules())
    for card in (CARD_H100, CARD_H200):
        assert named["moe gate-up split_smem_tma"] == fp8_schedule_for(16384, 8, 256, card)
        assert named["moe down split_smem_tma"] == fp8_schedule_for(16384, 8, 256, card)
    assert all(SCRIPT.moe_gemm(n) for n in named if n.startswith("moe "))


@pytest.fixture(scope="module")
def dense():
    return SCRIPT.measure(dict(SCRIPT.moe_schedules())["split 128x256 smem scales"],
                          name="split 128x256 smem scales")


@needs_tools
@pytest.mark.parametrize("name", ["moe gate-up split_smem_tma", "moe down split_smem_tma"])
def test_moe_k_loop_is_the_dense_loop(name, dense):
    m = SCRIPT.measure(dict(SCRIPT.moe_schedules())[name], name=name)
    p, d = m["per_block"], dense["per_block"]
    assert (p.get("QGMMA"), p.get("FFMA")) == (d.get("QGMMA"), d.get("FFMA")) == (8, 128), (p, d)
    assert p.get("LDL/STL", 0) == 0 and m["spill_bytes"] == 0, (m["spill_bytes"], p)
    assert m["registers"] == dense["registers"], (m["registers"], dense["registers"])
    assert p.get("LDS") == d.get("LDS") and "LDG" not in p, p     # the scales from smem
    assert m["bookkeeping"] <= dense["bookkeeping"] + SLACK, (m["bookkeeping"], p,
                                                              dense["bookkeeping"], d)
    if name.startswith("moe down"):   # the gate-up's SiLU epilogue is its own (documented)
        assert m["unit_rest"] <= dense["unit_rest"] + SLACK, (m["unit_rest"],
                                                              dense["unit_rest"])
