"""The judge's GPU memory admission: the device's free memory as a second check, and the retry
of a task that ran out of memory (twice its estimate, then alone, then the verdict)."""

from __future__ import annotations

from argus.bench.kernelbench import gpumem
from argus.bench.kernelbench.parallel import out_of_memory_retry


def test_a_task_waits_while_the_device_has_less_free_memory_than_its_estimate():
    free = {"bytes": 100.0}
    budget = gpumem.GpuMemoryBudget(100.0, free_bytes=lambda: free["bytes"], margin_bytes=1.0)
    assert budget.try_acquire(30)                 # alone: admitted whatever the probe says
    free["bytes"] = 20.0                          # a neighbour used more than its estimate
    assert not budget.try_acquire(30)             # the budget has room (60 left), the device not
    assert budget.try_acquire(10)                 # 10 <= 20 - 1
    free["bytes"] = 50.0
    assert budget.try_acquire(30)
    assert budget.in_use == 70 and budget.running == 3


def test_without_a_probe_only_the_estimates_count():
    budget = gpumem.GpuMemoryBudget(100.0)
    assert budget.try_acquire(60) and budget.try_acquire(40) and not budget.try_acquire(1)


def test_a_task_out_of_memory_is_tried_with_twice_its_estimate_then_alone_then_judged():
    budget = 100.0
    assert out_of_memory_retry(10.0, budget, tries=1) == 20.0
    assert out_of_memory_retry(20.0, budget, tries=2) == budget     # then alone
    assert out_of_memory_retry(budget, budget, tries=3) is None     # out of memory alone: verdict
    assert out_of_memory_retry(60.0, budget, tries=1) == budget     # twice would not fit: alone
    assert out_of_memory_retry(150.0, budget, tries=1) is None      # it already ran alone
    assert out_of_memory_retry(0.0, budget, tries=1) == budget      # no estimate (a CPU run)
