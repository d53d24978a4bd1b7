"""argus/compose/rewrite.py's sink_into_max_pools (no GPU): maxpool(f(x)) -> f(maxpool(x)) for
the monotone, exact-to-move steps (x * c, x / c with c > 0; x + c, x - c), taken where f(x)
feeds only the pool; the steps that would change results (a negative or decreasing scale,
c - x, an average pool, a tensor operand, f(x) read elsewhere) stay. Composed models run in
the interpreter against torch: bit for bit against float32 eager where the rewrite moved the
step (the rewrite's claim: the same bits), and against float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from argus.compose.capture import capture
from argus.compose.partition import partition
from argus.compose.rewrite import sink_into_max_pools
from argus.compose.runtime import ComposedModel


def _graph(f, x):
    model = type("M", (nn.Module,), {"forward": lambda self, a: f(a)})()
    return capture(model, [x])


def _pool_input_op(g):
    (pool,) = [n for n in g.live() if n.op == "pool"]
    src = pool.args[0]
    return src.op if src.op != "ew" else f"ew:{src.fn}"


X = torch.randn(2, 3, 8, 8)

MOVED = [
    lambda x: F.max_pool2d(torch.relu(x) / 2.0, 2),
    lambda x: F.max_pool2d(torch.relu(x) * 0.3, 2),
    lambda x: F.max_pool2d(0.7 * torch.relu(x), 2),
    lambda x: F.max_pool2d(torch.relu(x) + 1.5, 2),
    lambda x: F.max_pool2d(torch.relu(x) - 0.25, 3, 2, 1),
    lambda x: F.max_pool2d((torch.relu(x) * 3.0 + 1.0) / 4.0, 2),       # a chain: all move
]
KEPT = [
    lambda x: F.max_pool2d(torch.relu(x) * -2.0, 2),                    # decreasing
    lambda x: F.max_pool2d(torch.relu(x) / -2.0, 2),
    lambda x: F.max_pool2d(1.0 - torch.relu(x), 2),                     # decreasing
    lambda x: F.max_pool2d(2.0 / (torch.relu(x) + 1.0), 2),             # c / x
    lambda x: F.avg_pool2d(torch.relu(x) / 3.0, 2),                     # average: rounding
    lambda x: F.max_pool2d(torch.relu(x) * torch.full((8,), 2.0), 2),   # a tensor scale
]


@pytest.mark.parametrize("f", MOVED, ids=range(len(MOVED)))
def test_monotone_steps_move_past_the_pool(f):
    g = _graph(f, X)
    assert sink_into_max_pools(g) >= 1
    assert _pool_input_op(g) == "ew:relu" or _pool_input_op(g).startswith("ew:max")
    assert sink_into_max_pools(g) == 0           # nothing left to move


@pytest.mark.parametrize("f", KEPT, ids=range(len(KEPT)))
def test_other_steps_stay(f):
    g = _graph(f, X)
    before = _pool_input_op(g)
    assert sink_into_max_pools(g) == 0
    assert _pool_input_op(g) == before


@pytest.mark.parametrize("f", [lambda x: F.max_pool2d(x + 1, 2),
                               lambda x: F.max_pool2d(x * 3, 2)], ids=["add", "mul"])
def test_integer_steps_stay(f):
    # integers wrap (INT_MAX + 1 is INT_MIN): the step is not monotone, moving it changes bits
    x = torch.tensor([[[[2 ** 31 - 1, 5], [1, 2]]]], dtype=torch.int32)
    g = _graph(f, x)
    assert sink_into_max_pools(g) == 0
    assert not torch.equal(F.max_pool2d(x + 1, 2), F.max_pool2d(x, 2) + 1)   # why


def test_a_step_read_elsewhere_stays():
    def f(x):
        y = torch.relu(x) / 2.0
        return F.max_pool2d(y, 2).sum() + y.sum()
    g = _graph(f, X)
    assert sink_into_max_pools(g) == 0


class L2_8(nn.Module):
    """KernelBench L2/8's chain at small sizes: Conv3d, / divisor, MaxPool3d, global average
    pool, + bias, sum over channels."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv3d(3, 4, 3)
        self.bias = nn.Parameter(torch.randn(4, 1, 1, 1))

    def forward(self, x):
        x = self.conv(x) / 2.0
        x = F.max_pool3d(x, 2)
        x = F.adaptive_avg_pool3d(x, 1) + self.bias
        return x.sum(dim=1)


class PoolChain(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


def _compose(model_cls, *init):
    class New(ComposedModel):
        MODEL = model_cls

    ref = model_cls(*init)
    new = New(*init)
    new.load_state_dict(ref.state_dict())
    return ref, new


@pytest.mark.parametrize("f", MOVED, ids=range(len(MOVED)))
def test_moved_steps_give_eager_bits(f):
    ref, new = _compose(PoolChain, f)
    x = torch.randn(2, 3, 9, 10)
    with torch.no_grad():
        y = new(x)
        r = ref(x)
    prog = next(iter(new._programs.values()))
    assert not prog.unsupported
    assert torch.equal(y, r), (y - r).abs().max()


def test_l2_8_chain_composes_without_the_divide_pass():
    ref, new = _compose(L2_8)
    x = torch.randn(2, 3, 8, 10, 10)
    with torch.no_grad():
        y = new(x)
        r = ref.double()(x.double())
    prog = next(iter(new._programs.values()))
    assert not prog.unsupported
    kinds = [s.kind for s in prog.plan.steps]
    # conv, pool, then kernels: no elementwise pass between the convolution and the pool
    assert kinds.index("pool") == kinds.index("conv") + 1, kinds
    err = ((y.double() - r).norm() / r.norm()).item()
    assert err <= 2e-6, err
