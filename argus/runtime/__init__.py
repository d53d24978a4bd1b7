"""Runtime: compile CUDA C++ with NVRTC (nvcc fallback) behind a content-hash cache, build TMA
descriptors, check arguments and launch kernels on torch tensors and streams.

Importing this package loads neither torch nor the CUDA libraries; they are loaded on first use
(NVRTC at the first compile, the driver at the first launch or tensor map).
"""

from argus.runtime.args import bind_shapes, check_tensor_arg
from argus.runtime.compile import (
    Binary,
    clear_memory_cache,
    compile_cuda,
    compile_stats,
    device_header_dir,
    format_compile_error,
)
from argus.runtime.driver import (
    FunctionAttributes,
    LaunchPlan,
    Scalar,
    f32,
    f64,
    function_attributes,
    get_function,
    i32,
    i64,
    launch,
    pack_params,
    prepare_launch,
    u32,
    u64,
)
from argus.runtime.resources import KernelResources, parse_ptxas_log
from argus.runtime.sass import SassCheck, check_sass, disassemble, instruction_histogram
from argus.runtime.tma import TensorMap, TensorMapSpec, check_tensor_map, make_tensor_map
from argus.runtime.toolkit import ToolNotFound, find_tool, nvrtc_available

__all__ = [
    "Binary", "FunctionAttributes", "KernelResources", "LaunchPlan", "SassCheck", "Scalar",
    "TensorMap", "TensorMapSpec", "ToolNotFound", "bind_shapes", "check_sass", "check_tensor_arg",
    "check_tensor_map", "clear_memory_cache", "compile_cuda", "compile_stats",
    "device_header_dir", "disassemble", "f32", "f64", "find_tool", "format_compile_error",
    "function_attributes", "get_function", "i32", "i64", "instruction_histogram", "launch",
    "make_tensor_map", "nvrtc_available", "pack_params", "parse_ptxas_log", "prepare_launch",
    "u32", "u64",
]
