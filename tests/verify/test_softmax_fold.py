"""The folded softmax scale (FA3's softmax diet, AttentionSchedule.fold_scale): the kernel takes
the running row max of the raw scores and scales it after, exp2(s * c - max(m, max(s) * c)),
which is the max-subtraction only for c > 0 (for c < 0, max(s) * c is the row's minimum of
s * c: every exponent is >= 0 and overflows, and a masked -inf score times c is +inf).
The scale is a runtime scalar (qk_scale), so the verifier cannot decide its sign at compile
time. The attention kernel states the launch precondition, `ag.require(ag.sym(qk_scale) > 0,
why)`, which every launch checks on the host (tests/unit/test_require.py), so the verifier
takes it as a premise and the fold is proven. A copy of the same kernel without the stated
precondition gets the softmax.stats warning naming `qk_scale > 0` (before 9e6c530 the folded
kernel verified with nothing said, as if it were right for every scale).
argus.ops.attention keeps the precondition: for_scale runs any other scale unfolded
(tests/unit/test_attention_op.py)."""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import tag_ops as T
from argus.ir.core import Region
from argus.kernels.attention import attention_kernel, default_schedule


def _kernel(fold: bool):
    schedule = dataclasses.replace(default_schedule(128, True, None), fold_scale=fold)
    return lower_only(attention_kernel(128, ag.bf16, True, False), s=schedule)


def _unstated(kernel):
    """The same kernel without its stated launch preconditions (ag.require)."""
    ops = tuple(op for op in kernel.body.ops if not isinstance(op, T.Require))
    assert len(ops) < len(kernel.body.ops), "the folded kernel states no precondition"
    return dataclasses.replace(kernel, body=Region(ops))


def _fold_findings(kernel):
    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    return [f for f in report.findings if f.code == "softmax.stats"
            and "row max of s times c" in f.subject]


def test_folded_kernel_states_its_precondition_and_is_proven():
    found = _fold_findings(_kernel(True))
    assert [f.status for f in found] == ["proven"], "\n".join(map(str, found))
    assert "qk_scale > 0 by the launch precondition" in found[0].subject


def test_without_the_stated_precondition_the_fold_is_a_warning():
    report = verify.run(_unstated(_kernel(True)))
    found = [d for d in report.diagnostics if d.code == "softmax.stats"]
    assert [d.severity for d in found] == ["warning"], "\n".join(str(d) for d in found)
    d = found[0]
    assert d.counterexample.get("precondition") == "qk_scale > 0", d.counterexample
    assert "max(s) * c is the max of s * c only for c > 0" in d.message
    assert "for_scale" in d.fix and "ag.require" in d.fix


@pytest.mark.parametrize("expr,proves", [("($0 > 0)", True), ("($0 >= 1)", True),
                                         ("($0 >= 0)", False), ("($0 > (-(1)))", False),
                                         ("(($0 > (-(1))) && ($0 != 0))", False)])
def test_only_a_precondition_implying_a_positive_scale_counts(expr, proves):
    """The premise is decided over the reals for a float scale: `c > -1 and c != 0` holds for
    c = -0.5, so it proves nothing (over the integers it would imply c > 0)."""
    kernel = _kernel(True)
    ops = tuple(dataclasses.replace(op, expr=expr) if isinstance(op, T.Require) else op
                for op in kernel.body.ops)
    found = _fold_findings(dataclasses.replace(kernel, body=Region(ops)))
    assert [f.status for f in found] == ["proven" if proves else "warning"]


def test_unfolded_scale_needs_no_precondition():
    # the same kernel scaling before the max (fold_scale=False) is right for any scale and
    # states nothing
    kernel = _kernel(False)
    assert not any(isinstance(op, T.Require) for op in kernel.body.ops)
    assert [f for f in _fold_findings(kernel) if f.status != "proven"] == []
    assert [d for d in verify.run(kernel).diagnostics if d.code == "softmax.stats"] == []
