"""Tag assertions' `//` and `%` follow C (truncation toward zero, the remainder with the
dividend's sign), as the DSL's `//` and `%` on a TagExpr read (exprs computes them so on Python
ints) and as the model's scalar index arithmetic does (Model._c_divmod, test_scalar_c_division).
Before, the claim was built with z3's floor, which is C's only for a non-negative dividend: an
assertion true under floor but false under C at a negative dividend was proven, and one true
under C but false under floor was reported.

Each kernel copies 4 rows of X per CTA (program id b, rows m = 4 * b + e) and asserts one
relation at a dividend that is negative for the first CTA (b - 1) or the first rows (m - 3):

  * FLOOR-ONLY (true under floor, false under C): reported, naming the CTA, the thread and the
    assertion's line; the witness's values recomputed here with C's arithmetic falsify it;
  * C-ONLY (true under C, false under floor): proven, zero findings.

The C reference (`_c_div` below) is independent of the verifier.
"""

from pathlib import Path

import argus as ag
from argus import verify

HERE = Path(__file__).name


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


def _line(text: str) -> int:
    return next(i + 1 for i, line in enumerate(Path(__file__).read_text().splitlines())
                if text in line and "ag.tag_assert" in line)


# each assertion as a function of (b, m) under Python's floor `//` and `%`, the test's premise
FLOOR_ONLY = {
    "div": lambda b, m, div, mod: div(b - 1, 2) * 2 <= b - 1,
    "mod": lambda b, m, div, mod: mod(b - 1, 2) >= 0,
    "field": lambda b, m, div, mod: div(m - 3, 4) * 4 <= m - 3,
}
C_ONLY = {
    "div": lambda b, m, div, mod: b >= 1 or div(b - 1, 2) == 0,
    "mod": lambda b, m, div, mod: b >= 1 or mod(b - 1, 2) == -1,
    "field": lambda b, m, div, mod: m >= 3 or div(m - 3, 4) == 0,
}


def kernel(variant: str):
    @ag.kernel(threads=128)
    def copy4(X: ag.Tensor["M", 16, ag.f32], Y: ag.Tensor["M", 16, ag.f32]):
        nb = ag.cdiv(Y.shape[0], 4)
        (b,) = ag.grid(nb)
        x = ag.load(X, (b * 4, 0), (4, 16))
        s, m = ag.sym(b), ag.tag(x).m
        if variant == "floor-div":
            ag.tag_assert((s - 1) // 2 * 2 <= s - 1)                       # floor-only: div
        elif variant == "floor-mod":
            ag.tag_assert((s - 1) % 2 >= 0)                                # floor-only: mod
        elif variant == "floor-field":
            ag.tag_assert((m - 3) // 4 * 4 <= m - 3)                       # floor-only: field
        elif variant == "c-div":
            ag.tag_assert(ag.tag_any(s >= 1, (s - 1) // 2 == 0))           # c-only: div
        elif variant == "c-mod":
            ag.tag_assert(ag.tag_any(s >= 1, (s - 1) % 2 == -1))           # c-only: mod
        elif variant == "floor-runtime":
            ag.tag_assert((s - 1) % ag.sym(nb) >= 0)                       # floor-only: runtime
        elif variant == "c-runtime":
            ag.tag_assert(ag.tag_any(s >= 1, (s - 1) % ag.sym(nb) <= 0))   # c-only: runtime
        elif variant == "c-field":
            ag.tag_assert(ag.tag_any(m >= 3, (m - 3) // 4 == 0))           # c-only: field
        ag.store(Y, (b * 4, 0), x)
    return copy4


def test_the_assertions_split_floor_from_c():
    """The premise: each FLOOR-ONLY assertion holds for every (b, m) under floor and fails
    under C at some negative dividend; each C-ONLY the other way round."""
    points = [(b, 4 * b + e) for b in range(8) for e in range(4)]
    floor = (lambda a, d: a // d, lambda a, d: a % d)
    c = (_c_div, _c_mod)
    for name in FLOOR_ONLY:
        assert all(FLOOR_ONLY[name](b, m, *floor) for b, m in points), name
        assert not all(FLOOR_ONLY[name](b, m, *c) for b, m in points), name
        assert all(C_ONLY[name](b, m, *c) for b, m in points), name
        assert not all(C_ONLY[name](b, m, *floor) for b, m in points), name


def test_an_assertion_true_only_under_floor_is_reported():
    for name in FLOOR_ONLY:
        report = verify.run(kernel(f"floor-{name}"))
        found = [d for d in report.errors if d.code == "tag.assert"]
        assert found, (name, "\n".join(map(str, report.findings)))
        d = found[0]
        assert str(d.loc).endswith(f"{HERE}:{_line(f'floor-only: {name}')}"), (name, d.loc)
        wit = d.counterexample
        b = wit["cta"]
        m = 4 * b + wit["element"][0]
        # the witness falsifies the assertion under C's arithmetic
        assert not FLOOR_ONLY[name](b, m, _c_div, _c_mod), (name, wit)
        assert "thread" in wit, (name, wit)


def test_an_assertion_true_under_c_proves():
    for name in C_ONLY:
        report = verify.run(kernel(f"c-{name}"))
        asserts = [d for d in report.findings if d.code == "tag.assert"]
        assert all(d.status == "proven" for d in asserts) and asserts, \
            (name, "\n".join(map(str, report.findings)))
        assert not report.errors and not report.unknowns, \
            (name, "\n".join(map(str, report.errors + report.unknowns)))


def test_a_runtime_divisor_divides_as_c_does():
    """`% ag.sym(nb)` by the grid's runtime count nb (refused before: 'remainder by a
    symbolic value'): C's remainder of b - 1 = -1 is -1 for nb >= 2 (0 for nb == 1), floor's
    nb - 1. `(b - 1) % nb >= 0` is floor's only: reported with nb >= 2 in the witness;
    `b >= 1 or (b - 1) % nb <= 0` is C's: proven."""
    report = verify.run(kernel("floor-runtime"))
    found = [d for d in report.errors if d.code == "tag.assert"]
    assert found, "\n".join(map(str, report.findings))
    wit = found[0].counterexample
    nb = -(-wit["shapes"]["M"] // 4)
    assert wit["cta"] == 0 and nb >= 2 and _c_mod(wit["cta"] - 1, nb) < 0, wit
    assert str(found[0].loc).endswith(f"{HERE}:{_line('floor-only: runtime')}"), found[0].loc
    report = verify.run(kernel("c-runtime"))
    assert not report.errors and not report.unknowns, \
        "\n".join(map(str, report.errors + report.unknowns))
    assert any(d.code == "tag.assert" and d.status == "proven" for d in report.findings)
