"""The rewrite engine: rules are data, applied bottom-up to a fixed point."""

import pytest

from argus.errors import IRError
from argus.ir import Rule, Rules, ops as O, parse_kernel, print_kernel

TEXT = """kernel @k(%M.0: i32) {threads=128} {
  %1:i32 = const() {value=0}
  %2:i32 = const() {value=1}
  %i.3:i32 = for(start=%1, stop=%M.0, step=%2) body {
    %4:i32 = arith(lhs=%i.3, rhs=%2) {fn="mul"}
    %5:i32 = arith(lhs=%4, rhs=%1) {fn="add"}
  }
}
"""


def test_rules_rewrite_nested_regions_until_fixed_point():
    kernel = parse_kernel(TEXT)
    calls = []

    def mul_to_add(op, ctx):
        calls.append(op.fn)
        return op.replace(fn="add") if op.fn == "mul" else None

    out = Rules([Rule(O.Arith, mul_to_add)]).apply(kernel)
    text = print_kernel(out, with_locs=False)
    assert 'fn="mul"' not in text and text.count('fn="add"') == 2
    assert "mul" in calls


def test_rule_can_replace_one_op_by_several_and_predicate_filters():
    kernel = parse_kernel(TEXT)
    seen = []

    def drop(op, ctx):
        seen.append(op.fn)
        return []

    out = Rules([Rule(O.Arith, drop, when=lambda op: op.fn == "add")]).apply(kernel)
    body = [op for op in out.walk() if isinstance(op, O.Arith)]
    assert [op.fn for op in body] == ["mul"] and seen == ["add"]


def test_non_converging_rules_are_an_error():
    kernel = parse_kernel(TEXT)
    flip = Rules([(O.Arith, lambda op, ctx: op.replace(fn="sub" if op.fn != "sub" else "add"))],
                 max_rounds=5)
    with pytest.raises(IRError, match="did not converge"):
        flip.apply(kernel)
