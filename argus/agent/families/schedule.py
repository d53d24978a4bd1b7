"""One generic family over Schedule classes: the space, the legality, the resources and the
neighbourhood of a family follow from the Schedule classes it tunes (their declared ranges and
constraints, argus/schedule_space.py) and from the kernel builder, instead of dict rules.

A family names its parts (a Schedule class each, and when the task uses it) and, where it has
one, a kernel builder `build(task, params) -> (kernel function, constexprs)`. From those:
  - `space`: each exposed field's declared choices, narrowed for the task's facts;
  - `static_check`: the declared ranges and constraints, then the class's own construction
    checks, then the lowering itself (trace, layouts, lower: ~10 ms for a library GEMM), whose
    refusals are reported under the pass that refused (smem_plan -> "smem", role_plan ->
    "regs_budget"); nothing is compiled;
  - `resources`: what the lowering reports (shared memory, threads, the role register plan,
    the cluster), which the cost model may use;
  - `neighbors`: the schedules one declared step away along one field, a move set that needs
    no knowledge card (the planner explores with it when the cards have nothing left).
A family keeps what is truly its own: its facts about the task, its start point, normalize
(fields that follow others), its cost model and its rendering.

Invariant (base.py's): the declared ranges only prune; the lowering and the verifier remain the
ground truth. Because `static_check` ends with the lowering, whatever it accepts lowers; the
tests also check that the declarations alone leave no structural hole (what they accept lowers
or is refused only for shared memory, which is read from the lowering, not declared).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from argus.agent.families.base import Family, params_key
from argus.agent.task import TaskSpec
from argus.errors import ArgusError, Diagnostic
from argus.schedule_space import Space, space_of

# the lowering pass that refused a schedule -> the resource it ran out of
RESOURCE_PASSES = {"smem_plan": "smem", "role_plan": "regs_budget"}
RESOURCE_CACHE = 4096    # lowered schedules remembered per family (an explicit cache)


def _always(task: TaskSpec) -> bool:
    return True


@dataclass(frozen=True)
class Part:
    """One Schedule class of a family: `schedule()` returns the class (imported on first use),
    `when(task)` says whether the task uses it, `exposed` which of its fields the family's
    parameters hold (None: all of them)."""

    schedule: Callable[[], type]
    when: Callable[[TaskSpec], bool] = _always
    exposed: tuple[str, ...] | None = None


class ScheduleFamily(Family):
    """A family whose space and legality are its Schedule classes' declarations."""

    name = "schedule"
    parts: tuple[Part, ...] = ()

    def __init__(self) -> None:
        self._lowered: OrderedDict[tuple, dict[str, Any] | Diagnostic] = OrderedDict()

    # -- what a family supplies ----------------------------------------------------------------
    def facts(self, task: TaskSpec) -> dict[str, Any]:
        """The problem facts the constraints read (default: the task's dims)."""
        return dict(task.dims)

    def start(self, task: TaskSpec) -> dict[str, Any]:
        """Where the default point differs from the Schedule classes' defaults."""
        return {}

    def build(self, task: TaskSpec, params: dict[str, Any]):
        """(kernel function, constexprs) that `params` lower as, or None when the family has
        no single kernel to lower here (its resources then come from the worker's compile)."""
        return None

    # -- derived from the declarations ---------------------------------------------------------
    def spaces(self, task: TaskSpec) -> list[tuple[tuple[str, ...], Space]]:
        """(exposed field names, declared space) of each part the task uses."""
        from argus.agent.families.declared import declare_library

        declare_library()
        out, seen = [], {}
        for part in self.parts:
            if not part.when(task):
                continue
            space = space_of(part.schedule())
            names = part.exposed if part.exposed is not None else space.names
            for n in names:
                if n in seen:
                    raise ValueError(f"family {self.name}: field {n!r} is in both "
                                     f"{seen[n]} and {space.schedule.__name__}; a family's "
                                     "parameters are flat, so its parts' field names must "
                                     "differ (expose only one of them)")
                seen[n] = space.schedule.__name__
            out.append((tuple(names), space))
        return out

    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        facts = self.facts(task)
        out: dict[str, tuple[Any, ...]] = {}
        for names, space in self.spaces(task):
            choices = space.choices(facts)
            out.update({n: choices[n] for n in names})
        return out

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for names, space in self.spaces(task):
            defaults = space.default_values()
            out.update({n: defaults[n] for n in names})
        out.update(self.start(task))
        return out

    def constraint_notes(self, task: TaskSpec) -> list[str]:
        """The declared constraints as text (code, the condition's message, the rule it cites),
        for a planner that reads them (the LLM prompt)."""
        out = []
        for _, space in self.spaces(task):
            for c in space.constraints:
                what = c.message if isinstance(c.message, str) else ", ".join(c.reads)
                out.append(f"{c.code} ({c.severity}; {space.schedule.__name__}): {what} "
                           f"[rule: {c.rule}]")
        return out

    def schedules(self, task: TaskSpec, params: dict[str, Any]) -> list[Any]:
        """The Schedule objects of `params` (one per part the task uses); the classes' own
        checks raise ValueError."""
        return [space.build({**space.default_values(),
                             **{k: params[k] for k in space.names if k in params}})
                for _, space in self.spaces(task)]

    def static_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """Declared ranges and constraints, then the classes' checks, then the lowering (each
        step only when the previous found no error)."""
        facts = self.facts(task)
        out: list[Diagnostic] = []
        for _, space in self.spaces(task):
            values = {k: params[k] for k in space.names if k in params}
            out += space.diagnose(values, facts, kernel=task.name)
        if _errors(out):
            return out
        for _, space in self.spaces(task):
            try:
                space.build({**space.default_values(),
                             **{k: params[k] for k in space.names if k in params}})
            except (ValueError, TypeError) as exc:
                out.append(Diagnostic("error", "schedule_fields", str(exc), kernel=task.name,
                                      counterexample=dict(sorted(params.items())),
                                      fix=f"change the fields {space.schedule.__name__} names "
                                          "(its own checks refused them)"))
        if _errors(out):
            return out
        return out + self.resource_check(task, params)

    def resource_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """The compiler's resource verdict on schedules the declarations and the classes accept:
        by default the lowering's refusal, if any (a family whose kernel reports its resources
        otherwise overrides this)."""
        lowered = self.resources(task, params)
        return [lowered] if isinstance(lowered, Diagnostic) else []

    def resources(self, task: TaskSpec, params: dict[str, Any]
                  ) -> dict[str, Any] | Diagnostic | None:
        """What the lowering reports for `params` (smem bytes, threads, the role register plan,
        registers per CTA, the cluster), or the Diagnostic of its refusal; None without a
        builder. Cached per (task, params)."""
        key = (task.name, task.path, task.compute, repr(task.shape), repr(task.options),
               params_key(params))
        if key in self._lowered:
            self._lowered.move_to_end(key)
            return self._lowered[key]
        built = self.build(task, params)
        if built is None:
            return None
        result = lower_resources(*built, kernel=task.name, params=params)
        self._lowered[key] = result
        while len(self._lowered) > RESOURCE_CACHE:
            self._lowered.popitem(last=False)
        return result

    def neighbors(self, task: TaskSpec, incumbent: dict[str, Any]) -> list[dict[str, Any]]:
        """Schedules one declared step from `incumbent` along one searched field (the next
        smaller or larger choice), normalized, deduplicated, without the incumbent."""
        space = self.space(task)
        seen = {params_key(self.normalize(task, incumbent))}
        out = []
        for name in sorted(space):
            values = list(space[name])
            if len(values) < 2 or incumbent.get(name) not in values:
                continue
            at = values.index(incumbent[name])
            for j in (at - 1, at + 1):
                if 0 <= j < len(values):
                    cand = self.normalize(task, {**incumbent, name: values[j]})
                    key = params_key(cand)
                    if key not in seen:
                        seen.add(key)
                        out.append(cand)
        return out


def _errors(found: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in found)


def lower_resources(kernel_fn, constexprs: dict[str, Any], *, kernel: str = "",
                    params: dict[str, Any] | None = None) -> dict[str, Any] | Diagnostic:
    """Trace, infer layouts and lower (no verifier, no NVRTC); the lowered kernel's resource
    attributes, or the refusal as a Diagnostic coded by the pass that refused."""
    from argus import analysis, lower

    done: list[str] = []
    stage = "trace"
    try:
        traced = analysis.infer_layouts(kernel_fn.trace(**constexprs))
        stage = "lower"
        lowered = lower.run(traced, on_step=lambda name, _k: done.append(name))
    except ArgusError as exc:
        names = [name for name, _ in lower.PASSES]
        failed = names[len(done)] if stage == "lower" and len(done) < len(names) else stage
        code = RESOURCE_PASSES.get(failed, "lower")
        first = str(exc).splitlines()[0]
        return Diagnostic("error", code, f"the compiler refused the schedule ({failed}): "
                          f"{first}", kernel=kernel,
                          counterexample=dict(sorted((params or {}).items())),
                          fix=exc.fix or "change the schedule's tile, stages or roles")
    attrs = dict(lowered.attrs)
    roles = attrs.get("role_plan", ())
    threads = int(attrs.get("threads") or 0)
    regs = sum(128 * wgs * (r or 0) for _, _, wgs, r in roles)
    smem = int(attrs.get("smem_bytes") or 0)
    return {"smem": smem + (1024 if smem else 0), "threads": threads,
            "role_regs": [list(r) for r in roles], "registers_per_cta": regs,
            "cluster": list(attrs.get("cluster") or (1, 1, 1))}


__all__ = ["Part", "ScheduleFamily", "lower_resources"]
