"""Verification time guards for the attention kernel (issue 13: verification fast enough for the
compile loop, <= 1 s per library kernel on the 2-core development machine; docs/verify.md
"Timings", fourth pass). test_verify_cost.py guards the solver side of the GEMMs (distinct and
non-linear queries); these guard the attention kernel, whose time was mostly model building.

* A timing test: `verify.run` of the lowered kernel argus.ops.attention runs at head dim 128,
  causal (the default schedule), cold proof cache, in CPU seconds of this process (z3 runs
  in it; CPU time moves much less with other processes' load than wall time), the least of
  up to three runs, against 3x the 1.1-1.2 s measured after the fourth pass on the loaded
  2-core machine (2.65-2.7 s before it), so a loaded CI machine does not flake it.
* A structural test, the same on any machine: how many element records the checks compute
  (memo misses). The checks ask for elements at fresh index variables, and a memo keyed by
  the index terms rebuilt the record DAG below a tile for every obligation (2,564
  computations for this kernel before the fourth pass, 194 after)."""

from __future__ import annotations


import pytest

import argus as ag
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel, default_schedule
from argus.verify import checker
from argus.verify import tagdomain as TD
from argus.verify.model import Model
from argus.verify.transfer import domain as DOM
from tests.verify.timing import least_cpu_verify, runs_text, within

BOUND_CPU_S = 3.5     # 3x the 1.1-1.2 s CPU measured (least of 3 runs, load average 6-7)
RUNS = 3
MAX_RECORD_COMPUTATIONS = 600   # 419 measured with the TMA-store epilogue (hd128 default since
# 2026-12-04; 194 with the direct store), 2,564 when every obligation rebuilt them

# issue 13's bar, <= 1 s CPU per library kernel: the three attention schedules that were above
# it (least of 3 runs, same loaded machine, load average 7-10, 2026-12-02 22:05 UTC), before
# (HEAD 72dae26) -> after the conditions pruning, the causal k-once proof and the caches
# (tagdomain.referenced_conds, check_wgmma._masked_past_the_loop, _operands):
#   d128 causal 1.18 -> 0.59 s, d256 1.09 -> 0.70 s, d256 causal 1.66 -> 0.84 s.
# The bar itself is measured on a quiet machine with scripts/verify_timings.py (docs/verify.md
# 'Timings'); this guard is 3x it, scaled by timing.slowdown_now. A 1.5 s bound failed every
# time the suite shared a machine: the CI machine ran these at 1.8-2.5 s CPU (CI of cbde2ce),
# and so did this 2-core machine under five other test sessions (2.0-2.3 s), while the same
# full suite at load 2.5-4 ran them at 0.46-0.92 s; the reference workload did not slow down
# with them (1.15-1.3x). What undoes the pruning or the caches is caught at any load by the
# structural guards below (premises per query, record computations)
ATTENTION_OVER_THE_BAR = [(128, True), (256, False), (256, True)]
BAR_BOUND_CPU_S = 3.0
# the largest solver query of each (premises): 1,446 (d128 causal) and 2,814 (d256, the
# output store's record) before the conditions pruning, 164 and 244 after; a structural
# guard, the same at any load
MAX_PREMISES = 600


def _kernel():
    return lower_only(attention_kernel(128, ag.bf16, True), s=default_schedule(128, causal=True))


@pytest.mark.slow
def test_attention_kernel_verifies_within_the_time_bound():
    report, times, bounds = least_cpu_verify(_kernel(), RUNS, BOUND_CPU_S)
    # the time of a verification that proves the kernel, not of one that gave up early
    assert not report.errors and not report.unknowns, report.diagnostics
    assert len(report.proven) > 100
    assert within(times, bounds), (
        f"verify.run of the hd128 causal attention kernel took {runs_text(times, bounds)} CPU "
        f"({BOUND_CPU_S} s on the development machine, scaled by timing.slowdown_now): profile it "
        f"(docs/verify.md 'Timings') before raising the bound")


def test_attention_records_are_built_once_per_kernel(monkeypatch):
    computed = [0]
    memoize = DOM.memoized_record

    def counting(fn):
        def inner(idx):
            if not TD.Memo.building:   # the walk's own evaluations are not memoized
                computed[0] += 1
            return fn(idx)
        return memoize(inner)
    # TileState memoizes its element function through this name when the model builds it
    monkeypatch.setattr(DOM, "memoized_record", counting)
    obs, _ = checker.collect(Model(_kernel()))
    assert len(obs) > 80
    assert 0 < computed[0] <= MAX_RECORD_COMPUTATIONS, (
        f"{computed[0]} element records computed for {len(obs)} obligations (bound "
        f"{MAX_RECORD_COMPUTATIONS}): is the record memo still generalized over fresh index "
        f"variables (tagdomain.memoized_record)?")


def _attention(head_dim: int, causal: bool):
    return lower_only(attention_kernel(head_dim, ag.bf16, causal),
                      s=default_schedule(head_dim, causal=causal))


@pytest.mark.slow
@pytest.mark.parametrize("head_dim,causal", ATTENTION_OVER_THE_BAR,
                         ids=[f"d{d}{'-causal' if c else ''}" for d, c in ATTENTION_OVER_THE_BAR])
def test_attention_schedules_verify_near_the_bar(head_dim, causal):
    """verify.run's CPU time of the default schedules that were over issue 13's 1 s bar, cold
    proof cache, least of up to three runs, within 3x the bar; the verification proves the
    kernel (no open finding: the causal k-once coverage is proven, not a warning)."""
    report, times, bounds = least_cpu_verify(_attention(head_dim, causal), RUNS, BAR_BOUND_CPU_S)
    assert not [d for d in report.diagnostics if d.severity != "note"], report.diagnostics
    assert within(times, bounds), (
        f"verify.run of attention d{head_dim}{' causal' if causal else ''} took "
        f"{runs_text(times, bounds)} CPU ({BAR_BOUND_CPU_S} s, 3x the 1 s bar, scaled by "
        f"timing.slowdown_now): "
        f"profile it (docs/verify.md 'Timings')")


@pytest.mark.parametrize("head_dim,causal", ATTENTION_OVER_THE_BAR,
                         ids=[f"d{d}{'-causal' if c else ''}" for d, c in ATTENTION_OVER_THE_BAR])
def test_attention_queries_carry_only_referenced_conditions(head_dim, causal):
    """No query of these kernels carries more than MAX_PREMISES premises: a record keeps the
    conditions of a sub-record only while it holds one of that sub-record's auxiliaries
    (tagdomain.referenced_conds), so a k-slice's TMA read whose lineage `combine` dropped, or
    the row sum a division broadcasts, no longer rides along in every later query."""
    obs, _ = checker.collect(Model(_attention(head_dim, causal)))
    worst = max(obs, key=lambda o: len(o.premises))
    assert len(worst.premises) <= MAX_PREMISES, (worst.code, worst.subject,
                                                  len(worst.premises))
