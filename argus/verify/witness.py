"""Decoding solver models into the words of a kernel: CTA, role, warpgroup, warp, lane,
thread, register, element, iteration, stage, shared byte.

Job: every counterexample names the same things the same way, using the hardware formulas of
`argus.target.sm90` (the single source of truth codegen also uses), e.g. which thread and
accumulator register hold element (row, col) of a wgmma tile (PTX ISA §9.7.15.5.1.1.1).
"""

from __future__ import annotations

from typing import Any

import z3

from argus.ir import ops as O
from argus.target import register_layouts as RL
from argus.target import sm90
from argus.target.limits import WARPGROUP_SIZE
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
    # who runs it, from the site itself (not names.who's lookup of the finding's line, which
    # finds nothing where that line holds no op of a role): a register-tile op runs on every
    # thread of its warpgroup (of the CTA outside warp specialization); a TMA copy or a
    # produce step on the elected thread. Thread 0 is shown; a decoder that knows the holder
    # of an element (W.holder) overrides it
    out["thread"] = 0
    out["threads"] = f"{_runners(model, site)} of the " + \
        ("warpgroup" if site.role is not None else "CTA") + " (thread 0 shown)"
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


_ELECTED_OPS = ("TmaLoad", "TmaStore", "Produce", "TmaStoreCommit")


def _runners(model: Model, site: Site) -> str:
    """Which threads of the group run the site's op: a TMA copy and a produce step are
    issued by one elected thread (before lower/elect.py too: codegen elects them), and so is
    whatever an `elect` region holds (with n elected threads, one of each group of them)."""
    elected = model.__dict__.get("_elected_ops")
    if elected is None:
        # by identity: the model holds its kernel, so the ops (and their ids) live as long
        # as the table; equal ops at two places are two ops here
        elected = model.__dict__["_elected_ops"] = {
            id(op): e.threads for e in model.kernel.walk() if isinstance(e, O.Elect)
            for op in e.body.walk()}
    n = elected.get(id(site.op))
    if n is not None and n > 1:
        return f"{n} elected threads"
    if n is not None or type(site.op).__name__ in _ELECTED_OPS:
        return "the elected thread"
    return "every thread"


def roles_by_op(kernel) -> dict[int, O.RoleOp]:
    """id(op) -> the role whose body holds it (absent: outside warp specialization), for the
    rules that judge ops without a solver model or a Site (softmax.stats): W.issuer(
    table.get(id(op)), ...). By identity, as `_runners`: the caller keeps the kernel, which
    owns the ops, alive with the table."""
    return {id(x): r for r in kernel.walk() if isinstance(r, O.RoleOp) for x in r.body.walk()}


def said(wit: dict[str, Any]) -> str:
    """Who runs the reported op, in words, from a witness W.context made (after any holder
    thread a decoder put in): "role 'consumer', warpgroup 1, thread 0" or "thread 0 of the
    CTA" (no warp specialization); '' when the witness names no thread."""
    if "thread" not in wit:
        return ""
    if "role" in wit:
        return f"role {wit['role']!r}, warpgroup {wit['warpgroup']}, thread {wit['thread']}"
    return f"thread {wit['thread']} of the CTA"


def placed(msg: str, wit: dict[str, Any]) -> str:
    """`msg` with who runs the reported op appended (`said`), for the rules whose message
    named no thread (reduce.*, fill.identity): "...: the max counts it twice (role
    'consumer', warpgroup 1, thread 0)"."""
    who = said(wit)
    return f"{msg} ({who})" if who else msg


def by_site(model: Model, site: Site, msg: str, wit: dict[str, Any]) -> str:
    """`msg` with who runs the site's op appended, from the site itself (not names.who's line
    lookup): the solver's role, warpgroup and thread where the witness has them (W.context),
    else the site's role and its running threads (W.issuer: "role 'consumer', warpgroup each
    of 0..1, every thread (thread 0)"), which the witness gains too. For decoders whose
    counterexample is a count or a shape, not one instance (store.coverage, wgmma.k-once)."""
    if "thread" in wit:
        return placed(msg, wit)
    who, words = issuer(site.role, _runners(model, site))
    for k, v in who.items():
        wit.setdefault(k, v)
    return f"{msg} ({words})"


def nobody(why: str) -> tuple[dict[str, Any], str]:
    """Who runs a finding's subject when no thread does (the shared-memory plan the compiler
    made, a launch's grid): the witness says so (`thread` None, so names.who's line lookup
    adds no thread of its own) and the words for the message. `why` names the site and the
    user's values: "the shared-memory plan places sB (allocated at gemm.py:30)"."""
    return ({"thread": None, "role": None, "warpgroup": None, "threads": f"none: {why}"},
            f"no thread runs this: {why}")


def acc_thread(row: int, col: int) -> dict[str, int]:
    """The warpgroup thread and f32 register holding wgmma accumulator element (row, col)."""
    t, reg = sm90.wgmma_acc_index(row % 64, col)
    t, reg = int(t), int(reg)
    return {"thread": t, "warp": t // 32, "lane": t % 32, "register": f"d[{reg}]"}


def holder(model: Model, tile_type, element: tuple, site: Site | None = None) -> dict[str, Any]:
    """The thread and register holding element `element` of a register tile (its layout), or
    nothing when the layout is not known here. A tile of a role (`site` inside one) is laid
    out over its warpgroup's 128 threads, as layout inference builds it
    (analysis/layouts.py _group_threads), not over the CTA's."""
    threads = WARPGROUP_SIZE if site is not None and site.role is not None else model.threads
    try:
        if tile_type.layout.startswith("wgmma_acc"):
            return acc_thread(*element)
        layout = RL.build(tile_type.layout or "blocked", tuple(tile_type.shape), threads)
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
