"""The block-scaled fp8 defaults' K loop stays lean (issue 18, GEMM 2): the SASS of the innermost
loop around the QGMMAs (scripts/sass_fp8_k_loop.py, NVRTC sm_90a, the variant a 4096 x 7168 x
2048 launch runs) has at most BOUND non-FFMA, non-QGMMA instructions per K block, no local
memory traffic, the promotion's FFMAs and the K block's QGMMAs.

The bounds sit just above what the compiler reaches now (docs/perf/fp8.md, "The K loop's
bookkeeping"): split 128 x 256 114 (202, then 155 before its second half's wgmma was pinned
and its consumers took the warp-uniform index), overlap 128 x 128 82 (119.5, then 92 before
the warp-uniform role index, test_role_uniform_index.py). What
brought them down, each a test of its own: shared addresses through the cvta intrinsic
(argus_sm90.cuh smem_u32), the unsigned ring counter (codegen/cuda/emit.py), 32-bit element
offsets of narrow tensors (analysis/alignment.py `index32`), the pinned second half
(test_fp8_split.py). A change that undoes one of them moves the counts past the bound. The
128 x 256 split variants of scripts/gpu_fp8_bench.py --variants build without local memory
(ptxas is chaotic at their 232 registers: one variant spilling while the default does not
is what this catches). Needs NVRTC and nvdisasm or cuobjdump (else skipped)."""
from pathlib import Path

import pytest

from argus.runtime import nvrtc_available
from argus.runtime.toolkit import find_tool
from tests.loading import load_script



def _script():
    return load_script("sass_fp8_k_loop")


SCRIPT = _script()
needs_tools = pytest.mark.skipif(
    not nvrtc_available() or not (find_tool("nvdisasm") or find_tool("cuobjdump")),
    reason="needs NVRTC and a disassembler (nvdisasm / cuobjdump)")

# (name in scripts/sass_fp8_k_loop.default_schedules, QGMMA and FFMA per K block, bound on the
# rest per K block)
BOUNDS = {"default split 128x256": (8, 128, 118), "default overlap 128x128": (4, 64, 86)}


@needs_tools
@pytest.mark.parametrize("name,schedule", SCRIPT.default_schedules(),
                         ids=[n for n, _ in SCRIPT.default_schedules()])
def test_default_k_loop_bookkeeping_is_bounded(name, schedule):
    qgmma, ffma, bound = BOUNDS[name]
    m = SCRIPT.measure(schedule)
    per_block = m["per_block"]
    assert per_block.get("QGMMA") == qgmma and per_block.get("FFMA") == ffma, per_block
    assert per_block.get("LDL/STL", 0) == 0 and m["spill_bytes"] == 0, (m["spill_bytes"],
                                                                          per_block)
    assert m["bookkeeping"] <= bound, (
        f"{name}: {m['bookkeeping']} non-FFMA, non-QGMMA SASS instructions per K block "
        f"(bound {bound}): {per_block}")


# the 128 x 256 split variants of gpu_fp8_bench.py --variants (the default's schedule among
# them) -> bound on their K loop's bookkeeping per K block; measured 113-122 (NVRTC 13.0,
# nvdisasm 13.5; 155-217 with 88-480 spill bytes before, docs/perf/fp8.md); the multicast
# rows measured 120 (st4 cluster) and 99 (smem scales cluster)
SPLIT_256 = {"split 128x256 st3": 118, "split 128x256 st4 g16": 118,
             "split 128x256 direct": 126, "split 128x256 cluster": 122,
             "split 128x256 smem scales": 99, "split 128x256 st4 cluster": 124,
             "split 128x256 smem scales cluster": 103}


@needs_tools
@pytest.mark.parametrize("name", list(SPLIT_256))
def test_split_256_variants_build_without_local_memory(name):
    schedule = dict(SCRIPT.variant_schedules())[name]
    m = SCRIPT.measure(schedule)
    assert m["spill_bytes"] == 0, f"{name}: {m['spill_bytes']} spill bytes: {m['per_block']}"
    assert m["per_block"].get("LDL/STL", 0) == 0, m["per_block"]
    assert m["per_block"].get("FFMA") == 128 and m["per_block"].get("QGMMA") == 8, m
    assert m["bookkeeping"] <= SPLIT_256[name], (
        f"{name}: {m['bookkeeping']} non-FFMA, non-QGMMA SASS instructions per K block "
        f"(bound {SPLIT_256[name]}): {m['per_block']}")


def test_the_measured_variant_is_the_launch_variant():
    """The counts are of what a launch runs: the scale tensors of a DeepSeek-V3 shape are
    narrow, so their element offsets are 32-bit in the measured source (64-bit in the
    variant that assumes nothing)."""
    name, schedule = SCRIPT.default_schedules()[0]
    launch = SCRIPT.render(schedule).text
    generic = SCRIPT.render(schedule, generic=True).text
    assert "(unsigned)ScaleAT_s0" in launch and "(unsigned)ScaleB_s0" in launch
    assert "ScaleAT_s0" in generic and "(unsigned)ScaleAT_s0" not in generic
