"""The elementwise family: y = f(x) over an fp32 tensor viewed as (rows x cols), as one DSL kernel
from a template, with (rows, bn, threads) per CTA as the action space.

`f` is DSL code (lines ending in `y = ...`) that the composer translated from the task's torch
ops (a fused chain), so the kernel computes the same formula in fp32 and is judged on the strict
track. `ElementwiseSchedule` declares the space and its constraints (argus/schedule_space.py):
the blocked register layout gives each thread bn/threads columns (bn must be a multiple of the
threads), the grid holds at most 2^31 - 1 CTAs (a second extent past 65535 is launched folded
onto x, runtime/interp/launch.py `launch_grid`), and data registers per thread are capped. The
family has no kernel builder here (its kernel is a rendered template): the worker's lowering and
compile report its resources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import LAUNCH_HELPER
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec
from argus.schedule_space import Constraint, legal
from argus.target.limits import (MAX_GRID_DIM_X, MAX_REGISTERS_PER_THREAD, MAX_THREADS_PER_CTA,
                                 WARPGROUP_SIZE)

MAX_ELEMS_PER_THREAD = 128


@dataclass(frozen=True)
class ElementwiseSchedule:
    """The template's tunables: a CTA of `threads` threads handles a rows x bn tile."""

    rows: int = field(default=4, metadata=legal((1, 2, 4, 8, 16), low=1,
                                                rule="rows of a CTA's tile"))
    bn: int = field(default=1024, metadata=legal((128, 256, 512, 1024, 2048, 4096), low=1,
                                                 rule="columns of a CTA's tile"))
    threads: int = field(default=256, metadata=legal(
        (128, 256, 512), multiple=WARPGROUP_SIZE, low=WARPGROUP_SIZE, high=MAX_THREADS_PER_CTA,
        rule="CUDA block size, a multiple of 128 up to 1024; one warpgroup = 128 threads"))

    CONSTRAINTS = (
        Constraint("blocked_layout", lambda s, f: s["bn"] % s["threads"] == 0,
                   "bn={bn} is not a multiple of the {threads} threads of a CTA (blocked layout)",
                   "use bn = k * threads", "argus/target/register_layouts.py blocked",
                   reads=("bn", "threads")),
        Constraint("grid_y", lambda s, f: math.ceil(f["rows"] / s["rows"])
                   * math.ceil(f["cols"] / s["bn"]) <= MAX_GRID_DIM_X,
                   lambda s, f: f"the grid of {f['rows']} x {f['cols']} in {s['rows']} x "
                                f"{s['bn']} tiles holds more than 2^31 - 1 CTAs",
                   "use wider tiles",
                   "CUDA gridDim.x <= 2^31 - 1 (y past 65535 is folded onto x)",
                   reads=("rows", "bn")),
        Constraint("registers", lambda s, f: s["rows"] * s["bn"] // s["threads"]
                   <= MAX_ELEMS_PER_THREAD,
                   "rows*bn/threads = {rows}*{bn}/{threads} data registers per thread is more "
                   "than 128", "use fewer rows or a narrower bn",
                   f"{MAX_REGISTERS_PER_THREAD} registers per thread (sm_90)",
                   reads=("rows", "bn", "threads")),
    )


TEMPLATE = '''"""Elementwise kernel written by `argus optimize`: y = f(x) on an fp32 (M x N) tensor.

{doc}
One CTA of {threads} threads handles a (ROWS x BN) tile; tails are masked.
"""

import math  # noqa: F401 - available to the expression

import argus as ag


@ag.kernel(threads={threads})
def elementwise(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32],
                ROWS: int = {rows}, BN: int = {bn}):
    pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
    row0, col0 = pid_m * ROWS, pid_n * BN
    x = ag.load(X, (row0, col0), (ROWS, BN))
{body}
    ag.store(Y, (row0, col0), y)


KERNEL = elementwise
CONSTEXPRS = {{"ROWS": {rows}, "BN": {bn}}}
'''

ADAPTER = '''

class ModelNew(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        x2 = x.contiguous().view(-1, x.shape[-1]) if x.dim() > 1 else x.contiguous().view(1, -1)
        y = torch.empty_like(x2)
        _launch(x2, y)
        return y.view(x.shape)
'''


class ElementwiseFamily(ScheduleFamily):
    name = "elementwise"
    parts = (Part(lambda: ElementwiseSchedule),)

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        """One element per thread, one row per CTA."""
        return {"rows": 1, "bn": 256, "threads": 256}

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate:
        d = task.dims
        numel = d["rows"] * d["cols"]
        ctas = math.ceil(d["rows"] / params["rows"]) * math.ceil(d["cols"] / params["bn"])
        ept = max(1, params["rows"] * params["bn"] // params["threads"])
        regs = (resources or {}).get("registers") or None
        return cost_model.memory_bound_estimate(
            bytes_moved=numel * 8, flops=4.0 * max(1, task.ops) * numel, ctas=ctas,
            threads=params["threads"], elems_per_thread=ept, regs=regs)

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        """Eager PyTorch runs one kernel per op (each reads and writes the tensor); torch.compile
        fuses the chain into one."""
        d = task.dims
        one = d["rows"] * d["cols"] * 8
        eager = cost_model.copy_bound_ms(one * max(1, task.ops))
        eager = Estimate(eager.ms + (max(1, task.ops) - 1) * cost_model.H200.launch_s * 1e3,
                         "memory", {"kernels": max(1, task.ops)})
        return {"eager": eager, "torch.compile": cost_model.copy_bound_ms(one)}

    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        body = "\n".join("    " + line for line in task.expr.splitlines())
        doc = "\n".join(task.expr.splitlines())
        return TEMPLATE.format(body=body, doc=doc, **params)

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        if task.origin != "kernelbench":
            return None
        return (kernel_source.rstrip() + "\n\n\n"
                "# ---- KernelBench adapter: ModelNew(x) = f(x) with the Argus kernel "
                "--------------------\n"
                "import torch  # noqa: E402\n" + LAUNCH_HELPER + ADAPTER)
