"""store.coverage of a store inside two turns on one warpgroup (check_stores._turn_obligation):
each `ag.when(wg == e)` whose e the destination does not name is peeled as a turn and claimed
e in [0, warpgroups), the other turns taken as premises. Nested turns on the same warpgroup
(`wg == K % 2` inside `wg == (K // 2) % 2`) then each passed, while no warpgroup stores where
the two differ (K = 2: every element of Y unwritten), and the kernel verified clean. A second
turn on the same warpgroup is now a claim: warpgroup e passes it too."""

from __future__ import annotations

import argus as ag
from argus import verify


def make_turn_store(bug: str | None = None):
    @ag.kernel(threads=384, name="turn_store")
    def turn_store(X: ag.Tensor["M", "K", ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        K = X.shape[1]
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 64))
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            x = ag.load(X, (b * 64, 0), (64, 64))
            with ag.when(wg == K % 2):
                if bug == "turns_disagree":
                    with ag.when(wg == (K // 2) % 2):  # BUG:turns_disagree
                        ag.store(Y, (b * 64, 0), x)
                else:
                    with ag.when(wg == (K + 2) % 2):   # the same warpgroup: stored once
                        ag.store(Y, (b * 64, 0), x)

    return turn_store


def _errors(kernel):
    return [d for d in verify.check(kernel) if d.severity in ("error", "warning", "unknown")]


def test_two_agreeing_turns_are_clean():
    assert _errors(make_turn_store()) == []


def test_two_turns_that_may_disagree_are_a_coverage_error():
    found = _errors(make_turn_store("turns_disagree"))
    cov = [d for d in found if d.code == "store.coverage" and d.severity == "error"]
    assert cov, [str(d) for d in found]
    assert any("no consumer warpgroup stores" in d.message for d in cov), \
        [d.message for d in cov]
    assert all("warpgroup" in d.counterexample for d in cov)


def make_turn_alternatives(bug: str | None = None):
    """One warpgroup stores the tile, under one of two launch-wide conditions (a scaled copy
    for K > 3, the plain one otherwise): the turn is common to both stores."""

    @ag.kernel(threads=384, name="turn_alternatives")
    def turn_alternatives(X: ag.Tensor["M", "K", ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        K = X.shape[1]
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 64))
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            x = ag.load(X, (b * 64, 0), (64, 64))
            with ag.when(wg == 1):
                with ag.when(K > 3):
                    ag.store(Y, (b * 64, 0), x * 2.0)
                if bug == "k_gap":
                    with ag.when(K < 3):  # BUG:k_gap
                        ag.store(Y, (b * 64, 0), x)
                else:
                    with ag.when(K <= 3):
                        ag.store(Y, (b * 64, 0), x)

    return turn_alternatives


def test_alternatives_under_one_turn_are_clean():
    """Was a store.coverage error ("none of them holds for warpgroup 0": the turn claimed with
    the alternatives) and a store.once unknown (K > 3 and K <= 3 as premises of the pair: an
    empty model)."""
    assert _errors(make_turn_alternatives()) == []


def test_alternatives_under_one_turn_with_a_gap_are_a_coverage_error():
    found = _errors(make_turn_alternatives("k_gap"))
    assert any(d.code == "store.coverage" and d.severity == "error" and
               "never written" in d.message for d in found), [str(d) for d in found]
