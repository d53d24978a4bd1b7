"""The CuTe-style shape:stride layout: a function from coordinates to an integer offset.

Job: the `Layout` value type, its evaluation, and the structural helpers that do not change
the function it denotes (`coalesce`, `flatten`, `make_layout`, `make_layout_like`, compact
constructors). The algebra (composition, complement, divide, product) lives in `algebra`,
inverses in `inverse`.

Semantics (CuTe's): a layout `shape:stride` over hierarchical int tuples maps a coordinate
congruent to `shape` to `sum(c_i * d_i)` over the leaves. A 1-D index is first turned into a
coordinate colexicographically (leftmost mode fastest); the last leaf takes the remainder
without a modulo, so an index past `size` extends along the last mode. `layout(i)`,
`layout((i, j))` and `layout(i, j)` all work, and the index may be a Python int, a numpy
integer array or a z3 term (through `arith`, so bit-vectors are only divided by powers of two).

Invariant kept: a `Layout` is immutable and normalised at construction (ints and tuples only,
shape and stride congruent, shape leaves >= 1, stride leaves >= 0).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.layout import inttuple as it
from argus.layout.inttuple import IntTuple


@dataclass(frozen=True)
class Layout:
    """`shape:stride`; `stride=None` means the compact column-major strides of `shape`."""

    shape: IntTuple
    stride: IntTuple = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        shape = it.normalize(self.shape, "Layout shape")
        stride = (it.prefix_products(shape) if self.stride is None
                  else it.normalize(self.stride, "Layout stride"))
        if not it.congruent(shape, stride):
            raise ValueError(
                f"Layout: shape {it.to_str(shape)} and stride {it.to_str(stride)} are not "
                "congruent (same nesting); fix: give one stride per shape leaf")
        if any(s < 1 for s in it.flatten(shape)):
            raise ValueError(f"Layout: shape {it.to_str(shape)} has a leaf < 1")
        if any(d < 0 for d in it.flatten(stride)):
            raise ValueError(
                f"Layout: stride {it.to_str(stride)} has a negative leaf; negative strides are "
                "not supported by argus layouts")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    # ---- structure -------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of coordinates in the domain."""
        return it.product(self.shape)

    @property
    def cosize(self) -> int:
        """One past the largest offset over the domain (`layout(size - 1) + 1` for sorted modes)."""
        return 1 + sum((s - 1) * d for s, d in zip(it.flatten(self.shape),
                                                  it.flatten(self.stride)))

    @property
    def rank(self) -> int:
        return it.rank(self.shape)

    @property
    def depth(self) -> int:
        return it.depth(self.shape)

    def __getitem__(self, i: int) -> Layout:
        """Mode `i` as a layout (an int-shaped layout has the single mode 0: itself)."""
        if it.is_tuple(self.shape):
            return Layout(self.shape[i], self.stride[i])
        if i in (0, -1):
            return self
        raise IndexError(f"mode {i} of rank-1 layout {self}")

    def modes(self) -> tuple[Layout, ...]:
        return tuple(self[i] for i in range(self.rank))

    # ---- evaluation ------------------------------------------------------------------------
    def __call__(self, *crd: Any) -> Any:
        """Offset of a 1-D index or of a (hierarchical) coordinate; see the module docstring."""
        c = crd[0] if len(crd) == 1 else tuple(crd)
        return _eval(self.shape, self.stride, c)

    def table(self) -> np.ndarray:
        """Offsets of all indices 0..size-1 as an int64 numpy array."""
        return np.asarray(self(np.arange(self.size, dtype=np.int64)), dtype=np.int64)

    def is_injective(self) -> bool:
        """No two coordinates share an offset (checked exhaustively)."""
        t = self.table()
        return len(np.unique(t)) == t.size

    def is_compact(self) -> bool:
        """A bijection onto [0, size)."""
        return self.cosize == self.size and self.is_injective()

    # ---- text ------------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{it.to_str(self.shape)}:{it.to_str(self.stride)}"

    @staticmethod
    def parse(text: str) -> Layout:
        """Inverse of `str`: `Layout.parse("((4,8),2):((1,4),32)")`."""
        depth, split = 0, -1
        for pos, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if ch == ":" and depth == 0:
                split = pos
        if split < 0:
            raise ValueError(f"Layout.parse: no top-level ':' in {text!r}; expected shape:stride")
        try:
            shape = ast.literal_eval(text[:split].strip())
            stride = ast.literal_eval(text[split + 1:].strip())
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"Layout.parse: cannot read {text!r}: {exc}") from None
        return Layout(shape, stride)

    # ---- constructors ----------------------------------------------------------------------
    @staticmethod
    def col_major(shape: IntTuple) -> Layout:
        """Compact, leftmost leaf fastest (CuTe's default)."""
        return Layout(shape)

    @staticmethod
    def row_major(shape: IntTuple) -> Layout:
        """Compact, rightmost leaf fastest."""
        leaves = it.flatten(it.normalize(shape))
        return make_ordered_layout(shape, it.unflatten(tuple(range(len(leaves)))[::-1], shape))


def _eval(shape: IntTuple, stride: IntTuple, crd: Any) -> Any:
    if it.is_tuple(shape):
        if not it.is_tuple(crd):
            crd = it.idx2crd(crd, shape)
        elif len(crd) != len(shape):
            raise ValueError(
                f"Layout: coordinate of rank {len(crd)} for a mode of shape {it.to_str(shape)}")
        out: Any = 0
        for s, d, c in zip(shape, stride, crd):
            out = out + _eval(s, d, c)
        return out
    if it.is_tuple(crd):
        raise ValueError(f"Layout: coordinate {crd} is deeper than shape {shape}")
    if stride == 0:
        return crd * 0
    return crd * stride if stride != 1 else crd


def make_layout(*layouts: Layout) -> Layout:
    """Concatenate layouts as the modes of a new layout: make_layout(A, B) = (A, B)."""
    for x in layouts:
        if not isinstance(x, Layout):
            raise TypeError(f"make_layout: expected Layout modes, got {x!r}")
    return Layout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def flatten(layout: Layout) -> Layout:
    """Same function, all leaves as top-level modes: ((4,8),2):((1,4),32) -> (4,8,2):(1,4,32)."""
    shape, stride = it.flatten(layout.shape), it.flatten(layout.stride)
    if len(shape) == 1:
        return Layout(shape[0], stride[0])
    return Layout(shape, stride)


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Fewest modes with the same function on [0, size): drops size-1 modes and merges
    neighbours (s0:d0, s1:d1) with d1 == s0*d0.

    With a tuple `profile`, mode i is coalesced separately according to profile[i] and the rank
    is kept (CuTe's by-mode coalesce); an int profile (or None) coalesces everything.
    """
    if profile is not None and it.is_tuple(profile):
        if len(profile) > layout.rank:
            raise ValueError(f"coalesce: profile {profile} has more modes than layout {layout}")
        modes = [coalesce(layout[i], profile[i]) if i < len(profile) else layout[i]
                 for i in range(layout.rank)]
        return make_layout(*modes)
    out: list[list[int]] = []
    for s, d in zip(it.flatten(layout.shape), it.flatten(layout.stride)):
        if s == 1:
            continue
        if out and out[-1][0] * out[-1][1] == d:
            out[-1][0] *= s
        else:
            out.append([s, d])
    if not out:
        return Layout(1, 0)
    if len(out) == 1:
        return Layout(out[0][0], out[0][1])
    return Layout(tuple(s for s, _ in out), tuple(d for _, d in out))


def filter_zeros(layout: Layout) -> Layout:
    """CuTe's filter_zeros: every stride-0 leaf gets shape 1 (same structure, no broadcast)."""
    shapes = [1 if d == 0 else s for s, d in zip(it.flatten(layout.shape),
                                                  it.flatten(layout.stride))]
    return Layout(it.unflatten(shapes, layout.shape), layout.stride)


def filter_layout(layout: Layout) -> Layout:
    """CuTe's filter: drop stride-0 and size-1 leaves, then coalesce (exported as `filter`)."""
    return coalesce(filter_zeros(layout))


def make_ordered_layout(shape: IntTuple, order: IntTuple) -> Layout:
    """Compact layout whose leaves get strides in increasing `order` (congruent to shape)."""
    shape = it.normalize(shape)
    order = it.normalize(order)
    if not it.congruent(shape, order):
        raise ValueError(f"make_ordered_layout: order {order} not congruent to shape {shape}")
    leaves, ranks = it.flatten(shape), it.flatten(order)
    strides = [0] * len(leaves)
    acc = 1
    for pos in sorted(range(len(leaves)), key=lambda p: (ranks[p], p)):
        strides[pos] = acc
        acc *= leaves[pos]
    return Layout(shape, it.unflatten(strides, shape))


def make_layout_like(layout: Layout) -> Layout:
    """Compact layout with the same shape, whose strides are ordered like `layout`'s.

    Leaves with stride 0 (broadcast) or size 1 keep stride 0; the other leaves get compact
    strides in increasing order of their original stride (ties: leftmost first). Used to
    allocate a fresh buffer that a copy from `layout` walks in the same order.
    """
    leaves, strides = it.flatten(layout.shape), it.flatten(layout.stride)
    out = [0] * len(leaves)
    acc = 1
    live = [p for p in range(len(leaves)) if strides[p] != 0 and leaves[p] != 1]
    for pos in sorted(live, key=lambda p: (strides[p], p)):
        out[pos] = acc
        acc *= leaves[pos]
    return Layout(layout.shape, it.unflatten(out, layout.shape))
