"""The symbolic model of a kernel: scalars as z3 terms, data as tag records, sites to check.

Job: one abstract interpretation of an `ir.Kernel` (INVARIANTS.md §3.1–3.2) that every
obligation module reads. Walking the IR in program order it

  * evaluates every scalar to a z3 Int/Bool term over the kernel's symbols: shape parameters
    (1 ≤ M < 2^24), program ids (0 ≤ pid < grid extent), loop indices (start ≤ i < stop),
    warpgroup indices of roles and thread indices;
  * gives every pipeline step its role's step counter `n` as a term (counters continue across
    loops: n = steps before the loop + iteration · steps per iteration + steps before it in the
    body), and every step's stage the slot n % S the pipeline construct defines (whether the
    lowered stage/parity expressions implement that is the pipeline module's obligation:
    assume-guarantee, §3.4);
  * tracks the tags of register tiles (functions from an element index to a `Record`) through
    loads, TMA, shared memory, ldmatrix/stmatrix, wgmma, elementwise ops, broadcasts,
    conversions, reductions and assignments, summarizing loop-carried tiles over the loop;
  * records the sites obligations are generated from (TMA copies, wgmma, stores, reductions,
    elementwise combinations, pipeline steps, tag assertions).

What one op does to that state is its transfer function, registered per op class in
argus/verify/transfer/ (by op family); the model keeps the state, the walk (regions, roles,
the dry pass of a loop), scalar evaluation, step counting, and the resolution of shared-memory
reads and tag expressions that obligations query. An op whose class has no rule is reported
("no tag rule for ..."), never skipped.

Invariant kept: a Record obtained for a reader is instantiated afresh on every call (fresh
auxiliary variables), so an obligation can instantiate the same data twice (two contributors,
two writers) without aliasing. Anything the model cannot represent exactly is listed in
`unsupported` and reported as `unknown`, never silently assumed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from typing import Any

import z3

from argus.errors import Loc
from argus.ir import ops as O
from argus.ir import tag_ops as T
from argus.ir.core import Kernel, Op, Region, Value
from argus.ir.types import ScalarType, SmemType, TensorType, TileType
from argus.target.fragments import acc_order_for
from argus.verify import exprs, solver
from argus.verify.tagdomain import (Memo, Record, TagVal, conj, fresh_int, instantiate,
                                   mentions, occurring, substitute, with_fresh)
from argus.verify.terms import subterms
from argus.verify.transfer import RULES
# the records the walk builds and the obligation modules read live with the transfer functions
# that fill them in (one module below both); the checks import them from here
from argus.verify.transfer.domain import (AssertSite, EwSite, PipeInfo, ReadSite, ReduceSite,
                                          Scope, Site, StepInfo, StoreSite, TensorInfo,
                                          TileState, VarInfo, ViewInfo, WgmmaSite, WriteSite,
                                          _is_z3, _is_zero, _num, _Unsupported, b_index,
                                          c_div, c_int_div, c_mod)
from argus.verify.transfer.domain import trailing as trailing  # re-exported (check_stores)
from argus.verify.transfer.values import FACTS

SHAPE_BOUND = 1 << 24   # runtime shape parameters are assumed in [1, 2^24)


# ----------------------------------------------------------------------------- the model


class Model:
    """Build with `Model(kernel)`; see the module docstring."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.sym: dict[int, Any] = {}
        self.premises: list[z3.BoolRef] = []
        self.vars: dict[str, VarInfo] = {}
        self.params: dict[str, z3.ArithRef] = {}
        self.tensors: dict[int, TensorInfo] = {}
        self.buffers: dict[int, O.SmemAlloc] = {}
        self.views: dict[int, ViewInfo] = {}
        self.pipes: dict[int, PipeInfo] = {}
        self.steps_by_stage: dict[int, StepInfo] = {}
        self.writes: dict[int, list[WriteSite]] = {}
        self.reads: list[ReadSite] = []
        self.stores: list[StoreSite] = []
        self.atomics: list = []   # AtomicSite: atomic.add / atomic.fetch_add (check_atomics)
        self.wgmmas: list[WgmmaSite] = []
        self.ews: list[EwSite] = []
        self.reduces: list[ReduceSite] = []
        self.asserts: list[AssertSite] = []
        self.turns: list[Site] = []   # ordered.wait sites (ag.ordered), for check_ordered
        self.tag_fns: dict[str, Any] = {}
        self.axioms: list[tuple[T.TagAssume, Site]] = []
        # ag.require preconditions: checked on the host before every launch, so premises
        self.requires: list[T.Require] = []
        # the non-linear ones (a product of two parameters: NP == N * P) as terms, not
        # premises: every query would carry them into non-linear arithmetic; the rules that
        # need them add them (check_stores._pushed_split). Dropping a premise proves less,
        # never more
        self.launch_facts: list[z3.BoolRef] = []
        self.tiles: dict[int, TileState] = {}
        self.unsupported: list[tuple[Loc, str]] = []
        self.grid: O.GridIds | None = None
        # thread-block clusters: pid_d = c_d * cluster_d + rank_d on every clustered grid dim
        self.cluster: tuple[int, ...] = (1, 1, 1)
        self.cluster_size = 1
        self.rank_term: Any = 0                  # %cluster_ctarank of this CTA (x fastest)
        self.rank_digits: list[tuple[z3.ArithRef, int, int]] = []   # (rank_d, c_d, stride)
        self.grid_vars: list[tuple[z3.ArithRef, Any, Any]] = []     # (var, lo, hi)
        self._pid_split: dict[int, tuple[z3.ArithRef, z3.ArithRef, int]] = {}
        self.roles: list[O.RoleOp] = []
        self.threads = kernel.attr("threads", 128)
        self.lowered = kernel.attr("smem_plan") is not None
        self._seq = itertools.count()
        self._scope_seq = itertools.count()   # Scope.seq (its own count: Site.seq unchanged)
        self._recording = True
        self._def_seq: dict[int, int] = {}
        self.def_ops: dict[int, Op] = {}
        self._nest_decisions: dict[tuple, tuple] = {}   # see _same_loop_nest
        self.step_sums: dict[str, tuple] = {}   # see steps_over
        self.trip_steps: dict[int, tuple] = {}  # see transfer/control.py for_
        Memo.building += 1   # records computed during the walk are not memoized
        try:
            self._build()
        finally:
            Memo.building -= 1

    # -- variables -------------------------------------------------------------------------
    def _var(self, name: str, info: VarInfo) -> z3.ArithRef:
        v = z3.Int(name)
        self.vars[name] = info
        return v

    def param_term(self, name: str) -> z3.ArithRef:
        return self.params[name]

    def note_unsupported(self, loc: Loc, why: str) -> None:
        if self._recording and (loc, why) not in self.unsupported:
            self.unsupported.append((loc, why))

    # -- building --------------------------------------------------------------------------
    def _build(self) -> None:
        k = self.kernel
        for p in k.params:
            t = p.value.type
            if isinstance(t, ScalarType):
                v = self._var(p.name, VarInfo("param", p.name, p.value))
                self.params[p.name] = v
                self.sym[p.value.id] = v
                self.premises += [v >= 1, v < SHAPE_BOUND]
        for p in k.params:
            t = p.value.type
            if isinstance(t, TensorType):
                names = []
                for d, dim in enumerate(t.shape):
                    names.append(dim.lower() if isinstance(dim, str) else f"dim{d}")
                self.tensors[p.value.id] = TensorInfo(p.name, p.value, t.shape, tuple(names))
        # tag declarations first: they may appear after their first use in nested regions
        for op in k.walk():
            if isinstance(op, T.TagFn):
                self._declare_fn(op)
            elif isinstance(op, T.TagTensor):
                info = self.tensors[op.tensor.id]
                info.user_fields[op.field] = (op.expr, op.args)
        self.roles = [op for op in k.body.ops if isinstance(op, O.RoleOp)]
        counters: dict[int, Any] = {}
        top = [op for op in k.body.ops if not isinstance(op, O.RoleOp)]
        self._walk(Region(tuple(top)), (), None, counters)
        for role in self.roles:
            self._walk_role(role)
        for op, _site in self.axioms:
            if op.nvars == 0:  # a launch precondition over shape parameters: assumed everywhere
                self.premises.append(_as_bool(self.eval_tag_expr(op.expr, op.args)))
        for op in self.requires:
            # over integer scalars only: a float parameter has no exact Int term here (its
            # requires are read by the rules that need them, e.g. check_softmax's fold)
            if all(isinstance(a.type, ScalarType) and not a.type.dtype.is_float
                   for a in op.args):
                fact = _as_bool(self.eval_tag_expr(op.expr, op.args, division="floor"))
                (self.launch_facts if solver._nonlinear([fact]) else self.premises).append(fact)
        if not self.roles:
            for pid, n in counters.items():
                self.pipes[pid].totals[(None, "produce")] = n
                self.pipes[pid].totals[(None, "consume")] = n

    def _declare_fn(self, op: T.TagFn) -> None:
        if op.name in self.tag_fns:
            return
        if op.body:
            self.tag_fns[op.name] = ("body", op.arity, op.body)
        else:
            self.tag_fns[op.name] = ("opaque", op.arity,
                                     z3.Function(op.name, *([z3.IntSort()] * (op.arity + 1))))

    def _walk_role(self, role: O.RoleOp) -> None:
        wg = self._var(f"{role.name}_wg{role.index.id}",
                       VarInfo("wg", f"{role.name} warpgroup", role.index, role))
        self.sym[role.index.id] = wg
        scope = self._scope("role", role, wg, (wg >= 0, wg < role.warpgroups))
        counters: dict[int, Any] = {}
        self._walk(role.body, (scope,), role, counters)
        for pid, n in counters.items():
            kinds = {s.kind for s in self.pipes[pid].steps if s.site.role is role}
            for kind in kinds:
                self.pipes[pid].totals[(role.name, kind)] = n

    def _site(self, op: Op, scopes, role) -> Site:
        return Site(op, scopes, role, next(self._seq))

    def _scope(self, kind: str, op: Op, var, constraints: tuple, counter_lemmas: tuple = (),
               steps: tuple = ()) -> Scope:
        return Scope(kind, op, var, constraints, counter_lemmas, steps,
                     seq=next(self._scope_seq))

    # -- counting pipeline steps -----------------------------------------------------------
    def _count(self, region: Region, pipe_id: int):
        total: Any = 0
        branches: list = []   # (condition, steps) of the ifs of this region, folded below
        for op in region.ops:
            if isinstance(op, (O.Produce, O.Consume)):
                if op.pipe.id == pipe_id:
                    total = total + 1
                inner = self._count(op.body, pipe_id)
                total = total + inner
            elif isinstance(op, O.PipeSkip) and op.pipe.id == pipe_id:
                total = total + _max0(self.scalar(op.steps))  # another warpgroup's steps
            elif isinstance(op, O.For):
                inner = self._count(op.body, pipe_id)
                if _is_zero(inner):
                    continue
                if op.var.id in self.sym and _mentions_any(inner, [self.sym[op.var.id]]):
                    total = total + self.steps_over(op, inner)
                else:
                    total = total + self._trip(op) * inner
            elif isinstance(op, O.If):
                inner = self._count(op.body, pipe_id)
                if not _is_zero(inner):
                    branches.append((self._bool(op.cond), inner))
            elif isinstance(op, O.Elect):  # the elected thread's steps are its group's
                total = total + self._count(op.body, pipe_id)
        return total + _fold_branches(branches)

    def steps_over(self, op: O.For, per, upto=None):
        """Pipeline steps of the iterations [0, upto) of loop `op` (all of them when upto is
        None), whose body runs `per` steps at iteration index t, when `per` depends on t (a
        causal tile's KV block count in a persistent walk): Σ_{t < upto} per(t), which is not
        linear. It is the application F(0, upto, c1..cn) of an uninterpreted function F named
        after the text of per(t) with t a placeholder, and c1..cn the constants per mentions
        (shapes, program ids, outer loop indices): two loops whose per-iteration counts have
        the same text get the same F, so equal sums are equal terms; `step_sums` keeps what F
        sums (check_pipeline compares sums of different forms iteration by iteration)."""
        var = self.sym[op.var.id]
        start, step = _num(self.scalar(op.start)), _num(self.scalar(op.step))
        t = z3.Int("steps!t")
        body = z3.simplify(substitute(_num(per), (var, start + t * step)))
        args = sorted(_consts(body, exclude=t), key=lambda c: c.decl().name())
        name = "steps!" + hashlib.sha1(body.sexpr().encode()).hexdigest()[:12]
        fn = z3.Function(name, *([z3.IntSort()] * (len(args) + 3)))
        self.step_sums[name] = (t, body, tuple(args))
        hi = self._trip(op) if upto is None else upto
        return fn(z3.IntVal(0), _num(hi), *args)

    def trip_term(self, op: O.For):
        return _num(self._trip(op))

    def _trip(self, op: O.For):
        start, stop, step = (self.scalar(v) for v in (op.start, op.stop, op.step))
        if isinstance(step, int) and step == 1:
            span = stop - start
            return _max0(span)
        return _max0((stop - start + step - 1) / step) if _is_z3(step) or _is_z3(start) or \
            _is_z3(stop) else max(0, -(-(stop - start) // step))

    # -- scalars ---------------------------------------------------------------------------
    def scalar(self, v: Value | int) -> Any:
        if isinstance(v, int):
            return v
        if v.id not in self.sym:
            raise _Unsupported(f"scalar {v} has no symbolic value")
        return self.sym[v.id]

    def _bool(self, v: Value) -> z3.BoolRef:
        t = self.scalar(v)
        if isinstance(t, bool):
            return z3.BoolVal(t)
        if _is_z3(t) and z3.is_bool(t):
            return t
        return t != 0

    def _arith(self, op: O.Arith):
        a, b = self.sym.get(op.lhs.id), self.sym.get(op.rhs.id)
        if a is None or b is None or isinstance(a, float) or isinstance(b, float):
            return None
        fn = op.fn
        if fn in ("lt", "le", "gt", "ge", "eq", "ne"):
            a, b = _num(a), _num(b)
            return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
                    "ne": a != b}[fn]
        if fn in ("and", "or"):
            a, b = _boolish(a), _boolish(b)
            if _is_z3(a) or _is_z3(b):
                return z3.And(a, b) if fn == "and" else z3.Or(a, b)
            return (a and b) if fn == "and" else (a or b)
        if fn in ("floordiv", "mod") and op.lhs.id in self._pid_split and \
                isinstance(b, int) and not isinstance(b, bool) and b > 0:
            cid, r, c = self._pid_split[op.lhs.id]
            if c % b == 0:  # pid = c * cluster + rank, 0 <= rank < c: exact, and linear
                if fn == "mod":
                    return r if b == c else r % b
                return (c // b) * cid if b == c else (c // b) * cid + r / b
        a, b = _num(a), _num(b)
        if fn == "add":
            return a + b
        if fn == "sub":
            return a - b
        if fn == "mul":
            return a * b
        if fn in ("floordiv", "mod"):
            return self._c_divmod(fn, a, b)
        if fn == "min":
            return z3.If(a < b, a, b) if _is_z3(a) or _is_z3(b) else min(a, b)
        if fn == "max":
            return z3.If(a > b, a, b) if _is_z3(a) or _is_z3(b) else max(a, b)
        return None

    def _c_divmod(self, fn: str, a, b):
        """The generated code's `a / b` or `a % b` (codegen/cuda/scalar.py renders floordiv as
        C's `/`): truncating toward zero, the remainder with the dividend's sign, as the
        interpreter computes it (runtime/interp/scalar.py). z3's Int `/` and `%` are
        Euclidean (floor for a positive divisor), which is C only for a non-negative
        dividend: where the dividend's lower bound (`lower_bound`) is not >= 0, the term is
        c_div's (transfer/domain.py: the dividend moved toward zero by |b| - 1 when
        negative, one division), and a divisor that may be 0 (C's undefined behaviour) gives
        a fresh unknown there; a constant 0 gives no term (None: the caller's opaque
        integer)."""
        x, y = (t.as_long() if _is_z3(t) and z3.is_int_value(t) else t for t in (a, b))
        if isinstance(y, int) and y == 0:
            return None
        if isinstance(x, int) and isinstance(y, int):   # exact (no float division)
            q = c_int_div(x, y)
            return z3.IntVal(q if fn == "floordiv" else x - q * y)
        lo = self.lower_bound(a)
        if lo is not None and lo >= 0:
            # a non-negative dividend: z3's Euclidean `/` and `%` are C's truncation for any
            # nonzero divisor (a linear term for a numeral one); by 0, z3's are unspecified
            # values (SMT-LIB: an uninterpreted function of the dividend), as C's undefined
            # result is unknown
            return a / b if fn == "floordiv" else a % b
        got = c_div(a, b) if fn == "floordiv" else c_mod(a, b)
        if isinstance(b, int) or (self.lower_bound(b) or 0) >= 1 or \
                (self.upper_bound(b) is not None and self.upper_bound(b) <= -1):
            return got
        return z3.If(_num(b) == 0, fresh_int(f"{fn}_by_zero"), got)

    def lower_bound(self, t):
        """A lower bound of scalar term t read off its syntax (an int), or None: numerals;
        shape parameters >= 1; program ids, cluster digits, warpgroup and thread indices >= 0;
        a loop index >= its start's bound (the loop's scope has start <= i); sums, products of
        non-negative factors, min / max / if of bounded branches, z3's `/` by a positive
        numeral or of non-negative operands, z3's `%` (Euclidean: >= 0). Sound for the model's
        variables within their premises (a divisor of 0 is C's undefined behaviour: nothing is
        claimed there); used to keep z3's own division where it is C's, never as a
        premise."""
        return self._bound(t, True)

    def upper_bound(self, t):
        """An upper bound of t read off its syntax (numerals, negations of lower bounds,
        sums, products of non-negative factors, if), or None; see lower_bound."""
        return self._bound(t, False)

    def _bound(self, t, low: bool):
        if isinstance(t, bool):
            return int(t)
        if isinstance(t, int):
            return t
        if not _is_z3(t) or z3.is_bool(t):
            return None
        # keyed by the term's id, the term kept alive in the entry (a collected term's id
        # is reused by z3)
        memo = self.__dict__.setdefault("_bounds", {})
        key = (t.get_id(), low)
        if key in memo:
            return memo[key][1]
        memo[key] = (t, None)   # a cycle (never expected) reads as unbounded
        r = self._bound_of(t, low)
        memo[key] = (t, r)
        return r

    def _bound_of(self, t, low: bool):
        if z3.is_int_value(t):
            return t.as_long()
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            if not low:
                return None
            info = self.vars.get(t.decl().name())   # fresh unknowns have no VarInfo
            if info is None:
                return None
            if info.kind == "param":
                return 1
            if info.kind in ("pid", "cluster", "rank", "wg", "thread"):
                return 0
            if info.kind == "loop" and isinstance(info.op, O.For) and \
                    info.op.start.id in self.sym:
                return self._bound(self.sym[info.op.start.id], True)
            return None
        if not z3.is_app(t):
            return None
        k = t.decl().kind()
        ch = t.children()
        if k == z3.Z3_OP_UMINUS:
            b = self._bound(ch[0], not low)
            return None if b is None else -b
        if k == z3.Z3_OP_ADD:
            bs = [self._bound(c, low) for c in ch]
            return None if any(b is None for b in bs) else sum(bs)
        if k == z3.Z3_OP_SUB:
            first = self._bound(ch[0], low)
            rest = [self._bound(c, not low) for c in ch[1:]]
            return None if first is None or any(b is None for b in rest) else \
                first - sum(rest)
        if k == z3.Z3_OP_MUL:
            if any(z3.is_int_value(c) and c.as_long() == 0 for c in ch):
                return 0
            los = [self._bound(c, True) for c in ch]
            if any(b is None or b < 0 for b in los):
                return None   # non-negative factors only
            if low:
                return math.prod(los)
            his = [self._bound(c, False) for c in ch]
            return None if any(b is None for b in his) else math.prod(his)
        if k == z3.Z3_OP_ITE:
            bs = [self._bound(c, low) for c in ch[1:]]
            if low and _is_max(t) and any(b is not None for b in bs):
                # max(a, b) (_arith's If(a > b, a, b)) is at least either's bound
                return max(b for b in bs if b is not None)
            return None if any(b is None for b in bs) else (min(bs) if low else max(bs))
        if k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and low:
            if z3.is_int_value(ch[1]) and ch[1].as_long() > 0:
                if k == z3.Z3_OP_MOD:
                    return 0
                b = self._bound(ch[0], True)
                return None if b is None else b // ch[1].as_long()   # z3's `/` floors
            # by a runtime divisor: z3's `%` by a nonzero divisor is in [0, |b|) (Euclidean;
            # _c_divmod builds it only for a non-negative dividend, where it is C's), its `/`
            # of a non-negative dividend by a positive divisor >= 0; by 0 the program's
            # result is undefined (C), so nothing it reaches is claimed there
            if k == z3.Z3_OP_MOD:
                return 0
            a_lo, b_lo = self._bound(ch[0], True), self._bound(ch[1], True)
            if b_lo is not None and b_lo >= 0 and a_lo is not None and a_lo >= 0:
                return 0
        return None

    # -- clusters -------------------------------------------------------------------------
    def peer_pairs(self, q: int | None) -> list:
        """Substitution giving the terms of CTA rank q of this CTA's cluster (its cluster index
        is this one's; its rank digits are q's). [] for this CTA itself (q None)."""
        if q is None:
            return []
        return [(r, z3.IntVal((q // stride) % c)) for r, c, stride in self.rank_digits]

    def rank_vars(self) -> list[z3.ArithRef]:
        return [r for r, _, _ in self.rank_digits]

    # -- the walk --------------------------------------------------------------------------
    def _walk(self, region: Region, scopes: tuple, role, counters: dict) -> None:
        ops = region.ops
        for idx, op in enumerate(ops):
            try:
                self._op(op, scopes, role, counters, ops[idx + 1:])
            except _Unsupported as e:
                self.note_unsupported(op.loc, str(e))
            except exprs.ExprError as e:
                self.note_unsupported(op.loc, f"tag expression: {e}")

    def _op(self, op: Op, scopes, role, counters, following) -> None:
        """One op's transfer function, looked up by its class (argus/verify/transfer/)."""
        rule = RULES.get(type(op))
        if rule is None:
            self.note_unsupported(op.loc, f"no tag rule for {op.NAME}")
            return
        rule(self, op, scopes, role, counters, following)

    def _assigned_vars(self) -> set[int]:
        """Ids of the variables (`var`) that some `assign` updates."""
        if not hasattr(self, "_assigned_var_ids"):
            self._assigned_var_ids = {op.dst.id for op in self.kernel.walk()
                                      if isinstance(op, O.Assign)}
        return self._assigned_var_ids

    def value_defs(self) -> dict[int, Op]:
        """Value id -> the op defining it, for every value of the kernel: one walk a model,
        shared by every check that traces a value back to its definition (wgmma operand
        chains, value facts, reduce sites, sums, means). Read only."""
        if not hasattr(self, "_value_def_ops"):
            self._value_def_ops = {r.id: op for op in self.kernel.walk() for r in op.results()}
        return self._value_def_ops

    def assigned_sources(self) -> dict[int, list]:
        """Variable id -> the values `assign`s give it, in kernel order: how a walk back
        through a `var` reaches every value it holds (with its initial value). Read only."""
        if not hasattr(self, "_assigned_source_values"):
            got: dict[int, list] = {}
            for op in self.kernel.walk():
                if isinstance(op, O.Assign):
                    got.setdefault(op.dst.id, []).append(op.src)
            self._assigned_source_values = got
        return self._assigned_source_values

    def pointwise_defs(self) -> dict[int, Op]:
        """Result id -> the pointwise op or conversion that defines it (reads each operand at
        the same element, broadcasting): how a reduction's source is traced back to the tiles
        it is computed from (transfer/tiles.py, ReduceSite.operands)."""
        if not hasattr(self, "_pointwise_def_ops"):
            self._pointwise_def_ops = {
                op.result.id: op for op in self.kernel.walk()
                if isinstance(op, (O.Elementwise, O.Convert, O.ConvertLayout))}
        return self._pointwise_def_ops

    def walk_defs(self, value: Value, follow):
        """(value, the op defining it, None for one no op defines: a parameter, a loop
        index) for `value` and every value reached from it through `follow(value, op)`, the
        values to continue through ([] to stop there), each once: the one walk back through
        definitions that the checks share (check_tiles, check_reduce, check_softmax,
        accumulate), each saying only what it follows and what it takes.

        Depth first off a stack, the last value `follow` names walked first, a value marked
        when taken off it (so one pushed twice is yielded once): the order the checks' own
        walks had, which their first-found answers (the masking where, a load's first
        zero read) depend on. `follow` is asked of a value only once the consumer resumes
        after it, so a consumer that stops at what it looked for walks nothing past it.
        `follow` gets the value as well as its op because an `assign` may target a value no
        `var` defines (a wgmma's accumulator: `sources`)."""
        defs = self.value_defs()
        todo, seen = [value], set()
        while todo:
            x = todo.pop()
            if x.id in seen:
                continue
            seen.add(x.id)
            op = defs.get(x.id)
            yield x, op
            todo += follow(x, op)

    def sources(self, value: Value, op: Op | None) -> list:
        """A `walk_defs` follow through everything: the values `assign`s give `value` (kernel
        order), then its defining op's operands."""
        out = list(self.assigned_sources().get(value.id, []))
        if op is not None:
            out += [o for o in op.operands() if hasattr(o, "id")]
        return out

    def loads_into(self, value: Value) -> list:
        """The loads and gathers whose data `value` is computed from (its definitions walked
        back through everything, variables through their initial values and assignments),
        each once, in walk order. Remembered per value (check_tiles asks it of every
        elementwise operand; check_reduce of every reduced tile)."""
        memo = self.__dict__.setdefault("_loads_into", {})
        if value.id not in memo:
            loads = (O.Load, O.Gather)
            out: list = []
            for _, op in self.walk_defs(value, lambda x, op: [] if isinstance(op, loads)
                                        else self.sources(x, op)):
                if isinstance(op, loads) and not any(op is o for o in out):
                    out.append(op)
            memo[value.id] = out
        return memo[value.id]

    def _prime_scalars(self, region: Region) -> None:
        """Evaluate the scalars of a region (constants, arithmetic, loop indices) without
        recording anything, so counts over it can be formed before it is walked."""
        for op in region.walk():
            if isinstance(op, O.Const):
                self.sym[op.result.id] = op.value
            elif isinstance(op, O.ClusterRank) and self.grid is not None:
                self.sym[op.result.id] = self.rank_term
            elif isinstance(op, O.Arith):
                r = self._arith(op)
                self.sym[op.result.id] = r if r is not None else fresh_int(f"opaque{op.result.id}")
            elif isinstance(op, O.For):
                self.sym[op.var.id] = self._var(f"i{op.var.id}", VarInfo(
                    "loop", f"loop index at {op.loc}", op.var, op))
            elif isinstance(op, O.Var) and isinstance(op.result.type, ScalarType) and \
                    op.result.id not in self.sym:
                self.sym[op.result.id] = (fresh_int(f"var{op.result.id}") if op.result.id in
                                          self._assigned_vars() else
                                          self.sym.get(op.init.id,
                                                       fresh_int(f"var{op.result.id}")))
            elif isinstance(op, (O.Produce, O.Consume)) and op.stage.id not in self.sym:
                self.sym[op.stage.id] = fresh_int(f"stage{op.stage.id}")

    def _carried_tiles(self, region: Region) -> list[int]:
        out = []
        for inner in region.walk():
            if isinstance(inner, O.Wgmma):
                out.append(inner.acc.id)
            elif isinstance(inner, O.Assign):
                out.append(inner.dst.id)
        return [v for v in dict.fromkeys(out) if v in self.tiles]

    # -- tiles -----------------------------------------------------------------------------
    def tile(self, v: Value) -> TileState:
        if v.id not in self.tiles:
            raise _Unsupported(f"tile {v} has no tags (defined by an unsupported op)")
        return self.tiles[v.id]

    def _set_tile(self, v: Value, fn, op: Op, what: str) -> None:
        t: TileType = v.type
        self.tiles[v.id] = TileState(t.shape, t.layout, fn, op.loc, what)
        self._def_seq[v.id] = next(self._seq)
        self.def_ops[v.id] = op

    def element_record(self, info: TensorInfo, coords, it=None, step=None, stage=None,
                       source: str = "") -> Record:
        fields = {}
        inb = []
        for d, (name, c) in enumerate(zip(info.field_names, coords)):
            fields[name] = TagVal(_num(c))
            inb += [_num(c) >= 0, _num(c) < _num(info.extent(self, d))]
        for name, (text, args) in info.user_fields.items():
            fields[name] = TagVal(self.eval_tag_expr(text, args, coords=coords))
        fields["tensor"] = TagVal(z3.IntVal(list(self.tensors).index(info.value.id)))
        if it is not None:
            fields["iter"] = TagVal(it)
        if step is not None:
            fields["step"] = TagVal(step)
        if stage is not None:
            fields["stage"] = TagVal(_num(stage))
        return Record(fields, conj(*inb) if inb else z3.BoolVal(True), (), source)

    # -- shared memory ---------------------------------------------------------------------
    def wgmma_a(self, wsite: WgmmaSite, m, kk) -> Record:
        """The tags of A element (m, kk) of a wgmma: from its shared-memory view, or from the
        register tile that is its A operand. An 8-bit register A read in the accumulator's
        order (O.Wgmma.a_acc_order) gives k-position kk the tile's column acc_order_col(kk):
        the same map the interpreter and the hardware apply, so B's row kk is compared with
        the element the instruction really multiplies it by."""
        if wsite.a_tile is not None:
            col = acc_order_for(wsite.op.a.type.dtype.bits)(kk) if wsite.op.a_acc_order else kk
            # registers always hold a value (a masked load reads its fill value): defined
            return dataclasses.replace(wsite.a_tile.fn((m, col)), defined=z3.BoolVal(True))
        op = wsite.op
        return self.read_smem(wsite.a, b_index(wsite.a, m, kk, op.k_extent, op.trans_a),
                              wsite.site)

    def read_smem(self, view: ViewInfo, idx, reader: Site) -> Record:
        """The tags of view element idx = (row, col) as `reader` sees it: resolved against the
        writes into the buffer (TMA through the pipeline, or earlier generic writes)."""
        i, j = idx
        R = _num(view.row0) + i
        writes = self.writes.get(view.buffer.id, [])
        tma = [w for w in writes if w.kind == "tma"]
        generic = [w for w in writes if w.kind == "generic" and w.site.seq < reader.seq]
        if tma:
            if Memo.building:
                return self._read_tma(view, R, j, reader, tma)
            return self._read_tma_at(view, R, j, reader, tma)
        if generic:
            return self._read_generic(view, R, j, generic)
        return Record({}, z3.BoolVal(False), (), f"nothing was written to {view.buffer}")

    def _read_tma_at(self, view, R, j, reader: Site, writes) -> Record:
        """`_read_tma` at row R, column j, from one record per (view, reader) built at a
        symbolic row and column: that record with R and j substituted and its own fresh
        variables (the writers' loop indices seen from the reader) renamed apart, which is
        the record a computation at (R, j) builds (it reads R and j only as terms). The
        operands of one wgmma are read at many indices (359 reads in a d 256 attention
        kernel), and each computation walks every producer step and TMA copy again.

        Keyed by what `_read_tma` reads of its arguments: the view's buffer and stage term
        and the reader's scopes (its consume step, loops and their constraints; the reader's
        op and seq only key memos there). The k-slices of one wgmma, each a site of its own
        over its own view of the same buffer and stage (row0 differs, which R carries), share
        one computation: 35 computations -> 11 in the FA3 d 256 causal kernel. The scopes
        by their seqs (Scope.seq: one per scope the walk made, so a loop's dry pass and its
        recorded pass stay apart, as the scope objects did), the stage term by its z3 id (kept
        alive with the entry: the view holds it)."""
        memo = self.__dict__.setdefault("_tma_reads", {})
        key = tma_read_key(view, reader)
        hit = memo.get(key)
        if hit is None:
            row, col = z3.Int("argus.verify.model!row"), z3.Int("argus.verify.model!col")
            rec, own = with_fresh(lambda: self._read_tma(view, row, col, reader, writes))
            own = occurring(rec, own)   # renamed per read: only the variables rec holds
            hit = memo[key] = (view, reader, row, col, rec, own)   # keeps the stage term
        _, _, row, col, rec, own = hit
        return instantiate(rec, own, [(row, _num(R)), (col, _num(j))])

    def _read_generic(self, view, R, j, writes) -> Record:
        rec_fields: dict = {}
        defined = z3.BoolVal(False)
        cond: tuple = ()
        prov: list = []
        for w in writes:  # program order: the last covering write wins
            W = w.view
            stage = _stage_eq(W.stage, view.stage)
            if z3.is_false(stage):
                # another stage of the buffer (a staging buffer's other column blocks): it
                # never covers this element, so its record is not built (nor its conditions)
                continue
            covers = conj(stage, R >= _num(W.row0), R < _num(W.row0) + W.rows, j >= 0,
                          j < W.cols)
            rec = w.tile.fn((R - _num(W.row0), j))
            cond += rec.cond
            for name, val in rec.fields.items():
                if name in FACTS:
                    continue   # (value facts are of register tiles: transfer/values.py)
                rec_fields[name] = _select(covers, val, rec_fields.get(name))
            defined = z3.Or(covers, defined)
            prov.append((covers, f"stmatrix at {w.op.loc}"))
        return Record(rec_fields, defined, cond, f"{view.buffer} (stmatrix)",
                      tuple(reversed(prov)))

    def _read_tma(self, view, R, j, reader: Site, writes) -> Record:
        pipe_ids = {w.step.pipe.id for w in writes if w.step is not None}
        consume = None
        for s in reversed(reader.scopes):  # the innermost consume step of the writers' pipe
            if s.kind == "consume" and s.op.pipe.id in pipe_ids:
                consume = s
                break
        if consume is None:
            # no pipeline ownership: the read may see any fill; the race module reports it
            return Record({}, z3.BoolVal(False), (), "a pipelined buffer read outside its "
                                                     "consume step")
        n_r = self.steps_by_stage[consume.op.stage.id].counter
        # the produce steps by their program points (Site.seq): the pipe lists each produce
        # op once (only the recorded pass of a loop lists its steps, and a well-formed kernel
        # places an op once: its stage value is defined once), and a TMA write's step is the
        # listed step of the produce op around it
        by_site: dict[int, StepInfo] = {}
        for st in self.pipes[consume.op.pipe.id].steps:
            if st.kind == "produce":
                by_site.setdefault(st.site.seq, st)
        mine = {key: [w for w in writes if w.step is not None and w.step.site.seq == key]
                for key in by_site}
        fields: dict = {}
        defined = z3.BoolVal(False)
        cond: list = []
        prov: list = []
        # the slot of step n holds what this CTA's producer copied at its step n, plus, in a
        # cluster, the multicast copies of every CTA's producer (this one's included) at its
        # step n: all CTAs run the same code, so CTA rank q's copies are this CTA's copies with
        # the rank digits set to q (a multicast box lands at the same offset in every CTA)
        peers = [None] + (list(range(self.cluster_size)) if any(
            w.op.multicast for ws in mine.values() for w in ws) else [])
        for q in peers:
            pre = self.peer_pairs(q)
            actives = []
            for key, step in by_site.items():
                sub = self.writer_substitution(step, reader, n_r, pre)
                w_side, r_side = self.counter_equation(step, reader, n_r, pre)

                def inst(t, pre=pre, sub=sub):
                    return _subst(_subst(t, pre), sub)
                ranges = [inst(c) for c in step.site.constraints()]
                active = conj(*ranges, inst(w_side) == r_side)
                lemmas = [inst(c) for sc in step.site.scopes for c in sc.counter_lemmas]
                if len(by_site) > 1 and self._never_active(key, reader, q, active, lemmas):
                    continue  # another loop's produce step (its fields are not this slot's)
                actives.append(active)
                # the writer's copies range over their loops/warpgroups whether or not this
                # site is the active one: stating it outside the disjunction bounds every
                # variable
                cond.extend(ranges)
                outer_scopes = {id(sc) for sc in step.site.scopes}
                for w in mine[key]:
                    if w.op.multicast != (q is not None):
                        continue  # own copies once; multicast copies once per CTA of the cluster
                    # the path condition of a copy under a guard inside the step (one of two
                    # complementary guards: argus/ir/guarded_tma.py), in the writer's terms
                    # (CTA rank q's, its loop indices): the copy covers the slot only where
                    # its guard held
                    guards = [inst(c) for sc in w.site.scopes if sc.kind == "if"
                              and id(sc) not in outer_scopes for c in sc.constraints]
                    W = w.view
                    w_row0 = inst(_num(W.row0))
                    # both views at their own step's slot (n % S): equal under `active`
                    # (equal counters), which the solver would otherwise have to see through
                    # n % S of two counters with products in them
                    same_slot = W.stage is not None and view.stage is not None and \
                        _is_z3(W.stage) and _is_z3(view.stage) and \
                        z3.eq(W.stage, step.stage_term) and \
                        z3.eq(view.stage, self.steps_by_stage[consume.op.stage.id].stage_term)
                    covers = conj(active, z3.BoolVal(True) if same_slot else
                                  _stage_eq(inst(W.stage), view.stage),
                                  R >= w_row0, R < w_row0 + W.rows, j >= 0, j < W.cols,
                                  *guards)
                    r, c = R - w_row0, j
                    coords = [inst(_num(x)) for x in w.coords]
                    coords[-1] = coords[-1] + c
                    outer = list(tuple(w.op.box)[:-1]) or [1] * (len(coords) - 1)
                    # elementStrides (TmaLoad.elem_strides): the box's i-th element along
                    # dim d is coords[d] + i * stride (an int: the terms stay linear)
                    estride = list(w.op.elem_strides) or [1] * len(coords)

                    def strided(i, d, estride=estride):
                        # (stride 1: the index itself, the terms unstrided copies always had)
                        return i if estride[d] == 1 else i * estride[d]
                    if sum(e > 1 for e in outer) <= 1:
                        # at most one non-unit outer extent: it is the view's rows
                        d = next((i for i, e in enumerate(outer) if e > 1), len(outer) - 1)
                        coords[d] = coords[d] + strided(r, d)
                    else:
                        # a box with several non-unit outer dims lands row-major: view row r
                        # is the box's outer index r unravelled (innermost outer dim fastest).
                        # Only 0 <= r < the box's rows matters (`covers`), where r // e is
                        # the count of multiples of e in (0, r]: a sum of linear Ifs (kept
                        # in linear arithmetic: no integer div / mod terms in the queries)
                        # (`rest`, not `q`: q is the peer rank of the enclosing loop,
                        # which the writers after this one are filtered by)
                        rest, left = r, math.prod(outer)
                        for d in range(len(outer) - 1, -1, -1):
                            e = outer[d]
                            if e == 1:
                                continue
                            left //= e
                            if left == 1:
                                coords[d] = coords[d] + strided(rest, d)
                                break
                            quot = z3.Sum([z3.If(rest >= i * e, 1, 0) for i in range(1, left)])
                            coords[d] = coords[d] + strided(rest - quot * e, d)
                            rest = quot
                    loops = w.site.loops()
                    it = inst(loops[-1].var) if loops else None
                    who = f"TMA copy of {w.tensor.name} at {w.op.loc}" + (
                        f" (multicast by cluster rank {q})" if q is not None else "")
                    rec = self.element_record(w.tensor, coords, it=it, step=inst(step.counter),
                                              stage=inst(W.stage) if W.stage is not None
                                              else None, source=f"{w.tensor.name} via {who}")
                    for name, text, refs in w.tags:   # tag.copy: the copy's own fields
                        rec.fields[name] = TagVal(_num(self.eval_tag_expr(
                            text, (), coords=coords, ref_values=tuple(inst(_num(r))
                                                                      for r in refs))))
                    for name, val in rec.fields.items():
                        fields[name] = _select(covers, val, fields.get(name))
                    defined = z3.Or(covers, defined)
                    prov.append((covers, who))
            # exactly one produce step of each CTA has the consumer's counter value (the
            # pipeline module proves the totals agree), so one site is active: assume it,
            # with fresh writer variables
            cond.append(z3.Or(actives) if actives else z3.BoolVal(False))
        return Record(fields, defined, tuple(cond), f"{view.buffer} (TMA)",
                      tuple(reversed(prov)))

    def _never_active(self, key, reader: Site, peer, active, lemmas=()) -> bool:
        """Whether a produce site provably never fills the slot `reader` consumes: its counter
        never equals the reader's (the producer walks the main units and then a tail of K
        slices from other tensors into one ring: a consume step of the main loop reads only
        the main loop's copies). Without this, a field that only the other site's tensor has
        (the slice index of a K-slice view) would be read as this slot's, unconstrained. An
        unknown answer keeps the site (sound: it only adds candidates); decided once per
        (site, reader, peer), not during the walk (loop bounds may not be known yet)."""
        if Memo.building:
            return False
        memo = self.__dict__.setdefault("_inactive_memo", {})
        k = (key, reader.seq, peer)
        if k not in memo:
            # readers of one ring ask alpha-equivalent questions (fresh writer variables per
            # reader: 80 asked, 4 distinct in a tail-split GEMM): a definite answer (sat or
            # unsat) is remembered per distinct question, keyed by its canonical term (kept
            # alive with the answer). z3 may answer unknown for one naming of a question and
            # unsat for another, so an unknown is not remembered for the other readers (only
            # for this one, in `memo`), and the canonical naming is asked as a second opinion.
            # A resource budget, not wall time: the answer must not depend on the machine's
            # load (a 2 s timeout kept the K-slice site of a tail-split GEMM under load, and
            # its fields made wgmma.agree a false alarm); with the counter lemmas the unsat
            # answers take about 0.2M units, the rlimit is 25x that (no wall-clock backstop:
            # solver.py's budget rule)
            # the counter lemmas of both sites' loops (transfer/control.py) state what the
            # usual answer rests on (a main-walk step against a tail-walk step: their counters
            # lie in disjoint ranges) over the same product terms the counters use; without
            # them z3's non-linear search took 0.2M-3.3M units depending on its random seed
            # and once ran out in CI, with them 0.2M typically, 1.5M at worst in 800 runs
            query = [*self.premises, *reader.constraints(), *lemmas,
                     *(c for sc in reader.scopes for c in sc.counter_lemmas), active]
            # premises ∧ ¬¬active: the query itself, renamed (a term to solve, not only a key)
            term = solver.canonical(query[:-1], [("never active", z3.Not(active))])
            by_term = self.__dict__.setdefault("_inactive_by_term", {})
            if term.get_id() not in by_term:
                res = z3.unknown
                # z3's effort on one question varies with its random seed (heavy-tailed:
                # 0.2M units typically, 1.5M in 2 of 800 seeded runs): an unknown is asked
                # again with other seeds before the site is kept. The plain core with the
                # non-linear settings of solver.prove's step 3 goes first: 2-35 ms per question
                # where the default solver's preprocessing took 20-120 ms (tail-split GEMMs:
                # 0.3 s -> 0.05 s of their verification; no unknown in 30 seeds of both
                # namings); either answer is definite, so which solver gives it is immaterial
                for form, seed, plain in ((query, 0, True), (query, 0, False), ([term], 0, False),
                                          (query, 1, False), ([term], 2, False)):
                    s = z3.SimpleSolver() if plain else z3.Solver()
                    for name, v in (solver.NIA_PARAMS.items() if plain else ()):
                        s.set(name, v)
                    s.set("random_seed", seed)
                    s.set("rlimit", 5_000_000)
                    s.set("timeout", solver.backstop_ms(5_000_000))
                    s.add(*form)
                    res = s.check()
                    if res != z3.unknown:
                        break
                if res == z3.unknown:
                    memo[k] = False   # keep the site (sound); another naming may decide it
                    return False
                by_term[term.get_id()] = (term, res == z3.unsat)
            memo[k] = by_term[term.get_id()][1]
        return memo[k]

    def writer_substitution(self, step: StepInfo, reader: Site, n_r, pre=()) -> list:
        """Variables of the producer's step site, as seen from a consumer at counter n_r
        (`pre`: the peer substitution first applied to the producer's terms, in a cluster).

        When both roles walk the same loop nest (equal bounds, and the producer's counter term
        becomes the consumer's once loop indices are identified), equal counters mean equal
        loop indices, because a role's counter grows by one per step: the producer's indices
        are then the consumer's, which keeps queries linear where `tile * k_tiles` would not
        be. Other variables (warpgroup indices, unmatched loops) get fresh copies, tied to the
        consumer by the counter equation alone."""
        pairs = list(self._same_loop_nest(step, reader, n_r, pre)[0])
        for v in step.site.scope_vars():
            if not any(v.eq(a) for a, _ in pairs):
                pairs.append((v, fresh_int(f"{v}@w")))
        return pairs

    def counter_equation(self, step: StepInfo, reader: Site, n_r, pre=()) -> tuple:
        """(writer's side, reader's side) of the equation "the producer step's counter is the
        reader's n_r", the writer's side in the producer's own variables (to be taken through
        `pre` and writer_substitution). Both counters themselves, unless the two roles share
        outer loops but not the whole nest (`_same_loop_nest`): then each counter's offset in
        the iteration of the innermost shared loop."""
        _, w_side, r_side = self._same_loop_nest(step, reader, n_r, pre)
        return w_side, r_side

    def _same_loop_nest(self, step: StepInfo, reader: Site, n_r, pre) -> tuple:
        """(the (producer loop index, consumer loop index) pairs writer_substitution
        identifies, or []; the writer's and the reader's side of the counter equation): a
        structural decision on model terms only (no fresh variables), so it is made once per
        producer step, reader, counter and peer substitution.

        The whole nest when both walk the same loops and the counters become one term. Else
        the longest prefix of outer loops with equal bounds whose steps per iteration and
        counters before the loop are equal for both roles (a persistent kernel's unit loop
        around a producer's K loop and a consumer's K loop unrolled by two with a prologue
        and a tail): a step in iteration t of such a loop has counter before + t * per + off
        with 0 <= off < per (the steps of one iteration: the scope's counter lemmas), so two
        counters are equal exactly when the iterations are and the offsets are. The offsets
        compared then are linear where before + t * per (t times a per that depends on K)
        was not: equal counters made z3 prove the unit indices equal through the product."""
        # the step by its program point (a listed produce step: one per seq), the terms by
        # their z3 ids (kept alive with the decision)
        key = (step.site.seq, reader.seq, _term_key(n_r),
               tuple(_term_key(a) + _term_key(b) for a, b in pre))
        hit = self._nest_decisions.get(key)
        if hit is not None:
            return hit[0], hit[4], hit[5]
        wl, rl = step.site.loops(), reader.loops()
        pairs: list = []
        w_side, r_side = step.counter, n_r

        def same_bounds(a, b, cand) -> bool:
            for f in ("start", "stop", "step"):
                ta = _subst(_subst(_num(self.scalar(getattr(a.op, f))), list(pre)), cand)
                tb = _num(self.scalar(getattr(b.op, f)))
                if not z3.eq(z3.simplify(ta), z3.simplify(tb)):
                    return False
            return True
        if len(wl) == len(rl) and wl:
            cand = [(a.var, b.var) for a, b in zip(wl, rl)]
            ok = all(same_bounds(a, b, cand) for a, b in zip(wl, rl))
            if ok and z3.eq(z3.simplify(_subst(_subst(step.counter, list(pre)), cand)),
                            z3.simplify(n_r)):
                pairs = cand
        if not pairs and not Memo.building:
            pid = step.pipe.id
            cand = []
            for a, b in zip(wl, rl):
                trial = cand + [(a.var, b.var)]
                if not same_bounds(a, b, trial):
                    break
                sa = next((x for x in a.steps if x[0] == pid), None)
                sb = next((x for x in b.steps if x[0] == pid), None)
                if sa is None or sb is None:
                    break

                def w(t, trial=trial):
                    return _subst(_subst(t, list(pre)), trial)
                if not (self.provably_equal(w(sa[1]), sb[1]) and
                        self.provably_equal(w(sa[3]), sb[3])):
                    break
                cand = trial
                pairs = list(cand)
                w_side = z3.simplify(step.counter - sa[2], som=True)
                r_side = z3.simplify(n_r - sb[2], som=True)
        if not Memo.building:   # mid-walk, a loop bound may not be known yet
            # the terms are kept with the decision: their ids stay theirs
            self._nest_decisions[key] = (pairs, n_r, tuple(pre), step, w_side, r_side)
        return pairs, w_side, r_side

    def provably_equal(self, a, b) -> bool:
        """Whether a == b for every launch the premises allow: the same term, or an unsat
        a != b under the premises (a resource budget, not wall time: the answer must not
        depend on the machine's load; an unknown is "not equal", which only keeps queries as
        they were). Remembered per pair of terms."""
        a, b = z3.simplify(_num(a)), z3.simplify(_num(b))
        if z3.eq(a, b):
            return True
        memo = self.__dict__.setdefault("_equal_memo", {})
        k = (a.get_id(), b.get_id())
        if k not in memo:
            s = z3.Solver()
            s.set("rlimit", 2_000_000)
            s.set("timeout", solver.backstop_ms(2_000_000))
            s.add(*self.premises, a != b)
            memo[k] = (a, b, s.check() == z3.unsat)   # the terms keep their ids alive
        return memo[k][2]

    # -- tag expressions -------------------------------------------------------------------
    def eval_tag_expr(self, text: str, args: tuple, coords=(), xs=(), ref_values=None,
                      field_fn=None, call_view=None, division: str | None = None):
        """The tag expression `text` as a z3 term (or a Python value). `division` says what
        its `/` and `%` (and those of the tag functions it calls) mean:
          * "c" (a tag assertion's claim, check_asserts): C's, as the DSL's `//` and `%` on a
            TagExpr read and as exprs computes them on Python ints: z3's own term where
            `lower_bound` shows the dividend >= 0, else c_div's (`_c_divmod`); a runtime
            divisor too;
          * "floor" (an `ag.require`): z3's floor, by a runtime divisor too, as the host's
            launch check reads the precondition (runtime/preconditions.py `_holds`);
          * None: z3's floor by a numeral only (tag assumptions, tensor tags: their terms are
            the coordinates and counters the language's invariant keeps >= 0)."""
        names = {f"c{d}": _num(c) for d, c in enumerate(coords)}
        names["none"] = None
        names.update({f"x{d}": x for d, x in enumerate(xs)})
        refs = ref_values if ref_values is not None else tuple(self.scalar(a) for a in args)

        def call(name, vals):
            if name == "view":
                if call_view is None:
                    raise exprs.ExprError("view(...) is only allowed in tag assertions")
                return call_view(vals)
            if name not in self.tag_fns:
                raise exprs.ExprError(f"unknown tag function {name}()")
            kind, arity, body = self.tag_fns[name]
            if len(vals) != arity:
                raise exprs.ExprError(f"{name}() takes {arity} arguments, got {len(vals)}")
            if kind == "opaque":
                return body(*[_num(v) for v in vals])
            return exprs.evaluate(body, exprs.Env({f"a{d}": v for d, v in enumerate(vals)},
                                                  call=call, divmod=c_ops))

        def c_divmod(fn, a, b):
            got = self._c_divmod(fn, a, b)
            if got is None:
                raise exprs.ExprError("division by zero")
            return got

        def floor_divmod(fn, a, b):
            a, b = _num(a), _num(b)
            return a / b if fn == "floordiv" else a % b
        c_ops = {"c": c_divmod, "floor": floor_divmod, None: None}[division]
        return exprs.evaluate(text, exprs.Env(names, refs, call=call, field=field_fn,
                                              divmod=c_ops))

    def axiom_instances(self, terms) -> list[z3.BoolRef]:
        """Instantiate every `tag.assume` on the ground arguments of the opaque tag functions
        applied in `terms` (so the query stays quantifier-free).

        The grounds are found by a walk of the C API (`_opaque_grounds`), in the order the
        walk of Python wrappers found them before (the instances, and so the query, are the
        same), and each instance is built once per model (`_axiom_memo`, by the axiom and its
        grounds): every obligation asks for the instances of its query, store.coords asks
        first, and the queries of a kernel share their model's premises (the halo TMA conv:
        39 calls, 0.22 s at load ~9 -> 0.003 s, none of them returning an instance: the
        cost was the wrappers' children())."""
        if not self.axioms or all(op.nvars == 0 for op, _ in self.axioms):
            return []
        grounds = _opaque_grounds(terms, {n for n, v in self.tag_fns.items() if v[0] == "opaque"})
        memo = self.__dict__.setdefault("_axiom_memo", {})
        out = []
        for k, (op, _site) in enumerate(self.axioms):
            if op.nvars == 0:
                continue  # already a premise of every query
            for combo in itertools.product(grounds, repeat=op.nvars):
                key = (k,) + tuple(g.get_id() for g in combo)
                hit = memo.get(key)
                if hit is None:
                    # the grounds are kept with the instance, so their ids are not reused
                    hit = memo[key] = (combo, _as_bool(self.eval_tag_expr(op.expr, op.args,
                                                                          xs=combo)))
                out.append(hit[1])
        return out


def through(kinds, shape=None):
    """A `Model.walk_defs` follow: the tile operands of an op of one of the classes `kinds`
    (of `shape` alone, when given: a per-row operand broadcast along an axis is another
    value), nothing past any other op."""
    def follow(_value, op) -> list:
        if not isinstance(op, kinds):
            return []
        return [a for a in op.operands() if isinstance(getattr(a, "type", None), TileType)
                and (shape is None or tuple(a.type.shape) == tuple(shape))]
    return follow


def _opaque_grounds(terms, opaque: set[str]) -> list:
    """The distinct arguments of the applications of the functions named in `opaque` in
    `terms`, in the order of a depth-first walk that takes the terms and the arguments of
    each node from the last (a stack), each node once (raw C API: no wrapper per node)."""
    terms = [t for t in terms if isinstance(t, z3.ExprRef)]
    if not terms or not opaque:
        return []
    ctx = terms[0].ctx
    ref = ctx.ref()
    L = solver._L
    get_id, kind_of = L.Z3_get_ast_id, L.Z3_get_ast_kind
    nargs, arg, decl_of = L.Z3_get_app_num_args, L.Z3_get_app_arg, L.Z3_get_app_decl
    is_opaque: dict[int, bool] = {}
    seen: set[int] = set()
    found: dict[int, Any] = {}
    todo = [t.as_ast() for t in terms]
    while todo:
        a = todo.pop()
        i = get_id(ref, a)
        if i in seen:
            continue
        seen.add(i)
        kind = kind_of(ref, a)
        if kind == z3.Z3_QUANTIFIER_AST:
            todo.append(L.Z3_get_quantifier_body(ref, a))
            continue
        if kind != z3.Z3_APP_AST:
            continue
        n = nargs(ref, a)
        if not n:
            continue
        kids = [arg(ref, a, j) for j in range(n)]
        d = decl_of(ref, a)
        di = get_id(ref, z3.Z3_func_decl_to_ast(ref, d))
        hit = is_opaque.get(di)
        if hit is None:
            hit = is_opaque[di] = z3.FuncDeclRef(d, ctx).name() in opaque
        if hit:
            for b in kids:
                found.setdefault(get_id(ref, b), b)
        todo.extend(kids)
    return [z3.z3._to_expr_ref(b, ctx) for b in found.values()]


# ----------------------------------------------------------------------------- helpers


def _boolish(x):
    if _is_z3(x):
        return x if z3.is_bool(x) else x != 0
    return bool(x)


def _as_bool(x):
    if _is_z3(x):
        return x if z3.is_bool(x) else x != 0
    return z3.BoolVal(bool(x))


def _fold_branches(branches: list):
    """Steps of sibling ifs: `if c: n steps` and `if not c: n steps` (a ping-pong consumer's
    turn and its skip) are n steps either way, which keeps the count the producer's term."""
    total: Any = 0
    rest = list(branches)
    while rest:
        cond, steps = rest.pop(0)
        twin = next((j for j, (c, n) in enumerate(rest)
                     if (_complements(c, cond) or z3.is_true(z3.simplify(c == z3.Not(cond))))
                     and z3.eq(z3.simplify(_num(n)), z3.simplify(_num(steps)))), None)
        if twin is not None:
            rest.pop(twin)
            total = total + steps
        else:
            total = total + z3.If(cond, steps, 0)
    return total


_COMPLEMENT_KINDS = {z3.Z3_OP_LE: z3.Z3_OP_GT, z3.Z3_OP_GT: z3.Z3_OP_LE,
                     z3.Z3_OP_LT: z3.Z3_OP_GE, z3.Z3_OP_GE: z3.Z3_OP_LT}


def _complements(a, b) -> bool:
    """Whether a and b are, as written, one comparison and its negation (x > y and x <= y,
    or c and Not(c)): what `_fold_branches` folds before asking simplify, whose normal forms
    of a long term and of its negation need not line up (a pair of m-tiles' missing second:
    MoeFp8Schedule.pair_multicast). Syntactic, so never wrong."""
    if (z3.is_not(a) and z3.eq(a.arg(0), b)) or (z3.is_not(b) and z3.eq(b.arg(0), a)):
        return True
    if not (z3.is_app(a) and z3.is_app(b) and a.num_args() == 2 == b.num_args()):
        return False
    return _COMPLEMENT_KINDS.get(a.decl().kind()) == b.decl().kind() and \
        z3.eq(a.arg(0), b.arg(0)) and z3.eq(a.arg(1), b.arg(1))


def _is_max(t) -> bool:
    """Whether If(c, a, b) is max(a, b): c is a > b or a >= b (or b < a, b <= a)."""
    c, a, b = t.children()
    if not z3.is_app(c) or c.num_args() != 2:
        return False
    k, (x, y) = c.decl().kind(), c.children()
    if k in (z3.Z3_OP_GT, z3.Z3_OP_GE):
        return z3.eq(x, a) and z3.eq(y, b)
    if k in (z3.Z3_OP_LT, z3.Z3_OP_LE):
        return z3.eq(x, b) and z3.eq(y, a)
    return False


def _max0(x):
    if _is_z3(x):
        return z3.If(x > 0, x, 0)
    return max(0, x)


def _consts(term, exclude=None) -> list:
    """The uninterpreted constants of a term (but `exclude`), each once."""
    return [t for t in subterms(term)
            if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED
            and (exclude is None or not t.eq(exclude))]


def _mentions_any(term, vars_) -> bool:
    return any(mentions(term, v) for v in vars_)


def tma_read_key(view: ViewInfo, reader: Site) -> tuple:
    """What `Model._read_tma` reads of a view and a reader, as a memo key of stable values:
    the buffer's IR name, the stage term (a z3 id) and the seqs of the reader's scopes."""
    return (view.buffer.id, None if view.stage is None else _term_key(view.stage),
            tuple(s.seq for s in reader.scopes))


def _term_key(t) -> tuple:
    return ("z3", t.get_id()) if _is_z3(t) else ("py", t)


def _subst(term, pairs):
    if term is None or not pairs or not _is_z3(term):
        return term
    return substitute(term, *pairs)  # z3.substitute minus the Python wrapper's checks


def _select(covers, val: TagVal, old: TagVal | None) -> TagVal:
    """The field of an element several writes may cover: `val` where `covers`, else `old`.
    Equal point terms fold: a tag every candidate write gives the same value (the batch index
    of the column boxes of an MN-major B) must not look like it depends on the element's
    position, which the structural test of "varies with k" would read it as."""
    if old is None:
        return val
    if val.is_point and old.is_point and z3.eq(val.term, old.term):
        return TagVal(val.term, (), val.cond + old.cond, val.mixed + old.mixed)
    return TagVal(z3.If(covers, val.term, old.term), val.bound + old.bound,
                  val.cond + old.cond, val.mixed + old.mixed)


def _stage_eq(a, b) -> z3.BoolRef:
    if a is None and b is None:
        return z3.BoolVal(True)
    if a is None or b is None:
        return z3.BoolVal(False)
    # simplified: the same step's stage on both sides folds to True, which keeps `n % 3` out
    # of the query (and the query in the bit-vector tier)
    eq = z3.simplify(_num(a) == _num(b))
    if z3.is_bool(eq) and not (z3.is_true(eq) or z3.is_false(eq)) and _never_equal(a, b):
        return z3.BoolVal(False)
    return eq


def _never_equal(a, b) -> bool:
    """Whether integer terms a and b differ for every value of their variables, by the gcd
    test: a - b = sum(c_i * t_i) + k with integer coefficients c_i (t_i any integer-valued
    subterms) is never 0 when gcd(c_i) does not divide k. The stages of a TMA-store
    epilogue's staged blocks, 8 * wg + j and 8 * wg' + j' (j != j' mod 8), are such: their
    race checks then fold to true without a query (bn 176 TMA-store GEMM: 187 pairs, 31 left)."""
    a, b = _num(a), _num(b)
    if not (z3.is_int(a) and z3.is_int(b)):
        return False
    d = z3.simplify(a - b)
    terms = d.children() if z3.is_add(d) else [d]
    k, g = 0, 0
    for t in terms:
        if z3.is_int_value(t):
            k += t.as_long()
        elif z3.is_mul(t) and t.num_args() == 2 and z3.is_int_value(t.arg(0)):
            g = math.gcd(g, t.arg(0).as_long())
        else:
            g = math.gcd(g, 1)
    return g > 1 and k % g != 0


def smem_type(model: Model, buffer: Value) -> SmemType:
    return model.buffers[buffer.id].result.type
