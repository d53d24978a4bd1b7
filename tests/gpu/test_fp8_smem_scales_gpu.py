"""GPU tier: block scales through shared memory (Fp8GemmSchedule(promote=True,
smem_scales=True)) through argus.ops.scaled_matmul against a float64 reference of the
dequantized inputs (ragged shapes, K/128 not a multiple of 4: scale rows padded by the op,
straddling 160-wide tiles, clusters, the TMA-store epilogue), scale_a in both layouts
(row-major and DeepGEMM's MN-major), and bit for bit against the global-scale kernel (same
partials, same scales, same order of adds). Verified kernels (ARGUS_VERIFY as set)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_ops_scaled_matmul_gpu import _block_ref, _quantize_blocks, _rel  # noqa: E402

pytestmark = hopper_only()

# The kernel trapped on the H200 until its scale copies' innermost TMA coordinate was 16-byte
# aligned (2026-12-03, issue 18: see SMEM_SCALES_ON_DEVICE in argus/ops/scaled_matmul.py).


def test_the_kill_switch_refuses_smem_scales(monkeypatch):
    import importlib

    from argus.errors import LaunchError
    from argus.ops import scaled_matmul

    # the module, not the function argus.ops re-exports under the same name
    monkeypatch.setattr(importlib.import_module("argus.ops.scaled_matmul"),
                        "SMEM_SCALES_ON_DEVICE", False)
    a, w8, sa, sb = _quantize_blocks(torch.randn(128, 256, device="cuda"),
                                     torch.randn(128, 256, device="cuda") * 0.05)
    with pytest.raises(LaunchError, match="not run on the device"):
        scaled_matmul(a, w8, sa, sb, schedule=_schedules()[0])


def _schedules():
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule

    return [Fp8GemmSchedule(bn=128, stages=6, promote=True, smem_scales=True),
            Fp8GemmSchedule(bn=128, stages=5, promote=True, smem_scales=True, cluster_m=2,
                            epilogue="tma"),
            Fp8GemmSchedule(bn=160, stages=5, promote=True, smem_scales=True)]


@pytest.mark.parametrize("m,n,k", [(129, 384, 128), (1000, 300, 640), (1024, 384, 512),
                                   (4095, 7168, 2048), (777, 2112, 1920)])
def test_smem_scales_against_float64(m, n, k):
    from argus.ops import scaled_matmul

    x = torch.randn(m, k, device="cuda") * torch.rand(m, 1, device="cuda") * 4
    a, w8, sa, sb = _quantize_blocks(x, torch.randn(n, k, device="cuda") * 0.05)
    ref = _block_ref(a, w8, sa, sb)
    for s in _schedules():
        if s.epilogue != "tma" or (n * 2) % 16 == 0:
            out = scaled_matmul(a, w8, sa, sb, schedule=s)
            assert _rel(out, ref) < 4e-3, s
            out_rm = scaled_matmul(a, w8, sa.contiguous(), sb, schedule=s)  # row-major sa
            assert torch.equal(out, out_rm), s
        if s.epilogue != "tma":
            out32 = scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32, schedule=s)
            assert _rel(out32, ref) < 5e-4, s


def test_smem_scales_match_the_global_scale_kernel():
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule
    from argus.ops import scaled_matmul

    m, n, k = 1000, 1024, 1664
    a, w8, sa, sb = _quantize_blocks(torch.randn(m, k, device="cuda"),
                                     torch.randn(n, k, device="cuda") * 0.05)
    outs = [scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32,
                          schedule=Fp8GemmSchedule(bn=128, stages=6, promote=True, **kw))
            for kw in ({}, {"smem_scales": True}, {"late_release": True})]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
