"""examples/softmax_lanes.py in the interpreter against torch in float64: rows shorter and
longer than a block, a ragged last block, rows that start with -inf (a lane whose running
maximum is -inf for its first blocks must add 0, not NaN), and the all -inf row (NaN, as
torch)."""

import pytest
import torch

from argus.demo import relative_error


@pytest.mark.parametrize("shape,bn", [((1, 1), 1024), ((9, 5000), 1024), ((3, 2048), 1024),
                                      ((2, 7000), 2048), ((4, 8192), 4096)])
def test_softmax_lanes(examples, shape, bn):
    ex = examples("softmax_lanes")
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(11)) * 4
    y = torch.full(shape, float("nan"))
    ex.KERNEL.interpret(x, y, BN=bn)
    assert relative_error(y, ex.reference(x, y)) < 1e-6


def test_rows_that_start_at_minus_infinity(examples):
    ex = examples("softmax_lanes")
    x = torch.randn(3, 5000, generator=torch.Generator().manual_seed(2)) * 4
    x[:, :3000] = float("-inf")
    x[2] = float("-inf")
    y = torch.full(x.shape, 0.0)
    ex.KERNEL.interpret(x, y, BN=1024)
    ref = ex.reference(x, y)
    assert relative_error(y[:2], ref[:2]) < 1e-6
    assert torch.isnan(y[2]).all() and torch.isnan(ref[2]).all()


def loop_bodies(cuda: str) -> list[str]:
    """The bodies of the runtime loops (`for (int v...`) of generated CUDA."""
    out, start = [], 0
    while (i := cuda.find("for (int v", start)) >= 0:
        j = cuda.index("{", i)
        depth, k = 1, j + 1
        while depth:
            depth += {"{": 1, "}": -1}.get(cuda[k], 0)
            k += 1
        out.append(cuda[j:k])
        start = k
    return out


def test_loops_have_no_reduction(examples):
    """Both passes keep everything per lane: no shuffle and no barrier inside a block loop
    (softmax_online reduces each block across the CTA); the kernel verifies clean."""
    ex = examples("softmax_lanes")
    compiled = ex.KERNEL.compile(BN=4096)
    assert not compiled.diagnostics
    bodies = loop_bodies(compiled.source.text)
    assert len(bodies) == 2
    for body in bodies:
        assert "__syncthreads" not in body and "__shfl" not in body and "bar.sync" not in body
    online = loop_bodies(examples("softmax_online").KERNEL.compile(BN=4096).source.text)
    assert any("__syncthreads" in b or "__shfl" in b for b in online)   # the check can fail
