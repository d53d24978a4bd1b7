"""Tags and tag assertions are recorded in the IR (printer/parser round trip) but change
nothing else: the interpreter ignores them and the CUDA emitted for a kernel is byte-identical
with and without them."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import ir
from argus.ir import tag_ops


def _gemm(with_tags: bool):
    BM, BN, BK, S = 128, 128, 64, 3
    route = ag.opaque("owner")

    @ag.kernel(name="tagged_gemm")
    def tagged_gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                    C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        if with_tags:
            ag.tag_tensor(A, owner=lambda m, k: route(m))
            ag.tag_assume(lambda r: route(r) == r // 4096)
            ag.tag_assume(lambda: ag.sym(K) >= 1)
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((S, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((S, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(S, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    if with_tags:
                        ag.tag_assert(ag.tag(sA[st]).k == ag.tag(sB[st]).k,
                                      ag.tag(sA[st]).iter == ag.sym(k),
                                      message="same global k, this iteration's tile")
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
                    if with_tags:
                        ag.tag_assert(ag.tag(acc).k >= 0)
            if with_tags:
                ag.tag_assert(ag.tag(acc).m // 4096 == route(ag.tag(acc).m))
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))
    return tagged_gemm


def test_tag_ops_round_trip_and_strip():
    k = _gemm(True).trace()
    names = {op.NAME for op in k.walk() if tag_ops.is_tag_op(op)}
    assert names == {"tag.fn", "tag.tensor", "tag.assume", "tag.assert"}
    assert ir.parse_kernel(ir.print_kernel(k)) == k
    plain = _gemm(False).trace()
    assert tag_ops.strip_tags(k) == plain  # same ops, same value ids: tags allocate nothing


def test_cuda_is_byte_identical_with_and_without_tags():
    from argus import codegen
    from argus.compiler import lower_only

    with_tags = codegen.render(lower_only(_gemm(True))).text
    without = codegen.render(lower_only(_gemm(False))).text
    assert with_tags == without


def test_interpreter_ignores_tags():
    @ag.kernel(name="scale_rows")
    def scale_rows(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (pid,) = ag.grid(X.shape[0])
        x = ag.load(X, (pid, 0), (1, 8))
        ag.tag_assert(ag.tag(x).m == ag.sym(pid))
        ag.store(Y, (pid, 0), x * 2.0)
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    y = np.zeros_like(x)
    scale_rows.interpret(x, y)
    assert np.array_equal(y, 2 * x)


def test_tagged_gemm_assertions_are_proven():
    from argus import verify

    report = verify.run(_gemm(True), include_proven=True)
    assert not report.errors and not report.unknowns, report.diagnostics
    proven = [f for f in report.findings if f.code == "tag.assert" and f.status == "proven"]
    assert len(proven) == 3


def test_tag_misuse_is_a_trace_error():
    @ag.kernel
    def bad(X: ag.Tensor["M", ag.f32]):
        ag.grid(1)
        ag.tag_tensor(X, m=lambda i: i)  # clashes with the built-in coordinate tag
    with pytest.raises(ag.TraceError, match="clashes"):
        bad.trace()
