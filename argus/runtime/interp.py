"""The numpy interpreter: the executable definition of Argus IR semantics (no GPU needed).

Each CTA of the grid runs in turn. Without roles, the CTA is one group executing the body.
With roles, every (role, warpgroup) instance runs as a coroutine; a pipeline step blocks
exactly as the mbarrier ring does on the hardware (a producer waits until its slot was released
as often as it was filled; a consumer waits until the slot holds its iteration's fill), so a
protocol that would hang on the GPU is reported as a deadlock here.

Numerics: tiles compute in float32 (bf16/f16 values are stored rounded, as on the device);
integer `floordiv`/`mod` on runtime scalars follow C (truncate toward zero), like the
generated CUDA.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from argus import dtypes
from argus.dtypes import DType
from argus.errors import ArgusError, LaunchError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.ir.tag_ops import is_tag_op
from argus.ir.types import ScalarType, TensorType, TileType


class InterpError(ArgusError):
    """The kernel did something the semantics forbid (deadlock, out-of-range view …)."""


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise InterpError("integer division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


_ARITH = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": _c_div, "mod": _c_mod,
    "min": min, "max": max, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "and": lambda a, b: bool(a) and bool(b),
    "or": lambda a, b: bool(a) or bool(b),
}

_EW = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "erf": lambda x: np.vectorize(math.erf, otypes=[np.float32])(x),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "recip": lambda x: 1.0 / x,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "where": np.where,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
}


def _reduce(fn: str, x: np.ndarray, axis: int, dtype: DType) -> np.ndarray:
    """numpy's reduction with keepdims: floats in float32 (the device combines in f32
    registers), integers in int64 then the result dtype; argmax/argmin as numpy (first index of
    the extreme; NaN counts as the extreme) in int32."""
    if fn in ("argmax", "argmin"):
        f = np.argmax if fn == "argmax" else np.argmin
        return np.expand_dims(f(x, axis=axis), axis).astype(np.int32)
    f = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[fn]
    if dtype.is_float:
        with np.errstate(all="ignore"):
            return f(x.astype(np.float32), axis=axis, keepdims=True).astype(np.float32)
    return f(x.astype(np.int64), axis=axis, keepdims=True).astype(dtype.np_dtype())


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

    def __post_init__(self):
        self.fills = [0] * self.stages
        self.releases = [0] * self.stages


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


def _round(values: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype.is_float:
        return dtypes.round_to(np.asarray(values, dtype=np.float32), dtype).astype(np.float32)
    return np.asarray(values).astype(dtype.np_dtype())


class _Interp:
    def __init__(self, kernel: Kernel, tensors: dict[int, np.ndarray], scalars: dict[int, Any]):
        self.kernel = kernel
        self.tensors = tensors
        self.scalars = scalars
        self.events = 0  # pipeline state changes, for deadlock detection

    # -- scalar & tile evaluation --------------------------------------------------------
    def val(self, g: _Group, v: Value) -> Any:
        try:
            return g.env[v.id]
        except KeyError:
            raise InterpError(f"value {v} used before definition in {g.name}") from None

    def run_region(self, g: _Group, region: Region) -> Iterator[_Blocked]:
        for op in region.ops:
            yield from self.run_op(g, op)

    def run_op(self, g: _Group, op: O.Op) -> Iterator[_Blocked]:  # noqa: C901 - a dispatcher
        env = g.env
        if isinstance(op, O.Const):
            env[op.result.id] = op.value
        elif isinstance(op, O.Arith):
            a, b = self.val(g, op.lhs), self.val(g, op.rhs)
            r = _ARITH[op.fn](a, b)
            if isinstance(op.result.type, ScalarType) and op.result.type.dtype.kind == "int":
                r = int(r)
            env[op.result.id] = r
        elif isinstance(op, O.GridIds):
            pass  # bound by the CTA loop
        elif isinstance(op, O.ThreadIndex):
            raise InterpError("ag.thread_index() has no tile-level meaning in the interpreter",
                              )
        elif isinstance(op, O.For):
            start, stop, step = (self.val(g, v) for v in (op.start, op.stop, op.step))
            if step <= 0:
                raise InterpError(f"ag.range at {op.loc} got step {step} at run time; the step "
                                  f"must be positive (the GPU kernel traps)")
            for i in range(start, stop, step):
                env[op.var.id] = i
                yield from self.run_region(g, op.body)
        elif isinstance(op, O.If):
            if self.val(g, op.cond):
                yield from self.run_region(g, op.body)
        elif isinstance(op, O.RoleOp):
            raise InterpError("nested role")  # roles are scheduled by run_cta
        elif isinstance(op, O.SmemAlloc):
            t = op.result.type
            env[op.result.id] = np.full(t.shape, np.nan, dtype=np.float32)
        elif isinstance(op, O.SmemSlice):
            stage = None if op.stage is None else self.val(g, op.stage)
            row0 = op.row0 if isinstance(op.row0, int) else self.val(g, op.row0)
            env[op.result.id] = _View(self.val(g, op.buffer), stage, row0,
                                      op.result.type.shape[0], op.buffer.id)
        elif isinstance(op, O.PipelineCreate):
            env[op.result.id] = _PipeState(op.result.type.stages, op.consumers)
        elif isinstance(op, O.Produce):
            p: _PipeState = self.val(g, op.pipe)
            n = g.counters.get(op.pipe.id, 0)
            s, phase = n % p.stages, n // p.stages
            while p.releases[s] < phase:
                yield _Blocked(f"{g.name} waits for slot {s} to be released (step {n})")
            env[op.stage.id] = s
            yield from self.run_region(g, op.body)
            p.fills[s] += 1
            self.events += 1
            g.counters[op.pipe.id] = n + 1
        elif isinstance(op, O.Consume):
            p = self.val(g, op.pipe)
            n = g.counters.get(op.pipe.id, 0)
            s, phase = n % p.stages, n // p.stages
            while p.fills[s] < (phase + 1) * p.producers:
                yield _Blocked(f"{g.name} waits for slot {s} to be filled (step {n})")
            env[op.stage.id] = s
            yield from self.run_region(g, op.body)
            key = (s, phase)
            p.arrivals[key] = p.arrivals.get(key, 0) + 1
            if p.arrivals[key] == p.consumers:
                p.releases[s] += 1
            self.events += 1
            g.counters[op.pipe.id] = n + 1
        elif isinstance(op, O.TmaLoad):
            view: _View = self.val(g, op.dst)
            coords = [self.val(g, c) for c in op.coords]
            box = self._box(op.tensor, coords, view.array().shape, 0.0)
            targets = ([view.on(peer[view.buffer_id]) for peer in g.peers]
                       if op.multicast else [view])
            for target in targets:
                target.array()[...] = box
        elif isinstance(op, O.ClusterRank):
            env[op.result.id] = g.rank
        elif isinstance(op, O.TmaStore):
            view = self.val(g, op.src)
            coords = [self.val(g, c) for c in op.coords]
            self._write(op.tensor, coords, view.array())
        elif isinstance(op, O.Wgmma):
            acc = self.val(g, op.acc)
            a = self.val(g, op.a)
            a = a if isinstance(a, np.ndarray) else a.array()  # registers, or a smem view
            b = self.val(g, op.b).array()
            k = op.k_extent

            def k_major(x):  # column atoms [MN/W][K][W] -> [K, MN] -> [MN, K]
                return x.reshape(-1, k, x.shape[1]).transpose(1, 0, 2).reshape(k, -1).T
            b_nk = k_major(b) if op.trans_b else b
            a = k_major(a) if op.trans_a else a
            acc += (a.astype(np.float64) @ b_nk.astype(np.float64).T).astype(np.float32)
        elif isinstance(op, O.StMatrix):
            self.val(g, op.dst).array()[...] = self.val(g, op.src)
        elif isinstance(op, O.LdMatrix):
            env[op.result.id] = self.val(g, op.src).array().copy()
        elif isinstance(op, O.Load):
            offs = [self.val(g, o) for o in op.offsets]
            env[op.result.id] = self._box(op.tensor, offs, op.result.type.shape, op.other)
        elif isinstance(op, O.LoadScalar):
            offs = [self.val(g, o) for o in op.offsets]
            src = self.tensors[op.tensor.id]
            inside = all(0 <= o < n for o, n in zip(offs, src.shape))
            x = src[tuple(offs)] if inside else op.other
            # an f32 scalar stays f32 in later arithmetic, as in the generated CUDA
            env[op.result.id] = (np.float32(x) if op.result.type.dtype.is_float
                                 else int(x))
        elif isinstance(op, O.Store):
            offs = [self.val(g, o) for o in op.offsets]
            value = self.val(g, op.value)
            self._write(op.tensor, offs, value.T if op.transposed else value)
        elif isinstance(op, O.Full):
            t: TileType = op.result.type
            env[op.result.id] = np.full(t.shape, op.value, dtype=np.float32)
        elif isinstance(op, O.Elementwise):
            args = [self.val(g, a) for a in op.args]
            with np.errstate(all="ignore"):
                r = _EW[op.fn](*[np.float32(a) if isinstance(a, float) else a for a in args])
            t = op.result.type
            env[op.result.id] = (np.asarray(r, dtype=bool) if t.dtype == dtypes.i1
                                 else _round(np.broadcast_to(r, t.shape), t.dtype))
        elif isinstance(op, O.Convert):
            env[op.result.id] = _round(self.val(g, op.src), op.result.type.dtype)
        elif isinstance(op, O.Reduce):
            env[op.result.id] = _reduce(op.fn, self.val(g, op.src), op.axis,
                                        op.result.type.dtype)
        elif isinstance(op, O.ConvertLayout):
            env[op.result.id] = np.array(self.val(g, op.src), copy=True)  # layouts: no meaning
        elif isinstance(op, O.Arange):
            env[op.result.id] = np.arange(op.result.type.shape[0], dtype=np.int32)
        elif isinstance(op, O.ExpandDims):
            env[op.result.id] = np.expand_dims(self.val(g, op.src), op.axis)
        elif isinstance(op, O.TileSlice):
            src = self.val(g, op.src)
            index = [slice(None)] * src.ndim
            index[op.axis] = slice(op.start, op.start + op.result.type.shape[op.axis])
            env[op.result.id] = src[tuple(index)]
        elif isinstance(op, O.Var):
            init = self.val(g, op.init)
            env[op.result.id] = (np.array(init, dtype=init.dtype, copy=True)
                                 if isinstance(init, np.ndarray) else init)
        elif isinstance(op, O.Assign):
            if isinstance(op.dst.type, TileType):
                self.val(g, op.dst)[...] = self.val(g, op.src)
            else:
                env[op.dst.id] = self.val(g, op.src)
        elif is_tag_op(op):
            pass  # tags and tag assertions are for the verifier; they change no data
        elif isinstance(op, O.SYNC_OPS):
            # fences, waits, barriers, slot releases, setmaxnreg: no-ops in these semantics,
            # where each warpgroup runs a step's ops in order and a consume step releases its
            # slot when it ends (what lower/sync's ops implement on the device)
            pass
        else:
            raise InterpError(f"the interpreter has no rule for {op.NAME}")
        return
        yield  # pragma: no cover - makes this a generator

    def _box(self, tensor: Value, offsets: list[int], shape, fill: float) -> np.ndarray:
        src = self.tensors[tensor.id]
        lead = len(offsets) - len(shape)  # a 2-D box of a batched tensor: unit leading dims
        if lead > 0:
            return self._box(tensor, offsets, (1,) * lead + tuple(shape), fill).reshape(shape)
        out = np.full(shape, fill, dtype=np.float32)
        src_sl, dst_sl = [], []
        for off, n, dim in zip(offsets, shape, src.shape):
            lo, hi = max(off, 0), min(off + n, dim)
            if hi <= lo:
                return out
            src_sl.append(slice(lo, hi))
            dst_sl.append(slice(lo - off, hi - off))
        out[tuple(dst_sl)] = src[tuple(src_sl)]
        return out

    def _write(self, tensor: Value, offsets: list[int], tile: np.ndarray) -> None:
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
        dst[tuple(dst_sl)] = _round(tile[tuple(src_sl)], tensor.type.dtype)

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
                           peers=cta.peers)
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
                raise InterpError("deadlock: every live warpgroup waits on the pipeline:\n  "
                                  + "\n  ".join(reasons))


def split_runtime_args(kernel: Kernel, args, kw) -> tuple[list, dict[str, Any]]:
    """Launch arguments -> (tensors in parameter order, runtime scalars by name). Without
    runtime scalars every positional argument is a tensor; with them (attr runtime_args) the
    positional arguments follow the signature order of tensors and scalars, and scalars may
    also come by keyword."""
    order = kernel.attr("runtime_args")
    scalar_names = [p.name for p in kernel.params if isinstance(p.value.type, ScalarType)
                    and order and p.name in order]
    if not order:
        if kw:
            raise LaunchError(f"kernel {kernel.name} has no runtime scalar parameters "
                              f"({', '.join(sorted(kw))})")
        return list(args), {}
    if len(args) > len(order):
        raise LaunchError(f"kernel {kernel.name} takes {len(order)} arguments "
                          f"({', '.join(order)}), got {len(args)}")
    named = dict(zip(order, args))
    for k, v in kw.items():
        if k in named:
            raise LaunchError(f"kernel {kernel.name}: {k} given twice")
        named[k] = v
    missing = [n for n in order if n not in named]
    if missing:
        raise LaunchError(f"kernel {kernel.name}: missing argument(s) {', '.join(missing)}")
    tensors = [named[n] for n in order if n not in scalar_names]
    scalars = {n: named[n] for n in scalar_names}
    for n, v in scalars.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise LaunchError(f"kernel {kernel.name}: runtime scalar {n} takes a Python int or "
                              f"float, got {type(v).__name__}")
    return tensors, scalars


def run(kernel: Kernel, *arrays, **scalar_args) -> tuple:
    """Interpret `kernel` on numpy arrays or CPU torch tensors given in the order of its tensor
    parameters (with runtime scalars: in signature order, scalars also by keyword). Outputs
    are written in place (torch tensors too); returns the arrays."""
    arrays, runtime = split_runtime_args(kernel, arrays, scalar_args)
    arrays = tuple(arrays)
    tensor_params = [p for p in kernel.params if isinstance(p.value.type, TensorType)]
    if len(arrays) != len(tensor_params):
        raise LaunchError(f"kernel {kernel.name} takes {len(tensor_params)} tensors "
                          f"({', '.join(p.name for p in tensor_params)}), got {len(arrays)}")
    tensors: dict[int, np.ndarray] = {}
    symbols: dict[str, tuple[int, str]] = {}
    writebacks = []
    for p, a in zip(tensor_params, arrays):
        t: TensorType = p.value.type
        np_view, writeback = _as_numpy(a, t.dtype, kernel.name, p.name)
        if np_view.ndim != len(t.shape):
            raise LaunchError(f"kernel {kernel.name}, parameter {p.name}: expected "
                              f"{len(t.shape)} dims, got shape {tuple(np_view.shape)}")
        for d, size in zip(t.shape, np_view.shape):
            if isinstance(d, int) and d != size:
                raise LaunchError(f"kernel {kernel.name}, parameter {p.name}: dim must be {d}, "
                                  f"got {size}")
            if isinstance(d, str):
                if d in symbols and symbols[d][0] != size:
                    raise LaunchError(f"kernel {kernel.name}: shape symbol {d} is "
                                      f"{symbols[d][0]} in {symbols[d][1]} but {size} in "
                                      f"{p.name}")
                symbols[d] = (size, p.name)
        tensors[p.value.id] = np_view
        writebacks.append((a, np_view, writeback))
    scalars = {}
    for p in kernel.params:
        if isinstance(p.value.type, ScalarType) and p.name in runtime:
            v = runtime[p.name]
            scalars[p.value.id] = np.float32(v) if p.value.type.dtype.is_float else int(v)
            continue
        if isinstance(p.value.type, ScalarType):
            if p.name not in symbols:
                raise LaunchError(f"kernel {kernel.name}: no value for scalar parameter {p.name}")
            scalars[p.value.id] = symbols[p.name][0]
    _Interp(kernel, tensors, scalars).run()
    for a, view, writeback in writebacks:
        if writeback:
            writeback(view)
    return arrays


def _as_numpy(a, dtype: DType, kernel: str, param: str):
    if isinstance(a, np.ndarray):
        if (a.dtype.kind == "f") != dtype.is_float:
            raise LaunchError(f"kernel {kernel}, parameter {param}: expected {dtype}, got a "
                              f"numpy array of {a.dtype}")
        if not dtype.is_float or a.dtype == np.float32:
            return a, None  # computed in place
        work = a.astype(np.float32)

        def writeback_np(view, a=a):
            np.copyto(a, view.astype(a.dtype))
        return work, writeback_np
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(a, torch.Tensor):
        if a.device.type != "cpu":
            raise LaunchError(f"kernel {kernel}, parameter {param}: the interpreter runs on CPU "
                              f"tensors, got one on {a.device}", fix="pass tensor.cpu()")
        if a.dtype != dtype.torch_dtype():
            raise LaunchError(f"kernel {kernel}, parameter {param}: expected {dtype}, got "
                              f"{a.dtype}")
        arr = a.detach().to(torch.float32).numpy().copy() if dtype.is_float else \
            a.detach().numpy().copy()

        def writeback(view, a=a):
            a.copy_(torch.from_numpy(np.ascontiguousarray(view)).to(a.dtype))
        return arr, writeback
    raise LaunchError(f"kernel {kernel}, parameter {param}: expected a numpy array or torch "
                      f"tensor, got {type(a).__name__}")


def grid_extents(kernel: Kernel, symbols: dict[str, int]) -> tuple[int, ...]:
    """Evaluate the kernel's launch grid for bound shape symbols (host side, no GPU)."""
    scalars = {p.value.id: symbols[p.name] for p in kernel.params
               if isinstance(p.value.type, ScalarType) and p.name in symbols}
    interp = _Interp(kernel, {}, scalars)
    group = _Group("grid", dict(scalars))
    for op in kernel.body.ops:
        if isinstance(op, O.GridIds):
            return tuple(int(interp.val(group, e)) for e in op.extents)
        if isinstance(op, (O.Const, O.Arith)):
            for _ in interp.run_op(group, op):
                pass
    raise LaunchError(f"kernel {kernel.name} declares no grid")
