"""The verifier's tables are keyed by stable values (issue 13, the house rule), not by object
identity: wgmma facts by the site's program point (Site.seq), the checker's prepared and
decided obligations by their position in the run, the accumulator-chain walk by program
point. The keys are the values they should be, and the answers are those of the identity
tables (the rest of tests/verify checks the verdicts)."""

from __future__ import annotations

import argus as ag
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel, default_schedule
from argus.kernels.attention_decode import decode_kernel, default_decode_schedule
from argus.verify import check_wgmma, checker
from argus.verify.model import Model


def _attention():
    return lower_only(attention_kernel(128, ag.bf16, True, False), s=default_schedule(128, True))


def test_wgmma_memos_are_keyed_by_site_seq():
    model = Model(lower_only(decode_kernel(128, ag.bf16, True, True),
                             s=default_decode_schedule(128, 4)))
    obs, _ = checker.collect(model)
    assert obs
    seqs = {w.site.seq for w in model.wgmmas}
    assert len(seqs) == len(model.wgmmas)      # one program point per wgmma site
    for table in ("_wgmma_operands", "_wgmma_k_keys", "_wgmma_reduction_loops"):
        memo = model.__dict__[table]
        assert type(memo) is dict and memo and set(memo) <= seqs, table


def test_implied_by_positions_in_and_outside_the_run():
    """k-once's coverage of the causal attention kernel is implied by obligations made only
    for it (outside the run: no position); store.once's by obligations of the run."""
    model = Model(_attention())
    obs, _ = checker.collect(model)
    implied = [ob for ob in obs if ob.implied_by]
    assert implied
    for ob in implied:
        at = checker._positions(obs, ob)
        assert len(at) == len(ob.implied_by)
        for (dep, _), j in zip(ob.implied_by, at):
            assert (j is None) == (not any(dep is o for o in obs))
            assert j is None or obs[j] is dep


def test_chain_points_name_each_site():
    """The accumulator-chain walk finds each sibling wgmma by its program point: the causal
    kernel's loop P V and its peeled last P V are two points, and the chain is one
    continuation (so k-once is stated over both sites)."""
    kernel = _attention()
    model = Model(kernel)
    pv = [w for w in model.wgmmas if w.a_tile is not None]
    assert len(pv) >= 2
    points = check_wgmma._points_of(kernel, [w.op for w in pv])
    assert len(points) == len(pv)
    siblings = check_wgmma._siblings(model, pv[0], "sk")
    assert len(siblings) >= 2
