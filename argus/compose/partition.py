"""Partition a compose Graph into kernels and free views.

Materialized tensors: the forward's inputs and parameters, the output, every operand and result
of a matmul, scan or torch op, and every tensor a view or permute reads. Each materialized
elementwise or reduce node roots one fused tile kernel (argus/compose/tile.py) that computes it
from materialized tensors, inlining every elementwise producer (recomputed where two kernels
share it) and every reduction over the kernel's own domain and axes as a *statistic* computed
in an earlier pass of the same kernel (softmax: max, then sum of exp; layer norm: mean, then
the mean of squared deviations; then the apply pass). A reduction over another domain or other
axes is materialized by its own kernel first, except where an elementwise result is computed
only from two or more reductions over one domain and axes (a triplet loss's two distances): it
roots one kernel that reduces them all in one pass and applies itself to the kept rows
(_sibling_stats; keepdim=False views of those reductions are read as the statistics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from argus.compose.graph import Graph, Node
from argus.compose.rewrite import sink_into_max_pools

TENSOR_OPS = ("matmul", "scan", "pool", "conv", "torch", "flip", "diag")   # materialized
VIEW_OPS = ("view", "permute", "slice", "select")        # free views of a materialized tensor


@dataclass(eq=False)
class FusedKernel:
    root: Node
    domain: tuple[int, ...]
    axes: tuple[int, ...]            # reduced axes of the domain; () for elementwise
    kept_output: bool                # the root is a reduction: output = domain with axes = 1
    stats: list[Node] = field(default_factory=list)   # in-kernel reductions, dependency order
    leaves: list[Node] = field(default_factory=list)  # materialized inputs
    aliases: dict = field(default_factory=dict)       # unit view -> the statistic it shows


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

    @property
    def argus_steps(self) -> int:
        """Steps that launch Argus kernels: fused tile kernels and the template ops (GEMM,
        scan, pool, conv); views are free and torch steps are not ours."""
        return sum(1 for s in self.steps if s.kind not in VIEW_OPS + ("torch",))


def _in_domain(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    if len(shape) > len(domain):
        return False
    return all(s in (1, d) for s, d in zip(shape[::-1], domain[::-1]))


def partition(g: Graph) -> Plan:
    sink_into_max_pools(g)      # maxpool(x / 2) -> maxpool(x) / 2: argus/compose/rewrite.py
    live = g.live()
    mat: set[Node] = {g.output}
    for n in live:
        if n.op in TENSOR_OPS:
            mat.add(n)
            mat.update(n.inputs())
        elif n.op in VIEW_OPS or n.fn == "shift":
            if not _unit_view(n):         # else materialized where a kernel reads it (_build)
                mat.update(n.inputs())
    while True:
        for n in live:                    # a unit view read as a tensor reads its reduction
            if n in mat and _unit_view(n):
                mat.add(n.args[0])
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
            if n in mat or not _unit_view(n):      # else inlined as its statistic
                steps.append(Step(n.op, n))
        elif n.op in ("matmul", "scan", "pool", "conv"):
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


def _squeezed(domain: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for i, d in enumerate(domain) if i not in axes)


def _unit_view(n: Node) -> bool:
    """A view of a reduction that only drops or adds size-1 dims (a keepdim=False sum)."""
    if n.op != "view" or n.args[0].op != "reduce":
        return False
    return tuple(d for d in n.shape if d != 1) == tuple(d for d in n.args[0].shape if d != 1)


def _sibling_stats(n: Node, mat: set[Node]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(domain, axes) when the elementwise node n is computed only from two or more
    reductions over one domain and the same axes (and numbers): n then roots one kernel that
    reduces them all in one pass over the domain and applies n to the kept rows. A triplet
    loss's two distances read the anchor twice in two kernels otherwise. Kernels of too few
    kept rows to fill the GPU keep the split reductions (one per kernel) instead."""
    if n.op != "ew" or not n.dtype.is_floating_point:
        return None
    reds: set[Node] = set()
    seen: set[Node] = set()
    stack = [n]
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        if m is not n and m in mat or m.fn == "shift":
            if math.prod(m.shape) > 1:
                return None
            continue
        if _unit_view(m) and m.args[0] not in mat:
            m = m.args[0]
        if m.op == "reduce":
            if m.fn in ("argmax", "argmin"):
                return None
            reds.add(m)
            continue
        if m.op != "ew":
            if math.prod(m.shape) > 1:
                return None
            continue
        stack.extend(m.inputs())
    keys = {(r.args[0].shape, tuple(r.attrs["axes"])) for r in reds}
    if len(reds) < 2 or len(keys) != 1:
        return None
    domain, axes = next(iter(keys))
    squeezed = _squeezed(domain, axes)
    if n.shape not in (squeezed, tuple(1 if i in axes else d for i, d in enumerate(domain))):
        return None
    if math.prod(squeezed) < 4 * MIN_CTAS or not axes:
        return None
    return domain, axes


def _build(root: Node, mat: set[Node]) -> tuple[FusedKernel, set[Node]]:
    sibling = _sibling_stats(root, mat) if root.op == "ew" else None
    if root.op == "reduce":
        k = FusedKernel(root, root.args[0].shape, root.attrs["axes"], True)
    elif sibling is not None:               # reductions of one pass, applied to kept rows
        k = FusedKernel(root, sibling[0], sibling[1], True)
    else:
        k = FusedKernel(root, root.shape, (), False)
    kept_rows = _squeezed(k.domain, k.axes) if sibling is not None else None
    extra: set[Node] = set()
    seen: set[Node] = set()
    axes: list[tuple[int, ...] | None] = [k.axes if k.kept_output else None]

    def visit(n: Node):
        if n in seen:
            return
        seen.add(n)
        if n is not root and n.op == "ew" and n not in mat:
            sib = _sibling_stats(n, mat)
            if sib is not None and sib != (k.domain, tuple(axes[0] or ())):
                extra.add(n)      # its reductions are another domain's: one kernel of its own
                return
        if _unit_view(n) and n not in mat:
            r = n.args[0]
            if kept_rows is not None and r not in mat and r.args[0].shape == k.domain and \
                    tuple(r.attrs["axes"]) == k.axes:
                k.aliases[n] = r          # the statistic itself, seen without its unit dims
                visit(r)
                return
            extra.update((n, r))          # read as a tensor here: materialized
            return
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
            elif _in_domain(a.shape, k.domain) or a.shape == kept_rows:
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
