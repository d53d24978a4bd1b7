"""GPU tier: the N-split promoting loop (Fp8GemmSchedule(promote=True, n_split=2): each K block
as two column halves with their own partials and fp32 sums, 128 x 256 tiles) through
argus.ops.scaled_matmul against a float64 reference of the dequantized inputs: block scales on
ragged shapes, 96-wide halves that straddle weight blocks, clusters, both epilogues (halves
taking turns in the TMA staging buffer), shared-memory scales, f32 output (the promotion's own
error), per-tensor promotion, and bit-for-bit agreement with the unsplit serial loop (both add
the same fp32 values in the same order). Verification stays on: the verifier proves each
half's reduction."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_ops_scaled_matmul_gpu import (_check_block_scaled_schedules,  # noqa: E402
                                                  _fp8, _quantize_blocks, _ref, _rel,
                                                  _scale)

pytestmark = hopper_only()


def _schedules():
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule as S

    return [S(bn=256, stages=4, promote=True, n_split=2),
            S(bn=256, stages=3, promote=True, n_split=2, epilogue="tma"),
            S(bn=256, stages=3, promote=True, n_split=2, cluster_m=2, epilogue="tma"),
            S(bn=192, stages=5, promote=True, n_split=2, split_overlap=True, cluster_m=2,
              epilogue="tma"),
            S(bn=176, stages=5, promote=True, n_split=2, cluster_m=2),
            S(bn=256, stages=3, promote=True, n_split=2, smem_scales=True, epilogue="tma")]


@pytest.mark.parametrize("m,n,k", [(129, 384, 128), (1000, 300, 256), (4095, 7168, 2048),
                                   (777, 2112, 1920), (256, 512, 640)])
def test_split_block_scaled_against_float64(m, n, k):
    _check_block_scaled_schedules(m, n, k, _schedules())


def test_split_promotion_matches_the_unsplit_one():
    """Each element sums the same scaled block partials in K order: the same bits."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule as S
    from argus.ops import scaled_matmul

    m, n, k = 1000, 1024, 1664
    a, w8, sa, sb = _quantize_blocks(torch.randn(m, k, device="cuda"),
                                     torch.randn(n, k, device="cuda") * 0.05)
    serial = scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32,
                           schedule=S(bn=128, stages=6, promote=True))
    for s in (S(bn=256, stages=4, promote=True, n_split=2),
              S(bn=128, stages=6, promote=True, n_split=2, split_overlap=True)):
        assert torch.equal(serial, scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32,
                                                 schedule=s)), s


@pytest.mark.parametrize("k", [128, 1024, 1152])
def test_split_per_tensor_promotion(k):
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule
    from argus.ops import scaled_matmul

    a, w = _fp8(1000, k, scale=3.0, seed=1), _fp8(512, k, scale=0.5, seed=2)
    sa, sb = _scale(0.02), _scale(0.5)
    out = scaled_matmul(a, w, sa, sb, out_dtype=torch.float32,
                        schedule=Fp8GemmSchedule(bn=256, stages=4, promote=True, n_split=2))
    assert _rel(out, _ref(a, w, sa, sb)) < 5e-4
