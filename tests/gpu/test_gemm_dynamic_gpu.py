"""GPU tier: the dense GEMM on the dynamic persistent walk (GemmSchedule(scheduler="dynamic"):
each CTA's producer draws its units from a global work counter and hands them to the
consumers in its ring's payload words; docs/design/dynamic_scheduler.md) against float64,
through argus.ops.matmul: ragged M, N and K, both B layouts, a batch, few CTAs (many units
each, so the draws interleave) and the full grid, both epilogues; the work word left at zero,
a CUDA graph replayed, two streams at once, and the kernel itself on a word left elsewhere."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _rand(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


def _check(out, a, b):
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


SCHEDULES = [
    dict(),                                                   # 128x256, 4 stages
    dict(bn=128, stages=6),
    dict(bm=64, bn=256, consumers=1, stages=5),
    dict(stages=4, epilogue="tma", store_cols=128),
    dict(bn=128, stages=6, num_sms=16),                       # many units a CTA
    dict(bn=128, stages=6, num_sms=7, group_m=16),
]


@pytest.mark.parametrize("extra", SCHEDULES)
@pytest.mark.parametrize("m,n,k", [(2048, 7168, 2048), (1000, 1504, 136), (3000, 5000, 1056),
                                   (4096, 4096, 64), (64, 8192, 1024)])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_dynamic_walk_matches_float64(extra, m, n, k, layout):
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    a = _rand(m, k, seed=m)
    w = _rand(n, k, seed=n) if layout == "x@W.T" else _rand(k, n, seed=n)
    b = w.T if layout == "x@W.T" else w
    s = GemmSchedule(scheduler="dynamic", **extra)
    for _ in range(3):   # the same work word, three launches (each leaves it at zero)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul(a, b, out=out, schedule=s)
        _check(out, a, b)


def test_dynamic_walk_batched():
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    a, b = _rand(3, 700, 520, seed=1), _rand(3, 520, 900, seed=2)
    out = torch.full((3, 700, 900), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul(a, b, out=out, schedule=GemmSchedule(bn=128, stages=6, scheduler="dynamic"))
    _check(out, a, b)


def test_the_work_word_is_left_at_zero_and_a_rotated_word_still_covers():
    """The kernel itself: the word is zero after a launch; started at 5 (a launch cut short
    would leave it so) every unit is still drawn once and the word ends at 5."""
    from argus.kernels.gemm import GemmSchedule, gemm_kernel

    s = GemmSchedule(bn=128, stages=6, scheduler="dynamic")
    kernel = gemm_kernel(dynamic=True).compile(s=s)
    a, w = _rand(3000, 1056, seed=3), _rand(5000, 1056, seed=4)
    for start in (0, 5):
        work = torch.tensor([start], dtype=torch.int32, device="cuda")
        out = torch.full((3000, 5000), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(a, w, out, work)
        torch.cuda.synchronize()
        _check(out, a, w.T)
        assert work.item() == start


def test_a_cuda_graph_replays_the_dynamic_walk():
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    s = GemmSchedule(bn=128, stages=6, scheduler="dynamic")
    a, w = _rand(2048, 2048, seed=5), _rand(7168, 2048, seed=6)
    out = torch.empty(2048, 7168, device="cuda", dtype=torch.bfloat16)
    matmul(a, w.T, out=out, schedule=s)             # compile and warm outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        matmul(a, w.T, out=out, schedule=s)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(out, a, w.T)


def test_two_streams_at_once_draw_from_words_of_their_own():
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    s = GemmSchedule(bn=128, stages=6, scheduler="dynamic")
    a, w = _rand(4096, 2048, seed=7), _rand(4096, 2048, seed=8)
    outs = [torch.full((4096, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
            for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in range(2)]
    torch.cuda.synchronize()
    for _ in range(5):
        for st, out in zip(streams, outs):
            with torch.cuda.stream(st):
                matmul(a, w.T, out=out, schedule=s)
    torch.cuda.synchronize()
    for out in outs:
        _check(out, a, w.T)
