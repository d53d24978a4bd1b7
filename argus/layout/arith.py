"""Integer operations that mean the same thing on Python ints, numpy arrays and z3 terms.

Job: let every layout or hardware formula be written ONCE and evaluated by codegen (Python
ints), the interpreter and brute-force checks (numpy integer arrays) and the verifier (z3
bit-vector or integer terms). Python's `//`, `%`, `>>` and `&` do not mean the same thing on
z3 terms (z3 has no `//`, its `%` and `>>` on bit-vectors are signed, and Int has no bit
operations), so formulas call these helpers instead of the operators. `+`, `-` and `*` by
constants work on all three kinds and need no helper.

Invariant kept (INVARIANTS.md §3.6, design rule 2): a bit-vector is never divided by, or
reduced modulo, a number that is not a power of two. Such a request raises ValueError naming
the fix (use z3 Int terms, i.e. linear integer arithmetic) instead of emitting a `bvudiv` that
makes the solver take seconds.

z3 is never imported here: a value can only be a z3 term if the caller already imported z3, so
`sys.modules` tells us whether to look.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# A value any of the helpers accept: int, numpy integer scalar/array, z3 BitVec or Int term.
Value = Any


def _z3_module():
    return sys.modules.get("z3")


def is_z3(x: Value) -> bool:
    """True when `x` is a z3 expression (only possible once the caller imported z3)."""
    z3 = _z3_module()
    return z3 is not None and isinstance(x, z3.ExprRef)


def is_bv(x: Value) -> bool:
    """True when `x` is a z3 bit-vector term."""
    z3 = _z3_module()
    return z3 is not None and isinstance(x, z3.BitVecRef)


def is_z3_int(x: Value) -> bool:
    """True when `x` is a z3 integer (LIA) term."""
    z3 = _z3_module()
    return z3 is not None and isinstance(x, z3.ArithRef) and x.is_int()


def is_pow2(n: int) -> bool:
    """True for 1, 2, 4, 8, ...; False for 0 and negatives."""
    return isinstance(n, (int, np.integer)) and n > 0 and (n & (n - 1)) == 0


def log2_exact(n: int, what: str = "value") -> int:
    """log2 of a power of two; raises ValueError naming `what` otherwise."""
    if not is_pow2(n):
        raise ValueError(f"{what} must be a power of two, got {n}")
    return int(n).bit_length() - 1


def _const(d: Value, op: str) -> int:
    if is_z3(d) or isinstance(d, np.ndarray):
        raise TypeError(f"{op}: the divisor/shift must be a Python int constant, got {d!r}")
    d = int(d)
    return d


def div(x: Value, d: int) -> Value:
    """Floor division of a non-negative `x` by a positive constant `d`.

    Bit-vectors: only powers of two (a logical shift right); anything else raises, see the
    module docstring. z3 Int: `x / d` (z3 integer division is floor division for d > 0).
    """
    d = _const(d, "div")
    if d <= 0:
        raise ValueError(f"div: divisor must be positive, got {d}")
    if d == 1:
        return x
    if is_bv(x):
        if not is_pow2(d):
            raise ValueError(
                f"div: bit-vector division by {d}, which is not a power of two; bvudiv by a "
                "non-power-of-two makes z3 take seconds (INVARIANTS.md §3.6 rule 2). "
                "fix: encode this quantity with z3.Int terms (linear integer arithmetic)")
        return _z3_module().LShR(x, d.bit_length() - 1)
    if is_z3(x):
        return x / d
    return x // d


def mod(x: Value, d: int) -> Value:
    """`x mod d` for non-negative `x` and a positive constant `d` (same rules as `div`)."""
    d = _const(d, "mod")
    if d <= 0:
        raise ValueError(f"mod: modulus must be positive, got {d}")
    if is_bv(x):
        if not is_pow2(d):
            raise ValueError(
                f"mod: bit-vector remainder by {d}, which is not a power of two; bvurem by a "
                "non-power-of-two makes z3 take seconds (INVARIANTS.md §3.6 rule 2). "
                "fix: encode this quantity with z3.Int terms (linear integer arithmetic)")
        return x & (d - 1)
    if d == 1:
        return x * 0
    return x % d


def shr(x: Value, n: int) -> Value:
    """Logical shift right by a constant (unsigned on bit-vectors, floor-div by 2**n on Int)."""
    n = _const(n, "shr")
    if n < 0:
        return shl(x, -n)
    if n == 0:
        return x
    if is_bv(x):
        return _z3_module().LShR(x, n)
    if is_z3(x):
        return x / (1 << n)
    return x >> n


def shl(x: Value, n: int) -> Value:
    """Shift left by a constant (multiplication by 2**n on z3 Int)."""
    n = _const(n, "shl")
    if n < 0:
        return shr(x, -n)
    if n == 0:
        return x
    if is_z3(x) and not is_bv(x):
        return x * (1 << n)
    return x << n


def band(x: Value, mask: int) -> Value:
    """Bitwise AND with a constant mask. On z3 Int only low-bit masks 2**k - 1 are allowed."""
    mask = _const(mask, "band")
    if is_z3(x) and not is_bv(x):
        if mask < 0 or not is_pow2(mask + 1):
            raise TypeError(
                f"band: AND with mask {mask:#x} on a z3 Int term has no linear-arithmetic "
                "encoding. fix: use z3.BitVec terms for bit-level address arithmetic")
        return x % (mask + 1)
    return x & mask


def bxor(x: Value, y: Value) -> Value:
    """Bitwise XOR (not available on z3 Int terms: use bit-vectors for swizzles)."""
    for v in (x, y):
        if is_z3(v) and not is_bv(v):
            raise TypeError(
                "bxor: XOR on a z3 Int term has no linear-arithmetic encoding. "
                "fix: use z3.BitVec terms for swizzled addresses")
    return x ^ y


def in_range(x: Value, lo: int, hi: int) -> Value:
    """`lo <= x < hi` as a bool, numpy bool array or z3 Bool (unsigned compare on bit-vectors)."""
    if is_bv(x):
        z3 = _z3_module()
        return z3.And(z3.ULE(lo, x), z3.ULT(x, hi)) if lo > 0 else z3.ULT(x, hi)
    if is_z3(x):
        z3 = _z3_module()
        return z3.And(x >= lo, x < hi)
    if isinstance(x, np.ndarray):
        return (x >= lo) & (x < hi)
    return lo <= x < hi


def select(cond: Value, a: Value, b: Value) -> Value:
    """`a if cond else b`, elementwise on numpy arrays, `z3.If` on z3 terms."""
    if is_z3(cond) or is_z3(a) or is_z3(b):
        return _z3_module().If(cond, a, b)
    if isinstance(cond, np.ndarray) or isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.where(cond, a, b)
    return a if cond else b


def to_int(x: Value) -> int | Value:
    """Python int for numpy integer scalars, identity otherwise (arrays and z3 terms pass)."""
    if isinstance(x, np.integer):
        return int(x)
    return x
