"""GPU tier for ag.require (tests/unit/test_require.py): a compiled launch checks the kernel's
stated preconditions on the actual scalar values before it launches, on a fresh plan and
after a cached one (plans are keyed by the runtime scalar values), and the folded attention
kernel refuses a negative qk_scale launched directly."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import argus as ag  # noqa: E402
from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@ag.kernel
def scaled(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32], scale: ag.f32):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], 64))
    ag.require(ag.sym(scale) > 0, "the scale must be positive: a test kernel")
    ag.store(Y, (pid * 64, 0), ag.load(X, (pid * 64, 0), (64, 64)) * scale)


def test_a_compiled_launch_refuses_a_broken_precondition():
    x = torch.ones(128, 64, device="cuda")
    y = torch.zeros_like(x)
    compiled = scaled.compile()
    compiled(x, y, 2.0)
    torch.cuda.synchronize()
    assert (y == 2.0).all()
    y.zero_()
    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ag.LaunchError, match="scale > 0 does not hold"):
            compiled(x, y, bad)
    compiled(x, y, 2.0)                        # the cached plan still launches
    torch.cuda.synchronize()
    assert (y == 2.0).all()


def test_folded_attention_refuses_a_negative_scale():
    from argus.kernels.attention import attention_kernel, default_schedule
    from argus.ops.attention import for_scale

    fn = attention_kernel(64, ag.bf16, False, False)
    folded = dataclasses.replace(default_schedule(64, False), fold_scale=True)
    q = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    with pytest.raises(ag.LaunchError, match="qk_scale > 0 does not hold"):
        fn.compile(s=folded)(q, q, q, o, -0.18)
    fn.compile(s=for_scale(folded, -0.18))(q, q, q, o, -0.18)    # unfolded: accepted
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float(),
                                                           scale=-0.18 / 1.4426950408889634)
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)
