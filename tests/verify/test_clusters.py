"""Thread-block clusters and TMA multicast in the verifier's model: the rank is a symbol tied
to the program id, peers' multicast boxes fill this CTA's slots with the rank substituted,
expect_tx counts a multicast box once per CTA, PipelineCreate.peers must release every CTA
that writes a slot, coupled CTAs run the same number of steps — and what the model cannot
count (a copy under a condition) is unknown, never proven."""

from __future__ import annotations

import argus as ag
from argus import verify
from argus.ir import ops as O
from argus.verify.model import Model
from tests.mutations import kernels as K
from tests.mutations.corpus import lowered, rewrite


def _variant(kind: str):
    """The corpus cluster GEMM's shape with one construct changed (trace-time choice)."""
    BM, BN, BK, CS = 128, 128, 64, 2

    @ag.kernel(name=f"cluster_{kind}")
    def cluster_variant(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                        C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, CS * BM) * CS, ag.cdiv(N, BN), cluster=CS)
        rank = ag.cluster_rank()
        sA = ag.smem((4, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((4, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(4, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        steps = k_tiles + rank if kind == "rank_steps" else k_tiles
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(steps):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if kind == "leader":  # rank 0 loads the whole B tile for both CTAs
                        with ag.when(rank.eq(0)):
                            ag.tma.load(sB[st], B, (pid_n * BN, k * BK), multicast=True)
                    else:
                        ag.tma.load(sB[st].rows_of(rank * 64, 64), B,
                                    (pid_n * BN + rank * 64, k * BK), multicast=True)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(steps):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return cluster_variant


def _by_code(report, severity):
    return [d for d in report.diagnostics if d.severity == severity]


def test_rank_is_tied_to_the_program_id():
    m = Model(K.make_cluster_gemm().trace())
    assert m.cluster_size == 2 and len(m.rank_digits) == 1
    (r, c, stride), = m.rank_digits
    assert (c, stride) == (2, 1) and str(m.rank_term) == str(r)
    pid = m.sym[m.grid.ids[0].id]
    assert str(r) in str(pid)  # pid_m = 2 * cluster + rank
    assert m.peer_pairs(None) == [] and str(m.peer_pairs(1)[0][1]) == "1"
    assert not m.unsupported


def test_cluster_kernel_proves_the_cluster_obligations():
    report = verify.run(lowered(K.make_cluster_gemm), include_proven=True)
    assert not report.errors and not report.unknowns
    proven = [f.subject for f in report.proven]
    assert any("O2 across the cluster" in s for s in proven)
    assert any("multicast by cluster rank 1" in s for s in proven)  # disjoint peer copies
    codes = {f.code for f in report.proven}
    assert {"tma.tx-bytes", "wgmma.defined", "wgmma.agree", "wgmma.k-once", "wgmma.smem-layout",
            "pipe.totals", "pipe.no-overwrite", "smem.race", "store.once", "store.coords"} <= codes


def test_rank_dependent_step_count_is_a_cluster_hang():
    report = verify.run(_variant("rank_steps").trace())
    hits = [d for d in report.errors if d.code == "pipe.totals"
            and "every CTA of the cluster" in d.message]
    assert hits, [str(d) for d in report.errors]
    assert {"cluster_rank", "peer_rank", "steps", "peer_steps"} <= set(hits[0].counterexample)


def test_conditional_multicast_is_rejected_by_lowering_and_never_proven():
    # rank 0 multicasts the whole B: the data is right, but expect_tx cannot be a static sum
    # (each CTA receives one B box, not one per CTA). Lowering refuses to arm such a step ...
    import pytest

    from argus.errors import CompileError
    from argus.ir.core import Region, Value
    from argus.ir.types import ScalarType

    with pytest.raises(CompileError, match="under ag.when"):
        lowered(lambda bug=None: _variant("leader"))
    # ... and a lowered kernel that has one anyway (hand-edited IR) is never reported proven.
    base = lowered(lambda bug=None: _variant("normal"))
    top = max(v.id for op in base.walk() for v in op.results() + op.operands()) + 1
    flag = Value(top, ScalarType(ag.i1), "always")

    def guard(produce):
        ops = []
        for op in produce.body.ops:
            if isinstance(op, O.TmaLoad) and op.multicast:
                ops += [O.Const(flag, True, loc=op.loc), O.If(flag, Region((op,)), loc=op.loc)]
            else:
                ops.append(op)
        return produce.replace(body=Region(tuple(ops)))

    report = verify.run(rewrite(base, O.Produce, guard), include_proven=True)
    tx = [f for f in report.findings if f.code == "tma.tx-bytes"]
    assert tx and all(f.status == "unknown" for f in tx)


def test_peers_beyond_the_cluster_and_arrivals_per_peer():
    base = lowered(K.make_gemm)  # no cluster, no multicast
    bad = rewrite(base, O.PipelineCreate, lambda op: op.replace(peers=2))
    errs = [d for d in verify.run(bad).errors if d.code == "pipe.arrivals"]
    assert errs and errs[0].counterexample["expected_peers"] == 1
    cl = rewrite(lowered(K.make_cluster_gemm), O.Consume, lambda op: op.replace(arrivals=2))
    errs = [d for d in verify.run(cl).errors if d.code == "pipe.arrivals"]
    assert errs and "x 2 CTA(s)" in errs[0].message and errs[0].counterexample["peers"] == 2
