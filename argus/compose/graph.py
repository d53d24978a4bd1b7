"""The compose IR: a task's forward as a DAG of a few primitive ops, with static shapes.

Ops (`Node.op`):
  leaf     a tensor that exists at run time: a forward input (`attrs["input"]`), a parameter or
           buffer (`attrs["param"]`, its qualified name, so the judge's state dict loads)
  ew       elementwise `attrs["fn"]` over args (Nodes or Python numbers) with numpy
           broadcasting; fns are the DSL's (argus/ir/ops.py ELEMENTWISE_FNS) plus `iota`
           (the output coordinate along `attrs["axis"]`, for triu/tril) and `cast`
  reduce   `attrs["fn"]` in sum/max/min/prod/argmax/argmin over `attrs["axes"]` (keepdim; a
           reduction that drops dims is a reduce followed by a view)
  view     a reshape of a contiguous tensor (free: a torch view)
  permute  a permutation of the dims (a torch view; a kernel that needs the innermost dim
           contiguous gets a transposing Argus copy)
  matmul   A [..., M, K] @ B [..., K, N] with broadcast batch dims
  scan     cumulative `attrs["fn"]` (sum/prod) along `attrs["axis"]` (reverse, exclusive)
  torch    an op without a template: the original torch call, run by torch (partial)

Shapes are concrete (the capture's), so every number a kernel needs is known when it is built;
`argus.compose.runtime` lowers again when a forward sees new shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

FLOAT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass(eq=False)
class Node:
    op: str
    args: tuple
    shape: tuple[int, ...]
    dtype: torch.dtype
    attrs: dict = field(default_factory=dict)
    name: str = ""

    @property
    def fn(self) -> str:
        return self.attrs.get("fn", "")

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def inputs(self) -> list["Node"]:
        return [a for a in self.args if isinstance(a, Node)]

    def __repr__(self) -> str:
        what = self.attrs.get("fn") or self.attrs.get("param") or self.attrs.get("input", "")
        return f"{self.name}={self.op}[{what}]{list(self.shape)}"


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


class Graph:
    """The DAG: nodes in creation (topological) order, the forward's inputs and outputs."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.inputs: list[Node] = []
        self.output: Node | None = None
        self.unsupported: list[str] = []   # torch ops kept as `torch` nodes, by name

    def add(self, op: str, args, shape, dtype, **attrs) -> Node:
        node = Node(op, tuple(args), tuple(int(d) for d in shape), dtype, attrs,
                    name=f"n{len(self.nodes)}")
        self.nodes.append(node)
        return node

    # ------------------------------------------------------------------ builders (fold numbers)
    def ew(self, fn: str, *args, dtype: torch.dtype | None = None, shape=None) -> Node | float:
        nodes = [a for a in args if isinstance(a, Node)]
        if not nodes:
            raise ValueError(f"ew {fn} of numbers only")
        out_shape = tuple(shape) if shape is not None else broadcast(*(a.shape for a in nodes))
        if dtype is None:
            if fn in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not"):
                dtype = torch.bool
            else:
                vals = nodes[1:] if fn == "where" else nodes
                dtype = next((a.dtype for a in vals if a.dtype in FLOAT), None) or \
                    (torch.float32 if any(isinstance(a, float) for a in args) else vals[0].dtype)
        return self.add("ew", args, out_shape, dtype, fn=fn)

    def users(self) -> dict[Node, list[Node]]:
        out: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.inputs():
                out[a].append(n)
        return out

    def live(self) -> list[Node]:
        """Nodes the output depends on, in topological order."""
        seen: set[int] = set()
        stack = [self.output]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.extend(n.inputs())
        return [n for n in self.nodes if id(n) in seen]


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


__all__ = ["FLOAT", "Graph", "Node", "broadcast", "is_number"]
