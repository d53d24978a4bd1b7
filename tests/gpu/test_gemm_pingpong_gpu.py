"""GPU tier: the ping-pong GEMM schedule (two consumer warpgroups on whole tiles in turns,
ordered main loops: argus/kernels/gemm.py, ag.ordered) against a float64 reference, through
argus.ops.matmul, for both tile shapes, both B layouts, ragged edges and a persistent grid
where every CTA runs several units (both warpgroups take turns), with the register and the
TMA-store epilogues."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _rand(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


@pytest.mark.parametrize("bm,bn,stages,extra", [
    (128, 128, 6, {}), (64, 256, 5, {}), (64, 128, 6, {}), (64, 256, 4, {"group_m": 16}),
    (128, 128, 6, {"ordered_epilogue": True}),
    # the TMA-store epilogue (a warpgroup's whole tile through its own staging slots)
    (128, 128, 6, {"epilogue": "tma", "store_cols": 64}), (128, 128, 5, {"epilogue": "tma"}),
    (64, 256, 4, {"epilogue": "tma", "group_m": 16})])
# 1000x1504x136: ragged M, N and K with 16-byte aligned C rows (3008 bytes), so the TMA-store
# epilogue runs on ragged edges too (1500 is refused for it, below)
@pytest.mark.parametrize("m,n,k", [(2048, 7168, 2048), (1000, 1500, 136), (1000, 1504, 136),
                                   (4096, 4096, 64)])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_pingpong_matches_float64(bm, bn, stages, extra, m, n, k, layout):
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    a = _rand(m, k, seed=m)
    w = _rand(n, k, seed=n) if layout == "x@W.T" else _rand(k, n, seed=n)
    b = w.T if layout == "x@W.T" else w
    s = GemmSchedule(bm=bm, bn=bn, stages=stages, pingpong=True, num_sms=32, **extra)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if extra.get("epilogue") == "tma" and (n * out.element_size()) % 16:
        # a TMA store needs 16-byte aligned output rows (1500 bf16 = 3000 bytes): the op refuses
        # the schedule with a fix instead of launching it (the ragged rows run the register
        # epilogue, covered by the rows above)
        from argus.errors import LaunchError
        with pytest.raises(LaunchError, match="16-byte aligned rows"):
            matmul(a, b, out=out, schedule=s)
        return
    matmul(a, b, out=out, schedule=s)
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
