"""Check kernel arguments before launch: each tensor's dtype / rank / device / layout, that
symbolic shape names (M, N, K ...) bind to one value across all parameters, and which launch
arguments are tensors and which runtime scalars (the GPU launcher and the interpreter split
them the same way).

One job: turn a bad call into a LaunchError that says what is wrong, in which kernel and
parameter, and the exact expression that fixes it, e.g.
  kernel gemm, parameter A: expected a CUDA tensor of dtype bf16 with 2 dims, got float32 on
  cpu; fix: A.to('cuda', torch.bfloat16)
Nothing here launches anything; it works on CPU tensors (device="cpu") for tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from argus import dtypes
from argus.dtypes import DType
from argus.errors import LaunchError
from argus.ir.core import Kernel
from argus.ir.types import ScalarType


def _torch_dtype_text(dt: DType) -> str:
    return "torch." + str(dt.torch_dtype()).removeprefix("torch.")


def check_tensor_arg(value: Any, *, kernel: str, param: str, dtype: DType, ndim: int,
                     device: str = "cuda", inner_contiguous: bool = True,
                     align_bytes: int = 16) -> None:
    """Raise LaunchError unless `value` is a torch tensor of `dtype` with `ndim` dims on
    `device` ("cuda" or "cpu"), innermost dim contiguous (if asked) and its data pointer a
    multiple of `align_bytes`."""
    import torch

    where = f"kernel {kernel}, parameter {param}"
    wanted = f"a {device.upper() if device == 'cuda' else device} tensor of dtype {dtype} " \
             f"with {ndim} dims"
    if not isinstance(value, torch.Tensor):
        raise LaunchError(f"{where}: expected {wanted}, got a {type(value).__name__}",
                          fix=f"pass a torch.Tensor, e.g. torch.as_tensor({param}, "
                              f"dtype={_torch_dtype_text(dtype)}, device='{device}')")

    try:
        got_dtype = dtypes.from_torch(value.dtype)
    except ValueError:
        got_dtype = None
    bad_dtype = got_dtype != dtype
    bad_device = value.device.type != device
    bad_ndim = value.dim() != ndim
    if bad_dtype or bad_device or bad_ndim:
        got_name = str(value.dtype).removeprefix("torch.")
        got = f"{got_name} on {value.device} with {value.dim()} dims (shape {tuple(value.shape)})"
        fixes = []
        if bad_dtype or bad_device:
            conversion = []
            if bad_device:
                conversion.append(f"'{device}'")
            if bad_dtype:
                conversion.append(_torch_dtype_text(dtype))
            fixes.append(f"{param}.to({', '.join(conversion)})")
        if bad_device and device == "cuda" and value.device.type == "cpu":
            got += f"; {kernel}.interpret(...) runs CPU tensors in the numpy interpreter"
        if bad_ndim:
            fixes.append(f"reshape {param} to {ndim} dims ({param}.view(...))")
        raise LaunchError(f"{where}: expected {wanted}, got {got}", fix="; ".join(fixes))

    if inner_contiguous:
        check_inner_stride(tuple(value.shape), tuple(value.stride()), kernel=kernel, param=param)
    if align_bytes > 1 and value.data_ptr() % align_bytes:
        raise LaunchError(
            f"{where}: data pointer {value.data_ptr():#x} is not {align_bytes}-byte aligned "
            f"(storage offset {value.storage_offset()} elements)",
            fix=f"{param}.clone()  (fresh allocations are 256-byte aligned), or slice at a "
                f"multiple of {align_bytes} bytes")


def check_on_one_gpu(who: str, named: Sequence[tuple[str, Any]], *,
                     fix_cpu: str = "{name}.cuda()") -> None:
    """Raise LaunchError unless every (name, tensor) of `named` is on a CUDA device, all on the
    first one's: an op's inputs before it launches (`who` names the op; `fix_cpu`, formatted
    with the tensor's name, says what to do about a CPU tensor)."""
    for name, t in named:
        if not t.is_cuda:
            raise LaunchError(f"{who}: {name} is on {t.device}; Argus kernels run on a CUDA "
                              f"device (sm_90a)", fix=fix_cpu.format(name=name))
    first, device = named[0][0], named[0][1].device
    for name, t in named[1:]:
        if t.device != device:
            raise LaunchError(f"{who}: {name} is on {t.device} but {first} is on {device}",
                              fix="move every input to one GPU")


def check_inner_stride(shape: Sequence[int], strides: Sequence[int], *, kernel: str,
                       param: str) -> None:
    """Raise LaunchError unless the innermost dim is contiguous (stride 1 in elements, or
    extent <= 1). Kernels address a tensor as outer strides times the tile's contiguous rows:
    the compiled launch (`check_tensor_arg`) and the interpreter (interp/launch.py) refuse a
    strided inner dim here, with this one message, so a CPU test fails where the GPU would."""
    if len(shape) > 0 and shape[-1] > 1 and strides[-1] != 1:
        raise LaunchError(
            f"kernel {kernel}, parameter {param}: the innermost dim has stride {strides[-1]} "
            f"(shape {tuple(shape)}, strides {tuple(strides)}); the kernel reads rows "
            "contiguously",
            fix=f"{param}.contiguous()  (a transposed view needs a copy, or the kernel "
                "variant for the other major-ness)")


def _shape_of(value: Any) -> tuple[int, ...]:
    shape = getattr(value, "shape", value)
    return tuple(int(s) for s in shape)


def bind_shapes(specs: Mapping[str, Sequence[str | int]], values: Mapping[str, Any], *,
                kernel: str = "kernel") -> dict[str, int]:
    """Bind symbolic dims to sizes. specs: parameter -> dims (a name such as "M", or a fixed
    int); values: parameter -> tensor or shape. Returns {"M": 4096, ...}. Raises LaunchError
    naming both parameters when a name gets two sizes, or the parameter whose rank or fixed dim
    is wrong."""
    bound: dict[str, tuple[int, str, int]] = {}   # name -> (size, parameter, dim index)
    for param, spec in specs.items():
        if param not in values:
            raise LaunchError(f"kernel {kernel}: parameter {param} was not given",
                              fix=f"pass {param}")
        shape = _shape_of(values[param])
        if len(shape) != len(spec):
            raise LaunchError(
                f"kernel {kernel}, parameter {param}: expected {len(spec)} dims "
                f"[{', '.join(str(s) for s in spec)}], got shape {shape}",
                fix=f"reshape {param} to {len(spec)} dims")
        for dim, (want, size) in enumerate(zip(spec, shape)):
            if isinstance(want, int):
                if size != want:
                    raise LaunchError(
                        f"kernel {kernel}, parameter {param}: dim {dim} must be {want}, got "
                        f"{size} (shape {shape})", fix=f"pass a {param} whose dim {dim} is {want}")
                continue
            if want in bound and bound[want][0] != size:
                first_size, first_param, first_dim = bound[want]
                raise LaunchError(
                    f"kernel {kernel}: dimension {want} is {first_size} in parameter "
                    f"{first_param} (dim {first_dim}) but {size} in parameter {param} "
                    f"(dim {dim})",
                    fix=f"make {first_param} and {param} agree on {want} (shapes "
                        f"{_shape_of(values[first_param])} and {shape})")
            bound.setdefault(want, (size, param, dim))
    return {name: size for name, (size, _p, _d) in bound.items()}


def split_runtime_args(kernel: Kernel, args, kw) -> tuple[list, dict[str, Any]]:
    """Launch arguments -> (tensors in parameter order, runtime scalars by name). Without
    runtime scalars every positional argument is a tensor; with them (attr runtime_args) the
    positional arguments follow the signature order of tensors and scalars, and scalars may
    also come by keyword."""
    order = kernel.attr("runtime_args")
    scalar_names = [p.name for p in kernel.params if isinstance(p.value.type, ScalarType)
                    and order and p.name in order]
    if not order:
        if kw:
            raise LaunchError(f"kernel {kernel.name} has no runtime scalar parameters "
                              f"({', '.join(sorted(kw))})")
        return list(args), {}
    if len(args) > len(order):
        raise LaunchError(f"kernel {kernel.name} takes {len(order)} arguments "
                          f"({', '.join(order)}), got {len(args)}")
    named = dict(zip(order, args))
    for k, v in kw.items():
        if k in named:
            raise LaunchError(f"kernel {kernel.name}: {k} given twice")
        named[k] = v
    missing = [n for n in order if n not in named]
    if missing:
        raise LaunchError(f"kernel {kernel.name}: missing argument(s) {', '.join(missing)}")
    tensors = [named[n] for n in order if n not in scalar_names]
    scalars = {n: named[n] for n in scalar_names}
    for n, v in scalars.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise LaunchError(f"kernel {kernel.name}: runtime scalar {n} takes a Python int or "
                              f"float, got {type(v).__name__}")
    return tensors, scalars
