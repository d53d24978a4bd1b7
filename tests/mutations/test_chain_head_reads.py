"""The newest value of a wgmma accumulator chain read inside its reduction loop by an op that
is not part of the chain (h316; the h311 review's "k-once does not check reads of the chain
head by non-chain ops inside the loop"). Such a read sees a partial product: the k of the
iterations still to come are missing from it, and what it computes reaches the output with
some k dropped or counted twice. Seeded in the attention kernel (argus/kernels/attention.py,
mutated as test_attention_rescale_late_chain.py does: FA3's order with the late rescale, the
hd128 default, and the plain loop, one P V site) and in a ring GEMM
(chain_read_kernels.py):

  * snapshot: a copy of the accumulator taken in the loop before the step's wgmma, and the
    epilogue normalizes and stores the copy: the last block(s) never reach the output;
  * twice: the step's old accumulator added back after the wgmma (attention: into the late
    rescale, `o = (o + o_prev) * alpha`): every earlier block is counted again;
  * store_mid: the partial accumulator also stored to the output inside the loop.

Which check reports each is asserted below (wgmma.k-once: "read mid-reduction" for a read in
the loop, or the peeled P V's own coverage once the chain breaks; store.once for the extra
store); the correct kernels stay proven."""

from __future__ import annotations

from pathlib import Path

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention as A
from tests.loading import load_edited, load_script
from tests.mutations import chain_read_kernels as G
from tests.mutations import seeded as S

BENCH = load_script("gpu_attention_bench")

_ZEROS = "                o = ag.zeros((ROWS, D))\n"
_FA3_STEP = ("                                    if s.packed_p:   # the step's fp32 P_j "
             "(packed below)")
_RESCALE = "                                        o = o * alpha\n"
_PLAIN_PV = ("                                    p, alpha, m_i, l_i = softmax(sc, j, m_i, l_i)\n"
             "                                    with v_pipe.consume() as vs:\n"
             "                                        o = pv(p, vs, o, alpha)\n")
_NORMALIZE = "                o = o * (1.0 / ag.where(no_key, 1.0, l_i))"
_EPILOGUE = "                if s.epilogue == \"tma\":\n"
_INDENT = " " * 36       # the K step's body, in the fa3 loop and in the plain loop alike
_STORE = ("store_tile(O, Unit((b, h), m, 0), wg, o, bm=BM, bn=D, rows=ROWS, "
          "finish=lambda t: t.to(out_dt))\n")


def _edits(loop: str, bug: str | None) -> list[tuple[str, str]]:
    """(text, replacement) pairs of the attention source for `bug` in `loop` ("fa3": the late
    rescale's loop, "plain": the plain loop)."""
    if bug is None:
        return []
    step = _FA3_STEP if loop == "fa3" else _PLAIN_PV
    indent = _INDENT
    if bug == "snapshot":
        return [(_ZEROS, _ZEROS + "                o_snap = ag.zeros((ROWS, D))\n"),
                (step, indent + "o_snap = o + 0.0\n" + step),
                (_NORMALIZE, _NORMALIZE.replace("o * (", "o_snap * ("))]
    if bug == "twice" and loop == "fa3":
        return [(step, indent + "o_prev = o + 0.0\n" + step),
                (_RESCALE, _RESCALE.replace("o * alpha", "(o + o_prev) * alpha"))]
    if bug == "twice":
        return [(step, indent + "o_prev = o + 0.0\n" + step
                 + "                                        o = o + o_prev\n")]
    if bug == "store_mid":
        return [(step, indent + _STORE + step)]
    raise ValueError(bug)


def _attention(tmp_path, loop: str, bug: str | None):
    module = load_edited(A, _edits(loop, bug), tmp_path / f"attention_{loop}_{bug or 'same'}.py")
    s = BENCH.variant_schedule("default+olate" if loop == "fa3" else "plain", 128, False, 16384)
    assert s.rescale_late == (loop == "fa3")
    return lower_only(module.attention_kernel(128, ag.bf16, False, False), s=s)


def _not_proven(report, code):
    return [f for f in report.findings if f.code == code and f.status != "proven"]


_READ = "the accumulator is read only once its reduction is finished"
FILE = Path(G.__file__)


def _read_mid_reduction(found):
    return [f for f in found if f.status == "violated" and _READ in f.subject]


@pytest.mark.parametrize("loop", ["fa3", "plain"])
def test_the_correct_attention_loops_prove_k_once(tmp_path, loop):
    assert _not_proven(verify.run(_attention(tmp_path, loop, None)), "wgmma.k-once") == []


@pytest.mark.parametrize("loop", ["fa3", "plain"])
def test_a_snapshot_of_o_stored_by_the_epilogue_is_refused(tmp_path, loop):
    """Missed before h316 in both loops (zero findings): the copy of O taken in the loop is
    read by an op outside the chain; in the fa3 loop O is the P V's own in-place operand, no
    value `before` the peeled P V's, so `_one_continuation` never looked at it."""
    found = _not_proven(verify.run(_attention(tmp_path, loop, "snapshot")), "wgmma.k-once")
    hits = _read_mid_reduction(found)
    assert hits and all(f.code == "wgmma.k-once" for f in hits), found
    # the finding names the line of the copy (`o_snap = o + 0.0`, inserted by _edits)
    assert any(f"attention_{loop}_snapshot.py:" in f.message and "o_snap" not in f.message
               for f in hits), hits


def test_the_old_o_added_back_in_the_fa3_loop_breaks_the_chain(tmp_path):
    """Caught before h316 too: `o = (o + o_prev) * alpha` assigns a value made outside the
    chain between the sites (56dcc459's rule), so the peeled P V's k-once stands alone and
    its coverage is violated; now the read of O by `o + o_prev` is reported as well."""
    found = _not_proven(verify.run(_attention(tmp_path, "fa3", "twice")), "wgmma.k-once")
    assert any("over 0 loop(s): covers [0, K)" in f.subject and f.status == "violated"
               for f in found), found
    assert _read_mid_reduction(found), found


def test_the_old_o_added_back_in_the_plain_loop_is_refused(tmp_path):
    """Missed before h316: one P V site, so no chain of sites was asked anything."""
    found = _not_proven(verify.run(_attention(tmp_path, "plain", "twice")), "wgmma.k-once")
    assert _read_mid_reduction(found), found


@pytest.mark.parametrize("loop", ["fa3", "plain"])
def test_a_partial_o_stored_in_the_loop_is_refused(tmp_path, loop):
    """Caught before h316 by store.once (O written by every step and again after the loop)
    and softmax.stats (the stored O is relative to a running max); k-once now reports the
    read of the partial O too."""
    report = verify.run(_attention(tmp_path, loop, "store_mid"))
    assert [f for f in _not_proven(report, "store.once") if f.status == "violated"]
    assert _read_mid_reduction(_not_proven(report, "wgmma.k-once"))


def test_the_correct_ring_gemm_and_promoted_sum_verify_clean():
    S.assert_clean(G.make_gemm_chain_read().trace())
    S.assert_clean(G.make_promoted_chain_read().trace())


@pytest.mark.parametrize("bug", ["snapshot", "twice"])
def test_a_gemm_accumulator_read_in_its_k_loop_is_caught_at_its_line(bug):
    """Both missed before h316: one wgmma site, k-once proven."""
    placed = S.assert_caught(G.make_gemm_chain_read(bug).trace(), ("wgmma.k-once",), FILE, bug)
    assert all(_READ in d.message for d in placed), placed


def test_a_gemm_partial_stored_in_its_k_loop_is_caught():
    """Caught before h316 by store.once; k-once now names the store's read too."""
    S.assert_caught(G.make_gemm_chain_read("store_mid").trace(), ("store.once",), FILE,
                    "store_mid")
    S.assert_caught(G.make_gemm_chain_read("store_mid").trace(), ("wgmma.k-once",), FILE,
                    "store_mid")


def test_a_snapshot_of_a_promoted_sum_is_caught_at_its_line():
    """Missed before h316: promotion.py refuses the sum (an observer inside the loop), and the
    per-site k-once it falls back to counted the partial over the sum's loop and proved it."""
    placed = S.assert_caught(G.make_promoted_chain_read("snapshot").trace(), ("wgmma.k-once",),
                             FILE, "snapshot")
    assert any("promoted into" in d.message for d in placed), placed


def test_a_snapshot_of_a_promoted_sum_into_a_variable_from_its_zeros_is_caught():
    """Missed by h316 (zero findings): the sum's variables were every `var` whose chain starts
    at the sum's zeros tile, the snapshot's too, so `snap = acc` in an ag.when block read as
    the sum assigned to one of its own variables (promotion.py refuses the group; the per-site
    fallback proves the partial)."""
    placed = S.assert_caught(G.make_promoted_chain_read("alias_snapshot").trace(),
                             ("wgmma.k-once",), FILE, "alias_snapshot")
    assert any("promoted into" in d.message for d in placed), placed


def test_the_old_promoted_sum_added_back_is_caught():
    """Caught before h316: the second assignment into the sum is no promotion
    (`_promoted_into` gives None), so the site counts over no loop and its coverage fails."""
    errors = [d for d in verify.check(G.make_promoted_chain_read("twice").trace())
              if d.severity == "error" and d.code == "wgmma.k-once"]
    assert any("over 0 loop(s)" in d.message for d in errors), errors


_SPLIT_ZEROS = "    acc1 = ag.zeros((rows, width), ag.f32)\n"
_SPLIT_PROMOTE0 = "                acc0 = acc0 + (first if plain else first * scale0)\n"
_SPLIT_RETURN = "    return acc0, acc1\n"


def _split_fp8(tmp_path, bug: str | None):
    """The fp8 block-scaled GEMM's split promoting loop (gemm_fp8.py `split_promoted_mma`,
    n_split=2, serial form), `snapshot`: half 0's sum copied before each block's promotion
    and the copy returned (the last block of half 0 never reaches C)."""
    from argus.kernels import gemm_fp8
    edits = [(_SPLIT_ZEROS, _SPLIT_ZEROS + "    snap0 = ag.zeros((rows, width), ag.f32)\n"),
             (_SPLIT_PROMOTE0, " " * 16 + "snap0 = acc0 + 0.0\n" + _SPLIT_PROMOTE0),
             (_SPLIT_RETURN, "    return snap0, acc1\n")] if bug == "snapshot" else []
    module = load_edited(gemm_fp8, edits, tmp_path / f"gemm_fp8_split_{bug or 'same'}.py")
    s = module.Fp8GemmSchedule(bn=256, stages=4, promote=True, n_split=2)
    return lower_only(module.gemm_fp8_blockscaled_kernel(ag.bf16), s=s)


def test_the_split_fp8_loop_verifies_clean(tmp_path):
    report = verify.run(_split_fp8(tmp_path, None))
    assert not report.errors and not report.unknowns, report.errors + report.unknowns


def test_a_snapshot_of_a_split_fp8_sum_is_refused(tmp_path):
    """Missed before h316 (zero findings), as the serial promoted sum above."""
    found = _not_proven(verify.run(_split_fp8(tmp_path, "snapshot")), "wgmma.k-once")
    hits = _read_mid_reduction(found)
    assert hits and any("promoted into" in f.message for f in hits), found


def test_a_rescale_inside_an_ag_when_block_continues_the_chain():
    """`with ag.when(k == 0): acc = acc * 1.0` in the K loop: the block's variable takes acc
    and is assigned back, no read of a partial. Refused by h316's rule (the variable was no
    value of the chain, so its initial value read acc mid-reduction) until _chain_values."""
    S.assert_clean(G.make_gemm_region_rescale().trace())


def test_a_snapshot_inside_an_ag_when_block_is_still_caught():
    placed = S.assert_caught(G.make_gemm_region_rescale("snapshot").trace(),
                             ("wgmma.k-once",), FILE, "snapshot")
    assert all(_READ in d.message for d in placed), placed



def _assert_read_at_bug_line(bug: str) -> None:
    """The interval kernel with `bug` has a read-mid-reduction finding that names one of the
    BUG lines as the read (the findings, not the diagnostics: at the wgmma's line the
    diagnostic shown is the coverage finding promotion.py's refusal of the group leaves)."""
    found = _read_mid_reduction(_not_proven(
        verify.run(G.make_interval_chain_read(bug).trace()), "wgmma.k-once"))
    lines = S.bug_lines(FILE, bug)
    assert lines and any(f"is read at {FILE.name}:{n} " in f.message
                         for f in found for n in lines), (lines, found)

def test_the_interval_promoted_loop_verifies_clean():
    """Each group's first wgmma overwrites the partial, the promotion reads the group's own
    sum: the partial-read rule skips the loop (`_overwritten_each_iteration`), promotion.py
    takes the group."""
    S.assert_clean(G.make_interval_chain_read().trace())


@pytest.mark.parametrize("bug", ["guarded", "nested"])
def test_a_read_before_an_overwrite_not_on_every_path_is_caught_at_its_line(bug):
    """The overwrite under `ag.when(g == 0)` or in a nested loop: an iteration may skip it,
    so the partial is carried across groups and the read at the top of the group sees a
    partial. Missed if the exemption took an overwrite in a block or a nested loop as one
    on every path (the coverage findings promotion.py's refusal leaves are not the read)."""
    _assert_read_at_bug_line(bug)


def test_a_read_after_the_overwrite_before_the_group_ends_is_caught_at_its_line():
    """`seen = part + 0.0` between the group's overwriting wgmma and its second block: the
    loop overwrites the partial on every path, but the read sees the group half summed.
    Missed by the exemption of eacfd24c (it skipped the loop whatever stood after the
    overwrite; only the coverage findings of promotion.py's refusal were left)."""
    _assert_read_at_bug_line("mid_group")


def test_a_read_at_the_top_of_the_group_is_no_partial_read():
    """The copy at the top of a group, before its overwrite, holds the previous group's
    whole sum (what the promotion read): the partial-read rule takes it as finished
    (`_read_before_accumulation`). The kernel is refused all the same, by coverage: promotion.py
    takes no group with an observer of the partial (so a change that made this a read
    finding, or made the kernel clean, shows here)."""
    found = _not_proven(verify.run(G.make_interval_chain_read("top_read").trace()),
                        "wgmma.k-once")
    assert found and not _read_mid_reduction(found), found
    assert all("covers [0, K)" in f.subject for f in found), found
