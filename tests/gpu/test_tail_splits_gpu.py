"""GPU tier: tail splits (GemmSchedule.tail_splits: the persistent walk's last, partial wave in
K slices, summed by tail_sum_kernel) through argus.ops.matmul against a float64 reference: the
shape they are for (2048 x 7168 x 2048, 26 of 66 cluster units in the last wave), ragged edges,
both B layouts, a batched problem, an fp32 output, and a problem with full waves (the plain
kernel runs). C is NaN-filled first, so a tile neither kernel wrote shows."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _rand(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


def _check(a, b, out, s, tol):
    from argus.ops import matmul, split_k
    from argus.ops.matmul import problem_of

    out.fill_(float("nan"))
    matmul(a, b, out=out, schedule=s)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any(), "a tile of C was never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < tol, err
    # the replayed launch (same buffers: the memoized path) computes the same again
    first = out.clone()
    out.fill_(float("nan"))
    matmul(a, b, out=out, schedule=s)
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    problem, _ = problem_of(a, b, out)
    return split_k.tail_tiles(problem, s)


@pytest.mark.parametrize("splits", [2, 4])
# the TMA-store epilogue is refused with tail splits: wrong on the H200 at 1000x1500x1056
@pytest.mark.parametrize("epilogue", ["direct"])
@pytest.mark.parametrize("m,n,k", [(2048, 7168, 2048), (1000, 1500, 1056)])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_tail_splits_match_float64(splits, epilogue, m, n, k, layout):
    from argus.kernels.gemm import GemmSchedule

    a = _rand(m, k, seed=m)
    w = _rand(n, k, seed=n) if layout == "x@W.T" else _rand(k, n, seed=n)
    b = w.T if layout == "x@W.T" else w
    store = {"store_cols": 128} if epilogue == "tma" else {}
    s = GemmSchedule(stages=4, epilogue=epilogue, cluster_m=2, tail_splits=splits, **store)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    assert _check(a, b, out, s, 1e-2) > 0     # the tail ran in slices


@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_tail_splits_batched_and_fp32_out(layout):
    from argus.kernels.gemm import GemmSchedule

    a = _rand(3, 700, 528, seed=3)
    w = _rand(3, 900, 528, seed=4) if layout == "x@W.T" else _rand(3, 528, 900, seed=4)
    b = w.transpose(1, 2) if layout == "x@W.T" else w
    s = GemmSchedule(stages=4, tail_splits=2, num_sms=16)
    assert _check(a, b, torch.empty(3, 700, 900, device="cuda", dtype=torch.bfloat16), s,
                  1e-2) > 0
    out = torch.empty(3, 700, 900, device="cuda", dtype=torch.float32)
    assert _check(a, b, out, s, 1e-5) > 0


def test_full_waves_run_the_plain_kernel():
    from argus.kernels.gemm import GemmSchedule

    # 4 x 8 units of 2x1 clusters = 32 ... on 16 clusters: two full waves, no tail
    a, w = _rand(1024, 512, seed=1), _rand(2048, 512, seed=2)
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=2, num_sms=32)
    out = torch.empty(1024, 2048, device="cuda", dtype=torch.bfloat16)
    assert _check(a, w.T, out, s, 1e-2) == 0
