"""The fourth held-out style probe (issue 13, "Verifier 2"; tests/mutations/probe4_kernels.py):
synchronization and hardware contracts, written from the issue's class list in spellings the
corpus lacks. Each bug must be an error naming a thread or warpgroup and pointing at its
`# BUG:<name>` line (the line a fix edits); each correct variant must verify without an error
or warning (tests/mutations/seeded.py).

What it found, each fixed in the verifier (the tests marked NEW failed before the fix):
  * store.coverage read a condition `wg == e` around a store whose destination does not name
    the warpgroup (a ping-pong turn `h == wg` over a role's two tiles; one warpgroup storing
    what the role computed, `wg == 1`) as a condition every instance must pass, when the
    destination's dims were each covered alone: two false errors. check_stores._turns peels
    such turns off as _tile_coverage did (e in the warpgroups' range: exactly one stores);
  * smem.race asked its pair query with the two accesses' `ag.when`s as premises, so a write
    only warpgroup 0 runs (`wg == 0`) had an empty model: unknown on a correct kernel. The
    conditions are now part of the claim (check_smem._guards);
  * pipe.totals left a ping-pong whose warpgroup skips one step too few (skip(k - 1)) unknown:
    the consumer's count is a sum over the role's tile loop whose steps depend on the index.
    A sum over a constant number of iterations is written out (check_pipeline._unrolled);
  * pipe.totals and ordered.turns named the pipeline's / section's line, not the line a fix
    edits (a producer loop's bound `last = total + programs`, a skip count, the turn's
    formula `mine = h // 2 == wg`): their witnesses list the step, skip and condition sites
    (`related_sites`), whose definitions names.annotate adds;
  * a register split above the register file (3 x 128 x 176 + 128 x 40) was refused only by
    lowering (a CompileError without a thread); regs.budget (check_grid.register_budget)
    reports it on the traced kernel at the role's line.
  * (follow-up) a persistent walk spelled by the CTA's tile count (`for i in
    range(cdiv(total - pid, programs))`, `t = pid + i * programs`) was a false
    store.coverage error ("132 units walked, 133 tiles"): check_stores._counted_walks reads
    such a loop as the walk range(pid, total, programs); the count one short per program
    (`(total - pid) // programs`, count_floor) stays an error.
Left: the multicast part computed as a Python constant (`part = BN // 4`) is caught at the
load whose box it sizes (a trace-time int has no defining line in the IR); a slot read after
its step cannot be written in the DSL (TraceError; its fix now says to read the slot inside
the step, tests/unit/test_loop_carried.py follows it). docs/verify.md, "Fourth held-out
style probe (2026-12-05)" and its follow-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.errors import TraceError
from tests.mutations import probe4_kernels as P
from tests.mutations import seeded as S

FILE = Path(P.__file__)

BUGS = [
    (P.make_persistent_ring, "slot_from_k", ("pipe.release", "wgmma.defined")),
    (P.make_persistent_ring, "producer_extra_tile", ("pipe.totals",)),            # NEW
    (P.make_persistent_ring, "staging_shared", ("smem.race",)),
    (P.make_pingpong_pair, "skip_short", ("pipe.totals",)),                       # NEW
    (P.make_pingpong_pair, "turn_skips_wg1", ("ordered.turns",)),                 # NEW
    (P.make_pingpong_pair, "released_by_two", ("pipe.arrivals",)),
    (P.make_cluster_quarters, "part_quarter", ("wgmma.defined",)),
    (P.make_three_consumers, "regs_over_budget", ("regs.budget",)),               # NEW
    (P.make_three_consumers, "rows_overlap", ("store.once",)),
    (P.make_row_handoff, "handoff_unordered", ("sync.exchange",)),
    (P.make_cluster_leader, "leader_half", ("wgmma.defined",)),
    (lambda bug: P.make_pingpong_three(bug, walk="range"), "turn_mod_two", ("ordered.turns",)),
    # the walk's trip count one short per program ((total - pid) // programs): NEW as the
    # pair of the clean count walks below (the correct spelling was an error too)
    (lambda bug: P.make_pingpong_three(bug, walk="count"), "count_floor", ("store.coverage",)),
    (P.make_role_handoff, "across_roles", ("smem.race",)),
]

CLEAN = [
    ("persistent_ring_tma", lambda: P.make_persistent_ring()),
    ("persistent_ring_1_stage", lambda: P.make_persistent_ring(stages=1)),
    ("persistent_ring_registers", lambda: P.make_persistent_ring(epilogue="registers")),
    ("pingpong_pair", lambda: P.make_pingpong_pair()),                 # NEW: was store.coverage
    ("pingpong_pair_3_stages", lambda: P.make_pingpong_pair(stages=3)),  # NEW
    ("twice_from_slot", lambda: P.make_twice_from_slot()),
    ("cluster_quarters", lambda: P.make_cluster_quarters()),
    ("three_consumers", lambda: P.make_three_consumers()),
    ("row_handoff", lambda: P.make_row_handoff()),   # NEW: was store.coverage + smem.race unknown
    ("cluster_leader", lambda: P.make_cluster_leader()),
    ("pingpong_three_range_walk", lambda: P.make_pingpong_three(walk="range")),
    # NEW (were store.coverage errors): the walk spelled by this CTA's tile count, with
    # ag.cdiv or written out, on a grid of min(total, SMs) or of every SM (total - pid < 0)
    ("pingpong_three_count_walk", lambda: P.make_pingpong_three(walk="count")),
    ("pingpong_three_written_count_walk", lambda: P.make_pingpong_three(walk="written")),
    ("pingpong_three_count_walk_full_grid",
     lambda: P.make_pingpong_three(walk="count", full_grid=True)),
    ("pingpong_three_range_walk_full_grid",
     lambda: P.make_pingpong_three(walk="range", full_grid=True)),
]


@pytest.mark.parametrize("factory,bug,codes", BUGS, ids=[b for _, b, _ in BUGS])
def test_probe4_bug_is_caught_at_its_line(factory, bug, codes):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


@pytest.mark.parametrize("name,build", CLEAN, ids=[n for n, _ in CLEAN])
def test_probe4_variant_is_clean(name, build):
    S.assert_clean(build().trace())


def test_a_slot_read_after_its_step_is_refused_when_traced():
    """The DSL keeps a consume step's stage inside it: the second product of a slot, moved
    after the step's end, is a TraceError at its line (never a kernel to verify)."""
    (line,) = S.bug_lines(FILE, "reread_after_step")
    with pytest.raises(TraceError) as e:
        P.make_twice_from_slot("reread_after_step").trace()
    assert f"{FILE.name}:{line}" in str(e.value)
