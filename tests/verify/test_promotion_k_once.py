"""wgmma.k-once of a K reduction promoted block by block (argus/verify/promotion.py): partials
that a wgmma overwrites (scale-d = 0) and that are added into an fp32 accumulator. The claim is
the promoted sum's (each k of [0, K) reaches the accumulator exactly once, through one partial
promoted once), not one wgmma site's: the overlapped promotion (gemm_fp8.py
`overlapped_promoted_mma`: two partials in turns, the first block written before the loop,
block k - 1 promoted after block k's wgmma, the last one or two promoted after the loop) was
refused by the per-site rule ("over 0 loop(s) and 2 wgmma sites", covers [0, K) violated at
K = 257). The library's overlapped kernels verify clean; the seeded bugs (a partial promoted
twice, the last partial never promoted, a partial overwritten before its promotion, a loop one
iteration long or short) are each caught by wgmma.k-once with a counterexample.

The mutants are written on the fp8 K-loop fixture (tests/fp8_k_loops.py), so everything but the
K loop is the library skeleton's."""

from __future__ import annotations


import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel, gemm_fp8_kernel
from argus.kernels.warp_specialized import OperandRing
from tests.fp8_k_loops import k_loop_kernel
from tests.verify.timing import least_cpu_verify, runs_text, within

ROWS, BN = 64, 128


def _grid_kernel(name: str, k_loop) -> ag.KernelFunction:
    """The fixture's GEMM without the persistent unit loop (one 128 x 128 tile per CTA): a loop
    bound off by one also breaks pipe.totals, and across a persistent unit loop the two roles'
    counters then differ per unit, which leaves the data queries non-linear (minutes); here
    they stay linear."""

    def kernel(A: ag.Tensor["M", "K", ag.e4m3], W: ag.Tensor["N", "K", ag.e4m3],
               C: ag.Tensor["M", "N", ag.f32]):
        M, K = A.shape
        N = W.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, 128), ag.cdiv(N, 128))
        ring = OperandRing.alloc(2, 128, 128, 128, ag.e4m3, 2)
        k_steps = ring.k_steps(K)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_steps):
                with ring.pipe.produce() as st:
                    ag.tma.load(ring.a[st], A, (pid_m * 128, k * 128))
                    ag.tma.load(ring.b[st], W, (pid_n * 128, k * 128))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = k_loop(ring, k_steps, wg)
            ag.store(C, (pid_m * 128 + wg * ROWS, pid_n * 128), acc)

    return ag.kernel(kernel, name=name)


def _overwrite(ring, stage, wg, part):
    ag.wgmma(ring.a[stage].rows_of(wg * ROWS, ROWS), ring.b[stage].rows_of(0, BN), part,
             overwrite=True)


def _overlapped(bug: str | None, persistent: bool = True):
    """The overlapped promotion of gemm_fp8.py (per-tensor form), with one seeded bug."""

    def k_loop(ring, k_steps, wg):
        acc = ag.zeros((ROWS, BN), ag.f32)
        even = ag.zeros((ROWS, BN), ag.f32)
        odd = ag.zeros((ROWS, BN), ag.f32)
        with ring.pipe.consume() as stage:
            _overwrite(ring, stage, wg, even)                          # block 0
        trips = {"long": k_steps // 2, "short": (k_steps - 1) // 2 - 1}.get(
            bug, (k_steps - 1) // 2)
        for j in ag.range(trips):
            with ring.pipe.consume() as stage:
                # block 2j + 1 (into `even` itself: block 2j is overwritten before its
                # promotion reads it)
                _overwrite(ring, stage, wg, even if bug == "overwritten" else odd)
                if bug != "late":
                    acc = acc + even                                   # block 2j
            with ring.pipe.consume() as stage:
                _overwrite(ring, stage, wg, even)                      # block 2j + 2
                if bug == "late":
                    acc = acc + even   # block 2j, promoted after block 2j + 2 overwrote it
                acc = acc + odd                                        # block 2j + 1
                if bug == "twice":
                    acc = acc + odd
        even_steps = k_steps % 2 == 0
        with ag.when(even_steps):
            with ring.pipe.consume() as stage:
                _overwrite(ring, stage, wg, odd)                       # block k_steps - 1
                acc = acc + even                                       # block k_steps - 2
            if bug != "skipped":
                acc = acc + odd                                        # block k_steps - 1
        with ag.when(even_steps == 0):
            acc = acc + even                                           # block k_steps - 1
        return acc

    return (k_loop_kernel if persistent else _grid_kernel)(f"overlap_{bug or 'clean'}", k_loop)


def _serial(bug: str | None):
    """The serial early-release promotion (one partial, promoted after each block's step)."""

    def k_loop(ring, k_steps, wg):
        acc = ag.zeros((ROWS, BN), ag.f32)
        part = ag.zeros((ROWS, BN), ag.f32)
        for k in ag.range(k_steps):
            with ring.pipe.consume() as stage:
                _overwrite(ring, stage, wg, part)
            acc = acc + part * 0.5
            if bug == "twice":
                acc = acc + part * 0.5
        return acc

    return k_loop_kernel(f"serial_{bug or 'clean'}", k_loop)


def _promoted_findings(report):
    return [f for f in report.findings if f.code == "wgmma.k-once"]


# the plain overlapped schedule, and the one measured fastest on the H200 (docs/perf/fp8.md,
# "Overlapped promotion": 836 and 926 TFLOP/s against 742 and 637 for the tuned serial kernel)
OVERLAP = {"st6": Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True),
           "st5-c2-tma": Fp8GemmSchedule(bn=128, stages=5, promote=True, overlap=True,
                                         cluster_m=2, epilogue="tma")}


def _library(kernel: str):
    return gemm_fp8_kernel(ag.bf16) if kernel == "tensor" else gemm_fp8_blockscaled_kernel(ag.bf16)


@pytest.mark.parametrize("schedule", sorted(OVERLAP))
@pytest.mark.parametrize("kernel", ["tensor", "block"])
def test_the_library_overlapped_promotion_verifies_clean(kernel, schedule):
    report = verify.run(lower_only(_library(kernel), s=OVERLAP[schedule]))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)
    k_once = _promoted_findings(report)
    # one reduction over the five promotions (loop: even and odd; tails: two when K has an
    # even block count, one when odd), all proven; none of the per-site claims
    assert k_once and all(f.status == "proven" for f in k_once)
    assert all("promoted into acc (5 promotions" in f.subject for f in k_once), \
        [f.subject for f in k_once]
    assert any("covers [0, K)" in f.subject for f in k_once)


def test_the_overlapped_fixture_verifies_clean():
    report = verify.run(lower_only(_overlapped(None)))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not [d for d in report.unknowns if d.code == "wgmma.k-once"]


def test_the_serial_promotion_is_checked_as_a_promoted_sum():
    report = verify.run(lower_only(_serial(None)))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    k_once = _promoted_findings(report)
    assert k_once and all(f.status == "proven" and "promoted into" in f.subject
                          for f in k_once), [(f.status, f.subject) for f in k_once]


# what each seeded bug is reported as: the claim's words in the message (any of them) and a
# witness key (any of them)
CAUGHT = {
    # the same odd block promoted by two promotions of one step
    "twice": (("reaches acc twice",), ("second",)),
    # the last partial (block k_steps - 1 of an even count) is never added
    "skipped": (("never reach acc",), ("domain",)),
    # block 2j + 1 overwrites `even` before block 2j's promotion reads it: the loop's
    # promotions read 2j + 1 twice, or `odd` before any wgmma wrote it
    "overwritten": (("no wgmma has written", "reaches acc twice"), ("promotion", "second")),
    # block 2j promoted after block 2j + 2's wgmma overwrote it (the wait(1) ordering): the
    # loop's and the tail's promotions both reach one k
    "late": (("reaches acc twice",), ("second",)),
}


@pytest.mark.parametrize("bug", sorted(CAUGHT))
def test_a_seeded_overlap_bug_is_caught_with_a_counterexample(bug):
    report = verify.run(lower_only(_overlapped(bug)))
    k_once = [d for d in report.errors if d.code == "wgmma.k-once"]
    assert k_once, [str(d) for d in report.errors + report.unknowns]
    words, keys = CAUGHT[bug]
    assert any(any(w in d.message for w in words) and any(k in d.counterexample for k in keys)
               for d in k_once), "\n".join(str(d) for d in k_once)


def test_a_loop_one_iteration_short_is_caught_by_k_once():
    """(k_steps - 1) // 2 - 1 iterations: two blocks never promoted. (The consumer also runs
    two steps fewer than the producer: pipe.totals. On the grid kernel: see _grid_kernel.)"""
    report = verify.run(lower_only(_overlapped("short", persistent=False)))
    k_once = [d for d in report.errors if d.code == "wgmma.k-once"]
    assert any("never reach acc" in d.message and "domain" in d.counterexample
               for d in k_once), "\n".join(str(d) for d in report.errors)
    assert any(d.code == "pipe.totals" for d in report.errors)


def test_a_loop_one_iteration_long_is_refused():
    """k_steps // 2 iterations (one too many for an even block count): the consumer reads
    two slots no producer step fills, a hang that pipe.totals reports with its counterexample.
    k-once is stated for the steps the pipeline fills (its records assume the producer step
    with the consumer's counter exists, which pipe.totals proves for a correct kernel), so at
    the shapes where the bug shows its premises are empty: never proven, reported unknown."""
    report = verify.run(lower_only(_overlapped("long", persistent=False)))
    totals = [d for d in report.errors if d.code == "pipe.totals"]
    assert totals and totals[0].counterexample["consumer_steps"] > \
        totals[0].counterexample["producer_steps"], "\n".join(str(d) for d in report.errors)
    k_once = [f for f in report.findings if f.code == "wgmma.k-once"]
    assert any(f.status != "proven" for f in k_once), [(f.status, f.subject) for f in k_once]


def test_a_serial_partial_promoted_twice_is_caught():
    report = verify.run(lower_only(_serial("twice")))
    k_once = [d for d in report.errors if d.code == "wgmma.k-once"]
    assert any("reaches acc twice" in d.message and d.counterexample.get("k") is not None
               for d in k_once), "\n".join(str(d) for d in report.errors)


# issue 13's bar is <= 1 s per library kernel; the overlapped kernels took 17-24 s CPU before
# (per-site k-once, and counters compared through the unit loop's product), 0.4-0.7 s after
# (least of 3, cold proof cache, load average ~3). 3x the bar, as test_verify_time.py's (a
# shared CI machine runs the verifier 2-3x slower than a quiet one)
BOUND_CPU_S = 3.0


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["tensor", "block"])
def test_the_overlapped_kernels_verify_within_the_bar(kernel):
    report, times, bounds = least_cpu_verify(lower_only(_library(kernel), s=OVERLAP["st6"]), 3,
                                            BOUND_CPU_S)
    assert not report.errors and not report.unknowns, report.diagnostics
    assert within(times, bounds), (
        f"verify.run of the overlapped fp8 {kernel} kernel took {runs_text(times, bounds)} CPU "
        f"({BOUND_CPU_S} s on the development machine, scaled by timing.slowdown_now)")
