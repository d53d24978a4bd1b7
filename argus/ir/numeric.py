"""The numeric typing of tile ops: the type an elementwise op computes in, integer promotion,
and the rule that picks i32 or i64 for integer tile arithmetic.

Invariant: integer tiles are integers everywhere (IR dtype, interpreter, generated C++); a
value changes type only by a `convert` or by the explicit cast `work_dtype` prescribes at the
operand of an op, read the same way by the interpreter and by codegen.

The i32 / i64 rule (`int_result`): integer tile arithmetic is i32 unless an operand is i64 or
the bound of the result leaves the i32 range. Bounds are static intervals: `ag.arange(n)` is
[0, n - 1], a trace-time constant or `ag.full` its value; anything else (a runtime scalar, a
loaded tile, a reduction, a carried value) is a *coordinate*: an i32 value assumed in range,
as every tensor dim is (shape symbols are i32 in the launch ABI). Sums and differences that
involve a coordinate are coordinates (an index shifted inside a tile stays an index), and so
is a coordinate scaled by a trace-time constant (a block index times its block size, as the
scalar `pid * BM`). A product of two runtime values (a coordinate times a runtime scalar or
another tile: `row * N + col`, the element offset of a large tensor) is i64 unless both
bounds are known and prove the product fits in i32; with known bounds any result outside
the i32 range is i64 too. Bitwise results never widen (`x << 24` wraps in x's type, as C's
unsigned shift would): their bound is kept only where it is provable inside the type
(`x & c` with c >= 0 lies in [0, c]; a shift by a constant count of a bounded value), else
unknown.
"""

from __future__ import annotations

from argus import dtypes
from argus.dtypes import DType

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1

Bound = tuple[int, int] | None
"""A static interval [lo, hi] of an integer value, or None for a coordinate (module doc)."""

COMPARES = ("lt", "le", "gt", "ge", "eq", "ne")
# the functions an integer tile computes natively in its integer type; the others (exp,
# sqrt, ...) take f32 operands and give the truncating cast of their f32 result
# bitwise fns of integer tiles and scalars (& | ^ << >>): the result has the common integer
# type of the operands, a shift the type of its left operand (C's rule: the count does not
# change it); >> is arithmetic on a signed type, logical on an unsigned one
BITWISE = ("bitand", "bitor", "bitxor", "shl", "shr")
SHIFTS = ("shl", "shr")
INT_NATIVE = frozenset({"add", "sub", "mul", "div", "mod", "neg", "abs", "max", "min", "relu",
                        "where", *COMPARES, *BITWISE})


def common_dtype(types) -> DType:
    """The type that represents every value of `types`: f32 when any is a float (a float
    compare or float math), else the widest integer (i1 < i32 < i64; i32 with u32 gives i64,
    as numpy does), i1 when all are booleans."""
    names = {t.name for t in types}
    if any(t.is_float for t in types):
        return dtypes.f32
    if "i64" in names or {"i32", "u32"} <= names:
        return dtypes.i64
    for name in ("u32", "i32"):
        if name in names:
            return dtypes.from_name(name)
    return dtypes.i1


def work_dtype(fn: str, operand_types, result: DType) -> DType:
    """The type elementwise `fn` computes in, each operand cast to it first (a `where`
    condition stays boolean): & | ~ on booleans; a compare in the common type of its operands
    (integers compare as integers); integer math native to an integer result in that
    result's type; everything else, float math included, in f32 (a bf16/f16 result is
    rounded after)."""
    if fn in ("and", "or", "not"):
        return dtypes.i1
    if fn in COMPARES:
        return common_dtype(list(operand_types))
    return result if not result.is_float and fn in INT_NATIVE else dtypes.f32


def _interval(fn: str, bounds: list[tuple[int, int]]) -> tuple[int, int] | None:
    if fn in ("add", "sub", "mul"):
        (a0, a1), (b0, b1) = bounds
        if fn == "add":
            return a0 + b0, a1 + b1
        if fn == "sub":
            return a0 - b1, a1 - b0
        corners = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
        return min(corners), max(corners)
    if fn == "neg":
        return -bounds[0][1], -bounds[0][0]
    if fn in ("max", "min", "where", "relu"):
        pts = [x for b in bounds for x in b] + ([0] if fn == "relu" else [])
        return min(pts), max(pts)
    if fn == "abs":
        lo, hi = bounds[0]
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    if fn == "div":   # truncating: |a / b| <= |a| for b != 0
        m = max(abs(bounds[0][0]), abs(bounds[0][1]))
        return -m, m
    if fn == "mod":   # the dividend's sign, |a % b| < |b| and <= |a|
        (a0, a1), (b0, b1) = bounds
        m = min(max(abs(a0), abs(a1)), max(abs(b0), abs(b1), 1) - 1)
        return (0 if a0 >= 0 else -m), (0 if a1 <= 0 else m)
    return None


def _type_max(dtype: DType) -> int:
    return (1 << dtype.bits) - 1 if dtype.kind == "uint" else (1 << (dtype.bits - 1)) - 1


def _bitwise_bound(fn: str, dtype: DType, bounds: list[Bound]) -> Bound:
    """The bound of bitwise `fn` where it is provable (module doc), else None: `a & b` with a
    bound [lo, hi], lo >= 0, on either side lies in [0, hi] (its bits are a subset of that
    side's); `|` and `^` of two non-negative bounds stay below the next power of two; a shift
    by a constant count in [0, bits) of a bounded value is monotonic (`<<` only while the
    result fits the type: past it the value wraps)."""
    nonneg = [b for b in bounds if b is not None and b[0] >= 0]
    if fn == "bitand":
        return (0, min(b[1] for b in nonneg)) if nonneg else None
    if fn in ("bitor", "bitxor"):
        if len(nonneg) < 2:
            return None
        return 0, (1 << max(b[1] for b in nonneg).bit_length()) - 1
    a, k = bounds
    if a is None or k is None or k[0] != k[1] or not 0 <= k[0] < dtype.bits:
        return None
    lo, hi = (a[0] >> k[0], a[1] >> k[0]) if fn == "shr" else (a[0] << k[0], a[1] << k[0])
    return (lo, hi) if fn == "shr" or (a[0] >= 0 and hi <= _type_max(dtype)) else None


def int_result(fn: str, operands: list[tuple[DType, Bound, bool]]) -> tuple[DType, Bound]:
    """(dtype, bound) of integer elementwise `fn` over `operands`, each (dtype, bound,
    is_constant): the common integer type, widened to i64 by the module's rule (a shift: its
    left operand's type; bitwise fns never widen)."""
    if fn in BITWISE:
        dtype = operands[0][0] if fn in SHIFTS else common_dtype([d for d, _, _ in operands])
        return dtype, _bitwise_bound(fn, dtype, [b for _, b, _ in operands])
    dtype = common_dtype([d for d, _, _ in operands])
    bounds = [b for _, b, _ in operands]
    if all(b is not None for b in bounds):
        bound = _interval(fn, bounds)
        if dtype.name == "i32" and bound is not None and \
                (bound[0] < I32_MIN or bound[1] > I32_MAX):
            dtype = dtypes.i64
        return dtype, bound
    runtime = [not const for _, _, const in operands]
    if fn == "mul" and all(runtime) and dtype.name == "i32":
        return dtypes.i64, None   # a coordinate times a runtime value: an element offset
    if fn == "mod" and bounds[1] is not None:   # a coordinate modulo a known divisor
        m = max(abs(bounds[1][0]), abs(bounds[1][1]), 1) - 1
        return dtype, (-m, m)
    return dtype, None
