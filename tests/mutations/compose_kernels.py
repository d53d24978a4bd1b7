"""Seeded bugs in the KernelBench templates (argus/compose): each kernel below is the DSL
source a template renders (argus/compose/tile.py's fused tile kernel for an elementwise
expression, a reduction, a reduce-and-apply and a split reduction's combine pass;
argus/compose/conv.py's depthwise convolution with its bias), written out at one shape with a
bug switch. The bug's line is marked `# BUG:<name>`; tests/mutations/test_compose_mutations.py
checks each is an error naming a thread and that line, and each correct kernel is clean.

The shapes are the templates' own: 64 x 3000 fp32 (rows = 2 a CTA, BN = 1024 columns a
block, 3000 not a multiple of BN: the last block is masked), 8 split partials of 4096
columns, a 3x3 depthwise convolution of 4 channels with multiplier 2."""

from __future__ import annotations

import argus as ag

LOG2E = 1.4426950408889634


def make_softmax(bug: str | None = None):
    """softmax over the last axis: the online max/sum pass, then the apply pass (tile.py's
    reduce-and-apply as rendered for torch.softmax(x, -1) of a 64 x 3000 input)."""
    @ag.kernel(threads=256, name="compose_softmax")
    def compose_softmax(L0: ag.Tensor[64, 3000, ag.f32], OUT: ag.Tensor[64, 3000, ag.f32],
                        ROWS: int = 2, BN: int = 1024):
        p0, p1 = ag.grid(32, 1)
        o0 = (p0 % 32) * ROWS
        acc1 = ag.full((ROWS, BN), float('-inf'))
        acc2 = ag.full((ROWS, BN), 0.0)
        blocks = 2 if bug == "stats_skip_last" else 3
        for b1 in ag.range(blocks):  # BUG:stats_skip_last
            o1 = b1 * BN
            x3 = ag.load(L0, (o0, o1,), (ROWS, BN))
            inb = (ag.arange(ROWS)[:, None] + o0 < 64) & (ag.arange(BN)[None, :] + o1 < 3000)
            fill = 0.0 if bug == "max_fill_zero" else float('-inf')
            mx4 = ag.where(inb, x3, fill)  # BUG:max_fill_zero
            mnew5 = ag.maximum(acc1, mx4)
            ex6 = ag.where(inb & (mnew5 > float('-inf')),
                           ag.exp2((mx4 - mnew5) * LOG2E, approx=True), 0.0)
            al7 = ag.where(mnew5 > float('-inf'),
                           ag.exp2((acc1 - mnew5) * LOG2E, approx=True), 0.0)
            acc2 = acc2 * al7 + ex6
            acc1 = mnew5
        mrow8 = acc1
        mrow8 = mrow8.max(axis=1)
        acc2 = acc2 * ag.exp(acc1 - mrow8)
        acc2 = acc2.sum(axis=1)
        acc1 = mrow8
        apply = 2 if bug == "apply_skips_last" else 3
        for b1 in ag.range(apply):  # BUG:apply_skips_last
            o1 = b1 * (ROWS if bug == "apply_stride_rows" else BN)  # BUG:apply_stride_rows
            x9 = ag.load(L0, (o0, o1,), (ROWS, BN))
            v12 = ag.exp(x9 - acc1) / acc2
            rows = o0 + 1 if bug == "apply_rows_shifted" else o0
            ag.store(OUT, (rows, o1,), v12)  # BUG:apply_rows_shifted
    return compose_softmax


def make_row_sum(bug: str | None = None):
    """x.sum(-1) of a 64 x 3000 input (tile.py's reduction: one block loop, masked to 0)."""
    @ag.kernel(threads=256, name="compose_row_sum")
    def compose_row_sum(L0: ag.Tensor[64, 3000, ag.f32], OUT: ag.Tensor[64, 1, ag.f32],
                        ROWS: int = 2, BN: int = 1024):
        ctas = 31 if bug == "grid_short" else 32
        p0, p1 = ag.grid(ctas, 1)  # BUG:grid_short
        o0 = (p0 % 32) * ROWS
        acc1 = ag.full((ROWS, BN), 0.0)
        for b1 in ag.range(3):
            o1 = b1 * BN
            x2 = ag.load(L0, (o0, o1,), (ROWS, BN))
            fill = 1.0 if bug == "mask_fill_one" else 0.0
            m3 = ag.where((ag.arange(ROWS)[:, None] + o0 < 64)  # BUG:mask_fill_one
                          & (ag.arange(BN)[None, :] + o1 < 3000), x2, fill)  # BUG:mask_fill_one
            acc1 = (acc1 + m3)
        acc1 = acc1.sum(axis=1)
        row = o0 + ROWS if bug == "store_next_rows" else o0
        ag.store(OUT, (row, 0,), acc1)  # BUG:store_next_rows
    return compose_row_sum


def make_scale_shift(bug: str | None = None):
    """x * w + 1.0 with w [1, 3000] broadcast over the rows (tile.py's elementwise template)."""
    @ag.kernel(threads=256, name="compose_scale_shift")
    def compose_scale_shift(L0: ag.Tensor[64, 3000, ag.f32], L1: ag.Tensor[1, 3000, ag.f32],
                            OUT: ag.Tensor[64, 3000, ag.f32], ROWS: int = 2, BN: int = 1024):
        col_ctas = 2 if bug == "cols_grid_floor" else 3
        p1, p0 = ag.grid(col_ctas, 32)  # BUG:cols_grid_floor
        o0 = (p0 % 32) * ROWS
        o1 = p1 * BN
        x1 = ag.load(L0, (o0, o1,), (ROWS, BN))
        col = 0 if bug == "broadcast_stride" else o1
        x2 = ag.load(L1, (0, col,), (1, BN))  # BUG:broadcast_stride
        v4 = x1 * x2 + 1.0
        rows = o0 + 1 if bug == "rows_shifted" else o0
        ag.store(OUT, (rows, o1,), v4)  # BUG:rows_shifted
    return compose_scale_shift


def make_batch_scale(bug: str | None = None):
    """x * w of a [4, 64, 3000] input and w [1, 64, 1] (tile.py's elementwise template with a
    kept outer group: the batch c0 and the row block decoded from one program id)."""
    @ag.kernel(threads=256, name="compose_batch_scale")
    def compose_batch_scale(L0: ag.Tensor[4, 64, 3000, ag.f32], L1: ag.Tensor[1, 64, 1, ag.f32],
                            OUT: ag.Tensor[4, 64, 3000, ag.f32], ROWS: int = 2,
                            BN: int = 1024):
        p1, p0 = ag.grid(3, 128)
        o1 = (p0 % 32) * ROWS
        r = p0 // 32
        c0 = r % 4
        o2 = p1 * BN
        x1 = ag.load(L0, (c0, o1, o2,), (ROWS, BN))
        x2 = ag.load(L1, (0, o1, 0,), (ROWS, 1))
        v3 = (x1 * x2)
        batch = (r + 1) % 4 if bug == "store_other_batch" else c0
        ag.store(OUT, (batch, o1, o2,), v3)  # BUG:store_other_batch
    return compose_batch_scale


def make_batch_residual(bug: str | None = None):
    """x * w + y of [4, 64, 3000] inputs x, y and w [1, 64, 1] (tile.py's elementwise template
    with a kept outer group, a residual added): only w's dim0 broadcasts; x and y are read at
    the batch c0 the program id decodes."""
    @ag.kernel(threads=256, name="compose_batch_residual")
    def compose_batch_residual(L0: ag.Tensor[4, 64, 3000, ag.f32],
                               L1: ag.Tensor[1, 64, 1, ag.f32],
                               L2: ag.Tensor[4, 64, 3000, ag.f32],
                               OUT: ag.Tensor[4, 64, 3000, ag.f32], ROWS: int = 2,
                               BN: int = 1024):
        p1, p0 = ag.grid(3, 128)
        o1 = (p0 % 32) * ROWS
        r = p0 // 32
        c0 = r % 4
        o2 = p1 * BN
        xb = 0 if bug == "scale_batch_zero" else c0
        x1 = ag.load(L0, (xb, o1, o2,), (ROWS, BN))  # BUG:scale_batch_zero
        x2 = ag.load(L1, (0, o1, 0,), (ROWS, 1))
        yb = 0 if bug == "residual_batch_zero" else c0
        x3 = ag.load(L2, (yb, o1, o2,), (ROWS, BN))  # BUG:residual_batch_zero
        v4 = (x1 * x2) + x3
        ag.store(OUT, (c0, o1, o2,), v4)
    return compose_batch_residual


def make_split_sum(bug: str | None = None):
    """x.sum(1) of a [4, 64, 3000] input as a split reduction's first pass (tile.py, split-R:
    8 slices of 4 row blocks each write a partial; the combine pass adds them)."""
    @ag.kernel(threads=256, name="compose_split_sum")
    def compose_split_sum(L0: ag.Tensor[4, 64, 3000, ag.f32],
                          OUT: ag.Tensor[8, 4, 1, 3000, ag.f32], ROWS: int = 2,
                          BN: int = 1024):
        p1, p0, ps = ag.grid(3, 4, 8)
        c0 = p0 % 4
        o2 = p1 * BN
        acc1 = ag.full((1, BN), 0.0)
        blocks = 3 if bug == "slice_skips_last" else 4
        for bb1 in ag.range(blocks):  # BUG:slice_skips_last
            b1 = ps * 4 + bb1
            o1 = b1 * ROWS
            x2 = ag.load(L0, (c0, o1, o2,), (ROWS, BN))
            m3 = ag.where((ag.arange(ROWS)[:, None] + o1 < 64), x2, 0.0)
            r4 = m3.sum(axis=0)
            acc1 = (acc1 + r4)
        part = 0 if bug == "partial_slot_fixed" else ps
        ag.store(OUT, (part, c0, 0, o2,), acc1)  # BUG:partial_slot_fixed
    return compose_split_sum


def make_combine(bug: str | None = None):
    """The split reduction's second pass (tile.py's combine_kernel('sum', 8, 4096)): the 8
    fp32 partials of each column summed in one block of rows."""
    @ag.kernel(threads=256, name="compose_combine")
    def compose_combine(L0: ag.Tensor[8, 4096, ag.f32], OUT: ag.Tensor[1, 4096, ag.f32],
                        ROWS: int = 8, BN: int = 256):
        ctas = 15 if bug == "cols_grid_short" else 16
        p1, p0 = ag.grid(ctas, 1)  # BUG:cols_grid_short
        o1 = p1 * BN
        acc1 = ag.full((ROWS, BN), 0.0)
        for b0 in ag.range(1):
            o0 = b0 * ROWS
            x2 = ag.load(L0, (o0, o1,), (ROWS, BN))
            last = 7 if bug == "last_partial_dropped" else 8
            m3 = ag.where((ag.arange(ROWS)[:, None] + o0 < last)  # BUG:last_partial_dropped
                          & (ag.arange(BN)[None, :] + o1 < 4096), x2, 0.0)
            acc1 = (acc1 + m3)
        acc1 = acc1.sum(axis=0)
        ag.store(OUT, (0, o1,), acc1)
    return compose_combine


def make_depthwise_bias(bug: str | None = None):
    """conv.py's depthwise template (3x3, stride 1, padding 1, 4 input channels, multiplier 2:
    8 output channels) over rows nk = n * 8 + k, ROWS = 1, with the bias of output channel
    k = nk % 8 added in the epilogue."""
    @ag.kernel(threads=32, name="compose_depthwise")
    def depthwise(X: ag.Tensor["NC", 16, 16, 1, ag.f32], Wt: ag.Tensor[8, 9, ag.f32],
                  B: ag.Tensor[8, 1, ag.f32], Y: ag.Tensor["NK", 16, 16, 1, ag.f32],
                  BN: int = 16, ROWS: int = 1):
        pb, q = ag.grid(ag.cdiv(Y.shape[0] * 16, ROWS), ag.cdiv(16, BN))
        o_last = q * BN
        nk = pb // 16
        o0 = pb % 16
        kk = nk % 8
        xr = nk // 8 * 4 + kk // 2
        acc = ag.full((BN, 1), 0.0)
        for t in range(9):
            dy, dx = t // 3 - 1, t % 3 - 1
            x = ag.load(X, (xr, o0 + dy, o_last + dx, 0), (BN, 1), other=0.0)
            acc = acc + x * ag.load(Wt, (kk, t), (1, 1))
        channel = kk // 2 if bug == "bias_input_channel" else kk
        acc = acc + ag.load(B, (channel, 0), (1, 1))  # BUG:bias_input_channel
        out_row = o0 + 1 if bug == "store_row_below" else o0
        ag.store(Y, (nk, out_row, o_last, 0), acc)  # BUG:store_row_below
    return depthwise


BUGS = [
    (make_softmax, "max_fill_zero", ("fill.identity",)),
    (make_softmax, "apply_skips_last", ("store.coverage",)),
    (make_softmax, "apply_rows_shifted", ("store.coords", "store.coverage")),
    (make_softmax, "apply_stride_rows", ("store.once", "store.coverage")),
    (make_row_sum, "grid_short", ("store.coverage",)),
    (make_row_sum, "store_next_rows", ("store.coords", "store.coverage")),
    (make_scale_shift, "rows_shifted", ("store.coords", "store.coverage")),
    (make_scale_shift, "cols_grid_floor", ("store.coverage",)),
    (make_split_sum, "partial_slot_fixed", ("store.once", "store.coverage")),
    (make_combine, "cols_grid_short", ("store.coverage",)),
    # elementwise accumulators carried across the block loop and reduced after it
    # (argus/verify/accumulate.py): reduce.coverage of the loop's parts, fill.identity of a
    # where's constant accumulated every iteration
    (make_softmax, "stats_skip_last", ("reduce.coverage",)),
    (make_row_sum, "mask_fill_one", ("fill.identity",)),
    # integer dims linked by position and extent (check_tiles._linked_integer_fields)
    (make_scale_shift, "broadcast_stride", ("ew.broadcast",)),
    # an integer dim's extent from the tensor with the record's `dim` fields, and a split's
    # segments counted over the program id that picks them (check_reduce._coverage)
    (make_split_sum, "slice_skips_last", ("reduce.coverage",)),
    # a size-1 dim's position 0 is a broadcast, not an element met pointwise: x's batch is the
    # product's dim0 (transfer/tiles._broadcast_kept), linked to OUT's by extent
    (make_batch_scale, "store_other_batch", ("store.coords",)),
    # leading dims decoded from one program id (image pb // 16, row pb % 16) covered tile by
    # tile, as one merged dim; a unit outside the output with no spare unit is an error
    # (check_stores._coverage, _tile_obligation)
    (make_depthwise_bias, "store_row_below", ("store.coverage",)),
    # an integer dim linked across operands of different dim sets where the tensors giving
    # it are of one rank (Wt[8, 9]'s dim0 in x * Wt, B[8, 1]'s dim0: check_tiles._one_rank_fields)
    (make_depthwise_bias, "bias_input_channel", ("ew.broadcast",)),
    # a mask conjunct that bounds the reduced coordinate by constants alone (no other
    # coordinate, length or size: no causal / variable-length relation) must keep the row
    # [0, extent) (check_reduce._mask_keeps_row)
    (make_combine, "last_partial_dropped", ("reduce.coverage",)),
    # an integer dim wider than 1 read at 0 and met by a moving position of the same dim in
    # one elementwise op: one batch against every batch, not a broadcast
    # (check_tiles._zero_reads)
    (make_batch_residual, "residual_batch_zero", ("ew.broadcast",)),
    (make_batch_residual, "scale_batch_zero", ("ew.broadcast",)),
]

# Seeded bugs the verifier does not catch yet (test_compose_mutations.py: strict xfail, so a
# fix shows); empty since h227 / h228. The templates render static shapes: every dim is an
# integer, whose tag field is `dim{i}` (a position, not a name). ew.broadcast links a `dim{i}` field where the
# position has one extent over the kernel's integer tensors, and reduce.coverage takes its
# extent from the tensor with the record's `dim` fields (broadcast_stride, slice_skips_last
# are in BUGS); store.coords links them by extent only where one extent is unambiguous (a
# size-1 dim's extent left out for a field that moves: store_other_batch is in BUGS).
# Elementwise accumulators carried across the block loop and reduced after it are read as
# reductions (argus/verify/accumulate.py: stats_skip_last, mask_fill_one are in BUGS).
# Leading dims decoded from one program id are covered tile by tile, and `dim{i}` is linked
# across dim sets where its source tensors are of one rank (store_row_below,
# bias_input_channel are in BUGS), and a mask conjunct bounding the reduced coordinate by
# constants alone must keep the whole row (last_partial_dropped is in BUGS). None is left.
GAPS: list = []

CLEAN = [make_softmax, make_row_sum, make_scale_shift, make_batch_scale, make_batch_residual,
         make_split_sum, make_combine, make_depthwise_bias]
