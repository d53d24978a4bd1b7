"""Per-kernel resource usage (registers, spills, stack, static shared memory) parsed from the
`ptxas -v` report that NVRTC and nvcc print.

One job: turn ptxas text into `KernelResources` records. The parser keys everything by the
symbol ptxas names (the lowered / mangled kernel name); compile.py maps symbols back to the
names the caller asked for. Spills are the signal that matters most on Hopper: a consumer
warpgroup that spills its accumulators loses most of its speed (HOPPER.md §2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel entry. Byte counts are per thread except smem."""

    name: str
    symbol: str
    registers: int
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    smem_static: int = 0
    barriers: int = 0
    cmem0: int = 0

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def summary(self) -> str:
        return (f"{self.name}: {self.registers} registers, {self.spill_stores} B spill stores, "
                f"{self.spill_loads} B spill loads, {self.stack_frame} B stack, "
                f"{self.smem_static} B static smem, {self.barriers} barriers")


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(.*)$")
_ITEMS = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem_static": re.compile(r"(\d+) bytes smem"),
    "cmem0": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def parse_ptxas_log(log: str) -> dict[str, dict[str, int]]:
    """Map symbol -> {registers, spill_stores, spill_loads, stack_frame, smem_static, barriers,
    cmem0} for every entry function ptxas compiled. Unknown lines are ignored.

    Handles both the NVRTC layout (`ptxas         .     0 bytes stack frame, ...`) and the nvcc
    layout (`    0 bytes stack frame, ...`), and "Function properties" blocks of non-entry
    device functions (their frame is recorded under their own symbol only).
    """
    found: dict[str, dict[str, int]] = {}
    entry: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1)
            found.setdefault(entry, {})
            continue
        if m := _PROPS.search(line):
            props_for = m.group(1)
            continue
        if m := _FRAME.search(line):
            if props_for is not None:
                stats = found.setdefault(props_for, {})
                stats["stack_frame"] = int(m.group(1))
                stats["spill_stores"] = int(m.group(2))
                stats["spill_loads"] = int(m.group(3))
            continue
        if (m := _USED.search(line)) and entry is not None:
            stats = found.setdefault(entry, {})
            stats["registers"] = int(m.group(1))
            for key, pattern in _ITEMS.items():
                if item := pattern.search(m.group(2)):
                    stats[key] = int(item.group(1))
    # Only entry functions have a "Used N registers" line; drop device-function-only records.
    return {sym: stats for sym, stats in found.items() if "registers" in stats}


def kernel_resources(log: str, symbols: dict[str, str]) -> tuple[KernelResources, ...]:
    """KernelResources for each (name -> symbol) pair that ptxas reported."""
    parsed = parse_ptxas_log(log)
    out = []
    for name, symbol in symbols.items():
        stats = parsed.get(symbol)
        if stats is not None:
            out.append(KernelResources(name=name, symbol=symbol, **stats))
    return tuple(out)
