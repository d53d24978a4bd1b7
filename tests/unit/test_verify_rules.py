"""One transfer rule per op (ARCHITECTURE.md §7 item 3): every IR op class, tag ops included,
has a verifier transfer function in argus/verify/transfer/ or an EXEMPT reason, never both;
a class gets at most one rule (a second registration is refused); and an op without a rule
is reported by the model as unsupported, never silently passed over."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import argus as ag
from argus.ir import ops as O
from argus.ir import tag_ops as T
from argus.ir.core import Op
from argus.verify import transfer
from argus.verify.model import Model
from argus.verify.transfer import EXEMPT, RULES, merge


def _ir_op_classes() -> set[type]:
    tag_classes = {cls for _, cls in inspect.getmembers(T, inspect.isclass)
                   if issubclass(cls, Op) and cls is not Op and cls.__module__ == T.__name__}
    return set(O.ALL_OPS.values()) | tag_classes | set(T.TAG_OPS)


def test_every_op_has_a_rule_or_a_reason():
    classes = _ir_op_classes()
    assert len(classes) >= 46 and O.Wgmma in classes and T.TagAssert in classes
    missing = sorted(cls.NAME for cls in classes if cls not in RULES and cls not in EXEMPT)
    assert not missing, f"ops without a verifier transfer rule or an EXEMPT reason: {missing}"
    both = sorted(cls.NAME for cls in set(RULES) & set(EXEMPT))
    assert not both, f"ops both ruled and exempt: {both}"
    for cls, why in EXEMPT.items():
        assert isinstance(why, str) and len(why) > 40, cls


def test_registry_holds_only_ir_ops_and_callables():
    classes = _ir_op_classes()
    assert set(RULES) <= classes and set(EXEMPT) <= classes
    for cls, rule in RULES.items():
        params = list(inspect.signature(rule).parameters)
        assert len(params) == 6, (cls.NAME, params)  # model, op, scopes, role, counters, following
        assert rule.__module__.startswith("argus.verify.transfer."), (cls.NAME, rule.__module__)


def test_sync_ops_are_transparent():
    assert {RULES[cls] for cls in O.SYNC_OPS} == {transfer.sync.transparent}


def test_duplicate_registration_is_refused():
    def a(m, op, scopes, role, counters, following):
        pass

    def b(m, op, scopes, role, counters, following):
        pass
    assert merge([{O.Const: a}, {O.Arith: b}]) == {O.Const: a, O.Arith: b}
    with pytest.raises(ValueError, match="two transfer rules for const"):
        merge([{O.Const: a}, {O.Const: b}])
    # the real families overlap nowhere: re-merging any one into the registry is refused
    with pytest.raises(ValueError, match="two transfer rules for wgmma"):
        merge([RULES, transfer.mma.RULES])


def test_op_without_rule_is_reported_unsupported():
    """An op whose exact class has no rule (a subclass of a ruled op counts as a new op) is
    listed in `unsupported` as "no tag rule for ...", so checks that need it say unknown."""
    @ag.kernel
    def copy(X: ag.Tensor["M", ag.f32], Y: ag.Tensor["M", ag.f32], BN: int = 128):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
        ag.store(Y, (pid * BN,), ag.load(X, (pid * BN,), (BN,)))

    kernel = copy.trace()
    assert Model(kernel).unsupported == []
    fake = type("FakeOp", (O.ClusterSync,), {"NAME": "fake.op"})
    loc = kernel.body.ops[-1].loc
    body = dataclasses.replace(kernel.body, ops=kernel.body.ops + (fake(loc=loc),))
    model = Model(dataclasses.replace(kernel, body=body))
    assert model.unsupported == [(loc, "no tag rule for fake.op")]
