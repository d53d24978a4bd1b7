"""The interpreter's rule table: one executable-semantics rule per IR op class.

Invariant: every op class has at most one rule (a second registration is an error at import
time), and every class of the IR's op table has a rule here or a reason in EXEMPT (checked by
tests/unit/test_interp_rules.py). A rule is `fn(machine, group, op)`: it reads and binds values
in `group.env` and returns None, or, when the op can block (a pipeline step, or a region that
holds one), it is a generator that yields `_Blocked` while it waits. The family modules of this
package register their rules when the package is imported.
"""

from __future__ import annotations

from typing import Callable

from argus.ir.core import Op

RULES: dict[type[Op], Callable] = {}

# op classes with no rule, and why (none today: every IR op has a meaning in the interpreter)
EXEMPT: dict[type, str] = {}


def rule(*classes: type[Op]) -> Callable[[Callable], Callable]:
    """Decorator: register the function as the rule of each of `classes`. Registering a class
    twice raises ValueError and registers none of `classes`."""
    if not classes:
        raise ValueError("rule() needs at least one op class")

    def register(fn: Callable) -> Callable:
        for cls in classes:
            if cls in RULES:
                old = RULES[cls]
                raise ValueError(f"the interpreter already has a rule for {cls.NAME} "
                                 f"({old.__module__}.{old.__qualname__}); "
                                 f"{fn.__module__}.{fn.__qualname__} would replace it")
        for cls in classes:
            RULES[cls] = fn
        return fn
    return register


def lookup(cls: type) -> Callable | None:
    """The rule for op class `cls` (or, for a subclass of a registered class, its base's)."""
    fn = RULES.get(cls)
    if fn is None:
        fn = next((RULES[base] for base in cls.__mro__[1:] if base in RULES), None)
    return fn
