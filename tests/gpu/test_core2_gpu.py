"""GPU tier for compiler core 2: loop-carried values, wgmma with A from registers and the
FlashAttention example run on the device and match float64 references (or the interpreter)
on fresh random data."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def test_loop_carried_kernel_matches_the_interpreter():
    from argus.compiler import compile_kernel
    from tests.unit.test_loop_carried import running_max

    x = torch.randn(37, 1000, generator=torch.Generator().manual_seed(3))
    y_ref = torch.zeros(37, 256)
    running_max.interpret(x, y_ref)
    xc, yc = x.cuda(), torch.full((37, 256), float("nan"), device="cuda")
    compile_kernel(running_max)(xc, yc)
    torch.cuda.synchronize()
    assert torch.equal(yc.cpu(), y_ref)


def test_register_a_wgmma_matches_float64():
    from argus.compiler import compile_kernel
    from tests.unit.test_wgmma_register_a import _inputs, _reference, two_gemms

    q, k, v, o = _inputs(bh=3, s=200, seed=5)
    ref = _reference(q, k, v)
    qc, kc, vc, oc = (t.cuda() for t in (q, k, v, o))
    compile_kernel(two_gemms)(qc, kc, vc, oc)
    torch.cuda.synchronize()
    err = (oc.double().cpu() - ref).norm() / ref.norm()
    assert err < 1e-3, err


def _attention(bh, s, sk, d, causal, seed):
    from argus.compiler import compile_kernel
    from argus.demo import load_example

    fa = load_example("flash_attention")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(bh, n, d, generator=g).bfloat16().cuda() for n in (s, sk, sk))
    o = torch.full((bh, s, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    compile_kernel(fa.attention_kernel(d, causal))(q, k, v, o)
    torch.cuda.synchronize()
    return o, fa.reference(q, k, v, o, causal=causal)


@pytest.mark.parametrize("bh,s,sk,d,causal", [
    (2, 100, 100, 64, False), (4, 1000, 1000, 64, True), (2, 130, 70, 128, True),
    (1, 70, 130, 128, True), (3, 64, 4096, 64, False), (2, 257, 257, 256, False)])
def test_flash_attention_example_matches_float64(bh, s, sk, d, causal):
    o, ref = _attention(bh, s, sk, d, causal, seed=bh * 1000 + s)
    assert o.isfinite().all()
    err = ((o.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err
