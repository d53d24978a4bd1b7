"""scripts/tf32_accum_model.py: the CPU model of Hopper's tf32 tensor-core accumulation (issue
17) on hand-computed cases: the fused multi-term step aligns every term to the largest
exponent and truncates toward zero (not to nearest, not in IEEE order), the fp32 store
truncates, the operands round as cvt.rna, and a Conv2d through the model equals F.conv2d of
the rounded operands to fp32 accuracy (the im2col order is right)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _model():
    from tests.loading import load_script
    return load_script("tf32_accum_model")


def test_step_truncates_below_the_largest_term():
    mod = _model()
    # c = 1, products 2^-24 and 3 * 2^-25: aligned to 2^0 with 23 fraction bits, both fall
    # below the quantum 2^-23 and are dropped; IEEE fp32 (round to nearest) of the exact sum
    # 1 + 5 * 2^-25 would give 1 + 2^-23
    got = mod.tc_step(np.array([1.0]), np.array([[2.0 ** -24, 3 * 2.0 ** -25]]), 23)
    assert got[0] == 1.0
    assert np.float32(1.0 + 5 * 2.0 ** -25) == np.float32(1.0 + 2.0 ** -23)
    # with 25 fraction bits (2 extra alignment bits) the quantum is 2^-25: both survive, the
    # sum 1 + 5 * 2^-25 is exact, and the fp32 store truncates it to 1 + 2^-23
    got = mod.tc_step(np.array([1.0]), np.array([[2.0 ** -24, 3 * 2.0 ** -25]]), 25)
    assert got[0] == 1.0 + 2.0 ** -23


def test_step_rounds_toward_zero_for_both_signs():
    mod = _model()
    q = 2.0 ** -10                      # the quantum at 10 fraction bits below 2^0
    prods = np.array([[1.0, 0.7 * q], [-1.0, -0.7 * q]])
    got = mod.tc_step(np.zeros(2), prods, 10)
    assert list(got) == [1.0, -1.0]     # 0.7 quantum dropped, not rounded up to one
    # a negative term next to a positive largest one: trunc(-0.7) = 0, the sum stays 1
    got = mod.tc_step(np.zeros(1), np.array([[1.0, -0.7 * q]]), 10)
    assert got[0] == 1.0
    # the largest term may be the accumulator: the products align to it
    got = mod.tc_step(np.array([4.0]), np.array([[1.5 * q, 2.5 * q]]), 10)
    assert got[0] == 4.0                # quantum 2^-8 at 4: both products (< 2^-8) vanish


def test_store_truncates_to_fp32():
    mod = _model()
    x = np.array([1.0 + 2.0 ** -23 + 2.0 ** -24 + 2.0 ** -30,
                  -(1.0 + 2.0 ** -23 + 2.0 ** -24), 0.0])
    got = mod.truncate_to(x, 24)
    assert list(got) == [1.0 + 2.0 ** -23, -(1.0 + 2.0 ** -23), 0.0]


def test_round_tf32_is_cvt_rna():
    mod = _model()
    one = 1.0
    ulp = 2.0 ** -10
    x = np.array([one + ulp / 2, -(one + ulp / 2), one + ulp / 2 - 2.0 ** -23, 3.0 + 2.0 ** -22])
    got = mod.round_tf32(x)
    # ties away from zero (+-), below a tie down, a small excess dropped
    assert list(got) == [one + ulp, -(one + ulp), one, 3.0]


def test_conv2d_model_matches_the_rounded_convolution():
    """The model's Conv2d (stride, padding, bias) equals F.conv2d of the cvt.rna-rounded
    operands in float64 to ~1e-6 relative: truncating ~24 bits errs ~1e-7, a wrong K order or
    im2col layout would err at the output's own scale."""
    import torch.nn.functional as F

    mod = _model()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 9, 11, generator=g, dtype=torch.float64)
    w = torch.randn(7, 5, 3, 2, generator=g, dtype=torch.float64)
    b = torch.randn(7, generator=g, dtype=torch.float64)
    got = mod.conv2d_model(x, w, b, (2, 1), (1, 0), (1, 2), 1, group=4, frac_bits=23)
    xr = torch.from_numpy(mod.round_tf32(x.numpy()))
    wr = torch.from_numpy(mod.round_tf32(w.numpy()))
    want = F.conv2d(xr, wr, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    assert got.shape == want.shape
    err = float((got - want).abs().max() / want.abs().max())
    assert 0 < err < 1e-6, err
    # and it is not the unrounded convolution (the operands' rounding is in)
    exact = F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    assert float((got - exact).abs().max() / exact.abs().max()) > 1e-5
