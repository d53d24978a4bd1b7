"""The abstract domain of tags: per-element records of named symbolic fields.

Job: say what a tile element or shared-memory element *is* (INVARIANTS.md §3.1): which global
coordinate, iteration, expert … it came from, as z3 Int terms over the kernel's symbols (shape
parameters, program ids, loop indices, warpgroup indices) and the element's index.

A field is a `TagVal`:
  * a point value `term` when every contributor agrees (a loaded element's coordinate);
  * a set `{term : bound variables in range, under cond}` after a reduction or an accumulation
    (a wgmma's k, a row max over columns): `bound` names the reduction variables;
  * `mixed` notes where a reduced value was combined pointwise into it (softmax's x - max(x)),
    kept for messages; the point lineage stays primary.
Auxiliary variables (a producer's loop index seen from the consumer, reduction variables) are
fresh per instantiation and constrained by `cond`, so two instantiations never alias.

Invariant kept: a field's meaning is exactly "the set of values `term` takes over the bound
variables under `cond`"; obligations quantify over it existentially in the negated query,
so every check stays quantifier-free.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import z3
from z3.z3 import _to_expr_ref

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
    v = z3.ArithRef(z3.Z3_mk_const(ref, z3.Z3_mk_string_symbol(ref, f"{stem}!{next(_fresh)}"),
                                   sort.ast), ctx)
    if _created is not None:
        _created.append(v)
    return v


@dataclass(frozen=True)
class TagVal:
    term: z3.ArithRef
    bound: tuple[z3.ArithRef, ...] = ()
    cond: tuple[z3.BoolRef, ...] = ()
    mixed: tuple[str, ...] = ()

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
        ctx, frm, to = arrays
        got = z3.Z3_substitute(ctx, term.as_ast(), 1, frm, to)  # checks sorts, raises
        return not z3.Z3_is_eq_ast(ctx, got, term.as_ast())
    target = var.get_id()
    todo, seen = [term], set()
    while todo:
        t = todo.pop()
        if t.get_id() == target:
            return True
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        todo.extend(t.children())
    return False


_PROBES: dict[tuple, z3.ExprRef] = {}
# var's AST id -> (var, (context, from, to) or None): the substitution arrays `mentions` needs
# for an uninterpreted constant, built once per variable (the entry keeps the variable alive, so
# its id is never another term's); bounded, cleared when full
_PROBE_ARRAYS: dict[int, tuple] = {}


def _probe_arrays(var):
    entry = _PROBE_ARRAYS.get(var.get_id())
    if entry is not None:
        return entry[1]
    arrays = None
    if z3.is_const(var) and var.decl().kind() == z3.Z3_OP_UNINTERPRETED:
        probe = _probe(var)
        if not probe.eq(var):
            arrays = (var.ctx.ref(), (z3.Ast * 1)(var.as_ast()), (z3.Ast * 1)(probe.as_ast()))
    if len(_PROBE_ARRAYS) > 50_000:
        _PROBE_ARRAYS.clear()
    _PROBE_ARRAYS[var.get_id()] = (var, arrays)
    return arrays


def _probe(var) -> z3.ExprRef:
    """A constant of `var`'s sort that no model variable is (one per sort and context)."""
    sort = var.sort()
    key = (id(var.ctx), sort.get_id())
    p = _PROBES.get(key)
    if p is None:
        p = _PROBES[key] = z3.Const("argus.verify.tagdomain.mentions!probe", sort)
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
        if _ast_id(self.ref, got) == _ast_id(self.ref, a):
            return term
        # the wrapper class _to_expr_ref would pick, without its sort inspection: a
        # substitution keeps the sort, so a Boolean stays a BoolRef and an integer term that
        # is not a numeral an ArithRef
        if isinstance(term, z3.BoolRef) or (type(term) is z3.ArithRef and
                                            _ast_kind(self.ref, got) != z3.Z3_NUMERAL_AST):
            return type(term)(got, self.ctx)
        return _to_expr_ref(got, self.ctx)


def _raw(wrapper):
    """The C function behind a z3core wrapper, without its error check: for getters that
    cannot fail on a live AST."""
    return wrapper.__defaults__[0].f


_ast_id = _raw(z3.z3core.Z3_get_ast_id)
_ast_kind = _raw(z3.z3core.Z3_get_ast_kind)


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


def subterms(term):
    """Every distinct subterm of a z3 term (the term included), each once, depth first (a
    shared subterm is visited once, not once per path to it)."""
    todo, seen = [term], set()
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        yield t
        todo.extend(t.children())


def free_consts(term) -> set[str]:
    """Names of the uninterpreted constants in a term."""
    if not isinstance(term, z3.ExprRef):
        return set()
    return {t.decl().name() for t in subterms(term)
            if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED}


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
    Keyed by the index terms' ids (z3 hash-conses terms: equal ids, equal terms); the index is
    kept alive with the entry so an id is never reused for another term."""
    if getattr(fn, "memoized", False):
        return fn
    memo: dict = {}

    def wrapped(idx):
        global _created
        if Memo.building:
            return fn(idx)
        key = tuple((0, x.get_id()) if isinstance(x, z3.AstRef) else (1, x) for x in idx)
        hit = memo.get(key)
        if hit is not None:
            return _renamed(hit[1], hit[2])
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
        memo[key] = (tuple(idx), rec, own)
        return rec

    wrapped.memoized = True
    return wrapped


def with_fresh(compute):
    """(compute(), the fresh variables it created): a computation's own auxiliaries, which a
    record built from it renames apart per instantiation (`instantiate`)."""
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


def instantiate(rec: Record, own: tuple, pairs=()) -> Record:
    """`rec` with `pairs` substituted and its own fresh variables renamed to new ones."""
    return _renamed(rec, own, list(pairs))


def _renamed(rec: Record, own: tuple, extra: list | None = None) -> Record:
    if not own and not extra:
        return rec
    sub = Substitution((extra or []) + [(v, fresh_int(term_name(v).split("!")[0]))
                                        for v in own])

    fields = {name: TagVal(sub(v.term), tuple(sub(b) for b in v.bound),
                           tuple(sub(c) for c in v.cond), v.mixed)
              for name, v in rec.fields.items()}
    return Record(fields, sub(rec.defined), tuple(sub(c) for c in rec.cond), rec.source,
                  tuple((sub(c), who) for c, who in rec.provenance))


# Fields that are built in for bookkeeping and never compared automatically.
# `value`: the integer value of an index tile element (arange and arithmetic on it); `live`:
# 1 where a masking `where(c, x, constant)` kept the element, 0 where it put the constant
# (argus/verify/transfer/tiles.py). Both describe the element, not its data's coordinates.
META_FIELDS = frozenset({"iter", "step", "stage", "tensor", "value", "live"})


def is_coordinate_field(name: str) -> bool:
    """Shape-symbol fields (m, k, …); `dim{i}` fields of integer dims are excluded."""
    return name not in META_FIELDS and not name.startswith("dim")


def reduce_over(val: TagVal, var: z3.ArithRef, lo, hi, note: str = "") -> TagVal:
    """The field after summing/maxing over `var` in [lo, hi): a set when it depends on var."""
    if not val.depends_on(var):
        return val
    v2 = fresh_int(term_name(var).split("!")[0])
    term = substitute(val.term, (var, v2))
    cond = tuple(substitute(c, (var, v2)) for c in val.cond) + (v2 >= lo, v2 < hi)
    mixed = val.mixed + ((note,) if note else ())
    return TagVal(term, val.bound + (v2,), cond, mixed)


def combine(a: TagVal, b: TagVal, note: str) -> TagVal:
    """Pointwise combination of two lineages of the same field: the point one stays primary,
    a reduced one is remembered as mixed in."""
    if a.is_point or not b.is_point:
        return replace(a, mixed=a.mixed + ((note,) if not b.is_point else ()) + b.mixed)
    return replace(b, mixed=b.mixed + (note,) + a.mixed)
