"""Rendering rules of the scalar ops: const, arith, grid ids, cluster rank, thread index.

A scalar is a C name: constants are literals, everything else a `const` local named v<id>.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import SCALAR_C, _Emitter, c_float, rule
from argus.ir import ops as O

_ARITH_C = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "mod": "%",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
            "and": "&&", "or": "||"}


@rule(O.Const)
def const(em: _Emitter, op: O.Const) -> None:
    v = op.value
    em.names[op.result.id] = ("true" if v else "false") if isinstance(v, bool) else (
        c_float(v) if isinstance(v, float) else str(v))


@rule(O.Arith)
def arith(em: _Emitter, op: O.Arith) -> None:
    a, b = em.name(op.lhs), em.name(op.rhs)
    ctype = SCALAR_C[op.result.type.dtype.name]
    n = f"v{op.result.id}"
    if op.fn in ("min", "max"):
        cmp = "<" if op.fn == "min" else ">"
        expr = f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"
    else:
        expr = f"({a} {_ARITH_C[op.fn]} {b})"
    em.emit(f"const {ctype} {n} = {expr};")
    em.names[op.result.id] = n


@rule(O.GridIds)
def grid_ids(em: _Emitter, op: O.GridIds) -> None:
    for axis, v in zip("xyz", op.ids):
        em.names[v.id] = f"v{v.id}"
        em.emit(f"const int v{v.id} = (int)blockIdx.{axis};")


@rule(O.ClusterRank)
def cluster_rank(em: _Emitter, op: O.ClusterRank) -> None:
    em.emit(f"const int v{op.result.id} = (int)ag::cluster_ctarank();")
    em.names[op.result.id] = f"v{op.result.id}"


@rule(O.ThreadIndex)
def thread_index(em: _Emitter, op: O.ThreadIndex) -> None:
    em.names[op.result.id] = "gtid"
