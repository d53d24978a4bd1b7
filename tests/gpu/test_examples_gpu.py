"""GPU tier: every example kernel is correct on the device against a float64 reference, on
fresh random data at two sizes, and an unaligned GEMM shape works."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("name", ["elementwise", "softmax", "gemm"])
@pytest.mark.parametrize("size", ["small", "large"])
def test_example_matches_float64(name, size):
    from argus.demo import load_example, run_example

    r = run_example(load_example(name), size=size, seed=7, device="cuda")
    assert r.ok, f"{name} {size}: relative error {r.rel_error:.3e}"


@pytest.mark.parametrize("shape", [(1, 8, 64), (7, 129, 72), (129, 1000, 4096), (4095, 4097, 512)])
def test_gemm_odd_shapes(shape):
    from argus.compiler import compile_kernel
    from argus.demo import load_example, relative_error

    gemm = load_example("gemm")
    a, b, c = gemm.make_inputs(shape, seed=3, device="cuda")
    compile_kernel(gemm.KERNEL)(a, b, c)
    torch.cuda.synchronize()
    assert relative_error(c, gemm.reference(a, b, c)) < 1e-2


def test_gemm_rejects_bad_arguments():
    from argus.compiler import compile_kernel
    from argus.demo import load_example
    from argus.errors import LaunchError

    gemm = load_example("gemm")
    k = compile_kernel(gemm.KERNEL)
    a, b, c = gemm.make_inputs((128, 256, 64), device="cuda")
    with pytest.raises(LaunchError):
        k(a.float(), b, c)                       # wrong dtype
    with pytest.raises(LaunchError):
        k(a.cpu(), b, c)                         # wrong device
    with pytest.raises(LaunchError):
        k(a, b[:, :32], c)                       # K disagrees between A and B
