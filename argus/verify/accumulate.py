"""Elementwise accumulators carried across a loop: `acc = combine(acc, t)` each iteration.

Job: recognize the loops that reduce elementwise and leave the reduction along an axis to
after the loop (argus/compose's templates: `acc = ag.maximum(acc, x)` over the column blocks,
then `acc.max(axis=1)`; `acc = acc + x`, then `acc.sum(axis=1)`). Element e of such an
accumulator combines t[e] of every iteration, so a reduction of it along an axis is one
reduction over (loop iterations x the tile's positions along that axis): reduce.coverage
(check_reduce `_accumulated`) asks that union to be the row, once each, and fill.identity
(check_fills) that the masked lanes of t hold the combine's identity, which no later join can
tell once the loop is summarized (1.0 added every iteration is 1.0, 2.0, ...: unknown).

An accumulation is recognized only in this form, so that "element e combines t[e] of every
iteration" holds (anything else is not one, and nothing is claimed of it):
  * `acc` is a `var` defined in the region that holds the loop, assigned exactly once in the
    whole kernel, at the top level of the loop's body (every iteration, not under an `if`);
  * the value assigned is `combine(a, t)` (either order) with combine add, max or min, both
    operands tiles, `a` the variable itself or, for add only, the variable times a factor
    (`acc * alpha + p`: online softmax's rescale, which weighs what was accumulated, not
    which elements were);
  * `t` does not read the variable (`acc + acc` is no accumulation of a block).
"""

from __future__ import annotations

from dataclasses import dataclass

from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.types import TileType
from argus.verify.model import Model

# the elementwise combine of each reduction, and back
COMBINE_OF = {"sum": "add", "max": "max", "min": "min"}
REDUCTION_OF = {v: k for k, v in COMBINE_OF.items()}


@dataclass(frozen=True)
class Accumulation:
    """`var = combine(var..., part)` at the top level of `loop`'s body."""

    var: O.Var               # the accumulator's definition (before the loop)
    loop: O.For
    combine: O.Elementwise   # the op whose result is assigned to the variable
    part: object             # the Value accumulated each iteration (t)

    @property
    def reduction(self) -> str:
        """The reduction the accumulation is (sum, max, min)."""
        return REDUCTION_OF[self.combine.fn]


def accumulations(model: Model) -> list[Accumulation]:
    defs = model.value_defs()
    assigned = model.assigned_sources()
    out: list[Accumulation] = []

    def region(r: Region) -> None:
        here = {op.result.id: op for op in r.ops if isinstance(op, O.Var)}
        for op in r.ops:
            if isinstance(op, O.For):
                for a in op.body.ops:
                    if isinstance(a, O.Assign) and a.dst.id in here and \
                            len(assigned.get(a.dst.id, ())) == 1:
                        got = _combine(model, a.src, a.dst)
                        if got is not None:
                            out.append(Accumulation(here[a.dst.id], op, *got))
            for inner in op.regions():
                region(inner)
    region(model.kernel.body)
    return out


def _combine(model: Model, src, var) -> tuple | None:
    """(the combine op, the part) when `src` is combine(var..., part), else None."""
    defs = model.value_defs()
    op = defs.get(src.id)
    if not isinstance(op, O.Elementwise) or op.fn not in REDUCTION_OF or len(op.args) != 2 \
            or not all(isinstance(a.type, TileType) for a in op.args):
        return None
    for k, a in enumerate(op.args):
        part = op.args[1 - k]
        if _is_var(defs, a, var, rescaled=op.fn == "add") and not _reads(model, part, var):
            return op, part
    return None


def _is_var(defs: dict, v, var, rescaled: bool) -> bool:
    if v.id == var.id:
        return True
    op = defs.get(v.id)
    return rescaled and isinstance(op, O.Elementwise) and op.fn == "mul" and \
        len(op.args) == 2 and sum(a.id == var.id for a in op.args) == 1


def _reads(model: Model, v, var, limit: int = 64) -> bool:
    """Whether value v is computed from the variable (a walk of its definitions, not through
    another variable; past `limit` values it is taken to, which only drops the
    accumulation)."""
    for n, (x, _) in enumerate(model.walk_defs(v, _operands_but_vars), 1):
        if x.id == var.id or n > limit:
            return True
    return False


def _operands_but_vars(_value, op) -> list:
    """A walk_defs follow: every operand of the defining op, none past a `var`."""
    if op is None or isinstance(op, O.Var):
        return []
    return [o for o in op.operands() if hasattr(o, "id")]
