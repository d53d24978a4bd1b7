"""Seeded bugs: stores under a condition on the thread index that truly skip an element, each
caught by store.coverage (argus/verify/store_guards.py reads the condition at the threads
holding each element under the tile's register layout) with a counterexample naming the
element never written and the thread that holds it, at the condition's line (`# BUG:`).

The clean kernels store a 128-element tile under the per-thread mask `pid * 128 + t < N`
(thread t holds element t in the blocked layout), tiles that every thread of the group holds
an element of under `t < 128`, and a one-element tile (every thread holds it) under
`t >= 0` and `t < 1`; the bugs:

  * first_thread_only — `t < 1`, as for a one-element tile: thread 1 holds X[1];
  * thread_zero_skipped — `t > 0`: thread 0 alone holds element 0;
  * mask_off_by_one — `pid * 128 + t + 1 < N`: the last element of the output;
  * half_the_rows — a 4 x 32 tile (bits 0-4 the column, 5-6 the row) under `t < 96`: row 3;
  * second_half_of_the_warpgroup — a consumer warpgroup's tile under `t < 64`, its thread
    index being the index in the warpgroup: element 64 of warpgroup 0's tile;
  * no_thread_passes_both — a one-element tile (every thread holds it) under `t >= 1`
    inside `t < 1`: each is passed by some thread, never by the same one.

These need the layouts, so they verify the lowered kernel (as ag.compile does); the traced
kernel answers unknown for a tile of several elements (test_store_thread_guards.py).
"""

from __future__ import annotations

import inspect
import re

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

BUGS = {
    # bug: (output element, thread, extra witness entries)
    "first_thread_only": ("Y[1]", 1, {}),
    "thread_zero_skipped": ("Y[0]", 0, {}),
    "mask_off_by_one": (None, 0, {}),
    "half_the_rows": ("Z[3, 0]", 96, {}),
    "second_half_of_the_warpgroup": ("W[64]", 64, {"warpgroup": 0}),
    "no_thread_passes_both": ("V[0]", 0, {}),
}


def make_thread_guarded(bug: str | None = None):
    @ag.kernel(threads=128, name="thread_guarded")
    def thread_guarded(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 128))
        x = ag.load(X, (pid * 128,), (128,))
        t = ag.thread_index()
        if bug == "first_thread_only":
            cond = t < 1
        elif bug == "thread_zero_skipped":
            cond = t > 0
        elif bug == "mask_off_by_one":
            cond = pid * 128 + t + 1 < X.shape[0]
        else:
            cond = pid * 128 + t < X.shape[0]
        with ag.when(cond):  # BUG:first_thread_only BUG:thread_zero_skipped BUG:mask_off_by_one
            ag.store(Y, (pid * 128,), x)
    return thread_guarded


def make_one_cta(bug: str | None = None):
    @ag.kernel(threads=128, name="one_cta_guarded")
    def one_cta_guarded(Z: ag.Tensor[4, 32, ag.f32], V: ag.Tensor[1, ag.f32]):
        ag.grid(1)
        t = ag.thread_index()
        with ag.when(t < (96 if bug == "half_the_rows" else 128)):  # BUG:half_the_rows
            ag.store(Z, (0, 0), ag.full((4, 32), 1.0))
        # one obligation for both, at the outer one's line: one thread must pass them both
        lo = 1 if bug == "no_thread_passes_both" else 0
        with ag.when(t >= lo):  # BUG:no_thread_passes_both
            with ag.when(t < 1):
                ag.store(V, (0,), ag.full((1,), 1.0))
    return one_cta_guarded


def make_warpgroups(bug: str | None = None):
    @ag.kernel(threads=384, name="warpgroup_guarded")
    def warpgroup_guarded(W: ag.Tensor[256, ag.f32]):
        ag.grid(1)
        with ag.role("producer", warpgroups=1):
            pass
        with ag.role("consumer", warpgroups=2) as wg:
            hi = 64 if bug == "second_half_of_the_warpgroup" else 128
            with ag.when(ag.thread_index() < hi):  # BUG:second_half_of_the_warpgroup
                ag.store(W, (wg * 128,), ag.full((128,), 2.0))
    return warpgroup_guarded


def _factory(bug: str):
    if bug == "second_half_of_the_warpgroup":
        return make_warpgroups
    return make_one_cta if bug in ("half_the_rows", "no_thread_passes_both") else \
        make_thread_guarded


def _marker_line(bug: str) -> int:
    lines, first = inspect.getsourcelines(_factory(bug))
    hits = [first + i for i, line in enumerate(lines) if re.search(rf"BUG:{bug}\b", line)]
    assert len(hits) == 1, (bug, hits)
    return hits[0]


@pytest.mark.parametrize("factory", [make_thread_guarded, make_one_cta, make_warpgroups])
def test_clean_kernels_verify_clean(factory):
    report = verify.run(lower_only(factory(None)), include_proven=True)
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    guards = [d for d in report.diagnostics
              if d.code == "store.coverage" and "the condition" in d.message]
    assert guards and all(d.severity == "note" for d in guards)


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_thread_skip_is_caught(bug):
    output, thread, extra = BUGS[bug]
    report = verify.run(lower_only(_factory(bug)(bug)))
    found = [d for d in report.errors if d.code == "store.coverage"]
    assert found, f"{bug}: no store.coverage error in {[str(d) for d in report.diagnostics]}"
    line = _marker_line(bug)
    at = [d for d in found if d.loc.line == line]
    assert at, f"{bug}: expected the condition's line {line}, got {[str(d) for d in found]}"
    wit = at[0].counterexample
    assert wit["thread"] == thread and "threads" in wit, wit
    assert "never written" in at[0].message and f"thread {thread}" in at[0].message
    if output is not None:
        assert wit["output"] == output, wit
    for k, v in extra.items():
        assert wit[k] == v, wit
