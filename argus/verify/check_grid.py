"""grid.cluster: a clustered grid dimension is a multiple of the cluster size for every shape.

Job (bug class 14): the CTAs of a thread-block cluster launch together; a grid extent that is
not a multiple of the cluster (`ag.grid(ag.cdiv(M, BM), ..., cluster=2)` with an odd number of
row tiles) cannot launch at all (the driver refuses it: runtime/driver.py), and a launcher that
rounded it up would run a partial cluster whose missing peer never multicasts its half of B nor
releases its slots: a hang. The model assumes whole clusters (pid = c · cluster + rank with the
cluster inside the grid), so this is proven separately, for all shapes (LIA over the shape
parameters): extent % cluster == 0.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.target.limits import REGISTERS_PER_SM, WARPGROUP_SIZE, entry_registers
from argus.verify import witness as W
from argus.verify.model import Model, _num
from argus.verify.obligation import Finding, Obligation


def obligations(model: Model) -> tuple[list[Obligation], list]:
    g = model.grid
    if g is None or model.cluster_size == 1:
        return [], []
    obs = []
    for d, e in enumerate(g.extents):
        c = model.cluster[d] if d < len(model.cluster) else 1
        if c == 1:
            continue
        ext = _num(model.scalar(e))
        prem = [p for p in model.premises if not _mentions_grid(model, p)]

        def decode(zm, violated, ext=ext, d=d, c=c):
            wit = {"shapes": W.shapes(model, zm), "dim": d, "extent": zm.eval(ext).as_long(),
                   "cluster": c, "launch": str(g.loc), "extent_value": str(g.extents[d])}
            # a property of the launch (the grid the host computes), not of an op a thread
            # runs: said so, with the ag.grid line and the extent's value (the user's name)
            who, words = W.nobody(f"the launch sizes the grid at {g.loc} (ag.grid, dimension "
                                  f"{d} = {g.extents[d]}) before any thread starts")
            wit.update(who)
            return (f"with {wit['shapes']} grid dimension {d} has {wit['extent']} CTAs, not a "
                    f"multiple of the cluster size {c}: the last cluster is partial (the launch "
                    f"fails, or a CTA waits forever for a peer that does not exist) "
                    f"({words})"), wit
        obs.append(Obligation("grid.cluster", g.loc, f"grid dimension {d} at {g.loc} in "
                              f"clusters of {c}", prem,
                              [(f"extent % {c} == 0", ext % c == 0)], decode,
                              minimize=list(model.params.values()),
                              fix=f"round the extent up to whole clusters: "
                                  f"ag.cdiv(extent, {c}) * {c}"))
    return obs, []


def _mentions_grid(model: Model, term) -> bool:
    from argus.verify.tagdomain import mentions

    return any(mentions(term, v) for v, _, _ in model.grid_vars)


def register_budget(model: Model) -> tuple[list, list[Finding]]:
    """regs.budget: the warp roles' setmaxnreg counts fit the CTA's share of the register
    file (sum over roles of regs x 128 x warpgroups <= 65536 / CTAs per SM; a role without
    regs keeps the entry budget). lower/roles.py refuses such a kernel when it lowers; this
    says so on the traced kernel too, with the role whose ask is largest, since a setmaxnreg
    .inc that the file cannot grant blocks that warpgroup forever (a hang, not an error)."""
    kernel = model.kernel
    roles = [op for op in kernel.body.ops if isinstance(op, O.RoleOp)]
    if not roles or not any(r.regs for r in roles):
        return [], []
    threads = kernel.attr("threads") or WARPGROUP_SIZE * sum(r.warpgroups for r in roles)
    ctas = kernel.attr("min_ctas_per_sm", 1)
    entry = min(entry_registers(threads, ctas), 255 // 8 * 8)
    asks = [(r, (r.regs or entry) * WARPGROUP_SIZE * r.warpgroups) for r in roles]
    total = sum(n for _, n in asks)
    budget = REGISTERS_PER_SM // ctas
    worst = max((r for r in roles if r.regs), key=lambda r: r.regs * r.warpgroups)
    subject = f"register split of {kernel.name} ({', '.join(repr(r.name) for r in roles)})"
    if total <= budget:
        return [], [Finding("regs.budget", worst.loc, subject, "proven")]
    split = " + ".join(f"{r.name!r} {r.regs or entry} x 128 x {r.warpgroups}" for r in roles)
    who, said = W.issuer(worst, "every thread")
    share = "an SM" if ctas == 1 else f"an SM shared by {ctas} CTAs (ag.occupancy)"
    return [], [Finding(
        "regs.budget", worst.loc, subject, "violated",
        f"the roles ask for {split} = {total} registers per CTA, more than the {budget} of "
        f"{share}: role {worst.name!r} (at {worst.loc}, regs={worst.regs}) raises its "
        f"warpgroups' budget with setmaxnreg.inc, which waits until the register file can "
        f"grant it, so it waits forever ({said})",
        {**who, "registers": total, "budget": budget,
         "per_role": {r.name: n for r, n in asks}},
        fix=f"lower role {worst.name!r}'s regs (or another role's) so that the sum of regs x "
            f"128 x warpgroups is at most {budget}")]
