"""Pass: place every shared-memory buffer and the pipelines' mbarriers in one dynamic block.

First the buffers codegen's register exchanges need become buffers like any other: a
reduction whose warps hold parts of its axis combines their partials through shared memory,
a layout conversion redistributes its tile through it, and an atomic.fetch_add broadcasts
the old value one thread read; each gets an `smem.alloc` at the
top of the kernel, named by the op's `scratch` field (one copy per warpgroup of a role), so the
plan places it, the CTA budget below counts it and the verifier's smem.align sees it (they
were static `__shared__` arrays of codegen's before, outside all three).

Swizzled buffers start on their swizzle period (1024 B for 128B: the XOR pattern is anchored
to absolute addresses, INVARIANTS.md §2.3; TileLang #2379), others on 128 B; each stage of a
staged buffer stays period-aligned because a stage is a whole number of 8-row groups. The
mbarriers (8 B each: full[S] then empty[S] per pipeline) follow, then the exchange buffers
(so the others keep the offsets they had before exchanges were planned). The plan is recorded as the
kernel attribute smem_plan = ((value id, offset, bytes, alignment), …) and smem_bytes; the
codegen aligns the block's base to 1024 B at run time.

An exchange is: write the slots, a group barrier, read them, and (`Reduce.release`) a second
barrier so that the op's next write of its slots waits for every read. Each exchange owns its
buffer, so that next write is the same op's next execution. The second barrier is left out of
a reduction outside warp roles that runs at most once (in no loop), or that sits at the top of
a loop body beside another exchange (reduction or layout conversion) at the top of the same
body: that exchange's first barrier runs between this one's reads and its next write on every
path (later in the same iteration, or earlier in the next one). The looped online softmax has
two reductions per iteration: four barriers per block became two.
"""

from __future__ import annotations

import dataclasses
import itertools

from argus.dtypes import f32, i32
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.ir.types import SmemType, TileType
from argus.target import register_layouts as RL
from argus.target.limits import (SMEM_PER_CTA_OPTIN, SMEM_PER_SM, SMEM_RESERVED_PER_CTA,
                                 WARPGROUP_SIZE, smem_per_sm_share)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def run(kernel: Kernel) -> Kernel:
    kernel = _release_barriers(_exchange_buffers(kernel))
    exchange = {v.id for op in kernel.walk() if isinstance(op, _EXCHANGES) for v in op.scratch}
    allocs = [op for op in kernel.walk() if isinstance(op, O.SmemAlloc)]
    plan: list[tuple[int, int, int, int]] = []
    offset = 0
    for op in allocs:
        if op.result.id not in exchange:
            offset = _place(op, offset, plan)
    for op in kernel.walk():
        if isinstance(op, O.PipelineCreate):
            offset = _align(offset, 8)
            nbytes = 2 * op.result.type.stages * 8
            if op.payload:   # a payload word per slot after the barriers
                nbytes += 4 * op.result.type.stages
            plan.append((op.result.id, offset, nbytes, 8))
            offset += nbytes
    # the exchange buffers last: small and unswizzled, they pad nothing there
    for op in allocs:
        if op.result.id in exchange:
            offset = _place(op, offset, plan)
    slack = 1024 if offset else 0  # codegen aligns the dynamic block's base at run time
    if offset + slack > SMEM_PER_CTA_OPTIN:
        raise CompileError(f"kernel {kernel.name} needs {offset + slack} B of shared memory "
                           f"(with 1024 B of alignment slack); a CTA may "
                           f"use at most {SMEM_PER_CTA_OPTIN} B", None,
                           fix="use fewer pipeline stages or smaller tiles")
    ctas = kernel.attr("min_ctas_per_sm", 1)
    if ctas > 1 and offset + slack > smem_per_sm_share(ctas):
        # the occupancy hint is a promise __launch_bounds__ makes to ptxas about registers
        # only; shared memory it cannot shrink, so a hint that smem breaks is refused here
        raise CompileError(f"kernel {kernel.name}: the occupancy hint asks for {ctas} CTAs per "
                           f"SM, but each needs {offset + slack} B of shared memory (with "
                           f"1024 B of alignment slack), more than the "
                           f"{smem_per_sm_share(ctas)} B a CTA gets when {ctas} share the "
                           f"SM's {SMEM_PER_SM} B ({SMEM_RESERVED_PER_CTA} B reserved per CTA)",
                           None, fix=f"use fewer stages or smaller tiles (at most "
                                     f"{smem_per_sm_share(ctas) - slack} B of buffers), or "
                                     f"lower the hint (ag.occupancy)")
    return kernel.with_attrs(smem_plan=tuple(plan), smem_bytes=offset)


def _place(op: O.SmemAlloc, offset: int, plan: list) -> int:
    """Place buffer `op` at the first offset >= `offset` its alignment allows; the end."""
    t = op.result.type
    align = 8 * t.swizzle if t.swizzle else 128
    stage_bytes = t.bytes // t.shape[0] if len(t.shape) == 3 else t.bytes
    if t.swizzle and stage_bytes % align:
        raise CompileError(f"each stage of {op.result} is {stage_bytes} B, not a multiple "
                           f"of the {align} B swizzle period", op.loc,
                           fix="use a multiple of 8 rows per stage")
    offset = _align(offset, align)
    plan.append((op.result.id, offset, t.bytes, align))
    return offset + t.bytes


# ops whose rendering exchanges registers through a buffer of their own (`scratch`)
_EXCHANGES = (O.Reduce, O.ConvertLayout, O.AtomicFetchAdd)


def _exchange_buffers(kernel: Kernel) -> Kernel:
    """The kernel with an `smem.alloc` at its top for every reduction exchange and layout
    conversion (module docstring), each op naming its buffers in `scratch`."""
    ids = itertools.count(1 + max([r.id for op in kernel.walk() for r in op.results()] +
                                  [p.value.id for p in kernel.params] + [0]))
    allocs: list[O.Op] = []

    def region(r: Region, threads: int, copies: int) -> Region:
        out = []
        for op in r.ops:
            if isinstance(op, O.RoleOp):   # each warpgroup of the role exchanges in its copy
                body = region(op.body, WARPGROUP_SIZE, op.warpgroups)
                out.append(op.replace(body=body))
                continue
            subs = {f.name: region(getattr(op, f.name), threads, copies)
                    for f in op.spec_fields() if isinstance(getattr(op, f.name), Region)}
            if subs:
                op = dataclasses.replace(op, **subs)
            types = _scratch_types(op, threads, copies) \
                if isinstance(op, _EXCHANGES) and not op.scratch else ()
            if types:
                values = tuple(Value(next(ids), t, "scratch") for t in types)
                allocs.extend(O.SmemAlloc(v, loc=op.loc) for v in values)
                op = op.replace(scratch=values)
            out.append(op)
        return Region(tuple(out))

    body = region(kernel.body, kernel.attr("threads", 128), 1)
    if not allocs:
        return kernel
    return dataclasses.replace(kernel, body=Region((*allocs, *body.ops)))


def _release_barriers(kernel: Kernel) -> Kernel:
    """Clear `release` on the reductions that need no barrier after their reads (module
    docstring). Warp roles keep theirs (their named barriers are per warpgroup)."""

    def exchanges(op: O.Op) -> bool:
        return isinstance(op, (O.Reduce, O.ConvertLayout)) and bool(op.scratch)

    def region(r: Region, looped: bool, loop_body: bool) -> Region:
        barriers = sum(exchanges(op) for op in r.ops) if loop_body else 0
        out = []
        for op in r.ops:
            if isinstance(op, O.RoleOp):
                out.append(op)
                continue
            subs = {f.name: region(getattr(op, f.name), looped or isinstance(op, O.For),
                                   isinstance(op, O.For))
                    for f in op.spec_fields() if isinstance(getattr(op, f.name), Region)}
            if subs:
                op = dataclasses.replace(op, **subs)
            if isinstance(op, O.Reduce) and op.scratch and op.release and \
                    (not looped or barriers >= 2):
                op = op.replace(release=False)
            out.append(op)
        return Region(tuple(out))

    return dataclasses.replace(kernel, body=region(kernel.body, False, False))


def _scratch_types(op: O.Op, threads: int, copies: int) -> tuple[SmemType, ...]:
    """The buffers `op` exchanges registers through, over a group of `threads` threads with
    `copies` warpgroups each using its own copy; () when it needs none or its layout is one
    codegen refuses (with its own message)."""
    if isinstance(op, O.AtomicFetchAdd):   # the old value, one slot per warpgroup copy
        return (SmemType(i32, (copies,)),)
    if isinstance(op, O.ConvertLayout):
        t: TileType = op.result.type
        size = t.shape[-1] + op.pad      # a row's pitch (ConvertLayout.pad)
        for n in t.shape[:-1]:
            size *= n
        # the registers' own type: integers and booleans as they are, every float as f32
        dtype = f32 if t.dtype.is_float else t.dtype
        return (SmemType(dtype, (size * copies,)),)
    if not isinstance(op, O.Reduce):
        return ()
    t = op.src.type
    try:
        slots = RL.build(t.layout or "blocked", tuple(t.shape), threads) \
            .reduction_plan(op.axis).exchange_slots()
    except ValueError:
        return ()
    if not slots:
        return ()
    # partials in the source registers' type: f32 for floats, an integer tile's own integer
    # type (an f32 partial is exact only to 2^24)
    values = SmemType(f32 if t.dtype.is_float else t.dtype, (slots * copies,))
    return (values, SmemType(i32, (slots * copies,))) if op.fn in ("argmax", "argmin") \
        else (values,)
