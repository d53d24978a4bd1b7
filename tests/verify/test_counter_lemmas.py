"""The loop counter lemmas (argus/verify/transfer/control.py `_counter_lemmas`) are facts the
verifier assumes when it asks whether a produce site can fill a consumer's slot
(`Model._never_active`): each must hold in every iteration of its loop, or a real writer could
be dropped and a bug missed. Checked here on the tail-split GEMM (a main walk then a tail walk
into one ring, where the lemmas decide the question) for every loop scope of every pipeline
step: no assignment of the kernel's premises and the scope's constraints violates one."""

from __future__ import annotations

import z3

from argus import verify
from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, kernel_for
from argus.verify import checker, solver
from argus.verify.model import Model


def _model():
    problem = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    fn, schedule = kernel_for(problem, GemmSchedule(cluster_m=2, tail_splits=2))
    return Model(lower_only(fn, s=schedule))


def test_counter_lemmas_hold_in_every_iteration():
    model = _model()
    checked = 0
    for pipe in model.pipes.values():
        for step in pipe.steps:
            for scope in step.site.scopes:
                for lemma in scope.counter_lemmas:
                    s = z3.Solver()
                    s.set("timeout", 20_000)
                    s.add(*model.premises, *step.site.constraints(), z3.Not(lemma))
                    res = s.check()
                    assert res != z3.sat, f"lemma {lemma} fails at {step.op.loc}: {s.model()}"
                    checked += res == z3.unsat
    assert checked >= 4   # the main and tail loops of both roles


def test_lemmas_only_bound_counters_of_loops_with_steps():
    # a lemma per count of steps per iteration: the k loop of each role carries one
    model = _model()
    loops = [sc for p in model.pipes.values() for st in p.steps for sc in st.site.scopes
             if sc.kind == "loop"]
    assert loops and all(len(sc.counter_lemmas) <= len(model.pipes) for sc in loops)
    assert any(sc.counter_lemmas for sc in loops)


def test_tail_split_gemm_verifies_without_false_alarm():
    problem = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    fn, schedule = kernel_for(problem, GemmSchedule(cluster_m=2, tail_splits=2))
    report = verify.run(lower_only(fn, s=schedule))
    assert not [d for d in report.errors if d.code.startswith("wgmma")], report.errors


def test_never_active_questions_are_decided_by_the_plain_core():
    """`Model._never_active` asks the plain core (non-linear settings) first: on the tail-split
    GEMM it must decide every distinct question (an unknown falls back on the default solver,
    20-120 ms each) and agree with the default solver (a dropped produce site must really never
    fill the slot: unsat), both for the question as posed and its canonical renaming."""
    # in a z3 context of its own, as verify.run is (solver.own_context): the questions are
    # asked whatever the process verified before (with the tables of the process's shared
    # context a kernel verified earlier in the process could answer them first)
    with solver.own_context():
        model = _model()
        checker.collect(model)
        questions = list(model.__dict__.get("_inactive_by_term", {}).values())
        _check_questions(questions)


def _check_questions(questions):
    assert len(questions) >= 2 and any(never for _, never in questions)
    for term, never in questions:
        plain = z3.SimpleSolver()
        for name, v in solver.NIA_PARAMS.items():
            plain.set(name, v)
        full = z3.Solver()
        for s in (plain, full):
            s.set("rlimit", 5_000_000)
            s.add(term)
        assert plain.check() == full.check() == (z3.unsat if never else z3.sat), term
