"""Decoding solver models into the words of a kernel: CTA, role, warpgroup, warp, lane,
thread, register, element, iteration, stage, shared byte.

Job: every counterexample names the same things the same way, using the hardware formulas of
`argus.target.sm90` (the single source of truth codegen also uses), e.g. which thread and
accumulator register hold element (row, col) of a wgmma tile (PTX ISA §9.7.15.5.1.1.1).
"""

from __future__ import annotations

from typing import Any

import z3

from argus.target import register_layouts as RL
from argus.target import sm90
from argus.verify.model import Model, Site
from argus.verify.solver import value


def shapes(model: Model, zm: z3.ModelRef) -> dict[str, int]:
    return {name: value(zm, v) for name, v in model.params.items()}


def context(model: Model, zm: z3.ModelRef, site: Site) -> dict[str, Any]:
    """CTA (program ids), role and warpgroup, loop iterations and shapes of a site."""
    out: dict[str, Any] = {}
    if model.grid is not None:
        pids = tuple(value(zm, model.sym[v.id]) for v in model.grid.ids)
        out["cta"] = pids if len(pids) > 1 else pids[0]
        if model.cluster_size > 1:
            out["cluster_rank"] = value(zm, model.rank_term)
    if site.role is not None:
        out["role"] = site.role.name
        out["warpgroup"] = value(zm, model.sym[site.role.index.id])
    iters = {}
    for s in site.scopes:
        if s.kind == "loop":
            iters[f"loop@{s.op.loc}"] = value(zm, s.var)
    if iters:
        out["iteration"] = iters
    for s in reversed(site.scopes):
        if s.kind in ("produce", "consume"):
            step = model.steps_by_stage.get(s.op.stage.id)
            if step is not None:
                n = value(zm, step.counter)
                out["pipeline_step"] = n
                out["stage"] = n % model.pipes[step.pipe.id].stages
            break
    out["shapes"] = shapes(model, zm)
    return out


def acc_thread(row: int, col: int) -> dict[str, int]:
    """The warpgroup thread and f32 register holding wgmma accumulator element (row, col)."""
    t, reg = sm90.wgmma_acc_index(row % 64, col)
    t, reg = int(t), int(reg)
    return {"thread": t, "warp": t // 32, "lane": t % 32, "register": f"d[{reg}]"}


def holder(model: Model, tile_type, element: tuple) -> dict[str, Any]:
    """The thread and register holding element `element` of a register tile (its layout), or
    nothing when the layout is not known here."""
    try:
        if tile_type.layout.startswith("wgmma_acc"):
            return acc_thread(*element)
        layout = RL.build(tile_type.layout or "blocked", tuple(tile_type.shape), model.threads)
        t, r = layout.owners()[tuple(element)][0]
    except Exception:  # noqa: BLE001 - a courtesy: the finding stands without it
        return {}
    return {"thread": t, "warp": t // 32, "lane": t % 32, "register": r}


def fmt_elem(tensor: str, coords) -> str:
    return f"{tensor}[{', '.join(str(c) for c in coords)}]"


def loc_str(loc) -> str:
    return str(loc)


def issuer(role, threads: str) -> tuple[dict[str, Any], str]:
    """Who runs an op the rule judges without a solver model (tma.tx-bytes' expect_tx, a
    proxy.fence's writer and reader): the role, its warpgroup(s) and a thread, as the
    witness keys names.who fills for other findings, and the same as words for the message.
    `role` is the op's O.RoleOp (None outside warp specialization: the CTA's threads);
    `threads` says which of the group's threads run it ("the elected thread", "every
    thread")."""
    if role is None:
        wit = {"thread": 0, "threads": f"{threads} of the CTA (thread 0 shown)"}
        return wit, f"{threads} of the CTA (thread 0)"
    wg = 0 if role.warpgroups == 1 else f"each of 0..{role.warpgroups - 1}"
    wit = {"role": role.name, "warpgroup": wg, "thread": 0,
           "threads": f"{threads} of the warpgroup (thread 0 shown)"}
    return wit, f"role {role.name!r}, warpgroup {wg}, {threads} (thread 0)"
