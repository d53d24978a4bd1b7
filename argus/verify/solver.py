"""Solver queries: prove a claim, or return a minimized model; a timeout is `unknown`.

Job: one place where z3 is called, so every obligation gets the same honesty rules
(INVARIANTS.md §3.6): a per-query timeout (default 1 s, `ARGUS_VERIFY_TIMEOUT_MS` or the
`timeout_ms` argument), `unknown` never read as `proven`, and counterexamples minimized by
iterative tightening (push `x < current`, re-check with a small budget; z3.Optimize stalls on
the non-linear `tile * Kt` terms of persistent kernels, tightening does not).

A query is "premises ∧ ¬(∧ claims)": UNSAT proves every claim for all values of the free
variables; SAT gives a witness and the list of claims it violates.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Sequence

import z3

DEFAULT_TIMEOUT_MS = 1000


def default_timeout_ms() -> int:
    return int(os.environ.get("ARGUS_VERIFY_TIMEOUT_MS", DEFAULT_TIMEOUT_MS))


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
    by_theory: dict[str, int] = field(default_factory=dict)

    def add(self, theory: str, ms: float) -> None:
        self.queries += 1
        self.ms += ms
        self.by_theory[theory] = self.by_theory.get(theory, 0) + 1


def _theory(terms: Sequence[z3.ExprRef]) -> str:
    """QF_BV when bit-vectors appear, LIA/NIA otherwise (for reports only)."""
    seen_bv = False
    todo = list(terms)
    visited = set()
    while todo and not seen_bv:
        t = todo.pop()
        if t.get_id() in visited:
            continue
        visited.add(t.get_id())
        if z3.is_bv(t):
            seen_bv = True
        todo.extend(t.children())
    return "QF_BV" if seen_bv else "LIA"


def prove(premises: Sequence[z3.BoolRef], claims: Sequence[tuple[str, z3.BoolRef]],
          timeout_ms: int | None = None, minimize: Sequence[z3.ExprRef] = (),
          stats: Stats | None = None, minimize_budget_ms: int = 600) -> Outcome:
    """Prove `premises ⇒ every claim`. On SAT the model is minimized lexicographically over
    `minimize` (Int or BitVec terms, smallest first) and the violated claim names listed."""
    timeout_ms = default_timeout_ms() if timeout_ms is None else timeout_ms
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    premises = [_as_bool(p) for p in premises]
    claims = [(n, _as_bool(c)) for n, c in claims]
    s.add(*premises)
    conj = z3.And([c for _, c in claims]) if claims else z3.BoolVal(True)
    s.add(z3.Not(conj))
    theory = _theory(list(premises) + [c for _, c in claims])
    t0 = time.perf_counter()
    res = s.check()
    ms = (time.perf_counter() - t0) * 1e3
    if stats is not None:
        stats.add(theory, ms)
    if res == z3.unsat:
        # a proof from contradictory premises proves nothing: make sure some instance exists
        v = z3.Solver()
        v.set("timeout", int(timeout_ms))
        v.add(*premises)
        t1 = time.perf_counter()
        vres = v.check()
        ms2 = (time.perf_counter() - t1) * 1e3
        if stats is not None:
            stats.ms += ms2
        if vres == z3.unsat:
            return Outcome("unknown", ms + ms2, reason="the premises are contradictory (the "
                           "model of this site is empty): a vacuous proof is not reported as "
                           "proven", theory=theory)
        return Outcome("proven", ms + ms2, theory=theory,
                       reason="" if vres == z3.sat else "premises not shown satisfiable")
    if res != z3.sat:
        return Outcome("unknown", ms, reason=f"z3: {s.reason_unknown()} after {ms:.0f} ms "
                                              f"(timeout {timeout_ms} ms)", theory=theory)
    model = s.model()
    if minimize:
        model = _tighten(s, model, minimize, minimize_budget_ms)
    violated = [name for name, c in claims
                if z3.is_false(model.eval(c, model_completion=True))]
    return Outcome("violated", ms, model=model, violated=violated, theory=theory)


def _as_bool(x) -> z3.BoolRef:
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, z3.BoolRef):
        return x
    raise TypeError(f"a verifier premise/claim is not a boolean: {x!r} ({type(x).__name__})")


def _lt(x: z3.ExprRef, v: z3.ExprRef) -> z3.BoolRef:
    return z3.ULT(x, v) if z3.is_bv(x) else x < v


def _tighten(s: z3.Solver, model: z3.ModelRef, objectives: Sequence[z3.ExprRef],
             budget_ms: int) -> z3.ModelRef:
    """Lexicographic minimization: for each objective, keep asking for a smaller value."""
    t_end = time.perf_counter() + budget_ms / 1e3
    s.set("timeout", max(50, budget_ms // 4))
    fixed = 0
    for ob in objectives:
        while time.perf_counter() < t_end:
            cur = model.eval(ob, model_completion=True)
            s.push()
            s.add(_lt(ob, cur))
            r = s.check()
            if r == z3.sat:
                model = s.model()
                s.pop()
                continue
            s.pop()
            break
        s.add(ob == model.eval(ob, model_completion=True))
        fixed += 1
    return model


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
