"""tagdomain.memoized_record: a tile's record is computed once per element index and renamed
apart per instantiation, so the verifier saves the work without two instantiations ever
sharing an auxiliary variable (which would make a negated query less free than the truth, i.e.
a proof unsound)."""

import re

import z3

from argus.verify import tagdomain as TD
from argus.verify.tagdomain import Record, TagVal, fresh_int, memoized_record


def _reduction_like(model_var):
    """Element i's record: a set over a fresh reduction variable r in [0, 8), plus a model
    variable every instantiation shares; counts its own calls."""
    calls = []

    def fn(idx):
        calls.append(idx)
        r = fresh_int("r")
        i = idx[0]
        return Record({"k": TagVal(i * 8 + r, (r,), (r >= 0, r < 8))},
                      z3.And(i >= 0, model_var >= 1), (r <= model_var,), "test")
    return fn, calls


def test_a_repeated_index_is_computed_once_and_renamed_apart():
    model_var = z3.Int("M")
    fn, calls = _reduction_like(model_var)
    rec = memoized_record(fn)
    i = fresh_int("e0")
    a, b = rec((i,)), rec((i,))
    assert len(calls) == 1
    (ra,), (rb,) = a.fields["k"].bound, b.fields["k"].bound
    assert not ra.eq(rb)                                   # fresh per instantiation
    assert b.fields["k"].term.eq(i * 8 + rb)
    assert b.cond[0].eq(rb <= model_var)                   # model variables stay shared
    # the two instantiations are independent: their reduction variables can differ
    s = z3.Solver()
    s.add(*a.fields["k"].cond, *b.fields["k"].cond, ra != rb)
    assert s.check() == z3.sat


def test_other_indices_and_nested_records_are_separate():
    fn, calls = _reduction_like(z3.Int("M"))
    inner = memoized_record(fn)

    def outer_fn(idx):
        x = inner(idx)
        y = inner(idx)                                     # a hit inside a computation
        return Record({"k": x.fields["k"], "k2": y.fields["k"]}, x.defined, x.cond + y.cond)
    outer = memoized_record(outer_fn)
    i, j = fresh_int("e0"), fresh_int("e0")
    o1, o2, o3 = outer((i,)), outer((i,)), outer((j,))
    # (i,) once: (j,) is the same record with the fresh index variable i renamed to j
    # (generalized over fresh index variables, see the tests below)
    assert len(calls) == 1
    # the outer hit renames the inner hit's variables too: no variable of o1 in o2
    v1 = {b.get_id() for f in o1.fields.values() for b in f.bound}
    v2 = {b.get_id() for f in o2.fields.values() for b in f.bound}
    assert len(v1) == 2 and len(v2) == 2 and not v1 & v2
    assert o3.fields["k"].term.eq(j * 8 + o3.fields["k"].bound[0])
    v3 = {b.get_id() for f in o3.fields.values() for b in f.bound}
    assert len(v3) == 2 and not v3 & (v1 | v2)
    assert not TD.mentions(o3.fields["k"].term, i) and not TD.mentions(o3.defined, i)


def _pair_record():
    """Element (a, b)'s record, its fields naming each index position; counts its calls."""
    calls = []

    def fn(idx):
        calls.append(idx)
        r = fresh_int("r")
        a, b = idx
        return Record({"a": TagVal(a), "b": TagVal(b * 8 + r, (r,), (r >= 0, r < 8))},
                      z3.And(a >= 0, b >= 0), (), "test")
    return memoized_record(fn), calls


def _same(rec, a, b) -> bool:
    """rec's fields are exactly those of element (a, b) (up to its own reduction variable)."""
    (r,) = rec.fields["b"].bound
    return rec.fields["a"].term.eq(a) and rec.fields["b"].term.eq(b * 8 + r) and \
        rec.defined.eq(z3.And(a >= 0, b >= 0))


def test_fresh_index_variables_are_generalized_positionally():
    rec, calls = _pair_record()
    i, j, k = fresh_int("m"), fresh_int("kk"), fresh_int("m")
    assert _same(rec((i, j)), i, j)
    assert _same(rec((k, i)), k, i)        # (i, j) renamed: i -> k and j -> i at once
    assert _same(rec((j, i)), j, i)        # a swap
    assert len(calls) == 1
    # a repeated variable is another index pattern: (i, i) is not an instance of (i, j)
    assert _same(rec((i, i)), i, i)
    assert len(calls) == 2
    # an index term built from fresh variables (not one): the record at a fresh variable in
    # its place, instantiated with the term (tagdomain._at_terms), so terms that differ in a
    # numeral share it: (m, kk + 64) and (k, i + 32) are instances of (i, j)
    assert _same(rec((i, j + 64)), i, j + 64)
    assert _same(rec((k, i + 64)), k, i + 64)
    assert _same(rec((k, i + 32)), k, i + 32)
    assert len(calls) == 2
    # a term sharing its fresh variable with another component keeps its place (the
    # relation between the components is part of the pattern): its own record, built once
    assert _same(rec((i + 8, i)), i + 8, i)
    assert _same(rec((k + 8, k)), k + 8, k)
    assert len(calls) == 3
    TD.GENERALIZE_TERMS = False
    try:   # keyed by the term's shape instead: a numeral apart is another record
        assert _same(rec((i, j + 16)), i, j + 16)
        assert _same(rec((k, i + 16)), k, i + 16)
        assert len(calls) == 4
        assert _same(rec((k, i + 24)), k, i + 24)
        assert len(calls) == 5
    finally:
        TD.GENERALIZE_TERMS = True


def test_model_variables_and_the_walks_fresh_variables_are_not_generalized():
    """Only fresh variables made after the model was built: a model variable (a loop index,
    a program id) or a fresh variable of the walk (an opaque scalar) may also occur in the
    transfer functions' closures, so the record at one is not the record at another renamed."""
    rec, calls = _pair_record()
    i = fresh_int("m")
    TD.Memo.building += 1
    try:
        w1, w2 = fresh_int("var"), fresh_int("var")
    finally:
        TD.Memo.building -= 1
    m1, m2 = z3.Int("i12"), z3.Int("i13")
    for x in (m1, m2, w1, w2):
        assert _same(rec((i, x)), i, x)
    assert len(calls) == 4
    f = fresh_int("m")
    assert _same(rec((f, m1)), f, m1)      # (i, m1) with i renamed: m1 stays
    assert len(calls) == 4


def test_nothing_is_memoized_while_a_model_is_built():
    fn, calls = _reduction_like(z3.Int("M"))
    rec = memoized_record(fn)
    i = fresh_int("e0")
    TD.Memo.building += 1
    try:
        rec((i,))
        rec((i,))
    finally:
        TD.Memo.building -= 1
    assert len(calls) == 2
    rec((i,))
    rec((i,))
    assert len(calls) == 3


def _fresh_number(v) -> int | None:
    """The counter value in a fresh variable's name (`stem!g12` -> 12); None for another name."""
    m = re.search(r"!g?(\d+)$", str(v))
    return int(m.group(1)) if m else None


def _auxiliaries_renamed(term, after: int):
    """`term` with the fresh variables numbered above `after` (made while its record was
    built: its auxiliaries) renamed aux0, aux1, ... in the order `TD.subterms` meets them
    (the same walk for both records compared); every other constant (the index, the model's
    variables, the field names) kept, so two records compare equal only with the same index
    terms in the same places."""
    aux = [t for t in TD.subterms(term)
           if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED
           and (_fresh_number(t) or 0) > after]
    return z3.substitute(term, *[(t, z3.Int(f"aux{n}")) for n, t in enumerate(aux)]) \
        if aux else term


def test_records_at_index_terms_equal_the_records_built_at_them(monkeypatch):
    """`_at_terms`'s exactness on a kernel: the halo TMA conv's row-segment stores (8 stores
    of the accumulator's rows 8 s + e0) read records instantiated from one built at a fresh
    row; each equals, field by field and for every value of its variables, the record the
    transfer functions build at the row term itself (GENERALIZE_TERMS off), up to the
    renaming of the records' own auxiliaries (the fresh variables made while they were
    built, renamed in order of first occurrence; the index and the model's constants keep
    their names, so a term in the wrong place or two variables swapped do not compare
    equal). At least one record must have come through a stand-in."""
    import sys
    from pathlib import Path

    from argus.compiler import lower_only
    from argus.verify import solver
    from argus.verify.model import Model
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import verify_timings

    (_, fn, cx), = [c for c in verify_timings.conv() if c[0] == "conv halo tma bw 8, cluster 2"]
    kernel = lower_only(fn, **cx)
    # two models (each its own memos): one read with the records at index terms
    # instantiated, one with them built at the terms
    on_model, off_model = Model(kernel), Model(kernel)
    assert len(on_model.stores) == len(off_model.stores) >= 8

    def encoded(st, idx):
        rec = st.tile.fn(tuple(idx))
        parts = [rec.defined] + list(rec.cond)
        for name in sorted(rec.fields):
            v = rec.fields[name]
            parts += [v.term == z3.Int(f"field!{name}")] + list(v.cond)
        return z3.And(parts)
    stood_in = []
    at_terms = TD._at_terms

    def counted(idx, key):
        out = at_terms(idx, key)
        stood_in.extend(out[1])
        return out
    monkeypatch.setattr(TD, "_at_terms", counted)
    for on_st, off_st in zip(on_model.stores, off_model.stores):
        idx = [fresh_int(f"e{d}") for d in range(len(on_st.shape))]
        after = _fresh_number(fresh_int("mark"))   # the records' own: numbered above
        on = encoded(on_st, idx)
        TD.GENERALIZE_TERMS = False
        try:
            off = encoded(off_st, idx)
        finally:
            TD.GENERALIZE_TERMS = True
        a, b = (_auxiliaries_renamed(t, after) for t in (on, off))
        if a.get_id() == b.get_id():
            continue
        s = z3.Solver()   # shaped differently: equal in value, for every value of all
        s.add(a != b)     # the constants (auxiliaries renamed in order of occurrence)
        assert s.check() == z3.unsat, on_st.op.loc
    assert stood_in, "no record was instantiated from one at a stand-in (_at_terms unused)"
