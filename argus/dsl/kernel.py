"""The tracing half of `@ag.kernel`: a Python function → `ir.Kernel`.

Parameters annotated `ag.Tensor["M", "K", ag.bf16]` are global tensors whose shape symbols
become runtime i32 parameters; every other parameter is a compile-time value (a Schedule, an
int tile size) passed by keyword. `KernelDef.trace(**constexprs)` runs the function once with
symbolic handles and returns the `ir.Kernel`; results are cached per compile-time values.

The dsl only traces: compiling, interpreting and calling a kernel need stages downstream of the
dsl, so they live on top, in argus/kernel_api.py (`ag.kernel` and `ag.KernelFunction`, a
subclass of `KernelDef`), and imports keep flowing one way (ARCHITECTURE.md §2).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from argus import dtypes
from argus.dsl import tracing
from argus.dsl.tracing import TraceContext
from argus.dsl.values import Scalar, TensorArg
from argus.dtypes import DType
from argus.errors import Loc, TraceError
from argus.ir import ops as O
from argus.ir.checks import check_kernel
from argus.ir.core import Kernel, Param
from argus.ir.types import ScalarType, TensorType


@dataclass(frozen=True)
class TensorSpec:
    """The annotation `ag.Tensor[dims..., dtype]`: dims are symbol names or ints."""

    shape: tuple[str | int, ...]
    dtype: DType


class Tensor:
    """Annotation factory: `ag.Tensor["M", "N", ag.f32]`."""

    def __class_getitem__(cls, item) -> TensorSpec:
        item = item if isinstance(item, tuple) else (item,)
        if len(item) == 1 and isinstance(item[0], tuple):  # ag.Tensor[("M", "K", ag.bf16)]
            item = item[0]
        if not item or not isinstance(item[-1], DType):
            raise TypeError('write tensor annotations as ag.Tensor["M", "N", ag.f32]: dims, then '
                            "an Argus dtype")
        dims = item[:-1]
        for d in dims:
            if not (isinstance(d, str) and d.isidentifier()) and not (isinstance(d, int) and d > 0):
                raise TypeError(f"tensor dim {d!r} must be an identifier or a positive int")
        return TensorSpec(tuple(dims), item[-1])


@dataclass(frozen=True)
class ScalarSpec:
    """The annotation `ag.Scalar[ag.f32]` (or a bare dtype, `eps: ag.f32`): a runtime scalar
    parameter passed at launch, positionally (signature order) or by keyword."""

    dtype: DType


class ScalarParam:
    """Annotation factory, exported as `ag.Scalar`: `ag.Scalar[ag.i32]`, `ag.Scalar[ag.f32]`."""

    def __class_getitem__(cls, dtype) -> ScalarSpec:
        if dtype not in (dtypes.i32, dtypes.f32):
            raise TypeError("runtime scalar parameters are ag.Scalar[ag.i32] or "
                            "ag.Scalar[ag.f32]")
        return ScalarSpec(dtype)


def _freeze(value: Any) -> Any:
    """A hashable, printable key for a compile-time value."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, DType):
        return value.name
    return repr(value)


def _cache_key(values: dict[str, Any]) -> tuple:
    """Cache key of compile-time values: type-tagged (True, 1 and 1.0 trace differently) and
    by value for hashable objects (a frozen Schedule), by identity-free repr otherwise."""
    out = []
    for name, v in sorted(values.items()):
        try:
            hash(v)
            out.append((name, type(v).__qualname__, v))
        except TypeError:
            out.append((name, type(v).__qualname__, repr(_freeze(v))))
    return tuple(out)


class KernelDef:
    """A kernel's definition: its Python function, its tensor and compile-time parameters, and
    its traces. `ag.kernel` returns the subclass `ag.KernelFunction`, which also compiles,
    interprets and calls it."""

    def __init__(self, fn: Callable, threads: int | None = None,
                 cluster: tuple[int, int, int] = (1, 1, 1), name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        self.threads = threads
        self.cluster = tuple(cluster)
        self._traces: dict[Any, Kernel] = {}
        functools.update_wrapper(self, fn)
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
        except Exception as e:  # noqa: BLE001 - re-raised with the location
            raise TraceError(f"cannot evaluate the annotations of kernel {self.name}: {e}",
                             _fn_loc(fn)) from None
        self.signature = inspect.signature(fn)
        self.tensor_specs: dict[str, TensorSpec] = {}
        self.constexpr_names: list[str] = []
        self.scalar_specs: dict[str, ScalarSpec] = {}
        self.runtime_names: list[str] = []   # tensors and runtime scalars, in signature order
        for pname in self.signature.parameters:
            ann = hints.get(pname)
            if ann in (dtypes.i32, dtypes.f32):
                ann = ScalarSpec(ann)
            if isinstance(ann, TensorSpec):
                self.tensor_specs[pname] = ann
                self.runtime_names.append(pname)
            elif isinstance(ann, ScalarSpec):
                self.scalar_specs[pname] = ann
                self.runtime_names.append(pname)
            elif getattr(ann, "__name__", "") == "Tensor":     # torch.Tensor, np tensors
                raise TraceError(f"kernel {self.name}: parameter {pname} is annotated "
                                 f"{ann.__module__}.Tensor, which has no shape or dtype",
                                 _fn_loc(fn), fix=f'annotate it as {pname}: ag.Tensor["M", '
                                 f'"N", ag.f32] (its shape names and element type)')
            else:
                self.constexpr_names.append(pname)

    def __repr__(self) -> str:
        return f"<argus kernel {self.name}>"

    # -- tracing ---------------------------------------------------------------------------
    def constexpr_values(self, constexprs: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for pname in self.constexpr_names:
            p = self.signature.parameters[pname]
            if pname in constexprs:
                out[pname] = constexprs[pname]
            elif p.default is not inspect.Parameter.empty:
                out[pname] = p.default
            else:
                raise TraceError(f"kernel {self.name} needs the compile-time argument "
                                 f"{pname!r}", _fn_loc(self.fn),
                                 fix=f"pass {pname}=... as a keyword argument")
        unknown = set(constexprs) - set(self.constexpr_names)
        if unknown:
            raise TraceError(f"kernel {self.name} has no compile-time parameter(s) "
                             f"{', '.join(sorted(unknown))}", _fn_loc(self.fn))
        return out

    def cache_key(self, **constexprs: Any) -> tuple:
        """The key of these compile-time values, defaults filled in: traces (here) and compiled
        kernels (argus/kernel_api.py) are cached by it."""
        return _cache_key(self.constexpr_values(constexprs))

    def trace(self, **constexprs: Any) -> Kernel:
        values = self.constexpr_values(constexprs)
        key = _cache_key(values)
        if key not in self._traces:
            self._traces[key] = self._trace(values)
        return self._traces[key]

    def _trace(self, constexprs: dict[str, Any]) -> Kernel:
        ctx = TraceContext(self.name, threads=self.threads or 128,
                           group_threads=self.threads or 128, cluster=self.cluster)
        b = ctx.builder
        params: list[Param] = []
        symbols: dict[str, Scalar] = {}
        args: dict[str, Any] = {}
        tensor_values = []
        for pname, spec in self.tensor_specs.items():
            v = b.fresh(TensorType(spec.dtype, spec.shape), pname)
            params.append(Param(pname, v))
            tensor_values.append((pname, v, spec))
        for pname, v, spec in tensor_values:
            for d in spec.shape:
                if isinstance(d, str) and d not in symbols:
                    sv = b.fresh(ScalarType(dtypes.i32), d)
                    params.append(Param(d, sv))
                    symbols[d] = Scalar(sv)
            shape = tuple(symbols[d] if isinstance(d, str) else d for d in spec.shape)
            args[pname] = TensorArg(pname, v, shape)
        for pname, sspec in self.scalar_specs.items():
            if pname in symbols:
                raise TraceError(f"kernel {self.name}: runtime scalar {pname!r} has the name of a "
                                 "shape symbol", _fn_loc(self.fn), fix="rename one of them")
            sv = b.fresh(ScalarType(sspec.dtype), pname)
            params.append(Param(pname, sv))
            args[pname] = Scalar(sv)
        args.update(constexprs)
        ctx.param_ids = frozenset(p.value.id for p in params)
        tracing.push(ctx)
        try:
            self.fn(**args)
        finally:
            tracing.pop()
        body = b.top_region()
        roles = [op for op in body.ops if isinstance(op, O.RoleOp)]
        threads = sum(r.warpgroups * 128 for r in roles) if roles else (self.threads or 128)
        if roles and self.threads and self.threads != threads:
            raise TraceError(f"kernel {self.name}: threads={self.threads} but its roles hold "
                             f"{threads} threads", _fn_loc(self.fn))
        if not ctx.grid_declared:
            raise TraceError(f"kernel {self.name} never declared its launch grid",
                             _fn_loc(self.fn), fix="call `pid = ag.grid(extent, ...)` once")
        attrs = dict(threads=threads, cluster=tuple(ctx.cluster),
                     constexprs=tuple((k, _freeze(v)) for k, v in sorted(constexprs.items())))
        if any(isinstance(op, O.GridDepWait) for op in body.walk()):
            # ag.wait_prior_grids: the runtime launches the kernel with programmatic stream
            # serialization (runtime/driver.py), so it may start before its predecessor ends
            attrs["pdl"] = True
        if ctx.min_ctas_per_sm is not None:   # ag.occupancy: rendered in __launch_bounds__
            attrs["min_ctas_per_sm"] = ctx.min_ctas_per_sm
        if self.scalar_specs:  # runtime scalars: the launch order of tensors and scalars
            attrs["runtime_args"] = tuple(self.runtime_names)
        kernel = Kernel(self.name, tuple(params), body, tuple(sorted(attrs.items())))
        check_kernel(kernel)
        return kernel


def _fn_loc(fn: Callable) -> Loc:
    code = fn.__code__
    return Loc(code.co_filename, code.co_firstlineno, fn.__name__)
