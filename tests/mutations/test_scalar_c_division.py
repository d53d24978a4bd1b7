"""Scalar `//` and `%` in the verifier's model follow the generated code (C's `/` and `%`:
truncation toward zero, the remainder with the dividend's sign; codegen/cuda/scalar.py,
runtime/interp/scalar.py), not z3's floor (Model._c_divmod, transfer/domain.py c_div). The two
agree only for a non-negative dividend; before, a kernel whose scalar index goes negative
before a `//` or `%` was judged by the floor: a kernel correct only under floor semantics was
proven, one correct under C was reported.

Each kernel copies X to Y block by block (4 rows a CTA) at a block index s computed from the
program id b through a negative intermediate:

  * BUG "div": s = (2 * b - 1) // 2 + 1 (floor: b; C: 1 for both b = 0 and b = 1, so CTAs 0
    and 1 store the same block and block 0 is never stored): store.once names both CTAs, the
    element, the thread and the output element; store.coverage names the line defining s;
  * BUG "mod" (runtime divisor nb = cdiv(M, 4)): s = (b - nb) % nb (floor: b; C: b - nb < 0 for
    0 < b < nb);
  * OK "mod-c": s = (b - 15) % 16 + 15 (C: b; floor: b + 16 for b < 15): proven, zero findings;
  * OK "mod-c-runtime": s = (b - nb + 1) % nb + nb - 1 (C: b for every nb): proven;
  * OK with a non-negative dividend, z3's floor is kept (a linear term): `b % nb` proves.

The expected rows are recomputed here with C's arithmetic (`_c_div` below), independently of
the verifier.
"""

from pathlib import Path

import z3

import argus as ag
from argus import verify
from argus.verify.model import Model

HERE = Path(__file__).name


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


def _line(text: str) -> int:
    return next(i + 1 for i, line in enumerate(Path(__file__).read_text().splitlines())
                if text in line and "s = " in line)


def fixed(variant: str):
    @ag.kernel(threads=128)
    def copy16(X: ag.Tensor[64, 16, ag.f32], Y: ag.Tensor[64, 16, ag.f32]):
        (b,) = ag.grid(16)
        if variant == "div":
            s = (2 * b - 1) // 2 + 1           # bug: div
        elif variant == "mod-c":
            s = (b - 15) % 16 + 15             # ok: mod-c
        else:
            s = b
        x = ag.load(X, (s * 4, 0), (4, 16))
        ag.store(Y, (s * 4, 0), x)
    return copy16


def runtime(variant: str):
    @ag.kernel(threads=128)
    def copy_n(X: ag.Tensor["M", 16, ag.f32], Y: ag.Tensor["M", 16, ag.f32]):
        nb = ag.cdiv(Y.shape[0], 4)
        (b,) = ag.grid(nb)
        if variant == "mod":
            s = (b - nb) % nb                  # bug: mod
        elif variant == "mod-c-runtime":
            s = (b - nb + 1) % nb + nb - 1     # ok: mod-c-runtime
        else:
            s = b % nb                         # ok: plain
        x = ag.load(X, (s * 4, 0), (4, 16))
        ag.store(Y, (s * 4, 0), x)
    return copy_n


def _clean(report):
    assert not report.errors and not report.unknowns, \
        "\n".join(map(str, report.errors + report.unknowns))


def test_the_c_semantics_blocks_agree_with_an_independent_recomputation():
    """The test's own premise: each BUG is a bijection under floor and not under C, each OK
    the other way round (so the verdicts below are C's, not floor's)."""
    nb = 16
    assert sorted((2 * b - 1) // 2 + 1 for b in range(nb)) == list(range(nb))
    assert sorted(_c_div(2 * b - 1, 2) + 1 for b in range(nb)) != list(range(nb))
    assert [_c_mod(b - 15, 16) + 15 for b in range(nb)] == list(range(nb))
    assert [(b - 15) % 16 + 15 for b in range(nb)] != list(range(nb))
    for n in (1, 2, 5, 16):
        assert [_c_mod(b - n + 1, n) + n - 1 for b in range(n)] == list(range(n))
        assert [_c_mod(b - n, n) for b in range(n)] == [0] + [b - n for b in range(1, n)]


def test_a_block_index_correct_only_under_floor_division_is_reported():
    report = verify.run(fixed("div"))
    once = [d for d in report.errors if d.code == "store.once"]
    assert once, "\n".join(map(str, report.findings))
    wit = once[0].counterexample
    first, second = wit["first"], wit["second"]
    # two CTAs storing the same output element: recompute each CTA's row with C's division
    rows = [_c_div(2 * p["cta"] - 1, 2) * 4 + 4 + p["tile_element"][0] for p in (first, second)]
    assert first["cta"] != second["cta"] and rows[0] == rows[1], wit
    assert wit["output"] == f"Y[{rows[0]}, {first['tile_element'][1]}]", wit
    assert "thread" in first and "thread" in second, wit
    cover = [d for d in report.errors if d.code == "store.coverage"]
    assert cover and cover[0].counterexample["defined"]["s"] == f"{HERE}:{_line('bug: div')}", \
        cover


def test_a_block_index_correct_under_c_modulo_proves():
    _clean(verify.run(fixed("mod-c")))
    _clean(verify.run(fixed("ok")))


def test_a_runtime_modulus_of_a_negative_index_is_reported():
    report = verify.run(runtime("mod"))
    cover = [d for d in report.errors if d.code == "store.coverage"]
    assert cover, "\n".join(map(str, report.findings))
    wit = cover[0].counterexample
    assert wit["defined"]["s"] == f"{HERE}:{_line('bug: mod')}", wit
    assert wit["thread"] == 0 and "M" in wit["shapes"], wit
    # C puts every block below row 0: the destination the witness names is negative
    assert "destination -" in cover[0].message, cover[0].message


def test_runtime_moduli_correct_under_c_prove():
    _clean(verify.run(runtime("mod-c-runtime")))
    _clean(verify.run(runtime("plain")))


def test_non_negative_dividends_keep_z3s_linear_division():
    """b % nb with b >= 0 and nb >= 1 (the grid id and a cdiv of a shape): no sign split."""
    m = Model(runtime("plain").trace())
    kinds = {t.decl().kind() for t in m.sym.values() if isinstance(t, z3.ExprRef)}
    assert z3.Z3_OP_MOD in kinds and z3.Z3_OP_ITE not in kinds, kinds
    m = Model(runtime("mod").trace())   # b - nb may be negative: the sign split
    assert any(isinstance(t, z3.ExprRef) and t.decl().kind() == z3.Z3_OP_SUB and
               "If(" in str(t) for t in m.sym.values())


def test_c_div_and_c_mod_are_cs_for_every_sign():
    """transfer/domain.py's terms against C's arithmetic (the reference above), every sign
    of dividend and divisor, numeral and symbolic divisors alike."""
    from argus.verify.transfer.domain import c_div, c_mod
    a, b = z3.Ints("a b")
    sym_q, sym_r = c_div(a, b), c_mod(a, b)
    for x in range(-13, 14):
        for y in [d for d in range(-6, 7) if d]:
            want_q, want_r = _c_div(x, y), _c_mod(x, y)
            got = [z3.simplify(c_div(z3.IntVal(x), y)), z3.simplify(c_mod(x, z3.IntVal(y))),
                   z3.simplify(z3.substitute(sym_q, (a, z3.IntVal(x)), (b, z3.IntVal(y)))),
                   z3.simplify(z3.substitute(sym_r, (a, z3.IntVal(x)), (b, z3.IntVal(y))))]
            assert [g.as_long() for g in got] == [want_q, want_r, want_q, want_r], (x, y, got)
