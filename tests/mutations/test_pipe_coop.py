"""Cooperative consume steps (issue 13, "Verifier 2"; tests/mutations/pipe_coop_kernels.py):
an ordered section inside a consume step that every consumer warpgroup runs (the staggered
fp8 promotion) pairs the warpgroups' turns step by step, and the ring's empty barrier counts
one arrival per warpgroup; both need every warpgroup to consume every step. pipe.totals
proves it per warpgroup (check_pipeline._per_warpgroup: warpgroup w's count with wg := w
equals warpgroup 0's and the producer's) and names the warpgroup, each one's step count and
the loop or condition line. Each bug is an error naming a warpgroup at its `# BUG:<name>`
line; each correct variant verifies clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus import verify
from tests.mutations import pipe_coop_kernels as P
from tests.mutations import seeded as S

FILE = Path(P.__file__)

BUGS = [
    (P.make_coop_turns, "wg1_one_short"),   # one warpgroup's loop bound one short
    (P.make_coop_turns, "wg0_only"),        # the consume under ag.when(wg == 0)
    (P.make_coop_plain, "tail_wg0"),        # an extra step only warpgroup 0 consumes
]


@pytest.mark.parametrize("factory,bug", BUGS, ids=[b for _, b in BUGS])
def test_cooperative_bug_is_caught_at_its_line(factory, bug):
    placed = S.assert_caught(factory(bug).trace(), ("pipe.totals",), FILE, bug)
    wit = placed[0].counterexample
    # the warpgroup whose count differs, each warpgroup's count and the producer's
    counts = wit["steps_by_warpgroup"]
    assert counts[wit["warpgroup"]] != wit["producer_steps"], wit
    assert len(counts) == 2 and len(set(counts.values())) == 2, wit
    assert f"warpgroup {wit['warpgroup']} of the cooperative consumer role" in \
        placed[0].message


def test_one_short_names_the_loop_and_both_counts():
    (d,) = [d for d in verify.check(P.make_coop_turns("wg1_one_short").trace())
            if d.code == "pipe.totals" and d.severity == "error"]
    wit = d.counterexample
    assert wit["warpgroup"] == 1
    assert wit["steps_by_warpgroup"][1] == wit["steps_by_warpgroup"][0] - 1 == \
        wit["producer_steps"] - 1
    (loop,) = wit["loops"]
    assert loop.startswith(FILE.name + ":") and loop in d.message


@pytest.mark.parametrize("build", [lambda: P.make_coop_turns(), lambda: P.make_coop_plain(),
                                   lambda: P.make_coop_turns(stages=3),
                                   lambda: P.make_coop_turns("all_ge0")],
                         ids=["turns_wg_lt_2", "plain", "turns_3_stages", "turns_wg_ge_0"])
def test_cooperative_variant_is_clean(build):
    """`ag.when(wg < 2)` / `wg >= 0` in a role of two warpgroups select them all: the count
    names wg but is the same for each (a claim over wg free, as pipe.totals asked before,
    would have reported warpgroup 2)."""
    S.assert_clean(build().trace())


def test_staggered_fp8_consumers_are_accepted():
    """The library's staggered promotion (Fp8GemmSchedule(promote=True, stagger=True)): its
    consumer count does not name the warpgroup, so the per-warpgroup claim is proven at
    once, and the kernel verifies without a finding."""
    import argus as ag
    from argus.compiler import lower_only
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel

    from argus.verify import check_pipeline
    from argus.verify.model import Model

    for extra in ({"bn": 128, "stages": 3}, {"bn": 256, "stages": 4, "n_split": 2}):
        kernel = lower_only(gemm_fp8_blockscaled_kernel(ag.bf16),
                            s=Fp8GemmSchedule(promote=True, stagger=True, **extra))
        report = verify.run(kernel)
        assert not report.errors and not report.unknowns, \
            "\n".join(str(d) for d in report.errors + report.unknowns)
        _, finds = check_pipeline.obligations(Model(kernel))
        coop = [f for f in finds if "every warpgroup of role 'consumer'" in f.subject]
        assert coop and all(f.status == "proven" for f in coop), \
            [(f.subject, f.status) for f in finds]


# -- turns given as a set of warpgroups (`ag.when(wg != 0)`, `wg >= 1`, `wg < 1`) ----------
# store.coverage peeled only `wg == e` as a turn (check_stores._pinned); any other condition
# on the warpgroup was claimed for every instance (a false "never stored" error on each clean
# variant below). check_stores._selects reads such a condition as the set of warpgroups it
# holds for, and claims one of them stores (two that store are store.once's finding).

SET_BUGS = [
    (lambda bug: P.make_set_turn(bug), "none_store", ("store.coverage",)),
    (lambda bug: P.make_set_turn(bug, warpgroups=3), "two_store", ("store.once",)),
    (lambda bug: P.make_set_turn(bug), "handoff_unordered", ("sync.exchange",)),
    (lambda bug: P.make_set_staging(bug), "all_stage", ("smem.race", "store.once")),
]


@pytest.mark.parametrize("factory,bug,codes", SET_BUGS, ids=[b for _, b, _ in SET_BUGS])
def test_set_turn_bug_is_caught_at_its_line(factory, bug, codes):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


def test_staging_shared_by_every_warpgroup_is_a_race():
    """`wg >= 0` selects both warpgroups: their writes of the one staging tile race."""
    errors = [d for d in verify.check(P.make_set_staging("all_stage").trace())
              if d.severity == "error"]
    assert any(d.code == "smem.race" for d in errors), [str(d) for d in errors]


@pytest.mark.parametrize("build", [lambda: P.make_set_turn(when="ne0"),
                                   lambda: P.make_set_turn(when="ge1"),
                                   lambda: P.make_set_turn(when="last", warpgroups=3),
                                   lambda: P.make_set_staging(when="ne0"),
                                   lambda: P.make_set_staging(when="lt1")],
                         ids=["handoff_ne0", "handoff_ge1", "handoff_ge2_of_3", "staging_ne0",
                              "staging_lt1"])
def test_set_turn_variant_is_clean(build):
    S.assert_clean(build().trace())
