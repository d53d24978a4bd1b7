"""The term walks moved to z3's C API answer what the wrapper walks answered (docs/verify.md
"Verifier speed: C-API walks for free_consts and _degree"): `tagdomain.free_consts` (the
names of a term's uninterpreted constants) and `check_asserts._degree` (the most non-numeral
factors of a product, which decides `_by_writer`'s split). A wrong answer changes what is
asked (free_consts feeds the store and once_split decompositions) or how (a degree-2 claim
split in writer cases: more queries), so each is compared with the wrapper walk it replaced,
written out here, on terms of every shape the walks distinguish, and on the packed conv's
receptive-field claims."""

from __future__ import annotations

import z3

from argus.verify import check_asserts, tagdomain


def _wrapper_free_consts(term) -> set[str]:
    return {t.decl().name() for t in tagdomain.subterms(term)
            if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED}


def _wrapper_degree(term) -> int:
    memo: dict[int, int] = {}
    stack = [(term, False)]
    while stack:
        t, expanded = stack.pop()
        i = t.get_id()
        if i in memo:
            continue
        if z3.is_int_value(t) or z3.is_rational_value(t) or z3.is_true(t) or z3.is_false(t):
            memo[i] = 0
            continue
        kind = t.decl().kind() if z3.is_app(t) else None
        kids = t.children() if kind not in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD, z3.Z3_OP_REM) else []
        if not kids:
            memo[i] = 1
            continue
        if kind == z3.Z3_OP_ITE:
            kids = kids[1:]
        if not expanded:
            stack.append((t, True))
            stack.extend((k, False) for k in kids if k.get_id() not in memo)
            continue
        degs = [memo[k.get_id()] for k in kids]
        memo[i] = sum(degs) if kind == z3.Z3_OP_MUL else max(degs)
    return memo[term.get_id()]


def _terms():
    x, y, n, d, h = z3.Ints("x y n d h")
    b = z3.BitVec("b", 8)
    r = z3.Real("r")
    f = z3.Function("f", z3.IntSort(), z3.IntSort())
    c = z3.If(x > 0, n, y)
    return [
        z3.IntVal(4), z3.IntVal(-3), z3.BoolVal(True), z3.BoolVal(False),
        x, x + 4, x * 4, 4 * x * y,                   # numerals are no factor
        (n * d + d) * h, n * h + h, c * h, c * d * h,  # an If as its larger branch
        z3.If(x * y > 0, 3, 4) * h,                    # the condition is not a branch
        (x * y) / h + (x * y) % h,                     # a division is one factor
        f(x * y) * h,                                  # an application: its argument's
        z3.ForAll([x], x * y * n > 0),                 # a quantifier: its body
        b * 3 + z3.BitVecVal(4, 8),                    # a bit-vector numeral counts
        r * 2.5, z3.Const(3, z3.IntSort()) + y,        # z3's integer symbol (k!3)
        z3.And(x == n * d * h, c == y),
    ]


def test_degree_and_free_consts_agree_with_the_wrapper_walks():
    for t in _terms():
        assert check_asserts._degree(t) == _wrapper_degree(t), t
        assert tagdomain.free_consts(t) == _wrapper_free_consts(t), t
    # numerals, whose ast kind is not an application's, count as no factor: the degree of
    # the packed conv's receptive field (image * H, numerals around it) stays 2
    x, h = z3.Ints("x h")
    assert check_asserts._degree(4 * x * h + 4) == 2
    assert tagdomain.free_consts(z3.ForAll([x], x * h > 0)) == {"h"}


def test_free_consts_returns_a_set_the_caller_may_change():
    x, y = z3.Ints("x y")
    got = tagdomain.free_consts(x + y)
    got.add("z")
    assert tagdomain.free_consts(x + y) == {"x", "y"}
