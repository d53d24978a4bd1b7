"""The non-linear queries of the library's tile schedulers are proven by the plain SMT core's
quick attempt (solver.prove, step 3) with the premises' variable equalities substituted first
(solver._equalities_substituted; docs/verify.md "Verifier speed, equalities substituted").
Without that, the NCHW rowbox + cluster conv's tile query ("as many units as tiles":
(NI * OP) / P tiles walked against NI * ... stored, OP == P required) took the plain core
0.6-16 s, unknown on some seeds."""

from __future__ import annotations

import z3

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.verify import solver


def _equated(premises) -> list:
    """The premises that equate a variable with a variable or a numeral."""
    def var(t):
        return z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED
    return [p for p in premises if z3.is_eq(p) and (var(p.arg(0)) or var(p.arg(1))) and
            all(var(t) or z3.is_int_value(t) for t in (p.arg(0), p.arg(1)))]


def test_nchw_rowbox_cluster_nonlinear_attempts(monkeypatch):
    """Structural: the kernel states G == 1 and OP == P; the plain core's non-linear attempts
    (step 3, and step 2's on non-linear queries) get those variables substituted, and run
    without Groebner bases / Horner schemes. Fails without either change."""
    attempts = []
    quick = solver._quick_proof

    def record(premises, claims, budget, rlimit, t0, params=None, *a, **kw):
        if kw.get("point_first") or params is not None:
            attempts.append(([n for n, _ in claims], list(premises), params))
        return quick(premises, claims, budget, rlimit, t0, params, *a, **kw)
    monkeypatch.setattr(solver, "_quick_proof", record)
    k = conv_kernel(ag.f32, ag.f32, True, precision="tf32", nchw=True)
    s = ConvSchedule(bm=128, bn=128, bk=32, bw=64, stages=4, cluster_m=2, rowbox=True)
    solver.clear_cache()
    report = verify.run(lower_only(k, geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1,
                                                        cg_padded=64), s=s))
    assert not report.errors and not report.unknowns
    assert "store.coverage" in {d.code for d in report.proven}
    tile = [a for a in attempts if "distinct units store distinct tiles" in a[0]]
    assert tile, "the tile query made no non-linear attempt"
    for names, premises, params in tile:
        assert params == solver.NIA_PARAMS
        assert _equated(premises) == [], [str(p) for p in _equated(premises)]
    # step 2's attempts on non-linear queries (the A.grp == B.grp routing claim over the
    # raster's tile index, among others) run with the non-linear parameters too
    assert any(a[2] == solver.NIA_PARAMS and "distinct units store distinct tiles" not in a[0]
               for a in attempts), [a[0] for a in attempts]


def test_equalities_substituted():
    x, y, z, w = z3.Ints("x y z w")
    prem = [x == y, y == 3, z == w, z * w >= x]
    p, c = solver._equalities_substituted(prem, [("c", x * z > w)])
    # x, y -> 3 (a numeral represents its class); z, w -> one of them; the equalities dropped
    assert len(p) == 1 and str(c[0][1]) in ("3*z > z", "3*w > w"), (p, c)
    left = {str(v) for v in z3.z3util.get_vars(z3.And(p + [c[0][1]]))}
    assert left in ({"z"}, {"w"}), left
    # two numerals equated: contradictory premises, left as they are
    prem2 = [x == 1, x == 2, x * y > 0]
    assert solver._equalities_substituted(prem2, []) == (prem2, [])
    # no equality between variables: unchanged
    prem3 = [x + y == 1, x * y > 0]
    assert solver._equalities_substituted(prem3, [("c", x > 0)]) == (prem3, [("c", x > 0)])
