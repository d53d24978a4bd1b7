"""The LLM planner's prompt (in-context RL) and the parser of its reply.

The prompt carries: the task and its precision, the baselines, the current best candidate and
its source when an LLM wrote it, what happened last (every diagnostic and counterexample in
dense mode, pass/fail in binary mode), the legal schedule space, the retrieved knowledge cards,
the trajectory table of this run (step, card, parameters, outcome, time, reward), and rows of
similar tasks from the experience store. The reply is one JSON object in a ```json block,
optionally followed by one ```python block with complete DSL source (a source edit).

`parse_reply` is strict: a reply without a JSON object, with an unknown card, or with parameters
outside the schedule space raises `ReplyError`, whose message goes back to the model next turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from argus.agent.knowledge import Card
from argus.agent.planner import PlanState

SYSTEM = """You are the planner of Argus, a compiler for NVIDIA Hopper (sm_90a) GPU kernels with \
compile-time verification. Each turn you choose ONE optimization action for the kernel below: \
a knowledge card and its parameters (a schedule edit), or a card plus complete DSL source (a \
source edit). Argus verifies every candidate before compiling it (a violated invariant comes \
back to you with a counterexample), checks correctness against a float64 reference, and times \
it on the GPU (or, without a GPU, with a labelled cost-model estimate). Maximize speed; never \
trade correctness. Reply with exactly one JSON object in a ```json block:
{"card": "<card id>", "params": {<schedule field>: <value>, ...}, "rationale": "<one sentence>"}
Only use schedule fields and values listed under "Schedule space". For a source edit, add one \
```python block with the complete module (it must define KERNEL and CONSTEXPRS, keep the \
kernel's tensor signature, and include the tag assertions the card recommends)."""


class ReplyError(ValueError):
    """The model's reply cannot be used (the message says why, for the next prompt)."""


@dataclass(frozen=True)
class Choice:
    card: str
    params: dict[str, Any]
    rationale: str
    source: str | None = None


_JSON_BLOCK = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
_PY_BLOCK = re.compile(r"```python\s*(.*?)```", re.DOTALL)


def _first_object(text: str) -> str | None:
    """The first balanced {...} in text (for replies that forget the fence)."""
    start = text.find("{")
    while start >= 0:
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            c = text[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i + 1]
        start = text.find("{", start + 1)
    return None


def parse_reply(text: str, state: PlanState, cards: dict[str, Card]) -> Choice:
    """Validate the reply against the card list and the family's schedule space."""
    m = _JSON_BLOCK.search(text)
    raw = m.group(1) if m else _first_object(text)
    if raw is None:
        raise ReplyError("the reply contains no JSON object; answer with one ```json block")
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ReplyError(f"the JSON object does not parse ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("card"), str):
        raise ReplyError('the JSON object needs "card": "<card id>"')
    card = data["card"]
    if card not in cards:
        raise ReplyError(f"unknown card {card!r}; choose one of: {', '.join(sorted(cards))}")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise ReplyError('"params" must be an object of schedule fields')
    space = state.family.space(state.task)
    for k, v in params.items():
        if k not in space:
            raise ReplyError(f"{k!r} is not a schedule field; fields: {', '.join(space)}")
        if v not in space[k]:
            raise ReplyError(f"{k}={v!r} is outside its legal values {list(space[k])}")
    src = _PY_BLOCK.search(text)
    source = src.group(1).strip() + "\n" if src else None
    if source is not None and ("KERNEL" not in source or "CONSTEXPRS" not in source):
        raise ReplyError("the python block must be a complete module defining KERNEL and "
                         "CONSTEXPRS")
    return Choice(card, dict(params), str(data.get("rationale", ""))[:500], source)


def _fmt_params(params: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    items = [(k, v) for k, v in sorted(params.items()) if base is None or base.get(k) != v]
    return ", ".join(f"{k}={v}" for k, v in items) or "(unchanged)"


def trajectory_table(state: PlanState, limit: int = 30) -> str:
    rows = ["| step | planner | card | parameters (changed vs start) | outcome | time ms | "
            "reward |", "|---|---|---|---|---|---|---|"]
    start = state.start.params_dict
    for s in state.history[-limit:]:
        o = s.outcome
        outcome = "ok" if o.ok else (o.failure() if state.dense else "failed")
        t = f"{o.time_ms:.4f} ({o.time_kind})" if o.time_ms is not None else "-"
        src = " +source" if s.candidate.source else ""
        rows.append(f"| {s.index} | {s.planner} | {s.card}{src} | "
                    f"{_fmt_params(s.candidate.params_dict, start)} | "
                    f"{outcome.replace('|', '/')[:160]} | {t} | {s.reward:+.3f} |")
    return "\n".join(rows)


def experience_table(rows: list[dict[str, Any]], limit: int = 12) -> str:
    if not rows:
        return "(no earlier runs on similar tasks)"
    out = ["| task | card | parameters | outcome | time ms | gain |", "|---|---|---|---|---|---|"]
    for r in rows[:limit]:
        t = f"{r['time_ms']:.4f} ({r['time_kind']})" if r.get("time_ms") is not None else "-"
        out.append(f"| {r['signature']} | {r['card']} | {_fmt_params(r['params'])} | "
                   f"{r['status']} | {t} | {r['gain']:+.3f} |")
    return "\n".join(out)


def last_feedback(state: PlanState) -> str:
    if not state.history:
        return "(nothing has run yet)"
    s = state.history[-1]
    o = s.outcome
    if not state.dense:
        return f"step {s.index}: {'passed' if o.ok else 'failed'}" + (
            f", {o.time_ms:.4f} ms ({o.time_kind})" if o.ok and o.time_ms is not None else "")
    lines = [f"step {s.index} ({s.card}): {o.status} at stage {o.stage or '-'}"]
    if o.message:
        lines.append("message: " + o.message.strip()[:1500])
    for d in o.diagnostics[:8]:
        text = f"- {d.get('severity')}: {d.get('code')}: {d.get('message')}"
        if d.get("counterexample"):
            text += "\n  counterexample: " + ", ".join(f"{k}={v}" for k, v in
                                                     d["counterexample"].items())
        if d.get("fix"):
            text += f"\n  fix: {d['fix']}"
        lines.append(text)
    if o.resources:
        lines.append("resources: " + ", ".join(f"{k}={v}" for k, v in sorted(o.resources.items())))
    if not o.ok and o.status == "verification":
        lines.append("Repair this: the counterexample above names the violated invariant.")
    return "\n".join(lines)


def build_prompt(state: PlanState, cards: list[Card], experience: list[dict[str, Any]],
                 notes: list[str]) -> str:
    task = state.task
    inc = state.incumbent
    base = ", ".join(f"{k} {v['ms']:.4f} ms ({v['kind']})" for k, v in state.baselines.items()
                     if v.get("ms")) or "(none)"
    parts = [
        f"## Task\n{task.name}: family {task.family}, sizes "
        f"{', '.join(f'{k}={v}' for k, v in task.shape)}, {task.precision_note}."
        + (f"\nFused computation:\n```\n{task.expr}\n```" if task.expr else ""),
        f"## Baselines\n{base}",
        "## Current best\n" + (
            f"step {inc.index}: {_fmt_params(inc.candidate.params_dict)} -> "
            f"{inc.outcome.time_ms:.4f} ms ({inc.outcome.time_kind})" if inc else
            "(no correct candidate yet); start: " + _fmt_params(state.start.params_dict)),
    ]
    if inc is not None and inc.candidate.source:
        parts.append("Its source:\n```python\n" + inc.candidate.source[-6000:] + "\n```")
    parts.append("## What happened last\n" + last_feedback(state))
    if notes:
        parts.append("## Problems with your previous replies\n" + "\n".join(f"- {n}" for n in
                                                                           notes[-3:]))
    space = state.family.space(task)
    parts.append("## Schedule space (field: legal values)\n" + "\n".join(
        f"- {k}: {list(v)}" for k, v in space.items()))
    notes_of = getattr(state.family, "constraint_notes", None)
    if notes_of is not None:    # a family over Schedule classes declares its constraints
        parts.append("## Constraints between fields (violations are pruned before running; "
                     "the message's {fields} are the schedule's values)\n"
                     + "\n".join(f"- {n}" for n in notes_of(task)))
    parts.append("## Knowledge cards (actions)\n" + "\n\n".join(c.render(full=c.kind == "source")
                                                                for c in cards))
    parts.append("## Trajectory of this run\n" + trajectory_table(state))
    parts.append("## Experience from similar tasks\n" + experience_table(experience))
    parts.append("Choose the next action. Do not repeat a parameter set already in the "
                 "trajectory. Reply with one ```json block (and a ```python block only for a "
                 "source edit).")
    return "\n\n".join(parts)
