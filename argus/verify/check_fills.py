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
reported for a known constant that is not the identity, and for FINITE when it comes only from
the masked lanes of loads the model follows (a fill combined with other data: `d = x - mean`
of a 0-filled x, squared and summed, adds mean^2 per padding lane; LayerNorm's variance pass):
then as the obligation below, over those loads' own lanes when they sit in the reduction's
loop body with its shape (the other operand's definedness, a mean summarized over its loop,
says nothing of the fill), else over the values holding the masked lanes (`_carriers`: a ring
block, not the running max it is combined with) in their state at the reduction, and the
finding names the op where the fill stopped being a known constant (`turned`). FINITE from
any other source, and TOP, are unknown: never errors. A FINITE operand times a tile built from
indices (a float mask `d * (cols < N)`) is TOP: the mask is 0 where the fill is.
`where(c, a, b)` with a constant b and a condition on indices (computed from an `arange`) is
taken as the mask (its condition false exactly on the masked elements), which is how kernels
write it. A condition on data values (`where(t > 0, t * log(t), 0)`, KernelBench L1/98's
KL divergence) is no mask: where it is false in bounds, b is a value like any other, and at a
masked lane the condition is evaluated on the masked values like any pointwise op (0 > 0 is
false: the lane takes b), so the result's masked lanes are its operands' (loads' lanes stay
bounded by their loads).

A masked element matters only if one reaches the reduction. When the known wrong value comes
only from masked lanes of register loads (`ag.load`) through pointwise ops, conversions,
slices and variables the model knows exactly per iteration (the register ring of
lower/prefetch.py: block j is the one its load issued DEPTH iterations earlier), the finding is
an obligation instead of a verdict: every element of the reduced tile, in every iteration and
CTA, is in bounds (the model's `defined`: each contributing load's offsets plus the element's
index lie inside the tensor). A row of 8192 columns reduced in 1024-column blocks is proven
(KernelBench L1/99); a partial last block, or a loop that runs one block past the end, gives
the element, iteration and thread that reads the fill. A value with any other source (a TMA
zero fill, a where's own constant, a wgmma, shared memory, a variable summarized over its
loop) keeps the verdict: its masked elements are not bounded here.

Nor does a masked element matter if what it changes is never stored. Element e of the reduced
tile goes into one result element (e with the reduced axis at 0); the obligation's claim is
that e is in bounds OR that result element reaches no element a store writes in bounds
(outflow.py follows it through pointwise ops, broadcasts, variables and further reductions to
the stores, with its index). A masked element on an axis the reduction keeps (a max over the
rows of a block whose last columns are past the end: KernelBench L1/49, L2/24) sits in a
column whose result is past the end too and whose store is masked: proven. One on the reduced
axis shares its result with elements in bounds, which are stored: the counterexample names the
output element the fill reaches. A use outflow.py does not follow (a wgmma operand, shared
memory) leaves the claim "every reduced element is in bounds".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import z3

from argus.ir import ops as O
from argus.ir.core import Kernel, Region
from argus.ir.numeric import BITWISE
from argus.verify import witness as W
from argus.verify.accumulate import Accumulation, accumulations
from argus.verify.check_stores import _dest, _inb
from argus.verify.model import Model, ReduceSite
from argus.verify.obligation import Finding, Obligation
from argus.verify.outflow import Uses
from argus.verify.solver import value
from argus.verify.tagdomain import META_FIELDS, fresh_int, substitute
from argus.verify.transfer.control import _exact_levels

NONE, FINITE, TOP = "none", "finite", "top"
OPAQUE = None   # a masked value that does not come only from register loads' masked lanes
IDENTITY = {"sum": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}
_WORDS = {"sum": "0", "max": "-inf", "min": "+inf", "prod": "1"}
_FILL_TEXT = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "prod": "1.0"}
_HARM = {"max": "wins over every row whose values are all below it",
         "min": "wins over every row whose values are all above it",
         "sum": "is added to its row's result", "prod": "multiplies its row's result"}


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    flow = _Flow(model.kernel, lambda: _exact_assigns(model), accumulations(model))
    obs: list[Obligation] = []
    finds: list[Finding] = []
    seen: set = set()
    uses: list[Uses] = []   # the kernel's readers, built on first use
    for op, patterns in flow.together_reached.values():
        # the identity only where no masked lane meets data that changes it: per element
        if op.result.id in flow.reached or not all(
                flow.region_of.get(id(x)) == flow.region_of.get(id(op)) and
                len(x.result.type.shape) == len(op.src.type.shape)
                for ms, ds in patterns for x in ms | ds):
            continue
        if not uses:
            uses.append(Uses(model.kernel))
        obs += [_together(model, red, patterns, uses[0].stores_reached(op))
                for red in model.reduces if red.op.result.id == op.result.id]
    for op, got, loads, turned, origin in flow.reached.values():
        sites = [r for r in model.reduces if r.op.result.id == op.result.id]
        if loads is not None and sites:
            if not uses:
                uses.append(Uses(model.kernel))
            own = got == FINITE and all(
                flow.region_of.get(id(x)) == flow.region_of.get(id(op)) and
                x.result.type.shape == op.src.type.shape for x in loads)
            obs += [_reaches(model, red, got, loads, uses[0].stores_reached(op), turned, own,
                             _carriers(flow, op.src) if got == FINITE and not own else None)
                    for red in sites]
            continue
        if got == FINITE:   # unknown where the loads are not followed: never an error
            continue
        key = (op.loc.file, op.loc.line, op.fn)
        if key not in seen:
            seen.add(key)
            # who runs it, from the reduction's own site (W.issuer), not the line lookup
            who = W.issuer(sites[0].site.role, "every thread") if sites else ({}, "")
            finds.append(_verdict(op, got, who, origin))
    return obs, finds


class _Flow:
    def __init__(self, kernel: Kernel, exact: Callable[[], set[tuple[int, ...]]],
                 accumulating: list[Accumulation]):
        self.val: dict[int, object] = {}       # value id -> masked-element value
        # value id -> the loads whose masked lanes its masked value comes from, or OPAQUE
        # (another source: a TMA zero fill, a where's constant ...); read through `loads`
        self.src: dict[int, frozenset | None] = {}
        self.const: dict[int, float] = {}      # value id -> the value of a constant tile
        # value id -> the op at which its masked value stopped being a known constant (a fill
        # of 0 turned into `x - mean`): the line a fix edits, named by the finding
        self.turned: dict[int, object] = {}
        # value id -> the op that put its masked value there (a load's `other`, a TMA copy's
        # zero fill, the constant false branch of a masking `where`): where a wrong constant
        # is set, the line a fix edits, named by the finding
        self.origin: dict[int, object] = {}
        # value id -> the lane patterns (loads masked, loads in bounds) under which its masked
        # value is not what `val` says: x * w of X filled with 1.0 and W with 0.0 is 0.0 only
        # where both are masked; where x is and w is not, it is 1.0 * w (`_lanes`)
        self.together: dict[int, frozenset] = {}
        # reduce result id -> (op, the patterns that must not occur there)
        self.together_reached: dict[int, tuple] = {}
        # id(op) of a load or reduction -> the program point of its region (which loop body)
        self.region_of: dict[int, tuple[int, ...]] = {}
        self.root: dict[int, int] = {}         # smem view id -> buffer id
        self.index: set[int] = set()           # tiles computed from an arange (index tiles)
        self._exact = exact                    # assigns the model follows exactly (lazy)
        self._exact_points: set[tuple[int, ...]] | None = None
        # reduce result id -> (op, wrong masked value, its loads or OPAQUE, the op where it
        # stopped being a known constant, the op that set it)
        self.reached: dict[int, tuple] = {}
        # value id -> its operands that hold masked values (val not NONE), for a pointwise op
        # or a conversion (which read them at the same element, broadcasting): `_carriers`
        # walks it back from a reduced tile to the values its masked lanes come from
        self.carried_by: dict[int, tuple] = {}
        # combine result id -> the elementwise accumulation it is (accumulate.py)
        self.accumulating = {a.combine.result.id: a for a in accumulating}
        self.region(kernel.body, ())

    def get(self, v) -> object:
        return self.val.get(v.id, NONE)

    def loads(self, vid: int) -> frozenset | None:
        """The loads whose masked lanes value vid's masked value comes from (empty: it has
        none)."""
        if self.val.get(vid, NONE) == NONE:
            return frozenset()
        return self.src.get(vid, OPAQUE)

    def exact(self, point: tuple[int, ...]) -> bool:
        """Whether the model follows the assignment at program point `point` exactly
        (computed once, on first use: only a masked value from loads needs it)."""
        if self._exact_points is None:
            self._exact_points = self._exact()
        return point in self._exact_points

    def carry(self, dst: int, *srcs: int) -> None:
        """dst's masked value is computed from srcs': their wrong patterns are its."""
        got = frozenset().union(*(self.together.get(x, frozenset()) for x in srcs))
        if got:
            self.together[dst] = got
        else:
            self.together.pop(dst, None)

    def set(self, vid: int, val: object, loads: frozenset | None, turned=None,
            origin=None) -> None:
        self.val[vid] = val
        self.src[vid] = loads
        if turned is not None:
            self.turned[vid] = turned
        else:
            self.turned.pop(vid, None)
        if origin is not None:
            self.origin[vid] = origin
        else:
            self.origin.pop(vid, None)

    def origin_of(self, *vs) -> object:
        """The op that set the masked value of the first of vs that has one."""
        return next((self.origin[v.id] for v in vs if v.id in self.origin), None)

    def point(self, v) -> object:
        """The value operand v has at a masked element of another operand."""
        m = self.get(v)
        if m != NONE:
            return m
        if v.id in self.const:
            return self.const[v.id]
        return FINITE

    def region(self, r: Region, point: tuple[int, ...]) -> None:
        """`point`: the region's program point (`_program_points`)."""
        for i, op in enumerate(r.ops):
            self.op(op, point + (i,))

    def op(self, op, point: tuple[int, ...]) -> None:
        if isinstance(op, (O.Load, O.Gather, O.Reduce)):
            self.region_of[id(op)] = point[:-1]
        if isinstance(op, O.For):
            body = point + (_body_index(op),)
            before, before_src = dict(self.val), dict(self.src)
            self.region(op.body, body)     # once to learn what the loop carries
            self.src = {k: _join_loads(self.loads(k),
                                       frozenset() if before.get(k, NONE) == NONE else
                                       before_src.get(k, OPAQUE))
                        for k in self.val}
            self.val = {k: _join(before.get(k, NONE), v) for k, v in self.val.items()}
            self.region(op.body, body)     # again from the joined state
            return
        if isinstance(op, O.Const) and isinstance(op.value, (int, float)) and \
                not isinstance(op.value, bool):
            self.const[op.result.id] = float(op.value)
        elif isinstance(op, (O.Load, O.Gather)):
            self.set(op.result.id, float(op.other), frozenset([op]), origin=op)
        elif isinstance(op, O.Full):
            self.const[op.result.id] = float(op.value)
        elif isinstance(op, O.Arange):
            self.index.add(op.result.id)
        elif isinstance(op, O.SmemSlice):
            self.root[op.result.id] = self.root.get(op.buffer.id, op.buffer.id)
        elif isinstance(op, O.TmaLoad):
            # TMA zero-fills the box past the tensor's end (not bounded here: OPAQUE)
            buf = self._buf(op.dst)
            self.set(buf, _join(self.val[buf], 0.0) if buf in self.val else 0.0, OPAQUE,
                     origin=op)
        elif isinstance(op, O.StMatrix):
            self.set(self._buf(op.dst), self.get(op.src), OPAQUE,
                     origin=self.origin_of(op.src))
        elif isinstance(op, O.LdMatrix):
            self.set(op.result.id, self.val.get(self._buf(op.src), NONE), OPAQUE,
                     origin=self.origin.get(self._buf(op.src)))
        elif isinstance(op, O.Wgmma):
            a = self.get(op.a) if op.a_in_registers else self.val.get(self._buf(op.a), NONE)
            b = self.val.get(self._buf(op.b), NONE)
            if a in (NONE, 0.0) and b in (NONE, 0.0):
                if a == 0.0 or b == 0.0:   # masked rows/columns keep the accumulator's value
                    self.set(op.acc.id, self.point(op.acc) if self.get(op.acc) == NONE
                             else self.get(op.acc), OPAQUE)
            else:
                self.set(op.acc.id, TOP, OPAQUE)
        elif isinstance(op, (O.Convert, O.ConvertLayout, O.ExpandDims, O.TileSlice)):
            if op.src.id in self.index:
                self.index.add(op.result.id)
            # the same elements (moved, or read at a shifted index): what the model's
            # `defined` of the result says of the source's
            if op.src.id in self.val:
                self.set(op.result.id, self.val[op.src.id], self.loads(op.src.id),
                         self.turned.get(op.src.id), self.origin_of(op.src))
                self.carry(op.result.id, op.src.id)
                if isinstance(op, (O.Convert, O.ConvertLayout)):
                    self.carried_by[op.result.id] = (op.src,)
            if op.src.id in self.const:
                self.const[op.result.id] = self.const[op.src.id]
        elif isinstance(op, O.Var):
            if op.init.id in self.index:
                self.index.add(op.result.id)
            if op.init.id in self.val:
                self.set(op.result.id, self.val[op.init.id], self.loads(op.init.id),
                         self.turned.get(op.init.id), self.origin_of(op.init))
                self.carry(op.result.id, op.init.id)
            if op.init.id in self.const:
                self.const[op.result.id] = self.const[op.init.id]
        elif isinstance(op, O.Assign):
            if op.dst.id in self.val or op.src.id in self.val:
                # a variable the model summarizes over its loop (not exactly per iteration),
                # or assigns under a condition, has no bounded masked lanes
                loads = _join_loads(self.loads(op.dst.id), self.loads(op.src.id))
                self.set(op.dst.id, _join(self.get(op.dst), self.get(op.src)),
                         loads if loads and self.exact(point) else OPAQUE,
                         self.turned.get(op.src.id, self.turned.get(op.dst.id)),
                         self.origin_of(op.src, op.dst))
                self.carry(op.dst.id, op.dst.id, op.src.id)
            self.const.pop(op.dst.id, None)
            if op.src.id in self.index:
                self.index.add(op.dst.id)
        elif isinstance(op, O.Elementwise):
            if any(a.id in self.index for a in op.args):
                self.index.add(op.result.id)
            self.elementwise(op)
        elif isinstance(op, O.Reduce):
            self.reduce(op)
        elif isinstance(op, O.Scan):
            # a scan combines its masked elements like a reduction (into the elements before
            # them when reversed, and into its total); its results' masked values: unknown
            self.reduce(op)
            if self.get(op.src) != NONE:
                self.set(op.result.id, TOP, OPAQUE)
                self.set(op.total.id, TOP, OPAQUE)
        for j, region in enumerate(op.regions()):
            if not isinstance(op, O.For):
                self.region(region, point + (j,))

    def _buf(self, v) -> int:
        return self.root.get(v.id, v.id)

    def elementwise(self, op: O.Elementwise) -> None:
        if self._accumulates_wrong(op):
            return
        tiles = [a for a in op.args if hasattr(a.type, "shape")]
        if all(self.get(a) == NONE for a in tiles):
            if op.fn != "where" and tiles and all(a.id in self.const for a in op.args):
                got = _apply(op.fn, [self.const[a.id] for a in op.args])
                if isinstance(got, float):
                    self.const[op.result.id] = got
            return
        if op.fn == "where" and len(op.args) == 3 and self._on_data(op.args[0]):
            c, a, b = op.args
            pc, pa, pb = self.point(c), self.point(a), self.point(b)
            # a select on data, pointwise: at a masked lane, the operand its condition picks
            got = (pa if pc != 0.0 else pb) if isinstance(pc, float) else _join(pa, pb)
            loads: frozenset | None = frozenset()
            for x in tiles:
                loads = _join_loads(loads, self.loads(x.id))
            self.set(op.result.id, got, loads, origin=self.origin_of(*tiles))
            return
        if op.fn == "where" and len(op.args) == 3:
            _, a, b = op.args
            pa, pb = self.point(a), self.point(b)
            if self.get(a) == NONE and self.get(b) == NONE and pa == pb:
                return
            # a constant false branch is the mask: the masked elements take it. Those are
            # where the condition is false, in bounds or not: the where's own (OPAQUE)
            loads = _join_loads(self.loads(a.id), self.loads(b.id))
            # the masked value is the false branch's: a constant set here, or b's own
            self.set(op.result.id, pb if isinstance(pb, float) else (pa if pa == pb else TOP),
                     loads if self.get(b) != NONE else OPAQUE,
                     origin=self.origin_of(b) if self.get(b) != NONE else op)
            return
        vals = [self.point(a) for a in op.args]
        loads: frozenset | None = frozenset()
        for a in tiles:
            loads = _join_loads(loads, self.loads(a.id))
        got = _apply(op.fn, vals)
        if got == FINITE and any(a.id in self.index and self.get(a) == NONE for a in op.args):
            # times a float mask built from indices (`d * (cols < N)`): zero where masked,
            # which FINITE does not say
            got = TOP
        masked = [self.turned[a.id] for a in tiles if a.id in self.turned]
        turned = masked[0] if masked else (
            op if got == FINITE and any(isinstance(self.get(a), float) for a in tiles) else None)
        self.set(op.result.id, got, loads, turned,
                 self.origin_of(*(a for a in tiles if self.get(a) != NONE)))
        self.carry(op.result.id, *(a.id for a in tiles))
        self.carried_by[op.result.id] = tuple(a for a in tiles if self.get(a) != NONE)
        lanes = self._lanes(op, vals, got)
        if lanes:
            self.together[op.result.id] = self.together.get(op.result.id, frozenset()) | lanes

    def _accumulates_wrong(self, op: O.Elementwise) -> bool:
        """An elementwise accumulation (`acc = acc + where(valid, x, 1.0)` each iteration,
        accumulate.py) whose part's masked lanes hold a constant other than the combine's
        identity, set by a where or a TMA fill (not a load's `other`, which the range argument
        bounds): every masked lane of an iteration combines that constant into the
        accumulator, so the accumulator's masked lanes hold it, combined (1.0, 2.0, ... for
        a sum: the join of the summarized loop would make that unknown and hide it). They
        are said to hold the constant itself (what one masked lane adds), set where the part
        got it: a later reduction of the accumulator with that identity reports it. True
        when so set."""
        acc = self.accumulating.get(op.result.id)
        if acc is None:
            return False
        got = self.get(acc.part)
        if not isinstance(got, float) or _same(got, IDENTITY[acc.reduction]) or \
                self.loads(acc.part.id) is not OPAQUE:
            return False
        self.set(op.result.id, got, OPAQUE, origin=self.origin_of(acc.part))
        return True

    def _lanes(self, op: O.Elementwise, vals: list, got: object) -> frozenset:
        """The lane patterns under which `got` (computed as if every masked operand were
        masked at once) is wrong: when two operands' masked values come from different loads
        (a where's condition aside), at a lane where one is masked another may be data
        (FINITE). Each pattern (the loads masked, the loads in bounds) whose value differs
        from `got` is returned; none when no mix matters (0 * w is 0 whatever w is;
        `-inf - m` is -inf) or a source is not a load."""
        srcs = [(k, self.loads(a.id)) for k, a in enumerate(op.args)
                if hasattr(a.type, "shape") and self.get(a) != NONE]
        if len(srcs) < 2 or any(x is OPAQUE or not x for _, x in srcs) or \
                len({x for _, x in srcs}) < 2:
            return frozenset()
        out = set()
        for k, own in srcs:
            alone = [v if j == k or all(j != i for i, _ in srcs) else FINITE
                     for j, v in enumerate(vals)]
            alt = _apply(op.fn, alone)
            if alt != got and not (isinstance(alt, float) and isinstance(got, float) and
                                   _same(alt, got)):
                data = frozenset().union(*(x for i, x in srcs if i != k)) - own
                if data:
                    out.add((own, data))
        return frozenset(out)

    def _on_data(self, cond) -> bool:
        """Whether a where's condition is a predicate on data values, not on indices: a tile
        computed from no arange (a condition mixing both stays a mask: the stricter reading)
        and not a constant."""
        return hasattr(cond.type, "shape") and cond.id not in self.index and \
            cond.id not in self.const

    def reduce(self, op: O.Reduce) -> None:
        got = self.get(op.src)
        ident = IDENTITY.get(op.fn)
        seen = self.reached.get(op.result.id)
        if seen is not None:   # a loop's second pass: the first wrong value, every source
            self.reached[op.result.id] = (op, seen[1], _join_loads(seen[2],
                                                                   self.loads(op.src.id)),
                                          seen[3], seen[4])
            return
        if ident is not None and isinstance(got, float) and _same(got, ident) and \
                self.together.get(op.src.id) and self.loads(op.src.id):
            self.together_reached.setdefault(op.result.id, (op, self.together[op.src.id]))
        if ident is None or (isinstance(got, float) and _same(got, ident)):
            return
        loads = self.loads(op.src.id)
        if got == FINITE and loads:
            # a fill turned into some other value by the ops between (`x - mean` of a
            # 0-filled x): not the identity unless no masked lane reaches the reduction, which
            # only the obligation over loads the model follows can say (any other source stays
            # unknown, never an error)
            self.reached[op.result.id] = (op, got, loads, self.turned.get(op.src.id),
                                          self.origin_of(op.src))
            return
        if not isinstance(got, float):
            return
        self.reached[op.result.id] = (op, got, loads, self.turned.get(op.src.id),
                                      self.origin_of(op.src))


def _body_index(loop: O.For) -> int:
    """The index of a loop's body among its regions (by identity: regions compare by value)."""
    return next(j for j, r in enumerate(loop.regions()) if r is loop.body)


def _exact_assigns(model: Model) -> set[tuple[int, ...]]:
    """The program points of the assignments after which the model knows the variable's
    value exactly: one in the region that defines the variable (straight-line code: the model
    copies the value), or one at the top level of a loop body, when the variable is defined in
    the region that holds the loop and is one of the loop's exact levels (transfer/control.py:
    assigned once from loads and arithmetic of the index, such as lower/prefetch.py's register
    ring; the state at the loop's entry is then the exact initial value). Any other (inside an
    `if`, or summarized over a loop) leaves its masked lanes unbounded here.

    A program point is a value, stable while the kernel lives: the path of (op index in its
    region, region index in its op) from the kernel's body, e.g. (3, 0, 5) for the sixth op
    of the first region of the body's fourth op. An assign has no result to name it by, and
    two equal assigns (one value copied into one variable twice, once under an `if`) are two
    points, so neither an IR name nor the op's value would do."""
    out: set[tuple[int, ...]] = set()

    def region(r: Region, point: tuple[int, ...]) -> None:
        here = {op.result.id for op in r.ops if isinstance(op, O.Var)}
        for i, op in enumerate(r.ops):
            if isinstance(op, O.Assign) and op.dst.id in here:
                out.add(point + (i,))
            if isinstance(op, O.For):
                exact: set[int] = set()
                for level in _exact_levels(model, op, model._carried_tiles(op.body)):
                    exact |= level & here
                body = point + (i, _body_index(op))
                out.update(body + (k,) for k, a in enumerate(op.body.ops)
                           if isinstance(a, O.Assign) and a.dst.id in exact)
            for j, inner in enumerate(op.regions()):
                region(inner, point + (i, j))
    region(model.kernel.body, ())
    return out


def _stored_output(zm, outs, wit: dict) -> str:
    """The first of `outs` (outflow's (condition, store, destination) of a result element)
    that the counterexample `zm` stores: its element and store go into `wit`, and the
    message's clause naming them is returned ("" where none is stored or outs is None)."""
    for cond, st, dest in outs or ():
        if z3.is_true(zm.eval(cond, model_completion=True)):
            wit["output"] = W.fmt_elem(st.tensor.name, [value(zm, d) for d in dest])
            wit["store"] = str(st.op.loc)
            return f"; the result reaches {wit['output']}, which the store at {st.op.loc} writes"
    return ""


def _carriers(flow: _Flow, v) -> list:
    """The values v's masked value comes from, walking back through the pointwise ops and
    conversions that read their operands at the same element (`_Flow.carried_by`: only the
    operands holding masked values): the first values not computed that way (a load, a
    loop-carried variable, a reduction's result). `x - m` of a ring block x and a running max
    m, which holds no masked value, gives [x]."""
    out, seen, todo = [], set(), [v]
    while todo:
        x = todo.pop()
        if x.id in seen:
            continue
        seen.add(x.id)
        if flow.carried_by.get(x.id):
            todo += list(flow.carried_by[x.id])
        else:
            out.append(x)
    return out


def _carriers_defined(red: ReduceSite, carriers: list | None, idx: tuple):
    """Element idx of the reduced tile holds no masked lane: every carrier (`_carriers`) is
    in bounds there, read in its state at the reduction (ReduceSite.operands) at idx with its
    broadcast dims at 0; returned with the conditions of the records read (premises, as the
    reduced tile's). None where a carrier has no such state or another rank (then the
    reduced tile's own `defined`, which also asks the other operands, stands)."""
    if not carriers:
        return None
    shape = red.op.src.type.shape
    terms, conds = [], []
    for x in carriers:
        st = red.operands.get(x.id)
        xs = getattr(x.type, "shape", None)
        if st is None or xs is None or len(xs) != len(shape) or \
                any(s != n and s != 1 for s, n in zip(xs, shape)):
            return None
        rec = st.fn(tuple(z3.IntVal(0) if s == 1 and n != 1 else i
                          for i, s, n in zip(idx, xs, shape)))
        terms.append(rec.defined)
        conds += list(rec.cond)
    return z3.And(terms), conds


def _reaches(model: Model, red: ReduceSite, got: object, loads: frozenset,
             reached: list | None, turned=None, own: bool = False,
             carriers: list | None = None) -> Obligation:
    """The masked lanes of `loads`, holding `got`, change no stored output through this
    reduction: every element e of the reduced tile is in bounds (model's `defined`), or the
    result element e goes into (e with the reduced axis at 0) reaches no element that a store
    writes in bounds. `reached` (outflow.py) says which store elements a result element can
    reach; None (a use it does not follow) leaves the first disjunct alone. So a masked lane
    on an axis the reduction keeps (a column max over rows of a block whose last columns are
    past the end) is no error where its column's result is only stored masked, while one on
    the reduced axis mixes the fill into a result next to elements in bounds, which is stored."""
    op = red.op
    shape = op.src.type.shape
    idx = tuple(fresh_int(f"e{d}") for d in range(len(shape)))
    rec = red.src.fn(idx)
    prem = list(model.premises) + red.site.constraints() + list(rec.cond) + \
        [z3.And(i >= 0, i < n) for i, n in zip(idx, shape)]
    names = {info.value.id: info.name for info in model.tensors.values()}
    where = sorted({f"{names.get(x.tensor.id, x.tensor)} (other={x.other}) at {x.loc}"
                    for x in loads})
    outs = None if reached is None else _outputs(model, red, idx, reached)
    # a value computed from the fill and other data (FINITE: `x - mean`) is wrong only at the
    # loads' own masked lanes: with the loads in the reduction's loop body and of its shape
    # (pointwise ops between, element e of each load is element e of the reduced tile), the
    # claim is that those loads are in bounds at e; the other operands' definedness (a mean
    # summarized over its loop) says nothing of the fill
    # Otherwise (the loads elsewhere: a block lower/prefetch.py loads ahead and carries in
    # a ring) the same question of the values the masked value comes from, in their state at
    # the reduction: `x - m` of a ring block x and a running max m (a loop-carried variable
    # the model summarizes, so rec.defined is not known at any element) is a masked lane
    # only where x is
    by_carriers = None if own else _carriers_defined(red, carriers, idx)
    if by_carriers is not None:
        prem += by_carriers[1]
    defined = z3.And([model.tile(x.result).fn(idx).defined for x in loads]) if own else \
        (rec.defined if by_carriers is None else by_carriers[0])
    if outs is None:
        claim = ("every reduced element is in bounds", defined)
    else:
        stored = z3.Or([o[0] for o in outs]) if outs else z3.BoolVal(False)
        claim = ("every reduced element is in bounds, or its result is stored nowhere in "
                 "bounds", z3.Or(defined, z3.Not(stored)))

    def decode(zm, violated):
        wit = W.context(model, zm, red.site)
        element = tuple(value(zm, i) for i in idx)
        coords = {name: value(zm, f.term) for name, f in sorted(rec.fields.items())
                  if name not in META_FIELDS and f.is_point}
        wit.update({"fill": _held(got, loads), "identity": _WORDS[op.fn], "reduction": op.fn,
                    "axis": op.axis, "element": element, "coordinates": coords,
                    "masked_load": where})
        wit.update(W.holder(model, op.src.type, element))
        at = ", ".join(f"{k} = {v}" for k, v in coords.items())
        out = _stored_output(zm, outs, wit)
        turn = ""
        if turned is not None:
            wit["turned_at"] = str(turned.loc)
            turn = (f"; the fill stops being the identity at {turned.loc} ({turned.fn} with "
                    f"a value the mask does not zero: mask that value with ag.where(valid, "
                    f"..., {_FILL_TEXT[op.fn]}) there)")
        return W.placed(f"element {element} of the reduced tile is a masked lane (past the "
                        f"tensor's end{', at ' + at if at else ''}) of the load "
                        f"{' / '.join(where)}: it holds {_held(got, loads)} when this {op.fn} "
                        f"consumes it, not the identity {_WORDS[op.fn]}, and "
                        f"{_HARM[op.fn]}{out}{turn}", wit), wit
    return Obligation(
        "fill.identity", op.loc, f"{op.fn} over axis {op.axis} at {op.loc}: no masked "
        f"element reaches it", prem, [claim],
        decode, minimize=list(idx) + [s.var for s in red.site.loops()],
        fix=(f"mask the value computed from the load with ag.where(valid, ..., "
             f"{_FILL_TEXT[op.fn]}) before the {op.fn} (no fill survives that arithmetic as "
             f"the identity)" if got == FINITE else _fix(op.fn))
        + ", or keep the loop's blocks inside the tensor")


def _together(model: Model, red: ReduceSite, patterns: frozenset,
              reached: list | None) -> Obligation:
    """No element of the reduced tile meets a lane pattern under which the flow's identity is
    wrong (`_Flow._lanes`): at every element e, for each (masked loads, in-bounds loads)
    pattern, not all of the first are masked (their element: e with the load's broadcast dims
    at 0) while all of the second are in bounds — or e's result is stored nowhere in bounds
    (as `_reaches`). A 1-d convolution's taps gathered with other=1.0 times an in-bounds weight
    row: the tap is padding, the weight is data, and the product 1.0 * w is added."""
    op = red.op
    shape = op.src.type.shape
    idx = tuple(fresh_int(f"e{d}") for d in range(len(shape)))
    rec = red.src.fn(idx)
    prem = list(model.premises) + red.site.constraints() + list(rec.cond) + \
        [z3.And(i >= 0, i < n) for i, n in zip(idx, shape)]
    loads = sorted({x for ms, ds in patterns for x in ms | ds}, key=lambda x: str(x.loc))
    inside = {id(x): model.tile(x.result).fn(tuple(
        z3.IntVal(0) if s == 1 and n != 1 else i
        for i, s, n in zip(idx, x.result.type.shape, shape))).defined for x in loads}
    bad = [z3.And([z3.Not(inside[id(x)]) for x in ms] + [inside[id(x)] for x in ds])
           for ms, ds in sorted(patterns, key=str)]
    ok = z3.Not(z3.Or(bad))
    outs = None if reached is None else _outputs(model, red, idx, reached)
    stored = None if outs is None else (z3.Or([o[0] for o in outs]) if outs else
                                        z3.BoolVal(False))
    claim = ok if stored is None else z3.Or(ok, z3.Not(stored))
    names = {info.value.id: info.name for info in model.tensors.values()}

    def decode(zm, violated):
        wit = W.context(model, zm, red.site)
        element = tuple(value(zm, i) for i in idx)

        def holds(x):
            return z3.is_true(zm.eval(inside[id(x)], model_completion=True))
        masked = [f"{names.get(x.tensor.id, x.tensor)} (other={x.other}) at {x.loc}"
                  for x in loads if not holds(x)]
        data = [f"{names.get(x.tensor.id, x.tensor)} at {x.loc}" for x in loads if holds(x)]
        wit.update({"element": element, "reduction": op.fn, "identity": _WORDS[op.fn],
                    "masked_load": masked, "in_bounds_load": data})
        wit.update(W.holder(model, op.src.type, element))
        out = _stored_output(zm, outs, wit)
        return W.placed(
            f"element {element} of the reduced tile is a masked lane of {' / '.join(masked)} "
            f"but data of {' / '.join(data)}: the fill is combined with data there, not with "
            f"the other fill, so this {op.fn} does not get its identity {_WORDS[op.fn]}{out}",
            wit), wit
    return Obligation(
        "fill.identity", op.loc, f"{op.fn} over axis {op.axis} at {op.loc}: no masked lane "
        f"meets data that changes its value", prem,
        [("no element is masked in one load and data in the other, or its result is stored "
          "nowhere in bounds", claim)], decode,
        minimize=list(idx) + [s.var for s in red.site.loops()],
        fix=f"load with the fill that is the identity after the arithmetic (other=0.0 before a "
            f"product that is summed), or mask with ag.where(valid, ..., "
            f"{_FILL_TEXT[op.fn]}) before the {op.fn}")


def _outputs(model: Model, red: ReduceSite, idx: tuple, reached: list) -> list | None:
    """(condition, store site, destination) per store site that a result element of `red`
    can reach (outflow.py): the condition holds when the result element of reduced element
    `idx` reaches a tile element of the stored value whose destination is in bounds, in some
    instance of the store's site. A store reached through an assignment may run in a later
    iteration of a loop enclosing both: its indices of such loops are renamed apart, to any
    iteration not before the reduction's (lexicographically, outermost loop first: a value
    flows forward in time, and the model's loop indices increase), and after it when the
    store precedes the reduction in the loop body. None: a store the model has no site of
    (nothing bounds it)."""
    mine = {s.var.get_id() for s in red.site.loops()}
    out = []
    for store, axes, crossed in reached:
        sites = [st for st in model.stores if st.op is store]
        if not sites:
            return None
        for st in sites:
            sidx = [fresh_int(f"o{d}") for d in range(len(st.shape))]
            conds = [z3.And(i >= 0, i < n) for i, n in zip(sidx, st.shape)]
            conds += [i == idx[a[0]] + a[1] for i, a in zip(sidx, axes) if a is not None]
            dest = _dest(st, sidx)
            conds += st.site.constraints() + _inb(model, st, dest)
            if crossed:
                apart = [(s.var, fresh_int("iter")) for s in st.site.loops()
                         if s.var.get_id() in mine]
                conds = [substitute(c, *apart) for c in conds]
                dest = [substitute(d, *apart) for d in dest]
                # in the same iteration of every one only if the store comes after the
                # reduction in the body (sites are numbered in program order)
                later = z3.BoolVal(st.site.seq > red.site.seq)
                for old, new in reversed(apart):
                    later = z3.Or(new > old, z3.And(new == old, later))
                conds.append(later)
            out.append((z3.And(conds), st, dest))
    return out


def _held(got: object, loads: frozenset) -> object:
    """What a masked lane holds at the reduction, in words: the constant, or for FINITE the
    fill and that the pointwise ops between turned it into another value."""
    if got != FINITE:
        return got
    fills = sorted({str(x.other) for x in loads})
    return (f"a value computed from its fill {' / '.join(fills)} by the pointwise ops "
            f"between the load and the reduction (e.g. x - mean)")


def _verdict(op: O.Reduce, got: float, who: tuple[dict, str] = ({}, ""),
             origin=None) -> Finding:
    wit, said = who
    set_at = _set_at(origin)
    if set_at:
        wit = {**wit, "filled_at": str(origin.loc)}
    return Finding(
        "fill.identity", op.loc, f"{op.fn} over axis {op.axis} at {op.loc}", "violated",
        f"the masked elements of the reduced tile (past the tensor's end) hold {got} when "
        f"this {op.fn} consumes them, not its identity {_WORDS[op.fn]}: each "
        f"{_HARM[op.fn]}{set_at}" + (f" (in {said})" if said else ""),
        {"fill": got, "identity": _WORDS[op.fn], "reduction": op.fn, "axis": op.axis,
         "element": f"every element of the reduced axis {op.axis} past the tensor's end "
                    f"(e.g. column N of a row when N is not a multiple of the tile)", **wit},
        fix=_fix(op.fn, origin))


def _set_at(origin) -> str:
    """The clause naming the op that put the wrong masked value in (the line a fix edits:
    the reduction's line is where it is consumed, often lines later)."""
    if isinstance(origin, O.Elementwise):
        return f"; the masked value is the constant false branch of the where at {origin.loc}"
    if isinstance(origin, (O.Load, O.Gather)):
        return f"; the masked value is the fill (other={origin.other}) of the load at {origin.loc}"
    if isinstance(origin, O.TmaLoad):
        return f"; the masked value is the zero fill of the TMA copy at {origin.loc}"
    return ""


def _fix(fn: str, origin=None) -> str:
    if isinstance(origin, O.Elementwise):
        return f"mask with {_FILL_TEXT[fn]} in the where at {origin.loc} (the {fn}'s identity)"
    return f"load with other={_FILL_TEXT[fn]} (or mask with ag.where before the {fn})"


def _join_loads(a: frozenset | None, b: frozenset | None) -> frozenset | None:
    return OPAQUE if a is OPAQUE or b is OPAQUE else a | b


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
    if fn in ("exp", "exp2", "exp2_approx") and consts:
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
    if fn in ("neg", "abs", "tanh", "sigmoid", "relu", "erf", "round_tf32") or not consts:
        return FINITE
    if fn in BITWISE:   # integer bits of integers: always a finite integer, never +-inf
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
    if fn == "exp2_approx":   # ftz: results below 2^-126 are 0
        r = 0.0 if v[0] == -inf else 2.0 ** v[0]
        return 0.0 if r < 2.0 ** -126 else r
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
    if fn in _COMPARE:   # a boolean tile's element: 1.0 true, 0.0 false (nan compares false)
        return 1.0 if _COMPARE[fn](*v) else 0.0
    raise ValueError(fn)


_COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
            "and": lambda a, b: a != 0 and b != 0, "or": lambda a, b: a != 0 or b != 0,
            "not": lambda a: a == 0}
