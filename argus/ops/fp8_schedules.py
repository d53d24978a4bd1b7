"""Which Fp8GemmSchedule runs a given scaled_matmul problem: a tuned choice from the on-disk
cache when there is one, else a shape heuristic. `scripts/gpu_fp8_bench.py` times the
candidates on the GPU and records the winner with `store_choice`.

The cache is one JSON file per GPU name under $ARGUS_CACHE_DIR/scaled_matmul (default
~/.cache/argus/scaled_matmul), keyed by the problem signature; an entry written by another
version of Fp8GemmSchedule is ignored.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from argus.kernels.gemm_fp8 import BK_BYTES, Fp8GemmSchedule
from argus.kernels.split_k_sum import MAX_SPLITS
from argus.ops import fp8_split_k, tuning_cache
from argus.target.limits import NUM_SMS


@dataclass(frozen=True)
class Fp8Problem:
    """What fixes the fp8 kernel and its best schedule."""

    m: int
    n: int
    k: int
    out_dtype: str         # "bf16", "f16" or "f32"
    tma_store_ok: bool     # C's layout allows the stmatrix + TMA-store epilogue
    block_scaled: bool = False  # 1x128 / 128x128 scales (gemm_fp8_blockscaled_kernel)

    @property
    def key(self) -> str:
        return (f"{self.m}x{self.n}x{self.k}:e4m3->{self.out_dtype}:"
                f"{'tma' if self.tma_store_ok else 'direct'}"
                + (":block128" if self.block_scaled else ""))

    @property
    def tma_epilogue_ok(self) -> bool:
        return self.tma_store_ok and self.out_dtype in ("bf16", "f16")


def heuristic(p: Fp8Problem) -> Fp8GemmSchedule:
    """A good schedule without measuring (HOPPER.md §2.1 recipe with BK = 128 e4m3)."""
    if p.block_scaled:
        return _block_heuristic(p)
    if weight_bound(p):
        return weight_streaming(p)
    if p.m <= 256:
        return Fp8GemmSchedule(bm=128, bn=64, stages=8)
    if p.tma_epilogue_ok:  # 3 x 48 KB ring + 64 KB staging
        return Fp8GemmSchedule(epilogue="tma", stages=3)
    return Fp8GemmSchedule(stages=4)


_SMS = NUM_SMS  # H100 / H200 SXM
# what the ring may use beside barriers and the staging buffer (of ~227 KB)
_RING_BUDGET = 200 * 1024

# ---- weight streaming (small M, per-tensor) ------------------------------------------------
# The most activation rows one weight-streaming tile holds: with swap-AB the activations are
# wgmma's N, one tile of bn = M rounded up to 8 covers all of them (A read once per W tile),
# and a 64 x 128 fp32 accumulator is 64 registers a thread. It is also where the GEMM stops
# being bound by the weight read: 2 M FLOP per e4m3 weight byte, 256 at M = 128, against the
# H200's ~410 (1979 TFLOP/s dense e4m3 over 4.8 TB/s, NVIDIA H200 datasheet).
STREAM_MAX_M = 128
# W bytes in flight per SM below which an SM is taken to stream proportionally slower
# (Little's law: ~2.5 TB/s over 128-132 SMs times a loaded latency of ~3.5 us is ~66 KB; the
# measured small-M schedules hold 64-96 KB of W in flight, docs/perf/fp8.md)
_W_IN_FLIGHT = 64 * 1024
# the ring's stage count cap: ag.pipeline holds at most 16 stages (16 x 8 KB of W rows at
# M <= 16: 128 KB in flight, against the 96 KB of the 64 x 64 tile measured before)
_STREAM_MAX_STAGES = 16
# what a byte of activations costs the busiest SM against a byte of weights: A is re-read
# from L2 by every W tile, W streams from DRAM once. On the H200 the 128 x 64 tile at
# 128x8192x8192 (1 MB of A and 0.5 MB of W per SM) took 28.2 us, the 64 x 64 one at 16x8192x8192
# (0.13 MB of A, 0.5 MB of W) 29.4 (docs/perf/fp8.md, 2026-12-04): the A bytes were nearly
# free at these sizes; 1/4 keeps them a tie-breaker rather than the deciding term
_A_WEIGHT = 0.25
# a split's second kernel (the scaled sum) priced in bytes of the busiest SM's stream: ~2 us
# between the two launches at ~20 GB/s an SM (2.5 TB/s over 128 SMs)
_SUM_LAUNCH_BYTES = 48 * 1024


# ---- per-tensor promotion interval (Fp8GemmSchedule.promote_every) ------------------------
# Modelled relative error (scripts/fp8_accum_model.py: the H200's fp8 wgmma accumulator as 13
# fraction bits, truncated, fitted within 2.6% to the measured unpromoted errors at K = 2048 /
# 4096 / 8192) of a partial spanning N K blocks of 128 before its fp32 promotion, over the
# error of promotion every block (N = 1: torch._scaled_mm's default accumulation measured the
# same 1.7e-3 as our N = 1; CUTLASS's fp8 GEMM promotes every 4 k32 wgmma, 128 of K). The
# ratios hardly depend on K (bench inputs, bf16 output; 128 x 128 entries per K):
#   N:       1      2      4      8      16
#   K=2048   1      1.005  1.017  1.050  1.122
#   K=4096   1      1.005  1.019  1.050  1.126
#   K=8192   1      1.005  1.018  1.044  1.113
# (all of N <= 4 print as 1.7e-3 beside torch's 1.7e-3; unpromoted: 1.12 / 1.30 / 1.58).
_INTERVAL_ERROR = {1: 1.0, 2: 1.005, 4: 1.019, 8: 1.050, 16: 1.126}
# how much above promotion every block (torch's error) the interval may take the error
PROMOTE_ERROR_SLACK = 0.01
# Whether the weight-streaming path (M <= STREAM_MAX_M) promotes: it is bound by the weight
# read, and the consumer's promotion (one drain and bn / 2 FADDs per promote_every steps) runs
# while the ring's other stages stream. Measured on the H200 (2026-12-05, docs/perf/fp8.md
# "Measured: staggered consumers and promotion every N blocks"): promoting every 2 blocks, 16 /
# 128 x 8192 x 8192 ran 1.007x / 0.999x torch._scaled_mm against the plain loop's 1.014x /
# 1.010x (0.7-1.1% slower) at torch's error (1.67e-3) instead of 1.6x it (2.63e-3): on.
# (Above M = 128 the default stays unpromoted: there promotion costs 2.8%.)
STREAM_PROMOTE = True


def promote_every_for(k: int, k_atoms: int = 1) -> int:
    """The promotion interval in pipeline steps (of k_atoms 128-deep blocks) for depth k: the
    largest N of _INTERVAL_ERROR whose modelled error is within PROMOTE_ERROR_SLACK of
    promotion every block, and whose span fits in K (a longer one is the tail loop anyway), in
    whole steps. A step of k_atoms blocks is the finest a loop of k_atoms can promote: where
    k_atoms exceeds that N (k_atoms 4 against N = 2) the answer is one step, k_atoms blocks,
    whose modelled error is above the slack (1.019 for 4 blocks)."""
    blocks = max(1, -(-k // BK_BYTES))
    ok = [n for n, r in _INTERVAL_ERROR.items() if r <= 1 + PROMOTE_ERROR_SLACK and n <= blocks]
    return max(1, max(ok) // k_atoms)


def promoted(p: Fp8Problem, s: Fp8GemmSchedule) -> Fp8GemmSchedule | None:
    """Per-tensor schedule `s` promoting every promote_every_for(p.k) steps, or None where its
    loop cannot promote (split-K's partials kernel, bn past the two accumulators' budget, the
    overlapped / split loops)."""
    if p.block_scaled or s.split_k > 1 or s.overlap or s.n_split != 1:
        return None
    try:
        return dataclasses.replace(s, promote=True,
                                   promote_every=promote_every_for(p.k, s.k_atoms))
    except ValueError:
        return None


def _stream_promoted(p: Fp8Problem, s: Fp8GemmSchedule) -> Fp8GemmSchedule:
    """`s` promoted when STREAM_PROMOTE and its loop can, else `s`."""
    return (promoted(p, s) or s) if STREAM_PROMOTE else s


def weight_bound(p: Fp8Problem) -> bool:
    """Whether the per-tensor GEMM is a weight stream (`weight_streaming`'s regime)."""
    return not p.block_scaled and p.m <= STREAM_MAX_M


def _stream_tile(p: Fp8Problem, consumers: int, split_k: int,
                 k_atoms: int = 1) -> Fp8GemmSchedule:
    """The swap-AB weight-streaming schedule of `consumers` 64-row W slices per tile and all of
    M as the tile's columns, with as many stages as the ring budget holds (at most
    _STREAM_MAX_STAGES)."""
    bm, bn = 64 * consumers, max(8, -(-p.m // 8) * 8)
    stage = (bm + bn) * BK_BYTES * k_atoms
    stages = max(2, min(_STREAM_MAX_STAGES, _RING_BUDGET // stage))
    return Fp8GemmSchedule(bm=bm, bn=bn, consumers=consumers, stages=stages, swap_ab=True,
                           split_k=split_k, k_atoms=k_atoms)


def stream_cost(p: Fp8Problem, s: Fp8GemmSchedule) -> float:
    """The analytic price of weight-streaming schedule `s` on `p`, in bytes of the busiest SM:
    its units (ceil(units / SMs) of them, a unit = one tile's K slice) times the W bytes of a
    unit (read from DRAM once) plus _A_WEIGHT times its A bytes (re-read from L2 by every W
    tile), scaled up where the ring holds fewer than _W_IN_FLIGHT bytes of W; with
    split_k > 1 plus the fp32 partials written and read back (DRAM traffic: the weight stream
    evicts them from L2; spread over all SMs) and the sum's launch. Lower is faster; it ranks
    schedules, it is not a time. Either orientation (W rows are the tile's bm with swap_ab, its
    bn without); activation rows past M are TMA zero fill and cost no bytes."""
    w_rows, a_rows = (s.bm, s.bn) if s.swap_ab else (s.bn, s.bm)
    tiles = -(-p.n // w_rows) * -(-p.m // a_rows)
    units = tiles * s.split_k
    waves = -(-units // _SMS)
    busiest = waves * (w_rows + _A_WEIGHT * min(a_rows, p.m)) * (p.k / s.split_k)
    in_flight = s.stages * w_rows * BK_BYTES * s.k_atoms
    cost = busiest * max(1.0, _W_IN_FLIGHT / in_flight)
    if s.split_k > 1:
        cost += 2 * s.split_k * p.m * p.n * 4 / _SMS + _SUM_LAUNCH_BYTES
    return cost


def stream_options(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    """The weight-streaming schedules the rule ranks: one or two 64-row W slices per tile, K
    unsplit or cut into any legal count of slices (argus/ops/fp8_split_k.py `why_not`), each
    slice at least one stage deep; cheapest first (`stream_cost`; ties: more CTAs busy, then
    fewer splits)."""
    out = []
    for consumers in (1, 2):
        for splits in range(1, MAX_SPLITS + 1):
            if splits > 1 and (fp8_split_k.why_not(p.k, splits) is not None or
                               p.k // splits < BK_BYTES):
                continue
            out.append(_stream_tile(p, consumers, splits))
    return sorted(out, key=lambda s: (stream_cost(p, s), -busy_ctas(p, s), s.split_k,
                                      s.consumers))


def busy_ctas(p: Fp8Problem, s: Fp8GemmSchedule) -> int:
    """CTAs of `s`'s persistent grid that get a unit of work on `p` (SMs streaming)."""
    w_rows, a_rows = (s.bm, s.bn) if s.swap_ab else (s.bn, s.bm)
    return min(s.num_sms, -(-p.n // w_rows) * -(-p.m // a_rows) * s.split_k)


def weight_streaming(p: Fp8Problem) -> Fp8GemmSchedule:
    """Small M, per-tensor: the GEMM is the read of W (N x K bytes), so every SM should stream
    its share of W with enough bytes in flight. Swap-AB (W rows are the tile's wgmma M, the M
    activations its N: no shared memory spent on zero-filled activation rows), one or two 64-row
    W slices per tile, and split-K where the tiles alone leave SMs idle: the cheapest of
    `stream_options` by `stream_cost` (bytes of the busiest SM, SM count, W in flight), an
    analytic rule, not a table of shapes. The model is rough, so options within 5% of the
    cheapest count as ties, among which the most SMs streaming win (an idle SM's share of
    the bandwidth is lost if the others cannot take it up), then the fewest splits (an
    unsplit GEMM has no second kernel and no partials)."""
    options = stream_options(p)
    near = [s for s in options if stream_cost(p, s) <= 1.05 * stream_cost(p, options[0])]
    return _stream_promoted(p, min(near, key=lambda s: (-busy_ctas(p, s), s.split_k,
                                                         stream_cost(p, s))))


def _stream_candidates(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    """What the tuner measures for a weight stream: the rule's pick, the next cheapest options,
    the pick with two 128-byte K atoms a stage (each W row read 256 contiguous bytes a stage:
    fewer, longer DRAM bursts, not measured yet), and the schedules of the rule before it
    (one 64-row consumer over 64- or 128-column W tiles; 128 x 64), so tuning never loses
    what it had."""
    pick = weight_streaming(p)
    out = [pick] + stream_options(p)[:3]
    atoms = _stream_tile(p, pick.consumers, pick.split_k, k_atoms=2)
    out.append(atoms)
    out += [Fp8GemmSchedule(bm=64, bn=64, consumers=1, stages=12),
            Fp8GemmSchedule(bm=64, bn=128, consumers=1, stages=8),
            Fp8GemmSchedule(bm=128, bn=64, stages=8),
            Fp8GemmSchedule(bm=64, bn=32, consumers=1, stages=12)]
    # every one promoting where its loop can (STREAM_PROMOTE; split-K's partials cannot)
    return list(dict.fromkeys(_stream_promoted(p, s) for s in out))


def _block_stages(bm: int, bn: int, staging: int = 0) -> int:
    return max(2, min(8, (_RING_BUDGET - staging) // ((bm + bn) * 128)))


def _block_widths(p: Fp8Problem) -> list[int]:
    """Tile widths a promoting 128-row kernel can hold (two 64 x bn fp32 accumulators per
    consumer: bn <= 160), fewest waves x width first: the time of a tile is about
    proportional to its width, and a last wave that leaves SMs idle costs a whole wave."""
    def cost(bn: int) -> int:
        return waves(p.m, p.n, 128, bn, _SMS) * bn
    return sorted((128, 160, 144, 112), key=lambda bn: (cost(bn), -bn))


def _block_heuristic(p: Fp8Problem) -> Fp8GemmSchedule:
    """Block scales: every schedule promotes (DeepGEMM's shape of kernel: 128-row tiles, the
    width that fills the last wave best, a direct epilogue, as many stages as fit). Where the
    two measured smem-scale tiles were timed (`in_wave_pick_box`: M >= 4096, N >= 2048, TMA
    epilogue) the wave model picks between them (`wave_pick`); where it calls them a tie, and
    everywhere else, the rule before it (`_block_default`)."""
    if in_wave_pick_box(p):
        pick = wave_pick(p.m, p.n, p.k, _SMS)
        if pick is not None:
            return pick
    return _block_default(p)


def _block_default(p: Fp8Problem) -> Fp8GemmSchedule:
    """The block-scaled default without the wave pick (what it was at 1795500): small M's
    tiles, the split 128 x 256 inside the boxes it measured best in, else the width that fills
    the last wave best (overlapped with the TMA epilogue where it is 128 or wider)."""
    if p.m <= 64:
        return Fp8GemmSchedule(bm=64, bn=64, consumers=1, stages=12, promote=True)
    if p.m <= 256:
        return Fp8GemmSchedule(bm=128, bn=64, stages=8, promote=True)
    if p.tma_epilogue_ok and _split_smem_measured_best(p):
        return _SPLIT_256_SMEM_TMA
    if p.tma_epilogue_ok and _split_measured_best(p):
        return _SPLIT_256_TMA
    bn = _block_widths(p)[0]
    if p.tma_epilogue_ok and bn >= 128:
        # the overlapped promotion (block k's wgmma issued before block k - 1 is promoted):
        # 836 / 926 TFLOP/s against the tuned serial kernel's 742 / 637 at 4096x7168x2048 and
        # 4096x24576x1536 on the H200 (docs/perf/fp8.md, "Overlapped promotion"); verified
        # since the promoted-sum k-once (argus/verify/promotion.py). Not where a narrower
        # tile fills the last wave better (2112 columns: 112), which was not measured
        return _OVERLAP_TMA
    return Fp8GemmSchedule(bn=bn, stages=_block_stages(128, bn), promote=True)


# three fp32 accumulators per consumer (bn <= 128), 5 stages beside the 32 KB staging buffer
_OVERLAP_TMA = Fp8GemmSchedule(bn=128, stages=_block_stages(128, 128, 128 * 128 * 2),
                               promote=True, overlap=True, cluster_m=2, epilogue="tma")


# two 128-column halves per K block, one partial live at a time (gemm_fp8.split_promoted_mma):
# 4 stages beside the 32 KB staging buffer of one half, without multicast (the variant measured
# best at 4dd5330, when multicast made ptxas spill in the K loop at 128 x 256; since the second
# half's wgmma is pinned neither spills, docs/perf/fp8.md: multicast not measured again)
_SPLIT_256_TMA = Fp8GemmSchedule(bn=256, stages=4, promote=True, n_split=2, epilogue="tma")
_SPLIT_256 = Fp8GemmSchedule(bn=256, stages=4, promote=True, n_split=2)
# the same with W multicast over 2x1 clusters: 32 KB of L2 -> SM traffic per 128-K block
# instead of 48 (DeepGEMM runs its 256 x 128 tile multicast); measured only while it spilled
# (480 B, 4dd5330: 582 TFLOP/s geomean), none since ad633c5: a candidate, not a default
_SPLIT_256_TMA_C2 = dataclasses.replace(_SPLIT_256_TMA, cluster_m=2)


def fewest_sms(p: Fp8Problem, s: Fp8GemmSchedule) -> int:
    """The fewest SMs (a multiple of the cluster size, at most _SMS) whose persistent grid
    takes as many waves of `s`'s tiles as _SMS do: DeepGEMM's launch rule (heuristics/
    common.hpp `num_min_sms`: "less L2 cache usage and less GPU frequency drop"; 4096 x 7168
    in 128 x 256 tiles: 896 tiles, 7 waves either way, on 128 SMs instead of 132)."""
    tiles = -(-p.m // s.bm) * -(-p.n // s.bn)
    waves = -(-tiles // _SMS)
    sms = -(-tiles // waves)
    return min(_SMS, -(-sms // s.cluster_m) * s.cluster_m)


# the split 128 x 256 with the block scales through shared memory (smem_scales: one TMA copy
# of a stage's A scales instead of per-thread global loads; 3 stages beside them): on the H200
# (2026-12-04, `gpu_fp8_bench.py --variants --graphs --rounds 3`, tree 675fb54) ahead of every
# other block-scaled schedule at all five DeepSeek-V3 shapes, geomean 1083 TFLOP/s against the
# split's 989 and the overlap's 981 (docs/perf/fp8.md)
_SPLIT_256_SMEM_TMA = Fp8GemmSchedule(bn=256, stages=3, promote=True, n_split=2,
                                      smem_scales=True, epilogue="tma")


def without_smem_scales(s: Fp8GemmSchedule) -> Fp8GemmSchedule:
    """`s` reading its block scales from global memory: the default's smem split becomes the
    split measured with global scales (4 stages: the A scales' shared memory is free), any
    other schedule the same with smem_scales off (the wave pick's 192 x 128 c3 too: its tile,
    whose fuller waves are why it is picked, with global scales: not measured; 128 registers,
    no spills, tests/unit/test_fp8_wave_pick.py)."""
    if s == _SPLIT_256_SMEM_TMA:
        return _SPLIT_256_TMA
    return dataclasses.replace(s, smem_scales=False)


def _split_smem_measured_best(p: Fp8Problem) -> bool:
    """Where _SPLIT_256_SMEM_TMA won on the H200: M = 4096 with N 2112-24576 and K
    1536-16384 (4096x7168x2048 1153, 4096x24576x1536 1093, 4096x7168x16384 1118,
    4096x2112x7168 910, 4096x4096x7168 1160 TFLOP/s; docs/perf/fp8.md). The rule is the box
    around the wins over the default of the time: M >= 4096, N >= 2048 in whole 256-column
    tiles (N = 2112 keeps its wave-filling width, 112, not in that run), any K. Since
    2026-12-05 `wave_pick` decides first inside that box; this decides its ties."""
    return p.m >= 4096 and p.n >= 2048 and p.n % 256 == 0


def _split_measured_best(p: Fp8Problem) -> bool:
    """Where the split 128 x 256 (4 stages, TMA epilogue) beat the overlapped 128 x 128 on the
    H200 (docs/perf/fp8.md, --variants at 4dd5330, TFLOP/s split / overlap): 4096x7168x2048
    967 / 700, 4096x7168x16384 1013 / 906, 4096x4096x7168 1065 / 1023; it lost at
    4096x24576x1536 (737 / 946). The rule is the box around the measured wins and nothing
    more: M >= 4096, N <= 7168 in whole 256-column tiles (N = 2112 keeps its wave-filling
    width, which that run did not measure), K >= 2048 (the loss had K = 1536 and N = 24576;
    which of the two decides was not measured)."""
    return p.m >= 4096 and p.n <= 7168 and p.n % 256 == 0 and p.k >= 2048


# ---- block-scaled tile pick by waves (issue 18, 2026-12-05) --------------------------------
# The other tile measured ahead of the split somewhere: 192 x 128 with three consumer
# warpgroups of 64 x 128 (serial promotion, block scales through shared memory, 2x1 clusters),
# attention's register split (a 32-register producer, 160-register consumers: 128 a thread at
# launch for 512 threads, no spills on the H200 run below; tests/unit/test_fp8_wave_pick.py
# builds it through NVRTC). Its scripts/gpu_fp8_bench.py --variants name: "serial 192x128 c3
# smem scales". 4 stages of 40 KB, their A and W scales and the 48 KB staging buffer: 221 KB
# (smem_bytes; of the 227 KB an SM lends a block).
_C3_192_SMEM_TMA = Fp8GemmSchedule(bm=192, consumers=3, bn=128, stages=4, promote=True,
                                   smem_scales=True, cluster_m=2, epilogue="tma",
                                   producer_regs=32, consumer_regs=160)
# What the fit reads: TFLOP/s (median of 3 rounds) of "split 128x256 smem scales" and "serial
# 192x128 c3 smem scales" on the H200, 2026-12-05, tree 1795500, `scripts/gpu_fp8_bench.py
# --variants --graphs --rounds 3` (docs/perf/fp8.md "Tile pick by waves"), per M x N x K
WAVE_FIT_ROWS = {(4096, 7168, 2048): (1149, 1073), (4096, 24576, 1536): (1084, 1039),
                 (4096, 7168, 16384): (1120, 1017), (4096, 2112, 7168): (910, 1100),
                 (4096, 4096, 7168): (1169, 1045)}
# the candidates in WAVE_FIT_ROWS' column order, and the SM count of the GPU that measured them
WAVE_CANDIDATES = (_SPLIT_256_SMEM_TMA, _C3_192_SMEM_TMA)
_FIT_SMS = 132
# A predicted gain below this is no gain: the fit's ratio of the two rates moves by up to 6.8%
# from shape to shape (4096x2112: the split's sparse last wave ran faster than a full wave's
# share, which the model does not know) and by 3.8% at the others; 5% is the weight-streaming
# rule's tie too. Within it the rule before (`_block_default`) decides
WAVE_TIE = 0.05


def waves(m: int, n: int, bm: int, bn: int, sms: int, cluster_m: int = 1) -> int:
    """Waves of bm x bn tiles over an M x N output on a persistent grid of `sms` SMs (a
    multiple of the cluster size): the last wave costs a whole one, however empty (as in
    argus/ops/gemm_model.py `predict_us`, whose constants are fitted to bf16 rows)."""
    return -(-(-(-m // bm) * -(-n // bn)) // ((sms // cluster_m) * cluster_m))


def tile_fill(m: int, n: int, s: Fp8GemmSchedule, sms: int) -> float:
    """The share of `s`'s tile-waves on M x N that computes the output: M x N over waves x SMs
    x bm x bn. Below 1 by the last wave's idle SMs and by the ragged tiles' padding (4096 rows
    in 192-row tiles: 22 rows of tiles for 21.3)."""
    return m * n / (waves(m, n, s.bm, s.bn, sms, s.cluster_m) * sms * s.bm * s.bn)


def _full_wave_rate(column: int) -> float:
    """TFLOP/s a candidate would reach on the fit's SMs with every tile-wave full: the
    geometric mean over WAVE_FIT_ROWS of measured / tile_fill (a least-squares fit of log
    time with one rate per candidate; per shape 1185 / 1118 / 1155 / 1365 / 1206 for the
    split, 1186 / 1071 / 1124 / 1238 / 1212 for the c3: 1203 and 1165)."""
    s = WAVE_CANDIDATES[column]
    logs = [math.log(row[column] / tile_fill(m, n, s, _FIT_SMS))
            for (m, n, _), row in WAVE_FIT_ROWS.items()]
    return math.exp(sum(logs) / len(logs))


# the fitted full-wave rates, TFLOP/s on _FIT_SMS SMs, in WAVE_CANDIDATES' order
WAVE_RATES = tuple(_full_wave_rate(i) for i in range(len(WAVE_CANDIDATES)))


def wave_time_us(m: int, n: int, k: int, s: Fp8GemmSchedule, rate: float, sms: int) -> float:
    """Predicted microseconds of `s` on M x N x K: waves x the time of one tile (2 bm bn K
    FLOP at an SM's share, rate / _FIT_SMS, of the full-wave rate `rate` in TFLOP/s)."""
    per_sm = rate * 1e6 / _FIT_SMS     # FLOP per microsecond
    return waves(m, n, s.bm, s.bn, sms, s.cluster_m) * 2 * s.bm * s.bn * k / per_sm


def wave_pick(m: int, n: int, k: int, num_sms: int) -> Fp8GemmSchedule | None:
    """The faster of WAVE_CANDIDATES on M x N x K by `wave_time_us` (waves x per-tile time
    from each one's fitted full-wave rate: wave quantization and the ragged tiles' padding are
    what separates them), or None where the slower one is within WAVE_TIE (a tie: the caller
    keeps its own default). A pure function of its arguments; what it is fitted on is
    M = 4096 (`in_wave_pick_box` bounds where it is asked)."""
    times = [wave_time_us(m, n, k, s, r, num_sms) for s, r in zip(WAVE_CANDIDATES, WAVE_RATES)]
    fast, runner_up = sorted(range(len(times)), key=times.__getitem__)[:2]
    if times[fast] > (1 - WAVE_TIE) * times[runner_up]:
        return None
    return WAVE_CANDIDATES[fast]


def in_wave_pick_box(p: Fp8Problem) -> bool:
    """Where `wave_pick` decides the block-scaled default: the box of the smem split's wins
    (M >= 4096, N >= 2048, the TMA-store epilogue), now without its whole-256-column
    condition (4096x2112 was measured: the c3 tile 1100 TFLOP/s against the split's 910).
    Outside (small M, decode-like shapes at M <= 256, 256 < M < 4096, narrow N, f32 or
    misaligned outputs) nothing was measured against both candidates: `_block_default`."""
    return p.block_scaled and p.tma_epilogue_ok and p.m >= 4096 and p.n >= 2048


def _block_candidates(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    out = [_block_heuristic(p)]
    if p.m > 256:
        for bn in _block_widths(p)[:2]:
            out += [Fp8GemmSchedule(bn=bn, stages=_block_stages(128, bn), promote=True,
                                    cluster_m=c) for c in (1, 2)]
        if p.tma_epilogue_ok:
            out += [Fp8GemmSchedule(bn=128, stages=_block_stages(128, 128, 128 * 128 * 2),
                                    promote=True, epilogue="tma", cluster_m=2), _OVERLAP_TMA,
                    # the wave pick's other tile (`wave_pick`), measured at M = 4096 only
                    _C3_192_SMEM_TMA]
        # the overlapped promotion with the direct epilogue: 737 / 746 TFLOP/s against 742 /
        # 637 serial on the same shapes (docs/perf/fp8.md): a candidate, not a default
        out += [Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True, cluster_m=2)]
        if p.n >= 256:
            # the 128 x 256 tile of the N-split loop (DeepGEMM's 256 x 128 register budget;
            # docs/perf/fp8.md "DeepGEMM compared"): 941-1079 TFLOP/s at three of five
            # DeepSeek-V3 shapes on the H200 (--variants at 4dd5330), behind the overlap default
            # at the other two: a candidate until a rule separates the shapes
            out += ([_SPLIT_256_SMEM_TMA, _SPLIT_256_TMA, _SPLIT_256_TMA_C2]
                    if p.tma_epilogue_ok else [_SPLIT_256])
            few = fewest_sms(p, _SPLIT_256_TMA_C2)
            if p.tma_epilogue_ok and few < _SMS and \
                    -(-p.m // 128) * -(-p.n // 256) > _SMS:
                # the same waves on fewer SMs (fewest_sms; with one wave the grid is the
                # tile count already): not measured yet either
                out += [dataclasses.replace(_SPLIT_256_TMA_C2, num_sms=few)]
    else:
        out += [Fp8GemmSchedule(bm=64, bn=128, consumers=1, stages=8, promote=True),
                Fp8GemmSchedule(bm=128, bn=128, stages=6, promote=True)]
    return list(dict.fromkeys(out))


def candidates(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    """The bounded set a tuner measures (every one legal for this problem)."""
    if p.block_scaled:
        return _block_candidates(p)
    if weight_bound(p):
        return _stream_candidates(p)
    out = [heuristic(p)]
    if p.m > 256:
        out += [Fp8GemmSchedule(stages=4), Fp8GemmSchedule(stages=4, cluster_m=2),
                Fp8GemmSchedule(bn=128, stages=6)]
        if p.tma_epilogue_ok:
            out += [Fp8GemmSchedule(epilogue="tma", stages=3, cluster_m=2),
                    # the bf16 set's raster of 16 tiles down M (a wave of 132 128 x 256 tiles
                    # reads 16 x 128 rows of A and 9 x 256 of W, against 8 x 128 + 17 x 256)
                    Fp8GemmSchedule(epilogue="tma", stages=3, group_m=16),
                    # the bf16 set's 128 x 128 TMA-store cluster tile (5 stages beside its
                    # 32 KB staging buffer)
                    Fp8GemmSchedule(bn=128, stages=_block_stages(128, 128, 128 * 128 * 2),
                                    epilogue="tma", cluster_m=2)]
        out += _wave_fitting(p)
    else:
        out += [Fp8GemmSchedule(bm=64, bn=128, consumers=1, stages=8),
                Fp8GemmSchedule(bm=128, bn=128, stages=6),
                Fp8GemmSchedule(bm=64, bn=32, consumers=1, stages=12)]
    return list(dict.fromkeys(out))


def _wave_fitting(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    """Narrower tiles where the last wave of 128 x 256 tiles leaves many SMs idle (2048 x 7168:
    448 tiles, 3.4 waves of 132), as the bf16 set has them (argus/ops/schedules.py
    `_wave_fitting_tiles`; cuBLAS runs 128 x 176 there for bf16): of 224 / 192 / 176 / 160,
    the two of least waves x width, where they beat 256 by 5%; the TMA-store epilogue (1x1
    and 2x1 clusters) where the output allows it, and the direct one with 2x1 clusters; as
    many stages as fit beside the staging buffer (at most 5)."""
    def cost(bn: int) -> int:
        return waves(p.m, p.n, 128, bn, _SMS) * bn

    out = []
    for bn in sorted((224, 192, 176, 160), key=lambda bn: (cost(bn), -bn))[:2]:
        if cost(bn) > 0.95 * cost(256):
            continue
        variants = [("tma", 1), ("tma", 2)] if p.tma_epilogue_ok else []
        for epilogue, cluster in variants + [("direct", 2)]:
            staging = 128 * bn * 2 if epilogue == "tma" else 0
            stages = min(5, _block_stages(128, bn, staging))
            out.append(Fp8GemmSchedule(bn=bn, stages=stages, epilogue=epilogue,
                                       cluster_m=cluster))
    return out


def promoted_candidates(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    """Per-tensor schedules that all promote (each 128-K block's wgmma partial added into an
    fp32 sum on the CUDA cores, what cuBLAS's default mode does: our error without it was
    1.9-2.6e-3 against cuBLAS's 1.7e-3 on the H200, docs/perf/fp8.md; issue 18 asks for no
    worse). The block-scaled set, whose loops the per-tensor kernel shares (argus/kernels/
    gemm_fp8.py `_promote`: the partials added unscaled, the scales applied once at the end).
    Not `candidates(p)` yet: the promoted per-tensor speed was never measured against the
    plain set; `scripts/gpu_fp8_bench.py --promote` tunes over these."""
    if p.block_scaled:
        return _block_candidates(p)
    # the per-tensor kernel has no shared-memory block scales (smem_scales: a block-scale path)
    out = [s for s in _block_candidates(dataclasses.replace(p, block_scaled=True))
           if not s.smem_scales]
    # the interval promotion (promote_every_for(p.k) steps a partial) on the plain set's tiles
    # that hold two accumulators (bn <= 192), and the same at 128 x 192
    extra = [promoted(p, s) for s in candidates(p)] + interval_tiles(p)
    return list(dict.fromkeys(out + [s for s in extra if s is not None]))


def interval_tiles(p: Fp8Problem) -> list[Fp8GemmSchedule]:
    """Per-tensor schedules of M > 256 promoting every promote_every_for(p.k) steps at the
    widest tiles that hold a sum and a partial (bn 192: 96 + 96 accumulator registers a
    thread, no spills; 160; 128), direct and (when the output allows) TMA-store epilogues, with
    2x1 clusters. scripts/gpu_fp8_bench.py --promote-every times them against the plain
    128 x 256 default."""
    if p.block_scaled or weight_bound(p) or p.m <= 256:
        return []
    every = promote_every_for(p.k)
    out = []
    for bn in (192, 160, 128):
        for epilogue in (("tma", "direct") if p.tma_epilogue_ok else ("direct",)):
            staging = 128 * bn * 2 if epilogue == "tma" else 0
            out.append(Fp8GemmSchedule(bn=bn, stages=min(6, _block_stages(128, bn, staging)),
                                       epilogue=epilogue, cluster_m=2, promote=True,
                                       promote_every=every))
    return out


def load_cache(gpu: str) -> dict:
    return tuning_cache.load("scaled_matmul", gpu)


def store_choice(gpu: str, problem: Fp8Problem, schedule: Fp8GemmSchedule, ms: float) -> None:
    tuning_cache.record("scaled_matmul", gpu, problem.key, schedule, ms)


def choose(problem: Fp8Problem, gpu: str | None) -> Fp8GemmSchedule:
    if gpu is not None:
        entry = load_cache(gpu).get(problem.key)
        if entry is not None:
            try:
                s = Fp8GemmSchedule(**entry["schedule"])
            except (TypeError, ValueError):
                s = None  # written by another version of Fp8GemmSchedule: ignore it
            if s is not None and (s.epilogue != "tma" or problem.tma_epilogue_ok) and \
                    (s.promote or not problem.block_scaled) and \
                    (s.split_k == 1 or fp8_split_k.why_not(problem.k, s.split_k) is None):
                return s
    return heuristic(problem)
