"""Read the machine code (SASS) of a cubin: disassemble it and check which instructions it uses.

One job: answer "did the tensor-core path really compile to HGMMA, and nothing slower?" for a
Binary. Disassembly needs cuobjdump or nvdisasm from a CUDA toolkit (PATH, CUDA_HOME/bin,
CUDA_PATH/bin, /usr/local/cuda/bin); without one, `disassemble` returns None and callers skip
the check rather than fail. Opcode names follow the SASS listing: HGMMA (wgmma f16/bf16),
QGMMA (wgmma fp8), HMMA (mma.sync, the pre-Hopper path), UTMALDG / UTMASTG (TMA), SYNCS (mbarrier).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from argus.runtime.toolkit import find_tool

# An instruction line of cuobjdump -sass / nvdisasm:  /*0090*/  @!P0 HGMMA.64x256x16.F32.BF16 ...
_INSTRUCTION = re.compile(
    r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Za-z0-9_.]*)?[\s;]",
    re.MULTILINE)


def disassemble(cubin: bytes) -> str | None:
    """SASS text of `cubin`, or None when no disassembler is installed or it fails."""
    if not cubin:
        return None
    tools = [(find_tool("cuobjdump"), ["-sass"]), (find_tool("nvdisasm"), ["-c"])]
    with tempfile.TemporaryDirectory(prefix="argus-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as handle:
            handle.write(cubin)
        for tool, flags in tools:
            if tool is None:
                continue
            try:
                proc = subprocess.run([tool, *flags, path], check=False, capture_output=True,
                                      text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout
    return None


def instruction_histogram(sass: str) -> Counter[str]:
    """Opcode (without modifiers) -> count, e.g. {"HGMMA": 4, "UTMALDG": 2, ...}."""
    return Counter(_INSTRUCTION.findall(sass))


@dataclass(frozen=True)
class SassCheck:
    """Result of `check_sass`: missing wanted opcodes and present forbidden ones."""

    histogram: dict[str, int]
    missing: tuple[str, ...]
    forbidden: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.forbidden

    def __str__(self) -> str:
        if self.ok:
            return "SASS check passed"
        parts = []
        if self.missing:
            parts.append(f"expected but absent: {', '.join(self.missing)}")
        if self.forbidden:
            counts = ", ".join(f"{op} x{self.histogram[op]}" for op in self.forbidden)
            parts.append(f"present but forbidden: {counts}")
        return "SASS check failed: " + "; ".join(parts)


def check_sass(sass: str, want: Iterable[str] = ("HGMMA",),
               forbid: Iterable[str] = ("HMMA",)) -> SassCheck:
    """Check that every opcode in `want` occurs and none in `forbid` does (exact opcode names:
    forbidding HMMA does not forbid HGMMA)."""
    histogram = dict(instruction_histogram(sass))
    missing = tuple(op for op in want if histogram.get(op, 0) == 0)
    present = tuple(op for op in forbid if histogram.get(op, 0) > 0)
    return SassCheck(histogram, missing, present)
