"""Pass: place every shared-memory buffer and the pipelines' mbarriers in one dynamic block.

Swizzled buffers start on their swizzle period (1024 B for 128B: the XOR pattern is anchored
to absolute addresses, INVARIANTS.md §2.3; TileLang #2379), others on 128 B; each stage of a
staged buffer stays period-aligned because a stage is a whole number of 8-row groups. The
mbarriers (8 B each: full[S] then empty[S] per pipeline) follow. The plan is recorded as the
kernel attribute smem_plan = ((value id, offset, bytes, alignment), …) and smem_bytes; the
codegen aligns the block's base to 1024 B at run time.
"""

from __future__ import annotations

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel
from argus.target.limits import SMEM_PER_CTA_OPTIN


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def run(kernel: Kernel) -> Kernel:
    plan = []
    offset = 0
    for op in kernel.walk():
        if isinstance(op, O.SmemAlloc):
            t = op.result.type
            align = 8 * t.swizzle if t.swizzle else 128
            stage_bytes = t.bytes // t.shape[0] if len(t.shape) == 3 else t.bytes
            if t.swizzle and stage_bytes % align:
                raise CompileError(f"each stage of {op.result} is {stage_bytes} B, not a multiple "
                                   f"of the {align} B swizzle period", op.loc,
                                   fix="use a multiple of 8 rows per stage")
            offset = _align(offset, align)
            plan.append((op.result.id, offset, t.bytes, align))
            offset += t.bytes
    for op in kernel.walk():
        if isinstance(op, O.PipelineCreate):
            offset = _align(offset, 8)
            nbytes = 2 * op.result.type.stages * 8
            plan.append((op.result.id, offset, nbytes, 8))
            offset += nbytes
    slack = 1024 if offset else 0  # codegen aligns the dynamic block's base at run time
    if offset + slack > SMEM_PER_CTA_OPTIN:
        raise CompileError(f"kernel {kernel.name} needs {offset + slack} B of shared memory "
                           f"(with 1024 B of alignment slack); a CTA may "
                           f"use at most {SMEM_PER_CTA_OPTIN} B", None,
                           fix="use fewer pipeline stages or smaller tiles")
    return kernel.with_attrs(smem_plan=tuple(plan), smem_bytes=offset)
