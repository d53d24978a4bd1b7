"""Value facts of register tiles: where an element is certainly -inf, certainly 0, or certainly
not -inf.

Job: the three built-in fields a masked softmax needs to show that what a causal loop skips
contributes nothing (check_wgmma's k-once, INVARIANTS.md §3.2): `where(mask, s, -inf)` puts -inf
where the mask drops a key; a positive scale keeps it -inf, subtracting a value that is not -inf
keeps it -inf (the row max guarded by `where(m == -inf, 0, m)`), and exp2 / exp turn -inf into
exactly 0 (PTX ISA, ex2.approx.ftz.f32: -Inf -> +0.0). Each field is an Int term over the
element's index and the model's variables, 1 where the fact holds; where it is absent or 0
nothing is known (the facts are under-approximations: "1" is a promise, "0" is ignorance).

Invariant kept: a fact is set only by a rule below that holds for every value the element can
take, non-NaN data assumed (a NaN row is NaN whether a key is skipped or multiplied by 0); every
other op drops the facts (transfer/tiles.py does not carry them through).
"""

from __future__ import annotations

import math

import z3

from argus.ir import ops as O
from argus.ir.types import TileType

NEG_INF, ZERO, NOT_NEG_INF = "is_neg_inf", "is_zero", "not_neg_inf"
FACTS = (NEG_INF, ZERO, NOT_NEG_INF)
_EXP = ("exp", "exp2", "exp_approx", "exp2_approx")


def of_constant(value) -> dict:
    """The facts of a constant element (a `full` tile, a where's scalar branch)."""
    from argus.verify.tagdomain import TagVal

    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return {}
    out = {}
    if value == float("-inf"):
        out[NEG_INF] = TagVal(z3.IntVal(1))
    else:
        out[NOT_NEG_INF] = TagVal(z3.IntVal(1))
    if value == 0:
        out[ZERO] = TagVal(z3.IntVal(1))
    return out


def _fact(fields: dict, name: str):
    """The fact's term in a record's fields (a point), else 0 (unknown)."""
    v = fields.get(name)
    return v.term if v is not None and v.is_point else z3.IntVal(0)


def _on(t) -> z3.BoolRef:
    return t != 0


def _int(b) -> z3.ArithRef:
    b = z3.simplify(b)
    if z3.is_true(b):
        return z3.IntVal(1)
    if z3.is_false(b):
        return z3.IntVal(0)
    return z3.If(b, 1, 0)


def elementwise_rule(m, op: O.Elementwise):
    """(idx, operand records) -> facts of the result, for the ops that keep or make a fact;
    None for every other op. `records[i]` is the record of op.args[i] at the element (None for
    a scalar argument); `kept` is the mask's term for a masking where (see tiles.elementwise)."""
    args = op.args
    tiles = [isinstance(a.type, TileType) for a in args]

    def scalar(i):
        return None if tiles[i] else m.sym.get(args[i].id)

    if op.fn == "where" and len(args) == 3 and tiles[0]:
        guard = _guarded(m, op)

        def where(records, kept):
            if guard:
                # where(v == -inf, c, v) with c finite: never -inf (v is replaced where it is)
                return {NOT_NEG_INF: 1}
            if kept is None:
                return {}
            out = {}
            for name in FACTS:
                a = _side(records[1], scalar(1), name)
                b = _side(records[2], scalar(2), name)
                t = _int(z3.If(kept, _on(a), _on(b)))
                if not (z3.is_int_value(t) and t.as_long() == 0):
                    out[name] = t
            return out
        return where
    if op.fn == "mul" and len(args) == 2 and sum(tiles) == 1:
        t, s = (0, 1) if tiles[0] else (1, 0)
        positive = positive_scalar(m, args[s])
        finite = isinstance(scalar(s), (int, float)) and math.isfinite(scalar(s))

        def mul(records, kept):
            x = records[t].fields
            out = {}
            if positive:        # -inf * c = -inf for c > 0 (+inf included)
                out[NEG_INF] = _fact(x, NEG_INF)
            if positive and finite:   # x * c is not -inf for x not -inf (0 * inf is NaN)
                out[NOT_NEG_INF] = _fact(x, NOT_NEG_INF)
            if finite:          # 0 * c = 0 for a finite c
                out[ZERO] = _fact(x, ZERO)
            return out
        return mul
    if op.fn in ("add", "sub") and len(args) == 2 and tiles[0] and not tiles[1] \
            and isinstance(scalar(1), (int, float)) and math.isfinite(scalar(1)):
        def shift(records, kept):
            # x + c, x - c for a finite c (FP8's m + P_BIAS): -inf stays -inf, a value that
            # is not -inf stays so
            x = records[0].fields
            return {NEG_INF: _fact(x, NEG_INF), NOT_NEG_INF: _fact(x, NOT_NEG_INF)}
        return shift
    if op.fn == "sub" and len(args) == 2 and tiles[0]:
        def sub(records, kept):
            # -inf - y = -inf for every y but -inf (and NaN): y finite or +inf
            y = _side(records[1], scalar(1), NOT_NEG_INF)
            return {NEG_INF: _int(z3.And(_on(_fact(records[0].fields, NEG_INF)), _on(y)))}
        return sub
    if op.fn in _EXP and len(args) == 1 and tiles[0]:
        def exp(records, kept):
            # exp(-inf) = exp2(-inf) = +0 (ex2.approx.ftz.f32 too: PTX ISA, ex2)
            x = records[0].fields
            return {ZERO: _fact(x, NEG_INF), NOT_NEG_INF: z3.IntVal(1)}
        return exp
    return None


def _side(rec, value, name):
    """A where branch's fact: from its record (a tile) or its constant (a scalar)."""
    if rec is not None:
        return _fact(rec.fields, name)
    got = of_constant(value)
    return got[name].term if name in got else z3.IntVal(0)


def _guarded(m, op: O.Elementwise) -> bool:
    """Whether `op` is where(v == -inf, c, v) (either operand order of the compare) with c a
    finite constant: the row max of a softmax guarded for rows that have seen no key."""
    defs = m.value_defs()
    cond, c, v = op.args
    eq = defs.get(cond.id)
    if not (isinstance(eq, O.Elementwise) and eq.fn == "eq" and len(eq.args) == 2):
        return False
    x, y = eq.args
    other = y if x.id == v.id else x if y.id == v.id else None
    if other is None or isinstance(other.type, TileType) or isinstance(c.type, TileType):
        return False
    inf, fill = m.sym.get(other.id), m.sym.get(c.id)
    return isinstance(inf, float) and inf == float("-inf") and \
        isinstance(fill, (int, float)) and math.isfinite(fill)


def positive_scalar(m, v) -> bool:
    """Whether the scalar v is certainly > 0: a positive constant, or a parameter whose launch
    preconditions (ag.require, checked on the host before every launch) imply it. A tile is
    never (its elements' signs are not known here)."""
    if isinstance(v.type, TileType):
        return False
    value = m.sym.get(v.id)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value > 0
    from argus.verify.requires import required_positive

    memo = m.__dict__.setdefault("_positive_scalars", {})
    if v.id not in memo:
        memo[v.id] = required_positive(m.kernel, v) is not None
    return memo[v.id]
