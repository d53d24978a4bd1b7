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


_DISASSEMBLERS = {"cuobjdump": ["-sass"], "nvdisasm": ["-c"]}


def _disassemble(cubin: bytes, prefer: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """(SASS text or None, why each tool tried gave none), the tools in `prefer`'s order."""
    if not cubin:
        return None, ["the binary holds no cubin"]
    why = []
    with tempfile.TemporaryDirectory(prefix="argus-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as handle:
            handle.write(cubin)
        for name in prefer:
            tool = find_tool(name)
            if tool is None:
                why.append(f"{name}: not found")
                continue
            try:
                proc = subprocess.run([tool, *_DISASSEMBLERS[name], path], check=False,
                                      capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as e:
                why.append(f"{tool}: {e}")
                continue
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout, why
            why.append(f"{tool}: exit {proc.returncode} {proc.stderr.strip()[:200]}")
    return None, why


def disassemble(cubin: bytes) -> str | None:
    """SASS text of `cubin`, or None when no disassembler is installed or it fails (callers
    that skip a check without one; `sass_text` raises instead)."""
    return _disassemble(cubin, ("cuobjdump", "nvdisasm"))[0]


def sass_text(cubin: bytes, prefer: tuple[str, ...] = ("nvdisasm", "cuobjdump")) -> str:
    """SASS text of `cubin` for tools that cannot go on without it (the scripts/sass_*.py
    reports): RuntimeError naming each disassembler tried and why it gave nothing. nvdisasm
    first by default: its listing names branch targets by label, which those reports read."""
    text, why = _disassemble(cubin, prefer)
    if text is None:
        raise RuntimeError("no SASS: " + "; ".join(why) + " (fix: put nvdisasm on PATH or "
                           "set NVDISASM=/path/to/nvdisasm; the pip wheel "
                           "nvidia-cuda-nvdisasm has one)")
    return text


def have_disassembler() -> bool:
    """Whether nvdisasm or cuobjdump is found (find_tool: NVDISASM= / CUOBJDUMP=, PATH, CUDA)."""
    return any(find_tool(name) for name in _DISASSEMBLERS)


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


def k_loop(sass: str, opcode: str = "QGMMA", also: tuple[str, ...] = ()) -> list[str]:
    """The SASS lines of the innermost loop that holds an `opcode` instruction (a GEMM's K
    loop): the shortest span from a label to a backward branch to it with such an instruction
    inside, and a line containing each text of `also` (e.g. "MUFU.EX2": attention's KV loop,
    where the shortest loop around a wgmma alone can be the epilogue's). ValueError when no
    loop holds them (e.g. a kernel with one K step)."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines)
              for m in [re.match(r"^\s*(\.L_x_\d+):", line)] if m}
    hits = [i for i, line in enumerate(lines) if re.search(rf"\b{opcode}\b", line)]
    loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             for m in [re.search(r"BRA `\((\.L_x_\d+)\)", line)]
             if m and labels.get(m.group(1), len(lines)) < i]
    around = [(b - a, a, b) for a, b in loops if any(a < h < b for h in hits)
              and all(any(text in x for x in lines[a:b]) for text in also)]
    if not around:
        raise ValueError(f"no loop around an {opcode} instruction"
                         + "".join(f" and a {text}" for text in also) + " in the SASS")
    _, first, last = min(around)
    return lines[first:last + 1]


# Opcode -> class for k_loop_classes; an opcode not listed is its own class. The integer
# classes are what address, index and predicate arithmetic compiles to.
_CLASSES = {
    **dict.fromkeys(("LDG",), "LDG"),
    **dict.fromkeys(("LDS", "LDSM"), "LDS"),
    **dict.fromkeys(("LDC", "ULDC"), "LDC"),
    **dict.fromkeys(("LDL", "STL"), "LDL/STL"),
    **dict.fromkeys(("IMAD", "IADD3", "LEA", "LOP3", "SHF", "ISETP", "SEL", "IABS", "IMNMX",
                     "VIADD", "PRMT", "PLOP3", "P2R", "R2P", "FLO", "POPC", "SGXT", "BMSK",
                     "LEA.HI"), "integer"),
    **dict.fromkeys(("R2UR", "S2UR"), "to uniform"),
    **dict.fromkeys(("MOV", "S2R", "CS2R"), "move"),
    **dict.fromkeys(("SYNCS", "WARPGROUP", "BAR", "DEPBAR", "WARPSYNC", "MEMBAR", "FENCE"),
                    "sync"),
    **dict.fromkeys(("BRA", "BSSY", "BSYNC", "NOP"), "branch"),
    **dict.fromkeys(("FMUL", "FADD", "FSEL", "FSETP", "FMNMX"), "float other"),
}


def k_loop_classes(loop: Iterable[str]) -> Counter[str]:
    """Instruction counts of SASS lines (e.g. `k_loop`'s) by class: FFMA, QGMMA, HGMMA, LDG,
    LDS, LDC, LDL/STL, integer, uniform (U* opcodes), to uniform (R2UR/S2UR), move, sync,
    branch, float other, else the opcode itself."""
    out: Counter[str] = Counter()
    for op in _INSTRUCTION.findall("\n".join(loop) + "\n"):
        cls = _CLASSES.get(op)
        if cls is None:
            cls = "uniform" if op.startswith("U") and op not in ("UTMALDG", "UTMASTG") else op
        out[cls] += 1
    return out
