"""The generic family: any Argus kernel in an example-protocol file, tuned through its
power-of-two int compile-time parameters (tile sizes, rows per CTA, block widths).

There is no op-specific model here. The estimate is the memory-bound model over the file's own
`bytes_moved` (and `flops`) at the timed size, with the grid and threads read from the lowered
kernel; without `bytes_moved` there is no estimate, and reports say that without a GPU the
planner could only check correctness.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import MAX_EXPANSION, Family, Rule
from argus.agent.knowledge import Card
from argus.agent.task import TaskSpec

MAX_VALUE = 1 << 13

_RULES = (
    Rule("positive_pow2", lambda p, d: all(isinstance(v, int) and v > 0 and v & (v - 1) == 0
                                           for v in p.values()),
         "compile-time parameters must stay positive powers of two", "use 1, 2, 4, ...",
         "kernel family search space"),
)


class KernelFamily(Family):
    name = "kernel"
    rules = _RULES

    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        out = {}
        for name, value in task.constexprs:
            values = sorted({v for v in (value // 4, value // 2, value, value * 2, value * 4,
                                         value * 8) if 1 <= v <= MAX_VALUE})
            out[name] = tuple(values)
        return out

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        return dict(task.constexprs)

    def expand(self, task: TaskSpec, card: Card, incumbent: dict[str, Any],
               limit: int = MAX_EXPANSION) -> list[dict[str, Any]]:
        """One parameter at a time, scaled by each of the card's factors."""
        param = card.param("factor")
        factors = param.values if param else (0.5, 2)
        space = self.space(task)
        out = []
        for name in sorted(incumbent):
            for f in factors:
                v = int(incumbent[name] * f)
                if v != incumbent[name] and v in space.get(name, ()):
                    out.append({**incumbent, name: v})
        return out[:limit]

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        metrics = dict(task.metrics)
        if not resources or "ctas" not in resources or not metrics.get("bytes"):
            return None
        ctas, threads = int(resources["ctas"]), int(resources.get("threads") or 128)
        ept = max(1, math.ceil(metrics["bytes"] / 8 / max(1, ctas * threads)))
        return cost_model.memory_bound_estimate(
            bytes_moved=int(metrics["bytes"]), flops=metrics.get("flops", 0.0), ctas=ctas,
            threads=threads, elems_per_thread=ept, regs=resources.get("registers") or None,
            smem=int(resources.get("smem") or 0))

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        metrics = dict(task.metrics)
        if not metrics.get("bytes"):
            return {}
        return {"baseline": cost_model.copy_bound_ms(int(metrics["bytes"]))}

    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        source = Path(task.path).read_text()
        values = ", ".join(f"{k!r}: {params[k]!r}" for k in sorted(params))
        return (source.rstrip() + "\n\n\n"
                "# ---- compile-time values chosen by `argus optimize` "
                "----------------------------------\n"
                f"CONSTEXPRS = {{{values}}}\n")
