"""Pass: derive the mbarrier protocol of every `ag.pipeline`.

Each role keeps one step counter n per pipeline, continued across loops (so a persistent
kernel's tiles stay in phase; TileLang #2674 is impossible by construction). Slot s = n % S.
A consumer waits on full[s] for parity (n / S) & 1; a producer waits on empty[s] for the
opposite parity, ((n / S) & 1) ^ 1, which lets the first S producer steps pass without any
consumer release (the "pre-arrived empty" convention, PTX ISA mbarrier.try_wait.parity).
full[s] expects one arrival (the producer's arrive.expect_tx) plus the TMA bytes of the step;
empty[s] expects one arrival per consumer warpgroup.

A consumer step that issues wgmma keeps its group in flight (wgmma_in_flight=1): the next step
waits with wait_group 1, which retires the previous group, and only then releases the previous
slot, so the tensor cores never idle between steps and no slot is released early (a step the
kernel marks `whole_step` keeps all of its groups: wait_group N, lower/sync.py). Not on a
one-slot ring: there the producer's next step waits for the slot the kept group holds, and the
consumer's next step waits for that step (a deadlock); each step retires its groups. Not when a
wgmma of the step reads a buffer that stmatrix writes (P of attention through shared memory):
the next step's stmatrix would overwrite what the in-flight group still reads, so such a step
retires its groups (wait_group 0) before it ends.
"""

from __future__ import annotations

import dataclasses

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region
from argus.ir.guarded_tma import definitions, step_bytes
from argus.lower.sync import smem_roots

STAGE_EXPR = "n % S"
CONSUMER_PARITY = "(n / S) & 1"
PRODUCER_PARITY = "((n / S) & 1) ^ 1"


def run(kernel: Kernel, wgmma_overlap: bool = True) -> Kernel:
    """wgmma_overlap: keep one wgmma group in flight across consumer steps (see Consume)."""
    cluster = kernel.attr("cluster", (1, 1, 1))
    cluster_size = cluster[0] * cluster[1] * cluster[2]
    multicast_pipes = {op.pipe.id for op in kernel.walk() if isinstance(op, O.Produce)
                       and any(isinstance(t, O.TmaLoad) and t.multicast for t in op.body.walk())}
    pipes = {op.result.id: op for op in kernel.walk() if isinstance(op, O.PipelineCreate)}
    defs = definitions(kernel)
    root = smem_roots(kernel)
    generic = {root.get(op.dst.id, op.dst.id) for op in kernel.walk() if isinstance(op, O.StMatrix)}

    def reads_generic(step: O.Consume) -> bool:
        return any(root.get(v.id, v.id) in generic for w in step.body.walk()
                   if isinstance(w, O.Wgmma) for v in (w.a, w.b))
    consumer_wgs: dict[int, int] = {}
    turn_roles: dict[int, list[str]] = {}   # pipe -> roles whose warpgroups take turns on it
    for role in (op for op in kernel.body.ops if isinstance(op, O.RoleOp)):
        seen_here: set[int] = set()
        for op in role.body.walk():
            if isinstance(op, O.Consume):  # each consuming role counts once
                seen_here.add(op.pipe.id)
        # a role whose warpgroups take turns on the pipe (pipe.skip: ping-pong) releases each
        # step once, by the warpgroup whose turn it is
        turns = {op.pipe.id for op in role.body.walk() if isinstance(op, O.PipeSkip)}
        for pid in seen_here:
            consumer_wgs[pid] = consumer_wgs.get(pid, 0) + (1 if pid in turns
                                                            else role.warpgroups)
            if pid in turns:
                turn_roles.setdefault(pid, []).append(role.name)
    for pid, create in pipes.items():
        wgs = consumer_wgs.get(pid)
        if wgs is not None and wgs != create.consumers:
            turning = turn_roles.get(pid)
            why = (f" (role {', '.join(map(repr, turning))} takes turns on it with pipe.skip: "
                   f"one warpgroup consumes and releases each step)") if turning else ""
            raise CompileError(f"pipeline declared with consumers={create.consumers} but "
                               f"{wgs} warpgroup{' releases' if wgs == 1 else 's release'} "
                               f"each step{why}", create.loc,
                               fix=f"ag.pipeline(..., consumers={wgs})")

    def region(r: Region) -> Region:
        return Region(tuple(visit(op) for op in r.ops))

    def visit(op: O.Op) -> O.Op:
        updates = {f.name: region(getattr(op, f.name)) for f in op.spec_fields()
                   if isinstance(getattr(op, f.name), Region)}
        if isinstance(op, O.PipelineCreate):
            updates["peers"] = cluster_size if op.result.id in multicast_pipes else 1
        if isinstance(op, O.Produce):
            # copies under guards: only complementary pairs delivering the same bytes
            # (argus/ir/guarded_tma.py; MoeFp8Schedule.pair_multicast)
            tx, problem = step_bytes(op.body, defs, cluster_size)
            if problem:
                where = next((t.loc for ctl in op.body.walk() if isinstance(ctl, (O.If, O.For))
                              for t in ctl.body.walk() if isinstance(t, O.TmaLoad)), op.loc)
                raise CompileError("a TMA copy under ag.when or ag.range inside a produce "
                                   "step: the bytes the full barrier expects must be known "
                                   f"when the step is armed ({problem})", where,
                                   fix="issue every copy of a step unconditionally (out-of-"
                                       "bounds boxes are zero-filled and still counted), or "
                                       "under two complementary guards (x > c, x <= c) whose "
                                       "copies deliver the same bytes")
            if tx == 0:
                raise CompileError("a produce step issues no TMA load: its full barrier would "
                                   "never complete", op.loc)
            updates.update(tx_bytes=op.tx_bytes or tx, stage_expr=op.stage_expr or STAGE_EXPR,
                           parity_expr=op.parity_expr or PRODUCER_PARITY)
        elif isinstance(op, O.PipePayload):   # the wait of the role's next consume step
            updates.update(stage_expr=op.stage_expr or STAGE_EXPR,
                           parity_expr=op.parity_expr or CONSUMER_PARITY)
        elif isinstance(op, O.Consume):
            has_wgmma = any(isinstance(inner, O.Wgmma) for inner in _own_ops(op.body))
            # a one-slot ring keeps nothing in flight: the producer's next step needs the one
            # slot back, which a kept group would release only after that step has landed
            one_slot = pipes[op.pipe.id].result.type.stages == 1
            in_flight = 1 if has_wgmma and wgmma_overlap and not reads_generic(op) \
                and not one_slot else 0
            updates.update(stage_expr=op.stage_expr or STAGE_EXPR,
                           parity_expr=op.parity_expr or CONSUMER_PARITY,
                           arrivals=op.arrivals or pipes[op.pipe.id].consumers
                           * (cluster_size if op.pipe.id in multicast_pipes else 1),
                           wgmma_in_flight=in_flight,
                           # a step that keeps nothing in flight keeps no whole step either:
                           # the IR states what runs
                           whole_step=op.whole_step and bool(in_flight))
        return dataclasses.replace(op, **updates) if updates else op

    return dataclasses.replace(kernel, body=region(kernel.body))


def _own_ops(region: Region):
    """The ops of a consume step's body, not those of consume steps nested in it: a wgmma
    there is the inner step's group (FlashAttention's KV steps inside the step that holds Q),
    so the outer step keeps no group in flight and releases its slot at its end."""
    for op in region.ops:
        yield op
        if not isinstance(op, O.Consume):
            for f in op.spec_fields():
                inner = getattr(op, f.name)
                if isinstance(inner, Region):
                    yield from _own_ops(inner)
