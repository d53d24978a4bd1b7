"""Launch preconditions a kernel states (`ag.require`, the `require` op of ir/tag_ops.py),
checked on the host from the actual scalar values before a launch runs.

Job: the verifier takes a stated precondition as a premise (e.g. the folded softmax scale's
`qk_scale > 0`, check_softmax.py), so it must be true of every launch: the compiled launch
(`CompiledKernel.prepare` and `build_for`) and the interpreter (`interp.run`) call `check`,
which raises LaunchError naming the kernel, the condition, the values and the reason.

Invariant kept: the check costs next to nothing. Each kernel's predicates are parsed once
(cached per kernel object) into (parameter names, AST) pairs and evaluated on the actual
values read as the verifier reads them (exact z3 constants: `_holds`); a compiled launch checks only when it prepares a plan, and its plans are keyed by
the runtime scalar values (compiled.py `_signature`), so a cached plan exists only for values
that passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from argus.errors import LaunchError
from argus.ir import tag_ops as T
from argus.ir.core import Kernel


@dataclass(frozen=True)
class Precondition:
    expr: str               # as stated, over $0, $1, ... (ir/tag_ops.Require)
    names: tuple[str, ...]  # the parameter each operand is
    floats: tuple[bool, ...]  # whether each operand is a float parameter (a Real to the verifier)
    wide: tuple[bool, ...]    # whether that float is an f64 (else launched as a float32)
    why: str
    node: Any               # the parsed expression (argus.verify.exprs)
    loc: Any = None         # where the kernel states it

    def text(self) -> str:
        """The condition with parameter names for $i: `qk_scale > 0`."""
        out = self.expr
        for i in reversed(range(len(self.names))):   # $10 before $1
            out = out.replace(f"${i}", self.names[i])
        return out[1:-1] if _one_group(out) else out


def _one_group(text: str) -> bool:
    """Whether `text` is one parenthesized group, `(a && b)` (not `(a) && (b)`)."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(text) - 1:
            return False
    return True


_CACHE: dict[int, tuple[Kernel, tuple[Precondition, ...]]] = {}
_CACHE_SIZE = 256


def of_kernel(kernel: Kernel) -> tuple[Precondition, ...]:
    """The kernel's stated preconditions, parsed (cached per kernel object)."""
    hit = _CACHE.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    found = _parse(kernel)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(kernel)] = (kernel, found)
    return found


def _parse(kernel: Kernel) -> tuple[Precondition, ...]:
    ops = [op for op in kernel.body.ops if isinstance(op, T.Require)]
    if not ops:
        return ()
    from argus.verify import exprs

    params = {p.value.id: p.name for p in kernel.params}
    return tuple(Precondition(op.expr, tuple(params[a.id] for a in op.args),
                              tuple(bool(a.type.dtype.is_float) for a in op.args),
                              tuple(a.type.dtype.name == "f64" for a in op.args), op.why,
                              exprs.parse(op.expr), op.loc) for op in ops)


def _exact(value: Any, is_float: bool, wide: bool = False):
    """The value as the verifier's term sort reads it (a z3 Real for a float parameter, a z3
    Int for an integer one), or None where it has no such reading: NaN and +-inf are no
    reals, and a fraction passed for an integer parameter is not the integer launched. A float
    is read as launched: the driver passes a Python float as a float32 (driver.py) and the
    interpreter computes with np.float32 (interp/launch.py), so 1e-50 is the 0 the kernel sees
    and 1e39 its inf."""
    import z3

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = value.item()          # a numpy / torch scalar
        except AttributeError:
            return None
    if is_float:
        with np.errstate(over="ignore"):     # 1e39 is inf as a float32: refused below
            value = float(value) if wide else float(np.float32(value))
        return z3.RealVal(Fraction(value)) if math.isfinite(value) else None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return z3.IntVal(int(value))


def _holds(pre: Precondition, got: tuple) -> bool:
    """Whether the precondition holds for these values, with the verifier's meaning: z3
    evaluates it on exact constants of the sorts the verifier gives the parameters (model.py,
    verify/requires.py required_positive), so `/` floors, a float is a real number, and a value
    with no such reading (NaN, inf, a fraction for an int) does not satisfy it. (Python's own
    arithmetic differs: `/` truncated, NaN satisfies `!(c <= 0)`.)"""
    import z3

    from argus.verify import exprs

    terms = tuple(_exact(v, f, w) for v, f, w in zip(got, pre.floats, pre.wide))
    if any(t is None for t in terms):
        return False
    try:
        value = z3.simplify(exprs._as_bool(exprs.evaluate(pre.node, exprs.Env({}, terms))))
    except (exprs.ExprError, z3.Z3Exception):
        return False
    return z3.is_true(value)


def check(kernel: Kernel, values: dict[str, Any]) -> None:
    """Raise LaunchError unless every stated precondition holds for these scalar values
    (runtime scalars and shape symbols by name)."""
    pres = of_kernel(kernel)
    if not pres:
        return
    for pre in pres:
        got = tuple(values[n] for n in pre.names)
        if not _holds(pre, got):
            shown = ", ".join(f"{n} = {v!r}" for n, v in zip(pre.names, got))
            raise LaunchError(
                f"kernel {kernel.name}: launch precondition {pre.text()} does not hold "
                f"({shown}): {pre.why}", pre.loc,
                fix=f"launch it only with {pre.text()}")
