"""Launch preconditions a kernel states (`ag.require`, the `require` op of ir/tag_ops.py),
checked on the host from the actual scalar values before a launch runs.

Job: the verifier takes a stated precondition as a premise (e.g. the folded softmax scale's
`qk_scale > 0`, check_softmax.py), so it must be true of every launch: the compiled launch
(`CompiledKernel.prepare` and `build_for`) and the interpreter (`interp.run`) call `check`,
which raises LaunchError naming the kernel, the condition, the values and the reason.

Invariant kept: the check costs next to nothing. Each kernel's predicates are parsed once
(cached per kernel object) into (parameter names, AST) pairs and evaluated on the Python
scalars; a compiled launch checks only when it prepares a plan, and its plans are keyed by
the runtime scalar values (compiled.py `_signature`), so a cached plan exists only for values
that passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from argus.errors import LaunchError
from argus.ir import tag_ops as T
from argus.ir.core import Kernel


@dataclass(frozen=True)
class Precondition:
    expr: str               # as stated, over $0, $1, ... (ir/tag_ops.Require)
    names: tuple[str, ...]  # the parameter each operand is
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
    return tuple(Precondition(op.expr, tuple(params[a.id] for a in op.args), op.why,
                              exprs.parse(op.expr), op.loc) for op in ops)


def check(kernel: Kernel, values: dict[str, Any]) -> None:
    """Raise LaunchError unless every stated precondition holds for these scalar values
    (runtime scalars and shape symbols by name)."""
    pres = of_kernel(kernel)
    if not pres:
        return
    from argus.verify import exprs

    for pre in pres:
        got = tuple(values[n] for n in pre.names)
        if not exprs.evaluate(pre.node, exprs.Env({}, got)):
            shown = ", ".join(f"{n} = {v!r}" for n, v in zip(pre.names, got))
            raise LaunchError(
                f"kernel {kernel.name}: launch precondition {pre.text()} does not hold "
                f"({shown}): {pre.why}", pre.loc,
                fix=f"launch it only with {pre.text()}")
