"""Host time per call as the host-path tests measure it (tests/unit/test_attention_host.py,
test_conv_im2col_host.py): CPU time of this process, so other sessions on a shared machine do
not count, least of `rounds` rounds of `n` calls."""

from __future__ import annotations

import time


def least_cpu_per_call(fn, n: int, rounds: int = 3) -> float:
    """CPU seconds per call of fn(), the least of `rounds` rounds of n calls."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n)
    return best
