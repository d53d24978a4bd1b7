"""The composed family: a KernelBench task lowered by argus.compose into several Argus kernels
(fused tile kernels, the fp32 GEMM adapter, scans), tuned through one schedule for all of them.

Action space: the fused kernels' tile (rows x bn, clamped per kernel to its domain) and CTA
size, and for tasks with a GEMM the split (6 terms: fp32-accurate, the strict track; 3 or 1:
relaxed only). The candidate's KERNEL (what the agent lowers, verifies and compiles) is the
solution's first fused kernel; the check and the timing run the whole ModelNew.
"""

from __future__ import annotations

from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import Family, Rule
from argus.agent.task import TaskSpec

_RULES = (
    Rule("tile_registers", lambda p, d: p["rows"] * p["bn"] // p["threads"] <= 64,
         "rows*bn/threads = {rows}*{bn}/{threads} values per thread per tile: the fused "
         "kernels keep several such tiles live (statistics, loop-carried accumulators)",
         "use fewer rows or a narrower bn", "255 registers per thread (sm_90)"),
    Rule("threads", lambda p, d: p["threads"] in (128, 256, 512),
         "threads={threads} must be 128, 256 or 512", "use 128, 256 or 512 threads",
         "CUDA block size; one warpgroup = 128 threads"),
)


class ComposedFamily(Family):
    name = "composed"
    rules = _RULES

    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        out = {"rows": (1, 2, 4, 8, 16), "bn": (128, 256, 512, 1024, 2048),
               "threads": (128, 256, 512)}
        if task.dims.get("matmuls"):
            out["terms"] = (6, 3, 1)
        return out

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        out = {"rows": 4, "bn": 512, "threads": 256}
        if task.dims.get("matmuls"):
            out["terms"] = 6
        return out

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        return {**self.default_params(task), "rows": 1, "bn": 256}

    @staticmethod
    def schedules(params: dict[str, Any]) -> dict[str, Any]:
        from argus.compose.gemm import MatmulSchedule
        from argus.compose.tile import TileSchedule

        out: dict[str, Any] = {"tile": TileSchedule(params["rows"], params["bn"],
                                                    params["threads"])}
        if "terms" in params:
            out["matmul"] = MatmulSchedule(terms=params["terms"])
        return out

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        metrics = dict(task.metrics)
        if not metrics.get("bytes"):
            return None
        kernels = max(1, task.dims.get("kernels", 1))
        est = cost_model.copy_bound_ms(int(metrics["bytes"]))
        return Estimate(est.ms + (kernels - 1) * cost_model.H200.launch_s * 1e3, "memory",
                        {"kernels": kernels})

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        metrics = dict(task.metrics)
        if not metrics.get("bytes"):
            return {}
        return {"torch.compile": cost_model.copy_bound_ms(int(metrics["bytes"]))}

    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        from argus.compose import plan_task
        from argus.compose.tile import PRELUDE

        prog, _ = plan_task(task.path, self.schedules(params))
        first = next(iter(prog.launches.values()), None)
        if first is None:   # GEMMs and scans only: the split kernel stands for them
            return (PRELUDE + "from argus.compose.gemm import split_rows\n\n"
                    "KERNEL = split_rows\nCONSTEXPRS = {}\n")
        return PRELUDE + first.source + f"\n\nKERNEL = {first.name}\nCONSTEXPRS = {{}}\n"

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        from argus.compose import compose_task

        comp = compose_task(task.path, self.schedules(params or self.default_params(task)))
        return (comp.source.rstrip() + "\n\n\n# ---- the kernel `argus optimize` lowers, "
                "verifies and compiles for this candidate ----\n" + kernel_source)


__all__ = ["ComposedFamily"]
