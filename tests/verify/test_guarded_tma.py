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


def _rank_free_probe(kind: str):
    """A 2-CTA cluster kernel whose guard reads `c`: a load of an input (alike in both CTAs),
    or a value that may differ between them without naming the rank at its definition."""
    import argus as ag

    @ag.kernel(name="rank_free_probe")
    def probe(T: ag.Tensor["M", "N", ag.i32], U: ag.Tensor["M", "N", ag.i32]):
        (pid,) = ag.grid(ag.cdiv(T.shape[0], 1) * 2, cluster=2)
        rank = ag.cluster_rank()
        first = pid // 2
        c = ag.load_scalar(T, (first, 0))
        if kind == "carried_uniform":
            for _ in ag.range(0, 4):
                c = c + first
        elif kind == "carried_rank":       # a variable assigned the rank in a loop
            for _ in ag.range(0, 4):
                c = c + rank
        elif kind == "atomic":             # a work counter: each CTA gets its own ticket
            c = ag.atomic_fetch_add(T, (first, 0))
        elif kind == "written":            # U is stored below: a CTA may read the other's store
            c = ag.load_scalar(U, (first, 0))
        with ag.when(c > 0):
            ag.store(U, (first, 0), ag.full((1, 1), 1, ag.i32))

    k = probe.trace()
    return k, next(op for op in k.walk() if isinstance(op, O.If)).cond


@pytest.mark.parametrize("kind", ["input", "carried_uniform"])
def test_rank_free_accepts_what_every_cta_computes_alike(kind):
    from argus.ir.guarded_tma import rank_free
    k, cond = _rank_free_probe(kind)
    assert rank_free(k, cond, 2)


@pytest.mark.parametrize("kind", ["carried_rank", "atomic", "written"])
def test_rank_free_refuses_values_that_may_differ_between_the_ctas(kind):
    """Seeded gaps (all accepted before): the rank through a variable's assignment (the chain
    followed only its init), an atomic's ticket, a load of a tensor the kernel writes."""
    from argus.ir.guarded_tma import rank_free
    k, cond = _rank_free_probe(kind)
    assert not rank_free(k, cond, 2)


def test_a_float_guard_is_refused(kernel):
    """The share test compared as floats: a NaN takes neither `x > c` nor `x <= c`, so
    neither copy would run and the step's full barrier would never complete."""
    from argus import dtypes
    from argus.ir.types import ScalarType

    defs = definitions(kernel)
    shared = defs[_guards(kernel)[0].cond.id].lhs
    as_float = replace(shared, type=ScalarType(dtypes.f32))
    broken = rewrite(kernel, O.Arith, lambda op: op.replace(lhs=as_float)
                     if op.fn in ("gt", "le") and op.lhs.id == shared.id else op)
    _, problem = step_bytes(_produce(broken).body, definitions(broken), 2)
    assert "floats" in problem
