"""The library's GEMM kernels: C = A @ B with fp32 accumulation on Hopper's tensor cores.

One DSL kernel, specialized by a small factory (`gemm_kernel`) over what the *problem* fixes:
input and output dtypes, B's layout ("nk": B is [N, K], K contiguous — `x @ W.T` with W
[N, K] row-major; "kn": B is [K, N], N contiguous — `x @ W`), and a batch dimension. What is
tunable lives in `GemmSchedule`, the agent's and the autotuner's action space.

Built from the warp-specialized skeleton (argus/kernels/warp_specialized.py): one producer
warpgroup (40 registers) streams A and B tiles through a STAGES-deep TMA ring into
128B-swizzled shared memory; `consumers` consumer warpgroups (232 registers) each multiply a
64-row slice of the BM x BN tile with wgmma. The compiler derives stages, mbarrier parities and
expect-tx bytes; its step counters run on across output tiles, so the persistent variant (one
CTA per SM walking tiles in grouped order) stays in phase and its producer loads the next tile
while the consumers store this one. This file adds what the problem kinds need: swap-AB (the
weights as wgmma's A operand, the tile stored transposed), MN-major operands for B [K, N], a
batch dimension, and the checks that tie a schedule to a problem.
"""

import functools
from contextlib import nullcontext
from dataclasses import dataclass, field, fields

import argus as ag
from argus.dtypes import DType
from argus.kernels.split_k_sum import MAX_SPLITS
from argus.kernels.warp_specialized import (OperandRing, Staging, TileScheduler, Unit,
                                            WarpSpecializedSchedule, store_tile,
                                            store_tile_stacked, store_tile_staged, tile_coords)

__all__ = ["GemmSchedule", "gemm", "gemm_kernel", "tile_coords"]  # tile_coords: examples/gemm.py


@dataclass(frozen=True)
class GemmSchedule(WarpSpecializedSchedule):
    """What the bf16/fp16 GEMM lets a tuner choose: the skeleton's fields (tile, ring, roles,
    raster, epilogue, cluster; argus/kernels/warp_specialized.py), then these."""

    k_atoms: int = 1        # 128-byte K slices per stage (longer contiguous reads of each row)
    # K cut into this many slices, each a batch of the batched kernel into an fp32 workspace,
    # then summed (argus/ops/split_k.py): more units of work for skinny GEMMs. Not a kernel
    # choice: argus.ops.matmul runs the split.
    split_k: int = 1
    # swap-AB for skinny GEMMs: the weights (W [N, K] of x @ W.T, or W [K, N] of x @ W, read
    # MN-major) are wgmma's M side (bm rows of W^T per tile) and the tokens its N side (bn of
    # them), so a stage carries bn token rows instead of 64 mostly-empty ones and more of the
    # ring holds weights; the accumulator is a block of C^T, stored transposed.
    swap_ab: bool = False
    # TMA-store epilogue: columns of the tile staged in shared memory per round (0: all bn at
    # once). Fewer columns free shared memory for another ring stage (128x176: 5 stages
    # instead of 4); each further round first waits for the previous round's bulk stores to
    # have read the staging buffer.
    store_cols: int = 0
    # stream-K's simplest form: the tiles of the last, partial wave of the persistent walk
    # (2048 x 7168 in 128x256 tiles: 448 tiles, 3.39 waves of 132) run as tail_splits K
    # slices each, so the tail fills about tail_splits times more SMs; each slice writes its
    # fp32 partial tile to a workspace and a second kernel sums them into C
    # (argus/kernels/split_k_sum.py `tail_sum_kernel`). 1: off. argus.ops.matmul runs it.
    tail_splits: int = 1
    # who adds the tail's K slices up: "kernel", the second kernel above; "fused", the GEMM
    # itself: the slice that arrives last at its tile (a self-resetting arrival counter per
    # tail tile and consumer warpgroup, as MoeSchedule.fused_finish) adds the slices' fp32
    # partials in slice order and runs the epilogue, so no second launch (and no pass over
    # the partials after the GEMM's last wave) is paid
    tail_finish: str = "kernel"
    # who hands out the persistent walk's units: "static", each CTA strides over units
    # first, first + programs, ... (TileScheduler.units); "dynamic", each CTA's producer draws
    # its next unit from a global work counter in the order CTAs ask (TileScheduler.draws) and
    # passes it to the consumers in its ring's slots, so the units running at one time stay
    # neighbours in the raster (docs/design/dynamic_scheduler.md). The kernel then takes an
    # int32 counter [1], zero before the first launch (each launch leaves it zero):
    # gemm_kernel(..., dynamic=True). In repr only when not "static", so the reprs of every
    # earlier schedule (the tuning cache's candidate fingerprints, golden IR) read as before
    scheduler: str = field(default="static", repr=False)

    def __repr__(self) -> str:
        """The dataclass repr, with the fields declared repr=False (scheduler) last where they
        differ from their defaults."""
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr]
        shown += [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                  if not f.repr and getattr(self, f.name) != f.default]
        return f"{type(self).__qualname__}({', '.join(shown)})"

    def _problems(self) -> list[str]:
        problems = super()._problems()
        if self.scheduler not in ("static", "dynamic"):
            problems.append(f"scheduler={self.scheduler!r} is not 'static' or 'dynamic'")
        elif self.scheduler == "dynamic":
            # the prototype: the cooperative persistent walk without clusters (a cluster's
            # CTAs must work on one unit: rank 0 would draw for both) or tail splits
            why = [what for what, bad in (
                ("persistent=True", not self.persistent), ("pingpong=False", self.pingpong),
                ("cluster_m=1", self.cluster_m != 1), ("tail_splits=1", self.tail_splits != 1),
                ("split_k=1", self.split_k != 1)) if bad]
            if why:
                problems.append(f"scheduler='dynamic' draws the units of the persistent "
                                f"cooperative walk one CTA at a time: it needs "
                                f"{', '.join(why)}")
        if self.epilogue == "tma" and self.bn % 16:
            problems.append(f"the TMA-store epilogue stores blocks of 64, 32 or 16 columns; "
                            f"bn={self.bn}")
        if not isinstance(self.store_cols, int) or self.store_cols < 0:
            problems.append(f"store_cols={self.store_cols!r} must be an int >= 0 (0: stage "
                            f"the whole tile)")
        elif self.store_cols:
            width = next((w for w in (64, 32, 16) if self.bn % w == 0), 0)
            if self.epilogue != "tma":
                problems.append(f"store_cols={self.store_cols} sizes the TMA-store staging "
                                f"buffer: it needs epilogue='tma'")
            elif width and (self.store_cols % width or self.store_cols > self.bn):
                problems.append(f"store_cols={self.store_cols} must be a multiple of the "
                                f"{width}-column store block in 1..bn={self.bn}")
        if self.k_atoms not in (1, 2, 4):
            problems.append(f"k_atoms={self.k_atoms} is not 1, 2 or 4")
        if self.k_atoms > 1 and self.zero_by_wgmma:
            problems.append("zero_by_wgmma needs k_atoms=1 (one wgmma call per stage)")
        if self.swap_ab and self.epilogue != "direct":
            problems.append("swap_ab stores C transposed from registers: use epilogue='direct'")
        if not 1 <= self.split_k <= MAX_SPLITS:
            problems.append(f"split_k={self.split_k} is outside 1..{MAX_SPLITS}")
        if self.split_k > 1 and self.epilogue != "direct":
            problems.append("split_k writes fp32 partials, which the TMA-store epilogue (16-bit "
                            "only) cannot stage: use epilogue='direct'")
        if not isinstance(self.tail_splits, int) or not 1 <= self.tail_splits <= MAX_SPLITS:
            problems.append(f"tail_splits={self.tail_splits!r} is outside 1..{MAX_SPLITS}")
        elif self.tail_splits > 1:
            # the tail is a second loop of the persistent walk, after the full waves, with
            # cooperative consumers storing fp32 partials from registers
            why = [what for what, bad in (
                ("persistent=True", not self.persistent), ("pingpong=False", self.pingpong),
                ("swap_ab=False", self.swap_ab), ("split_k=1", self.split_k != 1),
                # wrong results on the H200 with the TMA-store epilogue on a ragged shape
                # (1000x1500x1056, S = 2 and 4; docs/perf/gemm.md run 5); the direct one passed
                ("epilogue='direct'", self.epilogue != "direct")) if bad]
            if why:
                problems.append(f"tail_splits={self.tail_splits} splits the last wave of the "
                                f"persistent cooperative walk: it needs {', '.join(why)}")
        if self.tail_finish not in ("kernel", "fused"):
            problems.append(f"tail_finish={self.tail_finish!r} is not 'kernel' (a second "
                            f"kernel sums the tail's K slices) or 'fused' (the last slice "
                            f"to arrive does)")
        elif self.tail_finish == "fused" and self.tail_splits == 1:
            problems.append("tail_finish='fused' finishes the tail's K slices: it needs "
                            "tail_splits > 1")
        return problems


@functools.lru_cache(maxsize=None)
def gemm_kernel(in_dtype: DType = ag.bf16, out_dtype: DType = ag.bf16, b_layout: str = "nk",
                batched: bool = False, tail_splits: int = 1,
                precision: str | None = None, tail_fused: bool = False,
                dynamic: bool = False) -> ag.KernelFunction:
    """The GEMM kernel for one problem kind (cached: one KernelFunction per kind).

    precision="tf32" (fp32 inputs only): the product runs as wgmma `.tf32` on the fp32 data
    (10-bit mantissa, fp32 accumulation: PyTorch's allow_tf32 arithmetic, not fp32-accurate).
    tf32 operands are K-major only (b_layout "nk") and fill a 128-byte swizzled row with 32
    elements, so its schedules have bk = 32.

    tail_splits = S > 1: the kernel of `GemmSchedule(tail_splits=S)`, which takes three more
    tensors after C: the K-slice views As [S, .., M, K/S] and Bs of A and B (argus/ops/
    split_k.py `slices`: views, nothing copied) and the fp32 workspace P [S, tail tiles, bm,
    bn]. The full waves compute whole tiles of C from A and B; the last partial wave computes
    K slice s of each of its tiles from As[s] and Bs[s] into P[s] (`tail_sum_kernel` then sums
    them into C). Reading the slices through views of their own puts each slice's K range in
    the tensors' shapes, so the verifier proves what it proves for split-K (notes, item 13):
    per slice, every k multiplied once (wgmma.k-once) from the same slice of A and B
    (wgmma.agree on s), the partial stored into its own slice of P (store.coords on s), each
    workspace element stored once (store.once); that the slices tile [0, K) is split_k.py's
    job, as for split-K.

    tail_fused (with tail_splits > 1): the kernel of `GemmSchedule(tail_finish="fused")`,
    which takes one more tensor, Count [tail tiles, consumers] int32 (zero before the first
    call; every call leaves it zero): each consumer warpgroup, after storing its rows of its
    slice's partial, draws a ticket from its (tile, warpgroup) counter, and the one that draws
    the last (S - 1) adds the S partials of those rows in slice order and stores them into C
    through the normal epilogue (`_finish_tail`), so C is written whole by this kernel.

    dynamic: the kernel of `GemmSchedule(scheduler="dynamic")`, which takes one more tensor
    after C, Work [1] int32, the global work counter (zero before the first call; every call
    leaves it zero; one counter per stream: two launches running at once must not share it).
    Each CTA runs as many units as on the static walk, but which ones its producer draws from
    Work, handing each to the consumers with its ring's slots (TileScheduler.draws/slots)."""
    if b_layout not in ("nk", "kn"):
        raise ValueError(f"b_layout must be 'nk' ([N, K], K contiguous) or 'kn' ([K, N]), got "
                         f"{b_layout!r}")
    if not 1 <= tail_splits <= MAX_SPLITS:
        raise ValueError(f"tail_splits={tail_splits} is outside 1..{MAX_SPLITS}")
    if tail_fused and tail_splits == 1:
        raise ValueError("tail_fused finishes the tail's K slices in the kernel: it needs "
                         "tail_splits > 1")
    if (in_dtype == ag.f32) != (precision == "tf32") or precision not in (None, "tf32"):
        raise ValueError(f"gemm_kernel(in_dtype={in_dtype}, precision={precision!r}): fp32 "
                         f"inputs run only as tf32 (precision='tf32'), and tf32 only on fp32 "
                         f"inputs")
    if precision == "tf32" and b_layout != "nk":
        raise ValueError("gemm_kernel(precision='tf32', b_layout='kn'): tf32 wgmma has no "
                         "transpose, so B must be [N, K] with K contiguous; fix: pass "
                         "B transposed (W.T.contiguous()) as b_layout='nk'")
    lead = ("Bt",) if batched else ()
    b_dims = ("N", "K") if b_layout == "nk" else ("K", "N")

    if dynamic and tail_splits != 1:
        raise ValueError("gemm_kernel(dynamic=True) draws whole units: it needs tail_splits=1")

    def body(A, B, C, s: GemmSchedule, tail, work=None):
        M, K = A.shape[-2], A.shape[-1]
        N = B.shape[-2] if b_layout == "nk" else B.shape[-1]
        cs = s.cluster_m
        # The tile's rows come from `lhs` (wgmma's A operand), its columns from `rhs`: A and B,
        # or with swap-AB B and A, in which case the tile is a block of C^T. A [K, N] B is
        # MN-major in whichever role it plays: read in 64-column atoms of [BK][64].
        lhs, rhs = (B, A) if s.swap_ab else (A, B)
        lhs_rows, rhs_rows = (N, M) if s.swap_ab else (M, N)
        mn_major_a = s.swap_ab and b_layout == "kn"
        mn_major_b = not s.swap_ab and b_layout == "kn"
        if precision == "tf32" and s.bk != 32:
            raise ag.TraceError(f"GemmSchedule(bk={s.bk}) with tf32: a 128-byte swizzled row "
                                f"holds 32 fp32 values", fix="use bk=32 (the same bytes per "
                                "stage as bk=64 of bf16)")
        if s.split_k != 1:
            raise ag.TraceError(f"GemmSchedule(split_k={s.split_k}) is run by argus.ops.matmul "
                                f"(the batched kernel over K-slice views, then a sum), not by "
                                f"the kernel itself", fix="call argus.ops.matmul(a, b, "
                                "schedule=...), or compile the kernel with split_k=1")
        if s.tail_splits != tail_splits:
            raise ag.TraceError(f"GemmSchedule(tail_splits={s.tail_splits}) needs the kernel "
                                f"gemm_kernel(..., tail_splits={s.tail_splits}) (its K-slice "
                                f"views and workspace are arguments); this one was built for "
                                f"tail_splits={tail_splits}",
                                fix="call argus.ops.matmul(a, b, schedule=...), which runs "
                                    "both kernels, or pass the matching tail_splits")
        if (s.tail_finish == "fused") != tail_fused:
            raise ag.TraceError(f"GemmSchedule(tail_finish={s.tail_finish!r}) needs the kernel "
                                f"gemm_kernel(..., tail_fused={s.tail_finish == 'fused'}) (the "
                                f"fused finish takes the arrival counters as an argument); this "
                                f"one was built with tail_fused={tail_fused}",
                                fix="call argus.ops.matmul(a, b, schedule=...), or pass the "
                                    "matching tail_fused")
        if (s.scheduler == "dynamic") != dynamic:
            raise ag.TraceError(f"GemmSchedule(scheduler={s.scheduler!r}) needs the kernel "
                                f"gemm_kernel(..., dynamic={s.scheduler == 'dynamic'}) (the "
                                f"dynamic walk takes its work counter as an argument); this one "
                                f"was built with dynamic={dynamic}",
                                fix="pass the matching dynamic")
        if mn_major_b and s.bn % 64:
            raise ag.TraceError(f"GemmSchedule(bn={s.bn}): an MN-major B ([K, N], N contiguous) "
                                f"is read in 64-column atoms, so bn must be a multiple of 64",
                                fix="use bn=64, 128 or 256 for x @ W with W [K, N]")
        if cs > 1 and (s.bn // cs) % 8 or (mn_major_b and (s.bn // 64) % cs):
            raise ag.TraceError(f"GemmSchedule(bn={s.bn}, cluster_m={cs}): each CTA of the "
                                f"cluster multicasts an equal share of the bn-side operand (B, "
                                f"or the tokens with swap_ab), so bn must split into "
                                f"{cs} parts of whole TMA boxes" +
                                (" (64-column atoms for an MN-major B)" if mn_major_b else ""),
                                fix="use bn=128 or 256 with cluster_m=2, or cluster_m=1")
        sched = TileScheduler.launch(lhs_rows, rhs_rows, s.bm, s.bn,
                                     batch=A.shape[0] if batched else None, cluster=cs,
                                     persistent=s.persistent, num_sms=s.num_sms,
                                     group_m=s.group_m, tail_splits=tail_splits)
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, in_dtype,
                                 1 if s.pingpong else s.consumers, k_atoms=s.k_atoms,
                                 mn_major_a=mn_major_a, mn_major_b=mn_major_b,
                                 precision=precision, payload=dynamic)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        if s.epilogue == "tma":  # a ping-pong warpgroup stages its whole tile: bm rows
            staging = Staging.alloc(s.consumers, s.bm if s.pingpong else rows, s.bn, out_dtype,
                                    s.store_cols)

        def finish(tile):
            return tile.to(out_dtype)

        if tail is not None:  # the last wave's K slices: their own views, fewer steps
            sliced_a, sliced_b, partials, count = tail
            slice_steps = ring.k_steps(sliced_a.shape[-1])
            # launch preconditions (argus.ops allocates so): S slices, as the walk splits the
            # tail, and a workspace of whole bm x bn tiles, each stored whole. S is a shape
            # symbol, not the int, so that the slice index is a coordinate the verifier
            # follows (an int dim is no field): A and B from one slice, P[s] gets slice s
            ag.tag_assume(lambda: ag.tag_all(ag.sym(sliced_a.shape[0]) == tail_splits,
                                             ag.sym(partials.shape[2]) == s.bm,
                                             ag.sym(partials.shape[3]) == s.bn))

        if dynamic:   # the producer draws each unit; the consumers read it from the ring
            # a unit of no K step would hand its id through no fill: the consumers' peek
            # would wait for ever
            ag.require(ag.sym(K) >= 1, "the dynamic walk hands each unit to the consumers "
                                       "with its first K step: K must be at least 1")
            with ag.role("producer", warpgroups=1, regs=s.producer_regs):
                for ticket, unit in sched.draws(work):
                    ring.load(k_steps, lhs, rhs, unit, payload=ticket)
            with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
                for _ in sched.slots():
                    unit = sched.locate(ring.peek_unit())
                    acc = ring.mma(k_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                    if s.epilogue == "tma":
                        store_tile_staged(C, unit, wg, acc, staging, bm=s.bm, bn=s.bn,
                                          rows=rows, finish=finish)
                    else:
                        store_tile(C, unit, wg, acc, bm=s.bm, bn=s.bn, rows=rows,
                                   finish=finish, transposed=s.swap_ab)
            return

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for unit in sched.units():
                ring.load(k_steps, lhs, rhs, unit, rank=sched.rank, cluster=cs)
            if tail is not None:  # K slice `part` of the tile: batch `part` of the views
                for part, _, unit in sched.tail_units():
                    ring.load(slice_steps, sliced_a, sliced_b,
                              Unit((part, *unit.batch), unit.m, unit.n), rank=sched.rank,
                              cluster=cs)

        if s.pingpong:  # whole tiles in turns; one's epilogue overlaps the other's MMAs
            with ag.role("consumer", warpgroups=2, regs=s.consumer_regs) as wg:
                for turn, unit in sched.turns(2):
                    with ag.when(turn == wg):
                        with ag.ordered("mma"):
                            accs = ring.mma_tile(k_steps, zero_by_wgmma=s.zero_by_wgmma)
                        with ag.ordered("epilogue") if s.ordered_epilogue else nullcontext():
                            if s.epilogue == "tma":  # through this warpgroup's slots
                                store_tile_stacked(C, unit, wg, accs, staging, bm=s.bm,
                                                   bn=s.bn, finish=finish)
                            else:
                                for j, acc in enumerate(accs):  # 64-row blocks of the tile
                                    store_tile(C, unit, j, acc, bm=s.bm, bn=s.bn, rows=64,
                                               finish=finish, transposed=s.swap_ab)
                    with ag.when(turn != wg):
                        ring.pipe.skip(k_steps)  # the other warpgroup's unit
            return

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            for unit in sched.units():
                acc = ring.mma(k_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                if s.epilogue == "tma":
                    store_tile_staged(C, unit, wg, acc, staging, bm=s.bm, bn=s.bn, rows=rows,
                                      finish=finish)
                else:  # with swap-AB acc is a block of C^T: its rows are C's columns
                    store_tile(C, unit, wg, acc, bm=s.bm, bn=s.bn, rows=rows, finish=finish,
                               transposed=s.swap_ab)
            if tail is not None:
                # the fp32 partial, from registers whatever the main epilogue: the TMA-store
                # epilogue stages 16-bit tiles (stmatrix), and a tail unit's store is a small
                # share of the kernel's bytes
                for part, q, unit in sched.tail_units():
                    acc = ring.mma(slice_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                    ag.store(partials, (part, q, wg * rows, 0), acc)
                    if count is not None:
                        _finish_tail(C, partials, count, unit, q, wg, tail_splits, bm=s.bm,
                                     bn=s.bn, rows=rows, finish=finish)

    if dynamic:
        def gemm(A: ag.Tensor[(*lead, "M", "K", in_dtype)],
                 B: ag.Tensor[(*lead, *b_dims, in_dtype)],
                 C: ag.Tensor[(*lead, "M", "N", out_dtype)],
                 Work: ag.Tensor[("W", ag.i32)],
                 s: GemmSchedule = GemmSchedule(scheduler="dynamic")):
            body(A, B, C, s, None, Work)
    elif tail_splits == 1:
        def gemm(A: ag.Tensor[(*lead, "M", "K", in_dtype)],
                 B: ag.Tensor[(*lead, *b_dims, in_dtype)],
                 C: ag.Tensor[(*lead, "M", "N", out_dtype)],
                 s: GemmSchedule = GemmSchedule()):
            body(A, B, C, s, None)
    elif tail_fused:
        sliced_b_dims = ("N", "KS") if b_layout == "nk" else ("KS", "N")

        def gemm(A: ag.Tensor[(*lead, "M", "K", in_dtype)],
                 B: ag.Tensor[(*lead, *b_dims, in_dtype)],
                 C: ag.Tensor[(*lead, "M", "N", out_dtype)],
                 As: ag.Tensor[("S", *lead, "M", "KS", in_dtype)],
                 Bs: ag.Tensor[("S", *lead, *sliced_b_dims, in_dtype)],
                 P: ag.Tensor[("S", "T", "TM", "TN", ag.f32)],
                 Count: ag.Tensor[("T", "W", ag.i32)],
                 s: GemmSchedule = GemmSchedule(tail_splits=tail_splits, tail_finish="fused")):
            # a counter per (tail tile, consumer warpgroup): Count's rows are P's tiles
            ag.tag_assume(lambda: ag.sym(Count.shape[1]) == s.consumers)
            body(A, B, C, s, (As, Bs, P, Count))
    else:
        sliced_b_dims = ("N", "KS") if b_layout == "nk" else ("KS", "N")

        def gemm(A: ag.Tensor[(*lead, "M", "K", in_dtype)],
                 B: ag.Tensor[(*lead, *b_dims, in_dtype)],
                 C: ag.Tensor[(*lead, "M", "N", out_dtype)],
                 As: ag.Tensor[("S", *lead, "M", "KS", in_dtype)],
                 Bs: ag.Tensor[("S", *lead, *sliced_b_dims, in_dtype)],
                 P: ag.Tensor[("S", "T", "TM", "TN", ag.f32)],
                 s: GemmSchedule = GemmSchedule(tail_splits=tail_splits)):
            body(A, B, C, s, (As, Bs, P, None))

    default = (in_dtype, out_dtype, b_layout, batched) == (ag.bf16, ag.bf16, "nk", False)
    in_name = precision or in_dtype.name
    name = "gemm" if default else (f"gemm_{in_name}_{out_dtype.name}_{b_layout}"
                                   + ("_batched" if batched else ""))
    if dynamic:
        return ag.kernel(gemm, name=f"{name}_dynamic")
    if tail_splits == 1:
        return ag.kernel(gemm, name=name)
    if tail_fused:  # the last slice of each tail tile stores it: C is this kernel's whole
        return ag.kernel(gemm, name=f"{name}_tail{tail_splits}_fused")
    # C's tail tiles are the sum kernel's to write
    return ag.kernel(gemm, name=f"{name}_tail{tail_splits}", partial_outputs=("C",))


def _finish_tail(C, partials, count, unit: Unit, q, wg, splits: int, *, bm: int, bn: int,
                 rows: int, finish) -> None:
    """The fused tail finish (GemmSchedule.tail_finish="fused"), by consumer warpgroup wg
    after it stored its `rows` rows of its K slice's partial of tail tile q: a release fence,
    a ticket from the (q, wg) counter (atom.inc with wrap = splits: it resets itself after the
    splits arrivals), and the warpgroup that draws the last ticket, after an acquire fence,
    adds the splits partials of its rows in slice order (the sum `tail_sum_kernel` computes,
    whichever slice came last) and stores them into C, converted by the epilogue's `finish`.

    The ordering is MoeSchedule.fused_finish's (argus/kernels/moe.py `_finish_last_slice`):
    fence.acq_rel.gpu by every thread, then the group barrier and the one atom.acq_rel.gpu
    that ag.atomic_fetch_add renders, so every slice's partial is visible before its ticket,
    and the last slice's loads come after every earlier ticket. The sum runs in blocks of 64
    (32, 16) columns: a whole 64 x 256 fp32 row block is 128 registers a thread, and a second
    one loaded beside it spilled (ptxas, 1.8 KB of spill stores); a block is 32."""
    ag.fence()                      # release: this slice's partial before its ticket
    ticket = ag.atomic_fetch_add(count, (q, wg), wrap=splits)
    with ag.when(ticket == splits - 1):
        ag.fence()                  # acquire: every slice's partial before the loads
        cols = next(w for w in (64, 32, 16, 8) if bn % w == 0)
        for block in ag.range(bn // cols):   # a runtime loop: one block's registers live
            c0 = block * cols
            total = ag.load(partials, (0, q, wg * rows, c0), (rows, cols))
            for piece in range(1, splits):   # a fixed order: the same sum on every run
                total = total + ag.load(partials, (piece, q, wg * rows, c0), (rows, cols))
            ag.store(C, (*unit.batch, unit.m * bm + wg * rows, unit.n * bn + c0),
                     finish(total))


gemm = gemm_kernel()
