"""TMA copies under complementary guards inside a produce step (argus/ir/guarded_tma.py; the
fp8 grouped GEMM's MoeFp8Schedule.pair_multicast): lowering's byte count and the verifier's
tma.tx-bytes accept two complementary guards of equal bytes whose condition every CTA of the
cluster computes alike, and refuse or leave unknown the rest (a guard without its complement,
unequal bytes, a condition reading the cluster rank)."""

from dataclasses import replace

import pytest

from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.guarded_tma import definitions, guarded_pairs, step_bytes
from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, grouped_gemm_fp8_smem_kernel
from tests.mutations.corpus import rewrite

PAIR = replace(FP8_PREFILL_SPLIT_SMEM_TMA, pair_multicast=True)


@pytest.fixture(scope="module")
def kernel():
    return lower_only(grouped_gemm_fp8_smem_kernel(False), s=PAIR)


def _produce(k):
    return next(op for op in k.walk() if isinstance(op, O.Produce))


def _guards(k):
    return [op for op in _produce(k).body.ops if isinstance(op, O.If)]


def test_the_pair_is_one_complementary_pair_of_equal_bytes(kernel):
    pairs, problem = guarded_pairs(_produce(kernel).body, definitions(kernel), 2)
    assert problem is None and len(pairs) == 1
    # the down's B tile: 256 rows of 128 e4m3 bytes, either way
    assert pairs[0][2] == PAIR.bn * PAIR.bk
    total, _ = step_bytes(_produce(kernel).body, definitions(kernel), 2)
    assert total == _produce(kernel).tx_bytes


def test_a_guard_without_its_complement_is_refused(kernel):
    defs = definitions(kernel)
    le = defs[_guards(kernel)[1].cond.id]
    assert le.fn == "le"
    broken = rewrite(kernel, O.Arith, lambda op: op.replace(fn="lt")
                     if op.result.id == le.result.id else op)
    _, problem = step_bytes(_produce(broken).body, definitions(broken), 2)
    assert "without its complement" in problem


def test_unequal_branches_are_refused(kernel):
    """The own branch's whole-tile copy (TMA loads: 0 A, 1 the multicast half, 2 the whole
    tile) made a multicast: it would deliver twice the multicast branch's bytes."""
    broken = rewrite(kernel, O.TmaLoad, lambda op: op.replace(multicast=True), nth=2)
    _, problem = step_bytes(_produce(broken).body, definitions(broken), 2)
    assert "deliver" in problem


def test_a_rank_dependent_guard_leaves_the_bytes_unknown(kernel):
    """The share test made to read the cluster rank (CTA 0 multicasts, CTA 1 not): the bytes
    that land depend on which CTA takes which branch."""
    rank = next(op.result for op in kernel.walk() if isinstance(op, O.ClusterRank))
    defs = definitions(kernel)
    gt = defs[_guards(kernel)[0].cond.id]
    shared = gt.lhs.id
    broken = rewrite(kernel, O.Arith, lambda op: op.replace(lhs=rank)
                     if op.fn in ("gt", "le") and op.lhs.id == shared else op)
    report = verify.run(broken)
    tx = [d for d in report.diagnostics if d.code == "tma.tx-bytes"]
    assert tx and "cluster" in tx[0].message, report.diagnostics
