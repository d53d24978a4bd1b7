"""Rules for register tiles: full, elementwise, convert, reduce, slice, layout conversion,
arange, expand_dims.

Invariant: float tiles compute in float32 and store bf16/f16 values rounded, as on the device;
integer tiles hold and compute in their own integer type (exact at any index, as the
generated code's integer registers; bitwise ops and shifts on their bits, as C's); i1 tiles
are numpy bools; layouts have no meaning here (a layout conversion copies the values).
"""

from __future__ import annotations

import math

import numpy as np

from argus import dtypes
from argus.dtypes import DType, round_to_tf32
from argus.ir import ops as O
from argus.ir.numeric import work_dtype
from argus.ir.types import TileType
from argus.runtime.interp.machine import _Group, _Interp, _round
from argus.runtime.interp.registry import rule
from argus.target import exp2_emulation

def _flush_subnormal(x):
    """x with float32 subnormals replaced by zeros of the same sign (ftz)."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(np.abs(x) < np.float32(2.0 ** -126), np.float32(0.0) * x, x)


_EW = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "erf": lambda x: np.vectorize(math.erf, otypes=[np.float32])(x),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "recip": lambda x: 1.0 / x,
    "exp2_approx": lambda x: _flush_subnormal(np.exp2(_flush_subnormal(np.float32(x)))),
    "round_tf32": round_to_tf32,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "where": np.where,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
    # integer tiles, in their own type: >> arithmetic on a signed type, logical on an unsigned
    # one (numpy's, as C's on the device); << through the unsigned type, wrapping
    "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor,
    "shl": lambda a, b: _shift_left(a, b), "shr": np.right_shift,
}


def _shift_left(a, b) -> np.ndarray:
    """a << b modulo 2^bits in a's integer type: the bits shifted in the unsigned type of the
    same width and read back (the generated code's `(int)((unsigned)a << b)`)."""
    a = np.asarray(a)
    unsigned = np.dtype(f"uint{8 * a.dtype.itemsize}")
    return np.left_shift(a.astype(unsigned), np.asarray(b).astype(unsigned)).astype(a.dtype)


def _reduce(fn: str, x: np.ndarray, axis: int, dtype: DType) -> np.ndarray:
    """numpy's reduction with keepdims: floats in float32 (the device combines in f32
    registers), integers in int64 then the result dtype; argmax/argmin as numpy (first index of
    the extreme; NaN counts as the extreme) in int32."""
    if fn in ("argmax", "argmin"):
        f = np.argmax if fn == "argmax" else np.argmin
        return np.expand_dims(f(x, axis=axis), axis).astype(np.int32)
    f = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[fn]
    if dtype.is_float:
        with np.errstate(all="ignore"):
            return f(x.astype(np.float32), axis=axis, keepdims=True).astype(np.float32)
    return f(x.astype(np.int64), axis=axis, keepdims=True).astype(dtype.np_dtype())


@rule(O.Full)
def full(m: _Interp, g: _Group, op: O.Full) -> None:
    t: TileType = op.result.type
    # an integer tile holds its value exactly (in float32 it would be exact only to 2^24)
    g.env[op.result.id] = np.full(t.shape, op.value, dtype=np.float32 if t.dtype.is_float
                                  else t.dtype.np_dtype())


def _c_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero, as C (and the scalar `floordiv`); a zero
    divisor gives 0 here (undefined on the device)."""
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, 0, np.where((a < 0) != (b < 0), -q, q)).astype(a.dtype)


@rule(O.Elementwise)
def elementwise(m: _Interp, g: _Group, op: O.Elementwise) -> None:
    """Each operand cast to the type the op computes in (argus.ir.numeric.work_dtype, as the
    generated code casts it): integer math in the integer type itself (exact at any index,
    wrapping as two's complement, division truncating), float math in float32."""
    t = op.result.type
    work = work_dtype(op.fn, [a.type.dtype for a in op.args], t.dtype)
    args = [m.val(g, a) for a in op.args]
    if work.name != "i1":
        np_work = np.float32 if work.is_float else work.np_dtype()
        args = [a if (op.fn == "where" and k == 0) else np.asarray(a).astype(np_work)
                for k, a in enumerate(args)]
    with np.errstate(all="ignore"):
        if op.fn == "div" and not work.is_float:
            r = _c_div(*np.broadcast_arrays(*args))
        elif op.fn == "mod":   # integer tiles only (the DSL refuses floats): C's remainder
            a, b = np.broadcast_arrays(*args)
            r = a - _c_div(a, b) * b
        else:
            r = _EW[op.fn](*args)
        if op.emulate:
            # the columns the FMA pipe computes (target/exp2_emulation.py: the same rule and
            # arithmetic as the generated code), the others as the SFU
            x = np.broadcast_to(args[0], t.shape)
            r = np.where(exp2_emulation.emulated_columns(t.shape[-1], op.emulate),
                         exp2_emulation.exp2_emulated(x), r)
    g.env[op.result.id] = (np.asarray(r, dtype=bool) if t.dtype == dtypes.i1
                           else _round(np.broadcast_to(r, t.shape), t.dtype))


@rule(O.Convert)
def convert(m: _Interp, g: _Group, op: O.Convert) -> None:
    src, dst = op.src.type.dtype, op.result.type.dtype
    x = m.val(g, op.src)
    if src.is_float and dst.kind in ("int", "uint"):
        # as the device's cvt.rzi (PTX ISA "cvt"): toward zero, clamped to the destination's
        # range; NaN to 0, except into a 64-bit integer or from an f64, where NaN gives
        # 1 << (bits - 1) (INT64_MIN for i64; PTX ISA 9.0, cvt's notes). numpy's astype leaves
        # those undefined
        info = np.iinfo(dst.np_dtype())
        a = np.asarray(x, np.float64)
        t = np.nan_to_num(np.trunc(a), nan=0.0, posinf=np.inf, neginf=-np.inf)
        inside = np.clip(t, -2.0 ** 62, 2.0 ** 62).astype(np.int64)   # then the exact ends
        x = np.where(t >= float(info.max), info.max, np.where(t <= float(info.min), info.min,
                                                              inside)).astype(dst.np_dtype())
        if info.bits == 64 or src.name == "f64":
            nan = info.min if info.kind == "i" else np.uint64(1 << (info.bits - 1))
            x = np.where(np.isnan(a), nan, x).astype(dst.np_dtype())
    g.env[op.result.id] = _round(x, dst)


@rule(O.Reduce)
def reduce(m: _Interp, g: _Group, op: O.Reduce) -> None:
    g.env[op.result.id] = _reduce(op.fn, m.val(g, op.src), op.axis, op.result.type.dtype)


_SCAN = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate,
         "min": np.minimum.accumulate}


@rule(O.Scan)
def scan(m: _Interp, g: _Group, op: O.Scan) -> None:
    """init, then the elements along the axis in scan order, combined one by one in float32
    (the device's order differs only by the association of its warp-level steps); integer
    tiles exactly (any order gives the same integers)."""
    dtype = op.src.type.dtype
    # floats in float32; integers in int64, which wraps to the device's i32 sums and products
    # when cast back (arithmetic modulo 2^32 commutes with the cast), and is exact for i64
    work = np.float32 if dtype.is_float else np.int64
    x = np.asarray(m.val(g, op.src), dtype=work)
    init = np.broadcast_to(np.asarray(m.val(g, op.init), dtype=work), op.total.type.shape)
    if op.reverse:
        x = np.flip(x, op.axis)
    with np.errstate(all="ignore"):
        run = _SCAN[op.fn](np.concatenate((init, x), axis=op.axis), axis=op.axis,
                           **({} if op.fn in ("max", "min") else {"dtype": work}))
    n = x.shape[op.axis]
    part = np.take(run, range(0, n) if op.exclusive else range(1, n + 1), axis=op.axis)
    if op.reverse:
        part = np.flip(part, op.axis)
    g.env[op.result.id] = _round(np.ascontiguousarray(part), op.result.type.dtype)
    g.env[op.total.id] = _round(np.take(run, [n], axis=op.axis), op.total.type.dtype)


@rule(O.ConvertLayout)
def convert_layout(m: _Interp, g: _Group, op: O.ConvertLayout) -> None:
    g.env[op.result.id] = np.array(m.val(g, op.src), copy=True)  # layouts: no meaning


@rule(O.Arange)
def arange(m: _Interp, g: _Group, op: O.Arange) -> None:
    g.env[op.result.id] = np.arange(op.result.type.shape[0], dtype=np.int32)


@rule(O.ExpandDims)
def expand_dims(m: _Interp, g: _Group, op: O.ExpandDims) -> None:
    g.env[op.result.id] = np.expand_dims(m.val(g, op.src), op.axis)


@rule(O.TileSlice)
def tile_slice(m: _Interp, g: _Group, op: O.TileSlice) -> None:
    src = m.val(g, op.src)
    index = [slice(None)] * src.ndim
    index[op.axis] = slice(op.start, op.start + op.result.type.shape[op.axis])
    g.env[op.result.id] = src[tuple(index)]
