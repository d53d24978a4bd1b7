"""Evaluate the small condition language of knowledge cards ("rules as data"), safely.

A card says when it applies with strings such as `"K >= 512"`, `"M * N >= 1 << 20"` or
`"family == 'gemm'"`. They are parsed with `ast` and evaluated over a dict of task features;
only names, numbers, strings, arithmetic, comparisons, `and`/`or`/`not`, `min`/`max` and
conditional expressions are allowed, so a card can never run code. A condition over a feature
the task does not have is false (not an error): a GEMM card simply does not apply to a ReLU.
"""

from __future__ import annotations

import ast
import functools
import operator
from typing import Any, Mapping

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CMPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
         ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.In: lambda a, b: a in b,
         ast.NotIn: lambda a, b: a not in b}
_FUNCS = {"min": min, "max": max, "abs": abs}


class ConditionError(ValueError):
    """A card condition uses syntax outside the condition language."""


class _Missing(Exception):
    """A condition names a feature this task does not have."""


@functools.lru_cache(maxsize=512)
def parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ConditionError(f"condition {text!r} is not an expression: {e.msg}") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp,
                               ast.Compare, ast.BoolOp, ast.IfExp, ast.Load, ast.Tuple,
                               ast.List, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
                               ast.Call)) or type(node) in _BINOPS or type(node) in _CMPS
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in _FUNCS and not node.keywords):
            ok = False
        if not ok:
            raise ConditionError(f"condition {text!r} uses {type(node).__name__}, which the card "
                                 "condition language does not allow; fix: use names, numbers, "
                                 "arithmetic, comparisons, and/or/not, min/max/abs")
    return tree


def evaluate(text: str, features: Mapping[str, Any]) -> Any:
    """The value of a condition over `features` (None when it names a missing feature)."""
    try:
        return _eval(parse(text).body, features)
    except _Missing:
        return None


def holds(text: str, features: Mapping[str, Any]) -> bool:
    """True iff the condition evaluates to a true value (missing features make it false)."""
    try:
        return bool(evaluate(text, features))
    except (TypeError, ZeroDivisionError):
        return False


def _eval(node: ast.AST, f: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in f:
            return f[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise _Missing(node.id)
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, f), _eval(node.right, f))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, f)
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}[
            type(node.op)](v)
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, f) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, f)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, f)
            if not _CMPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, f) if _eval(node.test, f) else _eval(node.orelse, f)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, f) for e in node.elts)
    if isinstance(node, ast.Call):
        return _FUNCS[node.func.id](*(_eval(a, f) for a in node.args))  # type: ignore[attr-defined]
    raise ConditionError(f"unsupported node {type(node).__name__}")  # pragma: no cover
