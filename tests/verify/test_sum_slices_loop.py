"""reduce.slices when the partials are added in a runtime loop (ag.range): the loads of every
iteration are leaves of the sum. Every slice once is proven; a loop that starts at the slice
the initial value already read, stops one short, or reads two slices per iteration that overlap
the next iteration's, is refused, with the iteration(s) and the loads' lines."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

SPLITS = 4


def _summed(form: str):
    @ag.kernel(threads=256)
    def ssum(P: ag.Tensor[SPLITS, "M", "N", ag.f32], C: ag.Tensor["M", "N", ag.f32]):
        pm, pn = ag.grid(ag.cdiv(C.shape[0], 2), ag.cdiv(C.shape[1], 512))
        r0, c0 = pm * 2, pn * 512
        if form in ("pairs", "pairs_overlap"):
            total = ag.full((2, 512), 0.0)
            for s in ag.range(SPLITS // 2):
                second = 2 * s + 1 if form == "pairs" else s + 1
                total = total + ag.load(P, (2 * s, r0, c0), (2, 512)) + \
                    ag.load(P, (second, r0, c0), (2, 512))
        else:
            total = ag.load(P, (0, r0, c0), (2, 512))
            lo = 0 if form == "from_zero" else 1
            hi = SPLITS - 1 if form == "skip_last" else SPLITS
            for s in ag.range(lo, hi):
                total = total + ag.load(P, (s, r0, c0), (2, 512))
        ag.store(C, (r0, c0), total)
    return ssum


def _slices(form: str, lowered: bool = False):
    kernel = _summed(form)
    report = verify.run(lower_only(kernel) if lowered else kernel.trace(), include_proven=True)
    return [d for d in report.diagnostics if d.code == "reduce.slices"]


# lowered, the loop's loads go through lower/prefetch.py's register ring (3 blocks ahead)
LOWERED = pytest.mark.parametrize("lowered", [False, True], ids=["traced", "ring"])


@LOWERED
@pytest.mark.parametrize("form", ["ok", "pairs"])
def test_every_slice_once_is_proven(form, lowered):
    found = _slices(form, lowered)
    assert found and all(d.severity == "note" for d in found), [str(d) for d in found]


@LOWERED
def test_a_loop_that_starts_at_the_initial_slice_adds_it_twice(lowered):
    (d,) = [d for d in _slices("from_zero", lowered) if d.severity == "error"]
    assert "twice" in d.message and d.counterexample["slices"][0] == (0,)
    (it,) = d.counterexample["iteration"].values()
    assert it == 0      # the loop's first iteration reads slice 0 again


@LOWERED
def test_a_loop_one_slice_short_is_refused(lowered):
    (d,) = [d for d in _slices("skip_last", lowered) if d.severity == "error"]
    wit = d.counterexample
    assert "never added" in d.message and wit["added"] == SPLITS - 1 < wit["extent"] == SPLITS


def test_overlapping_slices_of_two_iterations_are_refused():
    (d,) = [d for d in _slices("pairs_overlap") if d.severity == "error"]
    wit = d.counterexample
    assert "twice" in d.message
    # slices s + 1 and 2 * s' (or s + 1 of one iteration and s' + 1 of another): recomputed
    (i1,), (i2,) = wit["iteration"].values(), wit["second_iteration"].values()
    reads = {i: {2 * i, i + 1} for i in (i1, i2)}
    assert reads[i1] & reads[i2] if i1 != i2 else len(reads[i1]) == 1


def test_a_ring_whose_first_blocks_are_not_the_loops_is_not_proven():
    # the ring's second first block rewritten to read the first's slice: slice 1 is added
    # twice and slice 2 never; the ring no longer reads offsets(j), so no proof (unknown)
    from argus.ir import ops as O
    from tests.mutations.corpus import rewrite

    kernel = lower_only(_summed("ok"))
    loop = next(op for op in kernel.body.ops if isinstance(op, O.For))
    before = [op for op in kernel.body.ops[:kernel.body.ops.index(loop)]
              if isinstance(op, O.Load)]
    assert len(before) == 4          # P[0], then the ring's first blocks: slices 1, 2, 3
    bad = rewrite(kernel, O.Load, lambda op: op.replace(offsets=before[1].offsets), nth=2)
    report = verify.run(bad, include_proven=True)
    found = [d for d in report.diagnostics if d.code == "reduce.slices"]
    assert found and all(d.severity != "note" for d in found), [str(d) for d in found]


def _sum_twice(form: str):
    """Two loops over slices 1.. (a loop per variable), or the last slice's store placed in the
    loop before its add (a prefix): neither adds every slice once."""
    @ag.kernel(threads=256)
    def twice(P: ag.Tensor[SPLITS, "M", "N", ag.f32], C: ag.Tensor["M", "N", ag.f32]):
        pm, pn = ag.grid(ag.cdiv(C.shape[0], 2), ag.cdiv(C.shape[1], 512))
        r0, c0 = pm * 2, pn * 512
        a = ag.load(P, (0, r0, c0), (2, 512))
        if form == "two_loops":
            for s in ag.range(1, SPLITS):
                a = a + ag.load(P, (s, r0, c0), (2, 512))
            b = ag.full((2, 512), 0.0)
            for t in ag.range(1, SPLITS):
                b = b + ag.load(P, (t, r0, c0), (2, 512))
            ag.store(C, (r0, c0), a + b)
        else:
            for s in ag.range(1, SPLITS):
                with ag.when(s == SPLITS - 1):
                    ag.store(C, (r0, c0), a)     # P[0] + ... + P[SPLITS - 2]
                a = a + ag.load(P, (s, r0, c0), (2, 512))
    return twice


def test_two_loops_adding_the_same_slices_are_refused():
    report = verify.run(_sum_twice("two_loops").trace(), include_proven=True)
    (d,) = [d for d in report.diagnostics if d.code == "reduce.slices"]
    assert d.severity == "error" and "twice" in d.message, str(d)
    # the slice both loops read, recomputed from the two iterations
    s, t = d.counterexample["iteration"].values()
    assert s == t and 1 <= s < SPLITS, d.message


def test_a_store_inside_the_summing_loop_is_no_claim():
    # it reads the variable mid-sum: a prefix, never proven to add every slice
    report = verify.run(_sum_twice("prefix").trace(), include_proven=True)
    assert not [d for d in report.diagnostics if d.code == "reduce.slices"]


def test_a_variable_reassigned_in_a_loop_is_no_sum_of_its_initial_value():
    # t starts as P[0] + ... + P[3] but the loop replaces it by P[0] + P[0]: the stored value
    # is not the initial one, so no claim (before: 'proven' from the initial value's loads)
    @ag.kernel(threads=256)
    def replaced(P: ag.Tensor[SPLITS, "M", "N", ag.f32], C: ag.Tensor["M", "N", ag.f32],
                 n: ag.Scalar[ag.i32]):
        pm, pn = ag.grid(ag.cdiv(C.shape[0], 2), ag.cdiv(C.shape[1], 512))
        r0, c0 = pm * 2, pn * 512
        t = ag.load(P, (0, r0, c0), (2, 512)) + ag.load(P, (1, r0, c0), (2, 512)) + \
            ag.load(P, (2, r0, c0), (2, 512)) + ag.load(P, (3, r0, c0), (2, 512))
        for _ in ag.range(n):
            t = ag.load(P, (0, r0, c0), (2, 512)) + ag.load(P, (0, r0, c0), (2, 512))
        ag.store(C, (r0, c0), t)
    report = verify.run(replaced.trace(), include_proven=True)
    assert not [d for d in report.diagnostics if d.code == "reduce.slices"]
