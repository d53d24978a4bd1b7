"""The MoE expert GEMMs: a persistent grouped GEMM over the padded, expert-sorted token rows.

After routing (argus/kernels/moe_routing.py) the token rows routed to expert e sit in rows
[expert_start[e], +count[e]) of xp, each expert's segment padded to a multiple of BM rows
(DeepGEMM's contiguous layout), and tile_expert[m] names the expert of m-tile m. Both expert
GEMMs of the layer are one kernel factory over that layout:

  gate-up (gated=True):  h[M_pad, I] = silu(xp @ w13[e, :I].T) * (xp @ w13[e, I:].T)
                         w13 [E, 2I, H] (vLLM's layout: gate rows, then up rows)
  down    (gated=False): y[M_pad, H] = h @ w2[e].T,  w2 [E, H, I]

The weights are one TMA tensor with the expert as its leading dim (w2 [E, H, I]; w13 viewed as
[E, 2, I, H], its gate and up planes), so an m-tile's expert is the leading TMA coordinate of
its B loads: no per-expert descriptors or pointer arrays. The grid is persistent (one CTA per
SM); every role walks units (m-tile, n-tile) of the tiles[0] m-tiles routing counted (a device
value read once per CTA: the loop bound comes from memory, nothing waits on the host) in the
skeleton's grouped raster order (argus/kernels/warp_specialized.py: tile_coords, load_tile,
OperandRing, Staging, store_tile_staged), and reads the unit's expert from tile_expert. With
persistent=False (prefill only) the grid is one CTA (or cluster) per unit of the largest
layout, from shapes, and the same walk is one iteration: unit pid, none for the CTAs past the
units routing counted (`unit_programs`).

Gate-up fusion: a B tile of the gated GEMM is bn/2 gate rows [n * bn/2, +bn/2) of w13[e] on
top of the same bn/2 rows of the up plane, two TMA boxes into one stage, so accumulator
columns j and bn/2 + j hold the gate and up products of the same output column; the epilogue
stores silu(gate) * up (computed in fp32), bn/2 columns wide, from registers or through
shared memory and TMA stores (epilogue="tma"). Past I both boxes read TMA's zero fill and the
store drops those columns.

Decode (MoeSchedule.swap_ab, T <= 64 in argus.ops.moe): a few tokens per expert would leave
a 64-row token tile mostly empty, so the roles swap (as GemmSchedule.swap_ab): the expert's
weight rows are wgmma's M side (64 per plane: the gated GEMM's gate and up planes are two
accumulators of the same 64 output columns) and its token tile its N side (bn = 8..64 rows;
each expert padded to bn), so every stage carries 8-16 KB of weights and a few token rows.
Units are (token tile, 64 weight rows[, K slice]) of the token tiles routing counted: an
expert with no tokens has no tile, hence no unit and no weight read, and ~all 132 SMs stream
weights (a Mixtral token: 2 experts x 224 gate-up tiles). The accumulators are blocks of C^T,
stored transposed from registers. With split_k > 1 A and W come as K-slice views (the slice
in front) and each unit stores fp32 partial sums of its slice, added up by split_finish_kernel
(silu(sum gate) * sum up) and by the combine (argus/kernels/moe_routing.py); or, for the
gate-up with fused_finish, by the last slice to arrive at its unit, in the GEMM itself (an
arrival counter per unit; not the rule's pick while the verifier cannot prove a ticket drawn
in the persistent unit loop: tests/moe/test_moe_verify.py).

Invariants: each unit reads weights of its own m-tile's expert only (the B coordinate's
leading entry is tile_expert[m]; proven by wgmma.agree from tags, tests/moe/test_moe_verify.py);
producer and consumers walk the same units (one loop bound, read once), so the ring's step
counters stay in step; rows past an expert's count (padding) are computed like any row but are
never read by the combine.
"""

import functools
from dataclasses import dataclass, field, fields, replace

import argus as ag
from argus.kernels.split_k_sum import MAX_SPLITS
from argus.kernels.warp_specialized import (OperandRing, Staging, Unit,
                                            WarpSpecializedSchedule, load_tile, store_tile,
                                            store_tile_staged, tile_coords)


@dataclass(frozen=True)
class MoeSchedule(WarpSpecializedSchedule):
    """What the grouped GEMM lets a tuner choose: the skeleton's fields (tile, ring, roles,
    raster, cluster). The contiguous layout pads each expert to `pad` rows (bm, or 2 * bm with
    cluster_m=2, so that the two m-tiles of a CTA pair always belong to one expert and share
    its weight tile by multicast; cluster_n=2 pairs share an m-tile, so bm); routing must be
    run with the same `pad`.

    persistent (the skeleton's field): True, a grid of at most num_sms CTAs (clusters: num_sms
    / cluster size) walking the units; False, prefill only, one CTA or cluster per unit of the
    largest layout (the grid from shapes; num_sms ignored; `unit_programs`)."""

    # TMA-store epilogue: columns of the stored tile staged per round (0: all of them)
    store_cols: int = 0
    # decode (a few tokens per expert): swap-AB, the expert's weight rows are wgmma's M side
    # (bm = 64 of them per tile, gate and up planes as two accumulators of the gated GEMM) and
    # its bn tokens the N side (8..64), so every stage carries weights, not mostly-empty token
    # rows; each expert's segment is padded to bn rows (a token tile), and the units (token
    # tile, weight tile) of the experts routing counted give every SM weights to stream
    swap_ab: bool = False
    # decode only: K cut into this many equal slices (K-slice views, as argus.ops.matmul's
    # split-K), each unit (token tile, weight tile, slice) writing fp32 partial sums that the
    # next kernel adds up (the gate-up's split_finish before SiLU, the down's combine), so
    # that few touched experts still make units for every SM (one Qwen3 token: 8 experts x
    # 12 weight tiles of the gate-up for 132 SMs)
    split_k: int = 1
    # the gated epilogue's SiLU as g / (1 + 2^(-g log2 e)) on the SFU's ex2.approx (one FMUL
    # and one MUFU.EX2 where expf's full-range form takes about eight instructions) instead of
    # g / (1 + expf(-g)): the cooperative kernel's two consumer warpgroups run the epilogue
    # together while no wgmma issues, so its instructions are time off the tensor cores
    # (docs/perf/moe.md, 2026-12-03 accounting). ex2.approx's relative error is <= 2^-22, far
    # below h's bf16 rounding (2^-9); a gate below about -87 gives 2^126+ -> the quotient
    # rounds to -0, as silu does; results below 2^-126 flush to zero
    fast_silu: bool = False
    # 2: CTA pairs on two adjacent n-tiles of one m-tile, sharing its token rows (A) by TMA
    # multicast instead of a weight tile (cluster_m=2 shares B over two m-tiles). A pair then
    # never spans two experts, so experts pad to bm rows, not 2 * bm: at Mixtral T = 16384
    # (about 4096 +- 55 rows an expert) ~1.6% padding rows instead of ~3.1%
    cluster_n: int = 1
    # decode gate-up cut along K (swap_ab, split_k > 1): the K slice that finishes a (token
    # tile, weight tile) last, by a self-resetting arrival counter per unit, adds up the
    # slices' fp32 partial sums (in slice order: the same sum whichever slice arrives last)
    # and stores h = silu(gate) * up itself, so no split finish kernel runs (its launch and
    # fixed time were 5 us at one token on the H200, docs/perf/moe.md). The down GEMM ignores
    # it: the combine adds its slices
    fused_finish: bool = False
    # decode only (swap_ab): programmatic dependent launch (docs/pdl.md). The kernel waits for
    # its predecessor (the routing or the previous GEMM) at the top, before it reads the
    # routing counts, and lets its successor start right after: its launch, barrier init and
    # tensor-map prefetch overlap the predecessor's tail, the successor's overlap its own.
    # The routing map (token tiles, experts) precedes every weight load, so no weight load
    # moves before the wait (a prefetch into L2 may: `prefetch`). In repr only when on
    # (__repr__): every schedule without it prints as before (the bench's rows and the agent's
    # keys stay comparable across the change), a decode schedule with it says so (traces are
    # keyed by the hashable schedule)
    pdl: bool = field(default=False, repr=False)
    # decode with pdl: K steps of the CTA's first unit whose weight boxes one thread of the
    # CTA prefetches into L2 (cp.async.bulk.prefetch.tensor) before the wait for the prior
    # grids, so the weight stream starts while the predecessor still runs (0: off). Which
    # expert's weights comes from the routing map (TileExpert, Tiles), read before the wait
    # too: it is written only by a routing kernel two or more launches back, complete by then
    # because every kernel between triggers after its own wait (docs/pdl.md, "Reading the
    # routing map before the wait"); and those reads steer only the hint (the units walked
    # come from the count read after the wait, as without it). argus.ops.moe launches the
    # permute before such a gate-up with PDL and an early trigger, so the gate-up's window is
    # the permute's run, the down's the gate-up's tail. In repr only when set, as pdl
    prefetch: int = field(default=0, repr=False)
    # the down GEMM with pdl: the combine after it is launched with PDL too (waits first,
    # then lets the next kernel start: moe_routing.combine_kernel(pdl=True)), so its launch
    # and prologue overlap the down's tail as the down's overlap the gate-up's (a decode
    # layer's combine: 2.3 us of profiler time at Qwen3-30B-A3B T = 1, 2026-12-04 10:28 run).
    # Read by argus.ops.moe from the down's schedule (the gate-up ignores it); off by default
    # until measured (gpu_moe_bench --rule-variants: pdl-combine). In repr only when set
    pdl_combine: bool = field(default=False, repr=False)
    # the gated epilogue's sigmoid denominator inverted as rsqrt(d)^2 (MUFU.RSQ and one FMUL;
    # d = 1 + e^-g >= 1, so no denormal input, and d = inf gives 0 as 1/d does) instead of an
    # IEEE division: 1.0f / d compiles to MUFU.RCP, a Newton step and a range check that
    # branches to a slow-path call for every element, and those 64 per-element branches
    # (BSSY/BSYNC around each) keep ptxas from interleaving the elements, so each
    # element's MUFU latency is paid in series while no wgmma issues (SASS of the rule's
    # gate-up: 2384 instructions, 64 CALLs; with rsqrt_silu 1592 and none, with fast_silu too
    # 1080: tests/moe/test_moe_prefill_schedules.py counts them).
    # rsqrtf is within 2 ulp (CUDA math guide), so the square is within ~4 ulp (2^-21), far below
    # h's bf16 rounding (2^-9). With fast_silu the SiLU is two MUFU (EX2, RSQ) and four FMA-pipe
    # instructions, branch-free. In repr only when set (as pdl)
    rsqrt_silu: bool = field(default=False, repr=False)
    # prefill: a consumer warpgroup whose rows of the unit's m-tile are all padding skips the
    # unit's wgmma, promotion and epilogue (`consume_unit`). With bm = 128 and two consumers
    # that is the second warpgroup of an expert's last m-tile when it has <= 64 routed rows
    # (with cluster_m = 2 also both of the pair's second CTA when the 256-row unit has <= 128);
    # the warpgroup still waits for each K step's stage and releases it (the ring's empty
    # barrier counts every consumer's arrival), so the ring stays in step and the working
    # warpgroup has the tensor cores to itself. The routed rows of each m-tile come from
    # routing (moe_routing's tile_rows: TileRows [MT, 1], written by the layout kernel on the
    # device), a kernel argument after Tiles (the kernels' tile_rows=True variant). The
    # skipped rows of the output are padding rows: never written, never read as real data
    # (the combine reads routed rows only; every later kernel works row by row, so a padding
    # row's garbage stays in padding rows). Off by default until timed on a GPU
    # (docs/perf/moe.md); in repr only when set (as pdl)
    skip_pad_halves: bool = field(default=False, repr=False)
    # who hands out the persistent walk's units (GemmSchedule.scheduler's names): "static",
    # each CTA strides over units first, first + programs, ... (`_walk`); "dynamic", each
    # CTA's producer draws its next unit from a global work counter in the order CTAs ask for
    # them (`_draws`, atom.inc wrapping at the units routing counted) and hands it to the
    # consumers in its ring's payload words (`_slots`, Pipe.peek), so the units running at one
    # time stay neighbours in the grouped raster as on the grid of one CTA a unit, with the
    # persistent grid's start paid once per SM (docs/design/dynamic_scheduler.md). Each CTA
    # runs as many units as on the static walk; only which ones is dynamic. The fp8 prefill
    # kernels only (grouped_gemm_fp8_smem_kernel / grouped_gemm_fp8_kernel with
    # dynamic=True: one more tensor, Work [1] int32, zero before the launch and left zero),
    # persistent, without clusters. In repr only when not "static" (as pdl)
    scheduler: str = field(default="static", repr=False)

    def __repr__(self) -> str:
        """The dataclass repr, with the fields declared repr=False (pdl, prefetch, pdl_combine,
        rsqrt_silu here; a subclass's too: MoeFp8Schedule's n_split, smem_scales,
        quantize_out) last, in declaration order, where they differ from their defaults (left
        out when off, so the reprs of schedules without them read as before the fields
        existed)."""
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr]
        shown += [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                  if not f.repr and getattr(self, f.name) != f.default]
        return f"{type(self).__qualname__}({', '.join(shown)})"

    @property
    def reads_tile_rows(self) -> bool:
        """Whether the prefill kernels take TileRows (each m-tile's routed rows) and routing
        writes it: skip_pad_halves here; MoeFp8Schedule.half_tile_last too."""
        return self.skip_pad_halves

    @property
    def pad(self) -> int:
        """Rows each expert's segment is padded to: the rows of one unit (a cluster's tiles),
        or with swap_ab one token tile."""
        return self.bn if self.swap_ab else self.bm * self.cluster_m

    def _problems(self) -> list[str]:
        problems = super()._problems()
        if self.cluster_n not in (1, 2) or (self.cluster_n == 2 and (
                self.cluster_m != 1 or self.swap_ab or (self.bm // 2) % 8)):
            problems.append(f"cluster_n={self.cluster_n}: 1, or 2 (CTA pairs along N sharing "
                            f"the token tile) with cluster_m=1, swap_ab=False and bm/2 a "
                            f"multiple of 8 (got cluster_m={self.cluster_m}, bm={self.bm})")
        if self.cluster_m == 2 and (self.bn // 4) % 8:
            problems.append(f"cluster_m=2 multicasts half of each B box per CTA: bn={self.bn} "
                            f"must be a multiple of 32")
        if self.epilogue == "tma" and self.bn % 128:
            problems.append(f"the TMA-store epilogue stores 64-column blocks of both GEMMs "
                            f"(the gate-up's is bn/2 wide): bn={self.bn} must be a multiple "
                            f"of 128")
        if self.store_cols and (self.epilogue != "tma" or self.store_cols % 64):
            problems.append(f"store_cols={self.store_cols} sizes the TMA-store staging: a "
                            f"multiple of 64 with epilogue='tma'")
        if not self.persistent and self.swap_ab:
            # decode's few units already fit one wave of the persistent grid; a grid of the
            # largest layout's units would launch thousands of CTAs that find no unit
            problems.append("persistent=False (one CTA or cluster per unit) is a prefill "
                            "schedule: the decode grid (swap_ab, and with it split_k, "
                            "fused_finish) would be the largest layout's token tiles x "
                            "weight tiles, nearly all without a unit; use persistent=True "
                            "with swap_ab")
        if not self.persistent and (self.pdl or self.prefetch or self.pdl_combine):
            problems.append("pdl, prefetch and pdl_combine rest on a grid whose CTAs are all "
                            "resident at once (the early trigger, the first unit's prefetch "
                            "before the wait): persistent=False launches a CTA per unit, "
                            "waves of them; use persistent=True")
        if self.zero_by_wgmma:
            problems.append("zero_by_wgmma is untried in the grouped GEMM")
        if self.swap_ab and (self.bm, self.consumers, self.cluster_m, self.epilogue,
                             self.pingpong) != (64, 1, 1, "direct", False):
            problems.append(f"swap_ab (decode): one consumer warpgroup multiplies 64 weight "
                            f"rows per plane and stores C^T from registers; needs bm=64, "
                            f"consumers=1, cluster_m=1, epilogue='direct', pingpong=False "
                            f"(got bm={self.bm}, consumers={self.consumers}, cluster_m="
                            f"{self.cluster_m}, epilogue={self.epilogue!r})")
        if self.pdl and not self.swap_ab:
            problems.append("pdl (programmatic dependent launch) is applied to the decode "
                            "kernels only: it needs swap_ab=True")
        if self.prefetch and not (self.pdl and 0 < self.prefetch <= 64):
            problems.append(f"prefetch={self.prefetch}: K steps of weights prefetched before "
                            f"the PDL wait, 1..64, with pdl=True (got pdl={self.pdl})")
        if self.pdl_combine and not self.pdl:
            problems.append("pdl_combine launches the combine after a PDL down GEMM with PDL: "
                            "it needs pdl=True")
        if self.fused_finish and not self.swap_ab:
            problems.append("fused_finish is the decode gate-up's in-kernel split finish: it "
                            "needs swap_ab")
        if self.skip_pad_halves and (self.swap_ab or self.pingpong):
            problems.append("skip_pad_halves skips a cooperative consumer warpgroup's padding "
                            "rows of a prefill m-tile: it needs swap_ab=False and "
                            "pingpong=False")
        elif self.skip_pad_halves and self.consumers == 1 and self.cluster_m == 1:
            # routed_rows: the skip's granule is a warpgroup's rows, here the whole unit
            problems.append(f"skip_pad_halves with consumers=1 and cluster_m=1: the one "
                            f"consumer warpgroup holds all {self.pad} rows of a unit, and "
                            f"every unit routing counts holds a routed row, so nothing would "
                            f"be skipped (each unit would only read TileRows); use "
                            f"consumers=2 or cluster_m=2, or skip_pad_halves=False")
        if self.scheduler not in ("static", "dynamic"):
            problems.append(f"scheduler={self.scheduler!r} is not 'static' or 'dynamic'")
        elif self.scheduler == "dynamic":
            why = [what for what, bad in (
                ("persistent=True", not self.persistent),
                ("cluster_m=1 and cluster_n=1", self.cluster_m != 1 or self.cluster_n != 1),
                ("swap_ab=False (no decode form)", self.swap_ab),
                ("pingpong=False", self.pingpong)) if bad]
            if why:
                problems.append(f"scheduler='dynamic' draws the units of the persistent prefill "
                                f"walk one CTA at a time (a cluster's CTAs would need one draw "
                                f"for both): it needs {', '.join(why)}")
        if not 1 <= self.split_k <= MAX_SPLITS or (self.split_k > 1 and not self.swap_ab):
            problems.append(f"split_k={self.split_k}: 1..{MAX_SPLITS} K slices, more than one "
                            f"only with swap_ab (decode)")
        return problems


PREFILL = MoeSchedule(bm=128, bn=256, bk=64, stages=4, consumers=2)
# the same tile with the stmatrix + TMA-store epilogue (the library GEMM's fastest at large M)
# rsqrt_silu (the gated epilogue's sigmoid without an IEEE division: no slow-path CALL per
# element) on the prefill rule's schedules since 2026-12-04 (SMALL and TINY below too, the
# same epilogue, not timed there): on the H200 (Mixtral T =
# 16384, gpu_moe_bench --prefill-variants, same rounds) the gate-up went 10893 -> 10199 us
# and the layer 614 -> 635 TFLOP/s, rel err unchanged (2.9e-3; docs/perf/moe.md)
PREFILL_TMA = MoeSchedule(bm=128, bn=256, bk=64, stages=3, consumers=2, epilogue="tma",
                          rsqrt_silu=True)
# CTA pairs on the two m-tiles of one expert's 256-row block, sharing the weight tile by TMA
# multicast (each expert padded to 256 rows)
PREFILL_CLUSTER = MoeSchedule(bm=128, bn=256, bk=64, stages=4, consumers=2, cluster_m=2)
# both: the library GEMM's fastest kind at large M (docs/perf/gemm.md)
PREFILL_TMA_CLUSTER = MoeSchedule(bm=128, bn=256, bk=64, stages=3, consumers=2, cluster_m=2,
                                  epilogue="tma", rsqrt_silu=True)
# Per-GEMM forms of PREFILL_TMA_CLUSTER with the dense GEMM's fastest ring at large aligned
# shapes (docs/perf/gemm.md: 128x256, 4 stages, TMA store of 128 columns a round, 2x1
# cluster). The gate-up stores bn/2 = 128 columns of h, so its staging is 32 KB and a fourth
# 48 KB stage fits as it is (224 KB); the down stores all 256 columns, so it needs the staged
# rounds of 128 columns to make room for the fourth stage (4 stages with 64 KB of staging is
# 257 KB: over the 227 KB a CTA may take). A (gate-up, down) pair: both pad experts to 256
# rows, so they read one layout.
PREFILL_GATE_UP_S4 = MoeSchedule(bm=128, bn=256, bk=64, stages=4, consumers=2, cluster_m=2,
                                 epilogue="tma")
PREFILL_DOWN_S4 = MoeSchedule(bm=128, bn=256, bk=64, stages=4, consumers=2, cluster_m=2,
                              epilogue="tma", store_cols=128)
# The same with CTA pairs along N (cluster_n=2: two n-tiles of one m-tile share its token
# rows by multicast), so experts pad to 128 rows instead of 256. Interpreter-checked against
# float64 and verified clean (k-once proven since the verifier decides k coordinates by
# dependence, 38036b2). Measured on the H200 (docs/perf/moe.md): 2-4% slower than the
# default at Mixtral T = 16384, so not the rule's pick.
PREFILL_GATE_UP_PAIR_N = MoeSchedule(bm=128, bn=256, bk=64, stages=4, consumers=2,
                                     epilogue="tma", cluster_n=2)
PREFILL_DOWN_PAIR_N = MoeSchedule(bm=128, bn=256, bk=64, stages=4, consumers=2,
                                  epilogue="tma", store_cols=128, cluster_n=2)
SMALL = MoeSchedule(bm=64, bn=128, bk=64, stages=4, consumers=1, consumer_regs=240,
                    producer_regs=40, rsqrt_silu=True)
# a few tokens on a few experts: narrow tiles, so the down projection has units for every SM,
# and a deep ring of weight tiles in flight
TINY = MoeSchedule(bm=64, bn=64, bk=64, stages=8, consumers=1, consumer_regs=240,
                   producer_regs=40, rsqrt_silu=True)


def decode_schedule(bn: int = 8, stages: int = 8, split_k: int = 1,
                    fused_finish: bool = False, pdl: bool = False,
                    prefetch: int = 0, pdl_combine: bool = False) -> MoeSchedule:
    """The swap-AB decode schedule for token tiles of bn rows: 64 weight rows per plane and
    stage (16 KB a stage for the gate-up GEMM, 8 KB for the down), `stages` deep, so 64-128 KB
    of weights are in flight per SM; fused_finish: a split gate-up finishes h itself (the
    last K slice of each unit, MoeSchedule.fused_finish); pdl: programmatic dependent launch
    (MoeSchedule.pdl); prefetch: K steps of weights prefetched into L2 before the PDL wait
    (MoeSchedule.prefetch); pdl_combine: the combine after this down GEMM takes PDL too
    (MoeSchedule.pdl_combine)."""
    return MoeSchedule(bm=64, bn=bn, bk=64, stages=stages, consumers=1, consumer_regs=240,
                       producer_regs=40, swap_ab=True, split_k=split_k,
                       fused_finish=fused_finish, pdl=pdl, prefetch=prefetch,
                       pdl_combine=pdl_combine)


DECODE = decode_schedule()


LOG2E = 1.4426950408889634


def silu_mul(gate, up, fast: bool = False, rsqrt: bool = False):
    """silu(gate) * up, in fp32; fast: silu through the SFU's ex2.approx (MoeSchedule's
    fast_silu), gate / (1 + 2^(-gate log2 e)); rsqrt (MoeSchedule.rsqrt_silu): the quotient
    as gate * rsqrt(d)^2, d = 1 + e^-gate, no IEEE division (nor its per-element branch)."""
    if rsqrt:
        denom = 1.0 + (ag.exp2(gate * -LOG2E, approx=True) if fast else ag.exp(-gate))
        inv = ag.rsqrt(denom)
        return gate * (inv * inv) * up
    if fast:
        return gate / (1.0 + ag.exp2(gate * -LOG2E, approx=True)) * up
    return gate * ag.sigmoid(gate) * up


@functools.lru_cache(maxsize=None)
def grouped_gemm_kernel(gated: bool, partial: bool = False, fused: bool = False,
                        tile_rows: bool = False) -> ag.KernelFunction:
    """The grouped GEMM over the contiguous layout: gate-up with SiLU * up (gated) or down.
    partial (decode with split_k > 1): A and W are K-slice views with the slice s in front
    (A [S, M, K/S], W [S, E, .., K/S]: slice s of K, as argus.ops.matmul's split-K), and C
    holds their fp32 partial sums, [S, M, NC] (the gated GEMM's per gate / up plane:
    [S, 2, M, NC]), added up by the next kernel. Each slice's K loop covers its view's whole
    K, so the verifier proves k-once per slice. fused (the partial gate-up with
    MoeSchedule.fused_finish): two more arguments, H [M, NC] bf16 and Count [MT, NT] int32
    (one self-resetting arrival counter per (token tile, 64-column weight tile), zero before
    the first call): the slice that arrives last at its unit adds the slices' partial sums up
    and stores h = silu(gate) * up into H, so no split finish kernel runs. tile_rows (the
    prefill kernels with MoeSchedule.skip_pad_halves): one more argument after Tiles,
    TileRows [MT, 1] int32, the routed rows of each m-tile (moe_routing's layout kernels with
    tile_rows=True), which lets a consumer warpgroup skip its all-padding rows
    (`consume_unit`)."""
    if fused and not (gated and partial):
        raise ValueError("fused: the partial gate-up's in-kernel split finish "
                         "(grouped_gemm_kernel(True, True, True))")
    if tile_rows and partial:
        raise ValueError("tile_rows: the prefill kernels' skip of all-padding rows "
                         "(MoeSchedule.skip_pad_halves); the partial kernels are decode's")

    # gate-up: w13 [E, 2I, H] viewed as [E, 2, I, H] (gate, up), so a B tile's two halves are
    # boxes at the same row coordinate of the two planes
    # W's rows are named after C's columns ("NC"): row r of W computes output column r
    w_dims = ("E", 2, "NC", "K") if gated else ("E", "NC", "K")
    # partial: A, W and C lead with the K slice s (A and W are K-slice views, argus/ops/moe.py)
    lead = ("S",) if partial else ()
    c_dims = (*lead, *((2,) if gated else ()), "M", "NC") if partial else ("M", "NC")
    c_type = ag.f32 if partial else ag.bf16

    def moe_grouped_gemm(A: ag.Tensor[(*lead, "M", "K", ag.bf16)],
                         W: ag.Tensor[(*lead, *w_dims, ag.bf16)],
                         TileExpert: ag.Tensor["MT", 1, ag.i32],
                         Tiles: ag.Tensor[1, 1, ag.i32],
                         C: ag.Tensor[(*c_dims, c_type)],
                         s: MoeSchedule = PREFILL):
        grouped(A, W, TileExpert, Tiles, None, C, s)

    def moe_grouped_gemm_rows(A: ag.Tensor["M", "K", ag.bf16],
                              W: ag.Tensor[(*w_dims, ag.bf16)],
                              TileExpert: ag.Tensor["MT", 1, ag.i32],
                              Tiles: ag.Tensor[1, 1, ag.i32],
                              TileRows: ag.Tensor["MT", 1, ag.i32],
                              C: ag.Tensor["M", "NC", ag.bf16],
                              s: MoeSchedule = PREFILL):
        grouped(A, W, TileExpert, Tiles, TileRows, C, s)

    def grouped(A, W, TileExpert, Tiles, TileRows, C, s: MoeSchedule):
        if s.scheduler != "static":
            raise ag.TraceError("the bf16 grouped GEMM walks its units statically: "
                                "scheduler='dynamic' is built by the fp8 prefill kernels only",
                                fix="pass scheduler='static'")
        _tag_layout(A, W, TileExpert, s.pad, gated, partial)
        check_tile_rows(s, TileRows)
        if partial != (s.split_k > 1):
            raise ag.TraceError(f"MoeSchedule(split_k={s.split_k}) needs the "
                                f"{'partial-sum' if s.split_k > 1 else 'bf16'} kernel",
                                fix=f"use grouped_gemm_kernel({gated}, "
                                    f"partial={s.split_k > 1})")
        if s.swap_ab:   # decode: the weights are wgmma's M side
            _decode(A, W, TileExpert, Tiles, C, s, gated, partial)
            return
        K = A.shape[1]
        # the columns a tile covers: bn/2 gate (and bn/2 up) rows of W, or bn rows
        width = s.bn // 2 if gated else s.bn
        n_tiles = ag.cdiv(C.shape[1], width)
        cs = s.cluster_m * s.cluster_n
        # units along N: n-tiles, or with cluster_n=2 pairs of them (the last pair of an odd
        # count runs past C: TMA reads zeros there and the stores drop those columns)
        n_units = ag.cdiv(n_tiles, s.cluster_n) if s.cluster_n > 1 else n_tiles
        most = ag.cdiv(A.shape[0], s.pad) * n_units          # units of the largest layout
        programs = unit_programs(s, most, cs)                # CTAs, or clusters of cs CTAs
        (pid,) = ag.grid(programs * cs, cluster=cs)
        rank = ag.cluster_rank() if cs > 1 else 0
        first = pid // cs if cs > 1 else pid
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, ag.bf16, s.consumers)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        # staging for the stored tile: width columns per warpgroup
        staging = Staging.alloc(s.consumers, rows, width, ag.bf16, min(s.store_cols, width)) \
            if s.epilogue == "tma" else None

        # the units (pad-row blocks) routing counted, read once for every role: both walk the
        # same units, and so do the CTAs of a cluster
        m_units = ag.load_scalar(Tiles, (0, 0))

        def units(expert: bool):
            """(this CTA's m-tile, n-tile, expert or None) of this CTA's units."""
            for mu, nu, e in _walk(first, programs, m_units, n_units, s.group_m, TileExpert,
                                   expert):
                if s.cluster_n > 1:   # the pair's two n-tiles of one m-tile
                    yield mu, nu * s.cluster_n + rank, e
                else:
                    yield (mu * cs + rank if cs > 1 else mu), nu, e

        produce_units(ring, units(True), A, W, s, k_steps, gated, rank)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            for m, n, _ in units(False):
                def work(m=m, n=n):
                    acc = ring.mma(k_steps, wg)
                    row0 = m * s.bm + wg * rows
                    store_unit(C, s, m, n, row0, wg, acc, staging, gated)

                consume_unit(ring, k_steps, s, TileRows, m, wg, work)

    name = ("moe_gate_up" if gated else "moe_down") + ("_partial" if partial else "")
    if tile_rows:
        # as below: C is written for the units routing counted only, and of those for the
        # warpgroups' rows holding routed rows (skip_pad_halves)
        return ag.kernel(moe_grouped_gemm_rows, name=name + "_rows", partial_outputs=("C",))
    if fused:
        def moe_gate_up_fused(A: ag.Tensor[("S", "M", "K", ag.bf16)],
                              W: ag.Tensor[("S", "E", 2, "NC", "K", ag.bf16)],
                              TileExpert: ag.Tensor["MT", 1, ag.i32],
                              Tiles: ag.Tensor[1, 1, ag.i32],
                              C: ag.Tensor[("S", 2, "M", "NC", ag.f32)],
                              H: ag.Tensor["M", "NC", ag.bf16],
                              Count: ag.Tensor["MT", "NT", ag.i32],
                              s: MoeSchedule = PREFILL):
            _tag_layout(A, W, TileExpert, s.pad, True, True)
            if not (s.swap_ab and s.split_k > 1 and s.fused_finish):
                raise ag.TraceError(f"the fused split finish is the decode gate-up's cut along "
                                    f"K: needs swap_ab, split_k > 1 and fused_finish (got "
                                    f"swap_ab={s.swap_ab}, split_k={s.split_k}, "
                                    f"fused_finish={s.fused_finish})",
                                    fix="use grouped_gemm_kernel(True, True) and the "
                                        "split finish kernel")
            # one counter per unit of the largest layout (a shorter Count: those units draw
            # -1 and never store H)
            ag.require(ag.sym(Count.shape[1]) * s.bm >= ag.sym(C.shape[3]),
                       "a counter per 64-column weight tile")
            _decode(A, W, TileExpert, Tiles, C, s, True, True, finish=(H, Count))

        # C and H are written for the units routing counted only (padding rows past them
        # never), on purpose
        return ag.kernel(moe_gate_up_fused, name="moe_gate_up_fused",
                         partial_outputs=("C", "H"))
    # C is written for the units routing counted only: the layout's worst-case rows past
    # them are never written (nor read), on purpose
    return ag.kernel(moe_grouped_gemm, name=name, partial_outputs=("C",))


def check_tile_rows(s: MoeSchedule, TileRows) -> None:
    """The kernel's TileRows argument (its tile_rows variant) and the schedule's
    skip_pad_halves (or the fp8 half_tile_last: MoeSchedule.reads_tile_rows) go together:
    every prefill grouped GEMM (bf16 and fp8)."""
    if s.reads_tile_rows and TileRows is None:
        who = "skip_pad_halves" if s.skip_pad_halves else "half_tile_last"
        raise ag.TraceError(f"{who} reads each m-tile's routed rows from TileRows: "
                            "this kernel has no such argument",
                            fix="build the kernel with tile_rows=True and pass routing's "
                                "TileRows after Tiles")
    if TileRows is not None and not s.reads_tile_rows:
        try:   # the second fix only where this schedule can take it
            replace(s, skip_pad_halves=True)
            fix = ("build it with tile_rows=False, or pass the schedule with "
                   "skip_pad_halves=True")
        except ValueError as why:
            fix = f"build it with tile_rows=False (this schedule cannot skip: {why})"
        raise ag.TraceError("this kernel takes TileRows for skip_pad_halves: the schedule has "
                            "skip_pad_halves=False", fix=fix)


def routed_rows(TileRows, s: MoeSchedule, m, wg):
    """(the routed rows of m-tile m's unit, the first row of consumer warpgroup wg's rows
    inside that unit): TileRows counts per unit of s.pad rows (tile_expert's index: with
    cluster_m = 2 a unit is the pair's two m-tiles, m-tile m its (m % 2)-th), so wg's rows
    hold a routed row exactly when the first number exceeds the second (a segment's routed
    rows come first, its padding after them)."""
    rows = s.bm // s.consumers
    cs = s.cluster_m
    unit = m // cs if cs > 1 else m
    first = (m - unit * cs) * s.bm + wg * rows if cs > 1 else wg * rows
    return ag.load_scalar(TileRows, (unit, 0)), first


def consume_unit(ring: OperandRing, k_steps, s: MoeSchedule, TileRows, m, wg, work,
                 real=None, half=None) -> None:
    """A consumer warpgroup's share of a prefill unit on m-tile m, every grouped GEMM (bf16
    and fp8): work() (its wgmma, promotion and epilogue), or with MoeSchedule.skip_pad_halves,
    where its rows of the m-tile are all padding (`routed_rows`), the ring protocol only: each
    of the unit's k_steps stages waited for and released, since the stage's empty barrier
    counts a release from every consumer warpgroup (the producer refills it when all have
    arrived). Nothing is computed or stored for those rows; the epilogue's staging is each
    warpgroup's own (Staging.slot), so no other warpgroup waits on this one's stores.
    `real` (the fp8 GEMM's pair_multicast): > 0 when m-tile m exists (the tiles routing
    counted minus m), else the m-tile is the missing second of an odd count's last pair and
    is skipped the same way. `half` (the fp8 GEMM's half_tile_last): where the unit's
    m-tile holds at most bm / consumers routed rows, every consumer warpgroup runs half()
    instead of work() (one test for all of them: warpgroup 1's rows all padding), each a
    share of the tile's columns on rows [0, bm / consumers), consuming the same k_steps."""
    if half is not None:
        if s.skip_pad_halves or real is not None:
            raise ag.TraceError("half_tile_last computes the padding warpgroup's share of the "
                                "tile, skip_pad_halves and pair_multicast skip it: one of "
                                "them", fix="pass half_tile_last=False or "
                                            "skip_pad_halves=pair_multicast=False")
        routed, first = routed_rows(TileRows, s, m, 1)
        spare = routed - first
        # complements, as below: both branches consume k_steps
        with ag.when(spare > 0):
            work()
        with ag.when(spare <= 0):
            half()
        return
    if not s.skip_pad_halves and real is None:
        work()
        return
    if s.skip_pad_halves:
        routed, first = routed_rows(TileRows, s, m, wg)
        spare = routed - first
        if real is not None:   # (routed - first <= bm: the minimum is it for a real m-tile)
            spare = ag.minimum(spare, real * s.bm)
    else:
        spare = real
    # one difference, compared twice: the verifier's step count sees the two guards as
    # complements (a term and its negation), so this warpgroup consumes k_steps either way
    with ag.when(spare > 0):
        work()
    with ag.when(spare <= 0):   # all padding: release the unit's stages unread
        for _ in ag.range(k_steps):
            with ring.pipe.consume():
                pass


def produce_units(ring: OperandRing, units, A, W, s: MoeSchedule, k_steps, gated: bool,
                  rank, extra=None, drawn: bool = False) -> None:
    """The producer warpgroup of the prefill grouped GEMMs (bf16 here, fp8 in moe_fp8.py):
    per unit (m-tile, n-tile, expert) of `units` and K step, A's bm rows and the expert's B
    tile into the ring's next stage (the gated GEMM's: bn/2 gate rows on top of the matching
    bn/2 up rows); `extra(stage, m, n, expert, k)`, when given, loads more into the same
    stage after them (the fp8 GEMM's block scales through shared memory). drawn (the dynamic
    walk, `_draws`): `units` yields (ticket, m-tile, n-tile, expert), and every step of the
    unit puts its ticket into its slot's payload word."""
    width = s.bn // 2 if gated else s.bn
    # cluster_m=2: B is shared (each CTA loads 1/cs of every weight box for both);
    # cluster_n=2: A is (each loads half of the token tile's rows for both)
    cs = s.cluster_m
    ca = s.cluster_n
    with ag.role("producer", warpgroups=1, regs=s.producer_regs):
        for unit in units:
            ticket, (m, n, expert) = (unit[0], unit[1:]) if drawn else (None, unit)
            for k in ag.range(k_steps):
                with ring.pipe.produce(payload=ticket) as stage:
                    k0 = k * s.bk
                    load_tile(ring.a[stage], 0, A, (), m, s.bm, k0, s.bk, rank=rank, share=ca)
                    # B is shared by the cluster's CTAs: each loads 1/cs of every box
                    if gated:   # gate rows, then the matching up rows, in one B tile
                        load_tile(ring.b[stage], 0, W, (expert, 0), n, width, k0, s.bk,
                                  rank=rank, share=cs)
                        load_tile(ring.b[stage], width, W, (expert, 1), n, width, k0, s.bk,
                                  rank=rank, share=cs)
                    else:
                        load_tile(ring.b[stage], 0, W, (expert,), n, s.bn, k0, s.bk,
                                  rank=rank, share=cs)
                    if extra is not None:
                        extra(stage, m, n, expert, k)


def store_unit(C, s: MoeSchedule, m, n, row0, wg, acc, staging: Staging | None,
               gated: bool) -> None:
    """The prefill grouped GEMMs' epilogue (bf16 and fp8): consumer wg's rows of unit (m, n)
    from its fp32 accumulator, starting at row `row0` of C: silu(gate) * up of the gated
    GEMM (bn/2 columns), else the tile, in bf16, from registers or through `staging` and TMA
    stores (epilogue="tma")."""
    width = s.bn // 2 if gated else s.bn
    if s.epilogue == "tma" and gated:
        _store_gated_staged(C, row0, n * width, wg, acc, staging, width, s.fast_silu,
                            s.rsqrt_silu)
    elif s.epilogue == "tma":
        store_tile_staged(C, Unit((), m, n), wg, acc, staging, bm=s.bm, bn=s.bn,
                          rows=s.bm // s.consumers, finish=lambda t: t.to(ag.bf16))
    elif gated:
        out = silu_mul(acc[:, :width], acc[:, width:], s.fast_silu, s.rsqrt_silu)
        ag.store(C, (row0, n * width), out.to(ag.bf16))
    else:
        ag.store(C, (row0, n * width), acc.to(ag.bf16))


def _tag_layout(A, W, TileExpert, pad: int, gated: bool, partial: bool = False) -> None:
    """Tags for the verifier (no code): a row of the layout belongs to expert route(row), what
    routing's tile_expert states per unit of `pad` rows (an assumption: routing's contract);
    W's rows are expert e's, so wgmma.agree proves each tile multiplies rows with their own
    expert's weights (tests/mutations/moe_mutations.py seeds the bug); store.coords claims
    each stored column is the W row it came from (proven, but a seeded gate/up row mismatch
    is not caught by it today: the pairing rests on the tile mapping)."""
    route, tile_expert = ag.opaque("route"), ag.opaque("tile_expert")
    if partial:   # K-slice views: the slice leads
        ag.tag_tensor(A, expert=lambda piece, r, k: route(r))
    else:
        ag.tag_tensor(A, expert=lambda r, k: route(r))
    ag.tag_tensor(TileExpert, value=lambda m, zero: tile_expert(m))
    # the contiguous layout's contract: every row of unit u (pad rows: one m-tile, a
    # cluster's two, or a decode token tile) is expert tile_expert[u]'s
    ag.tag_assume(lambda r: route(r) == tile_expert(r // pad))
    if gated and partial:
        ag.tag_tensor(W, expert=lambda piece, e, plane, r, k: e)
    elif gated:
        ag.tag_tensor(W, expert=lambda e, plane, r, k: e)
    elif partial:
        ag.tag_tensor(W, expert=lambda piece, e, r, k: e)
    else:
        ag.tag_tensor(W, expert=lambda e, r, k: e)


def unit_programs(s: MoeSchedule, most, cs: int):
    """The prefill grouped GEMMs' grid, in CTAs or clusters of cs CTAs, for `most` units (the
    largest layout's, from shapes: a host integer, so CUDA-graph capture needs no device
    value): persistent, at most num_sms / cs of them, each walking units first, first +
    programs, ...; or with persistent=False one per unit of the largest layout, so the walk
    (`_walk`, the same code) is one iteration, unit pid, or none past the units routing
    counted. The hardware hands CTAs out in blockIdx order as SMs free up, so consecutive
    units of the grouped raster (the m-tiles sharing a weight tile) run close in time and
    share its L2 reads, where persistent CTAs drift apart over their long walks
    (docs/perf/moe.md, the fp8 gate-up's ncu reading)."""
    return ag.minimum(most, s.num_sms // cs) if s.persistent else most


def _walk(first, programs, m_units, n_tiles, group_m: int, TileExpert, expert: bool):
    """(unit m-tile, n-tile, its expert or None) of the units first, first + programs, ... of
    m_units x n_tiles in grouped raster order: the m-tiles routing counted (zero-token
    experts have none, so they make no units and no weight reads). With programs the
    grid's unit count (MoeSchedule.persistent=False: `unit_programs`) one iteration or none."""
    for unit in ag.range(first, m_units * n_tiles, programs):
        mu, n = tile_coords(unit, m_units, n_tiles, group_m)
        yield mu, n, ag.load_scalar(TileExpert, (mu, 0)) if expert else None


def _draws(first, programs, m_units, n_tiles, group_m: int, TileExpert, Work):
    """The dynamic walk's producer loop (MoeSchedule.scheduler="dynamic"): as many iterations
    as `_walk` gives this CTA, each drawing the launch's next unit from the work counter Work
    [1] int32 (atom.inc wrapping at the m_units x n_tiles units routing counted, so the draws
    of a launch leave it as they found it, 0). Yields (ticket, m-tile, n-tile, expert) in
    the grouped raster order of the ticket; the producer puts the ticket into each of the
    unit's ring slots (`produce_units(..., drawn=True)`) for `_slots`."""
    total = m_units * n_tiles
    for _ in ag.range(first, total, programs):
        ticket = ag.atomic_fetch_add(Work, (0,), wrap=total)
        mu, n = tile_coords(ticket, m_units, n_tiles, group_m)
        yield ticket, mu, n, ag.load_scalar(TileExpert, (mu, 0))


def _slots(ring: OperandRing, first, programs, m_units, n_tiles, group_m: int, TileExpert,
           expert: bool):
    """The dynamic walk's consumer loop: `_draws`'s iterations (so the step counters agree),
    each unit (m-tile, n-tile, its expert or None) located from the ticket the producer put
    into the slot of this warpgroup's next step (OperandRing.peek_unit, before the unit's
    main loop)."""
    for _ in ag.range(first, m_units * n_tiles, programs):
        mu, n = tile_coords(ring.peek_unit(), m_units, n_tiles, group_m)
        yield mu, n, ag.load_scalar(TileExpert, (mu, 0)) if expert else None


def require_steps(K) -> None:
    """The dynamic walk hands each unit to the consumers with its first K step: with none the
    consumers' peek would wait for ever (checked at every launch)."""
    ag.require(ag.sym(K) >= 1, "the dynamic walk hands each unit to the consumers with its "
                               "first K step: K must be at least 1")


def _decode(A, W, TileExpert, Tiles, C, s: MoeSchedule, gated: bool, partial: bool,
            finish: tuple | None = None) -> None:
    """The swap-AB body (s.swap_ab): a unit is (token tile t of bn layout rows, weight tile n
    of 64 output columns[, K slice]); its stage holds 64 weight rows per plane (gate on top of
    up for the gated GEMM) as wgmma's A operand and the bn token rows as B, so the ring is
    nearly all weights. The accumulators are 64 x bn blocks of C^T (one per plane), stored
    transposed into rows [t * bn, +bn) of C: the gated epilogue first multiplies silu(gate) by
    up elementwise (same layout); a partial kernel stores each plane's fp32 sum over its K
    slice instead. The slices of a weight tile are consecutive units, and so are the few
    token tiles of one expert (grouped raster), so repeated weight reads hit L2. finish = (H,
    Count): the fused split finish of a partial gate-up (_finish_last_slice)."""
    K = A.shape[-1]
    planes = 2 if gated else 1
    splits = A.shape[0] if partial else 1   # the K slices: the views' leading dim
    n_tiles = ag.cdiv(C.shape[-1], s.bm)
    most = ag.cdiv(A.shape[-2], s.pad) * n_tiles * splits   # units of the largest layout
    programs = ag.minimum(most, s.num_sms)
    (pid,) = ag.grid(programs)
    ring = OperandRing.alloc(s.stages, planes * s.bm, s.bn, s.bk, ag.bf16, 1)
    k_steps = ring.k_steps(K)
    if s.prefetch:   # one thread of the CTA, before the wait (MoeSchedule.prefetch)
        with ag.elect():
            _prefetch_first_unit(ring, W, TileExpert, Tiles, s, pid, n_tiles, splits, planes,
                                 k_steps, partial)
    if s.pdl:   # every global access below reads or writes what the kernels before touch
        # (the prefetch's reads of the routing map only steer the hint: see _prefetch_first_unit)
        ag.wait_prior_grids(stable=(W, TileExpert, Tiles) if s.prefetch else (W,))
        # all of this grid's CTAs are resident (programs <= SMs): the successor's CTAs only
        # run their prologue (and with prefetch start their own weight stream: the same
        # bytes, earlier) and wait, so the early start costs this kernel little
        ag.allow_dependent_launch()
    token_tiles = ag.load_scalar(Tiles, (0, 0))   # read once: every role walks the same units

    def units(expert: bool):
        """(token tile, weight tile, the K slice's coordinates, expert or None)."""
        for unit in ag.range(pid, token_tiles * n_tiles * splits, programs):
            t, n = tile_coords(unit // splits if partial else unit, token_tiles, n_tiles,
                               s.group_m)
            lead = (unit % splits,) if partial else ()
            yield t, n, lead, ag.load_scalar(TileExpert, (t, 0)) if expert else None

    with ag.role("producer", warpgroups=1, regs=s.producer_regs):
        for t, n, lead, expert in units(True):
            for k in ag.range(k_steps):
                with ring.pipe.produce() as stage:
                    k0 = k * s.bk
                    for plane in range(planes):
                        load_tile(ring.a[stage], plane * s.bm, W,
                                  (*lead, expert, plane) if gated else (*lead, expert), n,
                                  s.bm, k0, s.bk)
                    load_tile(ring.b[stage], 0, A, lead, t, s.bn, k0, s.bk)

    with ag.role("consumer", warpgroups=1, regs=s.consumer_regs):
        for t, n, lead, _ in units(False):
            accs = ring.mma_tile(k_steps)     # one 64 x bn block of C^T per plane
            if partial:                       # fp32 partial sums, one plane each
                for plane, acc in enumerate(accs):
                    store_tile(C, Unit((*lead, plane) if gated else lead, n, t), 0, acc,
                               bm=s.bm, bn=s.bn, rows=s.bm, finish=lambda tile: tile,
                               transposed=True)
                if finish is not None:
                    _finish_last_slice(C, *finish, s, t, n)
            else:
                out = silu_mul(accs[0], accs[1], s.fast_silu, s.rsqrt_silu) if gated else accs[0]
                store_tile(C, Unit((), n, t), 0, out, bm=s.bm, bn=s.bn, rows=s.bm,
                           finish=lambda tile: tile.to(ag.bf16), transposed=True)


def _prefetch_first_unit(ring: OperandRing, W, TileExpert, Tiles, s: MoeSchedule, pid,
                         n_tiles, splits, planes: int, k_steps, partial: bool) -> None:
    """What one thread of the CTA does before the PDL wait (MoeSchedule.prefetch): the
    weight boxes of the first s.prefetch K steps of this CTA's first unit (unit pid, the
    first its walk takes) into L2, so that HBM streams them while the kernel before still
    runs. Reads only what no kernel next to this one writes: W, and the routing map
    (TileExpert, Tiles), written two or more launches back (docs/pdl.md); and what it reads
    steers only this hint: the walk after the wait reads the count again, so a wrong guess
    would cost bandwidth, never a wrong result. The boxes are the ring's (ring.a's 64 rows
    per plane: the loads' own tensor map); the loads after the wait find them in L2."""
    token_tiles = ag.load_scalar(Tiles, (0, 0))
    with ag.when(pid < token_tiles * n_tiles * splits):
        t, n = tile_coords(pid // splits if partial else pid, token_tiles, n_tiles, s.group_m)
        lead = (pid % splits,) if partial else ()
        expert = ag.load_scalar(TileExpert, (t, 0))
        for k in ag.range(ag.minimum(k_steps, s.prefetch)):
            for plane in range(planes):
                ag.tma.prefetch(ring.a[0].rows_of(0, s.bm), W,
                                (*lead, expert, plane, n * s.bm, k * s.bk) if planes == 2
                                else (*lead, expert, n * s.bm, k * s.bk))


def _finish_last_slice(P, H, Count, s: MoeSchedule, t, n) -> None:
    """The fused split finish of the decode gate-up (MoeSchedule.fused_finish), by the
    consumer warpgroup after it stored its K slice's partial sums of unit (token tile t,
    weight tile n): a release fence, a ticket from the unit's counter (it resets itself after
    split_k arrivals), and the slice that draws the last ticket, after an acquire fence, adds
    the split_k slices' [bn, 64] partials of each plane in slice order (the same sum as
    split_finish_kernel, whichever slice came last) and stores silu(gate) * up, rounded to
    bf16 once, into rows [t * bn, +bn) and columns [n * 64, +64) of H. One latency of L2
    reads and a 64 x bn store on the last slice's unit, instead of a kernel launch."""
    splits = s.split_k
    r0, c0 = t * s.bn, n * s.bm
    ag.fence()                      # release: this slice's partial sums before its ticket
    ticket = ag.atomic_fetch_add(Count, (t, n), wrap=splits)
    with ag.when(ticket == splits - 1):
        ag.fence()                  # acquire: every slice's partial sums before the loads
        gate = ag.load(P, (0, 0, r0, c0), (s.bn, s.bm))
        up = ag.load(P, (0, 1, r0, c0), (s.bn, s.bm))
        for piece in range(1, splits):   # a fixed order: the same sum on every run
            gate = gate + ag.load(P, (piece, 0, r0, c0), (s.bn, s.bm))
            up = up + ag.load(P, (piece, 1, r0, c0), (s.bn, s.bm))
        ag.store(H, (r0, c0), silu_mul(gate, up, s.fast_silu, s.rsqrt_silu).to(ag.bf16))


@functools.lru_cache(maxsize=None)
def split_finish_kernel(splits: int, bn: int) -> ag.KernelFunction:
    """After the decode gate-up GEMM with split_k = splits: h = silu(sum of the gate partial
    sums) * (sum of the up partial sums), rounded to bf16 once, for the token tiles routing
    counted (bn rows each). One CTA per (token tile, column block of bi = 1024 / bn columns):
    a bn x bi block, 8 elements a thread per operand, no spills, and every SM takes a share
    even when a single token makes one or two token tiles (Mixtral T = 1: 2 tiles x 112
    blocks of I = 14336; a CTA per token tile walking all of I left 130 SMs idle and took
    longer than the GEMM). The grid covers the largest layout; CTAs past tiles[0] do
    nothing."""
    bi = 1024 // bn

    def moe_split_finish(P: ag.Tensor["S", 2, "M", "I", ag.f32], Tiles: ag.Tensor[1, 1, ag.i32],
                         H: ag.Tensor["M", "I", ag.bf16]):
        programs = ag.cdiv(H.shape[0], bn)
        pid, block = ag.grid(programs, ag.cdiv(H.shape[1], bi))
        c0 = block * bi
        token_tiles = ag.load_scalar(Tiles, (0, 0))
        for t in ag.range(pid, token_tiles, programs):   # at most one token tile
            gate = ag.load(P, (0, 0, t * bn, c0), (bn, bi))
            up = ag.load(P, (0, 1, t * bn, c0), (bn, bi))
            for piece in range(1, splits):   # a fixed order: the same sum on every run
                gate = gate + ag.load(P, (piece, 0, t * bn, c0), (bn, bi))
                up = up + ag.load(P, (piece, 1, t * bn, c0), (bn, bi))
            ag.store(H, (t * bn, c0), silu_mul(gate, up).to(ag.bf16))

    # H's rows past the token tiles routing counted are never written (nor read), on purpose
    return ag.kernel(moe_split_finish, threads=128, name=f"moe_split_finish_s{splits}_{bn}",
                     partial_outputs=("H",))


def _store_gated_staged(C, row0, col0, wg, acc, staging: Staging, width: int,
                        fast_silu: bool = False, rsqrt_silu: bool = False) -> None:
    """The gate-up epilogue through shared memory: per 64-column block j of the output,
    silu(gate block j) * (up block j) stmatrix'ed into warpgroup wg's staging slots, then
    TMA-stored; in rounds of `staging.staged` blocks (store_tile_staged's order). `acc` is
    the [rows, 2 width] tile (gate columns, then up), or the pair (gate, up) of [rows, width]
    sums (the fp8 GEMM's n_split = 2)."""
    w = staging.width
    gates, ups, off = (acc[0], acc[1], 0) if isinstance(acc, tuple) else (acc, acc, width)
    for first in range(0, staging.blocks, staging.staged):
        blocks = range(first, min(staging.blocks, first + staging.staged))
        for j in blocks:
            gate = gates[:, w * j:w * (j + 1)]
            up = ups[:, off + w * j:off + w * (j + 1)]
            ag.stmatrix(staging.slot(wg, j), silu_mul(gate, up, fast_silu, rsqrt_silu).to(ag.bf16))
        for j in blocks:
            ag.tma.store(C, (row0, col0 + w * j), staging.slot(wg, j))


gate_up = grouped_gemm_kernel(True)
down = grouped_gemm_kernel(False)
