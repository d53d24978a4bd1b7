"""Rendering rules of shared memory and the async copies: smem alloc / slice, tma.load,
tma.prefetch (into L2), tma.store (with the commit and read-wait that follow it), ldmatrix
(and the 32-bit shared-memory read ag.load_shared records as the same op), stmatrix.

Offsets come from the smem plan, boxes and swizzles from lowering; each distinct (tensor, box,
swizzle) becomes one CUtensorMap kernel parameter, numbered in the order first used.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import _Emitter, elem_c, group_rule, rule, strip_round
from argus.codegen.cuda.memory import _to_mem_c, _vector_access
from argus.codegen.cuda.sync import tma_store_wait_c
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Value
from argus.ir.types import SmemType, SmemViewType, TileType


@rule(O.SmemAlloc)
def smem_alloc(em: _Emitter, op: O.SmemAlloc) -> None:
    offset = em.smem_offset(op.result.id)
    t: SmemType = op.result.type
    n = f"s{op.result.id}"
    em.emit(f"{elem_c(t.dtype)}* const {n} = reinterpret_cast<{elem_c(t.dtype)}*>"
            f"(smem + {offset});")
    em.names[op.result.id] = n


@rule(O.SmemSlice)
def smem_slice(em: _Emitter, op: O.SmemSlice) -> None:
    buf: SmemType = op.buffer.type
    cols = buf.shape[-1]
    parts = [em.name(op.buffer)]
    if op.stage is not None:
        parts.append(f"{em.name(op.stage)} * {buf.shape[1] * cols}")
    row0 = op.row0 if isinstance(op.row0, int) else em.name(op.row0)
    if row0 != 0:
        parts.append(f"({row0}) * {cols}")
    n = f"v{op.result.id}"
    t: SmemViewType = op.result.type
    em.emit(f"{elem_c(t.dtype)}* const {n} = {' + '.join(parts)};")
    em.names[op.result.id] = n


def _tmap_for(em: _Emitter, tensor: Value, box: tuple, swizzle: int,
              elem_strides: tuple = ()) -> str:
    """One kernel parameter (a CUtensorMap) per distinct (tensor, box, swizzle, element
    strides): a strided box is its own map (elementStrides is the descriptor's)."""
    key = (tensor.id, box, swizzle, elem_strides)
    if key not in em.tmaps:
        em.tmaps[key] = len(em.tmaps)
    return f"tmap{em.tmaps[key]}"


@rule(O.TmaLoad)
def tma_load(em: _Emitter, op: O.TmaLoad) -> None:
    tm = _tmap_for(em, op.tensor, op.box, op.swizzle, op.elem_strides)
    coords = [em.name(c) for c in reversed(op.coords)]  # PTX wants innermost first
    rank = len(coords)
    if op.multicast:
        if rank not in (2, 3, 4):
            raise CompileError(f"multicast TMA loads are 2-d to 4-d; this one is {rank}-d",
                               op.loc)
        size = em.cluster_size
        em.emit(f"ag::tma_load_{rank}d_multicast(&{tm}, {em.name(op.dst)}, "
                f"{em.current_full}, {', '.join(coords)}, {(1 << size) - 1});")
        return
    em.emit(f"ag::tma_load_{rank}d(&{tm}, {em.name(op.dst)}, {em.current_full}, "
            f"{', '.join(coords)});")


@rule(O.TmaPrefetch)
def tma_prefetch(em: _Emitter, op: O.TmaPrefetch) -> None:
    """The tensor map of the loads of the same box and swizzle (one CUtensorMap for both)."""
    tm = _tmap_for(em, op.tensor, op.box, op.swizzle)
    coords = [em.name(c) for c in reversed(op.coords)]  # PTX wants innermost first
    em.emit(f"ag::tma_prefetch_{len(coords)}d(&{tm}, {', '.join(coords)});")


@group_rule(O.TmaStore)
def tma_store_issue(em: _Emitter, ops, i: int) -> int:
    """ops[i] is a TMA store: it, the commit and a read-wait without a note that directly
    follow it render as one block of the issuing thread. Returns the next index."""
    op: O.TmaStore = ops[i]
    view: SmemViewType = op.src.type
    box = (1,) * (len(op.tensor.type.shape) - 2) + tuple(view.shape)
    tm = _tmap_for(em, op.tensor, box, view.swizzle)
    coords = [em.name(c) for c in reversed(op.coords)]
    em.emit("if (gtid == 0) {")
    em.emit(f"    ag::tma_store_{len(coords)}d(&{tm}, {em.name(op.src)}, "
            f"{', '.join(coords)});")
    i += 1
    if i < len(ops) and isinstance(ops[i], O.TmaStoreCommit):
        em.emit("    ag::tma_store_commit();")
        i += 1
        if i < len(ops) and isinstance(ops[i], O.TmaStoreWait) and not ops[i].note:
            em.emit(f"    {tma_store_wait_c(ops[i])}")
            i += 1
    em.emit("}")
    return i


@rule(O.TmaStore)
def tma_store(em: _Emitter, op: O.TmaStore) -> None:
    tma_store_issue(em, (op,), 0)


def _matrix_addresses(em: _Emitter, view: Value) -> tuple[str, int]:
    """Per-lane shared address of the x4 fragment (lane l supplies row l%8 of matrix l/8:
    matrices 0/1 are rows 0-7/8-15 of a 16-row warp slab, 2/3 the next 8 columns)."""
    t: SmemViewType = view.type
    row_bytes = t.shape[1] * t.dtype.bytes
    return (f"ag::smem_u32({em.name(view)}) + (16 * (gtid / 32) + ((gtid % 32) / 8 % 2) * 8"
            f" + gtid % 8) * {row_bytes} + ((gtid % 32) / 16) * 16"), row_bytes


def _check_matrix_view(em: _Emitter, view: Value, tile_type: TileType, loc) -> None:
    t: SmemViewType = view.type
    if tile_type.dtype.bits != 16 or t.shape != tuple(tile_type.shape) or t.shape[0] != 64 \
            or t.shape[1] % 16:
        raise CompileError("ldmatrix/stmatrix move a 64 x N (N multiple of 16) 16-bit tile "
                           "held in the wgmma fragment", loc)
    if tile_type.layout != "wgmma_acc":
        raise CompileError("ldmatrix/stmatrix need a tile in the wgmma accumulator "
                           "fragment layout", loc)
    if not em.in_role:
        raise CompileError("ldmatrix/stmatrix are warpgroup operations: use them inside an "
                           "ag.role", loc)


def _store_shared(em: _Emitter, op: O.StMatrix) -> None:
    """A register tile into an unswizzled view (ag.store_shared), each thread its own
    elements in the tile's layout: a chunk of `vec` registers that are consecutive columns of
    one row (blocked, "rows": an ag.gather's whole rows) as one vector st.shared of up to 16
    bytes (two for 8 f32), anything else element by element. The view's rows are
    `cols * bytes` apart from a buffer the smem plan aligns to 16 bytes, so a chunk starting
    at a multiple of vec columns is aligned when the row's bytes are a multiple of the
    access. A "rows" tile of 16-byte rows whose byte pitch is an odd multiple of 16 is
    conflict-free: the 8 lanes of each quarter-warp phase hit 8 distinct 16-byte bank groups.

    A swizzled view (a row = the swizzle span, 32 / 64 / 128 bytes) is written at the
    swizzled address of each element or chunk (`ag::swizzle_smem_addr` of its absolute shared
    address: the XOR pattern TMA and wgmma read, anchored to the buffer's swizzle period by
    the smem plan); a 16-byte chunk stays whole (the XOR moves address bits 4-6 only). A
    "rows" tile of 128-byte rows is conflict-free there too: rows t .. t + 7 put a chunk c at
    c ^ (t % 8), 8 distinct bank groups.

    Transposed (O.StMatrix.transposed, ag.store_shared(transposed=True)): one st.shared per
    element at the view element its (m, k) maps to, swizzled like the others."""
    t: SmemViewType = op.dst.type
    info = em.tiles[op.src.id]
    lay = info.layout
    dtype = t.dtype
    cols = t.shape[1]
    view = em.name(op.dst)
    width = _vector_access(lay, dtype)
    if width and (cols * dtype.bytes) % width:
        width = 0

    def at(row: str, col, ctype: str) -> str:
        """The lvalue of element (row, col) of the view as `ctype`."""
        if not t.swizzle:
            return f"*reinterpret_cast<{ctype}*>(&{view}[({row}) * {cols} + {col}])"
        off = f"(({row}) * {cols} + {col}) * {dtype.bytes}"
        return (f"*reinterpret_cast<{ctype}*>(reinterpret_cast<unsigned char*>({view}) + "
                f"(ag::swizzle_smem_addr(ag::smem_u32({view}) + {off}, {t.swizzle}) - "
                f"ag::smem_u32({view})))")

    if op.transposed:
        # O.StMatrix.transposed: element (m, k) to view element ((m / W) * K + k, m % W)
        k_cols = op.src.type.shape[1]
        for i in range(lay.nregs):
            val = strip_round(em.reg_expr(op.src, i), dtype)
            m, k = lay.row(i), lay.col(i)
            row, col = ((k, m) if op.src.type.shape[0] == cols else
                        (f"(({m}) / {cols}) * {k_cols} + ({k})", f"({m}) % {cols}"))
            em.emit(f"{at(row, col, elem_c(dtype))} = {_to_mem_c(val, dtype)};")
        return
    if not width:
        for i in range(lay.nregs):
            val = strip_round(em.reg_expr(op.src, i), dtype)
            if t.swizzle:
                em.emit(f"{at(lay.row(i), lay.col(i), elem_c(dtype))} = "
                        f"{_to_mem_c(val, dtype)};")
            else:
                em.emit(f"{view}[({lay.row(i)}) * {cols} + {lay.col(i)}] = "
                        f"{_to_mem_c(val, dtype)};")
        return
    per = width // dtype.bytes
    for i0 in range(0, lay.nregs, per):
        vals = [strip_round(em.reg_expr(op.src, i), dtype) for i in range(i0, i0 + per)]
        if dtype.name == "f32":
            words = [f"__float_as_uint({v})" for v in vals]
        else:
            pack = "ag::pack_bf16x2" if dtype.name == "bf16" else "ag::pack_f16x2"
            words = [f"{pack}({vals[2 * k]}, {vals[2 * k + 1]})" for k in range(per // 2)]
        vec_t = {1: "unsigned", 2: "uint2", 4: "uint4"}[len(words)]
        init = words[0] if len(words) == 1 else f"{vec_t}{{{', '.join(words)}}}"
        em.emit(f"{at(lay.row(i0), lay.col(i0), vec_t)} = {init};")


@rule(O.StMatrix)
def stmatrix(em: _Emitter, op: O.StMatrix) -> None:
    if op.plain:
        _store_shared(em, op)
        return
    _check_matrix_view(em, op.dst, op.src.type, op.loc)
    base, _ = _matrix_addresses(em, op.dst)
    sw = op.dst.type.swizzle
    pack = "ag::pack_bf16x2" if op.src.type.dtype.name == "bf16" else "ag::pack_f16x2"
    em.emit("{")
    em.indent += 1
    em.emit(f"const ag::uint32_t stm_base = {base};")
    for j in range(0, op.dst.type.shape[1] // 8, 2):
        dt = op.src.type.dtype
        regs = [f"{pack}({strip_round(em.reg_expr(op.src, 4 * j + 2 * r), dt)}, "
                f"{strip_round(em.reg_expr(op.src, 4 * j + 2 * r + 1), dt)})"
                for r in range(4)]
        em.emit(f"ag::stmatrix_x4_addr(ag::swizzle_smem_addr(stm_base + {j * 16}, {sw}), "
                + ", ".join(regs) + ");")
    em.indent -= 1
    em.emit("}")


def _load_shared_32(em: _Emitter, op: O.LdMatrix) -> None:
    """A 32-bit tile read from a shared-memory view (ag.load_shared): each register is one
    ld.shared of the element its layout names (layout inference chose the layout the tile's
    user needs). Registers that no user reads are loads the C++ compiler drops. A transposed
    read (O.LdMatrix.transposed) takes element (m, k) from view element ((m / W) * K + k,
    m % W), at its swizzled address when the view is swizzled (the XOR pattern TMA wrote)."""
    t: SmemViewType = op.src.type
    if t.swizzle and not op.transposed:
        raise CompileError(f"ag.load_shared reads unswizzled buffers; this view has a "
                           f"{t.swizzle}B swizzle", op.loc,
                           fix="allocate the buffer with swizzle=0 (TMA writes it row-major)")
    info = em.declare_tile(op.result, op.loc)
    lay = info.layout
    cols = t.shape[1]
    k = op.result.type.shape[1]
    atoms = op.result.type.shape[0] // cols
    view = em.name(op.src)
    for i in range(lay.nregs):
        r, c = lay.row(i), lay.col(i)
        if op.transposed:
            r, c = (c, r) if atoms == 1 else (f"(({r}) / {cols}) * {k} + ({c})",
                                              f"({r}) % {cols}")
        if t.swizzle:
            off = f"(({r}) * {cols} + {c}) * {t.dtype.bytes}"
            em.emit(f"{info.name}[{i}] = *reinterpret_cast<const {elem_c(t.dtype)}*>("
                    f"reinterpret_cast<const unsigned char*>({view}) + "
                    f"(ag::swizzle_smem_addr(ag::smem_u32({view}) + {off}, {t.swizzle}) - "
                    f"ag::smem_u32({view})));")
        else:
            em.emit(f"{info.name}[{i}] = {view}[({r}) * {cols} + {c}];")


@rule(O.LdMatrix)
def ldmatrix(em: _Emitter, op: O.LdMatrix) -> None:
    if op.result.type.dtype.bits == 32:
        _load_shared_32(em, op)
        return
    _check_matrix_view(em, op.src, op.result.type, op.loc)
    info = em.declare_tile(op.result, op.loc)
    base, _ = _matrix_addresses(em, op.src)
    sw = op.src.type.swizzle
    lo, hi = (("ag::bf16x2_lo", "ag::bf16x2_hi") if op.result.type.dtype.name == "bf16"
              else ("ag::f16x2_lo", "ag::f16x2_hi"))
    em.emit("{")
    em.indent += 1
    em.emit(f"const ag::uint32_t ldm_base = {base};")
    for j in range(0, op.src.type.shape[1] // 8, 2):
        em.emit("{")
        em.emit("    ag::uint32_t r0, r1, r2, r3;")
        em.emit(f"    ag::ldmatrix_x4_addr(ag::swizzle_smem_addr(ldm_base + {j * 16}, "
                f"{sw}), r0, r1, r2, r3);")
        for r in range(4):
            em.emit(f"    {info.name}[{4 * j + 2 * r}] = {lo}(r{r}); "
                    f"{info.name}[{4 * j + 2 * r + 1}] = {hi}(r{r});")
        em.emit("}")
    em.indent -= 1
    em.emit("}")
