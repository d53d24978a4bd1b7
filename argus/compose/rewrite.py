"""Graph rewrites that run before partitioning (`argus.compose.partition.partition`).

`sink_into_max_pools`: an elementwise step y = f(x) that is monotone non-decreasing in x and
exact to move, applied to the whole input of a max pool, is applied to the pool's (smaller)
output instead: maxpool(f(x)) -> f(maxpool(x)). The f taken: x * c and c * x and x / c for a
number c > 0, x + c, c + x and x - c for a finite number c, of floating-point x only (an
integer x + c wraps past the type's largest value). For each of them the rounded
operation fl(f(x)) is monotone non-decreasing in x, so the window's largest input gives the
largest output and the two orders give the same bits (NaN propagates through both). The
pool then reads the convolution (or whatever made x) directly and f joins the fused kernel
after the pool, on the pool's output: KernelBench L2/8 (Conv3d, x / 2, MaxPool3d(2), ...)
ran the divide as its own pass over the 441 MB convolution output (argus_fused1, 0.206 ms on
the H200, 2026-12-04); after the rewrite it is one multiply in the kernel that reduces the
pool's 8x smaller output. Average pools are linear but not exact to reorder (rounding): not
taken.
"""

from __future__ import annotations

import math

from argus.compose.graph import Graph, Node, is_number


def _monotone_operand(n: Node) -> Node | None:
    """The one Node operand x of `n` if n is f(x) with f monotone non-decreasing and exact to
    move past a max (see the module docstring), else None."""
    if n.op != "ew" or len(n.args) != 2:
        return None
    a, b = n.args
    fn = n.fn
    if isinstance(a, Node) and is_number(b):
        x, c, first = a, float(b), True
    elif isinstance(b, Node) and is_number(a):
        x, c, first = b, float(a), False
    else:
        return None
    if not math.isfinite(c) or x.shape != n.shape or x.dtype != n.dtype or \
            not n.dtype.is_floating_point:
        # integers wrap: x + 1 at the type's largest value is its smallest, not monotone
        return None
    if fn == "mul" and c > 0:
        return x
    if fn == "div" and first and c > 0:
        return x
    if fn == "add" or (fn == "sub" and first):
        return x
    return None


def sink_into_max_pools(g: Graph) -> int:
    """Rewrite every maxpool(f(x)) in `g` (f as `_monotone_operand` takes it, f(x) read by the
    pool alone and not the graph's output) as f(maxpool(x)), repeatedly (a chain of such
    steps all move); returns how many steps moved."""
    moved = 0
    while True:
        users = g.users()
        for pool in g.nodes:
            if pool.op != "pool" or pool.attrs.get("kind") != "max":
                continue
            f = pool.args[0]
            x = _monotone_operand(f) if isinstance(f, Node) else None
            if x is None or users[f] != [pool] or f is g.output or f.dtype != pool.dtype:
                continue
            pool.args = (x,) + tuple(pool.args[1:])
            after = Node("ew", tuple(pool if a is x else a for a in f.args), pool.shape,
                         f.dtype, dict(f.attrs), name=f"n{len(g.nodes)}")
            for u in users[pool]:
                u.args = tuple(after if a is pool else a for a in u.args)
            if g.output is pool:
                g.output = after
            g.nodes.insert(g.nodes.index(pool) + 1, after)
            g.nodes.remove(f)
            moved += 1
            break
        else:
            return moved


__all__ = ["sink_into_max_pools"]
