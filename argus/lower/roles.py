"""Pass: check and record how warp roles map onto the CTA's warpgroups and registers.

Roles take consecutive warpgroups in program order (so each starts at a warp index divisible
by 4, as wgmma requires). setmaxnreg (PTX ISA, sm_90a) moves registers between warpgroups:
all values are multiples of 8 in [24, 256] and the total may not exceed the 64K registers of an
SM, with one CTA per SM (`__launch_bounds__(threads, 1)`). Recorded as role_plan =
((name, first warpgroup, warpgroups, regs), …).
"""

from __future__ import annotations

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel
from argus.target.limits import MAX_THREADS_PER_CTA, REGISTERS_PER_SM


def run(kernel: Kernel) -> Kernel:
    roles = [op for op in kernel.body.ops if isinstance(op, O.RoleOp)]
    threads = kernel.attr("threads")
    if threads > MAX_THREADS_PER_CTA or threads % 32:
        raise CompileError(f"kernel {kernel.name}: {threads} threads per CTA; need a multiple "
                           f"of 32 up to {MAX_THREADS_PER_CTA}", None)
    plan = []
    first = 0
    entry_regs = (REGISTERS_PER_SM // threads) // 8 * 8
    total = 0
    for r in roles:
        regs = r.regs or min(entry_regs, 255 // 8 * 8)
        plan.append((r.name, first, r.warpgroups, r.regs))
        total += regs * 128 * r.warpgroups
        first += r.warpgroups
    if roles and total > REGISTERS_PER_SM:
        raise CompileError(f"kernel {kernel.name}: the roles ask for {total} registers per CTA, "
                           f"more than the {REGISTERS_PER_SM} of an SM", roles[-1].loc,
                           fix="lower the consumer role's regs or the producer's")
    return kernel.with_attrs(role_plan=tuple(plan))
