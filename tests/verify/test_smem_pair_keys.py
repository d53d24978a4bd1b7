"""check_smem pairs the TMA copies of one pipeline step by their program points (Site.seq, a
value; issue 13, the house rule), not by id(): each pair of copies (and of multicast ranks) is
checked once, and one copy op placed twice in a step is two copies, a race with itself."""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir.core import Region
from argus.verify import check_smem
from argus.verify.model import Model
from tests.mutations import kernels as K
from tests.mutations.corpus import rewrite


def _races(kernel):
    model = Model(kernel)
    obs, finds = check_smem._tma_overlaps(model)
    return model, [ob.subject for ob in obs], [(f.subject, f.status) for f in finds]


def test_a_multicast_pair_is_checked_once_for_all_ranks():
    """The cluster GEMM's B copy, multicast by ranks 0 and 1, is one pair: the walk over this
    CTA's rank meets it once per rank, and the key (both writes' seqs and ranks) keeps one."""
    model, obs, finds = _races(K.make_cluster_gemm(None).trace())
    tma = [w for ws in model.writes.values() for w in ws if w.kind == "tma"]
    assert len({w.site.seq for w in tma}) == len(tma) == 2
    assert obs == [] and len(finds) == 1 and finds[0][1] == "proven", finds
    assert "rank 0" in finds[0][0] and "rank 1" in finds[0][0]


def test_one_copy_op_placed_twice_is_two_copies():
    """The same TmaLoad object at two program points of one produce step (equal by value and
    by identity): two write sites with their own seqs, so the pair is checked, and the rows
    written twice are a race."""
    def twice(step: O.Produce) -> O.Produce:
        load = next(op for op in step.body.ops if isinstance(op, O.TmaLoad))
        return step.replace(body=Region(step.body.ops + (load,)))
    kernel = rewrite(K.make_gemm(None, stages=2, consumers=2).trace(), O.Produce, twice)
    model, obs, finds = _races(kernel)
    tma = [w for ws in model.writes.values() for w in ws if w.kind == "tma"]
    assert len(tma) == 3 and len({w.site.seq for w in tma}) == 3
    assert any(w1.op is w2.op for w1 in tma for w2 in tma if w1 is not w2)
    assert [s for s, st in finds if st == "violated"], (obs, finds)
