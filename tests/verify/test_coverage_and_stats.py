"""store.coverage under persistent walks and grouped rasters, softmax.stats, reduce.slices and
pipe.totals over loops whose step count varies per iteration, on the library kernels
themselves (the seeded bugs of each are in tests/mutations: persistent/*, fa_qonce/*,
fa_causal/*, split_k/*).

The library GEMM's coverage used to be unknown ("the destination's variables are not an
independent product"); it is proven now tile by tile, for every shape: the unit loop walks
[0, tiles) once over the grid, the offsets inside a tile are one-to-one, and the raster maps
the units one-to-one onto the tiles (docs/verify.md)."""

from __future__ import annotations

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import AttentionSchedule, attention_kernel, default_schedule
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.kernels.split_k_sum import split_k_sum_kernel


def _codes(report, code: str, severity: str) -> list:
    return [d for d in report.diagnostics if d.code == code and d.severity == severity]


def _coverage_proven(kernel) -> list:
    report = verify.run(kernel, include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not [d for d in report.diagnostics if d.code == "store.coverage"
                and d.severity in ("unknown", "warning")], report.diagnostics
    return _codes(report, "store.coverage", "note")


def test_persistent_gemm_coverage_is_proven():
    proven = _coverage_proven(lower_only(gemm_kernel(), s=GemmSchedule()))
    subjects = " ".join(d.message for d in proven)
    # the walk over the grid, both dims inside a tile, the raster's bijection onto the tiles,
    # and no unit outside the output without spare units (implied by the bijection's claims)
    assert "walks every unit once" in subjects and "each once" in subjects
    assert "none outside the output" in subjects
    assert len(proven) == 5


def test_cluster_and_batched_gemm_coverage_is_proven():
    assert _coverage_proven(lower_only(gemm_kernel(), s=GemmSchedule(cluster_m=2)))
    assert _coverage_proven(lower_only(gemm_kernel(batched=True, b_layout="kn"),
                                       s=GemmSchedule()))


def test_tma_store_epilogue_coverage_is_proven():
    """The staged TMA-store epilogue stores a tile in column blocks from several sites, each
    the first shifted by a constant: the block index is a variable inside the tile."""
    assert _coverage_proven(lower_only(gemm_kernel(), s=GemmSchedule(epilogue="tma",
                                                                      stages=3)))
    assert _coverage_proven(lower_only(gemm_kernel(), s=GemmSchedule(
        epilogue="tma", cluster_m=2, store_cols=128, stages=3)))


def test_ping_pong_coverage_is_proven():
    """Ping-pong: the warpgroup whose turn it is stores the unit (ag.when(turn == wg)):
    exactly one of them, since the turn lies in the warpgroups' range."""
    proven = _coverage_proven(lower_only(gemm_kernel(), s=GemmSchedule(pingpong=True, bm=128,
                                                                        bn=128)))
    assert any("lets exactly one" in d.message for d in proven)


def test_partial_output_coverage_is_not_claimed():
    """A tail-split GEMM leaves its tail tiles to the sum kernel (partial_outputs=("C",)):
    counting its units against C's tiles would be a false alarm."""
    kernel = lower_only(gemm_kernel(tail_splits=2), s=GemmSchedule(tail_splits=2))
    assert ("C",) == kernel.attr("partial_outputs")
    report = verify.run(kernel)
    assert not [d for d in report.errors if d.code == "store.coverage"]
    assert any("partial output" in d.message for d in report.unknowns
               if d.code == "store.coverage")


def test_persistent_causal_attention_totals_and_coverage():
    """The causal persistent walk: the KV steps per unit depend on the unit, the totals are
    sums (equal in both roles), and the output is covered tile by tile."""
    kernel = lower_only(attention_kernel(128, ag.bf16, True, False),
                        s=AttentionSchedule(persistent=True))
    report = verify.run(kernel, include_proven=True)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert len(_codes(report, "pipe.totals", "note")) >= 3   # the Q, K and V rings
    assert _codes(report, "store.coverage", "note")


def test_causal_walk_with_producer_steps_of_another_form_is_caught():
    """The same walk whose producer forgets to clamp its causal KV block count at the
    sequence's (cdiv(q0 + BM + SK - S, BN) instead of its min with cdiv(SK, BN)) while the
    consumers clamp: the sums differ iteration by iteration (a last tile past the sequence),
    and the finding names the iteration and both counts."""
    from argus.ir import ops as O
    from tests.mutations.corpus import rewrite

    kernel = lower_only(attention_kernel(128, ag.bf16, True, False),
                        s=AttentionSchedule(persistent=True))
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    role = next(op for op in kernel.body.ops if isinstance(op, O.RoleOp) and
                op.name == "producer")
    unit_loop = next(op for op in role.body.walk() if isinstance(op, O.For))
    kv_loop = next(op for op in unit_loop.body.walk() if isinstance(op, O.For)
                   and op is not unit_loop)
    causal_min = defs[kv_loop.stop.id]
    assert isinstance(causal_min, O.Arith) and causal_min.fn == "min"
    bad = rewrite(kernel, O.For, lambda op: op.replace(stop=causal_min.rhs)
                  if op.var.id == kv_loop.var.id else op)
    report = verify.run(bad)
    totals = [d for d in report.errors if d.code == "pipe.totals"]
    assert totals, [(d.code, d.message[:100]) for d in report.diagnostics]
    assert any("in iteration" in d.message and
               "producer_steps_in_iteration" in d.counterexample for d in totals)


def test_library_attention_softmax_and_masks_are_proven():
    """softmax.stats finds nothing in the library kernel; its causal mask assertions (the
    mask keeps exactly the keys a query may see, the loop reaches them) are proven."""
    for head_dim, causal in ((64, False), (128, True)):
        kernel = lower_only(attention_kernel(head_dim, ag.bf16, causal, False),
                            s=default_schedule(head_dim, causal))
        report = verify.run(kernel, include_proven=True)
        assert not report.errors, "\n".join(str(d) for d in report.errors)
        asserts = _codes(report, "tag.assert", "note")
        # each assertion of the kernel proven, wherever it runs (the FA3-order loop, the
        # default at head dim 128 since 7abf2ec, runs the mask's at its peeled first step too)
        assert len({d.loc.line for d in asserts}) == (3 if causal else 2), \
            [d.message for d in asserts]
        assert not _codes(report, "tag.assert", "unknown")


def test_split_k_sum_adds_every_slice_once():
    report = verify.run(split_k_sum_kernel(ag.bf16, 4).trace(), include_proven=True)
    assert not report.errors
    assert _codes(report, "reduce.slices", "note")
