"""ag.store_shared(transposed=True) (ir.ops.StMatrix.transposed): a register tile written
MN-major into shared memory, the inverse of ag.load_shared(transposed=True): the [A * W, K]
tile's element (m, k) to view element ((m // W) * K + k, m % W) of A atoms of [K][W]. The
use: an fp32 wgmma accumulator [pixels, channels] staged as [channels][pixels] boxes of an
NCHW result for a TMA store (argus/kernels/conv.py, ConvSchedule(nchw_epilogue='tma')).

Checked here on a GEMM that writes its result transposed (Yt = (X @ W^T)^T): the interpreter
against float64, the verifier (store.coords / store.once / store.coverage proven through the
staged copy, and an atom swap or a missing atom reported: seeded), the trace errors, the IR
text round trip, the rendering (one swizzled st.shared a register) and NVRTC (no spills).
tests/gpu/test_store_shared_transposed_gpu.py runs it on the H200."""

import pytest
import torch

import argus as ag
from argus import verify
from argus.codegen.cuda import render
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.runtime import nvrtc_available


def mm_transposed(atoms=(0, 1), swizzle: int = 128):
    """Yt[n, m] = sum_k X[m, k] W[n, k] for a 64-row block of X a CTA: the accumulator
    staged transposed as two [64 n][32 m] atoms and TMA-stored; `atoms` says which atom each
    of the two stores copies (seeded bugs: (1, 0) swaps them, (0,) drops one)."""
    w_cols = swizzle // 4

    @ag.kernel(threads=128)
    def kernel(X: ag.Tensor["M", 64, ag.bf16], W: ag.Tensor[64, 64, ag.bf16],
               Yt: ag.Tensor[64, "M", ag.f32]):
        (b,) = ag.grid(ag.cdiv(X.shape[0], 64))
        m = b * 64 + ag.arange(64)[:, None]
        sA = ag.smem((64, 64), ag.bf16, swizzle=128)
        ag.store_shared(sA.view(), ag.gather(X, (m, ag.arange(64)[None, :])))
        sW = ag.smem((64, 64), ag.bf16, swizzle=128)
        ag.store_shared(sW.view(), ag.gather(W, (ag.arange(64)[:, None],
                                                 ag.arange(64)[None, :])))
        sY = ag.smem((64 // w_cols * 64, w_cols), ag.f32, swizzle=swizzle)
        with ag.role("mma", warpgroups=1):
            acc = ag.wgmma(sA.view(), sW.view(), ag.zeros((64, 64)))
            ag.store_shared(sY.view(), acc, transposed=True)
            for i, a in enumerate(atoms):
                ag.tma.store(Yt, (0, b * 64 + w_cols * i), sY.view().rows_of(64 * a, 64))

    return kernel


def _ref(x, w):
    return (x.double() @ w.double().T).T


def test_interpreter_writes_the_transpose():
    x = torch.randn(200, 64).to(torch.bfloat16)       # a partial last block of 8 rows
    w = torch.randn(64, 64).to(torch.bfloat16)
    yt = torch.full((64, 200), 7.0)
    mm_transposed().interpret(x, w, yt)
    ref = _ref(x, w)
    assert ((yt.double() - ref).norm() / ref.norm()).item() < 1e-6


def test_verifier_proves_the_staged_transpose_and_catches_seeded_bugs():
    report = verify.run(lower_only(mm_transposed()))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.coords", "store.once", "store.coverage", "proxy.fence"} <= \
        {f.code for f in report.proven}
    swapped = verify.run(lower_only(mm_transposed((1, 0))))
    assert any(d.code == "store.coords" for d in swapped.errors), \
        [str(d) for d in swapped.diagnostics]
    dropped = verify.run(lower_only(mm_transposed((0,))))
    assert any(d.code == "store.coverage" for d in dropped.diagnostics), \
        [str(d) for d in dropped.diagnostics]


def test_ir_text_round_trips():
    from argus.ir.parser import parse_kernel
    from argus.ir.printer import print_kernel

    kernel = lower_only(mm_transposed())
    stores = [op for op in kernel.walk() if isinstance(op, O.StMatrix) and op.transposed]
    assert len(stores) == 1 and stores[0].plain
    text = print_kernel(kernel)
    assert "transposed=true" in text
    assert print_kernel(parse_kernel(text)) == text


def test_rendering_one_swizzled_store_a_register():
    text = render(lower_only(mm_transposed())).text
    # the [64, 64] f32 accumulator: 32 registers a thread, each one st.shared at its swizzled
    # address of the [128, 32] stage (the two bf16 operand stages: 8 uint4 chunks each)
    lines = [ln for ln in text.splitlines() if "swizzle_smem_addr" in ln and "float*" in ln]
    assert len(lines) == 32, "\n".join(lines)
    if nvrtc_available():
        from argus.runtime.compile import compile_cuda
        src = render(lower_only(mm_transposed()))
        binary = compile_cuda(src.text, [src.name], use_cache=False)
        assert binary.ptx.count("st.shared.f32") == 32
        assert not binary.resource(src.name).spills


def test_trace_errors_say_what_to_do():
    @ag.kernel(threads=128)
    def wrong_rows(X: ag.Tensor[64, 64, ag.f32]):
        s = ag.smem((64, 32), ag.f32, swizzle=128)       # needs 2 * 64 rows
        ag.store_shared(s.view(), ag.load(X, (0, 0), (64, 64)), transposed=True)

    with pytest.raises(TraceError, match="atoms of") as e:
        lower_only(wrong_rows)
    assert "128 rows" in str(e.value) or "take a view of 128 rows" in str(e.value)

    @ag.kernel(threads=128)
    def wrong_span(X: ag.Tensor[64, 64, ag.f32]):
        s = ag.smem((256, 16), ag.f32, swizzle=128)      # a row is not the 128-byte span
        ag.store_shared(s.view(), ag.load(X, (0, 0), (64, 64)), transposed=True)

    with pytest.raises(TraceError, match="needs rows of 128 bytes"):
        lower_only(wrong_span)
