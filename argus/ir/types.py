"""IR types: what a Value is (scalar, global tensor, shared buffer, register tile, pipeline).

Types are frozen dataclasses with a stable text form (`str(t)`) that the printer writes and the
parser reads back (`parse_type`), so a printed kernel round-trips exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from argus import dtypes
from argus.dtypes import DType
from argus.errors import IRError


@dataclass(frozen=True)
class ScalarType:
    """A value uniform across the CTA (or per thread, for thread indices): ints, floats, bools."""

    dtype: DType

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(frozen=True)
class TensorType:
    """A global-memory tensor parameter. `shape` holds symbol names (bound at launch) or ints.

    The innermost dimension is contiguous; outer strides are runtime parameters.
    """

    dtype: DType
    shape: tuple[str | int, ...]

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"tensor<{self.dtype.name}, {dims}>"


@dataclass(frozen=True)
class SmemType:
    """A shared-memory buffer of static shape; `swizzle` is the TMA/wgmma swizzle in bytes
    (0 = none)."""

    dtype: DType
    shape: tuple[int, ...]
    swizzle: int = 0

    @property
    def bytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.dtype.bytes

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"smem<{self.dtype.name}, {dims}, swizzle={self.swizzle}>"


@dataclass(frozen=True)
class SmemViewType:
    """A 2-D window of one stage of a shared buffer (rows x cols), as wgmma and TMA address it."""

    dtype: DType
    shape: tuple[int, int]
    swizzle: int = 0

    def __str__(self) -> str:
        rows, cols = self.shape
        return f"smemview<{self.dtype.name}, {rows}x{cols}, swizzle={self.swizzle}>"


@dataclass(frozen=True)
class TileType:
    """A register tile owned by the executing group (the CTA, or one warpgroup inside a role).

    `layout` names how elements are spread over threads; layout inference fills it in
    ("" = not yet inferred). Names: "blocked", "rowvec" (one value per row, replicated over
    threads), "wgmma_acc" (the m64nNk16 accumulator fragment, INVARIANTS.md §2.1), "wgmma_a",
    and "slice(P,axis,n)" / "expand(P,axis)" / "squeeze(P,axis)" built from them; the grammar
    and the (thread, register) -> element map are argus.target.register_layouts.build.

    `packed`: a bf16/f16 tile whose registers 2w and 2w + 1 are stored in one 32-bit word w
    (low half first), the form wgmma's register A fragment reads, or an e4m3 one stored four
    a word in the 8-bit A fragment's order (word 4kk + r: target/fragments.py
    AccToA8.word(kk, r)); otherwise each element has a float register of its own.
    lower/packed.py decides it (for a loop-carried A fragment, whose float form costs two or
    four times the registers across the back edge); the layout, and so the
    (thread, register) -> element map, is the same either way.
    """

    dtype: DType
    shape: tuple[int, ...]
    layout: str = ""
    packed: bool = False

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        suffix = f", {self.layout}" if self.layout else ""
        return f"tile<{self.dtype.name}, {dims}{suffix}{', packed' if self.packed else ''}>"


@dataclass(frozen=True)
class PipeType:
    """An S-stage producer/consumer ring of mbarriers; the compiler derives parity and stage."""

    stages: int

    def __str__(self) -> str:
        return f"pipe<{self.stages}>"


Type = ScalarType | TensorType | SmemType | SmemViewType | TileType | PipeType

_DIMS = r"([A-Za-z0-9_]+(?:x[A-Za-z0-9_]+)*)"


def _dims(text: str) -> tuple:
    out: list[str | int] = []
    for part in text.split("x"):
        out.append(int(part) if part.isdigit() else part)
    return tuple(out)


def parse_type(text: str) -> Type:
    """Inverse of `str(type)`."""
    text = text.strip()
    if text in dtypes.ALL:
        return ScalarType(dtypes.from_name(text))
    m = re.fullmatch(r"tensor<(\w+), " + _DIMS + r">", text)
    if m:
        return TensorType(dtypes.from_name(m[1]), _dims(m[2]))
    m = re.fullmatch(r"smem<(\w+), " + _DIMS + r", swizzle=(\d+)>", text)
    if m:
        return SmemType(dtypes.from_name(m[1]), tuple(int(d) for d in _dims(m[2])), int(m[3]))
    m = re.fullmatch(r"smemview<(\w+), (\d+)x(\d+), swizzle=(\d+)>", text)
    if m:
        return SmemViewType(dtypes.from_name(m[1]), (int(m[2]), int(m[3])), int(m[4]))
    m = re.fullmatch(r"tile<(\w+), " + _DIMS + r"(?:, (?!packed>)([\w(),]+?))?(, packed)?>", text)
    if m:
        return TileType(dtypes.from_name(m[1]), tuple(int(d) for d in _dims(m[2])), m[3] or "",
                        packed=bool(m[4]))
    m = re.fullmatch(r"pipe<(\d+)>", text)
    if m:
        return PipeType(int(m[1]))
    raise IRError(f"cannot parse type {text!r}")
