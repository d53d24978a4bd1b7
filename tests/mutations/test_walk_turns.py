"""The turns of a consumer role over a walk whose steps per unit vary (walk_turn_kernels.py:
the warpgroups take the units in turns, without pipe.skip, one release per step).
check_pipeline._turn_obligations reported such counts, sums over the unit loop
(Model.steps_over), as unknown for both of its obligations. It now pairs them with the
producer's unit by unit, as pipe.totals pairs a cooperative role's (_pair_sums): the
warpgroups' sums together against the empty barrier's count x the producer's (pipe.arrivals),
each warpgroup's against the producer's (pipe.totals). Seeded below: turns that do not
match the producer's steps in a unit (the turn's warpgroup consumes one step more; a turn
condition that gives a unit to both warpgroups) are pipe.arrivals errors naming the unit and
its counts, and the turns without pipe.skip (wrong in every kernel: test_pipe_turns.py) are a
pipe.totals error naming the unit a warpgroup's counter misses. The proven side is
tests/verify/test_walk_turns_paired.py. The toy's data flow is not a GEMM (its wgmma and store
checks report errors): the obligations are asked of check_pipeline alone, and the seeded-bug
harness asks for the pipeline codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.verify import check_pipeline, solver
from argus.verify import obligation as OB
from argus.verify.model import Model
from tests.mutations import seeded as S
from tests.mutations import walk_turn_kernels as P

FILE = Path(P.__file__)
SUBJECT = "the turns of consumer role 'consumer' vs producer"


def _turns(bug, skip=False, **kw) -> dict:
    """The turns' obligations (pipe.arrivals, pipe.totals) of the kernel, run."""
    obs, finds = check_pipeline.obligations(Model(P.make_walk_turns(bug, skip=skip,
                                                                    **kw).trace()))
    assert not [f for f in finds if f.code.startswith("pipe.") and f.status == "unknown"], \
        [(f.subject, f.message) for f in finds if f.status == "unknown"]
    return {ob.code: OB.run(ob, solver.Stats(), None) for ob in obs if SUBJECT in ob.subject}


@pytest.mark.parametrize("bug,skip,codes", [("one_step_more", False, ("pipe.arrivals",)),
                                            ("both_take_a_unit", False, ("pipe.arrivals",)),
                                            ("one_step_more", True, ("pipe.totals",))],
                         ids=["one_step_more", "both_take_a_unit", "one_step_more_skip"])
def test_turn_bug_is_caught_at_its_line(bug, skip, codes):
    S.assert_caught(P.make_walk_turns(bug, skip=skip).trace(), codes, FILE, bug)


def test_turn_consuming_one_step_more_in_a_unit_is_caught():
    out = _turns("one_step_more")["pipe.arrivals"]
    assert out.status == "violated", (out.status, out.message)
    wit = out.witness
    per, made = wit["steps_by_warpgroup_in_iteration"], wit["producer_steps_in_iteration"]
    # one warpgroup's turn, one step more than the producer fills in the unit
    assert sorted(per.values()) == [0, made + 1], wit
    assert per[wit["warpgroup"]] == made + 1, wit
    assert f"in iteration {wit['iteration_index']} of its outer loop" in out.message
    assert "whose turn it is, consumes more steps than the producer fills" in out.message


def test_unit_taken_by_both_warpgroups_is_caught():
    out = _turns("both_take_a_unit")["pipe.arrivals"]
    assert out.status == "violated", (out.status, out.message)
    wit = out.witness
    per, made = wit["steps_by_warpgroup_in_iteration"], wit["producer_steps_in_iteration"]
    assert list(per.values()) == [made, made] and made > 0, wit
    assert wit["iteration_index"] % 3 == 0, wit       # the units u % 3 == 0 the bug adds
    assert "the turn condition selects more than 1 warpgroup" in out.message


def test_turns_without_skip_miss_a_unit_in_each_counter():
    """The correct turns without pipe.skip: each step consumed once (pipe.arrivals proven,
    tests/verify), but a warpgroup's counter misses the other's units: a counterexample,
    not the unknown it was."""
    out = _turns(None)["pipe.totals"]
    assert out.status == "violated", (out.status, out.message)
    wit = out.witness
    per, made = wit["steps_by_warpgroup_in_iteration"], wit["producer_steps_in_iteration"]
    w, it = wit["warpgroup"], wit["iteration_index"]
    assert made == it % 3 + 1 and per[w] == 0 and per[(it % 2)] == made and w != it % 2, wit
    assert f"counts 0 steps in iteration {it} of its outer loop" in out.message
    assert "pipe.skip" in out.message


def _two(u):
    return 2


def test_turns_over_a_trip_count_producer_are_paired_unit_by_unit():
    """The same 2 steps in every unit: the producer's count is the walk's trip count x 2
    (Model.trip_steps), no sum, each warpgroup's a sum over its turns. Paired unit by unit
    (_Pair's trip form) instead of the unknown it was: without pipe.skip each step is still
    consumed once (pipe.arrivals proven) and a warpgroup's counter misses the other's unit,
    named with its iteration; with pipe.skip both are proven."""
    out = _turns(None, steps=_two)
    assert out["pipe.arrivals"].status == "proven", out["pipe.arrivals"].message
    bad = out["pipe.totals"]
    assert bad.status == "violated", (bad.status, bad.message)
    wit = bad.witness
    per, made = wit["steps_by_warpgroup_in_iteration"], wit["producer_steps_in_iteration"]
    w, it = wit["warpgroup"], wit["iteration_index"]
    assert made == 2 and per[w] == 0 and per[it % 2] == 2 and w != it % 2, wit
    assert f"counts 0 steps in iteration {it} of its outer loop" in bad.message
    # with pipe.skip every warpgroup counts every unit: pipe.totals pairs the role's sum with
    # the producer's trip count (_totals, the same trip form), proven
    obs, finds = check_pipeline.obligations(Model(P.make_walk_turns(skip=True,
                                                                    steps=_two).trace()))
    totals = [OB.run(ob, solver.Stats(), None) for ob in obs if ob.code == "pipe.totals"]
    assert totals and all(o.status == "proven" for o in totals), \
        [(o.status, o.message) for o in totals]
    assert not [f for f in finds if f.status != "proven"], [(f.code, f.message) for f in finds]


def test_turn_one_step_more_over_a_trip_count_producer_names_the_unit():
    out = _turns("one_step_more", steps=_two)["pipe.arrivals"]
    assert out.status == "violated", (out.status, out.message)
    wit = out.witness
    per, made = wit["steps_by_warpgroup_in_iteration"], wit["producer_steps_in_iteration"]
    assert made == 2 and sorted(per.values()) == [0, 3], wit
    assert f"in iteration {wit['iteration_index']} of its outer loop" in out.message
