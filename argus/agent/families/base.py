"""What every op family gives the agent: a schedule space with legal values, a static legality
check, the bounded parameter search a schedule card expands to, a cost estimate, and the DSL
source (plus a KernelBench ModelNew adapter) of a candidate. Every family is a ScheduleFamily
(schedule.py): its space and legality are its Schedule classes' declared ranges and constraints
(argus/schedule_space.py), its resources the compiler's.

Invariant: a family's static check only *prunes*; the lowering and the verifier remain the
ground truth. The declarations may be stricter than the lowering (they never claim more than
the hardware rule they cite), and a test checks on a random sample that every schedule they
accept also lowers, so the check never wastes a run on a schedule the compiler would reject.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from argus.agent.cost_model import Estimate
from argus.agent.knowledge import Card
from argus.agent.task import TaskSpec
from argus.errors import Diagnostic

MAX_EXPANSION = 64   # candidates one card may propose from one incumbent (bounded search)


class Family:
    """Base class; subclasses fill in the space, the static check, estimate and rendering."""

    name = "base"

    # -- the schedule space -------------------------------------------------------------------
    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        raise NotImplementedError

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        raise NotImplementedError

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        return self.default_params(task)

    def normalize(self, task: TaskSpec, params: dict[str, Any]) -> dict[str, Any]:
        """Derive dependent fields (e.g. consumers from bm); default: unchanged."""
        return dict(params)

    def static_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """Findings about `params` before anything is compiled (errors make them illegal)."""
        raise NotImplementedError

    def legal(self, task: TaskSpec, params: dict[str, Any]) -> bool:
        return not any(d.severity == "error" for d in self.static_check(task, params))

    def expand(self, task: TaskSpec, card: Card, incumbent: dict[str, Any],
               limit: int = MAX_EXPANSION) -> list[dict[str, Any]]:
        """The bounded parameter search of a schedule card from `incumbent`: the card's
        assignments, then every combination of its searched parameters (values that are also
        in the family's space), normalized, deduplicated, without the incumbent itself."""
        space = self.space(task)
        base = dict(incumbent)
        for k, v in card.edit.assignments.items():
            if k in space:
                base[k] = v
        axes = []
        for name in card.edit.search:
            p = card.param(name)
            values = [v for v in (p.values if p else ()) if name in space and v in space[name]]
            axes.append((name, values or [base.get(name)]))
        out: list[dict[str, Any]] = []
        seen = {_key(self.normalize(task, incumbent))}
        for combo in itertools.product(*(vals for _, vals in axes)):
            cand = dict(base)
            cand.update({name: v for (name, _), v in zip(axes, combo)})
            cand = self.normalize(task, cand)
            key = _key(cand)
            if key in seen:
                continue
            seen.add(key)
            out.append(cand)
            if len(out) >= limit:
                break
        return out

    def applies(self, card: Card) -> bool:
        """True for schedule cards whose fields all belong to this family's space."""
        return card.kind == "schedule" and self.name in card.families

    # -- cost and rendering --------------------------------------------------------------------
    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        raise NotImplementedError

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        return {}

    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        """A DSL module defining KERNEL and CONSTEXPRS for these parameters."""
        raise NotImplementedError

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        """A KernelBench solution module (ModelNew) around the kernel source, or None."""
        return None


@dataclass(frozen=True)
class Refusal:
    """A task a family's KernelBench matcher recognizes but does not search: what, and how to
    fix it (the composer raises it as FamilyRefused and falls back to argus.compose, whose
    TaskSpec note then names the family and the reason)."""

    message: str
    fix: str = ""


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def params_key(params: dict[str, Any]) -> str:
    """A stable text key of a parameter dict (for dedup and the store)."""
    return ",".join(f"{k}={params[k]!r}" for k in sorted(params))


LAUNCH_HELPER = '''
def _launch(*tensors):
    """Run the Argus kernel: compiled for sm_90a on CUDA tensors, interpreted on CPU tensors."""
    if tensors[0].is_cuda:
        KERNEL.compile(**CONSTEXPRS)(*tensors)
    else:
        KERNEL.interpret(*tensors, **CONSTEXPRS)
'''
