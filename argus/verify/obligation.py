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
from argus.verify import solver
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


def run(ob: Obligation, stats: solver.Stats, timeout_ms: int | None) -> Finding:
    if ob.separately and len(ob.claims) > 1:
        out = _prove_each(ob, stats, timeout_ms)
    else:
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
