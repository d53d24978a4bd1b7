"""GPU tier: overlapped fp8 promotion (Fp8GemmSchedule(promote=True, overlap=True)) through
argus.ops.scaled_matmul against a float64 reference of the dequantized inputs: block scales on
ragged shapes with odd and even K-step counts (both tails of the two-step loop), clusters and
the TMA-store epilogue, f32 output (the promotion's own error), per-tensor promotion, and
bit-for-bit agreement with the serial promotion where both add the same fp32 values in the
same order. ARGUS_VERIFY=0 for these kernels: the verifier's wgmma.k-once does not prove
the overlapped loop yet (its sync checks do)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_ops_scaled_matmul_gpu import (_check_block_scaled_schedules,  # noqa: E402
                                                  _fp8, _quantize_blocks, _ref, _rel,
                                                  _scale)

pytestmark = hopper_only()


@pytest.fixture(autouse=True)
def _unverified(monkeypatch):
    monkeypatch.setenv("ARGUS_VERIFY", "0")


def _schedules():
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule

    return [Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True),
            Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True, cluster_m=2),
            Fp8GemmSchedule(bn=128, stages=5, promote=True, overlap=True, cluster_m=2,
                            epilogue="tma"),
            Fp8GemmSchedule(bn=64, stages=8, promote=True, overlap=True)]


@pytest.mark.parametrize("m,n,k", [(129, 384, 128), (1000, 300, 256), (4095, 7168, 2048),
                                   (777, 2112, 1920), (256, 256, 640)])
def test_overlapped_block_scaled_against_float64(m, n, k):
    _check_block_scaled_schedules(m, n, k, _schedules())


def test_overlapped_promotion_matches_the_serial_one():
    """Both add block k's scaled partial into the same fp32 sum in K order: the same bits."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule
    from argus.ops import scaled_matmul

    m, n, k = 1000, 1024, 1664
    a, w8, sa, sb = _quantize_blocks(torch.randn(m, k, device="cuda"),
                                     torch.randn(n, k, device="cuda") * 0.05)
    serial = scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32,
                           schedule=Fp8GemmSchedule(bn=128, stages=6, promote=True))
    overlapped = scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32,
                               schedule=Fp8GemmSchedule(bn=128, stages=6, promote=True,
                                                        overlap=True))
    assert torch.equal(serial, overlapped)


@pytest.mark.parametrize("k", [128, 1024, 1152])
def test_overlapped_per_tensor_promotion(k):
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule
    from argus.ops import scaled_matmul

    a, w = _fp8(1000, k, scale=3.0, seed=1), _fp8(512, k, scale=0.5, seed=2)
    sa, sb = _scale(0.02), _scale(0.5)
    out = scaled_matmul(a, w, sa, sb, out_dtype=torch.float32,
                        schedule=Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True))
    assert _rel(out, _ref(a, w, sa, sb)) < 5e-4
