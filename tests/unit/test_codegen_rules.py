"""Codegen has one rendering rule per IR op (ARCHITECTURE.md §7 item 3): every op class of
ir.ops.ALL_OPS has a rule in argus.codegen.cuda.RULES or a reason in EXEMPT, each registered
once, in the file of its op family."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from argus.codegen import cuda
from argus.codegen.cuda import EXEMPT, GROUP_RULES, RULES, rule
from argus.codegen.cuda.emit import _Emitter, group_rule
from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Op
from argus.ir.tag_ops import TAG_OPS

FAMILIES = {"scalar", "control", "memory", "tiles", "reduce", "async_copy", "pipeline", "mma",
            "sync"}


def test_every_ir_op_has_a_rule_or_an_exemption():
    missing = [cls.NAME for cls in O.ALL_OPS.values() if cls not in RULES and cls not in EXEMPT]
    assert not missing, f"ops with no codegen rule and no EXEMPT reason: {missing}"
    both = [cls.NAME for cls in RULES if cls in EXEMPT]
    assert not both, f"ops with a rule that are also exempt: {both}"
    assert all(isinstance(why, str) and why for why in EXEMPT.values())
    assert O.RoleOp in EXEMPT and all(cls in EXEMPT for cls in TAG_OPS)


def test_rules_are_ir_ops_in_their_family_files():
    ops = set(O.ALL_OPS.values())
    for cls, fn in list(RULES.items()) + list(GROUP_RULES.items()):
        assert cls in ops, cls
        family = fn.__module__.rpartition(".")[2]
        assert fn.__module__.startswith("argus.codegen.cuda.") and family in FAMILIES, \
            (cls.NAME, fn.__module__)
    for cls in O.SYNC_OPS:
        assert RULES[cls].__module__ == "argus.codegen.cuda.sync", cls.NAME
    assert RULES[O.Wgmma].__module__ == "argus.codegen.cuda.mma"
    assert GROUP_RULES[O.WgmmaFence].__module__ == "argus.codegen.cuda.mma"
    assert GROUP_RULES[O.TmaStore].__module__ == "argus.codegen.cuda.async_copy"


def test_a_second_rule_for_an_op_is_refused():
    before = dict(RULES), dict(GROUP_RULES)
    with pytest.raises(ValueError, match="already has a rule for const"):
        rule(O.Const)(lambda em, op: None)
    with pytest.raises(ValueError, match="already has a group rule for wgmma.fence"):
        group_rule(O.WgmmaFence)(lambda em, ops, i: i + 1)
    with pytest.raises(ValueError, match="exempt"):
        rule(O.RoleOp)(lambda em, op: None)
    assert (dict(RULES), dict(GROUP_RULES)) == before


def test_dispatch_names_a_missing_rule_and_an_exemption():
    @dataclass(frozen=True)
    class Unknown(Op):
        NAME = "test.unknown"

    em = _Emitter(kernel=None)
    with pytest.raises(CompileError, match="codegen has no rule for test.unknown"):
        em.op(Unknown())
    role = O.RoleOp.__new__(O.RoleOp)  # the dispatch only reads its class, NAME and loc
    object.__setattr__(role, "loc", Unknown().loc)
    with pytest.raises(CompileError, match="render\\(\\) lays out"):
        em.op(role)


def test_the_public_surface():
    for name in ("render", "Source", "AbiArg", "HEADER", "dtype_ptr", "RULES", "EXEMPT", "rule"):
        assert hasattr(cuda, name), name
    assert cuda.HEADER == "argus_sm90.cuh"
