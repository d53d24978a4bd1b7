"""The fused tile template's CTA order (TileSchedule.order, argus/compose/tile.py): "cols"
launches a row block's column blocks one after another (blockIdx.x walks the columns, so
consecutive CTAs read consecutive memory), "rows" the row blocks of a column block. Both
compute the same thing, on the CPU interpreter against float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from argus.compose.runtime import ComposedModel
from argus.compose.tile import TileSchedule, groups_of


def composed(f, order: str):
    model = type("M", (nn.Module,), {"forward": lambda self, a: f(a)})

    class ModelNew(ComposedModel):
        MODEL = model
        SCHEDULES = {"tile": TileSchedule(rows=2, bn=64, threads=64, order=order)}

    return ModelNew()


@pytest.mark.parametrize("f", [lambda x: torch.nn.functional.softplus(x) * 2 - x,
                               lambda x: x.sum(1), lambda x: x.amax(1, keepdim=True)])
@pytest.mark.parametrize("order", ["cols", "rows"])
def test_orders_compute_the_same(f, order):
    x = torch.randn(40, 30, 300, generator=torch.Generator().manual_seed(1))
    new = composed(f, order)
    with torch.no_grad():
        y = new(x)
    ref = f(x.double())
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 2e-6
    prog = next(iter(new._programs.values()))
    step = next(s for s in prog.plan.steps if s.kind == "kernel")
    col_blocks = -(-groups_of(step.kernel)[-1].size // 64)
    grid = next(line.strip() for line in prog.sources.splitlines() if "ag.grid(" in line)
    # the column blocks are the grid's first (fastest) extent in "cols" order
    assert grid.startswith(f"p1, p0 = ag.grid({col_blocks}," if order == "cols" else
                           "p0, p1 = ag.grid("), grid


def test_an_unknown_order_is_refused():
    """render() tests order == "cols", so a misspelt order launched "rows" without a word."""
    with pytest.raises(ValueError, match=r"order='col'.*'cols'.*'rows'"):
        TileSchedule(order="col")
