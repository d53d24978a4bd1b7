"""Rules for scalar ops: constants, scalar arithmetic, grid ids, thread index, cluster rank.

Invariant: integer `floordiv`/`mod` follow C (truncate toward zero), like the generated CUDA;
an int-typed result stays a Python int, wrapped to its type's width as the device's register
(an i32 `pid * N` past 2^31 wraps there too).
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir.types import ScalarType
from argus.runtime.interp.machine import InterpError, _Group, _Interp
from argus.runtime.interp.registry import rule


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise InterpError("integer division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


_ARITH = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": _c_div, "mod": _c_mod,
    "min": min, "max": max, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "and": lambda a, b: bool(a) and bool(b),
    "or": lambda a, b: bool(a) or bool(b),
    # integers as Python ints of the operands' values: two's complement at infinite width, so
    # & | ^ and an arithmetic >> of a signed (a u32 is never negative: >> is logical there)
    # are the device's; `arith` wraps the result (<< modulo 2^bits) to the result's type
    "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b, "bitxor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
}


@rule(O.Const)
def const(m: _Interp, g: _Group, op: O.Const) -> None:
    g.env[op.result.id] = op.value


@rule(O.Arith)
def arith(m: _Interp, g: _Group, op: O.Arith) -> None:
    a, b = m.val(g, op.lhs), m.val(g, op.rhs)
    r = _ARITH[op.fn](a, b)
    t = op.result.type.dtype if isinstance(op.result.type, ScalarType) else None
    if t is not None and t.kind in ("int", "uint"):
        r = _wrap(int(r), t)
    g.env[op.result.id] = r


def _wrap(r: int, dtype) -> int:
    """`r` in the C type of `dtype`, two's complement (an i32 product that overflows wraps
    on the device; the interpreter reports what the device computes, not the true value)."""
    mod = 1 << dtype.bits
    r %= mod
    return r - mod if dtype.kind == "int" and r >= mod // 2 else r


@rule(O.GridIds)
def grid_ids(m: _Interp, g: _Group, op: O.GridIds) -> None:
    pass  # bound by the CTA loop (machine.run)


@rule(O.ThreadIndex)
def thread_index(m: _Interp, g: _Group, op: O.ThreadIndex) -> None:
    raise InterpError("ag.thread_index() has no tile-level meaning in the interpreter")


@rule(O.ClusterRank)
def cluster_rank(m: _Interp, g: _Group, op: O.ClusterRank) -> None:
    g.env[op.result.id] = g.rank
