"""Partition a compose Graph into kernels and free views.

Materialized tensors: the forward's inputs and parameters, the output, every operand and result
of a matmul, scan or torch op, and every tensor a view or permute reads. Each materialized
elementwise or reduce node roots one fused tile kernel (argus/compose/tile.py) that computes it
from materialized tensors, inlining every elementwise producer (recomputed where two kernels
share it) and every reduction over the kernel's own domain and axes as a *statistic* computed
in an earlier pass of the same kernel (softmax: max, then sum of exp; layer norm: mean, then
the mean of squared deviations; then the apply pass). A reduction over another domain or other
axes is materialized by its own kernel first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from argus.compose.graph import Graph, Node

TENSOR_OPS = ("matmul", "scan", "pool", "torch", "flip", "diag")   # results are materialized
VIEW_OPS = ("view", "permute", "slice", "select")        # free views of a materialized tensor


@dataclass(eq=False)
class FusedKernel:
    root: Node
    domain: tuple[int, ...]
    axes: tuple[int, ...]            # reduced axes of the domain; () for elementwise
    kept_output: bool                # the root is a reduction: output = domain with axes = 1
    stats: list[Node] = field(default_factory=list)   # in-kernel reductions, dependency order
    leaves: list[Node] = field(default_factory=list)  # materialized inputs


@dataclass(eq=False)
class Step:
    kind: str                        # kernel, matmul, scan, pool, view, permute, torch
    node: Node
    kernel: FusedKernel | None = None


@dataclass(eq=False)
class Plan:
    graph: Graph
    steps: list[Step]
    unsupported: list[str]           # ops run by torch (partial solution)

    @property
    def complete(self) -> bool:
        return not self.unsupported


def _in_domain(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    if len(shape) > len(domain):
        return False
    return all(s in (1, d) for s, d in zip(shape[::-1], domain[::-1]))


def partition(g: Graph) -> Plan:
    live = g.live()
    mat: set[Node] = {g.output}
    for n in live:
        if n.op in TENSOR_OPS:
            mat.add(n)
            mat.update(n.inputs())
        elif n.op in VIEW_OPS or n.fn == "shift":
            mat.update(n.inputs())
    while True:
        kernels: dict[Node, FusedKernel] = {}
        grown = False
        for n in live:
            if n in mat and n.op in ("ew", "reduce"):
                k, extra = _build(n, mat)
                if extra:
                    mat.update(extra)
                    grown = True
                    break
                kernels[n] = k
        if not grown:
            break
    steps: list[Step] = []
    unsupported: list[str] = []
    for n in live:
        if n.op == "leaf":
            continue
        if n in kernels:
            steps.append(Step("kernel", n, kernels[n]))
        elif n.op in VIEW_OPS:
            steps.append(Step(n.op, n))
        elif n.op in ("matmul", "scan", "pool"):
            steps.append(Step(n.op, n))
        elif n.op in ("torch", "flip", "diag"):
            if n.attrs.get("item") is None:   # a tuple's items are named by the tuple
                unsupported.append(n.attrs.get("label", n.op))
            steps.append(Step("torch", n))
    return Plan(g, steps, sorted(set(unsupported)))


MIN_CTAS = 132            # one wave on an H100/H200


def _too_few_ctas(k: FusedKernel) -> bool:
    reduced = 1
    for a in k.axes:
        reduced *= k.domain[a]
    kept = max(1, math.prod(k.domain) // max(1, reduced))
    per_cta = 2 if (len(k.domain) - 1) in k.axes else 2048   # rows of a row reduction
    return reduced >= (1 << 16) and kept / per_cta < MIN_CTAS


def _build(root: Node, mat: set[Node]) -> tuple[FusedKernel, set[Node]]:
    if root.op == "reduce":
        k = FusedKernel(root, root.args[0].shape, root.attrs["axes"], True)
    else:
        k = FusedKernel(root, root.shape, (), False)
    extra: set[Node] = set()
    seen: set[Node] = set()
    axes: list[tuple[int, ...] | None] = [k.axes if root.op == "reduce" else None]

    def visit(n: Node):
        if n in seen:
            return
        seen.add(n)
        if n is not root and (n in mat or n.op not in ("ew", "reduce") or n.fn == "shift"):
            if n not in k.leaves:
                k.leaves.append(n)
            return
        if n.op == "reduce":
            fusable = n.args[0].shape == k.domain and (axes[0] is None or axes[0] ==
                                                       n.attrs["axes"])
            if n.fn in ("argmax", "argmin") and n is not root:
                fusable = False
            if not fusable:
                extra.add(n)
                return
            axes[0] = n.attrs["axes"]
            visit(n.args[0])
            k.stats.append(n)     # after its argument's stats: dependency order
            return
        for a in n.inputs():
            if a.op == "reduce" or a in mat or a.op not in ("ew",):
                visit(a)
            elif _in_domain(a.shape, k.domain):
                visit(a)
            else:
                extra.add(a)

    visit(root)
    k.axes = axes[0] or ()
    if root.op == "ew" and k.stats and not extra and _too_few_ctas(k):
        # reduce-and-apply over a long reduction with few kept rows (batch norm over a few
        # channels): each statistic becomes its own reduction kernel (split across CTAs),
        # and the apply pass an elementwise kernel over the whole domain
        extra.update(k.stats)
    for leaf in k.leaves:
        if not _in_domain(leaf.shape, k.domain) and leaf not in extra:
            # a leaf that does not broadcast into the domain (cannot happen for well-formed
            # graphs; kept as a guard)
            raise ValueError(f"{leaf} does not broadcast into {k.domain}")
    return k, extra


__all__ = ["FusedKernel", "Plan", "Step", "partition"]
