"""The verifier's transfer functions: one rule per IR op class, in files by op family.

Job: the registry the model's walk looks an op up in (ARCHITECTURE.md §7 item 3). `RULES` maps
every op class the model interprets to its transfer function

    rule(model, op, scopes, role, counters, following) -> None

which updates the model's state for `op` in its enclosing `scopes` (loops, ifs, role, steps),
for `role` (the RoleOp instance walked, or None at top level), with `counters` the pipeline
step counters of the walk so far (updated in place by steps and loops) and `following` the ops
after `op` in its region. `EXEMPT` maps the op classes that have no rule to the reason.

The families: scalar (const, arith, grid ids, cluster rank, thread index), control (for, if,
var, assign), elect (thread election: the body is the group's work), memory (smem
alloc/slice, stmatrix, ldmatrix, load, load_scalar, store), tma (tma.load, tma.store),
pipeline (pipeline, produce, consume), mma (wgmma), tiles (full, arange, elementwise,
convert, convert_layout, expand_dims, tile slice, reduce), sync (the SYNC_OPS: transparent
to tags), ordered (ordered.wait/pass, pipe.skip), tags (the tag ops).
The records they build are in `domain`.

The rules are the model's own code split by op family, not clients of it: they read and write
the Model's state and call its helpers, underscored ones included (`_site`, `_walk`,
`_set_tile`, ...). argus/verify/model.py imports this package, so a rule names `Model` in its
annotations without importing it.

Invariant kept: at most one rule per op class (`merge` refuses a second), looked up by the
op's exact class; an op whose class has no rule (an EXEMPT one, or a new op nobody gave one)
is reported by the model as "no tag rule for <op>" and its results stay untagged, so nothing
about it is silently proven. tests/unit/test_verify_rules.py checks every IR op class is in
RULES or EXEMPT.
"""

from __future__ import annotations

from collections.abc import Iterable

from argus.ir import ops as O
from argus.verify.transfer import (control, elect, memory, mma, ordered, pipeline, scalar, sync,
                                   tags, tiles, tma)
from argus.verify.transfer.domain import Rule


def merge(tables: Iterable[dict[type, Rule]]) -> dict[type, Rule]:
    """One registry from the families' tables; a class given two rules is refused."""
    out: dict[type, Rule] = {}
    for table in tables:
        for cls, rule in table.items():
            if cls in out:
                raise ValueError(f"two transfer rules for {getattr(cls, 'NAME', cls.__name__)}: "
                                 f"{out[cls].__module__}.{out[cls].__qualname__} and "
                                 f"{rule.__module__}.{rule.__qualname__}")
            out[cls] = rule
    return out


RULES: dict[type, Rule] = merge([scalar.RULES, control.RULES, elect.RULES, memory.RULES,
                                 tma.RULES, pipeline.RULES, mma.RULES, tiles.RULES, sync.RULES,
                                 ordered.RULES, tags.RULES])

EXEMPT: dict[type, str] = {
    O.RoleOp: "roles are walked by the model itself (Model._walk_role), from the kernel's top "
              "level, once per role with its warpgroup index as a variable: a role is where a "
              "walk starts, not an op inside one; a role nested in a region gets no rule and is "
              "reported as unsupported",
}

__all__ = ["EXEMPT", "RULES", "Rule", "merge"]
