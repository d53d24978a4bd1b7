"""Launching the interpreter: host arguments in, the kernel run, outputs written back.

Invariant: arguments are checked against the kernel's signature exactly as a GPU launch checks
them (LaunchError on a mismatch); float tensors compute in float32 working copies that are
written back in their own dtype, so a caller sees outputs in place as after a device launch.
"""

from __future__ import annotations

import math

import numpy as np

from argus.dtypes import DType
from argus.errors import LaunchError
from argus.ir import ops as O
from argus.ir.core import Kernel
from argus.ir.types import ScalarType, TensorType
from argus.runtime import preconditions
from argus.runtime.args import check_inner_stride, split_runtime_args
from argus.runtime.interp.machine import _Group, _Interp


def run(kernel: Kernel, *arrays, **scalar_args) -> tuple:
    """Interpret `kernel` on numpy arrays or CPU torch tensors given in the order of its tensor
    parameters (with runtime scalars: in signature order, scalars also by keyword). Outputs
    are written in place (torch tensors too); returns the arrays."""
    arrays, runtime = split_runtime_args(kernel, arrays, scalar_args)
    arrays = tuple(arrays)
    tensor_params = [p for p in kernel.params if isinstance(p.value.type, TensorType)]
    if len(arrays) != len(tensor_params):
        raise LaunchError(f"kernel {kernel.name} takes {len(tensor_params)} tensors "
                          f"({', '.join(p.name for p in tensor_params)}), got {len(arrays)}")
    tensors: dict[int, np.ndarray] = {}
    symbols: dict[str, tuple[int, str]] = {}
    writebacks = []
    for p, a in zip(tensor_params, arrays):
        t: TensorType = p.value.type
        _check_inner_stride(a, kernel.name, p.name)
        np_view, writeback = _as_numpy(a, t.dtype, kernel.name, p.name)
        if np_view.ndim != len(t.shape):
            raise LaunchError(f"kernel {kernel.name}, parameter {p.name}: expected "
                              f"{len(t.shape)} dims, got shape {tuple(np_view.shape)}")
        for d, size in zip(t.shape, np_view.shape):
            if isinstance(d, int) and d != size:
                raise LaunchError(f"kernel {kernel.name}, parameter {p.name}: dim must be {d}, "
                                  f"got {size}")
            if isinstance(d, str):
                if d in symbols and symbols[d][0] != size:
                    raise LaunchError(f"kernel {kernel.name}: shape symbol {d} is "
                                      f"{symbols[d][0]} in {symbols[d][1]} but {size} in "
                                      f"{p.name}")
                symbols[d] = (size, p.name)
        tensors[p.value.id] = np_view
        writebacks.append((a, np_view, writeback))
    scalars = {}
    for p in kernel.params:
        if isinstance(p.value.type, ScalarType) and p.name in runtime:
            v = runtime[p.name]
            scalars[p.value.id] = np.float32(v) if p.value.type.dtype.is_float else int(v)
            continue
        if isinstance(p.value.type, ScalarType):
            if p.name not in symbols:
                raise LaunchError(f"kernel {kernel.name}: no value for scalar parameter {p.name}")
            scalars[p.value.id] = symbols[p.name][0]
    # ag.require: the kernel's stated launch preconditions, as a compiled launch checks them
    preconditions.check(kernel, {name: size for name, (size, _) in symbols.items()} | runtime)
    check_grid(kernel, grid_extents(kernel, {name: size for name, (size, _) in symbols.items()}
                                    | {p.name: v for p in kernel.params
                                       if (v := runtime.get(p.name)) is not None
                                       and isinstance(p.value.type, ScalarType)
                                       and not p.value.type.dtype.is_float}))
    _Interp(kernel, tensors, scalars).run()
    for a, view, writeback in writebacks:
        if writeback:
            writeback(view)
    return arrays


def _check_inner_stride(a, kernel: str, param: str) -> None:
    """The compiled launch's inner-stride check (runtime/args.py), on a torch tensor (strides
    in elements) or a numpy array (strides in bytes): the interpreter copies its arguments,
    so it could read any strides, but a kernel it accepts must launch on the GPU too."""
    shape = getattr(a, "shape", None)
    if shape is None or not hasattr(a, "stride" if not isinstance(a, np.ndarray) else "strides"):
        return                          # not an array: _as_numpy says what is wrong
    if isinstance(a, np.ndarray):
        strides = tuple(s // a.itemsize for s in a.strides) if a.itemsize else a.strides
    else:
        strides = tuple(a.stride())
    check_inner_stride(tuple(shape), strides, kernel=kernel, param=param)


def _as_numpy(a, dtype: DType, kernel: str, param: str):
    if isinstance(a, np.ndarray):
        if (a.dtype.kind == "f") != dtype.is_float:
            raise LaunchError(f"kernel {kernel}, parameter {param}: expected {dtype}, got a "
                              f"numpy array of {a.dtype}")
        if not dtype.is_float or a.dtype == np.float32:
            return a, None  # computed in place
        work = a.astype(np.float32)

        def writeback_np(view, a=a):
            np.copyto(a, view.astype(a.dtype))
        return work, writeback_np
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(a, torch.Tensor):
        if a.device.type != "cpu":
            raise LaunchError(f"kernel {kernel}, parameter {param}: the interpreter runs on CPU "
                              f"tensors, got one on {a.device}", fix="pass tensor.cpu()")
        if a.dtype != dtype.torch_dtype():
            raise LaunchError(f"kernel {kernel}, parameter {param}: expected {dtype}, got "
                              f"{a.dtype}")
        arr = a.detach().to(torch.float32).numpy().copy() if dtype.is_float else \
            a.detach().numpy().copy()

        def writeback(view, a=a):
            new = torch.from_numpy(np.ascontiguousarray(view)).to(a.dtype)
            if 0 in a.stride() and torch.allclose(new, a, rtol=0, atol=0, equal_nan=True):
                return      # an expanded (stride-0) input the kernel only read: torch
                #             refuses to write overlapping elements, and nothing changed
            a.copy_(new)
        return arr, writeback
    raise LaunchError(f"kernel {kernel}, parameter {param}: expected a numpy array or torch "
                      f"tensor, got {type(a).__name__}")


def grid_extents(kernel: Kernel, symbols: dict[str, int]) -> tuple[int, ...]:
    """Evaluate the kernel's launch grid for bound shape symbols (host side, no GPU)."""
    scalars = {p.value.id: symbols[p.name] for p in kernel.params
               if isinstance(p.value.type, ScalarType) and p.name in symbols}
    interp = _Interp(kernel, {}, scalars)
    group = _Group("grid", dict(scalars))
    for op in kernel.body.ops:
        if isinstance(op, O.GridIds):
            return tuple(int(interp.val(group, e)) for e in op.extents)
        if isinstance(op, (O.Const, O.Arith)):
            for _ in interp.run_op(group, op):
                pass
    raise LaunchError(f"kernel {kernel.name} declares no grid")


# CUDA's launch limits: x up to 2^31 - 1 blocks, y and z up to 65535
GRID_LIMITS = (2 ** 31 - 1, 65535, 65535)


def _cluster(kernel: Kernel) -> tuple[int, ...]:
    op = next((op for op in kernel.body.ops if isinstance(op, O.GridIds)), None)
    return tuple(op.cluster) if op is not None else (1, 1, 1)


def launch_grid(kernel: Kernel, grid: tuple[int, ...]) -> tuple[int, ...]:
    """The grid the GPU is launched on for the kernel's declared `grid`: itself, or, when y or
    z pass CUDA's 65535 and the kernel has no clusters, all of it folded onto x (codegen
    renders the program ids as the decode of blockIdx.x when gridDim.y and .z are 1, so the
    ids are the same either way). Raises LaunchError when neither fits."""
    grid = tuple(grid)
    if all(e <= lim for e, lim in zip(grid, GRID_LIMITS)):
        return grid
    total = math.prod(grid)
    if _cluster(kernel) == (1, 1, 1) and len(grid) > 1 and total <= GRID_LIMITS[0]:
        return (total,) + (1,) * (len(grid) - 1)
    axis = next(i for i, (e, lim) in enumerate(zip(grid, GRID_LIMITS)) if e > lim)
    why = ("the kernel uses clusters, so the grid cannot be folded onto x"
           if _cluster(kernel) != (1, 1, 1) and total <= GRID_LIMITS[0] else
           f"{total} CTAs in all, more than x's {GRID_LIMITS[0]}")
    raise LaunchError(f"kernel {kernel.name}: grid {grid} has {grid[axis]} blocks along "
                      f"{'xyz'[axis]}, more than the {GRID_LIMITS[axis]} CUDA allows ({why})",
                      fix="put the longest grid dimension first in ag.grid(...) (x "
                          "takes 2^31 - 1 blocks), or use larger tiles")


def check_grid(kernel: Kernel, grid: tuple[int, ...]) -> None:
    """Refuse a grid the GPU cannot launch, the same way for the interpreter and the GPU (one
    contract: a launch the device would refuse is refused on the CPU too)."""
    launch_grid(kernel, grid)
