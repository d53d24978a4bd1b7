"""The abstract domain of tags: per-element records of named symbolic fields.

Job: say what a tile element or shared-memory element *is* (INVARIANTS.md §3.1): which global
coordinate, iteration, expert … it came from, as z3 Int terms over the kernel's symbols (shape
parameters, program ids, loop indices, warpgroup indices) and the element's index.

A field is a `TagVal`:
  * a point value `term` when every contributor agrees (a loaded element's coordinate);
  * a set `{term : bound variables in range, under cond}` after a reduction or an accumulation
    (a wgmma's k, a row max over columns): `bound` names the reduction variables;
  * `mixed` notes where a reduced value was combined pointwise into it (softmax's x - max(x)),
    kept for messages; the point lineage stays primary;
  * `via` notes the shared-memory views the point lineage was read through ("A operand view
    of sA at kernels.py:71"), kept for messages: a wrong coordinate names the line that
    selected it (`through`).
Auxiliary variables (a producer's loop index seen from the consumer, reduction variables) are
fresh per instantiation and constrained by `cond`, so two instantiations never alias.

Invariant kept: a field's meaning is exactly "the set of values `term` takes over the bound
variables under `cond`"; obligations quantify over it existentially in the negated query,
so every check stays quantifier-free.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field, replace

import z3
from z3.z3 import _to_expr_ref

from argus.verify import solver
from argus.verify.terms import subterms

_fresh = itertools.count()
# the fresh variables created since the outermost memoized record computation began (None
# outside one): a memoized record's own auxiliaries are a slice of it (see `memoized_record`)
_created: list | None = None
_INT_SORT: z3.ArithSortRef | None = None   # the Int sort of z3's main context


def fresh_int(stem: str) -> z3.ArithRef:
    """A new Int variable; the suffix keeps instantiations apart. (`z3.Int` through the C API:
    the wrapper builds the sort and inspects the new constant's sort on every call.)"""
    global _INT_SORT
    ctx = z3.main_ctx()
    ref = ctx.ref()
    if _INT_SORT is None:
        _INT_SORT = z3.IntSort(ctx)
    sort = _INT_SORT
    # "!g": created after the model was built, so no transfer function's closure holds it
    # (`memoized_record` may generalize a record over it); "!": during the walk
    name = f"{stem}{'!' if Memo.building else '!g'}{next(_fresh)}"
    v = z3.ArithRef(z3.Z3_mk_const(ref, z3.Z3_mk_string_symbol(ref, name), sort.ast), ctx)
    if _created is not None:
        _created.append((v, stem))   # the stem names its renamings (`_renamed`)
    return v


@dataclass(frozen=True)
class TagVal:
    term: z3.ArithRef
    bound: tuple[z3.ArithRef, ...] = ()
    cond: tuple[z3.BoolRef, ...] = ()
    mixed: tuple[str, ...] = ()
    via: tuple[str, ...] = ()

    @property
    def is_point(self) -> bool:
        return not self.bound

    def depends_on(self, var: z3.ExprRef) -> bool:
        return mentions(self.term, var) or any(mentions(c, var) for c in self.cond)


def mentions(term, var) -> bool:
    """Whether `var` occurs in `term` (structural)."""
    if not isinstance(term, z3.ExprRef):
        return False
    arrays = _probe_arrays(var)
    if arrays is not None:
        # one native pass instead of a Python walk over the term: replacing a constant that
        # occurs by another one changes the (hash-consed) term, replacing one that does not
        # returns the very same term; the probe is never a variable of the model
        ctx, frm, to, _ = arrays   # (the arrays' last item keeps the probe alive)
        got = z3.Z3_substitute(ctx, term.as_ast(), 1, frm, to)  # checks sorts, raises
        return not z3.Z3_is_eq_ast(ctx, got, term.as_ast())
    target = var.get_id()
    return any(t.get_id() == target for t in subterms(term))


_PROBES: dict[tuple, z3.ExprRef] = {}
# var's AST id -> (var, (context, from, to, probe) or None): the substitution arrays
# `mentions` needs for an uninterpreted constant, built once per variable (the entry keeps the
# variable alive, so its id is never another term's); bounded, cleared when full. Per z3
# context, as every table keyed by AST ids (`_table`)
_PROBE_ARRAYS: dict[int, tuple] = {}


def _table(name: str, ctx):
    """`solver.context_table` of this module's table `name` (its fast path inline): the
    table of `ctx`'s terms, since AST ids are unique within one context only."""
    if ctx is z3.z3._main_ctx:
        return globals()[name]
    return solver.context_table(sys.modules[__name__], name, ctx)


def _probe_arrays(var):
    table = _table("_PROBE_ARRAYS", var.ctx)
    entry = table.get(var.get_id())
    if entry is not None:
        return entry[1]
    arrays = None
    if z3.is_const(var) and var.decl().kind() == z3.Z3_OP_UNINTERPRETED:
        probe = _probe(var)
        if not probe.eq(var):
            arrays = (var.ctx.ref(), (z3.Ast * 1)(var.as_ast()), (z3.Ast * 1)(probe.as_ast()),
                      probe)
    if len(table) > 50_000:
        table.clear()
    table[var.get_id()] = (var, arrays)
    return arrays


def _probe(var) -> z3.ExprRef:
    """A constant of `var`'s sort that no model variable is (one per sort and context)."""
    sort = var.sort()
    key = (id(var.ctx), sort.get_id())
    table = _table("_PROBES", var.ctx)
    p = table.get(key)
    if p is None:
        p = table[key] = z3.Const("argus.verify.tagdomain.mentions!probe", sort)
    return p


def substitute(term, *pairs):
    """`z3.substitute(term, *pairs)` without the Python wrapper's per-call checks (Z3 itself
    checks that each pair has one sort and raises otherwise)."""
    if not pairs:
        return term
    return Substitution(pairs)(term)


class Substitution:
    """One substitution applied to many terms (a record's fields, bounds and conditions): the
    C arrays are built once, and a term that does not mention any replaced constant comes back
    as the same Python object (no new wrapper). Building a record by renaming a memoized one
    applies one substitution to every term of the record: per-term arrays and wrappers were
    a third of the FA3 attention kernels' model building (cProfile)."""

    __slots__ = ("n", "frm", "to", "ctx", "ref", "keep")

    def __init__(self, pairs):
        pairs = list(pairs)
        self.n = len(pairs)
        self.frm, self.to = (z3.Ast * self.n)(), (z3.Ast * self.n)()
        for i, (a, b) in enumerate(pairs):
            self.frm[i], self.to[i] = a.as_ast(), b.as_ast()
        self.ctx = pairs[0][0].ctx if pairs else None
        self.ref = self.ctx.ref() if pairs else None
        self.keep = pairs   # the replaced and replacing terms stay alive with the arrays

    def __call__(self, term):
        if self.n == 0 or not isinstance(term, z3.ExprRef):
            return term
        a = term.as_ast()
        got = z3.Z3_substitute(self.ref, a, self.n, self.frm, self.to)  # raises on a bad sort
        # the wrapper class _to_expr_ref would pick, without its sort inspection: a
        # substitution keeps the sort, so a Boolean stays a BoolRef and an integer term that
        # is not a numeral an ArithRef
        return self._wrap(term, got)

    def _wrap(self, term, got):
        if _ast_id(self.ref, got) == _ast_id(self.ref, term.as_ast()):
            return term
        if isinstance(term, z3.BoolRef) or (type(term) is z3.ArithRef and
                                            _ast_kind(self.ref, got) != z3.Z3_NUMERAL_AST):
            return type(term)(got, self.ctx)
        return _to_expr_ref(got, self.ctx)

    def many(self, terms: list) -> list:
        """[self(t) for t in terms], in one pass of Z3's substitution over all of them: the
        terms of a record share most of their subterms (the index arithmetic, the writers'
        conditions), and each Z3_substitute call walks its term with a cache of its own, so
        per-term calls walked the shared part once per term (the renaming of memoized records
        was most of the FA3 attention kernels' model building). The terms are packed as the
        arguments of one application of an uninterpreted Boolean function over their sorts
        (never asserted or solved: a carrier, read back argument by argument)."""
        at = [i for i, t in enumerate(terms) if isinstance(t, z3.ExprRef)]
        if self.n == 0 or len(at) < 2:
            return [self(t) for t in terms]
        ref = self.ref
        app = _pack(self.ctx, [terms[i] for i in at])
        got = z3.BoolRef(z3.Z3_substitute(ref, app.as_ast(), self.n, self.frm, self.to),
                         self.ctx)   # raises on a bad sort; the wrapper keeps `got` alive
        out = list(terms)
        g = got.as_ast()
        for k, i in enumerate(at):
            out[i] = self._wrap(terms[i], _app_arg(ref, g, k))
        return out


def _pack(ctx, terms: list) -> z3.BoolRef:
    """One term holding `terms` (z3 terms of any sorts) as its arguments, in order: an
    application of an uninterpreted Boolean function over their sorts (`_carrier`), never
    asserted or solved, so that one pass of a C-level operation covers them all."""
    ref = ctx.ref()
    args = (z3.Ast * len(terms))(*[t.as_ast() for t in terms])
    sorts = tuple(_get_sort(ref, args[k]) for k in range(len(terms)))
    decl = _carrier(ctx, sorts)   # (held while its ast is used)
    return z3.BoolRef(z3.Z3_mk_app(ref, decl.ast, len(terms), args), ctx)


_CARRIERS: dict = {}


def _carrier(ctx, sorts: tuple):
    """The function declaration `Substitution.many` packs terms of these sorts with (kept
    alive with its sorts), one per context and sort signature."""
    ref = ctx.ref()
    # the sorts' addresses: unique while they live, and the entry keeps them alive
    key = (id(ctx),) + tuple(s.value for s in sorts)
    table = _table("_CARRIERS", ctx)
    hit = table.get(key)
    if hit is None:
        doms = (z3.Sort * len(sorts))(*sorts)
        decl = z3.FuncDeclRef(z3.Z3_mk_func_decl(
            ref, z3.Z3_mk_string_symbol(ref, f"argus.verify.tagdomain!carrier{len(table)}"),
            len(sorts), doms, z3.BoolSort(ctx).ast), ctx)
        hit = table[key] = (decl, [z3.SortRef(s, ctx) for s in sorts])
    return hit[0]


def _raw(wrapper):
    """The C function behind a z3core wrapper, without its error check: for getters that
    cannot fail on a live AST."""
    return wrapper.__defaults__[0].f


_ast_id = _raw(z3.z3core.Z3_get_ast_id)
_ast_kind = _raw(z3.z3core.Z3_get_ast_kind)
_get_sort = _raw(z3.z3core.Z3_get_sort)
_num_args = _raw(z3.z3core.Z3_get_app_num_args)
_app_arg = _raw(z3.z3core.Z3_get_app_arg)
_app_decl = _raw(z3.z3core.Z3_get_app_decl)
_decl_kind = _raw(z3.z3core.Z3_get_decl_kind)
_decl_name = _raw(z3.z3core.Z3_get_decl_name)
_symbol_string = z3.z3core.Z3_get_symbol_string   # (the wrapper decodes the C string)


def conj(*args) -> z3.BoolRef:
    """z3.And(*args): the same term, without the Python wrapper's pairwise coercion of its
    arguments (the wrapper's cost grows with their number); anything but z3 Booleans goes
    through z3.And."""
    if not args or not all(isinstance(a, z3.BoolRef) for a in args):
        return z3.And(*args)
    ctx = args[0].ctx
    arr = (z3.Ast * len(args))(*[a.as_ast() for a in args])
    return z3.BoolRef(z3.Z3_mk_and(ctx.ref(), len(args), arr), ctx)


def term_name(t) -> str:
    """`str(t)`, without z3's Python printer for constants (where they are the same), read
    through the C API (the Python wrappers' decl() objects cost more than the lookup)."""
    if isinstance(t, z3.ExprRef):
        ctx, a = t.ctx.ref(), t.as_ast()
        if z3.Z3_get_ast_kind(ctx, a) == z3.Z3_APP_AST and z3.Z3_get_app_num_args(ctx, a) == 0:
            d = z3.Z3_get_app_decl(ctx, a)
            if z3.Z3_get_decl_kind(ctx, d) == z3.Z3_OP_UNINTERPRETED:
                sym = z3.Z3_get_decl_name(ctx, d)
                if z3.Z3_get_symbol_kind(ctx, sym) == z3.Z3_INT_SYMBOL:
                    return f"k!{z3.Z3_get_symbol_int(ctx, sym)}"
                return z3.Z3_get_symbol_string(ctx, sym)
    return str(t)


def free_consts(term) -> set[str]:
    """Names of the uninterpreted constants in a term (quantifier bodies included), a fresh
    set the caller may change (`const_names`: the walk is remembered per term)."""
    if not isinstance(term, z3.ExprRef):
        return set()
    return set(const_names(term))


def const_names(t: z3.ExprRef) -> frozenset:
    """The names free_consts returns, through the solver's walk of the C API
    (`solver.ordered_consts`, itself remembered per term), with z3's own spelling of a
    symbol (`k!N` for an integer one). Why: the walk through the Python wrappers (a
    wrapper object per subterm) was most of the decompositions' Python time on a model
    premise (a raster's decode, hundreds of nodes: rowbox TMA conv, profiled), and free_consts
    is asked again of the same store offsets and premises (163 calls on the halo TMA conv)."""
    ctx = t.ctx
    ref = ctx.ref()
    out = set()
    for _, a in solver.ordered_consts(t):
        sym = z3.Z3_get_decl_name(ref, z3.Z3_get_app_decl(ref, a))
        out.add(f"k!{z3.Z3_get_symbol_int(ref, sym)}"
                if z3.Z3_get_symbol_kind(ref, sym) == z3.Z3_INT_SYMBOL
                else z3.Z3_get_symbol_string(ref, sym))
    return frozenset(out)


@dataclass(frozen=True)
class Record:
    """The tags of one element: named fields, when it is defined, and where it came from."""

    fields: dict = field(default_factory=dict)
    defined: z3.BoolRef = field(default_factory=lambda: z3.BoolVal(True))
    cond: tuple[z3.BoolRef, ...] = ()   # premises on auxiliary variables (always assumed)
    source: str = ""
    provenance: tuple = ()              # (condition, "what wrote it, where") per candidate write

    def get(self, name: str) -> TagVal | None:
        return self.fields.get(name)

    def with_fields(self, fields: dict) -> Record:
        return replace(self, fields=fields)


class Memo:
    """Whether records may be memoized now: not while a model is being built (a record
    computed mid-walk may not see writes walked later)."""

    building = 0


def memoized_record(fn):
    """`fn` (element index -> Record) computing each index's record once. A record's
    auxiliary variables (reduction variables, a producer's loop indices seen from a reader) are
    fresh per instantiation, so two instantiations never alias (module docstring): a repeated
    call gets the first record with every fresh variable its computation created renamed to a
    new fresh one, which is the record a second computation would build. Variables created
    outside it (model variables, opaque scalars) are shared, as a recomputation shares them.

    Keyed by the index up to a renaming of its fresh variables (`_index_key`): the checks ask
    for an element at fresh index variables (each obligation its own m, n, kk), so keyed by
    the terms alone every obligation rebuilt the whole record DAG below a tile (the softmax and
    the second wgmma of an attention kernel: two thirds of its verification). A fresh variable
    made after the model was built (named "!g", `fresh_int`) is held by no transfer function's
    closure, so `fn` sees it only through the index and treats it as an opaque term: the record
    at index vars (y1, ..) is the record at (x1, ..) with x_i replaced by y_i (one simultaneous
    substitution, with the auxiliaries renamed as above). Model variables, the walk's own fresh
    variables and numerals are keyed by identity (z3 hash-conses terms: equal ids, equal
    terms); the index is kept alive with the entry so an id is never reused for another
    term."""
    if getattr(fn, "memoized", False):
        return fn
    memo: dict = {}

    def wrapped(idx):
        global _created
        if Memo.building:
            return fn(idx)
        key, gen, keep = _index_key(idx)
        stand: dict = {}   # a stand-in variable's id -> the index term it stands for
        if GENERALIZE_TERMS and any(k[0] == 3 for k in key):
            # an index term that holds fresh variables but is not one (`8 + e0`, a row
            # segment of a TMA-store epilogue; `kk + 64`): the record at a fresh variable
            # in its place, with the variable := the term (`_at_terms`)
            idx, stand = _at_terms(idx, key)
            key, gen, keep = _index_key(idx)
        hit = memo.get(key)
        if hit is not None:
            keys, rec, own, first, filtered = hit
            if not filtered:
                # at the first hit (a record never asked for again is never printed)
                own = occurring(rec, own)
                memo[key] = (keys, rec, own, first, True)
            # (a stand-in's place takes its term at once: one substitution pass)
            pairs = [(a, stand.get(_ast_id(b.ctx_ref(), b.as_ast()), b))
                     for a, b in zip(first, gen)
                     if _ast_id(a.ctx_ref(), a.as_ast()) != _ast_id(b.ctx_ref(), b.as_ast())]
            return _renamed(rec, own, pairs)
        outer = _created is None
        if outer:
            _created = []
        start = len(_created)
        try:
            rec = fn(idx)
            own = tuple(_created[start:])
        finally:
            if outer:
                _created = None
        # renamed at each hit: only the auxiliaries the record holds (`occurring`)
        memo[key] = ((tuple(idx), keep), rec, own, gen, False)
        if stand:
            return _renamed(rec, (), [(y, stand[_ast_id(y.ctx_ref(), y.as_ast())])
                                      for y in gen if _ast_id(y.ctx_ref(), y.as_ast()) in stand])
        return rec

    wrapped.memoized = True
    return wrapped


GENERALIZE_TERMS = True   # `_at_terms` on (tests compare records built both ways)


def _at_terms(idx, key) -> tuple[tuple, dict]:
    """(the index `memoized_record` computes and keys in place of `idx`, {a stand-in's id:
    the term it stands for}): each component of `idx` of key kind 3 (`_index_key`: a term
    that holds fresh "!g" variables but is not one, `8 + e0`) replaced by a new fresh
    variable y. The record at `idx` is then the record at y with y := the term (at a miss,
    one substitution of the new record; at a hit, in the hit's one renaming pass).

    Why: keyed by the term, indices that differ only in a numeral (the 8 row segments of
    the halo TMA conv's store epilogue, `8 s + e0`: one store a row of the box) each built
    the accumulator's whole record again (8 x ~27 ms of the kernel's 1.7 s); at y the
    first builds it and the others rename it.

    Exact under `memoized_record`'s own premise: a fresh "!g" variable is held by no
    transfer function's closure, so `fn` reads y only as an opaque term; every term it
    builds at y is then a term over y, and the record it would build at the term t is that
    record with y := t (one simultaneous substitution; t's own fresh variables are not the
    record's auxiliaries, which the computation makes). tests/verify/test_record_memo.py
    compares the records of the halo TMA conv's 8 row segments built both ways: equal up
    to the renaming of their auxiliaries (canonical renaming; a record shaped differently
    would have to be equal in value, z3)."""
    stand, at = {}, []
    fresh = [_fresh_ids(x) for x in idx]
    for d, (x, k) in enumerate(zip(idx, key)):
        # a term whose fresh variables another component also holds ((i + 8, i)) keeps its
        # place: at y the record would lose that relation, and a transfer function that
        # tells components apart by their terms (equal, zero) is only shown exact on
        # independent ones (h241 review)
        if k[0] == 3 and not any(fresh[d] & fresh[o] for o in range(len(idx)) if o != d):
            y = fresh_int("argus.verify.tagdomain!at")
            stand[_ast_id(y.ctx_ref(), y.as_ast())] = x
            at.append(y)
        else:
            at.append(x)
    return tuple(at), stand


def _fresh_ids(x) -> set[int]:
    """The ids of the generalizable fresh variables in an index component (none for a
    numeral or a model term)."""
    if not isinstance(x, z3.AstRef):
        return set()
    ref, a = x.ctx_ref(), x.as_ast()
    if _generalizable(ref, a):
        return {_ast_id(ref, a)}
    found: list = []
    _gen_consts(ref, a, found)
    return {i for i, _ in found}


# canonical stand-ins for the fresh variables of an index term (`_index_key`): never in a
# record, only in memo keys
_PLACEHOLDERS: list = []


def _placeholder(i: int, ctx):
    """Placeholder i of the z3 context `ctx` (that of the index term it replaces a variable
    of: a placeholder of another context would not substitute into it)."""
    table = _table("_PLACEHOLDERS", ctx)
    while len(table) <= i:
        table.append(z3.Int(f"argus.verify.tagdomain!index{len(table)}", ctx))
    return table[i]


def _generalizable(ref, a) -> bool:
    """Whether raw ast `a` is a fresh Int variable made after the model was built ("!g")."""
    if _ast_kind(ref, a) != z3.Z3_APP_AST or _num_args(ref, a) != 0:
        return False
    d = _app_decl(ref, a)
    if _decl_kind(ref, d) != z3.Z3_OP_UNINTERPRETED:
        return False
    sym = z3.Z3_get_decl_name(ref, d)
    if z3.Z3_get_symbol_kind(ref, sym) != z3.Z3_STRING_SYMBOL:
        return False
    name = z3.Z3_get_symbol_string(ref, sym)
    at = name.rfind("!g")
    return at >= 0 and name[at + 2:].isdigit()


def _index_key(idx) -> tuple:
    """(key, gen, keep) of an element index: `gen` its generalizable fresh variables in order
    of first occurrence, `key` the index with each replaced by its position (an index term
    that contains one but is not one, `kk + 64`, by the id of the term with placeholders
    substituted, kept alive in `keep`), numerals and other terms by id."""
    key, gen, keep = [], [], []
    pos: dict[int, int] = {}
    for x in idx:
        if not isinstance(x, z3.AstRef):
            key.append((1, x))
            continue
        ref, a = x.ctx_ref(), x.as_ast()
        if _generalizable(ref, a):
            i = _ast_id(ref, a)
            if i not in pos:
                pos[i] = len(gen)
                gen.append(x)
            key.append((2, pos[i]))
            continue
        found: list = []
        _gen_consts(ref, a, found)
        if not found:
            key.append((0, _ast_id(ref, a)))
            continue
        for i, c in found:
            if i not in pos:
                pos[i] = len(gen)
                gen.append(_to_expr_ref(c, x.ctx))
        sub = Substitution([(gen[pos[i]], _placeholder(pos[i], x.ctx)) for i, _ in found])
        t = sub(x)
        keep.append(t)
        key.append((3, _ast_id(ref, t.as_ast())))
    return tuple(key), tuple(gen), tuple(keep)


def _gen_consts(ref, root, found: list) -> None:
    """(id, raw ast) of the generalizable variables under `root`, in order of first
    occurrence (an index term: a handful of nodes)."""
    todo, seen = [root], set()
    while todo:
        a = todo.pop()
        i = _ast_id(ref, a)
        if i in seen:
            continue
        seen.add(i)
        if _ast_kind(ref, a) != z3.Z3_APP_AST:
            continue
        n = _num_args(ref, a)
        if n:
            todo.extend([_app_arg(ref, a, k) for k in range(n - 1, -1, -1)])
        elif _generalizable(ref, a):
            found.append((i, a))


def with_fresh(compute):
    """(compute(), the fresh variables it created, each with the stem of its name): a
    computation's own auxiliaries, which a record built from it renames apart per
    instantiation (`instantiate`)."""
    global _created
    outer = _created is None
    if outer:
        _created = []
    start = len(_created)
    try:
        out = compute()
        own = tuple(_created[start:])
    finally:
        if outer:
            _created = None
    return out, own


# below this many auxiliaries a record renames them all (printing it costs more)
OCCURRING_MIN = 16
# a constant `occurring` prints with every record and must find among the declarations
_SENTINEL = "argus.verify.tagdomain!occurring"


def occurring(rec: Record, own: tuple) -> tuple:
    """The (variable, stem) pairs of `own` that occur in `rec`'s terms, or a superset.

    A computation creates auxiliaries for every sub-record it builds, and most never reach its
    result (a wgmma's k variable is replaced by the reduction's bound one; a writer's loop
    index of a field that is dropped): of the 27k variables the renamings of the FA3 d 256
    causal kernel created, 80% occurred nowhere in their record, and since each memoized
    record's auxiliaries include what its sub-records' renamings created, the unused ones
    compounded. Renaming a variable that does not occur is the identity, so only these are
    renamed per instance (`memoized_record`, `Model._read_tma_at`).

    The constants of the record's terms are listed by Z3's SMT-LIB printer (its declarations;
    one C-level pass over the shared DAG, about 100x faster than a walk through the Python
    API). Never fewer than occur: a variable whose printed symbol this does not recognize
    (an unusual name) counts as occurring, and a sentinel constant packed with the terms must
    be recognized, else every variable counts (a printer that declares constants some other
    way would otherwise drop them all: not renamed, instances would share them)."""
    if len(own) < OCCURRING_MIN:
        return own
    return occurring_in(_record_terms(rec), own)


def occurring_in(terms: list, own: tuple) -> tuple:
    """The (variable, stem) pairs of `own` that occur in `terms`, or a superset (`occurring`,
    without its size threshold)."""
    if not own:
        return ()
    terms = [t for t in terms if isinstance(t, z3.ExprRef)]
    if not terms:
        return ()
    ctx = terms[0].ctx
    app = _pack(ctx, terms + [z3.Int(_SENTINEL, ctx)])
    text = z3.Z3_benchmark_to_smtlib_string(ctx.ref(), "", "", "unknown", "", 0, None,
                                            app.as_ast())
    declared = set()
    end = text.find("\n(assert")   # the declarations come first
    for line in text[:end if end >= 0 else len(text)].split("\n"):
        if line.startswith("(declare-fun ") and " () " in line:
            declared.add(line[len("(declare-fun "):line.rindex(" () ")])
        elif line.startswith("(declare-const ") and line.count(" ") == 2:
            declared.add(line[len("(declare-const "):line.rindex(" ")])
    if _SENTINEL not in declared:
        return own   # declarations this does not read: rename every auxiliary
    out = []
    ref = ctx.ref()
    for v, stem in own:
        # the constant's name (`term_name`, through the raw getters: a fresh variable has a
        # string symbol)
        name = _symbol_string(ref, _decl_name(ref, _app_decl(ref, v.as_ast())))
        if name in declared or f"|{name}|" in declared or not _plain(name):
            out.append((v, stem))
    return tuple(out)


def referenced_conds(fields: dict, defined, provenance, parts) -> tuple:
    """The conditions a record built from sub-records keeps: of each part (a sub-record, the
    fresh variables its computation created), all of them when one of those variables occurs
    in the record's fields, `defined` or provenance, else none.

    A part's conditions constrain its own auxiliaries (a TMA read's writer loop indices, a
    reduction's variables) and the model's variables. When a combination dropped every term
    that holds those auxiliaries (`combine` keeps one point lineage of a field: the K reads of
    a wgmma's other k-slices, a broadcast row sum's lineage beside the accumulator's), the
    conditions only say that some value of them exists, and every query carried them to the
    solver (a store of the FA3 d 256 kernel's output: 2,800 premises, most of them about
    auxiliaries no claim can see). Dropping premises is sound: a proof from fewer premises is
    a proof from all of them.

    The first part a field of the record holds a term of (the very object: the lineage
    `combine` kept) keeps its conditions unsearched; another part's auxiliaries can only be in
    the record's terms that are that part's objects (a model term every read shares, a field
    only it has) or no part's (`defined`, provenance, fields computed anew: a mask's `live`),
    which alone are searched (`occurring_in`: one print of those terms, not of the whole
    record)."""
    def field_terms(fs):
        for v in fs.values():
            yield v.term
            yield from v.bound
            yield from v.cond

    held = {id(t): t for t in field_terms(fields)}
    keep, search, first = [], [], True
    for rec, own in parts:
        mine = [held[id(t)] for t in field_terms(rec.fields) if id(t) in held]
        if not own or (first and mine):
            first = first and not mine
            keep.append(True)
            continue
        keep.append(False)
        search.extend(mine)
    if not all(keep):
        mine = {id(t) for rec, _ in parts for t in field_terms(rec.fields)}
        search += [t for t in field_terms(fields) if id(t) not in mine]
        search += [defined] + [c for c, _ in provenance]
        own_all = tuple(x for (_, o), k in zip(parts, keep) if not k for x in o)
        live = {_ast_id(v.ctx_ref(), v.as_ast()) for v, _ in occurring_in(search, own_all)}
        keep = [k or any(_ast_id(v.ctx_ref(), v.as_ast()) in live for v, _ in o)
                for (_, o), k in zip(parts, keep)]
    return tuple(c for (rec, _), k in zip(parts, keep) if k for c in rec.cond)


def _plain(name: str) -> bool:
    """Whether the SMT-LIB printer writes `name` as itself or as |name| (printable ASCII, no
    bar or backslash, which it would escape)."""
    return name.isascii() and name.isprintable() and "|" not in name and "\\" not in name


def _record_terms(rec: Record) -> list:
    """Every term of a record, in the order `_renamed` reads them back: per field its term,
    bounds and conditions; then defined, cond, provenance."""
    terms: list = []
    for v in rec.fields.values():
        terms.append(v.term)
        terms.extend(v.bound)
        terms.extend(v.cond)
    terms.append(rec.defined)
    terms.extend(rec.cond)
    terms.extend(c for c, _ in rec.provenance)
    return terms


def instantiate(rec: Record, own: tuple, pairs=()) -> Record:
    """`rec` with `pairs` substituted and its own fresh variables renamed to new ones."""
    return _renamed(rec, own, list(pairs))


def _renamed(rec: Record, own: tuple, extra: list | None = None) -> Record:
    if not own and not extra:
        return rec
    sub = Substitution((extra or []) + [(v, fresh_int(stem)) for v, stem in own])
    # every term of the record through one substitution pass (Substitution.many)
    got = iter(sub.many(_record_terms(rec)))
    fields = {}
    for name, v in rec.fields.items():
        term = next(got)
        bound = tuple(next(got) for _ in v.bound)
        cond = tuple(next(got) for _ in v.cond)
        fields[name] = TagVal(term, bound, cond, v.mixed, v.via)
    defined = next(got)
    cond = tuple(next(got) for _ in rec.cond)
    return Record(fields, defined, cond, rec.source,
                  tuple((next(got), who) for _, who in rec.provenance))


# Fields that are built in for bookkeeping and never compared automatically.
# `value`: the integer value of an index tile element (arange and arithmetic on it); `live`:
# 1 where a masking `where(c, x, constant)` kept the element, 0 where it put the constant
# (argus/verify/transfer/tiles.py); `is_neg_inf`, `is_zero`, `not_neg_inf`: 1 where the
# element's value certainly is -inf, 0, not -inf (argus/verify/transfer/values.py). All of
# them describe the element, not its data's coordinates.
META_FIELDS = frozenset({"iter", "step", "stage", "tensor", "value", "live",
                         # what the element's value is (transfer/values.py)
                         "is_neg_inf", "is_zero", "not_neg_inf"})


def is_coordinate_field(name: str) -> bool:
    """Shape-symbol fields (m, k, …); `dim{i}` fields of integer dims are excluded."""
    return name not in META_FIELDS and not is_integer_dim(name)


def is_integer_dim(name: str) -> bool:
    """Whether tag field `name` is an integer dim's: `dim{i}`, the position i of a dim given
    as a number (model.py names a symbolic dim by its symbol, lower-cased, and an integer one
    by its position). Such a field names a position, not an axis: `dim1` of X[NC, 16, 16, 1]
    and of Wt[8, 9] are different axes. A symbol that merely starts with "dim" is a name."""
    return name.startswith("dim") and name[3:].isdigit()


def integer_dim_position(name: str) -> int:
    """The position i of integer-dim field `dim{i}` (`is_integer_dim`)."""
    return int(name[3:])


def reduce_over(val: TagVal, var: z3.ArithRef, lo, hi, note: str = "") -> TagVal:
    """The field after summing/maxing over `var` in [lo, hi): a set when it depends on var."""
    if not val.depends_on(var):
        return val
    v2 = fresh_int(term_name(var).split("!")[0])
    term = substitute(val.term, (var, v2))
    cond = tuple(substitute(c, (var, v2)) for c in val.cond) + (v2 >= lo, v2 < hi)
    mixed = val.mixed + ((note,) if note else ())
    return TagVal(term, val.bound + (v2,), cond, mixed, val.via)


def through(rec: Record, note: str) -> Record:
    """`rec` read through a view (`note` says which, and where): each field remembers it
    (`TagVal.via`), so a field that disagrees with where its element goes names the view that
    selected it as well as the op that wrote it. Messages only: no term changes."""
    if not rec.fields:
        return rec
    return replace(rec, fields={k: replace(v, via=v.via + (note,))
                                for k, v in rec.fields.items()})


def joined_via(*vals: TagVal) -> tuple[str, ...]:
    """The `via` notes of several lineages of one field, each once, in order."""
    return tuple(dict.fromkeys(n for v in vals for n in v.via))


# the `mixed` note of a point met pointwise with another point of the same field (two
# elements of one dim combined: transfer/tiles.elementwise)
POINTWISE = "pointwise "


def combine(a: TagVal, b: TagVal, note: str) -> TagVal:
    """Pointwise combination of two lineages of the same field: the point one stays primary,
    a reduced one is remembered as mixed in."""
    if a.is_point or not b.is_point:
        return replace(a, mixed=a.mixed + ((note,) if not b.is_point else ()) + b.mixed)
    return replace(b, mixed=b.mixed + (note,) + a.mixed)


def align_operands(ra: Record, rb: Record, m, n, kk, tensors) -> Record:
    """B's record of a wgmma with the fields that share a name with A's but not its
    coordinate renamed `<field>@<tensor>`. The DSL asks only that one dim name have one size
    (docs/dsl.md); two tensors may use it for two coordinates: self-attention's Q["S", D] and
    K["S", D] (the query and the key, of one length). Tags are named by dim, so the score
    S = Q K^T would hold the query row and the key column under one `s`: A's lineage kept,
    the key lost, and P V (P's key against V's row `s`) compares the query with the key.
      * A's `f` follows the accumulator row m, B's `f` (another tensor) the column n: B's
        becomes `f@B` (`s@K`: the key, apart from the query);
      * A's `f` follows m and A holds exactly one `f@T` that follows k (P's key, named by
        the earlier product): B's `f` becomes that name (V's row is P's key), so that the
        two are compared as the contracted coordinate, whatever B's follows.
    B reading A's own tensor rows keeps the name (wgmma.provenance's A Aᵀ), and so does an
    operand transposed by mistake (A's `k` following m with no `k@T` beside it: the loads'
    swapped coordinates are wgmma.agree's to report). Nothing changes when no name is
    shared this way: a kernel that names its dims apart reads as before. Only tensor
    coordinates (the dim names of `tensors`, the model's TensorInfo list) are renamed: a user
    tag (`expert`) is meant to agree between A's rows and B's columns."""
    tensor_names = [t.name for t in tensors]
    coordinates = {x for t in tensors for x in t.field_names}

    def follows(val, var) -> bool:
        return mentions(val.term, var)

    def tensor(rec):
        t = rec.fields.get("tensor")
        if t is None:
            return None
        t = z3.simplify(t.term)
        return t.as_long() if z3.is_int_value(t) else None

    ta, tb = tensor(ra), tensor(rb)
    if tb is None:
        return rb
    renames = {}
    for name in set(ra.fields) & set(rb.fields):
        if name in META_FIELDS or name not in coordinates:
            continue
        fa, fb = ra.fields[name], rb.fields[name]
        if not (fa.is_point and fb.is_point) or not follows(fa, m) or follows(fa, kk):
            continue
        keyed = [x for x, v in ra.fields.items() if x.startswith(name + "@")
                 and v.is_point and follows(v, kk)]
        if len(keyed) == 1:
            # A contracts the `f` coordinate it holds under `f@T`: B's `f` is compared with
            # it (V's row with P's key; a V read along n instead is wgmma.agree's)
            renames[name] = keyed[0]
        elif follows(fb, n) and not follows(fb, kk):
            if ta is not None and ta != tb and 0 <= tb < len(tensor_names):
                renames[name] = f"{name}@{tensor_names[tb]}"
    if not renames:
        return rb
    fields = {renames.get(k, k): v for k, v in rb.fields.items()}
    return replace(rb, fields=fields)


# a verification run's own z3 context (`solver.own_context`) starts these afresh: the terms
# and sorts they hold are the outer context's, and the fresh variables' numbering restarts,
# so a run names its variables the same whatever ran before it in the process
for _name, _new in (("_PROBES", dict), ("_PROBE_ARRAYS", dict), ("_CARRIERS", dict),
                    ("_PLACEHOLDERS", list), ("_INT_SORT", lambda: None),
                    ("_fresh", itertools.count)):
    solver.context_local(sys.modules[__name__], _name, _new)
