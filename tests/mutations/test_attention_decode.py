"""Seeded bugs in the decode attention kernels (argus/kernels/attention_decode.py), lowered and
then rewritten, each caught by the invariant meant to catch it (INVARIANTS.md §4), with a
counterexample that names what it should; the unmutated kernels verify without a violation.

  * P's key index is V's row: V loaded at the packed query rows' coordinate (0) instead of the
    KV block's first key (wgmma.agree on P V: A.sk == B.sk);
  * each packed query row attends every key of its split exactly once: every KV step loads
    K's block 0, so keys 0..BN-1 are multiplied once per step and the others never
    (wgmma.k-once), in the direct kernel and in the split kernel.
"""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention_decode import decode_kernel, default_decode_schedule
from tests.mutations.corpus import ACC, Mutation, rewrite
from tests.mutations.seeded import names_thread


def decode(split: bool, causal: bool = False):
    """The decode kernel, head dim 64 (one column atom: TMA loads in order Q, K, V), lowered."""
    return lower_only(decode_kernel(64, ag.bf16, causal, split),
                      s=default_decode_schedule(64, 1))


def kv_coordinate(split: bool, index: int, coordinate):
    """The kernel with the key coordinate (dim 2) of its `index`-th TMA load replaced by
    `coordinate(loads)`, a value the producer has at that point."""
    def build():
        kernel = decode(split)
        loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
        value = coordinate(loads)
        return rewrite(kernel, O.TmaLoad,
                       lambda op: op.replace(coords=op.coords[:2] + (value,) + op.coords[3:]),
                       nth=index)
    return build


MUTATIONS = [
    Mutation(f"attention_decode/{kind}/v_rows_are_queries", "attention", 18,
             kv_coordinate(split, 2, lambda loads: loads[0].coords[2]), ("wgmma.agree",),
             ACC + ("a_element", "b_element"), ("A.sk == B.sk",),
             note="V at the packed query rows: P's key index is not V's row")
    for split, kind in ((False, "direct"), (True, "split"))
] + [
    Mutation(f"attention_decode/{kind}/k_block_fixed", "attention", 2,
             kv_coordinate(split, 1, lambda loads: loads[1].coords[3]), ("wgmma.k-once",),
             ("first", "second", "k"), ("multiplied twice",),
             note="K's block 0 at every step: keys attended repeatedly or never",
             also=("wgmma.agree",))
    for split, kind in ((False, "direct"), (True, "split"))
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_decode_mutation_is_caught(mutation):
    kernel = mutation.build()
    report = verify.run(kernel)
    found = [d for d in report.diagnostics if d.severity == "error"]
    hits = [d for d in found if d.code in mutation.codes and
            all(k in d.counterexample for k in mutation.witness) and
            all(w in str(d) for w in mutation.words) and names_thread(d, kernel)]
    assert hits, (f"{mutation.name}: expected {mutation.codes} naming {mutation.witness} / "
                  f"{mutation.words} and the thread, warpgroup or role, got {[(d.code, d.message[:120]) for d in found]}")
    for code in mutation.also:
        assert any(d.code == code for d in found), f"{mutation.name}: {code} not reported"


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_base_is_clean(split, causal):
    errors = [d for d in verify.check(decode(split, causal)) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)


def paged_v_row_fixed():
    """The paged direct kernel (head dim 64, pages of 256 keys: two 128-key blocks a page)
    with V's row in its page fixed at 0: odd blocks multiply P (keys 128..255 of the page)
    with V's rows 0..127."""
    kernel = lower_only(decode_kernel(64, ag.bf16, False, False, 256),
                        s=default_decode_schedule(64, 1, page_size=256))
    loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
    zero = loads[0].coords[2]           # Q's row coordinate: 0
    return rewrite(kernel, O.TmaLoad,
                   lambda op: op.replace(coords=op.coords[:2] + (zero,) + op.coords[3:]), nth=2)


def test_paged_v_rows_not_p_keys_is_caught():
    """P's key index is V's row over the logical key of a paged cache (wgmma.agree on the
    `key` tag: pos(page) * page_size + row)."""
    report = verify.run(paged_v_row_fixed())
    hits = [d for d in report.errors if d.code == "wgmma.agree" and "A.key == B.key" in str(d)]
    assert hits, [(d.code, d.message[:160]) for d in report.errors]


# Seeded bugs in the paged kernels' split of the keys (issue 13): a split's block range
# built wrong. `_split_blocks` is the one helper the producer and the consumers take their
# range from; a fresh KernelFunction (decode_kernel's uncached body) is traced while it is
# replaced, so no cached trace sees the mutation.
def _paged_with_blocks(split: bool, blocks_fn, causal: bool = False):
    import argus.kernels.attention_decode as AD

    real = AD._split_blocks
    AD._split_blocks = blocks_fn
    try:
        fn = AD.decode_kernel.__wrapped__(128, ag.bf16, causal, split, 128)
        return lower_only(fn, s=default_decode_schedule(128, 4, page_size=128))
    finally:
        AD._split_blocks = real


def _overlapping_splits(sp, splits, SK, block_n):
    """Each split also takes the first block of the next: that block's keys in two partials."""
    blocks = ag.cdiv(SK, block_n)
    per = ag.cdiv(blocks, splits)
    kb0 = sp * per
    return kb0, ag.maximum(ag.minimum(per + 1, blocks - kb0), 0)


def _floor_blocks(sp, splits, SK, block_n):
    """SK // block_n blocks: the sequence's last, partly filled block (page) is never read."""
    blocks = SK // block_n
    per = ag.cdiv(blocks, splits)
    kb0 = sp * per
    return kb0, ag.maximum(ag.minimum(per, blocks - kb0), 0)


@pytest.mark.parametrize("causal", [False, True])
def test_paged_split_ranges_overlap_is_caught(causal):
    """Before issue 13's fix the split paged kernel had one open finding, 'key in [0,
    |domain|)' per CTA, the same with and without this bug: no claim related two splits
    (check_wgmma._split_grid took no split range built from a length read from seq_lens, and
    the logical `key` had no extent). Now the split cover runs over the split program id and
    its disjointness claim fails, with both splits' key ranges in the counterexample."""
    report = verify.run(_paged_with_blocks(True, _overlapping_splits, causal))
    hits = [d for d in report.errors if d.code == "wgmma.k-once"
            and "the program ids' k ranges are disjoint" in str(d)]
    assert hits, [(d.code, d.message[:200]) for d in report.diagnostics]
    cx = hits[0].counterexample
    assert cx["next_lo"] < cx["lo"] + cx["domain"]        # the next split starts inside


def test_paged_direct_skips_last_block_is_reported():
    """The direct paged kernel walking SK // block_n blocks: keys past the last whole block
    are never multiplied. Before issue 13's fix no k-once claim bounded the logical key from
    below the sequence's length (only 'key in [0, |domain|)', which the short walk meets):
    no error or warning about it. Now k-once's coverage over `key_extent` (the length read
    from seq_lens) names the keys never multiplied; a warning, as every coverage shortfall
    of a register A operand is (a causal loop may stop short where A is zero)."""
    report = verify.run(_paged_with_blocks(False, _floor_blocks))
    hits = [d for d in report.diagnostics if d.code == "wgmma.k-once"
            and "are never multiplied" in str(d)]
    assert hits, [(d.code, d.message[:200]) for d in report.diagnostics]
    import re

    got = re.search(r"multiplies (\d+) values of key but the tensor has (\d+)", str(hits[0]))
    assert got and int(got[1]) < int(got[2]), str(hits[0])    # a short walk, keys left over
