"""Shared-memory layout obligations of lowered kernels: TMA boxes, swizzles, expect_tx bytes,
the smem plan, and the byte-level agreement of TMA writes with wgmma descriptor reads.

Job: prove that what codegen renders from the lowered fields moves the right elements
(INVARIANTS.md §2.2–2.3, bug classes 1–6):

  tma.box, tma.swizzle, tma.tx-bytes, smem.align — arithmetic on the lowered fields;
  wgmma.smem-layout — for every wgmma operand, every stage, warpgroup slice, row/column mn and
      k of the tile, the byte the descriptor (swizzle, LBO, SBO, k16 advance; PTX ISA
      §9.7.15.5.1.2) makes the tensor core read holds, by the TMA write layout (box, swizzle of
      the ABSOLUTE address, PTX §5.5) inverted, exactly element (row0 + mn, k) of the view.

Tiers for wgmma.smem-layout: F2 (argus.layout.f2, Triton-style linear layouts: the composed map
TMA⁻¹ ∘ descriptor is built with `F2Layout.from_function`, which checks linearity on the whole
domain, and compared with the identity basis by basis) when the instance is static and linear;
exhaustive evaluation ("enum") when it is static but not linear (wrong SBO, a misaligned base);
QF_BV through z3 (the same `argus.target.sm90` formulas on bit-vectors) otherwise. Hardware
formulas come only from `argus.target.sm90`.
"""

from __future__ import annotations

import dataclasses

import itertools
import time

import numpy as np
import z3

from argus.ir import ops as O
from argus.ir.guarded_tma import box_bytes, definitions, guarded_pairs, rank_free
from argus.layout.f2 import F2Layout
from argus.target import sm90
from argus.verify import solver
from argus.verify import witness as W
from argus.verify.model import Model, ViewInfo, WgmmaSite, WriteSite, _num, _subst
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value

SPAN = {0: 1 << 30, 32: 32, 64: 64, 128: 128}
PERIOD = {0: 128, 32: 256, 64: 512, 128: 1024}


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    if not model.lowered:
        return obs, finds
    finds += _tma_fields(model)
    finds += _tx_bytes(model)
    finds += _smem_plan(model)
    for site in model.wgmmas:
        if site.a_tile is not None:
            finds.append(_register_a_layout(site))
        if not site.op.b_desc or (site.a_tile is None and not site.op.a_desc):
            continue
        for operand in ("a", "b") if site.a_tile is None else ("b",):
            o, f = _operand_layout(model, site, operand)
            obs += o
            finds += f
    return obs, finds


def _register_a_layout(site: WgmmaSite) -> Finding:
    """A register A operand must be held in the m64k16 A fragment, which for each 16 columns
    is the accumulator pattern (PTX ISA "Register Fragments" for wgmma .f16/.bf16 A): a tile
    in the accumulator layout is one, register for register."""
    op = site.op
    subject = f"register A operand {op.a} of wgmma at {op.loc}"
    layout = op.a.type.layout
    # "wgmma_a" names the same per-16-column pattern as the operand it is
    if layout in ("wgmma_acc", "wgmma_a") and op.a.type.shape[0] == 64:
        return Finding("wgmma.a-fragment", op.loc, subject, "proven")
    return Finding("wgmma.a-fragment", op.loc, subject, "violated",
                   f"the A operand is a {op.a.type.shape} tile in layout {layout or 'none'!r}, "
                   f"not the wgmma A fragment (the accumulator pattern of a 64-row tile): "
                   f"threads would feed other elements than the tile holds")


# ----------------------------------------------------------------------------- arithmetic


def _issued(model: Model, w, f: Finding) -> Finding:
    """A TMA copy's finding naming who issues it, from its write site (the role and its
    elected thread: W.by_site), not names.who's lookup of the line."""
    wit = dict(f.witness)
    return dataclasses.replace(f, message=W.by_site(model, w.site, f.message, wit),
                               witness=wit)


def _tma_fields(model: Model) -> list[Finding]:
    out = []
    for writes in model.writes.values():
        for w in writes:
            if w.kind != "tma" or not w.op.box:
                continue
            op: O.TmaLoad = w.op
            view = w.view
            t = model.buffers[view.buffer.id].result.type
            e = t.dtype.bytes
            subject = f"TMA load of {w.tensor.name} into {view.buffer} at {op.loc}"
            box = tuple(op.box)
            want = (view.rows, view.cols)
            # the box lands row-major (the TMA unit writes it densely, innermost dim first):
            # its outer extents multiply to the view's rows (the model unravels a view row
            # into the box's outer coordinates), its inner extent is the view's columns
            rank = len(op.tensor.type.shape)
            if len(box) != rank:
                # the model places the box's dims on the tensor's, outermost first: a box of
                # another rank would put rows on the wrong dim (the DSL and lowering never
                # make one; a hand-lowered or rewritten op could)
                out.append(_issued(model, w, Finding("tma.box", op.loc, subject, "violated",
                                   f"the tensor map's box {box} has {len(box)} dims but "
                                   f"{w.tensor.name} has {rank}",
                                   {"box": box, "rank": rank})))
            elif (int(np.prod(box[:-1])), box[-1]) != want:
                out.append(_issued(model, w, Finding("tma.box", op.loc, subject, "violated",
                                   f"the tensor map's box {box} does not fill the smem view "
                                   f"{want} row-major: the copy writes "
                                   f"{int(np.prod(box)) * e} bytes laid out with a row pitch of {box[-1] * e} B into a view "
                                   f"of {view.rows} rows of {view.cols * e} B",
                                   {"box": box, "view": want})))
            elif box[-1] * e > SPAN.get(op.swizzle, 1 << 30):
                out.append(_issued(model, w, Finding("tma.box", op.loc, subject, "violated",
                                   f"inner box {box[-1] * e} B exceeds the {op.swizzle}B swizzle "
                                   f"span", {"box": box, "swizzle": op.swizzle})))
            else:
                out.append(Finding("tma.box", op.loc, subject, "proven"))
            if op.swizzle != t.swizzle:
                out.append(_issued(model, w, Finding("tma.swizzle", op.loc, subject, "violated",
                                   f"the tensor map swizzles {op.swizzle}B but the buffer (and "
                                   f"every reader of it) uses {t.swizzle}B",
                                   {"tma_swizzle": op.swizzle, "buffer_swizzle": t.swizzle})))
            else:
                out.append(Finding("tma.swizzle", op.loc, subject, "proven"))
            credited = int(np.prod(box)) * e
            if op.bytes and op.bytes != credited:
                out.append(Finding("tma.tx-bytes", op.loc, subject, "violated",
                                   f"the copy is recorded as crediting {op.bytes} B but the "
                                   f"hardware credits the full box, {credited} B",
                                   {"bytes": op.bytes, "box_bytes": credited}))
    return out


def _tx_bytes(model: Model) -> list[Finding]:
    out = []
    defs = definitions(model.kernel)
    for pipe in model.pipes.values():
        for step in pipe.steps:
            if step.kind != "produce" or not step.op.tx_bytes:
                continue
            op: O.Produce = step.op
            loads = [x for x in op.body.walk() if isinstance(x, O.TmaLoad)]
            guarded = [x for x in op.body.walk() if isinstance(x, O.If)
                       and any(isinstance(y, O.TmaLoad) for y in x.body.walk())]
            cs = model.cluster_size
            pairs, problem = guarded_pairs(op.body, defs, cs, size=box_bytes) if guarded \
                else ([], None)
            uneven = [g for g, h, _ in pairs for x in (g, h)
                      if cs > 1 and not rank_free(model.kernel, x.cond, cs)]
            if problem or uneven:
                # how many boxes arrive depends on the condition (and, for a multicast copy,
                # on which CTAs of the cluster take it): not a sum of static box sizes, unless
                # two complementary guards deliver the same bytes and every CTA of the
                # cluster takes the same one (argus/ir/guarded_tma.py)
                why = problem or ("its condition may differ between the CTAs of the "
                                  "cluster (it reads the cluster rank or the grid id)")
                out.append(Finding("tma.tx-bytes", op.loc, f"produce step at {op.loc}",
                                   "unknown", f"a TMA copy of this step is under the condition "
                                              f"at {guarded[0].loc}: the bytes that arrive per "
                                              f"phase are not modelled ({why})"))
                continue
            inside = {id(y) for g, h, _ in pairs for x in (g, h) for y in x.body.walk()}
            loads = [x for x in loads if id(x) not in inside]
            delivered = 0
            parts = []
            own = multicast = 0
            for g, h, nbytes in pairs:
                delivered += nbytes
                parts.append(f"{nbytes} B under either of the complementary guards at "
                             f"{g.loc} and {h.loc}")
            for ld in loads:
                t = ld.dst.type
                n = int(np.prod(ld.box)) if ld.box else t.shape[0] * t.shape[1]
                box = n * t.dtype.bytes
                if ld.multicast:
                    # every CTA of the cluster runs this copy and its box lands in (and
                    # credits the full barrier of) every CTA: cs boxes per CTA and step
                    delivered += box * cs
                    multicast += box
                    parts.append(f"{cs} x {box} B multicast at {ld.loc} (one box from each "
                                 f"CTA of the cluster)")
                else:
                    delivered += box
                    own += box
                    parts.append(f"{box} B at {ld.loc}")
            subject = f"produce step at {op.loc}"
            if op.tx_bytes != delivered:
                more = op.tx_bytes > delivered
                # the full barrier expects one arrival (PipelineCreate.FULL_ARRIVALS): one
                # elected thread of the producer issues arrive.expect_tx for its warpgroup
                who, said = W.issuer(step.site.role, "the elected thread")
                out.append(Finding(
                    "tma.tx-bytes", op.loc, subject, "violated",
                    f"arrive.expect_tx({op.tx_bytes}), issued by {said}, but the step's TMA "
                    f"copies deliver "
                    f"{delivered} B ({' + '.join(parts)}): "
                    + ("the phase never completes (hang)" if more else
                       "the phase completes before all bytes landed: consumers read a partly "
                       "written stage"),
                    {**who, "expect_tx": op.tx_bytes, "delivered": delivered,
                     "difference": op.tx_bytes - delivered,
                     **({"own_bytes": own, "multicast_box_bytes": multicast,
                         "cluster_size": cs} if multicast else {})},
                    fix=f"tx_bytes = {delivered}"))
            else:
                out.append(Finding("tma.tx-bytes", op.loc, subject, "proven"))
    return out


def _plan(model: Model) -> dict[int, tuple[int, int, int]]:
    return {vid: (off, nbytes, align) for vid, off, nbytes, align in
            model.kernel.attr("smem_plan", ())}


def _planned(buf, loc) -> tuple[dict, str]:
    """smem.align's who: no thread runs the shared-memory plan (the compiler places the
    buffers before the launch); the buffer by its value (names.annotate gives the user's
    name) and its allocation's line."""
    return W.nobody(f"the compiler's shared-memory plan places {buf} (allocated at {loc}) "
                    f"before the launch")


def _smem_plan(model: Model) -> list[Finding]:
    out = []
    plan = _plan(model)
    smem_bytes = model.kernel.attr("smem_bytes", 0)
    spans = []
    for vid, alloc in model.buffers.items():
        t = alloc.result.type
        subject = f"buffer {alloc.result} ({'x'.join(map(str, t.shape))} {t.dtype}, " \
                  f"swizzle {t.swizzle}) at {alloc.loc}"
        who, words = _planned(alloc.result, alloc.loc)
        if vid not in plan:
            out.append(Finding("smem.align", alloc.loc, subject, "violated",
                               f"the buffer has no place in smem_plan ({words})", dict(who)))
            continue
        off, nbytes, _align = plan[vid]
        period = PERIOD[t.swizzle] if t.swizzle else 128
        stage_bytes = t.bytes // t.shape[0] if len(t.shape) == 3 else t.bytes
        problems = []
        wit = {"offset": off, "period": period, "stage_bytes": stage_bytes, **who,
               "allocated_at": str(alloc.loc)}
        if off % period:
            problems.append(f"it starts at byte {off} = {off % period} mod {period}; TMA and "
                            f"wgmma swizzle absolute addresses, so the "
                            f"{'swizzle pattern' if t.swizzle else 'TMA destination'} needs "
                            f"{period}-B alignment")
        if len(t.shape) == 3 and t.swizzle and stage_bytes % period:
            bad = next(s for s in range(1, t.shape[0]) if (off + s * stage_bytes) % period)
            problems.append(f"stage {bad} starts at byte {off + bad * stage_bytes} "
                            f"(stage size {stage_bytes} B is not a multiple of {period})")
            wit["misaligned_stage"] = bad
        tma_problem = None
        if not problems and not (len(t.shape) == 3 and t.swizzle and stage_bytes % period):
            tma_problem = _tma_view_alignment(model, vid, t, off, stage_bytes)
        if tma_problem is not None:
            problems.append(tma_problem[0])
            wit.update(tma_problem[1])
        if nbytes < t.bytes:
            problems.append(f"the plan gives it {nbytes} B but it needs {t.bytes} B")
        spans.append((off, off + max(nbytes, t.bytes), alloc.result, alloc.loc))
        if problems:
            padded = -(-stage_bytes // TMA_SMEM_ALIGN) * TMA_SMEM_ALIGN
            if tma_problem is None:
                fix = f"place the buffer at a multiple of {period} B"
            elif "misaligned_stage" in wit:
                fix = (f"pad each stage to a multiple of {TMA_SMEM_ALIGN} bytes (stage size "
                       f"{stage_bytes} B -> {padded} B)")
            else:
                fix = f"start every TMA view of the buffer at a multiple of {TMA_SMEM_ALIGN} B"
            out.append(Finding("smem.align", alloc.loc, subject, "violated",
                               "; ".join(problems) + f" ({words})", wit, fix=fix))
        else:
            out.append(Finding("smem.align", alloc.loc, subject, "proven"))
    spans.sort(key=lambda x: (x[0], x[1]))
    for (a0, a1, an, aloc), (b0, b1, bn, bloc) in itertools.pairwise(spans):
        if b0 < a1:
            who, words = W.nobody(f"the compiler's shared-memory plan places {an} "
                                  f"(allocated at {aloc}) and {bn} (allocated at {bloc}) "
                                  f"before the launch")
            out.append(Finding("smem.align", aloc, f"buffers {an} and {bn}", "violated",
                               f"{an} [{a0}, {a1}) overlaps {bn} [{b0}, {b1}) ({words})",
                               {"first": (a0, a1), "second": (b0, b1), **who,
                                "allocated_at": [str(aloc), str(bloc)]}))
    if spans and smem_bytes and spans[-1][1] > smem_bytes:
        who, words = _planned(spans[-1][2], spans[-1][3])
        out.append(Finding("smem.align", spans[-1][3], "smem plan", "violated",
                           f"buffers end at byte {spans[-1][1]} but smem_bytes = {smem_bytes} "
                           f"({words})", dict(who)))
    if smem_bytes > sm90.limits.SMEM_PER_CTA_OPTIN:
        who, words = W.nobody("the compiler's shared-memory plan sizes the CTA's shared "
                              "memory (the ag.smem allocations) before the launch")
        out.append(Finding("smem.align", model.kernel.body.ops[0].loc, "smem plan", "violated",
                           f"{smem_bytes} B of shared memory exceed the "
                           f"{sm90.limits.SMEM_PER_CTA_OPTIN} B a CTA may use ({words})",
                           dict(who)))
    return out


# the shared-memory address of a cp.async.bulk.tensor copy (either direction) must be a
# multiple of 128 B (CUDA C++ Programming Guide, "Tensor Memory Access", alignment
# requirements): an unswizzled buffer whose stages are not 128-B multiples puts every odd
# stage's copy off it, which faults on the device (921453c: the fp8 kernel's [stages, 2, 4]
# f32 scale stages of 32 B)
TMA_SMEM_ALIGN = 128


def _tma_views(model: Model, vid: int) -> list[tuple[ViewInfo, O.Op, str]]:
    """The views of buffer `vid` a TMA copy moves: tma.load destinations and tma.store
    sources, with the op and its name."""
    out = [(w.view, w.op, "tma.load") for w in model.writes.get(vid, []) if w.kind == "tma"]
    out += [(r.view, r.op, "tma.store") for r in model.reads
            if r.kind == "tma-store" and r.view.buffer.id == vid]
    return out


def _tma_view_alignment(model: Model, vid: int, t, off: int, stage_bytes: int):
    """None when every TMA copy touching buffer `vid` starts on a 128-B boundary at every
    stage it may use (all stages: the stage is the pipeline slot, which cycles through all of
    them) and every row offset it takes; else (message, witness) for the first that does not.
    A row offset the model cannot enumerate is proven with the solver over all integers: a
    multiple of 128 B whatever it is, or reported."""
    row_bytes = t.shape[-1] * t.dtype.bytes
    stages = t.shape[0] if len(t.shape) == 3 else 1
    for view, op, what in _tma_views(model, vid):
        used = range(stages) if view.stage is not None else [0]
        row0s = _values_of(model, view.row0)
        if row0s is None:
            r = _num(view.row0)
            # a resource limit, not a wall-clock timeout: the verdict must not depend on load
            s = solver.limited(z3.Solver(), solver.rlimit_of(2000))
            # is there a value of the row offset whose byte offset is off the boundary?
            s.add((r * row_bytes) % TMA_SMEM_ALIGN != 0)
            if s.check() != z3.unsat:
                return (f"the {what} at {op.loc} copies rows from offset {view.row0} of a "
                        f"stage ({row_bytes} B rows): its shared-memory address is not shown "
                        f"to be a multiple of {TMA_SMEM_ALIGN} B, as TMA requires",
                        {"tma_view_offset": str(view.row0), "row_bytes": row_bytes})
            row0s = [0]
        for st in used:
            for r0 in row0s:
                addr = off + st * stage_bytes + r0 * row_bytes
                if addr % TMA_SMEM_ALIGN:
                    wit = {"tma_view_offset": addr, "stage": st, "row0": r0,
                           "row_bytes": row_bytes}
                    if (st * stage_bytes) % TMA_SMEM_ALIGN:
                        wit["misaligned_stage"] = st
                        why = (f"the stage size {stage_bytes} B is not a multiple of "
                               f"{TMA_SMEM_ALIGN}")
                    else:
                        why = f"row {r0} of {row_bytes} B rows is {r0 * row_bytes} B in"
                    return (f"the {what} at {op.loc} copies stage {st}, row {r0} at byte "
                            f"{addr} = {addr % TMA_SMEM_ALIGN} mod {TMA_SMEM_ALIGN} ({why}); "
                            f"TMA needs its shared-memory address {TMA_SMEM_ALIGN}-B aligned",
                            wit)
    return None


# ----------------------------------------------------------------------------- TMA ∘ wgmma


class _Layout:
    """The static facts one operand's check needs."""

    def __init__(self, model: Model, site: WgmmaSite, operand: str):
        op = site.op
        self.view: ViewInfo = site.a if operand == "a" else site.b
        self.trans = op.trans_b if operand == "b" else op.trans_a
        self.desc = tuple(op.a_desc if operand == "a" else op.b_desc)
        t = model.buffers[self.view.buffer.id].result.type
        self.t = t
        self.e = t.dtype.bytes
        self.row_bytes = t.shape[-1] * self.e
        self.stages = t.shape[0] if len(t.shape) == 3 else 1
        self.stage_bytes = self.row_bytes * t.shape[-2]
        self.offset = _plan(model)[self.view.buffer.id][0]
        self.K = op.k_extent
        self.MN = op.acc.type.shape[1] if operand == "b" else 64
        self.k_per_step = 32 // self.e
        self.writes: list[WriteSite] = [w for w in model.writes.get(self.view.buffer.id, [])
                                        if w.kind == "tma" and w.op.box]

    def major(self) -> str:
        return "MN" if self.trans else "K"


def _values_of(model: Model, term, limit: int = 16):
    """The finite set of values a row offset takes: an int, or a term over role indices."""
    if isinstance(term, int):
        return [term]
    t = _num(term)
    simp = z3.simplify(t)
    if z3.is_int_value(simp):
        return [simp.as_long()]
    roles = [r for r in model.roles if any(
        str(model.sym[r.index.id]) == name for name in _consts(t))]
    names = _consts(t)
    if len(roles) != len(names):
        return None
    out = set()
    for combo in itertools.product(*[range(r.warpgroups) for r in roles]):
        pairs = [(model.sym[r.index.id], z3.IntVal(v)) for r, v in zip(roles, combo)]
        v = z3.simplify(z3.substitute(t, *pairs))
        if not z3.is_int_value(v):
            return None
        out.add(v.as_long())
        if len(out) > limit:
            return None
    return sorted(out)


def _consts(t) -> set[str]:
    from argus.verify.tagdomain import free_consts
    return free_consts(t)


def _read_addr(L: _Layout, st, mn, kk, row0, xp=np):
    sw, lbo, sbo, adv = L.desc
    kb = kk // L.k_per_step if xp is np else z3.UDiv(kk, L.k_per_step)
    kin = kk % L.k_per_step if xp is np else z3.URem(kk, L.k_per_step)
    start = L.offset + st * L.stage_bytes + row0 * L.row_bytes + kb * adv
    return sm90.wgmma_smem_addr(mn, kin, start=start, lbo=lbo, sbo=sbo, swizzle_bytes=sw,
                                elem_bytes=L.e, major=L.major())


def _written(L: _Layout, model: Model, addr, st, writer_row0s, xp=np):
    """(row, col, inside) of the logical buffer element at `addr`, per the TMA writes."""
    row = col = inside = None
    for w, row0_w in writer_row0s:
        box = tuple(w.op.box)
        inner = box[-1] * L.e
        rows = int(np.prod(box[:-1]))
        w_stage = st if w.view.stage is not None else 0
        base = L.offset + w_stage * L.stage_bytes + row0_w * L.row_bytes
        r, cb, ins = sm90.tma_box_coord(addr, base, w.op.swizzle, inner, rows)
        c = cb // L.e if xp is np else z3.UDiv(cb, L.e)
        rr = r + row0_w
        if row is None:
            row, col, inside = rr, c, ins
        elif xp is np:
            row, col = np.where(ins, rr, row), np.where(ins, c, col)
            inside = ins | inside
        else:
            row, col = z3.If(ins, rr, row), z3.If(ins, c, col)
            inside = z3.Or(ins, inside)
    return row, col, inside


def _expected(L: _Layout, mn, kk, row0):
    """The view element wgmma operand element (mn, k) must be: K-major rows directly; an
    MN-major operand as column atoms [MN / W][K][W] (W = the buffer's columns)."""
    if not L.trans:
        return (row0 + mn, kk)
    W = L.t.shape[-1]
    if isinstance(mn, z3.ExprRef):
        return (row0 + z3.UDiv(mn, W) * L.K + kk, z3.URem(mn, W))
    return (row0 + (mn // W) * L.K + kk, mn % W)


def _instances(model: Model, L: _Layout):
    """One instance per rank of this CTA in its cluster (one without a cluster): the rank, the
    reader's row offset and the (write, row offset) pairs landing in the buffer — this CTA's
    own copies with its rank, and every CTA's multicast copies with that CTA's rank (all CTAs
    of a cluster run the same code; a multicast box lands at the same offset in each)."""
    ranks = list(range(model.cluster_size)) if model.rank_digits else [None]
    out = []
    for r in ranks:
        wr = []
        for w in L.writes:
            qs = range(model.cluster_size) if w.op.multicast and model.rank_digits else [r]
            for q in qs:
                wr.append((w, _subst(_num(w.view.row0), model.peer_pairs(q))))
        out.append((r, _subst(_num(L.view.row0), model.peer_pairs(r)), wr))
    return out


def _operand_layout(model: Model, site: WgmmaSite, operand: str):
    L = _Layout(model, site, operand)
    op = site.op
    name = "A" if operand == "a" else "B"
    subject = f"wgmma at {op.loc}, operand {name} ({L.view.buffer}, descriptor " \
              f"swizzle={L.desc[0]} LBO={L.desc[1]} SBO={L.desc[2]} k16-advance={L.desc[3]})"
    if not L.writes:
        return [], []
    t0 = time.perf_counter()
    tier = "F2"
    obs: list[Obligation] = []
    for rank, reader_row0, writes in _instances(model, L):
        row0s = _values_of(model, reader_row0)
        wr = []
        for w, term in writes:
            vals = _values_of(model, term)
            if vals is None or len(vals) != 1:
                row0s = None
                break
            wr.append((w, vals[0]))
        if row0s is None:
            try:
                obs.append(_bv_obligation(model, site, operand, L, subject, reader_row0, writes,
                                          rank))
            except (ValueError, TypeError) as e:
                return [], [Finding("wgmma.smem-layout", op.loc, subject, "unknown",
                                    f"no exact bit-vector encoding: {e}")]
            continue
        for row0 in row0s:
            res = _static_instance(L, wr, row0)
            if res is not None:
                tier, bad = res
                if bad is not None:
                    ms = (time.perf_counter() - t0) * 1e3
                    return [], [_static_finding(model, site, operand, L, wr, row0, bad, subject,
                                                tier, ms, rank)]
    if obs:
        return obs, []
    ms = (time.perf_counter() - t0) * 1e3
    return [], [Finding("wgmma.smem-layout", op.loc, subject, "proven", tier=tier, ms=ms)]


def _static_instance(L: _Layout, wr, row0):
    """Decide one static instance: ("F2", None) / ("enum", None) when proven, else (tier,
    (st, mn, kk)) for a bad point; raises nothing. A function of numbers only (the operand's
    layout facts, each writer's box, swizzle, stage and row offset, the reader's row offset),
    so decided once per distinct instance and remembered with the solver's proofs (emptied by
    `solver.clear_cache`): the k-slices of an attention kernel's operands repeat the same few
    (26 instances, 8 distinct, at head dim 256)."""
    key = (L.stages, L.MN, L.K, L.desc, L.k_per_step, L.offset, L.stage_bytes, L.row_bytes,
           L.e, L.trans, tuple(L.t.shape), row0,
           tuple((tuple(w.op.box), w.op.swizzle, w.view.stage is not None, r) for w, r in wr))
    cache = solver.fact_cache("check_layout.static_instance")
    if key not in cache:
        cache[key] = _decide_static(L, wr, row0)
    return cache[key]


def _decide_static(L: _Layout, wr, row0):
    S, MN, K = L.stages, L.MN, L.K

    def composed(st, mn, k):
        addr = _read_addr(L, st, mn, k, row0)
        row, col, inside = _written(L, None, addr, st, wr)
        er, ec = _expected(L, mn, k, row0)
        return np.where(inside, row - er, 1 << 20), np.where(inside, col - ec, 1 << 20)

    pow2 = all(x & (x - 1) == 0 for x in (S, MN, K))
    if pow2:
        try:
            dims = [("stage", S), ("mn", MN), ("k", K)] if S > 1 else [("mn", MN), ("k", K)]

            def fn(**kw):
                st = kw.get("stage", np.zeros_like(kw["mn"]))
                return tuple(np.asarray(x, dtype=np.int64) for x in
                             _dense(L, wr, row0, st, kw["mn"], kw["k"]))
            lay = F2Layout.from_function(fn, dims, [("row", 1 << 21), ("col", 1 << 21)])
            want = F2Layout.from_function(lambda **kw: (kw["mn"] * 0, kw["mn"] * 0), dims,
                                          [("row", 1 << 21), ("col", 1 << 21)])
            if lay == want:
                return "F2", None
        except ValueError:
            pass  # affine or not F2-linear: decide exhaustively below
    st, mn, kk = np.meshgrid(np.arange(S), np.arange(MN), np.arange(K), indexing="ij")
    st, mn, kk = st.ravel(), mn.ravel(), kk.ravel()
    try:
        dr, dc = composed(st, mn, kk)
    except ValueError as e:
        return "enum", ("start", str(e))
    bad = np.nonzero((dr != 0) | (dc != 0))[0]
    if bad.size:
        i = int(bad[0])
        return "enum", (int(st[i]), int(mn[i]), int(kk[i]))
    return "enum", None


def _dense(L: _Layout, wr, row0, st, mn, kk):
    """Differences (read row/col − expected); far off when the byte was not written."""
    addr = _read_addr(L, st, mn, kk, row0)
    row, col, inside = _written(L, None, addr, st, wr)
    er, ec = _expected(L, mn, kk, row0)
    # XOR, not subtraction: zero iff equal, and never negative (F2 images are bit patterns)
    return (np.where(inside, row ^ er, 1 << 20), np.where(inside, col ^ ec, 1 << 20))


def _static_finding(model, site, operand, L: _Layout, wr, row0, bad, subject, tier, ms,
                    rank=None):
    op = site.op
    name = "A" if operand == "a" else "B"
    if bad[0] == "start":
        wit = {"row0": row0}
        return Finding("wgmma.smem-layout", op.loc, subject, "violated",
                       W.by_site(model, site.site, f"the descriptor start leaves the "
                                 f"validated regime: {bad[1]}", wit),
                       wit, tier=tier, ms=ms)
    st, mn, kk = bad
    addr = int(_read_addr(L, np.array([st]), np.array([mn]), np.array([kk]), row0)[0])
    row, col, inside = _written(L, None, np.array([addr]), np.array([st]), wr)
    er, ec = _expected(L, mn, kk, row0)
    holds = (f"buffer row {int(row[0])}, col {int(col[0])}" if bool(inside[0]) else
             "a byte no TMA copy of this step wrote")
    wit = {"stage": st, ("row" if name == "A" else "col") + "_in_tile": mn, "k_in_tile": kk,
           "k_block": kk // L.k_per_step, "smem_byte": hex(addr), "warpgroup_row0": row0,
           "expected": f"buffer row {er}, col {ec}", "holds": holds}
    if rank is not None:
        wit["cluster_rank"] = rank
    if name == "A":
        wit.update(W.acc_thread(mn, 0))
        who = (f"accumulator row {mn} (thread {wit['thread']}, warp {wit['warp']}, lane "
               f"{wit['lane']}, {wit['register']} for column 0)")
    else:
        wit.update(W.acc_thread(0, mn))
        who = (f"accumulator column {mn} (thread {wit['thread']}, warp {wit['warp']}, lane "
               f"{wit['lane']}, {wit['register']} for row 0)")
    hint = _likely_cause(L, wr)
    msg = (("" if rank is None else f"CTA rank {rank} of the cluster, ") +
           f"stage {st}, k-block {kk // L.k_per_step}: the tensor core reads {name}[{mn}, k {kk}] "
           f"for {who} from shared byte {hex(addr)}, which holds {holds} of {L.view.buffer} "
           f"instead of row {er}, col {ec}" + (f"; likely cause: {hint}" if hint else ""))
    # the role and warpgroup of the wgmma (its site: no solver model here), beside the
    # accumulator thread named above
    if site.site.role is not None:
        issued, _ = W.issuer(site.site.role, "every thread")
        wit.update({k: issued[k] for k in ("role", "warpgroup")})
        msg += f" (role {wit['role']!r}, warpgroup {wit['warpgroup']})"
    wit["threads"] = ("every thread of the warpgroup runs the wgmma (the accumulator's holder "
                      "shown)")
    return Finding("wgmma.smem-layout", op.loc, subject, "violated", msg, wit, tier=tier, ms=ms)


def _likely_cause(L: _Layout, wr) -> str:
    sw, _lbo, sbo, adv = L.desc
    causes = []
    if sw != L.t.swizzle:
        causes.append(f"descriptor swizzle {sw}B but the buffer is {L.t.swizzle}B-swizzled")
    for w, _ in wr:
        if w.op.swizzle != sw:
            causes.append(f"the tensor map at {w.op.loc} swizzles {w.op.swizzle}B, the "
                          f"descriptor {sw}B")
            break
    if not L.trans and sw and sbo != 8 * L.row_bytes:
        causes.append(f"SBO = {sbo} B but 8 rows of {L.row_bytes} B are {8 * L.row_bytes} B")
    want_adv = (L.k_per_step * L.row_bytes) if L.trans else 32
    if adv != want_adv:
        causes.append(f"k16 advance = {adv} B but one k-step is {want_adv} B")
    if L.offset % PERIOD[L.t.swizzle or 0]:
        causes.append(f"the buffer starts at byte {L.offset}, not on the "
                      f"{PERIOD[L.t.swizzle or 0]}-B swizzle period")
    return "; ".join(causes)


def _bv_obligation(model: Model, site: WgmmaSite, operand: str, L: _Layout, subject: str,
                   reader_row0, writes, rank=None) -> Obligation:
    """The same claim with stage, mn, k and the row offsets as 32-bit vectors (QF_BV)."""
    bw = 32
    # fresh names: id() of a Python object can be reused once it is collected, and two
    # terms with one name are one variable
    st, mn, kk = (z3.FreshConst(z3.BitVecSort(bw), prefix=p) for p in ("stage", "mn", "kk"))
    prem = [z3.ULT(st, L.stages), z3.ULT(mn, L.MN), z3.ULT(kk, L.K)]
    row0 = _bv_of(model, reader_row0, bw, prem)
    wr = [(w, _bv_of(model, term, bw, prem)) for w, term in writes]
    addr = _read_addr(L, st, mn, kk, row0, xp=z3)
    row, col, inside = _written(L, model, addr, st, wr, xp=z3)
    er, ec = _expected(L, mn, kk, row0)
    start = L.offset + st * L.stage_bytes + row0 * L.row_bytes
    claims = [("descriptor start anchored on the swizzle pattern",
               sm90.wgmma_start_is_anchored(start, L.desc[0]) if L.desc[0] else z3.BoolVal(True)),
              ("byte written by this step's TMA", inside), ("row matches", row == er),
              ("col matches", col == ec)]

    def decode(zm, violated):
        wit = {"stage": value(zm, st), "mn": value(zm, mn), "k_in_tile": value(zm, kk),
               "smem_byte": hex(value(zm, addr))}
        if rank is not None:
            wit["cluster_rank"] = rank
        return W.by_site(model, site.site,
                         ("" if rank is None else f"CTA rank {rank} of the cluster, ") +
                         f"stage {wit['stage']}, element ({wit['mn']}, k {wit['k_in_tile']}) "
                         f"is read from byte {wit['smem_byte']}; violated: "
                         f"{', '.join(violated)}", wit), wit
    return Obligation("wgmma.smem-layout", site.op.loc, subject, prem, claims, decode,
                      minimize=[st, mn, kk])


def _bv_of(model: Model, term, bw: int, prem: list):
    """A row offset as a bit-vector: ints directly, role index * constant via a fresh BV."""
    if isinstance(term, int):
        return z3.BitVecVal(term, bw)
    vals = _values_of(model, term, limit=64)
    v = z3.FreshConst(z3.BitVecSort(bw), prefix="row0")
    if vals:
        prem.append(z3.Or([v == x for x in vals]))
    return v
