"""check_softmax's flow keys its tokens by stable values (issue 13, the house rule): a loop's
head token is (head, variable id, the loop index's IR name), not id(loop), and whether a
variable is carried by a loop is read from the values the loop defines, not from a set of op
ids. So two traces of one kernel give the same tokens, and the findings are those of before
(tests/verify/test_softmax_fold.py and the attention verifies check the verdicts)."""

from __future__ import annotations

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel, default_schedule
from argus.verify.check_softmax import _Flow
from argus.verify.model import Model


def _attention(causal: bool):
    return lower_only(attention_kernel(128, ag.bf16, causal, False),
                      s=default_schedule(128, causal))


def _heads(flow: _Flow) -> set:
    """The head tokens the flow holds (of the running max and sum the loop carries)."""
    return {t for t in flow.tok.values() if isinstance(t, tuple) and t[0] == "head"}


def test_two_traces_give_the_same_tokens():
    for causal in (False, True):
        a, b = _Flow(Model(_attention(causal))), _Flow(Model(_attention(causal)))
        assert _heads(a), "the online softmax's running statistics are loop-carried"
        assert a.tok == b.tok and a.state == b.state
        assert [f.message for f in a.findings] == [f.message for f in b.findings]


def test_a_head_names_its_loop_by_the_index_value():
    kernel = _attention(True)
    flow = _Flow(Model(kernel))
    loops = {op.var.id for op in kernel.walk() if isinstance(op, O.For)}
    heads = _heads(flow)
    assert heads and all(t[2] in loops for t in heads)
    assert all(t[1] in flow.defs and isinstance(flow.defs[t[1]], O.Var) for t in heads)
