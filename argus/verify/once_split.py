"""store.once's decomposition of a destination coordinate before z3: pushed-out summands and
symbolic radices.

Job: turn the non-linear injectivity query of a store whose rows are per-image tiles into
small linear steps, each a proof. A convolution that tiles each image's P output rows
(ConvSchedule.halo / rowbox) stores row `image * P + p`, and a tile's rows past P are pushed
past the tensor: `+ NP * outside(p, P)`. Asked directly, "distinct instances write distinct
rows" makes z3's non-linear core derive image1 == image2 from image1 * P + p1 == image2 * P +
p2 through the tile scheduler's raster decode, which ran for minutes. Two steps, each proven
by the solver first (a step whose proof fails is not taken: the query stays as it was):

  * pushed-out summands: a summand F * T of a destination coordinate (F a launch constant, T a
    piecewise term of the instance: a sum of If terms) that is 0 on every in-bounds element
    (`inb => F * T == 0`, proven with the sign facts below) is dropped from the coordinate,
    and `F * T == 0` becomes a premise of the instance. Exact on in-bounds elements: there the
    coordinate is unchanged, and store.once only speaks of in-bounds elements;
  * symbolic radix: a coordinate d = F * A + C (F a launch constant >= 1, A a term of the
    instance) with 0 <= C < F on every in-bounds element (proven) is the pair (A, C): two
    instances write the same d iff they have the same A and the same C (integer division by
    F). The claim "d1 != d2" becomes "A1 != A2 or C1 != C2": linear in the instance once
    the radix is gone, and a counterexample to it is one to the original claim (equal pairs
    give equal coordinates), so a violation is still a real double store.

Sign facts: a product summand whose factors have non-negative lower bounds (interval
arithmetic over the premises' syntactic bounds, with division and remainder by a launch
constant >= 1) is >= 0; stated as premises, they spare z3's non-linear core the sign
reasoning through the raster's divisions (a fact derived from the premises, never assumed).

Invariant kept: every premise added holds for every in-bounds instance of the store (it was
proven, or is a sign fact of the premises), and every claim replaced is equivalent to the
original under them; nothing is weakened.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import z3

from argus.verify import bvtier, family, solver
from argus.verify.tagdomain import const_names

# the budget of each step's proof (ms' worth of resource units): the steps are linear or
# nearly so once the sign facts are stated (0.1 s measured); a step that needs more is not
# taken, and the plain query is posed instead
STEP_TIMEOUT_MS = 1000


# free constants per AST id; the entry keeps its term alive, so an id is never reused for
# another term while it is cached (the decomposition asks again and again about the raster's
# large terms)
_CONSTS: dict[int, tuple[z3.ExprRef, frozenset]] = {}


# rewrites remembered across calls (`normalized`, `generalize`), per key (what the rewrite is
# a function of); emptied with the solver's proofs (solver.clear_cache), so timings start cold
_MEMOS: dict[tuple, dict] = {}


def _memo(key: tuple, keep, ctx) -> dict:
    """The table of rewrites for `key` among those of the z3 context `ctx` (the context of
    the terms whose ids the key holds and the table will: `solver.context_table`; `keep`:
    those terms, kept alive so that no id is reused while the table is)."""
    memos = _table("_MEMOS", ctx)
    table = memos.get(key)
    if table is None:
        if len(memos) > 200:
            memos.clear()
        table = memos[key] = {"keep": list(keep)}
    return table


def _table(name: str, ctx):
    """`solver.context_table` of this module's table `name` (its fast path inline)."""
    if ctx is z3.z3._main_ctx:
        return globals()[name]
    return solver.context_table(sys.modules[__name__], name, ctx)


solver.on_clear_cache(lambda: _MEMOS.clear())   # the table current then (`own_context` swaps it)


def consts(t) -> frozenset:
    """free_consts(t), memoized."""
    if not isinstance(t, z3.ExprRef):
        return frozenset()
    table = _table("_CONSTS", t.ctx)
    hit = table.get(t.get_id())
    if hit is None:
        if len(table) > 50_000:
            table.clear()
        hit = table[t.get_id()] = (t, const_names(t))
    return hit[1]


def summands(t: z3.ArithRef) -> list[z3.ArithRef]:
    t = z3.simplify(t)
    return list(t.children()) if z3.is_add(t) else [t]


def factors(t: z3.ArithRef) -> list[z3.ArithRef]:
    return list(t.children()) if z3.is_mul(t) else [t]


def _product(fs: Sequence[z3.ArithRef]) -> z3.ArithRef:
    out = fs[0]
    for f in fs[1:]:
        out = out * f
    return out


class LowerBounds:
    """Constant lower bounds of integer terms: the premises' syntactic bounds on variables
    (to a fixed point), then interval arithmetic, with integer division and remainder by
    terms known >= 1 (z3's div is floor division and its mod in [0, |y|) for y != 0)."""

    def __init__(self, premises: Sequence[z3.BoolRef], rounds: int = 6):
        try:
            self.bounds = bvtier._bounds(list(premises))
        except (z3.Z3Exception, AttributeError):
            self.bounds = {}
        self.vars: dict[str, int] = {}
        self.cache: dict[int, int | None] = {}
        for _ in range(rounds):
            changed = False
            self.cache = {}
            for name, bl in self.bounds.items():
                for kind, e in bl:
                    lo = self.of(e) if kind == "ge" else None
                    if lo is not None and lo > self.vars.get(name, lo - 1):
                        self.vars[name] = lo
                        changed = True
            if not changed:
                break
        self.cache = {}

    def of(self, t) -> int | None:
        key = t.get_id()
        if key not in self.cache:
            self.cache[key] = self._of(t)
        return self.cache[key]

    def _of(self, t) -> int | None:
        if z3.is_int_value(t):
            return t.as_long()
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            return self.vars.get(t.decl().name())
        if not z3.is_app(t):
            return None
        k = t.decl().kind()
        ch = [self.of(c) for c in t.children()]
        if k == z3.Z3_OP_ADD:
            return None if None in ch else sum(ch)
        if k == z3.Z3_OP_SUB and all(z3.is_int_value(c) for c in t.children()[1:]):
            return None if ch[0] is None else ch[0] - sum(c.as_long() for c in t.children()[1:])
        if k == z3.Z3_OP_MUL:
            if None in ch or min(ch) < 0:
                return None
            out = 1
            for c in ch:
                out *= c
            return out
        if k == z3.Z3_OP_IDIV:
            x, y = ch
            if x is None or y is None or y < 1 or x < 0:
                return None
            return x // y if z3.is_int_value(t.arg(1)) else 0
        if k == z3.Z3_OP_MOD:
            return 0 if ch[1] is not None and ch[1] >= 1 else None
        if k == z3.Z3_OP_ITE:
            a, b = ch[1], ch[2]
            return None if a is None or b is None else min(a, b)
        return None


def sign_facts(terms: Sequence[z3.ArithRef], lb: LowerBounds) -> list[z3.BoolRef]:
    """`s >= 0` for every product summand of `terms` whose factors all have lower bounds
    >= 0 and one of them is not a numeral (a linear summand needs no fact)."""
    out, seen = [], set()
    for t in terms:
        for s in summands(t):
            fs = factors(s)
            if len(fs) < 2 or sum(not z3.is_int_value(f) for f in fs) < 2:
                continue
            if s.get_id() in seen:
                continue
            lows = [lb.of(f) for f in fs]
            if None not in lows and min(lows) >= 0:
                seen.add(s.get_id())
                out.append(s >= 0)
    return out


@dataclass(frozen=True)
class Radix:
    """d = F * A + C with 0 <= C < F on every in-bounds element (proven)."""

    f: z3.ArithRef
    a: z3.ArithRef
    c: z3.ArithRef


def split_launch_factor(s: z3.ArithRef, instance: set[str]):
    """(F, T) when the summand s is F * T with F a launch constant (no instance variable)
    that is not a numeral and T the product of the remaining factors, which mentions an
    instance variable; else None. With several launch factors, F is their product."""
    fs = factors(s)
    launch = [f for f in fs if not (consts(f) & instance) and not z3.is_int_value(f)]
    rest = [f for f in fs if not any(f.eq(g) for g in launch)]
    if not launch or not rest or not any(consts(f) & instance for f in rest):
        return None
    return _product(launch), _product(rest)


def _piecewise(t: z3.ArithRef) -> bool:
    """A sum of If terms (and numerals): a flag such as `outside(p, P)`, not a coordinate."""
    parts = summands(t)
    return any(z3.is_app(p) and p.decl().kind() == z3.Z3_OP_ITE for p in parts) and all(
        z3.is_int_value(p) or (z3.is_app(p) and p.decl().kind() == z3.Z3_OP_ITE)
        for p in parts)


def pushed_out(coord: z3.ArithRef, instance: set[str], prem: list, lb: LowerBounds | None = None,
               stats=None) -> tuple[z3.ArithRef, list[z3.BoolRef]]:
    """The coordinate without its summands that are 0 on every in-bounds element, and the
    premises `summand == 0` (each proven from `prem`, which states the element in bounds)."""
    return drive(pushed_out_steps(coord, instance, prem, lb), stats)


def pushed_out_steps(coord: z3.ArithRef, instance: set[str], prem: list,
                     lb: LowerBounds | None = None):
    """`pushed_out` as a generator: it yields each step's query `(premises, claims,
    instance, lb)` and is sent whether the step was proven (`drive` proves them one by one;
    check_stores proves the steps of a store's row segments as one family, family.py); its
    return value is pushed_out's."""
    parts = summands(coord)
    cands = [s for s in parts if (ft := split_launch_factor(s, instance)) and _piecewise(ft[1])]
    if not cands:
        return coord, []
    kept, zero = [], []
    lb = lb or LowerBounds(prem)
    prem = prem + sign_facts([coord], lb)
    for s in parts:
        ft = split_launch_factor(s, instance)
        if any(s.eq(c) for c in cands):
            # F >= 1: the flag itself is 0 (a linear premise, where F * T == 0 is not)
            z = ft[1] == 0 if (lb.of(ft[0]) or 0) >= 1 else s == 0
            if (yield prem, [("pushed out of bounds", z)], instance, lb):
                zero.append(z)
                continue
        kept.append(s)
    if not zero:
        return coord, []
    return (z3.simplify(z3.Sum(kept)) if kept else z3.IntVal(0)), zero


def drive(steps, stats=None):
    """Run a step generator (`pushed_out_steps`), proving each step it yields (`_proven`);
    its return value."""
    try:
        ask = next(steps)
        while True:
            ask = steps.send(_proven(*ask[:3], stats, ask[3]))
    except StopIteration as done:
        return done.value


def drive_all(step_gens: Sequence, stats=None) -> list:
    """`drive` for several step generators at once, round by round: the steps the
    generators yield in one round that anti-unify (family.families: a Python-unrolled store's
    row segments ask the same steps with the row's index folded into numerals) are proven
    as one template query where there are FAMILY_MIN of them or more (the halo and rowbox
    TMA convs' 8 'pushed out of bounds' steps: one query, the first segment's folded `+ 0`
    read as such, family.template). A template not proven: each step is
    proven alone, as `drive` does. The generators' return values, in order."""
    out: list = [None] * len(step_gens)
    asks: dict[int, tuple] = {}

    def advance(i, answer):
        try:
            asks[i] = step_gens[i].send(answer)
        except StopIteration as done:
            out[i] = done.value
            asks.pop(i, None)

    for i in range(len(step_gens)):
        advance(i, None)
    while asks:
        order = sorted(asks)
        queries = [generalize(*asks[i][:2], asks[i][2], asks[i][3]) for i in order]
        answers: dict[int, bool] = {}
        for run in family.families(queries):
            proven = False
            if len(run) >= family.FAMILY_MIN:
                tmpl = family.template([queries[k] for k in run])
                proven = tmpl is not None and solver.prove(
                    *tmpl, timeout_ms=STEP_TIMEOUT_MS, stats=stats).status == "proven"
            for k in run:
                # a member whose premises are not shown satisfiable is asked itself (vacuity)
                answers[order[k]] = (proven and family.satisfiable(queries[k][0])) or \
                    solver.prove(*queries[k], timeout_ms=STEP_TIMEOUT_MS,
                                 stats=stats).status == "proven"
        for i in order:
            advance(i, answers[i])
    return out


def radix(coord: z3.ArithRef, instance: set[str], prem: list, lb: LowerBounds,
          stats=None) -> Radix | None:
    """coord as F * A + C with 0 <= C < F proven from `prem` (the element in bounds), for the
    first launch factor F >= 1 of a summand for which that holds; else None."""
    parts = summands(coord)
    for i, s in enumerate(parts):
        ft = split_launch_factor(s, instance)
        if ft is None or (lb.of(ft[0]) or 0) < 1:
            continue
        f, a = ft
        rest = parts[:i] + parts[i + 1:]
        c = z3.simplify(z3.Sum(rest)) if rest else z3.IntVal(0)
        if _proven(prem, [("remainder in [0, radix)", z3.And(c >= 0, c < f))], instance,
                   stats, lb):
            return Radix(f, a, c)
    return None


def normalized(t: z3.ArithRef, instance: set[str], prem: list, stats=None) -> z3.ArithRef:
    """t with every (F * A + C) % F rewritten to C and (F * A + C) / F to A, for F a launch
    term and 0 <= C < F proven from `prem` (layout algebra: the radix F's digit and the rest;
    `np0 % P` of a tile origin np0 = image * P + p0 is p0). Equal to t wherever the premises
    hold, so the rewritten coordinate is the same function of the instance.

    The rewrites are remembered per (instance, premises) (`_memo`): a store's offsets, and the
    row segments of an unrolled store (same premises), share the raster's subterms, whose
    digits were otherwise looked for once per offset."""
    memo = _memo(("normalized", frozenset(instance),
                  tuple(p.get_id() for p in prem)), prem, t.ctx)

    def walk(t):
        key = t.get_id()
        if key in memo:
            return memo[key][1]
        out = t
        if z3.is_app(t) and t.num_args() > 0:
            kids = [walk(c) for c in t.children()]
            out = t.decl()(*kids) if any(not a.eq(b) for a, b in zip(kids, t.children())) \
                else t
            k = t.decl().kind()
            if k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and not z3.is_int_value(kids[1]) and \
                    not consts(kids[1]) & instance:
                digit = _digit(kids[0], kids[1], instance, prem, stats)
                if digit is not None:
                    out = digit[0] if k == z3.Z3_OP_IDIV else digit[1]
        memo[key] = (t, out)   # the entry keeps t alive: its id is not reused
        return out
    return z3.simplify(walk(z3.simplify(t)))


def _digit(x, f, instance, prem, stats):
    """(A, C) when x = F * A + C (a summand of x is f times A) with 0 <= C < f proven."""
    parts = summands(x)
    for i, s in enumerate(parts):
        ft = split_launch_factor(s, instance)
        if ft is None or not z3.simplify(ft[0] - f).eq(z3.IntVal(0)):
            continue
        rest = parts[:i] + parts[i + 1:]
        c = z3.simplify(z3.Sum(rest)) if rest else z3.IntVal(0)
        if _proven(prem, [("digit in [0, radix)", z3.And(c >= 0, c < f))], instance, stats):
            return ft[1], c
    return None


def _proven(prem, claims, instance: set[str], stats=None, lb=None) -> bool:
    """A step's claims proven from `prem`: first generalized and sliced (`generalize`), which
    turns most steps linear; the plain query is not tried (a step not proven is not taken)."""
    prem, claims = generalize(prem, claims, instance, lb)
    out = solver.prove(prem, claims, timeout_ms=STEP_TIMEOUT_MS, stats=stats)
    return out.status == "proven"


def generalize(prem: Sequence[z3.BoolRef], claims, instance: set[str],
               lb: LowerBounds | None = None):
    """The query with the integer divisions and remainders of an instance term by a launch
    term (the tile scheduler's decode: `block / per_image`, `block % per_image`) whose sign
    and range are known replaced by a fresh variable that keeps only those (q >= 0 for a
    quotient of a term >= 0 by one >= 1; 0 <= r < y for a remainder by y >= 1; any other
    stays as it is), and only the premises connected to
    the claims through instance or fresh variables. Sound for proofs: every model of the
    query extends to one of the generalized query (the variable takes the term's value, which
    has that sign and range), and dropping premises only strengthens the claim. So a proof of
    the generalized query proves the query; a failed one proves nothing (not a violation)."""
    lb = lb or LowerBounds(prem)   # bounds of a subset of the premises hold under them all
    # the rewrite of a term is a function of the term, of which of its variables are the
    # instance's and of their lower bounds (`LowerBounds.of` reads nothing else): a premise or
    # claim is remembered across calls under that key (`_memo`), so the pushed-out and digit
    # steps of a store's offsets, and of every row segment of an unrolled store, rewrite the
    # model's premises once. A division keeps one fresh variable across calls (the premises
    # remembered and the terms rewritten now name it alike); each query gets the facts of
    # the fresh variables it mentions
    terms = [c for _, c in claims] + list(prem)
    shared = _memo(("generalize",), (), terms[0].ctx if terms else z3.main_ctx())
    if len(shared.get("terms", ())) > 20_000:   # a long-lived process: start over
        shared.clear()
    fresh: dict[int, tuple] = shared.setdefault("fresh", {})
    fact_of: dict[str, list[z3.BoolRef]] = shared.setdefault("facts", {})
    top: dict[tuple, tuple] = shared.setdefault("terms", {})
    memo: dict[int, z3.ExprRef | None] = {}
    L = solver.raw()
    get_id, kind_of = L.Z3_get_ast_id, L.Z3_get_ast_kind
    nargs, arg = L.Z3_get_app_num_args, L.Z3_get_app_arg
    decl_of, decl_kind = L.Z3_get_app_decl, L.Z3_get_decl_kind
    wrap = z3.z3._to_expr_ref
    divmod_ = (z3.Z3_OP_IDIV, z3.Z3_OP_MOD)

    def rewrite(t):
        # post-order over t's DAG through the C API (`solver.raw`: the getters without the
        # wrappers' error checks), each node once: memo[id] is its image, None where nothing
        # below it changed (the node is kept, not rebuilt: z3's terms are hash-consed, so a
        # node rebuilt from the same children is the node itself). Only a division or
        # remainder by a non-numeral is wrapped and asked about (its bounds and constants);
        # the images are those the wrapper walk (`decl()(*children)` at every node) made
        ctx = t.ctx
        ref = ctx.ref()
        todo = [(t.as_ast(), False)]
        while todo:
            a, expanded = todo.pop()
            i = get_id(ref, a)
            if i in memo:
                continue
            n = nargs(ref, a) if kind_of(ref, a) == z3.Z3_APP_AST else 0
            if n == 0:
                memo[i] = None
                continue
            args = [arg(ref, a, j) for j in range(n)]
            if not expanded:
                k = decl_kind(ref, decl_of(ref, a))
                if k in divmod_ and n == 2 and not z3.is_int_value(y := wrap(args[1], ctx)):
                    x = wrap(args[0], ctx)
                    ly, lx = lb.of(y), lb.of(x)
                    # only terms whose sign and range are known (else z3 keeps the term)
                    known = ly is not None and ly >= 1 and (k == z3.Z3_OP_MOD or
                                                            (lx is not None and lx >= 0))
                    if known and consts(x) & instance and not consts(y) & instance:
                        hit = fresh.get(i)
                        if hit is None:
                            v = z3.FreshInt("q" if k == z3.Z3_OP_IDIV else "r", ctx)
                            # keeps the term alive: its id is not reused
                            hit = fresh[i] = (wrap(a, ctx), v)
                            fact_of[str(v)] = [v >= 0, v < y] if k == z3.Z3_OP_MOD \
                                else [v >= 0]
                        memo[i] = hit[1]   # its operands are not walked
                        continue
                todo.append((a, True))
                # operands first to last, as the recursive walk went (the fresh variables
                # are made, and so numbered, in that order)
                todo.extend((b, False) for b in reversed(args) if get_id(ref, b) not in memo)
                continue
            kids = [memo[get_id(ref, b)] for b in args]
            if all(e is None for e in kids):
                memo[i] = None
                continue
            new = [b if e is None else e.as_ast() for b, e in zip(args, kids)]
            memo[i] = wrap(z3.Z3_update_term(ref, a, n, (z3.Ast * n)(*new)), ctx)
        out = memo[get_id(ref, t.as_ast())]
        return t if out is None else out

    def remembered(t):
        cs = consts(t)
        key = (t.get_id(), frozenset(cs & instance),
               tuple(sorted((c, lb.vars.get(c)) for c in cs)))
        hit = top.get(key)
        if hit is None:
            hit = top[key] = (t, rewrite(t))   # keeps t alive: its id is not reused
        return hit[1]
    claims = [(n, remembered(c)) for n, c in claims]
    prem = [remembered(p) for p in prem]
    # the facts of the fresh variables this query mentions, in the order they were made
    used = set().union(*(consts(c) for _, c in claims), *(consts(p) for p in prem))
    facts = [f for name, fs in fact_of.items() if name in used for f in fs]
    prem = prem + facts
    # the premises connected to the claims through instance or fresh variables
    names = instance | (used & fact_of.keys())
    var = [consts(p) & names for p in prem]
    reach = set().union(*(consts(c) & names for _, c in claims))
    grown = True
    while grown:
        grown = False
        for vs in var:
            if vs & reach and not vs <= reach:
                reach |= vs
                grown = True
    return [p for p, vs in zip(prem, var) if not vs or vs & reach], claims


# tables of one z3 context (`solver.own_context`)
solver.context_local(sys.modules[__name__], "_CONSTS", dict)
solver.context_local(sys.modules[__name__], "_MEMOS", dict)
