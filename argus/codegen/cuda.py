"""Lowered ir.Kernel → CUDA C++ with inline PTX (through the device header argus_sm90.cuh).

One job: render, never decide. Every decision (layouts, TMA boxes, descriptors, the mbarrier
protocol, the smem plan, the role plan) was made by analysis and lowering passes and is read
from the IR; this file turns it into text. The kernel symbol is `argus_<name>` (the KernelBench
harness recognizes Argus kernels by that prefix).

Register tiles become per-thread arrays unrolled at generation time: the element a register
holds is a static function of the register index and the thread (target/register_layouts.py).
A pointwise tile used once, right after it is made, is not stored: its expression is inlined at
the use (so `acc.to(bf16)` feeding a store costs no registers).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

from argus.codegen.wgmma import WgmmaSpec, wgmma_prelude
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.ir.tag_ops import strip_tags
from argus.ir.types import ScalarType, SmemType, SmemViewType, TensorType, TileType
from argus.target import register_layouts as RL
from argus.target.register_layouts import RegisterLayout

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
    dtype: str = "i32"   # of a "scalar" (i32 shape symbols; ag.Scalar parameters i32 or f32)


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


class _Lay:
    """A register layout as codegen renders it: the RegisterLayout (target/register_layouts.py)
    plus the C names of the thread parts the emitter has declared (acc_row / acc_col)."""

    def __init__(self, rl: RegisterLayout, acc_names: bool = False):
        self.rl = rl
        self.acc_names = acc_names

    def __eq__(self, other) -> bool:
        return isinstance(other, _Lay) and self.rl == other.rl

    def __hash__(self) -> int:
        return hash(self.rl)

    def __repr__(self) -> str:
        return f"{self.rl.name} {self.rl.shape}"

    @property
    def nregs(self) -> int:
        return self.rl.nregs

    @property
    def vec(self) -> int:
        return 1

    def thread_c(self, d: int) -> str:
        if self.acc_names:
            imgs = tuple(img[d] for img in self.rl.thread_bases)
            if imgs == _ACC_ROW_IMAGES:
                return "acc_row"
            if imgs == _ACC_COL_IMAGES:
                return "acc_col"
        return self.rl.thread_c(d, "gtid")

    def coord(self, i: int) -> tuple[str, ...]:
        """C expressions of the tile coordinate register i of thread gtid holds."""
        out = []
        for d in range(self.rl.rank):
            th, off = self.thread_c(d), self.rl.regs[i][d]
            out.append(str(off) if not th else f"({th} + {off})")
        return tuple(out)

    def row(self, i: int) -> str:
        c = self.coord(i)
        return c[-2] if len(c) >= 2 else "0"

    def col(self, i: int) -> str:
        return self.coord(i)[-1]


class _Blocked(_Lay):
    """A blocked tile whose last dim is a multiple of the threads: thread t holds, per row,
    columns chunk*T*vec + t*vec + j (so `vec` consecutive registers are consecutive columns)."""

    @property
    def vec(self) -> int:
        return self.rl.thread_bases[0][-1] if self.rl.thread_bases else self.rl.shape[-1]

    @property
    def per_row(self) -> int:
        return self.rl.shape[-1] // self.rl.threads

    def col(self, i: int) -> str:
        k = i % self.per_row
        base = (k // self.vec) * self.rl.threads * self.vec + k % self.vec
        return f"(gtid * {self.vec} + {base})"


class _Acc(_Lay):
    """The wgmma m64nNk16 accumulator: row = 16w + g + 8((i/2)%2), col = 2q + (i%2) + 8(i/4)."""


_ACC_ROW_IMAGES = tuple(img[0] for img in RL.wgmma_acc(8).thread_bases)
_ACC_COL_IMAGES = tuple(img[1] for img in RL.wgmma_acc(8).thread_bases)


@functools.lru_cache(maxsize=4096)
def _broadcast_map(src: RegisterLayout, result: RegisterLayout):
    return src.broadcast_map(result)


def _layout_of(t: TileType, group_threads: int, loc, acc_names: bool = False) -> _Lay:
    """The codegen view of tile type `t` over the `group_threads` threads of its group."""
    if not 1 <= len(t.shape) <= 4:
        raise CompileError(f"register tiles of rank {len(t.shape)} are not supported (1 to 4)",
                           loc)
    try:
        rl = RL.build(t.layout or "blocked", tuple(t.shape), group_threads)
    except ValueError as e:
        raise CompileError(f"register tile {t}: {e}", loc,
                           fix="give the tile a last dim that is a multiple of the threads of "
                               "its group, or a power-of-two shape") from None
    if t.layout in ("", "blocked") and t.shape[-1] % group_threads == 0:
        return _Blocked(rl, acc_names)
    if t.layout in ("wgmma_acc", "wgmma_a"):
        return _Acc(rl, acc_names)
    return _Lay(rl, acc_names)


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
        "and": lambda: f"({a[0]} && {a[1]})", "or": lambda: f"({a[0]} || {a[1]})",
        "not": lambda: f"(!{a[0]})",
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


def _vector_access(lay, dtype) -> int:
    """Bytes of one vector global access into a chunk of `lay` (min(16, vec x element bytes)),
    or 0 where the tile is accessed element by element: non-blocked layouts, vec 1, and dtypes
    other than f32 / bf16 / f16 (integer and fp8 tiles keep the scalar path)."""
    if not isinstance(lay, _Blocked) or lay.vec < 2 or dtype.name not in ("f32", "bf16", "f16"):
        return 0
    return min(16, lay.vec * dtype.bytes)


def _vector_load_c(ptr: str, width: int, dtype, regs: list[str]) -> list[str]:
    """Statements loading `width` bytes at `ptr` (aligned) into the f32 registers `regs`."""
    if dtype.name == "f32":
        return [f"ag::ld_global_f32x{len(regs)}({ptr}, {', '.join(regs)});"]
    lo, hi = (("ag::bf16x2_lo", "ag::bf16x2_hi") if dtype.name == "bf16"
              else ("ag::f16x2_lo", "ag::f16x2_hi"))
    words = [f"gw{k}" for k in range(width // 4)]
    if len(words) == 1:
        out = [f"const ag::uint32_t gw0 = ag::ld_global_b32({ptr});"]
    else:
        out = [f"ag::uint32_t {', '.join(words)};",
               f"ag::ld_global_b32x{len(words)}({ptr}, {', '.join(words)});"]
    for k, w in enumerate(words):
        out.append(f"{regs[2 * k]} = {lo}({w}); {regs[2 * k + 1]} = {hi}({w});")
    return out


def _vector_store_c(ptr: str, width: int, dtype, values: list[str]) -> str:
    """One `width`-byte store at `ptr` (aligned) of the f32 values (16-bit dtypes: packed)."""
    if dtype.name == "f32":
        return f"ag::st_global_f32x{len(values)}({ptr}, {', '.join(values)});"
    pack = "ag::pack_bf16x2" if dtype.name == "bf16" else "ag::pack_f16x2"
    words = [f"{pack}({values[2 * k]}, {values[2 * k + 1]})" for k in range(len(values) // 2)]
    if len(words) == 1:
        return f"ag::st_global_b32({ptr}, {words[0]});"
    return f"ag::st_global_b32x{len(words)}({ptr}, {', '.join(words)});"


_COMBINE = {"sum": lambda a, b: f"({a} + {b})", "prod": lambda a, b: f"({a} * {b})",
            "max": lambda a, b: f"ag::max_nan({a}, {b})",
            "min": lambda a, b: f"ag::min_nan({a}, {b})"}


def _arg_better(fn: str, v: str, i: str, bv: str, bi: str) -> str:
    """C condition: candidate (v, i) replaces the best (bv, bi) of argmax/argmin. NaN counts as
    the extreme (numpy, torch); equal values keep the smaller index."""
    cmp = ">" if fn == "argmax" else "<"
    return (f"(({v}) {cmp} ({bv}) && ({bv}) == ({bv})) || (({v}) == ({bv}) && ({i}) < ({bi})) || "
            f"(({v}) != ({v}) && (({bv}) == ({bv}) || ({i}) < ({bi})))")


def _arg_update_c(fn: str, v: str, i: str, bv: str, bi: str) -> str:
    """C statement: the candidate (v, i) becomes the best (bv, bi) when _arg_better says so."""
    return f"if ({_arg_better(fn, v, i, bv, bi)}) {{ {bv} = {v}; {bi} = {i}; }}"


def _dense_bits_c(bits, tid: str = "gtid") -> str:
    """C expression packing thread bits `bits` of tid into a dense index (bit k = bits[k])."""
    terms = []
    k = 0
    while k < len(bits):
        n = 1
        while k + n < len(bits) and bits[k + n] == bits[k] + n:
            n += 1
        term = f"(({tid} >> {bits[k]}) & {(1 << n) - 1})"
        terms.append(term if k == 0 else f"{term} * {1 << k}")
        k += n
    return " + ".join(terms) if terms else "0"


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
    uses: dict[int, int] = field(default_factory=dict)
    inline_ok: set[int] = field(default_factory=set)
    shared_decls: list[str] = field(default_factory=list)
    tensors: dict[int, str] = field(default_factory=dict)
    lazy_zero: dict[str, int] = field(default_factory=dict)  # tile -> regs, scale-d zeroing
    peers: dict[int, int] = field(default_factory=dict)  # pipe id -> CTAs releasing a slot
    cluster_size: int = 1
    in_role: bool = False        # emitting a warp role's body (group = one warpgroup)
    # a role of several warpgroups: (their count, the C name of this one's index in the role);
    # each warpgroup gets its own copy of a group's shared scratch (reductions, conversions)
    role_copies: tuple[int, str] = (1, "")
    acc_names: bool = False      # acc_row / acc_col are declared (a role that runs wgmma)
    current_full: str = ""       # the full barrier of the produce step being emitted

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def name(self, v: Value) -> str:
        if v.id in self.names:
            return self.names[v.id]
        raise CompileError(f"codegen: value {v} has no C name (used before definition?)")

    # -- tiles -------------------------------------------------------------------------
    def tile_expr(self, v: Value, i: int, result_layout) -> str:
        """C expression of operand tile `v` at register i of a result with `result_layout`
        (numpy broadcasting through RegisterLayout.broadcast_map: the same thread holds the
        element, so no data moves; layout inference inserted a conversion otherwise)."""
        info = self.tiles[v.id]
        lay = info.layout
        j = i
        if lay != result_layout:
            m = _broadcast_map(lay.rl, result_layout.rl)
            if m is None:
                raise CompileError(f"codegen cannot broadcast a {lay} tile into {result_layout} "
                                   "without a layout conversion (layout inference inserts one)")
            j = m[i]
        if info.virtual is not None:
            return info.virtual(j)
        return f"{info.name}[{j}]"

    def layout(self, t: TileType, loc) -> _Lay:
        return _layout_of(t, self.group_threads, loc, self.acc_names)

    def operand_expr(self, v: Value, i: int, result_layout) -> str:
        if isinstance(v.type, TileType):
            return self.tile_expr(v, i, result_layout)
        return self.name(v)

    def declare_tile(self, v: Value, loc) -> _TileInfo:
        t: TileType = v.type
        info = _TileInfo(self.layout(t, loc), t.dtype, name=f"t{v.id}")
        self.tiles[v.id] = info
        ctype = {"i1": "bool", "i32": "int"}.get(t.dtype.name, "float")
        self.emit(f"{ctype} {info.name}[{info.layout.nregs}];")
        return info

    # -- regions -----------------------------------------------------------------------
    def region(self, region: Region) -> None:
        ops = region.ops
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, O.WgmmaFence):
                i = self.wgmma_issue(ops, i)
            elif isinstance(op, O.TmaStore):
                i = self.tma_store_issue(ops, i)
            else:
                self.op(op)
                i += 1

    def block(self, head: str, region: Region) -> None:
        self.emit(head + " {")
        self.indent += 1
        self.region(region)
        self.indent -= 1
        self.emit("}")

    def op(self, op: O.Op) -> None:  # noqa: C901 - a dispatcher over the op set
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
        self.block(f"for (int {v} = {self.name(op.start)}; {v} < {self.name(op.stop)}; "
                   f"{v} += {self.name(op.step)})", op.body)

    def op_If(self, op: O.If) -> None:
        self.block(f"if ({self.name(op.cond)})", op.body)

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
            self.region(op.body)  # its waits and slot release are ops of the body (lower/sync)
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

    def tma_store_issue(self, ops, i: int) -> int:
        """ops[i] is a TMA store: it, the commit and a read-wait without a note that directly
        follow it render as one block of the issuing thread. Returns the next index."""
        op: O.TmaStore = ops[i]
        view: SmemViewType = op.src.type
        box = (1,) * (len(op.tensor.type.shape) - 2) + tuple(view.shape)
        tm = self.tmap_for(op.tensor, box, view.swizzle)
        coords = [self.name(c) for c in reversed(op.coords)]
        self.emit("if (gtid == 0) {")
        self.emit(f"    ag::tma_store_{len(coords)}d(&{tm}, {self.name(op.src)}, "
                  f"{', '.join(coords)});")
        i += 1
        if i < len(ops) and isinstance(ops[i], O.TmaStoreCommit):
            self.emit("    ag::tma_store_commit();")
            i += 1
            if i < len(ops) and isinstance(ops[i], O.TmaStoreWait) and not ops[i].note:
                self.emit(f"    {self.tma_store_wait_c(ops[i])}")
                i += 1
        self.emit("}")
        return i

    @staticmethod
    def tma_store_wait_c(op: O.TmaStoreWait) -> str:
        return f"ag::tma_store_wait{'_read' if op.read else ''}<{op.pending}>();"

    # synchronization ops: lower/sync.py placed each; they render one for one
    def op_TmaStore(self, op: O.TmaStore) -> None:
        self.tma_store_issue((op,), 0)

    def op_TmaStoreCommit(self, op: O.TmaStoreCommit) -> None:
        self.emit("if (gtid == 0) ag::tma_store_commit();")

    def op_TmaStoreWait(self, op: O.TmaStoreWait) -> None:
        self.emit(f"if (gtid == 0) {self.tma_store_wait_c(op)}" + _note(op.note))

    def op_ProxyFence(self, op: O.ProxyFence) -> None:
        self.emit("ag::fence_view_async_shared();")

    def op_GroupBarrier(self, op: O.GroupBarrier) -> None:
        line = ("ag::named_barrier_sync(1 + threadIdx.x / 128, 128);" if op.scope == "warpgroup"
                else "__syncthreads();")
        self.emit(line + _note(op.note))

    def op_ClusterSync(self, op: O.ClusterSync) -> None:
        self.emit("ag::cluster_sync();")

    def op_SetMaxNReg(self, op: O.SetMaxNReg) -> None:
        self.emit(f"ag::setmaxnreg_{'inc' if op.inc else 'dec'}<{op.regs}>();")

    def op_WgmmaWait(self, op: O.WgmmaWait) -> None:
        self.emit(f"ag::wgmma_wait<{op.pending}>();" + _note(op.note))

    def op_WgmmaCommit(self, op: O.WgmmaCommit) -> None:
        self.emit("ag::wgmma_commit();")

    def op_WgmmaFence(self, op: O.WgmmaFence, a_regs: int = 0) -> None:
        if op.a_registers and not a_regs:
            raise CompileError("wgmma.fence of register A outside its wgmma issue", op.loc)
        for t in op.tiles:
            self.emit(f"ag::fence_operands({self.tiles[t.id].name});")
        for kk in range(a_regs if op.a_registers else 0):
            self.emit(f"ag::fence_operands(ra[{kk}]);")
        self.emit("ag::wgmma_fence();")

    def op_FenceOperands(self, op: O.FenceOperands, a_regs: int = 0) -> None:
        if op.a_registers and not a_regs:
            raise CompileError("fence.operands of register A outside its wgmma issue", op.loc)
        for kk in range(a_regs if op.a_registers else 0):
            self.emit(f"ag::fence_operands(ra[{kk}]);")
        for t in op.tiles:
            acc = self.tiles[t.id].name
            self.emit(f"ag::fence_operands({acc});")
            if op.zero_unwritten and acc in self.lazy_zero:  # no wgmma ran: still zero
                self.emit(f"if ({acc}_zero) {{")
                self.emit("    #pragma unroll")
                self.emit(f"    for (int i = 0; i < {self.lazy_zero[acc]}; ++i) {acc}[i] = 0.0f;")
                self.emit("}")

    def op_SlotRelease(self, op: O.SlotRelease) -> None:
        pid = op.pipe.id
        if not op.previous:
            self.emit(f"if (threadIdx.x % 128 == 0) {{ {self.release(pid, self.name(op.stage))} }}")
            return
        self.emit(f"if (pend{pid} >= 0 && threadIdx.x % 128 == 0) "
                  f"{{ {self.release(pid, f'pend{pid}')} }}")
        self.emit(f"pend{pid} = {self.name(op.stage) if op.stage is not None else -1};")

    def wgmma_issue(self, ops, i: int) -> int:
        """ops[i:] is `wgmma.fence, wgmma, wgmma.commit`, maybe followed by `wgmma.wait 0` and
        the `fence.operands` of the same tiles: one C block (the descriptors and packed A
        registers are local to it). Returns the next index."""
        fence = ops[i]
        op = ops[i + 1] if i + 1 < len(ops) else None
        if not isinstance(op, O.Wgmma) or i + 2 >= len(ops) or \
                not isinstance(ops[i + 2], O.WgmmaCommit):
            raise CompileError("wgmma.fence must precede a wgmma and its wgmma.commit", fence.loc)
        tail = ops[i + 3:i + 5]
        waited = (len(tail) == 2 and isinstance(tail[0], O.WgmmaWait) and tail[0].pending == 0
                  and isinstance(tail[1], O.FenceOperands) and tail[1].tiles == fence.tiles)
        self.emit("{")
        self.indent += 1
        issue = self.wgmma_register_a if op.a_in_registers else self.wgmma_smem
        a_regs = issue(op, fence)
        if waited:
            self.op_WgmmaWait(tail[0])
            self.op_FenceOperands(tail[1], a_regs)
        self.indent -= 1
        self.emit("}")
        return i + (5 if waited else 3)

    def wgmma_register_a(self, op: O.Wgmma, fence: O.WgmmaFence) -> int:
        """The "rs" form: A is a bf16/f16 [64, K] tile in the A fragment (the accumulator
        pattern of 16 columns, target/fragments.py wgmma_a_coord). k16 step kk reads registers
        8kk .. 8kk+7, packed in pairs into ra[kk], the instruction's four 32-bit A registers
        (what `wgmma.fence` / `fence.operands` with a_registers name). Returns the k steps."""
        acc = self.tiles[op.acc.id]
        if op.a.type.layout not in ("wgmma_acc", "wgmma_a"):
            raise CompileError(f"the register A operand {op.a} of this wgmma is in layout "
                               f"{op.a.type.layout!r}, not the wgmma A fragment", op.loc,
                               fix="pass a tile converted from a 64-row wgmma accumulator "
                                   "(p = s.to(ag.bf16)) or loaded with ag.ldmatrix")
        n = op.acc.type.shape[1]
        dt = op.a.type.dtype
        spec = WgmmaSpec(n=n, a_dtype=dt.name, b_dtype=dt.name, acc_dtype="f32",
                         a_source="regs", trans_b=op.trans_b)
        if spec not in self.wgmma_specs:
            self.wgmma_specs.append(spec)
        sw_b, lbo_b, sbo_b, step_b = op.b_desc
        k_steps = op.k_extent // spec.k
        pack = "ag::pack_bf16x2" if dt.name == "bf16" else "ag::pack_f16x2"
        self.emit(f"ag::uint32_t ra[{k_steps}][4];")
        for kk in range(k_steps):
            for r in range(4):
                lo = _strip_round(self.reg_expr(op.a, 8 * kk + 2 * r), dt)
                hi = _strip_round(self.reg_expr(op.a, 8 * kk + 2 * r + 1), dt)
                self.emit(f"ra[{kk}][{r}] = {pack}({lo}, {hi});")
        self.emit(f"const ag::uint64_t db = ag::make_smem_desc({self.name(op.b)}, {sw_b}, "
                  f"{lbo_b}, {sbo_b});")
        self.op_WgmmaFence(fence, k_steps)
        lazy = acc.name in self.lazy_zero
        for kk in range(k_steps):
            scale = f"1 - {acc.name}_zero" if lazy and kk == 0 else "1"
            self.emit(f"ag::{spec.name}({acc.name}, ra[{kk}], ag::desc_advance(db, "
                      f"{kk * step_b}), {scale});")
        self.emit("ag::wgmma_commit();")
        if lazy:
            self.emit(f"{acc.name}_zero = 0;")
        return k_steps

    def wgmma_smem(self, op: O.Wgmma, fence: O.WgmmaFence) -> int:
        """Both operands through shared-memory descriptors. Returns 0 (no A registers)."""
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
        self.emit(f"const ag::uint64_t da = ag::make_smem_desc({self.name(op.a)}, {sw_a}, "
                  f"{lbo_a}, {sbo_a});")
        self.emit(f"const ag::uint64_t db = ag::make_smem_desc({self.name(op.b)}, {sw_b}, "
                  f"{lbo_b}, {sbo_b});")
        self.op_WgmmaFence(fence)
        lazy = acc.name in self.lazy_zero
        for kk in range(k_steps):
            scale = f"1 - {acc.name}_zero" if lazy and kk == 0 else "1"
            self.emit(f"ag::{spec.name}({acc.name}, ag::desc_advance(da, {kk * step_a}), "
                      f"ag::desc_advance(db, {kk * step_b}), {scale});")
        self.emit("ag::wgmma_commit();")
        if lazy:
            self.emit(f"{acc.name}_zero = 0;")
        return 0

    def op_Wgmma(self, op: O.Wgmma) -> None:
        raise CompileError("a wgmma without its wgmma.fence and wgmma.commit (run lower.sync)",
                           op.loc)

    # register tiles
    def op_Full(self, op: O.Full) -> None:
        info = self.declare_tile(op.result, op.loc)
        if op.scale_d_zero:
            # The first wgmma overwrites (scale-d = 0); zero only if none ran (fence.operands).
            self.emit(f"int {info.name}_zero = 1;")
            self.lazy_zero[info.name] = info.layout.nregs
            return
        self.emit("#pragma unroll")
        self.emit(f"for (int i = 0; i < {info.layout.nregs}; ++i) {info.name}[i] = "
                  f"{_c_float(op.value)};")

    def bounds(self, tensor: Value, offsets, info: _TileInfo, i: int,
               tile_rank: int, span: int = 1) -> tuple[str, str]:
        """(condition, linear index) of element i of a tile at `offsets` of a global tensor.
        The tile covers the tensor's last one or two dims; leading dims add offset x stride.
        With span > 1, the condition says that elements i .. i + span - 1 (one chunk of a
        blocked tile: consecutive columns of one row) are all in bounds."""
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
        last = f"{col} < {self._dim(t, rank - 1)}" if span == 1 else \
            f"{col} + {span} <= {self._dim(t, rank - 1)}"
        conds.append(f"{col} >= 0 && {last}")
        terms.append(col)
        for k in range(2, tile_rank + 1):  # tile dims above the last (rank <= 4)
            c = lay.row(i) if k == 2 else lay.coord(i)[-k]
            row = f"({self.name(offsets[-k])} + {c})"
            conds.append(f"{row} >= 0 && {row} < {self._dim(t, rank - k)}")
            terms.append(f"(long long){row} * {name}_s{rank - k}")
        return " && ".join(conds), " + ".join(terms)

    def _dim(self, t: TensorType, d: int) -> str:
        dim = t.shape[d]
        return str(dim) if isinstance(dim, int) else dim

    def op_Load(self, op: O.Load) -> None:
        info = self.declare_tile(op.result, op.loc)
        name = self.tensors[op.tensor.id]
        dtype = op.tensor.type.dtype
        rank = len(op.result.type.shape)

        def scalar(i: int) -> str:
            cond, idx = self.bounds(op.tensor, op.offsets, info, i, rank)
            return (f"{info.name}[{i}] = ({cond}) ? {_from_mem_c(f'{name}[{idx}]', dtype)} : "
                    f"{_c_float(op.other)};")

        self.chunked(op, info, dtype, rank, scalar,
                     lambda ptr, width, regs: _vector_load_c(
                         ptr, width, dtype, [f"{info.name}[{i}]" for i in regs]))

    def chunked(self, op, info: _TileInfo, dtype, rank: int, scalar, vector,
                prologue=None) -> None:
        """Global access of a register tile: element by element (`scalar(i)` -> statement), or,
        for a blocked tile whose chunks are 4-16 bytes of f32/bf16/f16, one vector access per
        chunk (`vector(ptr, width, regs)` -> statements) where the whole chunk is in bounds and
        its address is aligned to the access, checked at run time per chunk; other chunks
        (ragged edges, unaligned base pointers or row strides, odd column offsets) take the
        scalar path. `prologue(regs)` -> statements that run first for each chunk."""
        lay = info.layout
        tensor = op.tensor
        name = self.tensors[tensor.id]
        width = _vector_access(lay, dtype)
        if not width:
            for i in range(lay.nregs):
                for line in prologue([i]) if prologue else ():
                    self.emit(line)
                self.emit(scalar(i))
            return
        per_access = width // dtype.bytes
        for i0 in range(0, lay.nregs, lay.vec):
            regs = list(range(i0, i0 + lay.vec))
            cond, idx = self.bounds(tensor, op.offsets, info, i0, rank, span=lay.vec)
            self.emit(f"{{  // {name}: {lay.vec * dtype.bytes}-byte chunk of registers "
                      f"{i0}..{i0 + lay.vec - 1}")
            self.indent += 1
            for line in prologue(regs) if prologue else ():
                self.emit(line)
            self.emit(f"const long long ge = {idx};")
            self.emit(f"if ({cond} && ag::aligned_to({name} + ge, {width})) {{")
            self.indent += 1
            for a in range(0, lay.vec, per_access):
                ptr = f"{name} + ge" + (f" + {a}" if a else "")
                for line in vector(ptr, width, regs[a:a + per_access]):
                    self.emit(line)
            self.indent -= 1
            self.emit("} else {")
            for i in regs:
                self.emit("    " + scalar(i))
            self.emit("}")
            self.indent -= 1
            self.emit("}")

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
        rank = len(op.value.type.shape)
        if not _vector_access(lay, dtype):
            for i in range(lay.nregs):
                cond, idx = self.bounds(op.tensor, op.offsets, info, i, rank)
                val = self.tile_expr(op.value, i, lay)
                self.emit(f"if ({cond}) {name}[{idx}] = {_to_mem_c(val, dtype)};")
            return

        # each chunk's values are computed once (gv0, gv1, ...) and stored by either path
        def scalar(i: int) -> str:
            cond, idx = self.bounds(op.tensor, op.offsets, info, i, rank)
            return f"if ({cond}) {name}[{idx}] = {_to_mem_c(f'gv{i % lay.vec}', dtype)};"

        def values(regs: list[int]) -> list[str]:
            return [f"const float gv{i % lay.vec} = "
                    f"{_strip_round(self.tile_expr(op.value, i, lay), dtype)};" for i in regs]

        self.chunked(op, info, dtype, rank, scalar,
                     lambda ptr, width, regs: [_vector_store_c(
                         ptr, width, dtype, [f"gv{i % lay.vec}" for i in regs])],
                     prologue=values)

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
        lay = self.layout(op.result.type, op.loc)
        dtype = op.result.type.dtype

        def expr(i: int) -> str:
            e = _ew_c(op.fn, [self.operand_expr(a, i, lay) for a in op.args])
            return e if dtype.name == "i1" else _round_c(e, dtype)

        self.define_pointwise(op, lay, expr)

    def op_Convert(self, op: O.Convert) -> None:
        lay = self.layout(op.result.type, op.loc)
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
        """Reduce along any axis by the plan the layout gives (RegisterLayout.reduction_plan):
        registers in-thread, then xor shuffles over the lane bits that move along the axis,
        then, when warp bits do, partials through shared memory (a named barrier for the
        warpgroup inside a role). argmax/argmin carry (value, index) pairs; ties and NaNs
        resolve to the smallest index, as numpy and torch."""
        src = self.tiles[op.src.id]
        lay = src.layout
        try:
            plan = lay.rl.reduction_plan(op.axis)
        except ValueError as e:
            raise CompileError(f"cannot reduce a {lay} tile along axis {op.axis}: {e}", op.loc,
                               fix="convert the tile to a blocked layout first") from None
        res = self.layout(op.result.type, op.loc)
        m = _broadcast_map(plan.result, res.rl)
        if m is None or sorted(m) != list(range(res.nregs)) or res.nregs != len(plan.groups):
            raise CompileError(f"reduction result layout {res} is not the slice {plan.result.name}"
                               f" of its source", op.loc)
        info = self.declare_tile(op.result, op.loc)
        arg = op.fn in ("argmax", "argmin")
        vals = f"{info.name}_v" if arg else info.name
        if arg:
            self.emit(f"float {vals}[{res.nregs}];")
        combine = _COMBINE.get(op.fn)
        # result register k of the declared layout takes plan group inv[k]
        inv = {m[k]: k for k in range(res.nregs)}
        order = [inv[g] for g in range(len(plan.groups))]
        for g, regs in enumerate(plan.groups):
            k = order[g]
            if not arg:
                acc = self.tile_expr(op.src, regs[0], lay)
                for r in regs[1:]:
                    acc = combine(acc, self.tile_expr(op.src, r, lay))
                self.emit(f"{vals}[{k}] = {acc};")
                continue
            self.emit(f"{vals}[{k}] = {self.tile_expr(op.src, regs[0], lay)}; "
                      f"{info.name}[{k}] = {lay.coord(regs[0])[op.axis]};")
            for r in regs[1:]:
                self.emit("{")
                self.emit(f"    const float v = {self.tile_expr(op.src, r, lay)}; "
                          f"const int i = {lay.coord(r)[op.axis]};")
                self.emit("    " + _arg_update_c(op.fn, "v", "i", f"{vals}[{k}]",
                                                   f"{info.name}[{k}]"))
                self.emit("}")
        n = res.nregs
        if plan.lane_masks:
            if plan.lane_masks == (16, 8, 4, 2, 1) and not arg:
                self.emit("#pragma unroll")
                self.emit("for (int off = 16; off > 0; off >>= 1) {")
                for k in range(n):
                    other = f"__shfl_xor_sync(0xffffffffu, {vals}[{k}], off)"
                    self.emit(f"    {vals}[{k}] = {combine(f'{vals}[{k}]', other)};")
                self.emit("}")
            else:
                for mask in plan.lane_masks:
                    for k in range(n):
                        other = f"__shfl_xor_sync(0xffffffffu, {vals}[{k}], {mask})"
                        if not arg:
                            self.emit(f"{vals}[{k}] = {combine(f'{vals}[{k}]', other)};")
                            continue
                        oi = f"__shfl_xor_sync(0xffffffffu, {info.name}[{k}], {mask})"
                        update = _arg_update_c(op.fn, "v", "i", f"{vals}[{k}]",
                                               f"{info.name}[{k}]")
                        self.emit(f"{{ const float v = {other}; const int i = {oi}; {update} }}")
        if plan.warp_bits:
            self._reduce_warps(op, plan, info, vals, n, arg, combine)

    def _reduce_warps(self, op, plan, info, vals: str, n: int, arg: bool, combine) -> None:
        """Combine per-warp partials through shared memory: slot (register, other thread bits,
        warp bits along the axis); one writer per slot, a group barrier, every thread reads the
        partials of its row (or column), then a barrier so a loop may reuse the slots."""
        threads = self.group_threads
        warps = threads // 32
        nb = len(plan.result.thread_bases)
        all_warp = tuple(range(5, nb))
        if plan.warp_bits == all_warp:
            nw, wexpr = warps, "gtid / 32"
        elif threads & (threads - 1) == 0:
            nw, wexpr = 1 << len(plan.warp_bits), _dense_bits_c(plan.warp_bits)
        else:
            raise CompileError(f"a reduction over some of the warps of a {threads}-thread group "
                               "needs a power-of-two group", op.loc)
        other = 1 << len(plan.other_bits)
        oexpr = _dense_bits_c(plan.other_bits) if plan.other_bits else ""
        lane_axis = sum(m for m in plan.lane_masks)
        writer_mask = lane_axis | sum(1 << b for b in plan.replicated_bits)
        scratch = f"red{op.result.id}"
        size = n * other * nw
        copies, wg = self.role_copies
        self.shared_decls.append(f"__shared__ float {scratch}[{size * copies}];")
        if arg:
            self.shared_decls.append(f"__shared__ int {scratch}_i[{size * copies}];")
        own = f"{wg} * {size} + " if wg else ""  # this warpgroup's copy

        def slot(k: int, w: str) -> str:
            base = k * other * nw
            if oexpr:
                return f"{scratch}[{own}{base} + ({oexpr}) * {nw} + {w}]"
            return f"{scratch}[{own}{base + int(w)}]" if w.isdigit() else \
                f"{scratch}[{own}{base} + {w}]"

        cond = "gtid % 32 == 0" if writer_mask == 31 else \
            (f"(gtid & {writer_mask}) == 0" if writer_mask else "true")
        self.emit(f"if ({cond}) {{")
        for k in range(n):
            self.emit(f"    {slot(k, wexpr)} = {vals}[{k}];")
            if arg:
                self.emit(f"    {slot(k, wexpr).replace(scratch + '[', scratch + '_i[')} = "
                          f"{info.name}[{k}];")
        self.emit("}")
        self.emit(self.group_barrier())
        for k in range(n):
            if not arg:
                acc = slot(k, "0")
                for w in range(1, nw):
                    acc = combine(acc, slot(k, str(w)))
                self.emit(f"{vals}[{k}] = {acc};")
                continue
            self.emit(f"{vals}[{k}] = {slot(k, '0')}; "
                      f"{info.name}[{k}] = {slot(k, '0').replace(scratch + '[', scratch + '_i[')};")
            for w in range(1, nw):
                update = _arg_update_c(op.fn, "v", "i", f"{vals}[{k}]", f"{info.name}[{k}]")
                self.emit(f"{{ const float v = {slot(k, str(w))}; const int i = "
                          f"{slot(k, str(w)).replace(scratch + '[', scratch + '_i[')}; {update} }}")
        self.emit(self.group_barrier())

    def op_RoleOp(self, op: O.RoleOp) -> None:
        raise CompileError("roles are rendered by the kernel driver", op.loc)

    def reg_expr(self, v: Value, index: int) -> str:
        info = self.tiles[v.id]
        return info.virtual(index) if info.virtual is not None else f"{info.name}[{index}]"

    def op_TileSlice(self, op: O.TileSlice) -> None:
        """A static window: result register i is the source register holding its coordinate
        shifted by `start` along the axis, in the same thread (a view, no code)."""
        src = self.tiles[op.src.id]
        lay = self.layout(op.result.type, op.loc)
        sl, rl = src.layout.rl, lay.rl
        index = {reg: j for j, reg in enumerate(sl.regs)}
        regs = []
        for reg in rl.regs:
            regs.append(index.get(tuple(c + (op.start if d == op.axis else 0)
                                        for d, c in enumerate(reg))))
        if sl.thread_bases != rl.thread_bases or None in regs:
            raise CompileError(f"slicing a {op.src.type.layout} tile along axis {op.axis} at "
                               f"{op.start} is not supported: the window's elements are not "
                               "held by the same threads", op.loc,
                               fix="slice accumulators along columns at multiples of 8, "
                                   "blocked tiles along leading dims")

        def expr(i: int, v=op.src, regs=tuple(regs)) -> str:
            return self.reg_expr(v, regs[i])

        self.define_pointwise(op, lay, expr)

    def op_Arange(self, op: O.Arange) -> None:
        """An index tile is its coordinate expression: no registers, no memory."""
        lay = self.layout(op.result.type, op.loc)
        self.tiles[op.result.id] = _TileInfo(lay, op.result.type.dtype,
                                             virtual=lambda i, lay=lay: lay.coord(i)[0])

    def op_ExpandDims(self, op: O.ExpandDims) -> None:
        """A unit dim inserted: the same registers under the expanded layout (a view)."""
        lay = self.layout(op.result.type, op.loc)
        src = self.tiles[op.src.id]
        m = _broadcast_map(src.layout.rl, RL.squeeze(lay.rl, op.axis))
        if m is None:
            raise CompileError(f"expand_dims: a {src.layout} tile does not give "
                               f"{op.result.type.layout}", op.loc)
        self.tiles[op.result.id] = _TileInfo(
            lay, op.result.type.dtype, virtual=lambda i, v=op.src, m=m: self.reg_expr(v, m[i]))

    def op_ConvertLayout(self, op: O.ConvertLayout) -> None:
        """Redistribute through shared memory: every thread class writes its registers at their
        coordinates (row-major), a group barrier, every thread reads its new registers, and a
        barrier so the buffer may be rewritten (in a loop)."""
        src = self.tiles[op.src.id]
        sl = src.layout
        lay = self.layout(op.result.type, op.loc)
        shape = op.result.type.shape
        size = 1
        for n in shape:
            size *= n
        copies, wg = self.role_copies  # one buffer per warpgroup of the role
        if size * copies * 4 > 32 * 1024:
            raise CompileError(f"a layout conversion of a {'x'.join(map(str, shape))} tile "
                               f"({op.src.type.layout} -> {op.result.type.layout}) through "
                               f"shared memory needs more than 32 KB ({copies} warpgroup(s))",
                               op.loc,
                               fix="keep the tile in one layout (e.g. derive row statistics "
                                   "from the accumulator itself)")
        ctype = {"i1": "bool", "i32": "int"}.get(op.result.type.dtype.name, "float")
        buf = f"cvt{op.result.id}"
        self.shared_decls.append(f"__shared__ {ctype} {buf}[{size * copies}];")

        def lin(coord) -> str:
            terms, stride = [], 1
            for d in reversed(range(len(shape))):
                if shape[d] > 1:
                    terms.append(coord[d] if stride == 1 else f"{coord[d]} * {stride}")
                stride *= shape[d]
            return (f"{wg} * {size} + " if wg else "") + (" + ".join(reversed(terms)) or "0")

        rep = sum(1 << b for b in sl.rl.replicated_bits())
        self.emit(f"if ((gtid & {rep}) == 0) {{" if rep else "{")
        for r in range(sl.nregs):
            self.emit(f"    {buf}[{lin(sl.coord(r))}] = {self.reg_expr(op.src, r)};")
        self.emit("}")
        self.emit(self.group_barrier())
        info = self.declare_tile(op.result, op.loc)
        for i in range(lay.nregs):
            self.emit(f"{info.name}[{i}] = {buf}[{lin(lay.coord(i))}];")
        self.emit(self.group_barrier())

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
    return all(int(m) == index for m in re.findall(rf"\b{re.escape(array)}\[(\d+)\]", expr))


def _note(note: str) -> str:
    return f"  // {note}" if note else ""


def dtype_ptr(dtype) -> str:
    return f"{_elem_c(dtype)}*"


def _single_thread_role(role: O.RoleOp) -> bool:
    """A role that only issues TMA copies runs on one elected thread of its warpgroup."""
    allowed = (O.Const, O.Arith, O.For, O.If, O.Produce, O.TmaLoad, O.SmemSlice, O.ClusterRank,
               O.SetMaxNReg)
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
        # every operand, scalars too: a carried runtime scalar is a mutable C variable that
        # an earlier `assign` of the same parallel update may already have overwritten
        d = {v.id}
        op = defs.get(v.id)
        if isinstance(op, (O.Elementwise, O.Convert, O.TileSlice, O.ExpandDims)):
            for a in op.operands():
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


def render(kernel: Kernel) -> Source:
    """Render a lowered kernel (after analysis.infer_layouts and lower.run)."""
    if kernel.attr("smem_plan") is None:
        raise CompileError(f"kernel {kernel.name} is not lowered; run argus.lower.run first")
    kernel = strip_tags(kernel)  # tags and tag assertions generate no code
    em = _Emitter(kernel)
    em.uses = _count_uses(kernel)
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
            params_c.append(f"const {_SCALAR_C[t.dtype.name]} {p.name}")
            abi.append(AbiArg("scalar", p.name, dtype=t.dtype.name))
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
    top = list(kernel.body.ops)
    last_role = max((j for j, op in enumerate(top) if isinstance(op, O.RoleOp)), default=-1)
    # the cluster barrier before exit follows the roles; every other top-level op precedes them
    tail = {j for j in range(last_role + 1, len(top)) if isinstance(top[j], O.ClusterSync)} \
        if roles else set()
    epilogue = [top[j] for j in sorted(tail)]
    prologue = [op for j, op in enumerate(top) if not isinstance(op, O.RoleOp) and j not in tail]
    em.region(Region(tuple(prologue)))
    plan = {name: (first, count, regs) for name, first, count, regs in kernel.attr("role_plan", ())}
    for k, role in enumerate(roles):
        first, count, _regs = plan[role.name]
        cond = f"threadIdx.x >= {first * 128} && threadIdx.x < {(first + count) * 128}"
        em.emit(("if" if k == 0 else "else if") + f" ({cond}) {{  // role {role.name}")
        em.indent += 1
        body = list(role.body.ops)
        while body and isinstance(body[0], O.SetMaxNReg):  # the role's first instruction
            em.op(body.pop(0))
        em.emit(f"const int v{role.index.id} = (int)(threadIdx.x / 128) - {first};")
        em.names[role.index.id] = f"v{role.index.id}"
        em.emit("const int gtid = threadIdx.x % 128;")
        if any(isinstance(op, O.Wgmma) for op in role.body.walk()):
            em.emit("const int acc_row = 16 * (gtid / 32) + (gtid % 32) / 4;")
            em.emit("const int acc_col = 2 * (gtid % 4);")
            em.acc_names = True
        for pid in sorted({op.pipe.id for op in role.body.walk()
                           if isinstance(op, (O.Produce, O.Consume))}):
            em.emit(f"int n{pid} = 0;  // this role's step counter on pipeline %{pid}")
        for pid in sorted({op.pipe.id for op in role.body.walk()
                           if isinstance(op, O.Consume) and op.wgmma_in_flight}):
            em.emit(f"int pend{pid} = -1;  // slot whose wgmma is still in flight")
        em.group_threads = 128
        em.in_role = True
        em.role_copies = (count, f"v{role.index.id}") if count > 1 else (1, "")
        if _single_thread_role(role):
            em.emit("if (gtid == 0) {  // one thread issues the async copies")
            em.indent += 1
            em.region(Region(tuple(body)))
            em.indent -= 1
            em.emit("}")
        else:
            em.region(Region(tuple(body)))
        em.in_role = False
        em.role_copies = (1, "")
        em.acc_names = False
        em.group_threads = threads
        em.indent -= 1
        em.emit("}")

    em.region(Region(tuple(epilogue)))
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
