"""Rendering rules of register tiles: full, elementwise, convert, tile.slice, arange,
expand_dims and convert_layout.

A register tile is a per-thread array unrolled at generation time (register i of thread gtid
holds a static coordinate of its layout). A pointwise tile used once, right after it is made,
is not stored: its expression is inlined at the use (`acc.to(bf16)` feeding a store costs no
registers). Views (slices, expand_dims, arange) are expressions over their source's registers.

Integer tiles are integer C++ end to end (emit.tile_c: i32 `int`, i64 `long long`, u32
`unsigned`): index tiles, masks built from them and their compares stay exact at any index
(a float register is exact only to 2^24). Every change of C type is an explicit cast at the
use (`(float)(idx)` where an index feeds float math), never a silent promotion; the rule for
the type an op computes in is argus.ir.numeric.work_dtype, which the interpreter reads too.
"""

from __future__ import annotations

import re

from argus.codegen.cuda.emit import (TileInfo, _Emitter, c_float, literal_c, per_word, rule,
                                      shl_c, tile_c)
from argus.codegen.cuda.layouts import broadcast_map
from argus.codegen.cuda.reduce import check_scratch
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.numeric import work_dtype
from argus.target import exp2_emulation
from argus.target import register_layouts as RL

_BINOPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=",
           "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "bitand": "&", "bitor": "|",
           "bitxor": "^", "shr": ">>"}


def _ew_c(fn: str, a: list[str], work) -> str:
    """C expression of `fn` over operand expressions `a`, all already of the C type of
    `work` (except a `where` condition and the operands of & | ~, which are bool)."""
    if fn == "shl":
        return shl_c(a[0], a[1], work)
    if fn in _BINOPS:
        return f"({a[0]} {_BINOPS[fn]} {a[1]})"
    if not work.is_float and fn in ("abs", "max", "min", "relu"):
        if fn == "abs":
            return f"({a[0]})" if work.kind == "uint" else \
                f"{'llabs' if work.name == 'i64' else 'abs'}({a[0]})"
        if fn == "relu":
            return f"max({a[0]}, ({tile_c(work)})0)"
        return f"{fn}({a[0]}, {a[1]})"   # CUDA's integer overloads of max / min
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


def cast_c(expr: str, src, dst) -> str:
    """`expr` (of dtype `src`) as the C type of `dst`: unchanged when the C types agree, an
    integer literal respelled, an explicit cast otherwise (never C's implicit promotion)."""
    if tile_c(src) == tile_c(dst):
        return expr
    if re.fullmatch(r"-?\d+", expr):
        if dst.is_float:
            return c_float(float(int(expr)))
        if dst.name == "i64":
            return f"{expr}LL"
    if re.fullmatch(r"[A-Za-z_]\w*(\[\d+\])?", expr):   # a name or a register: no parens
        return f"({tile_c(dst)}){expr}"
    return f"(({tile_c(dst)})({expr}))"


def _round_c(expr: str, dtype) -> str:
    """The float value `expr` after a round trip through float `dtype` (what a device store
    keeps); integer values never pass through here (they have registers of their own)."""
    if dtype.name == "bf16":
        return f"ag::bf16_to_f32(ag::f32_to_bf16({expr}))"
    if dtype.name == "f16":
        return f"ag::f16_to_f32(ag::f32_to_f16({expr}))"
    if dtype.name == "e4m3":  # saturating, as argus.dtypes.round_to
        return f"ag::e4m3_to_f32(ag::f32_to_e4m3({expr}))"
    return expr


def convert_c(expr: str, src, dst) -> str:
    """`expr` (a register value of dtype `src`) converted to `dst`: an explicit cast between
    C types (an integer to a float rounds to nearest; a float to an integer is cvt.rzi:
    toward zero, clamped to the range, NaN to 0, as the interpreter's convert; a narrower
    integer wraps), then the float rounding of a
    bf16/f16/e4m3 destination. A boolean is 1 / 0; a value becomes a boolean where nonzero."""
    if dst.name == "i1" and src.name != "i1":
        return f"({expr} != 0)"
    return _round_c(cast_c(expr, src, dst), dst) if dst.is_float else cast_c(expr, src, dst)


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
            f"{literal_c(op.value, op.result.type.dtype)};")


@rule(O.Elementwise)
def elementwise(em: _Emitter, op: O.Elementwise) -> None:
    lay = em.layout(op.result.type, op.loc)
    dtype = op.result.type.dtype
    work = work_dtype(op.fn, [a.type.dtype for a in op.args], dtype)

    def arg(k: int, a, i: int) -> str:
        e = em.operand_expr(a, i, lay)
        if op.fn == "where" and k == 0:   # the condition stays bool
            return e
        return cast_c(e, a.type.dtype, work)

    emulated = _emulated_registers(op, lay.rl) if op.emulate else ()

    def expr(i: int) -> str:
        if i in emulated:   # this register's exp2 on the FMA pipe (target/exp2_emulation.py)
            e = f"ag::exp2_emu({arg(0, op.args[0], i)})"
        else:
            e = _ew_c(op.fn, [arg(k, a, i) for k, a in enumerate(op.args)], work)
        if dtype.name == "i1":
            return e
        return _round_c(e, dtype) if dtype.is_float else cast_c(e, work, dtype)

    _define_pointwise(em, op, lay, expr)


def _emulated_registers(op: O.Elementwise, rl) -> frozenset[int]:
    """The registers of an `emulate` exp2 computed on the FMA pipe: those whose column falls
    in an emulated group, which must be so for every thread alike (the choice is made at
    generation time, per register, so a thread-dependent one cannot be rendered)."""
    problem = exp2_emulation.check_spec(op.emulate)
    if op.fn != "exp2_approx" or problem:
        raise CompileError(f"elementwise {op.fn} with emulate={op.emulate!r}: "
                           f"{problem or 'only exp2_approx has an emulated form'}", op.loc,
                           fix="ag.exp2(x, approx=True, emulate=(count, period))")
    fraction = exp2_emulation.fraction_problem(rl.shape[-1], op.emulate)
    if fraction:
        raise CompileError(f"exp2 emulate={op.emulate!r}: {fraction}", op.loc,
                           fix="pick a count the row holds, or a wider tile (block_n 128 holds "
                               "every count of 16)")
    cols = exp2_emulation.emulated_columns(rl.shape[-1], op.emulate)
    out = set()
    for r in range(rl.nregs):
        picks = {bool(cols[rl.coord(t, r)[-1]]) for t in range(rl.threads)}
        if len(picks) > 1:
            raise CompileError(f"exp2 emulate={op.emulate!r} on a {rl.name} tile "
                               f"{'x'.join(map(str, rl.shape))}: register {r} holds emulated "
                               f"columns in some threads and not in others", op.loc,
                               fix="emulate groups of columns that one register holds in every "
                                   "thread (8 on a wgmma accumulator), or apply it to an "
                                   "accumulator-layout tile")
        if picks == {True}:
            out.add(r)
    return frozenset(out)


@rule(O.Convert)
def convert(em: _Emitter, op: O.Convert) -> None:
    lay = em.layout(op.result.type, op.loc)
    src, dst = op.src.type.dtype, op.result.type.dtype
    _define_pointwise(em, op, lay,
                      lambda i: convert_c(em.operand_expr(op.src, i, lay), src, dst))


def _define_pointwise(em: _Emitter, op, lay, expr) -> None:
    if op.result.id in em.inline_ok:
        em.tiles[op.result.id] = TileInfo(lay, op.result.type.dtype, virtual=expr)
        return
    info = em.declare_tile(op.result, op.loc)
    if info.packed:   # a convert of a carried A fragment (lower/packed.py): words packed
        for w in range(lay.nregs // per_word(info.dtype)):
            em.emit(f"{info.name}[{w}] = {em.pack_word(expr, w, info.dtype)};")
        return
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

    if op.result.type.packed and src.packed and src.virtual is None:
        # a view of a packed A fragment at a k-step boundary (lower/packed.py): its words are
        # the source's from the window's first register on (the register order of both is
        # the accumulator pattern's, columns in chunks of 8 a thread holds 2 of each)
        first = regs[0] if regs else 0
        if regs != list(range(first, first + len(regs))) or first % (4 * per_word(src.dtype)):
            raise CompileError(f"codegen: the packed view {op.result} is not a run of whole "
                               f"k steps of {op.src}'s A fragment words", op.loc,
                               fix="lower/packed.py views slices at multiples of 32 bytes "
                                   "of columns only")
        em.tiles[op.result.id] = TileInfo(lay, src.dtype, name=src.name, packed=True,
                                          word_base=src.word_base
                                          + first // per_word(src.dtype))
        return

    def expr(i: int, v=op.src, regs=tuple(regs)) -> str:
        return em.reg_expr(v, regs[i])

    if op.result.type.packed:
        # a window of a packed tile held as elements (an inlined convert): its readers pack
        em.tiles[op.result.id] = TileInfo(lay, op.result.type.dtype, virtual=expr)
        return
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
    # the buffer's rows are `op.pad` elements longer than the tile's (layout inference's
    # decision, ConvertLayout.pad); lower/smem.py sized the scratch the same way
    pitch = shape[-1] + op.pad
    size = pitch
    for n in shape[:-1]:
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
            stride *= pitch if d == len(shape) - 1 else shape[d]
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
