"""Rendering rules of reductions (sum, prod, max, min, argmax, argmin) along any axis, and of
scans (cumulative sum, prod, max, min) along an axis inside one warp.

The plan comes from the layout (RegisterLayout.reduction_plan): registers in-thread, xor
shuffles over the lane bits along the axis, then partials through shared memory when warp bits
are. Ties and NaNs of argmax/argmin resolve as numpy and torch do. A scan's plan
(RegisterLayout.scan_plan): a running combine over each thread's run of registers, a
Kogge-Stone scan of the run totals over the lane segment (`__shfl_up_sync`), and a carry from
chunk to chunk and into the op's `total`, all in registers.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import _Emitter, rule, tile_c
from argus.codegen.cuda.layouts import broadcast_map
from argus.errors import CompileError
from argus.ir import ops as O

_COMBINE = {"sum": lambda a, b: f"({a} + {b})", "prod": lambda a, b: f"({a} * {b})",
            "max": lambda a, b: f"ag::max_nan({a}, {b})",
            "min": lambda a, b: f"ag::min_nan({a}, {b})"}
# integer tiles reduce in their own integer registers (exact; CUDA's integer max / min)
_INT_COMBINE = {**_COMBINE, "max": lambda a, b: f"max({a}, {b})",
                "min": lambda a, b: f"min({a}, {b})"}


def _combine(fn: str, dtype):
    return (_COMBINE if dtype.is_float else _INT_COMBINE).get(fn)


def _tree(combine, terms: list[str]) -> str:
    """Fold `terms` pairwise, ((t0 . t1) . (t2 . t3)) . ..., as numpy sums: the dependent chain
    is log2(n) ops deep instead of n - 1 (a reduction in a loop is on the critical path of
    every block). For the warps' partials, which are all in registers already."""
    while len(terms) > 1:
        terms = [combine(terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


def _arg_better(fn: str, v: str, i: str, bv: str, bi: str) -> str:
    """C condition: candidate (v, i) replaces the best (bv, bi) of argmax/argmin. NaN counts as
    the extreme (numpy, torch); equal values keep the smaller index."""
    cmp = ">" if fn == "argmax" else "<"
    return (f"(({v}) {cmp} ({bv}) && ({bv}) == ({bv})) || (({v}) == ({bv}) && ({i}) < ({bi})) || "
            f"(({v}) != ({v}) && (({bv}) == ({bv}) || ({i}) < ({bi})))")


def _arg_update_c(fn: str, v: str, i: str, bv: str, bi: str) -> str:
    """C statement: the candidate (v, i) becomes the best (bv, bi) when _arg_better says so."""
    return f"if ({_arg_better(fn, v, i, bv, bi)}) {{ {bv} = {v}; {bi} = {i}; }}"


def _dense_bits_c(bits, tid: str = "gtid") -> str:
    """C expression packing thread bits `bits` of tid into a dense index (bit k = bits[k])."""
    terms = []
    k = 0
    while k < len(bits):
        n = 1
        while k + n < len(bits) and bits[k + n] == bits[k] + n:
            n += 1
        term = f"(({tid} >> {bits[k]}) & {(1 << n) - 1})"
        terms.append(term if k == 0 else f"{term} * {1 << k}")
        k += n
    return " + ".join(terms) if terms else "0"


@rule(O.Reduce)
def reduce(em: _Emitter, op: O.Reduce) -> None:
    """Reduce along any axis by the plan the layout gives (RegisterLayout.reduction_plan):
    registers in-thread, then xor shuffles over the lane bits that move along the axis,
    then, when warp bits do, partials through shared memory (a named barrier for the
    warpgroup inside a role). argmax/argmin carry (value, index) pairs; ties and NaNs
    resolve to the smallest index, as numpy and torch."""
    src = em.tiles[op.src.id]
    lay = src.layout
    try:
        plan = lay.rl.reduction_plan(op.axis)
    except ValueError as e:
        raise CompileError(f"cannot reduce a {lay} tile along axis {op.axis}: {e}", op.loc,
                           fix="convert the tile to a blocked layout first") from None
    res = em.layout(op.result.type, op.loc)
    m = broadcast_map(plan.result, res.rl)
    if m is None or sorted(m) != list(range(res.nregs)) or res.nregs != len(plan.groups):
        raise CompileError(f"reduction result layout {res} is not the slice {plan.result.name}"
                           f" of its source", op.loc)
    info = em.declare_tile(op.result, op.loc)
    arg = op.fn in ("argmax", "argmin")
    vals = f"{info.name}_v" if arg else info.name
    vtype = tile_c(op.src.type.dtype)   # the partials' C type: the source's registers
    if arg:
        em.emit(f"{vtype} {vals}[{res.nregs}];")
    combine = _combine(op.fn, op.src.type.dtype)
    # result register k of the declared layout takes plan group inv[k]
    inv = {m[k]: k for k in range(res.nregs)}
    order = [inv[g] for g in range(len(plan.groups))]
    for g, regs in enumerate(plan.groups):
        k = order[g]
        if not arg:
            # in-thread, a chain: one live partial (as a tree, softmax_online's 32-register
            # row kept more registers live: 72 -> 92 at BN 8192, 3 -> 2 CTAs per SM)
            acc = em.tile_expr(op.src, regs[0], lay)
            for r in regs[1:]:
                acc = combine(acc, em.tile_expr(op.src, r, lay))
            em.emit(f"{vals}[{k}] = {acc};")
            continue
        em.emit(f"{vals}[{k}] = {em.tile_expr(op.src, regs[0], lay)}; "
                f"{info.name}[{k}] = {lay.coord(regs[0])[op.axis]};")
        for r in regs[1:]:
            em.emit("{")
            em.emit(f"    const {vtype} v = {em.tile_expr(op.src, r, lay)}; "
                    f"const int i = {lay.coord(r)[op.axis]};")
            em.emit("    " + _arg_update_c(op.fn, "v", "i", f"{vals}[{k}]",
                                               f"{info.name}[{k}]"))
            em.emit("}")
    n = res.nregs
    if plan.lane_masks:
        if plan.lane_masks == (16, 8, 4, 2, 1) and not arg:
            em.emit("#pragma unroll")
            em.emit("for (int off = 16; off > 0; off >>= 1) {")
            for k in range(n):
                other = f"__shfl_xor_sync(0xffffffffu, {vals}[{k}], off)"
                em.emit(f"    {vals}[{k}] = {combine(f'{vals}[{k}]', other)};")
            em.emit("}")
        else:
            for mask in plan.lane_masks:
                for k in range(n):
                    other = f"__shfl_xor_sync(0xffffffffu, {vals}[{k}], {mask})"
                    if not arg:
                        em.emit(f"{vals}[{k}] = {combine(f'{vals}[{k}]', other)};")
                        continue
                    oi = f"__shfl_xor_sync(0xffffffffu, {info.name}[{k}], {mask})"
                    update = _arg_update_c(op.fn, "v", "i", f"{vals}[{k}]",
                                           f"{info.name}[{k}]")
                    em.emit(f"{{ const {vtype} v = {other}; const int i = {oi}; {update} }}")
    if plan.warp_bits:
        _reduce_warps(em, op, plan, info, vals, n, arg, combine)


@rule(O.Scan)
def scan(em: _Emitter, op: O.Scan) -> None:
    """Per row of the plan (one register of `total`), chunk by chunk in scan order: the
    inclusive combine of the thread's run, a shuffle scan of the run totals over the lane
    segment (down the lanes when reversed), the carry plus the lanes before, and the carry
    moves on by the segment's total (its last lane's scan, read with one shuffle)."""
    src = em.tiles[op.src.id]
    lay = src.layout
    try:
        plan = lay.rl.scan_plan(op.axis)
    except ValueError as e:
        raise CompileError(f"cannot scan a {lay} tile along axis {op.axis}: {e}", op.loc,
                           fix="scan a blocked tile whose axis lies in one warp: a 32-thread "
                               "kernel, or extents of 32 x 4 along the axis") from None
    if op.result.type.layout != op.src.type.layout:
        raise CompileError(f"scan result layout {op.result.type.layout} is not its source's "
                           f"{op.src.type.layout}", op.loc)
    out = em.declare_tile(op.result, op.loc)
    tot = em.declare_tile(op.total, op.loc)
    m = broadcast_map(plan.result, tot.layout.rl)
    if m is None or sorted(m) != list(range(tot.layout.nregs)):
        raise CompileError(f"scan total layout {tot.layout} is not the slice "
                           f"{plan.result.name} of its source", op.loc)
    comb = _combine(op.fn, op.src.type.dtype)
    vtype = tile_c(op.src.type.dtype)   # the running values' C type: the source's registers
    w = plan.width
    full = "0xffffffffu"
    shfl = "__shfl_down_sync" if op.reverse else "__shfl_up_sync"
    first = f"(gtid & {w - 1}) == {w - 1}" if op.reverse else f"(gtid & {w - 1}) == 0"
    inv = {m[k]: k for k in range(tot.layout.nregs)}
    for g, chunks in enumerate(plan.groups):
        k = inv[g]
        em.emit("{")
        em.emit(f"    {vtype} run = {em.tile_expr(op.init, k, tot.layout)};")
        for chunk in (reversed(chunks) if op.reverse else chunks):
            regs = list(reversed(chunk)) if op.reverse else list(chunk)
            # the thread's run, inclusive, in scan order
            em.emit(f"    {out.name}[{regs[0]}] = {em.tile_expr(op.src, regs[0], lay)};")
            for a, b in zip(regs, regs[1:]):
                em.emit(f"    {out.name}[{b}] = "
                        f"{comb(f'{out.name}[{a}]', em.tile_expr(op.src, b, lay))};")
            em.emit("    {")
            em.emit(f"        {vtype} part = {out.name}[{regs[-1]}];")
            if w > 1:
                lane = f"(gtid & {w - 1})"
                em.emit("        #pragma unroll")
                em.emit(f"        for (int d = 1; d < {w}; d <<= 1) {{")
                em.emit(f"            const {vtype} y = {shfl}({full}, part, d, {w});")
                cond = f"{lane} + d < {w}" if op.reverse else f"{lane} >= d"
                em.emit(f"            if ({cond}) part = {comb('y', 'part')};")
                em.emit("        }")
                em.emit(f"        const {vtype} before = {shfl}({full}, part, 1, {w});")
                em.emit(f"        const {vtype} base = {first} ? run : {comb('run', 'before')};")
                last = 0 if op.reverse else w - 1
                em.emit(f"        run = {comb('run', f'__shfl_sync({full}, part, {last}, {w})')};")
            else:
                em.emit(f"        const {vtype} base = run;")
                em.emit(f"        run = {comb('run', 'part')};")
            if op.exclusive:
                for a, b in reversed(list(zip(regs, regs[1:]))):
                    em.emit(f"        {out.name}[{b}] = {comb('base', f'{out.name}[{a}]')};")
                em.emit(f"        {out.name}[{regs[0]}] = base;")
            else:
                for r in regs:
                    em.emit(f"        {out.name}[{r}] = {comb('base', f'{out.name}[{r}]')};")
            em.emit("    }")
        em.emit(f"    {tot.name}[{k}] = run;")
        em.emit("}")


def _reduce_warps(em: _Emitter, op, plan, info, vals: str, n: int, arg: bool,
                  combine) -> None:
    """Combine per-warp partials through shared memory, in the op's scratch buffer(s) that
    lower/smem.py placed: slot (register, other thread bits, warp bits along the axis); one
    writer per slot, a group barrier, every thread reads the partials of its row (or column),
    then (op.release) a barrier so a loop may reuse the slots."""
    try:
        nw = plan.exchange_warps()
    except ValueError as e:
        raise CompileError(str(e), op.loc) from None
    all_warp = tuple(range(5, len(plan.result.thread_bases)))
    wexpr = "gtid / 32" if plan.warp_bits == all_warp else _dense_bits_c(plan.warp_bits)
    other = 1 << len(plan.other_bits)
    oexpr = _dense_bits_c(plan.other_bits) if plan.other_bits else ""
    lane_axis = sum(m for m in plan.lane_masks)
    writer_mask = lane_axis | sum(1 << b for b in plan.replicated_bits)
    size = plan.exchange_slots()
    copies, wg = em.role_copies
    check_scratch(op, op.scratch, 2 if arg else 1, size * copies)
    partials = em.name(op.scratch[0])
    indices = em.name(op.scratch[1]) if arg else ""   # argmax/argmin: the partials' indices
    own = f"{wg} * {size} + " if wg else ""  # this warpgroup's copy

    def slot(k: int, w: str, array: str = partials) -> str:
        base = k * other * nw
        if oexpr:
            return f"{array}[{own}{base} + ({oexpr}) * {nw} + {w}]"
        return f"{array}[{own}{base + int(w)}]" if w.isdigit() else \
            f"{array}[{own}{base} + {w}]"

    cond = "gtid % 32 == 0" if writer_mask == 31 else \
        (f"(gtid & {writer_mask}) == 0" if writer_mask else "true")
    em.emit(f"if ({cond}) {{")
    for k in range(n):
        em.emit(f"    {slot(k, wexpr)} = {vals}[{k}];")
        if arg:
            em.emit(f"    {slot(k, wexpr, indices)} = {info.name}[{k}];")
    em.emit("}")
    em.emit(em.group_barrier())
    # a row's nw partials are consecutive floats: read 16 B at a time where the slots are
    # 16-byte aligned (the plan places the buffer on 128 B and the dynamic block's base on
    # 1024 B), so the reads are LDS.128 rather than nw scalar LDS
    vtype = tile_c(op.src.type.dtype)
    vec4 = {"float": "float4", "int": "int4", "unsigned": "uint4"}.get(vtype)
    quads = not arg and vec4 and nw % 4 == 0 and em.smem_offset(op.scratch[0].id) % 16 == 0
    for k in range(n):
        if quads:
            first = slot(k, "0")
            parts = []
            em.emit("{")
            for q in range(nw // 4):
                em.emit(f"    const {vec4} p{q} = *reinterpret_cast<const {vec4}*>("
                        f"&{first} + {4 * q});")
                parts += [f"p{q}.{c}" for c in "xyzw"]
            em.emit(f"    {vals}[{k}] = {_tree(combine, parts)};")
            em.emit("}")
            continue
        if not arg:
            em.emit(f"{vals}[{k}] = {_tree(combine, [slot(k, str(w)) for w in range(nw)])};")
            continue
        em.emit(f"{vals}[{k}] = {slot(k, '0')}; "
                f"{info.name}[{k}] = {slot(k, '0', indices)};")
        for w in range(1, nw):
            update = _arg_update_c(op.fn, "v", "i", f"{vals}[{k}]", f"{info.name}[{k}]")
            em.emit(f"{{ const {vtype} v = {slot(k, str(w))}; const int i = "
                    f"{slot(k, str(w), indices)}; {update} }}")
    if op.release:   # lower/smem.py leaves it out where nothing rewrites the slots before
        em.emit(em.group_barrier())   # another barrier


def check_scratch(op, scratch: tuple, buffers: int, elements: int) -> None:
    """The exchange buffers lower/smem.py gave `op` are there and hold `elements` each."""
    if len(scratch) != buffers or any(v.type.shape[0] < elements for v in scratch):
        raise CompileError(f"{op.NAME}: its shared-memory exchange needs {buffers} buffer(s) "
                           f"of {elements} elements; lowering gave "
                           f"{[str(v.type) for v in scratch] or 'none'}", op.loc,
                           fix="run lower.smem (argus.lower.run) before rendering")
