"""Lowered ir.Kernel → CUDA C++ with inline PTX (through the device header argus_sm90.cuh).

One job: render, never decide. Every decision (layouts, TMA boxes, descriptors, the mbarrier
protocol, the smem plan, the role plan) was made by analysis and lowering passes and is read
from the IR; this package turns it into text. The kernel symbol is `argus_<name>` (the
KernelBench harness recognizes Argus kernels by that prefix).

One rule per op: `emit.py` holds the emitter (state, names, regions, tile bookkeeping), the
registry `RULES` (op class -> `(em, op) -> None`) with its dispatch, and `render()`; the rules
live in files by op family and register themselves with `@rule(OpClass)`:

    scalar      const, arith, grid ids, cluster rank, thread index
    control     for, if, elect, var, assign (roles: render() lays them out)
    memory      load, load.scalar, store (the accumulator store too), vector chunks
    tiles       full, elementwise, convert, tile.slice, convert_layout, arange, expand_dims
    reduce      reduce
    async_copy  smem alloc / slice, tma.load, tma.store, ldmatrix, stmatrix
    pipeline    pipeline.create, produce, consume, pipe.skip
    mma         wgmma (shared-memory and register-A forms)
    sync        every op of ir.ops.SYNC_OPS and ORDERED_OPS (named-barrier turns)

`EXEMPT` names the op classes rendered elsewhere and why. Importing this package imports every
family, so `RULES` is complete once `argus.codegen.cuda` is imported.

Register tiles become per-thread arrays unrolled at generation time: the element a register
holds is a static function of the register index and the thread (target/register_layouts.py).
A pointwise tile used once, right after it is made, is not stored: its expression is inlined at
the use (so `acc.to(bf16)` feeding a store costs no registers).
"""

from __future__ import annotations

from argus.codegen.cuda import (  # noqa: F401 - each family registers its rules on import
    async_copy,
    control,
    memory,
    mma,
    pipeline,
    reduce,
    scalar,
    sync,
    tiles,
)
from argus.codegen.cuda.emit import (
    EXEMPT,
    GROUP_RULES,
    HEADER,
    RULES,
    AbiArg,
    Source,
    _Emitter,
    dtype_ptr,
    group_rule,
    render,
    rule,
)

__all__ = ["EXEMPT", "GROUP_RULES", "HEADER", "RULES", "AbiArg", "Source", "dtype_ptr",
           "group_rule", "render", "rule"]
