"""Lowered ir.Kernel → CUDA C++ with inline PTX (through the device header argus_sm90.cuh).

One job: render, never decide. Every decision (layouts, TMA boxes, descriptors, the mbarrier
protocol, the smem plan, the role plan) was made by analysis and lowering passes and is read
from the IR; this file turns it into text. The kernel symbol is `argus_<name>` (the KernelBench
harness recognizes Argus kernels by that prefix).

Register tiles become per-thread arrays unrolled at generation time: the element a register
holds is a static function of the register index and the thread (see analysis/layouts.py).
A pointwise tile used once, right after it is made, is not stored: its expression is inlined at
the use (so `acc.to(bf16)` feeding a store costs no registers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from argus.codegen.wgmma import WgmmaSpec, wgmma_prelude
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.ir.tag_ops import strip_tags
from argus.ir.types import ScalarType, SmemType, SmemViewType, TensorType, TileType

HEADER = "argus_sm90.cuh"


@dataclass(frozen=True)
class AbiArg:
    """One kernel parameter as the launcher must pass it.

    kind: "tensor" (device pointer of parameter `name`), "scalar" (int32 shape symbol),
    "stride" (int64 stride of `tensor` along `dim`, in elements), "tmap" (a 128-byte
    CUtensorMap of `tensor` with `box` (outermost first) and `swizzle` bytes).
    """

    kind: str
    name: str
    tensor: str = ""
    dim: int = -1
    box: tuple[int, ...] = ()
    swizzle: int = 0


@dataclass(frozen=True)
class Source:
    """Generated CUDA: the text, the symbol, the launch ABI and the launch configuration."""

    name: str
    text: str
    abi: tuple[AbiArg, ...]
    threads: int
    dynamic_smem: int
    cluster: tuple[int, int, int]


# ----------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class _Blocked:
    rows: int
    cols: int
    threads: int
    vec: int

    @property
    def per_row(self) -> int:
        return self.cols // self.threads

    @property
    def nregs(self) -> int:
        return self.rows * self.per_row

    def row(self, i: int) -> str:
        return str(i // self.per_row)

    def col(self, i: int) -> str:
        k = i % self.per_row
        base = (k // self.vec) * self.threads * self.vec + k % self.vec
        return f"(gtid * {self.vec} + {base})"


@dataclass(frozen=True)
class _RowVec:
    rows: int

    @property
    def nregs(self) -> int:
        return self.rows

    def row(self, i: int) -> str:
        return str(i)

    def col(self, i: int) -> str:
        return "0"


@dataclass(frozen=True)
class _Acc:
    """wgmma m64nNk16 accumulator: row = 16w + g + 8((i/2)%2), col = 2q + (i%2) + 8(i/4)."""

    n: int

    @property
    def nregs(self) -> int:
        return self.n // 2

    def row(self, i: int) -> str:
        return f"(acc_row + {8 * ((i // 2) % 2)})"

    def col(self, i: int) -> str:
        return f"(acc_col + {(i % 2) + 8 * (i // 4)})"


def _layout_of(t: TileType, group_threads: int, loc):
    shape = t.shape if len(t.shape) == 2 else (1,) + tuple(t.shape)
    if len(shape) != 2:
        raise CompileError(f"register tiles of rank {len(t.shape)} are not supported", loc)
    rows, cols = shape
    if t.layout == "wgmma_acc":
        return _Acc(cols)
    if t.layout == "rowvec":
        return _RowVec(rows)
    if cols % group_threads:
        raise CompileError(f"a blocked {rows}x{cols} tile needs a width that is a multiple of the "
                           f"{group_threads} threads of its group", loc,
                           fix=f"use a tile width that is a multiple of {group_threads}")
    vec = 4 if cols % (group_threads * 4) == 0 else 2 if cols % (group_threads * 2) == 0 else 1
    return _Blocked(rows, cols, group_threads, vec)


# ----------------------------------------------------------------------------- helpers


def _c_float(x: float) -> str:
    if math.isnan(x):
        return "__int_as_float(0x7fffffff)"
    if math.isinf(x):
        return "__int_as_float(0x7f800000)" if x > 0 else "__int_as_float(0xff800000)"
    return repr(float(x)) + "f"


_SCALAR_C = {"i32": "int", "i1": "bool", "f32": "float", "i64": "long long", "u32": "unsigned"}

_ARITH_C = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "mod": "%",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
            "and": "&&", "or": "||"}


def _ew_c(fn: str, a: list[str]) -> str:
    binops = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=",
              "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
    if fn in binops:
        return f"({a[0]} {binops[fn]} {a[1]})"
    return {
        "neg": lambda: f"(-{a[0]})", "abs": lambda: f"fabsf({a[0]})",
        "exp": lambda: f"expf({a[0]})", "exp2": lambda: f"exp2f({a[0]})",
        "log": lambda: f"logf({a[0]})", "sqrt": lambda: f"sqrtf({a[0]})",
        "rsqrt": lambda: f"rsqrtf({a[0]})", "tanh": lambda: f"tanhf({a[0]})",
        "erf": lambda: f"erff({a[0]})", "sigmoid": lambda: f"(1.0f / (1.0f + expf(-{a[0]})))",
        "relu": lambda: f"ag::max_nan({a[0]}, 0.0f)", "recip": lambda: f"(1.0f / {a[0]})",
        "max": lambda: f"ag::max_nan({a[0]}, {a[1]})",
        "min": lambda: f"ag::min_nan({a[0]}, {a[1]})",
        "pow": lambda: f"powf({a[0]}, {a[1]})", "where": lambda: f"({a[0]} ? {a[1]} : {a[2]})",
    }[fn]()


def _round_c(expr: str, dtype) -> str:
    """The float value `expr` after a round trip through `dtype` (what a device store keeps)."""
    if dtype.name == "bf16":
        return f"ag::bf16_to_f32(ag::f32_to_bf16({expr}))"
    if dtype.name == "f16":
        return f"ag::f16_to_f32(ag::f32_to_f16({expr}))"
    if dtype.kind in ("int", "uint"):  # integer tiles live in float registers: truncate
        return f"(float)(int)({expr})"
    return expr


def _strip_round(expr: str, dtype) -> str:
    """`x` for `round(x)` when the consumer rounds to `dtype` itself (round is idempotent)."""
    if dtype.name not in ("bf16", "f16"):
        return expr
    prefix = f"ag::{dtype.name}_to_f32(ag::f32_to_{dtype.name}("
    if not (expr.startswith(prefix) and expr.endswith("))")):
        return expr
    inner = expr[len(prefix):-2]
    depth = 0
    for ch in inner:  # the two closing parens must close the prefix's, not an inner call
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return expr
    return inner if depth == 0 else expr


def _to_mem_c(expr: str, dtype) -> str:
    expr = _strip_round(expr, dtype)
    return {"bf16": f"ag::f32_to_bf16({expr})", "f16": f"ag::f32_to_f16({expr})"}.get(
        dtype.name, expr)


def _from_mem_c(expr: str, dtype) -> str:
    return {"bf16": f"ag::bf16_to_f32({expr})", "f16": f"ag::f16_to_f32({expr})"}.get(
        dtype.name, expr)


def _elem_c(dtype) -> str:
    return {"bf16": "ag::bf16", "f16": "ag::f16", "e4m3": "ag::e4m3", "f32": "float",
            "i32": "int", "f64": "double", "i64": "long long", "u32": "unsigned",
            "i1": "bool"}[dtype.name]


# ----------------------------------------------------------------------------- emitter


@dataclass
class _TileInfo:
    layout: object
    dtype: object
    virtual: object = None  # reg index -> C expression, when inlined
    name: str = ""


@dataclass
class _Emitter:
    kernel: Kernel
    lines: list[str] = field(default_factory=list)
    indent: int = 1
    names: dict[int, str] = field(default_factory=dict)
    tiles: dict[int, _TileInfo] = field(default_factory=dict)
    group_threads: int = 128
    wgmma_specs: list[WgmmaSpec] = field(default_factory=list)
    tmaps: dict[tuple, int] = field(default_factory=dict)
    pipes: dict[int, int] = field(default_factory=dict)  # pipe id -> stages
    in_consume: list[list[str]] = field(default_factory=list)  # pending wgmma accs per consume
    role_single_thread: bool = False
    uses: dict[int, int] = field(default_factory=dict)
    inline_ok: set[int] = field(default_factory=set)
    shared_decls: list[str] = field(default_factory=list)
    tensors: dict[int, str] = field(default_factory=dict)
    pending: dict[int, list[str]] = field(default_factory=dict)  # pipe -> accs in flight
    tma_stores: bool = False
    # TMA-store protocol (see op_TmaStore): generic smem writes since the last proxy fence,
    # bulk stores that may still be reading smem, buffers whose store waits can be deferred
    store_unfenced: bool = True
    store_read_pending: bool = False
    deferrable_store_buffers: set[int] = field(default_factory=set)
    smem_root: dict[int, int] = field(default_factory=dict)  # view id -> allocation id
    lazy_zero: dict[str, int] = field(default_factory=dict)  # tile -> regs, scale-d zeroing
    peers: dict[int, int] = field(default_factory=dict)  # pipe id -> CTAs releasing a slot
    cluster_size: int = 1
    in_role: bool = False        # emitting a warp role's body (group = one warpgroup)
    current_full: str = ""       # the full barrier of the produce step being emitted

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def name(self, v: Value) -> str:
        if v.id in self.names:
            return self.names[v.id]
        raise CompileError(f"codegen: value {v} has no C name (used before definition?)")

    # -- tiles -------------------------------------------------------------------------
    def tile_expr(self, v: Value, i: int, result_layout) -> str:
        """C expression of operand tile `v` at register i of a result with `result_layout`."""
        info = self.tiles[v.id]
        lay = info.layout
        j = i
        if lay != result_layout:
            if isinstance(lay, _Blocked) and isinstance(result_layout, _Blocked) and \
                    lay.rows == 1 and lay.cols == result_layout.cols:
                j = i % result_layout.per_row  # a [1, C] row broadcast over rows
            elif isinstance(lay, _RowVec) and isinstance(result_layout, _Blocked):
                j = i // result_layout.per_row  # one value per row broadcast over columns
            elif isinstance(lay, _RowVec) and isinstance(result_layout, _RowVec) and lay.rows == 1:
                j = 0
            else:
                raise CompileError(f"codegen cannot broadcast a {lay} tile into {result_layout}")
        if info.virtual is not None:
            return info.virtual(j)
        return f"{info.name}[{j}]"

    def operand_expr(self, v: Value, i: int, result_layout) -> str:
        if isinstance(v.type, TileType):
            return self.tile_expr(v, i, result_layout)
        return self.name(v)

    def declare_tile(self, v: Value, loc) -> _TileInfo:
        t: TileType = v.type
        info = _TileInfo(_layout_of(t, self.group_threads, loc), t.dtype, name=f"t{v.id}")
        self.tiles[v.id] = info
        ctype = "bool" if t.dtype.name == "i1" else "float"
        self.emit(f"{ctype} {info.name}[{info.layout.nregs}];")
        return info

    # -- regions -----------------------------------------------------------------------
    def region(self, region: Region) -> None:
        for op in region.ops:
            self.op(op)

    def block(self, head: str, region: Region) -> None:
        self.emit(head + " {")
        self.indent += 1
        self.region(region)
        self.indent -= 1
        self.emit("}")

    def flush_pending(self) -> None:
        """Retire in-flight wgmma groups and release their slots (before an accumulator is
        read, and at the end of a role)."""
        if not self.pending:
            return
        self.emit("ag::wgmma_wait<0>();  // retire the last in-flight wgmma group")
        for pid, accs in sorted(self.pending.items()):
            for acc in accs:
                self.emit(f"ag::fence_operands({acc});")
                if acc in self.lazy_zero:  # no wgmma ran (K = 0): the tile is still zero
                    self.emit(f"if ({acc}_zero) {{")
                    self.emit("    #pragma unroll")
                    regs = self.lazy_zero[acc]
                    self.emit(f"    for (int i = 0; i < {regs}; ++i) {acc}[i] = 0.0f;")
                    self.emit("}")
            self.emit(f"if (pend{pid} >= 0 && threadIdx.x % 128 == 0) "
                      f"{{ {self.release(pid, f'pend{pid}')} }}")
            self.emit(f"pend{pid} = -1;")
        self.pending = {}

    def op(self, op: O.Op) -> None:  # noqa: C901 - a dispatcher over the op set
        if self.pending and not isinstance(op, _NO_FLUSH):
            self.flush_pending()
        method = getattr(self, "op_" + type(op).__name__, None)
        if method is None:
            raise CompileError(f"codegen has no rule for {op.NAME}", op.loc)
        method(op)

    # scalars
    def op_Const(self, op: O.Const) -> None:
        v = op.value
        self.names[op.result.id] = ("true" if v else "false") if isinstance(v, bool) else (
            _c_float(v) if isinstance(v, float) else str(v))

    def op_Arith(self, op: O.Arith) -> None:
        a, b = self.name(op.lhs), self.name(op.rhs)
        ctype = _SCALAR_C[op.result.type.dtype.name]
        n = f"v{op.result.id}"
        if op.fn in ("min", "max"):
            cmp = "<" if op.fn == "min" else ">"
            expr = f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"
        else:
            expr = f"({a} {_ARITH_C[op.fn]} {b})"
        self.emit(f"const {ctype} {n} = {expr};")
        self.names[op.result.id] = n

    def op_GridIds(self, op: O.GridIds) -> None:
        for axis, v in zip("xyz", op.ids):
            self.names[v.id] = f"v{v.id}"
            self.emit(f"const int v{v.id} = (int)blockIdx.{axis};")

    def op_ClusterRank(self, op: O.ClusterRank) -> None:
        self.emit(f"const int v{op.result.id} = (int)ag::cluster_ctarank();")
        self.names[op.result.id] = f"v{op.result.id}"

    def op_ThreadIndex(self, op: O.ThreadIndex) -> None:
        self.names[op.result.id] = "gtid"

    def op_For(self, op: O.For) -> None:
        v = f"v{op.var.id}"
        self.names[op.var.id] = v
        step = self.name(op.step)
        if not step.lstrip("-").isdigit():
            # ag.range rejects a constant step <= 0 at trace time; a runtime one would spin
            # forever (0) or run no iterations (< 0): stop the kernel with an error instead
            self.emit(f"if ({step} <= 0) __trap();  // ag.range needs a positive step")
        stores = any(isinstance(x, O.TmaStore) for x in op.body.walk())
        # an iteration may begin with the previous one's stores in flight and its writes
        # unfenced; the loop may also run zero times, leaving what was pending before it
        pending = self.store_read_pending
        self.store_read_pending |= stores
        self.store_unfenced = True
        self.block(f"for (int {v} = {self.name(op.start)}; {v} < {self.name(op.stop)}; "
                   f"{v} += {self.name(op.step)})", op.body)
        self.store_read_pending |= stores or pending
        self.store_unfenced = True

    def op_If(self, op: O.If) -> None:
        pending = self.store_read_pending
        self.block(f"if ({self.name(op.cond)})", op.body)
        self.store_read_pending |= pending  # the body may not have run
        self.store_unfenced = True

    def before_smem_write(self) -> None:
        """A generic-proxy write to shared memory follows: it must not overwrite a buffer a
        deferred TMA store is still reading, and must be fenced before the next store."""
        self.store_unfenced = True
        if self.store_read_pending:
            self.emit("if (gtid == 0) ag::tma_store_wait_read<0>();  // earlier bulk stores "
                      "have read their smem")
            self.emit(self.group_barrier())
            self.store_read_pending = False

    # shared memory and pipelines
    def op_SmemAlloc(self, op: O.SmemAlloc) -> None:
        offset = self.smem_offset(op.result.id)
        t: SmemType = op.result.type
        n = f"s{op.result.id}"
        self.emit(f"{_elem_c(t.dtype)}* const {n} = reinterpret_cast<{_elem_c(t.dtype)}*>"
                  f"(smem + {offset});")
        self.names[op.result.id] = n

    def smem_offset(self, vid: int) -> int:
        for entry in self.kernel.attr("smem_plan", ()):
            if entry[0] == vid:
                return entry[1]
        raise CompileError(f"codegen: no smem placement for value %{vid}; run lower.smem first")

    def op_SmemSlice(self, op: O.SmemSlice) -> None:
        buf: SmemType = op.buffer.type
        cols = buf.shape[-1]
        parts = [self.name(op.buffer)]
        if op.stage is not None:
            parts.append(f"{self.name(op.stage)} * {buf.shape[1] * cols}")
        row0 = op.row0 if isinstance(op.row0, int) else self.name(op.row0)
        if row0 != 0:
            parts.append(f"({row0}) * {cols}")
        n = f"v{op.result.id}"
        t: SmemViewType = op.result.type
        self.emit(f"{_elem_c(t.dtype)}* const {n} = {' + '.join(parts)};")
        self.names[op.result.id] = n

    def op_PipelineCreate(self, op: O.PipelineCreate) -> None:
        stages = op.result.type.stages
        offset = self.smem_offset(op.result.id)
        self.pipes[op.result.id] = stages
        self.peers[op.result.id] = op.peers
        self.emit(f"ag::uint64_t* const full{op.result.id} = "
                  f"reinterpret_cast<ag::uint64_t*>(smem + {offset});")
        self.emit(f"ag::uint64_t* const empty{op.result.id} = full{op.result.id} + {stages};")
        self.emit("if (threadIdx.x == 0) {")
        self.emit(f"    for (int s = 0; s < {stages}; ++s) {{")
        self.emit(f"        ag::mbar_init(&full{op.result.id}[s], 1);")
        self.emit(f"        ag::mbar_init(&empty{op.result.id}[s], {op.consumers * op.peers});")
        self.emit("    }")
        self.emit("    ag::fence_barrier_init();")
        self.emit("}")
        self.names[op.result.id] = f"pipe{op.result.id}"

    @staticmethod
    def render_expr(expr: str, n: str, stages: int) -> str:
        # stage/parity expressions use n (the step counter) and S; C semantics.
        return "(" + expr.replace("n", n).replace("S", str(stages)) + ")"

    def pipeline_step(self, op, kind: str) -> None:
        pid = op.pipe.id
        stages = self.pipes[pid]
        n = f"n{pid}"
        st = f"v{op.stage.id}"
        self.names[op.stage.id] = st
        self.emit("{")
        self.indent += 1
        self.emit(f"const int {st} = {self.render_expr(op.stage_expr, n, stages)};")
        bar = f"empty{pid}" if kind == "produce" else f"full{pid}"
        self.emit(f"ag::mbar_wait(&{bar}[{st}], {self.render_expr(op.parity_expr, n, stages)});")
        if kind == "produce":
            self.emit(f"ag::mbar_arrive_expect_tx(&full{pid}[{st}], {op.tx_bytes});")
            self.current_full = f"&full{pid}[{st}]"
            self.region(op.body)
        else:
            self.in_consume.append([])
            self.region(op.body)
            accs = self.in_consume.pop()
            if accs and op.wgmma_in_flight == 1:
                # Keep this step's wgmma group in flight; wait_group 1 retires the previous
                # step's group, whose slot may now be released.
                self.emit("ag::wgmma_wait<1>();")
                for acc in accs:
                    self.emit(f"ag::fence_operands({acc});")
                self.emit(f"if (pend{pid} >= 0 && threadIdx.x % 128 == 0) "
                          f"{{ {self.release(pid, f'pend{pid}')} }}")
                self.emit(f"pend{pid} = {st};")
                self.pending[pid] = accs
            else:
                if accs:
                    self.emit("ag::wgmma_wait<0>();  // retire this step's wgmma before release")
                    for acc in accs:
                        self.emit(f"ag::fence_operands({acc});")
                self.emit(f"if (threadIdx.x % 128 == 0) {{ {self.release(pid, st)} }}")
        self.emit(f"{n} += 1;")
        self.indent -= 1
        self.emit("}")

    def release(self, pid: int, slot: str) -> str:
        """One warpgroup's arrival on empty[slot] of every CTA whose producer writes it."""
        peers = self.peers.get(pid, 1)
        if peers == 1:
            return f"ag::mbar_arrive(&empty{pid}[{slot}]);"
        return (f"for (int r = 0; r < {peers}; ++r) "
                f"ag::mbar_arrive_cluster(&empty{pid}[{slot}], r);")

    def op_Produce(self, op: O.Produce) -> None:
        self.pipeline_step(op, "produce")

    def op_Consume(self, op: O.Consume) -> None:
        self.pipeline_step(op, "consume")

    def tmap_for(self, tensor: Value, box: tuple, swizzle: int) -> str:
        key = (tensor.id, box, swizzle)
        if key not in self.tmaps:
            self.tmaps[key] = len(self.tmaps)
        return f"tmap{self.tmaps[key]}"

    def op_TmaLoad(self, op: O.TmaLoad) -> None:
        tm = self.tmap_for(op.tensor, op.box, op.swizzle)
        coords = [self.name(c) for c in reversed(op.coords)]  # PTX wants innermost first
        rank = len(coords)
        if op.multicast:
            if rank not in (2, 3):
                raise CompileError(f"multicast TMA loads are 2-d or 3-d; this one is {rank}-d",
                                   op.loc)
            size = self.cluster_size
            self.emit(f"ag::tma_load_{rank}d_multicast(&{tm}, {self.name(op.dst)}, "
                      f"{self.current_full}, {', '.join(coords)}, {(1 << size) - 1});")
            return
        self.emit(f"ag::tma_load_{rank}d(&{tm}, {self.name(op.dst)}, {self.current_full}, "
                  f"{', '.join(coords)});")

    def group_barrier(self) -> str:
        """Synchronize the executing group: the CTA, or this warpgroup (named barrier 1 + its
        index; 0 is __syncthreads)."""
        if self.in_role:
            return "ag::named_barrier_sync(1 + threadIdx.x / 128, 128);"
        return "__syncthreads();"

    def op_TmaStore(self, op: O.TmaStore) -> None:
        view: SmemViewType = op.src.type
        box = (1,) * (len(op.tensor.type.shape) - 2) + tuple(view.shape)
        tm = self.tmap_for(op.tensor, box, view.swizzle)
        coords = [self.name(c) for c in reversed(op.coords)]
        # Every thread's generic-proxy writes (st.shared, stmatrix) must be visible to the
        # async proxy before one thread hands the buffer to TMA (PTX ISA memory consistency
        # model, proxies): one fence and barrier covers a run of stores. The buffer may be
        # rewritten only after the bulk copy read it. When only this group's stmatrix writes
        # the buffer, that wait is deferred to the group's next smem write (before_smem_write)
        # so consecutive stores and the next tile's MMAs overlap the copies; the verifier's
        # model (a store reads its source when issued) stays exact, because nothing writes
        # the buffer between the issue and the wait.
        if self.store_unfenced:
            self.emit("ag::fence_view_async_shared();")
            self.emit(self.group_barrier())
            self.store_unfenced = False
        deferred = self.in_role and \
            self.smem_root.get(op.src.id, op.src.id) in self.deferrable_store_buffers
        self.emit("if (gtid == 0) {")
        self.emit(f"    ag::tma_store_{len(coords)}d(&{tm}, {self.name(op.src)}, "
                  f"{', '.join(coords)});")
        self.emit("    ag::tma_store_commit();")
        if not deferred:
            self.emit("    ag::tma_store_wait_read<0>();")
        self.emit("}")
        if deferred:
            self.store_read_pending = True
        else:
            self.emit(self.group_barrier())
        self.tma_stores = True

    def op_Wgmma(self, op: O.Wgmma) -> None:
        acc = self.tiles[op.acc.id]
        n = op.acc.type.shape[1]
        dt = op.a.type.dtype
        spec = WgmmaSpec(n=n, a_dtype=dt.name, b_dtype=dt.name, acc_dtype="f32",
                         trans_b=op.trans_b, trans_a=op.trans_a)
        if spec not in self.wgmma_specs:
            self.wgmma_specs.append(spec)
        sw_a, lbo_a, sbo_a, step_a = op.a_desc
        sw_b, lbo_b, sbo_b, step_b = op.b_desc
        k_steps = op.k_extent // spec.k  # k16 (16-bit) or k32 (fp8) per instruction
        self.emit("{")
        self.indent += 1
        self.emit(f"const ag::uint64_t da = ag::make_smem_desc({self.name(op.a)}, {sw_a}, "
                  f"{lbo_a}, {sbo_a});")
        self.emit(f"const ag::uint64_t db = ag::make_smem_desc({self.name(op.b)}, {sw_b}, "
                  f"{lbo_b}, {sbo_b});")
        self.emit(f"ag::fence_operands({acc.name});")
        self.emit("ag::wgmma_fence();")
        lazy = acc.name in self.lazy_zero
        for kk in range(k_steps):
            scale = f"1 - {acc.name}_zero" if lazy and kk == 0 else "1"
            self.emit(f"ag::{spec.name}({acc.name}, ag::desc_advance(da, {kk * step_a}), "
                      f"ag::desc_advance(db, {kk * step_b}), {scale});")
        self.emit("ag::wgmma_commit();")
        if lazy:
            self.emit(f"{acc.name}_zero = 0;")
        if self.in_consume:
            self.in_consume[-1].append(acc.name)
        else:
            self.emit("ag::wgmma_wait<0>();")
            self.emit(f"ag::fence_operands({acc.name});")
        self.indent -= 1
        self.emit("}")

    # register tiles
    def op_Full(self, op: O.Full) -> None:
        info = self.declare_tile(op.result, op.loc)
        if op.scale_d_zero:
            # The first wgmma overwrites (scale-d = 0); zero only if none ran (flush_pending).
            self.emit(f"int {info.name}_zero = 1;")
            self.lazy_zero[info.name] = info.layout.nregs
            return
        self.emit("#pragma unroll")
        self.emit(f"for (int i = 0; i < {info.layout.nregs}; ++i) {info.name}[i] = "
                  f"{_c_float(op.value)};")

    def bounds(self, tensor: Value, offsets, info: _TileInfo, i: int,
               tile_rank: int) -> tuple[str, str]:
        """(condition, linear index) of element i of a tile at `offsets` of a global tensor.
        The tile covers the tensor's last one or two dims; leading dims add offset x stride."""
        t: TensorType = tensor.type
        name = self.tensors[tensor.id]
        lay = info.layout
        rank = len(t.shape)
        conds, terms = [], []
        for d in range(rank - tile_rank):
            off = self.name(offsets[d])
            conds.append(f"{off} >= 0 && {off} < {self._dim(t, d)}")
            terms.append(f"(long long){off} * {name}_s{d}")
        col = f"({self.name(offsets[-1])} + {lay.col(i)})"
        conds.append(f"{col} >= 0 && {col} < {self._dim(t, rank - 1)}")
        terms.append(col)
        if tile_rank == 2:
            row = f"({self.name(offsets[-2])} + {lay.row(i)})"
            conds.append(f"{row} >= 0 && {row} < {self._dim(t, rank - 2)}")
            terms.append(f"(long long){row} * {name}_s{rank - 2}")
        return " && ".join(conds), " + ".join(terms)

    def _dim(self, t: TensorType, d: int) -> str:
        dim = t.shape[d]
        return str(dim) if isinstance(dim, int) else dim

    def op_Load(self, op: O.Load) -> None:
        info = self.declare_tile(op.result, op.loc)
        name = self.tensors[op.tensor.id]
        dtype = op.tensor.type.dtype
        for i in range(info.layout.nregs):
            cond, idx = self.bounds(op.tensor, op.offsets, info, i, len(op.result.type.shape))
            self.emit(f"{info.name}[{i}] = ({cond}) ? {_from_mem_c(f'{name}[{idx}]', dtype)} : "
                      f"{_c_float(op.other)};")

    def op_LoadScalar(self, op: O.LoadScalar) -> None:
        t: TensorType = op.tensor.type
        name = self.tensors[op.tensor.id]
        conds, terms = [], []
        rank = len(t.shape)
        for d, o in enumerate(op.offsets):
            off = self.name(o)
            conds.append(f"{off} >= 0 && {off} < {self._dim(t, d)}")
            terms.append(f"(long long){off}" + (f" * {name}_s{d}" if d < rank - 1 else ""))
        ctype = _SCALAR_C[op.result.type.dtype.name]
        n = f"v{op.result.id}"
        other = _c_float(op.other) if t.dtype.is_float else str(int(op.other))
        # every thread reads the same address: one broadcast load through the read-only path
        elem = f"__ldg(&{name}[{' + '.join(terms)}])" if t.dtype.name in ("f32", "i32") else \
            _from_mem_c(f"{name}[{' + '.join(terms)}]", t.dtype)
        self.emit(f"const {ctype} {n} = ({' && '.join(conds)}) ? ({ctype}){elem} : {other};")
        self.names[op.result.id] = n

    def op_Store(self, op: O.Store) -> None:
        info = self.tiles[op.value.id]
        name = self.tensors[op.tensor.id]
        dtype = op.tensor.type.dtype
        lay = info.layout
        if isinstance(lay, _Acc):
            self.store_acc(op, info)
            return
        if op.transposed:
            raise CompileError("a transposed ag.store is generated for wgmma accumulators "
                               "only", op.loc, fix="store the tile untransposed, or store an "
                                                   "accumulator")
        for i in range(lay.nregs):
            cond, idx = self.bounds(op.tensor, op.offsets, info, i, len(op.value.type.shape))
            val = self.tile_expr(op.value, i, lay)
            self.emit(f"if ({cond}) {name}[{idx}] = {_to_mem_c(val, dtype)};")

    def store_acc(self, op: O.Store, info: _TileInfo) -> None:
        """Accumulator fragment → global: each thread owns pairs of adjacent columns. The last
        two tensor dims are rows and columns; leading (batch) dims add offset x stride."""
        name = self.tensors[op.tensor.id]
        t: TensorType = op.tensor.type
        dtype = t.dtype
        rank = len(t.shape)
        r0, c0 = self.name(op.offsets[-2]), self.name(op.offsets[-1])
        rows, cols = self._dim(t, rank - 2), self._dim(t, rank - 1)
        row_stride = f"{name}_s{rank - 2}"
        lead = " + ".join(f"(long long){self.name(op.offsets[d])} * {name}_s{d}"
                          for d in range(rank - 2)) or "0"
        lead_ok = " && ".join(f"{self.name(op.offsets[d])} >= 0 && "
                              f"{self.name(op.offsets[d])} < {self._dim(t, d)}"
                              for d in range(rank - 2)) or "true"
        # one 2-element store of an adjacent pair of accumulator columns, where the dtype has one
        pair_store = {
            "bf16": lambda p, a, b: f"ag::st_global_b32({p}, ag::pack_bf16x2({a}, {b}))",
            "f16": lambda p, a, b: f"ag::st_global_b32({p}, ag::pack_f16x2({a}, {b}))",
            "f32": lambda p, a, b: f"ag::st_global_f32x2({p}, {a}, {b})"}.get(dtype.name)
        values = [(i, _strip_round(self.tile_expr(op.value, i, info.layout), dtype),
                   _strip_round(self.tile_expr(op.value, i + 1, info.layout), dtype))
                  for i in range(0, info.layout.nregs, 2)]
        self.emit(f"if ({lead_ok}) {{")
        self.indent += 1
        self.emit(f"{dtype_ptr(dtype)} const base = {name} + {lead};")
        if op.transposed:
            # accumulator (row, col) -> tensor (r0 + col, c0 + row): a thread's adjacent columns
            # land in different rows, so every element is its own store; the 8 lanes that share
            # a column write 8 consecutive elements of one row
            for i, v0, v1 in values:
                for j, v in ((i, v0), (i + 1, v1)):
                    r, c = f"({r0} + {info.layout.col(j)})", f"({c0} + {info.layout.row(j)})"
                    self.emit(f"if ({r} >= 0 && {r} < {rows} && {c} >= 0 && {c} < {cols}) "
                              f"base[(long long){r} * {row_stride} + {c}] = "
                              f"{_to_mem_c(v, dtype)};")
            self.indent -= 1
            self.emit("}")
            return
        tile_rows, tile_cols = op.value.type.shape[-2], op.value.type.shape[-1]
        if pair_store:
            # Interior tiles (the common case) store every pair unchecked: the whole tile is
            # inside the tensor and every pair address is aligned (aligned base, even row
            # stride, even column offset; accumulator columns come in even pairs).
            align = 2 * dtype.bytes - 1
            self.emit(f"if ({r0} >= 0 && {r0} + {tile_rows} <= {rows} && {c0} >= 0 && "
                      f"{c0} + {tile_cols} <= {cols} && ({c0} & 1) == 0 && "
                      f"({row_stride} & 1) == 0 && "
                      f"(reinterpret_cast<unsigned long long>(base) & {align}) == 0) {{")
            self.indent += 1
            # two row pointers (rows acc_row and acc_row + 8); every pair is a constant offset
            # from one of them, so the addresses cost no registers beyond these two
            self.emit(f"{dtype_ptr(dtype)} const q0 = base + (long long)({r0} + acc_row) * "
                      f"{row_stride} + ({c0} + acc_col);")
            self.emit(f"{dtype_ptr(dtype)} const q8 = q0 + 8 * {row_stride};")
            for i, v0, v1 in values:
                p_expr = f"{'q8' if (i // 2) % 2 else 'q0'} + {8 * (i // 4)}"
                self.emit(pair_store(p_expr, v0, v1) + ";")
            self.indent -= 1
            self.emit("} else {")
            self.indent += 1
        for i, v0, v1 in values:
            r = f"({r0} + {info.layout.row(i)})"
            c = f"({c0} + {info.layout.col(i)})"
            self.emit(f"if ({r} >= 0 && {r} < {rows}) {{")
            self.emit(f"    {dtype_ptr(dtype)} p = base + (long long){r} * {row_stride} + {c};")
            # a pair is one 2-element store only where the address is aligned for it
            self.emit(f"    const bool pair_ok = {c} >= 0 && "
                      f"(reinterpret_cast<unsigned long long>(p) & {2 * dtype.bytes - 1}) == 0;")
            self.emit(f"    if (pair_ok && {c} + 1 < {cols}) {pair_store('p', v0, v1)};"
                      if pair_store else "    if (false) {}")
            self.emit(f"    else {{ if ({c} >= 0 && {c} < {cols}) p[0] = {_to_mem_c(v0, dtype)}; "
                      f"if ({c} + 1 >= 0 && {c} + 1 < {cols}) p[1] = {_to_mem_c(v1, dtype)}; }}")
            self.emit("}")
        if pair_store:
            self.indent -= 1
            self.emit("}")
        self.indent -= 1
        self.emit("}")

    def op_Elementwise(self, op: O.Elementwise) -> None:
        lay = _layout_of(op.result.type, self.group_threads, op.loc)
        dtype = op.result.type.dtype

        def expr(i: int) -> str:
            e = _ew_c(op.fn, [self.operand_expr(a, i, lay) for a in op.args])
            return e if dtype.name == "i1" else _round_c(e, dtype)

        self.define_pointwise(op, lay, expr)

    def op_Convert(self, op: O.Convert) -> None:
        lay = _layout_of(op.result.type, self.group_threads, op.loc)
        dtype = op.result.type.dtype
        self.define_pointwise(op, lay, lambda i: _round_c(self.operand_expr(op.src, i, lay), dtype))

    def define_pointwise(self, op, lay, expr) -> None:
        if op.result.id in self.inline_ok:
            self.tiles[op.result.id] = _TileInfo(lay, op.result.type.dtype, virtual=expr)
            return
        info = self.declare_tile(op.result, op.loc)
        for i in range(lay.nregs):
            self.emit(f"{info.name}[{i}] = {expr(i)};")

    def op_Var(self, op: O.Var) -> None:
        """A variable: a register array (tile) or a mutable C scalar, copied from its init."""
        if isinstance(op.result.type, ScalarType):
            n = f"v{op.result.id}"
            self.emit(f"{_SCALAR_C[op.result.type.dtype.name]} {n} = {self.name(op.init)};")
            self.names[op.result.id] = n
            return
        info = self.declare_tile(op.result, op.loc)
        for i in range(info.layout.nregs):
            self.emit(f"{info.name}[{i}] = {self.tile_expr(op.init, i, info.layout)};")

    def op_Assign(self, op: O.Assign) -> None:
        if isinstance(op.dst.type, ScalarType):
            self.emit(f"{self.name(op.dst)} = {self.name(op.src)};")
            return
        dst = self.tiles[op.dst.id]
        # every element of the source is read before any is written: when register i's new
        # value reads another register of the destination (a broadcast of its own row
        # maximum, a slice), the new values go through temporaries first
        exprs = [self.tile_expr(op.src, i, dst.layout) for i in range(dst.layout.nregs)]
        if any(not _reads_only_register(e, dst.name, i) for i, e in enumerate(exprs)):
            self.emit("{")
            for i, e in enumerate(exprs):
                self.emit(f"    const auto assign_tmp{i} = {e};")
            for i in range(len(exprs)):
                self.emit(f"    {dst.name}[{i}] = assign_tmp{i};")
            self.emit("}")
            return
        for i, e in enumerate(exprs):
            self.emit(f"{dst.name}[{i}] = {e};")

    def op_Reduce(self, op: O.Reduce) -> None:
        src = self.tiles[op.src.id]
        lay = src.layout
        if not isinstance(lay, _Blocked) or op.axis != len(op.src.type.shape) - 1:
            raise CompileError("only row reductions (last axis) of loaded/blocked tiles are "
                               "supported", op.loc)
        if self.in_role:
            raise CompileError("reductions inside warp roles are not supported yet", op.loc)
        info = self.declare_tile(op.result, op.loc)
        combine = {"sum": lambda a, b: f"({a} + {b})", "max": lambda a, b: f"ag::max_nan({a}, {b})",
                   "min": lambda a, b: f"ag::min_nan({a}, {b})"}[op.fn]
        per_row = lay.per_row
        for r in range(lay.rows):
            acc = self.tile_expr(op.src, r * per_row, lay)
            for k in range(1, per_row):
                acc = combine(acc, self.tile_expr(op.src, r * per_row + k, lay))
            self.emit(f"{info.name}[{r}] = {acc};")
        self.emit("#pragma unroll")
        self.emit("for (int off = 16; off > 0; off >>= 1) {")
        for r in range(lay.rows):
            other = f"__shfl_xor_sync(0xffffffffu, {info.name}[{r}], off)"
            self.emit(f"    {info.name}[{r}] = {combine(f'{info.name}[{r}]', other)};")
        self.emit("}")
        warps = self.group_threads // 32
        if warps > 1:
            scratch = f"red{op.result.id}"
            self.shared_decls.append(f"__shared__ float {scratch}[{lay.rows * warps}];")
            self.emit("if (gtid % 32 == 0) {")
            for r in range(lay.rows):
                self.emit(f"    {scratch}[{r * warps} + gtid / 32] = {info.name}[{r}];")
            self.emit("}")
            self.emit("__syncthreads();")
            for r in range(lay.rows):
                acc = f"{scratch}[{r * warps}]"
                for w in range(1, warps):
                    acc = combine(acc, f"{scratch}[{r * warps + w}]")
                self.emit(f"{info.name}[{r}] = {acc};")
            self.emit("__syncthreads();")


    def op_RoleOp(self, op: O.RoleOp) -> None:
        raise CompileError("roles are rendered by the kernel driver", op.loc)

    def reg_expr(self, v: Value, index: int) -> str:
        info = self.tiles[v.id]
        return info.virtual(index) if info.virtual is not None else f"{info.name}[{index}]"

    def op_TileSlice(self, op: O.TileSlice) -> None:
        src = self.tiles[op.src.id]
        lay = _layout_of(op.result.type, self.group_threads, op.loc)
        if isinstance(src.layout, _Acc) and op.axis == 1 and op.start % 8 == 0:
            base = op.start // 2  # 8 accumulator columns live in 4 registers
        elif isinstance(src.layout, (_Blocked, _RowVec)) and op.axis == 0:
            base = op.start * src.layout.nregs // op.src.type.shape[0]
        else:
            raise CompileError(f"slicing a {op.src.type.layout} tile along axis {op.axis} at "
                               f"{op.start} is not supported", op.loc,
                               fix="slice accumulators along columns at multiples of 8, "
                                   "blocked tiles along rows")

        def expr(i: int, v=op.src, base=base) -> str:
            return self.reg_expr(v, base + i)

        self.define_pointwise(op, lay, expr)

    def _matrix_addresses(self, view: Value) -> str:
        """Per-lane shared address of the x4 fragment (lane l supplies row l%8 of matrix l/8:
        matrices 0/1 are rows 0-7/8-15 of a 16-row warp slab, 2/3 the next 8 columns)."""
        t: SmemViewType = view.type
        row_bytes = t.shape[1] * t.dtype.bytes
        return (f"ag::smem_u32({self.name(view)}) + (16 * (gtid / 32) + ((gtid % 32) / 8 % 2) * 8"
                f" + gtid % 8) * {row_bytes} + ((gtid % 32) / 16) * 16"), row_bytes

    def _check_matrix_view(self, view: Value, tile_type: TileType, loc) -> None:
        t: SmemViewType = view.type
        if tile_type.dtype.bits != 16 or t.shape != tuple(tile_type.shape) or t.shape[0] != 64 \
                or t.shape[1] % 16:
            raise CompileError("ldmatrix/stmatrix move a 64 x N (N multiple of 16) 16-bit tile "
                               "held in the wgmma fragment", loc)
        if tile_type.layout != "wgmma_acc":
            raise CompileError("ldmatrix/stmatrix need a tile in the wgmma accumulator "
                               "fragment layout", loc)
        if not self.in_role:
            raise CompileError("ldmatrix/stmatrix are warpgroup operations: use them inside an "
                               "ag.role", loc)

    def op_StMatrix(self, op: O.StMatrix) -> None:
        self._check_matrix_view(op.dst, op.src.type, op.loc)
        self.before_smem_write()
        base, _ = self._matrix_addresses(op.dst)
        sw = op.dst.type.swizzle
        pack = "ag::pack_bf16x2" if op.src.type.dtype.name == "bf16" else "ag::pack_f16x2"
        self.emit("{")
        self.indent += 1
        self.emit(f"const ag::uint32_t stm_base = {base};")
        for j in range(0, op.dst.type.shape[1] // 8, 2):
            dt = op.src.type.dtype
            regs = [f"{pack}({_strip_round(self.reg_expr(op.src, 4 * j + 2 * r), dt)}, "
                    f"{_strip_round(self.reg_expr(op.src, 4 * j + 2 * r + 1), dt)})"
                    for r in range(4)]
            self.emit(f"ag::stmatrix_x4_addr(ag::swizzle_smem_addr(stm_base + {j * 16}, {sw}), "
                      + ", ".join(regs) + ");")
        self.indent -= 1
        self.emit("}")

    def op_LdMatrix(self, op: O.LdMatrix) -> None:
        self._check_matrix_view(op.src, op.result.type, op.loc)
        info = self.declare_tile(op.result, op.loc)
        base, _ = self._matrix_addresses(op.src)
        sw = op.src.type.swizzle
        lo, hi = (("ag::bf16x2_lo", "ag::bf16x2_hi") if op.result.type.dtype.name == "bf16"
                  else ("ag::f16x2_lo", "ag::f16x2_hi"))
        self.emit("{")
        self.indent += 1
        self.emit(f"const ag::uint32_t ldm_base = {base};")
        for j in range(0, op.src.type.shape[1] // 8, 2):
            self.emit("{")
            self.emit("    ag::uint32_t r0, r1, r2, r3;")
            self.emit(f"    ag::ldmatrix_x4_addr(ag::swizzle_smem_addr(ldm_base + {j * 16}, "
                      f"{sw}), r0, r1, r2, r3);")
            for r in range(4):
                self.emit(f"    {info.name}[{4 * j + 2 * r}] = {lo}(r{r}); "
                          f"{info.name}[{4 * j + 2 * r + 1}] = {hi}(r{r});")
            self.emit("}")
        self.indent -= 1
        self.emit("}")


def _reads_only_register(expr: str, array: str, index: int) -> bool:
    """Whether `expr` reads no register of `array` other than `array[index]`."""
    import re

    return all(int(m) == index for m in re.findall(rf"\b{re.escape(array)}\[(\d+)\]", expr))


# Ops that may run while a consumer's last wgmma group is still in flight.
_NO_FLUSH = (O.For, O.Consume, O.Const, O.Arith, O.SmemSlice, O.If, O.ClusterRank)


def dtype_ptr(dtype) -> str:
    return f"{_elem_c(dtype)}*"


def _single_thread_role(role: O.RoleOp) -> bool:
    """A role that only issues TMA copies runs on one elected thread of its warpgroup."""
    allowed = (O.Const, O.Arith, O.For, O.If, O.Produce, O.TmaLoad, O.SmemSlice, O.ClusterRank)
    return all(isinstance(op, allowed) for op in role.body.walk())


def _count_uses(kernel: Kernel) -> dict[int, int]:
    uses: dict[int, int] = {}
    for op in kernel.walk():
        for v in op.operands():
            uses[v.id] = uses.get(v.id, 0) + 1
    return uses


def _inline_candidates(kernel: Kernel, uses: dict[int, int]) -> set[int]:
    """Pointwise tiles used exactly once later in the same region, with no in-place update of
    any tile they read in between: safe to inline at the use."""
    out: set[int] = set()

    def mutated(op) -> set[int]:
        return {o.acc.id if isinstance(o, O.Wgmma) else o.dst.id for o in op.walk()
                if isinstance(o, (O.Wgmma, O.Assign))}

    def deps(v: Value, defs) -> set[int]:
        d = {v.id}
        op = defs.get(v.id)
        if isinstance(op, (O.Elementwise, O.Convert, O.TileSlice)):
            for a in op.operands():
                if isinstance(a.type, TileType):
                    d |= deps(a, defs)
        return d

    defs = {r.id: op for op in kernel.walk() for r in op.results()}

    def region(r: Region) -> None:
        ops = r.ops
        for j, op in enumerate(ops):
            for sub in op.regions():
                region(sub)
            if not isinstance(op, (O.Elementwise, O.Convert, O.TileSlice)) or \
                    uses.get(op.result.id) != 1:
                continue
            if isinstance(op.result.type, TileType) and op.result.type.dtype.name == "i1":
                continue
            for u in range(j + 1, len(ops)):
                if op.result.id in {v.id for o in ops[u].walk() for v in o.operands()}:
                    between = set()
                    for o in ops[j + 1:u]:
                        between |= mutated(o)
                    if not (deps(op.result, defs) & between) and not isinstance(ops[u], O.For):
                        out.add(op.result.id)
                    break

    region(kernel.body)
    return out


def _smem_roots(kernel: Kernel) -> dict[int, int]:
    """Shared-memory view id -> the id of the allocation it slices."""
    root: dict[int, int] = {}
    for op in kernel.body.walk():
        if isinstance(op, O.SmemSlice):
            root[op.result.id] = root.get(op.buffer.id, op.buffer.id)
    return root


def _deferrable_store_buffers(kernel: Kernel, root: dict[int, int]) -> set[int]:
    """Shared buffers that TMA stores read and that only stmatrix of the storing role writes:
    their read-wait may move to that role's next smem write. A buffer another role writes, or
    TMA loads into, keeps the wait right after the store."""
    writers: dict[int, set] = {}
    stored: dict[int, set] = {}
    for role in (op for op in kernel.body.ops if isinstance(op, O.RoleOp)):
        for op in role.body.walk():
            if isinstance(op, O.StMatrix):
                writers.setdefault(root.get(op.dst.id, op.dst.id), set()).add(role.name)
            elif isinstance(op, O.TmaLoad):
                writers.setdefault(root.get(op.dst.id, op.dst.id), set()).add(None)
            elif isinstance(op, O.TmaStore):
                stored.setdefault(root.get(op.src.id, op.src.id), set()).add(role.name)
    return {buf for buf, roles in stored.items()
            if len(roles) == 1 and writers.get(buf, set()) <= roles}


def render(kernel: Kernel) -> Source:
    """Render a lowered kernel (after analysis.infer_layouts and lower.run)."""
    if kernel.attr("smem_plan") is None:
        raise CompileError(f"kernel {kernel.name} is not lowered; run argus.lower.run first")
    kernel = strip_tags(kernel)  # tags and tag assertions generate no code
    em = _Emitter(kernel)
    em.uses = _count_uses(kernel)
    em.smem_root = _smem_roots(kernel)
    em.deferrable_store_buffers = _deferrable_store_buffers(kernel, em.smem_root)
    em.inline_ok = _inline_candidates(kernel, em.uses)
    threads = kernel.attr("threads")
    em.group_threads = threads
    abi: list[AbiArg] = []
    params_c: list[str] = []
    for p in kernel.params:
        t = p.value.type
        if isinstance(t, TensorType):
            em.tensors[p.value.id] = p.name
            params_c.append(f"{dtype_ptr(t.dtype)} __restrict__ {p.name}")
            abi.append(AbiArg("tensor", p.name))
        elif isinstance(t, ScalarType):
            em.names[p.value.id] = p.name
            params_c.append(f"const int {p.name}")
            abi.append(AbiArg("scalar", p.name))
    for p in kernel.params:
        t = p.value.type
        if isinstance(t, TensorType):
            for d in range(len(t.shape) - 1):
                params_c.append(f"const long long {p.name}_s{d}")
                abi.append(AbiArg("stride", f"{p.name}_s{d}", tensor=p.name, dim=d))

    body_start = len(em.lines)
    em.emit("const int gtid = threadIdx.x;")
    cluster = tuple(kernel.attr("cluster", (1, 1, 1)))
    em.cluster_size = cluster[0] * cluster[1] * cluster[2]
    roles = [op for op in kernel.body.ops if isinstance(op, O.RoleOp)]
    prologue = [op for op in kernel.body.ops if not isinstance(op, O.RoleOp)]
    for op in prologue:
        em.op(op)
    if em.cluster_size > 1:
        # barriers of every CTA initialized before any peer multicasts into them or arrives
        em.emit("ag::cluster_sync();")
    elif any(isinstance(op, O.PipelineCreate) for op in prologue):
        em.emit("__syncthreads();  // barriers initialized before any role uses them")
    plan = {name: (first, count, regs) for name, first, count, regs in kernel.attr("role_plan", ())}
    for k, role in enumerate(roles):
        first, count, regs = plan[role.name]
        cond = f"threadIdx.x >= {first * 128} && threadIdx.x < {(first + count) * 128}"
        em.emit(("if" if k == 0 else "else if") + f" ({cond}) {{  // role {role.name}")
        em.indent += 1
        if regs:
            entry = (65536 // threads) // 8 * 8
            kind = "inc" if regs > entry else "dec"
            em.emit(f"ag::setmaxnreg_{kind}<{regs}>();")
        em.emit(f"const int v{role.index.id} = (int)(threadIdx.x / 128) - {first};")
        em.names[role.index.id] = f"v{role.index.id}"
        em.emit("const int gtid = threadIdx.x % 128;")
        if any(isinstance(op, O.Wgmma) for op in role.body.walk()):
            em.emit("const int acc_row = 16 * (gtid / 32) + (gtid % 32) / 4;")
            em.emit("const int acc_col = 2 * (gtid % 4);")
        for pid in sorted({op.pipe.id for op in role.body.walk()
                           if isinstance(op, (O.Produce, O.Consume))}):
            em.emit(f"int n{pid} = 0;  // this role's step counter on pipeline %{pid}")
        for pid in sorted({op.pipe.id for op in role.body.walk()
                           if isinstance(op, O.Consume) and op.wgmma_in_flight}):
            em.emit(f"int pend{pid} = -1;  // slot whose wgmma is still in flight")
        em.group_threads = 128
        em.in_role = True
        if _single_thread_role(role):
            em.emit("if (gtid == 0) {  // one thread issues the async copies")
            em.indent += 1
            em.region(role.body)
            em.indent -= 1
            em.emit("}")
        else:
            em.tma_stores = False
            em.store_unfenced, em.store_read_pending = True, False
            em.region(role.body)
            em.flush_pending()
            if em.tma_stores:
                em.emit("if (gtid == 0) ag::tma_store_wait<0>();  // bulk stores done before exit")
        em.in_role = False
        em.group_threads = threads
        em.indent -= 1
        em.emit("}")

    if em.cluster_size > 1:
        # no CTA leaves while a peer may still multicast into its smem or arrive on its
        # barriers (HOPPER.md hazard 12)
        em.emit("ag::cluster_sync();")
    for (tensor_id, box, swizzle), index in sorted(em.tmaps.items(), key=lambda kv: kv[1]):
        tensor_name = em.tensors[tensor_id]
        params_c.append(f"const __grid_constant__ ag::TensorMap tmap{index}")
        abi.append(AbiArg("tmap", f"tmap{index}", tensor=tensor_name, box=box, swizzle=swizzle))

    symbol = f"argus_{kernel.name}"
    smem_bytes = kernel.attr("smem_bytes", 0)
    dynamic = smem_bytes + (1024 if smem_bytes else 0)
    body = em.lines[body_start:]
    out = [f"// Generated by Argus from kernel `{kernel.name}`. Do not edit: regenerate.",
           f'#include "{HEADER}"']
    if em.wgmma_specs:
        out.append(wgmma_prelude(em.wgmma_specs))
    sig = ",\n    ".join(params_c)
    out.append(f'extern "C" __global__ void __launch_bounds__({threads}, 1) '
               f'{symbol}(\n    {sig}) {{')
    if smem_bytes:
        out.append("    extern __shared__ __align__(1024) unsigned char argus_smem_raw[];")
        out.append("    // Swizzle patterns are anchored to absolute addresses: align the block to "
                   "1024 B.")
        out.append("    unsigned char* const smem = argus_smem_raw + "
                   "((1024u - (ag::smem_u32(argus_smem_raw) & 1023u)) & 1023u);")
    out.extend("    " + d for d in em.shared_decls)
    out.extend(body)
    out.append("}")
    return Source(symbol, "\n".join(out) + "\n", tuple(abi), threads, dynamic,
                  tuple(kernel.attr("cluster", (1, 1, 1))))
