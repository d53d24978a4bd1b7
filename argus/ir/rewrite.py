"""A small rewrite engine: rules are data, `Rules([(pattern, fn), ...])`.

A pattern is an op class (or tuple of classes) plus an optional predicate; `fn(op, ctx)`
returns None (no change), one op, or a list of ops that replace it. The engine walks regions
bottom-up (inner regions first) and repeats until no rule fires (bounded, to catch loops).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from argus.errors import IRError
from argus.ir.core import Kernel, Op, Region

RuleFn = Callable[[Op, Any], "Op | Sequence[Op] | None"]


@dataclass(frozen=True)
class Rule:
    op_types: type | tuple[type, ...]
    fn: RuleFn
    when: Callable[[Op], bool] = field(default=lambda op: True)
    name: str = ""


class Rules:
    def __init__(self, rules: Sequence[Rule | tuple], max_rounds: int = 50):
        self.rules = [r if isinstance(r, Rule) else Rule(*r) for r in rules]
        self.max_rounds = max_rounds

    def apply(self, kernel: Kernel, ctx: Any = None) -> Kernel:
        body = kernel.body
        for _ in range(self.max_rounds):
            new_body, changed = self._region(body, ctx)
            body = new_body
            if not changed:
                return dataclasses.replace(kernel, body=body)
        raise IRError(f"rewrite rules did not converge after {self.max_rounds} rounds")

    def _region(self, region: Region, ctx: Any) -> tuple[Region, bool]:
        out: list[Op] = []
        changed = False
        for op in region.ops:
            # rewrite nested regions first
            updates = {}
            for f in op.spec_fields():
                v = getattr(op, f.name)
                if isinstance(v, Region):
                    nv, ch = self._region(v, ctx)
                    if ch:
                        updates[f.name] = nv
                        changed = True
            if updates:
                op = dataclasses.replace(op, **updates)
            replaced = None
            for rule in self.rules:
                if isinstance(op, rule.op_types) and rule.when(op):
                    replaced = rule.fn(op, ctx)
                    if replaced is not None:
                        break
            if replaced is None:
                out.append(op)
            else:
                changed = True
                if isinstance(replaced, Op):
                    out.append(replaced)
                else:
                    out.extend(replaced)
        return Region(tuple(out)), changed
