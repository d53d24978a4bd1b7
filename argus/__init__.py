"""Argus: a verified tile DSL for NVIDIA Hopper (sm_90a). Users write `import argus as ag`.

    @ag.kernel
    def scale(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], BN: int = 1024):
        (row,) = ag.grid(X.shape[0])
        x = ag.load(X, (row, 0), (1, BN))
        ag.store(Y, (row, 0), x * 2.0)
"""

from argus.dsl.api import (abs_, allow_dependent_launch, arange, atomic_add, atomic_fetch_add,
                           cdiv, cluster_rank, elect, erf,
                           exp, exp2, fence, full, gather, grid, ldmatrix,
                           load, load_scalar, load_shared, log, maximum, minimum, occupancy,
                           ordered,
                           pipeline, range, relu,
                           role, round_tf32,
                           rsqrt, scalar, scan, sigmoid, smem, sqrt, stmatrix, store,
                           store_shared, tanh,
                           thread_index,
                           tma, wait_prior_grids, wgmma, when, where, zeros)
from argus.dsl.kernel import ScalarParam as Scalar
from argus.dsl.kernel import Tensor
from argus.dsl.tags import (opaque, require, sym, tag, tag_all, tag_any, tag_assert, tag_assume,
                            tag_fn, tag_tensor)
from argus.dtypes import bf16, e4m3, f16, f32, f64, i1, i32, i64, u32
from argus.errors import (ArgusError, CompileError, Diagnostic, IRError, LaunchError, TraceError,
                          VerificationError)
from argus.kernel_api import KernelFunction, kernel

__version__ = "0.1.0"


def compile(kernel_fn: KernelFunction, *, verify: bool | None = None, **constexprs):  # noqa: A001
    """Trace, verify (unless verify=False or ARGUS_VERIFY=0), lower, generate CUDA and build it
    with NVRTC for sm_90a. Returns a CompiledKernel you call with CUDA tensors."""
    from argus.compiler import compile_kernel

    return compile_kernel(kernel_fn, verify=verify, **constexprs)

__all__ = [
    "abs_", "allow_dependent_launch", "arange", "atomic_add", "atomic_fetch_add", "Scalar",
    "cdiv", "cluster_rank", "elect", "erf",
    "exp", "exp2", "fence", "full", "grid",
    "gather", "ldmatrix", "load", "load_scalar", "load_shared", "log", "maximum",
    "minimum", "occupancy", "ordered", "pipeline", "range", "relu", "role", "round_tf32",
    "rsqrt", "scalar",
    "scan",
    "sigmoid",
    "smem", "sqrt", "stmatrix", "store", "store_shared", "tanh", "thread_index", "tma",
    "wait_prior_grids",
    "wgmma", "when", "where",
    "zeros",
    "KernelFunction", "Tensor", "kernel", "compile", "bf16", "e4m3", "f16", "f32", "f64", "i1",
    "i32", "i64", "u32", "ArgusError", "CompileError", "Diagnostic", "IRError", "LaunchError",
    "TraceError", "VerificationError",
    "opaque", "require", "sym", "tag", "tag_all", "tag_any", "tag_assert", "tag_assume", "tag_fn",
    "tag_tensor",
]
