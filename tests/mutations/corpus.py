"""The mutation corpus: seeded bugs in GEMM, attention and MoE kernels, each with the invariant
that must catch it and what its counterexample must name.

Two kinds of mutation:
  * DSL mutations (`dsl`): the bug is written in the kernel (a wrong TMA coordinate, operand
    slice, stage, loop bound, reduction axis, expert index …), marked `# BUG:<name>` in
    tests/mutations/kernels.py;
  * lowered-IR mutations (`lowered`): bugs the DSL makes impossible by construction but a
    lowering pass could introduce (parity and stage expressions, per-tile counter reset,
    expect-tx bytes, arrival counts, descriptor fields, TMA swizzle/box, the smem plan, proxy
    fences): the base kernel is traced and lowered with argus.lower, then one field is
    rewritten.

Every entry documents how the bug looks to a user: the diagnostic code, the words its message
must contain, the witness keys (thread, register, element, iteration …) it must name, and the
source line (the `# BUG` marker) it must point at — in its location or its witness.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from argus.ir import ops as O
from argus.ir.core import Kernel, Op, Region
from tests.mutations import kernels as K

KERNELS_FILE = Path(K.__file__)


@dataclass(frozen=True)
class Mutation:
    name: str
    family: str                      # gemm / attention / moe / elementwise
    bug_class: int                   # INVARIANTS.md §4 row (0: not in the table)
    build: Callable[[], Kernel]
    codes: tuple[str, ...]           # the diagnostic must have one of these codes
    witness: tuple[str, ...] = ()    # keys the counterexample must contain
    words: tuple[str, ...] = ()      # the message must contain each of these
    marker: str | None = None        # `# BUG:<marker>` line the diagnostic points at
    note: str = ""
    also: tuple[str, ...] = ()       # codes that must be reported too (same bug, other view)


def marker_lines(marker: str) -> list[int]:
    lines = KERNELS_FILE.read_text().splitlines()
    return [i + 1 for i, line in enumerate(lines) if re.search(rf"BUG:{marker}\b", line)]


# ----------------------------------------------------------------------------- helpers


def traced(factory, bug, **kw) -> Callable[[], Kernel]:
    return lambda: factory(bug, **kw).trace()


def lowered(factory, **kw) -> Kernel:
    from argus.compiler import lower_only

    return lower_only(factory(None, **kw))


def ring(factory, bug, **kw) -> Callable[[], Kernel]:
    """A DSL mutation, lowered: loops of loads go through lower/prefetch.py's register ring."""
    from argus.compiler import lower_only

    return lambda: lower_only(factory(bug, **kw))


def rewrite(kernel: Kernel, cls, fn: Callable[[Op], Op], nth: int | None = None) -> Kernel:
    """Replace every op of class `cls` (or only the nth one, in program order) by fn(op); an
    op for which fn returns None is removed."""
    count = [0]

    def region(r: Region) -> Region:
        return Region(tuple(x for x in (visit(op) for op in r.ops) if x is not None))

    def visit(op: Op) -> Op:
        changes = {f.name: region(getattr(op, f.name)) for f in op.spec_fields()
                   if isinstance(getattr(op, f.name), Region)}
        if changes:
            op = dataclasses.replace(op, **changes)
        if isinstance(op, cls):
            i = count[0]
            count[0] += 1
            if nth is None or i == nth:
                return fn(op)
        return op
    return dataclasses.replace(kernel, body=region(kernel.body))


def lowered_mutation(factory, cls, fn, nth=None, attrs=None, **kw) -> Callable[[], Kernel]:
    def build():
        k = rewrite(lowered(factory, **kw), cls, fn, nth)
        return k.with_attrs(**attrs(k)) if attrs else k
    return build


def _unelected(kernel: Kernel) -> Kernel:
    """Every role's `elect` dissolved into its body (the decision lower/elect.py makes, undone)."""
    def role(op: O.RoleOp) -> O.RoleOp:
        ops = [x for inner in op.body.ops
               for x in (inner.body.ops if isinstance(inner, O.Elect) else (inner,))]
        return op.replace(body=Region(tuple(ops)))
    return rewrite(kernel, O.RoleOp, role)


def _shift_plan(kernel: Kernel, delta: int, which: int = 1) -> dict:
    plan = list(kernel.attr("smem_plan"))
    vid, off, nbytes, align = plan[which]
    plan[which] = (vid, off + delta, nbytes, align)
    return {"smem_plan": tuple(plan), "smem_bytes": kernel.attr("smem_bytes") + delta}


def _wgmma_moved_after_consume() -> Kernel:
    """The lowered GEMM with each consume step's wgmma moved right after the step: it reads
    the stage after the step released it. (Written in the DSL, `st` used after the `with`
    block, the kernel is refused at trace time: tests/unit/test_loop_carried.py.)"""
    kernel = lowered(K.make_gemm)

    def region(r: Region) -> Region:
        out: list[Op] = []
        for op in r.ops:
            subs = {f.name: region(getattr(op, f.name)) for f in op.spec_fields()
                    if isinstance(getattr(op, f.name), Region)}
            op = dataclasses.replace(op, **subs) if subs else op
            if isinstance(op, O.Consume):
                moved = [x for x in op.body.ops if isinstance(x, O.Wgmma)]
                out.append(op.replace(body=Region(tuple(x for x in op.body.ops
                                                        if not isinstance(x, O.Wgmma)))))
                out.extend(moved)
            else:
                out.append(op)
        return Region(tuple(out))
    return dataclasses.replace(kernel, body=region(kernel.body))


def _gemm_tma_epilogue():
    from argus.compiler import lower_only
    from argus.kernels import gemm as G

    return lower_only(G.gemm, s=G.GemmSchedule(epilogue="tma", stages=3))


def _gemm_kn():
    from argus.compiler import lower_only
    from argus.kernels import gemm as G

    return lower_only(G.gemm_kernel(b_layout="kn"))


def _library_gemm():
    from argus.compiler import lower_only
    from argus.kernels import gemm as G

    return lower_only(G.gemm)


def _pingpong_gemm():
    """The library's 128x128 ping-pong GEMM: its K steps are whole steps (two m64 groups,
    wait_group 2 before the previous slot's release)."""
    from argus.compiler import lower_only
    from argus.kernels import gemm as G

    return lower_only(G.gemm, s=G.GemmSchedule(bm=128, bn=128, stages=3, pingpong=True,
                                               num_sms=4))


def _fp8_split_tma_epilogue():
    """The block-scaled fp8 GEMM's split 128x256 TMA epilogue: four 64-column blocks a tile
    through two slots per warpgroup, each stmatrix behind `wait_group.read 1` (the newest
    store reads the other slot)."""
    import argus as ag
    from argus.compiler import lower_only
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel

    s = Fp8GemmSchedule(bn=256, stages=3, promote=True, n_split=2, epilogue="tma")
    return lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s)


def _read_wait(pending: int):
    """Every TMA-store read-wait waits `pending` (the completion wait at the exit stays)."""
    return lambda op: op.replace(pending=pending) if op.read else op


def _barrier_after_read_wait_dropped(kernel: Kernel) -> Kernel:
    """The group barrier after each TMA-store read-wait removed: thread 0 waits, the other
    threads of the warpgroup run ahead into the stmatrix."""
    def region(r: Region) -> Region:
        out: list[Op] = []
        for op in r.ops:
            subs = {f.name: region(getattr(op, f.name)) for f in op.spec_fields()
                    if isinstance(getattr(op, f.name), Region)}
            op = dataclasses.replace(op, **subs) if subs else op
            if isinstance(op, O.GroupBarrier) and out and isinstance(out[-1], O.TmaStoreWait) \
                    and out[-1].read:
                continue
            out.append(op)
        return Region(tuple(out))
    return dataclasses.replace(kernel, body=region(kernel.body))


def _release_before_wait(kernel: Kernel) -> Kernel:
    """Each consume step's slot release moved ahead of the step's closing wgmma.wait: the
    previous step's groups may still read the slot when its empty barrier is arrived on."""
    def step(op: O.Consume) -> O.Consume:
        ops = list(op.body.ops)
        wait = max(i for i, x in enumerate(ops) if isinstance(x, O.WgmmaWait))
        release = max(i for i, x in enumerate(ops) if isinstance(x, O.SlotRelease))
        assert wait < release, "the lowered step releases after its wait"
        ops.insert(wait, ops.pop(release))
        return op.replace(body=Region(tuple(ops)))
    return rewrite(kernel, O.Consume, step)


# ----------------------------------------------------------------------------- the corpus

ACC = ("thread", "warp", "lane", "register")
M = Mutation

CORPUS: list[Mutation] = [
    # --- GEMM, written in the DSL --------------------------------------------------------
    M("gemm/b_wrong_k", "gemm", 1, traced(K.make_gemm, "b_wrong_k"), ("wgmma.agree",),
      ACC + ("accumulator", "k_in_tile", "a_element", "b_element", "iteration"),
      ("A.k == B.k",), "b_wrong_k", "B's TMA coordinate is one k tile ahead"),
    M("gemm/a_swapped_coords", "gemm", 2, traced(K.make_gemm, "a_swapped_coords"),
      ("wgmma.agree", "store.coords"), ACC, (), "a_swapped_coords",
      "A's TMA coordinates (row, k) swapped"),
    M("gemm/a_wrong_row", "gemm", 13, traced(K.make_gemm, "a_wrong_row"), ("store.coords",),
      ACC + ("tile_element", "output", "value_tags"), ("m of the value",), "a_wrong_row",
      "A rows loaded 64 rows too low: C rows get other rows' products"),
    M("gemm/wrong_operand_slice", "gemm", 13, traced(K.make_gemm, "wrong_operand_slice"),
      ("store.coords",), ACC + ("tile_element", "warpgroup", "m_view_at"), (),
      "wrong_operand_slice",
      "every consumer warpgroup multiplies rows 0..63 of the A stage (the witness names the "
      "view that selected the rows the wrong m came from)"),
    M("gemm/store_missing_wg_offset", "gemm", 14, traced(K.make_gemm, "store_missing_wg_offset"),
      ("store.once", "store.coords"), ("output",), (), "store_missing_wg_offset",
      "both consumer warpgroups store to the same 64 rows"),
    M("gemm/consumer_skips_last_k", "gemm", 10, traced(K.make_gemm, "consumer_skips_last_k"),
      ("pipe.totals", "wgmma.k-once"), ("shapes",), (), "consumer_skips_last_k",
      "the consumer loop runs k_tiles - 1 times: a hang and a missing k tile"),
    M("gemm/k_double_count", "gemm", 2, traced(K.make_gemm, "k_double_count"),
      ("wgmma.k-once",), ("first", "second", "k"), ("multiplied twice",), "k_double_count",
      "both operands use k // 2: every k tile is multiplied twice (A and B still agree)"),
    M("gemm/read_wrong_stage", "gemm", 11, traced(K.make_gemm, "read_wrong_stage"),
      ("pipe.release",), ("owned_stage", "read_stage"), (), "read_wrong_stage",
      "the consumer reads the next stage, which the producer may be refilling"),
    M("lowered/wgmma_after_consume", "gemm", 11, _wgmma_moved_after_consume,
      ("pipe.release",), (), ("outside any consume step",), None,
      "the wgmma reads the stage after its consume step released it"),
    M("gemm/two_producers", "gemm", 6, traced(K.make_gemm, "two_producers"),
      ("pipe.producers",), ("warpgroups",), (), "two_producers",
      "two producer warpgroups both arm the full barrier"),
    M("gemm/pipeline_consumers", "gemm", 6, traced(K.make_gemm, "pipeline_consumers"),
      ("pipe.arrivals",), ("init_count", "arrivals"), (), "pipeline_consumers",
      "empty barriers expect 1 arrival while 2 consumer warpgroups release"),
    M("gemm/view_out_of_buffer", "gemm", 5, traced(K.make_gemm, "view_out_of_buffer"),
      ("smem.bounds",), ("warpgroup", "rows", "view_at"), ("view defined at",),
      "view_out_of_buffer",
      "a third consumer warpgroup reads rows 128..191 of a 128-row stage (reported at the "
      "wgmma that materializes the view; view_at names the line that defined it)"),
    M("gemm/grid_too_small", "gemm", 14, traced(K.make_gemm, "grid_too_small"),
      ("store.coverage",), ("domain", "extent"), ("never written",), "grid_too_small",
      "the grid steps by 2 tiles of rows: half the output rows are never stored"),
    # --- GEMM, lowered-IR mutations --------------------------------------------------------
    M("lowered/consumer_parity_flipped", "gemm", 7,
      lowered_mutation(K.make_gemm, O.Consume,
                       lambda op: op.replace(parity_expr="((n / S) & 1) ^ 1")),
      ("pipe.data", "pipe.no-early-read"), ("slot", "parity", "replay"),
      ("uninitialised",), None, "the consumer's full-barrier parity is inverted"),
    M("lowered/consumer_parity_n_and_1", "gemm", 7,
      lowered_mutation(K.make_gemm, O.Consume, lambda op: op.replace(parity_expr="n & 1")),
      ("pipe.data", "pipe.no-early-read"), ("slot", "replay"), (), None,
      "ring parity from the step instead of the phase (TileLang #3087)"),
    M("lowered/producer_parity_not_inverted", "gemm", 8,
      lowered_mutation(K.make_gemm, O.Produce, lambda op: op.replace(parity_expr="(n / S) & 1")),
      ("pipe.no-overwrite", "pipe.deadlock"), ("replay",), ("DEADLOCK",), None,
      "the producer waits on the empty barrier's current phase: hangs at step 0"),
    M("lowered/consumer_stage_off_by_one", "gemm", 10,
      lowered_mutation(K.make_gemm, O.Consume, lambda op: op.replace(stage_expr="(n + 1) % S")),
      ("pipe.slot",), ("step", "expected_slot", "slot"), (), None,
      "consumer and producer disagree on the slot of a step"),
    M("lowered/per_tile_counter_reset", "gemm", 9,
      lambda: _per_tile_reset(), ("pipe.slot", "pipe.data"), ("step",), (), None,
      "persistent GEMM whose consumer recomputes slot and parity from the inner k only "
      "(TileLang #2674): right only when k_tiles % S == 0"),
    M("lowered/tx_bytes_off_by_one_box", "gemm", 6,
      lowered_mutation(K.make_gemm, O.Produce,
                       lambda op: op.replace(tx_bytes=op.tx_bytes - 128 * 64 * 2)),
      ("tma.tx-bytes",), ("expect_tx", "delivered"), (), None,
      "expect_tx forgets the A box"),
    M("lowered/arrivals_wrong", "gemm", 23,
      lowered_mutation(K.make_gemm, O.Consume, lambda op: op.replace(arrivals=1)),
      ("pipe.arrivals",), ("arrivals",), (), None,
      "the lowered consume declares 1 arrival for 2 consumer warpgroups"),
    M("lowered/elect_two_threads", "gemm", 6,
      lowered_mutation(K.make_gemm, O.Elect, lambda op: op.replace(threads=2)),
      ("pipe.producers",), ("threads", "full_barrier_count"), ("2 threads", "arrive.expect_tx"),
      None, "the producer's elect picks two threads: two arrive.expect_tx per step on a full "
      "barrier that counts one"),
    M("lowered/producer_not_elected", "gemm", 6, lambda: _unelected(lowered(K.make_gemm)),
      ("pipe.producers",), ("threads", "full_barrier_count"), ("128 threads", "no elect"),
      None, "thread election dropped: all 128 producer threads arrive and issue every copy"),
    M("lowered/elect_around_consume", "gemm", 13,
      lowered_mutation(K.make_gemm, O.Consume,
                       lambda op: O.Elect(Region((op,)), loc=op.loc), nth=0),
      ("sync.elect",), ("ops",), ("wgmma",), None,
      "a consume step (wgmma, its waits, the slot release) run by one elected thread"),
    M("lowered/desc_swizzle_64", "gemm", 1,
      lowered_mutation(K.make_gemm, O.Wgmma,
                       lambda op: op.replace(a_desc=(64,) + tuple(op.a_desc[1:]))),
      ("wgmma.smem-layout",), ("stage", "k_in_tile", "smem_byte", "thread", "holds"),
      ("swizzle",), None, "A descriptor says 64B swizzle, tensor map 128B"),
    M("lowered/desc_sbo_wrong", "gemm", 2,
      lowered_mutation(K.make_gemm, O.Wgmma,
                       lambda op: op.replace(b_desc=tuple(op.b_desc[:2]) + (512, op.b_desc[3]))),
      ("wgmma.smem-layout",), ("smem_byte", "holds", "thread"), ("SBO",), None,
      "B descriptor's stride between 8-row groups is half the real one"),
    M("lowered/desc_k_advance_elements", "gemm", 2,
      lowered_mutation(K.make_gemm, O.Wgmma,
                       lambda op: op.replace(a_desc=tuple(op.a_desc[:3]) + (16,))),
      ("wgmma.smem-layout",), ("k_block", "smem_byte", "holds"), ("k16 advance",), None,
      "k advance in elements instead of bytes"),
    M("lowered/tma_swizzle_64", "gemm", 1,
      lowered_mutation(K.make_gemm, O.TmaLoad, lambda op: op.replace(swizzle=64), nth=0),
      ("tma.swizzle", "wgmma.smem-layout"), (), (), None,
      "the tensor map of A swizzles 64B, the buffer and descriptors 128B"),
    M("lowered/tma_box_half", "gemm", 5,
      lowered_mutation(K.make_gemm, O.TmaLoad,
                       lambda op: op.replace(box=(64, op.box[1]), bytes=64 * op.box[1] * 2),
                       nth=0),
      ("tma.box", "wgmma.defined", "wgmma.smem-layout"), (), (), None,
      "A's box covers 64 of the view's 128 rows"),
    M("lowered/tma_box_rank", "gemm", 5,
      lowered_mutation(K.make_gemm, O.TmaLoad,
                       lambda op: op.replace(box=(1,) + tuple(op.box)), nth=0),
      ("tma.box",), ("rank",), (), None,
      "A's box has a unit dim too many (3 dims for the 2-d A): the rows would be read as "
      "another dim's (the product rule alone accepted it)"),
    M("lowered/smem_misaligned", "gemm", 4,
      lowered_mutation(K.make_gemm, O.Const, lambda op: op, attrs=lambda k: _shift_plan(k, 512)),
      ("smem.align", "wgmma.smem-layout"), ("offset", "period"), ("1024",), None,
      "the B buffer starts 512 B into a 128B-swizzle period (TileLang #2379)"),
    M("lowered/in_flight_deadlock", "gemm", 24,
      lowered_mutation(K.make_gemm, O.Consume, lambda op: op.replace(wgmma_in_flight=1),
                       stages=1),
      ("pipe.deadlock", "pipe.no-overwrite", "pipe.data"), ("replay",), ("DEADLOCK",), None,
      "a 1-stage ring keeping one wgmma group in flight never releases the slot it needs"),
    M("lowered/pingpong_release_before_wait", "gemm", 11,
      lambda: _release_before_wait(_pingpong_gemm()), ("sync.release",),
      ("release", "wgmma", "iteration", "thread"), ("step n - 1", "in flight"), None,
      "a ping-pong whole step (wait_group 2) arrives on the previous step's empty barrier "
      "before its wait: both of that step's m64 groups may still read the slot"),
    M("lowered/tma_store_unfenced", "gemm", 12,
      lambda: rewrite(_gemm_tma_epilogue(), O.ProxyFence, lambda op: None), ("proxy.fence",),
      ("writer", "reader"), ("stmatrix",), None,
      "stmatrix writes the staging tile, the TMA store reads it without fence.proxy.async"),
    M("lowered/tma_store_read_wait_one_short", "gemm", 11,
      lambda: rewrite(_gemm_tma_epilogue(), O.TmaStoreWait, _read_wait(1)),
      ("sync.store-read",), ("thread", "iteration", "write", "store"),
      ("stmatrix", "bulk store", "earlier iteration", "wait_group.read N with N <= 0"), None,
      "the bf16 TMA epilogue's next tile writes every staging slot behind wait_group.read 1: "
      "the newest group (the previous tile's last block) still reads the slot it rewrites"),
    M("lowered/tma_store_read_wait_removed", "gemm", 11,
      lambda: rewrite(_fp8_split_tma_epilogue(), O.TmaStoreWait, lambda op: None, nth=2),
      ("sync.store-read",), ("thread", "iteration", "write", "store"),
      ("same iteration", "0 (it issued the store)"), None,
      "the fp8 split epilogue's third block (slot 0 again) written with no read-wait: block "
      "one's store of that slot and block two's are both still in flight"),
    M("lowered/tma_store_read_wait_too_lax", "gemm", 11,
      lambda: rewrite(_fp8_split_tma_epilogue(), O.TmaStoreWait, _read_wait(2)),
      ("sync.store-read",), ("thread", "iteration", "write", "store"),
      ("wait_group.read N with N <= 1",), None,
      "read 2 where read 1 is needed: the store two blocks back, of the same slot, may still "
      "read it"),
    M("lowered/tma_store_read_wait_unbarriered", "gemm", 11,
      lambda: _barrier_after_read_wait_dropped(_fp8_split_tma_epilogue()),
      ("sync.store-read",), ("thread", "write", "store"), ("1 .. 127", "no group barrier"),
      None, "thread 0 waits wait_group.read 1, but no barrier holds the other 127 threads "
      "behind its wait before they rewrite the slot"),
    M("lowered/mn_major_lbo_wrong", "gemm", 3,
      lambda: rewrite(_gemm_kn(), O.Wgmma,
                      lambda op: op.replace(b_desc=(op.b_desc[0], op.b_desc[1] // 2)
                                            + tuple(op.b_desc[2:]))),
      ("wgmma.smem-layout",), ("smem_byte", "holds"), (), None,
      "MN-major B: the descriptor's distance between column atoms is half the real one"),
    # --- clusters and TMA multicast (2x1 clusters sharing B), batched MN-major B ----------
    M("cluster/multicast_overlap", "gemm", 5, traced(K.make_cluster_gemm, "multicast_overlap"),
      ("wgmma.defined",), ACC + ("accumulator", "b_element", "cluster_rank"),
      ("nothing written",), "multicast_overlap",
      "both CTAs of the cluster multicast the same 64 B rows into rows 0..63 of the slot: rows "
      "64..127 (n 64..127 of the tile) are never loaded, rows 0..63 are written twice",
      also=("smem.race",)),
    M("lowered/cluster_tx_bytes_once", "gemm", 6,
      lowered_mutation(K.make_cluster_gemm, O.Produce,
                       lambda op: op.replace(tx_bytes=op.tx_bytes - 64 * 64 * 2)),
      ("tma.tx-bytes",), ("expect_tx", "delivered", "cluster_size", "multicast_box_bytes"),
      ("multicast", "partly written"), None,
      "expect_tx counts the multicast B box once, not once per CTA of the cluster: the phase "
      "completes before the peer's half of B landed"),
    M("lowered/cluster_peers_one", "gemm", 8, lambda: _cluster_peers_one(),
      ("pipe.no-overwrite",), ("peer_rank", "producer_step", "slot", "releases_here", "peers"),
      ("peers = 1", "multicasts"), None,
      "PipelineCreate.peers left at 1 with multicast loads (arrivals = consumers): consumers "
      "release only their own CTA's slot, so the peer's producer multicasts into a slot this "
      "CTA still reads"),
    M("batched_kn/b_batch_zero", "gemm", 20, traced(K.make_batched_kn_gemm, "b_batch_zero"),
      ("wgmma.agree",), ACC + ("a_element", "b_element"), ("A.bt == B.bt",), "b_batch_zero",
      "batched GEMM with B [Bt, K, N] (MN-major, one column box per 64 columns): B's batch "
      "coordinate is 0 for every batch"),
    # --- attention ----------------------------------------------------------------------
    M("attention/rowmax_wrong_axis", "attention", 16, traced(K.make_attention, "rowmax_wrong_axis"),
      ("tag.assert",), ("element", "tags"), ("row max",), "rowmax_wrong_axis",
      "the row max reduces over the query axis (axis 0)"),
    M("attention/lse_wrong_row", "attention", 17, traced(K.make_attention, "lse_wrong_row"),
      ("ew.broadcast",), ("element", "broadcast_operand", "tile_operand"), (), "lse_wrong_row",
      "row statistics of the next query row rescale this row"),
    M("attention/v_wrong_rows", "attention", 18, traced(K.make_attention, "v_wrong_rows"),
      ("wgmma.agree", "tag.assert"), ACC + ("a_element", "b_element"), ("skv",), "v_wrong_rows",
      "V's tile is one KV block ahead of P's keys"),
    M("attention/v_stage_mixed", "attention", 11, traced(K.make_attention, "v_stage_mixed"),
      ("pipe.release",), ("owned_stage", "read_stage"), (), "v_stage_mixed",
      "P V reads V from the other stage of the ring"),
    M("attention/o_wrong_rows", "attention", 13, traced(K.make_attention, "o_wrong_rows"),
      ("store.coords",), ACC + ("output", "value_tags"), (), "o_wrong_rows",
      "O stored one block of rows too far"),
    # --- MoE ------------------------------------------------------------------------------
    M("moe/expert_from_pid_n", "moe", 21, traced(K.make_moe, "expert_from_pid_n"),
      ("wgmma.agree",), ACC + ("a_element", "b_element", "b_written_by"),
      ("A.expert == B.expert",), "expert_from_pid_n",
      "the weight tile's expert comes from the N tile index"),
    M("moe/expert_mod", "moe", 21, traced(K.make_moe, "expert_mod"), ("wgmma.agree",),
      ACC + ("a_element", "b_element"), ("expert",), "expert_mod",
      "pid % tiles_per_expert instead of pid // tiles_per_expert (meta-pytorch/applied-ai #33)"),
    M("moe/y_wrong_rows", "moe", 22, traced(K.make_moe, "y_wrong_rows"), ("store.coords",),
      ACC + ("output",), (), "y_wrong_rows", "expert output scattered to the next token block"),
    # --- elementwise / reductions -------------------------------------------------------
    M("elementwise/bias_wrong_offset", "elementwise", 0,
      traced(K.make_bias_gelu, "bias_wrong_offset"), ("ew.broadcast",),
      ("element", "broadcast_operand", "tile_operand"), ("n",), "bias_wrong_offset",
      "the bias row is loaded at column 0 for every column block"),
    M("softmax/max_of_other_rows", "elementwise", 16,
      traced(K.make_softmax, "max_of_other_rows"), ("ew.broadcast",),
      ("element", "broadcast_operand"), ("m",), "max_of_other_rows",
      "the row max comes from the tile one row down"),
    # a one-hot selection (sum over i of where(i == k, x[i], 0)) carries x[k]'s tags alone;
    # masks that do not pin the summed index to the stored one must still be caught
    M("transpose/mask_keeps_prefix", "elementwise", 13,
      traced(K.make_select_transpose, "mask_keeps_prefix"), ("store.coords",),
      ("tile_element", "output", "value_tags"), ("r of the value",), "mask_keeps_prefix",
      "the selection keeps every i <= k: Y[j, k] sums rows 0..k of column j"),
    M("transpose/mask_next_row", "elementwise", 13,
      traced(K.make_select_transpose, "mask_next_row"), ("store.coords",),
      ("tile_element", "output", "value_tags"), ("r of the value",), "mask_next_row",
      "the selection pins i to k + 1: Y[j, k] gets row k + 1"),
    M("transpose/mask_column", "elementwise", 13,
      traced(K.make_select_transpose, "mask_column"), ("store.coords",),
      ("tile_element", "output", "value_tags"), ("r of the value",), "mask_column",
      "the selection pins i to the column j instead of the stored row k"),
    # found by review: a mask that keeps no i for some k made the reduced set empty (every
    # claim held vacuously), and index arithmetic was modelled unbounded while the kernel wraps
    M("transpose/mask_drops_column", "elementwise", 13,
      traced(K.make_select_transpose, "mask_drops_column"), ("store.coords",),
      ("tile_element", "output", "value_tags"), (), "mask_drops_column",
      "the selection keeps nothing for k = 15: Y[j, 15] is 0, no row of X"),
    M("transpose/mask_never", "elementwise", 13,
      traced(K.make_select_transpose, "mask_never"), ("store.coords",),
      ("tile_element", "output", "value_tags"), (), "mask_never",
      "the selection keeps nothing: every Y[j, k] is 0"),
    M("transpose/mask_wraps", "elementwise", 13,
      traced(K.make_select_transpose, "mask_wraps"), ("store.coords",),
      ("tile_element", "output", "value_tags"), (), "mask_wraps",
      "i * 2^32 and k * 2^32 wrap to 0 in i32: the mask keeps every i and the sum mixes rows"),
    # --- loop reductions: every element of the row once; fills vs identities -------------
    M("online_softmax/blocks_skip_last", "reduction", 16,
      traced(K.make_online_softmax, "blocks_skip_last"), ("reduce.coverage",),
      ("domain", "extent", "defined"), ("never reduced",), "blocks_skip_last",
      "the block loop runs cdiv(N, BN) - 1 times: the row's last block is never reduced"),
    M("online_softmax/blocks_floor", "reduction", 16,
      traced(K.make_online_softmax, "blocks_floor"), ("reduce.coverage",),
      ("domain", "extent", "defined"), ("never reduced",), "blocks_floor",
      "N // BN blocks: the tail of a row that is not a multiple of BN is never reduced"),
    M("online_softmax/block_offset_half", "reduction", 16,
      traced(K.make_online_softmax, "block_offset_half"), ("reduce.coverage",),
      ("first", "second", "n"), ("reduced twice",), "block_offset_half",
      "blocks of BN columns at offsets j * BN / 2: every column but the first half block is "
      "reduced twice"),
    M("online_softmax/max_fill_zero", "reduction", 15,
      traced(K.make_online_softmax, "max_fill_zero"), ("fill.identity",),
      ("fill", "identity", "defined"), ("-inf",), "max_fill_zero",
      "masked columns load as 0 before the row max (a row of negative values gets max 0)"),
    M("online_softmax/sum_without_shift", "reduction", 15,
      traced(K.make_online_softmax, "sum_without_shift"), ("fill.identity",),
      ("fill", "identity"), ("sum",), "sum_without_shift",
      "the sum adds exp(e - 1) with e = exp(x): masked columns (e = 0) add exp(-1) each"),
    M("row_stats/sum_fill_one", "reduction", 15, traced(K.make_row_stats, "sum_fill_one"),
      ("fill.identity",), ("fill", "identity", "defined"), ("sum",), "sum_fill_one",
      "masked columns load as 1 and add 1 to every row's sum of squares"),
    M("row_stats/min_fill_zero", "reduction", 15, traced(K.make_row_stats, "min_fill_zero"),
      ("fill.identity",), ("fill", "identity", "defined"), ("+inf",), "min_fill_zero",
      "masked columns load as the default 0 before a row min"),
    M("row_stats/min_block_stride", "reduction", 16,
      traced(K.make_row_stats, "min_block_stride"), ("reduce.coverage",), ("domain",), (),
      "min_block_stride", "the row min steps by 2 blocks per iteration: every other block "
      "is skipped"),
    # fill.identity keeps masked elements on a kept axis apart from those on the reduced axis:
    # col_max's clean kernel (masked columns, a max over rows: KernelBench L1/49) verifies
    M("col_max/rows_partial", "reduction", 15, traced(K.make_col_max, "rows_partial"),
      ("fill.identity",), ("fill", "identity", "element", "output"), ("-inf", "dim0 = 60"),
      "rows_partial", "60 rows in blocks of 16: the last block's rows past the end are on the "
      "axis the max reduces, so their 0 fill enters the column max that is stored"),
    M("col_max/ring_rows_partial", "reduction", 15, ring(K.make_col_max, "rows_partial"),
      ("fill.identity",), ("fill", "identity", "element", "output", "thread"), ("-inf",),
      "rows_partial", "lowered through the register ring: rows past the end reach the max"),
    M("col_max/out_padded", "reduction", 15, traced(K.make_col_max, "out_padded"),
      ("fill.identity",), ("fill", "identity", "element", "output"), ("OUT[0, 10",),
      "out_padded", "the output is padded to whole blocks (1024 columns for 1000): the masked "
      "columns' results, the max of their 0 fills, are stored in bounds"),
    M("fa_qonce/mask_fill_zero", "attention", 15, traced(K.make_fa_qonce, "mask_fill_zero"),
      ("fill.identity",), ("fill", "identity", "role", "thread"), ("max",), "mask_fill_zero",
      "keys past the sequence end are masked with 0 instead of -inf before the row max"),
    M("fa_qonce/no_mask", "attention", 15, traced(K.make_fa_qonce, "no_mask"),
      ("fill.identity",), ("fill", "identity", "role", "thread"), ("max",), "no_mask",
      "no key mask: the zero-filled K rows past the sequence end give scores 0 that enter the "
      "row max"),
    M("fa_qonce/kv_skips_last", "attention", 16, traced(K.make_fa_qonce, "kv_skips_last"),
      ("reduce.coverage",), ("domain", "extent", "role", "thread"), ("never reduced",),
      "kv_skips_last", "the consumer's KV loop stops one block early: the last keys never "
      "enter the row statistics (and the producer hangs)", also=("pipe.totals",)),
    M("row_max_ring/ring_past_end", "reduction", 15, ring(K.make_row_max_ring, "ring_past_end"),
      ("fill.identity",), ("fill", "identity", "element", "iteration", "thread"), ("8192",),
      "ring_past_end", "the block loop runs one block past the row (blocks divide it): the "
      "whole last block is masked, its 0 fill wins the max"),
    M("rms_peeled/peel_loop_from_zero", "reduction", 16,
      ring(K.make_rms_peeled, "peel_loop_from_zero"), ("reduce.coverage",),
      ("first", "second", "peeled_at", "iteration", "thread"), ("reduced twice",),
      "peel_loop_from_zero", "the first block is reduced before the loop and the loop still "
      "starts at block 0: its columns are added twice"),
    M("rms_peeled/peel_skip_last", "reduction", 16, ring(K.make_rms_peeled, "peel_skip_last"),
      ("reduce.coverage",), ("domain", "extent", "thread"), ("never reduced",),
      "peel_skip_last", "with the first block peeled, the loop also stops one block early: the "
      "row's last block is never reduced"),
    M("online_softmax/ring_blocks_skip_last", "reduction", 16,
      ring(K.make_online_softmax, "blocks_skip_last"), ("reduce.coverage",),
      ("domain", "extent", "thread"), ("never reduced",), "blocks_skip_last",
      "lowered through the register ring: the block loop runs cdiv(N, BN) - 1 times"),
    M("online_softmax/ring_block_offset_half", "reduction", 16,
      ring(K.make_online_softmax, "block_offset_half"), ("reduce.coverage",),
      ("first", "second", "thread"), ("reduced twice",), "block_offset_half",
      "lowered through the register ring: blocks at offsets j * BN / 2 reduce columns twice"),
    M("split_k_loop/loop_from_zero", "reduction", 14, traced(K.make_split_k_loop,
                                                             "loop_from_zero"),
      ("reduce.slices",), ("slices", "iteration", "thread"), ("twice",), "loop_from_zero",
      "the partials' loop starts at slice 0, which the initial value already read"),
    M("split_k_loop/loop_skips_last", "reduction", 14, traced(K.make_split_k_loop,
                                                              "loop_skips_last"),
      ("reduce.slices",), ("extent", "added", "thread"), ("never added",), "loop_skips_last",
      "the partials' loop stops one slice short: the last K slice is never added"),
    M("split_k_loop/ring_loop_from_zero", "reduction", 14,
      ring(K.make_split_k_loop, "loop_from_zero"), ("reduce.slices",),
      ("slices", "iteration", "thread"), ("twice",), "loop_from_zero",
      "lowered through the register ring: the loop re-adds slice 0"),
    M("row_max_ring/ring_partial_block", "reduction", 15,
      ring(K.make_row_max_ring, "ring_partial_block"), ("fill.identity",),
      ("fill", "identity", "element", "iteration", "thread"), ("8000",), "ring_partial_block",
      "8000 columns in blocks of 1024: the last block's masked columns hold the fill 0 when the "
      "max reduces them"),
    M("kl_div/log_fill_zero", "reduction", 15, traced(K.make_kl_div, "log_fill_zero"),
      ("fill.identity",), ("fill", "identity", "element", "iteration", "thread"), ("nan",),
      "log_fill_zero", "p loads with the default fill 0 in the partial last block: t * log(p) "
      "= 0 * -inf = nan at every masked column reaches the sum (the data where does not mask)"),
    M("kl_div/where_ge_zero", "reduction", 15, traced(K.make_kl_div, "where_ge_zero"),
      ("fill.identity",), ("fill", "identity", "element", "iteration", "thread"), ("nan",),
      "where_ge_zero", "the data predicate t >= 0 holds at the masked columns (t = 0, the "
      "fill): the where picks t * log(t) = nan. Read as an index mask (false exactly on the "
      "masked columns) it was accepted"),
    M("kl_div/ring_where_ge_zero", "reduction", 15, ring(K.make_kl_div, "where_ge_zero"),
      ("fill.identity",), ("fill", "identity", "element", "iteration", "thread"), ("nan",),
      "where_ge_zero", "lowered through the register ring: t >= 0 picks nan at the masked "
      "columns"),
    # --- wgmma operand provenance, partial clusters ---------------------------------------
    M("gemm/b_is_a_buffer", "gemm", 3, traced(K.make_gemm, "b_is_a_buffer"),
      ("wgmma.provenance",), ACC + ("a_buffer", "b_buffer"), ("same shared-memory buffer",),
      "b_is_a_buffer", "the wgmma's B operand is A's buffer: A·Aᵀ instead of A·Bᵀ"),
    # --- more coordinate, provenance and store bugs (each points at its fix line) --------
    M("gemm/k_tiles_floor", "gemm", 2, traced(K.make_gemm, "k_tiles_floor"), ("wgmma.k-once",),
      ("domain", "defined", "thread"), ("never multiplied",), "k_tiles_floor",
      "k_tiles = K // BK: the last partial k tile is never multiplied"),
    M("gemm/b_wrong_n", "gemm", 13, traced(K.make_gemm, "b_wrong_n"), ("store.coords",),
      ACC + ("output", "value_tags", "loaded_at"), (), "b_wrong_n",
      "B rows loaded 64 rows too far: C columns get other columns' products"),
    M("gemm/store_swapped_offsets", "gemm", 13, traced(K.make_gemm, "store_swapped_offsets"),
      ("store.coords",), ACC + ("output",), (), "store_swapped_offsets",
      "the store's row and column offsets are exchanged"),
    M("moe/x_wrong_k", "moe", 1, traced(K.make_moe, "x_wrong_k"), ("wgmma.agree",),
      ACC + ("a_element", "b_element", "a_written_by"), ("A.h == B.h",), "x_wrong_k",
      "the token tile is loaded one k tile ahead of the weight tile"),
    M("moe/expert_plus_one", "moe", 21, traced(K.make_moe, "expert_plus_one"),
      ("wgmma.agree",), ACC + ("a_element", "b_element", "loaded_at"), ("expert",),
      "expert_plus_one", "the weight tile of the next expert (prefix off by one)"),
    M("attention/q_wrong_rows", "attention", 13, traced(K.make_attention, "q_wrong_rows"),
      ("store.coords", "ew.broadcast"), ACC + ("output", "loaded_at"), (), "q_wrong_rows",
      "Q is loaded one block of query rows too far"),
    M("attention/k_next_block", "attention", 18, traced(K.make_attention, "k_next_block"),
      ("wgmma.agree", "tag.assert"), ACC + ("loaded_at",), ("skv",), "k_next_block",
      "K's tile is one KV block ahead of V's: P's keys are not V's rows"),
    M("online_softmax/store_next_block", "reduction", 13,
      traced(K.make_online_softmax, "store_next_block"), ("store.coords",),
      ("output", "value_tags", "iteration"), (), "store_next_block",
      "each block of the normalized row is stored one block to the right"),
    M("row_stats/ss_wrong_row", "reduction", 13, traced(K.make_row_stats, "ss_wrong_row"),
      ("store.coords",), ("output", "value_tags"), (), "ss_wrong_row",
      "the sum of squares of row r is stored at row r + 1"),
    M("fa_qonce/q_wrong_rows", "attention", 13, traced(K.make_fa_qonce, "q_wrong_rows"),
      ("store.coords",), ACC + ("output", "loaded_at"), (), "q_wrong_rows",
      "Q is loaded through its one-stage pipeline one block of rows too far"),
    M("fa_qonce/v_next_block", "attention", 18, traced(K.make_fa_qonce, "v_next_block"),
      ("wgmma.agree",), ACC + ("b_element", "b_written_by"), ("A.sk == B.sk",), "v_next_block",
      "V's tile is one KV block ahead of P's keys (P from registers)"),
    M("fa_qonce/o_wrong_head", "attention", 20, traced(K.make_fa_qonce, "o_wrong_head"),
      ("store.coords",), ACC + ("output", "value_tags"), (), "o_wrong_head",
      "O is stored into the next (batch, head)"),
    M("fa_qonce/k_stage_mixed", "attention", 11, traced(K.make_fa_qonce, "k_stage_mixed"),
      ("pipe.release",), ("owned_stage", "read_stage", "role", "thread"), (), "k_stage_mixed",
      "S = Q K^T reads K from the other stage of the ring"),
    # --- a store under `ag.when`: store.coverage counts only the instances that pass -------
    M("elementwise/store_if_flag", "elementwise", 13,
      traced(K.make_guarded_store, "flag_positive"), ("store.coverage",),
      ("cta", "output", "values_read"), ("never written",), "flag_positive",
      "Y stored only when a flag read from memory is positive (was proven covered)"),
    M("elementwise/store_if_count", "elementwise", 13,
      traced(K.make_guarded_store, "count_positive"), ("store.coverage",),
      ("cta", "output", "values_read"), ("never written",), "count_positive",
      "Y's row block stored only when its count read from memory is positive"),
    M("elementwise/store_if_first_ticket", "elementwise", 13,
      traced(K.make_guarded_store, "first_ticket"), ("store.coverage",),
      ("cta", "output", "values_read"), ("never written",), "first_ticket",
      "Y stored only by the CTA whose atomic (no wrap) returned 0: an old value nothing counts"),
    M("elementwise/store_tail_skipped", "elementwise", 13,
      traced(K.make_guarded_store, "tail_skipped"), ("store.coverage",),
      ("cta", "output", "tile_element"), ("never written",), "tail_skipped",
      "the ragged last row block is skipped (a condition on the program id, sometimes false)"),
    M("split_k/ticket_past_last", "reduction", 13,
      traced(K.make_last_split_stores, "ticket_past_last"), ("store.coverage",),
      ("compared", "wrap"), ("none of its",), "ticket_past_last",
      "the last split is tested with ticket == splits, which no arrival draws: C is never "
      "written (was unknown: vacuous premises)"),
    M("elementwise/store_wrong_rows", "elementwise", 13,
      traced(K.make_bias_gelu, "store_wrong_rows"), ("store.coords",),
      ("output", "value_tags", "tile_element"), (), "store_wrong_rows",
      "the result is stored one row down"),
    M("softmax/fill_default_zero", "reduction", 15, traced(K.make_softmax, "fill_default_zero"),
      ("fill.identity",), ("fill", "identity", "defined"), ("-inf",), "fill_default_zero",
      "the row is loaded with the default fill 0 before its max"),
    M("gemm/a_k_half", "gemm", 2, traced(K.make_gemm, "a_k_half"), ("wgmma.agree",),
      ACC + ("a_element", "b_element", "a_written_by"), ("A.k == B.k",), "a_k_half",
      "A's k offset advances by half a tile per iteration (BK // 2): A and B disagree on k"),
    M("online_softmax/max_other_row", "reduction", 16,
      traced(K.make_online_softmax, "max_other_row"), ("ew.broadcast",),
      ("element", "broadcast_operand", "tile_operand", "loaded_at"), ("m",), "max_other_row",
      "the running max is taken over the next row's block"),
    M("cluster/a_rank_rows", "gemm", 13, traced(K.make_cluster_gemm, "a_rank_rows"),
      ("store.coords",), ACC + ("output", "cluster_rank", "loaded_at"), (), "a_rank_rows",
      "A rows offset by the cluster rank although each CTA owns its own 128-row tile"),
    M("batched_kn/c_wrong_batch", "gemm", 20, traced(K.make_batched_kn_gemm, "c_wrong_batch"),
      ("store.coords",), ACC + ("output", "value_tags"), (), "c_wrong_batch",
      "batch b is stored into batch b + 1"),
    # --- more lowered-IR mutations of the GEMM ----------------------------------------------
    M("lowered/producer_stage_off_by_one", "gemm", 10,
      lowered_mutation(K.make_gemm, O.Produce, lambda op: op.replace(stage_expr="(n + 1) % S")),
      ("pipe.slot",), ("step", "expected_slot", "slot", "role"), (), None,
      "the producer lands step n in slot n + 1"),
    M("lowered/tx_bytes_doubled", "gemm", 6,
      lowered_mutation(K.make_gemm, O.Produce, lambda op: op.replace(tx_bytes=2 * op.tx_bytes)),
      ("tma.tx-bytes",), ("expect_tx", "delivered", "role", "thread"), (), None,
      "expect_tx counts every box twice: the phase never completes (hang)"),
    M("lowered/b_desc_swizzle_32", "gemm", 1,
      lowered_mutation(K.make_gemm, O.Wgmma,
                       lambda op: op.replace(b_desc=(32,) + tuple(op.b_desc[1:]))),
      ("wgmma.smem-layout",), ("smem_byte", "holds", "thread"), ("swizzle",), None,
      "B descriptor says 32B swizzle, the tensor map 128B"),
    M("lowered/consumer_parity_zero", "gemm", 7,
      lowered_mutation(K.make_gemm, O.Consume, lambda op: op.replace(parity_expr="0")),
      ("pipe.data", "pipe.no-early-read"), ("slot", "replay"), (), None,
      "the consumer always waits for parity 0: from the second lap it reads a stale slot"),
    M("lowered/peers_without_multicast", "gemm", 23,
      lowered_mutation(K.make_gemm, O.PipelineCreate, lambda op: op.replace(peers=2)),
      ("pipe.arrivals",), ("peers", "expected_peers"), ("multicast",), None,
      "peers = 2 on a pipeline no load multicasts: consumers arrive on a CTA that does not "
      "exist"),
    M("cluster/grid_not_multiple", "gemm", 14, traced(K.make_cluster_gemm, "grid_not_multiple"),
      ("grid.cluster",), ("shapes", "extent", "cluster"), ("partial",), "grid_not_multiple",
      "the clustered grid extent cdiv(M, BM) is odd for some M: a partial 2x1 cluster"),
    # --- persistent grouped-raster GEMM: store coverage and store-once ---------------------
    M("persistent/raster_full_groups", "gemm", 14,
      traced(K.make_persistent_gemm, "raster_full_groups"),
      ("store.coverage",), ("unit", "other_unit", "tile", "thread"), ("both store tile",),
      "raster_full_groups", "the raster divides by group_m instead of the last group's size: "
      "in a short last group two units land on one tile and another tile is never stored"),
    M("persistent/raster_row_repeat", "gemm", 14,
      traced(K.make_persistent_gemm, "raster_row_repeat"),
      ("store.once", "store.coverage"), ("thread", "defined"), (), "raster_row_repeat",
      "the raster's row within a group is rounded down to even: every odd tile row repeats "
      "the one above (stored twice: store.once, NIA; or two units on one tile: the tile "
      "count of store.coverage, whichever the solver answers first), the odd rows are never "
      "stored"),
    M("persistent/stride_past_grid", "gemm", 14,
      traced(K.make_persistent_gemm, "stride_past_grid"),
      ("store.coverage",), ("start", "stride", "programs", "thread"), ("never visited",),
      "stride_past_grid", "the unit loop strides by programs + 1 over a grid of programs "
      "CTAs: the units congruent to programs are never visited"),
    # --- online softmax: the running statistics -------------------------------------------
    M("fa_qonce/rescale_new_max", "attention", 17, traced(K.make_fa_qonce, "rescale_new_max"),
      ("softmax.stats",), ("thread", "rescale_from", "defined"), ("alpha",),
      "rescale_new_max", "alpha = exp2(m_new - m_new): the output and sum are never rescaled "
      "from the previous running max"),
    M("fa_qonce/l_not_rescaled", "attention", 17, traced(K.make_fa_qonce, "l_not_rescaled"),
      ("softmax.stats",), ("thread", "left", "right"), ("rescaled",), "l_not_rescaled",
      "the running sum adds the block's exp(s - m_new) to the sum relative to the old max"),
    M("fa_qonce/o_not_rescaled", "attention", 17, traced(K.make_fa_qonce, "o_not_rescaled"),
      ("softmax.stats",), ("thread", "p_relative_to", "accumulator_relative_to"),
      ("rescaled",), "o_not_rescaled",
      "P V is accumulated into O without rescaling O to the new max"),
    M("fa_qonce/no_final_division", "attention", 17,
      traced(K.make_fa_qonce, "no_final_division"),
      ("softmax.stats",), ("thread",), ("never divided",), "no_final_division",
      "O is stored without the final division by the row sum l"),
    M("row_logsumexp/ring_max_per_block", "reduction", 17,
      ring(K.make_row_logsumexp, "max_per_block"), ("softmax.stats",),
      ("thread", "left", "right"), ("rescaled",), "max_per_block",
      "lowered (the blocks through the register ring): the sum pass reads a max per block, "
      "MX[row, j], where the finished row max is MX[row, 0]: the carried sum adds terms "
      "relative to two different maxima"),
    # --- causal masks, stated as tag assertions over the mask's `live` field ---------------
    M("fa_causal/mask_off_by_one", "attention", 19,
      traced(K.make_fa_qonce, "mask_off_by_one", causal=True),
      ("tag.assert",), ("thread", "defined"), ("causal mask",), "mask_off_by_one",
      "the causal mask keeps keys < the diagonal: every query loses its own key"),
    M("fa_causal/mask_block_offset", "attention", 19,
      traced(K.make_fa_qonce, "mask_block_offset", causal=True),
      ("tag.assert",), ("thread", "defined"), ("causal mask",), "mask_block_offset",
      "the mask compares the key's position in its block, not its key index, with the query"),
    M("fa_causal/causal_blocks_short", "attention", 19,
      traced(K.make_fa_qonce, "causal_blocks_short", causal=True),
      ("tag.assert",), ("thread", "defined"), ("reaches every key",), "causal_blocks_short",
      "the causal KV loop stops at the tile's first row's diagonal: later rows' last keys "
      "are never seen"),
    # --- split-K: the sum of the K slices' partials ----------------------------------------
    M("split_k/missing_slice", "reduction", 2, traced(K.make_split_k_sum, "missing_slice"),
      ("reduce.slices",), ("slices", "defined", "thread", "unrolled_at"),
      ("never added", "unrolled while tracing"), None,
      "the partials' sum stops one slice short (a Python loop unrolled while tracing: its "
      "bound has no IR line, the witness names every load added and the loop body's line "
      "that loads several slices)"),
    M("split_k/slice_twice", "reduction", 2, traced(K.make_split_k_sum, "slice_twice"),
      ("reduce.slices",), ("slices", "defined", "thread"), ("twice",), "slice_twice",
      "slice 1 is added twice and slice 2 never"),
]


def _per_tile_reset() -> Kernel:
    """Persistent library GEMM (stages 3) whose consumer uses the inner k loop index as its
    step counter: the lowered expressions name the loop value (%id)."""
    from argus.compiler import lower_only
    from argus.kernels import gemm as G

    k = lower_only(G.gemm, s=G.GemmSchedule(stages=3))
    inner = {}
    for role in (op for op in k.body.ops if isinstance(op, O.RoleOp)):
        if role.name != "consumer":
            continue
        for op in role.body.walk():
            if isinstance(op, O.For) and any(isinstance(x, O.Consume) for x in op.body.ops):
                inner["k"] = op.var.id

    def reset(op):
        kid = inner["k"]
        return op.replace(stage_expr=f"%{kid} % S", parity_expr=f"(%{kid} / S) & 1")
    return rewrite(k, O.Consume, reset)


def _cluster_peers_one() -> Kernel:
    """The lowered cluster GEMM as a cluster-unaware lowering would leave it: peers = 1 and
    the consume steps' arrivals = consumer warpgroups (consistent with each other)."""
    k = lowered(K.make_cluster_gemm)
    k = rewrite(k, O.PipelineCreate, lambda op: op.replace(peers=1))
    return rewrite(k, O.Consume, lambda op: op.replace(arrivals=2))


CLEAN: list[tuple[str, Callable[[], Kernel]]] = [
    ("gemm", lambda: K.make_gemm().trace()),
    ("gemm_lowered", lambda: lowered(K.make_gemm)),
    ("gemm_3_consumers_192", lambda: K.make_gemm(consumers=3).trace()),
    ("gemm_k_reversed (a legal permutation of k)", lambda: K.make_gemm("k_reversed_legal").trace()),
    ("attention", lambda: K.make_attention().trace()),
    ("moe", lambda: K.make_moe().trace()),
    ("moe_lowered", lambda: lowered(K.make_moe)),
    ("bias_act", lambda: K.make_bias_gelu().trace()),
    ("row_softmax", lambda: K.make_softmax().trace()),
    ("select_transpose (one-hot selection, as compose's transpose)",
     lambda: K.make_select_transpose().trace()),
    ("library gemm, tma epilogue", _gemm_tma_epilogue),
    ("library gemm, ping-pong 128x128 (whole steps: wait_group 2)", _pingpong_gemm),
    ("library gemm, B [K, N]", _gemm_kn),
    ("cluster_gemm (2x1 cluster, B multicast)", lambda: K.make_cluster_gemm().trace()),
    ("cluster_gemm_lowered", lambda: lowered(K.make_cluster_gemm)),
    ("batched_kn_gemm", lambda: K.make_batched_kn_gemm().trace()),
    ("batched_kn_gemm_lowered", lambda: lowered(K.make_batched_kn_gemm)),
    ("online_softmax", lambda: K.make_online_softmax().trace()),
    ("row_stats", lambda: K.make_row_stats().trace()),
    ("row_max_ring (L1/99: a 0 fill under a max, blocks divide the row)",
     lambda: lowered(K.make_row_max_ring)),
    ("rms_peeled (first block reduced before the loop)", lambda: lowered(K.make_rms_peeled)),
    ("row_logsumexp (the row max read in every block)", lambda: K.make_row_logsumexp().trace()),
    ("row_logsumexp, lowered (the max hoisted, the blocks ringed)",
     lambda: lowered(K.make_row_logsumexp)),
    ("kl_div (a where on data values, a partial last block)", lambda: K.make_kl_div().trace()),
    ("kl_div, lowered", lambda: lowered(K.make_kl_div)),
    ("rms_peeled, traced", lambda: K.make_rms_peeled().trace()),
    ("split_k_loop (partials added in a runtime loop)", lambda: K.make_split_k_loop().trace()),
    ("guarded_store (a store under a condition true for every CTA)",
     lambda: K.make_guarded_store().trace()),
    ("last_split_stores (the last of the splits' tickets stores C)",
     lambda: K.make_last_split_stores().trace()),
    ("split_k_loop, lowered (the register ring)", lambda: lowered(K.make_split_k_loop)),
    ("split_k_sum", lambda: K.make_split_k_sum().trace()),
    ("col_max (masked columns on the axis a max over rows keeps: L1/49)",
     lambda: K.make_col_max().trace()),
    ("col_max, lowered (the register ring)", lambda: lowered(K.make_col_max)),
    ("fa_causal", lambda: K.make_fa_qonce(causal=True).trace()),
    ("fa_causal_lowered", lambda: lowered(K.make_fa_qonce, causal=True)),
    ("persistent_gemm", lambda: K.make_persistent_gemm().trace()),
    ("persistent_gemm_lowered", lambda: lowered(K.make_persistent_gemm)),
    ("fa_qonce", lambda: K.make_fa_qonce().trace()),
    ("fa_qonce_lowered", lambda: lowered(K.make_fa_qonce)),
]
