"""tagdomain.memoized_record: a tile's record is computed once per element index and renamed
apart per instantiation, so the verifier saves the work without two instantiations ever
sharing an auxiliary variable (which would make a negated query less free than the truth, i.e.
a proof unsound)."""

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
    assert len(calls) == 2                                 # (i,) once, (j,) once
    # the outer hit renames the inner hit's variables too: no variable of o1 in o2
    v1 = {b.get_id() for f in o1.fields.values() for b in f.bound}
    v2 = {b.get_id() for f in o2.fields.values() for b in f.bound}
    assert len(v1) == 2 and len(v2) == 2 and not v1 & v2
    assert o3.fields["k"].term.eq(j * 8 + o3.fields["k"].bound[0])


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
