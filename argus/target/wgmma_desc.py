"""wgmma shared-memory matrix descriptors: the 64-bit encoding and the byte each element is
read from.

Job: INVARIANTS.md §2.2 (PTX ISA §9.7.15.5.1.2 "Shared Memory Matrix Layout" and
§9.7.15.5.1.2.2 "Matrix Descriptor Format"; CUTLASS `cute/arch/mma_sm90_desc.hpp`).

Descriptor bits: 0-13 start address, 16-29 leading-dimension byte offset (LBO), 32-45 stride-
dimension byte offset (SBO), each encoded (x & 0x3FFFF) >> 4; 49-51 base offset; 62-63 swizzle
with 0 none, 1 = 128B, 2 = 64B, 3 = 32B, the REVERSE of the TMA enum (CU_TENSOR_MAP_SWIZZLE_128B
= 3), a classic trap.

Canonical layouts, in elements, T = 16 / elem_bytes elements per 16 bytes, c = swizzle/16:

    K-major,  none    ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
    K-major,  swizzle ((8,m),(T,2k)) : ((cT,SBO),(1,T))     LBO unused
    MN-major, none    ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
    MN-major, swizzle ((T,c,m),(8,k)) : ((1,T,LBO),(cT,SBO))

then the byte swizzle Sw<log2 c,4,3> of the ABSOLUTE address. `wgmma_smem_addr` is that
formula, written with `argus.layout.arith` for ints, numpy arrays and z3 bit-vectors.

Invariant kept: only the validated regime is modelled: base_offset = 0 and a start address
inside the first 128-byte row of a period-aligned swizzle pattern (`wgmma_start_is_anchored`),
which is what CUTLASS and DeepGEMM do (1024-B aligned stage buffers, k-steps that move the start
by 32 B inside a row). There the absolute-address swizzle and a pattern anchored at the buffer
agree. A non-zero base offset, or a mid-pattern start, has an unvalidated hardware meaning
(INVARIANTS.md §3.8): concrete values raise; for symbolic starts the caller must assume
`wgmma_start_is_anchored(start, swizzle_bytes)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from argus.layout import arith
from argus.layout.shape_stride import Layout
from argus.layout.swizzle import ComposedLayout, Swizzle
from argus.target import limits
from argus.target.tma import SWIZZLE_MODES, SWIZZLE_PERIOD, smem_swizzle

# swizzle bytes -> descriptor bits 62-63 (PTX ISA §9.7.15.5.1.2.2)
WGMMA_SWIZZLE_FIELD = {0: 0, 128: 1, 64: 2, 32: 3}
_FIELD_TO_BYTES = {v: k for k, v in WGMMA_SWIZZLE_FIELD.items()}
_ADDR_MASK = 0x3FFFF   # matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4
MAJORS = ("K", "MN")


def _encode_field(x: int, what: str) -> int:
    if x < 0 or x > _ADDR_MASK:
        raise ValueError(f"wgmma descriptor: {what} = {x:#x} does not fit 18 bits (shared "
                         "addresses and offsets are < 256 KiB)")
    if x % limits.WGMMA_SMEM_ADDR_ALIGN:
        raise ValueError(f"wgmma descriptor: {what} = {x:#x} is not 16-byte aligned "
                         "(PTX ISA §9.7.15.5.1.2.2); fix: align the buffer/stride to 16 B")
    return (x & _ADDR_MASK) >> 4


@dataclass(frozen=True)
class WgmmaDesc:
    """The fields of a wgmma matrix descriptor, in bytes (start address in the CTA's shared
    window, LBO, SBO), the swizzle in bytes (0/32/64/128) and the 3-bit base offset."""

    start_addr: int
    lbo: int
    sbo: int
    swizzle_bytes: int = 0
    base_offset: int = 0

    def __post_init__(self) -> None:
        if self.swizzle_bytes not in WGMMA_SWIZZLE_FIELD:
            raise ValueError(f"wgmma descriptor: swizzle {self.swizzle_bytes} B is not 0, 32, "
                             "64 or 128")
        if not 0 <= self.base_offset < 8:
            raise ValueError(f"wgmma descriptor: base offset {self.base_offset} is not 3 bits")
        for what in ("start_addr", "lbo", "sbo"):
            _encode_field(getattr(self, what), what)

    def encode(self) -> int:
        return encode_wgmma_desc(self.start_addr, self.lbo, self.sbo, self.swizzle_bytes,
                                 self.base_offset)

    @staticmethod
    def decode(desc: int) -> WgmmaDesc:
        return decode_wgmma_desc(desc)

    def addr(self, mn: Any, k: Any, elem_bytes: int, major: str = "K") -> Any:
        """`wgmma_smem_addr` with this descriptor's fields."""
        return wgmma_smem_addr(mn, k, start=self.start_addr, lbo=self.lbo, sbo=self.sbo,
                               swizzle_bytes=self.swizzle_bytes, elem_bytes=elem_bytes,
                               major=major, base_offset=self.base_offset)


def encode_wgmma_desc(start_addr: int, lbo: int, sbo: int, swizzle_bytes: int,
                      base_offset: int = 0) -> int:
    """The 64-bit descriptor value (see the module docstring for the bit fields)."""
    if swizzle_bytes not in WGMMA_SWIZZLE_FIELD:
        raise ValueError(f"wgmma descriptor: swizzle {swizzle_bytes} B is not 0, 32, 64 or 128")
    if not 0 <= base_offset < 8:
        raise ValueError(f"wgmma descriptor: base offset {base_offset} is not 3 bits")
    return (_encode_field(start_addr, "start address")
            | _encode_field(lbo, "LBO") << 16
            | _encode_field(sbo, "SBO") << 32
            | base_offset << 49
            | WGMMA_SWIZZLE_FIELD[swizzle_bytes] << 62)


def decode_wgmma_desc(desc: int) -> WgmmaDesc:
    """Fields of a 64-bit descriptor; raises ValueError when a reserved bit is set."""
    if not 0 <= desc < 1 << 64:
        raise ValueError(f"wgmma descriptor {desc:#x} is not a 64-bit value")
    used = 0x3FFF | 0x3FFF << 16 | 0x3FFF << 32 | 0x7 << 49 | 0x3 << 62
    if desc & ~used:
        raise ValueError(f"wgmma descriptor {desc:#018x} sets reserved bits "
                         f"{desc & ~used & ((1 << 64) - 1):#018x}")
    return WgmmaDesc(start_addr=(desc & 0x3FFF) << 4, lbo=(desc >> 16 & 0x3FFF) << 4,
                     sbo=(desc >> 32 & 0x3FFF) << 4, swizzle_bytes=_FIELD_TO_BYTES[desc >> 62],
                     base_offset=desc >> 49 & 0x7)


def wgmma_base_offset(pattern_start: int, swizzle_bytes: int) -> int:
    """Base-offset field PTX prescribes for a swizzle pattern starting at `pattern_start`: 0 on
    a period boundary (1024/512/256 B), else (pattern_start >> 7) & 7."""
    if swizzle_bytes == 0 or pattern_start % SWIZZLE_PERIOD[swizzle_bytes] == 0:
        return 0
    return (pattern_start >> 7) & 0x7


def wgmma_start_is_anchored(start: Any, swizzle_bytes: int) -> Any:
    """The precondition of `wgmma_smem_addr` for a swizzled descriptor with base_offset 0:
    start mod period < 128, i.e. the row-phase address bits 7.. of the start are zero. A bool,
    numpy bool array or z3 Bool (always True without swizzle)."""
    if swizzle_bytes == 0:
        return True
    phase_bits = (SWIZZLE_PERIOD[swizzle_bytes] - 1) & ~127
    return arith.band(start, phase_bits) == 0


def _elems_per_16b(elem_bytes: int) -> int:
    if elem_bytes not in (1, 2, 4):
        raise ValueError(f"wgmma operands have 1, 2 or 4-byte elements, not {elem_bytes}")
    return 16 // elem_bytes


def wgmma_smem_addr(mn: Any, k: Any, *, start: Any, lbo: Any, sbo: Any, swizzle_bytes: int,
                    elem_bytes: int, major: str = "K", base_offset: int = 0) -> Any:
    """Shared byte address the wgmma unit reads for operand element (mn, k) (mn = row of A or
    row n of B, k within the instruction's 32-byte K slice) from a descriptor with these
    fields. K-major: k in [0, 2T). MN-major: mn in [0, M or N), k in [0, 16 / 8 / 32 elements).

    start may be symbolic (a z3 bit-vector), which is how the verifier proves "every stage,
    every k-block" at once (assuming `wgmma_start_is_anchored`); advancing `start` by 32 bytes
    per k-step inside a swizzle row is correct because the swizzle acts on the absolute address.
    A concrete start that breaks the precondition raises ValueError.
    """
    if swizzle_bytes not in SWIZZLE_MODES:
        raise ValueError(f"wgmma: swizzle {swizzle_bytes} B is not 0, 32, 64 or 128")
    if major not in MAJORS:
        raise ValueError(f"wgmma: major must be 'K' or 'MN', got {major!r}")
    if base_offset != 0:
        raise NotImplementedError(
            "wgmma_smem_addr: a non-zero descriptor base offset is not modelled (its hardware "
            "meaning is unvalidated, INVARIANTS.md §3.8); fix: align swizzled stage buffers to "
            "the swizzle period and keep base_offset = 0")
    if swizzle_bytes and not arith.is_z3(start):
        anchored = wgmma_start_is_anchored(start, swizzle_bytes)
        if not (anchored.all() if hasattr(anchored, "all") else anchored):
            raise ValueError(
                f"wgmma_smem_addr: start address {start} lies mid-pattern of the {swizzle_bytes}B "
                f"swizzle (start mod {SWIZZLE_PERIOD[swizzle_bytes]} >= 128) with base offset 0; "
                "the hardware behaviour there is unvalidated. fix: align the swizzled buffer to "
                f"{SWIZZLE_PERIOD[swizzle_bytes]} B and move the start only inside the first row")
    t = _elems_per_16b(elem_bytes)
    e = elem_bytes
    if major == "K":
        if swizzle_bytes == 0:
            # core matrix = 8 rows x 16 B contiguous; SBO between 8-row groups, LBO between the
            # two 16-byte K chunks
            off = (arith.mod(mn, 8) * 16 + arith.div(mn, 8) * sbo
                   + arith.mod(k, t) * e + arith.div(k, t) * lbo)
        else:
            # rows of `swizzle_bytes` bytes, 8-row atoms SBO apart; K contiguous inside the row
            off = arith.mod(mn, 8) * swizzle_bytes + arith.div(mn, 8) * sbo + k * e
    else:
        if swizzle_bytes == 0:
            # core matrix = T MN-elements (16 B) x 8 k; SBO between MN core matrices, LBO
            # between 8-deep k groups
            off = (arith.mod(mn, t) * e + arith.div(mn, t) * sbo
                   + arith.mod(k, 8) * 16 + arith.div(k, 8) * lbo)
        else:
            # MN contiguous over a swizzle row of c*T elements, one row per k, 8 rows per atom;
            # LBO between MN atoms, SBO between 8-deep k groups
            ct = swizzle_bytes // e
            off = (arith.mod(mn, ct) * e + arith.div(mn, ct) * lbo
                   + arith.mod(k, 8) * swizzle_bytes + arith.div(k, 8) * sbo)
    return smem_swizzle(swizzle_bytes)(start + off)


def smem_swizzle_atom(swizzle_bytes: int, elem_bytes: int, major: str = "K") -> ComposedLayout:
    """The swizzle layout atom (PTX ISA §9.7.15.5.1.2, Table "swizzle atom layout") in ELEMENT
    units, coordinate (mn, k) -> element offset from a period-aligned base; CuTe's
    GMMA::Layout_{K,MN}_SW{32,64,128}_Atom and the INTER (no-swizzle) core matrix.

    K-major: (8, W) : (W, 1); MN-major: (W, 8) : (1, W); W = swizzle_bytes / elem_bytes
    (16 / elem_bytes without swizzle). E.g. bf16 128B K-major: Sw<3,3,3> o (8,64):(64,1).
    """
    if major not in MAJORS:
        raise ValueError(f"smem_swizzle_atom: major must be 'K' or 'MN', got {major!r}")
    if swizzle_bytes not in SWIZZLE_MODES:
        raise ValueError(f"smem_swizzle_atom: swizzle {swizzle_bytes} B is not 0/32/64/128")
    w = (swizzle_bytes or 16) // elem_bytes
    inner = Layout((8, w), (w, 1)) if major == "K" else Layout((w, 8), (1, w))
    return ComposedLayout(Swizzle.for_bytes(swizzle_bytes, elem_bytes), 0, inner)
