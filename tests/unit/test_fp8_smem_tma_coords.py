"""The smem-scales fp8 kernel's TMA copies start 16-byte aligned in the innermost dimension
(issue 18), without a GPU.

A TMA tile copy (PTX cp.async.bulk.tensor) whose innermost coordinate times the element size
is not a multiple of 16 bytes stops the kernel with an illegal instruction on Hopper: found by
Triton (triton-lang/triton#7385: "the actual TMA read address (after applying the coordinates)
has to be 16-byte aligned"; the Gluon TMA tutorial, PR #9112) and TileLang (tile-ai/tilelang
#2527, #2681). cuTensorMapEncodeTiled cannot refuse it: the coordinates are runtime values. The
kernel loaded scale_a [M, K/128] f32 with the box (128, 4) at innermost coordinate k (the K
block), so every block k % 4 != 0 began 4 k bytes into a row: the device trapped at that load
(compute-sanitizer, 1000x300x640: UTMALDG of the third tensor map, 2026-12-03) while one K
block (k = 0) ran. The weight scales' box had the same coordinate. DeepGEMM keeps the K block
an outer coordinate of its scale copies (m_block * BLOCK_M innermost).

The interpreter runs every copy with its runtime coordinates; these tests record them (the
TMA rule wrapped) and check each against the rule, for every schedule kind the kernel takes."""

import pytest

import argus as ag
from argus.ir import ops as O
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_smem_kernel
from argus.runtime.interp import registry

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import (blockscaled_inputs, check_close,  # noqa: E402
                                   dequantized, kmajor)

TMA_ALIGN = 16   # bytes: the innermost coordinate's alignment (see the module docstring)


def _smem(**kw) -> Fp8GemmSchedule:
    return Fp8GemmSchedule(promote=True, smem_scales=True, **kw)


@pytest.fixture
def tma_loads(monkeypatch):
    """Every interpreted tma.load as (tensor name, dtype, innermost coordinate)."""
    seen = []
    inner = registry.RULES[O.TmaLoad]

    def recording(m, g, op):
        coords = [int(m.val(g, c)) for c in op.coords]
        seen.append((op.tensor.hint, op.tensor.type.dtype, coords[-1]))
        return inner(m, g, op)

    monkeypatch.setitem(registry.RULES, O.TmaLoad, recording)
    return seen


def _run(m, n, k, schedule, out=ag.f32):
    a, w, sa, sb = blockscaled_inputs(m, n, k)
    c = torch.full((m, n), float("nan"), dtype=out.torch_dtype())
    gemm_fp8_blockscaled_smem_kernel(out).interpret(a, w, kmajor(sa), kmajor(sb), c,
                                                    s=schedule)
    return c, a, w, sa, sb


@pytest.mark.parametrize("m,n,k,schedule", [
    (130, 250, 640, _smem(bn=112, stages=3)),                # K/128 = 5, straddling tiles
    (200, 320, 512, _smem(bn=160, stages=2, cluster_m=2)),   # K/128 = 4, cluster
    (128, 128, 1152, _smem(bn=128, stages=4)),               # K/128 = 9: a second aligned box
])
def test_every_tma_copy_starts_16_byte_aligned_innermost(tma_loads, m, n, k, schedule):
    c, a, w, sa, sb = _run(m, n, k, schedule)
    names = {name for name, _, _ in tma_loads}
    assert {"ScaleA", "ScaleB"} <= names, names
    bad = sorted({(name, coord) for name, dtype, coord in tma_loads
                  if coord * dtype.bytes % TMA_ALIGN})
    assert not bad, f"innermost TMA coordinates {TMA_ALIGN}-B misaligned (tensor, coord): {bad}"
    # and the scales of every K block still reach the right partials
    check_close(c, *dequantized(a, w, sa, sb), ag.f32, k)
