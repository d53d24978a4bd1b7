"""The abstract domain of the verifier's model: what a transfer function reads and writes.

Job: the records of one abstract interpretation (argus/verify/model.py walks the IR; the
transfer functions in this package, one per op class, fill these in): variables, scopes and
sites, tensors, shared-memory views, pipeline steps, writes and reads of shared memory, tile
states, and the sites obligations are generated from; plus the few term helpers that both the
model and the transfer functions use. It sits below both so that the model can look rules up
and the rules can build records without an import circle.

Invariant kept: these are plain records; none of them evaluates anything. A `TileState.fn`
gives a fresh `Record` on every call (see the model's docstring; a repeated index is computed
once and its auxiliary variables renamed apart, tagdomain.memoized_record), and `_Unsupported` is the one
exception by which a transfer function says "not representable": the walk turns it into an
`unknown`, never into a silent assumption.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3

from argus.errors import Loc
from argus.ir import ops as O
from argus.ir import tag_ops as T
from argus.ir.core import Op, Value
from argus.verify.tagdomain import Record, memoized_record


# ----------------------------------------------------------------------------- structures


@dataclass
class VarInfo:
    """What a z3 variable stands for, for decoding counterexamples."""

    kind: str          # param, pid, loop, wg, thread, counter, index
    label: str         # human name: "M", "pid_m", "k-loop index at gemm.py:45", "consumer wg"
    value: Value | None = None
    op: Op | None = None


@dataclass
class Scope:
    kind: str                      # loop, if, role, produce, consume
    op: Op
    var: z3.ArithRef | None        # loop index / role index
    constraints: tuple[z3.BoolRef, ...]
    # a loop's pipeline-counter bounds, true by construction (for_ in transfer/control.py):
    # the steps of one iteration lie inside the loop's total. Not premises of every query
    # (they are non-linear); asked where counters of different loops are compared
    counter_lemmas: tuple[z3.BoolRef, ...] = ()
    # a loop's (pipe id, the role's counter before the loop, at the start of the iteration =
    # before + index * per, or before + the earlier iterations' sum (Model.steps_over) when
    # the steps per iteration `per` depend on the index): a step inside the loop has counter
    # start + offset with 0 <= offset < per (Model._same_loop_nest)
    steps: tuple[tuple[int, Any, Any, Any], ...] = ()   # (pipe id, before, start, per)
    # this scope's place in the walk's order of scopes (Model._scope): a loop or if walked
    # twice (a loop's dry pass and its recorded one) is two scopes, whose terms may differ (an
    # opaque scalar primed again is a fresh variable), so neither the op's program point nor
    # a loop index name tells them apart; the seq does, and is the same in every trace. Not
    # compared: scopes compare by what they state, as before (check_stores._translate_of)
    seq: int = field(kw_only=True, compare=False)


@dataclass
class Site:
    """An op with everything enclosing it, in one role instance."""

    op: Op
    scopes: tuple[Scope, ...]
    role: O.RoleOp | None
    seq: int

    @property
    def loc(self) -> Loc:
        return self.op.loc

    def constraints(self) -> list[z3.BoolRef]:
        out: list[z3.BoolRef] = []
        for s in self.scopes:
            out.extend(s.constraints)
        return out

    def scope_vars(self) -> list[z3.ArithRef]:
        return [s.var for s in self.scopes if s.var is not None]

    def enclosing(self, kind: str, pipe_id: int | None = None) -> Scope | None:
        for s in reversed(self.scopes):
            if s.kind == kind and (pipe_id is None or s.op.pipe.id == pipe_id):
                return s
        return None

    def loops(self) -> list[Scope]:
        return [s for s in self.scopes if s.kind == "loop"]


@dataclass
class TensorInfo:
    name: str
    value: Value
    dims: tuple
    field_names: tuple[str, ...]            # one per dim
    user_fields: dict[str, tuple[str, tuple[Value, ...]]] = field(default_factory=dict)

    def extent(self, model: Model, d: int):
        dim = self.dims[d]
        return dim if isinstance(dim, int) else model.param_term(dim)


@dataclass
class ViewInfo:
    value: Value
    buffer: Value
    stage: Any            # z3 term, int, or None
    row0: Any             # z3 term or int
    rows: int
    cols: int
    op: Op


@dataclass
class StepInfo:
    """One produce/consume site: its counter term n and the slot it owns."""

    op: Op
    site: Site
    pipe: Value
    kind: str                       # produce / consume
    counter: z3.ArithRef
    stage_term: z3.ArithRef


@dataclass
class PipeInfo:
    op: O.PipelineCreate
    stages: int
    consumers: int
    steps: list[StepInfo] = field(default_factory=list)
    totals: dict = field(default_factory=dict)   # (role name, kind) -> total steps term
    # each pipe.peek: (its site, the role's step counter there: the step whose fill it reads)
    peeks: list = field(default_factory=list)
    # the payload word each produce step writes (Produce.payload), by the step's site seq
    payload_words: dict = field(default_factory=dict)


@dataclass
class WriteSite:
    """A write into shared memory: a TMA copy (async proxy) or a stmatrix (generic)."""

    kind: str                        # tma / generic
    op: Op
    site: Site
    view: ViewInfo
    step: StepInfo | None            # the enclosing produce for TMA
    tensor: TensorInfo | None = None
    coords: tuple = ()
    tile: TileState | None = None
    # a TMA copy's tag.copy fields: (field, expression, its scalar operands' terms at the copy)
    tags: tuple = ()


@dataclass
class TileState:
    shape: tuple[int, ...]
    layout: str
    fn: Callable[[tuple], Record]
    loc: Loc
    what: str
    # False when no element can carry a value fact (transfer/values.py): a wgmma accumulator
    # (the product drops them), so an `ag.when` merge need not build its record to look
    valued: bool = True

    def __post_init__(self) -> None:
        # the same element's record is asked for by several checks (and by several consumers
        # inside one): computed once per index, renamed apart per instantiation
        object.__setattr__(self, "fn", memoized_record(self.fn))

    def register_layout(self, threads: int):
        """The RegisterLayout this tile's layout name denotes (target/register_layouts.py):
        the one object codegen renders from, so checks decide on what runs."""
        from argus.target import register_layouts

        return register_layouts.build(self.layout or "blocked", tuple(self.shape), threads)


@dataclass
class ReadSite:
    kind: str                        # wgmma-a, wgmma-b, ldmatrix, tma-store, smem-gather
    op: Op
    site: Site
    view: ViewInfo
    # smem-gather: (the model's index tile or scalar, the tile's shape or None) per view dim
    # (memory._index_parts), for check_smem's smem.gather-inside
    indices: tuple = ()


@dataclass
class StoreSite:
    kind: str                        # store / tma-store
    op: Op
    site: Site
    tensor: TensorInfo
    offsets: tuple
    shape: tuple[int, ...]
    tile: TileState
    transposed: bool = False         # the tile's two axes land swapped (Store.transposed)


@dataclass
class AtomicSite:
    """A global atomic (atomic.add, atomic.fetch_add): not a store, so no store.* claim is
    made of it; verify/check_atomics.py checks its tensor and its tickets. `ticket` is the
    fetch's old value as a term of the instance (`args`), None for atomic.add; `inverses`
    the functions that recover each instance variable from (cell, ticket)."""

    kind: str                        # add / fetch_add
    op: Op
    site: Site
    tensor: TensorInfo
    offsets: tuple
    args: tuple = ()
    ticket: Any = None
    inverses: tuple = ()


@dataclass
class EwSite:
    op: O.Elementwise
    site: Site
    operands: list                   # (TileState, shape) per tile operand


@dataclass
class ReduceSite:
    op: O.Reduce
    site: Site
    src: TileState
    # value id -> the state at the reduction of each tile its source is computed from by
    # pointwise ops and conversions (the source's own included): check_fills asks whether the
    # ones that hold masked lanes are in bounds at a reduced element, and a loop-carried
    # variable's state after the loop (model.tile) is not the one this reduction reads
    operands: dict = field(default_factory=dict)


@dataclass
class AssertSite:
    op: T.TagAssert
    site: Site
    following: tuple[Op, ...]        # the ops after it in its region (for use-site pairing)
    tiles: dict = field(default_factory=dict)   # the referenced tiles' states at this point


@dataclass
class WgmmaSite:
    op: O.Wgmma
    site: Site
    a: ViewInfo | None               # None: A comes from registers (a_tile)
    b: ViewInfo
    acc_before: TileState
    acc_def_seq: int                 # seq of the op that (re)initialized the accumulator
    a_tile: TileState | None = None  # the register A operand (FlashAttention's P)

    @property
    def a_name(self) -> str:
        return str(self.a.buffer) if self.a is not None else f"registers {self.op.a}"


# ----------------------------------------------------------------------------- term helpers


class _Unsupported(Exception):
    pass


def _is_z3(x) -> bool:
    return isinstance(x, z3.ExprRef)


def _num(x):
    if isinstance(x, bool):
        return z3.IntVal(int(x))
    if isinstance(x, int):
        return z3.IntVal(x)
    if _is_z3(x) and z3.is_bool(x):
        return z3.If(x, 1, 0)
    if isinstance(x, float):
        raise _Unsupported("a float scalar used as an integer")
    return x


def _is_zero(x) -> bool:
    if isinstance(x, int):
        return x == 0
    return z3.is_int_value(z3.simplify(x)) and z3.simplify(x).as_long() == 0


def _same(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return z3.eq(z3.simplify(_num(a)), z3.simplify(_num(b)))


def c_int_div(a: int, b: int) -> int:
    """C's integer quotient of two Python ints (truncating toward zero; b != 0), exact at any
    size (no float division)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_div(a, b):
    """C's integer quotient `a / b` (truncating toward zero) as a z3 term, exact for either
    sign: z3's Int `/` is Euclidean (0 <= a - b * q < |b|), which is C's truncation for a
    non-negative dividend and any nonzero divisor; a negative dividend is moved up by
    |b| - 1 first (Euclid's quotient of a + |b| - 1 is then a's rounded toward zero). One
    division, as z3's own: a numeral divisor keeps the term linear and the query's count of
    divisions (solver.PURIFY_MIN_DIVISIONS) unchanged. A zero divisor leaves z3's unspecified
    value: the callers give that case a fresh unknown or no value (undefined in C)."""
    a, b = _num(a), _num(b)
    if z3.is_int_value(b):
        magnitude = abs(b.as_long())
    else:
        magnitude = z3.If(b < 0, -b, b)
    return (a + z3.If(a < 0, magnitude - 1, 0)) / b


def c_mod(a, b):
    """C's remainder `a % b` (the sign of the dividend): a - (a / b) * b, c_div's quotient."""
    return _num(a) - c_div(a, b) * _num(b)


def b_index(view: ViewInfo, n, kk, K: int, trans: bool) -> tuple:
    """The view element holding B[n, k] (or A[m, k]) of a wgmma: K-major [N, K] views
    directly; an MN-major operand is stored as column atoms [N / W][K][W] stacked along the
    rows (W = the view's columns, one swizzle span)."""
    if not trans:
        return (n, kk)
    W = view.cols
    return ((n / W) * K + kk, n % W)


def trailing(offsets, idx) -> tuple:
    """Coordinates of tile element idx placed at `offsets`: a tile of lower rank than its
    tensor covers the tensor's last dims (the leading offsets are batch indices)."""
    lead = len(offsets) - len(idx)
    return tuple(_num(o) for o in offsets[:lead]) + tuple(
        _num(o) + i for o, i in zip(offsets[lead:], idx))


# A transfer function: (model, op, enclosing scopes, role, pipeline step counters, the ops after
# it in its region) -> None; it updates the model's state. `Model` is argus/verify/model.py's,
# which imports this package (so it is named here, not imported).
Rule = Callable[["Model", Any, tuple, Any, dict, tuple], None]
