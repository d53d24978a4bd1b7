"""Errors and diagnostics: what went wrong, where (file:line), who (thread, element), how to fix.

Every stage raises `ArgusError` subclasses for misuse and returns `Diagnostic`s for findings
about a kernel (verifier counterexamples, resource problems). A diagnostic is both a readable
message and structured data (`to_json`) that tools such as the agent consume.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Loc:
    """A source location: the user's line that recorded an op (the "program point")."""

    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        short = self.file.rsplit("/", 1)[-1]
        return f"{short}:{self.line}"

    @staticmethod
    def unknown() -> "Loc":
        return Loc("<unknown>", 0)


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a kernel.

    severity: "error" (an invariant is violated), "unknown" (the solver timed out: never a pass),
    "warning", or "note" (a proven invariant, for reports).
    counterexample: decoded witness (thread, warp, lane, register, coordinates, iteration …).
    """

    severity: str
    code: str
    message: str
    loc: Loc = field(default_factory=Loc.unknown)
    kernel: str = ""
    counterexample: dict[str, Any] = field(default_factory=dict)
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.kernel} ({self.loc})" if self.kernel else str(self.loc)
        text = f"{self.severity}: {self.code} in {where}: {self.message}"
        if self.counterexample:
            witness = ", ".join(f"{k}={v}" for k, v in self.counterexample.items())
            text += f"\n  counterexample: {witness}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["loc"] = {"file": self.loc.file, "line": self.loc.line, "function": self.loc.function}
        return json.loads(json.dumps(data, default=str))


class ArgusError(Exception):
    """Base class for errors a user can act on; the message names what, where and how to fix."""

    def __init__(self, message: str, loc: Loc | None = None, fix: str = ""):
        self.loc = loc
        self.fix = fix
        text = f"{loc}: {message}" if loc is not None else message
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)


class TraceError(ArgusError):
    """Misuse of the DSL found while tracing (reported at the user's line)."""


class IRError(ArgusError):
    """A malformed IR kernel (well-formedness check or parser)."""


class CompileError(ArgusError):
    """NVRTC/nvcc rejected generated code, or a resource limit is exceeded."""


class LaunchError(ArgusError):
    """Bad arguments at launch (dtype, shape, device, stride, alignment) or a driver failure."""


class VerificationError(ArgusError):
    """Raised by `ag.compile` when the verifier finds a violated invariant."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics))
