"""ag.store_shared (ir.ops.StMatrix with `plain`): a register tile into an unswizzled
shared-memory view by st.shared in the tile's own layout. Its semantics in the interpreter
(gathered rows staged and TMA-stored, a partial last block dropped), the IR text (`plain=true`
printed and parsed back), layout inference (a "rows" tile keeps its layout: no conversion to
the accumulator fragment), its rendering (16-byte stores of 8 consecutive columns for 16-bit
"rows" tiles, two for f32), the lowering's proxy fence and barrier before the TMA store, the
verifier (store.once / store.coverage proven through the staged copy; a missing piece caught),
its trace errors, and NVRTC (st.shared.v4, no spills)."""

import numpy as np
import pytest
import torch

import argus as ag
from argus import verify
from argus.codegen.cuda import render
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.runtime import nvrtc_available


def _staged(dtype, cols: int, pieces: int = 1):
    """Y[m, j] = X[m // 2, 3 m - 2 + j] (outside X: 0), rows staged in shared memory in
    `pieces` column blocks, each TMA-stored (only the first `pieces` of them when fewer)."""
    width = cols // 2

    @ag.kernel(threads=32)
    def staged(X: ag.Tensor["R", "E", dtype], Y: ag.Tensor[("M", cols, dtype)]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
        m = b * 32 + ag.arange(32)[:, None]
        bufs = []
        for c0 in (0, width)[:pieces]:
            x = ag.gather(X, (m / 2, m * 3 - 2 + c0 + ag.arange(width)[None, :]), other=0.0)
            s = ag.smem((32, width), dtype)
            ag.store_shared(s.view(), x)
            bufs.append((c0, s))
        for c0, s in bufs:
            ag.tma.store(Y, (b * 32, c0), s.view())

    return staged


def _expected(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    out = torch.zeros(rows, cols, dtype=x.dtype)
    for m in range(rows):
        for j in range(cols):
            r, e = m // 2, 3 * m - 2 + j
            if r < x.shape[0] and 0 <= e < x.shape[1]:
                out[m, j] = x[r, e]
    return out


@pytest.mark.parametrize("dtype,tdtype", [(ag.bf16, torch.bfloat16), (ag.f32, torch.float32)])
def test_interpreter_stages_rows_and_copies_them_out(dtype, tdtype):
    x = torch.randn(30, 200).to(tdtype)
    y = torch.full((45, 112), 7.0, dtype=tdtype)          # a partial last block of 13 rows
    _staged(dtype, 112, 2).interpret(x, y)
    assert torch.equal(y, _expected(x, 45, 112))


def test_ir_text_says_plain_and_layout_stays_rows():
    kernel = lower_only(_staged(ag.bf16, 112, 2))
    stores = [op for op in kernel.walk() if isinstance(op, O.StMatrix)]
    assert len(stores) == 2 and all(op.plain for op in stores)
    assert all(op.src.type.layout == "rows" for op in stores)
    assert not any(isinstance(op, O.ConvertLayout) for op in kernel.walk())
    from argus.ir.parser import parse_kernel
    from argus.ir.printer import print_kernel
    text = print_kernel(kernel)
    assert "plain=true" in text
    assert print_kernel(parse_kernel(text)) == text


def test_lowering_fences_and_barriers_before_the_copy():
    ops = list(lower_only(_staged(ag.bf16, 112, 2)).walk())
    names = [type(op).__name__ for op in ops]
    first_copy = names.index("TmaStore")
    assert "ProxyFence" in names[:first_copy] and "GroupBarrier" in names[:first_copy]
    assert names.index("ProxyFence") > max(i for i, n in enumerate(names) if n == "StMatrix")


def test_rendering_stores_16_bytes_a_chunk():
    text = render(lower_only(_staged(ag.bf16, 112, 2))).text
    # two pieces of [32, 56] bf16: 7 chunks of 8 columns a row each, one uint4 store a chunk
    assert text.count("reinterpret_cast<uint4*>") == 14
    f32 = render(lower_only(_staged(ag.f32, 112, 2))).text
    assert f32.count("reinterpret_cast<uint4*>") == 28     # 8 f32 = two 16-byte stores
    assert "fence_view_async_shared" in text and "tma_store_2d" in text


def test_verifier_proves_the_staged_copy_and_catches_a_missing_piece():
    report = verify.run(lower_only(_staged(ag.bf16, 112, 2)))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}
    bad = verify.run(lower_only(_staged(ag.bf16, 112, 1)))      # columns 56.. never written
    assert any(d.code == "store.coverage" for d in bad.diagnostics), \
        [str(d) for d in bad.diagnostics]


def test_trace_errors_say_what_to_do():
    # (a swizzled view is no longer refused since 5693c2a: tests/unit/
    # test_store_shared_swizzled.py stores into one and checks the swizzled addresses)
    @ag.kernel(threads=32)
    def wrong_shape(X: ag.Tensor["M", 64, ag.bf16]):
        s = ag.smem((32, 64), ag.bf16)
        ag.store_shared(s.view(), ag.load(X, (0, 0), (32, 32)))

    with pytest.raises(TraceError, match="view's shape"):
        lower_only(wrong_shape)

    @ag.kernel(threads=32)
    def wrong_dtype(X: ag.Tensor["M", 64, ag.bf16]):
        s = ag.smem((32, 64), ag.f32)
        ag.store_shared(s.view(), ag.load(X, (0, 0), (32, 64)))

    with pytest.raises(TraceError, match="convert it first"):
        lower_only(wrong_dtype)

    @ag.kernel(threads=32)
    def eight_bit(X: ag.Tensor["M", 64, ag.e4m3]):
        s = ag.smem((32, 64), ag.e4m3)
        ag.store_shared(s.view(), ag.load(X, (0, 0), (32, 64)))

    with pytest.raises(TraceError, match="f32, bf16 or f16 tiles") as e:
        lower_only(eight_bit)
    assert "t.to(ag.bf16)" in e.value.fix


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_vector_shared_stores(tmp_path, monkeypatch):
    from argus.runtime.compile import compile_cuda
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    source = render(lower_only(_staged(ag.bf16, 112, 2)))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.ptx.count("st.shared.v4") == 14, binary.ptx.count("st.shared")
    assert "st.global" not in binary.ptx
    assert not binary.resource(source.name).spills


def test_numpy_interpreter_accepts_numpy_arrays():
    x = np.random.default_rng(0).standard_normal((30, 200)).astype(np.float32)
    y = np.zeros((40, 112), np.float32)
    _staged(ag.f32, 112, 2).interpret(x, y)
    assert np.array_equal(y, _expected(torch.from_numpy(x), 40, 112).numpy())
