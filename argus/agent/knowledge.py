"""The knowledge base: one technique card per TOML file in argus/agent/cards/, loaded and checked.

A card says when a technique applies (conditions over task features, see conditions.py), what
it should buy and why, its parameters with their legal values, what makes it safe (`asserts`:
`ag.tag_assert(...)` lines to add to the kernel, "verify: <codes>" naming the built-in
invariants argus.verify proves for the edit, or "lowering: ..." for checks the compiler makes),
its pitfalls, and its edit: a `schedule` edit (assignments and a bounded search over
schedule fields, which the offline planner can apply by itself) or a `source` edit (a DSL
template that an LLM adapts). Invariant: every shipped card loads and validates; a malformed
card is an error that names the file and the field, never a silently skipped action.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, Mapping

from argus.agent import conditions

try:
    from tomllib import loads                # Python 3.11+
except ModuleNotFoundError:                  # Python 3.10: the same parser, as a package
    from tomli import loads

KINDS = ("schedule", "source")
REQUIRED = ("id", "title", "families", "kind", "when", "buys", "why", "expected_gain",
            "reference", "asserts", "pitfalls", "params", "edit")


class CardError(ValueError):
    """A knowledge card is malformed (the message names the card file and field)."""


@dataclass(frozen=True)
class CardParam:
    """One parameter of a card and its legal values (a discrete range)."""

    name: str
    values: tuple[Any, ...]
    doc: str = ""


@dataclass(frozen=True)
class CardEdit:
    """What applying the card changes: fixed assignments plus parameters to search (schedule
    cards), or a DSL source template to adapt (source cards)."""

    set: tuple[tuple[str, Any], ...] = ()
    search: tuple[str, ...] = ()
    template: str = ""
    description: str = ""

    @property
    def assignments(self) -> dict[str, Any]:
        return dict(self.set)


@dataclass(frozen=True)
class Card:
    id: str
    title: str
    families: tuple[str, ...]
    kind: str
    when: tuple[str, ...]
    buys: str
    why: str
    expected_gain: float          # prior mean of the log-speedup it buys where it applies
    reference: str
    asserts: tuple[str, ...]
    pitfalls: tuple[str, ...]
    params: tuple[CardParam, ...]
    edit: CardEdit
    file: str = field(default="", compare=False)

    def param(self, name: str) -> CardParam | None:
        return next((p for p in self.params if p.name == name), None)

    def applies(self, features: Mapping[str, Any]) -> bool:
        """True when the task's family is one of the card's and every condition holds."""
        if features.get("family") not in self.families:
            return False
        return all(conditions.holds(c, features) for c in self.when)

    def render(self, full: bool = True) -> str:
        """The card as prompt text for an LLM (compact, stable)."""
        lines = [f"### {self.id}: {self.title} ({self.kind} edit)",
                 f"- applies when: {' and '.join(self.when) or 'always'}",
                 f"- buys: {self.buys}"]
        if full:
            lines.append(f"- why: {self.why}")
        for p in self.params:
            lines.append(f"- param {p.name} in {list(p.values)}" + (f": {p.doc}" if p.doc else ""))
        if self.edit.set:
            lines.append(f"- sets: {', '.join(f'{k}={v!r}' for k, v in self.edit.set)}")
        if self.edit.search:
            lines.append(f"- searches: {', '.join(self.edit.search)}")
        if self.asserts:
            lines.append(f"- tag assertions: {'; '.join(self.asserts)}")
        if full and self.pitfalls:
            lines.append(f"- pitfalls: {'; '.join(self.pitfalls)}")
        if full and self.edit.template:
            lines.append("- template:\n```python\n" + self.edit.template.strip() + "\n```")
        return "\n".join(lines)


def _tuple(value: Any, file: str, name: str, kind: type = str) -> tuple:
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise CardError(f"card {file}: field {name!r} must be a list of {kind.__name__}")
    return tuple(value)


def parse_card(text: str, file: str = "<string>") -> Card:
    """Build and validate one card from TOML text."""
    try:
        data = loads(text)
    except ValueError as e:  # tomllib.TOMLDecodeError subclasses ValueError
        raise CardError(f"card {file}: {e}") from None
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise CardError(f"card {file}: missing field(s) {', '.join(missing)}; every card needs "
                        f"{', '.join(REQUIRED)}")
    if data["kind"] not in KINDS:
        raise CardError(f"card {file}: kind {data['kind']!r} is not one of {KINDS}")
    for cond in data["when"]:
        try:
            conditions.parse(cond)
        except conditions.ConditionError as e:
            raise CardError(f"card {file}: {e}") from None
    params = []
    raw_params = data["params"]
    if not isinstance(raw_params, dict):
        raise CardError(f"card {file}: [params] must be a table of tables")
    for name, spec in raw_params.items():
        if not isinstance(spec, dict) or not spec.get("values"):
            raise CardError(f"card {file}: params.{name} needs a non-empty `values` list "
                            "(its legal range)")
        params.append(CardParam(name, tuple(spec["values"]), str(spec.get("doc", ""))))
    edit = data["edit"]
    if not isinstance(edit, dict):
        raise CardError(f"card {file}: [edit] must be a table")
    card_edit = CardEdit(set=tuple(sorted(dict(edit.get("set", {})).items())),
                         search=_tuple(edit.get("search", []), file, "edit.search"),
                         template=str(edit.get("template", "")),
                         description=str(edit.get("description", "")))
    if data["kind"] == "schedule" and not (card_edit.set or card_edit.search):
        raise CardError(f"card {file}: a schedule card must set or search at least one field")
    if data["kind"] == "source" and not card_edit.template.strip():
        raise CardError(f"card {file}: a source card needs an edit.template for the LLM to adapt")
    for name in card_edit.search:
        if not any(p.name == name for p in params):
            raise CardError(f"card {file}: edit.search names {name!r} but [params.{name}] does "
                            "not give its legal values")
    if not data["asserts"]:
        raise CardError(f"card {file}: asserts is empty; name the tag assertions (ag.tag_assert) "
                        "or the built-in invariants ('verify: code, ...') that make it safe")
    gain = data["expected_gain"]
    if not isinstance(gain, (int, float)):
        raise CardError(f"card {file}: expected_gain must be a number (a prior log-speedup)")
    return Card(id=str(data["id"]), title=str(data["title"]),
                families=_tuple(data["families"], file, "families"), kind=data["kind"],
                when=_tuple(data["when"], file, "when"), buys=str(data["buys"]),
                why=str(data["why"]), expected_gain=float(gain), reference=str(data["reference"]),
                asserts=_tuple(data["asserts"], file, "asserts"),
                pitfalls=_tuple(data["pitfalls"], file, "pitfalls"), params=tuple(params),
                edit=card_edit, file=file)


@functools.lru_cache(maxsize=1)
def load_cards() -> tuple[Card, ...]:
    """Every card shipped in argus/agent/cards/, sorted by id (ids must be unique)."""
    root = resources.files("argus.agent") / "cards"
    cards = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            cards.append(parse_card(entry.read_text(encoding="utf-8"), entry.name))
    seen: dict[str, str] = {}
    for c in cards:
        if c.id in seen:
            raise CardError(f"cards {seen[c.id]} and {c.file} share the id {c.id!r}")
        seen[c.id] = c.file
    return tuple(sorted(cards, key=lambda c: c.id))


def card_by_id(card_id: str, cards: Iterable[Card] | None = None) -> Card:
    cards = tuple(cards) if cards is not None else load_cards()
    for c in cards:
        if c.id == card_id:
            return c
    raise KeyError(f"no knowledge card {card_id!r}; cards: {', '.join(c.id for c in cards)}")


def retrieve(features: Mapping[str, Any], *, kind: str | None = None, k: int | None = None,
             cards: Iterable[Card] | None = None) -> list[Card]:
    """The cards that apply to a task, best prior first (ties by id, so retrieval is stable)."""
    pool = tuple(cards) if cards is not None else load_cards()
    hits = [c for c in pool if c.applies(features) and (kind is None or c.kind == kind)]
    hits.sort(key=lambda c: (-c.expected_gain, c.id))
    return hits[:k] if k is not None else hits
