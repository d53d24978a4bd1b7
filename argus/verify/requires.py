"""What a kernel's `ag.require` preconditions imply about its scalar parameters (checked on the
host before every launch, argus/runtime/preconditions.py), for the checks that rely on them:
check_softmax's folded scale and the value transfer's signs (transfer/values.py). A module of
its own below both, so that neither imports the other."""

from __future__ import annotations

import z3

from argus.ir import tag_ops as T
from argus.ir.core import Kernel
from argus.ir.types import ScalarType
from argus.verify import exprs
from argus.verify import solver as z3solver


def required_positive(kernel: Kernel, c):
    """The kernel's `require` (ag.require) whose conditions together imply c > 0 for the
    scalar parameter c, or None. Decided by z3 over the parameters' own sorts (a float is a
    Real: `c > -1 and c != 0` does not imply c > 0 for a float), so only a true implication
    counts."""
    if not isinstance(c.type, ScalarType) or all(p.value.id != c.id for p in kernel.params):
        return None
    stated = [op for op in kernel.body.ops if isinstance(op, T.Require)]
    if not any(a.id == c.id for op in stated for a in op.args):
        return None
    terms: dict[int, z3.ArithRef] = {}

    def term(v):
        if v.id not in terms:
            sort = z3.Real if v.type.dtype.is_float else z3.Int
            terms[v.id] = sort(f"p{v.id}")
        return terms[v.id]

    # a resource limit, not a wall-clock timeout: the verdict must not depend on load
    solver = z3solver.limited(z3.Solver(), z3solver.rlimit_of(2000))
    try:
        for op in stated:
            solver.add(exprs._as_bool(exprs.evaluate(
                op.expr, exprs.Env({}, tuple(term(a) for a in op.args)))))
    except exprs.ExprError:
        return None
    solver.add(term(c) <= 0)
    if solver.check() != z3.unsat:
        return None
    return next(op for op in stated if any(a.id == c.id for a in op.args))
