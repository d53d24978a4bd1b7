"""A role's warpgroup index is warp-uniform by default (ag.role `uniform_index`, rendered as
ag::warpgroup_id(), a lane-0 shuffle of threadIdx.x / 128): ptxas then keeps the stage
addresses and wgmma descriptors derived from it in uniform registers. Derived per thread
(threadIdx.x / 128), every descriptor of the ping-pong GEMM's K loop was built in ordinary
registers and moved with R2UR before its wgmma: 103 SASS lines around 8 HGMMA, 32 of them
R2UR (docs/perf/gemm.md, 2026-12-03). The block-scaled fp8 split loop kept the per-thread
index until its second column half's wgmma was pinned behind the first half's promotion
(ag.wgmma pinned; uniform, ptxas had hoisted that wgmma and spilled the accumulators)."""

import pytest

import argus as ag
from argus import codegen
from argus.analysis import alignment
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.ops import fp8_schedules as fs
from argus.runtime import nvrtc_available
from argus.runtime.toolkit import find_tool
from tests.loading import load_script


def _roles(kernel):
    return {op.name: op for op in kernel.body.ops if isinstance(op, O.RoleOp)}


def _fp8_split():
    from argus.kernels.gemm_fp8 import gemm_fp8_blockscaled_kernel
    return lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=fs._SPLIT_256_TMA)


def test_gemm_roles_read_the_uniform_index():
    kernel = lower_only(gemm_kernel(ag.bf16, ag.bf16, "nk"),
                        s=GemmSchedule(bm=128, bn=128, stages=6, pingpong=True))
    assert all(r.uniform_index for r in _roles(kernel).values())
    text = codegen.render(kernel).text
    assert text.count("(int)ag::warpgroup_id() - ") == 2, "producer and consumer"
    assert "(int)(threadIdx.x / 128) - " not in text


def test_fp8_split_consumer_reads_the_uniform_index():
    kernel = _fp8_split()
    assert all(r.uniform_index for r in _roles(kernel).values())
    text = codegen.render(kernel).text
    assert "(int)ag::warpgroup_id() - 1;" in text and "(int)ag::warpgroup_id() - 0;" in text
    assert "(int)(threadIdx.x / 128) - " not in text


def test_per_thread_index_renders_and_round_trips():
    @ag.kernel
    def per_thread(A: ag.Tensor["M", ag.f32]):
        ag.grid(1)
        with ag.role("one", warpgroups=1, uniform_index=False) as wg:
            ag.store(A, (wg * 128,), ag.zeros((128,)))

    kernel = lower_only(per_thread)
    assert not _roles(kernel)["one"].uniform_index
    assert "(int)(threadIdx.x / 128) - 0;" in codegen.render(kernel).text
    again = parse_kernel(print_kernel(kernel))
    assert again == kernel
    assert not _roles(again)["one"].uniform_index


def test_uniform_index_must_be_a_bool():
    @ag.kernel
    def bad(A: ag.Tensor["M", ag.f32]):
        with ag.role("only", warpgroups=1, uniform_index=1):
            pass

    with pytest.raises(TraceError, match="uniform_index must be True or False"):
        bad.trace()


needs_tools = pytest.mark.skipif(
    not nvrtc_available() or not (find_tool("nvdisasm") or find_tool("cuobjdump")),
    reason="needs NVRTC and a disassembler (nvdisasm / cuobjdump)")

# schedule -> (HGMMA per trip, bound on the loop's other SASS instructions); measured with the
# uniform index (NVRTC 13.0): 59, 59 and 54 (the ping-pong ones were 95 with 32 R2UR before)
K_LOOPS = {
    "ping-pong 128x128": (GemmSchedule(bm=128, bn=128, stages=6, pingpong=True), 8, 64),
    "ping-pong 128x128 TMA store": (GemmSchedule(bm=128, bn=128, stages=6, pingpong=True,
                                                 epilogue="tma", store_cols=64), 8, 64),
    "cooperative 128x256": (GemmSchedule(stages=4, epilogue="tma", cluster_m=2,
                                         store_cols=128), 4, 60),
}


@needs_tools
@pytest.mark.parametrize("name", list(K_LOOPS))
def test_gemm_k_loop_builds_descriptors_in_uniform_registers(name):
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble, k_loop, k_loop_classes

    schedule, hgmma, bound = K_LOOPS[name]
    kernel = lower_only(gemm_kernel(ag.bf16, ag.bf16, "nk"), s=schedule)
    launch = load_script("sass_fp8_k_loop").launch_specialization(
        kernel, {"M": 4096, "N": 4096, "K": 4096})
    source = codegen.render(alignment.specialize(kernel, launch))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("the disassembler produced nothing")
    classes = k_loop_classes(k_loop(sass, "HGMMA"))
    assert classes.get("HGMMA") == hgmma, classes
    assert classes.get("to uniform", 0) == 0, f"{name}: R2UR moves in the K loop: {classes}"
    rest = sum(v for k, v in classes.items() if k != "HGMMA")
    assert rest <= bound, f"{name}: {rest} non-HGMMA instructions in the K loop: {classes}"
