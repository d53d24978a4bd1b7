"""Seeded bugs in the deferred row sum (AttentionSchedule.defer_row_sum: P's 8-column windows
added into a [64, 8] partial each KV block, `l_i.sum(axis=1)` once after the loop), caught by
reduce.coverage's fold claims (argus/verify/fold.py, check_reduce `_fold_claims`); before
them a dropped window verified clean (only the interpreter tests saw it):

  * a window dropped, a window added twice, windows 16 wide at a stride of 8 (overlapping),
    windows 8 wide at a stride of 16 (gaps): the windows do not partition P's columns,
    reported with the column missed or counted twice, in the loop and in the block peeled
    before it;
  * the after-loop sum replaced by a max: no sum over axis 1 of the partials follows the
    loop;
  * windows 7 wide, the after-loop sum missing or over axis 0: refused before the verifier
    runs (a 7-column accumulator tile has no wgmma layout; a [64, 8] or [1, 8] sum does not
    broadcast against O).

The alpha rescale keeps the unfolded sum's statistics claim: the block's partial rescaled by
the block's own alpha (`l_i * alpha + part * alpha`) is reported by softmax.stats with the
message the unfolded `p.sum(axis=1) * alpha` gets. (A rescale dropped, `l_i + part`, folded or
not, is reported since h327 in the loop's first iteration: test_attention_rescale_dropped.py.)

A fold of 16-column windows at a stride of 16 (every column once) verifies clean, as does the
library's. The bugs are seeded in a copy of argus/kernels/attention.py (tests/loading
.load_edited)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import ArgusError
from argus.kernels import attention as A
from tests.loading import load_edited, load_script

BENCH = load_script("gpu_attention_bench")

_FIRST = "part = p[:, 0:8]\n"
_LOOP = "for g in range(1, BN // 8):\n"
_WINDOW = "part = part + p[:, 8 * g:8 * (g + 1)]\n"
_PARTIAL = "l_i = ag.full((ROWS, 8 if s.defer_row_sum else 1), 0.0)"
_SUM = "l_i = l_i.sum(axis=1)           # the quad's reduction, once a tile"


def _width(w: int, stride: int, count: str) -> list:
    """Windows `w` columns wide every `stride` columns, `count` of them."""
    return [(_PARTIAL, _PARTIAL.replace("8 if", f"{w} if")),
            (_FIRST, f"part = p[:, 0:{w}]\n"), (_LOOP, f"for g in range(1, {count}):\n"),
            (_WINDOW, f"part = part + p[:, {stride} * g:{stride} * g + {w}]\n")]


MUTATIONS = {
    "window_dropped": [(_LOOP, "for g in range(1, BN // 8 - 1):\n")],
    "window_twice": [(_LOOP, "for g in [*range(1, BN // 8), 3]:\n")],
    "width16_stride8": _width(16, 8, "BN // 8 - 1"),
    "width8_stride16": _width(8, 16, "BN // 16"),
    "max_after_loop": [(_SUM, "l_i = l_i.max(axis=1)")],
    "width7": _width(7, 7, "BN // 7"),
    "sum_missing": [(_SUM, "pass")],
    "sum_axis0": [(_SUM, "l_i = l_i.sum(axis=0)")],
    "width16_stride16": _width(16, 16, "BN // 16"),       # not a bug: every column once
    "stale_rescale": [("l_i * alpha + part", "l_i * alpha + part * alpha")],
    "stale_rescale_unfolded": [("l_i * alpha + p.sum(axis=1)",
                                "l_i * alpha + p.sum(axis=1) * alpha")],
}


def _kernel(tmp_path, bug: str | None, causal: bool, head_dim: int = 128,
            variant: str = "default+sumend"):
    module = load_edited(A, MUTATIONS[bug] if bug else [],
                         tmp_path / f"attention_{bug or 'same'}.py")
    s = BENCH.variant_schedule(variant, head_dim, causal, 16384)
    assert s.defer_row_sum == ("sumend" in variant)
    return lower_only(module.attention_kernel(head_dim, ag.bf16, causal, False), s=s)


def _fold(report) -> list:
    return [f for f in report.findings if f.code == "reduce.coverage"
            and ("windows of width" in f.subject or "partials of the fold" in f.subject)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bug", [None, "width16_stride16"])
def test_a_fold_of_every_column_once_is_proven(tmp_path, bug, causal):
    report = verify.run(_kernel(tmp_path, bug, causal), include_proven=True)
    assert not report.errors and not report.unknowns, [str(d) for d in report.diagnostics]
    fold = _fold(report)
    # the windows in the loop and in the block peeled before it, and the after-loop sum
    assert len(fold) == 3 and all(f.status == "proven" for f in fold), fold
    # the per-block claims of the unfolded `p.sum(axis=1)`, posed on the folded tile
    line = fold[0].loc.line
    sums = {f.subject.split(": ", 1)[1] for f in report.findings
            if f.code == "reduce.coverage" and f.status == "proven"
            and f.subject.startswith("sum over axis 1 at ") and f":{line}," in f.subject}
    want = {"each once", "each once with the blocks reduced outside the loop"}
    assert want | ({"covers the row"} if not causal else set()) == sums, sums


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bug,column,added", [("window_dropped", 120, 0),
                                              ("window_twice", 24, 2),
                                              ("width16_stride8", 8, 2),
                                              ("width8_stride16", 8, 0)])
def test_windows_that_miss_or_repeat_a_column_are_reported(tmp_path, bug, column, added,
                                                           causal):
    report = verify.run(_kernel(tmp_path, bug, causal))
    bad = [f for f in _fold(report) if f.status == "violated"]
    # the loop's fold and the first block's, folded by the same code before the loop
    assert len(bad) == 2, [(f.subject, f.message) for f in _fold(report)]
    assert any("(the block folded outside the loop)" in f.subject for f in bad)
    for f in bad:
        assert f.witness["column"] == column and f.witness["added"] == added, f.message
        assert f"column {column} of the tile folded at" in f.message
    assert any(d.code == "reduce.coverage" for d in report.errors)


def test_the_partials_left_unsummed_are_reported(tmp_path):
    report = verify.run(_kernel(tmp_path, "max_after_loop", False))
    bad = [f for f in _fold(report) if f.status == "violated"]
    assert len(bad) == 1 and "partials of the fold" in bad[0].subject, _fold(report)
    assert "no sum over axis 1 of them follows the loop" in bad[0].message
    assert "the max over axis 1 at" in bad[0].message


@pytest.mark.parametrize("bug,said", [("width7", "wgmma N=7"),
                                      ("sum_missing", "do not broadcast"),
                                      ("sum_axis0", "do not broadcast")])
def test_shapes_the_dsl_refuses(tmp_path, bug, said):
    with pytest.raises(ArgusError, match=said):
        _kernel(tmp_path, bug, False)


def test_a_stale_rescale_is_reported_as_for_the_unfolded_sum(tmp_path):
    def stats(bug, variant):
        report = verify.run(_kernel(tmp_path, bug, False, variant=variant))
        return [f.message.replace(f"attention_{bug}.py", "attention.py")
                for f in report.findings if f.code == "softmax.stats" and f.status != "proven"]
    folded = stats("stale_rescale", "default+sumend")
    assert folded and folded == stats("stale_rescale_unfolded", "default"), folded
