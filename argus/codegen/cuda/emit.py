"""The emitter: its state, C names, regions and blocks, register-tile bookkeeping, the rule
registry and its dispatch, and `render()` (the kernel signature, roles and launch ABI).

One job: walk a lowered kernel and hand each op to its rendering rule. Rules live in files by
op family (scalar, control, memory, tiles, reduce, async_copy, pipeline, mma, sync) and are
registered here with `@rule(OpClass)`: one rule per op class, a second registration is refused.
An op class with no rule is either EXEMPT (rendered elsewhere, with the reason) or a
CompileError naming it. Rules render, never decide: every decision is read from the IR.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from argus.codegen.cuda.layouts import Lay, broadcast_map, layout_of
from argus.codegen.wgmma import WgmmaSpec, wgmma_prelude
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir import tag_ops
from argus.ir.core import Kernel, Region, Value
from argus.ir.tag_ops import strip_tags
from argus.ir.types import ScalarType, TensorType, TileType
from argus.target.fragments import ACC_TO_A8

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
    # a "tmap"'s elementStrides (outermost first, () = all 1): `box` elements land, every
    # stride-th along each dim (TmaLoad.elem_strides)
    elem_strides: tuple[int, ...] = ()


@dataclass(frozen=True)
class Source:
    """Generated CUDA: the text, the symbol, the launch ABI and the launch configuration."""

    name: str
    text: str
    abi: tuple[AbiArg, ...]
    threads: int
    dynamic_smem: int
    cluster: tuple[int, int, int]
    # ag.wait_prior_grids: launched with programmatic stream serialization (runtime/driver.py)
    pdl: bool = False


# ----------------------------------------------------------------------------- C helpers


def c_float(x: float) -> str:
    if math.isnan(x):
        return "__int_as_float(0x7fffffff)"
    if math.isinf(x):
        return "__int_as_float(0x7f800000)" if x > 0 else "__int_as_float(0xff800000)"
    return repr(float(x)) + "f"


def literal_c(value, dtype) -> str:
    """A constant of `dtype`: an integer literal for integer tiles (exact; a float literal
    is exact only to 2^24), true/false for booleans, a float literal otherwise."""
    if dtype.name == "i1":
        return "true" if value else "false"
    if dtype.is_float:
        return c_float(value)
    n = int(value)
    if dtype.name == "i64" and n == -(1 << 63):
        # 9223372036854775808LL does not fit a long long: C++ makes it unsigned, and its
        # negation stays unsigned (a compare or max() against it would be unsigned)
        return "(-9223372036854775807LL - 1)"
    if dtype.name == "i32" and n == -(1 << 31):
        return "(-2147483647 - 1)"       # the same for int: 2147483648 is a long long
    return f"{n}LL" if dtype.name == "i64" else (f"{n}u" if dtype.kind == "uint" else str(n))


SCALAR_C = {"i32": "int", "i1": "bool", "f32": "float", "i64": "long long", "u32": "unsigned"}


def strip_round(expr: str, dtype) -> str:
    """`x` for `round(x)` when the consumer rounds to `dtype` itself (round is idempotent)."""
    if dtype.name not in ("bf16", "f16", "e4m3"):
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


def elem_c(dtype) -> str:
    return {"bf16": "ag::bf16", "f16": "ag::f16", "e4m3": "ag::e4m3", "f32": "float",
            "i32": "int", "f64": "double", "i64": "long long", "u32": "unsigned",
            "i1": "bool"}[dtype.name]


def tile_c(dtype) -> str:
    """The C type of one register of a tile of `dtype`: integer tiles live in integer
    registers of their width (exact at any index: a float register is exact only to 2^24),
    booleans in bool, every float dtype in a float register (bf16/f16/e4m3 values are rounded
    f32 values, rounded again where a store or a convert says so)."""
    return {"i1": "bool", "i32": "int", "i64": "long long", "u32": "unsigned"}.get(
        dtype.name, "float")


def shl_c(a: str, count: str, dtype) -> str:
    """C's `a << count` in integer `dtype`, wrapping: a signed value is shifted as its
    unsigned type and read back (a signed left shift that overflows, or of a negative value,
    is undefined behaviour in C; the unsigned one is modulo 2^bits)."""
    if dtype.kind == "uint":
        return f"({a} << {count})"
    unsigned = "unsigned long long" if dtype.bits == 64 else "unsigned"
    return f"(({tile_c(dtype)})(({unsigned})({a}) << {count}))"


def dtype_ptr(dtype) -> str:
    return f"{elem_c(dtype)}*"


# ----------------------------------------------------------------------------- the registry

Rule = Callable[["_Emitter", O.Op], None]
GroupRule = Callable[["_Emitter", tuple, int], int]

RULES: dict[type[O.Op], Rule] = {}
"""Op class -> its rendering rule `(em, op) -> None` (registered by the family files)."""

GROUP_RULES: dict[type[O.Op], GroupRule] = {}
"""Op class -> `(em, ops, i) -> next index`: ops[i] opens a run of ops that render as one C
block (wgmma.fence .. wgmma.commit; tma.store + its commit and wait). An op reached alone still
renders through RULES."""

EXEMPT: dict[type, str] = {
    O.RoleOp: "roles are rendered by the kernel driver: render() lays out each role's threads, "
              "register budget, step counters and body",
    **{cls: "tags and tag assertions generate no code: render() strips them first (strip_tags)"
       for cls in tag_ops.TAG_OPS},
}
"""Op classes with no rule, and where they are rendered instead."""


def _register(table: dict, cls: type, fn, what: str) -> None:
    if cls in table:
        old = table[cls]
        raise ValueError(f"codegen already has a {what} for {cls.NAME} "
                         f"({old.__module__}.{old.__qualname__}); one rule per op")
    if cls in EXEMPT:
        raise ValueError(f"{cls.NAME} is exempt from codegen rules: {EXEMPT[cls]}")
    table[cls] = fn


def rule(cls: type[O.Op]) -> Callable[[Rule], Rule]:
    """Register the decorated `(em, op) -> None` as the rendering rule of op class `cls`."""
    def deco(fn: Rule) -> Rule:
        _register(RULES, cls, fn, "rule")
        return fn
    return deco


def group_rule(cls: type[O.Op]) -> Callable[[GroupRule], GroupRule]:
    """Register the decorated `(em, ops, i) -> next index` for a run of ops opened by `cls`."""
    def deco(fn: GroupRule) -> GroupRule:
        _register(GROUP_RULES, cls, fn, "group rule")
        return fn
    return deco


# ----------------------------------------------------------------------------- emitter


@dataclass
class TileInfo:
    layout: object
    dtype: object
    virtual: object = None  # reg index -> C expression, when inlined
    name: str = ""
    packed: bool = False    # stored as 32-bit words of 2 (16-bit) or 4 (e4m3) elements
    # a packed view (a column slice at a k-step boundary, lower/packed.py): its word w is
    # word word_base + w of the tile `name`
    word_base: int = 0


def a_k_steps(op: O.Wgmma) -> int:
    """The k steps of rs wgmma `op`: one A fragment of four 32-bit registers each."""
    return op.k_extent // (32 // op.a.type.dtype.bytes)


def per_word(dtype) -> int:
    """Elements a 32-bit word of a packed tile holds (TileType.packed): 2 bf16/f16, 4 e4m3."""
    return 32 // dtype.bits


def a8_word_regs(w: int) -> tuple[int, int, int, int]:
    """The accumulator-pattern registers packed into word w of a packed e4m3 tile, byte 0
    first: A register w % 4 of k32 step w // 4 (target/fragments.py AccToA8.word: the same
    four for the shuffle-free plan, AccOrderA8)."""
    return ACC_TO_A8.word(w // 4, w % 4)


def unpack_c(word: str, half: int, dtype) -> str:
    """Element `half` (0: the low 16 bits) of the packed bf16/f16 pair in `word`, as a float."""
    # the device header's unpackers (argus_sm90.cuh: bf16x2_lo / _hi, f16x2_lo / _hi)
    return f"ag::{dtype.name}x2_{'hi' if half else 'lo'}({word})"


def pack_c(lo: str, hi: str, dtype) -> str:
    """The packed bf16/f16 pair of float expressions `lo`, `hi` (each rounded to nearest)."""
    pack = "ag::pack_bf16x2" if dtype.name == "bf16" else "ag::pack_f16x2"
    return f"{pack}({strip_round(lo, dtype)}, {strip_round(hi, dtype)})"


class _RuleNames(type):
    """`_Emitter.op_<OpClass>` names that class's registered rule (the rules were methods of
    the emitter before they moved to their family files; some callers still ask by name)."""

    def __getattr__(cls, name: str):
        if name.startswith("op_"):
            for op_cls, fn in RULES.items():
                if op_cls.__name__ == name[3:]:
                    return fn
        raise AttributeError(name)


@dataclass
class _Emitter(metaclass=_RuleNames):
    kernel: Kernel
    lines: list[str] = field(default_factory=list)
    indent: int = 1
    names: dict[int, str] = field(default_factory=dict)
    tiles: dict[int, TileInfo] = field(default_factory=dict)
    group_threads: int = 128
    wgmma_specs: list[WgmmaSpec] = field(default_factory=list)
    tmaps: dict[tuple, int] = field(default_factory=dict)
    pipes: dict[int, int] = field(default_factory=dict)  # pipe id -> stages
    uses: dict[int, int] = field(default_factory=dict)
    inline_ok: set[int] = field(default_factory=set)
    tensors: dict[int, str] = field(default_factory=dict)
    lazy_zero: dict[str, int] = field(default_factory=dict)  # tile -> regs, scale-d zeroing
    peers: dict[int, int] = field(default_factory=dict)  # pipe id -> CTAs releasing a slot
    cluster_size: int = 1
    in_role: bool = False        # emitting a warp role's body (group = one warpgroup)
    # a role of several warpgroups: (their count, the C name of this one's index in the role);
    # each warpgroup uses its own copy of an exchange buffer (reductions, conversions: the
    # op's scratch, lower/smem.py)
    role_copies: tuple[int, str] = (1, "")
    acc_names: bool = False      # acc_row / acc_col are declared (a role that runs wgmma)
    current_full: str = ""       # the full barrier of the produce step being emitted
    # accumulator id -> (C name, k steps, copied: the issue's WgmmaFence.a_copy) of the packed
    # A registers of its rs wgmma groups still in flight past their issue block (declared in
    # the issuing scope, lower/sync.py retires them before it ends); the fence.operands after
    # their wait names them, with the fence their issue had
    a_frags: dict[int, list[tuple[str, int, bool]]] = field(default_factory=dict)
    a_frag_count: int = 0
    # id(wgmma.fence) -> the C name of the packed A registers declared in an enclosing
    # region for its group, which stays in flight past the issuing region (a_scope)
    a_outer: dict[int, str] = field(default_factory=dict)

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
            m = broadcast_map(lay.rl, result_layout.rl)
            if m is None:
                raise CompileError(f"codegen cannot broadcast a {lay} tile into {result_layout} "
                                   "without a layout conversion (layout inference inserts one)")
            j = m[i]
        return self.reg_expr(v, j)

    def reg_expr(self, v: Value, index: int) -> str:
        info = self.tiles[v.id]
        if info.virtual is not None:
            return info.virtual(index)
        if info.packed:
            if per_word(info.dtype) != 2:
                # lower/packed.py packs an e4m3 web only when every reader takes words
                raise CompileError(f"codegen: an element of the packed e4m3 tile {v} is read; "
                                   f"it is stored as A-fragment words", fix="only "
                                   "lower/packed.py marks tiles packed, for word readers")
            return unpack_c(f"{info.name}[{info.word_base + index // 2}]", index % 2,
                            info.dtype)
        return f"{info.name}[{index}]"

    def packed_words(self, v: Value, layout) -> list[str]:
        """The 32-bit words of tile `v` as a packed tile in `layout` (its own layout: words
        are not broadcast): a packed tile's own registers, else its element pairs packed."""
        info = self.tiles[v.id]
        if info.layout != layout:
            raise CompileError(f"codegen: the packed tile {v} is read in layout {layout}, not "
                               f"its own {info.layout} (lower/packed.py packs only tiles of one "
                               f"layout)")
        n = layout.nregs // per_word(info.dtype)
        if info.packed and info.virtual is None:
            return [f"{info.name}[{info.word_base + w}]" for w in range(n)]
        return [self.pack_word(lambda i: self.reg_expr(v, i), w, info.dtype) for w in range(n)]

    @staticmethod
    def pack_word(expr: Callable[[int], str], w: int, dtype) -> str:
        """Word w of a packed tile whose register i is the float expression expr(i): registers
        2w, 2w + 1 (bf16/f16), or the four A-fragment registers a8_word_regs(w) (e4m3)."""
        if per_word(dtype) == 2:
            return pack_c(expr(2 * w), expr(2 * w + 1), dtype)
        vals = ", ".join(strip_round(expr(i), dtype) for i in a8_word_regs(w))
        return f"ag::pack_e4m3x4({vals})"

    def layout(self, t: TileType, loc) -> Lay:
        return layout_of(t, self.group_threads, loc, self.acc_names)

    def operand_expr(self, v: Value, i: int, result_layout) -> str:
        if isinstance(v.type, TileType):
            return self.tile_expr(v, i, result_layout)
        return self.name(v)

    def declare_tile(self, v: Value, loc) -> TileInfo:
        t: TileType = v.type
        info = TileInfo(self.layout(t, loc), t.dtype, name=f"t{v.id}", packed=t.packed)
        self.tiles[v.id] = info
        if t.packed:
            if t.dtype.name not in ("bf16", "f16", "e4m3") or \
                    info.layout.nregs % per_word(t.dtype):
                raise CompileError(f"codegen: {v} is marked packed but is not a bf16/f16 "
                                   f"(e4m3) tile of a register count divisible by 2 (4)", loc,
                                   fix="only lower/packed.py marks tiles packed")
            self.emit(f"ag::uint32_t {info.name}[{info.layout.nregs // per_word(t.dtype)}];")
            return info
        self.emit(f"{tile_c(t.dtype)} {info.name}[{info.layout.nregs}];")
        return info

    def group_barrier(self) -> str:
        """Synchronize the executing group: the CTA, or this warpgroup (named barrier 1 + its
        index; 0 is __syncthreads)."""
        if self.in_role:
            return "ag::named_barrier_sync(1 + threadIdx.x / 128, 128);"
        return "__syncthreads();"

    def smem_offset(self, vid: int) -> int:
        for entry in self.kernel.attr("smem_plan", ()):
            if entry[0] == vid:
                return entry[1]
        raise CompileError(f"codegen: no smem placement for value %{vid}; run lower.smem first")

    # -- regions -----------------------------------------------------------------------
    def region(self, region: Region) -> None:
        self.declare_outer_a_registers(region)
        ops = region.ops
        i = 0
        while i < len(ops):
            group = GROUP_RULES.get(type(ops[i]))
            if group is not None:
                i = group(self, ops, i)
            else:
                self.op(ops[i])
                i += 1

    def declare_outer_a_registers(self, region: Region) -> None:
        """Declare at the top of `region` the packed A registers of the rs wgmma issued k
        regions inside it whose fence has a_scope = k (lower/sync.py: their groups stay in
        flight until the wait that retires them in this region, so the registers must live
        here, where the fence.operands after that wait names them)."""
        def walk(r: Region, k: int) -> None:
            for i, op in enumerate(r.ops):
                if k and isinstance(op, O.WgmmaFence) and op.a_registers and op.a_scope == k:
                    name = f"ra{self.a_frag_count}"
                    self.a_frag_count += 1
                    self.emit(f"ag::uint32_t {name}[{a_k_steps(r.ops[i + 1])}][4];"
                              f"  // in flight past its issue's scope")
                    self.a_outer[id(op)] = name
                for sub in op.regions():
                    walk(sub, k + 1)
        walk(region, 0)

    def block(self, head: str, region: Region) -> None:
        self.emit(head + " {")
        self.indent += 1
        self.region(region)
        self.indent -= 1
        self.emit("}")

    def op(self, op: O.Op) -> None:
        fn = RULES.get(type(op))
        if fn is None:
            if type(op) in EXEMPT:
                raise CompileError(f"{op.NAME}: {EXEMPT[type(op)]}", op.loc)
            raise CompileError(f"codegen has no rule for {op.NAME}", op.loc)
        fn(self, op)


# ----------------------------------------------------------------------------- the kernel


def _check_steps_in_roles(ops) -> None:
    """Pipeline steps are rendered for warp roles only: outside a role every thread of the CTA
    would run a produce step (one arrival per thread on a full barrier that counts one, every
    TMA copy issued per thread) and the consumer's step state is never declared; refused here
    rather than as an NVRTC error or a GPU fault."""
    for op in Region(tuple(ops)).walk():
        if isinstance(op, (O.Produce, O.Consume)):
            raise CompileError(f"a pipeline step ({op.NAME}) outside a warp role: pipelines "
                               "are rendered for warp-specialized kernels only", op.loc,
                               fix="put the produce steps in `with ag.role('producer', "
                                   "warpgroups=1):` and the consume steps in a consumer role")


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
            params_c.append(f"const {SCALAR_C[t.dtype.name]} {p.name}")
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
    _check_steps_in_roles(prologue + epilogue)
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
        warpgroup = "ag::warpgroup_id()" if role.uniform_index else "(threadIdx.x / 128)"
        em.emit(f"const int v{role.index.id} = (int){warpgroup} - {first};")
        em.names[role.index.id] = f"v{role.index.id}"
        em.emit("const int gtid = threadIdx.x % 128;")
        if any(isinstance(op, O.Wgmma) for op in role.body.walk()):
            em.emit("const int acc_row = 16 * (gtid / 32) + (gtid % 32) / 4;")
            em.emit("const int acc_col = 2 * (gtid % 4);")
            em.acc_names = True
        for pid in sorted({op.pipe.id for op in role.body.walk()
                           if isinstance(op, (O.Produce, O.Consume))}):
            # unsigned: it counts up from 0, so the stage (n % S) and parity (n / S) of a
            # power-of-two ring are a mask and a shift, without a signed division's fix-ups
            em.emit(f"unsigned n{pid} = 0;  // this role's step counter on pipeline %{pid}")
        for pid in sorted({op.pipe.id for op in role.body.walk()
                           if isinstance(op, O.Consume) and op.wgmma_in_flight}):
            em.emit(f"int pend{pid} = -1;  // slot whose wgmma is still in flight")
        em.group_threads = 128
        em.in_role = True
        em.role_copies = (count, f"v{role.index.id}") if count > 1 else (1, "")
        em.region(Region(tuple(body)))  # an elected role's body is an `elect` (lower/elect)
        em.in_role = False
        em.role_copies = (1, "")
        em.acc_names = False
        em.group_threads = threads
        em.indent -= 1
        em.emit("}")

    em.region(Region(tuple(epilogue)))
    for (tensor_id, box, swizzle, strides), index in sorted(em.tmaps.items(),
                                                            key=lambda kv: kv[1]):
        tensor_name = em.tensors[tensor_id]
        params_c.append(f"const __grid_constant__ ag::TensorMap tmap{index}")
        abi.append(AbiArg("tmap", f"tmap{index}", tensor=tensor_name, box=box, swizzle=swizzle,
                          elem_strides=strides))

    symbol = f"argus_{kernel.name}"
    smem_bytes = kernel.attr("smem_bytes", 0)
    dynamic = smem_bytes + (1024 if smem_bytes else 0)
    body = em.lines[body_start:]
    out = [f"// Generated by Argus from kernel `{kernel.name}`. Do not edit: regenerate.",
           f'#include "{HEADER}"']
    if em.wgmma_specs:
        out.append(wgmma_prelude(em.wgmma_specs))
    sig = ",\n    ".join(params_c)
    # the minimum CTAs per SM is the kernel's occupancy hint (ag.occupancy), decided and
    # checked against registers and shared memory in lowering (lower/roles.py, smem.py)
    ctas = kernel.attr("min_ctas_per_sm", 1)
    out.append(f'extern "C" __global__ void __launch_bounds__({threads}, {ctas}) '
               f'{symbol}(\n    {sig}) {{')
    if smem_bytes:
        out.append("    extern __shared__ __align__(1024) unsigned char argus_smem_raw[];")
        out.append("    // Swizzle patterns are anchored to absolute addresses: align the block to "
                   "1024 B.")
        out.append("    unsigned char* const smem = argus_smem_raw + "
                   "((1024u - (ag::smem_u32(argus_smem_raw) & 1023u)) & 1023u);")
    out.extend(body)
    out.append("}")
    return Source(symbol, "\n".join(out) + "\n", tuple(abi), threads, dynamic,
                  tuple(kernel.attr("cluster", (1, 1, 1))), bool(kernel.attr("pdl", False)))
