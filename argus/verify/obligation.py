"""Obligations: one invariant instance, checked by the solver or by arithmetic, and its report.

Job: the common shape of every check (what must hold, where, in which tier, how a witness is
decoded and how the bug is fixed), and turning outcomes into `Diagnostic`s: "error" with a
decoded counterexample, "unknown" (timeout or an unmodelled construct: never a pass), and
"note" for proven invariants (`check(..., include_proven=True)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from argus.errors import Diagnostic, Loc
from argus.verify import family, solver
from argus.verify.rules import RULES


@dataclass(frozen=True, eq=False)
class Obligation:
    """premises ⇒ ∧ claims. `decode(model, violated)` returns (message, witness dict).

    Frozen (what the checker adds, the axiom instances and the minimization order, makes a
    new obligation: `dataclasses.replace`), compared and hashed by identity: an obligation is
    one question, and `implied_by` and the checker's tables refer to it as that object."""

    code: str
    loc: Loc
    subject: str                                   # "wgmma at gemm.py:67, operand A"
    premises: Sequence[z3.BoolRef]
    claims: Sequence[tuple[str, z3.BoolRef]]
    decode: Callable[[z3.ModelRef, list[str]], tuple[str, dict]]
    minimize: Sequence[z3.ExprRef] = ()
    fix: str = ""
    confirm: Callable[[dict], dict] | None = None   # concrete replay of a witness
    timeout_ms: int | None = None   # budget in ms' worth of z3 resource units (solver.rlimit_of)
    warn_claims: tuple[str, ...] = ()    # claims whose sole violation is only a warning
    tier: str | None = None              # "LIA", "NIA", "QF_BV" (None: read off the claims)
    # a sufficient condition: when each listed obligation's named claims are proven, this one
    # holds too (its builder states the argument in `implied_why`) and is not solved; else it
    # is solved itself, so a violation is always found and decoded from its own query
    implied_by: tuple[tuple[Obligation, tuple[str, ...]], ...] = ()
    implied_why: str = ""
    # the claims asked one query each (`_prove_each`), not as one conjunction: claims that
    # are cases of one claim (check_asserts._by_writer: one per writer of the element), each
    # easy alone, whose conjunction's negation the solver searches as one disjunction
    separately: bool = False
    # a general lemma proving some of the claims (`Lemma`), tried before the query itself
    lemma: Lemma | None = None


@dataclass(frozen=True, eq=False)
class Lemma:
    """`premises ⇒ claims` over fresh variables standing for terms of an obligation
    (check_stores._tile_obligation: a grouped raster's size terms), which proves the
    obligation's claims named `covers` once `side` (claims under the obligation's own
    premises: the instance's conditions, e.g. those terms >= 0) holds.

    Why: the grouped raster's injectivity is z3's slowest fixed question in every conv
    kernel (0.1-0.7 s), and its instances differ between kernels only in the size terms
    and the launch parameters' facts; stated over free sizes, it is one alpha-equivalent
    query for every kernel of one raster (the solver's proof cache, `solver.canonical`).

    Sound: the lemma holds for every value of its variables, so for the terms' values; its
    premises are instances of the obligation's premises (the terms substituted by the
    variables) and facts of those variables that `side` proves. Equal up to z3.simplify is
    equal in value, so one variable may stand for several spellings of one term."""

    premises: Sequence[z3.BoolRef]
    claims: Sequence[tuple[str, z3.BoolRef]]
    covers: tuple[str, ...]
    side: Sequence[tuple[str, z3.BoolRef]]


@dataclass(frozen=True)
class Finding:
    """A result decided without the solver (or already decided): arithmetic checks."""

    code: str
    loc: Loc
    subject: str
    status: str                    # proven / violated / unknown
    message: str = ""
    witness: dict = field(default_factory=dict)
    fix: str = ""
    tier: str = "arith"
    ms: float = 0.0


def _prove_each(ob: Obligation, stats: solver.Stats, timeout_ms: int | None) \
        -> solver.Outcome:
    """`ob`'s claims proven one query each (Obligation.separately): proven when every claim
    is; else the first violated claim's outcome (its model and name: a counterexample of
    the conjunction too), else unknown naming the first claim not proven. Sound: premises
    imply each claim alone iff they imply the conjunction."""
    outs = []
    for claim in ob.claims:
        out = solver.prove(ob.premises, [claim], timeout_ms=ob.timeout_ms or timeout_ms,
                           minimize=ob.minimize, stats=stats, theory=ob.tier)
        if out.status == "violated":
            return out
        outs.append((claim[0], out))
    ms = sum(o.ms for _, o in outs)
    open_ = [(name, o) for name, o in outs if o.status != "proven"]
    if open_:
        name, o = open_[0]
        return solver.Outcome("unknown", ms, reason=f"{o.reason} (claim {name!r}; "
                                                    f"{len(open_)} of {len(outs)} not proven)",
                              theory=o.theory)
    return solver.Outcome("proven", ms, theory=outs[0][1].theory,
                          reason="; ".join(o.reason for _, o in outs if o.reason))


def _by_lemma(ob: Obligation, stats: solver.Stats, timeout_ms: int | None) \
        -> solver.Outcome | None:
    """`ob` proven through its lemma (`Obligation.lemma`): the lemma, then the claims it
    does not cover with its side conditions, under `ob`'s premises (which the second query
    also checks for satisfiability: no vacuous proof). None when either is not proven: `ob`
    is then queried itself, so a violation is found, minimized and decoded as without it."""
    lem = ob.lemma
    budget = ob.timeout_ms or timeout_ms
    first = solver.prove(lem.premises, lem.claims, timeout_ms=budget, stats=stats,
                         theory=ob.tier)
    if first.status != "proven":
        return None
    rest = [(n, c) for n, c in ob.claims if n not in lem.covers] + list(lem.side)
    second = solver.prove(ob.premises, rest, timeout_ms=budget, stats=stats, theory=ob.tier)
    # rewritten to true, it read no premise and did not check them satisfiable, but the
    # lemma's proof used them: the obligation itself then (a vacuous proof stays unknown)
    if second.status != "proven" or second.theory == solver.REWRITTEN:
        return None
    return solver.Outcome("proven", first.ms + second.ms, theory=second.theory,
                          reason="; ".join(o.reason for o in (first, second) if o.reason))


# the obligations whose consecutive instances are proven as families (`family_proofs`): the
# conv receptive field's per-atom tag assertions (a Python loop over a packed step's atoms:
# the atom's row and tap numerals differ), and the row segments' store.coords of an unrolled
# TMA-store epilogue (one store a row of the box: the row offset differs; the halo TMA conv's
# 8 'g of the value == destination g' queries, 10-20 ms each, one template query of ~12 ms)
FAMILY_CODES = ("tag.assert", "store.coords")
# the obligations whose instances are proven as families wherever they stand in the list
# (`family_proofs`), grouped by code, claim names and premise count, then by anti-unification:
# the wgmma sites of one op that a Python-unrolled or peeled loop repeats (FA3-overlap
# attention's Q K^T: 4 k slices of d 256, in the peeled first block and in the main loop),
# each with its own operand records whose numerals (the slice's column, the stage's slot)
# differ, and whose checks come together per site (defined, agree, k-once), so one claim's
# instances are not consecutive; and the ring protocol's claims at each produce and consume
# point of the K and V rings (FA3-overlap's peeled steps add points: 6-8 instances of each)
SITE_FAMILY_CODES = ("wgmma.defined", "wgmma.agree", "wgmma.k-once", "pipe.data",
                     "pipe.no-overwrite", "pipe.no-early-read", "pipe.deadlock")


def _clusters(queries: Sequence, labels: Sequence) -> tuple[list[list[int]], dict]:
    """(the queries' indices in clusters, in order, each of queries that anti-unify with its
    first (`family.template` of the two); the clusters' templates made on the way, by the
    cluster's first index). All of them when their whole template exists; else those of one
    label (an obligation's subject: the sites of one wgmma op, k-once against itself and
    against its siblings) when theirs does; the others (labels too few for a family, or
    without one template: the ring protocol's points, one subject each) each in the first
    cluster of these others whose first it anti-unifies with (pairs and up: a subject's own
    cluster is not joined)."""
    whole = family.template(queries)
    if whole is not None:
        return [list(range(len(queries)))], {0: whole}
    out: list[list[int]] = []
    made: dict = {}
    by_label: dict = {}
    for i, lab in enumerate(labels):
        by_label.setdefault(lab, []).append(i)
    rest: list[int] = []   # those of labels too few for a family, or of no one template
    for idx in by_label.values():
        tmpl = family.template([queries[i] for i in idx]) \
            if len(idx) >= family.FAMILY_MIN else None
        if tmpl is not None:
            made[idx[0]] = tmpl
            out.append(idx)
        else:
            rest += idx
    part: list[list[int]] = []
    for i in sorted(rest):
        for c in part:
            if family.anti_unify([queries[c[0]], queries[i]]):
                c.append(i)
                break
        else:
            part.append([i])
    return out + part, made


def family_proofs(obs: Sequence[Obligation], stats: solver.Stats, timeout_ms: int | None) \
        -> dict[int, solver.Outcome]:
    """Outcomes of the obligations of `obs` (by position) proven through a family template
    (family.py): consecutive obligations of FAMILY_CODES, and obligations of
    SITE_FAMILY_CODES wherever they stand (keyed by code, claim names and premise count, then
    clustered by anti-unification, `_clusters`: an unrolled op's sites are never consecutive),
    without lemma or implied_by, whose queries anti-unify, FAMILY_MIN of them or more (rarer
    subjects pooled pairwise); a `separately` obligation's claims are
    templated claim by claim (each a query, as `_prove_each` asks them). An obligation is in
    the result only when every template of its run is proven and its own premises are shown
    satisfiable (`family.satisfiable`); every other one is solved itself (`run`), so a
    violation or an unknown is found and decoded as without this. The 3-d packed conv's 4
    per-atom assertions of 2 writer cases each: 8 queries -> 2 for atom 0 (its writers'
    records differ in shape: another formula) and 2 templates for atoms 1-3."""
    out: dict[int, solver.Outcome] = {}
    cand = [i for i, ob in enumerate(obs)
            if ob.code in FAMILY_CODES and ob.lemma is None and not ob.implied_by]
    groups: list[list[int]] = []
    for i in cand:
        g = groups[-1] if groups else None
        if g and g[-1] == i - 1 and obs[g[0]].separately == obs[i].separately and \
                len(obs[g[0]].claims) == len(obs[i].claims):
            g.append(i)
        else:
            groups.append([i])
    # SITE_FAMILY_CODES: by code, claims and premise count, then clustered (`_clusters`)
    keyed: dict[tuple, list[int]] = {}
    for i, ob in enumerate(obs):
        if ob.code in SITE_FAMILY_CODES and ob.lemma is None and not ob.implied_by:
            keyed.setdefault((ob.code, ob.separately, tuple(n for n, _ in ob.claims),
                              len(ob.premises)), []).append(i)
    clustered = len(groups)   # groups from here on are clusters already
    known: dict[int, Any] = {}   # a cluster's template, where `_clusters` made it
    for g in keyed.values():
        if len(g) >= family.FAMILY_MIN:
            cs, made = _clusters([(obs[i].premises, obs[i].claims) for i in g],
                                 [obs[i].subject for i in g])
            for c in cs:
                if c[0] in made and len(c) >= family.FAMILY_MIN:
                    known[len(groups)] = made[c[0]]
                groups.append([g[k] for k in c])
    for gi, g in enumerate(groups):
        if len(g) < family.FAMILY_MIN:
            continue
        # a tag assertion's claim is named by its text, where an unrolled loop's index shows
        # (`hrow == o + 2`, filter row 1 of the halo conv): the names only label the claims,
        # so each member's claims are templated under the group's first member's names
        names = [n for n, _ in obs[g[0]].claims]

        def named(ob: Obligation) -> list[tuple[str, z3.BoolRef]]:
            return [(n, c) for n, (_, c) in zip(names, ob.claims)]
        queries = [(obs[i].premises, named(obs[i])) for i in g]
        # the whole group's template first: when it anti-unifies, it is the one run that
        # `families` would find (each member anti-unifies with the first), without walking
        # every member against the first and then all of them again
        whole = known[gi] if gi in known else family.template(queries)
        # a cluster (its members each anti-unify with its first) whose numerals are not
        # affine in any one order: one template with the numerals as a tuple of variables
        # taking one member's values (family.template, tuples=True)
        tuples = whole is None and gi >= clustered
        if tuples:
            whole = family.template(queries, tuples=True)
        runs = [list(range(len(g)))] if whole is not None else \
            [] if gi >= clustered else family.families(queries)
        for run_ in runs:
            if len(run_) < family.FAMILY_MIN:
                continue
            members = [obs[g[k]] for k in run_]
            first = members[0]
            units = [[(ob.premises, [named(ob)[c]]) for ob in members]
                     for c in range(len(first.claims))] if first.separately and \
                len(first.claims) > 1 else [[(ob.premises, named(ob)) for ob in members]]
            ms, theory, rewritten = 0.0, None, True
            for unit in units:
                tmpl = whole if whole is not None and len(units) == 1 else \
                    family.template(unit, tuples=tuples)
                # proof_only: a template not proven proves nothing (its members are asked
                # themselves), so its counterexample is not searched for
                got = solver.prove(*tmpl, timeout_ms=first.timeout_ms or timeout_ms,
                                   stats=stats, theory=first.tier,
                                   proof_only=True) if tmpl else None
                if got is None or got.status != "proven":
                    break
                ms, theory = ms + got.ms, got.theory
                rewritten = rewritten and got.theory == solver.REWRITTEN
            else:
                for k, ob in zip(run_, members):
                    # templates whose claims z3's simplifier turned into true hold for all
                    # values (solver.prove, step 0), so do their instances: no premise is
                    # read, none checked (the rowbox TMA conv's 8 store.coords, each such)
                    if rewritten or family.satisfiable(ob.premises):
                        out[g[k]] = solver.Outcome(
                            "proven", ms / len(members), theory=theory,
                            reason=f"one query for {len(members)} instances (family.py)")
    return out


def run(ob: Obligation, stats: solver.Stats, timeout_ms: int | None,
        proven: solver.Outcome | None = None) -> Finding:
    """`ob`'s finding; `proven`: its proof found already (`family_proofs`)."""
    out = proven or (_by_lemma(ob, stats, timeout_ms) if ob.lemma is not None else None)
    if out is None and ob.separately and len(ob.claims) > 1:
        out = _prove_each(ob, stats, timeout_ms)
    elif out is None:
        out = solver.prove(ob.premises, ob.claims, timeout_ms=ob.timeout_ms or timeout_ms,
                           minimize=ob.minimize, stats=stats, theory=ob.tier)
    if out.status == "proven":
        return Finding(ob.code, ob.loc, ob.subject, "proven", tier=out.theory, ms=out.ms)
    if out.status == "unknown":
        return Finding(ob.code, ob.loc, ob.subject, "unknown", out.reason, tier=out.theory,
                       ms=out.ms)
    try:
        message, witness = ob.decode(out.model, out.violated)
    except Exception as e:  # noqa: BLE001 - a decoding bug must not hide the violation
        message, witness = f"violated ({', '.join(out.violated)}); decoding failed: {e}", {}
    witness = dict(witness)
    witness.setdefault("violated", out.violated)
    if ob.confirm is not None:
        try:
            witness.update(ob.confirm(witness))
        except Exception as e:  # noqa: BLE001
            witness["replay"] = f"replay failed: {e}"
    status = "violated"
    if witness.get("replay_reachable") is False:
        # the concrete replay from the initial state reaches no violation: the solver's
        # counterexample is an unreachable state of an inductive argument, not a bug. When the
        # replay ran every launch's real step sequence it is a proof; else it is unknown
        if witness.get("replay_exhaustive"):
            return Finding(ob.code, ob.loc, ob.subject, "proven", tier="replay", ms=out.ms)
        return Finding(ob.code, ob.loc, ob.subject, "unknown",
                       f"the inductive counterexample ({message}) is unreachable in the "
                       f"concrete replay ({witness.get('replay')}), which covers these shapes "
                       f"only", witness, tier=out.theory, ms=out.ms)
    if ob.warn_claims and set(out.violated) <= set(ob.warn_claims):
        status = "warning"
    return Finding(ob.code, ob.loc, ob.subject, status, message, witness, ob.fix,
                   tier=out.theory, ms=out.ms)


def to_diagnostic(f: Finding, kernel: str) -> Diagnostic:
    rule = RULES.get(f.code)
    title = rule.title if rule else f.code
    severity = {"violated": "error", "unknown": "unknown", "proven": "note",
                 "warning": "warning"}[f.status]
    if f.status == "proven":
        message = f"proven: {title} — {f.subject} [{f.tier}, {f.ms:.1f} ms]"
    elif f.status == "unknown":
        message = f"unknown (not proven): {title} — {f.subject}: {f.message}"
    elif f.status == "warning":
        message = f"{title} — {f.subject}: {f.message}"
    else:
        message = f"{title} violated — {f.subject}: {f.message}"
    fix = f.fix or (rule.fix if rule and f.status in ("violated", "warning") else "")
    witness: dict[str, Any] = dict(f.witness)
    if f.status in ("violated", "warning"):
        witness.setdefault("tier", f.tier)
    return Diagnostic(severity, f.code, message, f.loc, kernel, witness, fix)
