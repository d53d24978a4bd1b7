"""One generic family over Schedule classes: the space, the legality, the resources and the
neighbourhood of a family follow from the Schedule classes it tunes (their declared ranges and
constraints, argus/schedule_space.py) and from the kernel builder, instead of dict rules.

A family names its parts (a Schedule class each, when the task uses it, and the role it plays
when one class serves twice: MoE's gate-up and down GEMMs) and, where it has them, its kernel
builder `build(task, params) -> (kernel function, constexprs)` (or a list, one per kernel it
launches). A family whose parts follow the parameters (MoE: decode or prefill) or the task's
own kernel (the generic kernel family: a Schedule class made of a user kernel's knobs)
overrides `parts_for`. From those:
  - `space`: each exposed field's declared choices, narrowed for the task's facts;
  - `static_check`: the declared ranges and constraints, then the class's own construction
    checks, then the lowering itself (trace, layouts, lower: ~10 ms for a library GEMM), whose
    refusals are reported under the pass that refused (smem_plan -> "smem", role_plan ->
    "regs_budget"); nothing is compiled;
  - `resources`: what the lowering reports (shared memory, threads, the role register plan,
    the cluster, the launch grid at the task's shapes), which the cost model may use;
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

import dataclasses
import math
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
    parameters hold (None: all of them). A class the family uses in more than one role (MoE's
    gate-up and down GEMMs) names each role (`role`, for messages) and gives its fields their
    own parameter names (`rename`: (field, parameter) pairs; a field not renamed reads the
    parameter of its own name, which roles may share, e.g. one token tile for both GEMMs).
    `search` narrows the values a role searches ((field, values) pairs, each accepted by the
    declaration); `derive(values)` sets the fields that follow the parameters in this role
    (not parameters themselves: consumers from bm, decode's fixed 64-row weight tile)."""

    schedule: Callable[[], type]
    when: Callable[[TaskSpec], bool] = _always
    exposed: tuple[str, ...] | None = None
    role: str = ""
    rename: tuple[tuple[str, str], ...] = ()
    search: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    derive: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def param(self, name: str) -> str:
        """The family parameter that holds field `name` in this role."""
        return dict(self.rename).get(name, name)


@dataclass(frozen=True)
class Use:
    """A part as a task uses it: the part and its class's declared space."""

    part: Part
    space: Space

    @property
    def exposed(self) -> tuple[str, ...]:
        return self.part.exposed if self.part.exposed is not None else self.space.names

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        """The schedule's field values for `params`: the class defaults, the parameters of its
        fields (renamed for the role), then the fields the role derives from them."""
        out = self.space.default_values()
        out.update({n: params[self.part.param(n)] for n in self.space.names
                    if self.part.param(n) in params})
        return self.part.derive(out) if self.part.derive is not None else out

    def choices(self, facts: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        """{parameter: search values} of the exposed fields."""
        choices = self.space.choices(facts, dict(self.part.search))
        return {self.part.param(n): choices[n] for n in self.exposed}

    def localize(self, d: Diagnostic) -> Diagnostic:
        """A range or constraint finding in the role's terms: its fields under their parameter
        names, and the role named when it reads a field of the role's own (renamed) rather
        than one the roles share (then the roles' findings are the same, and reported once)."""
        renamed = dict(self.part.rename)
        if not any(k in renamed for k in d.counterexample):
            return d
        cex = {self.part.param(k): v for k, v in d.counterexample.items()}
        role = f"{self.part.role}: " if self.part.role else ""
        names = ", ".join(f"parameter {v} holds {k}" for k, v in self.part.rename
                          if k in d.counterexample)
        return dataclasses.replace(d, message=f"{role}{d.message} ({names})",
                                   counterexample=cex, fix=f"{role}{d.fix} ({names})")


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

    def parts_for(self, task: TaskSpec, params: dict[str, Any] | None = None
                  ) -> tuple[Part, ...]:
        """The parts of `task` (those whose `when` holds). `params`, when given, are the
        parameters being judged: a family whose parts follow them (MoE: the decode pair when
        swap_ab, else the prefill schedule) or the task's own kernel (the generic kernel
        family's class of its constexprs) overrides this."""
        return tuple(part for part in self.parts if part.when(task))

    def build(self, task: TaskSpec, params: dict[str, Any]):
        """(kernel function, constexprs) that `params` lower as, a list of them for a family
        that launches several kernels (each lowered, the first refusal reported), or None when
        the family has no kernel to lower here (its resources then come from the worker's
        compile)."""
        return None

    # -- derived from the declarations ---------------------------------------------------------
    def uses(self, task: TaskSpec, params: dict[str, Any] | None = None) -> list[Use]:
        """Each part the task uses with its declared space; a parameter two parts both expose
        is refused (a family's parameters are flat)."""
        from argus.agent.families.declared import declare_library

        declare_library()
        out, seen = [], {}
        for part in self.parts_for(task, params):
            use = Use(part, space_of(part.schedule()))
            where = use.space.schedule.__name__ + (f" ({part.role})" if part.role else "")
            for n in use.exposed:
                name = part.param(n)
                if name in seen:
                    raise ValueError(f"family {self.name}: parameter {name!r} is exposed by "
                                     f"both {seen[name]} and {where}; a family's parameters "
                                     "are flat, so expose it in one part only (another part "
                                     "still reads it), or rename it for the role (Part.rename)")
                seen[name] = where
            out.append(use)
        return out

    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        facts = self.facts(task)
        out: dict[str, tuple[Any, ...]] = {}
        for use in self.uses(task):
            out.update(use.choices(facts))
        return out

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for use in self.uses(task):
            defaults = use.values({})
            out.update({use.part.param(n): defaults[n] for n in use.exposed})
        out.update(self.start(task))
        return out

    def constraint_notes(self, task: TaskSpec) -> list[str]:
        """The declared constraints as text (code, the condition's message, the rule it cites),
        for a planner that reads them (the LLM prompt); a class used in two roles once."""
        out: list[str] = []
        for use in self.uses(task):
            for c in use.space.constraints:
                what = c.message if isinstance(c.message, str) else ", ".join(c.reads)
                note = (f"{c.code} ({c.severity}; {use.space.schedule.__name__}): {what} "
                        f"[rule: {c.rule}]")
                if note not in out:
                    out.append(note)
        return out

    def schedules(self, task: TaskSpec, params: dict[str, Any]) -> list[Any]:
        """The Schedule objects of `params` (one per part they use); the classes' own checks
        raise ValueError."""
        return [use.space.build(use.values(params)) for use in self.uses(task, params)]

    def static_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """Declared ranges and constraints, then the classes' checks, then the lowering (each
        step only when the previous found no error)."""
        facts = self.facts(task)
        uses = self.uses(task, params)
        out: list[Diagnostic] = []
        for use in uses:
            for d in use.space.diagnose(use.values(params), facts, kernel=task.name):
                d = use.localize(d)
                if d not in out:        # a shared field's finding, once for all roles
                    out.append(d)
        if _errors(out):
            return out
        for use in uses:
            try:
                use.space.build(use.values(params))
            except (ValueError, TypeError) as exc:
                role = f"{use.part.role}: " if use.part.role else ""
                out.append(Diagnostic("error", "schedule_fields", f"{role}{exc}",
                                      kernel=task.name,
                                      counterexample=dict(sorted(params.items())),
                                      fix=f"change the fields {use.space.schedule.__name__} "
                                          "names (its own checks refused them)"))
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
        registers per CTA, the cluster, and where the task's shapes give it the launch grid
        and its CTA count), or the Diagnostic of its refusal; None without a
        builder. A family of several kernels gets the most any of them needs, and each
        kernel's report under "kernels". Cached per (task, params)."""
        key = (task.name, task.path, task.sha256, task.compute, repr(task.shape),
               repr(task.options), repr(task.constexprs), params_key(params))
        if key in self._lowered:
            self._lowered.move_to_end(key)
            return self._lowered[key]
        built = self.build(task, params)
        if built is None:
            return None
        reports = []
        for kernel_fn, constexprs in (built if isinstance(built, list) else [built]):
            reports.append(lower_resources(kernel_fn, constexprs, kernel=task.name,
                                           params=params, symbols=dict(task.dims)))
            if isinstance(reports[-1], Diagnostic):
                break
        result = reports[-1] if len(reports) == 1 or isinstance(reports[-1], Diagnostic) \
            else {**{k: max(r[k] for r in reports) for k in ("smem", "threads",
                                                             "registers_per_cta")},
                  "kernels": reports}
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


def _refusal(exc: ArgusError, failed: str, kernel: str,
             counterexample: dict[str, Any]) -> Diagnostic:
    """The compiler's refusal of a schedule, coded by the resource of the pass that refused."""
    first = str(exc).splitlines()[0]
    return Diagnostic("error", RESOURCE_PASSES.get(failed, "lower"), "the compiler refused the "
                      f"schedule ({failed}): {first}", kernel=kernel,
                      counterexample=counterexample,
                      fix=exc.fix or "change the schedule's tile, stages or roles")


def lower_resources(kernel_fn, constexprs: dict[str, Any], *, kernel: str = "",
                    params: dict[str, Any] | None = None,
                    symbols: dict[str, int] | None = None) -> dict[str, Any] | Diagnostic:
    """Trace, infer layouts and lower (no verifier, no NVRTC); the lowered kernel's resource
    attributes (with `symbols`, the shape sizes, also its launch grid and CTA count), or the
    refusal as a Diagnostic coded by the pass that refused. A kernel's trace runs its author's
    Python: any exception there refuses the schedule (code "lower"), as the worker's lowering
    would. Past the trace, only an ArgusError is a refusal: any other exception from layout
    inference or a lowering pass is a compiler bug and propagates (a worker reports it as an
    "error" outcome with its traceback, the planner stops), never a quietly pruned schedule."""
    from argus import analysis, lower

    counterexample = dict(sorted((params or {}).items()))
    try:
        traced = kernel_fn.trace(**constexprs)
    except ArgusError as exc:
        return _refusal(exc, "trace", kernel, counterexample)
    except Exception as exc:  # noqa: BLE001 - the kernel's own Python refused these values
        return Diagnostic("error", "lower", f"trace of {getattr(kernel_fn, 'name', kernel)} "
                          f"raised {type(exc).__name__}: {exc}", kernel=kernel,
                          counterexample=counterexample,
                          fix="the kernel's Python does not take these compile-time values: "
                              "choose others, or make the kernel raise an Argus error that "
                              "says which values it takes")
    done: list[str] = []
    stage = "infer_layouts"
    try:
        laid_out = analysis.infer_layouts(traced)
        stage = "lower"
        lowered = lower.run(laid_out, on_step=lambda name, _k: done.append(name))
    except ArgusError as exc:
        names = [name for name, _ in lower.PASSES]
        failed = names[len(done)] if stage == "lower" and len(done) < len(names) else stage
        return _refusal(exc, failed, kernel, counterexample)
    attrs = dict(lowered.attrs)
    roles = attrs.get("role_plan", ())
    threads = int(attrs.get("threads") or 0)
    regs = sum(128 * wgs * (r or 0) for _, _, wgs, r in roles)
    smem = int(attrs.get("smem_bytes") or 0)
    out = {"smem": smem + (1024 if smem else 0), "threads": threads,
           "role_regs": [list(r) for r in roles], "registers_per_cta": regs,
           "cluster": list(attrs.get("cluster") or (1, 1, 1))}
    if symbols is not None:
        from argus.runtime.interp import grid_extents

        try:
            grid = grid_extents(lowered, symbols)
            out.update(grid=list(grid), ctas=math.prod(grid))
        except Exception:  # noqa: BLE001 - the grid is a nicety for the cost model (as the
            pass          # worker's _lowered_resources): a kernel without one is still legal
    return out


__all__ = ["Part", "ScheduleFamily", "lower_resources"]
