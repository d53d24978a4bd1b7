"""A compiled kernel: its lowered IR, CUDA source, binary, and the launcher that binds torch
tensors to the kernel's ABI (argument checks, shape symbols, strides, TMA maps, grid).

Every argument problem is found before anything launches: wrong dtype, rank, device,
non-contiguous inner dimension, misaligned pointer or stride, inconsistent shape symbols.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.errors import LaunchError
from argus.ir.core import Kernel
from argus.ir.printer import print_kernel
from argus.ir.types import TensorType


@dataclass(frozen=True)
class CompiledKernel:
    kernel_fn: Any
    kernel: Kernel          # lowered IR
    source: Any             # codegen.Source
    binary: Any             # runtime.compile.Binary
    diagnostics: tuple = ()
    # Launch plans by argument signature (pointers, shapes, strides, dtypes, device): a repeat
    # call with the same buffers costs one cuLaunchKernelEx, not a re-validation.
    _plans: OrderedDict = field(default_factory=OrderedDict, compare=False, repr=False)
    # (source, binary) per launch specialization (analysis/alignment.py): `source` / `binary`
    # above are the variant that assumes nothing about the arguments (every launch may run
    # it); a launch whose pointers, strides and shape symbols give alignment facts runs the
    # variant rendered with them, built on its first such launch
    _variants: dict = field(default_factory=dict, compare=False, repr=False)

    PLAN_CACHE_SIZE = 32

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def resources(self):
        return self.binary.resource(self.source.name)

    def tensor_params(self):
        return [p for p in self.kernel.params if isinstance(p.value.type, TensorType)]

    def bind(self, tensors, device: str = "cuda") -> dict[str, int]:
        """Check the tensors against the signature; return the shape symbols' values.
        `device`: where the tensors must be ("meta" for `build_for`)."""
        from argus.runtime.args import check_tensor_arg

        params = self.tensor_params()
        if len(tensors) != len(params):
            raise LaunchError(f"kernel {self.kernel.name} takes {len(params)} tensors "
                              f"({', '.join(p.name for p in params)}), got {len(tensors)}")
        symbols: dict[str, tuple[int, str]] = {}
        uses_tma = {a.tensor for a in self.source.abi if a.kind == "tmap"}
        for p, t in zip(params, tensors):
            ttype: TensorType = p.value.type
            check_tensor_arg(t, kernel=self.kernel.name, param=p.name, dtype=ttype.dtype,
                             ndim=len(ttype.shape), device=device, inner_contiguous=True,
                             align_bytes=16 if p.name in uses_tma else ttype.dtype.bytes)
            for dim, size in zip(ttype.shape, t.shape):
                if isinstance(dim, int):
                    if dim != size:
                        raise LaunchError(f"kernel {self.kernel.name}, parameter {p.name}: a dim "
                                          f"must be {dim}, got shape {tuple(t.shape)}")
                elif dim in symbols and symbols[dim][0] != size:
                    raise LaunchError(f"kernel {self.kernel.name}: {dim} is {symbols[dim][0]} "
                                      f"from {symbols[dim][1]} but {size} from {p.name}",
                                      fix="pass tensors whose shapes agree")
                else:
                    symbols[dim] = (int(size), p.name)
        return {k: v for k, (v, _) in symbols.items()}

    def grid(self, symbols: dict[str, int]) -> tuple[int, ...]:
        from argus.runtime.interp import grid_extents

        return grid_extents(self.kernel, symbols)

    def __call__(self, *args, **scalars):
        """Launch on torch's current stream. Arguments are checked on the first call with a
        given signature; later calls with the same buffers (and the same runtime scalar values)
        reuse the prepared launch. Runtime scalar parameters come positionally (signature
        order) or by keyword."""
        tensors, values = self._split(args, scalars)
        key = _signature(tensors, values)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self.prepare(*tensors, _scalars=values)
            if key is not None:
                self._plans[key] = plan
                if len(self._plans) > self.PLAN_CACHE_SIZE:
                    self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        if plan is not False:
            plan()

    def plan_for(self, *args, **scalars):
        """The launch plan a call with exactly these arguments prepared, or None: callers that
        have checked their arguments once keep it and skip even the signature lookup."""
        tensors, values = self._split(args, scalars)
        key = _signature(tensors, values)
        plan = self._plans.get(key) if key is not None else None
        return plan or None

    def _split(self, args, scalars) -> tuple[tuple, dict]:
        """Launch arguments -> (tensors, runtime scalar values by name)."""
        if not scalars and not self.kernel.attr("runtime_args"):
            return args, {}
        from argus.runtime.args import split_runtime_args

        tensors, values = split_runtime_args(self.kernel, args, scalars)
        return tuple(tensors), values

    def specialization(self, tensors, symbols: dict[str, int]):
        """What these tensors and shape symbols (`bind`) guarantee about alignment and the
        width of element offsets (analysis/alignment.py)."""
        from argus.analysis import alignment

        facts = {p.name: (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size())
                 for p, t in zip(self.tensor_params(), tensors)}
        return alignment.of_arguments(facts, symbols)

    def variant(self, spec):
        """(source, binary) of the variant for launch specialization `spec`: rendered with the
        access facts it proves; the unspecialized one where those change no line of CUDA."""
        if not spec:
            return self.source, self.binary
        if spec not in self._variants:
            from argus import codegen
            from argus.analysis import alignment
            from argus.runtime.compile import compile_cuda

            specialized = alignment.specialize(self.kernel, spec)
            if not specialized.attr("global_access") and not specialized.attr("index32"):
                # no access fact (a kernel whose global traffic is all TMA: the GEMMs), and
                # codegen reads nothing else of a specialization: the text would be the same
                self._variants[spec] = (self.source, self.binary)
                return self._variants[spec]
            source = codegen.render(specialized)
            if source.text == self.source.text:
                self._variants[spec] = (self.source, self.binary)
            else:
                self._variants[spec] = (source, compile_cuda(
                    source.text, [source.name], filename=f"{source.name}.cu"))
        return self._variants[spec]

    def ready_for(self, tensors) -> bool:
        """Whether a launch on these tensors needs no compile: a prepared plan, or the variant
        of their launch specialization built already (False when the arguments do not bind:
        the launch itself reports that)."""
        if self.plan_for(*tensors) is not None:
            return True
        try:
            device = tensors[0].device.type if tensors else "cuda"
            spec = self.specialization(tensors, self.bind(tensors, device=device))
        except Exception:  # noqa: BLE001 - the launch raises the real error
            return False
        return not spec or spec in self._variants

    def build_for(self, *args, **scalars) -> None:
        """Build, without launching, every binary a launch with these arguments would run (the
        launch-specialized variant too) from meta tensors: they carry the shapes, strides and
        data-pointer offsets of the GPU's tensors (a fresh GPU allocation is 512-byte aligned,
        a meta tensor's base address 0), so the variant and its cache key are the GPU's. Used
        to fill the compile cache ahead of time on a machine without a GPU (the KernelBench
        judge's prebuild); the same checks as a launch run first."""
        from argus.runtime import preconditions
        from argus.runtime.coverage import check_launch

        tensors, values = self._split(args, scalars)
        symbols = self.bind(tensors, device="meta")
        preconditions.check(self.kernel, {**symbols, **values})   # ag.require
        check_launch(self.kernel, {**symbols, **values},
                     exempt=getattr(self.kernel_fn, "partial_outputs", ()))
        if any(g <= 0 for g in self.grid({**symbols, **values})):
            return                              # an empty problem launches nothing
        self.variant(self.specialization(tensors, symbols))

    def prepare(self, *tensors, _scalars=None):
        """Validate the arguments and build the launch plan (False for an empty problem)."""
        from argus.runtime import driver, preconditions
        from argus.runtime.tma import make_tensor_map

        from argus.runtime.coverage import check_launch
        from argus.runtime.interp.launch import launch_grid

        symbols = self.bind(tensors)
        values = dict(_scalars or {})
        # ag.require: the stated preconditions, on the actual values (a plan is cached per
        # runtime scalar values, so every launch ran this check on its values once)
        preconditions.check(self.kernel, {**symbols, **values})
        check_launch(self.kernel, {**symbols, **values},  # no silently partial output
                     exempt=getattr(self.kernel_fn, "partial_outputs", ()))
        grid = self.grid({**symbols, **values})
        if any(g <= 0 for g in grid):
            return False  # an empty problem: nothing to compute
        grid = launch_grid(self.kernel, grid)    # y or z past 65535: folded onto x
        source, binary = self.variant(self.specialization(tensors, symbols))
        by_name = {p.name: t for p, t in zip(self.tensor_params(), tensors)}
        args: list[Any] = []
        for a in source.abi:
            if a.kind == "tensor":
                args.append(by_name[a.name])
            elif a.kind == "scalar" and a.name in values:  # a runtime scalar parameter
                v = values[a.name]
                args.append(driver.f32(v) if a.dtype == "f32" else driver.i32(v))
            elif a.kind == "scalar":
                args.append(driver.i32(symbols[a.name]))
            elif a.kind == "stride":
                args.append(driver.i64(by_name[a.tensor].stride(a.dim)))
            elif a.kind == "tmap":
                args.append(make_tensor_map(by_name[a.tensor], box=a.box,
                                            swizzle_bytes=a.swizzle, name=a.tensor,
                                            elem_strides=a.elem_strides))
            else:  # pragma: no cover - codegen only emits the kinds above
                raise LaunchError(f"unknown ABI entry {a}")
        cluster = source.cluster if source.cluster != (1, 1, 1) else None
        plan = driver.prepare_launch(binary, source.name, grid=grid,
                                     block=source.threads, args=args,
                                     smem_bytes=source.dynamic_smem, cluster=cluster,
                                     pdl=source.pdl)
        # The packed parameters hold raw pointers; drop the tensors so a cached plan does not
        # keep buffers alive (a new tensor at the same address with the same layout reuses it).
        return dataclasses.replace(plan, args=())

    def dump(self, directory: Path, steps) -> None:
        """Write the IR after every step, the CUDA, PTX, cubin and a resource report."""
        directory.mkdir(parents=True, exist_ok=True)
        for i, (name, kernel) in enumerate(steps):
            (directory / f"{i:02d}_{name}.ir").write_text(print_kernel(kernel))
        (directory / f"{self.name}.cu").write_text(self.source.text)
        (directory / f"{self.name}.ptx").write_text(self.binary.ptx)
        (directory / f"{self.name}.cubin").write_bytes(self.binary.cubin)
        res = self.resources
        report = {"kernel": self.name, "registers": res.registers,
                  "spill_stores": res.spill_stores, "spill_loads": res.spill_loads,
                  "stack_frame": res.stack_frame, "smem_static": res.smem_static,
                  "smem_dynamic": self.source.dynamic_smem, "threads": self.source.threads,
                  "compiler": self.binary.compiler,
                  "diagnostics": [d.to_json() for d in self.diagnostics]}
        (directory / "resources.json").write_text(json.dumps(report, indent=2) + "\n")
        (directory / "resources.txt").write_text(res.summary() + "\n")


def _signature(tensors, values=None) -> tuple | None:
    """What a launch plan depends on, or None when an argument is not a CUDA tensor (then the
    slow path reports the problem): every tensor's buffer and layout, and the runtime scalar
    values (packed into the parameters; a grid may depend on them). A float is keyed by its
    bits, so -0.0 and 0.0 get their own plans."""
    key = []
    for t in tensors:
        if not hasattr(t, "data_ptr") or not getattr(t, "is_cuda", False):
            return None
        key.append((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device.index))
    if values:
        key.append(tuple((name, type(v).__name__, v.hex() if isinstance(v, float) else v)
                         for name, v in sorted(values.items())))
    return tuple(key)
