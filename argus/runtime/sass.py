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


# what the SASS scripts (scripts/sass_*.py) print when have_disassembler() is False
NO_DISASSEMBLER = ("nvdisasm not found (NVDISASM= or PATH; the pip wheel nvidia-cuda-nvdisasm "
                   "has one)")


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


# A register-A wgmma (HGMMA / QGMMA): accumulator, first A register, the B descriptor
_REGISTER_A = re.compile(r"\b([HQ]GMMA)\.64x(\d+)x\d+\.\S+\s+R(\d+),\s*R(\d+),\s*gdesc")
_WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)")
_BRANCH = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?U?P[T0-9]+\s+)?BRA\b.*`\((\.L_x_\d+)\)")
_EXIT = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+EXIT\b")
# SHFL writes a predicate first, then its register (`SHFL.IDX PT, R5, R4, 0x1, 0x1f`)
_SHFL = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?SHFL\.\S+\s+P[T0-9]+,\s*"
                   r"R(\d+)\b")
_DEST = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(\.\S*)?\s+"
                   r"R(\d+)\b")


def _written(line: str) -> range:
    """The general registers an instruction line writes (its first operand; .64 / .WIDE two,
    .128 four, an HGMMA / QGMMA 64xN f32 accumulator N / 2, LDSM's .2 / .4 matrices two /
    four; SHFL's register after its predicate); empty for stores, branches and instructions
    whose first operand is not a register."""
    shfl = _SHFL.match(line)
    if shfl:
        return range(int(shfl.group(1)), int(shfl.group(1)) + 1)
    m = _DEST.match(line)
    if not m or m.group(1).startswith(("ST", "RED", "ATOM", "BRA", "BAR", "SYNCS", "WARPGROUP")):
        return range(0)
    first, mods = int(m.group(3)), m.group(2) or ""
    gmma = re.search(r"[HQ]GMMA\.64x(\d+)", line)
    if gmma:
        return range(first, first + int(gmma.group(1)) // 2)
    if m.group(1) == "LDSM":    # LDSM.16.M88.4 / .MT88.2: one register a matrix
        count = re.search(r"\.(2|4)$", mods)
        return range(first, first + (int(count.group(1)) if count else 1))
    width = 4 if ".128" in mods else 2 if (".64" in mods or ".WIDE" in mods) else 1
    return range(first, first + width)


def register_a_hazards(sass: str, invariant=lambda line: False) -> list[str]:
    """Register-A wgmma (HGMMA / QGMMA with an A register) whose A registers (R, R+1, R+2, R+3)
    the machine code may overwrite while the wgmma can still read them, or, for the ones
    `invariant(line)` names (a fragment defined before the loop: ping-pong attention's Q), that
    a loop body overwrites without restoring before the next issue (commit 9879b96's
    miscompile: S = P K^T from the second KV block on). Returns one line per finding (empty:
    none).

    In flight: from the wgmma's group commit (the HGMMA carrying gsb0) every control-flow path
    (branches both ways, a loop's back edge included) up to the `WARPGROUP.DEPBAR.LE gsb0, N`
    that retires the group (N <= the groups committed after it) must not write them.
    Loop-carried (every register-A wgmma inside a loop): an `invariant` one's registers are
    either not written in the innermost loop around it, or rewritten between the loop head
    and the wgmma; any other's (defined in the loop each iteration, or carried across the back
    edge) must be written somewhere in that loop, else the wgmma would read a stale value."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines)
              for m in [re.match(r"^\s*(\.L_x_\d+):", line)] if m}
    # loops: conditional backward branches (a loop's test). ptxas places the retry of an
    # mbarrier wait out of line, past the exits, and jumps back from it unconditionally: no loop
    loops = [(labels[m.group(2)], i) for i, line in enumerate(lines)
             for m in [_BRANCH.match(line)]
             if m and m.group(1) and labels.get(m.group(2), len(lines)) < i]
    writes = [_written(line) for line in lines]
    bad = []
    for h, line in enumerate(lines):
        m = _REGISTER_A.search(line)
        if not m:
            continue
        regs = set(range(int(m.group(4)), int(m.group(4)) + 4))
        where = f"line {h + 1} ({m.group(1)} A R{m.group(4)})"
        # (line, groups committed after this one's, this one's committed yet)
        seen, todo = set(), [(h + 1, 0, "gsb0" in line)]
        while todo:
            state = todo.pop()
            j, newer, committed = state
            if j >= len(lines) or state in seen:
                continue
            seen.add(state)
            text = lines[j]
            wait = _WAIT.search(text)
            if wait and committed and newer >= int(wait.group(1), 16):
                continue                       # retired
            hit = regs.intersection(writes[j])
            if hit:
                bad.append(f"{where}: R{min(hit)} written at line {j + 1} while in flight")
                break
            if "GMMA" in text and "gsb0" in text and "DEPBAR" not in text:
                newer, committed = (min(newer + 1, 8), True) if committed else (0, True)
            if _EXIT.match(text):
                continue
            branch = _BRANCH.match(text)
            if branch:
                todo.append((labels.get(branch.group(2), len(lines)), newer, committed))
                if branch.group(1) is None:
                    continue                   # unconditional
            todo.append((j + 1, newer, committed))
        around = [(a, b) for a, b in loops if a <= h <= b]
        if not around:
            continue
        head, tail = min(around, key=lambda ab: ab[1] - ab[0])
        for r in sorted(regs):
            after = any(r in writes[j] for j in range(h + 1, tail + 1))
            before = any(r in writes[j] for j in range(head, h))
            if invariant(line) and after and not before:
                bad.append(f"{where}: R{r} overwritten in the loop after it, not restored "
                           "before the next issue")
            if not invariant(line) and not (after or before):
                bad.append(f"{where}: R{r} not written in the loop around it (stale)")
    return bad
