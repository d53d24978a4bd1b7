"""The attention loop in FA3's order (AttentionSchedule.fa3_overlap) carries P_{j-1} across the
KV loop's back edge: iteration j issues S_j, then P_{j-1} V_{j-1}, then the softmax of S_j.
The verifier's loop model takes the carried P at iteration j's entry as the body's P of
iteration j - 1 (P of the first block before the loop at j = 1) and, after the loop, as the
last iteration's (verify/transfer/control.py, `_recomputed_values`), so P V's key index is
checked against V's row per iteration; the last P V, peeled behind the loop, joins the loop's
P V in one k-once count (check_wgmma.py, `_siblings`).

  * the unmutated kernels verify without errors (head dims 64, 128, 256; full and causal;
    GQA is in the shapes the verifier leaves free: H a multiple of HKV);
  * seeded bug: V loaded one block ahead (the producer's V coordinate (j + 1) * BN): the
    P_{j-1} V_{j-1} in the loop multiplies P's keys of block j - 1 with V's rows of block j;
    caught as wgmma.agree (A.sk == B.sk) naming the thread, register and loop iteration.
    Caught the same with ping-pong on top (ordered: one turn around S_j and P_{j-1} V_{j-1},
    the V step opened before S_j's issue), and in the FP8 kernel with ping-pong (V^T's key
    coordinate moved; h308).

The row statistics' first block is reduced in the K step before the loop; reduce.coverage
counts it as the loop's peeled first block (check_reduce.py, `_peeled`).
"""

from __future__ import annotations

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region, Value
from argus.kernels.attention import attention_kernel, fa3_overlap_schedule, fp8_schedule
from tests.mutations.corpus import ACC, rewrite


def fa3_kernel(head_dim: int = 128, causal: bool = False, packed_p: bool = False,
               ordered: bool = False):
    """packed_p: P carried as the packed bf16 A fragment (lower/packed.py), the same program;
    ordered: ping-pong on top (FA3's full configuration: a turn around S_j and P_{j-1} V_{j-1})"""
    return lower_only(attention_kernel(head_dim, ag.bf16, causal, False),
                      s=dataclasses.replace(fa3_overlap_schedule(head_dim, causal),
                                            packed_p=packed_p, ordered=ordered))


def fp8_kernel(ordered: bool = True):
    """The FP8 (e4m3) forward at head dim 128 under fp8_schedule (FA3's order, 128 x 128),
    with ping-pong on top (FA3's FP8 configuration); V^T in natural key order."""
    return lower_only(attention_kernel(128, ag.e4m3, False, False),
                      s=dataclasses.replace(fp8_schedule(128), ordered=ordered))


def v_one_block_ahead(head_dim: int = 128, packed_p: bool = False, ordered: bool = False,
                      fp8: bool = False):
    """The kernel with the producer's V loads at key (j + 1) * BN instead of j * BN: a const
    BN and an add put in front of the V step's loads. fp8: the FP8 kernel (head dim 128),
    whose V^T [B, HKV, D, keys] takes the key as its last coordinate, one box of 128 keys."""
    if fp8:
        kernel, block_n, v_boxes, key_axis = fp8_kernel(ordered), fp8_schedule(128).block_n, \
            1, 3
    else:
        kernel = fa3_kernel(head_dim, packed_p=packed_p, ordered=ordered)
        block_n, v_boxes, key_axis = fa3_overlap_schedule(head_dim).block_n, head_dim // 64, 2
    loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
    v_loads = loads[-v_boxes:]      # in order: Q's, K's, then V's column atoms
    assert all(op.tensor.id == v_loads[0].tensor.id != loads[0].tensor.id for op in v_loads)
    top = max(v.id for op in kernel.walk() for v in (*op.results(), *op.operands()))
    key = v_loads[0].coords[key_axis]
    bn = Value(top + 1, key.type, "bug_bn")
    const = O.Const(bn, block_n, loc=v_loads[0].loc)
    moved = {}
    for i, load in enumerate(v_loads):
        ahead = Value(top + 2 + i, key.type, "bug_ahead")
        add = O.Arith(ahead, "add", load.coords[key_axis], bn, loc=load.loc)
        moved[id(load)] = (add, load.replace(coords=load.coords[:key_axis] + (ahead,) +
                                             load.coords[key_axis + 1:]))

    def shifted(produce):
        if not any(id(op) in moved for op in produce.body.ops):
            return produce
        ops = [const]   # each add right before its load (after the key offset it reads)
        for op in produce.body.ops:
            ops += moved.get(id(op), (op,))
        return dataclasses.replace(produce, body=Region(tuple(ops)))
    return rewrite(kernel, O.Produce, shifted)


@pytest.mark.parametrize("head_dim,causal", [(64, False), (64, True), (128, False), (128, True),
                                             (256, False), (256, True)])
def test_fa3_overlap_schedule_verifies_clean(head_dim, causal):
    errors = [d for d in verify.run(fa3_kernel(head_dim, causal)).errors]
    assert not errors, "\n".join(str(d) for d in errors)


def test_fp8_ping_pong_verifies_clean():
    errors = [d for d in verify.run(fp8_kernel()).errors]
    assert not errors, "\n".join(str(d) for d in errors)


@pytest.mark.parametrize("packed_p,ordered,fp8", [(False, False, False), (True, False, False),
                                                  (True, True, False), (False, True, True)],
                         ids=["fp32-p", "packed-p", "packed-p-ping-pong", "fp8-ping-pong"])
def test_v_one_block_ahead_is_caught_per_iteration(packed_p, ordered, fp8):
    report = verify.run(v_one_block_ahead(packed_p=packed_p, ordered=ordered, fp8=fp8))
    hits = [d for d in report.errors if d.code == "wgmma.agree" and "A.sk == B.sk" in str(d)
            and all(k in d.counterexample for k in ACC + ("iteration",))]
    assert hits, [(d.code, d.message[:160]) for d in report.errors]
    # the P V inside the KV loop, at an iteration of that loop (not only the peeled last one)
    in_loop = [d for d in hits if any("loop@" in k for k in d.counterexample["iteration"])
               and len(d.counterexample["iteration"]) == 2]
    assert in_loop, [d.counterexample.get("iteration") for d in hits]


@pytest.mark.parametrize("packed_p", [False, True], ids=["fp32-p", "packed-p"])
def test_only_values_recomputed_each_iteration_are_shifted(packed_p):
    """Of the KV loop's carried tiles (m, l, O, P, alpha), only P and alpha are recomputed
    from the iteration's own S (and the other carried tiles); m, l and O read their own entry
    value (a running max, sum, accumulator) and keep the loop summary. The same with P
    carried packed (bf16, a convert of the softmax's P)."""
    import types

    from argus.verify.transfer.control import _recomputed_values

    kernel = fa3_kernel(128, packed_p=packed_p)
    consumer = next(op for op in kernel.body.ops if isinstance(op, O.RoleOp)
                    and op.name == "consumer")
    loop = next(op for op in consumer.body.walk() if isinstance(op, O.For)
                and sum(isinstance(x, O.Consume) for x in op.body.walk()) == 2)
    carried = [op.dst.id for op in loop.body.ops if isinstance(op, O.Assign)]
    assert len(carried) == 5
    assigned = {op.dst.id for op in kernel.walk() if isinstance(op, O.Assign)}
    model = types.SimpleNamespace(_assigned_vars=lambda: assigned)
    got = _recomputed_values(model, loop, carried, set())
    # the carried variables in the kernel's order: m_i, l_i, o, p, alpha
    assert got == carried[3:], (carried, got)
