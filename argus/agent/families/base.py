"""What every op family gives the agent: a schedule space with legal values, static legality
rules as data, the bounded parameter search a schedule card expands to, a cost estimate, and the
DSL source (plus a KernelBench ModelNew adapter) of a candidate.

Invariant: a family's static rules only *prune*; the lowering and the verifier remain the
ground truth. The rules may be stricter than the lowering (they never claim more than the
hardware rule they cite), and a test checks on a random sample that every schedule the rules
accept also lowers, so the rules never waste a run on a schedule the compiler would reject.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from argus.agent.cost_model import Estimate
from argus.agent.knowledge import Card
from argus.agent.task import TaskSpec
from argus.errors import Diagnostic

MAX_EXPANSION = 64   # candidates one card may propose from one incumbent (bounded search)


@dataclass(frozen=True)
class Rule:
    """One static legality rule: `check(params, dims)` is True when the schedule is legal."""

    code: str
    check: Callable[[dict[str, Any], dict[str, int]], bool]
    message: str          # formatted with **params, **dims
    fix: str
    source: str           # the hardware or compiler rule it mirrors
    severity: str = "error"

    def diagnose(self, params: dict[str, Any], dims: dict[str, int], kernel: str
                 ) -> Diagnostic | None:
        try:
            ok = self.check(params, dims)
        except (KeyError, ZeroDivisionError, TypeError):
            ok = False
        if ok:
            return None
        values = {**dims, **params}
        return Diagnostic(self.severity, self.code, self.message.format(**values), kernel=kernel,
                          counterexample={k: params[k] for k in sorted(params)},
                          fix=self.fix.format(**values) + f" (rule: {self.source})")


class Family:
    """Base class; subclasses fill in the space, rules, estimate and rendering."""

    name = "base"
    rules: tuple[Rule, ...] = ()

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
        dims = task.dims
        out = []
        for rule in self.rules:
            d = rule.diagnose(params, dims, kernel=task.name)
            if d is not None:
                out.append(d)
        return out

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
