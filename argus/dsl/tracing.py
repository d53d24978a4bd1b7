"""The trace context: which kernel is being traced, the IR builder, and the user's source line.

Every DSL call asks `current()` for the context; outside an `@ag.kernel` function that is a
TraceError at the user's line. `user_loc()` finds the first stack frame outside the DSL and IR
packages: that line becomes the op's program point in counterexamples and errors.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from argus.errors import Loc, TraceError
from argus.ir.builder import Builder

_INTERNAL_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
    for d in ("dsl", "ir")
)


# code file name -> its absolute path, or None for a DSL/IR/contextlib file (every DSL call
# asks, walking a few frames each: os.path.abspath per frame was a tenth of tracing)
_USER_FILE: dict[str, str | None] = {}


def _user_file(co_filename: str) -> str | None:
    out = _USER_FILE.get(co_filename, "")
    if out == "":
        filename = os.path.abspath(co_filename)
        internal = filename.startswith(_INTERNAL_DIRS) or "contextlib" in filename
        out = _USER_FILE[co_filename] = None if internal else filename
    return out


def user_loc() -> Loc:
    frame = sys._getframe(1)
    while frame is not None:
        filename = _user_file(frame.f_code.co_filename)
        if filename is not None:
            return Loc(filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return Loc.unknown()


@dataclass
class TraceContext:
    """State of one trace. `threads` is the CTA size; inside a role, `group_threads` is 128."""

    kernel_name: str
    builder: Builder = field(default_factory=Builder)
    threads: int = 128
    group_threads: int = 128
    in_role: str | None = None
    nonuniform_guards: int = 0  # open `ag.when` blocks whose condition varies per thread
    open_pipeline_steps: int = 0
    grid_declared: bool = False
    roles_seen: list[str] = field(default_factory=list)
    any_role: bool = False
    cluster: tuple[int, int, int] = (1, 1, 1)
    role_warpgroups: int = 0            # warpgroups of the role being traced (0: none)
    ordered_open: str | None = None     # the ordered section being traced (ag.ordered)
    ordered_names: set[str] = field(default_factory=set)  # sections of the current role
    # the open pipeline steps, innermost last: (consume step?, pipeline value id)
    open_steps: list[tuple[bool, int]] = field(default_factory=list)
    # the current role's pipelines with an ordered section inside one of their consume steps
    # (pipe id -> section name), and the pipelines whose steps it skips (pipe.skip): the two
    # exclude each other (ag.ordered)
    sections_in_steps: dict[int, str] = field(default_factory=dict)
    skipped_pipes: set[int] = field(default_factory=set)
    param_ids: frozenset[int] = frozenset()   # the kernel's parameters' value ids (ag.require)
    min_ctas_per_sm: int | None = None        # the occupancy hint (ag.occupancy)


_STACK: list[TraceContext] = []


def current(what: str = "this Argus operation") -> TraceContext:
    if not _STACK:
        raise TraceError(f"{what} was called outside an @ag.kernel function", user_loc(),
                         fix="call DSL operations only inside a function decorated with "
                             "@ag.kernel, and launch or trace that kernel")
    return _STACK[-1]


def push(ctx: TraceContext) -> None:
    _STACK.append(ctx)


def pop() -> None:
    _STACK.pop()
