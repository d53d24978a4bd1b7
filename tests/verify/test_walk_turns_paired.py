"""The turns of a consumer role over a walk whose steps per unit vary
(tests/mutations/walk_turn_kernels.py: warpgroup u % 2 consumes unit u's u % 3 + 1 steps).
Each warpgroup's count is a sum over the unit loop of another form than the producer's
(Model.steps_over); check_pipeline._turn_obligations pairs them unit by unit (_pair_sums, the
rule pipe.totals pairs a cooperative role's warpgroups with): the warpgroups' per-unit steps
together equal the empty barrier's count x the producer's in every unit, so pipe.arrivals is
proven where it was one unknown pipe.totals finding for both obligations. (Without pipe.skip
each warpgroup's counter misses the other's units: that pipe.totals is violated,
tests/mutations/test_walk_turns.py; with pipe.skip the role is not a turns role: a
warpgroup counts every unit's steps, its own or skipped, the producer's sum, proven below.)"""

from __future__ import annotations

from argus import verify
from argus.verify import check_pipeline, solver
from argus.verify import obligation as OB
from argus.verify.model import Model
from tests.mutations import walk_turn_kernels as P

SUBJECT = "the turns of consumer role 'consumer' vs producer"


def _pipeline(skip):
    return check_pipeline.obligations(Model(P.make_walk_turns(skip=skip).trace()))


def test_turns_arrivals_are_proven_unit_by_unit():
    obs, finds = _pipeline(skip=False)
    assert not [f for f in finds if f.code.startswith("pipe.") and f.status == "unknown"], \
        [(f.subject, f.message) for f in finds if f.status == "unknown"]
    (ob,) = [ob for ob in obs if ob.code == "pipe.arrivals" and SUBJECT in ob.subject]
    assert [n for n, _ in ob.claims][:2] == ["same iterations", "same steps in every iteration"]
    out = OB.run(ob, solver.Stats(), None)
    assert out.status == "proven", (out.status, out.message)


def test_turns_with_skip_totals_are_proven():
    obs, finds = _pipeline(skip=True)
    assert not [f for f in finds if f.code.startswith("pipe.")], \
        [(f.code, f.status, f.subject) for f in finds]
    (ob,) = [ob for ob in obs if ob.code == "pipe.totals"]
    assert OB.run(ob, solver.Stats(), None).status == "proven"


def test_verify_reports_the_missing_skip_and_no_unknown():
    """The whole verifier on the turns without pipe.skip: the pipeline's findings are the
    missing skip's pipe.totals error, no pipe.arrivals error and nothing unknown."""
    pipe = [d for d in verify.check(P.make_walk_turns(skip=False).trace())
            if d.code.startswith("pipe.") and d.severity != "info"]
    assert [(d.code, d.severity) for d in pipe] == [("pipe.totals", "error")], \
        [str(d) for d in pipe]
    assert "steps_by_warpgroup_in_iteration" in pipe[0].counterexample
