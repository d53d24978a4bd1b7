"""The causal persistent attention walk with own_blocks (AttentionSchedule(persistent=True,
own_blocks=True), tile orders "snake" and "head") verifies with zero findings, and a wrong
per-unit count in it is still an error.

With own_blocks each consumer warpgroup computes only the KV blocks its 64 rows may see and
releases the tile's other K / V stages unread, so its steps per unit are blocks(unit, wg) +
(loaded(unit) - blocks(unit, wg)): a sum over the unit loop (Model.steps_over) whose terms
name the unit and the warpgroup, of another form than the producer's sum of loaded(unit).
pipe.totals for a cooperative role (check_pipeline._per_warpgroup) reported such sums as
"in a form the verifier does not compare" (unknown, for k_pipe and v_pipe). It now pairs
each warpgroup's sum (wg := w) with the producer's iteration by iteration (_Pair, as two
roles' sums in _totals): the same units, and per unit the same steps; the totals' claims
are implied by the sums' equality, which those two claims prove.

The seeded bug: the release loop starts at 1 instead of 0 (range(1, loaded - blocks)), so
warpgroup 0 (the tile's first 64 rows, one block short of the tile's) releases one block
too few in every unit while warpgroup 1 (which releases none) is unchanged. pipe.totals is
violated, naming warpgroup 0 and a unit. (The whole verifier on that kernel also reports
the unpaired units' wgmma.agree errors, minutes of z3: the test asks pipe.totals alone.)"""

from __future__ import annotations

import dataclasses

import pytest

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel, default_schedule
from argus.verify import check_pipeline, solver
from argus.verify import obligation as OB
from argus.verify.model import Model
from tests.mutations.corpus import rewrite
from tests.verify.clean import assert_verifies_clean

WALKS = [(128, "snake"), (128, "head"), (256, "snake"), (256, "head")]


def _walk(head_dim: int, order: str):
    s = dataclasses.replace(default_schedule(head_dim, True, 1024 if head_dim == 128 else 4096),
                            persistent=True, tile_order=order, own_blocks=True)
    assert s.fa3_overlap and not s.ordered, s
    return lower_only(attention_kernel(head_dim, ag.bf16, True, False), s=s)


@pytest.mark.parametrize("head_dim,order", WALKS, ids=[f"d{d}-{o}" for d, o in WALKS])
def test_walk_with_own_blocks_verifies_clean(head_dim, order):
    # 5-15 s of wall time on the loaded 2-core machine: bounded with room
    report = assert_verifies_clean(_walk(head_dim, order), f"d{head_dim} {order}")
    # the K and V rings' per-warpgroup totals are proven (they were the two unknowns)
    coop = [f for f in report.findings if f.code == "pipe.totals" and
            "every warpgroup of consumer role 'consumer'" in f.subject]
    assert len(coop) == 2 and all(f.status == "proven" for f in coop), \
        [(f.subject, f.status) for f in coop]


def _one_release_short(kernel):
    """The release loop (the last For: `for _ in ag.range(loaded - blocks)`) from 1."""
    release = [op for op in kernel.walk() if isinstance(op, O.For)][-1]
    consts = [op for op in kernel.walk() if isinstance(op, O.Const)]
    i = next(i for i, op in enumerate(consts) if op.result.id == release.start.id)
    assert consts[i].value == 0, consts[i]
    return rewrite(kernel, O.Const, lambda op: dataclasses.replace(op, value=1), nth=i)


@pytest.mark.parametrize("head_dim,order", [(128, "snake"), (256, "head")],
                         ids=["d128-snake", "d256-head"])
def test_warpgroup_releasing_one_block_too_few_is_caught(head_dim, order):
    model = Model(_one_release_short(_walk(head_dim, order)))
    obs, finds = check_pipeline.obligations(model)
    coop = [ob for ob in obs if ob.code == "pipe.totals" and
            "every warpgroup of consumer role 'consumer'" in ob.subject]
    assert len(coop) == 2, [f.subject for f in finds if f.code == "pipe.totals"]
    for ob in coop:
        out = OB.run(ob, solver.Stats(), None)
        assert out.status == "violated", (ob.subject, out.status, out.message)
        wit = out.witness
        assert wit["warpgroup"] == 0, wit
        assert wit["consumer_steps_in_iteration"] == wit["producer_steps_in_iteration"] - 1, \
            wit
        assert "warpgroup 0 of the cooperative consumer role 'consumer'" in out.message
        assert "the producer waits forever for a release" in out.message


def test_correct_walk_pipe_totals_alone():
    """The same obligations on the correct kernel are proven (the seeded test's contrast)."""
    model = Model(_walk(128, "snake"))
    obs, _ = check_pipeline.obligations(model)
    coop = [ob for ob in obs if ob.code == "pipe.totals" and
            "every warpgroup of consumer role 'consumer'" in ob.subject]
    assert len(coop) == 2
    assert [OB.run(ob, solver.Stats(), None).status for ob in coop] == ["proven"] * 2
