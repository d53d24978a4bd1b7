"""The conv raster's unit split where the tile count's lower bound is only 0
(check_stores._digit_split / _empty_at_zero) and once_split.generalize's C-API walk;
docs/verify.md "Conv raster units split at a zero bound; generalize through the C API".

The rowbox and halo convs' row tiles are `(NP / P) * ..`: a quotient by the variable P, whose
syntactic lower bound is 0, so the walked unit was not split into its digits and the raster
lemma ("distinct units store distinct tiles") was asked about the unit itself (55-185 ms
a kernel, against ~20 ms split). The unit's own range 0 <= u < F * K is empty where F == 0,
as is the split range 0 <= r < F, so the split is exact there too."""

from __future__ import annotations

import random

import pytest
import z3

from argus import verify
from argus.compiler import lower_only
from argus.verify import check_stores, once_split
from tests.verify.test_tile_digit_split import spy_tile_obligations


@pytest.fixture(autouse=True)
def _budget(monkeypatch):
    monkeypatch.setenv("ARGUS_VERIFY_TIMEOUT_MS", "20000")


def _rowbox_tma():
    from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
    geom = ConvGeometry(3, 3, 1, 1, 2, 1, 2, 1, groups=1, cg_padded=128)
    s = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", rowbox=True,
                     cluster_m=2, num_sms=4)
    return lower_only(conv_kernel(), geom=geom, s=s)


def test_the_rowbox_conv_unit_is_split_into_digits(monkeypatch):
    seen = spy_tile_obligations(monkeypatch)
    report = verify.run(_rowbox_tma())
    assert not [f for f in report.findings if f.status != "proven"]
    tiles = [ob for ob in seen if ob.subject.endswith("each once")]
    assert tiles, "no tile obligation"
    for ob in tiles:
        names: set[str] = set()
        for t in list(ob.premises) + [c for _, c in ob.claims]:
            names |= check_stores.free_consts(t)
        assert any(".quotient" in n for n in names) and \
            any(".remainder" in n for n in names), names


def test_empty_at_zero_needs_the_factor_and_the_floor():
    p, a, b, k = z3.Ints("p a b k")
    F = (a / 4) * b
    assert check_stores._empty_at_zero(p, F, [p >= 0, p < b * (a / 4) * k])
    assert check_stores._empty_at_zero(p, F, [p >= 0, p < (a / 4) * b])
    # no floor: p may be negative where F == 0
    assert not check_stores._empty_at_zero(p, F, [p < b * (a / 4) * k])
    # the bound is not a multiple of F: p in [0, k) with F == 0
    assert not check_stores._empty_at_zero(p, F, [p >= 0, p < b * k])
    assert not check_stores._empty_at_zero(p, F, [p >= 0, p < (a / 4) + b])


def _reference_generalize_rewrite(t, lb, instance, fresh):
    """The recursive wrapper walk generalize made before (fresh variables by term id)."""
    memo = {}

    def rewrite(t):
        if t.get_id() in memo:
            return memo[t.get_id()]
        out = t
        if z3.is_app(t) and t.num_args() > 0:
            k = t.decl().kind()
            x, y = (t.arg(0), t.arg(1)) if t.num_args() == 2 else (None, None)
            ly = lb.of(y) if y is not None else None
            lx = lb.of(x) if x is not None else None
            known = ly is not None and ly >= 1 and (k == z3.Z3_OP_MOD or
                                                    (lx is not None and lx >= 0))
            if k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and not z3.is_int_value(y) and known and \
                    once_split.consts(x) & instance and not once_split.consts(y) & instance:
                out = fresh[t.get_id()]
            else:
                out = t.decl()(*[rewrite(c) for c in t.children()])
        memo[t.get_id()] = out
        return out
    return rewrite(t)


def test_generalize_walk_matches_the_wrapper_walk_and_keeps_unchanged_terms():
    u, v, N, M, P = z3.Ints("u v N M P")
    prem = [N >= 1, M >= 1, P >= 1, u >= 0, v >= 0]
    instance = {"u", "v"}
    rng = random.Random(0)
    atoms = [u, v, N, M, P, z3.IntVal(3)]

    def term(depth):
        if depth == 0:
            return rng.choice(atoms)
        op = rng.choice(["+", "*", "/", "%", "-"])
        a, b = term(depth - 1), term(depth - 1)
        if op in "/%":
            b = rng.choice([N, M, P, z3.IntVal(8), N * M, u])
        return {"+": a + b, "*": a * b, "/": a / b, "%": a % b, "-": a - b}[op]
    claims = [(f"c{j}", term(4) < term(3)) for j in range(40)]
    # a claim with nothing to rewrite comes back as the same object (not rebuilt)
    plain = ("plain", N * M + 3 < P)
    got_prem, got = once_split.generalize(prem, claims + [plain], instance)
    assert got[-1][1] is plain[1]
    # the images match the wrapper walk's, with the fresh variables generalize made
    fresh = {t.get_id(): v for t, v in
             once_split._memo(("generalize",), (), u.ctx)["fresh"].values()}
    lb = once_split.LowerBounds(prem)
    for (name, c), (name2, g) in zip(claims, got):
        assert name == name2
        assert _reference_generalize_rewrite(c, lb, instance, fresh).eq(g), name
