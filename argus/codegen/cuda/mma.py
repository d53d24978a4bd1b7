"""Rendering rules of wgmma: the issue block `wgmma.fence, wgmma, wgmma.commit` (maybe with
`wgmma.wait 0` and the `fence.operands` of the same tiles), in the shared-memory form and the
register-A ("rs") form.

The descriptors (swizzle, leading/stride byte offsets, k step) come from lowering
(lower/wgmma.py); the instruction and its prelude from codegen/wgmma.py (WgmmaSpec). The
fences and waits render through their sync rules (sync.py).
"""

from __future__ import annotations

from argus.codegen.cuda.emit import _Emitter, a_k_steps, group_rule, rule, strip_round
from argus.codegen.cuda.sync import fence_operands, wgmma_fence, wgmma_wait
from argus.codegen.wgmma import WgmmaSpec
from argus.errors import CompileError
from argus.ir import ops as O
from argus.target.fragments import ACC_ORDER_A32, ACC_TO_A8


@group_rule(O.WgmmaFence)
def wgmma_issue(em: _Emitter, ops, i: int) -> int:
    """ops[i:] is `wgmma.fence, wgmma, wgmma.commit`, maybe followed by `wgmma.wait 0` and
    the `fence.operands` of the same tiles: one C block (the descriptors and packed A
    registers are local to it). Returns the next index."""
    fence = ops[i]
    op = ops[i + 1] if i + 1 < len(ops) else None
    if not isinstance(op, O.Wgmma) or i + 2 >= len(ops) or \
            not isinstance(ops[i + 2], O.WgmmaCommit):
        raise CompileError("wgmma.fence must precede a wgmma and its wgmma.commit", fence.loc)
    tail = ops[i + 3:i + 5]
    waited = (len(tail) == 2 and isinstance(tail[0], O.WgmmaWait) and tail[0].pending == 0
              and isinstance(tail[1], O.FenceOperands) and tail[1].tiles == fence.tiles)
    ra = "ra"
    if op.a_in_registers and not waited:
        # the group stays in flight past this block: its packed A registers live in the
        # enclosing scope (or one a_scope regions out, declared there: emit.py
        # declare_outer_a_registers) until the fence.operands after the wait that retires it
        k_steps = a_k_steps(op)
        if fence.a_scope:
            ra = em.a_outer.pop(id(fence))
        else:
            ra = f"ra{em.a_frag_count}"
            em.a_frag_count += 1
            em.emit(f"ag::uint32_t {ra}[{k_steps}][4];")
        em.a_frags.setdefault(op.acc.id, []).append((ra, k_steps, fence.a_copy))
    em.emit("{")
    em.indent += 1
    if op.a_in_registers:
        a_regs = _wgmma_register_a(em, op, fence, ra)
    else:
        a_regs = _wgmma_smem(em, op, fence)
    if waited:
        wgmma_wait(em, tail[0])
        fence_operands(em, tail[1], a_regs, fence.a_copy)
    em.indent -= 1
    em.emit("}")
    return i + (5 if waited else 3)


def _spec(em: _Emitter, op: O.Wgmma, a_source: str, write_only: bool = False) -> WgmmaSpec:
    """The instruction variant of `op`, recorded for the kernel's prelude (codegen/wgmma.py);
    `write_only`: its always-overwriting variant with output-only accumulator registers."""
    dt = op.a.type.dtype
    # f32 views are read as tf32 (the only wgmma over 32-bit elements; see O.Wgmma)
    name = "tf32" if dt.name == "f32" else dt.name
    spec = WgmmaSpec(n=op.acc.type.shape[1], a_dtype=name, b_dtype=name,
                     acc_dtype="f32", a_source=a_source, trans_b=op.trans_b,
                     trans_a=op.trans_a, write_only=write_only)
    if spec not in em.wgmma_specs:
        em.wgmma_specs.append(spec)
    return spec


def _issue(em: _Emitter, op: O.Wgmma, spec: WgmmaSpec, a_operand) -> int:
    """One instruction per k step (k16 for 16-bit inputs, k8 for tf32, k32 for fp8) and the
    commit;
    `a_operand(kk)` is step kk's A argument. A scale-d = 0 accumulator (lazy zero) is
    overwritten by the first step. The first step of a wgmma that lowering marked
    `acc_write_only` calls the write-only variant (no scale-d: it overwrites). Returns the
    number of k steps."""
    acc = em.tiles[op.acc.id]
    step_b = op.b_desc[3]
    k_steps = op.k_extent // spec.k
    lazy = acc.name in em.lazy_zero
    for kk in range(k_steps):
        b = f"ag::desc_advance(db, {kk * step_b})"
        if kk == 0 and op.acc_write_only:
            wo = _spec(em, op, spec.a_source, write_only=True)
            em.emit(f"ag::{wo.name}({acc.name}, {a_operand(kk)}, {b});")
            continue
        scale = "0" if op.overwrite and kk == 0 else \
            f"1 - {acc.name}_zero" if lazy and kk == 0 else "1"
        em.emit(f"ag::{spec.name}({acc.name}, {a_operand(kk)}, {b}, {scale});")
    em.emit("ag::wgmma_commit();")
    if lazy:
        em.emit(f"{acc.name}_zero = 0;")
    return k_steps


def _b_descriptor(em: _Emitter, op: O.Wgmma) -> None:
    sw_b, lbo_b, sbo_b, _ = op.b_desc
    em.emit(f"const ag::uint64_t db = ag::make_smem_desc({em.name(op.b)}, {sw_b}, "
            f"{lbo_b}, {sbo_b});")


def _wgmma_register_a(em: _Emitter, op: O.Wgmma, fence: O.WgmmaFence, ra: str = "ra") -> int:
    """The "rs" form: A is a bf16/f16 [64, K] tile in the A fragment (the accumulator
    pattern of 16 columns, target/fragments.py wgmma_a_coord). k16 step kk reads registers
    8kk .. 8kk+7, packed in pairs into ra[kk], the instruction's four 32-bit A registers
    (what `wgmma.fence` / `fence.operands` with a_registers name; `ra` is declared here, or
    by the caller when the group outlives this block). Returns the k steps."""
    if op.a.type.layout not in ("wgmma_acc", "wgmma_a"):
        raise CompileError(f"the register A operand {op.a} of this wgmma is in layout "
                           f"{op.a.type.layout!r}, not the wgmma A fragment", op.loc,
                           fix="pass a tile converted from a 64-row wgmma accumulator "
                               "(p = s.to(ag.bf16)) or loaded with ag.ldmatrix")
    if op.pinned:   # the DSL refuses it; IR built or parsed by hand gets the same answer
        raise CompileError("wgmma pinned=true takes shared-memory operands, not a register A",
                           op.loc, fix="leave pinned out, or pass A as a shared-memory view")
    spec = _spec(em, op, "regs")
    dt = op.a.type.dtype
    k_steps = op.k_extent // spec.k
    if ra == "ra":
        em.emit(f"ag::uint32_t ra[{k_steps}][4];")
    if dt.bits == 8:
        _pack_a8(em, op, ra, k_steps)
    elif dt.bits == 32:
        # tf32 in the accumulator's order (O.Wgmma.a_acc_order, target/fragments.py
        # acc_order_col32): the m64k8 fragment's a0..a3 are (row r, k q), (r + 8, q), (r, q + 4),
        # (r + 8, q + 4); the tile's registers 4kk + (0, 1, 2, 3) hold (r, 2q), (r, 2q + 1),
        # (r + 8, 2q), (r + 8, 2q + 1) of chunk kk, so k-position q reads column 2q and q + 4
        # reads 2q + 1: the thread's own registers, reordered, no shuffle
        for kk in range(k_steps):
            for r, reg in enumerate(ACC_ORDER_A32):
                v = strip_round(em.reg_expr(op.a, 4 * kk + reg), dt)
                em.emit(f"{ra}[{kk}][{r}] = __float_as_uint({v});")
    else:
        # word w of the fragment is registers 2w, 2w + 1: k16 step kk's four are 4kk .. 4kk+3
        # (a packed tile's own words, lower/packed.py; else the pairs packed here)
        words = em.packed_words(op.a, em.tiles[op.a.id].layout)
        for kk in range(k_steps):
            for r in range(4):
                em.emit(f"{ra}[{kk}][{r}] = {words[4 * kk + r]};")
    _b_descriptor(em, op)
    wgmma_fence(em, fence, k_steps, ra)
    return _issue(em, op, spec, lambda kk: f"{ra}[{kk}]")


def _pack_a8(em: _Emitter, op: O.Wgmma, ra: str, k_steps: int) -> None:
    """The 8-bit A fragment of each k32 step from a tile in the accumulator pattern, as
    target/fragments.py AccToA8 plans it: per A register, pack four own elements into a word,
    read the word of two quad lanes, keep 16 bits of each. The lanes and the byte selector
    depend on the thread's quad position only (gtid % 4): the plan's own expressions
    (SOURCE_LANE, SELECT_UPPER), which its check() proves. A wgmma with a_acc_order reads A
    in the accumulator's own order instead (AccOrderA8): four own registers packed per A
    register, nothing else."""
    # word 4kk + r packs the registers both plans start from (ACC_ORDER_A8.word(kk, r) ==
    # ACC_TO_A8.word(kk, r), emit.a8_word_regs): a packed tile's own word (lower/packed.py,
    # P carried across the fa3 loop's back edge), else the four registers packed here
    words = em.packed_words(op.a, em.tiles[op.a.id].layout)
    if op.a_acc_order:
        # AccOrderA8: each A register is four of the thread's own accumulator registers
        # (B's k rows are in the same order, O.Wgmma.a_acc_order): no shuffle, no byte_perm
        for kk in range(k_steps):
            for r in range(4):
                em.emit(f"{ra}[{kk}][{r}] = {words[4 * kk + r]};")
        return
    plan = ACC_TO_A8
    em.emit(f"const int a8_src = {plan.SOURCE_LANE};")
    em.emit(f"const ag::uint32_t a8_sel = {plan.SELECT_UPPER} ? {plan.SELECT[1]:#x}u : "
            f"{plan.SELECT[0]:#x}u;")
    for kk in range(k_steps):
        for r in range(4):
            em.emit(f"{ra}[{kk}][{r}] = ag::quad_gather_b16x2({words[4 * kk + r]}, a8_src, "
                    f"a8_sel);")


def _wgmma_smem(em: _Emitter, op: O.Wgmma, fence: O.WgmmaFence) -> int:
    """Both operands through shared-memory descriptors. Returns 0 (no A registers)."""
    spec = _spec(em, op, "smem")
    sw_a, lbo_a, sbo_a, step_a = op.a_desc
    em.emit(f"const ag::uint64_t da = ag::make_smem_desc({em.name(op.a)}, {sw_a}, "
            f"{lbo_a}, {sbo_a});")
    _b_descriptor(em, op)
    wgmma_fence(em, fence, pinned=op.pinned)
    _issue(em, op, spec, lambda kk: f"ag::desc_advance(da, {kk * step_a})")
    return 0


@rule(O.Wgmma)
def wgmma(em: _Emitter, op: O.Wgmma) -> None:
    raise CompileError("a wgmma without its wgmma.fence and wgmma.commit (run lower.sync)",
                       op.loc)

# register tiles
