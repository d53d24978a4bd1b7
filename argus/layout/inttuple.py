"""Hierarchical integer tuples: the shapes, strides and coordinates of shape:stride layouts.

Job: the small vocabulary that `shape_stride` and `algebra` are written in. An IntTuple is an
int or a (possibly nested) tuple of IntTuples, e.g. `((4, 8), 2)`. Coordinates are
colexicographic, as in CuTe: the leftmost mode varies fastest.

Invariant kept: functions here never mutate and always return ints / tuples (never lists or
numpy scalars), so results are hashable and compare equal structurally. Index/coordinate
conversions go through `arith`, so they also work on numpy arrays and z3 terms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from argus.layout import arith

IntTuple = int | tuple["IntTuple", ...]


def is_int(x: Any) -> bool:
    """True for Python/numpy integers (not bool-like tuples, not z3 terms)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def is_tuple(x: Any) -> bool:
    return isinstance(x, tuple)


def normalize(x: Any, what: str = "IntTuple") -> IntTuple:
    """Lists become tuples and numpy integers become ints, recursively; raises on anything else."""
    if isinstance(x, (list, tuple)):
        return tuple(normalize(v, what) for v in x)
    if is_int(x):
        return int(x)
    raise TypeError(f"{what}: expected an int or a nested tuple of ints, got {x!r}")


def flatten(t: IntTuple) -> tuple[int, ...]:
    """All leaves, left to right: flatten(((4, 8), 2)) == (4, 8, 2)."""
    if is_tuple(t):
        return tuple(leaf for sub in t for leaf in flatten(sub))
    return (t,)


def product(t: IntTuple) -> int:
    """Product of all leaves (the size of a shape); 1 for an empty tuple."""
    out = 1
    for leaf in flatten(t):
        out *= leaf
    return out


def rank(t: IntTuple) -> int:
    """Number of top-level modes; an int has rank 1."""
    return len(t) if is_tuple(t) else 1


def depth(t: IntTuple) -> int:
    """Nesting depth: 0 for an int, 1 for a flat tuple, ..."""
    if is_tuple(t):
        return 1 + max((depth(sub) for sub in t), default=0)
    return 0


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same tree structure (leaf values may differ)."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return not is_tuple(a) and not is_tuple(b)


def unflatten(leaves: tuple[int, ...] | list[int], like: IntTuple) -> IntTuple:
    """Rebuild a tree with the structure of `like` from its leaves (inverse of `flatten`)."""
    it = iter(leaves)

    def build(t: IntTuple) -> IntTuple:
        if is_tuple(t):
            return tuple(build(sub) for sub in t)
        return next(it)

    out = build(like)
    rest = list(it)
    if rest:
        raise ValueError(f"unflatten: {len(rest)} leaves left over for structure {like}")
    return out


def prefix_products(shape: IntTuple, start: int = 1) -> IntTuple:
    """Colexicographic (compact column-major) strides of `shape`, congruent to it.

    prefix_products((4, (2, 3))) == (1, (4, 8)).
    """
    leaves = flatten(shape)
    out = []
    acc = start
    for leaf in leaves:
        out.append(acc)
        acc *= leaf
    return unflatten(out, shape)


def idx2crd(idx: arith.Value, shape: IntTuple) -> Any:
    """Colexicographic coordinate of a 1-D index, congruent to `shape`.

    The last leaf takes the remainder without a modulo (CuTe convention), so an index beyond
    the size extends along the last mode. Works on ints, numpy arrays and z3 terms.
    """
    leaves = flatten(shape)
    crds = []
    rest = idx
    for i, s in enumerate(leaves):
        if i == len(leaves) - 1:
            crds.append(rest)
        else:
            crds.append(arith.mod(rest, s))
            rest = arith.div(rest, s)
    return unflatten(crds, shape)


def crd2idx(crd: Any, shape: IntTuple) -> arith.Value:
    """Colexicographic 1-D index of a coordinate (inverse of `idx2crd` inside the domain).

    `crd` may be an int or tuple per mode; an int entry for a tuple mode is already that mode's
    1-D index.
    """
    if is_tuple(shape):
        if not is_tuple(crd):
            return crd
        if len(crd) != len(shape):
            raise ValueError(f"crd2idx: coordinate {crd} does not match shape {shape}")
        out: arith.Value = 0
        scale = 1
        for c, s in zip(crd, shape):
            out = out + crd2idx(c, s) * scale
            scale *= product(s)
        return out
    if is_tuple(crd):
        raise ValueError(f"crd2idx: coordinate {crd} is deeper than shape {shape}")
    return crd


def inner_product(a: IntTuple, b: IntTuple) -> int:
    """Sum of the products of matching leaves (a coordinate times strides, say)."""
    if not congruent(a, b):
        raise ValueError(f"inner_product: {to_str(a)} and {to_str(b)} are not congruent")
    return sum(x * y for x, y in zip(flatten(a), flatten(b)))


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """CuTe's shape division: `a` divided by `b` leaf by leaf from the left, a leaf smaller than
    what is left to divide becoming 1: shape_div((3, 4), 6) == (1, 2).

    Int by int needs a % b == 0 or b % a == 0 (CuTe's divisibility condition; static CuTe
    refuses the rest at compile time); ValueError otherwise. A tuple divisor divides mode by
    mode; an int divided by a tuple is divided by its product."""
    if is_tuple(a):
        if is_tuple(b):
            if len(a) != len(b):
                raise ValueError(f"shape_div: ranks of {to_str(a)} and {to_str(b)} differ")
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        out = []
        for mode in a:
            out.append(shape_div(mode, b))
            b = shape_div(b, product(mode))
        return tuple(out)
    if is_tuple(b):
        return shape_div(a, product(b))
    if a % b and b % a:
        raise ValueError(f"shape_div: neither of {a} and {b} divides the other (CuTe's "
                         "divisibility condition)")
    return ceil_div(a, b)  # exact when b divides a; 1 when a divides b; an empty mode stays 0


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def to_str(t: IntTuple) -> str:
    """CuTe-style text: (4,(2,3)); a 1-tuple prints as (4,) so that `parse` round-trips."""
    if is_tuple(t):
        inner = ",".join(to_str(x) for x in t)
        return f"({inner},)" if len(t) == 1 else f"({inner})"
    return str(t)
