"""argus.verify: data-flow invariants of Argus kernels, proven at compile time.

    diagnostics = argus.verify.check(kernel)                      # errors + unknowns
    diagnostics = argus.verify.check(kernel, include_proven=True)  # + proven invariants (notes)
    report = argus.verify.run(kernel_fn, lower=True, s=schedule)   # + timings and findings

Tags (which global coordinate, iteration, expert … an element is) are propagated through
TMA, shared memory, ldmatrix/stmatrix, wgmma, elementwise ops, reductions and stores, and the
built-in invariants (wgmma operand agreement, each k once, TMA/descriptor layouts, expect_tx
bytes, the mbarrier protocol for unbounded iterations, release-after-retire, proxy fences,
races, bounds, output coordinates/coverage) plus every `ag.tag_assert` are proven with z3 in
three tiers (F2 linear layouts, bit-vectors for addresses, linear integer arithmetic for
counters). A query out of its budget (z3 resource units, never wall time) is reported as
"unknown", never as proven. See docs/verify.md.
"""

from argus.verify.checker import Report, check, run

__all__ = ["Report", "check", "run"]
