"""Consumer roles whose warpgroups take turns on a ring's steps (tests/mutations/
pipe_turn_kernels.py; review of issue 13 / 17): check_pipeline._cooperative read every role of
several warpgroups without pipe.skip as cooperative (every warpgroup consumes every step, the
empty barrier counts one arrival per warpgroup). It now asks the IR (_turns): the empty
barrier counts fewer arrivals than the role has warpgroups and a consume step is under a
condition on the warpgroup index.

A turn-taking role without pipe.skip is no correct kernel in Argus: a warpgroup's step counter
moves only on its own steps and on pipe.skip, so warpgroup 1's first step waits on slot 0 for
ring step 0 (warpgroup 0's tile); lowering refuses it too. So there is no clean variant
without pipe.skip: the clean one below takes turns with pipe.skip (regression guard), and the
no-skip form is a bug whose finding now names the missing skip (pipe.totals, per warpgroup)
instead of a cooperative role and a wrong arrival count."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus import verify
from argus.compiler import lower_only
from argus.errors import CompileError
from tests.mutations import pipe_turn_kernels as P
from tests.mutations import seeded as S

FILE = Path(P.__file__)

BUGS = [
    ("no_skip", lambda: P.make_turns(skip=False), ("pipe.totals",)),
    ("no_skip", lambda: P.make_turns(skip=False, ordered=False), ("pipe.totals",)),
    ("both_consume", lambda: P.make_turns("both_consume"), ("pipe.arrivals",)),
    ("both_plain", lambda: P.make_turns("both_plain"), ("pipe.arrivals",)),
    ("skip_short", lambda: P.make_turns("skip_short"), ("pipe.totals",)),
]


@pytest.mark.parametrize("bug,build,codes", BUGS,
                         ids=["no_skip", "no_skip_unordered", "both_consume", "both_plain",
                              "skip_short"])
def test_turn_bug_is_caught_at_its_line(bug, build, codes):
    S.assert_caught(build().trace(), codes, FILE, bug)


@pytest.mark.parametrize("stages", [2, 3])
def test_turns_with_skip_are_clean(stages):
    S.assert_clean(P.make_turns(stages=stages).trace())


def _errors(kernel):
    return [d for d in verify.check(kernel.trace()) if d.severity == "error"]


def test_turns_without_skip_name_the_missing_skip_not_a_cooperative_role():
    """The finding is pipe.totals per warpgroup, with each warpgroup's count (one tile's
    steps, half the producer's) and the fix pipe.skip; no pipe.arrivals error (the empty
    barrier's one release per step is what the turns intend) and no "cooperative" wording
    (the parent commit said "the cooperative consumer role" and "initialized for 1
    arrival(s) per phase but 2 consumer warpgroup(s) release each step")."""
    errors = _errors(P.make_turns(skip=False))
    pipe = [d for d in errors if d.code.startswith("pipe.")]
    assert [d.code for d in pipe] == ["pipe.totals"], [str(d) for d in pipe]
    (d,) = pipe
    wit = d.counterexample
    counts, made = wit["steps_by_warpgroup"], wit["producer_steps"]
    assert set(counts) == {0, 1} and all(2 * n == made for n in counts.values()), wit
    assert wit["empty_barrier_count"] == 1 and wit["warpgroup"] in (0, 1), wit
    assert "take turns" in d.message and "cooperative" not in d.message, d.message
    assert "pipe.skip" in d.message and "ring.skip" in (d.fix or ""), (d.message, d.fix)


def test_turns_without_skip_are_a_real_bug():
    """Why (a) is no false alarm: lowering refuses the role (it counts both warpgroups'
    releases, as the per-warpgroup counters make them), and the data model finds the
    warpgroup multiplying another turn's tile (store.coords: n of the wrong B rows)."""
    with pytest.raises(CompileError, match="consumers=1 but 2 warpgroups release"):
        lower_only(P.make_turns(skip=False))
    assert any(d.code == "store.coords" for d in _errors(P.make_turns(skip=False)))


def test_a_turn_condition_selecting_both_names_the_surplus():
    """`wg >= 0` names the warpgroup but selects both: every step consumed twice against one
    release a step (pipe.arrivals), counted per warpgroup."""
    (d,) = [d for d in _errors(P.make_turns("both_consume")) if d.code == "pipe.arrivals"]
    wit = d.counterexample
    assert sum(wit["steps_by_warpgroup"].values()) == 2 * wit["producer_steps"], wit
    assert "selects more than 1 warpgroup" in d.message, d.message


def test_cooperative_roles_keep_the_per_warpgroup_claim():
    """The roles of pipe_coop_kernels (empty barrier count = warpgroups) stay cooperative:
    _turns needs fewer arrivals than warpgroups."""
    from argus.verify import check_pipeline
    from argus.verify.model import Model
    from tests.mutations import pipe_coop_kernels as PC

    for kernel, turns in ((PC.make_coop_turns("wg0_only"), False),
                          (P.make_turns(skip=False), True), (P.make_turns(), False)):
        model = Model(kernel.trace())
        (pipe,) = model.pipes.values()
        cons = [s for s in pipe.steps if s.kind == "consume"]
        role = cons[0].site.role
        assert check_pipeline._turns(model, pipe.op, role, cons) is turns, kernel
        assert check_pipeline._cooperative(model, pipe.op, role, cons) is \
            (not turns and not check_pipeline._skips(pipe.op, role)), kernel
