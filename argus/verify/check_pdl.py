"""pdl.*: programmatic dependent launch is safe where the kernel waits (ag.wait_prior_grids).

Job: a kernel holding griddep.wait is launched with programmatic stream serialization, so it
may run while the kernel before it in the stream still runs (runtime/driver.py). Then, on
every path through every role (structured IR: program order is dominance at one nesting level):

- pdl.wait-first: every global store or atomic, and every global load of a tensor the wait does
  not declare `stable`, comes after a wait that dominates it. A load before it may read the
  predecessor's unfinished output (RAW); a store before it may overwrite what the predecessor
  still reads (WAR) or writes (WAW).
- pdl.trigger: griddep.launch_dependents comes after the wait. A kernel that lets its
  dependent start before it waited itself lets that dependent run beside its own predecessor,
  whose output the dependent's wait does not cover (the transitive hazard). A kernel that
  triggers without waiting at all is flagged too: the rule that makes any chain of kernels
  safe is "every trigger follows a wait", and the wait is free where nothing precedes.
- pdl.placement: the wait sits at the top level of the kernel or of a role body, where it
  dominates what follows; inside a loop, a branch (thread-dependent or not), a pipeline step or
  an elected body it would not (or would wait once per iteration).
- pdl.stable: the kernel writes no tensor it declares stable. Its next launch (the same
  kernel in a loop, or any PDL kernel declaring it stable) reads that tensor before its own
  wait, while this one may still be writing it once it triggered or exited (a read-after-write
  the waits do not order).

Invariant kept: a kernel with neither op has no finding here; findings are decided on the IR
alone (no solver), and each names the op, its role, its source line and the fix.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir.core import Kernel, Op
from argus.verify.obligation import Finding

# global reads a predecessor's writes can race, and global writes
_LOADS = (O.Load, O.Gather, O.LoadScalar, O.TmaLoad)
_WRITES = (O.Store, O.TmaStore, O.AtomicAdd, O.AtomicFetchAdd)
# global accesses that race with nothing: a TMA prefetch into L2 reads nothing into the kernel
# (a line another grid writes later is updated in L2, the point of coherence), so it may come
# before the wait whatever its tensor; what it is steered by (its coordinates) is checked as
# any load
_HINTS = (O.TmaPrefetch,)


def obligations(model) -> tuple[list, list[Finding]]:
    return [], findings(model.kernel)


def findings(kernel: Kernel) -> list[Finding]:
    """Every pdl.* violation of `kernel` (IR traced or lowered)."""
    ops = list(kernel.walk())
    waits = [op for op in ops if isinstance(op, O.GridDepWait)]
    if not waits and not any(isinstance(op, O.GridDepLaunch) for op in ops):
        return []
    stable = {v.id for w in waits for v in w.stable}
    names = {p.value.id: p.name for p in kernel.params}
    out: list[Finding] = []

    def tensor(op: Op) -> str:
        return names.get(op.tensor.id, str(op.tensor))

    def walk(body: tuple[Op, ...], waited: bool, role: str, top: bool, where: str) -> None:
        for op in body:
            if isinstance(op, _WRITES) and op.tensor.id in stable:
                out.append(Finding(
                    "pdl.stable", op.loc, f"{op.NAME} to {tensor(op)} in {role}", "violated",
                    f"{tensor(op)} is declared stable (ag.wait_prior_grids(stable=...)) but "
                    f"this kernel writes it: a following PDL launch that reads it before its "
                    f"wait (this kernel again, in a loop) may read it before this write lands",
                    fix=f"drop {tensor(op)} from stable=(...) (load it after the wait), or "
                        f"write it in another kernel that no PDL kernel follows"))
            if isinstance(op, O.GridDepWait):
                if not top:
                    out.append(Finding(
                        "pdl.placement", op.loc, f"ag.wait_prior_grids in {role}", "violated",
                        f"the wait sits inside {where}: it does not dominate the accesses "
                        f"after that block (a path that skips it reads or writes before the "
                        f"preceding kernels finished)",
                        fix="call ag.wait_prior_grids() once at the top level of the kernel "
                            "(or of each role), before the first loop or branch"))
                else:
                    waited = True
            elif isinstance(op, O.GridDepLaunch) and not waited:
                why = ("this kernel never calls ag.wait_prior_grids" if not waits else
                       "it comes before this path's ag.wait_prior_grids")
                out.append(Finding(
                    "pdl.trigger", op.loc, f"ag.allow_dependent_launch in {role}", "violated",
                    f"{why}: the next kernel may start while the kernel before this one still "
                    f"runs, and its wait covers only this kernel (the transitive hazard)",
                    fix="call ag.wait_prior_grids() before ag.allow_dependent_launch() (free "
                        "when nothing precedes the kernel)"))
            elif isinstance(op, _WRITES) and waits and not waited:
                out.append(Finding(
                    "pdl.wait-first", op.loc, f"{op.NAME} to {tensor(op)} in {role}", "violated",
                    f"a global {op.NAME} to {tensor(op)} before ag.wait_prior_grids: the "
                    f"preceding kernel may still read or write {tensor(op)} (write-after-read)",
                    fix="move the store after ag.wait_prior_grids()"))
            elif (isinstance(op, _LOADS) and waits and not waited
                  and op.tensor.id not in stable):
                out.append(Finding(
                    "pdl.wait-first", op.loc, f"{op.NAME} of {tensor(op)} in {role}",
                    "violated",
                    f"a global {op.NAME} of {tensor(op)} before ag.wait_prior_grids: the "
                    f"preceding kernel may not have finished writing {tensor(op)}",
                    fix=f"move the load after ag.wait_prior_grids(), or, if no preceding "
                        f"kernel writes {tensor(op)} (weights), declare it: "
                        f"ag.wait_prior_grids(stable=({tensor(op)},))"))
            if isinstance(op, O.RoleOp):
                walk(op.body.ops, waited, f"role {op.name!r}", True, "")
            else:
                for region in op.regions():
                    walk(region.ops, waited, role, False, f"a {op.NAME} block")

    walk(kernel.body.ops, False, "the kernel body", True, "")
    return out
