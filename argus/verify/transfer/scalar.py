"""Transfer functions of the scalar ops: constants, integer arithmetic, program ids, the cluster
rank and thread indices.

Job: give every scalar result its z3 term (INVARIANTS.md §3.1): constants as Python ints,
arithmetic through `Model._arith` (an opaque fresh integer where it has no exact term), program
ids and thread indices as bounded variables over the launch.

Invariant kept: every variable introduced here is bounded by a premise (0 <= pid < extent,
0 <= tid < threads, cluster digits inside the cluster), so a counterexample names a real CTA and
thread; a value without an exact term is a fresh unconstrained integer, never a guess.
"""

from __future__ import annotations

from typing import Any

from argus.ir import ops as O
from argus.verify.tagdomain import fresh_int
from argus.verify.transfer.domain import Rule, VarInfo, _num, _Unsupported


def const(m: Model, op: O.Const, scopes, role, counters, following) -> None:
    m.sym[op.result.id] = op.value


def arith(m: Model, op: O.Arith, scopes, role, counters, following) -> None:
    r = m._arith(op)
    if r is None:
        r = fresh_int(f"opaque{op.result.id}")
    m.sym[op.result.id] = r


def grid_ids(m: Model, op: O.GridIds, scopes, role, counters, following) -> None:
    """Program ids; on a clustered dim d, pid_d = c_d * cluster_d + rank_d with
    0 <= rank_d < c_d (PTX %ctaid = %clusterid * %cluster_nctaid + %cluster_ctaid), the
    whole cluster inside the grid (a launch whose extent is not a multiple of the cluster
    fails), and %cluster_ctarank = rank_x + c_x * (rank_y + c_y * rank_z)."""
    m.grid = op
    cluster = tuple(op.cluster) + (1,) * (3 - len(op.cluster))
    if any(c > 1 for c in cluster[len(op.ids):]):
        m.note_unsupported(op.loc, f"cluster {cluster} spans grid dimensions the grid "
                                   f"does not have")
        cluster = (1, 1, 1)
    stride = 1
    rank: Any = 0
    for d, (v, e) in enumerate(zip(op.ids, op.extents)):
        ext = _num(m.scalar(e))
        c = cluster[d]
        if c == 1:
            pid = m._var(f"pid{d}_{v.id}", VarInfo("pid", f"program id {d}", v, op))
            m.premises += [pid >= 0, pid < ext]
            m.grid_vars.append((pid, 0, ext))
        else:
            cid = m._var(f"cluster{d}_{v.id}",
                         VarInfo("cluster", f"cluster index {d}", v, op))
            r = m._var(f"rank{d}_{v.id}",
                       VarInfo("rank", f"CTA rank along dim {d} of its cluster", v, op))
            pid = c * cid + r
            m.premises += [cid >= 0, r >= 0, r < c, c * cid + c <= ext]
            m._pid_split[v.id] = (cid, r, c)
            m.rank_digits.append((r, c, stride))
            m.grid_vars += [(cid, 0, ext / c), (r, 0, c)]
            digit = r * stride if stride > 1 else r
            rank = digit if isinstance(rank, int) else rank + digit
        m.sym[v.id] = pid
        stride *= c
    m.cluster = cluster
    m.cluster_size = cluster[0] * cluster[1] * cluster[2]
    m.rank_term = rank


def cluster_rank(m: Model, op: O.ClusterRank, scopes, role, counters, following) -> None:
    if m.grid is None:
        raise _Unsupported("ag.cluster_rank() before ag.grid: the rank is not tied to "
                           "the program ids")
    m.sym[op.result.id] = m.rank_term


def thread_index(m: Model, op: O.ThreadIndex, scopes, role, counters, following) -> None:
    t = m._var(f"tid{op.result.id}", VarInfo("thread", "thread index", op.result, op))
    m.sym[op.result.id] = t
    group = 128 if role is not None else m.threads
    m.premises += [t >= 0, t < group]


RULES: dict[type, Rule] = {
    O.Const: const,
    O.Arith: arith,
    O.GridIds: grid_ids,
    O.ClusterRank: cluster_rank,
    O.ThreadIndex: thread_index,
}
