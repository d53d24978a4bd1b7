"""transfer/control.py `_recomputed_values`: a carried tile is shifted by an iteration only if
its value at an iteration's end does not read its own entry value. A read in an inner loop
before a later assignment of the same inner body reaches that assignment's value across the
inner loop's back edge (the second inner iteration), so P = y + 1 with y = x, x = P in an
inner loop reads P's entry and is not shifted (the analysis walked inner loops once)."""

from __future__ import annotations

import argus as ag
from argus.ir import ops as O
from argus.verify.model import Model
from argus.verify.transfer import control


def _kernel(through_back_edge: bool):
    @ag.kernel(threads=128)
    def carried(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32],
                n: ag.Scalar[ag.i32]):
        (p,) = ag.grid(X.shape[0])
        P = ag.zeros((1, 64))
        x = ag.zeros((1, 64))
        y = ag.zeros((1, 64))
        for j in ag.range(n):
            for t in ag.range(2):
                if through_back_edge:
                    y = x          # iteration t = 1 reads the x set from P at t = 0
                    x = P
                else:
                    x = P
                    y = ag.load(X, (p, 0), (1, 64))
            P = y + 1.0
        ag.store(Y, (p, 0), P + x)
    return carried.trace()


def _recomputed(kernel) -> set[str]:
    loop = next(op for op in kernel.body.ops if isinstance(op, O.For))
    model = Model(kernel)
    ids = control._recomputed_values(model, loop, model._carried_tiles(loop.body), set())
    var_of = {op.result.id: op for op in kernel.walk() if isinstance(op, O.Var)}
    return {str(var_of[i].result) for i in ids}


def test_a_tile_reading_its_entry_across_an_inner_back_edge_is_not_shifted():
    assert not any(name.startswith("%P") for name in _recomputed(_kernel(True)))


def test_a_tile_recomputed_from_a_load_in_an_inner_loop_is_shifted():
    # the same shape without the back edge: P = (a load) + 1 each iteration
    assert any(name.startswith("%P") for name in _recomputed(_kernel(False)))
