"""Decide whether a solution's work is done by Argus kernels or forwarded to PyTorch.

On a GPU the answer comes from the profiler: the share of the forward's GPU time spent in kernels
whose names start with `argus_` (Argus's code generator guarantees that prefix). Without a GPU
it cannot be measured; the judge then reports "unknown (no GPU)", except that a solution whose
source never imports argus certainly runs no Argus kernel ("no"), and neither does one whose
forward computed everything with PyTorch operators issued outside Argus's code ("no": no Argus
kernel can run on a CPU, so the answer came from PyTorch).

Verdicts: "yes" (>= 90% of GPU time in Argus kernels), "partial" (some), "no" (none, or the
solution never imports argus, or, on the CPU, every compute op came from PyTorch outside
Argus), "unknown (no GPU)".

Invariant: a solution that never imports argus is never reported as running Argus kernels.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARGUS_PREFIX = "argus_"
YES_SHARE = 0.9


@dataclass(frozen=True)
class Provenance:
    verdict: str            # yes | partial | no | unknown (no GPU)
    evidence: str           # one line saying why
    argus_share: float | None = None
    top_kernels: tuple[tuple[str, float], ...] = ()  # (name, microseconds), largest first

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "evidence": self.evidence,
                "argus_share": self.argus_share,
                "top_kernels": [list(k) for k in self.top_kernels]}


def imports_argus(source: str) -> bool:
    """True when the source has `import argus...` or `from argus... import ...` anywhere."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(a.name == "argus" or a.name.startswith("argus.") for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "argus" or node.module.startswith("argus."):
                return True
    return False


def static_verdict(solution_path: Path | None, source: str | None = None) -> Provenance | None:
    """'no' when the solution never imports argus; None when only a GPU run can tell."""
    if source is None and solution_path is not None:
        source = Path(solution_path).read_text()
    if source is None:
        return None
    if not imports_argus(source):
        return Provenance("no", "the solution never imports argus, so no Argus kernel can run")
    return None


def from_kernels(kernels: list[tuple[str, float]]) -> Provenance:
    """Verdict from profiled GPU kernels [(name, microseconds)] of the forward."""
    total = sum(us for _, us in kernels)
    if total <= 0:
        return Provenance("no", "the forward launched no GPU kernel", 0.0)
    argus = sum(us for name, us in kernels if name.startswith(ARGUS_PREFIX))
    share = argus / total
    merged: dict[str, float] = {}
    for name, us in kernels:
        merged[name] = merged.get(name, 0.0) + us
    top = tuple(sorted(merged.items(), key=lambda kv: -kv[1])[:8])
    others = [n for n, _ in top if not n.startswith(ARGUS_PREFIX)]
    if share >= YES_SHARE:
        verdict = "yes"
    elif share > 0:
        verdict = "partial"
    else:
        verdict = "no"
    evidence = f"{share:.0%} of GPU time in argus_* kernels"
    if others:
        evidence += "; other kernels: " + ", ".join(n[:60] for n in others[:3])
    return Provenance(verdict, evidence, share, top)


def without_gpu(torch_ops: dict[str, int], argus_ops: int) -> Provenance:
    """Verdict on a CPU run of a solution that imports argus.

    No Argus kernel can run without a GPU, so when the forward computed its output with
    PyTorch operators none of which was issued from Argus's own code, the work was PyTorch's:
    "no". When Argus code issued operators (an interpreter, say) only a GPU run can tell.
    """
    ops = ", ".join(f"aten::{k}" for k in list(torch_ops)[:5])
    if torch_ops and argus_ops == 0:
        return Provenance("no", f"no GPU here, and every compute op of the forward came from "
                                f"PyTorch outside Argus ({ops})")
    evidence = "no GPU to profile"
    if ops:
        evidence += f"; the forward ran PyTorch compute ops ({ops}), {argus_ops} from Argus code"
    return Provenance("unknown (no GPU)", evidence)
