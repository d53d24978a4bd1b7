"""promotion.py walks the structured IR by program point (issue 13, the house rule: no
id()-keyed maps nor identity maps of ops): the nesting is a table point -> op, the region of a
point, program order and "inside a loop" are read off the points, and the groups are memoized
by Site.seq. The points are what the identity-keyed tree answered (the rest of
tests/verify/test_promotion_k_once.py checks the verdicts)."""

from __future__ import annotations

from argus.compiler import lower_only
from argus.ir import ops as O
from argus.verify import promotion
from argus.verify.model import Model
from tests.verify.test_promotion_k_once import OVERLAP, _library, _overlapped, _serial


def _kernels():
    return [lower_only(_overlapped(None)), lower_only(_serial(None)),
            lower_only(_library("block"), s=OVERLAP["st6"])]


def test_points_are_the_kernels_nesting_and_program_order():
    for kernel in _kernels():
        model = Model(kernel)
        ops, defined = promotion._tree(model)
        walk = list(kernel.walk())
        # program order is the points' order: the pre-order walk, op for op
        assert len(ops) == len(walk)
        assert all(ops[p] is op for p, op in zip(sorted(ops), walk))
        for p, op in ops.items():
            assert promotion._region(model, p[:-1]).ops[p[-1]] is op
            assert all(defined[r.id] == p for r in op.results())
        # inside a loop iff the loop's body walk holds it (by identity, as before)
        for lp, loop in ops.items():
            if not isinstance(loop, O.For):
                continue
            body = list(loop.body.walk())
            inside = [op for p, op in sorted(ops.items()) if promotion._inside(p, lp)]
            assert len(inside) == len(body) and all(a is b for a, b in zip(inside, body))


def test_groups_are_memoized_by_site_seq():
    for kernel in _kernels():
        model = Model(kernel)
        groups = [promotion.group_of(model, w) for w in model.wgmmas]
        memo = model.__dict__["_promotion_groups"]
        assert type(memo) is dict and memo
        assert set(memo) <= {w.site.seq for w in model.wgmmas}
        promoted = [w for w, g in zip(model.wgmmas, groups) if g is not None]
        assert promoted and all(w.op.overwrite for w in promoted)
        assert all(any(s is w for s in promotion.group_of(model, w).sites) for w in promoted)
