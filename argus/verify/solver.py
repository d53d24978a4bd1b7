"""Solver queries: prove a claim, or return a minimized model; an exhausted budget is `unknown`.

Job: one place where z3 is called, so every obligation gets the same honesty rules
(INVARIANTS.md §3.6): a per-query budget, `unknown` never read as `proven`, and counterexamples
minimized by iterative tightening (push `x < current`, re-check with a small budget;
z3.Optimize stalls on the non-linear `tile * Kt` terms of persistent kernels, tightening does
not).

Budgets are z3 resource units (`rlimit`), never wall time: a verdict, and the work done to
reach it, must not depend on how loaded the machine is (with wall-clock timeouts the verifier
tests flaked under load: a query that takes 60 ms quiet ran out of the 50 ms quick attempt and
then of the 1 s budget). The user-facing knob stays "milliseconds" (`timeout_ms=`,
`ARGUS_VERIFY_TIMEOUT_MS`, default 1000) and is converted at a fixed rate, `UNITS_PER_MS`, so
the same knob gives the same answers on every machine. z3's effort on a query varies with its
random seed (heavy-tailed), so the deciding check is asked again with other seeds
(`SEEDS`) before a query is reported unknown; every seed is fixed, so this is deterministic too.

A query is "premises ∧ ¬(∧ claims)": UNSAT proves every claim for all values of the free
variables; SAT gives a witness and the list of claims it violates.

Proofs are remembered per process, keyed by the query up to renaming of its constants
(alpha-equivalence: the formula with every uninterpreted constant renamed to `argus!c<i>`, with its
sort, in order of first occurrence; z3 shares equal terms, so the renamed formula's AST id is
the key). One kernel poses many identical queries (the race check of each of a TMA-store
epilogue's column blocks, each with fresh instance variables: 187 queries, 21 distinct), and
schedules of one kernel pose more (the store-injectivity query does not depend on the stage
count or on B's layout); an identical formula has the same validity, so only proofs are
reused — violations and unknowns are always solved again. The key is computed before any
solving (a walk of the formula through the C API and one substitution). `ARGUS_VERIFY_CACHE=0`
turns it off; `clear_cache()` empties it (the timing script measures runs that start empty).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import z3

DEFAULT_TIMEOUT_MS = 1000
# the tier of a proof by rewriting alone (`prove`, step 0)
REWRITTEN = "simplify"
# z3 resource units per millisecond of budget: a calibration only (z3 4.x on this project's
# 2-core machine spends 3,000-10,000 units per ms of CPU on the verifier's queries, measured
# on the FA3 attention and GEMM queries; 5,000 makes the default budget about the old 1 s)
UNITS_PER_MS = 5000
# the random seeds the deciding check tries, in order, while z3 answers unknown
SEEDS = (0, 1, 2)


def default_timeout_ms() -> int:
    """ARGUS_VERIFY_TIMEOUT_MS (default 1000): the per-query budget in milliseconds' worth of
    resource units (`rlimit_of`), not a wall-clock timeout."""
    return int(os.environ.get("ARGUS_VERIFY_TIMEOUT_MS", DEFAULT_TIMEOUT_MS))


def rlimit_of(timeout_ms: int) -> int:
    """The z3 resource limit of a budget of `timeout_ms` (a fixed conversion: no wall clock)."""
    return max(1, int(timeout_ms)) * UNITS_PER_MS


def default_rlimit() -> int:
    return rlimit_of(default_timeout_ms())


# A wall-clock backstop behind the resource limit, far above what the budget costs (see
# `_limit`): z3's non-linear arithmetic (nlsat) can run for many minutes between resource-limit
# checkpoints, so its rlimit is not a bound there. Seen on 2026-12-02: a conv kernel's
# store.once query under one hash seed ran 15 minutes in one check with rlimit 20M (about 4 s
# of nominal budget) and stalled the CI suite; under another seed it took seconds.
BACKSTOP_FACTOR = 20
BACKSTOP_MIN_MS = 10_000


def backstop_ms(rlimit: int) -> int:
    """The wall-clock cap of a check with `rlimit` units: BACKSTOP_FACTOR times the budget's
    nominal milliseconds, at least BACKSTOP_MIN_MS."""
    return max(BACKSTOP_MIN_MS, BACKSTOP_FACTOR * max(1, int(rlimit)) // UNITS_PER_MS)


def _limit(s, rlimit: int, seed: int = 0):
    """A solver limited to `rlimit` resource units per check, with a fixed random seed, and a
    wall-clock backstop (`backstop_ms`) that only a check z3 cannot bound by its rlimit ever
    reaches: then the answer is unknown instead of a hang (the one place a verdict can depend
    on the machine's speed; every check that respects its rlimit stays deterministic)."""
    s.set("rlimit", max(1, int(rlimit)))
    s.set("timeout", backstop_ms(rlimit))
    s.set("random_seed", seed)
    return s


# for checks outside this module that make their own solver (check_layout, requires)
limited = _limit


@dataclass
class Outcome:
    """What one query established. status: "proven", "violated" or "unknown"."""

    status: str
    ms: float
    model: z3.ModelRef | None = None
    violated: list[str] = field(default_factory=list)
    reason: str = ""
    theory: str = ""


@dataclass
class Stats:
    """Per-check counters, reported in notes and docs/verify.md timings."""

    queries: int = 0
    ms: float = 0.0
    cached: int = 0          # queries answered by an earlier proof of the same formula
    rewritten: int = 0       # queries whose claims z3's simplifier rewrites to true (no solver)
    derived: int = 0         # obligations proven from proofs of others (not queried)
    by_theory: dict[str, int] = field(default_factory=dict)

    def add(self, theory: str, ms: float) -> None:
        self.queries += 1
        self.ms += ms
        self.by_theory[theory] = self.by_theory.get(theory, 0) + 1


def _theory(terms: Sequence[z3.ExprRef]) -> str:
    """QF_BV when bit-vectors appear, LIA/NIA otherwise (for reports and the portfolio).

    Z3's probe of a goal's bit-vector constants, in C (a walk of the claims through the Python
    API, even the raw one, cost 5% of an attention kernel's verification, 100x the probe): a
    bit-vector term without a bit-vector constant is ground and simplifies to a numeral."""
    if not terms:
        return "LIA"
    global _BV_CONSTS
    ctx = terms[0].ctx
    if ctx is _z3._main_ctx:
        if _BV_CONSTS is None:
            _BV_CONSTS = z3.Probe("num-bv-consts", ctx)
        probe = _BV_CONSTS
    else:   # a probe of another context must not read this goal (`context_table`)
        probe = z3.Probe("num-bv-consts", ctx)
    g = z3.Goal(ctx=ctx)
    for t in terms:
        g.add(t)
    return "QF_BV" if probe(g) > 0 else "LIA"


_BV_CONSTS = None   # the probe, made at the first use (no z3 work at import)


def _assert_all(s: z3.Solver, terms: Sequence[z3.BoolRef]) -> None:
    """`s.add(*terms)` for terms already known to be z3 booleans (`_as_bool`), without the
    Python wrapper's per-term cast."""
    ctx = s.ctx.ref()
    for t in terms:
        z3.Z3_solver_assert(ctx, s.solver, t.as_ast())


_PROOFS: OrderedDict[tuple[str, int], tuple[z3.ExprRef, Outcome]] = OrderedDict()
_PROOFS_MAX = 50000
# queries with more premises skip the proof cache (no key, nothing kept): those are the ones
# carrying whole tile records (an attention kernel's broadcast, k-once and store queries:
# 500-2,800 premises), whose fresh record variables are never alpha-equivalent to another
# query's (none hit, in the attention, GEMM and MoE schedules measured: every hit had <= 30
# premises; 13-31 in the TMA-store GEMM and FA3 d 256 causal, 2026-12-02), and whose
# canonical walk was a tenth of the FA3 d 256 kernel's verification. 64, not 256, since
# records keep only the conditions their terms reference (tagdomain.referenced_conds): the
# attention kernels' record queries shrank to 60-550 premises, and walking them for a key no
# other query shares cost 7% of the FA3 d 256 causal kernel's verification
CACHE_MAX_PREMISES = 64


# other modules' tables emptied with the proofs (once_split's rewrites)
_CLEAR_HOOKS: list = []


def on_clear_cache(hook) -> None:
    """Call `hook()` whenever `clear_cache` runs."""
    _CLEAR_HOOKS.append(hook)


def clear_cache() -> None:
    """Forget every proof (and the constants listed per premise, the premises made opaque, and
    the facts decided without the solver: `fact_cache`): the next query starts cold."""
    _PROOFS.clear()
    _CONSTS.clear()
    _FACTS.clear()
    _OPAQUE_TERMS.clear()
    _NAMED_TERMS.clear()
    _NAMED_PAIRS.clear()
    _RECENT_MODELS.clear()
    _KNOWN_SETS.clear()
    _POINT_VALUES.clear()
    for hook in _CLEAR_HOOKS:
        hook()


# The module-level tables that hold z3 terms or answers of one z3 context, by module and
# name (`context_local`): `own_context` gives a verification run empty ones and puts the
# caller's back after it. _FACTS is not among them: its decisions are functions of plain
# numbers, the same in every context.
_CONTEXT_LOCAL: list[tuple[object, str, object]] = []
_FRESH: dict[tuple[object, str], object] = {}
_OWN_CONTEXT_DEPTH = 0
# the contexts `own_context` put aside, innermost last: (the context, its tables by (module,
# name)); a term of one of them met during the run is looked up in its own tables
_OUTER: list[tuple[object, dict]] = []
_z3 = z3.z3   # the module whose `_main_ctx` own_context swaps


def context_local(module, name: str, fresh) -> None:
    """Declare `module.name` a table of one z3 context: `fresh()` makes an empty one."""
    _CONTEXT_LOCAL.append((module, name, fresh))
    _FRESH[(module, name)] = fresh


def context_table(module, name: str, ctx):
    """`module.name` (a `context_local` table) of the z3 context `ctx`, the one every lookup
    keyed by AST ids must go through with its term's context (`term.ctx`).

    Why: an AST id is unique within one context only, and the tables are those of one
    context (z3's main context: `own_context` swaps both together). A term of another
    context looked up in them finds another term's entry under its id: a test reading a
    run's obligations after the run (their terms are of the run's own context) got the
    constants of an outer term (`free_consts`), or a canonical substitution of the other
    context's constants (a z3 sort or context error), depending on what ran before.

    The main context's tables are the module's own (the fast path: one identity test). A
    context a run put aside (`own_context`: a term made before the run, used in it) has the
    tables it had then, kept for it and put back after the run. Any other context (one made
    by a caller, or a finished run's) gets an empty table that is not kept: its lookups miss
    and what they remember is dropped. Not kept since a table keeps its terms alive, hence
    their context, and a context left alive changed later runs' findings (docs/verify.md,
    "A z3 context per run"); a weak reference cannot help (the entries hold the context)."""
    if ctx is _z3._main_ctx:
        return getattr(module, name)
    for outer, saved in _OUTER:
        if outer is ctx:
            key = (module, name)
            if key not in saved:   # (a module imported during the run: put back fresh)
                saved[key] = _FRESH[key]()
            return saved[key]
    return _FRESH[(module, name)]()


def _table(name: str, ctx):
    """`context_table` of this module's table `name`."""
    if ctx is _z3._main_ctx:
        return globals()[name]
    return context_table(_THIS, name, ctx)


@contextlib.contextmanager
def own_context():
    """The block runs in a z3 context of its own (z3's main context swapped for a new one,
    every `context_local` table swapped for an empty one, both put back after it); a block
    nested in another runs in the outer one.

    Why: z3's search follows AST ids, and ids are recycled as terms are freed, in an order
    that follows Python's hash-seeded set and dict orders; in one shared context a kernel's
    findings depended on every kernel verified before it in the process and on
    PYTHONHASHSEED (the corpus's persistent/raster_full_groups read three ways: alone, and
    after 114 other kernels under two seeds; docs/verify.md, "Reproducible findings"). In a
    context of its own a run makes the same terms with the same ids whatever ran before.
    The proof cache is one of its tables: its key is an AST id, which a new context
    reuses, so a proof of another context must never be found (and none could be: no term
    is shared between contexts). Terms made in the block belong to its context: a caller
    must not combine them with terms made outside it."""
    global _OWN_CONTEXT_DEPTH
    if _OWN_CONTEXT_DEPTH or os.environ.get("ARGUS_VERIFY_OWN_CONTEXT", "1") == "0":
        # ARGUS_VERIFY_OWN_CONTEXT=0: one shared context, proofs reused between runs (faster
        # where a process verifies one kernel again; findings then depend on the history)
        yield
        return
    saved = {(m, n): getattr(m, n) for m, n, _ in _CONTEXT_LOCAL}
    outer = z3.z3._main_ctx
    for m, n, fresh in _CONTEXT_LOCAL:
        setattr(m, n, fresh())
    z3.z3._main_ctx = z3.Context()
    _OWN_CONTEXT_DEPTH += 1
    _OUTER.append((outer, saved))
    try:
        yield
    finally:
        _OUTER.pop()
        _OWN_CONTEXT_DEPTH -= 1
        z3.z3._main_ctx = outer
        # a module imported in the block declared its tables then: they hold the block's
        # terms, which would keep its context alive (and a later run's z3 reads differently
        # while another context lives: docs/verify.md, "A z3 context per run")
        for m, n, fresh in _CONTEXT_LOCAL:
            setattr(m, n, saved[(m, n)] if (m, n) in saved else fresh())


# decisions made without the solver that are functions of plain numbers (check_layout's
# static layout instances), per kind; emptied with the proofs so timings start cold
_FACTS: dict[str, dict] = {}


def fact_cache(kind: str) -> dict:
    """The process's table of `kind` decisions (key: the numbers they are a function of)."""
    table = _FACTS.setdefault(kind, {})
    if len(table) > _PROOFS_MAX:
        table.clear()
    return table


def _cache_on() -> bool:
    return os.environ.get("ARGUS_VERIFY_CACHE", "1") != "0"


def canonical(premises: Sequence[z3.BoolRef], claims: Sequence[tuple[str, z3.BoolRef]]) \
        -> z3.BoolRef:
    """premises ∧ ¬(∧ claims) with its uninterpreted constants renamed `argus!c0`, `argus!c1`,
    ... in order of first occurrence (pre-order, left to right): alpha-equivalent queries give
    the same term, hence the same AST id while the term is alive. Opaque functions (arity > 0)
    keep their names. Built through the C API.

    One walk per query: a subterm met before (in an earlier premise of this query) is not
    walked again, since its constants are already ordered (the premises of a tile record
    share their index terms: the FA3 d 256 kernel's 123 queries visit 47k distinct nodes
    where walks per premise visited 201k). A premise walked in full (none of its nodes met
    before) is remembered with its constants (`_CONSTS`): the model's premises, common to
    every query of a kernel, are walked once."""
    goal = z3.Not(z3.And([c for _, c in claims])) if claims else z3.BoolVal(False)
    parts = list(premises) + [goal]
    ctx = goal.ctx
    ref = ctx.ref()
    order: dict[int, object] = {}
    seen: set[int] = set()
    table = _table("_CONSTS", ctx)
    for p in parts:
        a = p.as_ast()
        tid = _L.Z3_get_ast_id(ref, a)
        hit = table.get(tid)
        if hit is None:
            out: list = []
            if not _walk_consts(ref, a, seen, out):
                _remember_consts(table, tid, p, out)
            hit = (p, out)
        for i, c in hit[1]:
            if i not in order:
                order[i] = c
    # wrapped at once: the wrapper holds the reference that keeps a new ast alive
    f = z3.BoolRef(z3.Z3_mk_and(ref, len(parts), (z3.Ast * len(parts))(
        *[p.as_ast() for p in parts])), ctx)
    if not order:
        return f
    n = len(order)
    froms = (z3.Ast * n)(*order.values())
    canon = _table("_CANON", ctx)   # (held here: a table not kept holds the constants)
    tos = (z3.Ast * n)(*[_canonical_const(j, z3.Z3_get_sort(ref, a), ctx, canon)
                         for j, a in enumerate(order.values())])
    return z3.BoolRef(z3.Z3_substitute(ref, f.as_ast(), n, froms, tos), ctx)




def _renamed(premises: Sequence[z3.BoolRef], claims: Sequence[tuple[str, z3.BoolRef]]) \
        -> tuple[list[z3.BoolRef], list[tuple[str, z3.BoolRef]]]:
    """The premises and claims with their uninterpreted constants renamed as `canonical`
    names them (`argus!c<i>` in order of first occurrence), each kept a separate term."""
    goal = z3.Not(z3.And([c for _, c in claims])) if claims else z3.BoolVal(False)
    ctx = goal.ctx
    ref = ctx.ref()
    order: dict[int, object] = {}
    for p in list(premises) + [goal]:
        for i, c in _ordered_consts(p):
            order.setdefault(i, c)
    if not order:
        return list(premises), list(claims)
    canon = _table("_CANON", ctx)
    pairs = [(z3.z3._to_expr_ref(a, ctx),
              z3.z3._to_expr_ref(_canonical_const(j, z3.Z3_get_sort(ref, a), ctx, canon), ctx))
             for j, a in enumerate(order.values())]
    out = [z3.substitute(p, *pairs) for p in premises]
    # the equalities themselves became `P == P`, `1 == 1`: dropped
    out = [p for p in out if not (z3.is_eq(p) and p.arg(0).eq(p.arg(1)))]
    return out, [(n, z3.substitute(c, *pairs)) for n, c in claims]


class _Raw:
    """The raw C functions behind z3core's wrappers (each wrapper keeps its function as the
    `f` of its default argument): the getters of the walk below cannot fail on a live AST,
    so the wrappers' per-call error check (half the walk's cost, measured) is skipped."""

    def __getattr__(self, name):
        f = getattr(z3.z3core, name).__defaults__[0].f
        setattr(self, name, f)
        return f


_L = _Raw()


def raw() -> _Raw:
    """The C API's getters without their error checks (`_Raw`), for walks of live terms
    outside this module (check_asserts._degree)."""
    return _L
_CONSTS: OrderedDict[int, tuple[z3.ExprRef, list]] = OrderedDict()
_CANON: dict[tuple[int, int], z3.ExprRef] = {}


def _walk_consts(ref, root, seen: set[int], out: list) -> bool:
    """Append (ast id, raw ast) of the uninterpreted constants under `root` to `out`, in
    pre-order, not entering nodes in `seen` (and adding the nodes walked to it). Returns
    whether a node was skipped because it was in `seen` (then `out` is not root's full list)."""
    skipped = False
    todo = [root]
    get_id, kind_of = _L.Z3_get_ast_id, _L.Z3_get_ast_kind
    nargs, arg = _L.Z3_get_app_num_args, _L.Z3_get_app_arg
    while todo:
        a = todo.pop()
        i = get_id(ref, a)
        if i in seen:
            skipped = True
            continue
        seen.add(i)
        kind = kind_of(ref, a)
        if kind == z3.Z3_QUANTIFIER_AST:
            todo.append(_L.Z3_get_quantifier_body(ref, a))
        elif kind == z3.Z3_APP_AST:
            n = nargs(ref, a)
            if n:
                todo.extend(arg(ref, a, k) for k in range(n - 1, -1, -1))
            elif _L.Z3_get_decl_kind(ref, _L.Z3_get_app_decl(ref, a)) == \
                    z3.Z3_OP_UNINTERPRETED:
                out.append((i, a))
    return skipped


def ordered_consts(t: z3.ExprRef) -> list:
    """(ast id, raw ast) of t's uninterpreted constants (`_ordered_consts`), for the
    decompositions that name them (once_split.consts)."""
    return _ordered_consts(t)


def _remember_consts(table, tid: int, t: z3.ExprRef, out: list) -> None:
    """Keep t's constants in `table` (t's context's `_CONSTS`)."""
    table[tid] = (t, out)
    if len(table) > _PROOFS_MAX:
        table.popitem(last=False)


def _ordered_consts(t: z3.ExprRef) -> list:
    """(ast id, raw ast) of t's uninterpreted constants in order of first occurrence,
    remembered per term (the entry keeps the term, so its id is not reused)."""
    ctx = t.ctx
    ref = ctx.ref()
    tid = _L.Z3_get_ast_id(ref, t.as_ast())
    table = _table("_CONSTS", ctx)
    hit = table.get(tid)
    if hit is not None:
        return hit[1]
    out: list = []
    _walk_consts(ref, t.as_ast(), set(), out)
    _remember_consts(table, tid, t, out)
    return out


def _canonical_const(j: int, sort, ctx, table):
    """The raw ast of canonical constant j of `sort`, kept alive in `table` (ctx's _CANON,
    which the caller holds while it uses the ast)."""
    ref = ctx.ref()
    key = (j, z3.Z3_get_ast_id(ref, z3.Z3_sort_to_ast(ref, sort)))
    c = table.get(key)
    if c is None:
        c = z3.z3._to_expr_ref(z3.Z3_mk_const(ref, z3.Z3_mk_string_symbol(ref, f"argus!c{j}"),
                                              sort), ctx)
        table[key] = c
    return c.as_ast()


def prove(premises: Sequence[z3.BoolRef], claims: Sequence[tuple[str, z3.BoolRef]],
          timeout_ms: int | None = None, minimize: Sequence[z3.ExprRef] = (),
          stats: Stats | None = None, minimize_budget_ms: int = 600,
          theory: str | None = None, rlimit: int | None = None,
          proof_only: bool = False) -> Outcome:
    """Prove `premises ⇒ every claim`. On SAT the model is minimized lexicographically over
    `minimize` (Int or BitVec terms, smallest first) and the violated claim names listed.
    Budget: `rlimit` z3 resource units, else `timeout_ms` converted (`rlimit_of`), else the
    default; `minimize_budget_ms` likewise for the minimization. The clock is read for the `ms`
    reported and by the wall-clock backstops (`backstop_ms`; `NAMED_BACKSTOP_MS` on the
    named-divisions attempt), which only cut an attempt short: a miss, never a verdict.

    `proof_only`: for a caller that reads only whether the query is proven (a structural
    question: check_reduce's "is this set one point", a family template, whose members are
    asked themselves when it is not proven). When the quick attempt (step 2) finds the
    negated claim satisfiable, that is a counterexample, which no later tier can turn into a
    proof: "violated" is returned at once, without a model, and the full portfolio (the
    bit-vector translation, the integer re-solve behind it) is not run for a witness nobody
    reads. check_reduce's two non-point sets of FA3-overlap attention: ~0.11-0.13 s each."""
    if rlimit is None:
        rlimit = default_rlimit() if timeout_ms is None else rlimit_of(timeout_ms)
    premises = [_as_bool(p) for p in premises]
    claims = [(n, _as_bool(c)) for n, c in claims]
    t0 = time.perf_counter()
    # 0. claims that hold for every value of every variable: z3's simplifier (an equivalence-
    # preserving rewriter) turns each into true, so no premise is needed and none is read
    # (nor checked for satisfiability: a proof that uses no premise is not vacuous when they
    # are contradictory). Half the queries of the FA3 attention kernels are such: a broadcast
    # operand's batch index against the tile's (`pid2 == pid2`), a slot `n % S` against the
    # reference `n % S`; each asked z3 to load its premises, up to 2,800 record conditions
    if claims and all(z3.is_true(z3.simplify(c)) for _, c in claims):
        ms = (time.perf_counter() - t0) * 1e3
        if stats is not None:
            stats.add(REWRITTEN, ms)
            stats.rewritten += 1
        return Outcome("proven", ms, theory=REWRITTEN,
                       reason="every claim simplifies to true (holds for all values)")
    # 1. an alpha-equivalent query proven before (in this kernel or an earlier one)
    term, key = None, None
    if _cache_on() and len(premises) <= CACHE_MAX_PREMISES:
        term = canonical(premises, claims)
        key = (theory or "", term.get_id())
        proofs = _table("_PROOFS", term.ctx)
        if key in proofs:
            proofs.move_to_end(key)
            hit = proofs[key][1]
            ms = (time.perf_counter() - t0) * 1e3
            if stats is not None:
                stats.add(hit.theory, ms)
                stats.cached += 1
            return Outcome("proven", ms, theory=hit.theory, reason=hit.reason)
    # 2. a quick proof attempt: most obligations are proven by the plain SMT core in a few
    # thousand resource units, cheaper than translating them to bits (not for non-linear
    # queries, which never finish that fast: step 3)
    out = None
    _QUICK_SAT[0] = False

    def refuted() -> bool:   # proof_only, and a quick attempt found a counterexample
        return proof_only and _QUICK_SAT[0]
    if theory != "NIA":
        # purify-arith names the divisions by constants (`_quick_purified`), but a query that
        # also divides by a symbolic size (a grouped raster's tile index inside a routing or
        # coordinate claim) defeats it: the plain core goes first there, and each attempt
        # falls back on the other before the full portfolio, which took 0.3-0.8 s on queries
        # one of them proves in 10-60 ms (MoE's A.expert == B.expert, the batched GEMM's
        # store.coords)
        order, nonlinear = [False], False
        if len(premises) <= PURIFY_MAX_PREMISES:
            divisions, nonlinear = _arith_shape(list(premises) + [c for _, c in claims])
            if divisions and not nonlinear:
                # a linear query that divides by constants, in its claims or its premises
                # (the pipeline protocol's no-overwrite and no-early-read: the wait
                # conditions `(n / S) % 2` are premises): purify-arith first where it
                # divides often (PURIFY_MIN_DIVISIONS), the plain core first where it
                # divides little
                order = [True, False] if divisions >= PURIFY_MIN_DIVISIONS else [False, True]
            elif divisions and _divides_by_constant([c for _, c in claims]):
                order = [False, True]   # non-linear: a non-linear one whose premises alone
                # divide keeps the plain core alone, as before
        # claims applying an opaque function to non-linear terms get the opaque attempt
        # inside the plain core's (`_quick_proof`'s `opaque`): MoE's routing claim needs only
        # `(8 x + n) / 8 == x` of its grouped raster's tile index x, which the plain core took
        # 20-370 ms to find through x's divisions (50-200k units, by its constants' names:
        # eighth pass); with x opaque, 5k units. Not claims comparing non-linear terms with
        # no function around them (store.coords on a grouped raster: as fast either way,
        # every library schedule's measured)
        opaque = nonlinear and _applies_to_nonlinear([c for _, c in claims])
        # a non-linear query (non-linear premises, the tile counts' products, under linear
        # claims too) without Gröbner bases and Horner schemes, as in step 3: the rowbox TMA
        # conv's 8 'pushed out of bounds' steps took the plain core 50-100 ms each with them,
        # 16-35 ms without (z3 on the dumped query, 3 seeds)
        params = NIA_PARAMS if nonlinear else None
        if nonlinear and not opaque and _divides_by_variable([c for _, c in claims]):
            # claims that divide by a symbolic size (a tile scheduler's `out_row / P`,
            # `% P`): the quotient and remainder named first (`_quick_named`); the packed-
            # taps conv's receptive-field claims took the attempts below and the portfolio
            # 0.8-0.9 s each, named 0.1-0.25 s. Not where the opaque attempt applies (MoE's
            # routing claims: 19 of them named took ~20 ms each, a miss 0.33 s; MoE's 33
            # schedules 8.9-9.1 -> 9.5-9.9 s CPU). Not for premises alone that divide so (tried:
            # the halo TMA conv's 'pushed out of bounds' steps 35-45 -> 17-29 ms each, but
            # its 'g of the value' vacuity checks then missed their recent model: 0.06 ->
            # 1.2 s)
            # after a short plain-core attempt (NAMED_AFTER units): the FA3 attention
            # kernels' claims that divide by a head count are proven there in 2-5 ms, and a
            # named query (its own solver and vacuity check) costs 4-5 ms. Through
            # purify-arith where the claims read those quotients only through divisions by
            # numerals (`_quick_named`'s `purify`: MoE positions' span)
            out = _quick_proof(premises, claims, min(NAMED_AFTER, rlimit), rlimit, t0,
                               params) or \
                _quick_named(premises, claims, min(NAMED_RLIMIT, rlimit), rlimit, t0,
                             purify=_divides_by_variable_under_numeral(
                                 [c for _, c in claims]))
        for purify in order if out is None else ():
            out = _quick_proof(premises, claims, min(QUICK_RLIMIT, rlimit), rlimit, t0,
                               params, purify=purify, opaque=opaque and not purify)
            if out is not None or refuted():
                break
        if out is None and nonlinear and len(order) == 2 and not refuted():
            # z3's effort on these (MoE's A.expert == B.expert) is heavy-tailed in the names
            # of the query's constants, which depend on what the process verified before:
            # both attempts missed in some runs and the portfolio took 0.4-0.8 s. The same
            # query with its constants renamed canonically (`canonical`) is one more draw
            # of the plain core before the portfolio (a proof of an alpha-renamed query,
            # and its vacuity check, are those of the query)
            out = _quick_proof(*_renamed(premises, claims), min(QUICK_RLIMIT, rlimit),
                               rlimit, t0)
    if out is not None:
        out.theory = theory or _theory([c for _, c in claims])
        if stats is not None:
            stats.add(out.theory, out.ms)
        _remember(key, term, out)
        return out
    theory = theory or _theory([c for _, c in claims])
    if refuted():
        out = Outcome("violated", (time.perf_counter() - t0) * 1e3, theory=theory,
                      reason="a quick attempt found a counterexample (proof_only: no model)")
        if stats is not None:
            stats.add(theory, out.ms)
        return out
    out = None
    if theory == "NIA":
        # 3. non-linear queries (raster orders): the plain SMT core is the one that finishes
        # (measured on the persistent GEMM's store injectivity: 0.4 s, where the purified
        # solver first tried below needs 20 s); a proof attempt only, as in step 2. Without
        # Gröbner-basis reasoning it is 40% faster in total on the store-injectivity queries
        # of the library's schedules (14 sampled: 3.6 s -> 2.2 s, all proven either way)
        # with the premises' equalities between variables substituted (`_equalities_
        # substituted`: the query it answers is the same one)
        out = _quick_proof(*_equalities_substituted(premises, claims),
                           int(rlimit * NIA_SHARE), rlimit, t0, NIA_PARAMS, point_first=True)
        if out is not None:
            out.theory = theory
            if stats is not None:
                stats.add(theory, out.ms)
    if out is None:
        # 4. the full portfolio, unchanged: it alone decides violations, so counterexamples
        # do not depend on the fast paths above
        out = _prove(premises, claims, rlimit, minimize, stats,
                     rlimit_of(minimize_budget_ms), theory, known_sat=_QUICK_SAT[0])
    if out.status == "unknown" and theory == "NIA" and minimize and out.reason != _VACUOUS:
        # 5. the symbolic query ran out of budget: look for a bug among small launches
        out = _within_small_launches(premises, claims, rlimit, minimize, stats,
                                     rlimit_of(minimize_budget_ms)) or out
    _remember(key, term, out)
    return out


# the bounds `_within_small_launches` puts on every launch parameter, in turn
SMALL_LAUNCH_BOUNDS = (8, 32)


def _within_small_launches(premises, claims, rlimit, params, stats,
                           minimize_rlimit) -> Outcome | None:
    """A counterexample among small launches, when the symbolic non-linear query ran out of
    budget: the same query with every variable the obligation minimizes (`params`: its launch
    parameters, for some obligations also indices) bounded by 8 in absolute value, then by 32
    (SMALL_LAUNCH_BOUNDS), each with half the budget (so an unknown costs at most twice its
    budget). A model found is one of the original query (its premises and the
    negated claims hold there): a real violation, reported as such. None when none is found
    (or the bounded query is unknown too): a bounded search shows nothing, and the query
    stays unknown.

    Why: products and quotients of symbolic sizes (a row block's image * P + p, a grouped
    raster) make z3's unbounded search heavy-tailed in the names and order of the query's
    terms, which depend on what the process verified before: a seeded conv bug's double
    store (a per-image row block storing rows past P into the next image) was found in 49 s
    in one process and ran out of its 20M-unit budget in another (the CI run of 16995ab);
    with every parameter in [-8, 8] it is found in 5 s (2026-12-03). Fixing the parameters
    to single small values instead missed it: it needs two images (N * P >= 2 P) and P not
    a multiple of the tile's rows, a relation that bounds leave to the solver."""
    ints = [p for p in params if z3.is_int(p)]
    if not ints:
        return None
    t0 = time.perf_counter()
    for bound in SMALL_LAUNCH_BOUNDS:
        bounded = list(premises) + [z3.And(p >= -bound, p <= bound) for p in ints]
        out = _prove(bounded, claims, rlimit // 2, params, stats, minimize_rlimit, "NIA")
        if out.status == "violated":
            out.ms = (time.perf_counter() - t0) * 1e3
            out.reason = (f"found with every minimized variable in [-{bound}, {bound}] after "
                          f"the unbounded query ran out of budget")
            return out
    return None


def _remember(key, term, out: Outcome) -> None:
    """Keep a proof (with its canonical term, which keeps the key's AST id alive)."""
    if key is not None and out.status == "proven":
        proofs = _table("_PROOFS", term.ctx)
        proofs[key] = (term, out)
        if len(proofs) > _PROOFS_MAX:
            proofs.popitem(last=False)


# budget of the quick proof attempt (step 2 of `prove`): the store.coords query of the FA3
# d 256 kernel (2,800 premises) takes 130k units; most take under 60k
QUICK_RLIMIT = 400_000
VACUITY_RLIMIT = 2_500_000   # the premises' satisfiability check after a proof
NIA_SHARE = 0.5   # share of a non-linear query's budget for the plain core's proof attempt
# heuristics only: UNSAT stays a proof. Without Horner schemes as well the store-injectivity
# queries of 10 library GEMM schedules take 2.1-3.4 s CPU in total instead of 3.7-4.3 s, of 10
# MoE grouped GEMMs 2.8-3.1 s instead of 4.4-4.7 s (scripts: 3 runs each, same queries; the
# other nl switches tried, nra, order, tangents, expp, delay, branching, rounds, sandwich and
# linear-monomial propagation, were slower or no better)
NIA_PARAMS = {"arith.nl.grobner": False, "arith.nl.horner": False}


def _is_variable(t) -> bool:
    return z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED


def _equalities_substituted(premises, claims):
    """(premises, claims) with every variable that a premise equates to another variable or
    to a numeral (`G == 1`, `OP == P`: a kernel's ag.require, a launch's fixed sizes)
    replaced by that variable's class representative (a numeral where the class has one),
    everywhere; unchanged where no premise is such an equality, or where two numerals are
    equated (contradictory premises: left to the vacuity check as they are).

    Why: the plain core does not eliminate equalities (the tactic solvers' solve-eqs does),
    so a non-linear term such as `(NI * OP) / P` stays apart from NI. The NCHW rowbox +
    cluster conv's tile query ("as many units as tiles": (NI * OP) / P tiles walked against
    NI tiles stored) took it 0.6-16 s, unknown on some seeds, and 5 ms substituted; its whole
    store.coverage obligation 0.2-0.4 s (z3 run directly on the dumped query, 4 seeds).

    Exact: every model of the premises gives equated variables equal values, so the
    substituted query has a counterexample iff the query has one (its models are the
    original's, the eliminated variables being set to their representative's value); the
    premises stay satisfiable iff they were (the vacuity check's question)."""
    parent: dict[int, z3.ExprRef] = {}

    def find(t):
        while t.get_id() in parent and not parent[t.get_id()].eq(t):
            t = parent[t.get_id()]
        return t
    for p in premises:
        if not z3.is_eq(p):
            continue
        a, b = p.arg(0), p.arg(1)
        if not (_is_variable(a) or _is_variable(b)) or \
                not all(_is_variable(x) or z3.is_int_value(x) for x in (a, b)) or \
                not a.sort().eq(z3.IntSort()) or not b.sort().eq(z3.IntSort()):
            continue
        ra, rb = find(a), find(b)
        if ra.eq(rb):
            continue
        if z3.is_int_value(ra) and z3.is_int_value(rb):
            return premises, claims     # two numerals equated: contradictory premises
        if z3.is_int_value(ra):
            ra, rb = rb, ra             # a numeral is its class's representative
        parent[ra.get_id()] = rb
    if not parent:
        return premises, claims
    pairs, seen = [], set()
    for p in premises:
        if z3.is_eq(p):
            for x in (p.arg(0), p.arg(1)):
                if _is_variable(x) and x.get_id() not in seen and not find(x).eq(x):
                    seen.add(x.get_id())
                    pairs.append((x, find(x)))
    out = [z3.substitute(p, *pairs) for p in premises]
    # the equalities themselves became `P == P`, `1 == 1`: dropped
    out = [p for p in out if not (z3.is_eq(p) and p.arg(0).eq(p.arg(1)))]
    return out, [(n, z3.substitute(c, *pairs)) for n, c in claims]


# small queries whose claims divide by constants (the pipeline protocol's `n % S`,
# `(n / S) & 1`) are tried through purify-arith (`_purified`) in step 2 of `prove`: the
# plain core took 20-140 ms on each pipe.deadlock query of the FA3 attention kernels, the
# purified solver 8-12 ms (3.5x less over all their pipe.* queries). Not on large queries:
# its preprocessing costs more than the proof there (a wgmma.defined query of 375 premises:
# 25 ms plain, 150 ms purified). Linear queries whose premises alone divide go there first
# too (tenth pass): pipe.no-overwrite and pipe.no-early-read, whose claims are linear but
# whose premises hold the wait conditions and the ring's total, took the plain core 6-17 ms
# each on the FA3 kernels and purify-arith 3.5-6.5 ms (the d 256 causal kernel's 8 of them:
# 88 -> 50 ms). Over every library schedule's such queries (min of 3 each) 2.12 -> 1.59 s;
# a small one pays purify-arith's fixed cost (~0.6 ms: its own solver and vacuity check;
# moe permute's 36 store.once queries, 1.3 -> 2.0 ms each)
PURIFY_MAX_PREMISES = 64
# ... so a linear query with fewer distinct divisions by constants than this goes to the plain
# core first (purify-arith next, if it misses). Every library schedule's linear queries of at
# most 64 premises that divide (1,197, tenth pass), plain core vs purify-arith, min of 3: those
# with 1-4 distinct divisions (wgmma.defined, smem.bounds, store.once / coverage, tag.assert)
# take the plain core at most 14k units, typically 1-3k, and 1.0-1.6 ms where purify-arith
# takes 1.6-3.5 ms; those with 5 or more (the rings' protocol: the parity `(n / S) % 2` of
# both sides, the ring total's ceil-divisions) took the plain core up to 400k units. In total
# 5.58 s with purify-arith first on all, 5.29 s with this threshold (4 and 6: 5.32, 5.40 s)
PURIFY_MIN_DIVISIONS = 5


def _any_app(terms: Sequence[z3.ExprRef], hit) -> bool:
    """Whether `hit(ctx, decl_kind, args)` holds for some application in `terms` (a raw C API
    walk over the shared DAG, each node once, as `_theory`: z3's Python wrappers cost more
    than the query on large premises)."""
    if not terms:
        return False
    ctx = terms[0].ctx.ref()
    todo = [t.as_ast() for t in terms]
    visited = set()
    while todo:
        a = todo.pop()
        i = _L.Z3_get_ast_id(ctx, a)
        if i in visited:
            continue
        visited.add(i)
        if _L.Z3_get_ast_kind(ctx, a) != z3.Z3_APP_AST:
            continue
        args = [_L.Z3_get_app_arg(ctx, a, k) for k in range(_L.Z3_get_app_num_args(ctx, a))]
        if hit(ctx, _L.Z3_get_decl_kind(ctx, _L.Z3_get_app_decl(ctx, a)), args):
            return True
        todo.extend(args)
    return False


_DIVMOD = (z3.Z3_OP_IDIV, z3.Z3_OP_MOD, z3.Z3_OP_REM)


def _is_numeral(ctx, a) -> bool:
    return _L.Z3_get_ast_kind(ctx, a) == z3.Z3_NUMERAL_AST


def _divides_by_constant(terms: Sequence[z3.ExprRef]) -> bool:
    """Whether an integer division or remainder by a numeral occurs in `terms`."""
    return _any_app(terms, lambda ctx, kind, args: kind in _DIVMOD and len(args) == 2
                    and _is_numeral(ctx, args[1]))


def _arith_shape(terms: Sequence[z3.ExprRef]) -> tuple[int, bool]:
    """(the number of distinct integer divisions and remainders by a numeral, whether
    `_nonlinear` holds) of `terms`, in one walk of their DAG."""
    divisions, nonlinear = 0, False

    def hit(ctx, kind, args) -> bool:
        nonlocal divisions, nonlinear
        if kind in _DIVMOD and len(args) == 2:
            if _is_numeral(ctx, args[1]):
                divisions += 1
            else:
                nonlinear = True
        elif kind == z3.Z3_OP_MUL and not nonlinear:
            nonlinear = sum(not _is_numeral(ctx, x) for x in args) > 1
        return False   # every node: the count is over the whole DAG
    _any_app(terms, hit)
    return divisions, nonlinear


def _nonlinear(terms: Sequence[z3.ExprRef]) -> bool:
    """Whether a product of two non-numerals, or a division or remainder by a non-numeral,
    occurs in `terms`."""
    def hit(ctx, kind, args) -> bool:
        if kind in _DIVMOD and len(args) == 2:
            return not _is_numeral(ctx, args[1])
        return kind == z3.Z3_OP_MUL and sum(not _is_numeral(ctx, x) for x in args) > 1
    return _any_app(terms, hit)


def _applies_to_nonlinear(terms: Sequence[z3.ExprRef]) -> bool:
    """Whether an uninterpreted function (arity > 0) is applied to an argument in which a
    non-linear term (`_nonlinear`) occurs, in `terms`."""
    def hit(ctx, kind, args) -> bool:
        return kind == z3.Z3_OP_UNINTERPRETED and bool(args) and _nonlinear(
            [z3.z3._to_expr_ref(a, terms[0].ctx) for a in args])
    return _any_app(terms, hit)


# whether a quick attempt of the current `prove` found its negated claim satisfiable (a
# counterexample: z3's sat, in the plain core or through purify-arith); read by proof_only
_QUICK_SAT = [False]


def _quick_proof(premises, claims, budget, rlimit, t0,
                 params: dict | None = None, point_first: bool = False,
                 purify: bool = False, opaque: bool = False) -> Outcome | None:
    """Try to prove the query with z3's plain SMT core (`SimpleSolver`: no tactic
    preprocessing, which is what costs most on small queries) within `budget` resource units.
    An Outcome only on UNSAT (then "proven", or "unknown" when the premises are
    contradictory); None on SAT or unknown: the caller then runs the full path, so a violation
    is always found, minimized and decoded exactly as without this attempt.

    Sound: UNSAT of premises ∧ ¬claims is a proof whichever z3 engine reports it, and a
    vacuous proof is still refused (`_vacuity`); with `point_first` the premises' least point
    is tried as their model before the solver searches one (`satisfied_at_least_point`: worth
    it for non-linear premises, whose model search costs as much as the proof).

    With `opaque`, a query the plain core does not prove within OPAQUE_AFTER units is tried
    with its non-linear terms opaque (`_opaque_proof`); if that misses, the same solver goes
    on with the whole `budget` (so a query pays at most OPAQUE_AFTER + OPAQUE_RLIMIT units more,
    and a proof found by either attempt is a proof)."""
    if budget < 1000:
        return None
    conj = z3.And([c for _, c in claims]) if claims else z3.BoolVal(True)
    if purify:
        return _quick_purified(premises, conj, budget, rlimit, t0)
    s = _limit(z3.SimpleSolver(), budget)
    for k, v in (params or {}).items():
        s.set(k, v)
    _assert_all(s, premises)
    # the negated claim behind an assumption literal: the same solver then answers the
    # vacuity question with what it learned (the premises are still asserted)
    goal = z3.Bool("argus.verify.solver!goal")
    s.add(z3.Implies(goal, z3.Not(conj)))
    res = None
    if opaque and budget > OPAQUE_AFTER:
        s.set("rlimit", OPAQUE_AFTER)
        res = s.check(goal)
        if res == z3.unknown and _opaque_proof(premises, conj, min(OPAQUE_RLIMIT, budget)):
            # proven with the non-linear terms opaque; the premises' own model search (the
            # vacuity check) in this solver, which holds them
            return _proof_outcome(_model_search(s, premises, rlimit), t0)
        if res == z3.unknown:
            s.set("rlimit", budget)
            s.set("timeout", backstop_ms(budget))
            res = None
    if res is None:
        res = s.check(goal)
    if res != z3.unsat:
        if res == z3.sat:
            _QUICK_SAT[0] = True   # a counterexample of the query (`prove`'s proof_only)
        return None
    if len(s.unsat_core()) == 0:
        vres = z3.unsat  # the premises alone are contradictory
        _record_answer(premises, vres)
    elif point_first and satisfied_at_least_point(premises):
        vres = z3.sat
    else:
        vres = _model_search(s, premises, rlimit)
    return _proof_outcome(vres, t0)


def _model_search(s: z3.Solver | None, premises, rlimit) -> z3.CheckSatResult:
    """Are the premises (asserted in the plain core `s`, which may hold a guarded goal
    besides) satisfiable? The vacuity check of a quick proof. With `s` None, a plain core
    holding the premises is made only when the solver must search (`_known_answer`, a recent
    model's point and the pinned search first: asserting 100-200 premises costs ~0.3 ms)."""
    known = _known_answer(premises)
    if known is not None:
        return known
    # a model search, without Gröbner bases and Horner schemes (as for non-linear proofs,
    # step 3 of `prove`): the premises of store.coords and routing queries carry a
    # grouped raster's products and divisions, and finding their model took 50-450 ms
    # with them, about half without (TMA-store GEMMs and MoE gate-up: 4.3 s -> 2.2 s of
    # vacuity checks over 45 kernels); sat and unsat stay definite answers
    if satisfied_by_recent_model(premises) or _pinned_model_found(premises, rlimit):
        return z3.sat
    if s is None:
        s = _limit(z3.SimpleSolver(), min(rlimit, VACUITY_RLIMIT))
        _assert_all(s, premises)
    s.set("rlimit", int(min(rlimit, VACUITY_RLIMIT)))
    s.set("timeout", backstop_ms(int(min(rlimit, VACUITY_RLIMIT))))
    for k, v in NIA_PARAMS.items():
        s.set(k, v)
    vres = s.check()
    if vres == z3.sat:
        _remember_model(premises, s.model())
    if vres == z3.unknown:  # the old check: the default solver
        v = _limit(z3.Solver(), min(rlimit, VACUITY_RLIMIT))
        _assert_all(v, premises)
        vres = v.check()
    _record_answer(premises, vres)
    return vres


# the models of the last few vacuity checks that found one, each as the values of its query's
# constants in order of first occurrence (`_ordered_consts` over the premises), with their
# sorts. A kernel's queries list the model's premises (launch parameters, shapes) first, so
# position i is the same launch term across its queries; the per-site queries of an unrolled
# store (a TMA epilogue's 8 or 16 row segments) differ in a numeral and their fresh element
# variables, which take the same positions. Evaluating the premises at such a point is a
# substitution and a simplification (~1 ms); the model search it spares costs 10-60 ms
RECENT_MODELS = 4
_RECENT_MODELS: list[tuple[tuple, tuple]] = []


def _premise_consts(premises) -> list:
    """The premises' uninterpreted constants (raw asts) in order of first occurrence."""
    order: dict[int, object] = {}
    for p in premises:
        for i, c in _ordered_consts(p):
            order.setdefault(i, c)
    return list(order.values())


def _remember_model(premises, m: z3.ModelRef) -> None:
    """Keep the values `m` gives the premises' constants (ints and Booleans only), by
    position, among the RECENT_MODELS kept, with the premises themselves (`_Recent`: kept
    alive, so their ids are not reused while the entry stands)."""
    if not premises:
        return
    ctx = premises[0].ctx
    sorts, vals = [], []
    for a in _premise_consts(premises):
        c = z3.z3._to_expr_ref(a, ctx)
        v = m.eval(c, model_completion=True)
        if z3.is_int(c) and z3.is_int_value(v):
            sorts.append("i")
            vals.append(v.as_long())
        elif z3.is_bool(c) and (z3.is_true(v) or z3.is_false(v)):
            sorts.append("b")
            vals.append(z3.is_true(v))
        else:
            return   # a bit-vector or another sort: not kept
    recent = _table("_RECENT_MODELS", ctx)
    recent.insert(0, _Recent(premises, tuple(sorts), tuple(vals)))
    del recent[RECENT_MODELS:]


class _Recent(tuple):
    """A remembered model (`_remember_model`): (sorts, values, premise ids) by position, as
    before, plus the premises (kept alive: an id names the same term while the entry
    stands), their ids as a set, the context, and each constant's position (`pos`: its id ->
    its index in order of first occurrence, that of its value). The model satisfies every one
    of these premises."""

    def __new__(cls, premises, sorts, vals):
        ids = tuple(p.get_id() for p in premises)
        self = super().__new__(cls, (sorts, vals, ids))
        self.premises = tuple(premises)
        self.idset = frozenset(ids)
        self.ctx = premises[0].ctx.ref().value
        pos: dict[int, int] = {}
        for p in premises:
            for i, _ in _ordered_consts(p):
                if i not in pos:
                    pos[i] = len(pos)
        self.pos = pos
        return self


def satisfied_by_recent_model(premises) -> bool:
    """Are the premises true at a point taken from a recent vacuity check's model
    (`_remember_model`)? A ground formula that simplifies to true is a model, so True means
    satisfiable, whatever the point's origin (an answer no less definite than the solver's
    sat); False answers nothing, and the solver searches as before.

    The point (h249): a constant of the model's own premises takes the model's value (by
    id), any other the model's value at its position in the query's order of first
    occurrence (before, every constant by position: a query listing its premises in another
    order than the model's, or with a site premise first, put the model's launch
    parameters' values on the wrong constants, and missed). A query premise that is one of
    the model's premises (same id: the entry keeps them alive) is not evaluated: its
    constants all take the model's values, and the model satisfies it; so the model, with
    the point's values for the other constants, satisfies every premise (its interpretation
    of a division by zero included: the other premises simplify to true under any). Only
    the premises that are not the model's are evaluated; none when all are (a subset of a
    satisfiable set is satisfiable).

    Each premise is evaluated on its own, in order, and the point given up at the first one
    that does not simplify to true; a premise's value is a function of the premise and of the
    values of its constants, remembered under that key (`_POINT_VALUES`): a kernel's queries
    repeat its model's premises (launch parameters, shapes, the unit's indices: 100-200 of
    them in an FA3 attention query), which were substituted and simplified again, as one
    conjunction, for every query and every recent model (2-3 ms a check, 0.2 s of the d 256
    attention kernels' ~1.5 s).

    The walk reads each premise's constants once a call (`_ordered_consts`, once for the
    query's order and once per model before), ids through the raw getters, and the ground
    numerals a point substitutes are made once per value (`_numeral`): the d 256 FA3 kernels
    call it ~120 times a run over ~150 premises each, and their ~1,100 first evaluations
    built one IntVal wrapper per constant per premise."""
    if not premises:
        return False
    ctx = premises[0].ctx
    recent = _table("_RECENT_MODELS", ctx)
    if not recent:
        return False
    ref = ctx.ref()
    get_id = _L.Z3_get_ast_id
    consts, point_values = _table("_CONSTS", ctx), _table("_POINT_VALUES", ctx)
    if len(point_values) > _PROOFS_MAX:
        point_values.clear()
    pids = [get_id(ref, p.as_ast()) for p in premises]
    n = len(pids)
    pcs: list = [None] * n
    kinds: dict[int, str] = {}
    for entry in recent:
        if entry.ctx != ref.value:
            continue
        idset = entry.idset
        # the point: a constant of the model's premises takes the model's value (by id),
        # any other the value at its position in the query's order of first occurrence (a
        # fresh element variable of a row segment takes that of the segment before)
        sorts, vals, _ = entry
        pos = entry.pos
        point: dict[int, object] = {}
        rest = []
        for k in range(n):
            if pids[k] in idset:
                continue   # one of the model's premises: true there (below)
            rest.append(k)
        if not rest:
            return True
        q = 0
        for k in range(n):
            pc = pcs[k]
            if pc is None:
                hit = consts.get(pids[k])   # (`_ordered_consts`'s table, by the id at hand)
                pc = pcs[k] = hit[1] if hit is not None else _ordered_consts(premises[k])
            for i, a in pc:
                if i in point:
                    continue
                m = pos.get(i)
                if m is not None:
                    point[i] = vals[m]
                else:
                    kind = kinds.get(i)
                    if kind is None:
                        sk = _L.Z3_get_sort_kind(ref, _L.Z3_get_sort(ref, a))
                        kind = kinds[i] = "i" if sk == z3.Z3_INT_SORT else \
                            "b" if sk == z3.Z3_BOOL_SORT else "?"
                    if kind == "?":
                        return False
                    point[i] = vals[q] if q < len(vals) and sorts[q] == kind else \
                        (0 if kind == "i" else False)
                q += 1
        # the model's premises hold at the point (their constants all take the model's
        # values, and the model satisfies them); the others must simplify to true there
        for k in rest:
            pc = pcs[k]
            values = tuple(point[i] for i, _ in pc)
            key = (pids[k], values)
            hit = point_values.get(key)
            if hit is None:
                hit = (premises[k], _true_at(premises[k], pc, values))
                point_values[key] = hit
            if not hit[1]:
                break
        else:
            return True
    return False


# premise sets whose satisfiability a vacuity check decided (`_record_answer`), newest
# first: (answer, context, the premises' ids, the premises: kept alive, so an id names the
# same term while its entry stands). Sets found satisfiable with a remembered model are the
# recent models' (`_Recent`); these are the others: `_vacuity`'s (whose model is not kept)
# and every unsatisfiable one
KNOWN_SETS = 16
_KNOWN_SETS: list[tuple] = []


def _record_answer(premises, res: z3.CheckSatResult) -> None:
    """Keep a definite answer (sat or unsat) of a vacuity check of `premises`; unknown is
    not kept."""
    if not premises or res == z3.unknown:
        return
    ctx = premises[0].ctx
    ref = ctx.ref()
    get_id = _L.Z3_get_ast_id
    ids = frozenset(get_id(ref, p.as_ast()) for p in premises)
    known = _table("_KNOWN_SETS", ctx)
    known.insert(0, (res == z3.sat, ref.value, ids, tuple(premises)))
    del known[KNOWN_SETS:]


def _known_answer(premises) -> z3.CheckSatResult | None:
    """The satisfiability of `premises` as it follows from a set decided before, by the ids
    of the premises alone (no solver, no evaluation): sat when they are among those of a set
    found satisfiable in `_KNOWN_SETS` (its model satisfies each of them; the recent models'
    premises are asked the same by `satisfied_by_recent_model`), unsat when they include all
    of those of a set found unsatisfiable. None otherwise. Sound whatever the premises: a
    model of a set is one of each of its subsets, and a contradiction stays one with
    premises added."""
    if not premises:
        return None
    known = _table("_KNOWN_SETS", premises[0].ctx)
    if not known:
        return None
    ref = premises[0].ctx.ref()
    get_id = _L.Z3_get_ast_id
    pidset = frozenset(get_id(ref, p.as_ast()) for p in premises)
    for sat, ctx, ids, _ in known:
        if ctx != ref.value:
            continue
        if sat and pidset <= ids:
            return z3.sat
        if not sat and ids <= pidset:
            return z3.unsat
    return None


def _numeral(v, ctx):
    """The ground Int or Bool numeral of `v` (an int or a bool), made once per value and
    context (`_NUMERALS`; a point's values are a kernel's few shapes and indices)."""
    key = (type(v) is bool, v, ctx.ref().value)
    numerals = _table("_NUMERALS", ctx)
    t = numerals.get(key)
    if t is None:
        if len(numerals) > _PROOFS_MAX:
            numerals.clear()
        t = numerals[key] = z3.BoolVal(v, ctx) if isinstance(v, bool) else z3.IntVal(v, ctx)
    return t


_NUMERALS: dict[tuple, z3.ExprRef] = {}


def _true_at(p: z3.BoolRef, pc: list, values) -> bool:
    """Does the premise `p`, with its constants `pc` ((id, raw ast), `_ordered_consts`) replaced
    by `values` (ints or bools, in the same order), simplify to true?"""
    if not pc:
        return z3.is_true(z3.simplify(p))
    ctx = p.ctx
    froms = (z3.Ast * len(pc))(*[a for _, a in pc])
    tos = (z3.Ast * len(pc))(*[_numeral(v, ctx).as_ast() for v in values])
    ground = z3.z3._to_expr_ref(z3.Z3_substitute(ctx.ref(), p.as_ast(), len(pc), froms, tos),
                                ctx)
    return z3.is_true(z3.simplify(ground))


# `satisfied_by_recent_model`'s table: (premise id, the values of its constants) -> (the
# premise, kept alive so its id is not reused; whether it simplifies to true there)
_POINT_VALUES: dict[tuple, tuple] = {}


# the budget of the pinned search (`_pinned_model_found`): a linear search, once the shared
# premises' constants are fixed
PINNED_RLIMIT = 200_000


def _pinned_model_found(premises, rlimit) -> bool:
    """A model of the premises with the constants of the premises they share with the latest
    remembered query (the kernel model's premises, listed first by every query: launch
    parameters, shapes, the unit's indices) pinned to that query's model values, found by a
    small search (PINNED_RLIMIT). Only after a recent point failed: a row segment whose
    element bounds exclude the last point, whose search with nothing pinned took 0.06-2.4 s
    on the halo TMA conv. A model with pins is a model, so True means satisfiable; unsat or
    unknown answers nothing (the pins may be what excludes a model) and the full search
    follows."""
    if not premises:
        return False
    recent = _table("_RECENT_MODELS", premises[0].ctx)
    if not recent:
        return False
    sorts, vals, ids = recent[0]
    shared = 0
    for a, b in zip(ids, premises):
        if a != b.get_id():
            break
        shared += 1
    if shared == 0 or shared == len(premises):
        return False
    ctx = premises[0].ctx
    pinned = [z3.z3._to_expr_ref(a, ctx) for a in _premise_consts(premises[:shared])]
    if not pinned or len(pinned) > len(vals):
        return False
    v = _limit(z3.SimpleSolver(), min(rlimit, PINNED_RLIMIT))
    for k, val in NIA_PARAMS.items():
        v.set(k, val)
    _assert_all(v, premises)
    for c, kind, x in zip(pinned, sorts, vals):
        if kind == "i" and z3.is_int(c):
            v.add(c == x)
        elif kind == "b" and z3.is_bool(c):
            v.add(c == z3.BoolVal(x))
        else:
            return False
    if v.check() != z3.sat:
        return False
    _remember_model(premises, v.model())
    return True


def premises_satisfiable(premises) -> bool:
    """Are the premises shown satisfiable by the vacuity check a quick proof makes
    (`_model_search`: a recent model's point, a pinned search, then a model search of the
    plain core, within VACUITY_RLIMIT)? For the members of a family proof (family.py), each
    of which pays this check instead of its own query. False answers nothing."""
    if not premises:
        return True
    # (the solver is made only if `_model_search` must search: asserting the premises costs
    # ~5 ms)
    return _model_search(None, premises, VACUITY_RLIMIT) == z3.sat


def _proof_outcome(vres: z3.CheckSatResult, t0: float) -> Outcome:
    """A quick proof's outcome given its vacuity check's answer."""
    ms = (time.perf_counter() - t0) * 1e3
    if vres == z3.unsat:
        return Outcome("unknown", ms, reason=_VACUOUS)
    return Outcome("proven", ms,
                   reason="" if vres == z3.sat else "premises not shown satisfiable")


# the opaque attempt (`_quick_proof`'s `opaque`): after OPAQUE_AFTER units of the plain core,
# which prove every other query with non-linear claims of the MoE and GEMM schedules (each in
# 2-5k units: wgmma.defined, store.coords, the walk's start), within OPAQUE_RLIMIT units of its
# own (MoE's routing claims take 5k with the raster opaque; the plain core 20-200k)
OPAQUE_AFTER = 10_000
OPAQUE_RLIMIT = 50_000
_OPAQUE = {z3.Z3_OP_MUL: "mul", z3.Z3_OP_IDIV: "div", z3.Z3_OP_MOD: "mod", z3.Z3_OP_REM: "rem"}


def _opaque(terms: Sequence[z3.ExprRef]) -> list[z3.ExprRef]:
    """`terms` with every non-linear application opaque: a product of two or more
    non-numerals, or a division or remainder by a non-numeral, op(a, b, ...) becomes
    `argus!op<n>(a', b', ...)`, an uninterpreted function of the opaque arguments: one per
    operator and signature, so equal arguments still give equal terms. The rest (linear
    arithmetic, divisions by numerals, opaque functions, Booleans, quantifiers) is kept.
    The original terms are an instance of these (read each `argus!op` as its operator)."""
    if not terms:
        return []
    ctx = terms[0].ctx
    ref = ctx.ref()
    memo: dict[int, z3.ExprRef] = {}
    fns: dict[tuple, z3.FuncDeclRef] = {}
    get_id, kind_of = _L.Z3_get_ast_id, _L.Z3_get_ast_kind
    nargs, arg = _L.Z3_get_app_num_args, _L.Z3_get_app_arg
    decl_of, decl_kind = _L.Z3_get_app_decl, _L.Z3_get_decl_kind
    # the model's premises recur in every query of a kernel: a term walked before is not
    # walked again (its entry keeps it alive, so its id is not reused)
    table = _table("_OPAQUE_TERMS", ctx)
    new_terms = [t for t in terms if t.get_id() not in table]
    # the cached images are read now: inserting the new terms below may evict them
    cached = {t.get_id(): table[t.get_id()][1] for t in terms if t.get_id() in table}

    # post-order over the DAG, each node once: (raw ast, its children pushed yet?)
    todo = [(t.as_ast(), False) for t in new_terms]
    while todo:
        a, expanded = todo.pop()
        i = get_id(ref, a)
        if i in memo:
            continue
        n = nargs(ref, a) if kind_of(ref, a) == z3.Z3_APP_AST else 0
        if n == 0:
            memo[i] = None   # a leaf: kept as it is
            continue
        args = [arg(ref, a, k) for k in range(n)]
        if not expanded:
            todo.append((a, True))
            todo.extend((b, False) for b in args if get_id(ref, b) not in memo)
            continue
        kind = decl_kind(ref, decl_of(ref, a))
        new = [memo[get_id(ref, b)] for b in args]
        opaque = kind in _OPAQUE and (
            sum(not _is_numeral(ref, b) for b in args) > 1 if kind == z3.Z3_OP_MUL
            else n == 2 and not _is_numeral(ref, args[1]))
        if not opaque and all(b is None for b in new):
            memo[i] = None   # unchanged below: kept
            continue
        kids = [z3.z3._to_expr_ref(b, ctx) if e is None else e for b, e in zip(args, new)]
        if opaque:
            sorts = [k.sort() for k in kids] + [z3.z3._to_expr_ref(a, ctx).sort()]
            key = (_OPAQUE[kind],) + tuple(x.get_id() for x in sorts)
            f = fns.get(key)
            if f is None:
                f = fns[key] = z3.Function(f"argus!{_OPAQUE[kind]}{n}", *sorts)
            memo[i] = f(*kids)
        else:
            memo[i] = z3.z3._to_expr_ref(
                z3.Z3_update_term(ref, a, n, (z3.Ast * n)(*[k.as_ast() for k in kids])), ctx)
    for t in new_terms:
        table[t.get_id()] = (t, memo[t.get_id()])
        if len(table) > _PROOFS_MAX:
            table.popitem(last=False)
    images = [cached[t.get_id()] if t.get_id() in cached else memo[t.get_id()] for t in terms]
    return [t if image is None else image for t, image in zip(terms, images)]


# each term `_opaque` walked: (the term, its image, None if unchanged)
_OPAQUE_TERMS: OrderedDict[int, tuple[z3.ExprRef, z3.ExprRef | None]] = OrderedDict()


def _opaque_proof(premises, conj, budget) -> bool:
    """Whether the plain core proves premises ⇒ conj with their non-linear terms opaque
    (`_opaque`) within `budget` units (False: not proven, nothing else is concluded).

    Sound: the original query premises ∧ ¬conj is the opaque one with each opaque function
    read as its operator (z3's division and remainder are total functions, by zero too), so a
    model of the original is one of the opaque query: UNSAT of the opaque query is UNSAT of
    the original, a proof. Not a vacuity check: contradictory opaque premises are
    contradictory original ones, but satisfiable opaque premises say nothing of the original
    ones, so the caller checks the original premises, as after any proof."""
    *opaque_premises, opaque_conj = _opaque(list(premises) + [conj])
    s = _limit(z3.SimpleSolver(), budget)
    _assert_all(s, opaque_premises)
    s.add(z3.Not(opaque_conj))
    return s.check() == z3.unsat


# the named-divisions attempt (`_quick_named`): z3's plain core on the query with each division
# and remainder by a non-numeral named (`_divisions_named`), within NAMED_RLIMIT units. The
# packed-taps conv's receptive-field claims (a tile scheduler's `out_row // P`, `% P` inside
# a box's image, output row and row coordinate; the tile index a division by the tile count
# too): the plain core and purify-arith missed them within QUICK_RLIMIT, the portfolio took
# 0.5-0.6 s each; named, 0.5-1.3M units (0.1-0.25 s; one draw of 3M in 8)
NAMED_RLIMIT = 2_500_000
NAMED_AFTER = 20_000   # the plain core's units on such a query before it is named
# the named attempt's wall-clock backstop (ms), below the general one (`backstop_ms`: 10 s at
# NAMED_RLIMIT). z3's nlsat, which the named query's non-linear products call from the
# arithmetic's final check, counts little of its work against the resource limit: in one
# process's history (scripts/verify_tail.py) a 3-d conv's receptive-field claim ran 9.9 s CPU
# on at most 0.4M counted units and came back unknown from the 10 s backstop (the same claim
# is proven in 0.1-0.5 s under other constants' names or context states, and the attempts
# after it proved it within the obligation's next 0.6 s). Cut short, the query goes on to
# the plain core and the portfolio as after any miss: a verdict rests on the cut only where
# every later attempt misses too (unknown, never a wrong answer). 3-d bw 32 after halo
# direct, 5 counter starts: worst 14.1 s CPU -> 4.9 s (loaded machine, h239)
NAMED_BACKSTOP_MS = 2000


def _divisions_named(terms: Sequence[z3.ExprRef]) -> tuple[list[z3.ExprRef], list[z3.BoolRef]]:
    """`terms` with every division `t / d` and remainder `t % d` by a non-numeral `d` replaced
    by fresh variables q and r, one pair per (t, d) (after the divisions inside t are
    named), and the facts that define the pairs the terms use where `d` is not zero:
    `t == q*d + r`, `0 <= r < |d|` (z3's integer division: the Euclidean one, which those
    determine).

    Why: a claim that reads `t` only through its quotient and remainder (a tile scheduler's
    output row split into image and row: `out_row / P`, `out_row % P`) is decided by
    linear reasoning on q and r and one product, where z3's non-linear division axioms
    re-derive the pair at each occurrence.

    Sound for proofs only: every model of the original terms is one of the named ones (q, r
    the division's values), so UNSAT of the named query is UNSAT of the original; where
    `d == 0` the pair is left free (z3 reads `t / 0` as an unspecified function), so a model
    of the named query says nothing of the original: the caller never reports one.

    A kernel's queries repeat its model's premises: each term's image is remembered
    (`_NAMED_TERMS`, with the pairs it uses) and a pair keeps its names across calls
    (`_NAMED_PAIRS`), so a remembered premise and a claim named now agree."""
    if not terms:
        return [], []
    ctx = terms[0].ctx
    ref = ctx.ref()
    get_id, kind_of = _L.Z3_get_ast_id, _L.Z3_get_ast_kind
    nargs, arg = _L.Z3_get_app_num_args, _L.Z3_get_app_arg
    decl_of, decl_kind = _L.Z3_get_app_decl, _L.Z3_get_decl_kind
    named_terms, named_pairs = _table("_NAMED_TERMS", ctx), _table("_NAMED_PAIRS", ctx)
    if len(named_terms) > _PROOFS_MAX or len(named_pairs) > _PROOFS_MAX:
        named_terms.clear()
        named_pairs.clear()
    none: frozenset = frozenset()
    # per node: (its image, None if unchanged; the pairs below it)
    memo: dict[int, tuple[z3.ExprRef | None, frozenset]] = {}
    new_terms = [t for t in terms if t.get_id() not in named_terms]
    todo = [(t.as_ast(), False) for t in new_terms]
    while todo:
        a, expanded = todo.pop()
        i = get_id(ref, a)
        if i in memo:
            continue
        n = nargs(ref, a) if kind_of(ref, a) == z3.Z3_APP_AST else 0
        if n == 0:
            memo[i] = (None, none)   # a leaf: kept as it is
            continue
        args = [arg(ref, a, k) for k in range(n)]
        if not expanded:
            todo.append((a, True))
            todo.extend((b, False) for b in args if get_id(ref, b) not in memo)
            continue
        kind = decl_kind(ref, decl_of(ref, a))
        below = [memo[get_id(ref, b)] for b in args]
        keys = frozenset().union(*[k for _, k in below if k]) if any(k for _, k in below) \
            else none
        named = kind in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and n == 2 \
            and not _is_numeral(ref, args[1])
        if not named and not keys:
            memo[i] = (None, none)   # nothing named below: kept
            continue
        kids = [z3.z3._to_expr_ref(b, ctx) if e is None else e for b, (e, _) in zip(args, below)]
        if named:
            t, d = kids
            key = (t.get_id(), d.get_id())
            if key not in named_pairs:
                j = len(named_pairs)
                q, r = z3.Int(f"argus!q{j}", ctx), z3.Int(f"argus!r{j}", ctx)
                named_pairs[key] = (q, r, [
                    z3.Implies(d != 0, t == q * d + r), z3.Implies(d != 0, r >= 0),
                    z3.Implies(d > 0, r < d), z3.Implies(d < 0, r < -d)]
                    + _quotient_signs(t, d, q, r))
            memo[i] = (named_pairs[key][0 if kind == z3.Z3_OP_IDIV else 1], keys | {key})
        else:
            memo[i] = (z3.z3._to_expr_ref(
                z3.Z3_update_term(ref, a, n, (z3.Ast * n)(*[k.as_ast() for k in kids])), ctx),
                keys)
    for t in new_terms:
        named_terms[t.get_id()] = (t,) + memo[t.get_id()]
    images, used = [], {}
    for t in terms:
        _, image, keys = named_terms[t.get_id()]
        images.append(t if image is None else image)
        used.update(dict.fromkeys(sorted(keys)))
    return images, [f for key in used for f in named_pairs[key][2]]


def _quotient_signs(t, d, q, r) -> list[z3.BoolRef]:
    """Linear facts of the pair (q, r) = (t / d, t % d) where d > 0, which its defining facts
    imply only through the product q * d (`_divisions_named`): `t >= 0 => 0 <= q <= t` and
    `r <= t`, `t < 0 => q < 0`. Each is a theorem of z3's division (q = floor(t / d) for
    d > 0: the floor of a non-negative t over d >= 1 lies in [0, t], t - q*d <= t where
    q*d >= 0, and the floor of a negative t over a positive d is negative), so the named
    query's models are those it had: a proof is still one of the original query.

    Why: the conv kernels' receptive-field claims read named quotients' signs (the image
    `out_row / P` of a tile's row is >= 0, so are the rows `img * H + ...` built on it), which
    the linear part of z3's arithmetic did not see: they came from nlsat, called from the
    final check for the products q * d, and nlsat's effort is heavy-tailed (docs/verify.md
    "Named quotients' signs")."""
    return [z3.Implies(z3.And(d > 0, t >= 0), q >= 0),
            z3.Implies(z3.And(d > 0, t < 0), q < 0),
            z3.Implies(z3.And(d > 0, t >= 0), q <= t),
            z3.Implies(z3.And(d > 0, t >= 0), r <= t)]


# `_divisions_named`'s tables: each term it named (the term, its image or None, the pairs it
# uses) and each pair (q, r, their defining facts, which keep the dividend and the divisor
# alive) by the ids of its dividend and divisor
_NAMED_TERMS: OrderedDict[int, tuple] = OrderedDict()
_NAMED_PAIRS: dict[tuple[int, int], tuple] = {}


def _divides_by_variable(terms: Sequence[z3.ExprRef]) -> bool:
    """Whether an integer division or remainder by a non-numeral occurs in `terms`."""
    return _any_app(terms, lambda ctx, kind, args: kind in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD)
                    and len(args) == 2 and not _is_numeral(ctx, args[1]))


def _divides_by_variable_under_numeral(terms: Sequence[z3.ExprRef]) -> bool:
    """Whether `terms` divide by a non-numeral and every such division or remainder lies
    below a division or remainder by a numeral (its quotient is read only through one:
    MoE's position span `((N + C - 1) / C + 31) / 32 * 32`), in one walk of their DAG (a
    node is visited once per side: below a division by a numeral or not)."""
    if not terms:
        return False
    ctx = terms[0].ctx.ref()
    todo = [(t.as_ast(), False) for t in terms]
    seen: set = set()
    found = False
    while todo:
        a, below = todo.pop()
        key = (_L.Z3_get_ast_id(ctx, a), below)
        if key in seen or _L.Z3_get_ast_kind(ctx, a) != z3.Z3_APP_AST:
            continue
        seen.add(key)
        n = _L.Z3_get_app_num_args(ctx, a)
        args = [_L.Z3_get_app_arg(ctx, a, k) for k in range(n)]
        if _L.Z3_get_decl_kind(ctx, _L.Z3_get_app_decl(ctx, a)) in _DIVMOD and n == 2:
            if _is_numeral(ctx, args[1]):
                below = True
            elif not below:
                return False
            else:
                found = True
        todo.extend((b, below) for b in args)
    return found


def _quick_named(premises, claims, budget, rlimit, t0, purify: bool = False) -> Outcome | None:
    """A proof attempt on the query with its divisions by non-numerals named
    (`_divisions_named`), in the plain core without Gröbner bases and Horner schemes,
    within `budget` units. An Outcome only on UNSAT of the named query (a proof of the
    original), then with the original premises' vacuity check (`_model_search` in a plain
    core holding them: satisfiable named premises say nothing of the original ones); None
    otherwise (the caller goes on as without this attempt).

    The query named is the one with the premises' equalities between variables substituted
    (`_equalities_substituted`: the same query, so its UNSAT is a proof of this one): a
    kernel's `G == 1` then leaves no product `tiles * G` in the tile count that the named
    divisions divide by, whose degree nlsat paid for (docs/verify.md "Named quotients'
    signs").

    `purify`: the named query through purify-arith (`_purified`), which names the divisions
    by numerals as well; `prove` asks it where every division by a variable in the claims
    lies below one by a numeral (`_divides_by_variable_under_numeral`): the named quotients
    are then read only through divisions by numerals, which the plain core reasons about
    occurrence by occurrence. MoE positions' store.coverage (its span `((N + C - 1) / C +
    31) / 32 * 32`): the plain core missed after the whole budget (0.8-1.0 s), purified
    proven in 15-25 ms (docs/verify.md "Named quotients under numeral divisions")."""
    sub_premises, sub_claims = _equalities_substituted(premises, claims)
    conj = z3.And([c for _, c in sub_claims]) if sub_claims else z3.BoolVal(True)
    *named_premises, named_conj = (named := _divisions_named(list(sub_premises) + [conj]))[0]
    s = _limit(_purified() if purify else z3.SimpleSolver(), budget)
    s.set("timeout", NAMED_BACKSTOP_MS)   # below backstop_ms's floor (BACKSTOP_MIN_MS)
    for k, v in NIA_PARAMS.items():
        s.set(k, v)
    _assert_all(s, named_premises)
    _assert_all(s, named[1])
    s.add(z3.Not(named_conj))
    if s.check() != z3.unsat:
        return None
    return _proof_outcome(_model_search(None, premises, rlimit), t0)

def _quick_purified(premises, conj, budget, rlimit, t0) -> Outcome | None:
    """`_quick_proof` through purify-arith: the tactic solver tracks no unsat cores, so the
    negated claim is asserted (no assumption literal) and the premises' satisfiability is
    asked of a plain solver of their own (`_vacuity`), as after the full portfolio."""
    s = _limit(_purified(), budget)
    _assert_all(s, premises)
    s.add(z3.Not(conj))
    res = s.check()
    if res != z3.unsat:
        if res == z3.sat:
            _QUICK_SAT[0] = True   # a counterexample of the query (`prove`'s proof_only)
        return None
    vres = _vacuity(premises, rlimit, z3.Solver)
    ms = (time.perf_counter() - t0) * 1e3
    if vres == z3.unsat:
        return Outcome("unknown", ms, reason=_VACUOUS)
    return Outcome("proven", ms,
                   reason="" if vres == z3.sat else "premises not shown satisfiable")


_VACUOUS = ("the premises are contradictory (the model of this site is empty): a vacuous proof "
            "is not reported as proven")


def satisfied_at_least_point(premises: Sequence[z3.BoolRef], rounds: int = 6) -> bool:
    """Are the premises true at the least point of their lower bounds? Every integer or
    bit-vector constant starts at 0 and is raised to each syntactic lower bound `v >= e`
    (`v == e`) of the premises, e evaluated at the current point, for a few rounds; Boolean
    constants are false. The premises are then a ground formula: when it simplifies to true,
    that point is a model and the premises are satisfiable, without a solver call (a kernel's
    smallest instance, shapes 1 and every index 0, satisfies most sites; the solver's search
    for a model of a store's records costs ~40 ms, of a raster's premises ~300 ms). Anything
    else (a bound not met, an opaque function left) answers False: the solver decides."""
    from argus.verify import bvtier

    if not premises:
        return True
    ctx = premises[0].ctx
    consts: dict[str, z3.ExprRef] = {}
    for p in premises:
        for _, a in _ordered_consts(p):
            c = z3.z3._to_expr_ref(a, ctx)
            if not (z3.is_int(c) or z3.is_bv(c) or z3.is_bool(c)):
                return False
            consts.setdefault(c.decl().name(), c)
    point = dict.fromkeys(consts, 0)
    froms = (z3.Ast * len(consts))(*[c.as_ast() for c in consts.values()])

    def at_point(t):   # t with every constant replaced by its value (C API: no wrapper checks)
        vals = [z3.BoolVal(bool(point[n])) if z3.is_bool(c) else
                z3.BitVecVal(point[n], c.size()) if z3.is_bv(c) else z3.IntVal(point[n])
                for n, c in consts.items()]
        tos = (z3.Ast * len(vals))(*[v.as_ast() for v in vals])
        r = z3.z3._to_expr_ref(z3.Z3_substitute(ctx.ref(), t.as_ast(), len(vals), froms, tos),
                               ctx)
        return z3.simplify(r)
    try:
        bounds = bvtier._bounds(premises)
    except (z3.Z3Exception, AttributeError):
        bounds = {}
    lower = [(n, e) for n, bl in bounds.items() if n in point and z3.is_int(consts[n])
             for kind, e in bl if kind == "ge"]
    for _ in range(rounds if lower else 0):
        changed = False
        for name, e in lower:
            v = at_point(e)
            if z3.is_int_value(v) and v.as_long() > point[name]:
                point[name] = v.as_long()
                changed = True
        if not changed:
            break
    return z3.is_true(at_point(z3.And(list(premises))))


def _vacuity(premises, rlimit, make) -> z3.CheckSatResult:
    """Are the premises satisfiable? (a proof from contradictory premises proves nothing.)
    The plain SMT core first (a model in ~1 ms where the default solver's preprocessing takes
    20-40 ms on tile queries); its sat and unsat are both definite answers, and only its
    unknown falls back to `make()` with the larger budget.

    A recent model's point first (`satisfied_by_recent_model`, as `_model_search` does): true
    there is a model, so satisfiable. The FA3 attention kernels' queries that purify-arith
    proves (34 in the d 256 causal lpt schedule) each searched a model of their 100-200
    premises (~4 ms each). The model found here is not remembered: kept among the few recent
    ones it pushed out those of the halo TMA conv's row segments, whose next checks then
    searched (3.45 -> 4.20 s, in-process A/B)."""
    known = _known_answer(premises)
    if known is not None:
        return known
    if satisfied_by_recent_model(premises):
        return z3.sat
    v = _limit(z3.SimpleSolver(), min(rlimit, VACUITY_RLIMIT // 5))
    _assert_all(v, premises)
    res = v.check()
    if res == z3.unknown:
        v = _limit(make(), min(rlimit, VACUITY_RLIMIT))
        v.add(*premises)
        res = v.check()
    _record_answer(premises, res)
    return res


def _prove(premises, claims, rlimit, minimize, stats, minimize_rlimit, theory,
           known_sat: bool = False) -> Outcome:
    """The full portfolio (`_portfolio`), which alone decides violations. `known_sat`: a
    quick attempt of `prove` found the negated claims satisfiable, so the query has a
    counterexample and no proof: a non-linear one then goes to the plain solver first (see
    `_portfolio_order`)."""
    conj = z3.And([c for _, c in claims]) if claims else z3.BoolVal(True)
    t0 = time.perf_counter()
    if theory != "QF_BV":
        out = _prove_bv(premises, claims, rlimit, minimize, minimize_rlimit, theory)
        if out is not None:
            if stats is not None:
                stats.add(out.theory, out.ms)
            return out
    res, s = z3.unknown, None
    # each solver of the portfolio in turn, its share of the budget; the last one (which
    # decides) again with the other seeds while it answers unknown
    portfolio = _portfolio(theory)
    tries = [(make, share, 0) for make, share in _portfolio_order(portfolio, theory,
                                                                   known_sat)] + \
        [(portfolio[-1][0], portfolio[-1][1], seed) for seed in SEEDS[1:]]
    decider = None
    cut = False   # a check stopped by its wall-clock backstop, not by its resource limit
    for make, share, seed in tries:
        s = _limit(make(), rlimit * share, seed)
        s.add(*premises)
        s.add(z3.Not(conj))
        t_check = time.perf_counter()
        res = s.check()
        if res != z3.unknown:
            decider = make
            break
        cut = cut or (time.perf_counter() - t_check) * 1e3 >= backstop_ms(int(rlimit * share))
    ms = (time.perf_counter() - t0) * 1e3
    if stats is not None:
        stats.add(theory, ms)
    if res == z3.unsat:
        # a proof from contradictory premises proves nothing: make sure some instance exists
        t1 = time.perf_counter()
        vres = _vacuity(premises, rlimit, portfolio[-1][0])
        ms2 = (time.perf_counter() - t1) * 1e3
        if stats is not None:
            stats.ms += ms2
        if vres == z3.unsat:
            return Outcome("unknown", ms + ms2, reason=_VACUOUS, theory=theory)
        return Outcome("proven", ms + ms2, theory=theory,
                       reason="" if vres == z3.sat else "premises not shown satisfiable")
    if res != z3.sat:
        why = s.reason_unknown() if s is not None else "no budget"
        if cut:
            # z3 says "canceled" for the resource limit and the backstop alike; the time
            # tells them apart. The one machine-dependent verdict: said so, so that a flip
            # between runs is read as load, not as a change of the kernel or the verifier
            why += (" (a wall-clock backstop cut a check short before its resource limit: "
                    "this unknown may not recur on a less loaded machine)")
        return Outcome("unknown", ms, reason=f"z3: {why}: out of budget ({rlimit} resource "
                                              f"units, seeds {', '.join(map(str, SEEDS))})",
                       theory=theory)
    model = s.model()
    minimize = list(minimize) + _other_ints(minimize, list(premises) + [z3.Not(conj)])
    if minimize:
        if decider is _purified:
            # a tactic solver runs its whole tactic again on every check after a push: each
            # probe of the minimization cost as much as the first check (FA3 d 256 causal's
            # k-once counterexample: 20 probes, 180 ms). The plain core is incremental (the
            # same probes: 14 ms) and reaches the same minimum on every objective (each is
            # pinned at the least value the premises allow given the earlier ones)
            s = _limit(z3.SimpleSolver(), rlimit)
            _assert_all(s, premises)
            s.add(z3.Not(conj))
        model = _tighten(s, model, minimize, minimize_rlimit)
    violated = [name for name, c in claims
                if z3.is_false(model.eval(c, model_completion=True))]
    return Outcome("violated", ms, model=model, violated=violated, theory=theory)


def _other_ints(minimize, terms) -> list[z3.ExprRef]:
    """The integer constants of `terms` not in `minimize`, in order of first occurrence: a
    counterexample's values past the obligation's own objectives (the two instances of a
    race, the units of a coverage pair) minimized too, so that they are the least ones
    (canonical), not whichever z3's first model had. z3's first model depends on more than
    the query: on the AST ids of the process, and on its memory layout (a 1 MB block held
    before a run changed raster_full_groups' first model; docs/verify.md, "A z3 context per
    run, canonical counterexamples")."""
    seen = {m.get_id() for m in minimize}
    out = []
    for t in terms:
        for i, a in _ordered_consts(t):
            if i not in seen:
                seen.add(i)
                c = z3.z3._to_expr_ref(a, t.ctx)
                if z3.is_int(c):
                    out.append(c)
    return out


def _prove_bv(premises, claims, rlimit, minimize, minimize_rlimit, theory):
    """Tier 2: the same integer query as exact bit-vectors (bvtier), when every variable is
    bounded and every division is by a power of two. None when not applicable or unknown."""
    from argus.verify import bvtier

    tr = bvtier.translate(premises, claims, extra=list(minimize))
    if tr is None:
        return None
    bp, bc, be, env, width, guarded = tr
    t0 = time.perf_counter()
    s = _limit(z3.Solver(), rlimit)
    s.add(*bp)
    s.add(z3.Not(z3.And([c for _, c in bc]) if bc else z3.BoolVal(True)))
    res = s.check()
    if res == z3.unknown or res == z3.sat and guarded:
        # with variables bounded under a guard the translation is exact for proofs only
        # (bvtier._guarded_bounds): the integer tiers decide and decode a violation, as before
        return None
    label = f"QF_BV{width}"
    if res == z3.unsat:
        vres = _vacuity(bp, rlimit, z3.Solver)
        ms = (time.perf_counter() - t0) * 1e3
        if vres == z3.unsat:
            return Outcome("unknown", ms, reason=_VACUOUS, theory=label)
        return Outcome("proven", ms, theory=label)
    model = s.model()
    objs = [b for b in be if b is not None]
    if objs:
        model = _tighten(s, model, objs, minimize_rlimit)
    # decode with an integer model: pin the variables to the bit-vector witness
    pins = bvtier.int_model_pins(model, env)
    si = _limit(z3.Solver(), max(rlimit_of(200), rlimit))
    si.add(*premises)
    si.add(*pins)
    si.add(z3.Not(z3.And([c for _, c in claims]) if claims else z3.BoolVal(True)))
    if si.check() != z3.sat:
        return None  # should not happen for an exact translation; let the LIA tier decide
    imodel = si.model()
    violated = [name for name, c in claims if z3.is_false(imodel.eval(c, model_completion=True))]
    return Outcome("violated", (time.perf_counter() - t0) * 1e3, model=imodel,
                   violated=violated, theory=label)


def _purified() -> z3.Solver:
    return z3.Then("simplify", "purify-arith", "smt").solver()


def _portfolio(theory: str):
    """(solver factory, share of the budget) tried in order until one answers.

    Integer queries first go through purify-arith: it names every div/mod by a constant
    (counters, tile indices, `row // 512` of an expert map) as a fresh variable with its two
    linear bounds, which z3's arithmetic decides in milliseconds where the plain solver takes
    seconds (measured: 1.7 s -> 0.03 s on the MoE expert query). Non-linear queries (raster
    orders) do better with the plain solver, which gets the whole budget."""
    if theory == "QF_BV":
        return [(z3.Solver, 1.0)]
    return [(_purified, 0.25), (z3.Solver, 1.0)]


def _portfolio_order(portfolio, theory: str, known_sat: bool):
    """The order `_prove` tries the portfolio's solvers in (seed 0): as listed, except for a
    non-linear query already known to be satisfiable (`known_sat`), which tries the deciding
    plain solver first and purify-arith after it, with the same shares (a counterexample
    exists, so no proof is lost: the verdict is the same either way; the minimized model
    starts from another model, so its values may differ, as between two runs of one tree).

    Why: z3 5.4's purified `smt` is heavy-tailed on such sat queries, and its tail is not
    bounded by the rlimit or the wall-clock backstop: the Diophantine-equation handler of its
    integer core (`lp::dioph_eq::substitute_on_q`) grows big-number coefficients without
    counting resource units or polling for cancellation. Seen on store.once of the mutated
    persistent GEMM (`raster_full_groups`) after test_conv_raster_split.py in one process:
    one purified check ran 47 s at 13M counted units (of 100M) and came back from a 20 s
    timeout only then; with the 400 s backstop of a 20 s test budget it hung the run. The
    plain solver (its qfnia tactic) finds that model in 0.07-0.8 s in each of 12 term orders,
    the purified one took 1-7 s or stalled (> 20 s) in 3 of them (docs/verify.md, "A
    counterexample known to exist goes to the plain solver first")."""
    if known_sat and theory == "NIA" and len(portfolio) > 1:
        return [portfolio[-1]] + list(portfolio[:-1])
    return list(portfolio)


def _as_bool(x) -> z3.BoolRef:
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, z3.BoolRef):
        return x
    raise TypeError(f"a verifier premise/claim is not a boolean: {x!r} ({type(x).__name__})")


def _tighten(s: z3.Solver, model: z3.ModelRef, objectives: Sequence[z3.ExprRef],
             rlimit: int) -> z3.ModelRef:
    """Lexicographic minimization by iterative tightening: for each objective in turn, search
    the smallest value the rest of the model allows (each probe is one `check` with an
    eighth of `rlimit` resource units, at most 8 x (objectives + 4) probes: deterministic),
    then pin it.

    The search gallops up from the floor (x <= lo, lo + 1, lo + 3, lo + 7, ... until one is
    satisfiable) and then bisects below that model's value: the bounds probed depend on the
    answers alone until the first satisfiable one, not on the value z3's first model had
    (bisecting down from it, a probe out of budget, read as unsatisfiable, left the value
    near the first model's: raster_full_groups' M = 514, 128 or 1 by process history)."""
    s.set("rlimit", max(rlimit_of(50), rlimit // 8))
    s.set("timeout", backstop_ms(max(rlimit_of(50), rlimit // 8)))
    probes = 8 * (len(objectives) + 4)
    for ob in objectives:
        if probes <= 0:
            break
        best = _num_value(model.eval(ob, model_completion=True))
        lo = min(0, best)
        step = 1   # galloping while no probe of this objective was satisfiable; None after
        while lo < best and probes > 0:
            probes -= 1
            if step is not None:
                mid = min(lo + step - 1, best - 1)
            else:
                mid = (lo + best) // 2 if best - lo > 1 else lo
            s.push()
            s.add(_le(ob, mid))
            r = s.check()
            if r == z3.sat:
                model = s.model()
                best = _num_value(model.eval(ob, model_completion=True))
                step = None
            else:
                lo = mid + 1
                if step is not None:
                    step *= 2
            s.pop()
        s.add(ob == model.eval(ob, model_completion=True))
    return model


def _num_value(v) -> int:
    if z3.is_bv_value(v):
        return v.as_signed_long()
    return v.as_long()


def _le(x: z3.ExprRef, v: int) -> z3.BoolRef:
    return x <= z3.BitVecVal(v, x.size()) if z3.is_bv(x) else x <= v


def value(model: z3.ModelRef, term) -> int:
    """The model's value of an Int/BitVec term (0 for unconstrained ones)."""
    if isinstance(term, int):
        return term
    v = model.eval(term, model_completion=True)
    if z3.is_true(v):
        return 1
    if z3.is_false(v):
        return 0
    return v.as_long()


_THIS = sys.modules[__name__]
for _name, _fresh in (("_PROOFS", OrderedDict), ("_CONSTS", OrderedDict), ("_CANON", dict),
                      ("_RECENT_MODELS", list), ("_KNOWN_SETS", list), ("_NUMERALS", dict),
                      ("_POINT_VALUES", dict), ("_OPAQUE_TERMS", OrderedDict),
                      ("_NAMED_TERMS", OrderedDict), ("_NAMED_PAIRS", dict),
                      ("_BV_CONSTS", lambda: None)):
    context_local(sys.modules[__name__], _name, _fresh)
