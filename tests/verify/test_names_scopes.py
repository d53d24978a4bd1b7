"""names.Names keeps each op's role and loops by its line and its place among that line's ops
(values; issue 13, the house rule), not in a dict keyed by id(op): one op object placed at two
points has two scopes, and the innermost one stands for the line."""

from __future__ import annotations

from argus.errors import Loc
from argus.ir import ops as O
from argus.ir.core import Region
from argus.verify.names import Names
from tests.mutations import kernels as K
from tests.mutations.corpus import rewrite


def test_one_op_placed_in_a_loop_and_after_it_keeps_both_scopes():
    """The consumer's wgmma, moved to a line of its own, placed in the K loop's consume step
    and again at the end of the role (after the loop): the line's innermost op is the one in
    the loop, so its definitions name the loop. Keyed by id(op) (before), the walk's last
    scope (the role's, no loop) was the only one, and the loop was missing."""
    kernel = K.make_gemm(None, stages=2, consumers=2).trace()
    (wgmma,) = [op for op in kernel.walk() if isinstance(op, O.Wgmma)]
    alone = wgmma.replace(loc=Loc(wgmma.loc.file, 100_000, wgmma.loc.function))
    kernel = rewrite(kernel, O.Consume,
                     lambda op: op.replace(body=Region(op.body.ops + (alone,))))
    kernel = rewrite(kernel, O.RoleOp,
                     lambda op: op.replace(body=Region(op.body.ops + (alone,)))
                     if op.name == "consumer" else op)
    names = Names(kernel)
    assert names.ops_at(alone.loc) == [alone, alone]
    # the consumer's K loop (`k` names two loops: the name carries its line)
    loop = [n for n in names.definitions(alone.loc) if n.startswith("loop k")]
    (role,) = [op for op in kernel.body.ops if isinstance(op, O.RoleOp) and
               op.name == "consumer"]
    (k_loop,) = [op for op in role.body.ops if isinstance(op, O.For)]
    assert loop == [f"loop k@{k_loop.loc}"], names.definitions(alone.loc)
    assert names.who(alone.loc)["role"] == "consumer"
    assert [len(sc.loops) for sc in names.line_scopes[(alone.loc.file, alone.loc.line)]] == \
        [1, 0]
