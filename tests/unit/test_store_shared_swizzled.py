"""ag.store_shared into a swizzled view (a wgmma / TMA operand tile): the interpreter writes
the logical [rows, cols] view, codegen writes each 16-byte chunk at its swizzled address
(ag::swizzle_smem_addr, the layout TMA and wgmma read), a TMA store of it reads the rows back
in order, and a wgmma in a role reads a gathered operand the CTA stored before the roles:
lower/sync.py puts fence.proxy.async and a CTA barrier between those writes and the roles,
and the verifier proves it (proxy.fence) and reports it missing (seeded). The step toward a
producer that gathers the implicit GEMM's A straight into its swizzled stage (docs/perf/conv.md,
"what a gathering producer needs")."""

import dataclasses

import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Region
from argus.runtime import nvrtc_available


@ag.kernel(threads=128)
def gather_swizzled(X: ag.Tensor["M", 80, ag.bf16], Y: ag.Tensor["M", 64, ag.bf16]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
    m = b * 128 + ag.arange(128)[:, None]
    x = ag.gather(X, (m, m % 16 + ag.arange(64)[None, :]), other=0.0)   # [128, 64] rows
    sY = ag.smem((128, 64), ag.bf16, swizzle=128)
    ag.store_shared(sY.view(), x)
    ag.tma.store(Y, (b * 128, 0), sY.view())


def _shifted(x, rows):
    return torch.stack([x[i, i % 16:i % 16 + 64] for i in range(rows)])


def test_a_swizzled_store_round_trips_through_a_tma_store():
    x = torch.randn(300, 80).to(torch.bfloat16)
    y = torch.zeros(300, 64).to(torch.bfloat16)
    gather_swizzled.interpret(x, y)
    assert torch.equal(y, _shifted(x, 300))
    report = verify.run(lower_only(gather_swizzled))
    assert not report.errors, "\n".join(map(str, report.errors))
    assert {"proxy.fence", "store.coverage"} <= {f.code for f in report.proven}


def test_codegen_writes_swizzled_16_byte_chunks():
    source = codegen.render(lower_only(gather_swizzled)).text
    stores = [line for line in source.splitlines() if "ag::swizzle_smem_addr(" in line]
    assert len(stores) == 8 and all("uint4" in line and ", 128)" in line for line in stores)
    if nvrtc_available():
        from argus.runtime.compile import compile_cuda
        src = codegen.render(lower_only(gather_swizzled))
        binary = compile_cuda(src.text, [src.name], use_cache=False)
        assert binary.ptx.count("st.shared.v4") == 8
        assert not binary.resource(src.name).spills


@ag.kernel(threads=128)
def gathered_mm(X: ag.Tensor["M", 64, ag.bf16], W: ag.Tensor[64, 64, ag.bf16],
               Y: ag.Tensor["M", 64, ag.f32]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
    m = b * 128 + ag.arange(128)[:, None]
    # A's rows gathered straight into the wgmma operand's swizzled layout (a row a thread), B
    # likewise; no global A. The gather reads X[m, k] itself: the verifier follows a gather's
    # index arithmetic since 546f7a7 and holds wgmma.agree, wgmma.k-once and store.coords to
    # it, so a row or column remapping (an earlier form read X[m, m % 16 + k] against W[n, k],
    # stored at row m) is reported, rightly for a GEMM; test_gather_swizzled above covers a
    # shifted gather into a swizzled view
    sA = ag.smem((128, 64), ag.bf16, swizzle=128)
    ag.store_shared(sA.view(), ag.gather(X, (m, ag.arange(64)[None, :])))
    sW = ag.smem((64, 64), ag.bf16, swizzle=128)
    ag.store_shared(sW.view(), ag.gather(W, (ag.arange(64)[:, None], ag.arange(64)[None, :])))
    with ag.role("mma", warpgroups=1):
        for h in range(2):
            acc = ag.wgmma(sA.view().rows_of(h * 64, 64), sW.view(), ag.zeros((64, 64)))
            ag.store(Y, (b * 128 + h * 64, 0), acc)


def test_a_role_multiplies_an_operand_gathered_before_the_roles():
    x = torch.randn(200, 64).to(torch.bfloat16)
    w = torch.randn(64, 64).to(torch.bfloat16)
    y = torch.zeros(200, 64)
    gathered_mm.interpret(x, w, y)
    ref = x.double() @ w.double().T
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-6
    kernel = lower_only(gathered_mm)
    top = [op for op in kernel.body.ops if not isinstance(op, O.RoleOp)]
    assert isinstance(top[-2], O.ProxyFence) and isinstance(top[-1], O.GroupBarrier)
    report = verify.run(kernel)
    assert not report.errors, "\n".join(map(str, report.errors))
    assert "proxy.fence" in {f.code for f in report.proven}
    # seeded: the fence and barrier before the roles removed
    body = Region(tuple(op for op in kernel.body.ops
                        if not isinstance(op, (O.ProxyFence, O.GroupBarrier))))
    report = verify.run(dataclasses.replace(kernel, body=body))
    bad = [d for d in report.errors if d.code == "proxy.fence"]
    assert bad and "before the roles" in bad[0].message, "\n".join(map(str, report.errors))


@ag.kernel
def produced_mm(X: ag.Tensor["M", 80, ag.bf16], W: ag.Tensor[64, 64, ag.bf16],
                Y: ag.Tensor["M", 64, ag.f32]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
    sA = ag.smem((2, 128, 64), ag.bf16, swizzle=128)
    sW = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(2)
    with ag.role("producer", warpgroups=1):
        m = b * 128 + ag.arange(128)[:, None]
        with pipe.produce() as st:
            ag.tma.load(sW[st], W, (0, 0))
            ag.store_shared(sA[st], ag.gather(X, (m, m % 16 + ag.arange(64)[None, :])))
    with ag.role("mma", warpgroups=1):
        acc, acc2 = ag.zeros((64, 64)), ag.zeros((64, 64))
        with pipe.consume() as st:
            acc = ag.wgmma(sA[st].rows_of(0, 64), sW[st], acc)
            acc2 = ag.wgmma(sA[st].rows_of(64, 64), sW[st], acc2)
        ag.store(Y, (b * 128, 0), acc)
        ag.store(Y, (b * 128 + 64, 0), acc2)


def test_a_gathering_producer_is_refused_today():
    """The pipelined form (docs/perf/conv.md, "what a gathering producer needs", item 1): a
    producer warpgroup gathering A into the stage beside B's TMA copy. The full barrier counts
    one arrival (the elected TMA issuer), so a producer role with tile work is refused with
    what it does and the fix; this test turns into an interpreter + verifier test when the
    multi-thread produce step exists."""
    with pytest.raises(CompileError, match="one elected thread cannot do") as e:
        lower_only(produced_mm)
    assert "gather" in str(e.value) and "stmatrix" in str(e.value)
