"""Rendering rules of the synchronization ops (ir.ops.SYNC_OPS): wgmma fence / commit / wait,
operand fences, slot releases, proxy fences, group and cluster barriers, TMA-store commit and
wait, setmaxnreg; the user's global fence (ag.fence: fence.acq_rel.gpu) and programmatic
dependent launch (ag.wait_prior_grids, ag.allow_dependent_launch: griddepcontrol).

lower/sync.py placed each of them; they render one for one (the verifier proves what runs).
wgmma.fence and fence.operands also render inside a wgmma issue block (mma.py), where the
register-A count they fence is known.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import _Emitter, rule
from argus.errors import CompileError
from argus.ir import ops as O


def _note(note: str) -> str:
    return f"  // {note}" if note else ""


def tma_store_wait_c(op: O.TmaStoreWait) -> str:
    return f"ag::tma_store_wait{'_read' if op.read else ''}<{op.pending}>();"


def _release(em: _Emitter, pid: int, slot: str) -> str:
    """One warpgroup's arrival on empty[slot] of every CTA whose producer writes it."""
    peers = em.peers.get(pid, 1)
    if peers == 1:
        return f"ag::mbar_arrive(&empty{pid}[{slot}]);"
    return (f"for (int r = 0; r < {peers}; ++r) "
            f"ag::mbar_arrive_cluster(&empty{pid}[{slot}], r);")


@rule(O.TmaStoreCommit)
def tma_store_commit(em: _Emitter, op: O.TmaStoreCommit) -> None:
    em.emit("if (gtid == 0) ag::tma_store_commit();")


@rule(O.TmaStoreWait)
def tma_store_wait(em: _Emitter, op: O.TmaStoreWait) -> None:
    em.emit(f"if (gtid == 0) {tma_store_wait_c(op)}" + _note(op.note))


@rule(O.ProxyFence)
def proxy_fence(em: _Emitter, op: O.ProxyFence) -> None:
    em.emit("ag::fence_view_async_shared();")


@rule(O.GroupBarrier)
def group_barrier(em: _Emitter, op: O.GroupBarrier) -> None:
    line = ("ag::named_barrier_sync(1 + threadIdx.x / 128, 128);" if op.scope == "warpgroup"
            else "__syncthreads();")
    em.emit(line + _note(op.note))


@rule(O.ClusterSync)
def cluster_sync(em: _Emitter, op: O.ClusterSync) -> None:
    em.emit("ag::cluster_sync();")


@rule(O.SetMaxNReg)
def set_max_nreg(em: _Emitter, op: O.SetMaxNReg) -> None:
    em.emit(f"ag::setmaxnreg_{'inc' if op.inc else 'dec'}<{op.regs}>();")


@rule(O.WgmmaWait)
def wgmma_wait(em: _Emitter, op: O.WgmmaWait) -> None:
    pinned = "_pinned" if op.pinned else ""
    em.emit(f"ag::wgmma_wait{pinned}<{op.pending}>();" + _note(op.note))


@rule(O.WgmmaCommit)
def wgmma_commit(em: _Emitter, op: O.WgmmaCommit) -> None:
    em.emit("ag::wgmma_commit();")


@rule(O.WgmmaFence)
def wgmma_fence(em: _Emitter, op: O.WgmmaFence, a_regs: int = 0, ra: str = "ra",
                pinned: bool = False) -> None:
    """`pinned`: the fence of a Wgmma.pinned issue (kept behind the work before it)."""
    if op.a_registers and not a_regs:
        raise CompileError("wgmma.fence of register A outside its wgmma issue", op.loc)
    for t in op.tiles:
        em.emit(f"ag::fence_operands({em.tiles[t.id].name});")
    for kk in range(a_regs if op.a_registers else 0):
        em.emit(f"ag::{a_fence(op.a_copy)}({ra}[{kk}]);")
    em.emit("ag::wgmma_fence_pinned();" if pinned else "ag::wgmma_fence();")


def a_fence(copy: bool) -> str:
    """The device header's fence of packed A registers: lowering's WgmmaFence.a_copy (a copy,
    identity prmt) or the pin (empty asm)."""
    return "fence_operands" if copy else "pin_operands"


@rule(O.FenceOperands)
def fence_operands(em: _Emitter, op: O.FenceOperands, a_regs: int = 0,
                   a_copy: bool = True) -> None:
    """`a_regs`: inside the issue block of a wgmma whose fence has `a_copy`."""
    for kk in range(a_regs if op.a_registers else 0):
        em.emit(f"ag::{a_fence(a_copy)}(ra[{kk}]);")
    if op.a_registers and not a_regs:
        # after the wait that retired rs groups issued earlier in this scope: their packed A
        # registers stay allocated (and unmoved) until here, then die
        frags = [f for t in op.tiles for f in em.a_frags.pop(t.id, [])]
        if not frags:
            raise CompileError("fence.operands of register A with no rs wgmma group of these "
                               "accumulators in flight", op.loc)
        for name, k_steps, copy in frags:
            for kk in range(k_steps):
                em.emit(f"ag::{a_fence(copy)}({name}[{kk}]);")
    for t in op.tiles:
        acc = em.tiles[t.id].name
        em.emit(f"ag::fence_operands({acc});")
        if op.zero_unwritten and acc in em.lazy_zero:  # no wgmma ran: still zero
            em.emit(f"if ({acc}_zero) {{")
            em.emit("    #pragma unroll")
            em.emit(f"    for (int i = 0; i < {em.lazy_zero[acc]}; ++i) {acc}[i] = 0.0f;")
            em.emit("}")


@rule(O.SlotRelease)
def slot_release(em: _Emitter, op: O.SlotRelease) -> None:
    pid = op.pipe.id
    if not op.previous:
        em.emit(f"if (threadIdx.x % 128 == 0) {{ {_release(em, pid, em.name(op.stage))} }}")
        return
    em.emit(f"if (pend{pid} >= 0 && threadIdx.x % 128 == 0) "
            f"{{ {_release(em, pid, f'pend{pid}')} }}")
    em.emit(f"pend{pid} = {em.name(op.stage) if op.stage is not None else -1};")


def _turn_barrier(em: _Emitter, op, offset: int) -> str:
    """The named barrier of warpgroup (wg + offset) % W of the role being rendered: lowering
    numbered a role's barriers consecutively, barriers[w] = barriers[0] + w."""
    count, wg = em.role_copies
    ids = op.barriers
    if not ids or not op.threads:
        raise CompileError(f"ordered section {op.name!r} was not lowered (no barrier ids)",
                           op.loc, fix="run lower/sync.py (argus.compile does)")
    if count != len(ids) or ids != tuple(range(ids[0], ids[0] + count)):
        raise CompileError(f"ordered section {op.name!r}: barriers {ids} are not one per "
                           f"warpgroup of its {count}-warpgroup role, numbered consecutively",
                           op.loc)
    return f"{ids[0]} + ({wg} + {offset}) % {count}" if offset else f"{ids[0]} + {wg}"


@rule(O.TurnWait)
def turn_wait(em: _Emitter, op: O.TurnWait) -> None:
    em.emit(f"ag::named_barrier_sync({_turn_barrier(em, op, 0)}, {op.threads});"
            f"  // my turn in ordered section {op.name!r}")


@rule(O.TurnPass)
def turn_pass(em: _Emitter, op: O.TurnPass) -> None:
    count, wg = em.role_copies
    line = (f"ag::named_barrier_arrive({_turn_barrier(em, op, 1)}, {op.threads});"
            f"  // the next warpgroup's turn in ordered section {op.name!r}")
    if op.initial:  # the last warpgroup hands warpgroup 0 its first turn
        line = f"if ({wg} == {count - 1}) {line}"
    em.emit(line)


@rule(O.Fence)
def fence(em: _Emitter, op: O.Fence) -> None:
    if op.scope != "gpu":
        raise CompileError(f"fence: scope {op.scope!r} is not rendered (only 'gpu')", op.loc)
    em.emit('asm volatile("fence.acq_rel.gpu;" ::: "memory");')


# Programmatic dependent launch (PTX ISA "griddepcontrol", sm_90): the user's ops, one for one.
# "memory" clobbers: no global access may move across them (a load hoisted above the wait
# would read the previous kernel's unfinished output).
@rule(O.GridDepWait)
def griddep_wait(em: _Emitter, op: O.GridDepWait) -> None:
    em.emit('asm volatile("griddepcontrol.wait;" ::: "memory");'
            "  // the preceding kernels completed, their memory visible")


@rule(O.GridDepLaunch)
def griddep_launch(em: _Emitter, op: O.GridDepLaunch) -> None:
    em.emit('asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'
            "  // the next kernel may start")
