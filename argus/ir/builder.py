"""Builder: appends ops to the innermost open region and hands out fresh Values.

The tracer drives it; passes that build new ops use it too. `region()` opens a nested region
and returns its ops when closed, so nesting in Python mirrors nesting in the IR.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from argus.errors import Loc
from argus.ir.core import Op, Region, Value
from argus.ir.types import Type


class Builder:
    def __init__(self, first_id: int = 0):
        self._next_id = first_id
        self._stack: list[list[Op]] = [[]]

    def fresh(self, type_: Type, hint: str = "") -> Value:
        v = Value(self._next_id, type_, hint)
        self._next_id += 1
        return v

    def append(self, op: Op) -> Op:
        self._stack[-1].append(op)
        return op

    @contextlib.contextmanager
    def region(self) -> Iterator[list[Op]]:
        """Collect the ops appended inside the `with` block; read them after it closes."""
        ops: list[Op] = []
        self._stack.append(ops)
        try:
            yield ops
        finally:
            popped = self._stack.pop()
            assert popped is ops

    def top_region(self) -> Region:
        assert len(self._stack) == 1, "unclosed region"
        return Region(tuple(self._stack[0]))

    @property
    def depth(self) -> int:
        return len(self._stack) - 1


def loc_or_unknown(loc: Loc | None) -> Loc:
    return loc if loc is not None else Loc.unknown()
