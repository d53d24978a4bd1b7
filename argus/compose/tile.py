"""The fused tile kernel template: one DSL kernel for an elementwise expression, a reduction, or
a segmented reduce-and-apply (softmax, norms, losses), over any broadcast pattern.

The kernel's domain (the shape it computes over) is cut into *groups*: adjacent dims that are
all reduced or all kept and that every input either spans or broadcasts over alike (size-1 dims
drop out; an index predicate's axis keeps its own group). The last two groups are the tile
(ROWS x BN, 16-byte rows of BN floats per thread run); earlier kept groups are walked by the
grid, earlier reduced groups by scalar loops, reduced tile groups by block loops. Every input
is seen as a tensor of the group sizes with 1 where it broadcasts, and loads a tile of 1 there.

Reductions run in passes: a pass accumulates every statistic whose operands are ready (the
row maximum, then the sum of exp(x - max)); out-of-bounds elements of reduced tile dims are
masked to the reduction's neutral value. The output is then stored from the last statistic
(a reduction) or from an apply pass over the domain (softmax, norms).

A lone reduction may take two kernels: its block loop split over CTAs (split-R, where the grid
is short of a wave or the loop long: LONG_LOOP_CTAS) and its rows folded into rows of whole
16-byte chunks (`fold_rows`); the first writes fp32 partials, the second combines them in a
fixed order (`combine_kernel`, `fold_kernel`).
"""

from __future__ import annotations

import dataclasses
import linecache
import math
from dataclasses import dataclass

import torch

from argus.compose.graph import Node
from argus.compose.partition import FusedKernel

NEUTRAL = {"sum": "0.0", "prod": "1.0", "max": "float('-inf')", "min": "float('inf')",
           "argmax": "float('-inf')", "argmin": "float('inf')"}
COMBINE = {"sum": "({a} + {b})", "prod": "({a} * {b})", "max": "ag.maximum({a}, {b})",
           "min": "ag.minimum({a}, {b})"}
DT = {torch.float32: "ag.f32", torch.float16: "ag.f16", torch.bfloat16: "ag.bf16",
      torch.int64: "ag.i64", torch.int32: "ag.i32", torch.bool: "ag.i1", torch.float64: "ag.f64"}
UNARY = {"exp": "ag.exp", "log": "ag.log", "sqrt": "ag.sqrt", "rsqrt": "ag.rsqrt",
         "tanh": "ag.tanh", "erf": "ag.erf", "sigmoid": "ag.sigmoid", "relu": "ag.relu",
         "abs": "ag.abs_"}
BINOP = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


SPLIT_LAST = 8192
LOG2E = 1.4426950408889634
MIN_CTAS = 132          # one wave on an H100/H200 (target/limits.py NUM_SMS)
# Long reduction loops. A kept-output reduction's CTAs each stream a long loop of equal work
# (L1/47-53, 128 x 4096 x 4095 over dim 1: 512 CTAs of 2048 blocks); at 70 registers a
# thread 3 CTAs of 256 threads fit an SM, 396 on the GPU, so 116 CTAs ran as a second wave of
# the full length on a GPU less than a third busy. Split over >= LONG_LOOP_CTAS CTAs (about
# 10 waves at 3 per SM, 4 at 8), each keeping >= LONG_LOOP_BLOCKS blocks of the loop, the
# last wave is a small share; the partials cost split / rows of the input's bytes (3 / 4096).
LONG_LOOP_CTAS = 32 * MIN_CTAS
LONG_LOOP_BLOCKS = 32


@dataclass(frozen=True)
class TileSchedule:
    """What the agent may tune: the tile (ROWS x BN, both powers of two), the CTA size, and the
    order of the CTAs: "cols" launches the column blocks of a row block one after another
    (consecutive CTAs stream consecutive memory, as torch's and Inductor's elementwise grids
    do), "rows" the row blocks of a column block (consecutive CTAs a whole row block apart: a
    power-of-two stride of 64 KB for rows of 8192 floats)."""

    rows: int = 8
    bn: int = 512
    threads: int = 256
    order: str = "cols"
    # fold a reduction's rows into rows of whole 16-byte chunks where they are not (`fold_rows`:
    # a mean over the middle dim of 4095-float rows), summing the slices in a second pass
    fold: bool = True
    # a long reduction loop is split over at least this many CTAs (0: only where the grid is
    # short of one wave): see LONG_LOOP_CTAS
    ctas: int = LONG_LOOP_CTAS

    def __post_init__(self) -> None:
        # `render` tests order == "cols": any other string would silently launch "rows"
        if self.order not in ("cols", "rows"):
            raise ValueError(f"TileSchedule(order={self.order!r}): the CTA order is 'cols' "
                             "(a row block's column blocks consecutive, the default) or 'rows'")


@dataclass(frozen=True)
class Group:
    size: int
    reduced: bool
    flags: tuple[bool, ...]      # per leaf: spans this group (else broadcasts over it)
    iota: int                    # the domain axis an index predicate reads here, or -1


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def groups_of(k: FusedKernel) -> list[Group]:
    rank = len(k.domain)
    shapes = [(1,) * (rank - len(leaf.shape)) + leaf.shape for leaf in k.leaves]
    iotas = {n.attrs["axis"] + rank - len(n.shape) for n in _nodes(k)
             if n.fn in ("iota", "shift")}
    out: list[Group] = []
    for d in range(rank):
        if k.domain[d] == 1:
            continue
        g = Group(k.domain[d], d in k.axes, tuple(s[d] != 1 for s in shapes),
                  d if d in iotas else -1)
        last = out[-1] if out else None
        if last and g.iota < 0 and last.iota < 0 and (last.reduced, last.flags) == \
                (g.reduced, g.flags):
            out[-1] = Group(last.size * g.size, g.reduced, g.flags, -1)
        else:
            out.append(g)
    last = out[-1] if out else None
    if last is not None and not last.reduced and last.iota < 0 and last.size > SPLIT_LAST:
        # a long kept run (a whole elementwise tensor merges into one group): rows of
        # SPLIT_LAST columns, so the grid's second extent stays within CUDA's 65535
        c = SPLIT_LAST
        while c >= 256 and last.size % c:
            c //= 2
        if c >= 256:
            out[-1:] = [Group(last.size // c, False, last.flags, -1),
                        Group(c, False, last.flags, -1)]
    virtual = Group(1, False, tuple(False for _ in k.leaves), -1)
    while len(out) < 2:
        out.insert(0, virtual)
    return out


def leaf_view(k: FusedKernel, groups: list[Group], i: int) -> tuple[int, ...]:
    """Leaf i seen as the group sizes (1 where it broadcasts; a cat piece has its own length
    along the concatenated axis)."""
    leaf = k.leaves[i]
    out = []
    for g in groups:
        size = g.size if g.flags[i] else 1
        if leaf.fn == "shift" and g.iota == leaf.attrs["axis"] + len(k.domain) - \
                len(leaf.shape):
            size = leaf.args[0].shape[leaf.attrs["axis"]]
        out.append(size)
    return tuple(out)


def _nodes(k: FusedKernel) -> list[Node]:
    seen, out, stack = set(), [], [k.root]
    leaves = set(k.leaves)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        out.append(n)
        if n in leaves and n is not k.root:
            continue
        stack.extend(n.inputs())
    return out


def fit(s: TileSchedule, groups: list[Group]) -> TileSchedule:
    """Clamp the tile to the domain: no wider than the groups it covers."""
    bn = max(1, min(s.bn, pow2(groups[-1].size)))
    rows = max(1, min(s.rows, pow2(groups[-2].size)))
    threads = s.threads
    while threads > 32 and rows * bn < threads:
        threads //= 2
    return TileSchedule(rows, bn, max(32, threads), s.order, s.fold, s.ctas)


class _Emitter:
    """Writes the kernel's Python lines."""

    def __init__(self, k: FusedKernel, groups: list[Group], s: TileSchedule):
        self.k, self.g, self.s = k, groups, s
        self.lines: list[str] = []
        self.ind = 1
        self.count = 0
        self.leaf_index = {leaf: i for i, leaf in enumerate(k.leaves)}
        self.stat_var: dict[Node, str] = {}
        self.memo: dict[Node, tuple[str, str]] = {}
        self.coord: dict[int, str] = {}      # group index -> its index / offset expression

    def line(self, text: str):
        self.lines.append("    " * self.ind + text)

    def fresh(self, prefix="v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    # ------------------------------------------------------------------ expression
    def tile_shape(self, flags) -> tuple[str, str]:
        return ("ROWS" if flags[-2] else "1", "BN" if flags[-1] else "1")

    def leaf(self, n: Node) -> tuple[str, str]:
        i = self.leaf_index[n]
        flags = [g.flags[i] for g in self.g]
        offs = []
        for gi, (g, f) in enumerate(zip(self.g, flags)):
            coord = self.coord[gi] if f else "0"
            if n.fn == "shift" and g.iota == n.attrs["axis"] + len(self.k.domain) - \
                    len(n.shape):
                coord = f"({coord} - {n.attrs['offset']})"
            offs.append(coord)
        r, c = self.tile_shape(flags)
        v = self.fresh("x")
        # a cat piece (shift) is the sum of its pieces, each masked outside its range: a float
        # piece reads -0.0 there, the exact identity of the sum (+0.0 made a -0.0 +0.0)
        other = ", -0.0" if n.fn == "shift" and n.dtype.is_floating_point else ""
        self.line(f"{v} = ag.load(L{i}, ({', '.join(offs)},), ({r}, {c}){other})")
        if n.dtype in (torch.float16, torch.bfloat16, torch.float64):
            self.line(f"{v} = {v}.to(ag.f32)")
            return v, "f"
        if n.dtype == torch.bool:
            return v, "b"
        if not n.dtype.is_floating_point:
            self.line(f"{v} = {v}.to(ag.i32)")
            return v, "i"
        return v, "f"

    def iota(self, n: Node) -> tuple[str, str]:
        axis = n.attrs["axis"] + len(self.k.domain) - len(n.shape)
        gi = next((i for i, g in enumerate(self.g) if g.iota == axis), None)
        if gi is None:                       # a size-1 axis: coordinate 0
            return "0", "n"
        v = self.fresh("i")
        last = len(self.g) - 1
        if gi == last:
            self.line(f"{v} = ag.arange(BN)[None, :] + {self.coord[gi]}")
        elif gi == last - 1:
            self.line(f"{v} = ag.arange(ROWS)[:, None] + {self.coord[gi]}")
        else:
            self.line(f"{v} = ag.full((1, 1), 0, ag.i32) + {self.coord[gi]}")
        return v, "i"

    def val(self, a) -> tuple[str, str]:
        if isinstance(a, Node):
            return self.emit(a)
        if isinstance(a, bool):
            return repr(a), "n"
        f = float(a)
        if math.isinf(f) or math.isnan(f):
            return f"float('{f}')", "n"
        return repr(f), "n"

    @staticmethod
    def as_float(v: str, kind: str) -> str:
        if kind == "b":
            return f"ag.where({v}, 1.0, 0.0)"
        if kind == "i":
            return f"{v}.to(ag.f32)"
        return v

    @staticmethod
    def number_for(v: str, others: list[str]) -> str:
        """A literal beside int tiles is written as an int when it is integral."""
        if "i" in others and all(k in "in" for k in others):
            f = float(v) if not v.startswith("float(") else 0.5
            if f.is_integer():
                return str(int(f))
        return v

    def emit(self, n: Node) -> tuple[str, str]:
        if n in self.k.aliases:
            return self.emit(self.k.aliases[n])
        if n in self.memo:
            return self.memo[n]
        if n in self.stat_var and n is not None:
            out = (self.stat_var[n], "i" if n.fn in ("argmax", "argmin") else "f")
        elif n in self.leaf_index and n is not self.k.root or n.op != "ew":
            out = self.leaf(n)
        else:
            out = self._ew(n)
        self.memo[n] = out
        return out

    def _ew(self, n: Node) -> tuple[str, str]:
        fn = n.fn
        if fn == "iota":
            return self.iota(n)
        vals = [self.val(a) for a in n.args]
        kinds = [k for _, k in vals]
        if fn == "ident":
            return vals[0]
        if fn == "fill":
            v = self.fresh()
            self.line(f"{v} = ag.full((1, 1), {float(n.attrs['value'])!r})")
            return v, "f"
        if fn == "cast":
            v, k = vals[0]
            if n.dtype.is_floating_point:
                return self.as_float(v, k), "f"
            if n.dtype == torch.bool:
                return (v, "b") if k == "b" else (f"({v} != 0.0)", "b")
            return (f"{v}.to(ag.i32)", "i") if k == "f" else (self.as_float(v, k) +
                                                                ".to(ag.i32)", "i")
        out = self.fresh()
        if fn in ("and", "or", "not"):
            ops = [v if k == "b" else f"({v} != 0.0)" for v, k in vals]
            text = {"and": f"({ops[0]} & {ops[1]})", "or": f"({ops[0]} | {ops[1]})",
                    "not": f"(~{ops[0]})"}[fn]
            self.line(f"{out} = {text}")
            return out, "b"
        if fn == "where":
            (c, ck), a, b = vals
            cond = c if ck == "b" else f"({c} != 0.0)"
            xs = [self.as_float(v, k) if k != "n" else v for v, k in (a, b)]
            if all(k == "n" for _, k in (a, b)):
                self.line(f"{out} = ag.where({cond}, ag.full((1, 1), {xs[0]}), {xs[1]})")
            else:
                self.line(f"{out} = ag.where({cond}, {xs[0]}, {xs[1]})")
            return out, "f"
        int_math = all(k in "in" for k in kinds) and "i" in kinds
        if int_math:
            ops = [self.number_for(v, kinds) if k == "n" else v for v, k in vals]
        else:
            ops = [v if k in "fn" else self.as_float(v, k) for v, k in vals]
        kind = "i" if int_math else "f"
        if fn in UNARY:
            text = f"{UNARY[fn]}({ops[0]})"
        elif fn == "neg":
            text = f"(-{ops[0]})" if kinds[0] != "n" else f"(-1.0 * {ops[0]})"   # -(0.0) = -0.0
        elif fn in BINOP:
            text = f"({ops[0]} {BINOP[fn]} {ops[1]})"
        elif fn == "max":
            text = f"ag.maximum({ops[0]}, {ops[1]})"
        elif fn == "min":
            text = f"ag.minimum({ops[0]}, {ops[1]})"
        elif fn == "pow":
            text = f"_ew('pow', {ops[0]}, {ops[1]})"
        elif fn in CMP:
            if kinds[0] == "n":            # number < tile: flip so that a tile is on the left
                flip = {"lt": ">", "le": ">=", "gt": "<", "ge": "<=", "eq": "==", "ne": "!="}
                text = f"({ops[1]} {flip[fn]} {ops[0]})"
            else:
                text = f"({ops[0]} {CMP[fn]} {ops[1]})"
            kind = "b"
        else:
            raise NotImplementedError(f"elementwise {fn}")
        self.line(f"{out} = {text}")
        return out, kind


def _online_partner(st: Node, stats: list[Node]) -> Node | None:
    """The max statistic M when st is sum(exp(X - M)) with M = max(X), else None."""
    if st.fn != "sum":
        return None
    e = st.args[0]
    if not (isinstance(e, Node) and e.op == "ew" and e.fn == "exp"):
        return None
    d = e.args[0]
    if not (isinstance(d, Node) and d.op == "ew" and d.fn == "sub" and len(d.args) == 2):
        return None
    x, m = d.args
    if isinstance(m, Node) and m in stats and m.fn == "max" and m.args[0] is x:
        return m
    return None


def _variance_partner(st: Node, stats: list[Node]) -> Node | None:
    """The statistic S = sum(X) when st is sum(D * D) with D = X - M and M = S * c or S / c
    (a variance's sum of squared deviations from the mean), else None."""
    if st.fn != "sum":
        return None
    center = _deviation_center(st)
    if center is None or not (isinstance(center, Node) and center.op == "ew" and
                              center.fn in ("mul", "div") and len(center.args) == 2):
        return None
    s, c = center.args
    if center.fn == "mul" and not isinstance(s, Node):
        s, c = c, s
    if isinstance(c, Node) or not isinstance(s, Node) or s not in stats or s.fn != "sum":
        return None
    x = st.args[0].args[0].args[0]
    return s if s.args[0] is x and s.attrs.get("axes") == st.attrs.get("axes") else None


def _deviation_center(st: Node):
    """M when st is sum(D * D) with D = X - M, else None."""
    sq = st.args[0]
    if not (isinstance(sq, Node) and sq.op == "ew" and sq.fn == "mul" and len(sq.args) == 2
            and sq.args[0] is sq.args[1]):
        return None
    d = sq.args[0]
    if not (isinstance(d, Node) and d.op == "ew" and d.fn == "sub" and len(d.args) == 2):
        return None
    return d.args[1]


def _stat_deps(k: FusedKernel, s: Node) -> set[Node]:
    stats, leaves = set(k.stats), set(k.leaves)
    out, seen, stack = set(), set(), list(s.inputs())
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in stats:
            out.add(n)
            continue
        if n in leaves:
            continue
        stack.extend(n.inputs())
    return out


def fold_rows(k: FusedKernel, groups: list[Group]) -> int:
    """How many reduced rows to fold into one (1: none). A reduction over the tile's rows
    (a middle axis: L1/48, mean over dim 1 of 128 x 4096 x 4095) whose kept rows are not a
    whole number of 16-byte chunks (4095 floats) starts three rows in four off a 16-byte
    boundary, and the codegen loads those rows 4 bytes at a time. f consecutive rows of C
    columns are one row of f * C elements that is (f * C * bytes a multiple of 16): the
    reduction over R rows of C is one over R / f rows of f * C, then a sum of the f slices of
    C (`fold_kernel`, a pass over the small output). Every row then starts 16-byte aligned
    (when the tensor does). Only for a lone combinable statistic (sum, max, min, prod) that
    is the float output (fp32 partials, rounded once by the fold pass), over leaves that all
    span both tile groups (one with size 1 there would have to repeat), with no index
    predicate, and where R divides by f."""
    if len(groups) < 2 or not k.kept_output or len(k.stats) != 1 or k.root.op != "reduce":
        return 1
    t0, t1 = groups[-2], groups[-1]
    if not t0.reduced or t1.reduced or k.root.fn not in COMBINE or \
            not k.root.dtype.is_floating_point or not k.leaves:
        return 1
    if not all(t0.flags) or not all(t1.flags) or any(g.iota >= 0 for g in groups) or \
            any(n.fn in ("iota", "shift") for n in _nodes(k)):
        return 1
    f = 1
    for leaf in k.leaves:
        f = math.lcm(f, 16 // math.gcd(t1.size * leaf.dtype.itemsize, 16))
    if f == 1 or t0.size % f or t0.size // f < 2:
        return 1
    return f


def render(k: FusedKernel, name: str, s: TileSchedule = TileSchedule()) -> tuple[str, dict]:
    """(DSL source of the kernel, its launch facts: group sizes, leaf views, output view; with
    rows folded (`fold_rows`), "fold": (f, C) and an output of [.., 1, f * C] partials)."""
    groups = groups_of(k)
    folded = fold_rows(k, groups) if s.fold else 1
    if folded > 1:
        t0, t1 = groups[-2], groups[-1]
        groups = groups[:-2] + [Group(t0.size // folded, True, t0.flags, -1),
                                Group(t1.size * folded, False, t1.flags, -1)]
    unfolded = s
    s = fit(s, groups)
    e = _Emitter(k, groups, s)
    last = len(groups) - 1
    t0, t1 = groups[-2], groups[-1]
    outer = groups[:-2]
    kept_outer = [i for i, g in enumerate(outer) if not g.reduced]
    t0_blocks = math.ceil(t0.size / s.rows)
    t1_blocks = math.ceil(t1.size / s.bn)
    grid0 = math.prod(outer[i].size for i in kept_outer) * (1 if t0.reduced else t0_blocks)
    grid1 = 1 if t1.reduced else t1_blocks
    # Split-R: a reduction whose kept output is too small to fill the GPU (a loss over the
    # whole tensor, batch-norm statistics of a few channels) cuts its longest reduced block
    # loop into `split` slices, one per CTA, each writing a partial that a second kernel
    # combines (two passes; no atomics, so the result is deterministic).
    split, split_axis = 1, -1
    if k.kept_output and len(k.stats) == 1 and k.root.op == "reduce" and \
            k.root.fn in COMBINE and grid0 * grid1 < max(MIN_CTAS, s.ctas):
        cands = [(t1_blocks, 1)] if t1.reduced else []
        cands += [(t0_blocks, 0)] if t0.reduced else []
        if cands:
            blocks, split_axis = max(cands)
            if grid0 * grid1 < MIN_CTAS:
                split = min(-(-4 * MIN_CTAS // (grid0 * grid1)), blocks // 4, 1024)
            else:       # a long loop (LONG_LOOP_CTAS)
                split = min(-(-s.ctas // (grid0 * grid1)), blocks // LONG_LOOP_BLOCKS, 1024)
            if split < 2:
                split, split_axis = 1, -1
    if folded > 1 and grid0 * grid1 < MIN_CTAS:
        # short of CTAs even folded (f times the column blocks): the unfolded kernel split
        # over more CTAs (split-R, its own second pass) pays more than 16-byte rows
        plain = render(k, name, dataclasses.replace(unfolded, fold=False))
        if plain[1]["ctas"] > grid0 * grid1 * split:
            return plain
    per = {0: -(-t0_blocks // split), 1: -(-t1_blocks // split)}
    if split > 1:
        # column blocks first where there are several (consecutive CTAs on consecutive
        # memory, as `order` "cols" below), the slices last
        e.line(f"p1, p0, ps = ag.grid({grid1}, {grid0}, {split})" if s.order == "cols" and
               grid1 > 1 else f"p0, p1, ps = ag.grid({grid0}, {grid1}, {split})")
    else:
        e.line(f"p1, p0 = ag.grid({grid1}, {grid0})" if s.order == "cols" and grid1 > 1 else
               f"p0, p1 = ag.grid({grid0}, {grid1})")
    rest = "p0"
    if not t0.reduced:
        e.line(f"o{last - 1} = (p0 % {t0_blocks}) * ROWS")
        e.coord[last - 1] = f"o{last - 1}"
        if kept_outer:
            e.line(f"r = p0 // {t0_blocks}")
            rest = "r"
    for i in reversed(kept_outer):
        e.line(f"c{i} = {rest} % {outer[i].size}")
        e.coord[i] = f"c{i}"
        if i != kept_outer[0]:
            e.line(f"r = {rest} // {outer[i].size}")
            rest = "r"
    if not t1.reduced:
        e.line(f"o{last} = p1 * BN")
        e.coord[last] = f"o{last}"

    def loops(body):
        opened = 0
        for i, g in enumerate(outer):
            if g.reduced:
                e.line(f"for c{i} in ag.range({g.size}):")
                e.coord[i] = f"c{i}"
                e.ind += 1
                opened += 1
        for gi, g, blocks, width, ax in ((last - 1, t0, t0_blocks, "ROWS", 0),
                                         (last, t1, t1_blocks, "BN", 1)):
            if not g.reduced:
                continue
            if split_axis == ax:
                e.line(f"for bb{gi} in ag.range({per[ax]}):")
                e.ind += 1
                e.line(f"b{gi} = ps * {per[ax]} + bb{gi}")
            else:
                e.line(f"for b{gi} in ag.range({blocks}):")
                e.ind += 1
            opened += 1
            e.line(f"o{gi} = b{gi} * {width}")
            e.coord[gi] = f"o{gi}"
        e.memo = {}
        body()
        e.ind -= opened

    memo_span: dict[Node, tuple[bool, bool]] = {}
    stats_set, leaf_set = set(k.stats), set(k.leaves)

    def span(n) -> tuple[bool, bool]:
        """Whether n's tile spans ROWS and BN (else it broadcasts there)."""
        if not isinstance(n, Node):
            return (False, False)
        if n in memo_span:
            return memo_span[n]
        if n in k.aliases:
            return span(k.aliases[n])
        if n in stats_set and n is not k.root or (n is k.root and k.kept_output):
            out = (not t0.reduced, not t1.reduced)
        elif n in leaf_set and n is not k.root or n.op != "ew":
            i = e.leaf_index[n]
            out = (groups[-2].flags[i], groups[-1].flags[i])
        elif n.fn == "iota":
            axis = n.attrs["axis"] + len(k.domain) - len(n.shape)
            out = (t0.iota == axis, t1.iota == axis)
        elif n.fn == "fill":
            out = (False, False)
        else:
            spans = [span(a) for a in n.args]
            out = (any(x[0] for x in spans), any(x[1] for x in spans))
        memo_span[n] = out
        return out

    acc_shape = f"({'1' if t0.reduced else 'ROWS'}, {'1' if t1.reduced else 'BN'})"
    # ------------------------------------------------------------------ statistics
    level: dict[Node, int] = {}
    # Online softmax: sum(exp(X - max(X))) joins the pass of max(X): when the running maximum
    # grows, the running sum is rescaled by exp(m_old - m_new) (one read of X, not two).
    online: dict[Node, Node] = {}          # the max statistic -> its sum of exponentials
    # One-pass variance: sum((X - M)^2) with M = sum(X) * c joins the pass of sum(X): every
    # lane keeps a running mean and sum of squared deviations (Welford), combined across lanes
    # after the loops (Chan et al.) and moved to M exactly: sum((X - M)^2) = M2 + N (mean - M)^2.
    # A norm reads X twice (statistics, apply), not three times. Only where no element of a
    # reduced tile dim is masked (every lane sees the same count).
    masked = (t0.reduced and t0.size % s.rows != 0) or (t1.reduced and t1.size % s.bn != 0)
    welford: dict[Node, Node] = {}         # the squared-deviation sum -> its sum(X)
    for st in k.stats:
        deps = _stat_deps(k, st)
        partner = _online_partner(st, k.stats)
        if partner is not None and partner not in online and split <= 1:
            online[partner] = st
            level[st] = level[partner]
            continue
        mean_sum = _variance_partner(st, k.stats)
        if mean_sum is not None and split <= 1 and not masked and \
                mean_sum not in welford.values():
            welford[st] = mean_sum
            level[st] = level[mean_sum]
            continue
        level[st] = 1 + max((level[d] for d in deps), default=-1)
    red_lanes = (("ROWS",) if t0.reduced else ()) + (("BN",) if t1.reduced else ())
    # Lane-wise accumulation pays where a block's reduction crosses threads: along BN (the
    # threads of a blocked tile span its rows, 16 bytes each), or along ROWS when a row is
    # narrower than the CTA (its rows spread over threads). A reduction over ROWS whose rows
    # each thread holds whole stays in registers, and a lane-wise accumulator only costs more.
    lanes_pay = t1.reduced or (t0.reduced and s.bn // 4 < s.threads)

    for p in range(max(level.values(), default=-1) + 1):
        batch = [st for st in k.stats if level[st] == p]
        lanewise = {st for st in batch if st.fn in COMBINE and st not in online and
                    st not in online.values() and st not in welford} if lanes_pay else set()
        count = None
        for st in batch:
            a = e.fresh("acc")
            if st.fn in ("argmax", "argmin"):
                e.line(f"{a}_v = ag.full({acc_shape}, {NEUTRAL[st.fn]})")
                e.line(f"{a} = ag.full({acc_shape}, 0, ag.i32)")
            elif lanes_pay and (st in online or st in online.values()):
                # the online softmax lane-wise too: every lane keeps its own running maximum
                # and rescaled sum; the lanes are combined after the loops
                e.line(f"{a} = ag.full((ROWS, BN), {NEUTRAL[st.fn]})")
            elif st in lanewise:
                # Lane-wise: each thread combines its own elements across the blocks and the
                # lanes are reduced once after the loops (a reduction across the CTA in every
                # block cost two barriers a block and drained the loads in flight).
                e.line(f"{a} = ag.full((ROWS, BN), {NEUTRAL[st.fn]})")
            elif st in welford:
                # the lanes run on X - K, K the mean of the first block (a pilot close to the
                # data): lane means then keep fp32 digits relative to the spread, not to |mean|
                saved = dict(e.coord)
                for gi, g in enumerate(groups):
                    if g.reduced:
                        e.coord[gi] = "0"
                e.memo = {}
                x0, x0k = e.emit(welford[st].args[0])
                e.line(f"{a}_k = {e.as_float(x0, x0k)} + ag.full((ROWS, BN), 0.0)")
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        e.line(f"{a}_k = {a}_k.sum(axis={ax})")
                e.line(f"{a}_k = {a}_k * (1.0 / ({' * '.join(red_lanes) or '1'}))")
                e.coord, e.memo = saved, {}
                e.line(f"{a}_m = ag.full((ROWS, BN), 0.0)")
                e.line(f"{a}_q = ag.full((ROWS, BN), 0.0)")
                if count is None:
                    count = e.fresh("cnt")
                    e.line(f"{count} = ag.full((1, 1), 0.0)")
            else:
                e.line(f"{a} = ag.full({acc_shape}, {NEUTRAL[st.fn]})")
            st.attrs["_acc"] = a

        def body(batch=batch, lanewise=lanewise, count=count):
            if count is not None:
                e.line(f"{count} = {count} + 1.0")
                e.line(f"inv_{count} = 1.0 / {count}")
            for st in batch:
                if st in online.values():
                    continue            # updated together with its maximum, below
                a = st.attrs["_acc"]
                if st in welford:
                    x = e.fresh("xc")
                    e.line(f"{x} = {e.as_float(*e.emit(welford[st].args[0]))} - {a}_k")
                    d = e.fresh("d")
                    e.line(f"{d} = {x} - {a}_m")
                    e.line(f"{a}_m = {a}_m + {d} * inv_{count}")
                    e.line(f"{a}_q = {a}_q + {d} * ({x} - {a}_m)")
                    continue
                v, kind = e.emit(st.args[0])
                v = e.as_float(v, kind)
                if st in online and lanes_pay:
                    # masked lanes hold -inf (the maximum's identity) and add exactly 0; a
                    # lane that has seen only -inf so far adds 0 (exp(-inf - -inf) is NaN)
                    bounds = [f"(ag.arange(ROWS)[:, None] + o{last - 1} < {t0.size})",
                              f"(ag.arange(BN)[None, :] + o{last} < {t1.size})"]
                    inb = " & ".join(bounds)
                    mx, mn, ex, al = e.fresh("mx"), e.fresh("mnew"), e.fresh("ex"), e.fresh("al")
                    b = online[st].attrs["_acc"]
                    e.line(f"{mx} = ag.where({inb}, {v}, float('-inf'))")
                    e.line(f"{mn} = ag.maximum({a}, {mx})")
                    # two exponentials an element (the term and the lane's rescale), each
                    # one SFU ex2.approx (relative error <= 2^-22, ftz: terms below 2^-126 of
                    # the lane's maximum are lost, as in any fp32 sum of them)
                    e.line(f"{ex} = ag.where({inb} & ({mn} > float('-inf')), "
                           f"ag.exp2(({mx} - {mn}) * {LOG2E!r}, approx=True), 0.0)")
                    e.line(f"{al} = ag.where({mn} > float('-inf'), "
                           f"ag.exp2(({a} - {mn}) * {LOG2E!r}, approx=True), 0.0)")
                    e.line(f"{b} = {b} * {al} + {ex}")
                    e.line(f"{a} = {mn}")
                    continue
                if st in lanewise:
                    # every element past the tensor's end along either tile dim holds the
                    # identity before it joins the lanes: the verifier (fill.identity) does not
                    # follow a load's masked lanes through a loop-carried accumulator
                    bounds = [f"(ag.arange(ROWS)[:, None] + o{last - 1} < {t0.size})",
                              f"(ag.arange(BN)[None, :] + o{last} < {t1.size})"]
                    m = e.fresh("m")
                    e.line(f"{m} = ag.where({' & '.join(bounds)}, {v}, {NEUTRAL[st.fn]})")
                    e.line(f"{a} = {COMBINE[st.fn].format(a=a, b=m)}")
                    continue
                masks = []
                if t0.reduced and (t0.size % s.rows or split_axis == 0):
                    masks.append(f"(ag.arange(ROWS)[:, None] + o{last - 1} < {t0.size})")
                if t1.reduced and (t1.size % s.bn or split_axis == 1):
                    masks.append(f"(ag.arange(BN)[None, :] + o{last} < {t1.size})")
                if masks:
                    m = e.fresh("m")
                    e.line(f"{m} = ag.where({' & '.join(masks)}, {v}, {NEUTRAL[st.fn]})")
                    v = m
                if st.fn in ("argmax", "argmin"):
                    base = st.fn[3:]
                    cmp = ">" if base == "max" else "<"
                    red_axis = [ax for ax, g in ((0, t0), (1, t1)) if g.reduced]
                    if red_axis:
                        ax = red_axis[0]
                        off = f"o{last - 1}" if ax == 0 else f"o{last}"
                        bv, bi = e.fresh("bv"), e.fresh("bi")
                        e.line(f"{bv} = {v}.{base}(axis={ax})")
                        e.line(f"{bi} = {v}.{st.fn}(axis={ax}) + {off}")
                    else:   # the reduced group is an outer loop: its index is the loop's
                        gi = next(i for i, g in enumerate(outer) if g.reduced)
                        bv, bi = v, f"c{gi}"
                    better = e.fresh("better")
                    e.line(f"{better} = {bv} {cmp} {a}_v")
                    e.line(f"{a} = ag.where({better}, {bi}, {a})")
                    e.line(f"{a}_v = ag.where({better}, {bv}, {a}_v)")
                    continue
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        r = e.fresh("r")
                        e.line(f"{r} = {v}.{st.fn}(axis={ax})")
                        v = r
                if st in online:
                    total = online[st]
                    mn = e.fresh("mnew")
                    e.line(f"{mn} = ag.maximum({a}, {v})")
                    x, xk = e.emit(st.args[0])
                    ex = e.fresh("ex")
                    e.line(f"{ex} = ag.exp({e.as_float(x, xk)} - {mn})")
                    if masks:
                        e.line(f"{ex} = ag.where({' & '.join(masks)}, {ex}, 0.0)")
                    for ax, g in ((1, t1), (0, t0)):
                        if g.reduced:
                            e.line(f"{ex} = {ex}.sum(axis={ax})")
                    b = total.attrs["_acc"]
                    e.line(f"{b} = {b} * ag.exp({a} - {mn}) + {ex}")
                    e.line(f"{a} = {mn}")
                    continue
                e.line(f"{a} = {COMBINE[st.fn].format(a=a, b=v)}")

        loops(body)
        for st in batch:            # lanes reduced once, after the loops
            a = st.attrs["_acc"]
            if st in online and lanes_pay:
                # sum = sum over lanes of sum_lane * exp(max_lane - max): an all -inf row
                # gives NaN, as torch's softmax does
                b = online[st].attrs["_acc"]
                mt = e.fresh("mrow")
                e.line(f"{mt} = {a}")
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        e.line(f"{mt} = {mt}.max(axis={ax})")
                e.line(f"{b} = {b} * ag.exp({a} - {mt})")
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        e.line(f"{b} = {b}.sum(axis={ax})")
                e.line(f"{a} = {mt}")
            if st in lanewise:
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        e.line(f"{a} = {a}.{st.fn}(axis={ax})")
            elif st in welford:
                # lane means and squared deviations, each over `count` elements, combined
                lanes = " * ".join(red_lanes) or "1"
                mu = e.fresh("mu")
                e.line(f"{mu} = {a}_m")
                e.line(f"{a} = {a}_q")
                dev = e.fresh("dev")
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        e.line(f"{mu} = {mu}.sum(axis={ax})")
                        e.line(f"{a} = {a}.sum(axis={ax})")
                e.line(f"{mu} = {mu} * (1.0 / ({lanes}))")
                e.line(f"{dev} = ({a}_m - {mu}) * ({a}_m - {mu})")
                for ax, g in ((1, t1), (0, t0)):
                    if g.reduced:
                        e.line(f"{dev} = {dev}.sum(axis={ax})")
                e.line(f"{a} = {a} + {count} * {dev}")
                st.attrs["_mu"] = mu
        for st in batch:
            e.stat_var[st] = st.attrs.pop("_acc")
        for st in batch:
            if st in welford:
                # sum((X - M)^2) = M2 + N (mean - M)^2, M as the kernel computes it
                a, mu = e.stat_var[st], st.attrs.pop("_mu")
                e.memo = {}
                m_val, m_kind = e.emit(_deviation_center(st))
                m_val = e.as_float(m_val, m_kind)
                lanes = " * ".join(red_lanes) or "1"
                shift = e.fresh("shift")
                e.line(f"{shift} = ({a}_k - {m_val}) + {mu}")
                e.line(f"{a} = {a} + ({count} * ({lanes})) * ({shift} * {shift})")
    # ------------------------------------------------------------------ output
    out_dtype = DT.get(k.root.dtype, "ag.f32")
    # partials of a split or folded reduction stay fp32 for a float result (rounded once, by
    # the second pass, to the result's dtype); an integer result's in its own type
    partial_dtype = torch.float32 if k.root.dtype.is_floating_point else k.root.dtype
    if split > 1 or folded > 1:
        out_dtype = DT[partial_dtype]
    if k.kept_output:
        offs = [("0" if g.reduced else e.coord[i]) for i, g in enumerate(groups)]
        if k.root in e.stat_var:
            v = e.stat_var[k.root]
        else:       # an elementwise root over the statistics (partition: sibling stats)
            e.memo = {}
            v, kind = e.emit(k.root)
            v = e.as_float(v, kind) if kind != "n" else f"ag.full((1, 1), {v})"
            if k.root.dtype == torch.bool or not k.root.dtype.is_floating_point:
                raise NotImplementedError(f"{k.root!r}: a non-float root over statistics")
            v = f"({v} + ag.full({acc_shape}, -0.0))"     # -0.0: x + -0.0 is x, -0.0 too
        if k.root.op == "reduce" and k.root.fn in ("argmax", "argmin"):
            v = f"{v}.to({out_dtype})"
        elif out_dtype != "ag.f32":
            v = f"{v}.to({out_dtype})"
        if split > 1:
            offs = ["ps"] + offs
        e.line(f"ag.store(OUT, ({', '.join(offs)},), {v})")
    else:
        def apply():
            v, kind = e.emit(k.root)
            if kind == "b" and out_dtype == "ag.i1":
                pass
            elif kind == "i" and out_dtype in ("ag.i32", "ag.i64"):
                v = f"{v}.to({out_dtype})" if out_dtype != "ag.i32" else v
            else:
                v = e.as_float(v, kind) if kind != "n" else f"ag.full((1, 1), {v})"
                if out_dtype != "ag.f32":
                    v = f"{v}.to({out_dtype})"
            full = span(k.root)
            if (not full[0] and s.rows > 1) or (not full[1] and s.bn > 1) or kind == "n":
                # broadcast to the tile by adding -0.0: x + -0.0 is x for every x (a broadcast
                # copy of -0.0, x.expand(...).contiguous(), came out +0.0 with 0.0)
                v = f"({v} + ag.full((ROWS, BN), -0.0))"
            offs = [e.coord[i] for i in range(len(groups))]
            e.line(f"ag.store(OUT, ({', '.join(offs)},), {v})")
        loops(apply)
    views = [leaf_view(k, groups, i) for i in range(len(k.leaves))]
    params = [f"L{i}: ag.Tensor[{', '.join(map(str, views[i]))}, {DT[leaf.dtype]}]"
              for i, leaf in enumerate(k.leaves)]
    out_sizes = [1 if (k.kept_output and g.reduced) else g.size for g in groups]
    if split > 1:
        out_sizes = [split] + out_sizes
    params.append(f"OUT: ag.Tensor[{', '.join(map(str, out_sizes))}, {out_dtype}]")
    header = (f"@ag.kernel(threads={s.threads})\n"
              f"def {name}({', '.join(params)}, ROWS: int = {s.rows}, BN: int = {s.bn}):\n"
              f"    # {k.root!r}: domain {list(k.domain)}, reduced axes {list(k.axes)}, groups "
              f"{[(g.size, 'R' if g.reduced else 'K') for g in groups]}\n")
    src = header + "\n".join(e.lines) + "\n"
    facts = {"leaf_views": views, "out_view": tuple(out_sizes), "schedule": s, "split": split,
             "ctas": grid0 * grid1 * split, "partial_dtype": partial_dtype}
    if folded > 1:
        facts["fold"] = (folded, groups[-1].size // folded)
    return src, facts


def combine_kernel(fn: str, split: int, size: int, name: str,
                   dtype: torch.dtype = torch.float32,
                   partial_dtype: torch.dtype = torch.float32) -> tuple[str, dict]:
    """The second pass of a split reduction: [split, size] partials -> [1, size] of `dtype`
    (a bf16 sum's partials are fp32, rounded once here)."""
    part = Node("leaf", (), (split, size), partial_dtype, {}, name="partials")
    root = Node("reduce", (part,), (1, size), dtype, {"fn": fn, "axes": (0,)},
                name="combined")
    k = FusedKernel(root, (split, size), (0,), True, [root], [part])
    # not folded: the runtime runs one second pass, and this is it
    return render(k, name, TileSchedule(rows=min(64, pow2(split)), bn=256, threads=256,
                                        fold=False, ctas=0))


def fold_kernel(fn: str, out_view: tuple[int, ...], fold: int, size: int, name: str,
                split: int = 1, dtype: torch.dtype = torch.float32,
                partial_dtype: torch.dtype = torch.float32) -> tuple[str, dict]:
    """The second pass of a folded reduction (`fold_rows`): partials [.., 1, fold * size] seen
    as [P, fold, size] (P the kept outer elements) -> [P, 1, size] of `dtype`, the fold slices
    combined in order; with `split` slices of a split loop too ([split, P, fold, size], the
    slices an outer loop), in one pass."""
    outer = math.prod(out_view[(1 if split > 1 else 0):-2])
    domain, axes = (split, outer, fold, size), (0, 2)
    part = Node("leaf", (), domain, partial_dtype, {}, name="partials")
    root = Node("reduce", (part,), (1, outer, 1, size), dtype,
                {"fn": fn, "axes": axes}, name="folded")
    k = FusedKernel(root, domain, axes, True, [root], [part])
    return render(k, name, TileSchedule(rows=pow2(fold), bn=min(1024, pow2(size)),
                                        threads=256, fold=False, ctas=0))


PRELUDE = "import argus as ag\nfrom argus.dsl.values import elementwise as _ew  # noqa: F401\n\n\n"


def load_source(src: str, tag: str) -> dict:
    """Execute generated DSL source as a module (kept in linecache for tracebacks)."""
    filename = f"<argus-compose:{tag}>"
    text = PRELUDE + src
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    ns: dict = {"__name__": f"argus_compose_{tag}"}
    exec(compile(text, filename, "exec"), ns)   # noqa: S102 - our own generated kernel source
    return ns


__all__ = ["Group", "TileSchedule", "fold_kernel", "fold_rows", "groups_of", "load_source",
           "render"]
