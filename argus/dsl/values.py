"""Trace-time handles for IR values: Scalar, Tile, TensorArg, SmemBuffer, SmemView.

Operators on these handles record IR ops; plain Python numbers fold at trace time. A handle
never holds data: using one in Python control flow (`if`, `bool`, `int`) is a TraceError that
points the user at `ag.when` / `ag.range`.
"""

from __future__ import annotations


from argus import dtypes
from argus.dtypes import DType
from argus.errors import TraceError
from argus.dsl.tracing import current, user_loc
from argus.ir import ops as O
from argus.ir.core import Value
from argus.ir.numeric import COMPARES as O_COMPARES
from argus.ir.numeric import BITWISE as O_BITWISE
from argus.ir.numeric import INT_NATIVE as O_INT_NATIVE
from argus.ir.numeric import SHIFTS as O_SHIFTS
from argus.ir.numeric import common_dtype, int_result
from argus.ir.types import ScalarType, SmemType, SmemViewType, TileType

Number = int | float


def _emit(op):
    return current().builder.append(op)


def const_scalar(x: Number | bool, dtype: DType | None = None) -> "Scalar":
    ctx = current()
    if dtype is None:
        dtype = (dtypes.i1 if isinstance(x, bool) else
                 dtypes.i32 if isinstance(x, int) else dtypes.f32)
    v = ctx.builder.fresh(ScalarType(dtype))
    _emit(O.Const(v, x, loc=user_loc()))
    return Scalar(v)


def as_scalar(x) -> "Scalar":
    if isinstance(x, Scalar):
        return x
    if isinstance(x, (bool, int, float)):
        return const_scalar(x)
    raise TraceError(f"expected a scalar (int, float or runtime scalar), got {type(x).__name__}",
                     user_loc())


class _BitOperators:
    """& | ^ << >> of Scalar and Tile, one table for both: each class's `_bits(fn, other,
    reverse, logical)` records them. & | on booleans (comparison results) are logical, on
    integers bitwise, with ^ << >> (the right operand of a shift: a count in [0, bits))."""

    def __and__(self, o): return self._bits("bitand", o, logical="and")
    def __rand__(self, o): return self._bits("bitand", o, True, logical="and")
    def __or__(self, o): return self._bits("bitor", o, logical="or")
    def __ror__(self, o): return self._bits("bitor", o, True, logical="or")
    def __xor__(self, o): return self._bits("bitxor", o)
    def __rxor__(self, o): return self._bits("bitxor", o, True)
    def __lshift__(self, o): return self._bits("shl", o)
    def __rlshift__(self, o): return self._bits("shl", o, True)
    def __rshift__(self, o): return self._bits("shr", o)
    def __rrshift__(self, o): return self._bits("shr", o, True)


class Scalar(_BitOperators):
    """A runtime scalar (uniform unless derived from ag.thread_index())."""

    def __init__(self, value: Value, uniform: bool = True):
        self.value = value
        self.uniform = uniform

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    def _bin(self, fn: str, other, reverse: bool = False) -> "Scalar":
        if isinstance(other, Tile) and fn in _TILE_FNS:
            # a runtime scalar against a tile is elementwise: `q0 + ag.arange(64)`
            ew = _TILE_FNS[fn]
            return elementwise(ew, other, self) if reverse else elementwise(ew, self, other)
        # Identities with trace-time constants record nothing: x*1, 1*x, x//1, x+0, 0+x, x-0.
        if isinstance(other, int) and not isinstance(other, bool):
            if (fn == "mul" and other == 1) or (fn == "add" and other == 0) or \
                    (not reverse and ((fn == "floordiv" and other == 1)
                                      or (fn == "sub" and other == 0))):
                return self
        other_s = as_scalar(other)
        lhs, rhs = (other_s, self) if reverse else (self, other_s)
        if lhs.dtype.is_float != rhs.dtype.is_float:
            raise TraceError(f"scalar {fn} mixes {lhs.dtype} and {rhs.dtype}", user_loc(),
                             fix="make both operands ints or both floats")
        comparison = fn in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or")
        out_dtype = dtypes.i1 if comparison else lhs.dtype
        v = current().builder.fresh(ScalarType(out_dtype))
        _emit(O.Arith(v, fn, lhs.value, rhs.value, loc=user_loc()))
        return Scalar(v, uniform=lhs.uniform and rhs.uniform)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o)
    def __rfloordiv__(self, o): return self._bin("floordiv", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __mod__(self, o): return self._bin("mod", o)
    def __rmod__(self, o): return self._bin("mod", o, True)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)

    def _bits(self, fn: str, other, reverse: bool = False, logical: str | None = None):
        if logical is not None and self.dtype == dtypes.i1:
            return self._bin(logical, other, reverse)
        if isinstance(other, Tile):
            return self._bin(fn, other, reverse)   # elementwise checks the operands
        if isinstance(other, int) and not isinstance(other, bool):
            other = const_scalar(_bitwise_literal(fn, other, self.dtype, reverse), self.dtype)
        lhs, rhs = (other, self) if reverse else (self, other)
        _check_bitwise(fn, (lhs, rhs))
        if fn not in O_SHIFTS and lhs.dtype != rhs.dtype:
            raise TraceError(f"scalar `{_BITWISE_OP[fn]}` mixes {lhs.dtype} and {rhs.dtype}",
                             user_loc(), fix="convert one operand so both have one type")
        dtype = lhs.dtype
        v = current().builder.fresh(ScalarType(dtype))
        _emit(O.Arith(v, fn, lhs.value, rhs.value, loc=user_loc()))
        return Scalar(v, uniform=lhs.uniform and rhs.uniform)

    def eq(self, o) -> "Scalar":
        return self._bin("eq", o)

    def ne(self, o) -> "Scalar":
        return self._bin("ne", o)

    # `pid == 0` records a comparison (like the other operators); identity hashing stays so
    # handles can still be dictionary keys.
    __eq__ = eq
    __ne__ = ne
    __hash__ = object.__hash__

    def __bool__(self):
        raise TraceError("a runtime scalar was used in Python control flow (if/while/and/or)",
                         user_loc(),
                         fix="use `with ag.when(cond):` for a runtime condition and "
                             "`for i in ag.range(n):` for a runtime loop")

    def __index__(self):
        raise TraceError("a runtime scalar was used where Python needs a trace-time int "
                         "(a shape, a Python range, an index)", user_loc(),
                         fix="pass the value as a compile-time keyword argument of the kernel, "
                             "or use ag.range for runtime loops")

    __int__ = __index__

    def __repr__(self) -> str:
        return f"Scalar({self.value})"


# Scalar operators that become elementwise tile ops when the other operand is a tile.
_TILE_FNS = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "mod": "mod", "lt": "lt",
             "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne", "max": "max",
             "min": "min", **{fn: fn for fn in O_BITWISE}}


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(a) != len(b):
        raise TraceError(f"tiles of rank {len(a)} and {len(b)} cannot be combined", user_loc(),
                         fix="reshape with keep-dims reductions so ranks match")
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise TraceError(f"tile shapes {a} and {b} do not broadcast", user_loc())
        out.append(max(x, y))
    return tuple(out)


class Tile(_BitOperators):
    """A register tile: elementwise math, conversions and reductions record IR ops.
    `bound`: the static interval of an integer tile's values where the trace knows it
    (ag.arange, ag.full, integer math over them), else None; it picks i32 or i64 for integer
    arithmetic (argus/ir/numeric.py)."""

    def __init__(self, value: Value, bound: tuple[int, int] | None = None):
        self.value = value
        self.bound = bound

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    def _ew(self, fn: str, *others, reverse: bool = False) -> "Tile":
        return elementwise(fn, *(((*others, self) if reverse else (self, *others))))

    def __add__(self, o): return self._ew("add", o)
    def __radd__(self, o): return self._ew("add", o, reverse=True)
    def __sub__(self, o): return self._ew("sub", o)
    def __rsub__(self, o): return self._ew("sub", o, reverse=True)
    def __mul__(self, o): return self._ew("mul", o)
    def __rmul__(self, o): return self._ew("mul", o, reverse=True)
    def __truediv__(self, o): return self._ew("div", o)
    def __rtruediv__(self, o): return self._ew("div", o, reverse=True)
    def __mod__(self, o): return self._ew("mod", o)
    def __rmod__(self, o): return self._ew("mod", o, reverse=True)
    def __neg__(self): return self._ew("neg")
    def __lt__(self, o): return self._ew("lt", o)
    def __le__(self, o): return self._ew("le", o)
    def __gt__(self, o): return self._ew("gt", o)
    def __ge__(self, o): return self._ew("ge", o)
    def __eq__(self, o): return self._ew("eq", o)  # noqa: E704 - elementwise, like numpy
    def __ne__(self, o): return self._ew("ne", o)  # noqa: E704
    __hash__ = object.__hash__

    def __bool__(self):
        raise TraceError("a tile was used in Python control flow", user_loc(),
                         fix="use ag.where(cond, a, b) for elementwise selection")

    def to(self, dtype: DType) -> "Tile":
        if dtype == self.dtype:
            return self
        v = current().builder.fresh(TileType(dtype, self.shape))
        _emit(O.Convert(v, self.value, loc=user_loc()))
        return Tile(v)

    def _reduce(self, fn: str, axis: int) -> "Tile":
        if axis < 0:
            axis += len(self.shape)
        if not 0 <= axis < len(self.shape):
            raise TraceError(f"reduction axis {axis} out of range for a tile of shape "
                             f"{self.shape}", user_loc())
        shape = tuple(1 if i == axis else d for i, d in enumerate(self.shape))
        if fn in ("sum", "prod") and self.dtype == dtypes.i1:
            raise TraceError(f"{fn} of a boolean tile", user_loc(),
                             fix="convert it first, e.g. ag.where(mask, 1, 0)")
        dtype = dtypes.i32 if fn in ("argmax", "argmin") else self.dtype
        v = current().builder.fresh(TileType(dtype, shape))
        _emit(O.Reduce(v, self.value, fn, axis, loc=user_loc()))
        return Tile(v)

    def sum(self, axis: int = -1) -> "Tile": return self._reduce("sum", axis)
    def max(self, axis: int = -1) -> "Tile": return self._reduce("max", axis)
    def min(self, axis: int = -1) -> "Tile": return self._reduce("min", axis)
    def prod(self, axis: int = -1) -> "Tile": return self._reduce("prod", axis)

    def argmax(self, axis: int = -1) -> "Tile":
        """i32 indices of the maxima along `axis` (keepdims); ties: the smallest index."""
        return self._reduce("argmax", axis)

    def argmin(self, axis: int = -1) -> "Tile":
        """i32 indices of the minima along `axis` (keepdims); ties: the smallest index."""
        return self._reduce("argmin", axis)

    # & | (from _BitOperators) and ~ on boolean tiles are logical
    def __invert__(self): return self._bool("not")

    def _bits(self, fn: str, other, reverse: bool = False, logical: str | None = None):
        if logical is not None and self.dtype == dtypes.i1:
            return self._bool(logical, other)
        return self._ew(fn, other, reverse=reverse)

    def _bool(self, fn: str, *others) -> "Tile":
        for x in (self, *others):
            if not (isinstance(x, Tile) and x.dtype == dtypes.i1) and not isinstance(x, bool):
                raise TraceError(f"`{ {'and': '&', 'or': '|', 'not': '~'}[fn] }` combines "
                                 f"boolean tiles (comparison results), got "
                                 f"{getattr(x, 'dtype', type(x).__name__)}", user_loc())
        return elementwise(fn, self, *others)

    def expand_dims(self, axis: int) -> "Tile":
        """The tile with a unit dim inserted at `axis` (what t[:, None] / t[None, :] record)."""
        if not 0 <= axis <= len(self.shape) or len(self.shape) >= 4:
            raise TraceError(f"cannot insert a dim at {axis} into a rank-{len(self.shape)} tile "
                             "(tiles have rank <= 4)", user_loc())
        shape = self.shape[:axis] + (1,) + self.shape[axis:]
        v = current().builder.fresh(TileType(self.dtype, shape))
        _emit(O.ExpandDims(v, self.value, axis, loc=user_loc()))
        return Tile(v, self.bound)

    def __getitem__(self, key) -> "Tile":
        """A static window of the tile, e.g. acc[:, 64:128] (no copy)."""
        key = key if isinstance(key, tuple) else (key,)
        if any(k is None for k in key):
            # t[:, None] / t[None, :]: full slices and unit dims only (numpy's newaxis)
            if any(k is not None and k != slice(None) for k in key) or \
                    sum(k is not None for k in key) != len(self.shape):
                raise TraceError("index with ':' and None only to add unit dims, e.g. "
                                 "t[:, None] or t[None, :]", user_loc())
            out = self
            for axis, k in enumerate(key):
                if k is None:
                    out = out.expand_dims(axis)
            return out
        if len(key) != len(self.shape) or not all(isinstance(k, slice) for k in key):
            raise TraceError(f"index a rank-{len(self.shape)} tile with one slice per axis, "
                             f"e.g. t[:, 0:64]", user_loc())
        sliced = [(axis, k) for axis, k in enumerate(key) if k != slice(None)]
        if len(sliced) != 1:
            raise TraceError("slice exactly one axis of a tile", user_loc())
        axis, k = sliced[0]
        start, stop, step = k.indices(self.shape[axis])
        if step != 1 or not (isinstance(k.start, (int, type(None))) and
                             isinstance(k.stop, (int, type(None)))) or stop <= start:
            raise TraceError(f"tile slices take trace-time bounds with step 1, got {k}",
                             user_loc())
        shape = tuple(stop - start if i == axis else d for i, d in enumerate(self.shape))
        v = current().builder.fresh(TileType(self.dtype, shape))
        _emit(O.TileSlice(v, self.value, axis, start, loc=user_loc()))
        return Tile(v, self.bound)

    def __repr__(self) -> str:
        return f"Tile({self.value}: {self.value.type})"


def _is_int(dtype: DType) -> bool:
    return dtype.kind in ("int", "uint")


_BITWISE_OP = {"bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}


def _check_bitwise(fn: str, operands) -> None:
    """Refuse a bitwise op of anything but integers (tiles, runtime scalars, Python ints):
    a float has no bits the DSL exposes, a boolean tile takes the logical & | ~."""
    for x in operands:
        dtype = getattr(x, "dtype", None)
        ok = (isinstance(x, int) and not isinstance(x, bool)) or \
            (dtype is not None and _is_int(dtype))
        if not ok:
            got = dtype if dtype is not None else type(x).__name__
            raise TraceError(f"`{_BITWISE_OP[fn]}` ({fn}) takes integer tiles and scalars "
                             f"(i32, u32, i64), got {got}", user_loc(),
                             fix="convert with .to(ag.i32) first (a value conversion, not a "
                                 "bit cast); combine boolean masks with & | ~ on comparisons")


def _bitwise_literal(fn: str, x: int, dtype: DType, lhs: bool) -> int:
    """A Python int operand of a bitwise op against an operand of `dtype`: a shift count
    must lie in [0, bits) (C leaves larger ones undefined; the device clamps them); any other
    literal must fit the type's bits (0xFF000000 beside an i32 is the i32 with those bits, as
    C's `0xFF000000u` would be) and is stored in it, two's complement."""
    bits = dtype.bits
    if fn in O_SHIFTS and not lhs:
        if not 0 <= x < bits:
            raise TraceError(f"shift count {x} is outside [0, {bits}) for a {dtype} operand",
                             user_loc(), fix=f"shift by 0 to {bits - 1} (a wider shift is "
                                             f"undefined in C); use ag.i64 for 64-bit shifts")
        return x
    if not -(1 << (bits - 1)) <= x < (1 << bits):
        raise TraceError(f"the literal {x} does not fit the {bits} bits of a {dtype} operand "
                         f"of `{_BITWISE_OP[fn]}`", user_loc(),
                         fix="convert the other operand to ag.i64 first")
    x &= (1 << bits) - 1
    return x - (1 << bits) if dtype.kind == "int" and x >= 1 << (bits - 1) else x


def _operand(x, like: Tile | None, fn: str) -> Value:
    if isinstance(x, Tile):
        return x.value
    if isinstance(x, Scalar):
        return x.value
    if isinstance(x, (bool, int, float)):
        if like is not None and _is_int(like.dtype) and not isinstance(x, bool):
            if float(x).is_integer():   # 2.0 beside an integer tile is the integer 2
                n = int(x)
                wide = not -(1 << 31) <= n < (1 << 31)
                return const_scalar(n, dtypes.i64 if wide else like.dtype).value
            if fn not in O_COMPARES:
                raise TraceError(f"{fn} of an {like.dtype} tile and the float {x!r}",
                                 user_loc(), fix="convert the tile first: t.to(ag.f32)")
            return const_scalar(float(x), dtypes.f32).value
        dtype = dtypes.f32 if (like is None or like.dtype.is_float) else like.dtype
        return const_scalar(float(x) if dtype.is_float else x, dtype).value
    raise TraceError(f"cannot use {type(x).__name__} as a tile operand", user_loc())


def _int_operand(x) -> tuple[DType, tuple[int, int] | None, bool] | None:
    """(dtype, bound, is_constant) of an integer operand (argus/ir/numeric.int_result); None
    for a float or boolean one."""
    if isinstance(x, Tile):
        return (x.dtype, x.bound, False) if _is_int(x.dtype) else None
    if isinstance(x, Scalar):
        return (x.dtype, None, False) if _is_int(x.dtype) else None
    if isinstance(x, bool):
        return None
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer()):
        return (dtypes.i32 if -(1 << 31) <= x < (1 << 31) else dtypes.i64, (int(x), int(x)),
                True)
    return None


def elementwise(fn: str, *args, emulate: tuple[int, ...] = ()) -> Tile:
    tiles = [a for a in args if isinstance(a, Tile)]
    if not tiles:
        raise TraceError(f"{fn} needs at least one tile operand", user_loc())
    shape = tiles[0].shape
    for t in tiles[1:]:
        shape = _broadcast_shape(shape, t.shape)
    if fn in O_BITWISE:
        _check_bitwise(fn, args)
        args = tuple(_bitwise_literal(fn, a, tiles[0].dtype, k == 0)
                     if isinstance(a, int) else a for k, a in enumerate(args))
        # a literal past the i32 range (a u32 mask) is a constant of the tile's own type, not
        # the i64 an int literal would become
        args = tuple(const_scalar(a, tiles[0].dtype) if isinstance(a, int) and
                     not -(1 << 31) <= a < (1 << 31) else a for a in args)
    value_args = args[1:] if fn == "where" else args
    value_tiles = [a for a in value_args if isinstance(a, Tile)]
    dtype = value_tiles[0].dtype if value_tiles else dtypes.f32
    bound = None
    ints = [_int_operand(a) for a in value_args]
    if value_tiles and all(_is_int(t.dtype) for t in value_tiles) and \
            not any(isinstance(a, Scalar) and a.dtype.is_float for a in value_args):
        # integer tiles of any width combine (i32 with i64 gives i64); the result type and
        # its bound follow argus/ir/numeric.py (i64 where a bound says i32 could overflow)
        if fn in O_INT_NATIVE and all(i is not None for i in ints):
            dtype, bound = int_result(fn, ints)
        else:
            dtype = common_dtype([i[0] for i in ints if i is not None])
    else:
        for t in value_tiles[1:]:
            if t.dtype != dtype:
                raise TraceError(f"{fn} mixes tile dtypes {dtype} and {t.dtype}", user_loc(),
                                 fix="convert one operand with .to(dtype)")
    if fn == "mod" and not _is_int(dtype):
        raise TraceError(f"% takes integer tiles (C's remainder of `/`), got {dtype}",
                         user_loc(), fix="compute x - y * (x / y).to(ag.i32).to(x.dtype) "
                                         "for floats, or convert to ag.i32 first")
    if fn in O_COMPARES:
        dtype, bound = dtypes.i1, None
    elif _is_int(dtype) and any(isinstance(a, Scalar) and a.dtype.is_float
                                for a in value_args):
        raise TraceError(f"{fn} of an {dtype} tile and an f32 scalar", user_loc(),
                         fix="convert the tile first: t.to(ag.f32)")
    like = value_tiles[0] if value_tiles else tiles[0]
    operands = tuple(_operand(a, like, fn) for a in args)
    v = current().builder.fresh(TileType(dtype, shape))
    _emit(O.Elementwise(v, fn, operands, emulate, loc=user_loc()))
    return Tile(v, bound)


class TensorArg:
    """A global tensor parameter inside the trace: `.shape[i]` is a runtime Scalar."""

    def __init__(self, name: str, value: Value, shape_scalars: tuple[Scalar | int, ...]):
        self.name = name
        self.value = value
        self.shape = shape_scalars

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    def __repr__(self) -> str:
        return f"TensorArg({self.name}: {self.value.type})"


class SmemBuffer:
    """A shared-memory buffer; index a staged buffer with a stage to get a view."""

    def __init__(self, value: Value):
        self.value = value

    @property
    def type(self) -> SmemType:
        return self.value.type

    def __getitem__(self, stage) -> "SmemView":
        if len(self.type.shape) != 3:
            raise TraceError("only a staged (3-d: stages x rows x cols) buffer is indexed by a "
                             "stage", user_loc(), fix="use .view() for a 2-d buffer")
        if isinstance(stage, int) and not 0 <= stage < self.type.shape[0]:
            raise TraceError(f"stage {stage} out of range [0, {self.type.shape[0]})", user_loc())
        return SmemView(self, stage, 0, self.type.shape[1])

    def view(self) -> "SmemView":
        if len(self.type.shape) != 2:
            raise TraceError("view() needs a 2-d buffer; index staged buffers by stage",
                             user_loc())
        return SmemView(self, None, 0, self.type.shape[0])


class SmemView:
    """Rows [row0, row0 + rows) of one stage of a buffer. Materialized lazily as smem.slice,
    at the line that defined the view (`sA[st].rows_of(0, 64)`), not at the op that uses it:
    a view whose first row is a constant emits no other op there, and the verifier names the
    view op's line as where an operand's rows were selected (store.coords' `m_view_at`)."""

    def __init__(self, buffer: SmemBuffer, stage, row0, rows: int):
        self.buffer = buffer
        self.stage = stage
        self.row0 = row0
        self.rows = rows
        self.loc = user_loc()

    @property
    def cols(self) -> int:
        return self.buffer.type.shape[-1]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def rows_slice(self, start, count: int) -> "SmemView":
        """The sub-view of `count` rows starting at `start` (an int or runtime scalar)."""
        if not isinstance(count, int) or count <= 0:
            raise TraceError("rows(...) needs a positive trace-time row count", user_loc())
        if isinstance(start, int) and start + count > self.rows:
            raise TraceError(f"rows [{start}, {start + count}) exceed the view's {self.rows} "
                             f"rows", user_loc())
        row0 = self.row0 + start if not (isinstance(self.row0, int) and self.row0 == 0) else start
        return SmemView(self.buffer, self.stage, row0, count)

    rows_of = rows_slice

    def materialize(self) -> Value:
        ctx = current()
        t = self.buffer.type
        v = ctx.builder.fresh(SmemViewType(t.dtype, (self.rows, self.cols), t.swizzle))
        stage = None if self.stage is None else as_scalar(self.stage).value
        row0 = self.row0 if isinstance(self.row0, int) else as_scalar(self.row0).value
        _emit(O.SmemSlice(v, self.buffer.value, stage, row0, loc=self.loc))
        return v
