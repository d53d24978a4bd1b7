"""Shrink a KernelBench task's sizes so that its correctness check fits a CPU (CI has 2 cores).

Upstream sizes are made for a GPU (level-1 ReLU has 1.6 G elements). On the CPU the judge
re-executes the task file with some integer size constants halved (`tasks.load_task` overrides)
until the task fits a budget: total elements of inputs, parameters and outputs, and FLOPs of
matmuls and convolutions. Shapes are checked on the meta device, which costs no memory or time;
a halving that makes the task invalid (a kernel larger than the image, a shape mismatch) is
reverted and that constant is left alone. Constants below 8 (kernel sizes, strides, dims to
reduce over) are never touched.

Invariant: a plan only changes values of module-level integer constants; every report of a run
that used a plan says so (the judgment's `sizes` field), because results at reduced sizes are
not results at upstream sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from argus.bench.kernelbench.tasks import load_task, size_sites

MIN_SITE_VALUE = 8


@dataclass(frozen=True)
class SizeBudget:
    """What a CPU run may cost: elements in all tensors together, and matmul/conv FLOPs."""

    elements: int = 1 << 20
    flops: float = 2e8


@dataclass(frozen=True)
class SizeCost:
    """elements: in all inputs, parameters, outputs (or the largest intermediate, if larger);
    io_elements: inputs + parameters + outputs only (what any implementation must touch);
    scratch_bytes: the largest workspace an Argus solution's convolution takes beside its
    tensors (argus.ops.conv.packing_peak_bytes: the strict fp32 split's packed operand,
    several times its input's bytes when whole, now packed in chunks of images)."""

    elements: int
    flops: float
    largest_tensor: int
    io_elements: int = 0
    scratch_bytes: int = 0

    def fits(self, budget: SizeBudget) -> bool:
        return self.elements <= budget.elements and self.flops <= budget.flops


@dataclass(frozen=True)
class ShrinkPlan:
    """Overrides for `load_task`, with the cost before and after (empty overrides: unchanged)."""

    overrides: dict[str, int] = field(default_factory=dict)
    original: dict[str, int] = field(default_factory=dict)
    cost_before: SizeCost | None = None
    cost_after: SizeCost | None = None
    fits: bool = True

    def describe(self) -> str:
        if not self.overrides:
            return "upstream sizes"
        parts = [f"{k} {self.original[k]}->{v}" for k, v in sorted(self.overrides.items())]
        return "reduced for CPU: " + ", ".join(parts)


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


def meta_cost(path: Path | str, overrides: dict[str, int] | None = None) -> SizeCost:
    """Cost of one forward of the task at the given sizes, computed on the meta device."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class _Largest(TorchDispatchMode):
        """Tracks the largest tensor any op produces (intermediates included)."""

        largest = 0
        scratch = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in _tensors(out):
                _Largest.largest = max(_Largest.largest, t.numel())
            if func is torch.ops.aten.convolution.default:
                _Largest.scratch = max(_Largest.scratch, _packing_peak(args))
            return out

    module = load_task(path, overrides)
    # not seeded: on the meta device nothing is drawn, and seeding is process-wide (the
    # judge's process estimates tasks while other threads draw input sets under RNG_LOCK; a
    # seed here reset their generator between their seeding and their draw)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad(), _Largest():
            out = model(*inputs)
    tensors = _tensors(inputs) + _tensors(out) + list(model.parameters()) + list(model.buffers())
    sizes = [t.numel() for t in tensors]
    largest = max(max(sizes, default=0), _Largest.largest)
    return SizeCost(elements=max(sum(sizes), largest), flops=float(counter.get_total_flops()),
                    largest_tensor=largest, io_elements=sum(sizes),
                    scratch_bytes=_Largest.scratch)


def _packing_peak(args: tuple) -> int:
    """aten.convolution's (input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups): the bytes of the strict split's packing of its fp32 input (a
    transposed convolution runs as convolutions of that same input, one at a time); none for
    a depthwise one (one input channel a group: its own CUDA-core kernel, exact fp32, no
    split: argus.compose.conv.depthwise, argus.ops.conv.route)."""
    from argus.ops.conv import packing_peak_bytes

    x, weight, groups = args[0], args[1], int(args[8])
    if not args[6] and groups == x.shape[1] and weight.shape[1] == 1:
        return 0
    return packing_peak_bytes(x, groups, terms=6)


def _parameters(path: Path, values: dict[str, int], before: SizeCost) -> set[str]:
    """Constants whose halving is valid but saves nothing (num_groups, class counts): they
    describe the model, not its size, and are scaled only along with the sizes they divide."""
    params = set()
    for name, value in values.items():
        try:
            cost = meta_cost(path, {name: max(MIN_SITE_VALUE // 2, value // 2)})
        except Exception:
            continue
        if (cost.elements, cost.flops) >= (before.elements, before.flops):
            params.add(name)
    return params


def plan_sizes(path: Path | str, budget: SizeBudget = SizeBudget()) -> ShrinkPlan:
    """Greedy halving of the largest size constant until the task fits `budget`.

    A size is never halved below 4x a parameter constant (say hidden_size vs num_groups)
    without halving that parameter too, so ratios such as channels per group survive: with
    one channel per group a GroupNorm outputs zeros and the shrunk task would be degenerate.
    """
    path = Path(path)
    original_sites = size_sites(path.read_text())
    before = meta_cost(path)
    if before.fits(budget):
        return ShrinkPlan(cost_before=before, cost_after=before)
    values = {name: s.value for name, s in original_sites.items() if s.value >= MIN_SITE_VALUE}
    params = _parameters(path, values, before)
    frozen: set[str] = set(params)
    overrides: dict[str, int] = {}
    cost = before
    for _ in range(400):
        if cost.fits(budget):
            break
        movable = [n for n in values if n not in frozen and values[n] >= MIN_SITE_VALUE]
        if not movable:
            break
        name = max(movable, key=lambda n: (values[n], n))
        new_value = max(MIN_SITE_VALUE // 2, values[name] // 2)
        # Parameters that would come within 4x of the new size are halved with it; then try
        # the constant alone, then with every constant of equal value (sizes that must agree,
        # such as batch_size and input_shape[0] of a broadcast).
        close = [p for p in params if 4 * values[p] > new_value and values[p] >= MIN_SITE_VALUE]
        tied = [n for n in movable if values[n] == values[name]]
        groups = [[name, *close]] + ([[name]] if close else [])
        if len(tied) > 1:
            groups += [[*tied, *close], tied] if close else [tied]
        new_cost = None
        group: list[str] = []
        for group in groups:
            trial = dict(overrides)
            for n in group:
                trial[n] = max(MIN_SITE_VALUE // 2, values[n] // 2)
            try:
                new_cost = meta_cost(path, trial)
                break
            except Exception:
                new_cost = None
        if new_cost is None:
            frozen.add(name)
            continue
        if (new_cost.elements, new_cost.flops) >= (cost.elements, cost.flops):
            frozen.add(name)  # not a size: halving it saves nothing
            continue
        overrides, cost = trial, new_cost
        for n in group:
            values[n] = trial[n]
    return ShrinkPlan(overrides=overrides,
                      original={k: original_sites[k].value for k in overrides},
                      cost_before=before, cost_after=cost, fits=cost.fits(budget))
