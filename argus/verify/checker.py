"""`check(kernel)`: build the model, generate every obligation, decide them, report.

Job: the verifier's one straight-line entry point (ARCHITECTURE.md §3:
`verify.check(k) -> list[Diagnostic]`, empty meaning every invariant is proven). Accepts an
`ir.Kernel` (traced or lowered: lowering-level obligations run when the lowered fields are
present) or a `KernelFunction` plus compile-time values (then the kernel is traced, and
lowered too when `lower=True`).

Severity: "error" = a violated invariant with a decoded counterexample; "unknown" = a query out
of its solver budget or a construct the model cannot represent (never a pass); "warning" =
holds only under a launch precondition; "note" = a proven invariant (only with
include_proven=True).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from dataclasses import dataclass, field
from typing import Any

from argus.errors import Diagnostic
from argus.ir.core import Kernel
from argus.verify import names
from argus.verify import obligation as OB
from argus.verify import solver
from argus.verify.model import Model
from argus.verify.tagdomain import term_name


@dataclass
class Report:
    """Everything one check produced, with timing (docs/verify.md reads `seconds`)."""

    kernel: str
    diagnostics: list[Diagnostic]
    findings: list[OB.Finding] = field(default_factory=list)
    seconds: float = 0.0
    stats: solver.Stats = field(default_factory=solver.Stats)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def unknowns(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "unknown"]

    @property
    def proven(self) -> list[OB.Finding]:
        return [f for f in self.findings if f.status == "proven"]


def _as_kernel(kernel: Any, lower: bool | None, constexprs: dict) -> Kernel:
    if not isinstance(kernel, Kernel) and hasattr(kernel, "trace"):  # a KernelFunction
        if lower:
            # The kernel lowers itself (ag.KernelFunction.lower: trace, infer layouts, lower):
            # the verifier reads IR and never imports the compiler that sits on top of it.
            if not hasattr(kernel, "lower"):
                raise TypeError(f"verify.run(lower=True) got {type(kernel).__name__}, which "
                                f"cannot lower itself; pass an @ag.kernel function, or lower "
                                f"it first (argus.compiler.lower_only) and pass the ir.Kernel")
            kernel = kernel.lower(**constexprs)
        else:
            kernel = kernel.trace(**constexprs)
    elif constexprs:
        raise TypeError("compile-time values are only accepted with a KernelFunction")
    if not isinstance(kernel, Kernel):
        raise TypeError(f"verify.check takes an ir.Kernel or a KernelFunction, got "
                        f"{type(kernel).__name__}")
    return kernel


def collect(model: Model) -> tuple[list[OB.Obligation], list[OB.Finding]]:
    """Every obligation and arithmetic finding of a kernel, in a stable order."""
    from argus.verify import (
        check_asserts,
        check_atomics,
        check_fills,
        check_grid,
        check_layout,
        check_mean,
        check_pdl,
        check_pipeline,
        check_provenance,
        check_reduce,
        check_smem,
        check_softmax,
        check_stores,
        check_sums,
        check_sync,
        check_tiles,
        check_tma_align,
        check_wgmma,
    )

    obs: list[OB.Obligation] = []
    finds: list[OB.Finding] = []
    steps = [("wgmma operands", lambda: ([o for s in model.wgmmas
                                          for o in check_wgmma.obligations(model, s)], [])),
             ("shared-memory layouts", lambda: check_layout.obligations(model)),
             ("TMA coordinates", lambda: check_tma_align.obligations(model)),
             ("pipelines", lambda: check_pipeline.obligations(model)),
             ("shared-memory accesses", lambda: check_smem.obligations(model)),
             ("synchronization", lambda: check_sync.obligations(model)),
             ("stores", lambda: check_stores.obligations(model)),
             ("atomics", lambda: check_atomics.obligations(model)),
             ("register tiles", lambda: check_tiles.obligations(model)),
             ("masked fills", lambda: check_fills.obligations(model)),
             ("online softmax", lambda: check_softmax.obligations(model)),
             ("sums of partials", lambda: check_sums.obligations(model)),
             ("loop reductions", lambda: check_reduce.obligations(model)),
             ("means", lambda: check_mean.obligations(model)),
             ("wgmma operand provenance", lambda: check_provenance.obligations(model)),
             ("clusters", lambda: check_grid.obligations(model)),
             ("register split", lambda: check_grid.register_budget(model)),
             ("programmatic dependent launch", lambda: check_pdl.obligations(model)),
             ("tag assertions", lambda: check_asserts.obligations(model))]
    for what, make in steps:
        try:
            o, f = make()
        except Exception as e:  # noqa: BLE001 - a verifier bug must not pass as a proof
            loc = model.kernel.body.ops[0].loc if model.kernel.body.ops else None
            finds.append(OB.Finding("model", loc or _unknown_loc(), f"{what} obligations",
                                    "unknown", f"verifier internal error ({type(e).__name__}: "
                                               f"{e}); these invariants are not checked"))
            continue
        obs += o
        finds += f
    return obs, finds


def _unknown_loc():
    from argus.errors import Loc

    return Loc.unknown()


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the block (back on after it, if it was on).

    A verification allocates ~40k container objects (z3's term wrappers, records, findings),
    almost all freed by reference counting, yet their count triggers the collector's young
    generation every 700 net allocations and, every ~100 young ones, a full collection, which
    scans every tracked object of the process (the lowered kernels, the proof cache, a test
    session's fixtures: ~290k objects in scripts/verify_timings.py's attention run) and took
    ~0.13 s of the d 256 FA3 attention kernels' ~1.0-1.3 s when one fell inside their run.
    Over the 39 runs of `verify_timings.py --only "attention default" --repeat 3`: 3.7 s of
    GC and 17 full collections before, 1.3 s and 4 with the pause (docs/verify.md, h244).
    What a run leaves is collected by the next collection after it. Verdicts do not depend
    on it (the collector frees memory, nothing else)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run(kernel: Any, *, include_proven: bool = False, timeout_ms: int | None = None,
        lower: bool | None = None, **constexprs: Any) -> Report:
    """Check a kernel and return the full Report (diagnostics, findings, timing), with the
    cyclic garbage collector paused (`collector_paused`), in a z3 context of its own
    (`solver.own_context`: the findings do not depend on what the process verified before)."""
    with collector_paused(), solver.own_context():
        return _run(kernel, include_proven=include_proven, timeout_ms=timeout_ms,
                    lower=lower, **constexprs)


def _run(kernel: Any, *, include_proven: bool = False, timeout_ms: int | None = None,
         lower: bool | None = None, **constexprs: Any) -> Report:
    t0 = time.perf_counter()
    k = _as_kernel(kernel, lower, constexprs)
    try:
        model = Model(k)
    except Exception as e:  # noqa: BLE001 - an unmodelled kernel is unknown, never proven
        from argus.errors import Loc

        f = OB.Finding("model", Loc.unknown(), "kernel model", "unknown",
                       f"the verifier cannot model this kernel ({type(e).__name__}: {e})")
        return Report(k.name, [OB.to_diagnostic(f, k.name)], [f], time.perf_counter() - t0)
    stats = solver.Stats()
    obs, finds = collect(model)
    findings = list(finds)
    # counterexamples are minimized on the obligation's own variables first (iteration,
    # element), then on the CTA and the shapes: small numbers read best
    extra = [v for v, _, _ in model.grid_vars]
    extra += list(model.params.values())
    # the obligation as solved: with the shared minimization order and the tag.assume axiom
    # instances of its query (frozen obligations: a new one, made once per obligation). The
    # tables below are keyed by the obligation's position in `obs`, a value: an obligation
    # compares by identity, and (code, line, subject) does not single one out
    prepared: dict[int, OB.Obligation] = {}

    def prepare(ob: OB.Obligation, at: int | None = None) -> OB.Obligation:
        """`ob` as solved; `at`: its position in `obs` (None: one outside the run, made
        afresh each time it is asked, which only `implied_by` does)."""
        done = prepared.get(at) if at is not None else None
        if done is not None:
            return done
        minimize, premises = ob.minimize, ob.premises
        if ob.minimize is not None:
            seen = {term_name(t) for t in ob.minimize}
            minimize = list(ob.minimize) + [t for t in extra if term_name(t) not in seen]
        if any(op.nvars for op, _ in model.axioms):
            # tag.assume axioms, instantiated on the opaque-function terms of this query
            premises = list(ob.premises) + model.axiom_instances(
                [c for _, c in ob.claims] + list(ob.premises))
        done = dataclasses.replace(ob, minimize=minimize, premises=premises)
        if at is not None:
            prepared[at] = done
        return done

    # consecutive instances of one assertion (a Python-unrolled loop), and the instances of
    # one wgmma op's or one pipeline ring's claims at its unrolled sites: one query a family
    codes = OB.FAMILY_CODES + OB.SITE_FAMILY_CODES
    try:
        by_family = OB.family_proofs([prepare(ob, i) if ob.code in codes else ob
                                      for i, ob in enumerate(obs)], stats, timeout_ms)
    except Exception:  # noqa: BLE001 - no family proof: each obligation is solved itself
        by_family = {}

    def solve(i: int) -> OB.Finding:
        ob = obs[i]
        try:
            return OB.run(prepare(ob, i), stats, timeout_ms, by_family.get(i))
        except Exception as e:  # noqa: BLE001 - a verifier bug is unknown, never proven
            return OB.Finding(ob.code, ob.loc, ob.subject, "unknown",
                              f"verifier internal error ({type(e).__name__}: {e})")

    # obligations implied by others (`Obligation.implied_by`) are decided after those
    results: list[OB.Finding | None] = [None] * len(obs)
    for i in sorted(range(len(obs)), key=lambda i: bool(obs[i].implied_by)):
        ob = obs[i]
        f = _implied(ob, _positions(obs, ob), results, prepare, stats, timeout_ms) \
            if ob.implied_by else None
        results[i] = f if f is not None else solve(i)
    findings += results
    for loc, why in model.unsupported:
        findings.append(OB.Finding("model", loc, "kernel model", "unknown", why))
    # the user's names for IR values (%s.12 -> sA) in every finding's subject, message and
    # fix, proven ones included: Report.findings and the diagnostics name values alike
    # (after _dedupe, which keys on the IR subject: two values of one name stay apart)
    nm = names.build(k)
    kept = {id(f) for f in _dedupe(findings)}
    findings = [(dataclasses.replace(f, subject=names.rename_text(nm, f.subject),
                                     message=names.rename_text(nm, f.message),
                                     fix=names.rename_text(nm, f.fix)), id(f) in kept)
                for f in findings]
    diags = []
    for f in [f for f, keep in findings if keep]:
        if f.status == "proven" and not include_proven:
            continue
        diags.append(OB.to_diagnostic(f, k.name))
    # the lines defining what a finding reads, its thread (and the names in its witness)
    diags = names.annotate(k, diags, nm)
    findings = [f for f, _ in findings]
    order = {"error": 0, "unknown": 1, "warning": 2, "note": 3}
    diags.sort(key=lambda d: order.get(d.severity, 9))
    return Report(k.name, diags, findings, time.perf_counter() - t0, stats)


def _positions(obs: list[OB.Obligation], ob: OB.Obligation) -> list[int | None]:
    """The position in `obs` of each obligation `ob` is implied by (None: outside the run).
    Found by identity, which is what an obligation is: a scan, as implied_by lists are few
    (k-once's coverage, store.once) and short."""
    return [next((j for j, o in enumerate(obs) if o is dep), None) for dep, _ in ob.implied_by]


def _implied(ob: OB.Obligation, at: list[int | None], decided: list[OB.Finding | None],
             prepare, stats: solver.Stats, timeout_ms: int | None) -> OB.Finding | None:
    """A proof of `ob` from proofs of the claims it is implied by (`ob.implied_by`), or None
    when one of them is not proven (then `ob` is solved itself). A listed obligation decided
    in this run counts when proven; when it is not, but has claims besides those needed and
    its counterexample violates none of these, the needed claims alone are queried. One
    outside the run (not reported itself) is queried for the needed claims alone."""
    t0 = time.perf_counter()
    for (dep, need), j in zip(ob.implied_by, at):
        f = decided[j] if j is not None else None   # decided in this run (or not yet: None)
        if f is not None and f.status == "proven":
            continue
        claims = [(n, c) for n, c in dep.claims if n in need]
        if len(claims) != len(set(need)):
            return None
        if f is not None and (set(f.witness.get("violated", ())) & set(need) or
                              len(claims) == len(dep.claims)):
            return None   # a needed claim is violated, or the same query was not proven
        dep = prepare(dep, j)
        try:
            out = solver.prove(dep.premises, claims, timeout_ms=dep.timeout_ms or timeout_ms,
                               stats=stats, theory=dep.tier)
        except Exception:  # noqa: BLE001 - no proof: `ob` is solved itself
            return None
        if out.status != "proven":
            return None
    stats.derived += 1
    return OB.Finding(ob.code, ob.loc, ob.subject, "proven", ob.implied_why, tier="derived",
                      ms=(time.perf_counter() - t0) * 1e3)


def _dedupe(findings: list[OB.Finding]) -> list[OB.Finding]:
    """One violation per (code, line): a bug seen by several obligations reports once."""
    out, seen = [], set()
    for f in findings:
        key = (f.code, f.loc.file, f.loc.line, f.subject) if f.status != "violated" else \
            (f.code, f.loc.file, f.loc.line)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out


def check(kernel: Any, *, include_proven: bool = False, timeout_ms: int | None = None,
          lower: bool | None = None, **constexprs: Any) -> list[Diagnostic]:
    """Verify a kernel: errors (with counterexamples) and unknowns; proven invariants as
    severity "note" when include_proven=True. `kernel` is an ir.Kernel, or a KernelFunction
    traced with `constexprs` (defaults otherwise) and lowered when `lower=True`."""
    return run(kernel, include_proven=include_proven, timeout_ms=timeout_ms, lower=lower,
               **constexprs).diagnostics
