"""argus.ops.matmul's operand preparation on the CPU: what a tensor map cannot address is
copied into an aligned buffer (the op's contract: "the result is always right").

A broadcast operand (expand(): stride 0 along a dim of extent > 1, e.g. one weight shared by
every batch of a bmm) passed the alignment test (0 is a multiple of 16) and reached the launch,
where argus/runtime/tma.py refuses a non-positive stride with a LaunchError advising to pad
the inner dim."""

import pytest

torch = pytest.importorskip("torch")


def test_a_broadcast_operand_is_copied():
    from argus.ops.matmul import _aligned, _tma_ready

    w = torch.randn(64, 48).bfloat16()
    shared = w.expand(3, 64, 48)                    # [batch, K, N], batch stride 0
    assert shared.stride(0) == 0
    assert not _aligned(shared, 2)
    ready = _tma_ready(shared, 2)
    assert all(s > 0 for s, n in zip(ready.stride(), ready.shape) if n > 1), ready.stride()
    assert torch.equal(ready, shared)
    # extent-1 dims are never stepped over: a plain [1, K, N] view stays as it is
    one = w.unsqueeze(0)
    assert _aligned(one, 2) and _tma_ready(one, 2) is one
