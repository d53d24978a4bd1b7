"""The body of the tests that a kernel verifies with zero findings within a CPU time bound
(test_persistent_causal_walk.py, test_persistent_own_blocks.py): no error, no unknown, at
least `proven` findings proven, and verify.run's CPU time under `cpu_s` seconds (a bound
with room on the loaded 2-core machine, not a measurement: tests/verify/timing.py for
those)."""

from __future__ import annotations

import time

from argus import verify


def assert_verifies_clean(kernel, what: str, proven: int = 200, cpu_s: float = 60):
    """verify.run(kernel) under the assertions above; `what` names the kernel in the time
    bound's message. Returns the report (for a caller's own assertions on its findings)."""
    t0 = time.process_time()
    report = verify.run(kernel)
    spent = time.process_time() - t0
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)
    assert len(report.proven) >= proven
    assert spent < cpu_s, f"{what}: {spent:.0f} s of CPU"
    return report
