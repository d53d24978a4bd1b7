"""The interpreter has one rule per IR op (ARCHITECTURE.md §7 item 3): every op class of the IR's
op table and every tag op has a rule in argus.runtime.interp.RULES or a reason in EXEMPT, and
the registry refuses a second rule for a class."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest

from argus.ir import ops as O
from argus.ir.core import Op
from argus.ir.tag_ops import TAG_OPS
from argus.runtime.interp import EXEMPT, RULES, InterpError, rule
from argus.runtime.interp.machine import _Group, _Interp


def _op_classes():
    return sorted(set(O.ALL_OPS.values()) | set(TAG_OPS), key=lambda c: c.NAME)


@pytest.mark.parametrize("cls", _op_classes(), ids=lambda c: c.NAME)
def test_every_op_has_a_rule_or_an_exemption(cls):
    assert cls in RULES or EXEMPT.get(cls), (
        f"the interpreter has no rule for {cls.NAME} ({cls.__name__}); fix: register one with "
        f"@rule(O.{cls.__name__}) in its family's module under argus/runtime/interp/, or say "
        f"why it needs none in EXEMPT")
    assert not (cls in RULES and cls in EXEMPT), f"{cls.NAME} has a rule and an exemption"


def test_exemptions_are_op_classes_with_reasons():
    known = set(_op_classes())
    for cls, why in EXEMPT.items():
        assert cls in known and isinstance(why, str) and why.strip(), cls


def test_rules_live_in_family_modules():
    for cls, fn in RULES.items():
        module = inspect.getmodule(fn).__name__
        assert module.startswith("argus.runtime.interp."), (cls.NAME, module)
        assert module.rpartition(".")[2] not in ("machine", "registry", "launch"), cls.NAME


@dataclass(frozen=True)
class _Unknown(Op):
    """An op no stage knows (only for these tests)."""

    NAME = "test.unknown"


def test_a_duplicate_registration_is_rejected():
    before = dict(RULES)

    def another(m, g, op):  # pragma: no cover - never runs
        pass

    with pytest.raises(ValueError, match="already has a rule for arith"):
        rule(O.Arith)(another)
    # all or nothing: the new class before the duplicate is not registered either
    with pytest.raises(ValueError, match="already has a rule for const"):
        rule(_Unknown, O.Const)(another)
    assert RULES == before


def test_an_op_without_a_rule_is_reported():
    assert _Unknown not in RULES
    machine = _Interp(None, {}, {})
    with pytest.raises(InterpError, match="the interpreter has no rule for test.unknown"):
        list(machine.run_op(_Group("cta(0,)", {}), _Unknown()))
