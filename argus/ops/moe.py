"""`argus.ops.moe(x, w13, w2, router_logits, top_k, *, renormalize=True, scoring="softmax",
activation="silu", topk_ids=None, topk_weights=None, ...)`: a mixture-of-experts layer (SwiGLU
experts) on Hopper with Argus kernels, in vLLM fused_moe's weight layout.

    out[t] = sum over the top-k experts e of t: weight[t, e] * w2[e] @ (silu(w13[e, :I] @ x[t])
                                                                         * (w13[e, I:] @ x[t]))

x [T, H], w13 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I], router_logits [T, E]; bf16
(logits may be fp32); the result is [T, H] bf16. Routing is by softmax top-k (renormalized to
sum 1 when `renormalize`: Mixtral, Qwen3-MoE) or, with scoring="sigmoid", DeepSeek-V3's
group-limited top-k (num_expert_group groups, the best topk_group of them by the sum of their
two best scores + e_score_correction_bias; weights are the unbiased sigmoid scores, times
routed_scaling_factor). Precomputed (topk_ids [T, k] int, topk_weights [T, k] float) skip the
router.

Everything runs on the GPU as Argus kernels with no host synchronisation (CUDA-graph safe):
top-k, per-expert counts and prefix sums, the permutation into the contiguous layout padded to
the GEMM's BLOCK_M (argus/kernels/moe_routing.py), the gate-up grouped GEMM with SiLU * up in
its epilogue and the down grouped GEMM (argus/kernels/moe.py), and the weighted combine. Up to
DECODE_MAX_TOKENS = 64 tokens the GEMMs take the swap-AB decode schedules (the weights as
wgmma's M side, a token tile of 8..64 rows as N, units of the touched experts only, each GEMM
cut along K only when its units keep too few SMs streaming to saturate HBM: decode_schedules).
Buffers are sized from shapes only (the padded layout's worst case), never from routing
results. A decode layer is short next to the host time of its launches, so a call that
passes its output buffer (`out=`) and repeats an earlier call's shapes, options and argument
addresses on the same stream replays that call's prepared launch plans (_run). Without `out`
nothing is recorded: the plans bind raw pointers (CompiledKernel.prepare keeps no tensor), and
a fresh output's address is whatever the caching allocator hands back, so only a caller's
buffer is a key worth keeping (replay on fresh outputs is not built).

fp8 (e4m3 weights, DeepSeek-V3 style): w13 and w2 in torch.float8_e4m3fn with float32
dequantization scales w13_scale and w2_scale, per 128x128 block ([E, 2I/128, H/128] and
[E, H/128, I/128]: weight = e4m3 value * the scale of its block), per expert ([E]) or per
tensor (one element; both broadcast to blocks: _scale_operand); H and I multiples of 128.
x stays bf16: the permute quantizes each token row on its way into the padded layout (1x128:
one scale per 128 columns, amax / 448), the gate-up and down are block-scaled fp8
grouped GEMMs (argus/kernels/moe_fp8.py: each 128-deep K block's wgmma partial promoted into
fp32 on the CUDA cores times its two scales), h is stored bf16 and quantized 1x128 again
before the down GEMM. reference_fp8 is the same computation in float64. No swap-AB decode
form yet: small T runs 64-row tiles. The prefill default (FP8_PREFILL_SPLIT_SMEM_TMA) reads
the weight scales in 16-byte TMA boxes along K: where K/128 is not a multiple of 4 (I = 768 or
1408: the down's 6 or 11) they are zero-padded (DeepSeek-V3's 56 and 16 need no padding).
A broadcast and/or padded scale is made once per scale tensor and version, in one copy, and
kept (argus.ops.weight_cache: _scale_operand); block scales that need neither are read in
place. Calls with either replay (_run).

Bad input (top_k outside 1..E, mismatched shapes, dtypes, devices, non-contiguous weights)
raises a LaunchError that says what and how to fix it. Precomputed topk_ids must lie in
[0, E): their values are not checked, since that would read them back to the host on every
call (no CUDA graphs). The layer runs as the torch.library custom op `argus::moe`.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from dataclasses import dataclass, replace

import argus as ag
from argus.errors import LaunchError
from argus.kernels import moe_routing as R
from argus.kernels.moe import (PREFILL_TMA, PREFILL_TMA_CLUSTER, SMALL, TINY, MoeSchedule,
                               decode_schedule, grouped_gemm_kernel, split_finish_kernel)
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT_SMEM_TMA, FP8_SMALL, GROUP,
                                   MoeFp8Schedule,
                                   grouped_gemm_fp8_kernel, grouped_gemm_fp8_smem_kernel,
                                   permute_quantize_kernel,
                                   quantize_1x128_kernel)
from argus.build_memo import BuildMemo
from argus.ops.dynamic_walk import work_word
from argus.ops.split_k import k_slices
from argus.ops.weight_cache import DerivedCache
from argus.runtime.args import check_on_one_gpu

_WHO = "argus.ops.moe"
SCORINGS = ("softmax", "sigmoid")
ACTIVATIONS = ("silu",)
BH = 1024   # columns per step of the permute and combine kernels
# (kernel, compile-time values) -> compiled kernel; bounded.
_COMPILED: BuildMemo = BuildMemo()
_MEMO = 256
# (layer, device, stream) -> intermediate buffers of small layers (see _workspace); bounded
_WORKSPACES: OrderedDict = OrderedDict()
_WORKSPACE_COUNT = 16
# one cached workspace at most (DeepSeek-V3 at T = 64: 75 MB, its padded layout's worst case),
# and all of them together: a server's decode batch sizes each keep theirs within the budget
_WORKSPACE_BYTES = 128 << 20
_WORKSPACE_TOTAL = 512 << 20
# replayed calls kept per cached workspace (see _run): one per set of argument addresses
# (the layers of a model share a workspace: each has its own weights, hence its own entry;
# 64 covers Qwen3-30B-A3B's 48 MoE layers, at about 1 KB of packed parameters per launch)
_PROGRAMS = 64
# decode: at most this many tokens take the swap-AB schedule (the weights as wgmma's M side,
# token tiles of 8..64 as its N side). Up to 64 tokens every expert's rows fit one N <= 64
# token tile at the average load of any of the three bench models (Mixtral T = 64: 16 rows
# per expert, tiles of 32), and the layer is a weight read; past it prefill's 64-row token
# tiles carry few padding rows
DECODE_MAX_TOKENS = 64


def decode_token_tile(tokens: int, top_k: int, num_experts: int) -> int:
    """The token tile (wgmma N) of the decode schedule: twice the average rows per touched
    expert, a multiple of 8 in 8..64, so that most experts' rows fit one tile (an expert with
    more takes two consecutive units on the same weights, the second read from L2) while a
    stage carries few padding rows."""
    entries = tokens * top_k
    average = entries / max(1, min(num_experts, entries))
    return min(64, max(8, 8 * -(-int(2 * average) // 8)))


# The decode GEMMs' streaming model (decode_splits). A decode GEMM reads each touched expert's
# weights once; what a K split can buy is SMs: a unit streams its weights through a ring of
# `stages` stages, so an SM keeps stages x stage bytes in flight and pulls at most that much per
# load latency; HBM is saturated when the busy SMs together can pull its rate. A split that
# only fills the last wave of units buys nothing (the busy SMs of a partial wave already pull
# the whole rate: a gate-up stage keeps 136 KB in flight, 92 GB/s per SM at 1.5 us, so 45
# SMs saturate HBM) and costs its finishing pass: the split finish kernel (5.0 us at one
# token, measured with Mixtral and Qwen3 on the H200: docs/perf/moe.md, 07:49 UTC run: its
# 5-10 us were what kept Qwen3 at 92-94% of the floor at T = 16 and 64) and the fp32 partial
# sums, written and read back.
# what the decode GEMMs streamed on the H200 (the same run: 4.04-4.16 TB/s, in bytes per us)
DECODE_BYTES_PER_US = 4.1e6
# load latency of a stage under load (an assumption, not measured here: HBM's idle latency
# is ~0.6-0.8 us; queueing at full rate about doubles it)
DECODE_LATENCY_US = 1.5
# the split finish's fixed time (measured, see above); the down GEMM's partial sums are added
# by the combine, which runs anyway: its split costs the partial-sum traffic only
SPLIT_FINISH_US = 5.0


def decode_stream_us(units: int, unit_bytes: float, in_flight: int,
                     num_sms: int = SMALL.num_sms) -> float:
    """Modelled time of `units` units of `unit_bytes` weight bytes each on a persistent grid of
    num_sms CTAs (unit u on CTA u % num_sms, so wave w keeps min(num_sms, units left) busy):
    each wave at HBM's rate, or at its busy SMs' rate (in_flight bytes a load latency each)
    when that is less."""
    per_sm = in_flight / DECODE_LATENCY_US
    full, rest = divmod(units, num_sms)
    busy = [num_sms] * full + ([rest] if rest else [])
    return sum(n * unit_bytes / min(DECODE_BYTES_PER_US, n * per_sm) for n in busy)


def decode_splits(tokens: int, top_k: int, num_experts: int, bn: int, cols: int,
                  depth: int, *, gated: bool, stages: int = 8,
                  num_sms: int = SMALL.num_sms) -> int:
    """K slices (1..4) of a decode GEMM with `cols` output columns per expert over K = depth
    (two weight planes when `gated`: the gate-up), the count whose modelled time is least
    (decode_stream_us, plus for more than one slice the fp32 partial sums written and read
    back and, for the gate-up, the split finish), from the expected number of touched
    experts under uniform routing (the real count is a device value). A slice keeps at least
    8 K steps of 64 and cuts K into whole steps (the slices are views of K, read by TMA); a
    split must save >= 3% to be taken (the model is coarse)."""
    entries = tokens * top_k
    touched = num_experts * (1 - (1 - top_k / num_experts) ** tokens)
    token_tiles = max(1, round(max(touched, entries / bn)))
    col_tiles = -(-cols // 64)
    units = token_tiles * col_tiles
    planes = 2 if gated else 1
    k_steps = -(-depth // 64)
    # a ring stage: 64 weight rows per plane and bn token rows, 64 deep, bf16
    in_flight = stages * (planes * 64 + bn) * 64 * 2
    unit_bytes = planes * 64 * depth * 2

    def cost(splits):
        if splits == 1:
            return decode_stream_us(units, unit_bytes, in_flight, num_sms)
        # fp32 partials [splits, planes, rows, cols] instead of bf16 [rows, cols]: written
        # by the GEMM and read by the next kernel
        rows = token_tiles * bn
        extra = 2 * rows * cols * (planes * splits * 4 - 2) / DECODE_BYTES_PER_US
        return (decode_stream_us(units * splits, unit_bytes / splits, in_flight, num_sms)
                + extra + (SPLIT_FINISH_US if gated else 0.0))
    best = 1
    for splits in (2, 3, 4):
        if k_steps < 8 * splits:
            break
        if depth % (64 * splits):
            continue
        if cost(splits) < 0.97 * cost(best):
            best = splits
    return best


# bytes a decode GEMM's ring keeps in flight per SM: the gate-up's 8 stages of 2 x 64 weight
# rows and 8 token rows (136 KB), the ring that streamed at 4.15 TB/s on the H200 (Mixtral and
# DeepSeek-V3 at T = 1); the down's 8 stages of 64 weight rows held half of it (4.04-4.09 TB/s)
DECODE_IN_FLIGHT = 8 * (2 * 64 + 8) * 64 * 2


def decode_stages(bn: int, gated: bool) -> int:
    """Ring stages of a decode GEMM: as many as keep DECODE_IN_FLIGHT bytes of weight and
    token rows in flight (a stage is 64 weight rows per plane and bn token rows, 64 deep), 8 to
    16: the down GEMM's stages are half the gate-up's, so it takes about twice as many (15 at
    bn = 8), and an SM pulls about as much from HBM in either GEMM."""
    stage = ((2 if gated else 1) * 64 + bn) * 64 * 2
    return max(8, min(16, DECODE_IN_FLIGHT // stage))


def decode_schedules(tokens: int, top_k: int, num_experts: int, hidden: int,
                     inter: int) -> tuple[MoeSchedule, MoeSchedule]:
    """The decode schedules of the gate-up (I columns over K = H) and the down (H columns over
    K = I) GEMMs: one token tile, each its own ring depth and K split."""
    bn = decode_token_tile(tokens, top_k, num_experts)
    schedules = []
    for gated, cols, depth in ((True, inter, hidden), (False, hidden, inter)):
        stages = decode_stages(bn, gated)
        splits = decode_splits(tokens, top_k, num_experts, bn, cols, depth, gated=gated,
                               stages=stages)
        # pdl: each GEMM's launch and prologue overlap the kernel before it (docs/pdl.md);
        # measured on the H200 2026-12-04 (scripts/gpu_moe_pdl.py, device time, calls
        # queued): Qwen3-30B-A3B T = 1 43.1 -> 40.7 us (split_k 4: 48.8 -> 46.3), Mixtral
        # T = 1 187.2 -> 183.7 us, bit-equal; the kernels verify it (check_pdl)
        # prefetch = stages: before its PDL wait each GEMM's first unit pulls its first ring's
        # worth of weights into L2 (MoeSchedule.prefetch). Three H200 runs on 2026-12-04
        # (scripts/gpu_moe_pdl.py and gpu_moe_bench.py --decode --rule-variants, device time
        # of queued calls): Qwen3-30B-A3B T = 1 40.63 -> 39.16, 39.97 -> 38.62, layer 45.30
        # -> 43.55 us; T = 16 / 64 layers -1.2 to -2.2 us; Mixtral within +-0.5 us at T = 1,
        # -1.7 to -4.5 us at T = 16 / 64; twice the ring was worse (docs/perf/moe.md)
        # pdl_combine (the down's): the combine after it launches with PDL too, its launch
        # and prologue under the down's tail. Two H200 runs on 2026-12-04 (gpu_moe_bench.py
        # --decode --rule-variants, device time of queued calls) agreed in 10 of 10 rows:
        # layers 0.5-1.5 us shorter at Qwen3-30B-A3B and Mixtral, T = 1 / 16 / 64
        schedules.append(decode_schedule(bn, stages=stages, split_k=splits, pdl=True,
                                         prefetch=stages, pdl_combine=not gated))
    return schedules[0], schedules[1]


def schedule_for(tokens: int, top_k: int, num_experts: int, hidden: int = 0) -> MoeSchedule:
    """Decode (tokens <= DECODE_MAX_TOKENS): swap-AB with token tiles of decode_token_tile
    rows, units (token tile, 64 weight rows) of the touched experts only (argus.ops.moe
    itself takes decode_schedules: each GEMM with its own K split). Else 128 x 256 tiles
    with the TMA-store epilogue when the experts get at least 128 rows each on average, in
    CTA pairs sharing weight tiles from 1024 rows (where padding each expert to 256 rows
    wastes little); else 64 x 128 (less padding per expert), or 64 x 64 when so few experts
    are touched that the down projection would have fewer units of 128 columns than SMs.
    Untuned: the bench's --variants run is the data for these thresholds."""
    if tokens <= DECODE_MAX_TOKENS:   # with PDL, as decode_schedules
        return decode_schedule(decode_token_tile(tokens, top_k, num_experts), pdl=True)
    entries = tokens * top_k
    active = max(1, min(num_experts, entries))
    if entries / active >= 1024:
        return PREFILL_TMA_CLUSTER
    if entries / active >= 128:
        return PREFILL_TMA
    return TINY if active * hidden < SMALL.num_sms * SMALL.bn else SMALL


# The fp8 prefill rule's thresholds, in rows an expert gets on average (T * top_k over the
# experts routing can touch), from the DeepSeek-V3 sweep on an H100 (2026-12-06,
# docs/perf/moe.md "One CTA a unit"): the 128 x 256 split tile beats the 64 x 128 one from 32
# rows an expert (T = 1024: 176 against 170 TFLOP/s persistent, 192 on the unit grid; T = 2048:
# 301 against 237), though it pads each expert to 128 rows
FP8_BIG_TILE_ROWS = 32
# ... and one CTA a unit (persistent=False) beats the persistent walk up to 128 rows an expert
# (the GEMM kernels in alternated rounds: +10% at T = 1024, +31% at 4096; +17% at 2048 in a
# plain run), where the hardware handing units out in order keeps an expert's m-tiles together
# in L2; at 256 (T = 8192) the two traded places over four runs (the alternated one: the walk
# +5% on the layer) and at 512 (T = 16384) the walk won every run by 2-11%: ~140 units a CTA,
# each CTA's start (barrier setup, the ring's first fill) paid once instead of per unit
FP8_UNIT_GRID_MAX_ROWS = 128


def fp8_rows_per_expert(tokens: int, top_k: int, num_experts: int) -> float:
    """The rows an expert gets on average: the routed entries over the experts they can reach."""
    entries = tokens * top_k
    return entries / max(1, min(num_experts, entries))


# the unit-grid form: with the gate-up quantizing its own output (quantize_out: no bf16 h, no
# quantize_1x128 launch) the layer measured +2.8% / +1.9% at T = 1024 / 4096 in alternated
# rounds (the GEMM kernels unchanged: 3584 / 4916 against 3582 / 4901 us); on the walk it
# slowed the gate-up at T >= 8192 (+4-8% GEMM time), so the walk keeps the separate quantize
FP8_PREFILL_UNIT_GRID = replace(FP8_PREFILL_SPLIT_SMEM_TMA, persistent=False, quantize_out=True)

# the walk with the gate-up quantizing h itself: the H200 class's form from FP8_BIG_TILE_ROWS
# up to FP8_UNIT_GRID_MAX_ROWS rows an expert. DeepSeek-V3 on an NVIDIA H200 (2026-12-06
# ~20:25 UTC, alternated rounds, median round, whole layer TFLOP/s; docs/perf/moe.md "fp8
# prefill rule per card"): T = 1024 this 238 / the walk 239 / FP8_PREFILL_UNIT_GRID 230;
# 2048 377 / 375 / 370; 4096 590 / 575 / 555 (another process: the walk 569, the unit grid
# 548). At 1024 a tie within the rounds' spread (the GEMM kernels alone favoured the unit
# grid there, 286 against 278); at 2048 and 4096 this form's rounds and the unit grid's did
# not overlap. The unit grid's L2 locality (the H100's win: DRAM traffic 21 -> 12 GB where
# its 3.35 TB/s bound the gate-up) bought nothing measurable at the H200's 4.8 TB/s (its DRAM
# traffic not profiled there); the fused quantize still saves the quantize_1x128 launch (the
# GEMM kernels alone 4.5% slower at T = 4096: 653 against 683 TFLOP/s; the layer 2.6%
# faster). At 256 rows (T = 8192) it tied the walk (718 against 716), so the separate
# quantize above FP8_UNIT_GRID_MAX_ROWS stays, as on the H100
FP8_PREFILL_WALK_FUSED_QUANTIZE = replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True)

# The card's memory class, which the fp8 prefill rule's middle band depends on. The H100 class:
# HBM3, 80-94 GB (H100, H800) at 3.35-3.9 TB/s, where the unit grid paid; the H200 class:
# HBM3e (H200: 141 GB at 4.8 TB/s), where it did not. Plain strings: a task's option, JSON
CARD_H100 = "h100"
CARD_H200 = "h200"
CARDS = (CARD_H100, CARD_H200)
# more memory than any HBM3 Hopper (the H100 NVL's 94 GB): an HBM3e card
_HBM3E_BYTES = 100 << 30
# cuda device index -> its card class (card_of: the op asks on every call)
_DEVICE_CARDS: dict[int, str] = {}


def card_class(name: str, total_memory: int) -> str:
    """The card class of a device's name and memory (bytes): the H200 class when the name
    says H200 (GH200 too: its name contains it; unmeasured, as is its 96 GB HBM3 form) or the
    memory exceeds 100 GiB (HBM3e); else the H100 class. Unknown cards take the H100 class,
    the rule as first measured: wrong either way, the unit grid cost the H200 2-6% of the
    layer at 32-128 rows an expert, while the walk cost the H100 9-10% (docs/perf/moe.md), so
    the grid is the smaller loss (and only sm_90 cards run these kernels)."""
    if "H200" in name.upper() or total_memory > _HBM3E_BYTES:
        return CARD_H200
    return CARD_H100


def card_of(device) -> str:
    """The card class of a torch device, asked of the driver once per device (the op calls
    this on every step). A CPU device (the interpreter) has no card: the H100 class."""
    import torch

    if device.type != "cuda":
        return CARD_H100
    index = device.index if device.index is not None else torch.cuda.current_device()
    card = _DEVICE_CARDS.get(index)
    if card is None:
        props = torch.cuda.get_device_properties(index)
        card = _DEVICE_CARDS[index] = card_class(props.name, props.total_memory)
    return card


def default_card() -> str:
    """fp8_schedule_for's card when none is named: the current CUDA device's class, else (no
    CUDA: the interpreter, a planning host) the H100 class."""
    import torch

    if torch.cuda.is_available():
        return card_of(torch.device("cuda", torch.cuda.current_device()))
    return CARD_H100


def card_or_default(card: str | None) -> str:
    """The card class a rule is read at: `card` as named, or default_card()'s when None
    (fp8_schedule_for's card=None; an agent task's `card` option, absent in a task written
    before the option). The one place both the op and the agent resolve an unnamed card."""
    return default_card() if card is None else card


def fp8_unit_grid_pays(card: str) -> bool:
    """Whether the card's rule runs one CTA a unit from FP8_BIG_TILE_ROWS up to
    FP8_UNIT_GRID_MAX_ROWS rows an expert: measured faster on the H100 class only."""
    if card not in CARDS:
        raise LaunchError(f"{_WHO}: card={card!r} is not one of {CARDS}",
                          fix="pass argus.ops.moe.CARD_H100 or CARD_H200 (card_of(device) "
                              "names a device's), or card=None for the current device's")
    return card == CARD_H100


def fp8_schedule_for(tokens: int, top_k: int, num_experts: int,
                     card: str | None = None) -> MoeFp8Schedule:
    """The fp8 grouped GEMMs' schedule on a card class (CARD_H100 or CARD_H200; None: the
    current CUDA device's, else the H100 class: default_card. The op passes its x's card,
    card_of). From FP8_BIG_TILE_ROWS rows an expert on average, 128 x 256 tiles with each K
    block's wgmma split into two 128-column halves, the block scales through shared memory
    and the TMA-store epilogue (FP8_PREFILL_SPLIT_SMEM_TMA, the dense block-scaled kernel's
    fastest form); up to FP8_UNIT_GRID_MAX_ROWS rows an expert the gate-up quantizes h itself,
    on one CTA a unit on the H100 class (FP8_PREFILL_UNIT_GRID), on the persistent walk on the
    H200 class (FP8_PREFILL_WALK_FUSED_QUANTIZE); above, the walk with the separate quantize
    on either; else 64 x 128 (FP8_SMALL, a quarter the padding). Measured on an H100,
    2026-12-06 (docs/perf/moe.md): DeepSeek-V3's whole layer 187 / 520 TFLOP/s at T = 1024 /
    4096 against the walk's 167 / 478, 800-880 at T = 16384; on an H200 the same day: 238 /
    590 with the fused walk against the unit grid's 230 / 555, 803 at 16384. No swap-AB decode
    form yet: decode sizes take FP8_SMALL."""
    card = card_or_default(card)
    grid = fp8_unit_grid_pays(card)      # (checks the card first: a bad one at any size)
    rows = fp8_rows_per_expert(tokens, top_k, num_experts)
    if rows < FP8_BIG_TILE_ROWS:
        return FP8_SMALL
    if rows <= FP8_UNIT_GRID_MAX_ROWS:
        return FP8_PREFILL_UNIT_GRID if grid else FP8_PREFILL_WALK_FUSED_QUANTIZE
    return FP8_PREFILL_SPLIT_SMEM_TMA


# ----------------------------------------------------------------------------- checks


def _check(x, w13, w2, logits, top_k, scoring, activation, topk_ids, topk_weights, bias,
           num_expert_group, topk_group):
    import torch

    named = [("x", x), ("w13", w13), ("w2", w2)]
    named += [(n, t) for n, t in (("router_logits", logits), ("topk_ids", topk_ids),
                                  ("topk_weights", topk_weights),
                                  ("e_score_correction_bias", bias)) if t is not None]
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{_WHO}: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_on_one_gpu(_WHO, named)
    if scoring not in SCORINGS:
        raise LaunchError(f"{_WHO}: scoring={scoring!r} is not one of {SCORINGS}")
    if activation not in ACTIVATIONS:
        raise LaunchError(f"{_WHO}: activation={activation!r} is not supported (only 'silu': "
                          f"silu(gate) * up)")
    fp8 = w13.dtype == torch.float8_e4m3fn or w2.dtype == torch.float8_e4m3fn
    for name, t in (("x", x), ("w13", w13), ("w2", w2)):
        want = torch.float8_e4m3fn if fp8 and name != "x" else torch.bfloat16
        if t.dtype != want:
            raise LaunchError(
                f"{_WHO}: {name} is {t.dtype}; the MoE kernels take bfloat16 x with bfloat16 "
                f"weights, or with float8_e4m3fn weights and their scales (w13_scale, "
                f"w2_scale): w13 and w2 must be both one or both the other",
                fix=f"{name}.bfloat16()" if name == "x" else
                f"quantize both weights to e4m3 (or pass both as bfloat16)")
    if x.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise LaunchError(f"{_WHO}: x must be [T, H], w13 [E, 2I, H] and w2 [E, H, I]; got "
                          f"{tuple(x.shape)}, {tuple(w13.shape)}, {tuple(w2.shape)}")
    T, H = x.shape
    E, two_i, h13 = w13.shape
    inter = two_i // 2
    if two_i % 2 or h13 != H or tuple(w2.shape) != (E, H, inter):
        raise LaunchError(f"{_WHO}: shapes do not match: x {tuple(x.shape)}, w13 "
                          f"{tuple(w13.shape)} (want [E, 2I, {H}]), w2 {tuple(w2.shape)} (want "
                          f"[{E}, {H}, {inter}])")
    if H % 8 or inter % 8:
        raise LaunchError(f"{_WHO}: H={H} and I={inter} must be multiples of 8 (16-byte rows "
                          f"for the tensor-memory accelerator)")
    for name, t in (("w13", w13), ("w2", w2)):
        if not t.is_contiguous():
            raise LaunchError(f"{_WHO}: {name} is not contiguous (strides {t.stride()}); the "
                              f"weights are read as one [E, N, K] tensor map",
                              fix=f"pass {name}.contiguous() (once, at load time)")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= E:
        raise LaunchError(f"{_WHO}: top_k={top_k!r} must be an int in 1..E={E}")
    if (topk_ids is None) != (topk_weights is None):
        raise LaunchError(f"{_WHO}: pass topk_ids and topk_weights together (or neither)")
    if topk_ids is None:
        if logits is None:
            raise LaunchError(f"{_WHO}: router_logits is None and no topk_ids/topk_weights")
        if tuple(logits.shape) != (T, E) or logits.dtype not in (torch.bfloat16,
                                                                   torch.float32):
            raise LaunchError(f"{_WHO}: router_logits must be [T, E] = [{T}, {E}] bfloat16 or "
                              f"float32, got {tuple(logits.shape)} {logits.dtype}")
        if E > 1024:
            raise LaunchError(f"{_WHO}: E={E} experts: the router kernel holds a token's "
                              f"logits in one tile of at most 1024")
        if scoring == "sigmoid":
            _check_groups(E, top_k, num_expert_group, topk_group)
            if bias is not None and (tuple(bias.shape) != (E,) or bias.dtype != torch.float32):
                raise LaunchError(f"{_WHO}: e_score_correction_bias must be [E] float32, got "
                                  f"{tuple(bias.shape)} {bias.dtype}")
    else:
        if tuple(topk_ids.shape) != (T, top_k) or tuple(topk_weights.shape) != (T, top_k):
            raise LaunchError(f"{_WHO}: topk_ids and topk_weights must be [T, top_k] = [{T}, "
                              f"{top_k}], got {tuple(topk_ids.shape)} and "
                              f"{tuple(topk_weights.shape)}")
        if topk_ids.dtype not in (torch.int32, torch.int64) or not topk_weights.is_floating_point():
            raise LaunchError(f"{_WHO}: topk_ids must be int32/int64 and topk_weights float, "
                              f"got {topk_ids.dtype} and {topk_weights.dtype}")


def _check_groups(E: int, top_k: int, num_expert_group, topk_group) -> None:
    """The grouped sigmoid router's groups: num_expert_group dividing E, 1 <= topk_group <=
    num_expert_group, and top_k experts inside topk_group groups."""
    if not num_expert_group or not topk_group or E % num_expert_group or \
            not 1 <= topk_group <= num_expert_group or \
            top_k > topk_group * (E // num_expert_group):
        raise LaunchError(f"{_WHO}: scoring='sigmoid' (the grouped router) needs "
                          f"num_expert_group dividing E={E} and 1 <= topk_group <= "
                          f"num_expert_group with top_k={top_k} <= topk_group * E / "
                          f"num_expert_group; got num_expert_group={num_expert_group}, "
                          f"topk_group={topk_group}",
                          fix="pass the model's num_expert_group and topk_group (DeepSeek-V3: "
                              "8 and 4); for one group, num_expert_group=1, topk_group=1")


def _check_scales(x, w13, w2, w13_scale, w2_scale) -> bool:
    """The fp8 path's scales (after _check): whether the weights are e4m3. Weight scales are
    float32 on x's device, per tensor (one element, or [E]: one per expert) or per 128x128
    block ([E, 2I/128, H/128] and [E, H/128, I/128]: DeepSeek-V3's weight_scale_inv); H and I
    must be multiples of 128 (both GEMMs' K blocks; the gate and up planes' weight blocks)."""
    import torch

    fp8 = w13.dtype == torch.float8_e4m3fn
    if not fp8:
        if w13_scale is not None or w2_scale is not None:
            raise LaunchError(f"{_WHO}: w13_scale / w2_scale are given but the weights are "
                              f"{w13.dtype}: scales go with float8_e4m3fn weights",
                              fix="drop the scales, or pass the e4m3 weights they belong to")
        return False
    E, two_i, H = w13.shape
    inter = two_i // 2
    if H % 128 or inter % 128:
        raise LaunchError(f"{_WHO}: fp8 weights need H={H} and I={inter} multiples of 128: "
                          f"both GEMMs scale 128-deep K blocks, and the gate and up planes "
                          f"must each start a 128-row weight-scale block",
                          fix="pad H and I with zero weights to multiples of 128")
    for name, scale, (n, k) in (("w13_scale", w13_scale, (two_i, H)),
                                ("w2_scale", w2_scale, (H, inter))):
        block = (E, n // 128, k // 128)
        forms = (f"one float32 element (per tensor), [E] = [{E}] (per expert) or "
                 f"[E, N/128, K/128] = {list(block)} (128x128 blocks)")
        if scale is None:
            raise LaunchError(f"{_WHO}: the weights are float8_e4m3fn but {name} is None; "
                              f"pass {name} as {forms}")
        if not isinstance(scale, torch.Tensor):
            raise LaunchError(f"{_WHO}: {name} must be a torch.Tensor, got "
                              f"{type(scale).__name__}")
        if scale.device != x.device:
            raise LaunchError(f"{_WHO}: {name} is on {scale.device} but x on {x.device}",
                              fix=f"{name}.to(x.device)")
        if scale.dtype != torch.float32:
            raise LaunchError(f"{_WHO}: {name} is {scale.dtype}; weight scales are float32",
                              fix=f"{name}.float()")
        if scale.numel() != 1 and tuple(scale.shape) not in ((E,), block):
            raise LaunchError(f"{_WHO}: {name} has shape {tuple(scale.shape)}; it must be "
                              f"{forms}")
        if tuple(scale.shape) == block and not scale.is_contiguous():
            raise LaunchError(f"{_WHO}: {name} is not contiguous (strides {scale.stride()})",
                              fix=f"pass {name}.contiguous() (once, at load time)")
    return True


def _block_scales(scale, E: int, n: int, k: int):
    """A weight scale as [E, n/128, k/128] float32 blocks: block scales as they are (the
    caller's tensor: no copy), a per-tensor or per-expert scale broadcast (a new tensor; used
    by reference_fp8: the op itself takes _scale_operand's kept form)."""
    block = (E, n // 128, k // 128)
    if tuple(scale.shape) == block:
        return scale
    return scale.reshape(-1, 1, 1).expand(block).contiguous()


# ----------------------------------------------------------------------------- the layer


@dataclass(frozen=True)
class Layer:
    """The sizes of one MoE call, from shapes only: what every buffer and grid is sized by."""

    tokens: int
    hidden: int
    inter: int
    experts: int
    top_k: int
    schedule: MoeSchedule
    # the down GEMM's, when it differs from the gate-up's (decode: its own K split; the same
    # token tile, so the same layout)
    down_schedule: MoeSchedule | None = None

    def __post_init__(self) -> None:
        if self.down.pad != self.schedule.pad:
            raise LaunchError(f"{_WHO}: the down GEMM's schedule pads experts to "
                              f"{self.down.pad} rows, the gate-up's to {self.schedule.pad}: "
                              f"both read one layout", fix="give both the same token tile")
        for gemm, splits, depth in (("gate-up", self.schedule.split_k, self.hidden),
                                    ("down", self.down.split_k, self.inter)):
            if depth % splits or (depth // splits) % 8:
                raise LaunchError(f"{_WHO}: the {gemm} GEMM's split_k={splits} must cut its "
                                  f"K={depth} into equal slices of a multiple of 8 elements "
                                  f"(K-slice views read by TMA)",
                                  fix="use a split_k that divides K into such slices, or 1")

    @property
    def down(self) -> MoeSchedule:
        return self.down_schedule or self.schedule

    @property
    def tile_rows(self) -> bool:
        """Whether routing writes TileRows (each m-tile's routed rows): a GEMM's schedule skips
        its consumer warpgroups' all-padding rows (MoeSchedule.skip_pad_halves) or computes
        an expert's last m-tile as a half tile (MoeFp8Schedule.half_tile_last):
        MoeSchedule.reads_tile_rows."""
        return self.schedule.reads_tile_rows or self.down.reads_tile_rows

    @property
    def fp8(self) -> bool:
        """e4m3 weights: the block-scaled grouped GEMMs (argus/kernels/moe_fp8.py)."""
        return isinstance(self.schedule, MoeFp8Schedule)

    @property
    def entries(self) -> int:
        return self.tokens * self.top_k

    @property
    def block_experts(self) -> int:
        return R.block_experts(self.experts)

    @property
    def padded_rows(self) -> int:
        return R.max_padded_rows(self.entries, self.experts, self.schedule.pad)


def _launcher(interpret: bool, record: list | None = None):
    """run(kernel, *tensors, **compile-time values): the interpreter (CPU tensors, tests) or the
    compiled kernel (verified when compiled, then cached by kernel and values: a repeated call
    costs one dictionary lookup before the launch). `record`, when given, receives each
    launch's prepared plan (None where there is none), so that the call can be replayed."""
    def run(kernel, *args, **constexprs):
        if interpret:
            return kernel.interpret(*args, **constexprs)
        key = (kernel, tuple(constexprs.items()))
        compiled = _COMPILED.get(key)
        if compiled is None:
            compiled = kernel.compile(**constexprs)
            _COMPILED[key] = compiled
            if len(_COMPILED) > _MEMO:
                _COMPILED.popitem(last=False)
        compiled(*args)
        if record is not None:
            record.append(compiled.plan_for(*args))
    return run


def routing_workspace(layer: Layer, device) -> dict:
    """The routing's buffers of one call (route, then layout): the router's ids (flat: one
    entry per (token, slot)) and weights, the layout's outputs, and, where layout takes the
    four kernels (not layout_small), the count / scan intermediates. Every size and the
    choice of path come from the layer's host integers (never a device value), so a captured
    graph replays on the same buffers."""
    import torch

    E, pad, M = layer.experts, layer.schedule.pad, layer.padded_rows
    i32 = dict(dtype=torch.int32, device=device)
    # a row past the layout's m-tiles: MoeFp8Schedule.pair_multicast reads the second m-tile
    # of an odd count's last pair (never used) before it knows it is not real
    mt = M // pad + (1 if any(getattr(t, "pair_multicast", False)
                              for t in (layer.schedule, layer.down)) else 0)
    ws = dict(expert_start=torch.empty(1, E, **i32),
              tile_expert=torch.empty(mt, 1, **i32), tiles=torch.empty(1, 1, **i32),
              pos=torch.empty(layer.entries, 1, **i32), ids=torch.empty(layer.entries, **i32),
              weights=torch.empty(layer.tokens, layer.top_k, dtype=torch.float32, device=device))
    if not R.small_layout(layer.entries, E):
        # count's chunks of entries and their steps: one shape for counts, chunk_base,
        # step_base
        C, steps, _ = R.step_base_shape(layer.entries, E)
        ws.update(counts=torch.empty(C, E, **i32), chunk_base=torch.empty(C, E, **i32),
                  step_base=torch.empty(C, steps, E, **i32), totals=torch.empty(1, E, **i32))
    if layer.tile_rows:   # the routed rows of each m-tile (skip_pad_halves)
        ws["tile_rows"] = torch.empty(mt, 1, **i32)
    return ws


def _workspace(layer: Layer, device, interpret: bool) -> dict:
    """The intermediate buffers of one call. Small ones (decode-sized layers) are kept per
    (layer, device, stream) and reused by the next call on that stream (stream order makes
    that safe), which saves a dozen allocations per call; never while a CUDA graph is being
    captured (the graph must own what it reads)."""
    import torch

    key = stream = None
    if not interpret and not torch.cuda.is_current_stream_capturing():
        stream = torch.cuda.current_stream(device).cuda_stream
        key = (layer, device, stream)
        found = _WORKSPACES.get(key)
        if found is not None:
            _WORKSPACES.move_to_end(key)
            return found
    pad, M = layer.schedule.pad, layer.padded_rows
    bf = dict(dtype=torch.bfloat16, device=device)
    # padding rows are never written: NaN in the interpreter, so a test sees any that leaks
    fill = torch.full if interpret else (lambda shape, _v, **kw: torch.empty(shape, **kw))
    ws = routing_workspace(layer, device)
    ws.update(h=torch.empty(M, layer.inter, **bf), y=torch.empty(M, layer.hidden, **bf))
    nbytes = M * (2 * layer.hidden + layer.inter) * 2
    f32 = dict(dtype=torch.float32, device=device)
    i32 = dict(dtype=torch.int32, device=device)
    if layer.fp8:
        # the GEMMs' e4m3 operands and their MN-major 1x128 scales (x's by the quantizing
        # permute, h's by quantize_1x128 after the gate-up)
        e4m3 = dict(dtype=torch.float8_e4m3fn, device=device)
        ws.update(xq=fill((M, layer.hidden), float("nan"), **e4m3),
                  xs=fill((layer.hidden // GROUP, M), float("nan"), **f32),
                  hq=torch.empty(M, layer.inter, **e4m3),
                  hs=fill((layer.inter // GROUP, M), float("nan"), **f32))
        # smem_scales: a GEMM's activation scales K-major instead ([M, K/128 padded to 4]:
        # 16-byte row pitches for the TMA boxes), written so by its quantizer
        if layer.schedule.smem_scales:
            ws["xs"] = fill((M, _pad4(layer.hidden // GROUP), 1), float("nan"), **f32)
        if layer.down.smem_scales:
            ws["hs"] = fill((M, _pad4(layer.inter // GROUP), 1), float("nan"), **f32)
        nbytes = M * (layer.hidden * 3 + layer.inter * 3) + 4 * M * (
            layer.hidden + layer.inter) // GROUP
        if layer.schedule.quantize_out:   # the gate-up writes hq itself: no bf16 h
            del ws["h"]
            nbytes -= M * layer.inter * 2
    else:
        ws["xp"] = fill((M, layer.hidden), float("nan"), **bf)
    # the decode GEMMs' fp32 partial sums per K slice (split_k > 1)
    if layer.schedule.split_k > 1:
        ws["h_parts"] = torch.empty(layer.schedule.split_k, 2, M, layer.inter, **f32)
        nbytes += ws["h_parts"].numel() * 4
    if layer.schedule.split_k > 1 and layer.schedule.fused_finish:
        # the fused split finish's arrival counters, one per (token tile, 64-column weight
        # tile): zero here, and every call leaves them zero (each resets itself after split_k
        # arrivals), so a cached workspace and a captured graph reuse them as they are
        ws["h_count"] = torch.zeros(M // pad, -(-layer.inter // 64), **i32)
        nbytes += ws["h_count"].numel() * 4
    if layer.down.split_k > 1:
        ws["y_parts"] = torch.empty(layer.down.split_k, M, layer.hidden, **f32)
        nbytes += ws["y_parts"].numel() * 4
    if key is not None and nbytes <= _WORKSPACE_BYTES:
        # calls replayed on this workspace (_run): their launch plans hold its addresses, so
        # they live and go with it
        ws.update(programs=BuildMemo(), stream=stream, nbytes=nbytes)
        _WORKSPACES[key] = ws
        while len(_WORKSPACES) > 1 and (len(_WORKSPACES) > _WORKSPACE_COUNT or sum(
                w["nbytes"] for w in _WORKSPACES.values()) > _WORKSPACE_TOTAL):
            _WORKSPACES.popitem(last=False)
    return ws


def _combine_width(top_k: int, splits: int) -> int:
    """Columns per step of the combine over K-slice partials: its k * splits fp32 row pieces
    are live at once, so at most 64 values a thread (128 threads; more spill), a power of
    two from 128 to BH."""
    width = BH
    while width > 128 and top_k * splits * width > 64 * 128:
        width //= 2
    return width


def _k_slices(t, splits: int):
    """t [..., K] with K cut into `splits` equal slices stacked in front ([splits, ..., K/S]):
    a view, read by TMA like a batch (argus/ops/split_k.py's form); decode_splits only picks
    counts that cut K into whole 64-column steps."""
    return k_slices(t, t.dim() - 1, splits)


def route(logits, layer: Layer, *, renormalize: bool = True, scoring: str = "softmax",
          bias=None, num_expert_group: int = 0, topk_group: int = 0,
          routed_scaling_factor: float = 1.0, interpret: bool = False, run=None,
          ws: dict | None = None):
    """(topk_ids int32 [T, k], topk_weights float32 [T, k]) from the router logits (written
    into the call's workspace `ws` when given, else new tensors)."""
    import torch

    run = run or _launcher(interpret)
    T, E, k = layer.tokens, layer.experts, layer.top_k
    if ws is not None:
        ids, weights = ws["ids"].view(T, k), ws["weights"]
    else:
        ids = torch.empty(T, k, dtype=torch.int32, device=logits.device)
        weights = torch.empty(T, k, dtype=torch.float32, device=logits.device)
    dt = ag.bf16 if logits.dtype == torch.bfloat16 else ag.f32
    if scoring not in SCORINGS:
        raise LaunchError(f"{_WHO}: scoring={scoring!r} is not one of {SCORINGS}")
    if scoring == "sigmoid":   # moe() checked these; a direct call gets the same message
        _check_groups(E, k, num_expert_group, topk_group)
    if scoring == "softmax":
        run(R.topk_softmax_kernel(dt, k, renormalize, layer.block_experts), logits, ids, weights)
    else:
        if bias is None:
            bias = torch.zeros(E, dtype=torch.float32, device=logits.device)
        kern = R.topk_sigmoid_grouped_kernel(dt, k, renormalize, layer.block_experts,
                                             num_expert_group, topk_group,
                                             float(routed_scaling_factor))
        # a row per expert group (the router's [GB, BG] tile: R.block_groups)
        G = num_expert_group
        logits = logits.contiguous()
        run(kern, logits.view(T * G, E // G), logits, bias.reshape(G, E // G).float(), ids,
            weights)
    return ids, weights


def layout(ids, layer: Layer, run, ws: dict) -> None:
    """The contiguous layout of the flat ids [N] int32 into the workspace `ws`: expert_start,
    tile_expert, tiles, pos (and tile_rows when a GEMM skips padding halves); one launch
    (layout_small) for a few entries, else count, scan, layout and positions."""
    E, be, pad = layer.experts, layer.block_experts, layer.schedule.pad
    # skip_pad_halves: the layout writes each m-tile's routed rows too (TileRows)
    rows = (ws["tile_rows"],) if layer.tile_rows else ()
    if R.small_layout(layer.entries, E):   # decode: one launch instead of four
        run(R.layout_small_kernel(be, pad, layer.tile_rows), ids, ids, ws["expert_start"],
            ws["tile_expert"], ws["tiles"], ws["pos"], *rows)
        return
    run(R.count_kernel(be), ids, ws["counts"], ws["step_base"])
    run(R.scan_kernel(be), ws["counts"], ws["chunk_base"], ws["totals"])
    run(R.layout_kernel(be, pad, layer.tile_rows), ws["totals"], ws["expert_start"],
        ws["tile_expert"], ws["tiles"], *rows)
    run(R.positions_kernel(be), ids, ids, ws["chunk_base"], ws["step_base"],
        ws["expert_start"], ws["pos"])


def experts(x, w13, w2, topk_ids, topk_weights, layer: Layer, *, interpret: bool = False,
            scratch: dict | None = None, run=None, ws: dict | None = None,
            out=None, scales: tuple | None = None, operands: tuple | None = None):
    """The expert half of the layer for given routing: counts, layout, permute, both grouped
    GEMMs, combine. Returns out [T, H] bf16 (written into `out` when given). `scratch`, when
    given, receives the intermediate buffers (tests look at the layout); `ws` is the call's
    workspace (_workspace), `run` its launcher. fp8 layers (e4m3 weights) take `scales`:
    (w13_scale, w2_scale) as argus.ops.moe takes them, or `operands`: those scales as the
    GEMMs read them (_weight_scales; _run prepares them before its replay lookup)."""
    import torch

    run = run or _launcher(interpret)
    s, E = layer.schedule, layer.experts
    ids = topk_ids.to(torch.int32).reshape(-1).contiguous()
    weights = topk_weights.to(torch.float32).contiguous()
    ws = ws if ws is not None else _workspace(layer, x.device, interpret)
    tile_expert, tiles, pos = ws["tile_expert"], ws["tiles"], ws["pos"]
    if out is None:
        out = torch.empty(layer.tokens, layer.hidden, dtype=torch.bfloat16, device=x.device)

    layout(ids, layer, run, ws)
    if layer.fp8:
        _fp8_gemms(x, w13, w2, operands or _weight_scales(scales, layer), layer, run, ws)
        run(R.combine_kernel(layer.top_k, BH), ws["y"], pos, weights, out)
        if scratch is not None:
            scratch.update(ws)
        return out
    # a gate-up that prefetches weights before its wait runs beside the permute (docs/pdl.md)
    run(R.permute_kernel(layer.top_k, BH, pdl=s.prefetch > 0), x, pos, ws["xp"])
    gate_up = w13.view(E, 2, layer.inter, layer.hidden)   # the gate and up planes
    if s.split_k > 1 and s.fused_finish:   # the last K slice of a unit finishes its h
        run(grouped_gemm_kernel(True, True, True), _k_slices(ws["xp"], s.split_k),
            _k_slices(gate_up, s.split_k), tile_expert, tiles, ws["h_parts"], ws["h"],
            ws["h_count"], s=s)
    elif s.split_k > 1:   # decode: K slices' partial sums, then silu(gate) * up of their sums
        run(grouped_gemm_kernel(True, True), _k_slices(ws["xp"], s.split_k),
            _k_slices(gate_up, s.split_k), tile_expert, tiles, ws["h_parts"], s=s)
        run(split_finish_kernel(s.split_k, s.bn), ws["h_parts"], tiles, ws["h"])
    else:
        run(grouped_gemm_kernel(True, tile_rows=s.reads_tile_rows), ws["xp"], gate_up,
            tile_expert, tiles, *_rows_for(s, ws), ws["h"], s=s)
    down = layer.down
    if down.split_k > 1:   # decode: the combine adds the K slices' partial sums up
        run(grouped_gemm_kernel(False, True), _k_slices(ws["h"], down.split_k),
            _k_slices(w2, down.split_k), tile_expert, tiles, ws["y_parts"], s=down)
        run(R.combine_kernel(layer.top_k, _combine_width(layer.top_k, down.split_k),
                             down.split_k, pdl=down.pdl_combine), ws["y_parts"], pos, weights,
            out)
    else:
        run(grouped_gemm_kernel(False, tile_rows=down.reads_tile_rows), ws["h"], w2,
            tile_expert, tiles, *_rows_for(down, ws), ws["y"], s=down)
        # a down with pdl_combine: the combine waits for it on the device, launched early
        run(R.combine_kernel(layer.top_k, BH, pdl=down.pdl_combine), ws["y"], pos, weights,
            out)
    if scratch is not None:
        scratch.update(ws)
    return out


def _rows_for(s: MoeSchedule, ws: dict) -> tuple:
    """The TileRows argument of a grouped GEMM whose schedule skips all-padding warpgroup rows
    (MoeSchedule.skip_pad_halves) or computes a half tile (MoeFp8Schedule.half_tile_last):
    its kernel's tile_rows variant (MoeSchedule.reads_tile_rows), else nothing."""
    return (ws["tile_rows"],) if s.reads_tile_rows else ()


def _pad4(n: int) -> int:
    """n rounded up to a multiple of 4: f32 rows of 16 bytes' multiple (TMA row pitches)."""
    return -(-n // 4) * 4


# The fp8 GEMMs' weight-scale operands derived from the caller's scales (_scale_operand): a
# per-tensor or per-expert scale broadcast to blocks and/or, for the shared-memory-scale GEMMs
# (smem_scales: 16-byte TMA boxes along K), block scales with K/128 zero-padded to a multiple
# of 4 (Qwen3-30B-A3B's down: I/128 = 6; DeepSeek-V2-Lite's and Qwen1.5-MoE's: 11). Made in
# one copy per scale tensor and version and kept in argus.ops.weight_cache (its invariant: the
# same scale object, by weak reference, and version counter; an in-place update, load_state_dict's
# copy_, bumps it; not seen: a write through `scale.data`), so a model's layers derive them
# once, not on every call, and a call keeps the addresses its replay (_run) keys on. Any
# scale tensor is kept, not only parameters: scales are never activations, and a freed one's
# entry goes at the next lookup. Nothing is used or kept while a CUDA graph is captured (the
# graph captures the copy, which each replay runs again from the scales' current values) or
# while torch.compile traces.
_SCALES = DerivedCache("ops.moe: fp8 weight scales broadcast / 16-byte pitched")


def _scale_operand(scale, E: int, n: int, k: int, pitched: bool):
    """(operand, kept): a weight scale [E, n/128, k/128] as an fp8 GEMM reads it, its K/128
    padded to a multiple of 4 when `pitched` (the smem_scales GEMMs' 16-byte row pitches;
    the padding columns are zero and never applied). Block scales already in that form are
    the caller's tensor, read in place (every update seen); any other form is derived once per
    scale object and version (_derive_scale, one copy) and kept in _SCALES. `kept`: the
    operand is the caller's tensor or a kept one, so a repeated call with the same scales,
    unchanged, gets the same tensor (False while a graph is captured: a new copy each call)."""
    kb = k // GROUP
    block = (E, n // GROUP, kb)
    width = _pad4(kb) if pitched else kb
    if tuple(scale.shape) == block and width == kb:
        return scale, True
    # the scale's address in `what`: views of one stacked tensor (one per layer, one version
    # counter) are entries of their own instead of replacing each other as "earlier versions"
    what = ("fp8 weight scale", block, width, scale.data_ptr())
    made = _SCALES.get(scale, what)
    if made is not None:
        return made, True
    made = _derive_scale(scale, block, width)
    _SCALES.put(scale, what, made)
    return made, _SCALES.get(scale, what) is made


def _derive_scale(scale, block: tuple, width: int):
    """scale (one element, [E] or block-shaped) broadcast to `block` [E, n/128, k/128] in a
    [E, n/128, width] float32 tensor, the columns past k/128 zero: one copy, broadcast and
    padding together."""
    import torch

    kb = block[-1]
    made = torch.empty(*block[:-1], width, dtype=torch.float32, device=scale.device)
    src = scale.detach()   # a parameter's: the kept copy records no autograd history
    made[..., :kb] = src if tuple(src.shape) == block else src.reshape(-1, 1, 1)
    if width > kb:
        made[..., kb:] = 0.0
    return made


def _weight_scales(scales, layer: Layer) -> tuple:
    """(s13 [E, 2, I/128, H/128 or padded], s2 [E, H/128, I/128 or padded], kept): the fp8
    gate-up's and down's weight-scale operands (_scale_operand, each padded when its GEMM
    reads its scales through shared memory) and whether both are the same tensors a repeated
    call gets."""
    E, H, inter = layer.experts, layer.hidden, layer.inter
    w13_scale, w2_scale = scales
    s13, kept13 = _scale_operand(w13_scale, E, 2 * inter, H, layer.schedule.smem_scales)
    s2, kept2 = _scale_operand(w2_scale, E, H, inter, layer.down.smem_scales)
    return s13.view(E, 2, inter // GROUP, s13.shape[-1]), s2, kept13 and kept2


def _fp8_gemms(x, w13, w2, operands, layer: Layer, run, ws: dict) -> None:
    """The fp8 expert GEMMs into ws["y"]: x quantized (1x128) on its way into the padded
    layout, the block-scaled gate-up into h (bf16, silu(gate) * up from fp32), h quantized
    (1x128), the block-scaled down into y. Padding rows are computed like any row and never
    read (their scales are never written either: NaN in the interpreter). With the gate-up's
    MoeFp8Schedule.quantize_out the gate-up's epilogue quantizes h itself (hq and hs, the
    same bits), so there is no bf16 h and no quantize_1x128 launch. `operands`: the weight
    scales as the GEMMs read them (_weight_scales)."""
    E, H, inter = layer.experts, layer.hidden, layer.inter
    s13, s2 = operands[:2]
    tile_expert, tiles, M = ws["tile_expert"], ws["tiles"], layer.padded_rows
    up, down = layer.schedule.smem_scales, layer.down.smem_scales
    run(permute_quantize_kernel(layer.top_k, k_major=up),
        x.view(layer.tokens, H // GROUP, GROUP), ws["pos"], ws["xq"].view(M, H // GROUP, GROUP),
        ws["xs"])
    # quantize_out: the gate-up's epilogue writes h in e4m3 and its 1x128 scales itself (in
    # the down's layout), no bf16 h and no quantize_1x128 launch
    fused = layer.schedule.quantize_out
    outs = (ws["hq"], ws["hs"].view(M, -1) if down else ws["hs"]) if fused else (ws["h"],)
    # skip_pad_halves / half_tile_last: a GEMM's tile_rows variant, TileRows after tiles
    skip, skip_down = layer.schedule.reads_tile_rows, layer.down.reads_tile_rows
    rows, rows_down = _rows_for(layer.schedule, ws), _rows_for(layer.down, ws)
    # scheduler="dynamic": the kernel's work counter last (one word per stream, shared by the
    # two GEMMs: each launch leaves it zero for the next in stream order; dynamic_walk)
    dyn, dyn_down = (t.scheduler == "dynamic" for t in (layer.schedule, layer.down))
    work = (work_word(x.device),) if dyn else ()
    work_down = (work_word(x.device),) if dyn_down else ()
    if up:   # K-major activation scales, weight scales 16-byte pitched (smem_scales)
        run(grouped_gemm_fp8_smem_kernel(True, fused, down, skip, dyn), ws["xq"],
            w13.view(E, 2, inter, H), ws["xs"].view(M, -1), s13, tile_expert, tiles, *rows,
            *outs, *work, s=layer.schedule)
    else:
        run(grouped_gemm_fp8_kernel(True, fused, down, skip, dyn), ws["xq"],
            w13.view(E, 2, inter, H), ws["xs"], s13, tile_expert, tiles, *rows, *outs,
            *work, s=layer.schedule)
    if not fused:
        run(quantize_1x128_kernel(ag.bf16, k_major=down), ws["h"].view(M, inter // GROUP, GROUP),
            ws["hq"].view(M, inter // GROUP, GROUP), ws["hs"])
    if down:
        run(grouped_gemm_fp8_smem_kernel(False, tile_rows=skip_down, dynamic=dyn_down),
            ws["hq"], w2, ws["hs"].view(M, -1), s2, tile_expert, tiles, *rows_down, ws["y"],
            *work_down, s=layer.down)
    else:
        run(grouped_gemm_fp8_kernel(False, tile_rows=skip_down, dynamic=dyn_down), ws["hq"],
            w2, ws["hs"], s2, tile_expert, tiles, *rows_down, ws["y"], *work_down,
            s=layer.down)


@functools.lru_cache(maxsize=256)
def _layer(T: int, H: int, inter: int, E: int, top_k: int,
           schedule: MoeSchedule | tuple[MoeSchedule, MoeSchedule] | None,
           fp8: bool = False, card: str | None = None) -> Layer:
    """The Layer of a call's shapes (cached: choosing the decode schedules costs more host
    time than a launch); fp8: e4m3 weights (MoeFp8Schedule, no decode form yet), the default
    schedule fp8_schedule_for's on `card` (the op's: its x's, card_of)."""
    down = None
    if isinstance(schedule, tuple):   # (gate-up, down): each GEMM its own (a bench's variants)
        schedule, down = schedule
    given = [t for t in (schedule, down) if t is not None]
    if any(isinstance(t, MoeFp8Schedule) != fp8 for t in given):
        raise LaunchError(f"{_WHO}: schedule {given} does not fit "
                          f"{'e4m3' if fp8 else 'bfloat16'} weights: the fp8 grouped GEMM "
                          f"takes MoeFp8Schedule, the bf16 one MoeSchedule",
                          fix="pass MoeFp8Schedule(...) with e4m3 weights" if fp8 else
                          "pass MoeSchedule(...) with bfloat16 weights")
    if fp8 and schedule is not None and not schedule.gate_up_fits:
        raise LaunchError(f"{_WHO}: the gate-up GEMM's {schedule.bn}-row B tile is two "
                          f"halves (gate, up) that must each lie in one 128-row weight-scale "
                          f"block: bn/2 must divide 128",
                          fix="use bn=256 with n_split=2 (the prefill default), bn=128 or bn=64")
    if fp8:
        return Layer(T, H, inter, E, top_k,
                     schedule or fp8_schedule_for(T, top_k, E, card), down)
    elif schedule is None and T <= DECODE_MAX_TOKENS:
        schedule, down = decode_schedules(T, top_k, E, H, inter)
    elif schedule is None:
        schedule = schedule_for(T, top_k, E, H)
    return Layer(T, H, inter, E, top_k, schedule, down)


def _addresses(*tensors) -> tuple:
    """What a replayed call's launch plans depend on beyond its Layer: each argument's address
    and dtype (shapes follow from the Layer; x, the logits, the weights and the routing are
    contiguous when replayed)."""
    return tuple(None if t is None else (t.data_ptr(), t.dtype) for t in tensors)


def _check_out(x, out) -> None:
    import torch

    if not isinstance(out, torch.Tensor):
        raise LaunchError(f"{_WHO}: out must be a torch.Tensor, got {type(out).__name__}")
    if out.device != x.device or out.dtype != torch.bfloat16 or \
            tuple(out.shape) != tuple(x.shape) or not out.is_contiguous():
        raise LaunchError(f"{_WHO}: out is {out.dtype} {tuple(out.shape)} on {out.device}"
                          f"{'' if out.is_contiguous() else ', not contiguous'}; it must be a "
                          f"contiguous bfloat16 tensor shaped like x {tuple(x.shape)} on "
                          f"{x.device}", fix="torch.empty_like(x, dtype=torch.bfloat16)")


def _run(x, w13, w2, router_logits, top_k, renormalize, scoring, activation, topk_ids,
         topk_weights, bias, num_expert_group, topk_group, routed_scaling_factor, schedule,
         interpret=False, out=None, w13_scale=None, w2_scale=None):
    """The layer, written into `out` when given. A call like an earlier one on the same
    stream (the same shapes, options and argument addresses, `out` included: a decode loop
    over static buffers, a benchmark) replays that call's prepared launch plans:
    the host cost of one cuLaunchKernelEx per kernel instead of the per-launch argument
    checks: decode-sized layers are short next to their host time (Qwen3-30B-A3B at T = 1 on
    the H200: 36 us of expert GEMMs in a 615 us layer of ten launches)."""
    import torch

    T, H = x.shape
    E, two_i, _ = w13.shape
    fp8 = w13_scale is not None
    # the fp8 default's card: x's device's class (one dict lookup a call after the first)
    card = card_of(x.device) if fp8 and schedule is None else None
    layer = _layer(T, H, two_i // 2, E, top_k, schedule, fp8, card)
    if T == 0:
        return torch.empty(0, H, dtype=torch.bfloat16, device=x.device)
    x = x.contiguous()
    if topk_ids is None:
        router_logits = router_logits.contiguous()
    ws = _workspace(layer, x.device, interpret)
    if topk_ids is None and scoring == "sigmoid" and bias is None:   # no correction bias
        if "zero_bias" not in ws:
            ws["zero_bias"] = torch.zeros(E, dtype=torch.float32, device=x.device)
        bias = ws["zero_bias"]
    # only a caller's output buffer is recorded: the plans bind raw pointers (no tensor is
    # kept), and a fresh output's address is the allocator's choice (module docstring)
    replayable = out is not None
    operands = None
    if fp8:
        # the weight scales as the GEMMs read them (_weight_scales), before the lookup: the
        # key holds the addresses the plans read. Block scales in the GEMM's form are the
        # caller's tensors (read in place: a replay sees every update); broadcast or padded
        # ones are kept per scale object and version (_scale_operand), so an unchanged scale
        # gives the same tensor at the same address and the call replays, while an in-place
        # update (a version bump) derives a new one, made while the old is still kept, hence
        # at another address: the key misses and the call launches and records anew. Any plan
        # a key finds reads its derived scales at an address that holds, right now, the
        # derivation from the current scales. Not kept (a copy made per call): not replayed.
        operands = _weight_scales((w13_scale, w2_scale), layer)
        replayable = replayable and operands[2]
    if out is None:
        out = torch.empty(T, H, dtype=torch.bfloat16, device=x.device)
    programs, key = ws.get("programs"), None
    # replayable: the kernels read exactly these tensors (no conversion makes a new one)
    if replayable and programs is not None and (topk_ids is None or (
            topk_ids.dtype == torch.int32 and topk_weights.dtype == torch.float32
            and topk_ids.is_contiguous() and topk_weights.is_contiguous())):
        key = (_addresses(x, w13, w2, router_logits, topk_ids, topk_weights, bias, out,
                          *(operands[:2] if fp8 else (None, None))),
               renormalize, scoring, num_expert_group, topk_group, routed_scaling_factor)
        plans = programs.get(key)
        if plans is not None:
            programs.move_to_end(key)
            for plan in plans:
                plan(stream=ws["stream"])
            return out
    record = [] if key is not None else None
    run = _launcher(interpret, record)
    if topk_ids is None:
        topk_ids, topk_weights = route(router_logits, layer, renormalize=renormalize,
                                       scoring=scoring, bias=bias,
                                       num_expert_group=num_expert_group or 0,
                                       topk_group=topk_group or 0,
                                       routed_scaling_factor=routed_scaling_factor,
                                       interpret=interpret, run=run, ws=ws)
    experts(x, w13, w2, topk_ids, topk_weights, layer, interpret=interpret, run=run, ws=ws,
            out=out, scales=(w13_scale, w2_scale) if fp8 else None, operands=operands)
    if record and all(plan is not None for plan in record):
        programs[key] = tuple(record)
        if len(programs) > _PROGRAMS:
            programs.popitem(last=False)
    return out


def moe(x, w13, w2, router_logits, top_k: int, *, renormalize: bool = True,
        scoring: str = "softmax", activation: str = "silu", topk_ids=None, topk_weights=None,
        e_score_correction_bias=None, num_expert_group: int | None = None,
        topk_group: int | None = None, routed_scaling_factor: float = 1.0,
        schedule: MoeSchedule | tuple[MoeSchedule, MoeSchedule] | None = None, out=None,
        w13_scale=None, w2_scale=None):
    """The MoE layer's output [T, H] (bf16); see the module docstring. With `out` (a
    contiguous bf16 [T, H] buffer) the result is written there and returned, and a repeated
    call on the same buffers replays its launches. `schedule` overrides the GEMMs' schedules
    (one for both, or a (gate-up, down) pair with the same token tile). fp8: w13 and w2 in
    float8_e4m3fn with their float32 dequantization scales w13_scale and w2_scale, per tensor
    (one element or [E]) or per 128x128 block ([E, 2I/128, H/128], [E, H/128, I/128]); see
    the module docstring."""
    _check(x, w13, w2, router_logits, top_k, scoring, activation, topk_ids, topk_weights,
           e_score_correction_bias, num_expert_group, topk_group)
    _check_scales(x, w13, w2, w13_scale, w2_scale)
    if out is not None:
        _check_out(x, out)
    import torch

    if out is not None or schedule is not None or not torch.compiler.is_compiling():
        # eager (and CUDA-graph capture): the implementation itself, without the custom op's
        # dispatch cost; torch.compile traces the custom op below
        return _run(x, w13, w2, router_logits, top_k, renormalize, scoring, activation,
                    topk_ids, topk_weights, e_score_correction_bias, num_expert_group,
                    topk_group, routed_scaling_factor, schedule, out=out,
                    w13_scale=w13_scale, w2_scale=w2_scale)
    return _op()(x, w13, w2, router_logits, top_k, renormalize, scoring, activation, topk_ids,
                 topk_weights, e_score_correction_bias, num_expert_group or 0, topk_group or 0,
                 float(routed_scaling_factor), w13_scale, w2_scale)


def reference(x, w13, w2, topk_ids, topk_weights):
    """The layer in float64 torch for given routing (tests and the benchmark's check)."""
    import torch

    x64, out = x.double(), torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    inter = w13.shape[1] // 2
    for e in range(w13.shape[0]):
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        w = w13[e].double()
        gate, up = x64[tok] @ w[:inter].T, x64[tok] @ w[inter:].T
        y = (gate * torch.sigmoid(gate) * up) @ w2[e].double().T
        out.index_add_(0, tok, y * topk_weights[tok, slot].double()[:, None])
    return out


def reference_fp8(x, w13, w2, w13_scale, w2_scale, topk_ids, topk_weights):
    """The fp8 layer in float64 torch for given routing, with the kernels' quantization: x
    quantized 1x128 (argus.ops.quantize_fp8.reference, bit for bit the permute's), the e4m3
    weights times their scales (any of the accepted forms), silu(gate) * up rounded to bf16
    (as the gate-up stores h) and quantized 1x128 again, the down GEMM, the weighted sum. What
    it leaves to the kernels is fp32 accumulation and the bf16 rounding of y and out."""
    import torch

    from argus.ops.quantize_fp8 import reference as quantize

    def dequantized(rows):
        q, sc = quantize(rows)
        return (q.double() * sc.double()[:, :, None]).view(rows.shape[0], -1)

    E, two_i, H = w13.shape
    inter = two_i // 2
    s13 = _block_scales(w13_scale, E, two_i, H).double()
    s2 = _block_scales(w2_scale, E, H, inter).double()
    x64 = dequantized(x)
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(E):
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        w = w13[e].double() * s13[e].repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)
        gate, up = x64[tok] @ w[:inter].T, x64[tok] @ w[inter:].T
        h = dequantized((gate * torch.sigmoid(gate) * up).to(torch.bfloat16))
        d = w2[e].double() * s2[e].repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)
        out.index_add_(0, tok, (h @ d.T) * topk_weights[tok, slot].double()[:, None])
    return out


# ----------------------------------------------------------------------------- custom op
# ----------------------------------------------------------------------------- custom op

_OP = None


def _op():
    """torch.ops.argus.moe, registered once: opaque to torch.compile (it calls the fake for
    shapes); CUDA graphs capture its launches like any kernel on the current stream."""
    global _OP
    if _OP is None:
        _OP = _register()
    return _OP


def _register():
    import torch

    try:  # registered already (this module loaded twice): use that one
        return torch.ops.argus.moe.default
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op(
        "argus::moe", mutates_args=(),
        schema="(Tensor x, Tensor w13, Tensor w2, Tensor? router_logits, int top_k, "
               "bool renormalize, str scoring, str activation, Tensor? topk_ids, "
               "Tensor? topk_weights, Tensor? e_score_correction_bias, int num_expert_group, "
               "int topk_group, float routed_scaling_factor, Tensor? w13_scale=None, "
               "Tensor? w2_scale=None) -> Tensor")
    def moe_op(x, w13, w2, router_logits, top_k, renormalize, scoring, activation, topk_ids,
               topk_weights, e_score_correction_bias, num_expert_group, topk_group,
               routed_scaling_factor, w13_scale=None, w2_scale=None):
        return _run(x, w13, w2, router_logits, top_k, renormalize, scoring, activation,
                    topk_ids, topk_weights, e_score_correction_bias, num_expert_group,
                    topk_group, routed_scaling_factor, None, w13_scale=w13_scale,
                    w2_scale=w2_scale)

    @moe_op.register_fake
    def _(x, w13, w2, router_logits, top_k, renormalize, scoring, activation, topk_ids,
          topk_weights, e_score_correction_bias, num_expert_group, topk_group,
          routed_scaling_factor, w13_scale=None, w2_scale=None):
        return x.new_empty(x.shape)

    return moe_op


if "torch" in sys.modules:
    _op()
