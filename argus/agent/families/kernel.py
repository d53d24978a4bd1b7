"""The generic family: any Argus kernel in an example-protocol file, tuned through its
power-of-two int compile-time parameters (tile sizes, rows per CTA, block widths).

The kernel's knobs are a Schedule class made for it (`kernel_schedule`): one field per tunable
compile-time int, declaring its legal values (any positive power of two; searched from a quarter
to eight times the file's default, up to MAX_VALUE), read by the generic ScheduleFamily like any
library Schedule. The family's kernel is the file's own, lowered with the file's compile-time
values for its small inputs under the candidate's (what the worker compiles), so its static
check ends with the compiler's verdict and its resources (threads, shared memory, the launch
grid at the timed size) are the lowering's.

There is no op-specific model here. The estimate is the memory-bound model over the file's own
`bytes_moved` (and `flops`) at the timed size, with the grid and threads read from the lowered
kernel; without `bytes_moved` there is no estimate, and reports say that without a GPU the
planner could only check correctness.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import MAX_EXPANSION
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.knowledge import Card
from argus.agent.task import TaskSpec, is_pow2_int
from argus.schedule_space import Constraint, legal

MAX_VALUE = 1 << 13
RULE = "kernel family search space: tile sizes are powers of two"


def _not_pow2(values) -> str:
    bad = ", ".join(f"{k}={v!r}" for k, v in values.items() if not is_pow2_int(v))
    return (f"{bad}: the kernel's tunable compile-time parameters stay positive powers of two "
            "(the values the family searches; its tiles divide into warps and lanes)")


@functools.lru_cache(maxsize=64)
def kernel_schedule(constexprs: tuple[tuple[str, int], ...]) -> type:
    """The Schedule class of a user kernel's tunable compile-time ints (name, default): each a
    field declaring its legal values, all positive powers of two. One class per set of knobs
    (an explicit cache, so the same kernel always gets the same class)."""
    names = tuple(name for name, _ in constexprs)
    fields = []
    for name, value in constexprs:
        choices = sorted({v for v in (value // 4, value // 2, value, value * 2, value * 4,
                                      value * 8) if 1 <= v <= MAX_VALUE})
        fields.append((name, int, dataclasses.field(default=value, metadata=legal(
            choices or (value,), low=1, rule=RULE))))
    positive_pow2 = Constraint("positive_pow2", lambda s, f: all(is_pow2_int(s[n]) for n in names),
                               lambda s, f: _not_pow2({n: s[n] for n in names}),
                               "use 1, 2, 4, ...", RULE, reads=names)
    return dataclasses.make_dataclass("KernelSchedule", fields, frozen=True,
                                      namespace={"CONSTRAINTS": (positive_pow2,)})


@functools.lru_cache(maxsize=16)
def _example(path: str, sha256: str):
    """(the file's kernel module, its compile-time values for its small inputs), loaded once
    per file version (an explicit cache; the composer loaded the same file for the task)."""
    from argus.demo import load_example

    module = load_example(path)
    inputs = module.make_inputs("small", seed=0, device="cpu")
    base = dict(module.constexprs(*inputs)) if hasattr(module, "constexprs") else {}
    return module, base


class KernelFamily(ScheduleFamily):
    name = "kernel"

    def parts_for(self, task: TaskSpec, params: dict[str, Any] | None = None
                  ) -> tuple[Part, ...]:
        """The one part: the Schedule class of this kernel's knobs."""
        schedule = kernel_schedule(tuple(task.constexprs))
        return (Part(lambda: schedule),)

    def build(self, task: TaskSpec, params: dict[str, Any]):
        """The file's kernel with its compile-time values under the candidate's (what the
        worker lowers: evaluate.py's base_constexprs)."""
        module, base = _example(task.path, task.sha256)
        return getattr(module, task.kernel or "KERNEL"), {**base, **params}

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
        """The memory-bound model at the timed size, over the grid the worker reports (or,
        for the planner's ranking, the one this family's lowering reads at the task's shapes;
        a schedule the static check refuses has no estimate)."""
        metrics = dict(task.metrics)
        if not metrics.get("bytes"):
            return None
        resources = dict(resources or {})
        if "ctas" not in resources:
            if any(d.severity == "error" for d in self.static_check(task, params)):
                return None
            lowered = self.resources(task, params)
            if not isinstance(lowered, dict) or "ctas" not in lowered:
                return None
            resources = {**lowered, **resources}
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
