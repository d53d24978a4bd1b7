"""Pass: check and record how warp roles map onto the CTA's warpgroups and registers.

Roles take consecutive warpgroups in program order (so each starts at a warp index divisible
by 4, as wgmma requires). setmaxnreg (PTX ISA, sm_90a) moves registers between warpgroups:
all values are multiples of 8 in [24, 256] and the total may not exceed the CTA's share of the
64K registers of an SM: all of them with one CTA per SM (`__launch_bounds__(threads, 1)`), half
with the occupancy hint `min_ctas_per_sm` = 2 (ag.occupancy; `__launch_bounds__(threads, 2)`,
so ptxas launches at 65536 / (2 x threads) registers a thread and the roles' setmaxnreg
redistribute that half). Recorded as role_plan = ((name, first warpgroup, warpgroups, regs), …).
"""

from __future__ import annotations

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel
from argus.target.limits import (MAX_THREADS_PER_CTA, MAX_THREADS_PER_SM, REGISTERS_PER_SM,
                                 entry_registers)


def run(kernel: Kernel) -> Kernel:
    roles = [op for op in kernel.body.ops if isinstance(op, O.RoleOp)]
    threads = kernel.attr("threads")
    if threads > MAX_THREADS_PER_CTA or threads % 32:
        raise CompileError(f"kernel {kernel.name}: {threads} threads per CTA; need a multiple "
                           f"of 32 up to {MAX_THREADS_PER_CTA}", None)
    ctas = kernel.attr("min_ctas_per_sm", 1)
    if threads * ctas > MAX_THREADS_PER_SM:
        raise CompileError(f"kernel {kernel.name}: {ctas} CTAs of {threads} threads cannot share "
                           f"an SM (at most {MAX_THREADS_PER_SM} threads)", None,
                           fix="lower the occupancy hint (ag.occupancy) or the threads")
    plan = []
    first = 0
    entry_regs = entry_registers(threads, ctas)
    total = 0
    for r in roles:
        regs = r.regs or min(entry_regs, 255 // 8 * 8)
        plan.append((r.name, first, r.warpgroups, r.regs))
        total += regs * 128 * r.warpgroups
        first += r.warpgroups
    budget = REGISTERS_PER_SM // ctas
    if roles and total > budget:
        share = "an SM" if ctas == 1 else f"an SM shared by {ctas} CTAs (ag.occupancy)"
        raise CompileError(f"kernel {kernel.name}: the roles ask for {total} registers per CTA, "
                           f"more than the {budget} of {share}", roles[-1].loc,
                           fix="lower the consumer role's regs or the producer's" +
                               (f" (their sum x 128 at most {budget})" if ctas > 1 else ""))
    return kernel.with_attrs(role_plan=tuple(plan))
