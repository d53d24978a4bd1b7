"""Differential tests: argus.layout against the independent CuTe-semantics reference
(tests/layout/cute_reference.py) on thousands of seeded random layouts.

For every case both sides either refuse (argus: ValueError, reference: NotALayout) or give
the same layout exactly (same nested shape, same strides). The reference finds layouts from
their points, so agreement means argus's symbolic constructions are right, not merely
self-consistent. CuTe's own post-conditions (from CUTLASS test/unit/cute/core/*.cpp) are
checked on argus's results as well, so the reference is not the only judge.
"""

from __future__ import annotations

import math
import random

import pytest

from argus.layout import (
    Layout,
    blocked_product,
    coalesce,
    complement,
    composition,
    flat_divide,
    flat_product,
    left_inverse,
    logical_divide,
    logical_product,
    raked_product,
    right_inverse,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from tests.layout import cute_reference as ref

SIZES = [1, 2, 2, 3, 4, 4, 5, 6, 8]


# ---- random layouts ------------------------------------------------------------------------
def nest(rng: random.Random, items: list):
    """Group a flat list into a random shallow tree (a single item stays bare)."""
    if len(items) == 1:
        return items[0]
    if rng.random() < 0.5:
        return tuple(items)
    cut = rng.randint(1, len(items) - 1)
    return (nest(rng, items[:cut]), nest(rng, items[cut:]))


def build(rng: random.Random, sizes: list[int], strides: list[int]) -> Layout:
    shape = nest(rng, sizes)
    return Layout(shape, ref.rebuild(shape, strides))


def any_layout(rng: random.Random, max_leaves: int = 4, max_stride: int = 40) -> Layout:
    n = rng.randint(1, max_leaves)
    sizes = [rng.choice(SIZES) for _ in range(n)]
    strides = [0 if rng.random() < 0.15 else rng.randint(1, max_stride) for _ in range(n)]
    return build(rng, sizes, strides)


def gapped_layout(rng: random.Random, max_leaves: int = 3, uneven: bool = True) -> Layout:
    """Injective, modes in stride order each at least the extent below (CuTe's complement
    domain); gaps are uneven (not multiples of the extent) when `uneven`."""
    n = rng.randint(1, max_leaves)
    sizes = [rng.choice([2, 3, 4, 5]) for _ in range(n)]
    strides, extent = [], 1
    for s in sizes:
        d = extent * rng.choice([1, 1, 2, 3])
        if uneven and rng.random() < 0.5:
            d += rng.randint(0, extent)
        strides.append(d)
        extent = d * s
    order = list(range(n))
    rng.shuffle(order)
    return build(rng, [sizes[k] for k in order], [strides[k] for k in order])


def compact_layout(rng: random.Random, max_leaves: int = 3) -> Layout:
    """A bijection onto [0, size): compact strides in a random order."""
    n = rng.randint(1, max_leaves)
    sizes = [rng.choice([2, 3, 4, 5, 6]) for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    strides = [0] * n
    acc = 1
    for k in order:
        strides[k] = acc
        acc *= sizes[k]
    return build(rng, sizes, strides)


def tiler_for(rng: random.Random, a_size: int) -> Layout:
    """A tiler layout whose stride and size often divide the target (admissible), not always."""
    divs = [k for k in range(1, a_size + 1) if a_size % k == 0]
    if rng.random() < 0.6:
        s = rng.choice(divs)
        d = rng.choice([k for k in divs if k * s <= a_size] or [1])
        if rng.random() < 0.5 and s > 1:
            f = rng.choice([k for k in range(2, s + 1) if s % k == 0])
            return Layout((f, s // f), (d * s // f, d)) if rng.random() < 0.5 else \
                Layout((f, s // f), (d, d * f))
        return Layout(s, d)
    return any_layout(rng, max_leaves=2, max_stride=12)


def ref_of(x: Layout):
    return (x.shape, x.stride)


def run_both(argus_fn, ref_fn):
    """('ok', layout pair) or ('refused', message) for each side."""
    try:
        mine = ("ok", ref_of(argus_fn()))
    except ValueError as exc:
        mine = ("refused", str(exc))
    try:
        theirs = ("ok", ref_fn())
    except ref.NotALayout as exc:
        theirs = ("refused", str(exc))
    return mine, theirs


def agree(mine, theirs, what: str) -> bool:
    """Assert the two answers agree; True when both computed a layout."""
    assert mine[0] == theirs[0], f"{what}: argus {mine} vs reference {theirs}"
    if mine[0] == "ok":
        assert mine[1] == theirs[1], f"{what}: argus {mine[1]} vs reference {theirs[1]}"
        return True
    return False


def to_ref_tiler(t):
    if isinstance(t, tuple):
        return ref.Tiler(to_ref_tiler(x) for x in t)
    if isinstance(t, Layout):
        return ref_of(t)
    return t


# ---- the differential runs -------------------------------------------------------------------
def test_coalesce_matches_the_coalesced_function():
    rng = random.Random(1)
    for _ in range(800):
        a = any_layout(rng)
        assert ref_of(coalesce(a)) == ref.coalesce(ref_of(a)), a


def test_composition_matches_reference():
    rng = random.Random(2)
    ok = refused = 0
    for case in range(1500):
        a = any_layout(rng) if case % 3 else compact_layout(rng)
        if a.size > 400:
            continue
        b = tiler_for(rng, a.size) if case % 2 else any_layout(rng, 3, 2 * a.size)
        if b.size > 96:
            continue
        mine, theirs = run_both(lambda: composition(a, b),
                                lambda: ref.composition(ref_of(a), ref_of(b)))
        if agree(mine, theirs, f"{a} o {b}"):
            ok += 1
            r = composition(a, b)
            # CuTe's post-conditions (test/unit/cute/core/composition.cpp)
            assert ref.compatible(b.shape, r.shape)
            assert [int(v) for v in r.table()] == [a(int(b(i))) for i in range(b.size)]
        else:
            refused += 1
            assert "fix:" in mine[1]
    assert ok > 500 and refused > 100, (ok, refused)     # both outcomes are exercised


def test_by_mode_composition_matches_reference():
    # tuple tilers: mode i of A composed with tiler i (None keeps it, an int n means n:1)
    rng = random.Random(8)
    ok = 0
    for _ in range(400):
        a = any_layout(rng, 4, 30)
        if a.size > 400:
            continue
        t = random_tiler(rng, a, depth=1) if a.rank > 1 else (tiler_for(rng, a.size),)
        if not isinstance(t, tuple):
            t = (t,)
        mine, theirs = run_both(lambda: composition(a, t),
                                lambda: ref.composition(ref_of(a), to_ref_tiler(t)))
        ok += agree(mine, theirs, f"{a} o {t}")
    assert ok > 150, ok


def test_complement_matches_reference():
    rng = random.Random(3)
    ok = 0
    for case in range(1200):
        a = gapped_layout(rng) if case % 3 else any_layout(rng, 3, 24)
        cot = None if case % 4 == 0 else rng.randint(1, 2 * a.cosize + 3)
        mine, theirs = run_both(lambda: complement(a, cot), lambda: ref.complement(ref_of(a), cot))
        if not agree(mine, theirs, f"complement({a}, {cot})"):
            # the refusal names the true reason: a repeated offset, or interleaved modes
            live = [(s, d) for s, d in zip(ref.leaves(a.shape), ref.leaves(a.stride)) if d > 0]
            injective = ref.is_injective(ref.flat(live))
            assert ("interleave" if injective else "not injective") in mine[1], mine[1]
            continue
        ok += 1
        r = complement(a, cot)
        m = a.cosize if cot is None else cot
        check_complement_postconditions(a, r, m, default_cotarget=cot is None)
    assert ok > 700, ok


def check_complement_postconditions(a: Layout, r: Layout, m: int,
                                    default_cotarget: bool) -> None:
    """test/unit/cute/core/complement.cpp: R increasing (3) and disjoint from A except at 0
    (4), (A, R) injective on A's non-broadcast modes; with the default cotarget also (1)
    cosize(A, R) >= M and (2) cosize R <= round_up(M, cosize A); with even gaps (A, R) covers
    [0, M). (1) and (2) are CuTe's "observations" for its test cases, not guarantees: with
    uneven gaps and another M its construction misses them (A = (3,5):(7,1), M = 21 gives
    R = 1:21 and cosize(A, R) = 19; A = (5,2,2):(3,15,90), M = 221 gives R =
    (3,3,2):(1,30,180), cosize 243 > 236), and so does the reference."""
    rt = [int(v) for v in r.table()]
    assert rt == sorted(set(rt))
    image = {int(v) for v in a.table()}
    assert not (set(rt[1:]) & image)
    live = [(s, d) for s, d in zip(ref.leaves(a.shape), ref.leaves(a.stride)) if d > 0 and s > 1]
    lv = Layout((tuple(s for s, _ in live), r.shape), (tuple(d for _, d in live), r.stride))
    assert lv.is_injective()
    if default_cotarget:
        assert Layout((a.shape, r.shape), (a.stride, r.stride)).cosize >= m
        assert r.cosize <= -(-m // a.cosize) * a.cosize
    extent, even = 1, True
    for d, s in sorted((d, s) for s, d in live):
        even &= d % extent == 0
        extent = s * d
    if even:
        assert set(range(m)) <= {int(v) for v in lv.table()}


def test_inverses_match_reference():
    rng = random.Random(4)
    left_ok = 0
    for case in range(600):
        lay = (gapped_layout(rng) if case % 3 == 0 else compact_layout(rng) if case % 3 == 1
               else any_layout(rng, 3, 24))
        mine, theirs = run_both(lambda: right_inverse(lay), lambda: ref.right_inverse(ref_of(lay)))
        agree(mine, theirs, f"right_inverse({lay})")
        r = right_inverse(lay)
        assert all(lay(int(r(i))) == i for i in range(r.size))
        mine, theirs = run_both(lambda: left_inverse(lay), lambda: ref.left_inverse(ref_of(lay)))
        if agree(mine, theirs, f"left_inverse({lay})"):
            left_ok += 1
            inv = left_inverse(lay)
            if lay.is_injective():
                assert all(inv(int(lay(i))) == i for i in range(lay.size))
            else:       # CuTe's quasi-inverse, landing in L's domain
                assert all(0 <= int(inv(int(lay(i)))) < lay.size
                           and lay(int(inv(int(lay(i))))) == lay(i) for i in range(lay.size))
    assert left_ok > 300, left_ok


def random_tiler(rng: random.Random, a: Layout, depth: int = 0):
    """A tiler for A: a layout, an int, or (by mode, possibly nested) a tuple of tilers."""
    if rng.random() < 0.45 and depth < 2:
        modes = a.modes()
        k = rng.randint(1, len(modes))
        return tuple(None if rng.random() < 0.1 else random_tiler(rng, modes[i], depth + 1)
                     for i in range(k))
    if rng.random() < 0.3:
        return rng.choice([k for k in range(1, a.size + 1) if a.size % k == 0])
    return tiler_for(rng, a.size)


def test_divides_match_reference():
    rng = random.Random(5)
    ok = 0
    for case in range(700):
        a = compact_layout(rng) if case % 2 else any_layout(rng, 4, 30)
        if a.size > 400:
            continue
        t = random_tiler(rng, a)
        rt = to_ref_tiler(t)
        variants = [(logical_divide, ref.logical_divide)]
        if isinstance(t, tuple) and "None" not in repr(t) or case % 4 == 0:
            # the regroupings, mostly for tuple (possibly nested) tilers, where they differ;
            # a kept (None) mode has no (tile, rest) split: both refuse
            variants += [(zipped_divide, ref.zipped_divide), (tiled_divide, ref.tiled_divide),
                         (flat_divide, ref.flat_divide)]
        for fn, rfn in variants:
            if "None" in repr(t) and fn is not logical_divide:
                continue
            mine, theirs = run_both(lambda: fn(a, t), lambda: rfn(ref_of(a), rt))
            if agree(mine, theirs, f"{fn.__name__}({a}, {t})"):
                ok += 1
        if not isinstance(t, tuple):
            try:
                d = logical_divide(a, t)
            except ValueError:
                continue
            tl = Layout(t, 1) if isinstance(t, int) else t
            # test/unit/cute/core/logical_divide.cpp: rank 2, B compatible with R[0]
            assert d.rank == 2 and ref.compatible(tl.shape, d[0].shape)
    assert ok > 900, ok


def test_products_match_reference():
    rng = random.Random(6)
    ok = 0
    for case in range(400):
        a = gapped_layout(rng, 2) if case % 2 else compact_layout(rng, 2)
        b = compact_layout(rng, 2) if case % 3 else any_layout(rng, 2, 8)
        if a.size * b.size > 600:
            continue
        if case % 4 == 0:
            t = tuple(rng.choice([1, 2, 3]) for _ in range(rng.randint(1, a.rank)))
        else:
            t = b
        rt = to_ref_tiler(t)
        variants = [(logical_product, ref.logical_product)]
        if isinstance(t, tuple) or case % 3 == 0:
            variants += [(zipped_product, ref.zipped_product),
                         (tiled_product, ref.tiled_product), (flat_product, ref.flat_product)]
        for fn, rfn in variants:
            mine, theirs = run_both(lambda: fn(a, t), lambda: rfn(ref_of(a), rt))
            if agree(mine, theirs, f"{fn.__name__}({a}, {t})"):
                ok += 1
        if isinstance(t, Layout):
            for fn, rfn in ((blocked_product, ref.blocked_product),
                            (raked_product, ref.raked_product)):
                mine, theirs = run_both(lambda: fn(a, b), lambda: rfn(ref_of(a), ref_of(b)))
                ok += agree(mine, theirs, f"{fn.__name__}({a}, {b})")
            try:
                p = logical_product(a, b)
            except ValueError:
                continue
            # test/unit/cute/core/logical_product.cpp: rank 2, R[0] == A, B compatible R[1]
            assert p.rank == 2 and p[0] == a and ref.compatible(b.shape, p[1].shape)
    assert ok > 700, ok


def test_the_reference_finds_layouts_from_points_exactly():
    # guard on the reference itself: from_points inverts evaluation on coalesced layouts
    rng = random.Random(7)
    for _ in range(300):
        a = coalesce(any_layout(rng))
        assert ref.from_points(ref.table(ref_of(a))) == ref_of(a)
    with pytest.raises(ref.NotALayout):
        ref.from_points([0, 1, 2, 3, 10, 11])
    assert math.prod(ref.leaves((2, (3, 4)))) == 24


def test_f2_compose_matches_function_composition():
    # Triton's rule: inner's output sizes must not exceed outer's input sizes (else bits drop)
    from argus.layout import F2Layout

    rng = random.Random(9)
    composed = refused = 0
    for _ in range(300):
        in_bits = rng.randint(0, 3)
        mid_bits = [rng.randint(0, 3) for _ in range(2)]
        outer_bits = [rng.randint(0, 3) for _ in range(2)]
        mids = (("m0", 1 << mid_bits[0]), ("m1", 1 << mid_bits[1]))
        inner = F2Layout.from_bases(
            {"x": [(rng.randrange(1 << mid_bits[0]), rng.randrange(1 << mid_bits[1]))
                   for _ in range(in_bits)]}, mids)
        outer = F2Layout.from_bases(
            {f"m{k}": [(rng.randrange(8), rng.randrange(4)) for _ in range(outer_bits[k])]
             for k in range(2)}, (("o0", 8), ("o1", 4)))
        fits = all(m <= o for m, o in zip(mid_bits, outer_bits))
        try:
            both = outer.compose(inner)
        except ValueError as exc:
            assert not fits and "would be dropped" in str(exc)
            refused += 1
            continue
        assert fits
        composed += 1
        for x in range(1 << in_bits):
            assert both.apply(x=x) == outer.apply(inner.apply(x=x))
    assert composed > 50 and refused > 50, (composed, refused)
