"""GPU memory for tasks that run side by side: an estimate per task and a budget they share.

A task's bytes are estimated from its tensors on the meta device (`shrink.meta_cost`: inputs,
intermediates and outputs at upstream sizes, as float32 elements). `GpuMemoryBudget` admits a
task only while the estimates of the tasks running stay within the device's memory; tasks wait
in order, a smaller one may pass a larger one that does not fit yet, but only a few times (then
the larger one blocks the queue until it fits), so a large task is never starved.

Invariant: the estimates of admitted tasks never sum above the budget, except for a task whose
own estimate exceeds the budget, which is admitted only when nothing else runs.

Estimates can be wrong (run 7 on the H200: 62 of 160 tasks ran out of memory beside others, with
estimates from 1.3 to 95 GB, so some neighbour used more than its estimate). So a budget given a
`free_bytes` probe (the device's free memory, every process included) also admits a task beside
others only when its estimate fits in what is really free now, less `margin_bytes`: a
neighbour's overshoot then delays the next task instead of making it fail.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

BASELINE_BYTES_PER_ELEMENT = 4.0 * 3   # the Model eager and compiled, inputs, outputs (fp32)
# Judging directly, per float32 element of the task's tensors, the judge and the candidate
# taking turns (prepare a set, run it, compare; both give cached blocks back in between). For an
# elementwise float32 task of n input and n output elements (2n elements, 8n bytes), in bytes
# per input element (n B):
#   preparing a set (judge alone): its inputs (4), their float64 copy and the float64 forward's
#     widest intermediate (16), the previous set's reference kept in the outputs' dtype for the
#     stale probe (4, `keep_stale`); set 0's stochastic check holds its reference (8) instead
#     of the previous one: <= 28;
#   a set's run: the judge's inputs, reference, previous stale answer and the hand-over's staged
#     copy (4 + 8 + 4 + 4 = 20, cudaipc.StagedInputs) beside the candidate's inputs, their copy
#     for the mutation check, its output and a temporary (16): 36;
#   timing: the two timing sets' staged copies (8; the judge keeps neither their inputs nor any
#     reference, `timing_sets`) beside the candidate's two sets, the argument tensors they are
#     reflected into, an output, a temporary and the two kept outputs (8 + 4 + 4 + 4 + 8 = 28): 36;
#   the check of the timed calls: the first checked call's inputs and float64 forward (20)
#     beside the candidate's kept outputs (8), received after it; the next call's beside its
#     own kept output (24): 28.
# (A mixed set's draw is made in place, two draws of the input's size at most: below these.)
# Peak 36 n B = 18 B per element of the task's tensors, plus allocator slack. Before: 52 n B
# (26 B per element): the previous set's float64 reference, the float64 probes, and both timing
# sets' float64 references held through the timing. JUDGE_PROCESS_BYTES_PER_ELEMENT is the
# judge's process alone: planned 28 n B (set 0's stochastic check), 14 B per element; what
# tests/unit/test_kernelbench_memory.py measures on the CPU (which draws the mixed sets in
# float64): 15.4 to 16.6 from run to run (24 before these changes).
JUDGE_BYTES_PER_ELEMENT = 20.0
JUDGE_PROCESS_BYTES_PER_ELEMENT = 18.0
UNKNOWN_BYTES = 8e9


def estimate_bytes(task: Any, bytes_per_element: float = BASELINE_BYTES_PER_ELEMENT,
                   scratch: bool = False) -> float:
    """GPU bytes `task` needs (meta-device elements x bytes_per_element); UNKNOWN_BYTES when its
    shapes cannot be evaluated on the meta device. `scratch` (an Argus candidate judged, not
    the baselines): plus the largest workspace a step of the solution takes beside its tensors
    (`SizeCost.scratch_bytes`: a convolution's fp32 split packing, up to ~2.5 GiB, which the
    per-element rate, sized for elementwise tasks, does not cover)."""
    try:
        from argus.bench.kernelbench.shrink import meta_cost

        cost = meta_cost(task.path)
        return bytes_per_element * cost.elements + (cost.scratch_bytes if scratch else 0)
    except Exception:  # noqa: BLE001 - a task that does not evaluate on meta: a fixed guess
        return UNKNOWN_BYTES


class GpuMemoryBudget:
    """Admit tasks by estimated bytes (see the module docstring). `acquire` blocks; `until` (a
    monotonic time) makes it give up and return False."""

    def __init__(self, budget_bytes: float, max_passes: int = 3,
                 free_bytes: Callable[[], float] | None = None, margin_bytes: float = 2e9):
        self.budget = float(budget_bytes)
        self.max_passes = max_passes
        self.free_bytes = free_bytes
        self.margin_bytes = margin_bytes
        self.in_use = 0.0
        self.running = 0
        self.peak = 0.0
        self._cond = threading.Condition()
        self._queue: list[tuple[int, float]] = []    # (ticket, need) in arrival order
        self._passed: dict[int, int] = {}
        self._tickets = 0

    def _fits(self, need: float) -> bool:
        if self.running == 0:
            return True
        need = min(need, self.budget)
        if self.in_use + need > self.budget:
            return False
        return self.free_bytes is None or need <= self.free_bytes() - self.margin_bytes

    def _may_go(self, ticket: int, need: float) -> bool:
        if not self._fits(need):
            return False
        for other, other_need in self._queue:       # those ahead of us
            if other == ticket:
                return True
            if self._passed.get(other, 0) >= self.max_passes:
                return False                         # it has waited enough: no more passing
        return True

    def acquire(self, need: float, until: float | None = None) -> bool:
        with self._cond:
            self._tickets += 1
            ticket = self._tickets
            self._queue.append((ticket, need))
            try:
                while not self._may_go(ticket, need):
                    left = None if until is None else until - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(timeout=1.0 if left is None else min(1.0, left))
                for other, _ in self._queue:         # everyone we passed
                    if other == ticket:
                        break
                    self._passed[other] = self._passed.get(other, 0) + 1
                self.in_use += min(need, self.budget)
                self.running += 1
                self.peak = max(self.peak, self.in_use)
                return True
            finally:
                self._queue = [(t, n) for t, n in self._queue if t != ticket]
                self._passed.pop(ticket, None)
                self._cond.notify_all()

    def try_acquire(self, need: float) -> bool:
        """Admit now if it fits beside what runs (no waiting, no queue): for a scheduler that
        picks, among several tasks, the first that fits."""
        with self._cond:
            if not self._fits(need):
                return False
            self.in_use += min(need, self.budget)
            self.running += 1
            self.peak = max(self.peak, self.in_use)
            return True

    def wait_for_release(self, timeout: float) -> None:
        """Block until some task releases its memory (or `timeout` seconds pass)."""
        with self._cond:
            self._cond.wait(timeout=timeout)

    def release(self, need: float) -> None:
        with self._cond:
            self.in_use -= min(need, self.budget)
            self.running -= 1
            self._cond.notify_all()


def device_free_bytes(device: str = "cuda") -> Callable[[], float] | None:
    """A probe of the device's free memory (all processes; cudaMemGetInfo), or None off a GPU."""
    import torch

    if not (device.startswith("cuda") and torch.cuda.is_available()):
        return None
    dev = torch.device(device)
    return lambda: float(torch.cuda.mem_get_info(dev)[0])


def device_budget_bytes(device: str = "cuda", reserve_gb: float = 12.0,
                        override_gb: float | None = None) -> float:
    """The memory tasks may share: --gpu-mem-gb, else the device's total less `reserve_gb` (CUDA
    contexts of the workers, the caching allocators' slack); 1 TB of "memory" on a CPU."""
    if override_gb:
        return override_gb * 1e9
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        return max(total - reserve_gb * 1e9, total * 0.5)
    return 1e12


__all__ = ["BASELINE_BYTES_PER_ELEMENT", "GpuMemoryBudget", "JUDGE_BYTES_PER_ELEMENT",
           "JUDGE_PROCESS_BYTES_PER_ELEMENT",
           "device_budget_bytes", "device_free_bytes", "estimate_bytes"]
