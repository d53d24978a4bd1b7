"""lower/sync.py's deferred TMA-store read-wait waits only for the stores that may still read
the slot an stmatrix run is about to write (`cp.async.bulk.wait_group.read N`, N = the groups
committed after the newest such store), not for every store in flight: the fp8 epilogue that
stages 64-column blocks in two slots per warpgroup lets the store of one slot keep reading
while the other slot is written. A run of stmatrix into several slots still takes one wait
(a wait per slot would add a barrier each)."""

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel, gemm_fp8_kernel


def _read_waits_before_stmatrix(kernel) -> list[int]:
    """The `pending` of each read-wait that guards an stmatrix (program order)."""
    out = []
    for region in (op.body for op in kernel.walk() if isinstance(op, O.For)):
        ops = region.ops
        for i, op in enumerate(ops):
            if isinstance(op, O.TmaStoreWait) and op.read and \
                    any(isinstance(x, O.StMatrix) for x in ops[i + 1:i + 3]):
                out.append(op.pending)
    return out


def test_split_epilogue_waits_only_for_the_slot_it_reuses():
    s = Fp8GemmSchedule(bn=256, stages=3, promote=True, n_split=2, epilogue="tma")
    waits = _read_waits_before_stmatrix(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s))
    # four 64-column blocks a tile through two slots: each stmatrix reuses the slot of the
    # store before the last one, so the last store keeps reading (read 1), never read 0
    assert waits == [1, 1, 1, 1], waits


def test_two_slot_epilogue_of_the_per_tensor_kernel():
    s = Fp8GemmSchedule(bn=128, stages=4, epilogue="tma")
    waits = _read_waits_before_stmatrix(lower_only(gemm_fp8_kernel(ag.bf16), s=s))
    assert waits == [1, 1], waits


def test_a_run_of_stmatrix_into_every_slot_takes_one_wait():
    """bf16 GEMM 128 x 256: all four blocks are staged, then all four stored; the next tile's
    run writes every slot, so it waits for all of them once (read 0) and not per slot."""
    from argus.ops.schedules import kernel_for
    from tests.verify.test_library_schedules import CASES

    problem, schedule = next((p, s) for p, s in CASES if getattr(s, "epilogue", "") == "tma"
                             and s.bn == 256 and not s.store_cols and not s.pingpong)
    kernel, schedule = kernel_for(problem, schedule)
    lowered = lower_only(kernel, s=schedule)
    waits = [op.pending for op in lowered.walk() if isinstance(op, O.TmaStoreWait) and op.read]
    assert waits == [0], waits


@ag.kernel
def _rolling_slots(A: ag.Tensor["M", "K", ag.bf16], C: ag.Tensor["M", "N", ag.bf16]):
    """Each iteration stages slots s and s + 1 and stores both, then s = s + 1: the next
    iteration's first stmatrix writes the slot the previous iteration's last store reads."""
    (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
    sC = ag.smem((4, 64, 64), ag.bf16, swizzle=128)
    with ag.role("consumer", warpgroups=1):
        x = ag.zeros((64, 64), ag.f32)
        s = ag.scalar(0)
        for i in ag.range(2):
            ag.stmatrix(sC[s], x.to(ag.bf16))
            ag.tma.store(C, (pid * 64, i * 64), sC[s])
            ag.stmatrix(sC[s + 1], x.to(ag.bf16))
            ag.tma.store(C, (pid * 64, i * 64 + 64), sC[s + 1])
            s = s + 1


def test_a_stage_read_from_a_var_may_be_any_slot():
    """Review finding (e319e38): `s` is a var (one value id, each assignment in turn), so the
    stored slot `s` and the next iteration's `s` are not one slot, nor `s + 1` another: the
    affine comparison read the first stmatrix of iteration i + 1 (slot s_i + 1) as apart from
    iteration i's second store (slot s_i + 1) and waited read 1, leaving that store reading
    the slot being written. A stage over a var may alias any slot: read 0."""
    body = next(op for op in lower_only(_rolling_slots).walk() if isinstance(op, O.For)).body
    waits = [op.pending for op in body.ops if isinstance(op, O.TmaStoreWait) and op.read]
    assert waits == [0, 0], waits
