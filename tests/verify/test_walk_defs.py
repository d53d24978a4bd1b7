"""Model.walk_defs, the one walk back through definitions the checks share (issue 13, helper
h234; docs/verify.md "One definition walk on Model"): each value once, depth first off a stack
(the last value `follow` names first: the order check_reduce._mask_where's first where and
check_tiles._wide_zero_loads' first zero read depend on), `follow` asked of a value only once
the consumer resumes after it, and Model.loads_into through variables' assignments."""

from __future__ import annotations

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.verify.model import Model, through


def _kernel():
    @ag.kernel(threads=128)
    def walked(X: ag.Tensor[64, 128, ag.f32], Y: ag.Tensor[64, 128, ag.f32],
               OUT: ag.Tensor[64, 128, ag.f32], BN: int = 128):
        (p0,) = ag.grid(64)
        x = ag.load(X, (p0, 0), (1, BN))
        y = ag.load(Y, (p0, 0), (1, BN))
        acc = ag.zeros((1, BN), ag.f32)
        for _ in ag.range(2):
            acc = acc + x
        ag.store(OUT, (p0, 0), (x * y) + (x - acc))
    return Model(lower_only(walked))


def _stored(model: Model):
    (st,) = [op for op in model.kernel.walk() if isinstance(op, O.Store)]
    return st.value


def test_each_value_once_last_operand_first():
    model = _kernel()
    walked = list(model.walk_defs(_stored(model), through((O.Elementwise,))))
    ids = [v.id for v, _ in walked]
    assert len(ids) == len(set(ids)), "x is an operand twice: yielded once"
    assert walked[0][0] is _stored(model)
    # (x * y) + (x - acc): the second operand, x - acc, is walked before x * y
    add = walked[0][1]
    assert ids.index(add.args[1].id) < ids.index(add.args[0].id)
    # through elementwise ops only: the loads of X and Y, each once; acc's var stops it
    loads = [op.tensor.id for _, op in walked if isinstance(op, O.Load)]
    assert sorted(loads) == sorted(p.value.id for p in model.kernel.params[:2])
    assert any(isinstance(op, O.Var) for _, op in walked)


def test_follow_is_asked_only_after_the_consumer_resumes():
    model = _kernel()
    asked = []

    def follow(v, op):
        asked.append(v.id)
        return list(op.operands()) if op is not None else []
    for _ in model.walk_defs(_stored(model), follow):
        break
    assert asked == [], "the consumer stopped at the first value: nothing followed"


def test_loads_into_reaches_through_assignments():
    model = _kernel()
    (var,) = [op for op in model.kernel.walk() if isinstance(op, O.Var)]
    # acc's loads come in through its assign (acc + x), not its initial zeros
    got = model.loads_into(var.result)
    assert [ld.tensor.id for ld in got] == [model.kernel.params[0].value.id]
    assert model.loads_into(var.result) is got, "remembered per value"
