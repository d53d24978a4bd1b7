"""The legal values of a Schedule's fields and their cross-field constraints, declared as data.

A Schedule is one frozen dataclass of tunable decisions (ARCHITECTURE.md §3). This module lets it
say, without building a kernel, which values each field may take and which combinations are
illegal, so a tuner (the agent, the autotuner) enumerates, samples and prunes the space from the
declaration instead of keeping its own copy of the rules:

    @dataclass(frozen=True)
    class MySchedule:
        bm: int = field(default=128, metadata=legal((64, 128, 192, 256), high=256,
                                                    rule="TMA boxDim <= 256"))
        consumers: int = field(default=2, metadata=legal((1, 2, 3, 4)))
        CONSTRAINTS: ClassVar[tuple[Constraint, ...]] = (
            Constraint("wgmma_rows", lambda s, f: s["bm"] == 64 * s["consumers"],
                       "bm={bm} with {consumers} consumer warpgroup(s): ...",
                       "set consumers = bm // 64", "PTX wgmma: M = 64 per warpgroup",
                       reads=("bm", "consumers")),)

A class that does not carry the metadata yet (the kernels adopt it one class at a time) is
declared from outside with `declare(MySchedule, fields={...}, constraints=(...))`; `space_of`
reads both, the class's own metadata first, and walks the class's bases, so a subclass inherits
its base's declarations.

`Legal.choices` are the values a search tries; `low`, `high` and `multiple` (when given) widen
what is *accepted* beyond them (a hand-written schedule with stages=16 is legal although a search
tries 1..8). A field with no declaration is not searched: its one choice is its default, and any
value is accepted (the class's own checks and the lowering judge it).

Constraints read the schedule's values (a mapping, so nothing is constructed) and the problem's
facts (shapes, dtypes, layouts: whatever the tuner passes in). One that reads a single field
also narrows that field's choices for a problem (node consistency: `Space.choices(facts)`).

Invariant: a declaration only prunes; the schedule class's own checks, the lowering and the
verifier remain the ground truth. A declaration may be stricter than they are, never looser
than the hardware rule it cites, and every declaration names that rule.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from argus.errors import Diagnostic

META_KEY = "argus.legal"
CONSTRAINTS_ATTR = "CONSTRAINTS"


@dataclass(frozen=True)
class Legal:
    """The declared values of one field: `choices` (what a search tries) and, when any bound is
    given, the wider set it accepts: low <= v <= high, v % multiple == 0."""

    choices: tuple[Any, ...]
    low: Any = None
    high: Any = None
    multiple: int | None = None
    rule: str = ""
    searched: bool = True      # False: not a search dimension (its one choice is the default)

    def accepts(self, value: Any) -> bool:
        if self.low is None and self.high is None and self.multiple is None:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return value in self.choices
        if self.low is not None and value < self.low:
            return False
        if self.high is not None and value > self.high:
            return False
        return self.multiple is None or value % self.multiple == 0

    def describe(self) -> str:
        if self.low is None and self.high is None and self.multiple is None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        parts = [f">= {self.low}" if self.low is not None else "",
                 f"<= {self.high}" if self.high is not None else "",
                 f"a multiple of {self.multiple}" if self.multiple else ""]
        return ", ".join(p for p in parts if p)


def legal(choices: Any = None, *, low: Any = None, high: Any = None, multiple: int | None = None,
          rule: str = "") -> dict[str, Legal]:
    """Field metadata declaring a field's legal values (see the module docstring). `choices`
    may be any iterable; without it, the range low..high in steps of `multiple` (or 1)."""
    if choices is None:
        if low is None or high is None:
            raise ValueError("legal(): give the choices, or both low and high to enumerate "
                             "them (e.g. legal(low=1, high=8))")
        choices = range(low, high + 1, multiple or 1)
    values = tuple(choices)
    if not values:
        raise ValueError(f"legal(): no choices declared (rule: {rule or 'none named'})")
    return {META_KEY: Legal(values, low, high, multiple, rule)}


def fixed(rule: str = "") -> dict[str, Legal]:
    """Field metadata for a field that is not searched (its default is the one choice)."""
    return {META_KEY: Legal((), rule=rule, searched=False)}


@dataclass(frozen=True)
class Constraint:
    """One cross-field rule: `check(values, facts)` is True when legal. `message` and `fix` are
    format strings over the facts and the values (or callables of both returning text); `rule`
    names the hardware or compiler rule it mirrors; `reads` the fields it looks at."""

    code: str
    check: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    message: str | Callable[[Mapping[str, Any], Mapping[str, Any]], str]
    fix: str | Callable[[Mapping[str, Any], Mapping[str, Any]], str]
    rule: str
    reads: tuple[str, ...] = ()
    severity: str = "error"

    def holds(self, values: Mapping[str, Any], facts: Mapping[str, Any]) -> bool:
        return self._evaluate(values, facts) is True

    def _evaluate(self, values: Mapping[str, Any], facts: Mapping[str, Any]
                  ) -> bool | Exception:
        """The check's verdict, or the exception that stopped it (a rule that cannot read
        what it needs does not vouch for the schedule: `holds` is then False)."""
        try:
            return bool(self.check(values, facts))
        except (KeyError, ZeroDivisionError, TypeError) as exc:
            return exc

    def diagnose(self, values: Mapping[str, Any], facts: Mapping[str, Any], kernel: str = ""
                 ) -> Diagnostic | None:
        verdict = self._evaluate(values, facts)
        if verdict is True:
            return None
        counterexample = {k: values[k] for k in sorted(self.reads or values) if k in values}
        if isinstance(verdict, Exception):
            # the rule's own message would state a condition nobody checked: say what stopped it
            missing = isinstance(verdict, KeyError) and verdict.args and \
                verdict.args[0] not in values
            what = (f"reads {verdict.args[0]!r}, which is neither a field of the schedule nor "
                    f"a fact the tuner passed (facts: {', '.join(sorted(facts)) or 'none'})"
                    if missing else f"raised {type(verdict).__name__}: {verdict}")
            return Diagnostic(
                self.severity, self.code, f"constraint {self.code} could not be evaluated: "
                f"it {what}; the schedule is refused, as no rule vouches for it",
                kernel=kernel, counterexample=counterexample,
                fix=(f"pass {verdict.args[0]!r} in the facts (a family's facts()), or "
                     f"guard the constraint's check" if missing else
                     "fix the constraint's check for these values") + f" (rule: {self.rule})")
        return Diagnostic(self.severity, self.code, _text(self.message, values, facts),
                          kernel=kernel, counterexample=counterexample,
                          fix=f"{_text(self.fix, values, facts)} (rule: {self.rule})")


def _text(spec, values, facts) -> str:
    if callable(spec):
        return spec(values, facts)
    try:
        return spec.format(**{**facts, **values})
    except (KeyError, IndexError, ValueError):
        return spec


_DECLARED: dict[type, tuple[dict[str, Legal], tuple[Constraint, ...]]] = {}


def declare(schedule: type, fields: Mapping[str, dict[str, Legal] | Legal] | None = None,
            constraints: tuple[Constraint, ...] = ()) -> None:
    """Declare ranges and constraints of a schedule class that does not carry them itself.
    `fields` maps field names to `legal(...)` / `fixed()` (or a Legal). Declaring the same
    class again replaces its declaration (a module reloaded in a test)."""
    if not dataclasses.is_dataclass(schedule):
        raise TypeError(f"declare({schedule!r}): a Schedule is a dataclass")
    names = {f.name for f in dataclasses.fields(schedule)}
    out: dict[str, Legal] = {}
    for name, spec in (fields or {}).items():
        if name not in names:
            raise ValueError(f"declare({schedule.__name__}): no field {name!r}; its fields are "
                             f"{', '.join(sorted(names))}")
        out[name] = spec if isinstance(spec, Legal) else spec[META_KEY]
    _DECLARED[schedule] = (out, tuple(constraints))


@dataclass(frozen=True)
class Space:
    """A schedule class's declared space: per-field Legal (in field order, with the undeclared
    fields fixed at their defaults) and the constraints."""

    schedule: type
    fields: tuple[tuple[str, Legal], ...]
    constraints: tuple[Constraint, ...]
    defaults: tuple[tuple[str, Any], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)

    def legal_of(self, name: str) -> Legal:
        return dict(self.fields)[name]

    def default_values(self) -> dict[str, Any]:
        return dict(self.defaults)

    def choices(self, facts: Mapping[str, Any] | None = None,
                search: Mapping[str, tuple[Any, ...]] | None = None
                ) -> dict[str, tuple[Any, ...]]:
        """Each field's search values for a problem: the declared choices (or, for a field in
        `search`, those values: a tuner that uses the class in a narrower role, e.g. MoE decode's
        token tiles, searches fewer; each must be accepted by the declaration), narrowed by the
        constraints that read that field alone (evaluated with the other fields' defaults;
        one that cannot be evaluated for want of a fact narrows nothing)."""
        facts = facts or {}
        search = search or {}
        defaults = self.default_values()
        for name, values in search.items():
            leg = dict(self.fields).get(name)
            if leg is None:
                raise ValueError(f"{self.schedule.__name__} has no field {name!r} to search; its "
                                 f"fields are {', '.join(self.names)}")
            refused = [v for v in values if leg.searched and not leg.accepts(v)]
            if refused or not values:
                raise ValueError(f"search values {refused or 'none'} of {self.schedule.__name__}."
                                 f"{name} are outside its declared values ({leg.describe()}): "
                                 "a tuner may search fewer values than declared, never others")
        out = {}
        for name, leg in self.fields:
            values = search.get(name) or (leg.choices if leg.searched else (defaults[name],))
            unary = [c for c in self.constraints if c.reads == (name,)
                     and c.severity == "error"]
            # a constraint that cannot be evaluated (a fact not passed) does not prune here:
            # `diagnose` refuses the schedule and says what it could not read
            kept = tuple(v for v in values
                         if all(c._evaluate({**defaults, name: v}, facts) is not False
                                for c in unary))
            out[name] = kept or values[:1]
        return out

    def diagnose(self, values: Mapping[str, Any], facts: Mapping[str, Any] | None = None,
                 kernel: str = "") -> list[Diagnostic]:
        """Range and constraint findings for `values` (missing fields take their defaults)."""
        facts = facts or {}
        full = {**self.default_values(), **values}
        out = []
        for name, leg in self.fields:
            if leg.searched and not leg.accepts(full[name]):
                out.append(Diagnostic(
                    "error", "range", f"{self.schedule.__name__}.{name}={full[name]!r} is "
                    f"outside its declared values ({leg.describe()})", kernel=kernel,
                    counterexample={name: full[name]},
                    fix=f"use {name} {leg.describe()}" + (f" (rule: {leg.rule})"
                                                          if leg.rule else "")))
        for c in self.constraints:
            d = c.diagnose(full, facts, kernel)
            if d is not None:
                out.append(d)
        return out

    def accepts(self, values: Mapping[str, Any], facts: Mapping[str, Any] | None = None) -> bool:
        return not any(d.severity == "error" for d in self.diagnose(values, facts))

    def sample(self, rng: random.Random, facts: Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
        """One point drawn uniformly from each field's choices (legal or not: callers filter)."""
        return {name: rng.choice(vals) for name, vals in self.choices(facts).items()}

    def build(self, values: Mapping[str, Any]):
        """The schedule object for `values` (keys that are not its fields are ignored); its
        own checks run, and raise ValueError, as for any construction."""
        names = set(self.names)
        return self.schedule(**{k: v for k, v in values.items() if k in names})


def space_of(schedule: type) -> Space:
    """The declared space of a schedule class: field metadata (`legal(...)` / `fixed()`), then
    declarations made with `declare` for it or its bases; constraints from the class's
    CONSTRAINTS attribute and the declarations, each code once (the most derived wins). A
    field's own metadata wins over every `declare`, a subclass's included: `declare` is for
    classes whose fields carry none (review 2026-12-03: this was unsaid)."""
    if not dataclasses.is_dataclass(schedule):
        raise TypeError(f"space_of({schedule!r}): a Schedule is a dataclass")
    declared: dict[str, Legal] = {}
    constraints: dict[str, Constraint] = {}
    for klass in reversed(schedule.__mro__):        # bases first, the class itself last
        fields, cons = _DECLARED.get(klass, ({}, ()))
        declared.update(fields)
        for c in tuple(klass.__dict__.get(CONSTRAINTS_ATTR, ())) + cons:
            constraints[c.code] = c
    out, defaults = [], []
    for f in dataclasses.fields(schedule):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise ValueError(f"space_of({schedule.__name__}): field {f.name!r} has no default; "
                             "a Schedule's fields all need one (the tuner starts from them)")
        leg = f.metadata.get(META_KEY) or declared.get(f.name) or Legal((), searched=False)
        if not leg.searched:
            leg = Legal((default,), rule=leg.rule, searched=False)
        out.append((f.name, leg))
        defaults.append((f.name, default))
    return Space(schedule, tuple(out), tuple(constraints.values()), tuple(defaults))


__all__ = ["Constraint", "Legal", "Space", "declare", "fixed", "legal", "space_of"]
