"""argus.runtime.resources: parsing the ptxas -v report of NVRTC and of nvcc."""

from __future__ import annotations

from argus.runtime.resources import KernelResources, kernel_resources, parse_ptxas_log

NVRTC_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'argus_gemm_bf16_tn' for 'sm_90a'
ptxas info    : Function properties for argus_gemm_bf16_tn
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
ptxas info    : Compile time = 138.693 ms
ptxas info    : Compiling entry function '_Z4fillILi7EEvPi' for 'sm_90a'
ptxas info    : Function properties for _Z4fillILi7EEvPi
ptxas         .     24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 3 barriers, 4112 bytes smem, 400 bytes cmem[0]
"""

NVCC_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'scale' for 'sm_90a'
ptxas info    : Function properties for helper
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for scale
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 16 bytes smem, 372 bytes cmem[0]
"""


def test_nvrtc_layout():
    parsed = parse_ptxas_log(NVRTC_LOG)
    assert parsed["argus_gemm_bf16_tn"] == {"stack_frame": 0, "spill_stores": 0,
                                            "spill_loads": 0, "registers": 168, "barriers": 1}
    fill = parsed["_Z4fillILi7EEvPi"]
    assert fill["registers"] == 255 and fill["spill_stores"] == 16 and fill["spill_loads"] == 8
    assert fill["stack_frame"] == 24 and fill["smem_static"] == 4112 and fill["cmem0"] == 400
    assert fill["barriers"] == 3


def test_nvcc_layout_and_device_function_blocks():
    parsed = parse_ptxas_log(NVCC_LOG)
    assert set(parsed) == {"scale"}  # the device function "helper" has no register line
    assert parsed["scale"]["registers"] == 10 and parsed["scale"]["smem_static"] == 16
    assert parsed["scale"]["stack_frame"] == 0


def test_kernel_resources_maps_names_to_symbols():
    res = kernel_resources(NVRTC_LOG, {"fill<7>": "_Z4fillILi7EEvPi", "absent": "nothing"})
    assert len(res) == 1
    fill = res[0]
    assert isinstance(fill, KernelResources) and fill.name == "fill<7>" and fill.spills
    assert "255 registers" in fill.summary() and "16 B spill stores" in fill.summary()


def test_empty_log():
    assert parse_ptxas_log("") == {}


# ---------------------------------------------------------------- the cubin's own record
_TWO = r"""
extern "C" __global__ void plain(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" __global__ void framed(float* x, int n) {
    float a[64];                      // indexed at run time: a local array in the stack frame
    for (int i = 0; i < 64; i++) a[i] = x[(i * n) % 4096];
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[(i * 7) % 64] * a[(i * 13) % 64];
    x[threadIdx.x] = s;
}
"""


def _nvrtc():
    import pytest

    from argus.runtime import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")


def _block_scaled_binary():
    import argus as ag
    from argus import codegen
    from argus.compiler import lower_only
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16),
                                       s=Fp8GemmSchedule(bn=128, stages=5, promote=True,
                                                         cluster_m=2, epilogue="tma")))
    return source.name, compile_cuda(source.text, [source.name], use_cache=False)


def test_cubin_records_what_ptxas_reports():
    """Registers, frame and barriers read from the cubin equal ptxas's report (the block-scaled
    fp8 GEMM, whose report the H200 host's log lacked, and a plain kernel); a kernel with a
    stack frame gets None: the cubin cannot tell its spills."""
    _nvrtc()
    import dataclasses

    from argus.runtime.compile import compile_cuda
    from argus.runtime.resources import cubin_resources

    name, binary = _block_scaled_binary()
    reported = binary.resource(name)
    assert reported.registers > 100 and reported.barriers > 1   # setmaxnreg, a TMA ring
    from_cubin = cubin_resources(binary.cubin, name, name)
    assert from_cubin == dataclasses.replace(reported, smem_static=0, cmem0=0)
    two = compile_cuda(_TWO, ["plain", "framed"], use_cache=False)
    plain, framed = two.resource("plain"), two.resource("framed")
    assert cubin_resources(two.cubin, "plain", "plain") == \
        dataclasses.replace(plain, smem_static=0, cmem0=0)
    assert framed.stack_frame > 0 and cubin_resources(two.cubin, "framed", "framed") is None
    assert cubin_resources(b"not an elf", "plain", "plain") is None


def test_a_binary_without_its_ptxas_report_reads_the_cubin():
    """`Binary.resource` of a binary whose log lacks the report (what the H200 host returned
    for the block-scaled kernel: scripts/gpu_fp8_bench.py --block stopped on the KeyError)."""
    _nvrtc()
    import dataclasses

    import pytest

    from argus.runtime.compile import compile_cuda

    name, binary = _block_scaled_binary()
    bare = dataclasses.replace(binary, log="", resources=())
    res = bare.resource(name)
    assert res.registers == binary.resource(name).registers and not res.spills
    two = dataclasses.replace(compile_cuda(_TWO, ["plain", "framed"], use_cache=False),
                              log="", resources=())
    assert two.resource("plain").registers == compile_cuda(_TWO, ["plain", "framed"]) \
        .resource("plain").registers
    with pytest.raises(KeyError, match="no ptxas report for kernel 'framed'"):
        two.resource("framed")
