"""XOR swizzles (CuTe `Swizzle<B,M,S>`) and swizzled layouts (`ComposedLayout`).

Job: the bank-conflict-avoiding permutations that TMA writes and wgmma/ldmatrix read with.

`Swizzle(bits=B, base=M, shift=S)` maps an offset x to

    x ^ ((x & yyy_mask) >> S),   yyy_mask = ((1 << B) - 1) << (M + S)

i.e. the B bits found S positions above bit M are XOR-ed into bits [M, M+B)
(CuTe `include/cute/swizzle.hpp`; a negative S shifts the other way). Because the two bit
ranges are disjoint (|S| >= B, checked), every swizzle is an involution: swz(swz(x)) == x.

On Hopper the TMA / wgmma swizzle modes are, on BYTE addresses (PTX ISA §5.5 "Tensors" →
"Swizzling Modes"; CuTe `copy_traits_sm90_tma_swizzle.hpp`): 32B = Swizzle<1,4,3>,
64B = Swizzle<2,4,3>, 128B = Swizzle<3,4,3>: the 16-byte chunk index (bits 4..) is XOR-ed with
the row phase (bits 7..). In units of e-byte elements the base drops by log2(e):
128B on bf16 element offsets is Swizzle<3,3,3>.

`ComposedLayout(swizzle, offset, layout)` is CuTe's `swizzle ∘ (offset + layout)`. The hardware
swizzles ABSOLUTE shared-memory addresses, so `offset` is where the pattern is anchored:
`swz(base + x) == base + swz(x)` only when `base` is a multiple of the swizzle period
(INVARIANTS.md §2.3). Swizzles work on ints, numpy arrays and z3 bit-vectors (not z3 Int).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.layout import arith
from argus.layout.shape_stride import Layout

# swizzle mode in bytes -> CuTe B (number of XOR-ed bits); the span is 16 << B bytes.
_SWIZZLE_BITS = {0: 0, 32: 1, 64: 2, 128: 3}


@dataclass(frozen=True)
class Swizzle:
    """CuTe Swizzle<B, M, S>; see the module docstring. Swizzle(0, M, S) is the identity."""

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        if self.bits < 0 or self.base < 0:
            raise ValueError(f"Swizzle{self.params}: bits and base must be >= 0")
        if abs(self.shift) < self.bits:
            raise ValueError(
                f"Swizzle{self.params}: |shift| must be >= bits so the source and destination "
                "bit ranges are disjoint (otherwise it is not an involution)")

    @property
    def params(self) -> tuple[int, int, int]:
        return (self.bits, self.base, self.shift)

    @property
    def yyy_mask(self) -> int:
        """The source bits (moved by `shift` onto the destination bits)."""
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        """The destination bits that get XOR-ed."""
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    @property
    def period(self) -> int:
        """The pattern repeats every `period` units: swz(x + k·period) == swz(x) + k·period."""
        if self.bits == 0:
            return 1
        return 1 << (self.base + abs(self.shift) + self.bits)

    @property
    def is_identity(self) -> bool:
        return self.bits == 0

    def __call__(self, x: Any) -> Any:
        if self.bits == 0:
            return x
        return arith.bxor(x, arith.shr(arith.band(x, self.yyy_mask), self.shift))

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    @staticmethod
    def for_bytes(swizzle_bytes: int, elem_bytes: int = 1) -> Swizzle:
        """The Hopper TMA/wgmma swizzle of `swizzle_bytes` (0, 32, 64, 128) acting on offsets
        in units of `elem_bytes`-byte elements (1 = byte addresses).

        Byte units: 128B -> Swizzle<3,4,3>. Element units: base = 4 - log2(elem_bytes), so the
        XOR still moves whole 16-byte chunks (e.g. bf16: Swizzle<3,3,3>).
        """
        if swizzle_bytes not in _SWIZZLE_BITS:
            raise ValueError(
                f"swizzle of {swizzle_bytes} bytes is not a Hopper mode; use 0, 32, 64 or 128")
        if not arith.is_pow2(elem_bytes) or elem_bytes > 16:
            raise ValueError(
                f"element size {elem_bytes} B must be a power of two <= 16 for a 16-byte-chunk "
                "swizzle")
        return Swizzle(_SWIZZLE_BITS[swizzle_bytes], 4 - arith.log2_exact(elem_bytes), 3)


SWIZZLE_NONE = Swizzle(0, 4, 3)
SWIZZLE_32B = Swizzle(1, 4, 3)     # byte addresses; span 32 B, period 256 B
SWIZZLE_64B = Swizzle(2, 4, 3)     # byte addresses; span 64 B, period 512 B
SWIZZLE_128B = Swizzle(3, 4, 3)    # byte addresses; span 128 B, period 1024 B


@dataclass(frozen=True)
class ComposedLayout:
    """`swizzle(offset + layout(c))`: a swizzled layout anchored at `offset` (CuTe's
    ComposedLayout<Swizzle, offset, Layout>). Domain, shape and size are the inner layout's."""

    swizzle: Swizzle
    offset: int
    layout: Layout

    def __post_init__(self) -> None:
        if not isinstance(self.swizzle, Swizzle) or not isinstance(self.layout, Layout):
            raise TypeError("ComposedLayout(swizzle: Swizzle, offset: int, layout: Layout)")
        if self.offset < 0:
            raise ValueError(f"ComposedLayout: offset {self.offset} must be >= 0")

    @property
    def shape(self):
        return self.layout.shape

    @property
    def size(self) -> int:
        return self.layout.size

    @property
    def rank(self) -> int:
        return self.layout.rank

    def __call__(self, *crd: Any) -> Any:
        inner = self.layout(*crd)
        return self.swizzle(inner + self.offset if self.offset else inner)

    def table(self) -> np.ndarray:
        """Offsets of all indices 0..size-1 as an int64 numpy array."""
        return np.asarray(self(np.arange(self.size, dtype=np.int64)), dtype=np.int64)

    def __str__(self) -> str:
        return f"{self.swizzle} o {self.offset} o {self.layout}"
