"""Seeded bugs and correct variants written as a held-out corpus author might write them
(issue 13, "Verifier 2"; tests/mutations/heldout_kernels.py): the corpus's kernels in other
spellings. Each bug must be an error naming a thread or warpgroup and pointing at its
`# BUG:<name>` line (the line a fix edits); each correct variant must verify without an error.

What this file found, each fixed in the verifier and pinned below (each test failed before):
  * a GEMM over a fixed K (A: ["M", 256]) whose Python-unrolled K loop loads k tile 2 twice
    and tile 3 never was accepted: the contracted axis of an integer dim is the field `dim1`,
    which wgmma.agree and wgmma.k-once skipped (`dim{i}` fields are no coordinate: two
    tensors' dim1 need not be one axis); check_wgmma._contracted_dim now keeps a `dim{i}`
    field both operands index by the instruction's k;
  * self-attention with one dim name for the query and the key (Q, K, V all ["S", 64]) was
    three false errors (wgmma.provenance on Q K^T, wgmma.agree and wgmma.k-once on P V): the
    score's column `s` (the key) was lost under the row's `s` (the query).
    tagdomain.align_operands names B's lineage `s@K` apart, and P V compares V's row with it;
  * a split-K GEMM whose split range is off by one was caught at the wgmma, but no line of the
    finding named the split's end `k1 = ...` (the loop bound `steps = ag.maximum(k1 - k0, 0)`
    was named, its formula's inputs were not): names.definitions looks through unnamed
    arithmetic to the named values it is computed from.
  * P V reading K's buffer instead of V's (K and V both ["SK", 64]: the coordinates agree,
    only the data is another tensor's) was accepted: smem.dead (check_smem._dead_copies)
    warns that V's buffer is filled and never read, listing the reads of the buffers filled
    beside it (the wrong wgmma's line among them).
  * a column (or row) reduction loading two blocks an iteration (a Python-unrolled pair) was
    a false reduce.coverage error: each unrolled reduction was counted alone (half the
    row). check_reduce._siblings counts the sites that reduce into one accumulator in the
    same iterations together (domain and each-once across sites).
  * FlashAttention's P computed against the previous block's max (`p = exp2(s - m)`) was an
    error at the rescale, naming no line of P: softmax.stats now says where the mismatched
    value was made relative to its max (the exp's line).
Left: docs/verify.md, "Held-out style probe (2026-12-03)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus import verify
from tests.mutations import heldout_kernels as H
from tests.mutations import seeded as S

FILE = Path(H.__file__)

BUGS = [
    (H.make_gemm_styles, "b_slot_from_k", ("pipe.release", "wgmma.defined")),
    (H.make_gemm_styles, "a_k_from_stage", ("wgmma.agree", "wgmma.k-once")),
    (H.make_gemm_styles, "reversed_k_off_by_one", ("wgmma.k-once",)),
    (H.make_gemm_styles, "store_n_from_pid_m", ("store.coords", "store.once")),
    (H.make_gemm_unrolled, "unrolled_a_k_repeat", ("wgmma.k-once", "wgmma.agree")),
    (H.make_persistent_acc, "acc_not_reset", ("wgmma.k-once",)),
    (H.make_persistent_acc, "tile_n_swapped", ("store.coords", "store.once")),
    (H.make_cluster_b, "multicast_rows_unranked", ("store.coords",)),
    (H.make_cluster_b, "multicast_other_rank", ("store.coords",)),
    (H.make_online_softmax2, "block_exp_old_max", ("softmax.stats",)),
    (H.make_col_sum, "rows_skip_last_block", ("reduce.coverage",)),
    (H.make_col_sum, "max_fill_inf", ("fill.identity",)),
    (H.make_row_min_when, "min_fill_neg_inf", ("fill.identity",)),
    (H.make_attn_static_d, "pv_k_transposed", ("wgmma.agree",)),
    (H.make_self_attn, "pv_k_transposed", ("wgmma.agree",)),
    (H.make_split_k_gemm, "split_range_overlap", ("wgmma.k-once",)),
    (H.make_split_k_gemm, "split_per_floor", ("wgmma.k-once",)),
    (H.make_gemm_tma_epilogue, "staging_other_wg", ("smem.race",)),
    (H.make_gemm_tma_epilogue, "tma_store_rows_no_wg", ("store.coords", "store.once")),
    (H.make_gemm_bias, "acc_reset_in_k", ("wgmma.k-once",)),
    (H.make_gemm_bias, "bias_from_pid_m", ("ew.broadcast",)),
    (H.make_col_stride, "pair_offset_half", ("reduce.coverage",)),
    (H.make_row_sum_unrolled, "pairs_floor", ("reduce.coverage",)),
    (H.make_row_sum_unrolled, "second_block_repeats", ("reduce.coverage",)),
    (H.make_fa_small, "p_old_max", ("softmax.stats",)),
    (H.make_fa_small, "alpha_inverted", ("softmax.stats",)),
    # the four left by the probe, caught since (tests/mutations/test_verifier2_classes.py)
    (H.make_gemm_static_n, "n_tiles_swapped", ("store.coords",)),
    (H.make_batched_add, "y_batch_zero", ("ew.agree",)),
    (H.make_row_mean, "mean_over_block", ("reduce.mean",)),
    (H.make_fa_small, "max_not_carried", ("softmax.stats",)),
]

CLEAN = [
    (H.make_gemm_styles, None),
    (H.make_gemm_styles, "slot_from_k_legal"),        # sB[k % stages]: st, spelled from k
    (H.make_gemm_unrolled, None),                      # Python-unrolled K, one-stage ring
    (H.make_persistent_acc, None),
    (H.make_cluster_b, None),
    (H.make_online_softmax2, None),
    (H.make_online_softmax2, "reversed_blocks_legal"),
    (H.make_col_sum, None),
    (H.make_col_sum, "reversed_rows_legal"),
    (H.make_row_min_when, None),                       # the store under an ag.when
    (H.make_gemm_static_n, None),
    (H.make_attn_static_d, None),                      # Q K^T contracts an integer head dim
    (H.make_self_attn, None),                          # Q, K, V all ["S", 64]
    (H.make_split_k_gemm, None),
    (H.make_gemm_tma_epilogue, None),
    (H.make_gemm_bias, None),
    (H.make_row_mean, None),
    (H.make_batched_add, None),
    (H.make_col_stride, None),                         # two row blocks an iteration
    (H.make_row_sum_unrolled, None),                   # two column blocks an iteration
    (H.make_fa_small, None),
]


def _lines(bug: str) -> list[int]:
    return S.bug_lines(FILE, bug)


@pytest.mark.parametrize("factory,bug,codes", BUGS, ids=[b for _, b, _ in BUGS])
def test_heldout_style_bug_is_caught_at_its_line(factory, bug, codes):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


@pytest.mark.parametrize("factory,bug", CLEAN,
                         ids=[f"{f.__name__}/{b or 'base'}" for f, b in CLEAN])
def test_heldout_style_variant_is_clean(factory, bug):
    S.assert_clean(factory(bug).trace())


def test_unrolled_fixed_k_tile_repeat_names_the_integer_dim():
    """The regression itself: k-once over the integer K dim (`dim1`) across the four
    unrolled wgmma sites, with the k multiplied twice in the counterexample."""
    found = verify.check(H.make_gemm_unrolled("unrolled_a_k_repeat").trace())
    hits = [d for d in found if d.code == "wgmma.k-once" and d.severity == "error"]
    assert hits, [(d.code, d.message[:120]) for d in found]
    d = hits[0]
    assert "dim1" in d.message and "multiplied twice" in d.message, d.message
    assert d.counterexample["k"] == 128, d.counterexample     # k tile 2's first k


def test_self_attention_with_one_length_name_is_clean():
    """Q, K and V all ["S", 64]: the DSL asks one name to have one size, nothing more.
    Nothing open at all (every invariant proven, wgmma.provenance included)."""
    found = verify.check(H.make_self_attn().trace())
    assert not found, "\n".join(str(d) for d in found)


def test_split_range_finding_names_the_split_end():
    """The split cover's counterexample names `k1`, the line the fix edits."""
    found = verify.check(H.make_split_k_gemm("split_range_overlap").trace())
    hits = [d for d in found if d.code == "wgmma.k-once" and d.severity == "error"]
    assert hits, [(d.code, d.message[:120]) for d in found]
    line = _lines("split_range_overlap")[0]
    assert hits[0].counterexample["defined"].get("k1") == f"{FILE.name}:{line}", \
        hits[0].counterexample["defined"]


@pytest.mark.parametrize("factory", [H.make_attn_static_d, H.make_self_attn])
def test_pv_reading_k_buffer_warns_that_v_is_never_read(factory):
    found = verify.check(factory("pv_v_is_k").trace())
    hits = [d for d in found if d.code == "smem.dead" and d.severity == "warning"]
    assert hits, [(d.code, d.message[:120]) for d in found]
    line = _lines("pv_v_is_k")[0]
    d = hits[0]
    assert d.counterexample["tensor"] == "V" and "sV" in d.message, str(d)
    assert f"{FILE.name}:{line}" in str(d), str(d)            # the wgmma reading sK instead
    assert "thread" in d.counterexample, d.counterexample


def test_no_dead_copy_in_the_clean_variants():
    for factory, bug in CLEAN:
        found = verify.check(factory(bug).trace())
        assert not [d for d in found if d.code == "smem.dead"], (factory.__name__, bug)


@pytest.mark.parametrize("factory", [H.make_col_stride, H.make_row_sum_unrolled])
def test_two_blocks_an_iteration_cover_the_row(factory):
    """The pair's two reductions are one row's: proven to cover it once."""
    report = verify.run(factory().trace(), include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert any(f.code == "reduce.coverage" and "each once with the reduction at" in f.subject
               and f.status == "proven" for f in report.findings)


def test_single_stage_ring_lowered_is_clean():
    """A one-slot ring keeps no wgmma group in flight after lowering (lower/pipeline.py):
    kept, it would hold the slot the producer's next step needs (pipe.deadlock)."""
    from argus.compiler import lower_only

    found = [d for d in verify.check(lower_only(H.make_gemm_unrolled()))
             if d.severity == "error"]
    assert not found, "\n".join(str(d) for d in found)
