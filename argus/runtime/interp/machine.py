"""The interpreter's machine: everything that is not one op's semantics.

It holds the kernel's global tensors and runtime scalars, the per-group value environments,
shared-memory views, pipeline (mbarrier ring) state, and it schedules the grid: CTAs one after
another, the CTAs of a cluster together, and with roles every (role, warpgroup) instance as a
coroutine. What an op does is its rule's business (registry.RULES, filled by the family
modules); `run_op` only looks the rule up.

Invariant: a round in which every live coroutine blocked and no pipeline slot or ordered-section
turn changed state (`events` did not move) is reported as a deadlock, as the mbarrier ring or
the named barriers would hang on the GPU.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from argus import dtypes
from argus.dtypes import DType
from argus.errors import ArgusError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.runtime.interp.registry import lookup


class InterpError(ArgusError):
    """The kernel did something the semantics forbid (deadlock, out-of-range view …)."""


@dataclass
class _View:
    buffer: np.ndarray
    stage: int | None
    row0: int
    rows: int
    buffer_id: int = -1

    def on(self, buffer: np.ndarray) -> "_View":
        """The same window of another CTA's copy of the buffer (multicast)."""
        return _View(buffer, self.stage, self.row0, self.rows, self.buffer_id)

    def array(self) -> np.ndarray:
        base = self.buffer if self.stage is None else self.buffer[self.stage]
        if self.row0 < 0 or self.row0 + self.rows > base.shape[0]:
            raise InterpError(f"shared-memory view rows [{self.row0}, {self.row0 + self.rows}) "
                              f"outside the buffer's {base.shape[0]} rows")
        return base[self.row0:self.row0 + self.rows]


@dataclass
class _PipeState:
    stages: int
    consumers: int
    producers: int = 1   # producers whose step must land before a slot is full (cluster)
    fills: list[int] = field(default_factory=list)
    releases: list[int] = field(default_factory=list)
    arrivals: dict[tuple[int, int], int] = field(default_factory=dict)
    payloads: list = field(default_factory=list)   # each slot's int32 word (payload=True)

    def __post_init__(self):
        self.fills = [0] * self.stages
        self.releases = [0] * self.stages
        self.payloads = [None] * self.stages


class _Blocked:
    """Yielded by a coroutine that cannot make progress; carries what it waits for."""

    def __init__(self, why: str):
        self.why = why


@dataclass
class _Group:
    """One executing group: the CTA, or a (role, warpgroup) instance."""

    name: str
    env: dict[int, Any]
    counters: dict[int, int] = field(default_factory=dict)  # per-pipe step counter
    rank: int = 0                                            # CTA rank in its cluster
    peers: list = field(default_factory=list)                # CTA envs of the cluster
    role: Any = None                                         # the RoleOp of a role instance
    wg: int = 0                                              # its warpgroup index in the role
    cta: str = ""                                            # the CTA it belongs to


def _round(values: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype.is_float:
        return dtypes.round_to(np.asarray(values, dtype=np.float32), dtype).astype(np.float32)
    return np.asarray(values).astype(dtype.np_dtype())


class _Interp:
    def __init__(self, kernel: Kernel, tensors: dict[int, np.ndarray], scalars: dict[int, Any]):
        self.kernel = kernel
        self.tensors = tensors
        self.scalars = scalars
        self.events = 0  # pipeline and turn state changes, for deadlock detection
        # ordered sections: (CTA, role, section name) -> [turns taken, warpgroup holding it]
        self.turns: dict[tuple[str, str, str], list] = {}

    # -- scalar & tile evaluation --------------------------------------------------------
    def val(self, g: _Group, v: Value) -> Any:
        try:
            return g.env[v.id]
        except KeyError:
            raise InterpError(f"value {v} used before definition in {g.name}") from None

    def run_region(self, g: _Group, region: Region) -> Iterator[_Blocked]:
        for op in region.ops:
            yield from self.run_op(g, op)

    def run_op(self, g: _Group, op: O.Op) -> Iterator[_Blocked]:
        fn = lookup(type(op))
        if fn is None:
            raise InterpError(f"the interpreter has no rule for {op.NAME}")
        steps = fn(self, g, op)
        if steps is not None:  # a rule that can block is a generator
            yield from steps

    # -- global memory (boxes of tensors, clipped at the edges) ---------------------------
    def _box(self, tensor: Value, offsets: list[int], shape, fill: float) -> np.ndarray:
        src = self.tensors[tensor.id]
        lead = len(offsets) - len(shape)  # a 2-D box of a batched tensor: unit leading dims
        if lead > 0:
            return self._box(tensor, offsets, (1,) * lead + tuple(shape), fill).reshape(shape)
        # float tensors widen to float32 registers; integer ones keep their type (exact)
        out = np.full(shape, fill, dtype=np.float32 if src.dtype.kind == "f" else src.dtype)
        src_sl, dst_sl = [], []
        for off, n, dim in zip(offsets, shape, src.shape):
            lo, hi = max(off, 0), min(off + n, dim)
            if hi <= lo:
                return out
            src_sl.append(slice(lo, hi))
            dst_sl.append(slice(lo - off, hi - off))
        out[tuple(dst_sl)] = src[tuple(src_sl)]
        return out

    def _write(self, tensor: Value, offsets: list[int], tile: np.ndarray,
               add: bool = False) -> None:
        """Store `tile` at `offsets` (clipped at the tensor's edges); add=True adds it to the
        elements there instead (an atomic add: this machine runs one group at a time)."""
        dst = self.tensors[tensor.id]
        lead = len(offsets) - tile.ndim
        if lead > 0:
            tile = tile.reshape((1,) * lead + tile.shape)
        src_sl, dst_sl = [], []
        for off, n, dim in zip(offsets, tile.shape, dst.shape):
            lo, hi = max(off, 0), min(off + n, dim)
            if hi <= lo:
                return
            dst_sl.append(slice(lo, hi))
            src_sl.append(slice(lo - off, hi - off))
        part = tile[tuple(src_sl)]
        if add:
            part = dst[tuple(dst_sl)] + part.astype(dst.dtype)
        dst[tuple(dst_sl)] = _round(part, tensor.type.dtype)

    # -- CTAs -------------------------------------------------------------------------------
    def run(self) -> None:
        body = self.kernel.body
        grid_op = next(op for op in body.ops if isinstance(op, O.GridIds))
        probe = _Group("grid", dict(self.scalars))
        prologue = body.ops[:body.ops.index(grid_op)]
        for op in prologue:
            for _ in self.run_op(probe, op):
                raise InterpError("blocking op before ag.grid")
        extents = [self.val(probe, e) for e in grid_op.extents]
        cluster = tuple(grid_op.cluster)[:len(extents)]
        if any(e % c for e, c in zip(extents, cluster)):
            raise InterpError(f"grid {tuple(extents)} is not a multiple of the cluster "
                              f"{tuple(cluster)}")
        rest = body.ops[body.ops.index(grid_op) + 1:]
        # CTAs of one cluster run together (they share multicast data and barriers); clusters
        # and lone CTAs run one after another.
        origins = itertools.product(*(range(0, e, c) for e, c in zip(extents, cluster)))
        for origin in origins:
            ctas = []
            # %cluster_ctarank numbers x fastest, then y, then z (PTX ISA special registers)
            offsets = [tuple(reversed(o)) for o in
                       itertools.product(*(range(c) for c in reversed(cluster)))]
            for rank, offset in enumerate(offsets):
                pid = tuple(o + d for o, d in zip(origin, offset))
                env = dict(probe.env)
                for v, i in zip(grid_op.ids, pid):
                    env[v.id] = i
                ctas.append(_Group(f"cta{pid}", env, rank=rank))
            self.run_cluster(ctas, rest)

    def run_cluster(self, ctas: list[_Group], ops) -> None:
        peers = [c.env for c in ctas]
        for c in ctas:
            c.peers = peers
        if len(ctas) == 1:
            self.run_cta(ctas[0], ops)
            return
        roles = [op for op in ops if isinstance(op, O.RoleOp)]
        if not roles:
            for c in ctas:
                self.run_cta(c, ops)
            return
        multicast_pipes = {op.pipe.id for op in self.kernel.walk() if isinstance(op, O.Produce)
                           and any(isinstance(t, O.TmaLoad) and t.multicast
                                   for t in op.body.walk())}
        for c in ctas:
            for op in ops:
                if not isinstance(op, O.RoleOp):
                    for _ in self.run_op(c, op):
                        raise InterpError("blocking op outside roles")
        for vid in multicast_pipes:  # one barrier state for the whole cluster
            shared = ctas[0].env[vid]
            shared.consumers *= len(ctas)
            shared.producers = len(ctas)
            for c in ctas:
                c.env[vid] = shared
        coroutines = []
        for c in ctas:
            coroutines += self.role_coroutines(c, roles)
        self.schedule(coroutines)

    def role_coroutines(self, cta: _Group, roles) -> list:
        out = []
        for r in roles:
            for wg in range(r.warpgroups):
                g = _Group(f"{cta.name}/{r.name}[{wg}]", dict(cta.env), rank=cta.rank,
                           peers=cta.peers, role=r, wg=wg, cta=cta.name)
                g.env[r.index.id] = wg
                out.append((g, self.run_region(g, r.body)))
        return out

    def run_cta(self, cta: _Group, ops) -> None:
        roles = [op for op in ops if isinstance(op, O.RoleOp)]
        if not roles:
            for _ in self.run_region(cta, Region(tuple(ops))):
                raise InterpError(f"{cta.name}: a pipeline step blocks forever outside roles "
                                  f"(deadlock)")
            return
        for op in ops:
            if not isinstance(op, O.RoleOp):
                for _ in self.run_op(cta, op):
                    raise InterpError("blocking op outside roles")
        self.schedule(self.role_coroutines(cta, roles))

    def schedule(self, coroutines) -> None:
        # Round-robin: every live instance runs until it blocks or ends. A round in which all
        # live instances blocked and no pipeline slot changed state is a deadlock.
        live = list(coroutines)
        while live:
            events_before = self.events
            reasons = []
            for g, co in list(live):
                try:
                    reasons.append(next(co).why)
                except StopIteration:
                    live.remove((g, co))
                    events_before = -1  # an instance finished: that is progress
            if live and self.events == events_before:
                raise InterpError("deadlock: every live warpgroup waits (pipeline or turn):\n  "
                                  + "\n  ".join(reasons))
