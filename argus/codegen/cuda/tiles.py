"""Rendering rules of register tiles: full, elementwise, convert, tile.slice, arange,
expand_dims and convert_layout.

A register tile is a per-thread array unrolled at generation time (register i of thread gtid
holds a static coordinate of its layout). A pointwise tile used once, right after it is made,
is not stored: its expression is inlined at the use (`acc.to(bf16)` feeding a store costs no
registers). Views (slices, expand_dims, arange) are expressions over their source's registers.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import TileInfo, _Emitter, c_float, rule
from argus.codegen.cuda.layouts import broadcast_map
from argus.codegen.cuda.reduce import check_scratch
from argus.errors import CompileError
from argus.ir import ops as O
from argus.target import register_layouts as RL


def _ew_c(fn: str, a: list[str]) -> str:
    binops = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=",
              "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
    if fn in binops:
        return f"({a[0]} {binops[fn]} {a[1]})"
    return {
        "neg": lambda: f"(-{a[0]})", "abs": lambda: f"fabsf({a[0]})",
        "exp": lambda: f"expf({a[0]})", "exp2": lambda: f"exp2f({a[0]})",
        "exp2_approx": lambda: f"ag::exp2_approx({a[0]})",
        "round_tf32": lambda: f"ag::round_tf32({a[0]})",
        "log": lambda: f"logf({a[0]})", "sqrt": lambda: f"sqrtf({a[0]})",
        "rsqrt": lambda: f"rsqrtf({a[0]})", "tanh": lambda: f"tanhf({a[0]})",
        "erf": lambda: f"erff({a[0]})", "sigmoid": lambda: f"(1.0f / (1.0f + expf(-{a[0]})))",
        "relu": lambda: f"ag::max_nan({a[0]}, 0.0f)", "recip": lambda: f"(1.0f / {a[0]})",
        "max": lambda: f"ag::max_nan({a[0]}, {a[1]})",
        "min": lambda: f"ag::min_nan({a[0]}, {a[1]})",
        "pow": lambda: f"powf({a[0]}, {a[1]})", "where": lambda: f"({a[0]} ? {a[1]} : {a[2]})",
        "and": lambda: f"({a[0]} && {a[1]})", "or": lambda: f"({a[0]} || {a[1]})",
        "not": lambda: f"(!{a[0]})",
    }[fn]()


def _round_c(expr: str, dtype) -> str:
    """The float value `expr` after a round trip through `dtype` (what a device store keeps)."""
    if dtype.name == "bf16":
        return f"ag::bf16_to_f32(ag::f32_to_bf16({expr}))"
    if dtype.name == "f16":
        return f"ag::f16_to_f32(ag::f32_to_f16({expr}))"
    if dtype.name == "e4m3":  # saturating, as argus.dtypes.round_to
        return f"ag::e4m3_to_f32(ag::f32_to_e4m3({expr}))"
    if dtype.kind in ("int", "uint"):  # integer tiles live in float registers: truncate
        return f"(float)(int)({expr})"
    return expr


@rule(O.Full)
def full(em: _Emitter, op: O.Full) -> None:
    info = em.declare_tile(op.result, op.loc)
    if op.scale_d_zero:
        # The first wgmma overwrites (scale-d = 0); zero only if none ran (fence.operands).
        em.emit(f"int {info.name}_zero = 1;")
        em.lazy_zero[info.name] = info.layout.nregs
        return
    em.emit("#pragma unroll")
    em.emit(f"for (int i = 0; i < {info.layout.nregs}; ++i) {info.name}[i] = "
            f"{c_float(op.value)};")


@rule(O.Elementwise)
def elementwise(em: _Emitter, op: O.Elementwise) -> None:
    lay = em.layout(op.result.type, op.loc)
    dtype = op.result.type.dtype

    def expr(i: int) -> str:
        e = _ew_c(op.fn, [em.operand_expr(a, i, lay) for a in op.args])
        return e if dtype.name == "i1" else _round_c(e, dtype)

    _define_pointwise(em, op, lay, expr)


@rule(O.Convert)
def convert(em: _Emitter, op: O.Convert) -> None:
    lay = em.layout(op.result.type, op.loc)
    dtype = op.result.type.dtype
    _define_pointwise(em, op, lay, lambda i: _round_c(em.operand_expr(op.src, i, lay), dtype))


def _define_pointwise(em: _Emitter, op, lay, expr) -> None:
    if op.result.id in em.inline_ok:
        em.tiles[op.result.id] = TileInfo(lay, op.result.type.dtype, virtual=expr)
        return
    info = em.declare_tile(op.result, op.loc)
    for i in range(lay.nregs):
        em.emit(f"{info.name}[{i}] = {expr(i)};")


@rule(O.TileSlice)
def tile_slice(em: _Emitter, op: O.TileSlice) -> None:
    """A static window: result register i is the source register holding its coordinate
    shifted by `start` along the axis, in the same thread (a view, no code)."""
    src = em.tiles[op.src.id]
    lay = em.layout(op.result.type, op.loc)
    sl, rl = src.layout.rl, lay.rl
    index = {reg: j for j, reg in enumerate(sl.regs)}
    regs = []
    for reg in rl.regs:
        regs.append(index.get(tuple(c + (op.start if d == op.axis else 0)
                                    for d, c in enumerate(reg))))
    if sl.thread_bases != rl.thread_bases or None in regs:
        raise CompileError(f"slicing a {op.src.type.layout} tile along axis {op.axis} at "
                           f"{op.start} is not supported: the window's elements are not "
                           "held by the same threads", op.loc,
                           fix="slice accumulators along columns at multiples of 8, "
                               "blocked tiles along leading dims")

    def expr(i: int, v=op.src, regs=tuple(regs)) -> str:
        return em.reg_expr(v, regs[i])

    _define_pointwise(em, op, lay, expr)


@rule(O.Arange)
def arange(em: _Emitter, op: O.Arange) -> None:
    """An index tile is its coordinate expression: no registers, no memory."""
    lay = em.layout(op.result.type, op.loc)
    em.tiles[op.result.id] = TileInfo(lay, op.result.type.dtype,
                                       virtual=lambda i, lay=lay: lay.coord(i)[0])


@rule(O.ExpandDims)
def expand_dims(em: _Emitter, op: O.ExpandDims) -> None:
    """A unit dim inserted: the same registers under the expanded layout (a view)."""
    lay = em.layout(op.result.type, op.loc)
    src = em.tiles[op.src.id]
    m = broadcast_map(src.layout.rl, RL.squeeze(lay.rl, op.axis))
    if m is None:
        raise CompileError(f"expand_dims: a {src.layout} tile does not give "
                           f"{op.result.type.layout}", op.loc)
    em.tiles[op.result.id] = TileInfo(
        lay, op.result.type.dtype, virtual=lambda i, v=op.src, m=m: em.reg_expr(v, m[i]))


@rule(O.ConvertLayout)
def convert_layout(em: _Emitter, op: O.ConvertLayout) -> None:
    """Redistribute through shared memory (the op's scratch buffer, one copy per warpgroup
    of a role): every thread class writes its registers at their coordinates (row-major), a
    group barrier, every thread reads its new registers, and a barrier so the buffer may be
    rewritten (in a loop)."""
    src = em.tiles[op.src.id]
    sl = src.layout
    lay = em.layout(op.result.type, op.loc)
    shape = op.result.type.shape
    size = 1
    for n in shape:
        size *= n
    copies, wg = em.role_copies  # one buffer per warpgroup of the role
    if size * copies * 4 > 32 * 1024:
        raise CompileError(f"a layout conversion of a {'x'.join(map(str, shape))} tile "
                           f"({op.src.type.layout} -> {op.result.type.layout}) through "
                           f"shared memory needs more than 32 KB ({copies} warpgroup(s))",
                           op.loc,
                           fix="keep the tile in one layout (e.g. derive row statistics "
                               "from the accumulator itself)")
    check_scratch(op, op.scratch, 1, size * copies)   # placed by lower/smem.py
    buf = em.name(op.scratch[0])

    def lin(coord) -> str:
        terms, stride = [], 1
        for d in reversed(range(len(shape))):
            if shape[d] > 1:
                terms.append(coord[d] if stride == 1 else f"{coord[d]} * {stride}")
            stride *= shape[d]
        return (f"{wg} * {size} + " if wg else "") + (" + ".join(reversed(terms)) or "0")

    rep = sum(1 << b for b in sl.rl.replicated_bits())
    em.emit(f"if ((gtid & {rep}) == 0) {{" if rep else "{")
    for r in range(sl.nregs):
        em.emit(f"    {buf}[{lin(sl.coord(r))}] = {em.reg_expr(op.src, r)};")
    em.emit("}")
    em.emit(em.group_barrier())
    info = em.declare_tile(op.result, op.loc)
    for i in range(lay.nregs):
        em.emit(f"{info.name}[{i}] = {buf}[{lin(lay.coord(i))}];")
    em.emit(em.group_barrier())
