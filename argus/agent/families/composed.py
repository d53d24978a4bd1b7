"""The composed family: a KernelBench task lowered by argus.compose into several Argus kernels
(fused tile kernels, the fp32 GEMM adapter, scans), tuned through one schedule for all of them.

Action space: the fused kernels' tile (rows x bn, clamped per kernel to its domain) and CTA
size, and for tasks with a GEMM the split (6 terms: fp32-accurate, the strict track; 3 or 1:
relaxed only). The candidate's KERNEL (what the agent lowers, verifies and compiles) is the
solution's first fused kernel; the check and the timing run the whole ModelNew.
"""

from __future__ import annotations

import math
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec


MMA_EFFICIENCY = 0.7    # share of the bf16 tensor peak the split GEMMs sustain (the GEMM model)


def _tile_schedule() -> type:
    from argus.compose.tile import TileSchedule

    return TileSchedule


def _matmul_schedule() -> type:
    from argus.compose.gemm import MatmulSchedule

    return MatmulSchedule


def _has_matmul(task: TaskSpec) -> bool:
    return bool(task.dims.get("matmuls"))


class ComposedFamily(ScheduleFamily):
    name = "composed"
    # the fused kernels' tile and CTA size; the GEMM adapter's split when the task has a GEMM
    parts = (Part(_tile_schedule, exposed=("rows", "bn", "threads")),
             Part(_matmul_schedule, when=_has_matmul, exposed=("terms",)))

    def start(self, task: TaskSpec) -> dict[str, Any]:
        return {"rows": 4, "bn": 512, "threads": 256}

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        return {**self.default_params(task), "rows": 1, "bn": 256}

    def compose_schedules(self, task: TaskSpec, params: dict[str, Any]) -> dict[str, Any]:
        """The compose schedules of `params` by role ("tile", and "matmul" with a GEMM); the
        classes' own checks raise ValueError."""
        return dict(zip(("tile", "matmul"), self.schedules(task, params)))

    def facts(self, task: TaskSpec) -> dict[str, Any]:
        return {**task.dims, "strict": task.track == "strict"}

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        """The fused kernels as one memory-bound stream of the task's bytes in rows x bn tiles
        of `threads` threads (the cost model's Little's-law model, with the compiler's registers
        when the worker reports them), the GEMMs' split products at the tensor cores' bf16 rate
        (`terms` times the task's flops), and a launch per further kernel. A ranking model: the
        per-kernel clamping of the tile to its domain is not modelled."""
        metrics = dict(task.metrics)
        if not metrics.get("bytes"):
            return None
        kernels = max(1, task.dims.get("kernels", 1))
        tile = params["rows"] * params["bn"]
        stream = cost_model.memory_bound_estimate(
            bytes_moved=int(metrics["bytes"]), ctas=max(1, math.ceil(metrics["bytes"] / 8 / tile)),
            threads=params["threads"], elems_per_thread=max(1, tile // params["threads"]),
            regs=(resources or {}).get("registers") or None)
        flops = float(metrics.get("flops") or 0.0) * int(params.get("terms", 1))
        mma_ms = cost_model.roofline_ms(flops=flops, flop_rate=MMA_EFFICIENCY
                                        * cost_model.H200.bf16_flops) if flops else 0.0
        launches = (kernels - 1) * cost_model.H200.launch_s * 1e3
        return Estimate(stream.ms + mma_ms + launches,
                        stream.bound if stream.ms >= mma_ms else "compute",
                        {**stream.detail, "kernels": kernels, "mma_ms": mma_ms})

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        metrics = dict(task.metrics)
        if not metrics.get("bytes"):
            return {}
        return {"torch.compile": cost_model.copy_bound_ms(int(metrics["bytes"]))}

    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        from argus.compose import plan_task
        from argus.compose.tile import PRELUDE

        prog, _ = plan_task(task.path, self.compose_schedules(task, params))
        first = next(iter(prog.launches.values()), None)
        if first is None:   # GEMMs and scans only: the split kernel stands for them
            return (PRELUDE + "from argus.compose.gemm import split_rows\n\n"
                    "KERNEL = split_rows\nCONSTEXPRS = {}\n")
        return PRELUDE + first.source + f"\n\nKERNEL = {first.name}\nCONSTEXPRS = {{}}\n"

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        from argus.compose import compose_task

        comp = compose_task(task.path, self.compose_schedules(
            task, params or self.default_params(task)))
        return (comp.source.rstrip() + "\n\n\n# ---- the kernel `argus optimize` lowers, "
                "verifies and compiles for this candidate ----\n" + kernel_source)


__all__ = ["ComposedFamily"]
