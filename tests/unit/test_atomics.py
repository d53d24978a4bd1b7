"""DSL atomics (issue 14): ag.atomic_add (red.global.add), ag.atomic_fetch_add (atom.global.add
/ atom.global.inc returning the old value, once per executing group) and ag.fence
(fence.acq_rel.gpu): tracing and its errors, interpreter semantics, the rendered CUDA (and
NVRTC with no spills), and what the verifier proves of them: an atomic is never a store
(atomic.exclusive: no plain access to its tensor; atomic.tickets: a self-resetting counter's
arrivals per element are exactly its wrap, which is what lets store.once prove that one CTA,
the last, passes a guard `old == wrap - 1`)."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import verify
from argus.codegen.cuda import render
from argus.ir import ops as O

BN = 256


@ag.kernel
def histogram(X: ag.Tensor["N", ag.f32], I: ag.Tensor["N", ag.i32],
              S: ag.Tensor["BINS", ag.f32], C: ag.Tensor["BINS", ag.i32]):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
    x = ag.load(X, (pid * BN,), (BN,))
    ag.atomic_add(S, (0,), x.sum(axis=0))                       # a replicated [1] tile: once
    ag.atomic_add(C, (pid % 4,), ag.load(I, (pid * BN,), (BN,)).sum(axis=0))


def test_atomic_add_interprets_as_a_sum_over_ctas():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1000).astype(np.float32)
    i = rng.integers(-50, 50, 1000).astype(np.int32)
    s, c = np.full(3, 0.5, np.float32), np.zeros(3, np.int32)
    histogram.interpret(x, i, s, c)
    assert abs(float(s[0]) - (0.5 + x.astype(np.float64).sum())) < 1e-3 and s[1] == 0.5
    want = [i[k * BN:(k + 1) * BN].sum() for k in range(4)]
    assert list(c) == [want[0], want[1], want[2]]          # pid 3 % 4 = 3: outside, dropped


def test_atomic_add_renders_red_once_per_element():
    text = render(histogram.lower()).text
    # the sum is replicated over the CTA's 128 threads: only thread 0's replica class adds
    assert "if ((gtid & 127) == 0 && " in text and "atomicAdd(&S[" in text
    c = ag.compile(histogram, verify=False)
    assert not c.resources.spills


@ag.kernel(partial_outputs=("P",))
def last_writes(X: ag.Tensor["M", "N", ag.f32], P: ag.Tensor["M", 16, ag.f32],
                CNT: ag.Tensor["M", ag.i32], Y: ag.Tensor["M", 1, ag.f32],
                WRAP_EXTRA: int = 0, CELL: str = "row", GUARD: int = -1):
    """Each CTA (column block, row) writes a partial row sum; the last CTA of the row (the
    one that draws ticket blocks - 1) adds the partials and writes Y (up to 16 blocks)."""
    blocks = ag.cdiv(X.shape[1], BN)
    nb, row = ag.grid(blocks, X.shape[0])
    ag.require(ag.sym(X.shape[1]) <= 16 * BN, "at most 16 column blocks")
    part = ag.load(X, (row, nb * BN), (1, BN)).sum(axis=1)
    ag.store(P, (row, nb), part)
    ag.fence()
    cell = row if CELL == "row" else nb
    old = ag.atomic_fetch_add(CNT, (cell,), wrap=blocks + WRAP_EXTRA)
    with ag.when(old == blocks + GUARD):
        ag.fence()
        ag.store(Y, (row, 0), ag.load(P, (row, 0), (1, 16)).sum(axis=1))


def test_fetch_add_tickets_and_the_last_cta():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 1500)).astype(np.float32)     # 6 column blocks a row
    p = np.zeros((3, 16), np.float32)
    cnt = np.zeros(3, np.int32)
    y = np.zeros((3, 1), np.float32)
    last_writes.interpret(x, p, cnt, y)
    assert np.allclose(y[:, 0], x.astype(np.float64).sum(1), atol=1e-3)
    assert (cnt == 0).all(), "each counter is back at 0 after its 6 arrivals"


@ag.kernel
def tickets(T: ag.Tensor["N", ag.i32], C: ag.Tensor[2, ag.i32], WRAP: int = 0):
    (pid,) = ag.grid(T.shape[0])
    old = ag.atomic_fetch_add(C, (0,), wrap=WRAP) if WRAP else \
        ag.atomic_fetch_add(C, (0,), 3)
    out = ag.atomic_fetch_add(C, (5,))                 # outside the tensor: no atomic, -1
    ag.store(T, (pid,), ag.full((1,), 0, ag.i32) + old * 10 + out + 1)


def test_fetch_add_interpreter_semantics():
    t, c = np.zeros(5, np.int32), np.array([7, 0], np.int32)
    tickets.interpret(t, c)
    assert list(t) == [70, 100, 130, 160, 190] and list(c) == [22, 0]   # add 3, old values
    t, c = np.zeros(5, np.int32), np.zeros(2, np.int32)
    tickets.interpret(t, c, WRAP=3)                          # atom.inc: 0, 1, 2, 0, 1
    assert list(t) == [0, 10, 20, 0, 10] and list(c) == [2, 0]


def test_fetch_add_renders_one_atomic_and_a_broadcast():
    k = tickets.lower(WRAP=3)
    fetch = [op for op in k.walk() if isinstance(op, O.AtomicFetchAdd)]
    assert fetch and all(len(op.scratch) == 1 for op in fetch)   # placed by lower/smem
    text = render(k).text
    # acq_rel in the one thread that runs it, after the group barrier (the release of the
    # group's stores) and before the broadcast barrier (the acquire for the group's loads):
    # the relaxed atomicInc left both patterns to fences of other threads (review of 0a5a292)
    assert "ag::atom_inc_acq_rel_gpu(reinterpret_cast<ag::uint32_t*>(&C[" in text
    assert "atomicInc(" not in text
    assert "if (gtid == 0) s" in text and text.count("__syncthreads();") >= 4
    assert "ag::atom_add_acq_rel_gpu(reinterpret_cast<ag::uint32_t*>(&C[" in \
        render(tickets.lower()).text
    fence = render(last_writes.lower()).text
    assert fence.count('asm volatile("fence.acq_rel.gpu;" ::: "memory");') == 2
    assert not ag.compile(last_writes, verify=False).resources.spills


def test_trace_errors():
    @ag.kernel
    def bad(X: ag.Tensor["N", ag.f32], C: ag.Tensor["N", ag.i32], WHAT: str = ""):
        (pid,) = ag.grid(1)
        if WHAT == "dtype":
            ag.atomic_add(X, (0,), ag.full((4,), 1, ag.i32))
        if WHAT == "counter":
            ag.atomic_fetch_add(X, (0,))
        if WHAT == "wrap":
            ag.atomic_fetch_add(C, (0,), 2, wrap=4)
        if WHAT == "guard":
            with ag.when(ag.thread_index() < 1):
                ag.atomic_fetch_add(C, (0,))
    for what, msg in (("dtype", "f32 or i32 tiles"), ("counter", "int32 tensor"),
                      ("wrap", "increments by 1"), ("guard", "differs between threads")):
        with pytest.raises(ag.TraceError, match=msg):
            bad.trace(WHAT=what)


def _diag(kernel, **ct):
    r = verify.run(kernel, include_proven=True, **ct)
    return {(d.code, d.severity) for d in r.diagnostics}, r


def test_verifier_proves_the_last_cta_stores_once():
    found, r = _diag(last_writes)
    assert not r.errors, [d.message for d in r.errors]
    # P is a partial output on purpose: its coverage is not claimed, the only unknown
    assert [d.code for d in r.unknowns] == ["store.coverage"] and "P" in r.unknowns[0].message
    assert ("atomic.tickets", "note") in found and ("atomic.exclusive", "note") in found
    once = [d for d in r.diagnostics if d.code == "store.once" and "stores to Y" in d.message]
    assert once and once[0].severity == "note"


@pytest.mark.parametrize("ct,code", [({"WRAP_EXTRA": 1}, "atomic.tickets"),
                                     ({"CELL": "block"}, "atomic.tickets")])
def test_seeded_counter_bugs(ct, code):
    """A wrap one past the arrivals (the counter never resets, nobody draws the last
    ticket... and the next launch starts at 6), and a counter indexed by the column block
    instead of the row (the rows' CTAs share it: more arrivals than wrap, tickets repeat)."""
    found, r = _diag(last_writes, **ct)
    assert (code, "error") in found, sorted(found)


@pytest.mark.parametrize("guard", [-2, -3])
def test_a_merge_before_the_last_arrival_is_caught_at_the_guard(guard):
    """`old == blocks - 2` (or - 3): one arrival passes, so store.once holds, but it is not the
    last: it adds the row's partials while the later CTAs have not stored theirs (the
    interpreter runs CTAs in order and cannot show it). atomic.tickets' merge claim reports
    it at the guard's line (the one a fix edits), with the ticket and the arrival that draws
    it; the correct guard (-1) is proven."""
    found, r = _diag(last_writes, GUARD=guard)
    errs = [d for d in r.errors if d.code == "atomic.tickets"]
    assert errs, sorted(found)
    d = errs[0]
    assert "merges at ticket" in d.message and "thread 0 of the CTA" in d.message, d.message
    wit = d.counterexample
    assert wit["ticket"] != wit["wrap"] - 1 and "cta" in wit and wit["thread"] == 0, wit
    assert str(d.loc) == wit["condition"] != wit["counter"], (d.loc, wit)
    _, r = _diag(last_writes)
    merge = [d for d in r.diagnostics if d.code == "atomic.tickets" and "merge" in d.message]
    assert merge and merge[0].severity == "note", [d.message for d in merge]


def test_an_atomic_target_read_plainly_is_a_violation():
    @ag.kernel
    def racy(X: ag.Tensor["N", ag.f32], S: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
        ag.atomic_add(S, (pid * BN,), ag.load(X, (pid * BN,), (BN,)))
        ag.store(X, (pid * BN,), ag.load(S, (pid * BN,), (BN,)))
    found, r = _diag(racy)
    assert ("atomic.exclusive", "error") in found
    assert not any(d.code.startswith("store") and "S" in d.message and d.severity == "note"
                   for d in r.diagnostics if "stores to S" in d.message)


def test_an_opaque_old_value_proves_nothing():
    """Without wrap the old value is opaque: a guard on it cannot make a store single."""
    @ag.kernel
    def opaque_guard(P: ag.Tensor["M", ag.f32], CNT: ag.Tensor[1, ag.i32]):
        (pid,) = ag.grid(P.shape[0])
        old = ag.atomic_fetch_add(CNT, (0,))
        with ag.when(old == 3):
            ag.store(P, (0,), ag.full((1,), 1.0))
    found, r = _diag(opaque_guard)
    assert ("store.once", "error") in found


@ag.kernel(partial_outputs=("P",))
def _skip_first_block(X: ag.Tensor["M", "N", ag.f32], P: ag.Tensor["M", 16, ag.f32],
                      CNT: ag.Tensor["M", ag.i32], Y: ag.Tensor["M", 1, ag.f32]):
    """last_writes with the ticket inside a runtime loop that column block 0 runs zero times:
    each row's counter sees blocks - 1 arrivals, never resets, and nobody draws the last
    ticket (Y unwritten, the next launch's tickets shifted)."""
    blocks = ag.cdiv(X.shape[1], BN)
    nb, row = ag.grid(blocks, X.shape[0])
    ag.require(ag.sym(X.shape[1]) <= 16 * BN, "at most 16 column blocks")
    ag.store(P, (row, nb), ag.load(X, (row, nb * BN), (1, BN)).sum(axis=1))
    ag.fence()
    for _ in ag.range(ag.minimum(nb, 1)):
        old = ag.atomic_fetch_add(CNT, (row,), wrap=blocks)
        with ag.when(old == blocks - 1):
            ag.fence()
            ag.store(Y, (row, 0), ag.load(P, (row, 0), (1, 16)).sum(axis=1))


def test_a_counter_in_a_runtime_loop_is_not_reached_unconditionally():
    """Review finding (0a5a292): atomic.tickets read only `ag.when` scopes as conditions, so a
    loop whose trip count depends on the free program id (here zero trips for block 0) was
    proven: its claims compare two instances that arrive and cannot see one that never does."""
    found, r = _diag(_skip_first_block)
    assert ("atomic.tickets", "error") in found, sorted(found)
    msg = next(d.message for d in r.errors if d.code == "atomic.tickets")
    assert "no runtime loop" in msg, msg


@ag.kernel(partial_outputs=("P",))
def _short_counters(X: ag.Tensor["M", "N", ag.f32], P: ag.Tensor["M", 16, ag.f32],
                    CNT: ag.Tensor["R", ag.i32], Y: ag.Tensor["M", 1, ag.f32]):
    """last_writes with a counter tensor of its own length R: rows >= R run no atomic, read
    -1, and never store Y."""
    blocks = ag.cdiv(X.shape[1], BN)
    nb, row = ag.grid(blocks, X.shape[0])
    ag.require(ag.sym(X.shape[1]) <= 16 * BN, "at most 16 column blocks")
    ag.store(P, (row, nb), ag.load(X, (row, nb * BN), (1, BN)).sum(axis=1))
    ag.fence()
    old = ag.atomic_fetch_add(CNT, (row,), wrap=blocks)
    with ag.when(old == blocks - 1):
        ag.fence()
        ag.store(Y, (row, 0), ag.load(P, (row, 0), (1, 16)).sum(axis=1))


def test_a_counter_shorter_than_the_stores_need_is_no_coverage():
    """Review finding (66c7d27): the ticket obligation restates atomic.tickets' query, whose
    premises take the counter element inside its tensor, so Y's coverage was proven although
    rows >= R draw no ticket (old = -1) and never store."""
    found, r = _diag(_short_counters)
    errs = [d for d in r.errors if d.code == "store.coverage"]
    assert errs and "lies outside CNT" in errs[0].message, sorted(found)
    # the counter sized by the rows (last_writes) keeps its coverage proven
    _, clean = _diag(last_writes)
    assert not clean.errors, [str(d) for d in clean.errors]
