"""store.once, store.coverage, pipe.release, tma.box and tma.swizzle name the role, warpgroup
and thread that run the reported op themselves, from the op's site: store.once both copies'
holders (W.context of each store site, the accumulator's holder where the tile is one),
store.coverage the store's role and running threads (W.by_site: its counterexample is a count
or a shape, not one instance), pipe.release the reader (W.context, or the site's role for a
read outside any consume step), tma.box / tma.swizzle the copy's issuer (the producer's
elected thread), store.coverage under a condition on data the store's group, reduce.slices
the sum's store, wgmma.k-once the wgmma's warpgroup, pipe.totals the role that waits forever, sync.acc and sync.elect the
role the checker walks (W.issuer).
Before, these named no thread in the message, and the witness got one only
from names.who's lookup of the finding's line, switched off here (as in
test_findings_name_who.py) so that only the rules' own words count."""

from __future__ import annotations

import pytest

from argus import verify
from argus.verify import names
from tests.mutations.corpus import CORPUS

BY_NAME = {m.name: m for m in CORPUS}

CASES = [
    # two warpgroups store one row block (no wg offset): both holders named
    ("gemm/store_missing_wg_offset", "store.once",
     ["(role 'consumer', warpgroup 0, thread", "(role 'consumer', warpgroup 1, thread"]),
    # a count: the store's role and its threads
    ("gemm/grid_too_small", "store.coverage", ["role 'consumer', warpgroup", "every thread"]),
    ("gemm/read_wrong_stage", "pipe.release", ["(role 'consumer', warpgroup 0, thread 0)"]),
    ("lowered/wgmma_after_consume", "pipe.release", ["role 'consumer', warpgroup"]),
    ("lowered/tma_box_half", "tma.box", ["role 'producer', warpgroup 0, the elected thread"]),
    ("lowered/tma_swizzle_64", "tma.swizzle",
     ["role 'producer', warpgroup 0, the elected thread"]),
    # a condition on a loaded flag: the store's group skips it (no warp specialization)
    ("elementwise/store_if_flag", "store.coverage", ["(thread 0 of the CTA)"]),
    # the sum's store (W.by_site of its store site)
    ("split_k_loop/loop_skips_last", "reduce.slices", ["(every thread of the CTA (thread 0))"]),
    ("gemm/k_double_count", "wgmma.k-once", ["(role 'consumer', warpgroup"]),
    ("gemm/consumer_skips_last_k", "wgmma.k-once", ["(role 'consumer', warpgroup"]),
    # the op reading the view (W.context of its site)
    ("gemm/view_out_of_buffer", "smem.bounds", ["(role 'consumer', warpgroup"]),
    # the wgmma's role beside the accumulator thread; a descriptor start: the wgmma's site
    ("lowered/desc_swizzle_64", "wgmma.smem-layout",
     ["for accumulator row", "(role 'consumer', warpgroup each of 0..1)"]),
    ("lowered/smem_misaligned", "wgmma.smem-layout",
     ["(role 'consumer', warpgroup each of 0..1, every thread (thread 0))"]),
    # the walk's role (sync's checker has no solver model: W.issuer of the role walked)
    ("lowered/wgmma_after_consume", "sync.acc",
     ["(role 'consumer', warpgroup each of 0..1, every thread (thread 0))"]),
    ("lowered/elect_around_consume", "sync.elect",
     ["(role 'consumer', warpgroup each of 0..1, the 1 elected thread(s) (thread 0))"]),
    # who waits forever: the waiting role's step site
    ("gemm/consumer_skips_last_k", "pipe.totals",
     ["waits forever", "(role 'producer', warpgroup 0, the elected thread (thread 0))"]),
]


@pytest.fixture
def no_line_lookup(monkeypatch):
    monkeypatch.setattr(names.Names, "who", lambda self, loc: {})


@pytest.mark.parametrize("name,code,words", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_site_findings_name_who(no_line_lookup, name, code, words):
    errs = [d for d in verify.check(BY_NAME[name].build())
            if d.severity == "error" and d.code == code]
    assert errs, name
    hit = [d for d in errs if all(w in d.message for w in words)]
    assert hit, [d.message for d in errs]
    wit = hit[0].counterexample
    assert "thread" in wit and "threads" in wit, wit
    assert ("role" in wit) == ("role '" in " ".join(words)), wit


def test_multicast_overlap_names_the_issuer(no_line_lookup):
    """smem.race of two TMA copies (cluster multicast): the producer's elected thread."""
    errs = [d for d in verify.check(BY_NAME["cluster/multicast_overlap"].build())
            if d.severity == "error" and d.code == "smem.race"]
    assert errs
    assert "(role 'producer', warpgroup 0, the elected thread (thread 0))" in errs[0].message, \
        errs[0].message
    assert errs[0].counterexample.get("role") == "producer", errs[0].counterexample


def test_an_unordered_pair_names_both_roles_threads(no_line_lookup):
    """smem.race of a generic write and a read in two roles: each side's role, warpgroup and
    thread, in the words and in the witness's first / second."""
    from argus.compiler import lower_only
    from tests.unit.test_smem_gather import gather_across_roles

    report = verify.run(lower_only(gather_across_roles))
    race = [d for d in report.errors if d.code == "smem.race"]
    assert race, "\n".join(map(str, report.errors))
    msg, wit = race[0].message, race[0].counterexample
    assert "role 'writer', warpgroup 0, thread 0 (write at" in msg, msg
    assert "role 'reader', warpgroup 0, thread 0 (read at" in msg, msg
    assert wit["first"]["thread"] == 0 and wit["second"]["role"] == "reader", wit


@pytest.mark.parametrize("ct,code,words", [
    ({"CELL": "block"}, "atomic.tickets", "(thread 0 of the CTA)"),
    ({"WRAP_EXTRA": 1}, "atomic.tickets", "(thread 0 of the CTA)"),
    ({"GUARD": -2}, "atomic.tickets", "(thread 0 of the CTA)")])
def test_counter_findings_name_who_runs_the_atomic(no_line_lookup, ct, code, words):
    """atomic.tickets (the counts and the merge): who runs the counter's atomic (W.context of
    its site; no warp specialization here: the CTA's threads)."""
    from tests.unit.test_atomics import last_writes

    r = verify.run(last_writes, **ct)
    errs = [d for d in r.errors if d.code == code]
    assert errs and words in errs[0].message, [d.message for d in errs]
    assert errs[0].counterexample.get("thread") == 0, errs[0].counterexample


def test_a_short_counter_tensor_names_who_stores(no_line_lookup):
    """store.coverage's counter element outside the counter tensor (store_guards): the
    store's instance (W.context; W.placed)."""
    from tests.unit.test_atomics import _short_counters

    r = verify.run(_short_counters)
    errs = [d for d in r.errors if d.code == "store.coverage" and "lies outside" in d.message]
    assert errs and "(thread 0 of the CTA)" in errs[0].message, [d.message for d in r.errors]


@pytest.mark.parametrize("name,code,site", [
    # the shared-memory plan places the buffer: the allocation's line and the user's name
    ("lowered/smem_misaligned", "smem.align", "shared-memory plan places sB (allocated at "),
    # the launch sizes the grid: the ag.grid line and the extent's name
    ("cluster/grid_not_multiple", "grid.cluster", "the launch sizes the grid at ")])
def test_plan_and_launch_findings_say_no_thread_runs_them(no_line_lookup, name, code, site):
    """smem.align and grid.cluster judge what no thread runs (the compiler's shared-memory
    plan, the host's launch): they say so explicitly, naming the allocation / launch site,
    and the witness's thread is None (not a thread a line lookup would have guessed)."""
    errs = [d for d in verify.check(BY_NAME[name].build())
            if d.severity == "error" and d.code == code]
    assert errs, name
    d = errs[0]
    assert "(no thread runs this: " in d.message and site in d.message, d.message
    wit = d.counterexample
    assert "thread" in wit and wit["thread"] is None and wit["role"] is None, wit
    assert wit["threads"].startswith("none: ") and "kernels.py:" in wit["threads"], wit


@pytest.mark.parametrize("name", ["gemm/b_wrong_k", "gemm/a_swapped_coords", "moe/expert_mod",
                                  "attention/v_wrong_rows", "batched_kn/b_batch_zero"])
def test_wgmma_agree_names_the_role_and_warpgroup(no_line_lookup, name):
    """wgmma.agree: the accumulator's holder with the site's role and the solver's warpgroup
    (W.context), in the words, where the message said only "warpgroup thread t"."""
    errs = [d for d in verify.check(BY_NAME[name].build())
            if d.severity == "error" and d.code == "wgmma.agree"]
    assert errs, name
    d = errs[0]
    wit = d.counterexample
    assert f"role 'consumer', warpgroup {wit['warpgroup']}, thread {wit['thread']} (warp " \
        in d.message, d.message


@pytest.mark.parametrize("bug,words", [("twice", "reaches acc twice"),
                                       ("skipped", "never reach acc")])
def test_promotion_findings_name_who_promotes(no_line_lookup, bug, words):
    """promotion.py's wgmma.k-once decoders (a partial promoted twice, the last partial never
    promoted): the promotion's role, warpgroup and thread (W.context of its site, W.placed)."""
    from argus.compiler import lower_only
    from tests.verify.test_promotion_k_once import _overlapped

    report = verify.run(lower_only(_overlapped(bug)))
    errs = [d for d in report.errors if d.code == "wgmma.k-once" and words in d.message]
    assert errs, "\n".join(map(str, report.errors))
    d = errs[0]
    wit = d.counterexample
    assert wit.get("role") == "consumer" and wit.get("thread") == 0, wit
    assert f"(role 'consumer', warpgroup {wit['warpgroup']}, thread 0)" in d.message, d.message
