"""One query for a family of queries that differ only in numerals affine in their index.

Job: a Python-unrolled loop in a kernel (the row segments of a halo / rowbox conv's TMA store,
one store a row of the box) gives the verifier N steps whose queries are the same formula with
the loop index folded into numerals (`row + 3`, `<= 4 - P`) and with each step's own fresh
element variables. Asked one by one, each is a full solver call (the halo TMA conv's 8 'pushed
out of bounds' steps: 0.25-0.33 s of its ~1.5 s). `template` anti-unifies them: a numeral
position whose values are v0 + b*k in member k (k = 0 .. N-1) becomes v0 + b*j for a fresh
j in [0, N), and constants that differ between members (each step's own element variables)
become one fresh constant per tuple of them; anything else must be the same term in every
member.

Sound: member k is the template with j := k and the fresh constants := k's, up to the
evaluation of numeral arithmetic (v0 + b*k is member k's numeral). A proof of the template
holds for every value of its variables, j in [0, N) included, so it proves each member (an
instance of a valid formula, its variables replaced by terms, is valid). A template not proven proves
nothing: the caller then asks each member itself, so a violation, an unknown and a
counterexample are found exactly as without it.

Vacuity: solver.prove refuses a proof whose premises are contradictory; it checks the
template's premises, i.e. some member's. A member counts as proven by the template only when
its own premises are shown satisfiable too (`satisfiable`: at a recent model's point or at
their least point, no solver call); else it is asked itself, as without the template, so a
member with contradictory premises stays unknown (vacuous) as it would alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from argus.verify import solver
from argus.verify.tagdomain import fresh_int

# the least family worth a template (a family of 2 saves one query at most, and a template
# that is not proven costs one more)
FAMILY_MIN = 3

Query = tuple[Sequence[z3.BoolRef], Sequence[tuple[str, z3.BoolRef]]]


class _Mismatch(Exception):
    """The members are not one formula up to affine numerals and renamed constants."""


def template(queries: Sequence[Query]) -> Query | None:
    """The family's template query (premises with 0 <= j < N added, claims named as the first
    member's), or None when the queries are not one formula (see the module docstring)."""
    n = len(queries)
    if n < 2:
        return None
    first_p, first_c = queries[0]
    if any(len(p) != len(first_p) or [c[0] for c in cl] != [c[0] for c in first_c]
           for p, cl in queries[1:]):
        return None
    j = fresh_int("family.j")
    consts: dict[tuple[int, ...], z3.ExprRef] = {}
    memo: dict[tuple[int, ...], z3.ExprRef] = {}

    def walk(terms: list[z3.ExprRef]) -> z3.ExprRef:
        key = tuple(t.get_id() for t in terms)
        if key in memo:
            return memo[key]
        t0 = terms[0]
        if all(k == key[0] for k in key):
            out = t0
        elif all(z3.is_int_value(t) for t in terms):
            vals = [t.as_long() for t in terms]
            b = vals[1] - vals[0]
            if any(v != vals[0] + b * k for k, v in enumerate(vals)):
                raise _Mismatch
            out = z3.IntVal(vals[0], t0.ctx) + z3.IntVal(b, t0.ctx) * j
        elif all(z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED and
                 t.sort().eq(t0.sort()) for t in terms):
            # one fresh constant per tuple of the members' constants (their own element
            # variables): member k is the template with it replaced by k's constant
            out = consts.get(key)
            if out is None:
                out = consts[key] = z3.FreshConst(t0.sort(), "family.c")
        elif all(z3.is_app(t) and t.num_args() == t0.num_args() and t.num_args() > 0 and
                 t.decl().eq(t0.decl()) for t in terms):
            kids = [walk([t.arg(i) for t in terms]) for i in range(t0.num_args())]
            out = t0.decl()(*kids)
        else:
            raise _Mismatch
        memo[key] = out
        return out

    try:
        prem = [walk([q[0][i] for q in queries]) for i in range(len(first_p))]
        claims = [(name, walk([q[1][i][1] for q in queries]))
                  for i, (name, _) in enumerate(first_c)]
    except _Mismatch:
        return None
    return prem + [j >= 0, j < n], claims


def families(queries: Sequence[Query]) -> list[list[int]]:
    """The queries' indices in runs of consecutive queries each of which anti-unifies with
    the run's first (`template` of the two: a walk of the terms where they differ), in
    order; a query that fits no run starts one. A run's own template may still be None
    (numerals not affine in the index)."""
    runs: list[list[int]] = []
    for i in range(len(queries)):
        if runs and template([queries[runs[-1][0]], queries[i]]) is not None:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def satisfiable(premises: Sequence[z3.BoolRef]) -> bool:
    """The premises shown satisfiable without a solver call (a recent vacuity check's model,
    or their least point, satisfies them); False answers nothing."""
    return solver.satisfied_by_recent_model(premises) or \
        solver.satisfied_at_least_point(premises)
