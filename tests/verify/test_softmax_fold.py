"""The folded softmax scale (FA3's softmax diet, AttentionSchedule.fold_scale): the kernel takes
the running row max of the raw scores and scales it after, exp2(s * c - max(m, max(s) * c)),
which is the max-subtraction only for c > 0 (for c < 0, max(s) * c is the row's minimum of
s * c: every exponent is >= 0 and overflows, and a masked -inf score times c is +inf). The
scale is a runtime scalar (qk_scale), so the verifier cannot decide its sign at compile time:
it reports the launch precondition qk_scale > 0 as a softmax.stats warning (before, the
folded kernel verified with nothing said, as if it were right for every scale).
argus.ops.attention keeps the precondition: for_scale runs any other scale unfolded
(tests/unit/test_attention_op.py)."""

import dataclasses

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel, default_schedule


def _fold_findings(fold: bool):
    schedule = dataclasses.replace(default_schedule(128, True, None), fold_scale=fold)
    report = verify.run(lower_only(attention_kernel(128, ag.bf16, True, False), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    return [d for d in report.diagnostics if d.code == "softmax.stats"]


def test_folded_scale_states_its_precondition():
    found = _fold_findings(True)
    assert [d.severity for d in found] == ["warning"], "\n".join(str(d) for d in found)
    d = found[0]
    assert d.counterexample.get("precondition") == "qk_scale > 0", d.counterexample
    assert "max(s) * c is the max of s * c only for c > 0" in d.message
    assert "for_scale" in d.fix


def test_unfolded_scale_needs_no_precondition():
    # the same kernel scaling before the max (fold_scale=False) is right for any scale
    assert _fold_findings(False) == []
