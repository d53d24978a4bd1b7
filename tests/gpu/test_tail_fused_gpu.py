"""GPU tier: the fused tail finish (GemmSchedule(tail_splits=S, tail_finish="fused"): the last K
slice to arrive at a tail tile adds the slices' partials and stores it, in the GEMM itself)
through argus.ops.matmul against a float64 reference: the shape it is for (2048 x 7168 x
2048), ragged edges (1000 x 1500 x 1056, where the TMA-store tail once went wrong), both B
layouts, batched and fp32 output. C is NaN-filled first, so a tile never finished shows; the
result must equal the two-kernel finish's bit for bit (the same sums in the same order),
repeated calls (the counters reset themselves) must agree, and the arrival counters must be
zero after every call."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _rand(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


def _run(a, b, out, s):
    from argus.ops import matmul

    out.fill_(float("nan"))
    matmul(a, b, out=out, schedule=s)
    torch.cuda.synchronize()
    return out.clone()


def _check(a, b, out, s, tol):
    from argus.ops import split_k
    from argus.ops.matmul import _CHOSEN, problem_of

    fused = _run(a, b, out, s)
    ref = a.double() @ b.double()
    assert not torch.isnan(fused).any(), "a tile of C was never written"
    err = ((fused.double() - ref).norm() / ref.norm()).item()
    assert err < tol, err
    for _ in range(3):   # the replayed launch, on the counters the last call left
        assert torch.equal(_run(a, b, out, s), fused)
    two = _run(a, b, out, dataclasses.replace(s, tail_finish="kernel"))
    assert torch.equal(two, fused), "the fused finish differs from tail_sum_kernel's sum"
    problem, _ = problem_of(a, b, out)
    # a BuildMemo's stored keys are (build choices, the caller's key)
    runner = next(v for (_, (p, _, sched)), v in _CHOSEN.items() if p == problem and sched == s)
    assert runner.fused and all(not c.any() for c in runner._counters.values()), \
        "an arrival counter was left nonzero"
    return split_k.tail_tiles(problem, s)


@pytest.mark.parametrize("splits", [2, 3, 4])
@pytest.mark.parametrize("m,n,k", [(2048, 7168, 2048), (1000, 1500, 1056)])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_fused_tail_matches_float64(splits, m, n, k, layout):
    from argus.kernels.gemm import GemmSchedule

    if k % splits or (k // splits) % 8:
        pytest.skip(f"K={k} does not cut into {splits} TMA-readable slices")
    a = _rand(m, k, seed=m)
    w = _rand(n, k, seed=n) if layout == "x@W.T" else _rand(k, n, seed=n)
    b = w.T if layout == "x@W.T" else w
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=splits, tail_finish="fused")
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    assert _check(a, b, out, s, 1e-2) > 0     # the tail ran in slices


@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_fused_tail_batched_and_fp32_out(layout):
    from argus.kernels.gemm import GemmSchedule

    a = _rand(3, 700, 528, seed=3)
    w = _rand(3, 900, 528, seed=4) if layout == "x@W.T" else _rand(3, 528, 900, seed=4)
    b = w.transpose(1, 2) if layout == "x@W.T" else w
    s = GemmSchedule(stages=4, tail_splits=2, num_sms=16, tail_finish="fused")
    assert _check(a, b, torch.empty(3, 700, 900, device="cuda", dtype=torch.bfloat16), s,
                  1e-2) > 0
    out = torch.empty(3, 700, 900, device="cuda", dtype=torch.float32)
    assert _check(a, b, out, s, 1e-5) > 0
