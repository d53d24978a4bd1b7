"""GPU tier for the emulated exp2 (ag::exp2_emu, argus/target/exp2_emulation.py): the device's
sequence against the numpy model the interpreter runs, on the float grid of the unit tests
(the softmax's range, -131..9 at 2^-14) and the special values, and the SFU's columns against
ex2.approx's bound. Written 2026-12-04 without a GPU. The model rounds each FMA from float64
(exact product, one rounding of the sum to float64 first), so it may differ from the device's
fused FMA in the last bit where that sum lands on a float32 tie: the test allows 1 ulp on at
most 1 in 10^4 elements and checks the relative error bound on all of them."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def test_device_matches_the_model():
    from argus.compiler import compile_kernel
    from argus.target import exp2_emulation as E
    from tests.unit.test_exp2_emulation import pow2e

    x = (np.arange(-131 * 2 ** 14, 9 * 2 ** 14 + 1) / 2.0 ** 14).astype(np.float32)
    x = np.concatenate([x, np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40,
                                     -126.0, -126.5, -127.0, -1000.0, 128.0, 1000.0],
                                    np.float32)])
    x = np.resize(x, (len(x) + 4095) // 4096 * 4096).reshape(-1, 4, 1024)
    kernel = compile_kernel(pow2e)
    got = np.empty_like(x)
    for i in range(x.shape[0]):   # one 4 x 1024 tile a launch: columns < 512 emulated
        xc = torch.from_numpy(x[i]).cuda()
        yc = torch.full_like(xc, float("nan"))
        kernel(xc, yc)
        got[i] = yc.cpu().numpy()
    torch.cuda.synchronize()
    emu, sfu = got[..., :512], got[..., 512:]
    want = E.exp2_emulated(x[..., :512])
    assert np.array_equal(np.isnan(emu), np.isnan(want))
    ok = ~np.isnan(want)
    ulps = np.abs(emu[ok].view(np.int32).astype(np.int64) - want[ok].view(np.int32))
    assert ulps.max() <= 1 and (ulps > 0).mean() < 1e-4, (ulps.max(), (ulps > 0).mean())
    exact = np.exp2(x.astype(np.float64))
    normal = (exact >= 2.0 ** -126) & (exact < 2.0 ** 128)
    rel = np.abs(got / exact - 1.0)
    assert rel[..., :512][normal[..., :512]].max() <= E.MAX_REL_ERROR
    assert rel[..., 512:][normal[..., 512:]].max() <= 2.0 ** -21   # ex2.approx: 2^-22 + ftz
    assert np.array_equal(np.isnan(sfu), np.isnan(x[..., 512:]))
