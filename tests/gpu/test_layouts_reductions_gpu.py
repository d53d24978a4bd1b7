"""On an H200: reductions over any axis (inside and outside roles), the accumulator row
statistics and rescale, index-tile masks and runtime scalars, RMSNorm; each compared with the
interpreter (tests/unit/reduce_kernels.py holds the kernels)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.unit import reduce_kernels as K  # noqa: E402
from tests.unit.test_reductions_broadcasts import BUILDS  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("rank,axis,fn,in_role", BUILDS)
def test_reduce_matches_interpreter(rank, axis, fn, in_role):
    X = torch.randn(2, 2, 8, 512)
    X[..., 3] = X[..., 5]
    S, I = torch.zeros_like(X), torch.zeros(X.shape, dtype=torch.int32)
    K.reduce_any.interpret(X, S, I, rank=rank, axis=axis, fn=fn, in_role=in_role)
    gX, gS, gI = X.cuda(), torch.zeros_like(X).cuda(), torch.zeros_like(I).cuda()
    K.reduce_any(gX, gS, gI, rank=rank, axis=axis, fn=fn, in_role=in_role)
    torch.cuda.synchronize()
    if fn.startswith("arg"):
        assert torch.equal(gI.cpu(), I)
    else:
        torch.testing.assert_close(gS.cpu(), S, rtol=1e-4, atol=1e-3)


def test_accumulator_statistics_match_interpreter():
    A, B = torch.randn(64, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    outs = [torch.zeros(64, 64), torch.zeros(64, 64), torch.zeros(64, 64, dtype=torch.int32),
            torch.zeros(64, 64)]
    K.acc_softmax.interpret(A, B, *outs)
    g = [t.cuda() * 0 for t in outs]
    K.acc_softmax(A.cuda(), B.cuda(), *g)
    torch.cuda.synchronize()
    torch.testing.assert_close(g[0].cpu(), outs[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g[1].cpu(), outs[1], rtol=1e-4, atol=1e-4)
    assert torch.equal(g[2].cpu(), outs[2])
    torch.testing.assert_close(g[3].cpu(), outs[3], rtol=1e-4, atol=1e-3)


def test_masks_and_runtime_scalars():
    X = torch.randn(4, 256) * 2
    Y = torch.zeros_like(X)
    K.masked.interpret(X, Y, 1, shift=3)
    gY = torch.zeros_like(X).cuda()
    K.masked(X.cuda(), gY, 1, shift=3)
    torch.cuda.synchronize()
    assert torch.equal(gY.cpu(), Y)


def test_rmsnorm():
    x, w = torch.randn(5, 1000), torch.randn(1000)
    y = torch.zeros_like(x)
    K.rmsnorm.interpret(x, w, y, eps=1e-5)
    gy = torch.zeros_like(x).cuda()
    K.rmsnorm(x.cuda(), w.cuda(), gy, 1e-5)
    torch.cuda.synchronize()
    torch.testing.assert_close(gy.cpu(), y, rtol=1e-5, atol=1e-5)
    assert np.isfinite(gy.cpu().numpy()).all()
