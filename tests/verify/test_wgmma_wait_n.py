"""General wgmma wait(N) placement (lower/sync.py) and its proof (verify/check_sync.py), on the
attention loop in FA3's order (AttentionSchedule.fa3_overlap): S_j = Q K_j^T issued, then
P_{j-1} V_{j-1} from registers, then the softmax of S_j with P V still in flight.

What must hold, read from the lowered IR (not from the generated text):
  * the softmax's first read of S_j waits with N = 1 (S_j's groups retire, the newer P V group
    stays in flight), and the V step ends with N = 0 and fence.operands on O and on P's packed
    A registers (a_registers), before the V slot is released;
  * the plain loop (base_schedule) keeps its rs group retired right after issue (wait 0 directly behind
    the commit: its generated CUDA is unchanged by the general rule);
  * check_sync proves every sync.* obligation of those kernels (head dims 64, 128, 256; full
    and causal), including the new one: an rs group retires before the region that issued it
    ends (its packed A registers live in that C scope).
Seeded bugs (a wait that allows too many groups in flight) are in
tests/mutations/test_attention_overlap.py.
"""

from __future__ import annotations

import types

import pytest

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel, base_schedule, fa3_overlap_schedule
from argus.verify import check_sync


def lowered(head_dim: int, causal: bool, fa3: bool = True):
    # fa3=False: the plain loop (base_schedule); the op's default at head dim 128 is FA3's
    # order since 7abf2ec, so it is not the plain loop this file contrasts with
    schedule = fa3_overlap_schedule(head_dim, causal) if fa3 else base_schedule(head_dim)
    return lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=schedule)


def sync_findings(kernel) -> list:
    """check_sync's findings alone (no ordered sections in these kernels: the ordered checks'
    model inputs are empty), without the rest of the verifier's model."""
    model = types.SimpleNamespace(kernel=kernel, roles=[], turns=[])
    _obligations, findings = check_sync.obligations(model)
    return findings


def kv_loop(kernel) -> O.For:
    """The consumer's KV loop: the runtime loop whose body holds a K step and a V step."""
    consumer = next(op for op in kernel.body.ops if isinstance(op, O.RoleOp)
                    and op.name == "consumer")
    return next(op for op in consumer.body.walk() if isinstance(op, O.For)
                and sum(isinstance(x, O.Consume) for x in op.body.walk()) == 2)


def test_softmax_waits_for_s_only_and_p_v_stays_in_flight():
    loop = kv_loop(lowered(128, False))
    body = list(loop.body.walk())
    waits = [op for op in body if isinstance(op, O.WgmmaWait)]
    assert [w.pending for w in waits] == [1, 0], [w.pending for w in waits]
    pv = next(op for op in body if isinstance(op, O.Wgmma) and op.a_in_registers)
    s_accs = {op.acc.id for op in body if isinstance(op, O.Wgmma) and not op.a_in_registers}
    # program order: the P V commit comes before the wait(1), the first read of S after it
    order = {id(op): i for i, op in enumerate(body)}
    first_read = min(order[id(op)] for op in body
                     if not isinstance(op, (O.Wgmma, O.WgmmaFence, O.FenceOperands))
                     and any(v.id in s_accs for v in op.operands()))
    assert order[id(pv)] < order[id(waits[0])] < first_read
    # wait(1) fences S (retired), not O (P V's accumulator, still in flight)
    fence = body[order[id(waits[0])] + 1]
    assert isinstance(fence, O.FenceOperands) and {t.id for t in fence.tiles} == s_accs
    assert not fence.a_registers and pv.acc.id not in s_accs
    # wait(0) retires P V: O and P's packed A registers fenced before the V slot's release
    fence0 = body[order[id(waits[1])] + 1]
    assert isinstance(fence0, O.FenceOperands) and fence0.a_registers
    assert pv.acc in fence0.tiles
    release = next(op for op in body[order[id(waits[1])]:] if isinstance(op, O.SlotRelease))
    v_step = [op for op in body if isinstance(op, O.Consume) and pv in list(op.body.walk())]
    assert release.pipe.id == v_step[-1].pipe.id   # the innermost step holding P V: V's


def test_plain_loop_retires_its_rs_group_right_after_issue():
    ops = list(lowered(128, False, fa3=False).walk())
    rs = [i for i, op in enumerate(ops) if isinstance(op, O.Wgmma) and op.a_in_registers]
    assert rs
    for i in rs:
        assert isinstance(ops[i + 1], O.WgmmaCommit)
        assert isinstance(ops[i + 2], O.WgmmaWait) and ops[i + 2].pending == 0
        assert isinstance(ops[i + 3], O.FenceOperands) and ops[i + 3].a_registers


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_check_sync_proves_the_fa3_order(head_dim, causal):
    findings = sync_findings(lowered(head_dim, causal))
    bad = [f for f in findings if f.status != "proven"]
    assert not bad, "\n".join(f"{f.code} {f.loc}: {f.message}" for f in bad)
    scope = [f for f in findings if f.code == "sync.acc" and "end of its scope" in f.subject]
    assert len(scope) == 2  # the loop's P V and the last block's


def test_wait_placement_counts_groups_not_steps():
    """At head dim 256 S_j is four groups (one per 64-column atom of Q and K): the softmax
    still waits with N = 1, the P V group being the only newer one."""
    loop = kv_loop(lowered(256, True))
    waits = [op.pending for op in loop.body.walk() if isinstance(op, O.WgmmaWait)]
    commits = sum(isinstance(op, O.WgmmaCommit) for op in loop.body.walk())
    assert waits == [1, 0] and commits == 5
