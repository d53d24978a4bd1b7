"""Seeded bugs for the MoE kernels' invariants (argus/kernels/moe.py, moe_routing.py), in the
corpus's form (tests/mutations/corpus.py: Mutation, lowered mutations by IR rewrite, DSL
mutations marked `# BUG:<name>` in this file), kept in their own file so the shared corpus is
only read:

  * no tile reads another expert's weights: the library gate-up GEMM with its B box's expert
    coordinate replaced, and the same in the swap-AB decode GEMM, whose weight box is the A
    operand (wgmma.agree on the `expert` tag, given routing's contract);
  * the permute writes each (token, slot) to its own row: every slot to slot 0's row
    (store.once, given position() injective);
  * padding rows and other tokens' rows never reach a token's output: the combine reading the
    row after a slot's position (store.coords on the `token` tag);
  * with CTA pairs along N (cluster_n=2, the token tile multicast in halves), whose `expert`
    tag mentions k without following it: another expert's weights are still caught
    (wgmma.agree), and so is the producer's K walk stepping half a block (wgmma.k-once on
    `k`);
  * the fp8 down GEMM's N-split (argus/kernels/moe_fp8.py FP8_PREFILL_SPLIT_TMA: two
    128-column sums stored one after the other): the second half's first block stored at the
    first half's columns (store.coords: its elements are columns 128.., and store.once);
  * its block scales through shared memory (FP8_PREFILL_SPLIT_SMEM): the activation-scale
    box started at the K block k instead of the aligned 4j of k = 4j + i, the copy that
    trapped on the H200 (tma.inner-align);
  * the gate-up quantizing its own output (MoeFp8Schedule.quantize_out, `_quantize_unit`):
    each warpgroup's row scales stored at the unit's first row instead of its own (m * bm,
    not m * bm + wg * 64): both warpgroups write the same 64 scales, the second half's rows
    get none (store.once);
  * a consumer warpgroup skipping its all-padding rows (MoeSchedule.skip_pad_halves,
    moe.consume_unit) without taking part in the ring: the branch that waits for and
    releases the unit's stages removed, so the empty barriers miss its arrivals and its step
    counter falls behind the producer's (pipe.totals: the producer waits forever). A skip of
    rows that are not all padding is the interpreter's to see (the verifier knows no TileRows
    semantics): tests/moe/test_moe_skip_pad_halves.py;
  * same-expert pair multicast (MoeFp8Schedule.pair_multicast: the B tile multicast by a
    2-CTA pair only when its two m-tiles have one expert, 128-row padding kept): the share
    test ignoring the experts (a pair straddling two experts multicasts one expert's halves),
    and the multicast half's expert coordinate from its row offset (wgmma.agree, under the
    path condition of the guard that chose multicast).
"""

import argus as ag
from argus.ir import ops as O
from argus.kernels.moe import DECODE, PREFILL_GATE_UP_PAIR_N, grouped_gemm_kernel
from tests.mutations.corpus import ACC, Mutation, lowered_mutation, rewrite


def _gate_up(bug=None):
    return grouped_gemm_kernel(True)


def _with_coord(op, i: int, j: int):
    """The TMA load with coordinate i replaced by its coordinate j."""
    coords = list(op.coords)
    coords[i] = coords[j]
    return op.replace(coords=tuple(coords))


def make_permute(bug: str | None = None, top_k: int = 2, bh: int = 1024):
    """The library permute (moe_routing.permute_kernel) with a bug switch."""
    @ag.kernel(threads=128, name="moe_permute_mut")
    def moe_permute(X: ag.Tensor["T", "H", ag.bf16], Pos: ag.Tensor["N", 1, ag.i32],
                    Xp: ag.Tensor["M", "H", ag.bf16]):
        position = ag.opaque("position")
        ag.tag_tensor(Pos, value=lambda i, zero: position(i))
        ag.tag_assume(lambda a, b: ag.tag_any(a == b, position(a) != position(b)))
        t, block = ag.grid(X.shape[0], ag.cdiv(X.shape[1], bh))
        h0 = block * bh
        x = ag.load(X, (t, h0), (1, bh))
        for j in range(top_k):
            if bug == "slot_collision":
                row = ag.load_scalar(Pos, (t * top_k, 0))  # BUG:slot_collision
            else:
                row = ag.load_scalar(Pos, (t * top_k + j, 0))
            ag.store(Xp, (row, h0), x)  # BUG:slot_collision

    return moe_permute


def make_combine(bug: str | None = None, top_k: int = 2, bh: int = 1024):
    """The library combine (moe_routing.combine_kernel) with a bug switch."""
    @ag.kernel(threads=128, name="moe_combine_mut")
    def moe_combine(Y: ag.Tensor["M", "H", ag.bf16], Pos: ag.Tensor["N", 1, ag.i32],
                    Weights: ag.Tensor["T", top_k, ag.f32], Out: ag.Tensor["T", "H", ag.bf16]):
        position, token_of = ag.opaque("position"), ag.opaque("token_of")
        ag.tag_tensor(Pos, value=lambda i, zero: position(i))
        ag.tag_tensor(Y, token=lambda r, h: token_of(r))
        ag.tag_tensor(Out, token=lambda t, h: t)
        ag.tag_assume(lambda i: token_of(position(i)) == i // top_k)
        t, block = ag.grid(Out.shape[0], ag.cdiv(Out.shape[1], bh))
        h0 = block * bh
        rows = [ag.load_scalar(Pos, (t * top_k + j, 0)) for j in range(top_k)]
        weights = [ag.load_scalar(Weights, (t, j)) for j in range(top_k)]
        if bug == "reads_next_row":
            first = ag.load(Y, (rows[0] + 1, h0), (1, bh))  # BUG:reads_next_row
        else:
            first = ag.load(Y, (rows[0], h0), (1, bh))
        total = first.to(ag.f32) * weights[0]
        total = total + ag.load(Y, (rows[1], h0), (1, bh)).to(ag.f32) * weights[1]
        ag.store(Out, (t, h0), total.to(ag.bf16))  # BUG:reads_next_row

    return moe_combine


def _decode_gate_up_with(fn, nth: int):
    """The library decode gate-up GEMM (swap-AB) lowered, its nth TMA load rewritten by fn."""
    def build():
        from argus.compiler import lower_only

        return rewrite(lower_only(grouped_gemm_kernel(True), s=DECODE), O.TmaLoad, fn, nth)
    return build


def _pair_n_gate_up_with(fn, nth: int):
    """The pair-N gate-up GEMM (PREFILL_GATE_UP_PAIR_N) lowered, its nth TMA load rewritten by
    fn."""
    def build():
        from argus.compiler import lower_only

        return rewrite(lower_only(grouped_gemm_kernel(True), s=PREFILL_GATE_UP_PAIR_N),
                       O.TmaLoad, fn, nth)
    return build


def pair_n_half_k_step():
    """The pair-N gate-up GEMM (PREFILL_GATE_UP_PAIR_N) lowered, its producer's K walk
    k0 = k * bk stepping bk / 2: step k loads the columns [k * bk/2, k * bk/2 + bk) of A and W,
    so the upper half of each step's block is multiplied again as the next step's lower half
    (and the last K / 2 columns never)."""
    from argus.compiler import lower_only

    kernel = lower_only(grouped_gemm_kernel(True), s=PREFILL_GATE_UP_PAIR_N)
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
    k0 = defs[loads[0].coords[-1].id]   # A's (row, k0): k0 = k * bk
    assert all(ld.coords[-1].id == k0.result.id for ld in loads), "A and W share k0"
    assert isinstance(k0, O.Arith) and k0.fn == "mul", k0
    bk = defs[k0.rhs.id]
    assert isinstance(bk, O.Const) and sum(
        bk.result.id in {v.id for v in op.operands()} for op in kernel.walk()) == 1, \
        "the bk constant is k0's alone"
    return rewrite(kernel, O.Const, lambda op: op.replace(value=op.value // 2)
                   if op.result.id == bk.result.id else op)


def fp8_split_down_half_over_half():
    """The fp8 down GEMM with n_split=2 and the TMA store (FP8_PREFILL_SPLIT_TMA) lowered,
    its third TMA store (half 1's first 64-column block, tile column 128) at the first store's
    column (half 0's first block): the second sum written over the first."""
    from argus.compiler import lower_only
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_TMA, grouped_gemm_fp8_kernel

    kernel = lower_only(grouped_gemm_fp8_kernel(False), s=FP8_PREFILL_SPLIT_TMA)
    stores = [op for op in kernel.walk() if isinstance(op, O.TmaStore)]
    assert len(stores) == 4, "two 64-column blocks per half"
    col = stores[0].coords[-1]
    return rewrite(kernel, O.TmaStore,
                   lambda op: op.replace(coords=(*op.coords[:-1], col)), nth=2)


def fp8_smem_scale_box_at_k():
    """The fp8 gate-up with smem scales (FP8_PREFILL_SPLIT_SMEM) lowered, its activation-scale
    TMA load (the fourth: A, gate, up, then ScaleA) at (row, k) instead of (row, k // 4 * 4):
    4 k bytes into a row, not 16-byte aligned for k % 4 != 0."""
    from argus.compiler import lower_only
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM, grouped_gemm_fp8_smem_kernel

    kernel = lower_only(grouped_gemm_fp8_smem_kernel(True), s=FP8_PREFILL_SPLIT_SMEM)
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
    kq = defs[loads[3].coords[-1].id]                     # kq = (k // 4) * 4
    assert isinstance(kq, O.Arith) and kq.fn == "mul", kq
    div = defs[kq.lhs.id]
    assert isinstance(div, O.Arith) and div.fn == "floordiv", div
    return rewrite(kernel, O.TmaLoad,
                   lambda op: op.replace(coords=(*op.coords[:-1], div.lhs)), nth=3)


def fp8_fused_quantize_scale_row():
    """The fp8 gate-up with its quantizing epilogue (FP8_PREFILL_SPLIT_SMEM_TMA with
    quantize_out, K-major scales) lowered, its scale store (the last Store: h's e4m3 tile,
    then ScaleC) at row m * bm, the unit's first, instead of row0 = m * bm + wg * rows."""
    from dataclasses import replace

    from argus.compiler import lower_only
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, grouped_gemm_fp8_smem_kernel

    kernel = lower_only(grouped_gemm_fp8_smem_kernel(True, True, True),
                        s=replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True))
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    stores = [op for op in kernel.walk() if isinstance(op, O.Store)]
    assert len(stores) == 2 and stores[1].tensor.hint == "ScaleC", stores
    row0 = defs[stores[1].offsets[0].id]                  # m * bm + wg * rows
    assert isinstance(row0, O.Arith) and row0.fn == "add", row0
    return rewrite(kernel, O.Store,
                   lambda op: op.replace(offsets=(row0.lhs, *op.offsets[1:])), nth=1)


def skip_pad_half_keeps_its_stages():
    """The fp8 gate-up with skip_pad_halves (FP8_PREFILL_SPLIT_SMEM_TMA) lowered, the skipping
    warpgroup's branch (`with ag.when(spare <= 0)`: each K step's stage waited for and
    released unread) removed: a warpgroup whose rows are all padding consumes no step of the
    unit, the producer waits for its arrivals on the empty barriers forever, and the next
    unit's steps would read the wrong stages."""
    from dataclasses import replace

    from argus.compiler import lower_only
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, grouped_gemm_fp8_smem_kernel

    kernel = lower_only(grouped_gemm_fp8_smem_kernel(True, tile_rows=True),
                        s=replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True))
    # the skip: the If whose consume steps only release (no wgmma in it)
    skips = [op for op in kernel.walk() if isinstance(op, O.If)
             and any(isinstance(x, O.Consume) for x in op.body.walk())
             and not any(isinstance(x, O.Wgmma) for x in op.body.walk())]
    assert len(skips) == 1, skips
    cond = skips[0].cond.id
    return rewrite(kernel, O.If, lambda op: None if op.cond.id == cond else op)


def _pair_multicast(gated: bool = True):
    """The fp8 smem-scale GEMM with same-expert pair multicast (MoeFp8Schedule.pair_multicast
    on FP8_PREFILL_SPLIT_SMEM_TMA) lowered."""
    from dataclasses import replace

    from argus.compiler import lower_only
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, grouped_gemm_fp8_smem_kernel

    return lower_only(grouped_gemm_fp8_smem_kernel(gated),
                      s=replace(FP8_PREFILL_SPLIT_SMEM_TMA, pair_multicast=True))


def pair_multicast_experts_ignored():
    """The pair-multicast gate-up lowered, its share test min(m_tiles - 2j - 1, 1 - |e0 - e1|)
    made min(m_tiles - 2j - 1, m_tiles - 2j - 1): the pair multicasts whenever its second
    m-tile exists, so where the two m-tiles belong to different experts each CTA multiplies
    its rows with half a tile of the other expert's weights (the peer's multicast half)."""
    kernel = _pair_multicast()
    defs = {r.id: op for op in kernel.walk() for r in op.results()}
    guards = [op for op in kernel.walk() if isinstance(op, O.If)
              and any(isinstance(x, O.TmaLoad) and x.multicast for x in op.body.walk())]
    assert len(guards) == 1, guards
    test = defs[defs[guards[0].cond.id].lhs.id]          # shared > 0: shared = min(...)
    assert isinstance(test, O.Arith) and test.fn == "min", test
    return rewrite(kernel, O.Arith, lambda op: op.replace(rhs=op.lhs)
                   if op.result.id == test.result.id else op)


def pair_multicast_half_from_row():
    """The pair-multicast down GEMM lowered, its multicast half's expert coordinate (TMA loads
    in program order: 0 A, 1 the multicast half of W, 2 the own whole W tile, then the
    scales) replaced by the box's row offset: another expert's weights multicast to both."""
    return rewrite(_pair_multicast(False), O.TmaLoad, lambda op: _with_coord(op, 0, 1), nth=1)


def _traced(factory, bug):
    return lambda: factory(bug).trace()


# TMA loads of the gate-up GEMM in program order: 0 the token rows (A), 1 the gate box, 2 the
# up box; W's coordinates are (expert, plane, row, k)
MOE_CORPUS: list[Mutation] = [
    Mutation("moe/grouped_gemm_expert_from_row", "moe", 21,
             lowered_mutation(_gate_up, O.TmaLoad, lambda op: _with_coord(op, 0, 2), nth=1),
             ("wgmma.agree",), ACC + ("a_element", "b_element"), ("A.expert == B.expert",),
             None, "the gate box's expert coordinate is its row offset: another expert's "
                   "weights"),
    # decode (swap-AB): TMA loads 0 the gate box, 1 the up box (wgmma's A), 2 the token rows (B)
    Mutation("moe/decode_gemm_expert_from_row", "moe", 21,
             _decode_gate_up_with(lambda op: _with_coord(op, 0, 2), nth=0),
             ("wgmma.agree",), ACC + ("a_element", "b_element"), ("A.expert == B.expert",),
             None, "swap-AB: the gate box's expert coordinate is its row offset: another "
                   "expert's weights as wgmma's A operand"),
    Mutation("moe/permute_slot_collision", "moe", 22, _traced(make_permute, "slot_collision"),
             ("store.once",), ("output",), (), "slot_collision",
             "every slot of a token is written to slot 0's row"),
    Mutation("moe/combine_reads_next_row", "moe", 22, _traced(make_combine, "reads_next_row"),
             ("store.coords",), ("output", "value_tags"), ("token",), "reads_next_row",
             "the combine reads the row after a slot's position: padding or another token"),
    # pair-N: the token tile's `expert` mentions k without following it, so it is no k
    # coordinate (check_wgmma._reduction_fields); its agreement with the weights' is still asked
    Mutation("moe/pair_n_expert_from_row", "moe", 21,
             _pair_n_gate_up_with(lambda op: _with_coord(op, 0, 2), nth=1),
             ("wgmma.agree",), ACC + ("a_element", "b_element"), ("A.expert == B.expert",),
             None, "cluster_n=2: the gate box's expert coordinate is its row offset: another "
                   "expert's weights against the multicast token tile"),
    Mutation("moe/pair_n_k_walk_half_step", "moe", 2, pair_n_half_k_step,
             ("wgmma.k-once",), ("k", "first", "second"), ("global k =", "multiplied twice"),
             None, "cluster_n=2: the producer's K walk steps half a block, so every block's "
                   "upper half is multiplied twice"),
    Mutation("moe/fp8_split_down_half_over_half", "moe", 22, fp8_split_down_half_over_half,
             ("store.coords",), ("output", "value_tags"), ("'nc': 128",), None,
             "fp8 n_split=2 down: half 1's first block stored at half 0's columns",
             also=("store.once",)),
    Mutation("moe/fp8_smem_scale_box_at_k", "moe", 0, fp8_smem_scale_box_at_k,
             ("tma.inner-align",), ("inner_coordinate", "byte_offset"), ("ScaleA",), None,
             "fp8 smem scales: the activation-scale box starts at block k, 4 k bytes into a "
             "row (traps on Hopper unless k % 4 == 0)"),
    Mutation("moe/fp8_fused_quantize_scale_row", "moe", 22, fp8_fused_quantize_scale_row,
             ("store.once",), ("output",), ("ScaleC",), None,
             "fp8 gate-up quantize_out: each warpgroup's row scales stored at the unit's "
             "first row (both warpgroups write the same 64 scales)"),
    Mutation("moe/skip_pad_half_keeps_its_stages", "moe", 10, skip_pad_half_keeps_its_stages,
             ("pipe.totals",), ("shapes",), ("waits forever",), None,
             "skip_pad_halves: the all-padding warpgroup skips its stage releases too (the "
             "producer hangs on the empty barrier)"),
    Mutation("moe/fp8_pair_multicast_experts_ignored", "moe", 21,
             pair_multicast_experts_ignored, ("wgmma.agree",), ACC + ("a_element", "b_element"),
             ("A.expert == B.expert",), None,
             "fp8 pair_multicast: the pair multicasts its B tile whatever its two m-tiles' "
             "experts (a pair straddling two experts shares one expert's weights)"),
    Mutation("moe/fp8_pair_multicast_half_from_row", "moe", 21,
             pair_multicast_half_from_row, ("wgmma.agree",), ACC + ("a_element", "b_element"),
             ("A.expert == B.expert",), None,
             "fp8 pair_multicast down: the multicast half's expert coordinate is its row "
             "offset: another expert's weights in both CTAs"),
]

MOE_CLEAN = [
    ("moe/permute", lambda: make_permute().trace()),
    ("moe/combine", lambda: make_combine().trace()),
]
