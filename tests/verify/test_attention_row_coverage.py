"""The bf16 attention kernels pose and prove their row statistics' coverage (issue 13, Verifier
2): the running max and sum see every key of the row exactly once (reduce.coverage).

Before, only FP8 at head dims 64 and 128 (and bf16 at 64) posed it: in bf16 a K row of head
dim 128 is two 64-column TMA boxes (one per swizzle atom), so the score's key coordinate was
read through a case split on the contracted k (which box holds the column), and the wgmma
made it a set over k rather than a point; reduce.coverage, which needs the key as a point of
the block position, posed nothing (unclaimed, not proven). check_reduce._singleton proves such
a set has one value in the obligation's context (the key row is the same in both boxes) and
uses it as the point.

Seeded bug: the library kernel with its KV loop one block short (`_kv_blocks` patched) is a
reduce.coverage error naming the loop, where before it was at most a warning (wgmma.k-once's
register-A shortfall, which a causal loop may have on purpose)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention as A


def _covered(report, fn: str) -> list:
    return [f for f in report.findings if f.code == "reduce.coverage"
            and f.subject.startswith(f"{fn} over axis 1") and "covers the row" in f.subject]


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_bf16_attention_proves_row_max_and_sum_coverage(head_dim):
    k = lower_only(A.attention_kernel(head_dim, ag.bf16, False, False),
                   s=A.base_schedule(head_dim))
    report = verify.run(k, include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    for fn in ("max", "sum"):
        got = _covered(report, fn)
        assert got and all(f.status == "proven" for f in got), (fn, got)


@pytest.mark.parametrize("head_dim", [128, 256])
def test_fp8_attention_proves_row_max_coverage(head_dim):
    """FP8 at head dim 256 (two 128-byte boxes a K row) had the same gap."""
    k = lower_only(A.attention_kernel(head_dim, ag.e4m3, False, False),
                   s=A.fp8_schedule(head_dim, False))
    report = verify.run(k, include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    got = _covered(report, "max")
    assert got and all(f.status == "proven" for f in got), got


def test_bf16_attention_default_schedule_proves_row_max_coverage():
    """The FA3-overlapped default (its first block peeled before the loop) as well."""
    s = A.default_schedule(128, False, None)
    report = verify.run(lower_only(A.attention_kernel(128, ag.bf16, False, False), s=s),
                        include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    got = _covered(report, "max")
    assert got and all(f.status == "proven" for f in got), got


def test_kv_loop_one_block_short_is_a_coverage_error(monkeypatch):
    real = A._kv_blocks

    def short(q0, block_m, block_n, S, SK, causal, at_least=0):
        return real(q0, block_m, block_n, S, SK, causal, at_least) - 1
    monkeypatch.setattr(A, "_kv_blocks", short)
    fn = A.attention_kernel.__wrapped__(128, ag.bf16, False, False)   # not the cached one
    report = verify.run(lower_only(fn, s=A.base_schedule(128)), include_proven=True)
    hits = [d for d in report.errors if d.code == "reduce.coverage"]
    assert hits, [(d.code, d.severity, d.message[:120]) for d in report.diagnostics]
    assert any("never" in d.message or "covers" in str(d) for d in hits), hits
    assert any("thread" in d.counterexample or "warpgroup" in d.counterexample
               for d in hits), [d.counterexample for d in hits]


def test_singleton_needs_a_member():
    """_singleton's "every two members are equal" holds vacuously for an empty set, and the
    point it returns keeps the set's conditions, which would then make every claim posed on
    it vacuous. The set must be shown non-empty under the premises first (review of
    2026-12-04): a key row `row` over k with contradictory k conditions is refused, the same
    set over a real k range is the point `row`, and a range `k < n` is a point only where the
    premises give n >= 1."""
    import z3

    from argus.verify.check_reduce import _singleton
    from argus.verify.tagdomain import TagVal
    k, row, n = z3.Ints("k row n")
    empty = TagVal(term=row + 0 * k, bound=(k,), cond=(k > 5, k < 3))
    assert _singleton(empty, []) is None
    real = TagVal(term=row + 0 * k, bound=(k,), cond=(k >= 0, k < 64))
    got = _singleton(real, [])
    assert got is not None and got.is_point
    assert z3.simplify(got.term - row).eq(z3.IntVal(0)), got.term
    ranged = TagVal(term=row + 0 * k, bound=(k,), cond=(k >= 0, k < n))
    assert _singleton(ranged, []) is None              # n may be 0: no member
    assert _singleton(ranged, [n >= 1]) is not None
    split = TagVal(term=row + 0 * k, bound=(k,), cond=(k >= 0, k < 128, k / 64 == n % 2))
    assert _singleton(split, []) is not None            # a box for either parity of n
    assert _singleton(TagVal(term=row + 0 * k, bound=(k,),
                             cond=(k >= 0, k < 64, k / 64 == 1)), []) is None


def test_nonempty_quantifier_elimination_is_bounded(monkeypatch):
    """_nonempty's quantifier elimination has a budget (z3's qe tactic counts no resource
    units, so a wall-clock cap, check_reduce.QE_BACKSTOP_MS): out of it, the existential
    itself is proven within the proof's rlimit, and what cannot be proven is "not a point"
    (False), never a wrong "non-empty". A set over two bound variables that meet in
    non-linear terms (qe took 1.4 s on it) with the budget cut to 1 ms: an empty variant
    (x >= 0 and x < 0 hidden in the conjunction) is refused, and the answers are the same
    with the full budget (the cap only decides how the answer is reached)."""
    import time

    import z3

    from argus.verify import check_reduce
    x, y, z, w, v = z3.Ints("x y z w v")
    n, m = z3.Ints("n m")
    base = [x >= 0, x < n, y * 3 + x == n * 7, y % 5 == 2, z * 7 + w == m, w % 11 == 3,
            z < x + m, w > y, v % 13 == x % 7, v * x < n * m]
    empty = base + [x * x < 0]
    pts = [x, y, z, w, v]
    full = (check_reduce._nonempty(pts, empty, []),
            check_reduce._nonempty(pts, [x >= 0, x < 4], [n >= 1]))
    assert full == (False, True)
    monkeypatch.setattr(check_reduce, "QE_BACKSTOP_MS", 1)
    t0 = time.process_time()
    assert check_reduce._nonempty(pts, empty, []) is False
    # what qe would have decided in milliseconds is still decided (the existential proven)
    assert check_reduce._nonempty(pts, [x >= 0, x < 4], [n >= 1]) is True
    assert check_reduce._nonempty(pts, [x >= 0, x < 4, x > 7], []) is False
    assert time.process_time() - t0 < 30   # bounded: the proofs' own rlimits
