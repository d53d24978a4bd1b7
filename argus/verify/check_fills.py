"""fill.identity: the value masked elements hold when a reduction consumes them.

Job (INVARIANTS.md §4 class 15): a tile loaded past the tensor's end holds the load's fill value
there (`ag.load(..., other=v)`; TMA zero-fills). Those elements take part in every reduction
over the tile, so they must hold the reduction's identity when they reach it: -inf before a
max (0 would win over a row of negative values), +inf before a min, 0 before a sum, 1 before a
product. What they hold is followed through the ops between the load and the reduction (a
small forward data flow over the IR, separate from the tags): exp(-inf) = 0 (so
`exp(x - max).sum()` of a -inf-filled x is right), 0 * w = 0, -inf - m = -inf, a wgmma over
zero-filled rows leaves its accumulator's value, `where(valid, s, -inf)` replaces it by -inf.

Abstract value of a tile's masked elements: NONE (the tile has none: computed from unmasked
data only), a float constant, FINITE (some finite value) or TOP (unknown). A violation is
reported only for a known constant that is not the identity: unknown values are never errors.
`where(c, a, b)` with a constant b is taken as the mask (its condition false exactly on the
masked elements), which is how kernels write it.
"""

from __future__ import annotations

import math

from argus.ir import ops as O
from argus.ir.core import Kernel, Region
from argus.verify.obligation import Finding

NONE, FINITE, TOP = "none", "finite", "top"
IDENTITY = {"sum": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}
_WORDS = {"sum": "0", "max": "-inf", "min": "+inf", "prod": "1"}
_FILL_TEXT = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "prod": "1.0"}


def obligations(model) -> tuple[list, list[Finding]]:
    flow = _Flow(model.kernel)
    return [], flow.findings


class _Flow:
    def __init__(self, kernel: Kernel):
        self.val: dict[int, object] = {}       # value id -> masked-element value
        self.const: dict[int, float] = {}      # value id -> the value of a constant tile
        self.root: dict[int, int] = {}         # smem view id -> buffer id
        self.findings: list[Finding] = []
        self._seen: set = set()
        self.region(kernel.body)

    def get(self, v) -> object:
        return self.val.get(v.id, NONE)

    def point(self, v) -> object:
        """The value operand v has at a masked element of another operand."""
        m = self.get(v)
        if m != NONE:
            return m
        if v.id in self.const:
            return self.const[v.id]
        return FINITE

    def region(self, r: Region) -> None:
        for op in r.ops:
            self.op(op)

    def op(self, op) -> None:
        if isinstance(op, O.For):
            before = dict(self.val)
            self.region(op.body)           # once to learn what the loop carries
            self.val = {k: _join(before.get(k, NONE), v) for k, v in self.val.items()}
            self.region(op.body)           # again from the joined state
            return
        if isinstance(op, O.Const) and isinstance(op.value, (int, float)) and \
                not isinstance(op.value, bool):
            self.const[op.result.id] = float(op.value)
        elif isinstance(op, O.Load):
            self.val[op.result.id] = float(op.other)
        elif isinstance(op, O.Full):
            self.const[op.result.id] = float(op.value)
        elif isinstance(op, O.SmemSlice):
            self.root[op.result.id] = self.root.get(op.buffer.id, op.buffer.id)
        elif isinstance(op, O.TmaLoad):
            self.val[self._buf(op.dst)] = _join(self.val.get(self._buf(op.dst), NONE), 0.0) \
                if self._buf(op.dst) in self.val else 0.0
        elif isinstance(op, O.StMatrix):
            self.val[self._buf(op.dst)] = self.get(op.src)
        elif isinstance(op, O.LdMatrix):
            self.val[op.result.id] = self.val.get(self._buf(op.src), NONE)
        elif isinstance(op, O.Wgmma):
            a = self.get(op.a) if op.a_in_registers else self.val.get(self._buf(op.a), NONE)
            b = self.val.get(self._buf(op.b), NONE)
            if a in (NONE, 0.0) and b in (NONE, 0.0):
                if a == 0.0 or b == 0.0:   # masked rows/columns keep the accumulator's value
                    self.val[op.acc.id] = self.point(op.acc) if self.get(op.acc) == NONE \
                        else self.get(op.acc)
            else:
                self.val[op.acc.id] = TOP
        elif isinstance(op, (O.Convert, O.ConvertLayout, O.ExpandDims, O.TileSlice)):
            if op.src.id in self.val:
                self.val[op.result.id] = self.val[op.src.id]
            if op.src.id in self.const:
                self.const[op.result.id] = self.const[op.src.id]
        elif isinstance(op, O.Var):
            if op.init.id in self.val:
                self.val[op.result.id] = self.val[op.init.id]
            if op.init.id in self.const:
                self.const[op.result.id] = self.const[op.init.id]
        elif isinstance(op, O.Assign):
            self.val[op.dst.id] = _join(self.get(op.dst), self.get(op.src)) \
                if op.dst.id in self.val or op.src.id in self.val else NONE
            self.const.pop(op.dst.id, None)
        elif isinstance(op, O.Elementwise):
            self.elementwise(op)
        elif isinstance(op, O.Reduce):
            self.reduce(op)
        for region in op.regions():
            if not isinstance(op, O.For):
                self.region(region)

    def _buf(self, v) -> int:
        return self.root.get(v.id, v.id)

    def elementwise(self, op: O.Elementwise) -> None:
        tiles = [a for a in op.args if hasattr(a.type, "shape")]
        if all(self.get(a) == NONE for a in tiles):
            if op.fn != "where" and tiles and all(a.id in self.const for a in op.args):
                got = _apply(op.fn, [self.const[a.id] for a in op.args])
                if isinstance(got, float):
                    self.const[op.result.id] = got
            return
        if op.fn == "where" and len(op.args) == 3:
            _, a, b = op.args
            pa, pb = self.point(a), self.point(b)
            if self.get(a) == NONE and self.get(b) == NONE and pa == pb:
                return
            # a constant false branch is the mask: the masked elements take it
            self.val[op.result.id] = pb if isinstance(pb, float) else \
                (pa if pa == pb else TOP)
            return
        vals = [self.point(a) for a in op.args]
        self.val[op.result.id] = _apply(op.fn, vals)

    def reduce(self, op: O.Reduce) -> None:
        got = self.get(op.src)
        ident = IDENTITY.get(op.fn)
        if ident is None or not isinstance(got, float) or _same(got, ident):
            return
        key = (op.loc.file, op.loc.line, op.fn)
        if key in self._seen:
            return
        self._seen.add(key)
        self.findings.append(Finding(
            "fill.identity", op.loc, f"{op.fn} over axis {op.axis} at {op.loc}", "violated",
            f"the masked elements of the reduced tile (past the tensor's end) hold {got} when "
            f"this {op.fn} consumes them, not its identity {_WORDS[op.fn]}: they "
            + ("win over every row whose values are all below it" if op.fn == "max" else
               "win over every row whose values are all above it" if op.fn == "min" else
               "are added to every row's result" if op.fn == "sum" else
               "multiply every row's result"),
            {"fill": got, "identity": _WORDS[op.fn], "reduction": op.fn, "axis": op.axis,
             "element": f"every element of the reduced axis {op.axis} past the tensor's end "
                        f"(e.g. column N of a row when N is not a multiple of the tile)"},
            fix=f"load with other={_FILL_TEXT[op.fn]} (or mask with ag.where before the "
                f"{op.fn})"))
        self.val[op.result.id] = NONE


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _join(a, b):
    if a == b:
        return a
    if a == NONE:
        return b
    if b == NONE:
        return a
    if isinstance(a, float) and isinstance(b, float) and _same(a, b):
        return a
    return TOP


def _apply(fn: str, vals: list) -> object:
    if any(v == TOP for v in vals):
        return TOP
    if all(isinstance(v, float) for v in vals):
        try:
            return _eval(fn, vals)
        except (OverflowError, ValueError, ZeroDivisionError, IndexError):
            return TOP
    # some operand is an unknown finite value
    consts = [v for v in vals if isinstance(v, float)]
    if fn in ("exp", "exp2") and consts:
        return {-math.inf: 0.0, math.inf: math.inf}.get(consts[0], FINITE)
    if fn in ("add", "sub") and consts:
        infs = [c for c in consts if math.isinf(c)]
        if not infs:
            return FINITE
        c = consts[0]
        sign = -1.0 if fn == "sub" and vals[1] == c else 1.0
        return sign * c if len(infs) == 1 else TOP
    if fn == "mul" and consts:
        return 0.0 if consts[0] == 0.0 else (FINITE if math.isfinite(consts[0]) else TOP)
    if fn == "max" and consts:
        return FINITE if consts[0] == -math.inf else (math.inf if consts[0] == math.inf
                                                      else FINITE)
    if fn == "min" and consts:
        return FINITE if consts[0] == math.inf else (-math.inf if consts[0] == -math.inf
                                                     else FINITE)
    if fn in ("neg", "abs", "tanh", "sigmoid", "relu", "erf") or not consts:
        return FINITE
    return TOP


def _eval(fn: str, v: list) -> float:
    inf = math.inf
    if fn == "neg":
        return -v[0]
    if fn == "abs":
        return abs(v[0])
    if fn == "exp":
        return 0.0 if v[0] == -inf else math.exp(v[0])
    if fn == "exp2":
        return 0.0 if v[0] == -inf else 2.0 ** v[0]
    if fn == "relu":
        return max(v[0], 0.0)
    if fn == "sqrt":
        return math.sqrt(v[0])
    if fn == "rsqrt":
        return inf if v[0] == 0 else 1.0 / math.sqrt(v[0])
    if fn == "recip":
        return inf if v[0] == 0 else 1.0 / v[0]
    if fn == "tanh":
        return math.tanh(v[0])
    if fn == "sigmoid":
        return 0.0 if v[0] == -inf else 1.0 / (1.0 + math.exp(-v[0]))
    if fn == "log":
        return -inf if v[0] == 0 else math.log(v[0])
    if fn == "add":
        return v[0] + v[1]
    if fn == "sub":
        return v[0] - v[1]
    if fn == "mul":
        return v[0] * v[1]
    if fn == "div":
        return v[0] / v[1]
    if fn == "max":
        return max(v[0], v[1])
    if fn == "min":
        return min(v[0], v[1])
    if fn == "pow":
        return v[0] ** v[1]
    raise ValueError(fn)
