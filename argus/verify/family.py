"""One query for a family of queries that differ only in numerals affine in their index.

Job: a Python-unrolled loop in a kernel (the row segments of a halo / rowbox conv's TMA store,
one store a row of the box) gives the verifier N steps whose queries are the same formula with
the loop index folded into numerals (`row + 3`, `<= 4 - P`) and with each step's own fresh
element variables. Asked one by one, each is a full solver call (the halo TMA conv's 8 'pushed
out of bounds' steps: 0.25-0.33 s of its ~1.5 s). `template` anti-unifies them: a numeral
position whose values are v0 + b*k in member k (k = 0 .. N-1) becomes v0 + b*j for a fresh
j in [0, N), and constants that differ between members (each step's own element variables)
become one fresh constant per tuple of them; an integer term `x` in one member where another
has `x + c` (c a numeral: z3 folds member 0's `+ 0` away) is read as `x + 0`; anything else
must be the same term in every member.

Sound: member k is the template with j := k and the fresh constants := k's, up to the
evaluation of numeral arithmetic (v0 + b*k is member k's numeral; `x + 0` is `x`). A proof of
the template holds for every value of its variables, j in [0, N) included, so it proves each
member (an instance of a valid formula, its variables replaced by terms, is valid). A template
not proven proves nothing: the caller then asks each member itself, so a violation, an unknown and a
counterexample are found exactly as without it.

Vacuity: solver.prove refuses a proof whose premises are contradictory; it checks the
template's premises, i.e. some member's. A member counts as proven by the template only when
its own premises are shown satisfiable too (`satisfiable`: the model search its own quick
proof would make); else it is asked itself, as without the template, so a member with
contradictory premises stays unknown (vacuous) as it would alone. One exception, as alone:
a template whose every claim z3's simplifier turns into true (solver.prove's step 0, which
reads no premise) proves its members without that check (obligation.family_proofs).
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from argus.verify import solver
from argus.verify.tagdomain import fresh_int

# the least family worth a template (a family of 2 saves one query at most, and a template
# that is not proven costs one more)
FAMILY_MIN = 3

Query = tuple[Sequence[z3.BoolRef], Sequence[tuple[str, z3.BoolRef]]]


class _Mismatch(Exception):
    """The members are not one formula up to affine numerals and renamed constants."""


def template(queries: Sequence[Query], tuples: bool = False) -> Query | None:
    """The family's template query (premises with 0 <= j < N added, claims named as the first
    member's), or None when the queries are not one formula (see the module docstring).
    `_walk_members` makes it.

    tuples=True: numerals need not be affine in the member index. Each numeral position
    whose values differ becomes a fresh variable per tuple of the members' values (equal
    tuples, one variable), and the premises say that the variables take one member's values
    together: Or over members k of And(x_p == member k's numeral at p). Member k is the
    template with x_p := its numerals (that disjunct true) and the fresh constants := its
    own, so a proof of the template proves every member, as with j. For a cluster whose
    members pairwise anti-unify but whose numerals are not affine in any one order
    (obligation.family_proofs): the FA3 d 256 kernels' wgmma.k-once "injective with"
    pairs of 4 k-slices, sites (i, j) for i < j, whose two box offsets 64 i and 64 j move
    independently: 6 pairs, 12 queries a kernel solved one by one before (~2.5 ms each).
    """
    return _walk_members(queries, build=True, tuples=tuples)


def anti_unify(queries: Sequence[Query]) -> bool:
    """Whether `template(queries)` is not None, decided by the same walk without making the
    template's terms (`_walk_members` with build=False: no sum, fresh constant, application
    or template numeral is made; only the `0` a folded `+ 0` is read as). For the pairwise
    questions of `families` and of obligation._clusters, which keep only the answer: on the
    FA3 d 256 attention kernels each pair's template made ~20-60 terms through z3's wrappers
    (3-5 ms a pair), for clusters whose own template then failed (numerals not affine over
    the whole cluster)."""
    return _walk_members(queries, build=False) is not None


def _walk_members(queries: Sequence[Query], build: bool, tuples: bool = False):
    """`template`'s walk; with build=False, True in place of the template (nothing made).

    The walk reads the members' terms through z3's C API (`solver.raw`: no wrapper objects,
    no per-call error checks): through the Python wrappers the 3-d packed conv's templates
    and runs cost ~0.16 s of its ~1.3 s, each node read as an object and its children
    built as objects. Only the template's own nodes (where the members differ) are made."""
    n = len(queries)
    if n < 2:
        return None
    first_p, first_c = queries[0]
    if any(len(p) != len(first_p) or [c[0] for c in cl] != [c[0] for c in first_c]
           for p, cl in queries[1:]):
        return None
    terms = [t for t in first_p] + [c for _, c in first_c]
    if not terms:
        return None
    ctx = terms[0].ctx
    ref = ctx.ref()
    L = solver.raw()
    get_id, kind_of, get_sort = L.Z3_get_ast_id, L.Z3_get_ast_kind, L.Z3_get_sort
    sort_kind, nargs, arg = L.Z3_get_sort_kind, L.Z3_get_app_num_args, L.Z3_get_app_arg
    decl_of, decl_kind = L.Z3_get_app_decl, L.Z3_get_decl_kind
    numeral_string = L.Z3_get_numeral_string
    j = fresh_int("family.j") if build else None
    zero = z3.IntVal(0, ctx)   # a folded `+ 0` (alive as long as the memo keyed by its id)
    consts: dict[tuple[int, ...], z3.ExprRef] = {}
    numerals: list = []   # tuples=True: (variable, the members' values) per numeral tuple
    # the template's nodes by the members' node ids, each a term (raw ast, the object that
    # keeps it alive: None for a member's own node, which the member keeps alive)
    memo: dict[tuple[int, ...], tuple] = {}

    def is_int(a) -> bool:
        return sort_kind(ref, get_sort(ref, a)) == z3.Z3_INT_SORT

    def is_int_value(a) -> bool:
        return kind_of(ref, a) == z3.Z3_NUMERAL_AST and is_int(a)

    def app_of(a):
        """(decl, decl kind, number of arguments) of an application, else None."""
        if kind_of(ref, a) != z3.Z3_APP_AST:
            return None
        d = decl_of(ref, a)
        return d, decl_kind(ref, d), nargs(ref, a)

    def summands(a) -> tuple[list, object]:
        """`a` as (summands, numeral): a sum whose first or last summand is a numeral
        gives the others and that numeral (`x + c`, `c + x + y`); any other term gives
        (its summands, or itself), None."""
        app = app_of(a)
        if app is None or app[1] != z3.Z3_OP_ADD:
            return [a], None
        args = [arg(ref, a, i) for i in range(app[2])]
        for c, rest in ((args[-1], args[:-1]), (args[0], args[1:])):
            if is_int_value(c) and not all(is_int_value(x) for x in rest):
                return rest, c
        return args, None

    def made(t: z3.ExprRef) -> tuple:
        return t.as_ast(), t

    def walk(asts: list) -> tuple:
        key = tuple(get_id(ref, a) for a in asts)
        hit = memo.get(key)
        if hit is not None:
            return hit
        a0 = asts[0]
        if all(k == key[0] for k in key):
            out = (a0, None)
        elif all(is_int_value(a) for a in asts):
            vals = [int(numeral_string(ref, a)) for a in asts]
            if tuples:
                # one variable per tuple of values (`memo` is keyed by the members' nodes,
                # and z3 hash-conses numerals: an equal tuple elsewhere is this variable)
                if build:
                    x = fresh_int("family.n")
                    numerals.append((x, vals))
                    out = made(x)
                else:
                    out = _DRY
                memo[key] = out
                return out
            b = vals[1] - vals[0]
            if any(v != vals[0] + b * k for k, v in enumerate(vals)):
                raise _Mismatch
            out = made(z3.IntVal(vals[0], ctx) + z3.IntVal(b, ctx) * j) if build else _DRY
        elif all((app := app_of(a)) is not None and app[1] == z3.Z3_OP_UNINTERPRETED and
                 app[2] == 0 for a in asts) and \
                len({get_id(ref, L.Z3_sort_to_ast(ref, get_sort(ref, a))) for a in asts}) == 1:
            # one fresh constant per tuple of the members' constants (their own element
            # variables): member k is the template with it replaced by k's constant
            if not build:
                out = _DRY
            else:
                c = consts.get(key)
                if c is None:
                    c = consts[key] = z3.FreshConst(
                        z3.z3._to_sort_ref(get_sort(ref, a0), ctx), "family.c")
                out = made(c)
        elif (apps := [app_of(a) for a in asts]) and all(
                app is not None and app[2] == apps[0][2] and app[2] > 0 and
                get_id(ref, L.Z3_func_decl_to_ast(ref, app[0])) ==
                get_id(ref, L.Z3_func_decl_to_ast(ref, apps[0][0])) for app in apps):
            count = apps[0][2]
            kids = [walk([arg(ref, a, i) for a in asts]) for i in range(count)]
            if build:
                raw_kids = (z3.Ast * count)(*[k[0] for k in kids])
                out = made(z3.z3._to_expr_ref(L.Z3_mk_app(ref, apps[0][0], count, raw_kids),
                                              ctx))
            else:
                out = _DRY
        elif all(is_int(a) for a in asts) and \
                (split := [summands(a) for a in asts]) and \
                any(c is not None for _, c in split) and \
                len({len(rest) for rest, _ in split}) == 1:
            # `x` (or `x + y`) in one member, `x + c` (`c + x + y`) in another: z3 folds the
            # `+ 0` of index 0 away (segment 0 of a store, filter row 0 of an unrolled
            # assertion), so the sum without a numeral is read with `+ 0` (equal in value),
            # and each summand and the numeral are walked
            parts = [walk([rest[i] for rest, _ in split]) for i in range(len(split[0][0]))]
            num = walk([zero.as_ast() if c is None else c for _, c in split])
            out = made(z3.Sum([_expr(x, ctx) for x in parts] + [_expr(num, ctx)])) \
                if build else _DRY
        else:
            raise _Mismatch
        memo[key] = out
        return out

    try:
        if not build:
            for i in range(len(first_p)):
                walk([q[0][i].as_ast() for q in queries])
            for i in range(len(first_c)):
                walk([q[1][i][1].as_ast() for q in queries])
            return True
        prem = [_expr(walk([q[0][i].as_ast() for q in queries]), ctx)
                for i in range(len(first_p))]
        claims = [(name, _expr(walk([q[1][i][1].as_ast() for q in queries]), ctx))
                  for i, (name, _) in enumerate(first_c)]
    except _Mismatch:
        return None
    if tuples:
        if not numerals:
            return prem, claims
        return prem + [z3.Or([z3.And([x == v[k] for x, v in numerals])
                              for k in range(n)])], claims
    return prem + [j >= 0, j < n], claims


# a node `_walk_members` did not make (build=False): only whether the walk gets through counts
_DRY = (None, None)


def _expr(node: tuple, ctx) -> z3.ExprRef:
    """A template node (raw ast, its keeper) as a term of its own."""
    return node[1] if node[1] is not None else z3.z3._to_expr_ref(node[0], ctx)


def families(queries: Sequence[Query]) -> list[list[int]]:
    """The queries' indices in runs of consecutive queries each of which anti-unifies with
    the run's first (`template` of the two: a walk of the terms where they differ), in
    order; a query that fits no run starts one. A run's own template may still be None
    (numerals not affine in the index)."""
    runs: list[list[int]] = []
    for i in range(len(queries)):
        if runs and anti_unify([queries[runs[-1][0]], queries[i]]):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def satisfiable(premises: Sequence[z3.BoolRef]) -> bool:
    """The premises shown satisfiable by the vacuity check each member's own quick proof
    would make (`solver.premises_satisfiable`: a recent model's point, a search with the
    constants shared with the latest remembered query pinned, a model search); False answers
    nothing. Not their least point first (h226 tried it second, after a recent model): on
    the halo TMA conv's 8 row segments' store.coords, one template, it failed on 7 of them
    at ~80 ms each, where the pinned search finds a model in a few ms."""
    return solver.premises_satisfiable(premises)
