"""The third held-out style probe (issue 13, "Verifier 2"; tests/mutations/probe3_kernels.py):
kernels written from the issue's class list in spellings the corpus lacks. Each bug must be
an error naming a thread or warpgroup and pointing at its `# BUG:<name>` line (the line a fix
edits); each correct variant must verify without an error or warning (tests/mutations/
seeded.py).

What it found, each fixed in the verifier (the tests marked NEW failed before the fix):
  * fill.identity followed a fill only while it stayed a known constant: LayerNorm's
    variance pass `d = x - mean` of a 0-filled x, squared and summed, added mean^2 per
    padding lane and was accepted. A fill turned into another finite value by a pointwise
    op with other data (FINITE) now reaches the reduction as an obligation over the loads'
    own lanes (check_fills: in bounds at the reduced element, or stored nowhere), and the
    finding names the op where it stopped being the identity;
  * store.coverage was not attempted for two stores of one tile at one place under
    different `ag.when`s (a full-tile store and a tail store): "coverage is only checked for
    one". check_stores._alternatives counts the one tile and claims that at every instance
    storing an in-bounds element one site's conditions hold (store_guards.alternatives), so
    a full-tile predicate `r0 + ROWS < M` (for <=) is caught;
  * reduce.slices read a split-K reduction only with a constant split count and a load
    before the loop: a runtime-count loop `acc = zeros; for s in ag.range(S): acc += P[s]`
    starting at 1, or adding P[0] every iteration, was accepted (check_sums: a loop's one
    load is a sum, and the dims the output lacks are the slice dims);
  * reduce.coverage claimed nothing for a loop whose trip count depends on the CTA (the
    causal diagonal): a key-block bound rounded down, `(q0 + ROWS) // BN`, was accepted.
    check_reduce._skipped_masked claims that every position an iteration past the stop
    would reduce is masked by the tile's own `ag.where` (or past the row);
  * a 'same' 1-d convolution whose input and output share the dim name L (allowed: a name
    is a size) was a false store.coords error: the window sum's l is a set. A field a
    reduction made a set is now claimed to contain the destination (check_stores._window);
  * that convolution's padding gathered as 1.0 (other=1.0) and multiplied by the in-bounds
    weight row was accepted: fill.identity computed 1.0 * 0.0 as if the weight's (never read)
    0 fill met every padding lane. For operands whose masked values come from different
    loads, the patterns "one masked, the other data" that change the value are recorded
    (check_fills._lanes) and a reduction relying on shared lanes claims no element meets
    them (`_together`; `exp(x - m)` with an in-bounds m stays proven: row_logsumexp).
Left: docs/verify.md, "Third held-out style probe (2026-12-05)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutations import probe3_kernels as P
from tests.mutations import seeded as S

FILE = Path(P.__file__)

BUGS = [
    (P.make_layernorm_tiled, "var_skips_last", ("reduce.coverage",)),
    (P.make_layernorm_tiled, "var_pad_not_masked", ("fill.identity",)),          # NEW
    (P.make_softmax_peeled, "peeled_fill_zero", ("fill.identity",)),
    (P.make_softmax_peeled, "loop_from_two", ("reduce.coverage",)),
    (P.make_splitk_reduce, "skips_slice_zero", ("reduce.slices",)),              # NEW
    (P.make_splitk_reduce, "same_slice", ("reduce.slices",)),                    # NEW
    (P.make_causal_row_softmax, "blocks_floor", ("reduce.coverage",)),           # NEW
    (P.make_causal_row_softmax, "diag_excluded", ("tag.assert",)),
    (P.make_mid_axis_sum, "rows_floor", ("reduce.coverage",)),
    (P.make_mid_axis_sum, "max_fill_zero", ("fill.identity",)),
    (P.make_gemm_ring, "k_tiles_floor", ("wgmma.k-once",)),
    (P.make_gemm_ring, "b_from_a", ("wgmma.provenance",)),
    (P.make_gemm_short_k, "consume_one_short", ("wgmma.k-once", "pipe.totals")),
    (P.make_cluster_pair, "grid_not_cluster_multiple", ("grid.cluster", "store.coverage")),
    (P.make_tail_epilogue, "full_pred_strict", ("store.coverage",)),             # NEW
    (P.make_combine_loop, "weight_slot_zero", ("ew.broadcast",)),
    (P.make_conv1d_taps, "pad_reads_one", ("fill.identity",)),                  # NEW
]

CLEAN = [
    ("layernorm_tiled", lambda: P.make_layernorm_tiled()),
    ("layernorm_fixed", lambda: P.make_layernorm_fixed()),      # unmasked x - mean, no tail
    ("softmax_peeled", lambda: P.make_softmax_peeled()),
    ("splitk_reduce", lambda: P.make_splitk_reduce()),
    ("causal_row_softmax", lambda: P.make_causal_row_softmax()),
    ("mid_axis_sum", lambda: P.make_mid_axis_sum()),
    ("gemm_ring_1_stage", lambda: P.make_gemm_ring(stages=1)),
    ("gemm_ring_3_stages", lambda: P.make_gemm_ring(stages=3)),
    ("gemm_short_k_4_stages_2_tiles", lambda: P.make_gemm_short_k(stages=4)),
    ("gemm_short_k_1_stage", lambda: P.make_gemm_short_k(stages=1)),
    ("cluster_pair", lambda: P.make_cluster_pair()),
    ("tail_epilogue", lambda: P.make_tail_epilogue()),
    ("combine_loop", lambda: P.make_combine_loop()),
    ("conv1d_taps_same_names", lambda: P.make_conv1d_taps()),   # NEW: was store.coords
]


@pytest.mark.parametrize("factory,bug,codes", BUGS, ids=[b for _, b, _ in BUGS])
def test_probe3_bug_is_caught_at_its_line(factory, bug, codes):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


@pytest.mark.parametrize("name,build", CLEAN, ids=[n for n, _ in CLEAN])
def test_probe3_variant_is_clean(name, build):
    S.assert_clean(build().trace())


