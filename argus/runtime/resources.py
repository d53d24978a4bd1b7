"""Per-kernel resource usage (registers, spills, stack, static shared memory) parsed from the
`ptxas -v` report that NVRTC and nvcc print.

One job: turn ptxas text into `KernelResources` records. The parser keys everything by the
symbol ptxas names (the lowered / mangled kernel name); compile.py maps symbols back to the
names the caller asked for. Spills are the signal that matters most on Hopper: a consumer
warpgroup that spills its accumulators loses most of its speed (HOPPER.md §2).
"""

from __future__ import annotations

import re
import struct
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


# Attributes of the CUDA ELF's .nv.info sections (the EIATTR_* codes cuobjdump names): the
# global section keys them by symbol index, a function's own section (.nv.info.<symbol>) holds
# its barrier count
_EIATTR_FRAME_SIZE, _EIATTR_REGCOUNT, _EIATTR_NUM_BARRIERS = 0x11, 0x2F, 0x4C
_EIFMT_SVAL = 0x04          # a record with a 16-bit size and that many bytes; others are 4 bytes


def cubin_resources(cubin: bytes, name: str, symbol: str) -> KernelResources | None:
    """What the cubin itself records about entry `symbol`, for a binary whose compiler log
    lacks its ptxas report: registers and stack frame (the global .nv.info's EIATTR_REGCOUNT
    and EIATTR_FRAME_SIZE of the symbol) and barriers (EIATTR_NUM_BARRIERS of .nv.info.<symbol>).
    The cubin does not record spill bytes, but spills live in the stack frame, so a frame of 0
    proves there are none; with a frame, or anything unreadable, the answer is None (unknown).
    smem_static and cmem0 are left 0 (not read)."""
    try:
        sections, symbols = _elf(cubin)
        index = symbols.index(symbol)
        regs = frame = None
        for attr, value in _nv_info(cubin, sections.get(".nv.info")):
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(value) == 8:
                sym, number = struct.unpack("<II", value)
                if sym == index and attr == _EIATTR_REGCOUNT:
                    regs = number
                elif sym == index:
                    frame = number
        barriers = 0
        for attr, value in _nv_info(cubin, sections.get(f".nv.info.{symbol}")):
            if attr == _EIATTR_NUM_BARRIERS:
                barriers = value[0]
    except (struct.error, ValueError, IndexError, KeyError):
        return None
    if regs is None or frame != 0:
        return None
    return KernelResources(name=name, symbol=symbol, registers=regs, stack_frame=0,
                           barriers=barriers)


def _elf(cubin: bytes) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """(section name -> (offset, size), symbol names by index) of a 64-bit little-endian ELF."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_at = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize)
               for i in range(count)]

    def string(table: int, at: int) -> str:
        start = headers[table][4] + at
        return cubin[start:cubin.index(b"\0", start)].decode()

    sections = {string(names_at, h[0]): (h[4], h[5]) for h in headers}
    symbols: list[str] = []
    for h in headers:
        if h[1] == 2:                                  # SHT_SYMTAB, its names in section h[6]
            for at in range(h[4], h[4] + h[5], 24):    # Elf64_Sym: 24 bytes, st_name first
                symbols.append(string(h[6], struct.unpack_from("<I", cubin, at)[0]))
    return sections, symbols


def _nv_info(cubin: bytes, section: tuple[int, int] | None):
    """(attribute, value bytes) of each record of an .nv.info section."""
    if section is None:
        return
    at, end = section[0], section[0] + section[1]
    while at + 4 <= end:
        fmt, attr = cubin[at], cubin[at + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", cubin, at + 2)
            yield attr, cubin[at + 4:at + 4 + size]
            at += 4 + size
        else:
            yield attr, cubin[at + 2:at + 4]
            at += 4
