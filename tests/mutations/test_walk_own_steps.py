"""pipe.totals over a persistent walk whose cooperative consumer warpgroups each consume
their own number of steps per unit and release the unit's others unread
(walk_own_steps_kernels.py; attention's causal walk with own_blocks is the library's case,
tests/verify/test_persistent_own_blocks.py). Each warpgroup's count is a sum over the unit
loop of another form than the producer's (Model.steps_over); check_pipeline pairs the sums
unit by unit (_Pair): the correct kernel's totals are proven, and a warpgroup that releases
one step too few (or too many) in a unit is violated, naming the warpgroup, the unit and
both counts. The toy's data flow is not a GEMM (its wgmma and store checks report errors):
the tests ask pipe.totals alone."""

from __future__ import annotations

import pytest

from argus.verify import check_pipeline, solver
from argus.verify import obligation as OB
from argus.verify.model import Model
from tests.mutations import walk_own_steps_kernels as P

SUBJECT = "every warpgroup of consumer role 'consumer' vs producer"


def _totals(bug):
    obs, finds = check_pipeline.obligations(Model(P.make_walk_own_steps(bug).trace()))
    assert not [f for f in finds if f.code == "pipe.totals" and f.status != "proven"], \
        [(f.subject, f.message) for f in finds if f.code == "pipe.totals"]
    (ob,) = [ob for ob in obs if ob.code == "pipe.totals" and SUBJECT in ob.subject]
    return OB.run(ob, solver.Stats(), None)


def test_own_steps_per_unit_are_proven():
    assert _totals(None).status == "proven"


@pytest.mark.parametrize("bug,w,delta", [("wg0_one_release_short", 0, -1),
                                         ("wg1_one_release_extra", 1, 1)])
def test_one_release_off_in_a_unit_is_caught(bug, w, delta):
    out = _totals(bug)
    assert out.status == "violated", (out.status, out.message)
    wit = out.witness
    assert wit["warpgroup"] == w, wit
    assert wit["consumer_steps_in_iteration"] - wit["producer_steps_in_iteration"] == delta, \
        wit
    assert f"warpgroup {w} of the cooperative consumer role 'consumer'" in out.message
    assert f"iteration {wit['iteration_index']} of its outer loop" in out.message
