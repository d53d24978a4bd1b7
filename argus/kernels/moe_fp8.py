"""Activation quantization for the fp8 (e4m3, 128x128 block-scaled) MoE expert path: token rows
to e4m3 with one f32 scale per 128 columns ("1x128", DeepSeek-V3 / DeepGEMM), as DSL kernels.

    quantize_1x128   x [M, K] (bf16 / f32)       -> xq [M, K] e4m3, scale_t [K/128, M'] f32
    permute_quantize x [T, H] bf16, pos [T*k, 1] -> xq [M_pad, H] e4m3, scale_t [H/128, M_pad']
                     (moe_permute's scatter into the padded expert layout, quantizing on the
                     way, so the grouped GEMM's A operand is written once, in e4m3)

Per row r and 128-column group g (the reference is DeepGEMM's per_token_cast_to_fp8):

    amax = max(max |x[r, 128 g : 128 g + 128]|, AMAX_FLOOR)
    xq[r, 128 g + c] = e4m3(x[r, 128 g + c] * (448 / amax))     (saturating: argus.dtypes)
    scale_t[g, r] = amax / 448                                   (x ~= xq * scale_t[g, r])

so the group's largest magnitude maps to +-448 and nothing overflows; the floor keeps an
all-zero group finite (its scale is tiny, its values 0). Rounding, bit for bit: 448 / amax and
amax / 448 are each one correctly rounded f32 division (CUDA's `/` on floats is div.rn.f32
under NVRTC's default -prec-div=true; the interpreter divides numpy f32 arrays), the product
one f32 multiply, the cast round-to-nearest-even and saturating. Not amax * (1 / 448): that
differs in the last bit for about half of all amax values (torch on CUDA evaluates
`amax / 448.0` that way: aten's div_true_kernel_cuda multiplies by the reciprocal of a
Python-number divisor); argus.ops.quantize_fp8.reference is this formula in torch on any
device. scale_t is MN-major, the layout
argus/kernels/gemm_fp8.py's block-scaled kernel reads (`BlockScales.scale_a_t`): the scales of
one K block for consecutive rows are contiguous. Columns past K (a ragged last group) are
read as 0 and never written.

The tensors are taken as [rows, K/128, 128] views (the op reshapes them; K a multiple of 128,
as the block-scaled GEMM needs anyway), so a CTA's tile is [G, 128]: G groups of one row, one
group per tile row, and each group's amax is a row reduction of the tile.
"""

import dataclasses
import functools
import inspect
from dataclasses import dataclass, field

import argus as ag
from argus.dtypes import DType
from argus.kernels.gemm_fp8 import (BK_BYTES, OVERLAP_MAX_BN, PROMOTE_MAX_BN, SCALE_BLOCK,
                                    SCALE_BOX, SPLIT_MAX_REGS, SharedBlockScales,
                                    early_release_promoted_mma,
                                    overlapped_promoted_mma, promoted_mma, split_promoted_mma,
                                    weight_blocks_spanned)
from argus.kernels.moe import (MoeSchedule, _draws, _slots, _store_gated_staged,
                               _tag_layout, _walk, check_tile_rows, consume_unit,
                               produce_units, require_steps, silu_mul, store_unit,
                               unit_programs)
from argus.kernels.moe_routing import tag_positions
from argus.kernels.warp_specialized import (OperandRing, Staging, Unit, load_tile,
                                            store_tile_staged)

GROUP = 128          # columns per scale (one 128-deep K block of the block-scaled GEMM)
E4M3_MAX = 448.0     # the largest finite e4m3 magnitude
AMAX_FLOOR = 1e-4    # DeepGEMM's clamp: an all-zero group still gets a finite scale
# One warp a CTA: a lane holds 4 consecutive columns of each group (8-byte bf16 loads, 4-byte
# packed e4m3 stores) and a group's amax is a warp reduction (shuffles, no block barrier, as
# moe_routing's one-warp routers). At 128 threads a thread holds one column of each group and
# every amax crosses warps through shared memory. Not measured yet (no GPU run).
THREADS = 32


def _quantize_groups(x, g0, groups_total):
    """The [G, 128] f32 tile x of groups [g0, g0 + G) -> (its e4m3 tile, its [G, 1] scales).
    Groups at or past `groups_total` (the tile's overhang past the tensor) are never stored;
    they take the floor as their amax instead of the load's fill (a 0 fill would be the max's
    identity only because |x| >= 0, which the verifier's fill.identity cannot see)."""
    return _quantize_rows(x, (g0 + ag.arange(x.shape[0]) < groups_total)[:, None])


def _quantize_rows(x, real):
    """quantize_1x128's formula (the module docstring) on each row of the f32 tile x: (its
    e4m3 tile, its [rows] scales). Elements where `real` (broadcast over x) is false are the
    tile's overhang: they take -inf, the max's identity, so no row's amax sees them (and they
    are never stored). The one place the formula is written: the quantizers and the gate-up's
    quantizing epilogue (`_quantize_unit`) must agree bit for bit."""
    amax = ag.maximum(ag.where(real, ag.abs_(x), float("-inf")).max(axis=1), AMAX_FLOOR)
    q = (x * (E4M3_MAX / amax)).to(ag.e4m3)
    return q, amax / E4M3_MAX


@functools.lru_cache(maxsize=None)
def quantize_1x128_kernel(src: DType, groups: int = 4, threads: int = THREADS,
                          k_major: bool = False) -> ag.KernelFunction:
    """CTA (r, b) quantizes groups [b * groups, +groups) of row r. k_major: the scales go to
    ScaleA [MS, KGP, 1] (K-major, KGP >= KG: row r's scales contiguous, the layout the
    shared-memory-scale GEMMs' TMA boxes read; the trailing 1 lets the [G, 1] column of one
    row's scales be stored as it is) instead of the MN-major ScaleT [KG, MS]."""

    def quantize_1x128(X: ag.Tensor["M", "KG", GROUP, src],
                       Xq: ag.Tensor["M", "KG", GROUP, ag.e4m3],
                       ScaleT: ag.Tensor["KG", "MS", ag.f32]):
        r, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
        g0 = b * groups
        x = ag.load(X, (r, g0, 0), (groups, GROUP)).to(ag.f32)
        q, scale = _quantize_groups(x, g0, X.shape[1])
        ag.store(Xq, (r, g0, 0), q)
        ag.store(ScaleT, (g0, r), scale)

    def quantize_1x128_k_major(X: ag.Tensor["M", "KG", GROUP, src],
                               Xq: ag.Tensor["M", "KG", GROUP, ag.e4m3],
                               ScaleA: ag.Tensor["MS", "KGP", 1, ag.f32]):
        r, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
        g0 = b * groups
        x = ag.load(X, (r, g0, 0), (groups, GROUP)).to(ag.f32)
        q, scale = _quantize_groups(x, g0, X.shape[1])
        ag.store(Xq, (r, g0, 0), q)
        ag.store(ScaleA, (r, g0, 0), scale)

    if k_major:   # rows past M and columns past KG (padding) are not read as scales
        return ag.kernel(quantize_1x128_k_major, threads=threads,
                         name=f"quantize_1x128_kmajor_{src.name}_{groups}_{threads}",
                         partial_outputs=("ScaleA",))
    # scale_t's columns past M (M' > M: alignment padding the GEMM never uses) are not written
    return ag.kernel(quantize_1x128, threads=threads,
                     name=f"quantize_1x128_{src.name}_{groups}_{threads}",
                     partial_outputs=("ScaleT",))


@functools.lru_cache(maxsize=None)
def permute_quantize_kernel(top_k: int, groups: int = 4, threads: int = THREADS,
                            k_major: bool = False) -> ag.KernelFunction:
    """xq[pos[t * k + j]] = e4m3 of x[t] for each slot j, scale_t[:, pos[t * k + j]] its
    scales: CTA (t, b) quantizes groups [b * groups, +groups) of token t once and writes them
    to its k rows of the padded layout (argus/kernels/moe_routing.py's permute, quantized).
    k_major: the scales into ScaleA [MS, HGP, 1] instead (quantize_1x128_kernel's)."""

    if k_major:
        def moe_permute_quantize_k_major(X: ag.Tensor["T", "HG", GROUP, ag.bf16],
                                         Pos: ag.Tensor["N", 1, ag.i32],
                                         Xq: ag.Tensor["M", "HG", GROUP, ag.e4m3],
                                         ScaleA: ag.Tensor["MS", "HGP", 1, ag.f32]):
            tag_positions(Pos)
            t, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
            g0 = b * groups
            x = ag.load(X, (t, g0, 0), (groups, GROUP)).to(ag.f32)
            q, scale = _quantize_groups(x, g0, X.shape[1])
            for j in range(top_k):
                row = ag.load_scalar(Pos, (t * top_k + j, 0))
                ag.store(Xq, (row, g0, 0), q)
                ag.store(ScaleA, (row, g0, 0), scale)

        return ag.kernel(moe_permute_quantize_k_major, threads=threads,
                         name=f"moe_permute_quantize_kmajor_k{top_k}_{groups}_{threads}",
                         partial_outputs=("Xq", "ScaleA"))

    def moe_permute_quantize(X: ag.Tensor["T", "HG", GROUP, ag.bf16],
                             Pos: ag.Tensor["N", 1, ag.i32],
                             Xq: ag.Tensor["M", "HG", GROUP, ag.e4m3],
                             ScaleT: ag.Tensor["HG", "MS", ag.f32]):
        tag_positions(Pos)
        t, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
        g0 = b * groups
        x = ag.load(X, (t, g0, 0), (groups, GROUP)).to(ag.f32)
        q, scale = _quantize_groups(x, g0, X.shape[1])
        for j in range(top_k):
            row = ag.load_scalar(Pos, (t * top_k + j, 0))
            ag.store(Xq, (row, g0, 0), q)
            ag.store(ScaleT, (g0, row), scale)

    # the padding rows (and their scales) are never written, nor read by the GEMM's results
    return ag.kernel(moe_permute_quantize, threads=threads,
                     name=f"moe_permute_quantize_k{top_k}_{groups}_{threads}",
                     partial_outputs=("Xq", "ScaleT"))


# ----------------------------------------------------------------------------- the grouped GEMM
#
# The block-scaled fp8 grouped GEMM: argus/kernels/moe.py's persistent walk over the (m-tile,
# n-tile) units of the contiguous layout (the expert a TMA coordinate of one weight tensor
# map, read per unit from tile_expert) with argus/kernels/gemm_fp8.py's promoting consumer
# (each 128-deep K block into a fresh wgmma accumulator, added into the fp32 one times its
# scales on the CUDA cores). The scales:
#
#   A (token rows of the layout):  ScaleAT [K/128, MS] f32, MN-major (MS >= the layout's rows;
#                                   permute_quantize_kernel / quantize_1x128_kernel write it)
#   W (expert weights):            ScaleW  [E, N/128, K/128] f32, one per 128x128 block of
#                                   each expert's [N, K] weight (DeepSeek-V3's
#                                   weight_scale_inv); the gate-up's viewed [E, 2, I/128, H/128]
#                                   (its gate and up planes, as W)
#
#   C[r, j] = sum_b ScaleAT[b, r] * ScaleW[e(r), j // 128, b] * sum_{k in b} A[r, k] W[e(r), j, k]
#
# The gate-up's B tile is bn/2 gate rows on top of the same bn/2 up rows, so the tile's two
# halves take two weight scales per K block (the gate plane's and the up plane's block of the
# same rows): bn/2 must divide 128 so neither half straddles a 128-row weight block
# (MoeFp8Schedule checks it; the op needs I a multiple of 128).


@dataclass(frozen=True, repr=False)     # MoeSchedule's repr: its repr=False fields when set
class MoeFp8Schedule(MoeSchedule):
    """The fp8 grouped GEMM's schedule: MoeSchedule's tile, ring, roles, raster and cluster
    fields with bk = 128 e4m3 (one 128-byte swizzle row: one scale block of K per stage), and
    gemm_fp8's promotion choice (`overlap`: two partials in turns, the next block's wgmma
    issued before this one is promoted; not proven by the verifier's wgmma.k-once yet, as for
    the dense kernel). Prefill only (no swap-AB decode form, no K split)."""

    bk: int = BK_BYTES
    overlap: bool = False
    # serial promotion in gemm_fp8.promoted_mma's order: the stage is released after the
    # promotion's FFMAs instead of as soon as the block's wgmma group has retired
    # (early_release_promoted_mma, the default); kept to measure one against the other
    late_release: bool = False
    # gemm_fp8's N-split promotion (`split_promoted_mma`, Fp8GemmSchedule.n_split): each K
    # block's wgmma is two of bn / 2 columns, each into its own partial promoted into its own
    # fp32 sum, one partial live at a time, so a 128 x 256 tile fits the registers (the
    # dense kernel's "split 128x256", docs/perf/fp8.md). The gate-up's halves are then its
    # two planes (gate rows, up rows: one weight scale each), the down's two 128-column
    # blocks of the tile (one weight block each at bn = 256). 1 or 2; out of repr when 1
    n_split: int = field(default=1, repr=False)
    # block scales through shared memory (gemm_fp8.SharedBlockScales, DeepGEMM's path; the
    # dense kernel's smem_scales): the producer TMA-loads each stage's activation scales
    # (K-major [MS, K/128 padded to 4]: the quantizers' k_major write) and the unit's one or
    # two weight-scale blocks (the gate-up's two planes) beside its operand tiles, and the
    # consumers read them there (`grouped_gemm_fp8_smem_kernel`). Serial early-release or
    # n_split=2 promotion, no clusters. Out of repr when False
    smem_scales: bool = field(default=False, repr=False)
    # the gate-up quantizes its own output (`quantize_out`, opt-in): with n_split = 2 and
    # bn = 256 a unit's h tile is exactly 128 columns, one 1x128 scale group of the down's
    # activation scales, so the epilogue rounds silu(gate) * up to bf16, takes each row's
    # amax over its 128 columns (a row reduction of the accumulator) and writes h in e4m3
    # plus the scale column (quantize_1x128's formula, bit for bit): no bf16 h, no separate
    # quantize_1x128 launch (argus.ops.moe). The gate-up kernel only (the down ignores it);
    # the e4m3 tile is stored from registers whatever `epilogue` says (the TMA-store staging
    # is stmatrix / store_shared, 16-bit tiles only). Out of repr when False
    quantize_out: bool = field(default=False, repr=False)
    # same-expert pair multicast (smem_scales only; DeepGEMM's idea, its m-grouped contiguous
    # scheduler's per-block `is_tma_multicast_valid`: multicast decided at run time): the grid
    # runs in 2-CTA clusters along M, a unit is the pair of consecutive m-tiles (2j, 2j + 1) at
    # one n-tile, and the layout keeps 128-row padding (pad = bm, not the static cluster_m=2's
    # 2 bm), so the pair may straddle two experts and the last pair of an odd m-tile count has
    # one real m-tile. Per unit, when both m-tiles are real and have one expert, each CTA loads
    # half of every B box and multicasts it to both (the weights read once for the pair, in
    # lockstep); otherwise each CTA loads its own expert's whole B tile. Both branches deliver
    # the same bytes to each CTA's full barrier (lowering and the verifier's tma.tx-bytes check
    # the two complementary guards), and the empty-barrier protocol is cluster-wide either way.
    # The CTA of a missing second m-tile runs the ring protocol without wgmma or stores.
    # TileExpert (and TileRows) need a row past the layout's largest m-tile count (the pair's
    # second m-tile is read before it is known to be real): argus.ops.moe allocates it.
    # Out of repr when False
    pair_multicast: bool = field(default=False, repr=False)
    # an expert's last m-tile holding <= 64 routed rows as a half tile (docs/perf/moe.md,
    # h297's design; the smem-scale kernel, n_split = 2, bm = 128, bn = 256, two consumers):
    # instead of warpgroup 1 multiplying rows [64, 128), all padding, both warpgroups take
    # rows [0, 64) and warpgroup j column half j of the tile: the down's 128 columns
    # [128 j, +128) (one m64n128 wgmma a K block, its one weight block's scale), the
    # gate-up's h columns [64 j, +64) of both planes (two m64n64 wgmmas, so silu(gate) * up
    # stays in one thread), each storing its half (`_half_tile`). skip_pad_halves left
    # warpgroup 0 alone on the tensor cores (slower on the H100); here both stay busy, each
    # on half the work. The choice is per unit and the same for both warpgroups (the
    # m-tile's routed rows from TileRows: `moe.consume_unit(half=...)`). Rows [64, 128) of
    # such a tile are padding: never written. On the static walk a half unit puts its CTA
    # ahead of the CTAs it shared weight tiles with, for good (h310: the L2 model's DRAM
    # reads x2.4 at DeepSeek-V3, docs/perf/moe.md); the dynamic walk or the grid
    # (persistent=False) hand the units out in order and keep them together. Out of repr
    # when False
    half_tile_last: bool = field(default=False, repr=False)

    @property
    def reads_tile_rows(self) -> bool:
        return self.skip_pad_halves or self.half_tile_last

    @property
    def piece(self) -> int:
        """Columns of one accumulator: bn, or bn / 2 with n_split = 2."""
        return self.bn // self.n_split

    def _problems(self) -> list[str]:
        problems = super()._problems()
        if self.overlap and self.late_release:
            problems.append("late_release orders the serial promotion; overlap has its own "
                            "(pass one of them)")
        if self.bk != BK_BYTES:
            problems.append(f"bk={self.bk}: a stage is one 128-byte swizzle row of e4m3 (one "
                            f"128-deep scale block), bk=128")
        if self.n_split != 1:
            problems += self._split_problems()
            limit = None
        else:
            limit = OVERLAP_MAX_BN if self.overlap else PROMOTE_MAX_BN
        if limit is not None and self.bn > limit:
            problems.append(f"promotion keeps {3 if self.overlap else 2} "
                            f"{self.bm // self.consumers}x{self.bn} fp32 accumulators per "
                            f"consumer: bn={self.bn} exceeds the register budget "
                            f"(bn <= {limit}{' with overlap' if self.overlap else ''})")
        if self.swap_ab or self.split_k != 1:
            problems.append("the fp8 grouped GEMM has no swap-AB decode form and no K split "
                            "(swap_ab=False, split_k=1)")
        if self.pingpong:
            problems.append("pingpong is built for the bf16/fp16 GEMMs only")
        if self.smem_scales and (self.overlap or self.late_release or self.cluster_m != 1
                                 or self.cluster_n != 1):
            problems.append("smem_scales reads a stage's scales in the serial promotion's "
                            "step (early release or n_split=2): none of overlap, "
                            "late_release, and no clusters (cluster_m=cluster_n=1)")
        if self.pair_multicast and (not self.smem_scales or self.cluster_m != 1
                                    or self.cluster_n != 1 or (self.bn // 4) % 8
                                    or (self.persistent and self.num_sms < 2)):
            # (num_sms sizes the persistent grid only: persistent=False ignores it)
            problems.append(f"pair_multicast pairs two m-tiles in a 2-CTA cluster of its own "
                            f"(pad stays bm) with the block scales through shared memory: it "
                            f"needs smem_scales=True, cluster_m=cluster_n=1, bn a multiple of "
                            f"32 (half of each B box a CTA) and, persistent, num_sms >= 2 (got "
                            f"smem_scales={self.smem_scales}, cluster_m={self.cluster_m}, "
                            f"cluster_n={self.cluster_n}, bn={self.bn}, num_sms={self.num_sms})")
        if self.half_tile_last:
            why = [what for what, bad in (
                ("smem_scales=True", not self.smem_scales),
                ("n_split=2", self.n_split != 2),
                ("bm=128, bn=256, consumers=2", (self.bm, self.bn, self.consumers)
                 != (128, 256, 2)),
                ("quantize_out=False (a 1x128 scale group would span both warpgroups)",
                 self.quantize_out),
                ("skip_pad_halves=False", self.skip_pad_halves),
                ("pair_multicast=False", self.pair_multicast)) if bad]
            if why:
                problems.append(f"half_tile_last splits an expert's last 64-row m-tile's "
                                f"columns between the two consumer warpgroups of the "
                                f"smem-scale split kernel: it needs {', '.join(why)}")
        if self.quantize_out and (self.n_split != 2 or self.bn != 256):
            problems.append(f"quantize_out quantizes the gate-up's unit tile as one 1x128 "
                            f"scale group: it needs n_split=2 and bn=256 (128 columns of h a "
                            f"unit), got n_split={self.n_split}, bn={self.bn}")
        return problems

    def _split_problems(self) -> list[str]:
        """Fp8GemmSchedule._split_problems for the grouped kernel (serial form only)."""
        if self.n_split != 2:
            return [f"n_split={self.n_split}: the K step is split into 1 or 2 column halves"]
        problems = []
        if self.overlap or self.late_release:
            problems.append("n_split=2 is a promoting loop of its own (the stage released "
                            "after the second half's wgmma): none of overlap, late_release")
        if self.bn % 16:
            problems.append(f"n_split=2 takes halves of bn={self.bn}: each a wgmma N, a "
                            f"multiple of 8, so bn a multiple of 16")
        # per thread: bn / 2 registers of the two halves' sums, bn / 4 of the live partial
        regs = self.bn // 2 + self.bn // 4
        if regs > SPLIT_MAX_REGS:
            problems.append(f"n_split=2 keeps the {self.bm // self.consumers}x{self.bn} sum "
                            f"and one half's partial in registers: {regs} per thread exceeds "
                            f"the budget of {SPLIT_MAX_REGS} (bn <= {4 * SPLIT_MAX_REGS // 3})")
        # the down's halves take one or two weight scales each (GroupedBlockScales.combine)
        if weight_blocks_spanned(self.piece) > 2:
            problems.append(f"n_split=2: a {self.piece}-column half can span three 128-column "
                            f"weight blocks of the down GEMM (two scales at most)")
        return problems

    @property
    def gate_up_fits(self) -> bool:
        """Whether the gate-up may run this schedule: each half of its B tile (bn/2 rows of
        one plane) lies in one 128-row weight-scale block."""
        return SCALE_BLOCK % (self.bn // 2) == 0


# 128 x 128 tiles (64 output columns of the gate-up), 6 stages of 32 KB: gemm_fp8's measured
# block-scaled tile (docs/perf/fp8.md); the gate-up halves are 64 rows, inside one weight block.
# The prefill default until 2026-12-06 (DeepSeek-V3 T = 16384 whole layer 603 TFLOP/s, H100)
FP8_PREFILL = MoeFp8Schedule(bm=128, bn=128, stages=6, consumers=2)
# the same with overlapped promotion (the dense kernel's fastest: 836-926 TFLOP/s)
FP8_PREFILL_OVERLAP = MoeFp8Schedule(bm=128, bn=128, stages=6, consumers=2, overlap=True)
# gemm_fp8's split 128 x 256 (n_split=2, `split_promoted_mma`; the dense kernel's
# "split 128x256" with global scales, docs/perf/fp8.md): the gate-up's 256 B rows are 128 gate
# rows on top of the same 128 up rows, each half one plane and one weight-scale block, so its
# two sums are gate and up (128 columns of h a unit instead of 64); the down's halves are the
# tile's two 128-column weight blocks. 4 stages of 48 KB, as the dense split. DeepSeek-V3
# T = 16384 whole layer 691 TFLOP/s, 713 with the TMA store (H100, 2026-12-06, docs/perf/moe.md)
FP8_PREFILL_SPLIT = MoeFp8Schedule(bm=128, bn=256, stages=4, consumers=2, n_split=2)
# the same with the TMA-store epilogue (one half's 32 KB of staging beside the 4 stages: 224 KB,
# the dense split's _SPLIT_256_TMA)
FP8_PREFILL_SPLIT_TMA = MoeFp8Schedule(bm=128, bn=256, stages=4, consumers=2, n_split=2,
                                       epilogue="tma")
# the split with the block scales through shared memory (the dense kernel's default, "split
# 128x256 smem scales": 1082 TFLOP/s geomean against the global-scale split's 989 on the H200,
# docs/perf/fp8.md): 4 stages from registers; 3 with the TMA store (4 x 48 KB + 32 KB of
# staging + the scale stages is past 227 KB), as the dense _SPLIT_256_SMEM_TMA. DeepSeek-V3
# T = 16384 whole layer 778 and 859 TFLOP/s (H100, 2026-12-06, docs/perf/moe.md): the TMA form
# is argus.ops.moe.fp8_schedule_for's prefill default
FP8_PREFILL_SPLIT_SMEM = MoeFp8Schedule(bm=128, bn=256, stages=4, consumers=2, n_split=2,
                                        smem_scales=True)
FP8_PREFILL_SPLIT_SMEM_TMA = MoeFp8Schedule(bm=128, bn=256, stages=3, consumers=2, n_split=2,
                                            smem_scales=True, epilogue="tma")
# few rows per expert: 64-row tiles (half the padding), one consumer warpgroup
FP8_SMALL = MoeFp8Schedule(bm=64, bn=128, stages=8, consumers=1, consumer_regs=240,
                           producer_regs=40)


@dataclass(frozen=True)
class GroupedBlockScales:
    """`gemm_fp8.BlockScales` for a unit of the grouped GEMM: the per-row activation scales of
    warpgroup wg's rows, and the unit's expert's weight scales: ScaleW[expert, block, k] for a
    tile inside one 128-column block, two blocks selected per column where the down GEMM's
    tile straddles one, or (gated) the gate plane's block for the tile's first half and the
    up plane's for its second. The same fetch / combine interface, so promoted_mma and
    overlapped_promoted_mma take it as they are."""

    scale_a_t: object
    scale_w: object
    expert: object
    first_row: object
    first_col: object       # the unit's first output column (of one plane when gated)
    rows: int
    bn: int
    gated: bool
    # a gate-up column half of n_split = 2 (`piece`): the plane (0 gate, 1 up) all its
    # columns belong to; None otherwise
    plane: int | None = None

    @property
    def straddles(self) -> bool:
        return not self.gated and SCALE_BLOCK % self.bn != 0

    def fetch(self, k):
        per_row = ag.load(self.scale_a_t, (k, self.first_row), (self.rows,))
        return (per_row, *self.fetch_weights(k))

    def fetch_weights(self, k):
        """The weight scales of block k: (left, right or None)."""
        block = self.first_col // SCALE_BLOCK
        if self.gated:   # the gate plane's block, then the up plane's block of the same rows
            return (ag.load_scalar(self.scale_w, (self.expert, 0, block, k)),
                    ag.load_scalar(self.scale_w, (self.expert, 1, block, k)))
        left = self._weight(block, k)
        right = self._weight(block + 1, k) if self.straddles else None
        return left, right

    def _weight(self, block, k):
        at = (self.expert, block, k) if self.plane is None else \
            (self.expert, self.plane, block, k)
        return ag.load_scalar(self.scale_w, at)

    def piece(self, j: int, width: int) -> "GroupedBlockScales":
        """These scales for column half j (`width` columns) of the tile (n_split = 2): of the
        gate-up, plane j's block of the unit's rows (bn / 2 dividing 128: one scalar); of the
        down, columns [j width, (j + 1) width) of the tile, one or two weight blocks."""
        if self.gated:
            assert width == self.bn // 2, (width, self.bn)
            return dataclasses.replace(self, bn=width, gated=False, plane=j)
        return dataclasses.replace(self, first_col=self.first_col + j * width, bn=width)

    def combine_column(self, column, left, right):
        """`combine` of per-row scales given as a [rows, 1] column (split_promoted_mma
        expands it once for both halves)."""
        if right is None:
            return column * left
        split = self.bn // 2 if self.gated else \
            (self.first_col // SCALE_BLOCK + 1) * SCALE_BLOCK - self.first_col
        return column * ag.where(ag.arange(self.bn)[None, :] < split, left, right)

    def combine(self, per_row, left, right):
        if right is None:
            return (per_row * left)[:, None]
        # gated: columns [0, bn/2) are gate products, [bn/2, bn) up products; straddling:
        # columns before the next weight block's first column take the left block's scale
        split = self.bn // 2 if self.gated else \
            (self.first_col // SCALE_BLOCK + 1) * SCALE_BLOCK - self.first_col
        return per_row[:, None] * ag.where(ag.arange(self.bn)[None, :] < split, left, right)


def _promotion(s: MoeFp8Schedule):
    """The consumer's promoting main loop the schedule asks for."""
    if s.n_split == 2:
        return split_promoted_mma
    if s.overlap:
        return overlapped_promoted_mma
    return promoted_mma if s.late_release else early_release_promoted_mma


def _check_quantize(s: MoeFp8Schedule, gated: bool, quantize: bool) -> None:
    """The fused-quantize kernels (quantize=True) and quantize_out agree, on the gate-up."""
    if quantize and not gated:
        raise ag.TraceError("the quantizing epilogue is the gate-up's (its h feeds the down)")
    if gated and quantize != s.quantize_out:   # the down ignores quantize_out
        writes = "writes h in e4m3 plus its 1x128 scales" if quantize else "writes h in bf16"
        raise ag.TraceError(
            f"this kernel {writes}: the schedule has quantize_out={s.quantize_out}",
            fix=f"build it with quantize={s.quantize_out}")


def _check_dynamic(s: MoeFp8Schedule, dynamic: bool) -> None:
    """The kernel's Work argument (its dynamic variant) and the schedule's scheduler go
    together; pair_multicast has no dynamic form (its 2-CTA clusters would need one draw for
    both CTAs)."""
    if (s.scheduler == "dynamic") != dynamic:
        raise ag.TraceError(f"MoeFp8Schedule(scheduler={s.scheduler!r}) needs the kernel built "
                            f"with dynamic={s.scheduler == 'dynamic'} (the dynamic walk takes "
                            f"its work counter as an argument); this one was built with "
                            f"dynamic={dynamic}", fix="pass the matching dynamic")
    if dynamic and s.pair_multicast:
        raise ag.TraceError("scheduler='dynamic' draws a unit per CTA: pair_multicast's "
                            "2-CTA clusters would need one draw for both CTAs",
                            fix="pass pair_multicast=False or scheduler='static'")


def _check_gate_up_tile(s: MoeFp8Schedule, gated: bool) -> None:
    """Both grouped kernels' gate-up: each half of the B tile (bn/2 rows of one plane) lies in
    one 128-row weight-scale block (MoeFp8Schedule.gate_up_fits; argus.ops.moe's _layer
    refuses the same schedule before any trace)."""
    if gated and not s.gate_up_fits:
        raise ag.TraceError(f"the gate-up's B tile is bn/2 = {s.bn // 2} gate rows on top of "
                            f"the same up rows; each half must lie in one 128-row "
                            f"weight-scale block (bn/2 dividing 128)",
                            fix="use bn=256 with n_split=2, bn=128 or bn=64 for the gate-up")


def _variant(body, name: str, params: dict, quantize: bool, k_major: bool,
             default: MoeFp8Schedule, tile_rows: bool = False, dynamic: bool = False):
    """The kernel function of a grouped fp8 GEMM body(A, W, scales of A, ScaleW, TileExpert,
    Tiles, C, ScaleC, s, TileRows), its parameters `params` (name: annotation), then TileRows
    [MT, 1] int32 when tile_rows (moe.consume_unit: MoeSchedule.skip_pad_halves; else the
    body gets None), then C bf16 (quantize=False, ScaleC None), or C e4m3 plus ScaleC, h's
    1x128 scales (MN-major [KBC, MSC], or K-major [MSC, KBC]: the layout the down's schedule
    reads, k_major), written by the gate-up's quantizing epilogue; then, when dynamic
    (MoeSchedule.scheduler="dynamic"), Work [1] int32, the dynamic walk's work counter (the
    body gets it last, else None)."""
    P = inspect.Parameter
    names = list(params) + ["C"]
    if tile_rows:
        params = dict(params, TileRows=ag.Tensor["MT", 1, ag.i32])
    out = dict(params, C=ag.Tensor["M", "NC", ag.e4m3 if quantize else ag.bf16])
    if quantize:
        out["ScaleC"] = ag.Tensor["MSC", "KBC", ag.f32] if k_major else \
            ag.Tensor["KBC", "MSC", ag.f32]
    if dynamic:
        out["Work"] = ag.Tensor[("WK", ag.i32)]   # (not "W": the weights)

    def fn(**kw):
        body(*(kw[p] for p in names), kw.get("ScaleC"), kw["s"], kw.get("TileRows"),
             kw.get("Work"))

    fn.__signature__ = inspect.Signature(
        [P(p, P.POSITIONAL_OR_KEYWORD, annotation=a) for p, a in out.items()]
        + [P("s", P.POSITIONAL_OR_KEYWORD,
             default=dataclasses.replace(default, scheduler="dynamic") if dynamic else default,
             annotation=MoeFp8Schedule)])
    fn.__annotations__ = {**out, "s": MoeFp8Schedule}
    fn.__name__ = fn.__qualname__ = body.__name__
    fn.__module__ = body.__module__
    # the scales of the units routing counted only, as C (quantize_1x128 writes every row's);
    # with tile_rows, of the warpgroups' rows that hold routed rows
    return ag.kernel(fn, name=name + (("_qk" if k_major else "_q") if quantize else "")
                     + ("_rows" if tile_rows else "") + ("_dyn" if dynamic else ""),
                     partial_outputs=("C", "ScaleC") if quantize else ("C",))


@functools.lru_cache(maxsize=None)
def grouped_gemm_fp8_kernel(gated: bool, quantize: bool = False, k_major: bool = False,
                            tile_rows: bool = False, dynamic: bool = False) -> ag.KernelFunction:
    """The block-scaled fp8 grouped GEMM over the contiguous layout (see above): gate-up
    (gated: h = silu(gate) * up, bf16) or down (y, bf16), with A [M, K] e4m3 and its
    MN-major 1x128 scales, W e4m3 ([E, 2, I, H] gated, else [E, N, K]) and its 128x128 block
    scales, tile_expert / tiles from routing. quantize (the gate-up with
    MoeFp8Schedule.quantize_out): h in e4m3 and ScaleC, its 1x128 scales (K-major when
    k_major: the smem-scale down's layout), after C (`_quantize_unit`). tile_rows (with
    MoeSchedule.skip_pad_halves): TileRows [MT, 1], the routed rows of each m-tile, after
    Tiles (moe.consume_unit). dynamic (MoeSchedule.scheduler="dynamic"): Work [1] int32
    last, the work counter the producer draws each unit from (moe._draws; zero before the
    launch, left zero)."""
    w_dims = ("E", 2, "NC", "K") if gated else ("E", "NC", "K")
    s_dims = ("E", 2, "NB", "KB") if gated else ("E", "NB", "KB")
    annotations = dict(A=ag.Tensor["M", "K", ag.e4m3], W=ag.Tensor[(*w_dims, ag.e4m3)],
                       ScaleAT=ag.Tensor["KB", "MS", ag.f32],
                       ScaleW=ag.Tensor[(*s_dims, ag.f32)],
                       TileExpert=ag.Tensor["MT", 1, ag.i32], Tiles=ag.Tensor[1, 1, ag.i32])

    def moe_fp8_grouped_gemm(A, W, ScaleAT, ScaleW, TileExpert, Tiles, C, ScaleC,
                             s: MoeFp8Schedule, TileRows, Work):
        _check_quantize(s, gated, quantize)
        _check_dynamic(s, dynamic)
        check_tile_rows(s, TileRows)
        _tag_layout(A, W, TileExpert, s.pad, gated)
        if s.pair_multicast:   # else traced as a plain unpaired grid: the option ignored
            raise ag.TraceError("pair_multicast is built by the smem-scale kernel only: this "
                                "kernel (global block scales) has no paired grid",
                                fix="use grouped_gemm_fp8_smem_kernel for this schedule, or "
                                    "pass it with pair_multicast=False")
        if s.smem_scales:   # else traced with global scales: the schedule's choice ignored
            raise ag.TraceError("smem_scales reads the block scales through shared memory, "
                                "which grouped_gemm_fp8_smem_kernel does: this kernel reads "
                                "them from global memory",
                                fix="use grouped_gemm_fp8_smem_kernel for this schedule, or "
                                    "pass it with smem_scales=False")
        _check_gate_up_tile(s, gated)
        K = A.shape[1]
        width = s.bn // 2 if gated else s.bn
        n_tiles = ag.cdiv(C.shape[1], width)
        cs = s.cluster_m
        most = ag.cdiv(A.shape[0], s.pad) * n_tiles
        programs = unit_programs(s, most, cs)
        (pid,) = ag.grid(programs * cs, cluster=cs)
        rank = ag.cluster_rank() if cs > 1 else 0
        first = pid // cs if cs > 1 else pid
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, ag.e4m3, s.consumers,
                                 payload=dynamic)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        staging = _staging(s, rows, width, gated, quantize)
        m_units = ag.load_scalar(Tiles, (0, 0))

        def units():
            """(this CTA's m-tile, n-tile, expert) of this CTA's units."""
            if dynamic:   # (no clusters) the unit the producer drew, read from the ring
                yield from _slots(ring, first, programs, m_units, n_tiles, s.group_m,
                                  TileExpert, True)
                return
            for mu, n, e in _walk(first, programs, m_units, n_tiles, s.group_m, TileExpert,
                                  True):
                yield (mu * cs + rank if cs > 1 else mu), n, e

        if dynamic:
            require_steps(K)
            produce_units(ring, _draws(first, programs, m_units, n_tiles, s.group_m,
                                       TileExpert, Work), A, W, s, k_steps, gated, rank,
                          drawn=True)
        else:
            produce_units(ring, units(), A, W, s, k_steps, gated, rank)

        # the consumers read the unit's expert too: it indexes the weight scales
        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            for m, n, expert in units():
                def work(m=m, n=n, expert=expert):
                    row0 = m * s.bm + wg * rows
                    scales = GroupedBlockScales(ScaleAT, ScaleW, expert, row0, n * width,
                                                rows, s.bn, gated)
                    acc = _promotion(s)(ring, k_steps, wg, scales)
                    _epilogue(C, ScaleC, quantize, k_major, s, m, n, row0, wg, acc, staging,
                              gated)

                consume_unit(ring, k_steps, s, TileRows, m, wg, work)

    name = "moe_fp8_gate_up" if gated else "moe_fp8_down"
    # (n_split = 2 traces under the same name: the schedule keys the trace)
    # as the bf16 grouped GEMM: C is written for the units routing counted only
    return _variant(moe_fp8_grouped_gemm, name, annotations, quantize, k_major, FP8_PREFILL,
                    tile_rows, dynamic)


@functools.lru_cache(maxsize=None)
def grouped_gemm_fp8_smem_kernel(gated: bool, quantize: bool = False, k_major: bool = True,
                                 tile_rows: bool = False,
                                 dynamic: bool = False) -> ag.KernelFunction:
    """`grouped_gemm_fp8_kernel` with the block scales through shared memory
    (MoeFp8Schedule(smem_scales=True); gemm_fp8.SharedBlockScales): ScaleA [MS, KBP] the
    activation scales K-major (KBP >= K/128 a multiple of 4: 16-byte row pitches; the
    quantizers' k_major write), ScaleW the weight scales with K/128 padded to a multiple of 4
    as well (16-byte pitched rows: the op pads them). Each stage's boxes start at the aligned
    block 4j of its K block 4j + i (SharedBlockScales: an unaligned innermost TMA coordinate
    traps on Hopper); the gate-up's weight box is its two planes' blocks of the unit's rows,
    the down's the one or two 128-column blocks its tile covers. quantize: h in e4m3 plus
    ScaleC (`grouped_gemm_fp8_kernel`'s; K-major by default, the smem-scale down's layout).
    tile_rows: TileRows after Tiles, for MoeSchedule.skip_pad_halves (as
    `grouped_gemm_fp8_kernel`'s). dynamic: Work [1] int32 last (`grouped_gemm_fp8_kernel`'s;
    not with pair_multicast)."""
    w_dims = ("E", 2, "NC", "K") if gated else ("E", "NC", "K")
    s_dims = ("E", 2, "NB", "KBW") if gated else ("E", "NB", "KBW")
    annotations = dict(A=ag.Tensor["M", "K", ag.e4m3], W=ag.Tensor[(*w_dims, ag.e4m3)],
                       ScaleA=ag.Tensor["MS", "KBP", ag.f32],
                       ScaleW=ag.Tensor[(*s_dims, ag.f32)],
                       TileExpert=ag.Tensor["MT", 1, ag.i32], Tiles=ag.Tensor[1, 1, ag.i32])

    def moe_fp8_grouped_gemm_smem(A, W, ScaleA, ScaleW, TileExpert, Tiles, C, ScaleC,
                                  s: MoeFp8Schedule, TileRows, Work):
        _check_quantize(s, gated, quantize)
        _check_dynamic(s, dynamic)
        check_tile_rows(s, TileRows)
        _tag_layout(A, W, TileExpert, s.pad, gated)
        if not s.smem_scales:
            raise ag.TraceError("this kernel reads the block scales from shared memory: it "
                                "needs smem_scales=True",
                                fix="pass MoeFp8Schedule(..., smem_scales=True), or "
                                    "grouped_gemm_fp8_kernel for global scales")
        _check_gate_up_tile(s, gated)
        K = A.shape[1]
        width = s.bn // 2 if gated else s.bn
        n_tiles = ag.cdiv(C.shape[1], width)
        pair = s.pair_multicast
        cs = 2 if pair else 1
        # units: m-tiles, or pairs of them (pair_multicast), times n-tiles
        m_most = ag.cdiv(A.shape[0], s.pad)
        most = (ag.cdiv(m_most, cs) if pair else m_most) * n_tiles
        programs = unit_programs(s, most, cs)
        (pid,) = ag.grid(programs * cs, cluster=cs) if pair else ag.grid(programs)
        rank = ag.cluster_rank() if pair else 0
        first = pid // cs if pair else pid
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, ag.e4m3, s.consumers,
                                 payload=dynamic)
        # the scale stages after the ring; the gate-up's tile takes its two planes' scales
        scales = SharedBlockScales.alloc(s, ScaleA, ScaleW, planes=2 if gated else None)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        staging = _staging(s, rows, width, gated, quantize)
        if pair:   # the pair's second m-tile is read before it is known to be real
            ag.require(ag.sym(TileExpert.shape[0]) * s.bm > ag.sym(A.shape[0]),
                       "TileExpert (and TileRows) with a row past the layout's m-tiles")
        m_tiles = ag.load_scalar(Tiles, (0, 0))
        m_units = ag.cdiv(m_tiles, 2) if pair else m_tiles

        def units():
            """(this CTA's m-tile, n-tile, its expert, the pair's share flag or None)."""
            if dynamic:   # the unit the producer drew, read from the ring
                for m, n, e in _slots(ring, pid, programs, m_units, n_tiles, s.group_m,
                                      TileExpert, False):
                    yield m, n, e, None
                return
            if not pair:
                for m, n, e in _walk(pid, programs, m_units, n_tiles, s.group_m, TileExpert,
                                     True):
                    yield m, n, e, None
                return
            for mu, n, _ in _walk(first, programs, m_units, n_tiles, s.group_m, TileExpert,
                                  False):
                m = mu * 2 + rank
                yield m, n, ag.load_scalar(TileExpert, (m, 0)), mu

        def share(mu):
            """> 0 exactly when the pair's second m-tile is real and both m-tiles have one
            expert (then the pair multicasts the B tile), <= 0 otherwise: the same value in
            both CTAs (no rank in it), compared twice as complements (one guard each way)."""
            e0 = ag.load_scalar(TileExpert, (mu * 2, 0))
            e1 = ag.load_scalar(TileExpert, (mu * 2 + 1, 0))
            return ag.minimum(m_tiles - mu * 2 - 1, 1 - ag.maximum(e0 - e1, e1 - e0))

        def load_scales(stage, m, n, expert, k):
            # the boxes start at the 16-byte aligned block 4j of k = 4j + i (`read` takes
            # column i): an unaligned innermost coordinate traps (SharedBlockScales)
            kq = k // SCALE_BOX * SCALE_BOX
            ag.tma.load(scales.sa[stage], ScaleA, (m * s.bm, kq))
            if gated:   # the gate plane's block of the unit's rows, then the up plane's
                ag.tma.load(scales.sb[stage].rows_of(0, 2), ScaleW,
                            (expert, 0, n * width // SCALE_BLOCK, kq),
                            box=(1, 2, 1, SCALE_BOX))
            else:
                ag.tma.load(scales.sb[stage].rows_of(0, scales.planes), ScaleW,
                            (expert, n * s.bn // SCALE_BLOCK, kq),
                            box=(1, scales.planes, SCALE_BOX))

        if pair:
            _produce_pairs(ring, units(), share, A, W, s, k_steps, gated, rank, load_scales)
        elif dynamic:
            require_steps(K)
            produce_units(ring, _draws(pid, programs, m_units, n_tiles, s.group_m, TileExpert,
                                       Work), A, W, s, k_steps, gated, 0, extra=load_scales,
                          drawn=True)
        else:
            produce_units(ring, ((m, n, e) for m, n, e, _ in units()), A, W, s, k_steps,
                          gated, 0, extra=load_scales)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            for m, n, expert, _ in units():
                def work(m=m, n=n):
                    row0 = m * s.bm + wg * rows
                    # the gate-up's columns [0, bn/2) take the gate plane's scale, the rest
                    # the up plane's; the down's those before its next weight block the first
                    unit = dataclasses.replace(scales, split=width) if gated else \
                        scales.for_unit(n * s.bn)
                    mma = split_promoted_mma if s.n_split == 2 else early_release_promoted_mma
                    acc = mma(ring, k_steps, wg, unit)
                    _epilogue(C, ScaleC, quantize, k_major, s, m, n, row0, wg, acc, staging,
                              gated)

                def half(m=m, n=n):
                    # all routed rows in [0, 64): both warpgroups on them, a column half each
                    acc = _half_tile_mma(ring, k_steps, wg, scales.for_unit(n * s.bn), gated)
                    _store_half_tile(C, s, m, n, wg, acc, staging, gated)

                # a pair's missing second m-tile (odd count): the ring protocol only
                consume_unit(ring, k_steps, s, TileRows, m, wg, work,
                             real=m_tiles - m if pair else None,
                             half=half if s.half_tile_last else None)

    name = "moe_fp8_gate_up_smem" if gated else "moe_fp8_down_smem"
    return _variant(moe_fp8_grouped_gemm_smem, name, annotations, quantize, k_major,
                    FP8_PREFILL_SPLIT_SMEM, tile_rows, dynamic)


def _half_tile_mma(ring: OperandRing, k_steps, wg, scales: SharedBlockScales, gated: bool):
    """Warpgroup wg's share of a half tile (MoeFp8Schedule.half_tile_last): the m-tile's rows
    [0, 64) (warpgroup 0's A rows: all its routed rows) times column half wg of the stage's B
    tile, over every K block, promoted with the block's scales as split_promoted_mma does
    (each block's partial made inside the step, scale-d = 0, so it is live only from its
    wgmma to its promotion). The down: B rows [128 wg, +128), one m64n128 partial, the
    weight scale of the tile's 128-column block wg (the two-plane box's row wg), returned as
    one [64, 128] sum. The gate-up: h columns [64 wg, +64): gate rows [64 wg, +64) and up
    rows [128 + 64 wg, +64) of B, two m64n64 partials, each times its plane's scale (both
    planes' blocks cover the unit's 128 rows of a plane), returned as (gate, up) [64, 64]
    sums. The activation scales are rows [0, 64)'s (SharedBlockScales.read of warpgroup 0)."""
    rows = ring.bm // ring.consumers
    half = ring.bn // 2
    a_first = 0   # every warpgroup reads A rows [0, rows)
    if gated:
        quarter = half // 2
        gate = ag.zeros((rows, quarter), ag.f32)
        up = ag.zeros((rows, quarter), ag.f32)
    else:
        acc = ag.zeros((rows, half), ag.f32)
    for k in ag.range(k_steps):
        with ring.pipe.consume() as stage:
            a = ring.a[stage].rows_of(a_first, rows)
            if gated:
                col, left, right = scales.read(stage, a_first, True, k)
                # both planes' scales before the first wgmma (split_promoted_mma's order)
                scale_g, scale_u = col * left, col * right
                g = ag.zeros((rows, quarter), ag.f32, by_wgmma=True)
                ag.wgmma(a, ring.b[stage].rows_of(wg * quarter, quarter), g)
                gate = gate + g * scale_g
                u = ag.zeros((rows, quarter), ag.f32, by_wgmma=True)
                # pinned behind the gate's promotion, as split_promoted_mma's second half
                ag.wgmma(a, ring.b[stage].rows_of(half + wg * quarter, quarter), u,
                         pinned=True)
                up = up + u * scale_u
            else:
                # block wg's weight scale: row wg of the stage's two-block box (a select on
                # wg instead was rendered into every promoted element: ~190 branches a block)
                col, weight = scales.read_plane(stage, a_first, wg, k)
                scale = col * weight
                part = ag.zeros((rows, half), ag.f32, by_wgmma=True)
                ag.wgmma(a, ring.b[stage].rows_of(wg * half, half), part)
                acc = acc + part * scale
    return (gate, up) if gated else acc


def _store_half_tile(C, s: MoeFp8Schedule, m, n, wg, acc, staging: Staging | None,
                     gated: bool) -> None:
    """A half tile's store (MoeFp8Schedule.half_tile_last): warpgroup wg's column half of
    rows [m bm, +64) (the m-tile's first 64 rows: both warpgroups store there): the down's
    128 columns [n bn + 128 wg, +128), the gate-up's 64 columns [n bn / 2 + 64 wg, +64) of
    h, silu(gate) * up. Through the warpgroup's own staging slots (epilogue='tma'), else
    from registers."""
    row0 = m * s.bm
    if gated:
        quarter = s.bn // 4
        col0 = n * (s.bn // 2) + wg * quarter
        if staging is not None:   # one 64-column block of the warpgroup's two
            one = dataclasses.replace(staging, blocks=quarter // staging.width)
            _store_gated_staged(C, row0, col0, wg, acc, one, quarter, s.fast_silu,
                                s.rsqrt_silu)
        else:
            out = silu_mul(acc[0], acc[1], s.fast_silu, s.rsqrt_silu)
            ag.store(C, (row0, col0), out.to(ag.bf16))
        return
    half = s.bn // 2
    if staging is not None:
        # rows=0: every warpgroup's rows start at the m-tile's first row (the staging slots
        # stay the warpgroup's own: slot(wg, j))
        store_tile_staged(C, Unit((), m, n * 2 + wg), wg, acc, staging, bm=s.bm, bn=half,
                          rows=0, finish=lambda t: t.to(ag.bf16))
    else:
        ag.store(C, (row0, n * s.bn + wg * half), acc.to(ag.bf16))


def _produce_pairs(ring: OperandRing, units, share, A, W, s: MoeFp8Schedule, k_steps,
                   gated: bool, rank, load_scales) -> None:
    """The producer of MoeFp8Schedule.pair_multicast: per unit (this CTA's m-tile of the
    pair, n-tile, its expert, the pair index) and K step, its own A rows, then the B tile:
    when share(pair) > 0 (both m-tiles real, one expert) half of every B box by each CTA,
    multicast to both (moe.produce_units' cluster_m=2 loads), else its own expert's whole B
    tile; then its own scales. Each CTA's full barrier gets the same bytes either way."""
    width = s.bn // 2 if gated else s.bn

    def b_tile(stage, expert, n, k0, cast: int) -> None:
        if gated:   # gate rows, then the matching up rows, in one B tile
            load_tile(ring.b[stage], 0, W, (expert, 0), n, width, k0, s.bk, rank=rank,
                      share=cast)
            load_tile(ring.b[stage], width, W, (expert, 1), n, width, k0, s.bk, rank=rank,
                      share=cast)
        else:
            load_tile(ring.b[stage], 0, W, (expert,), n, s.bn, k0, s.bk, rank=rank,
                      share=cast)

    with ag.role("producer", warpgroups=1, regs=s.producer_regs):
        for m, n, expert, mu in units:
            shared = share(mu)
            for k in ag.range(k_steps):
                with ring.pipe.produce() as stage:
                    k0 = k * s.bk
                    load_tile(ring.a[stage], 0, A, (), m, s.bm, k0, s.bk)
                    with ag.when(shared > 0):      # the pair reads the weights once
                        b_tile(stage, expert, n, k0, 2)
                    with ag.when(shared <= 0):     # experts differ, or no second m-tile
                        b_tile(stage, expert, n, k0, 1)
                    load_scales(stage, m, n, expert, k)


def _staging(s: MoeFp8Schedule, rows: int, width: int, gated: bool, quantize: bool):
    """The TMA-store epilogue's staging (None for the direct store, and for the quantizing
    epilogue, which stores its 8-bit tile from registers): `width` columns a unit, but the
    n_split = 2 down stores its halves one after the other (each bn / 2 wide)."""
    if s.epilogue != "tma" or quantize:
        return None
    staged = width if gated or s.n_split == 1 else s.piece
    return Staging.alloc(s.consumers, rows, staged, ag.bf16, min(s.store_cols, staged))


def _epilogue(C, ScaleC, quantize: bool, k_major: bool, s: MoeFp8Schedule, m, n, row0, wg,
              acc, staging: Staging | None, gated: bool) -> None:
    """A unit's store, both grouped kernels: the quantizing gate-up (`_quantize_unit`), the
    n_split = 2 halves (`_store_split_unit`), else moe's `store_unit`."""
    if quantize:
        _quantize_unit(C, ScaleC, k_major, s, n, row0, acc)
    elif s.n_split == 2:
        _store_split_unit(C, s, m, n, row0, wg, acc, staging, gated)
    else:
        store_unit(C, s, m, n, row0, wg, acc, staging, gated)


def _quantize_unit(Hq, ScaleC, k_major: bool, s: MoeFp8Schedule, n, row0, acc) -> None:
    """The gate-up's quantizing epilogue (MoeFp8Schedule.quantize_out: n_split = 2, bn = 256):
    the unit's h tile, silu(gate) * up over its 128 columns (one 1x128 scale group, group n
    of h's), rounded to bf16 as the unfused path stores it, then quantize_1x128's formula on
    those values (`_quantize_groups`, the module docstring): per row amax over the 128
    columns (a row reduction of the accumulator, the attention kernel's row max), e4m3 of
    h * (448 / amax), the scale amax / 448 into column n of ScaleC (K-major [rows, groups]:
    a [rows, 1] column; MN-major [groups, rows]: the same column stored transposed, one
    contiguous run of the warpgroup's rows). Stored from registers (8-bit tiles have no
    stmatrix staging)."""
    h = silu_mul(acc[0], acc[1], s.fast_silu, s.rsqrt_silu).to(ag.bf16).to(ag.f32)
    # elements past h's end (rows past M, columns past I: neither occurs, M a multiple of bm
    # and I of 128, but the tile's loads are masked) are the overhang `_quantize_rows` masks
    rows = acc[0].shape[0]
    real = (row0 + ag.arange(rows) < Hq.shape[0])[:, None] & \
        (n * GROUP + ag.arange(GROUP) < Hq.shape[1])[None, :]
    q, scale = _quantize_rows(h, real)
    ag.store(Hq, (row0, n * GROUP), q)
    if k_major:
        ag.store(ScaleC, (row0, n), scale)
    else:
        ag.store(ScaleC, (n, row0), scale, transposed=True)


def _store_split_unit(C, s: MoeFp8Schedule, m, n, row0, wg, acc, staging: Staging | None,
                      gated: bool) -> None:
    """`store_unit` for n_split = 2's two sums: of the gate-up, (gate, up), stored as
    silu(gate) * up over the unit's bn / 2 columns of h; of the down, the tile's two column
    halves, each stored as the bn / 2-wide tile it is (unit column 2 n + j)."""
    half = s.piece
    if gated:
        if staging is not None:
            _store_gated_staged(C, row0, n * half, wg, acc, staging, half, s.fast_silu,
                                s.rsqrt_silu)
        else:
            out = silu_mul(acc[0], acc[1], s.fast_silu, s.rsqrt_silu)
            ag.store(C, (row0, n * half), out.to(ag.bf16))
        return
    for j, part in enumerate(acc):
        if staging is not None:
            store_tile_staged(C, Unit((), m, n * 2 + j), wg, part, staging, bm=s.bm, bn=half,
                              rows=s.bm // s.consumers, finish=lambda t: t.to(ag.bf16))
        else:
            ag.store(C, (row0, n * s.bn + j * half), part.to(ag.bf16))
