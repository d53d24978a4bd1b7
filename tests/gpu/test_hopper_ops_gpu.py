"""GPU tier: the explicit Hopper instructions end to end — TMA load and store, ldmatrix and
stmatrix through 128B-swizzled shared memory, cluster launches, the stmatrix + TMA-store GEMM
epilogue — each against the interpreter's semantics / a float64 reference."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

import argus as ag  # noqa: E402

pytestmark = hopper_only()


@ag.kernel
def twice(X: ag.Tensor["M", 64, ag.bf16], Y: ag.Tensor["M", 64, ag.bf16]):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], 64))
    sX = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
    sY = ag.smem((64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(1, consumers=1)
    with ag.role("load", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sX[st], X, (pid * 64, 0))
    with ag.role("compute", warpgroups=1):
        with pipe.consume() as st:
            x = ag.ldmatrix(sX[st])
            ag.stmatrix(sY.view(), x * 2.0)
        ag.tma.store(Y, (pid * 64, 0), sY.view())


@ag.kernel(threads=128, cluster=(2, 1, 1))
def clustered_copy(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    (pid,) = ag.grid(2 * ag.cdiv(X.shape[0], 2))
    ag.store(Y, (pid, 0), ag.load(X, (pid, 0), (1, 512)) + 1.0)


@pytest.mark.parametrize("rows", [64, 200, 1000])
def test_tma_ldmatrix_stmatrix_tma_store(rows):
    x = torch.randn(rows, 64, device="cuda").to(torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    twice(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2), "element mismatch: a swizzle or fragment formula is wrong"


def test_cluster_launch():
    x = torch.randn(37, 500, device="cuda")
    y = torch.full_like(x, float("nan"))
    clustered_copy(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x + 1)


@pytest.mark.parametrize("shape", [(128, 256, 64), (300, 520, 200), (4096, 4096, 4096)])
def test_gemm_stmatrix_tma_store_epilogue(shape):
    from argus.demo import load_example, relative_error

    gemm = load_example("gemm")
    a, b, c = gemm.make_inputs(shape, seed=11, device="cuda")
    gemm.KERNEL(a, b, c, s=gemm.GemmSchedule(epilogue="tma", stages=3))
    torch.cuda.synchronize()
    assert relative_error(c, gemm.reference(a, b, c)) < 1e-2


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("shape", [(300, 520, 200), (4096, 4096, 4096)])
def test_gemm_cluster_multicast(layout, shape):
    """2x1 clusters: each CTA loads half of B and multicasts it to its peer."""
    import argus as ag
    from argus.kernels.gemm import GemmSchedule, gemm_kernel

    m, n, k = shape
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    a = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    b = torch.randn(*((n, k) if layout == "nk" else (k, n)), device="cuda", generator=g)
    b = b.bfloat16()
    c = torch.full((m, n), float("nan"), device="cuda").bfloat16()
    for s in (GemmSchedule(cluster_m=2), GemmSchedule(cluster_m=2, epilogue="tma", stages=3,
                                                        persistent=False)):
        c.fill_(float("nan"))
        gemm_kernel(ag.bf16, ag.bf16, layout, False)(a, b, c, s=s)
        torch.cuda.synchronize()
        ref = a.double() @ (b.double().T if layout == "nk" else b.double())
        assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2, s
