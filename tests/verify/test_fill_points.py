"""check_fills names the assignments it follows exactly by program point (a path of op and
region indices from the kernel's body, a value), not by object identity (issue 13: the house
rule of stable keys). The points are the assignments the identity-based rule chose, each
resolves to an assignment, and the flow asks about exactly those points."""

from __future__ import annotations

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.verify import check_fills
from argus.verify.model import Model
from argus.verify.transfer.control import _exact_levels
from tests.verify.test_fill_divisible import _row_sum_of_shifted_squares, _stale_block


def _at(kernel, point):
    """The op at a program point."""
    region, op = kernel.body, None
    for depth, i in enumerate(point):
        if depth % 2 == 0:
            op = region.ops[i]
        else:
            region = op.regions()[i]
    return op


def _by_identity(model: Model) -> list:
    """The rule as it stood with identity sets (94f4d7c): the exact assignments, as objects."""
    out = []

    def region(r):
        here = {op.result.id for op in r.ops if isinstance(op, O.Var)}
        for op in r.ops:
            if isinstance(op, O.Assign) and op.dst.id in here:
                out.append(op)
            if isinstance(op, O.For):
                exact = set()
                for level in _exact_levels(model, op, model._carried_tiles(op.body)):
                    exact |= level & here
                out.extend(a for a in op.body.ops if isinstance(a, O.Assign) and a.dst.id in exact)
            for inner in op.regions():
                region(inner)
    region(model.kernel.body)
    return out


KERNELS = [lambda: _stale_block(True).trace(), lambda: _stale_block(False).trace(),
           lambda: lower_only(_row_sum_of_shifted_squares(8192))]


def test_points_are_the_exact_assignments():
    found = 0
    for make in KERNELS:
        kernel = make()
        model = Model(kernel)
        points = check_fills._exact_assigns(model)
        ops = [_at(kernel, p) for p in points]
        assert all(isinstance(op, O.Assign) for op in ops)
        reference = _by_identity(model)
        assert len(points) == len(reference)
        assert all(any(op is r for op in ops) for r in reference)
        found += len(points)
    assert found > 0   # the ring of lower/prefetch.py and the one-behind block are followed


def test_the_flow_asks_about_those_points(monkeypatch):
    """Every point the flow asks `exact` about is an assignment's (the walk and the rule
    number the program alike)."""
    asked = []
    real = check_fills._Flow.exact

    def spy(self, point):
        asked.append(point)
        return real(self, point)
    monkeypatch.setattr(check_fills._Flow, "exact", spy)
    kernel = _stale_block(True).trace()
    check_fills.obligations(Model(kernel))
    assert asked, "the one-behind block's assignment carries loads: exact is asked"
    assert all(isinstance(_at(kernel, p), O.Assign) for p in asked)
    assert set(asked) & check_fills._exact_assigns(Model(kernel))
