"""The numpy interpreter: the executable definition of Argus IR semantics (no GPU needed).

Each CTA of the grid runs in turn. Without roles, the CTA is one group executing the body.
With roles, every (role, warpgroup) instance runs as a coroutine; a pipeline step blocks
exactly as the mbarrier ring does on the hardware (a producer waits until its slot was released
as often as it was filled; a consumer waits until the slot holds its iteration's fill), so a
protocol that would hang on the GPU is reported as a deadlock here.

Numerics: float tiles compute in float32 (bf16/f16 values are stored rounded, as on the
device); integer tiles in their own integer type, exactly (argus/ir/numeric.py says which type
an op computes in, for the interpreter and codegen alike); integer `floordiv`/`mod` on runtime
scalars and `/` on integer tiles follow C (truncate toward zero), like the generated CUDA.

Layout: `machine` (state, views, pipeline state, CTA/cluster scheduling, deadlock detection),
`launch` (arguments in, results out), `registry` (RULES: one rule per op class, EXEMPT), and
one module per op family holding its rules: scalar, control, memory, tma, pipeline, mma, tile,
sync, ordered (ag.ordered turns, pipe.skip), tags. Importing this package registers every
family's rules.
"""

from __future__ import annotations

from argus.runtime.interp import (  # noqa: F401 - importing a family registers its rules
    control,
    memory,
    mma,
    ordered,
    pipeline,
    scalar,
    sync,
    tags,
    tile,
    tma,
)
from argus.runtime.interp.launch import grid_extents, run, split_runtime_args
from argus.runtime.interp.machine import InterpError
from argus.runtime.interp.registry import EXEMPT, RULES, rule

__all__ = ["EXEMPT", "RULES", "InterpError", "grid_extents", "rule", "run",
           "split_runtime_args"]
