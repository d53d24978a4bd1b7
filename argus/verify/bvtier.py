"""The bit-vector tier: decide an integer query over bounded variables as a QF_BV query.

Job: tag and address queries divide and reduce by powers of two everywhere (tile sizes, the
expert of row r is r // 512, swizzle phases). z3's integer arithmetic handles such div/mod
with branch-and-bound and can take seconds; bit-blasted, the same query takes milliseconds
(INVARIANTS.md §3.6: tier 2, bit-vectors for addresses and indices). This module translates an
Int query to bit-vectors when that is exact, and hands back None otherwise (the caller then
uses linear integer arithmetic).

Exactness (the invariant kept): every variable must have a lower and an upper bound in the
premises; interval arithmetic then bounds every subterm, and the width is chosen so that no
subterm can overflow (at most 64 bits). Under that condition two's-complement arithmetic is
integer arithmetic, `x / 2^k` is an arithmetic shift (floor, like z3's Int division by a
positive constant) and `x % 2^k` is a mask (z3's Int remainder is non-negative). Division or
remainder by anything other than a positive power of two is never translated (bvudiv by a
non-power-of-two takes seconds, §3.6 rule 2). Opaque tag functions become uninterpreted
bit-vector functions and may appear only under (dis)equalities and as arguments, where the
finite set of their values can be renamed into range.
"""

from __future__ import annotations

import z3

from argus.verify.terms import subterms

MAX_WIDTH = 64
_INF = float("inf")


class _Abort(Exception):
    pass


def _is_pow2(c: int) -> bool:
    return c > 0 and c & (c - 1) == 0


def _bounds(premises) -> dict[str, list]:
    """Syntactic bounds v >= e / v < e from the premises' top-level conjuncts."""
    out: dict[str, list] = {}

    def add(v, kind, e):
        out.setdefault(v.decl().name(), []).append((kind, e))

    def atom(a, negated=False):
        if z3.is_not(a):
            return atom(a.arg(0), not negated)
        if z3.is_and(a) and not negated:
            for c in a.children():
                atom(c)
            return
        k = a.decl().kind()
        flip = {z3.Z3_OP_LE: z3.Z3_OP_GT, z3.Z3_OP_LT: z3.Z3_OP_GE,
                z3.Z3_OP_GE: z3.Z3_OP_LT, z3.Z3_OP_GT: z3.Z3_OP_LE}
        if k not in flip:
            if k == z3.Z3_OP_EQ and not negated and a.num_args() == 2:
                x, y = a.arg(0), a.arg(1)
                for v, e in ((x, y), (y, x)):
                    if _is_var(v):
                        add(v, "ge", e)
                        add(v, "le", e)
            return
        if negated:
            k = flip[k]
        x, y = a.arg(0), a.arg(1)
        # normalize to v OP e
        for v, e, op in ((x, y, k), (y, x, {z3.Z3_OP_LE: z3.Z3_OP_GE, z3.Z3_OP_LT: z3.Z3_OP_GT,
                                           z3.Z3_OP_GE: z3.Z3_OP_LE,
                                           z3.Z3_OP_GT: z3.Z3_OP_LT}[k])):
            if _is_var(v):
                if op == z3.Z3_OP_GE:
                    add(v, "ge", e)
                elif op == z3.Z3_OP_GT:
                    add(v, "ge", e + 1)
                elif op == z3.Z3_OP_LE:
                    add(v, "le", e)
                else:
                    add(v, "le", e - 1)
    for p in premises:
        atom(p)
    return out


def _literal(t) -> tuple[int, bool]:
    """(atom's ast id, value) of a Boolean term: `t` holds iff the atom has that value
    (`not a` is (a, False))."""
    return (t.arg(0).get_id(), False) if z3.is_not(t) else (t.get_id(), True)


def _guarded_bounds(premises, claims, bounds) -> dict[str, tuple]:
    """{name: (variable, its bounds)} of the variables the premises bound only under a guard:
    a Boolean term g without such variables such that every occurrence of the variable, in
    the premises and the claims, sits where its value matters only when g holds (a branch
    of `If(g, a, b)`, a disjunct of `Or(not g, x)`, a conjunct of `And(g, x)`), and premises
    `Or(not g, And(bounds...))` bound it by terms of variables bounded everywhere. Such
    variables come from a read resolved against two writers (a pipeline stage written by the
    loop's first TMA site or by the steady state's: each writer's iteration is bounded only
    where it is the writer); before, they left the whole query outside this tier (FP8
    attention 128 x 256's k-once injectivity: z3's integer core 16M resource units, three
    times the default budget; bit-blasted 60k).

    Exact for proofs: from a model of the integer query, setting every guarded variable whose
    guard is false to its interval's low end changes no truth value (each of its occurrences
    is irrelevant there, and no guard mentions a guarded variable), and in the model so made
    every variable lies in its interval, so the bit-vector query has a model too. The
    converse does not hold: a bit-vector model may give a guarded variable a value its guard
    would not allow (`translate`)."""
    iv = _Intervals(bounds)
    # candidates: integer variables without a finite interval from the unconditional bounds
    cand: dict[int, z3.ExprRef] = {}
    for t in subterms(*premises, *claims):
        if _is_var(t) and t.get_id() not in cand:
            lo, hi = iv.var(t)
            if lo == -_INF or hi == _INF:
                cand[t.get_id()] = t
    if not cand:
        return {}
    # whether a node has a candidate below it: a post-order walk (a DAG, each node once)
    below: dict[int, bool] = {}
    stack = [(t, False) for t in list(premises) + list(claims)]
    while stack:
        t, done = stack.pop()
        if t.get_id() in below:
            continue
        kids = t.children() if z3.is_app(t) else []
        if done:
            below[t.get_id()] = t.get_id() in cand or any(below[c.get_id()] for c in kids)
        else:
            stack.append((t, True))
            stack += [(c, False) for c in kids if c.get_id() not in below]
    # each occurrence's guards (literals whose falsity makes it irrelevant); a variable's
    # are the intersection over its occurrences
    guards: dict[int, frozenset] = {}
    seen: set[tuple[int, frozenset]] = set()
    todo = [(t, frozenset()) for t in list(premises) + list(claims)]
    while todo:
        t, path = todo.pop()
        if not below.get(t.get_id()) or (t.get_id(), path) in seen:
            continue
        seen.add((t.get_id(), path))
        if t.get_id() in cand:
            guards[t.get_id()] = guards.get(t.get_id(), path) & path
            continue
        ch = t.children()
        if z3.is_app_of(t, z3.Z3_OP_ITE) and not below[ch[0].get_id()]:
            atom, val = _literal(ch[0])
            todo += [(ch[1], path | {(atom, val)}), (ch[2], path | {(atom, not val)})]
        elif z3.is_or(t) or z3.is_and(t):
            # a disjunct matters only where the others are false, a conjunct only where
            # the others are true
            lits = [None if below[c.get_id()] else _literal(c) for c in ch]
            keep = z3.is_and(t)
            for i, c in enumerate(ch):
                todo.append((c, path | {(lit[0], lit[1] == keep) for j, lit in enumerate(lits)
                                        if j != i and lit is not None}))
        else:
            todo += [(c, path) for c in ch]
    out: dict[str, tuple] = {}
    for i, v in cand.items():
        for atom, val in sorted(guards.get(i, ())):
            # the premises Or(h, body) with h = not g: body holds where g does
            body = [p.arg(1 - k) for p in premises if z3.is_or(p) and p.num_args() == 2
                    for k in (0, 1) if _literal(p.arg(k)) == (atom, not val)]
            bl = _bounds(body).get(v.decl().name(), [])
            # by terms of variables bounded everywhere (their intervals hold in every model)
            lo = max([iv.of(e)[0] for k, e in bl if k == "ge"], default=-_INF)
            hi = min([iv.of(e)[1] for k, e in bl if k == "le"], default=_INF)
            if -_INF < lo <= hi < _INF:
                out[v.decl().name()] = (v, [("ge", z3.IntVal(lo)), ("le", z3.IntVal(hi))])
                break
    return out


def _is_var(t) -> bool:
    return z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED and z3.is_int(t)


class _Intervals:
    """Intervals of variables by fixed-point iteration over their bounds (each round uses the
    previous round's variable intervals, so bounds that mention each other converge), then of
    any term by interval arithmetic."""

    def __init__(self, bounds, rounds: int = 8):
        self.bounds = bounds
        self.vars: dict[str, tuple] = {name: (-_INF, _INF) for name in bounds}
        self.cache: dict[int, tuple] = {}
        for _ in range(rounds):
            changed = False
            self.cache = {}
            for name, bl in bounds.items():
                lo, hi = self.vars[name]
                for kind, e in bl:
                    a, b = self.of(e)
                    if kind == "ge":
                        lo = max(lo, a)
                    else:
                        hi = min(hi, b)
                if (lo, hi) != self.vars[name]:
                    self.vars[name] = (lo, hi)
                    changed = True
            if not changed:
                break
        self.cache = {}

    def var(self, v) -> tuple:
        return self.vars.get(v.decl().name(), (-_INF, _INF))

    def of(self, t) -> tuple:
        key = t.get_id()
        if key in self.cache:
            return self.cache[key]
        r = self._of(t)
        self.cache[key] = r
        return r

    def _of(self, t) -> tuple:
        if z3.is_int_value(t):
            v = t.as_long()
            return (v, v)
        if _is_var(t):
            return self.var(t)
        if z3.is_app(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            return (-_INF, _INF)
        k = t.decl().kind() if z3.is_app(t) else None
        ch = [self.of(c) for c in t.children()] if z3.is_app(t) else []
        if k == z3.Z3_OP_ADD:
            return (sum(c[0] for c in ch), sum(c[1] for c in ch))
        if k == z3.Z3_OP_SUB:
            lo, hi = ch[0]
            for c in ch[1:]:
                lo, hi = lo - c[1], hi - c[0]
            return (lo, hi)
        if k == z3.Z3_OP_UMINUS:
            return (-ch[0][1], -ch[0][0])
        if k == z3.Z3_OP_MUL:
            lo, hi = ch[0]
            for c in ch[1:]:
                cands = [a * b for a in (lo, hi) for b in c if not
                         ((a in (_INF, -_INF) and b == 0) or (b in (_INF, -_INF) and a == 0))]
                cands = cands or [0]
                lo, hi = min(cands), max(cands)
            return (lo, hi)
        if k in (z3.Z3_OP_IDIV, z3.Z3_OP_DIV):
            d = t.arg(1)
            if not z3.is_int_value(d) or d.as_long() <= 0:
                raise _Abort("division by a non-constant")
            c = d.as_long()
            lo, hi = ch[0]
            return (_floordiv(lo, c), _floordiv(hi, c))
        if k == z3.Z3_OP_MOD:
            d = t.arg(1)
            if not z3.is_int_value(d) or d.as_long() <= 0:
                raise _Abort("remainder by a non-constant")
            return (0, d.as_long() - 1)
        if k == z3.Z3_OP_ITE:
            return (min(ch[1][0], ch[2][0]), max(ch[1][1], ch[2][1]))
        if k == z3.Z3_OP_TO_INT or k == z3.Z3_OP_TO_REAL:
            raise _Abort("real arithmetic")
        return (-_INF, _INF)


def _floordiv(x, c):
    if x in (_INF, -_INF):
        return x
    return x // c


def translate(premises, claims, extra=()):
    """(bv premises, bv claims, bv extra terms, {int var name: bv var}, width, the names of
    the variables bounded under a guard (`_guarded_bounds`)), or None when the translation
    would not be exact. With guarded variables an unsat answer is exact (a proof) but a model
    may set a variable its guard makes irrelevant: the caller decides violations without
    them."""
    try:
        return _translate(premises, claims, extra)
    except (_Abort, z3.Z3Exception, RecursionError):
        return None


def _translate(premises, claims, extra):
    premises = [z3.simplify(p) for p in premises]
    claims = [(n, z3.simplify(c)) for n, c in claims]
    bounds = _bounds(premises)
    guarded = _guarded_bounds(premises, [c for _, c in claims], bounds)
    if guarded:
        bounds = {**bounds, **{name: bl for name, (_, bl) in guarded.items()}}
    iv = _Intervals(bounds)
    terms = list(premises) + [c for _, c in claims] + [t for t in extra if z3.is_int(t)]
    # every integer subterm must be bounded; collect the worst magnitude
    worst = 1
    uf_in_arith = False
    for t in subterms(*terms):
        if z3.is_int(t):
            is_uf = z3.is_app(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED and \
                t.num_args() > 0
            if not is_uf:
                lo, hi = iv.of(t)
                if lo == -_INF or hi == _INF:
                    # no term in the message: printing a large term costs seconds (z3's
                    # printer), and the reason is never shown (translate returns None)
                    raise _Abort("an unbounded term")
                worst = max(worst, abs(lo), abs(hi))
        if z3.is_app(t):
            k = t.decl().kind()
            if k in (z3.Z3_OP_IDIV, z3.Z3_OP_DIV, z3.Z3_OP_MOD):
                d = t.arg(1)
                if not z3.is_int_value(d) or not _is_pow2(d.as_long()):
                    raise _Abort("division by a non-power-of-two")
            if k in (z3.Z3_OP_ADD, z3.Z3_OP_SUB, z3.Z3_OP_MUL, z3.Z3_OP_IDIV, z3.Z3_OP_MOD,
                     z3.Z3_OP_LE, z3.Z3_OP_LT, z3.Z3_OP_GE, z3.Z3_OP_GT, z3.Z3_OP_UMINUS):
                for c in t.children():
                    if z3.is_app(c) and c.decl().kind() == z3.Z3_OP_UNINTERPRETED and \
                            c.num_args() > 0:
                        uf_in_arith = True
    if uf_in_arith:
        raise _Abort("an opaque function's value is used in arithmetic")
    width = max(8, worst.bit_length() + 2)
    if width > MAX_WIDTH:
        raise _Abort("needs more than 64 bits")
    env: dict[str, z3.BitVecRef] = {}
    funcs: dict[str, z3.FuncDeclRef] = {}
    cache: dict[int, z3.ExprRef] = {}

    def tr(t):
        key = t.get_id()
        if key in cache:
            return cache[key]
        r = _tr(t)
        cache[key] = r
        return r

    def _tr(t):
        if z3.is_int_value(t):
            return z3.BitVecVal(t.as_long(), width)
        if z3.is_true(t) or z3.is_false(t):
            return t
        if _is_var(t):
            name = t.decl().name()
            if name not in env:
                env[name] = z3.BitVec(name, width)
            return env[name]
        if z3.is_const(t) and z3.is_bool(t):
            return t
        k = t.decl().kind()
        args = [tr(c) for c in t.children()]
        if k == z3.Z3_OP_UNINTERPRETED:
            name = t.decl().name()
            if name not in funcs:
                funcs[name] = z3.Function(f"{name}!bv", *([z3.BitVecSort(width)] *
                                                         (t.num_args() + 1)))
            return funcs[name](*args)
        table = {
            z3.Z3_OP_AND: lambda a: z3.And(a), z3.Z3_OP_OR: lambda a: z3.Or(a),
            z3.Z3_OP_NOT: lambda a: z3.Not(a[0]), z3.Z3_OP_IMPLIES: lambda a: z3.Implies(*a),
            z3.Z3_OP_EQ: lambda a: a[0] == a[1], z3.Z3_OP_DISTINCT: lambda a: z3.Distinct(a),
            z3.Z3_OP_ITE: lambda a: z3.If(*a), z3.Z3_OP_LE: lambda a: a[0] <= a[1],
            z3.Z3_OP_LT: lambda a: a[0] < a[1], z3.Z3_OP_GE: lambda a: a[0] >= a[1],
            z3.Z3_OP_GT: lambda a: a[0] > a[1], z3.Z3_OP_UMINUS: lambda a: -a[0],
            z3.Z3_OP_XOR: lambda a: z3.Xor(*a),
        }
        if k in table:
            return table[k](args)
        if k == z3.Z3_OP_ADD:
            out = args[0]
            for a in args[1:]:
                out = out + a
            return out
        if k == z3.Z3_OP_SUB:
            out = args[0]
            for a in args[1:]:
                out = out - a
            return out
        if k == z3.Z3_OP_MUL:
            out = args[0]
            for a in args[1:]:
                out = out * a
            return out
        if k in (z3.Z3_OP_IDIV, z3.Z3_OP_DIV):
            c = t.arg(1).as_long()
            return args[0] >> (c.bit_length() - 1)  # arithmetic shift = floor division
        if k == z3.Z3_OP_MOD:
            c = t.arg(1).as_long()
            return args[0] & (c - 1)
        raise _Abort(f"no bit-vector rule for {t.decl().name()}")

    bp = [tr(p) for p in premises]
    # a guarded variable's interval as a premise: every model of the integer query has one
    # with the same truth values inside it (`_guarded_bounds`), and the bit-vector models
    # then stay where the translation is exact
    for name, (v, _) in guarded.items():
        lo, hi = iv.var(v)
        bp.append(z3.And(tr(v) >= z3.BitVecVal(lo, width), tr(v) <= z3.BitVecVal(hi, width)))
    bc = [(n, tr(c)) for n, c in claims]
    be = [tr(t) if z3.is_int(t) else None for t in extra]
    return bp, bc, be, env, width, frozenset(guarded)


def int_model_pins(bv_model: z3.ModelRef, env: dict[str, z3.BitVecRef]):
    """The BV model's variable values as Int equalities (signed)."""
    pins = []
    for name, v in env.items():
        val = bv_model.eval(v, model_completion=True)
        pins.append(z3.Int(name) == val.as_signed_long())
    return pins
