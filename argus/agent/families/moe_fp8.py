"""The fp8 MoE family: the block-scaled e4m3 expert GEMMs of argus.ops.moe
(argus/kernels/moe_fp8.py), tuned as the one MoeFp8Schedule both grouped GEMMs share (the
schedule `moe(..., w13_scale=..., w2_scale=..., schedule=s)` accepts). A task is
`moe_fp8_task(T, H, I, E, top_k, card=...)`: e4m3 weights with 128 x 128 block scales
(DeepSeek-V3's weight_scale_inv), activations quantized 1x128 on their way into the layout, on
a card class (argus.ops.moe CARD_H100 / CARD_H200, the task's `card` option: fp8_schedule_for's
rule depends on it; unnamed, argus.ops.moe.default_card's: the current CUDA device's class,
else the H100 class).

Action space (flat parameters, one MoeFp8Schedule): the tile (bm = 64 per consumer warpgroup,
bn), ring stages, the epilogue (registers, or stmatrix + TMA store), CTA pairs sharing the
weight tile (cluster_m), the promotion form (the serial early-release loop; `overlap`: two
partials in turns; `late_release`: the stage released after the promotion's FFMAs; `n_split`
= 2: each K block's wgmma as two bn / 2 halves, the 128 x 256 tile's register plan),
`smem_scales` (the block scales through shared memory beside the operand tiles),
`persistent` (the persistent walk, or one CTA a unit: argus/kernels/moe.py unit_programs) and
`quantize_out` (the gate-up's epilogue writes h in e4m3 plus its 1x128 scales itself: no bf16 h,
no quantize_1x128 launch; n_split = 2 and bn = 256 only). bk is
fixed at 128 e4m3 (one 128-deep scale block a stage); there is no swap-AB decode form and no K
split. `pair_multicast` (same-expert CTA pairs sharing the weight tile) is not searched: measured
slower than the unit grid at DeepSeek-V3 T = 4096 (477 against 503 TFLOP/s) and than the walk at
16384 (833 against 865; H100, 2026-12-06; declared.py MOE_FP8).

Legality is declared, not written as family rules: MoeFp8Schedule's ranges (families/declared.py
MOE_FP8, over MoeSchedule's and the warp-specialized skeleton's it inherits) read by the generic
ScheduleFamily; then the class's own refusals (MoeFp8Schedule._problems: the register budget of
each promotion form, bk = 128, no swap_ab / split_k / pingpong, smem_scales only with the serial
early-release or split loop and no clusters; code schedule_fields), argus.ops.moe's refusals at
the task's shapes (H and I multiples of 128, the gate-up's halves inside one 128-row weight-scale
block: gate_up_fits; code fp8_layer), and the lowering of both grouped GEMMs, whose shared-memory
plan (the ring, the scale stages, the TMA-store staging) is the compiler's (code smem).
argus.ops.moe.fp8_schedule_for's prefill rule is three declared warnings, its thresholds and
forms read from argus/ops/moe.py (`_rule`; no copies here): the tile (decode_threshold: the
128 x 256 split from FP8_BIG_TILE_ROWS rows an expert on average, 64-row tiles below, the fp8
path's "decode" rule as it has no swap-AB form), the grid (unit_grid: one CTA a unit from
FP8_BIG_TILE_ROWS up to FP8_UNIT_GRID_MAX_ROWS rows an expert, the persistent walk otherwise)
and the gate-up's quantize (gate_up_quantize: quantize_out up to FP8_UNIT_GRID_MAX_ROWS,
the separate quantize above), each at the task's card: on the H100 class the band from
FP8_BIG_TILE_ROWS up to FP8_UNIT_GRID_MAX_ROWS is the unit grid (FP8_PREFILL_UNIT_GRID), on the
H200 class the walk (FP8_PREFILL_WALK_FUSED_QUANTIZE: the unit grid measured slower there). The
start point is fp8_schedule_for's schedule at the task's card; the naive point (64 x 64, 2
stages, the walk) quantizes separately.

Cost model (an estimate, calibrated): each grouped GEMM by the GEMM cost model
(cost_model.gemm_estimate at the fp8 tensor rate: a 128-deep e4m3 K step moves the bytes of a
64-deep bf16 one in half the time) over the padded rows routing produces under uniform routing,
times a promotion factor per form (serial / overlap / late release / N-split, global or shared
memory scales, epilogue), plus the permute, quantize and combine as memory-bound glue. The
factors are calibrated so that the estimate at DeepSeek-V3 T = 16384 (E 256, k 8, H 7168, I 2048)
is the whole layer as measured on an H100 on 2026-12-06 (docs/perf/moe.md, "fp8 grouped GEMM:
the N-split and smem scales measured"): split_smem_tma 13.441 ms, split_smem 14.844, split_tma
16.182, split 16.703, the 128 x 128 (FP8_PREFILL) 19.133, its smem-scale form 23.329; overlap at
the 128 x 128 by the H200 run of 2026-12-02 (18.896 against 19.324 ms). Forms not measured take
the nearest measured one's factor times the measured effect of what differs (the TMA store's
ratio from the split's pair of the same scale path; late release the serial factor: no MoE
measurement tells them apart). The structural model is the persistent walk's; one CTA a unit
(persistent=False) multiplies the GEMMs by a grid factor (`grid_factor`): the grid / walk ratio
of the split tile's two GEMM kernels measured alone (GRID_MEASURED_US: the alternated-rounds
pair where measured, else the plain runs' means) at T = 1024, 2048, 4096 (one point: 0.843),
8192 (1.026) and 16384 (1.044), read at the walk's units a CTA (`units_per_cta`, in 128 x 256
tiles of output), log-linear between, the nearest outside. An estimate fitted to those points:
it prefers the grid from 32 to 128 rows an expert at DeepSeek-V3 and the walk from 256, as
fp8_schedule_for does on the H100 class. quantize_out drops quantize_1x128 from the glue (h
read in bf16 and written in e4m3, one launch), has the gate-up write e4m3 from registers in the
structural model, and multiplies the GEMMs by `quantize_out_factor`, fitted so they move by the
fused / separate ratio of the GEMM kernels measured in the same alternated run
(QUANTIZE_OUT_MEASURED_US: +0-2% at one m-tile an expert, +4-8% at T >= 8192, on each grid).
With these the estimate's best of the split's four measured forms (walk or grid, either
quantize) is fp8_schedule_for's on the H100 class at T = 1024, 4096, 8192 and 16384 and the
measured best of the alternated run (at 16384 a 0.3% tie: the fused walk's layer 14.304
against 14.346 ms, though its GEMMs measured +7.6%). Off the calibration point the structural
model (padding, waves, stages, tile) moves the estimate; its ordering of unmeasured points is a
model's, not a measurement's. Each GEMM is at least its experts' weights read once from HBM
(`_structural`: the GEMM model alone shares B across m-tiles), which at 32 and 64 rows an
expert puts the split 128 x 256 ahead of FP8_SMALL, as measured (T = 1024: 4.090 against
4.244 ms, the grids 3.761 against 4.147).

The cost model is per card class, chosen by the task's card (`task_card`). The H100 class's is
the fit above: its factors fitted to the H100 runs (the overlap ratio excepted, an H200 run's;
the structural model's hardware figures are cost_model.H200's). The H200 class's
(`promotion_scale`, `_h200_grid_knots`, `_h200_quantize_out_knots`) is fitted to the H200's
whole-layer table of 2026-12-06 (H200_LAYER_TFLOPS; docs/perf/moe.md "fp8 prefill rule per
card: the H200 measured": the split's walk, grid and both fused forms and FP8_SMALL at
DeepSeek-V3, T = 1024-16384): the H100's promotion factors times one scale, so the walk's
estimate at T = 16384 is its H200 measurement (the other forms' ratios to each other stay the
H100's: the H200 run measured the split smem TMA tile only); the grid and quantize_out factors
fitted so the estimate's grid / walk and fused / separate ratios are the measured layers' at
each T (the mean where T = 1024-4096 share one units-a-CTA point; the grid's fused form, measured
up to 4096 only, takes that point's factor beyond). Fitted to the layer, where the H100's
grid and quantize_out factors are fitted to the GEMM kernels alone: on the H200 the layer's
differences lie partly outside the kernels' profiled durations (docs/perf/moe.md), and the
rule is chosen by the layer. With it the H200 estimate orders every pair of the table measured
more than 3% apart as measured, and its best of the split's four forms is fp8_schedule_for's on
the H200 class at each measured T (the walk with quantize_out from 32 to 128 rows an expert, the
walk above). Its absolute times off T = 16384 are the structural model's, not fitted: the walk
at T = 1024 / 4096 / 8192 4.58 / 4.78 / 7.26 ms estimated against 3.02 / 5.05 / 8.03 measured
(the H100's model: 4.26 / 4.46 / 6.77 against its alternated run's 4.33 / 6.04 / 8.25). The
torch baseline is each card's measured torch._grouped_mm rate (grouped_mm_tflops).

Evaluation: `run` calls argus.ops.moe's expert path with the schedule and the weight scales (the
interpreter on CPU tensors, the compiled kernels on CUDA ones), checked against
argus.ops.moe.reference_fp8 (float64 with the kernels' quantization).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec
from argus.errors import Diagnostic

# the parameters: MoeFp8Schedule's fields a tuner chooses (consumers and the register split
# follow from bm)
FIELDS = ("bm", "bn", "stages", "epilogue", "cluster_m", "overlap", "late_release", "n_split",
          "smem_scales", "persistent", "quantize_out")


def _fp8_schedule() -> type:
    from argus.kernels.moe_fp8 import MoeFp8Schedule

    return MoeFp8Schedule


def _fields(values: dict[str, Any]) -> dict[str, Any]:
    """64 rows per consumer warpgroup; one warpgroup takes 240 registers (its producer 40), as
    argus/kernels/moe_fp8.py FP8_SMALL."""
    consumers = max(1, values["bm"] // 64)
    return {**values, "consumers": consumers,
            **({"consumer_regs": 240, "producer_regs": 40} if consumers == 1 else {})}


SCHEDULE = Part(_fp8_schedule, exposed=FIELDS,
                search=(("bm", (64, 128)), ("bn", (64, 128, 256)),
                        ("stages", (2, 3, 4, 5, 6, 8)), ("epilogue", ("direct", "tma")),
                        ("cluster_m", (1, 2)), ("overlap", (False, True)),
                        ("late_release", (False, True)), ("n_split", (1, 2)),
                        ("smem_scales", (False, True)), ("persistent", (False, True)),
                        ("quantize_out", (False, True))),
                derive=_fields)


def schedule_of(task: TaskSpec, params: dict[str, Any]):
    """The MoeFp8Schedule of a parameter dict (ValueError: the class's reasons)."""
    return MoeFp8Family().schedules(task, params)[0]


def params_of(schedule) -> dict[str, Any]:
    """The family's parameters of a MoeFp8Schedule."""
    return {name: getattr(schedule, name) for name in FIELDS}


def task_card(task: TaskSpec) -> str:
    """The card class a task's rule is read at: its `card` option (moe_fp8_task records one),
    else argus.ops.moe.default_card's (a task written before the option): card_or_default,
    as TaskSpec.features reads it."""
    from argus.ops import moe_module

    return moe_module.card_or_default(task.opts.get("card"))


def _rule(d: dict[str, int], card: str) -> dict[str, Any]:
    """argus.ops.moe's fp8 prefill rule at these shapes on the card class, read from
    argus/ops/moe.py (the one source of its thresholds): the rows an expert gets on average
    (fp8_rows_per_expert), the thresholds FP8_BIG_TILE_ROWS and FP8_UNIT_GRID_MAX_ROWS, whether
    the card's rule runs the unit grid between them (fp8_unit_grid_pays) and the name of its
    form there, and fp8_schedule_for's bm and persistent at the task, and whether its gate-up
    quantizes h itself (quantize_out, with the n_split and bn that form takes); the tiles'
    rows (FP8_PREFILL_SPLIT_SMEM_TMA's, FP8_SMALL's) for the warnings' text."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, FP8_SMALL
    from argus.ops import moe_module

    chosen = moe_module.fp8_schedule_for(d["T"], d["top_k"], d["E"], card)
    grid = moe_module.fp8_unit_grid_pays(card)
    return {"card": card, "unit_grid_pays": grid,
            "band_form": "FP8_PREFILL_UNIT_GRID" if grid else "FP8_PREFILL_WALK_FUSED_QUANTIZE",
            "rows_per_expert": moe_module.fp8_rows_per_expert(d["T"], d["top_k"], d["E"]),
            "big_tile_rows": moe_module.FP8_BIG_TILE_ROWS,
            "unit_grid_max_rows": moe_module.FP8_UNIT_GRID_MAX_ROWS,
            "big_tile_bm": FP8_PREFILL_SPLIT_SMEM_TMA.bm, "small_tile_bm": FP8_SMALL.bm,
            "rule_bm": chosen.bm, "rule_persistent": chosen.persistent,
            "rule_quantize_out": chosen.quantize_out, "rule_n_split": chosen.n_split,
            "rule_bn": chosen.bn}


# --------------------------------------------------------------------------- the calibration

# DeepSeek-V3's MoE layer at T = 16384 and what each measured schedule's whole layer took
# (H100, 2026-12-06, `scripts/gpu_moe_bench.py --fp8 --tokens 16384`, docs/perf/moe.md)
CALIBRATION = {"T": 16384, "H": 7168, "I": 2048, "E": 256, "top_k": 8}
MEASURED_LAYER_MS = {
    # (promotion, smem_scales, epilogue): (the bench's variant, ms)
    ("serial", False, "direct"): ("plain128", 19.133),
    ("serial", True, "direct"): ("smem", 23.329),
    ("split", False, "direct"): ("split", 16.703),
    ("split", False, "tma"): ("split_tma", 16.182),
    ("split", True, "direct"): ("split_smem", 14.844),
    ("split", True, "tma"): ("split_smem_tma", 13.441),
}
# overlapped promotion against the serial 128 x 128 at the same size (H200, 2026-12-02:
# ours-fp8@overlap 18.896 ms, the default 19.324 ms; docs/perf/moe.md)
OVERLAP_RATIO = 18.896 / 19.324

# One CTA a unit (persistent=False) against the persistent walk: the two grouped GEMM kernels
# alone (gate-up + down, us) of the split 128 x 256 smem-scale TMA-store tile at DeepSeek-V3
# (H100, 2026-12-06, `scripts/gpu_moe_bench.py --fp8`, docs/perf/moe.md): T: ((walk, grid) of
# the run in alternated rounds (`--rounds 3`: the paths alternate and rotate which goes first,
# the median round), or None; (walk runs, grid runs) in plain order). The grid wins where each
# CTA of the walk would take few units (the hardware hands the grid's CTAs out in order, so an
# expert's m-tiles run together and share its weight tiles in L2), the walk where each takes
# many (its CTA start, barriers and the ring's first fill, paid once over the walk). At T =
# 1024, 2048 and 4096 every expert has one 128-row m-tile, so the three share one units-a-CTA
# point. At T = 8192 (256 rows an expert) the plain-order runs had the grid ahead (7355 against
# 7751 us by their means) and the alternated run the walk (6998 against 7183; the layer 8.247
# against 8.666 ms): argus/ops/moe.py's rule (FP8_UNIT_GRID_MAX_ROWS) follows the alternated
# run, and so does the fit (`_grid_knots`)
GRID_MEASURED_US = {
    1024: ((3932, 3582), ((3843,), (3448,))),
    2048: (None, ((4500,), (3853,))),
    4096: ((6443, 4901), ((5937,), (4819,))),
    8192: ((6998, 7183), ((7656, 8065, 8285), (7047, 7836))),
    16384: ((11724, 12245), ((11100, 11023, 11465, 11228), (12444, 11736, 11710, 12169))),
}

# The gate-up quantizing h itself (quantize_out) against the separate quantize_1x128: the same
# run's two GEMM kernels alone (us, alternated rounds, H100, 2026-12-06, `scripts/
# gpu_moe_bench.py --fp8 --rounds 3`, DeepSeek-V3), the split smem TMA tile on each grid:
# persistent: {T: (separate, fused)}. The fused epilogue (a row amax over the 128 columns, e4m3
# stored from registers) costs the gate-up little at one m-tile an expert and 4-8% at T >= 8192
QUANTIZE_OUT_MEASURED_US = {
    False: {1024: (3582, 3584), 4096: (4901, 4916), 8192: (7183, 7610), 16384: (12245, 12867)},
    True: {1024: (3932, 4011), 4096: (6443, 6368), 8192: (6998, 7267), 16384: (11724, 12616)},
}


def _calibration_schedule(key: tuple[str, bool, str]):
    """The schedule the bench ran for a measured form (scripts/gpu_moe_bench.py fp8_variants)."""
    from argus.kernels.moe_fp8 import (FP8_PREFILL, FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_SMEM,
                                       FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA)

    return {("serial", False, "direct"): FP8_PREFILL,
            ("serial", True, "direct"): dataclasses.replace(FP8_PREFILL, smem_scales=True),
            ("split", False, "direct"): FP8_PREFILL_SPLIT,
            ("split", False, "tma"): FP8_PREFILL_SPLIT_TMA,
            ("split", True, "direct"): FP8_PREFILL_SPLIT_SMEM,
            ("split", True, "tma"): FP8_PREFILL_SPLIT_SMEM_TMA}[key]


def form(s) -> tuple[str, bool, str]:
    """(promotion, smem_scales, epilogue) of a schedule: the key of its promotion factor."""
    promotion = "split" if s.n_split == 2 else "overlap" if s.overlap else \
        "late" if s.late_release else "serial"
    return promotion, bool(s.smem_scales), s.epilogue


def _structural(d: dict[str, int], s) -> tuple[float, float, int, str]:
    """(gate-up ms, down ms, padded rows, bound) of the GEMM cost model for schedule s: the
    fp8 rate as a bf16 GEMM of half the depth (a 128-deep e4m3 step is a 64-deep bf16 step's
    bytes, in half its tensor time), no spill (the class's register budget refuses those).
    The hardware figures are the cost model's (H200) while the calibration run was an H100's:
    the promotion factors absorb the difference at DeepSeek-V3 T = 16384 only, so away from it
    the estimate is an H200 model scaled by H100 ratios, not either card's time.
    Each GEMM takes at least its experts' weights streamed once from HBM (e4m3: 2I x H bytes an
    expert for the gate-up, H x I for the down): the GEMM model shares one B across all m-tiles,
    where each expert's m-tiles read their own, so with one m-tile an expert (DeepSeek-V3 up to
    T = 4096 for 128-row tiles, 2048 for 64-row ones) the weights bound the kernel whatever its
    tile. Not binding at the T = 16384 calibration point (2.6 ms of weights against 7.8 ms of
    the split's modelled GEMMs before the promotion factor)."""
    hw = cost_model.H200
    T, H, I, E, k = d["T"], d["H"], d["I"], d["E"], d["top_k"]
    entries = T * k
    touched = E * (1 - (1 - k / E) ** T)       # expected experts with a token (uniform)
    pad = s.pad
    rows = int(sum(math.ceil(entries / touched / pad) * pad for _ in range(round(touched))))
    p = {"bm": s.bm, "bn": s.bn, "bk": 64, "stages": s.stages, "consumers": s.consumers,
         "persistent": True, "num_sms": hw.sms, "group_m": s.group_m,
         "cluster_m": s.cluster_m, "epilogue": s.epilogue, "consumer_regs": s.consumer_regs}
    # quantize_out: the gate-up writes h in e4m3 (a byte an element, not bf16's two), stored
    # from registers whatever the epilogue (argus/kernels/moe_fp8.py _quantize_unit)
    fused = {"out_bytes": 1, "epilogue": "direct"} if s.quantize_out else {}
    gate_up = cost_model.gemm_estimate(rows, 2 * I, max(1, H // 2), {**p, **fused},
                                       spills=False)
    down = cost_model.gemm_estimate(rows, H, max(1, I // 2), p, spills=False)
    weights_ms = touched * H * I / hw.hbm_bytes_s * 1e3           # the down's; gate-up twice
    bound = "memory" if 2 * weights_ms > gate_up.ms else gate_up.bound
    return max(gate_up.ms, 2 * weights_ms), max(down.ms, weights_ms), rows, bound


def _glue_ms(d: dict[str, int], quantize_out: bool = False) -> float:
    """The layer's memory-bound rest: x read and quantized into the layout (e4m3), h read and
    quantized (bf16 in, e4m3 out: quantize_1x128; not with quantize_out, where the gate-up's
    epilogue writes h in e4m3 itself and the kernel is not launched), y read and combined into
    the bf16 output; the routing's and these kernels' launches. (The kernels' quantization
    reads and writes; the GEMMs' own reads and writes are in the GEMM model.)"""
    hw = cost_model.H200
    T, H, I, k = d["T"], d["H"], d["I"], d["top_k"]
    entries = T * k
    h_quantize = 0 if quantize_out else entries * I * 3
    moved = T * H * 2 + entries * H + h_quantize + entries * H * 2 + T * H * 2
    launches = 7 if quantize_out else 8
    return (moved / (cost_model.COPY_EFFICIENCY * hw.hbm_bytes_s) + launches * hw.launch_s) * 1e3


@functools.cache
def promotion_factors() -> dict[tuple[str, bool, str], float]:
    """Each measured form's factor: its measured layer time less the modelled glue, over the
    structural GEMM estimate of the schedule the bench ran (so the estimate at the calibration
    point is the measurement)."""
    glue = _glue_ms(CALIBRATION)
    out = {}
    for key, (_, ms) in MEASURED_LAYER_MS.items():
        g, dn, _, _ = _structural(CALIBRATION, _calibration_schedule(key))
        out[key] = (ms - glue) / (g + dn)
    return out


def promotion_factor(key: tuple[str, bool, str]) -> tuple[float, str]:
    """(factor, where it comes from) of a form: measured, or the nearest measured form's times
    the measured effect of what differs."""
    f = promotion_factors()
    if key in f:
        return f[key], "measured"
    promotion, smem, epilogue = key
    # the TMA store's effect as measured on the split of the same scale path
    tma = f[("split", smem, "tma")] / f[("split", smem, "direct")]
    base_key = ("serial", smem, "direct")
    base = f[base_key] * (tma if epilogue == "tma" else 1.0)
    if promotion == "overlap":
        return base * OVERLAP_RATIO, "serial x measured overlap ratio"
    if promotion == "late":
        return base, "serial's (late release not measured apart)"
    return base, "serial x measured TMA-store ratio"


def units_per_cta(d: dict[str, int], s) -> float:
    """The walk's length: both grouped GEMMs' output over routing's padded rows (the structural
    model's), in units of the measured 128 x 256 tile, over 2 x num_sms CTAs (the mean of the
    two GEMMs). Counted in output, not in s's own units: a 64 x 128 unit is a quarter, which
    keeps FP8_SMALL's grid ahead of its walk as measured up to T = 4096 (plain runs). At 8192
    FP8_SMALL's grid measured ahead as well (small_grid 13.490 against 14.999 ms, one plain
    run, 341 of its own units a CTA) where the fit (the split's alternated run: 1.026 there)
    prefers the walk in either count: a miss of the one-tile fit."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as ref

    rows = _structural(d, s)[2]
    return rows * (2 * d["I"] + d["H"]) / (ref.bm * ref.bn) / (2 * s.num_sms)


def grid_ratio(T: int) -> float:
    """GRID_MEASURED_US's grid / walk at size T: the alternated rounds' pair where there is one
    (the least biased: no path always first), else the ratio of the plain runs' means."""
    alternated, (walk, grid) = GRID_MEASURED_US[T]
    if alternated is not None:
        return alternated[1] / alternated[0]
    return (sum(grid) / len(grid)) / (sum(walk) / len(walk))


def _knots(ratios: dict[int, float], s) -> tuple[tuple[float, float], ...]:
    """(log2 units a CTA of schedule s at DeepSeek-V3 T, ratio) of measured sizes, the mean
    ratio where sizes share a point."""
    points: dict[float, list[float]] = {}
    for T, r in ratios.items():
        points.setdefault(math.log2(units_per_cta({**CALIBRATION, "T": T}, s)), []).append(r)
    return tuple((x, sum(r) / len(r)) for x, r in sorted(points.items()))


def _interpolate(knots: tuple[tuple[float, float], ...], units: float) -> float:
    """Linear in log2 of units a CTA between the knots, the nearest one's outside them."""
    x = math.log2(max(units, 1e-9))
    if x <= knots[0][0]:
        return knots[0][1]
    for (x0, r0), (x1, r1) in zip(knots, knots[1:]):
        if x <= x1:
            return r0 + (r1 - r0) * (x - x0) / (x1 - x0)
    return knots[-1][1]


@functools.cache
def _grid_knots() -> tuple[tuple[float, float], ...]:
    """(log2 units a CTA, grid / walk) of GRID_MEASURED_US (`grid_ratio` each size): the mean
    of the sizes that share a point (T = 1024, 2048, 4096: 0.843), 8192's alternated pair
    (1.026) and 16384's (1.044)."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    return _knots({T: grid_ratio(T) for T in GRID_MEASURED_US}, FP8_PREFILL_SPLIT_SMEM_TMA)


def grid_factor(d: dict[str, int], s, card: str | None = None) -> float:
    """The GEMMs' time on one CTA a unit over the walk's (1 for the walk) on a card class
    (None: the H100 class, `fit_card`). The H100's: GRID_MEASURED_US's ratios (`grid_ratio`),
    linear in log2 of units_per_cta between the measured points and the nearest one's outside
    them. An estimate fitted to four points of one tile: it prefers the grid up to 128 rows an
    expert at DeepSeek-V3 (0.843 at 32-128 rows) and the walk from 256 (1.026; 1.044 at 512),
    crossing 1 near 230 rows, as argus/ops/moe.py fp8_schedule_for (FP8_UNIT_GRID_MAX_ROWS)
    does on the H100 class. The H200's: `_h200_grid_knots` (the walk everywhere)."""
    if s.persistent:
        return 1.0
    knots = _h200_grid_knots() if _is_h200(card) else _grid_knots()
    return _interpolate(knots, units_per_cta(d, s))


@functools.cache
def _quantize_out_knots(persistent: bool) -> tuple[tuple[float, float], ...]:
    """(log2 units a CTA, factor) of QUANTIZE_OUT_MEASURED_US on the walk or the grid: each
    size's measured fused / separate GEMM time over the structural model's (the e4m3 write
    from registers, `_structural`), so that the estimate's GEMMs move by the measured ratio at
    each measured size."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as ref

    fused = dataclasses.replace(ref, quantize_out=True)
    ratios = {}
    for T, (separate, fused_us) in QUANTIZE_OUT_MEASURED_US[persistent].items():
        d = {**CALIBRATION, "T": T}
        modelled = sum(_structural(d, fused)[:2]) / sum(_structural(d, ref)[:2])
        ratios[T] = fused_us / separate / modelled
    return _knots(ratios, ref)


def quantize_out_factor(d: dict[str, int], s, card: str | None = None) -> float:
    """The GEMMs' time with the gate-up quantizing h itself over the structural model's (1
    without quantize_out) on a card class (None: the H100 class): the H100's from
    QUANTIZE_OUT_MEASURED_US's ratios on s's grid (`_quantize_out_knots`), the H200's from its
    layers (`_h200_quantize_out_knots`), log-linear in units_per_cta as `grid_factor`. The
    removed quantize_1x128 is in `_glue_ms`."""
    if not s.quantize_out:
        return 1.0
    knots = _h200_quantize_out_knots if _is_h200(card) else _quantize_out_knots
    return _interpolate(knots(bool(s.persistent)), units_per_cta(d, s))


# --------------------------------------------------------------------------- the H200 fit

# DeepSeek-V3's whole fp8 layer (E 256, k 8, H 7168, I 2048) on an NVIDIA H200, TFLOP/s
# (2026-12-06 ~20:25 UTC, tree: git archive of 0bcddc6, `scripts/gpu_moe_bench.py --fp8
# --rounds 3`: every path in each of 3 rounds, the first rotating, the median round;
# docs/perf/moe.md "fp8 prefill rule per card: the H200 measured"), by T and the schedule
# each column ran (`measured_schedule`). The table's `default` column is entered under the
# schedule it was on that tree (the H100 rule: grid_fq up to 128 rows an expert, the walk
# above), so a schedule can have two values at a T, as at T = 4096, measured in two runs
# (separate processes; the grid's two differ by 7.5%). `h200_layer_ms` takes each one's mean.
# The dynamic walk's columns (dyn, dyn + fq) are left out: MoeFp8Schedule.scheduler is not in
# the family's space.
H200_LAYER_TFLOPS = {
    1024: {"grid_fq": (230,), "walk": (239,), "walk_fq": (238,), "grid": (239,),
           "small": (193,)},
    2048: {"grid_fq": (370,), "walk": (375,), "walk_fq": (377,), "grid": (368,),
           "small": (259,)},
    4096: {"grid_fq": (555, 548), "walk": (575, 569), "walk_fq": (590,), "grid": (566, 525),
           "small": (355,)},
    8192: {"walk": (721, 716), "walk_fq": (718,), "grid": (679,), "small": (409,)},
    16384: {"walk": (800, 803), "grid": (778,)},
}


# torch._grouped_mm in bf16 on the dequantized weights, DeepSeek-V3 T = 16384 on an H200
# (2026-12-02 21:13 UTC, tree 72dae26; docs/perf/moe.md "fp8 block-scaled and Mixtral"):
# 313 TFLOP/s; the H100's 309 beside the calibration run
def grouped_mm_tflops(card: str | None) -> float:
    """torch._grouped_mm's measured bf16 rate (TFLOP/s) on a card class, keyed by argus.ops.moe's
    CARD_H100 / CARD_H200 (fit_card's class: None is the H100's, an unknown class is refused).
    A function, not a module-level table: the keys live in argus.ops, which the agent imports
    only when used (it loads the kernel library)."""
    from argus.ops import moe_module

    return {moe_module.CARD_H100: 309.0, moe_module.CARD_H200: 313.0}[fit_card(card)]


def measured_schedule(name: str):
    """The schedule of a column of H200_LAYER_TFLOPS: the split 128 x 256 smem-scale TMA tile
    on the walk or one CTA a unit, with the separate quantize or the gate-up's own (grid_fq is
    argus/ops/moe.py FP8_PREFILL_UNIT_GRID, walk_fq FP8_PREFILL_WALK_FUSED_QUANTIZE), or
    FP8_SMALL (scripts/gpu_moe_bench.py fp8_variants)."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as walk
    from argus.kernels.moe_fp8 import FP8_SMALL

    return {"walk": walk, "walk_fq": dataclasses.replace(walk, quantize_out=True),
            "grid": dataclasses.replace(walk, persistent=False),
            "grid_fq": dataclasses.replace(walk, persistent=False, quantize_out=True),
            "small": FP8_SMALL}[name]


def h200_layer_ms(T: int) -> dict[str, float]:
    """H200_LAYER_TFLOPS at size T in ms, the mean TFLOP/s of each schedule's measurements."""
    flops = 2.0 * T * CALIBRATION["top_k"] * 3 * CALIBRATION["H"] * CALIBRATION["I"]
    return {name: flops / (sum(v) / len(v) * 1e12) * 1e3
            for name, v in H200_LAYER_TFLOPS[T].items()}


def fit_card(card: str | None) -> str:
    """The card class whose fit the cost model reads: argus.ops.moe's CARD_H100 or CARD_H200
    (None: the H100 class, the fit these functions had before the H200's). An unknown class is
    refused (argus.ops.moe.fp8_unit_grid_pays's refusal)."""
    from argus.ops import moe_module

    if card is None:
        return moe_module.CARD_H100
    moe_module.fp8_unit_grid_pays(card)               # refuses a card it has no rule for
    return card


def _is_h200(card: str | None) -> bool:
    from argus.ops import moe_module

    return fit_card(card) == moe_module.CARD_H200


@functools.cache
def _h200_scale() -> float:
    """The H200's promotion factors over the H100's: the walk's measured H200 layer at the
    calibration point (T = 16384) less the modelled glue, over its H100 one's (the factors'
    calibration), so the H200 estimate there is the H200 measurement. The forms' ratios to
    each other stay the H100's (the H200 run measured the split smem TMA tile only)."""
    walk = measured_schedule("walk")
    gate_up, down, _, _ = _structural(CALIBRATION, walk)
    return (h200_layer_ms(CALIBRATION["T"])["walk"] - _glue_ms(CALIBRATION)) / (
        (gate_up + down) * promotion_factors()[form(walk)])


def promotion_scale(card: str | None = None) -> float:
    """The card class's multiplier on the promotion factors: 1 on the H100 class (their
    calibration), `_h200_scale` on the H200 class."""
    return _h200_scale() if _is_h200(card) else 1.0


def _h200_gemms(d: dict[str, int], s) -> float:
    """The H200 estimate's GEMMs for schedule s before the grid and quantize_out factors."""
    gate_up, down, _, _ = _structural(d, s)
    return (gate_up + down) * promotion_factor(form(s))[0] * _h200_scale()


def _h200_fitted_ratio(T: int, base: str, other: str, factor_before: float) -> float:
    """The factor on schedule `other`'s GEMMs (those already multiplied by factor_before) that
    makes its H200 estimate over `base`'s the measured layer ratio at T: the model's glue kept,
    so the fit moves the GEMMs only."""
    d = {**CALIBRATION, "T": T}
    ms = h200_layer_ms(T)
    s_base, s_other = measured_schedule(base), measured_schedule(other)
    est_base = _h200_gemms(d, s_base) * factor_before + _glue_ms(d, s_base.quantize_out)
    target = ms[other] / ms[base] * est_base
    return (target - _glue_ms(d, s_other.quantize_out)) / (_h200_gemms(d, s_other) *
                                                           factor_before)


@functools.cache
def _h200_grid_knots() -> tuple[tuple[float, float], ...]:
    """(log2 units a CTA, grid / walk) on the H200: at each T of H200_LAYER_TFLOPS with both
    forms of the split (separate quantize) the factor that makes the estimate's grid / walk
    the measured layers' ratio (`_h200_fitted_ratio`), the mean where sizes share a point
    (T = 1024, 2048, 4096: one m-tile an expert). Fitted to the layer, not to the GEMM kernels
    alone as the H100's: the H200 run's layer differences lie partly outside the kernels'
    profiled durations (docs/perf/moe.md), and the layer is what the rule is chosen by."""
    ratios = {T: _h200_fitted_ratio(T, "walk", "grid", 1.0) for T, ms in
              H200_LAYER_TFLOPS.items() if "walk" in ms and "grid" in ms}
    return _knots(ratios, measured_schedule("walk"))


@functools.cache
def _h200_quantize_out_knots(persistent: bool) -> tuple[tuple[float, float], ...]:
    """(log2 units a CTA, factor) of quantize_out on the H200 on the walk or the grid: at each
    T with both quantize forms of that grid the factor that makes the estimate's fused /
    separate the measured layers' ratio (the grid's own H200 factor applied to both), the
    mean where sizes share a point. The grid's fused form was measured only up to T = 4096:
    beyond it the nearest point's factor."""
    from argus.ops import moe_module

    sep, fused = ("walk", "walk_fq") if persistent else ("grid", "grid_fq")
    ratios = {}
    for T, ms in H200_LAYER_TFLOPS.items():
        if sep in ms and fused in ms:
            d = {**CALIBRATION, "T": T}
            g = grid_factor(d, measured_schedule(sep), moe_module.CARD_H200)
            ratios[T] = _h200_fitted_ratio(T, sep, fused, g)
    return _knots(ratios, measured_schedule("walk"))


def _gate_up_args(s) -> tuple[bool, ...]:
    """The gate-up kernel's builder arguments for schedule s, as argus.ops.moe's _fp8_gemms
    passes them: (gated,), or with quantize_out (gated, quantize, k_major), the scales h gets
    in the layout the down reads (K-major with smem_scales: one schedule serves both GEMMs)."""
    return (True, True, bool(s.smem_scales)) if s.quantize_out else (True,)


class MoeFp8Family(ScheduleFamily):
    name = "moe_fp8"
    parts = (SCHEDULE,)

    # -- the schedule space -------------------------------------------------------------------
    def facts(self, task: TaskSpec) -> dict[str, Any]:
        """The shapes, the bf16 outputs (the TMA-store epilogue's rule), the rows an expert
        gets on average and fp8_schedule_for's thresholds and choice there at the task's card
        (`_rule`)."""
        return {**task.dims, "out_bits": 16, **_rule(task.dims, task_card(task))}

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        """argus.ops.moe.fp8_schedule_for's choice for these shapes on the task's card."""
        from argus.ops import moe_module

        d = task.dims
        return params_of(moe_module.fp8_schedule_for(d["T"], d["top_k"], d["E"],
                                                     task_card(task)))

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        return {"bm": 64, "bn": 64, "stages": 2, "epilogue": "direct", "cluster_m": 1,
                "overlap": False, "late_release": False, "n_split": 1, "smem_scales": False,
                "persistent": True, "quantize_out": False}

    def build(self, task: TaskSpec, params: dict[str, Any]):
        """Both block-scaled grouped GEMMs with the schedule (the shared-memory-scale kernels
        with smem_scales; with quantize_out the gate-up that writes h in e4m3 plus its scales,
        as argus.ops.moe builds it: `_gate_up_args`)."""
        from argus.kernels.moe_fp8 import grouped_gemm_fp8_kernel, grouped_gemm_fp8_smem_kernel

        s = schedule_of(task, params)
        kernel = grouped_gemm_fp8_smem_kernel if s.smem_scales else grouped_gemm_fp8_kernel
        return [(kernel(*_gate_up_args(s)), {"s": s}), (kernel(False), {"s": s})]

    def resource_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """argus.ops.moe's own refusals at the task's shapes (its weight-scale check on meta
        tensors of the task's shapes: H and I multiples of 128; its layer: the gate-up's halves
        inside one weight-scale block), then the lowering's (shared memory)."""
        import torch

        from argus.errors import LaunchError
        from argus.ops import moe_module

        d = task.dims
        T, H, I, E, k = d["T"], d["H"], d["I"], d["E"], d["top_k"]
        s = schedule_of(task, params)
        meta = functools.partial(torch.empty, device="meta")
        try:
            moe_module._check_scales(meta(T, H, dtype=torch.bfloat16),
                                     meta(E, 2 * I, H, dtype=torch.float8_e4m3fn),
                                     meta(E, H, I, dtype=torch.float8_e4m3fn),
                                     meta(E, max(1, 2 * I // 128), max(1, H // 128)),
                                     meta(E, max(1, H // 128), max(1, I // 128)))
            moe_module._layer(T, H, I, E, k, s, True)
        except LaunchError as exc:
            return [Diagnostic("error", "fp8_layer", str(exc).split("\n")[0], kernel=task.name,
                               counterexample=dict(sorted(params.items())),
                               fix=(exc.fix or "change the schedule") + " (rule: "
                                   "argus/ops/moe.py _check_scales / _layer)")]
        return super().resource_check(task, params)

    # -- cost ------------------------------------------------------------------------------------
    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        try:
            s = schedule_of(task, params)
        except ValueError:
            return None
        d = task.dims
        card = task_card(task)
        gate_up, down, rows, bound = _structural(d, s)
        promotion, source = promotion_factor(form(s))
        scale = promotion_scale(card)
        grid = grid_factor(d, s, card)
        fused = quantize_out_factor(d, s, card)
        factor = promotion * scale * grid * fused
        glue = _glue_ms(d, s.quantize_out)
        total = (gate_up + down) * factor + glue
        flops = 2.0 * d["T"] * d["top_k"] * 3 * d["H"] * d["I"]
        return Estimate(total, bound,
                        {"padded_rows": rows, "gate_up_ms": gate_up * factor,
                         "down_ms": down * factor, "glue_ms": glue, "form": "/".join(
                             map(str, form(s))), "promotion_factor": promotion,
                         "factor_source": source, "card": card, "promotion_scale": scale,
                         "grid_factor": grid,
                         "quantize_out_factor": fused,
                         "units_per_cta": units_per_cta(d, s),
                         "tflops": flops / (total * 1e-3) / 1e12})

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        """torch._grouped_mm in bf16 on the dequantized weights at its rate measured on the
        task's card class (grouped_mm_tflops, DeepSeek-V3 T = 16384: 309 TFLOP/s on the H100
        beside the calibration run, 313 on the H200: docs/perf/moe.md)."""
        d = task.dims
        flops = 2.0 * d["T"] * d["top_k"] * 3 * d["H"] * d["I"]
        rate = grouped_mm_tflops(task_card(task)) * 1e12
        return {"torch._grouped_mm (bf16)": Estimate(flops / rate * 1e3, "compute", {})}

    # -- rendering and running -------------------------------------------------------------------
    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        """The gate-up grouped GEMM (the layer's first expert kernel) with this schedule."""
        s = schedule_of(task, params)
        kernel = "grouped_gemm_fp8_smem_kernel" if s.smem_scales else "grouped_gemm_fp8_kernel"
        args = ", ".join(map(repr, _gate_up_args(s)))
        return ('"""fp8 MoE expert GEMMs chosen by `argus optimize`: argus/kernels/moe_fp8.py '
                'with the schedule\nthat argus.ops.moe(..., w13_scale=..., w2_scale=..., '
                'schedule=SCHEDULE) runs."""\n\n'
                f"from argus.kernels.moe_fp8 import MoeFp8Schedule, {kernel}\n\n"
                f"SCHEDULE = {s!r}\n"
                f"KERNEL = {kernel}({args})\n"
                'CONSTEXPRS = {"s": SCHEDULE}\n')

    def run(self, task: TaskSpec, params: dict[str, Any], x, w13, w2, w13_scale, w2_scale,
            topk_ids, topk_weights):
        """The layer's expert half with this schedule: argus.ops.moe.experts with the weight
        scales (interpreted for CPU tensors, compiled for CUDA ones)."""
        from argus.ops import moe_module

        d = task.dims
        layer = moe_module.Layer(d["T"], d["H"], d["I"], d["E"], d["top_k"],
                                 schedule_of(task, params))
        return moe_module.experts(x, w13, w2, topk_ids, topk_weights, layer,
                                  interpret=not x.is_cuda, scales=(w13_scale, w2_scale))


def moe_fp8_task(T: int, H: int, I: int, E: int, top_k: int, name: str = "moe_fp8",
                 card: str | None = None) -> TaskSpec:
    """A TaskSpec of one MoE layer's shapes with e4m3 block-scaled weights (the library's op)
    on a card class (argus.ops.moe CARD_H100 or CARD_H200; None: argus.ops.moe.default_card's,
    the current CUDA device's class, else the H100 class), recorded as the task's `card` option
    so that the task names the rule it starts from wherever it is read."""
    from argus.ops import moe_module

    card = moe_module.card_or_default(card)
    moe_module.fp8_unit_grid_pays(card)               # refuses a card it has no rule for
    return TaskSpec(family="moe_fp8", name=name, origin="argus", path="argus.ops.moe",
                    shape=(("E", E), ("H", H), ("I", I), ("T", T), ("top_k", top_k)),
                    dtype="e4m3", compute="e4m3",
                    metrics=(("flops", 2.0 * T * top_k * 3 * H * I),),
                    options=(("card", card),))


__all__ = ["MoeFp8Family", "moe_fp8_task", "schedule_of", "task_card"]
