"""Rendering rules of the scalar ops: const, arith, grid ids, cluster rank, thread index.

A scalar is a C name: constants are literals, everything else a `const` local named v<id>.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import SCALAR_C, _Emitter, c_float, rule, shl_c
from argus.ir import ops as O

_ARITH_C = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "mod": "%",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
            "and": "&&", "or": "||", "bitand": "&", "bitor": "|", "bitxor": "^", "shr": ">>"}


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
    if op.fn == "shl":   # through the unsigned type: C's signed overflow is undefined
        expr = shl_c(a, b, op.result.type.dtype)
    elif op.fn in ("min", "max"):
        cmp = "<" if op.fn == "min" else ">"
        expr = f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"
    else:
        expr = f"({a} {_ARITH_C[op.fn]} {b})"
    em.emit(f"const {ctype} {n} = {expr};")
    em.names[op.result.id] = n


@rule(O.GridIds)
def grid_ids(em: _Emitter, op: O.GridIds) -> None:
    """Program ids. Without clusters a grid whose y or z passes CUDA's 65535 is launched folded
    onto x (runtime/interp/launch.py `launch_grid`): then gridDim.y and .z are 1 while the
    declared y or z extent is not, and the ids are decoded from blockIdx.x (x fastest, the
    order CUDA numbers CTAs in, so the ids are the same as an unfolded launch's)."""
    if len(op.ids) == 1 or tuple(op.cluster) != (1, 1, 1):
        for axis, v in zip("xyz", op.ids):
            em.names[v.id] = f"v{v.id}"
            em.emit(f"const int v{v.id} = (int)blockIdx.{axis};")
        return
    ext = [f"(unsigned)({em.names[e.id]})" for e in op.extents]
    folded = f"grid_folded{op.ids[0].id}"
    em.emit(f"const bool {folded} = gridDim.y * gridDim.z == 1u && "
            f"{' * '.join(ext[1:])} > 1u;")
    inner = "1u"
    for axis, (v, e) in enumerate(zip(op.ids, ext)):
        em.names[v.id] = f"v{v.id}"
        linear = "blockIdx.x" if axis == 0 else f"(blockIdx.x / ({inner}))"
        last = axis == len(op.ids) - 1
        decoded = linear if last else f"{linear} % {e}"
        em.emit(f"const int v{v.id} = {folded} ? (int)({decoded}) : (int)blockIdx.{'xyz'[axis]};")
        inner = e if axis == 0 else f"{inner} * {e}"


@rule(O.ClusterRank)
def cluster_rank(em: _Emitter, op: O.ClusterRank) -> None:
    em.emit(f"const int v{op.result.id} = (int)ag::cluster_ctarank();")
    em.names[op.result.id] = f"v{op.result.id}"


@rule(O.ThreadIndex)
def thread_index(em: _Emitter, op: O.ThreadIndex) -> None:
    em.names[op.result.id] = "gtid"
