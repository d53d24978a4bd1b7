"""examples/rmsnorm.py in the interpreter against float64 torch, on fresh random data at odd
sizes (ragged last tile), with the output poisoned with NaN beforehand."""

import pytest
import torch

from argus.demo import relative_error


@pytest.mark.parametrize("shape", [(1, 1), (5, 1000), (37, 3000), (3, 4097), (2, 8192)])
def test_rmsnorm(examples, shape):
    ex = examples("rmsnorm")
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g) * 3
    w = 1.0 + 0.5 * torch.randn(1, shape[1], generator=g)
    y = torch.full(shape, float("nan"))
    ex.KERNEL.interpret(x, w, y, **ex.constexprs(x, w, y))
    assert relative_error(y, ex.reference(x, w, y)) < 1e-6


def test_rmsnorm_several_rows_per_cta(examples):
    ex = examples("rmsnorm")
    x, w, y = ex.make_inputs("small", seed=4)
    ex.KERNEL.interpret(x, w, y, **ex.constexprs(x, w, y), ROWS=4)
    assert relative_error(y, ex.reference(x, w, y)) < 1e-6
    assert relative_error(ex.baseline(x, w, y), ex.reference(x, w, y)) < 1e-5
