"""Rendering rules of global-memory access: load, load.scalar, store (the accumulator store
and the transposed store of any register tile too), with the bounds checks and the vector
chunk accesses of blocked tiles, and the global atomics (atomic.add, atomic.fetch_add).

Every access is bounds-checked per element, or per chunk where a blocked tile's registers are
consecutive columns (one 4-16 byte vector access when the chunk is in bounds and aligned, the
scalar path otherwise; decided at run time per chunk). A launch-specialized variant renders the
facts analysis/alignment.py proved from its arguments (kernel attribute `global_access`): an
access proven aligned loses the run-time alignment test, and one whose chunks are proven whole
(wholly inside or wholly outside the tensor) loses the scalar path.
"""

from __future__ import annotations

from argus.analysis.alignment import access_fact, index32
from argus.codegen.cuda.emit import (
    SCALAR_C,
    TileInfo,
    _Emitter,
    c_float,
    dtype_ptr,
    literal_c,
    rule,
    strip_round,
)
from argus.codegen.cuda.layouts import Acc, Blocked, Chunked, Lay, Rows
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Value
from argus.ir.types import TensorType
from argus.target import register_layouts as RL


def _to_mem_c(expr: str, dtype) -> str:
    """The stored element of the f32 value `expr`: the float storage types convert (rounding
    to nearest even; e4m3 saturates to +-448), f32 and the integer types assign."""
    expr = strip_round(expr, dtype)
    if dtype.name in ("bf16", "f16", "e4m3"):
        return f"ag::f32_to_{dtype.name}({expr})"
    return expr


def _from_mem_c(expr: str, dtype) -> str:
    """The f32 register value of the stored element `expr` (exact widening)."""
    if dtype.name in ("bf16", "f16", "e4m3"):
        return f"ag::{dtype.name}_to_f32({expr})"
    return expr


def _vector_access(lay, dtype) -> int:
    """Bytes of one vector global access into a chunk of `lay` (min(16, vec x element bytes)),
    or 0 where the tile is accessed element by element: layouts other than blocked, vblocks
    and rows (whose chunks are consecutive registers of consecutive columns), vec 1, dtypes
    other than f32 / bf16 / f16 / e4m3 (integer tiles keep the scalar path, but for vblocks
    and rows), and chunks under 4 bytes (e4m3 with vec 2)."""
    if not isinstance(lay, (Blocked, Rows, Chunked)) or lay.vec < 2:
        return 0
    # integer tiles of a vblocks layout (a transposed store's copy of index tensors) and of
    # rows (a gather's whole rows: the V^T word kernel's 32-byte runs, attention_vt.py) take
    # vector accesses too; other integer tiles keep the scalar path their kernels were tuned on
    if dtype.name not in ("f32", "bf16", "f16", "e4m3") and \
            not (isinstance(lay, (Chunked, Rows)) and dtype.name in _INT_VECTOR):
        return 0
    width = min(16, lay.vec * dtype.bytes)
    return width if width >= 4 else 0


# the CUDA vector types of 4, 8 and 16 bytes of an integer dtype (components .x .y .z .w)
_INT_VECTOR = {"i32": {4: "int", 8: "int2", 16: "int4"},
               "u32": {4: "unsigned", 8: "uint2", 16: "uint4"},
               "i64": {8: "long long", 16: "longlong2"}}


def _int_vector_c(dtype, width: int) -> str | None:
    return _INT_VECTOR.get(dtype.name, {}).get(width)


def _vector_load_c(ptr: str, width: int, dtype, regs: list[str]) -> list[str]:
    """Statements loading `width` bytes at `ptr` (aligned) into the registers `regs` (f32 for
    the float types, the integer type's own for integers)."""
    vt = _int_vector_c(dtype, width)
    if vt is not None:
        if len(regs) == 1:
            return [f"{regs[0]} = *reinterpret_cast<const {vt}*>({ptr});"]
        parts = "xyzw"
        return [f"{{ const {vt} gw = *reinterpret_cast<const {vt}*>({ptr}); " +
                " ".join(f"{r} = gw.{parts[k]};" for k, r in enumerate(regs)) + " }"]
    if dtype.name == "f32":
        return [f"ag::ld_global_f32x{len(regs)}({ptr}, {', '.join(regs)});"]
    if dtype.name == "e4m3":  # four elements a 32-bit word, the lowest byte first
        words = [f"gw{k}" for k in range(width // 4)]
        out = ([f"const ag::uint32_t gw0 = ag::ld_global_b32({ptr});"] if len(words) == 1 else
               [f"ag::uint32_t {', '.join(words)};",
                f"ag::ld_global_b32x{len(words)}({ptr}, {', '.join(words)});"])
        return out + [f"ag::unpack_e4m3x4({w}, {', '.join(regs[4 * k:4 * k + 4])});"
                      for k, w in enumerate(words)]
    lo, hi = (("ag::bf16x2_lo", "ag::bf16x2_hi") if dtype.name == "bf16"
              else ("ag::f16x2_lo", "ag::f16x2_hi"))
    words = [f"gw{k}" for k in range(width // 4)]
    if len(words) == 1:
        out = [f"const ag::uint32_t gw0 = ag::ld_global_b32({ptr});"]
    else:
        out = [f"ag::uint32_t {', '.join(words)};",
               f"ag::ld_global_b32x{len(words)}({ptr}, {', '.join(words)});"]
    for k, w in enumerate(words):
        out.append(f"{regs[2 * k]} = {lo}({w}); {regs[2 * k + 1]} = {hi}({w});")
    return out


def _vector_store_c(ptr: str, width: int, dtype, values: list[str]) -> str:
    """One `width`-byte store at `ptr` (aligned) of the f32 values (16-bit dtypes: packed;
    integers: the integer values as one vector of their type)."""
    vt = _int_vector_c(dtype, width)
    if vt is not None:
        if len(values) == 1:
            return f"*reinterpret_cast<{vt}*>({ptr}) = {values[0]};"
        return f"*reinterpret_cast<{vt}*>({ptr}) = {vt}{{{', '.join(values)}}};"
    if dtype.name == "f32":
        return f"ag::st_global_f32x{len(values)}({ptr}, {', '.join(values)});"
    if dtype.name == "e4m3":  # four elements a 32-bit word, the lowest byte first
        words = [f"ag::pack_e4m3x4({', '.join(values[4 * k:4 * k + 4])})"
                 for k in range(len(values) // 4)]
    else:
        pack = "ag::pack_bf16x2" if dtype.name == "bf16" else "ag::pack_f16x2"
        words = [f"{pack}({values[2 * k]}, {values[2 * k + 1]})"
                 for k in range(len(values) // 2)]
    if len(words) == 1:
        return f"ag::st_global_b32({ptr}, {words[0]});"
    return f"ag::st_global_b32x{len(words)}({ptr}, {', '.join(words)});"


def _dim(t: TensorType, d: int) -> str:
    dim = t.shape[d]
    return str(dim) if isinstance(dim, int) else dim


def _index_c(em: _Emitter, tensor: Value) -> str:
    """The C type of `tensor`'s element offsets: unsigned where the launch-specialized
    variant proved every in-bounds offset below 2^31 (analysis/alignment.py `index32`), else
    long long. Offsets of elements outside the tensor may wrap in unsigned: the bounds
    condition of each access keeps them from being used."""
    return "unsigned" if index32(em.kernel, tensor) else "long long"


def _bounds(em: _Emitter, tensor: Value, offsets, info: TileInfo, i: int,
            tile_rank: int, span: int = 1) -> tuple[str, str]:
    """(condition, linear index) of element i of a tile at `offsets` of a global tensor.
    The tile covers the tensor's last one or two dims; leading dims add offset x stride.
    With span > 1, the condition says that elements i .. i + span - 1 (one chunk of a
    blocked tile: consecutive columns of one row) are all in bounds."""
    t: TensorType = tensor.type
    name = em.tensors[tensor.id]
    lay = info.layout
    rank = len(t.shape)
    ix = _index_c(em, tensor)
    stride = (lambda d: f"(unsigned){name}_s{d}") if ix == "unsigned" else \
        (lambda d: f"{name}_s{d}")
    conds, terms = [], []
    for d in range(rank - tile_rank):
        off = em.name(offsets[d])
        conds.append(f"{off} >= 0 && {off} < {_dim(t, d)}")
        terms.append(f"({ix}){off} * {stride(d)}")
    col = f"({em.name(offsets[-1])} + {lay.col(i)})"
    last = f"{col} < {_dim(t, rank - 1)}" if span == 1 else \
        f"{col} + {span} <= {_dim(t, rank - 1)}"
    conds.append(f"{col} >= 0 && {last}")
    terms.append(col)
    for k in range(2, tile_rank + 1):  # tile dims above the last (rank <= 4)
        c = lay.row(i) if k == 2 else lay.coord(i)[-k]
        row = f"({em.name(offsets[-k])} + {c})"
        conds.append(f"{row} >= 0 && {row} < {_dim(t, rank - k)}")
        terms.append(f"({ix}){row} * {stride(rank - k)}")
    return " && ".join(conds), " + ".join(terms)


def _chunked(em: _Emitter, op, info: TileInfo, dtype, rank: int, scalar, vector,
             prologue=None, outside=None) -> None:
    """Global access of a register tile: element by element (`scalar(i)` -> statement), or,
    for a blocked tile whose chunks are 4-16 bytes of f32/bf16/f16/e4m3, one vector access per
    chunk (`vector(ptr, width, regs)` -> statements) where the whole chunk is in bounds and
    its address is aligned to the access, checked at run time per chunk; other chunks
    (ragged edges, unaligned base pointers or row strides, odd column offsets) take the
    scalar path. `prologue(regs)` -> statements that run first for each chunk.
    With the launch facts of a specialized variant (analysis/alignment.py): an access whose
    chunk addresses are proven aligned has no run-time alignment test, and one whose chunks
    are proven whole replaces the scalar path by `outside(regs)` (a chunk wholly outside)."""
    lay = info.layout
    tensor = op.tensor
    name = em.tensors[tensor.id]
    width = _vector_access(lay, dtype)
    if not width:
        for i in range(lay.nregs):
            for line in prologue([i]) if prologue else ():
                em.emit(line)
            em.emit(scalar(i))
        return
    per_access = width // dtype.bytes
    aligned_elems, whole_elems = access_fact(em.kernel, tensor, op.offsets)
    # chunk starts are multiples of vec columns (Blocked.col), hence of per_access
    proven_aligned = aligned_elems % per_access == 0
    # a chunk that fails a run-time alignment test is in bounds: only an aligned access may
    # drop the element-by-element path for `outside`
    proven_whole = proven_aligned and whole_elems % lay.vec == 0 and outside is not None
    for i0 in range(0, lay.nregs, lay.vec):
        regs = list(range(i0, i0 + lay.vec))
        cond, idx = _bounds(em, tensor, op.offsets, info, i0, rank, span=lay.vec)
        em.emit(f"{{  // {name}: {lay.vec * dtype.bytes}-byte chunk of registers "
                f"{i0}..{i0 + lay.vec - 1}")
        em.indent += 1
        for line in prologue(regs) if prologue else ():
            em.emit(line)
        em.emit(f"const {_index_c(em, tensor)} ge = {idx};")
        aligned = "" if proven_aligned else f" && ag::aligned_to({name} + ge, {width})"
        em.emit(f"if ({cond}{aligned}) {{")
        em.indent += 1
        for a in range(0, lay.vec, per_access):
            ptr = f"{name} + ge" + (f" + {a}" if a else "")
            for line in vector(ptr, width, regs[a:a + per_access]):
                em.emit(line)
        em.indent -= 1
        fallback = outside(regs) if proven_whole else [scalar(i) for i in regs]
        if fallback:
            em.emit("} else {")
            for line in fallback:
                em.emit("    " + line)
        em.emit("}")
        em.indent -= 1
        em.emit("}")


@rule(O.Load)
def load(em: _Emitter, op: O.Load) -> None:
    info = em.declare_tile(op.result, op.loc)
    name = em.tensors[op.tensor.id]
    dtype = op.tensor.type.dtype
    rank = len(op.result.type.shape)
    other = literal_c(op.other, op.result.type.dtype)   # an integer literal for integer tiles

    def scalar(i: int) -> str:
        cond, idx = _bounds(em, op.tensor, op.offsets, info, i, rank)
        return (f"{info.name}[{i}] = ({cond}) ? {_from_mem_c(f'{name}[{idx}]', dtype)} : "
                f"{other};")

    if not _vector_access(info.layout, dtype):
        # A tile with no vector access (a column of one element a thread: the pooling
        # template's window loads): each element's offset is computed outside its condition,
        # integer arithmetic only (nothing is dereferenced unless the condition holds), so the
        # compiler shares the terms the loads have in common (row x stride) and predicates the
        # load; written inside the condition it recomputed them behind a branch per load
        # (KernelBench L1/43: 38 SASS instructions a 4-byte load, 17 this way)
        for i in range(info.layout.nregs):
            cond, idx = _bounds(em, op.tensor, op.offsets, info, i, rank)
            em.emit(f"{{ const {_index_c(em, op.tensor)} ge = {idx}; {info.name}[{i}] = "
                    f"({cond}) ? "
                    f"{_from_mem_c(f'{name}[ge]', dtype)} : {other}; }}")
        return

    _chunked(em, op, info, dtype, rank, scalar,
             lambda ptr, width, regs: _vector_load_c(
                 ptr, width, dtype, [f"{info.name}[{i}]" for i in regs]),
             outside=lambda regs: [f"{info.name}[{i}] = {other};" for i in regs])


@rule(O.Gather)
def gather(em: _Emitter, op: O.Gather) -> None:
    """Each register reads the element its indices name (the index tiles' registers in the
    same thread: layout inference gave them the gather's layout, sliced where they
    broadcast), guarded by every dim's bounds. The offset is computed outside the condition,
    integer arithmetic only, as the load's scalar path: an arange's index is a constant in a
    register, so the compiler folds a row's elements into one base address and immediate
    offsets."""
    info = em.declare_tile(op.result, op.loc)
    lay = info.layout
    name = em.tensors[op.tensor.id]
    t: TensorType = op.tensor.type
    dtype = t.dtype
    rank = len(t.shape)
    ix = _index_c(em, op.tensor)
    cast = "(unsigned)" if ix == "unsigned" else ""
    other = literal_c(op.other, op.result.type.dtype)
    for i in range(lay.nregs):
        conds, terms = [], []
        for d, v in enumerate(op.indices):
            e = f"({em.operand_expr(v, i, lay)})"
            # 0 <= e < dim as one unsigned compare (a negative e wraps past any int extent),
            # in the index's width (an i64 index tile must not be truncated to 32 bits)
            u = "unsigned long long" if v.type.dtype.bits == 64 else "unsigned"
            conds.append(f"({u}){e} < ({u}){_dim(t, d)}")
            terms.append(f"({ix}){e} * {cast}{name}_s{d}" if d < rank - 1 else e)
        # the leading dims' offset as the element-offset type, the last dim's index added to
        # the pointer as a plain int: elements of one row then share the row's pointer and
        # differ by their index's constant part, which the compiler folds into the load's
        # immediate offset (an unsigned sum would wrap, so it could not split it: one
        # address computation, and the base pointer reloaded, per element)
        row = f"{name} + ({' + '.join(terms[:-1])})" if rank > 1 else name
        em.emit(f"{{ {dtype_ptr(dtype)} const gp = {row}; {info.name}[{i}] = "
                f"({' && '.join(conds)}) ? {_from_mem_c(f'gp[{terms[-1]}]', dtype)} : "
                f"{other}; }}")


@rule(O.SmemGather)
def smem_gather(em: _Emitter, op: O.SmemGather) -> None:
    """Each register reads the shared element its (row, column) indices name, one ld.shared
    under the view's bounds (one unsigned compare a dim, as the global gather's), `other`
    outside. A register whose index folds to a constant outside the view (a column that reads
    no input: index -1) is a constant the C++ compiler drops the read of. The view is
    unswizzled (the DSL refuses others), so element (r, c) is at r * cols + c."""
    t = op.src.type
    if t.swizzle:
        raise CompileError("a shared-memory gather reads unswizzled views", op.loc,
                           fix="allocate the buffer with swizzle=0")
    info = em.declare_tile(op.result, op.loc)
    lay = info.layout
    view = em.name(op.src)
    rows, cols = t.shape
    other = literal_c(op.other, op.result.type.dtype)
    for i in range(lay.nregs):
        r, c = (f"({em.operand_expr(v, i, lay)})" for v in op.indices)
        # a dim the trace proved inside (op.inside) needs no compare
        conds = [f"(unsigned){e} < {n}u" for d, (e, n) in enumerate(zip((r, c), (rows, cols)))
                 if d not in op.inside]
        elem = _from_mem_c(f'{view}[{r} * {cols} + {c}]', t.dtype)
        em.emit(f"{info.name}[{i}] = ({' && '.join(conds)}) ? {elem} : {other};" if conds
                else f"{info.name}[{i}] = {elem};")


def _element_at(em: _Emitter, tensor, offsets) -> tuple[list[str], list[str]]:
    """(bounds conditions, index terms) of one element of a global tensor at `offsets`, one
    per dim: the last dim contiguous, the others offset x stride (64-bit, or 32-bit unsigned
    for a narrow tensor: `_index_c`)."""
    t: TensorType = tensor.type
    name = em.tensors[tensor.id]
    rank = len(t.shape)
    ix = _index_c(em, tensor)
    stride = "(unsigned)" if ix == "unsigned" else ""
    conds, terms = [], []
    for d, o in enumerate(offsets):
        off = em.name(o)
        conds.append(f"{off} >= 0 && {off} < {_dim(t, d)}")
        terms.append(f"({ix}){off}" + (f" * {stride}{name}_s{d}" if d < rank - 1 else ""))
    return conds, terms


@rule(O.LoadScalar)
def load_scalar(em: _Emitter, op: O.LoadScalar) -> None:
    t: TensorType = op.tensor.type
    name = em.tensors[op.tensor.id]
    conds, terms = _element_at(em, op.tensor, op.offsets)
    ctype = SCALAR_C[op.result.type.dtype.name]
    n = f"v{op.result.id}"
    other = c_float(op.other) if t.dtype.is_float else str(int(op.other))
    # every thread reads the same address: one broadcast load through the read-only path
    elem = f"__ldg(&{name}[{' + '.join(terms)}])" if t.dtype.name in ("f32", "i32") else \
        _from_mem_c(f"{name}[{' + '.join(terms)}]", t.dtype)
    em.emit(f"const {ctype} {n} = ({' && '.join(conds)}) ? ({ctype}){elem} : {other};")
    em.names[op.result.id] = n


@rule(O.Store)
def store(em: _Emitter, op: O.Store) -> None:
    info = em.tiles[op.value.id]
    name = em.tensors[op.tensor.id]
    dtype = op.tensor.type.dtype
    lay = info.layout
    if isinstance(lay, Acc):
        _store_acc(em, op, info)
        return
    # the values in the tile's own layout; the addresses in `info`'s, which for a transposed
    # store is the tile's layout relabeled to the destination's axes (`_transposed_info`)
    val_lay, reg = lay, list(range(lay.nregs))
    if op.transposed:
        info, reg = _transposed_info(em, op, info)
        lay = info.layout
    rank = len(op.value.type.shape)
    if not _vector_access(lay, dtype):
        for i in range(lay.nregs):
            cond, idx = _bounds(em, op.tensor, op.offsets, info, i, rank)
            val = em.tile_expr(op.value, reg[i], val_lay)
            em.emit(f"if ({cond}) {name}[{idx}] = {_to_mem_c(val, dtype)};")
        return

    # each chunk's values are computed once (gv0, gv1, ...) and stored by either path
    elem = "float" if dtype.is_float else SCALAR_C.get(dtype.name, "float")

    def scalar(i: int) -> str:
        cond, idx = _bounds(em, op.tensor, op.offsets, info, i, rank)
        return f"if ({cond}) {name}[{idx}] = {_to_mem_c(f'gv{i % lay.vec}', dtype)};"

    def values(regs: list[int]) -> list[str]:
        return [f"const {elem} gv{i % lay.vec} = "
                f"{strip_round(em.tile_expr(op.value, reg[i], val_lay), dtype)};" for i in regs]

    _chunked(em, op, info, dtype, rank, scalar,
             lambda ptr, width, regs: [_vector_store_c(
                 ptr, width, dtype, [f"gv{i % lay.vec}" for i in regs])],
             prologue=values, outside=lambda regs: [])


def _transposed_info(em: _Emitter, op: O.Store, info: TileInfo) -> tuple[TileInfo, list[int]]:
    """The destination view of a transposed store of a register tile, and the tile register
    each of its registers is: the same registers, each at its swapped coordinate (RL.transpose,
    a relabeling), reordered so that, where the layout allows, each run of V registers is V
    consecutive elements of a destination row starting at a multiple of V (`_dest_chunks`):
    a vblocks(V) tile's V x V blocks are such runs read down their columns, one 16-byte store
    each with no data moving between threads. Any other layout is stored element by element
    from its relabeling."""
    rl = RL.transpose(info.layout.rl)
    for vec in (16 // max(1, info.dtype.bytes), 8, 4, 2):
        order = _dest_chunks(rl, vec)
        if order is not None:
            break
    else:
        return TileInfo(Lay(rl), info.dtype, name=info.name), list(range(rl.nregs))
    dest = RL.RegisterLayout(rl.name, rl.shape, rl.threads, rl.thread_bases,
                             tuple(rl.regs[r] for r in order))
    return TileInfo(Chunked(dest, vec=vec), info.dtype, name=info.name), order


def _dest_chunks(rl, vec: int) -> list[int] | None:
    """The registers of `rl` in runs of `vec` consecutive last-dim elements of one row, each
    run starting at a multiple of `vec` (thread parts along the last dim multiples of `vec`),
    or None where `rl` has no such order."""
    if vec < 2 or rl.rank != 2 or any(img[-1] % vec for img in rl.thread_bases):
        return None
    where = {reg: r for r, reg in enumerate(rl.regs)}
    order: list[int] = []
    for r, (row, col) in enumerate(rl.regs):
        if col % vec == 0:
            run = [where.get((row, col + k)) for k in range(vec)]
            if None in run:
                return None
            order.extend(run)
    return order if sorted(order) == list(range(rl.nregs)) else None


def _store_acc(em: _Emitter, op: O.Store, info: TileInfo) -> None:
    """Accumulator fragment → global: each thread owns pairs of adjacent columns. The last
    two tensor dims are rows and columns; leading (batch) dims add offset x stride."""
    name = em.tensors[op.tensor.id]
    t: TensorType = op.tensor.type
    dtype = t.dtype
    rank = len(t.shape)
    r0, c0 = em.name(op.offsets[-2]), em.name(op.offsets[-1])
    rows, cols = _dim(t, rank - 2), _dim(t, rank - 1)
    row_stride = f"{name}_s{rank - 2}"
    lead = " + ".join(f"(long long){em.name(op.offsets[d])} * {name}_s{d}"
                      for d in range(rank - 2)) or "0"
    lead_ok = " && ".join(f"{em.name(op.offsets[d])} >= 0 && "
                          f"{em.name(op.offsets[d])} < {_dim(t, d)}"
                          for d in range(rank - 2)) or "true"
    # one 2-element store of an adjacent pair of accumulator columns, where the dtype has one
    pair_store = {
        "bf16": lambda p, a, b: f"ag::st_global_b32({p}, ag::pack_bf16x2({a}, {b}))",
        "f16": lambda p, a, b: f"ag::st_global_b32({p}, ag::pack_f16x2({a}, {b}))",
        "f32": lambda p, a, b: f"ag::st_global_f32x2({p}, {a}, {b})",
        "e4m3": lambda p, a, b: f"ag::st_global_b16({p}, ag::pack_e4m3x2({a}, {b}))",
    }.get(dtype.name)
    values = [(i, strip_round(em.tile_expr(op.value, i, info.layout), dtype),
               strip_round(em.tile_expr(op.value, i + 1, info.layout), dtype))
              for i in range(0, info.layout.nregs, 2)]
    em.emit(f"if ({lead_ok}) {{")
    em.indent += 1
    em.emit(f"{dtype_ptr(dtype)} const base = {name} + {lead};")
    if op.transposed:
        # accumulator (row, col) -> tensor (r0 + col, c0 + row): a thread's adjacent columns
        # land in different rows, so every element is its own store; the 8 lanes that share
        # a column write 8 consecutive elements of one row
        for i, v0, v1 in values:
            for j, v in ((i, v0), (i + 1, v1)):
                r, c = f"({r0} + {info.layout.col(j)})", f"({c0} + {info.layout.row(j)})"
                em.emit(f"if ({r} >= 0 && {r} < {rows} && {c} >= 0 && {c} < {cols}) "
                        f"base[(long long){r} * {row_stride} + {c}] = "
                        f"{_to_mem_c(v, dtype)};")
        em.indent -= 1
        em.emit("}")
        return
    tile_rows, tile_cols = op.value.type.shape[-2], op.value.type.shape[-1]
    if pair_store:
        # Interior tiles (the common case) store every pair unchecked: the whole tile is
        # inside the tensor and every pair address is aligned (aligned base, even row
        # stride, even column offset; accumulator columns come in even pairs).
        align = 2 * dtype.bytes - 1
        em.emit(f"if ({r0} >= 0 && {r0} + {tile_rows} <= {rows} && {c0} >= 0 && "
                f"{c0} + {tile_cols} <= {cols} && ({c0} & 1) == 0 && "
                f"({row_stride} & 1) == 0 && "
                f"(reinterpret_cast<unsigned long long>(base) & {align}) == 0) {{")
        em.indent += 1
        # two row pointers (rows acc_row and acc_row + 8); every pair is a constant offset
        # from one of them, so the addresses cost no registers beyond these two
        em.emit(f"{dtype_ptr(dtype)} const q0 = base + (long long)({r0} + acc_row) * "
                f"{row_stride} + ({c0} + acc_col);")
        em.emit(f"{dtype_ptr(dtype)} const q8 = q0 + 8 * {row_stride};")
        for i, v0, v1 in values:
            p_expr = f"{'q8' if (i // 2) % 2 else 'q0'} + {8 * (i // 4)}"
            em.emit(pair_store(p_expr, v0, v1) + ";")
        em.indent -= 1
        em.emit("} else {")
        em.indent += 1
    for i, v0, v1 in values:
        r = f"({r0} + {info.layout.row(i)})"
        c = f"({c0} + {info.layout.col(i)})"
        em.emit(f"if ({r} >= 0 && {r} < {rows}) {{")
        em.emit(f"    {dtype_ptr(dtype)} p = base + (long long){r} * {row_stride} + {c};")
        # a pair is one 2-element store only where the address is aligned for it
        em.emit(f"    const bool pair_ok = {c} >= 0 && "
                f"(reinterpret_cast<unsigned long long>(p) & {2 * dtype.bytes - 1}) == 0;")
        em.emit(f"    if (pair_ok && {c} + 1 < {cols}) {pair_store('p', v0, v1)};"
                if pair_store else "    if (false) {}")
        em.emit(f"    else {{ if ({c} >= 0 && {c} < {cols}) p[0] = {_to_mem_c(v0, dtype)}; "
                f"if ({c} + 1 >= 0 && {c} + 1 < {cols}) p[1] = {_to_mem_c(v1, dtype)}; }}")
        em.emit("}")
    if pair_store:
        em.indent -= 1
        em.emit("}")
    em.indent -= 1
    em.emit("}")


@rule(O.AtomicAdd)
def atomic_add(em: _Emitter, op: O.AtomicAdd) -> None:
    """One atomicAdd per element and replica class (nvcc makes RED.E.ADD of an unused
    result: PTX red.global.add.f32 / .s32); a layout that replicates an element over threads
    adds it from the thread whose replicated bits are 0, so each element is added once."""
    info = em.tiles[op.value.id]
    name = em.tensors[op.tensor.id]
    lay = info.layout
    rank = len(op.value.type.shape)
    mask = sum(1 << b for b in lay.rl.replicated_bits())
    once = f"(gtid & {mask}) == 0 && " if mask else ""
    for i in range(lay.nregs):
        cond, idx = _bounds(em, op.tensor, op.offsets, info, i, rank)
        val = em.tile_expr(op.value, i, lay)
        em.emit(f"if ({once}{cond}) atomicAdd(&{name}[{idx}], {val});")


@rule(O.AtomicFetchAdd)
def atomic_fetch_add(em: _Emitter, op: O.AtomicFetchAdd) -> None:
    """A group barrier, thread 0 of the group runs the atomic (atom.acq_rel.gpu.global.add.u32,
    or .inc.u32 with wrap) into this group's slot of the op's scratch, a group barrier,
    every thread reads the slot (ir.ops.AtomicFetchAdd). The slot's next write (the op's next
    execution) comes after that execution's first barrier, which every reader has passed.
    `alone` (an elect's one thread, e.g. a producer drawing its next unit: lower/elect.py) that
    thread runs the atomic into a register of its own: no other thread of the group runs it."""
    if len(op.scratch) != 1:
        raise CompileError("atomic.fetch_add: its broadcast slot was not placed", op.loc,
                           fix="run lower.smem (argus.lower.run) before rendering")
    t: TensorType = op.tensor.type
    name = em.tensors[op.tensor.id]
    conds, terms = _element_at(em, op.tensor, op.offsets)
    ptr = f"reinterpret_cast<ag::uint32_t*>(&{name}[{' + '.join(terms)}])"
    # acq_rel, not atomicInc's relaxed: the release and acquire patterns of the group's
    # stores and loads around it live in this one thread (ir.ops.AtomicFetchAdd)
    atom = (f"ag::atom_inc_acq_rel_gpu({ptr}, (ag::uint32_t)({em.name(op.wrap)} - 1))"
            if op.wrap is not None
            else f"ag::atom_add_acq_rel_gpu({ptr}, (ag::uint32_t){em.name(op.value)})")
    if op.alone:
        n = f"v{op.result.id}"
        em.emit(f"const int {n} = ({' && '.join(conds)}) ? (int){atom} : -1;")
        em.names[op.result.id] = n
        return
    copies, wg = em.role_copies
    slot = f"{em.name(op.scratch[0])}[{wg if copies > 1 else 0}]"
    em.emit(em.group_barrier() + "  // the group's earlier ops (and fences) before the atomic")
    em.emit(f"if (gtid == 0) {slot} = ({' && '.join(conds)}) ? (int){atom} : -1;")
    em.emit(em.group_barrier() + "  // the old value in the slot before any thread reads it")
    n = f"v{op.result.id}"
    em.emit(f"const int {n} = {slot};")
    em.names[op.result.id] = n
