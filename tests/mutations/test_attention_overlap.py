"""Seeded synchronization bugs in the attention loop in FA3's order
(AttentionSchedule.fa3_overlap: S_j issued, then P_{j-1} V_{j-1} from registers, then the
softmax of S_j while P V is in flight), lowered and then rewritten; each must be caught by
verify/check_sync.py at the op it endangers:

  * the wait before the softmax allows two groups in flight instead of one (wait 2): S_j's
    last group may still be writing the accumulator the softmax reads (sync.acc at the read);
  * the wait at the V step's end allows one group in flight (wait 1) instead of none: O is
    read, the V slot released and P's packed A registers go out of scope while P V may
    still run (sync.acc at the read of O and at the end of P V's scope, sync.release);
  * that wait dropped altogether (and its fence): the same, found without any wait to read.

The unmutated kernel proves every sync obligation (tests/verify/test_wgmma_wait_n.py).
"""

from __future__ import annotations

import inspect
import types

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels import attention as A
from argus.verify import check_sync
from tests.mutations.corpus import rewrite


def fa3_kernel():
    return lower_only(A.attention_kernel(128, ag.bf16, False, False),
                      s=A.fa3_overlap_schedule(128))


def _waits(kernel) -> list[O.WgmmaWait]:
    return [op for op in kernel.walk() if isinstance(op, O.WgmmaWait)]


def _nth_wait(kernel, pending: int, note_has: str = "") -> int:
    """Program-order index (among all wgmma.wait) of the first wait(pending) of the KV loop
    whose note contains `note_has`."""
    waits = _waits(kernel)
    loop_waits = {id(op) for loop in kernel.walk() if isinstance(loop, O.For)
                  and sum(isinstance(x, O.Consume) for x in loop.body.walk()) == 2
                  for op in loop.body.walk() if isinstance(op, O.WgmmaWait)}
    return next(i for i, w in enumerate(waits) if id(w) in loop_waits
                and w.pending == pending and note_has in w.note)


def with_wait(pending_from: int, pending_to: int, note_has: str = ""):
    kernel = fa3_kernel()
    nth = _nth_wait(kernel, pending_from, note_has)
    return rewrite(kernel, O.WgmmaWait, lambda op: op.replace(pending=pending_to), nth=nth)


def without_p_v_wait():
    """The KV loop's wait(0) and the fence.operands after it removed."""
    kernel = fa3_kernel()
    nth = _nth_wait(kernel, 0)
    fences = [op for op in kernel.walk() if isinstance(op, O.FenceOperands)]
    ops = list(kernel.walk())
    fence = ops[ops.index(_waits(kernel)[nth]) + 1]
    assert isinstance(fence, O.FenceOperands) and fence.a_registers
    kernel = rewrite(kernel, O.WgmmaWait, lambda op: None, nth=nth)
    return rewrite(kernel, O.FenceOperands, lambda op: None,
                   nth=next(i for i, f in enumerate(fences) if f is fence))


def sync_violations(kernel) -> list:
    model = types.SimpleNamespace(kernel=kernel, roles=[], turns=[])
    return [f for f in check_sync.obligations(model)[1] if f.status == "violated"]


def _softmax_read_line() -> int:
    """The line of the softmax's first read of S (`sc = sc * qk_scale`)."""
    lines, first = inspect.getsourcelines(A.attention_kernel.__wrapped__)
    return first + next(i for i, line in enumerate(lines) if "sc = sc * qk_scale" in line)


def test_unmutated_fa3_kernel_has_no_sync_violation():
    assert not sync_violations(fa3_kernel())


def test_wait_allowing_s_in_flight_is_caught_at_the_softmax_read():
    """The seeded bug through the verifier's entry point (verify.run): wait 2 where the
    placement says wait 1, so S_j's last group may still be in flight at the softmax."""
    report = verify.run(with_wait(1, 2))
    bad = [d for d in report.errors if d.code == "sync.acc"]
    assert bad, "\n".join(str(d) for d in report.errors)
    assert any(d.loc.line == _softmax_read_line() for d in bad), [str(d) for d in bad]
    assert any("accumulator" in d.message and "in flight" in d.message for d in bad)


def test_wait_allowing_p_v_in_flight_is_caught():
    bad = sync_violations(with_wait(0, 1))
    codes = {f.code for f in bad}
    assert {"sync.acc", "sync.release"} <= codes, [(f.code, f.message) for f in bad]
    assert any("end of its scope" in f.subject for f in bad), "P's packed A registers"
    assert any("register A" in f.message or "accumulator" in f.message for f in bad
               if f.code == "sync.acc")


def test_dropped_p_v_wait_is_caught():
    bad = sync_violations(without_p_v_wait())
    assert {"sync.acc", "sync.release"} <= {f.code for f in bad}
    assert any("end of its scope" in f.subject for f in bad)


def test_a_tighter_wait_is_no_violation():
    """wait 0 where the placement says wait 1 only retires P V early: safe (slower)."""
    assert not sync_violations(with_wait(1, 0))
