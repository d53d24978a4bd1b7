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
