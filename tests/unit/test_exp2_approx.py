"""ag.exp2(x, approx=True): the SFU's ex2.approx.ftz alone (the attention softmax's exp,
AttentionSchedule.approx_exp2). The interpreter gives 2^x with subnormal inputs read as 0 and
subnormal results flushed to 0, the generated code calls ag::exp2_approx (ex2.approx.ftz.f32 in
the PTX, no libdevice exp2f), and the default ag.exp2 keeps the full-range exp2f."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.runtime import nvrtc_available


@ag.kernel
def pow2(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], approx: bool = True):
    (b,) = ag.grid(1)
    ag.store(Y, (0, 0), ag.exp2(ag.load(X, (0, 0), (4, 256)), approx=approx))


def _x():
    x = np.random.default_rng(0).uniform(-30, 30, (4, 256)).astype(np.float32)
    x[0, :6] = [-np.inf, -126.5, -140.0, 1e-40, -1e-40, 0.0]   # subnormal results and inputs
    return x


@pytest.mark.parametrize("approx", [True, False])
def test_interpreter_flushes_subnormals_only_when_approx(approx):
    x, y = _x(), np.full((4, 256), np.nan, np.float32)
    pow2.interpret(x, y, approx=approx)
    want = np.exp2(x.astype(np.float64))
    np.testing.assert_allclose(y[:, 6:], want[:, 6:], rtol=1e-6)
    assert y[0, 0] == 0.0 and y[0, 3] == 1.0 and y[0, 4] == 1.0 and y[0, 5] == 1.0
    if approx:   # 2^-126.5 and 2^-140 are subnormal: flushed
        assert y[0, 1] == 0.0 and y[0, 2] == 0.0
    else:
        assert y[0, 1] > 0.0 and y[0, 2] > 0.0


def test_generated_code_calls_the_sfu_alone():
    approx = codegen.render(lower_only(pow2, approx=True)).text
    exact = codegen.render(lower_only(pow2, approx=False)).text
    assert "ag::exp2_approx(" in approx and "exp2f(" not in approx
    assert "exp2f(" in exact and "ag::exp2_approx(" not in exact


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_ptx_has_ex2_ftz():
    ptx = compile_kernel(pow2, verify=False, approx=True).binary.ptx
    assert "ex2.approx.ftz.f32" in ptx
    ptx = compile_kernel(pow2, verify=False, approx=False).binary.ptx
    assert "ex2.approx.ftz.f32" not in ptx and "ex2.approx.f32" in ptx
