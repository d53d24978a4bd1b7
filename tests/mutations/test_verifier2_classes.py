"""The four bug classes the held-out check found missed (issue 13, Verifier 2), each caught by
a general rule, on bugs written apart from the probe's (tests/mutations/verifier2_kernels.py;
the probe's own four are in test_heldout_style.py's BUGS):

  * a permutation of an integer dim (a column tile j + 1 for j, head-dim halves swapped):
    store.coords links an integer destination dim to the value's one `dim{i}` field of the
    same extent (check_stores._integer_links); a transpose (two fields of one extent) links
    nothing;
  * `X[b] * G[0]`: two same-shape tiles combined element by element must agree on the
    coordinate fields of the tensors their result is stored into (ew.agree, check_tiles); a
    field the destination lacks (split-K's slice, summed away) is not compared;
  * `m = m`: an online accumulator rescaled to a max that no variable carries into the next
    iteration is rescaled from a stale max (softmax.stats), and the self-assignment's line
    is named (tracing records no op for it);
  * a mean over the block width: a sum divided by a scalar count (or times 1 / count) must
    divide by the extent its coverage proves (reduce.mean, check_mean).

Each bug must be an error naming a thread and its `# BUG:<name>` line; each correct variant
must verify with no error, warning or internal error. Every bug here passed with no finding
before these rules (checked on a worktree of 80d68c1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from argus import verify
from tests.mutations import kernels as K
from tests.mutations import seeded as S
from tests.mutations import verifier2_kernels as V

FILE = Path(V.__file__)

BUGS = [
    (V.make_scale_fixed_cols, "next_col_tile", ("store.coords",)),
    (V.make_head_halves, "halves_swapped", ("store.coords",)),
    (V.make_residual_batched, "gate_batch_zero", ("ew.agree",)),
    (V.make_row_softmax_stale, "max_kept", ("softmax.stats",)),
    (V.make_row_mean_looped, "mean_over_blocks", ("reduce.mean",)),
    (V.make_rms_rows, "ms_over_block", ("reduce.mean",)),
    (V.make_col_mean_recip, "times_block_recip", ("reduce.mean",)),
    (V.make_gemm_fixed_n_load, "b_other_half", ("store.coords",)),
    (V.make_row_lse_no_update, "lse_max_dropped", ("softmax.stats",)),
    (V.make_layernorm_rows, "ln_mean_over_block", ("reduce.mean",)),
    (V.make_avg_pool_2x2, "pool_divisor", ("reduce.mean",)),
    (V.make_avg_pool_2x2, "pool_row_repeat", ("reduce.mean",)),
]

CLEAN = [
    (V.make_scale_fixed_cols, None),
    (V.make_head_halves, None),
    (V.make_transpose_fixed, None),         # rows and columns of one extent: no link
    (V.make_residual_batched, None),        # W has no batch dim: broadcast to every batch
    (V.make_row_softmax_stale, None),
    (V.make_row_mean_looped, None),
    (V.make_rms_rows, None),
    (V.make_col_mean_recip, None),
    (V.make_gemm_fixed_n_load, None),
    (V.make_row_lse_no_update, None),
    (V.make_layernorm_rows, None),
    (V.make_avg_pool_2x2, None),            # a window mean: trips x block, proven
]


def _lines(bug: str) -> list[int]:
    return S.bug_lines(FILE, bug)


@pytest.mark.parametrize("factory,bug,codes", BUGS, ids=[b for _, b, _ in BUGS])
def test_bug_is_caught_at_its_line(factory, bug, codes):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


@pytest.mark.parametrize("factory,bug", CLEAN,
                         ids=[f"{f.__name__}/{b or 'base'}" for f, b in CLEAN])
def test_variant_is_clean(factory, bug):
    S.assert_clean(factory(bug).trace())


def test_ew_agree_names_the_operands_and_the_field():
    found = verify.check(V.make_residual_batched("gate_batch_zero").trace())
    d = next(d for d in found if d.code == "ew.agree")
    assert "`x`" in d.message and "`g`" in d.message, d.message
    assert d.counterexample["violated"] == ["b of x == b of g"], d.counterexample
    cx = d.counterexample
    assert cx["operand"]["tags"]["b"] != cx["other_operand"]["tags"]["b"], cx


def test_ew_agree_skips_a_field_the_destination_lacks():
    """Split-K's fix-up adds P[0] + P[1] + ... and stores C[M, N]: the slice `s` is summed
    away on purpose (reduce.slices checks it), so only m and n are compared: clean."""
    report = verify.run(K.make_last_split_stores().trace(), include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    agree = [f for f in report.findings if f.code == "ew.agree"]
    assert agree and all(f.status == "proven" for f in agree), agree


def test_integer_link_reports_the_linked_field():
    found = verify.check(V.make_scale_fixed_cols("next_col_tile").trace())
    d = next(d for d in found if d.code == "store.coords")
    assert d.counterexample["violated"] == ["dim1 of the value == destination dim 1 of Y"]
    assert d.counterexample["value_tags"]["dim1"] != int(
        re.search(r"Y\[\d+, (\d+)\]", d.counterexample["output"]).group(1))


def test_stale_max_names_the_self_assignment():
    found = verify.check(V.make_row_softmax_stale("max_kept").trace())
    d = next(d for d in found if d.code == "softmax.stats" and "never updates" in d.message)
    line = _lines("max_kept")[0]
    assert d.counterexample["defined"]["run_max"] == f"{FILE.name}:{line}", d.counterexample
    assert "`block_max`" in d.message and "run_max = block_max" in d.fix, (d.message, d.fix)


@pytest.mark.parametrize("factory,bug,divisor", [(V.make_rms_rows, "ms_over_block", 1024),
                                                  (V.make_row_mean_looped, "mean_over_blocks",
                                                   None)])
def test_mean_witness_has_divisor_and_count(factory, bug, divisor):
    found = verify.check(factory(bug).trace())
    d = next(d for d in found if d.code == "reduce.mean")
    cx = d.counterexample
    assert cx["divisor"] != cx["count"], cx
    assert cx["count"] == cx["shapes"]["N"], cx           # the count is the row's length
    if divisor is not None:
        assert cx["divisor"] == divisor, cx


def test_mean_is_proven_on_the_correct_variants():
    for factory in (V.make_rms_rows, V.make_row_mean_looped):
        report = verify.run(factory().trace(), include_proven=True)
        assert any(f.code == "reduce.mean" and f.status == "proven"
                   for f in report.findings), factory.__name__


def test_window_mean_is_the_windows_count():
    """The 2 x 2 average pool's loop walks rows (kh) while each step sums 2 columns of W at
    `wo * 2`: the sum combines the window's 4 elements, not W's extent (before 6e1ceb2 an
    error "the sum combined W elements", then unknown "the divisor is not checked"). The
    window's count is trips x block when its elements are distinct and inside X: the correct
    pool is proven; a divisor of 2 and a window that reads one row twice are violations (the
    seeded bugs in BUGS); with X's shape untied from Y's a window may reach past X's edge,
    where the count is the padding convention's: unknown, never a violation."""
    report = verify.run(V.make_avg_pool_2x2().trace(), include_proven=True)
    means = [f for f in report.findings if f.code == "reduce.mean"]
    assert means and all(f.status == "proven" for f in means), "\n".join(map(str, means))
    found = verify.check(V.make_avg_pool_2x2("pool_divisor").trace())
    d = next(d for d in found if d.code == "reduce.mean" and d.severity == "error")
    assert (d.counterexample["divisor"], d.counterexample["count"]) == (2, 4), d.counterexample
    found = verify.check(V.make_avg_pool_2x2("pool_row_repeat").trace())
    d = next(d for d in found if d.code == "reduce.mean" and d.severity == "error")
    first, second = d.counterexample["first"], d.counterexample["second"]
    assert first != second and "twice" in d.message, d.counterexample
    report = verify.run(V.make_avg_pool_2x2(tied=False).trace(), include_proven=True)
    means = [f for f in report.findings if f.code == "reduce.mean"]
    assert means and all(f.status == "unknown" for f in means), "\n".join(map(str, means))
    assert all("past X's edge" in f.message for f in means), "\n".join(map(str, means))


def test_ew_agree_text_says_what_it_compares():
    """ew.agree compares the coordinate fields of the tensors the result is stored into
    (check_tiles._stored_fields keeps coordinate fields only); its catalogue text said user
    tags were compared too (review of 2026-12-04). The text must name what is compared and
    say that user tags are not."""
    from argus.verify.rules import RULES
    title = RULES["ew.agree"].title
    assert "stored into" in title and "user tags" in title and "not compared" in title, title
    assert "user tags both carry" not in title, title


def test_shared_harness_can_fail():
    """seeded.assert_caught refuses an error at another bug's line, and a code not reported;
    assert_clean refuses a seeded bug (the harness both files use must be able to fail)."""
    bug = V.make_rms_rows("ms_over_block").trace()
    S.assert_caught(bug, ("reduce.mean",), FILE, "ms_over_block")
    with pytest.raises(AssertionError):
        S.assert_caught(bug, ("reduce.mean",), FILE, "ln_mean_over_block")
    with pytest.raises(AssertionError):
        S.assert_caught(bug, ("store.coords",), FILE, "ms_over_block")
    with pytest.raises(AssertionError):
        S.assert_clean(bug)
