"""The legal ranges and constraints of the library's Schedule classes that do not declare them in
their own field metadata yet (argus/schedule_space.py): the warp-specialized skeleton, the GEMM,
the MoE grouped GEMM (bf16, and its block-scaled fp8 form), the attention forward, the
implicit-GEMM convolution, and the composed family's tile and matmul schedules, plus the agent's
own `SplitSchedule` (the KernelBench fp32 adapter's split, declared in its fields, as every
Schedule eventually will be).

When a kernel module adopts the metadata (`bm: int = field(default=128, metadata=legal(...))`
and a CONSTRAINTS tuple), its entry here goes away: `space_of` reads the class first.

Every range and constraint names the rule it mirrors; they only prune (the class's own checks,
the lowering and the verifier stay the ground truth: tests/agent/test_schedule_family.py lowers
a random sample of what they accept). Shared memory and the register budget are not declared
here: the generic family reads them from the lowering (argus/agent/families/schedule.py).
`declare_library()` registers them once (an explicit cache, no import-time side effect).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from argus.agent import cost_model, split_numerics
from argus.kernels.split_k_sum import MAX_SPLITS
from argus.schedule_space import Constraint, declare, fixed, legal
from argus.target import limits


@dataclass(frozen=True)
class SplitSchedule:
    """How the KernelBench fp32 GEMM adapter splits its operands into bf16 pieces: split_terms
    products (6: fp32-accurate, the strict track; 3 and 1: relaxed only) in k_chunks fp32
    accumulators (split_numerics.py says why both matter)."""

    split_terms: int = field(default=6, metadata=legal(
        split_numerics.TERMS, rule="argus/agent/split_numerics.py SLOTS (6, 3 or 1 products)"))
    k_chunks: int = field(default=1, metadata=legal(
        split_numerics.K_CHUNKS, rule="argus/agent/split_numerics.py K_CHUNKS"))

    CONSTRAINTS = (
        Constraint("k_chunks", lambda s, f: split_numerics.chunk_ok(f["K"], s["k_chunks"]),
                   "k_chunks={k_chunks}: K={K} does not split into equal chunks of a multiple "
                   "of 8 elements (the chunks' bf16 rows must stay 16-byte aligned)",
                   "use a k_chunks that divides K / 8",
                   "cuTensorMapEncodeTiled globalStrides % 16 == 0", reads=("k_chunks",)),
        Constraint("split_accuracy", lambda s, f: not f.get("strict") or split_numerics.strict_ok(
            s["split_terms"], f["K"], s["k_chunks"]),
            lambda s, f: (
                f"split_terms={s['split_terms']}, k_chunks={s['k_chunks']}: predicted rel_l2 "
                f"{_predicted(s, f):.1e} on the tensor cores, more than half the strict fp32 "
                "bound (1e-5): wgmma truncates every addend of its fp32 accumulator, so the "
                "error grows with the K range one accumulator sums (K / k_chunks = "
                f"{f['K']} / {s['k_chunks']}), and fewer than 6 terms lose the split's 2^-16 "
                "pieces"),
            lambda s, f: "use split_terms=6 and k_chunks >= " + str(
                split_numerics.min_strict_chunks(f["K"]) or
                f"(none up to {max(split_numerics.K_CHUNKS)}: for K = {f['K']} no split is "
                "predicted strict-correct; judge the task on the relaxed track)"),
            "argus/agent/split_numerics.py (H100/H200 tensor-core model, measured H200 errors)",
            reads=("split_terms", "k_chunks")),
    )


def _predicted(s, f) -> float:
    if s["split_terms"] not in split_numerics.SLOTS:
        return float("inf")
    return split_numerics.predicted_rel_l2(s["split_terms"], f["K"], s["k_chunks"])


REGS = dict(multiple=limits.SETMAXNREG_STEP, low=limits.SETMAXNREG_MIN,
            high=limits.SETMAXNREG_MAX)

WARP_SPECIALIZED = dict(
    bm=legal((64, 128, 192, 256), multiple=64, low=64, high=limits.TMA_BOX_DIM_MAX,
             rule="64 rows per consumer warpgroup (PTX wgmma M = 64); TMA boxDim <= 256"),
    stages=legal(range(1, 9), low=1, rule="the TMA ring has at least one stage (deeper ones are "
                 "accepted; shared memory is read from the lowering)"),
    consumers=legal((1, 2, 3, 4), rule="consumer warpgroups of a CTA (PTX wgmma: M = 64 each)"),
    producer_regs=legal((24, 32, 40), **REGS, rule="PTX setmaxnreg: a multiple of 8 in [24, 256]"),
    consumer_regs=legal(range(104, 241, 8), **REGS,
                        rule="PTX setmaxnreg: a multiple of 8 in [24, 256]"),
    persistent=legal((False, True)),
    num_sms=legal((limits.NUM_SMS,), low=1, rule="H100/H200 SXM: 132 SMs"),
    group_m=legal((1, 2, 4, 8, 16), low=1, rule="grouped raster: tiles down M per group"),
    epilogue=legal(("direct", "tma"), rule="st.global from registers, or stmatrix + TMA store"),
    cluster_m=legal((1, 2), rule="HOPPER.md 2.1 (clusters > 2 lost performance; DeepGEMM "
                    "supports 2)"),
    zero_by_wgmma=legal((False, True)),
    pingpong=fixed("not searched yet (no card)"),
    ordered_epilogue=fixed("not searched yet (no card)"),
)

WARP_SPECIALIZED_CONSTRAINTS = (
    Constraint("wgmma_rows", lambda s, f: s["pingpong"] or s["bm"] == 64 * s["consumers"],
               "bm={bm} with {consumers} consumer warpgroup(s): each warpgroup's wgmma covers "
               "exactly 64 rows", "set consumers = bm // 64", "PTX wgmma: M = 64 per warpgroup",
               reads=("bm", "consumers", "pingpong")),
    Constraint("tma_epilogue", lambda s, f: s["epilogue"] == "direct" or f["out_bits"] == 16,
               "epilogue={epilogue}: the stmatrix + TMA-store epilogue needs a 16-bit output",
               "use epilogue='direct' for an fp32 output", "PTX stmatrix (b16 only)",
               reads=("epilogue",)),
    Constraint("cluster", lambda s, f: s["num_sms"] % s["cluster_m"] == 0,
               "cluster_m={cluster_m}: the persistent grid ({num_sms}) must be a whole number of "
               "clusters", "use cluster_m 1 or 2", "kernels/warp_specialized.py TileScheduler",
               reads=("num_sms", "cluster_m")),
    Constraint("predicted_spill", lambda s, f: not cost_model.predicted_spill(
        s["bn"], s["consumer_regs"]),
        "bn={bn} needs ~{bn}/2 + 40 registers per consumer thread; consumer_regs="
        "{consumer_regs} will likely spill", "raise consumer_regs or narrow bn",
        "accumulator fragment of m64nNk16: N/2 fp32 per thread", reads=("bn", "consumer_regs"),
        severity="warning"),
)

GEMM = dict(
    bn=legal((16, 32, 64, 128, 192, 256), multiple=limits.WGMMA_N_STEP, low=16,
             high=limits.WGMMA_N_MAX, rule="PTX wgmma shapes m64nNk16: N <= 256"),
    bk=legal((64,), rule="TMA/wgmma 128-byte swizzle atom: a row of 64 bf16 (HOPPER.md "
             "invariant 10)"),
    swap_ab=legal((False, True)),
    store_cols=legal((0, 64, 128), rule="kernels/gemm.py (TMA-store staging in rounds)"),
    k_atoms=fixed("not searched yet (no card)"),
    split_k=fixed("argus.ops.matmul runs the split, not the kernel"),
    tail_splits=fixed("argus.ops.matmul runs the tail's second kernel, not the kernel"),
)

GEMM_CONSTRAINTS = (
    Constraint("swizzle_row", lambda s, f: s["bk"] * f.get("in_bytes", 2) == 128,
               "bk={bk}: a 128B-swizzled tile needs rows of 128 bytes", "use bk = 64 for bf16",
               "TMA/wgmma 128-byte swizzle atom (HOPPER.md invariant 10)", reads=("bk",)),
    Constraint("wgmma_n", lambda s, f: s["bn"] % 64 == 0 and 64 <= s["bn"] <= 256
               or (s["swap_ab"] and s["bn"] in (16, 32)),
               "bn={bn}: the kernel tiles N in 64-column blocks up to wgmma's N <= 256 (16 or "
               "32 token columns only with swap_ab)", "use bn in 64, 128, 192, 256",
               "PTX wgmma shapes m64nNk16; kernels/gemm.py blocks", reads=("bn", "swap_ab")),
    Constraint("swap_ab", lambda s, f: not s["swap_ab"] or (
        s["epilogue"] == "direct" and s["cluster_m"] == 1),
        "swap_ab with epilogue={epilogue}, cluster_m={cluster_m}: the swapped kernel stores "
        "C^T from registers, and its token tile is too small to share across a cluster",
        "use epilogue='direct' and cluster_m=1 with swap_ab",
        "kernels/gemm.py (transposed accumulator store)",
        reads=("swap_ab", "epilogue", "cluster_m")),
    Constraint("store_cols", lambda s, f: not s["store_cols"] or (
        s["epilogue"] == "tma" and s["store_cols"] % 64 == 0 and s["store_cols"] <= s["bn"]),
        "store_cols={store_cols} with epilogue={epilogue}, bn={bn}: the staging rounds of the "
        "TMA-store epilogue are whole 64-column blocks of the tile",
        "use store_cols 0 (the whole tile), 64 or 128 <= bn, with epilogue='tma'",
        "kernels/gemm.py (TMA-store staging in rounds)", reads=("store_cols", "epilogue", "bn")),
    Constraint("store_cols_16bit", lambda s, f: not s["store_cols"] or f["out_bits"] == 16,
               "store_cols={store_cols}: staging rounds belong to the TMA-store epilogue, which "
               "needs a 16-bit output", "use store_cols=0", "PTX stmatrix (b16 only)",
               reads=("store_cols",)),
    Constraint("cluster_split", lambda s, f: s["cluster_m"] == 1 or (
        (s["bn"] // s["cluster_m"]) % 8 == 0
        and (f.get("b_layout", "nk") == "nk" or (s["bn"] // 64) % s["cluster_m"] == 0)),
        "bn={bn}, cluster_m={cluster_m}: each CTA multicasts an equal share of B made of whole "
        "TMA boxes (64-column atoms when B is [K, N])", "use bn 128 or 256 with cluster_m=2",
        "kernels/gemm.py cluster split", reads=("bn", "cluster_m")),
    Constraint("k_alignment", lambda s, f: f["K"] % 8 == 0,
               "K={K}: TMA needs row strides that are multiples of 16 bytes (K % 8 == 0 for "
               "bf16)", "pad K to a multiple of 8",
               "cuTensorMapEncodeTiled globalStrides % 16 == 0"),
)

TILE = dict(
    rows=legal((1, 2, 4, 8, 16), rule="rows of a CTA's tile (a power of two)"),
    bn=legal((128, 256, 512, 1024, 2048), rule="columns of a CTA's tile (a power of two)"),
    threads=legal((128, 256, 512), rule="CUDA block size; one warpgroup = 128 threads"),
    order=fixed("not searched yet"), fold=fixed("not searched yet"),
    ctas=fixed("not searched yet"),
)

TILE_CONSTRAINTS = (
    Constraint("tile_registers", lambda s, f: s["rows"] * s["bn"] // s["threads"] <= 64,
               "rows*bn/threads = {rows}*{bn}/{threads} values per thread per tile: the fused "
               "kernels keep several such tiles live (statistics, loop-carried accumulators)",
               "use fewer rows or a narrower bn",
               f"{limits.MAX_REGISTERS_PER_THREAD} registers per thread (sm_90)",
               reads=("rows", "bn", "threads")),
)

MATMUL_CONSTRAINTS = (
    Constraint("strict_split", lambda s, f: not f.get("strict") or s["terms"] == 6,
               "terms={terms} on the strict track: only the 6-term split is fp32-accurate (3 "
               "terms lose the split's 2^-16 pieces, 1 term is one bf16 rounding)",
               "use terms=6, or judge the task on the relaxed track",
               "argus/agent/split_numerics.py SPLIT_ERROR (measured H200 errors)",
               reads=("terms",)),
)

MATMUL = dict(
    terms=legal(split_numerics.TERMS, rule="argus/agent/split_numerics.py (6: strict; 3, 1: "
                "relaxed only)"),
    max_chunk=fixed("not searched yet"), gemm=fixed("the heuristic's GEMM schedule"),
    split_k=fixed("plan_split's cost rule chooses"),
)


ATTENTION = dict(
    block_m=legal((64, 128, 192), multiple=64, low=64, high=192,
                  rule="64 query rows per consumer warpgroup (PTX wgmma M = 64), 1-3 of them"),
    consumers=legal((1, 2, 3), rule="consumer warpgroups of a CTA"),
    block_n=legal((64, 80, 96, 112, 128, 144, 160, 176, 192, 256), multiple=16, low=16,
                  high=limits.WGMMA_N_MAX, rule="wgmma N of Q K^T, k16 steps of P V, one TMA "
                  "box of rows: a multiple of 16 in [16, 256]"),
    stages=legal((2, 3, 4), low=2, high=8, rule="K and V ring depth (kernels/attention.py)"),
    ordered=legal((False, True)), fa3_overlap=legal((False, True)),
    intra_wg_overlap=legal((False, True)), persistent=legal((False, True)),
    epilogue=legal(("direct", "tma"), rule="st.global from registers, or stmatrix + TMA store"),
    producer_regs=legal((24, 32), **REGS, rule="PTX setmaxnreg: a multiple of 8 in [24, 256]"),
    consumer_regs=legal((104, 160, 240), **REGS,
                        rule="PTX setmaxnreg: a multiple of 8 in [24, 256] (104: two CTAs an SM)"),
    ctas_per_sm=legal((1, 2), rule="ag.occupancy: CTAs an SM (two share registers and shared "
                      "memory: AttentionSchedule._problems / problems_for)"),
    tile_order=legal(("head", "lpt", "snake"), rule="grid order: heads' query tiles in "
                     "order, the longest causal tiles first, or the persistent walk with every "
                     "second round reversed (kernels/attention.py tile_order)"),
    own_blocks=legal((False, True), rule="each consumer warpgroup computes only the KV blocks "
                     "its own rows see (causal; not with ordered)"),
    exp2_emulate=legal((0, 2, 4), low=0, high=16, rule="key groups of 16 whose exp2 runs on the "
                       "FMA pipe (ag.exp2 emulate; needs approx_exp2)"),
    store_cols=legal((0, 64, 128), low=0, multiple=64,
                     rule="columns of O a round of the TMA-store epilogue stages (0: all of "
                     "them; kernels/attention.py AttentionSchedule.store_cols: rounds of 64- "
                     "column blocks dividing the head dim, so the staging tile fits beside Q "
                     "and the rings at head dim 256)"),
    prefetch_next_q=legal((False, True), rule="the persistent walk's producer prefetches its "
                          "next unit's Q tile into L2 (kernels/attention.py "
                          "AttentionSchedule.prefetch_next_q)"),
    packed_p=legal((False, True), rule="FA3's overlap order carries P_{j-1} as the packed "
                   "A fragment (bf16 pairs, FP8 e4m3 words) instead of fp32 (kernels/attention.py "
                   "AttentionSchedule.packed_p; problems_for counts the carried form)"),
    rescale_after_pv=legal((False, True), rule="FA3's overlap order rescales O after P V "
                           "retires (wgmma wait 0) and issues the next P V unscaled, instead "
                           "of scaling O at P V's issue (kernels/attention.py "
                           "AttentionSchedule.rescale_after_pv; ping-pong on that order always "
                           "does: rescale_late)"),
    num_sms=fixed("H100/H200 SXM: 132 SMs"), approx_exp2=fixed("not searched yet"),
    fold_scale=fixed("not searched yet"),
)


def _attention():
    """argus/kernels/attention.py, whose own rule functions the constraints below call (imported
    when a constraint is evaluated: declare_library registers them lazily too)."""
    from argus.kernels import attention

    return attention


def _store_cols_problems(s) -> list[str]:
    return _attention().store_cols_problems(s["store_cols"], s["epilogue"])


def _store_rounds_message(s, f) -> str:
    rounds = ", ".join(str(v) for v in f["store_rounds"] if v)
    return (f"store_cols={s['store_cols']}: at head dim "
            f"{' or '.join(map(str, f['kernel_head_dims']))} the TMA-store epilogue stages O "
            "whole (store_cols=0)" + (f" or in rounds of {rounds} columns" if rounds else "")
            + ": a round has fewer columns than the head dim and divides it, and its staging "
            "tile fits shared memory beside Q and the K and V rings of the library's default "
            "schedule there (one round of the whole head dim is store_cols=0)")


def _prefetch_problems(s) -> list[str]:
    return _attention().prefetch_next_q_problems(s["prefetch_next_q"], s["persistent"],
                                                 s["ordered"], s["fa3_overlap"])

def _packed_p_problems(s) -> list[str]:
    return _attention().packed_p_problems(s["packed_p"], s["fa3_overlap"])


def _rescale_problems(s) -> list[str]:
    return _attention().rescale_after_pv_problems(s["rescale_after_pv"], s["fa3_overlap"])


ATTENTION_CONSTRAINTS = (
    Constraint("unproven", lambda s, f: not s["intra_wg_overlap"],
               "intra_wg_overlap=True: the verifier loses the key tags of S carried across the "
               "loop's back edge, so compile refuses this order with verification on",
               "use fa3_overlap=True (the same overlap in FA3's order, proven)",
               "argus/kernels/attention.py (module docstring: not proven yet)",
               reads=("intra_wg_overlap",)),
    Constraint("snake_walk", lambda s, f: s["tile_order"] != "snake" or s["persistent"],
               "tile_order='snake' orders the rounds of the persistent walk; with "
               "persistent=False the hardware hands the grid's tiles out",
               "use persistent=True with tile_order='snake' (or another tile_order)",
               "argus/kernels/attention.py AttentionSchedule._problems",
               reads=("tile_order", "persistent")),
    # the next two are the schedule's own rules (its functions, its words): declared so the
    # planner's notes list them and the search refuses a point before building it
    Constraint("store_cols_epilogue", lambda s, f: not _store_cols_problems(s),
               lambda s, f: "; ".join(_store_cols_problems(s)),
               "use epilogue='tma' with store_cols a multiple of 64, or store_cols=0",
               "argus/kernels/attention.py AttentionSchedule._problems (store_cols_problems)",
               reads=("store_cols", "epilogue")),
    # the task's fact store_rounds (families/attention.py store_rounds: each head dim the
    # task's kernel runs at, the library default there with the TMA-store epilogue in rounds
    # of store_cols, judged by AttentionSchedule.problems_for) narrows the search to the
    # rounds that divide the head dim and fit shared memory; a point's own head dim and tile
    # are judged again by problems_for (the family's resource_check)
    Constraint("store_cols_head_dim", lambda s, f: s["store_cols"] in f["store_rounds"],
               _store_rounds_message,
               lambda s, f: f"use store_cols in {f['store_rounds']}",
               "argus/kernels/attention.py AttentionSchedule.problems_for (store_cols divides "
               "head_dim; smem_bytes within smem_per_sm_share)", reads=("store_cols",)),
    Constraint("prefetch_walk", lambda s, f: not _prefetch_problems(s),
               lambda s, f: "; ".join(_prefetch_problems(s)),
               "use persistent=True with prefetch_next_q=True (and with ordered=True "
               "fa3_overlap=True: Q keeps its shared-memory stage), or prefetch_next_q=False",
               "argus/kernels/attention.py AttentionSchedule._problems "
               "(prefetch_next_q_problems)",
               reads=("prefetch_next_q", "persistent", "ordered", "fa3_overlap")),
    # which block_n packed_p makes fit (144 / 160 at head dim 128, 80 at 256) is the kernel's
    # register rule at the point's head dim (problems_for, the family's resource_check)
    Constraint("packed_p_order", lambda s, f: not _packed_p_problems(s),
               lambda s, f: "; ".join(_packed_p_problems(s)),
               "use fa3_overlap=True with packed_p=True, or packed_p=False",
               "argus/kernels/attention.py AttentionSchedule._problems (packed_p_problems)",
               reads=("packed_p", "fa3_overlap")),
    Constraint("rescale_late_order", lambda s, f: not _rescale_problems(s),
               lambda s, f: "; ".join(_rescale_problems(s)),
               "use fa3_overlap=True with rescale_after_pv=True, or rescale_after_pv=False",
               "argus/kernels/attention.py AttentionSchedule._problems "
               "(rescale_after_pv_problems)",
               reads=("rescale_after_pv", "fa3_overlap")),
)


MOE = dict(
    bn=legal((8, 16, 24, 32, 48, 64, 128, 192, 256), multiple=limits.WGMMA_N_STEP, low=8,
             high=limits.WGMMA_N_MAX, rule="PTX wgmma shapes m64nNk16: N a multiple of 8 in "
             "[8, 256] (decode's token tile is N; prefill tiles N in 64-column blocks)"),
    bk=legal((64,), rule="TMA/wgmma 128-byte swizzle atom: a row of 64 bf16 (HOPPER.md "
             "invariant 10)"),
    swap_ab=legal((False, True), rule="argus/kernels/moe.py (decode: the weights as wgmma's M)"),
    split_k=legal((1, 2, 3, 4), low=1, high=MAX_SPLITS,
                  rule="argus/kernels/split_k_sum.py MAX_SPLITS (K slices of a decode GEMM)"),
    store_cols=fixed("not searched by the agent yet"),
)

MOE_CONSTRAINTS = (
    Constraint("decode_threshold", lambda s, f: s["swap_ab"] == (f["T"] <= f["decode_max"]),
               "swap_ab={swap_ab} at T={T} tokens: argus.ops.moe takes the swap-AB decode "
               "schedules up to {decode_max} tokens and prefill tiles above",
               "use swap_ab=True for T <= {decode_max}, False above",
               "argus/ops/moe.py DECODE_MAX_TOKENS", reads=("swap_ab",), severity="warning"),
)


MOE_FP8 = dict(
    bn=legal((64, 128, 256), multiple=limits.WGMMA_N_STEP, low=8, high=limits.WGMMA_N_MAX,
             rule="PTX wgmma shapes m64nNk32 (e4m3): N a multiple of 8 in [8, 256]"),
    bk=legal((128,), rule="TMA/wgmma 128-byte swizzle atom: a row of 128 e4m3, one 128-deep "
             "scale block a stage (MoeFp8Schedule._problems)"),
    overlap=legal((False, True), rule="argus/kernels/gemm_fp8.py overlapped_promoted_mma"),
    late_release=legal((False, True), rule="argus/kernels/gemm_fp8.py promoted_mma (the stage "
                       "released after the promotion) against early_release_promoted_mma"),
    n_split=legal((1, 2), rule="argus/kernels/gemm_fp8.py split_promoted_mma (1 or 2 column "
                  "halves a K block)"),
    smem_scales=legal((False, True), rule="argus/kernels/gemm_fp8.py SharedBlockScales"),
    quantize_out=legal((False, True), rule="argus/kernels/moe_fp8.py _quantize_unit (the "
                       "gate-up's epilogue writes h in e4m3 plus its 1x128 scales: n_split=2, "
                       "bn=256, MoeFp8Schedule._problems)"),
    swap_ab=fixed("no swap-AB fp8 form (MoeFp8Schedule._problems)"),
    split_k=fixed("no K split in the fp8 grouped GEMM (MoeFp8Schedule._problems)"),
    pair_multicast=fixed("not searched: measured slower than the unit grid at DeepSeek-V3 T = "
                         "4096 (477 against 503 TFLOP/s) and than the persistent walk at 16384 "
                         "(833 against 865; H100, 2026-12-06, docs/perf/moe.md)"),
)

MOE_FP8_CONSTRAINTS = (
    # replaces MoeSchedule's decode_threshold (the same code: the most derived wins): the fp8
    # path has no swap-AB decode form, its small-size rule is the tile's rows. The facts are
    # argus/ops/moe.py's own (families/moe_fp8.py _rule: FP8_BIG_TILE_ROWS,
    # FP8_UNIT_GRID_MAX_ROWS and fp8_schedule_for's choice at the task and its card), never
    # copies.
    # All three are warnings: the rule is measured speed, not legality
    Constraint("decode_threshold", lambda s, f: s["bm"] == f["rule_bm"],
               lambda s, f: (f"bm={s['bm']} at {f['rows_per_expert']:.0f} rows an expert on "
                             f"average: argus/ops/moe.py fp8_schedule_for takes "
                             f"{f['big_tile_bm']}-row tiles (the 128 x 256 split) from "
                             f"{f['big_tile_rows']} rows an expert (FP8_BIG_TILE_ROWS) and "
                             f"{f['small_tile_bm']}-row tiles (less padding) below (the fp8 "
                             "path has no swap-AB decode form)"),
               lambda s, f: f"use bm={f['rule_bm']} (fp8_schedule_for's tile here)",
               "argus/ops/moe.py fp8_schedule_for (FP8_BIG_TILE_ROWS)", reads=("bm",),
               severity="warning"),
    Constraint("unit_grid", lambda s, f: s["persistent"] == f["rule_persistent"],
               lambda s, f: (f"persistent={s['persistent']} at {f['rows_per_expert']:.0f} rows "
                             f"an expert on average on the {f['card']} class: "
                             "argus/ops/moe.py fp8_schedule_for " + (
                                 f"runs one CTA a unit (persistent=False) from "
                                 f"{f['big_tile_rows']} up to {f['unit_grid_max_rows']} rows "
                                 "an expert (FP8_BIG_TILE_ROWS, FP8_UNIT_GRID_MAX_ROWS: the "
                                 "grid's L2 locality measured faster on the H100) and the "
                                 "persistent walk otherwise (the CTA start paid once over many "
                                 "units)" if f["unit_grid_pays"] else
                                 "runs the persistent walk at every size on this card "
                                 f"(one CTA a unit from {f['big_tile_rows']} up to "
                                 f"{f['unit_grid_max_rows']} rows an expert, "
                                 "FP8_UNIT_GRID_MAX_ROWS, measured slower on the H200: "
                                 "fp8_unit_grid_pays)")),
               lambda s, f: f"use persistent={f['rule_persistent']} (fp8_schedule_for's grid "
                            f"here, on the {f['card']} class)",
               "argus/ops/moe.py fp8_schedule_for (FP8_BIG_TILE_ROWS, FP8_UNIT_GRID_MAX_ROWS, "
               "fp8_unit_grid_pays)", reads=("persistent",), severity="warning"),
    # quantize_out against the rule's: fp8_schedule_for's form up to FP8_UNIT_GRID_MAX_ROWS
    # (FP8_PREFILL_UNIT_GRID on the H100 class, FP8_PREFILL_WALK_FUSED_QUANTIZE on the H200
    # class) has the gate-up quantize h itself, the walk above keeps the separate
    # quantize_1x128. Without the rule's n_split and bn (the fused epilogue's tile: the class
    # refuses quantize_out on others) there is nothing to fuse, so leaving it off there is no
    # disagreement
    Constraint("gate_up_quantize",
               lambda s, f: s["quantize_out"] == f["rule_quantize_out"] or (
                   not s["quantize_out"] and (s["n_split"], s["bn"]) != (f["rule_n_split"],
                                                                         f["rule_bn"])),
               lambda s, f: (f"quantize_out={s['quantize_out']} at {f['rows_per_expert']:.0f} "
                             f"rows an expert on average on the {f['card']} class: "
                             f"argus/ops/moe.py fp8_schedule_for has the gate-up quantize h "
                             f"itself (quantize_out=True: no bf16 h, no quantize_1x128 launch) "
                             f"from {f['big_tile_rows']} up to {f['unit_grid_max_rows']} rows "
                             f"an expert ({f['band_form']}, on "
                             f"{'the unit grid' if f['unit_grid_pays'] else 'the walk'} on this "
                             "card: the layer measured faster), and the separate quantize above "
                             "(there the fused gate-up's kernels measured slower)"),
               lambda s, f: f"use quantize_out={f['rule_quantize_out']} (fp8_schedule_for's "
                            f"gate-up here, on the {f['card']} class)",
               "argus/ops/moe.py fp8_schedule_for (FP8_PREFILL_UNIT_GRID, "
               "FP8_PREFILL_WALK_FUSED_QUANTIZE, FP8_UNIT_GRID_MAX_ROWS)",
               reads=("quantize_out", "n_split", "bn"), severity="warning"),
)


CONV = dict(
    bn=legal((64, 128, 256), multiple=limits.WGMMA_N_STEP, low=8, high=limits.WGMMA_N_MAX,
             rule="PTX wgmma shapes m64nNk16: N a multiple of 8 in [8, 256]"),
    bk=legal((8, 16, 32, 64), rule="one swizzle atom of a K slice: 32, 64 or 128 bytes "
             "(argus.ops.conv.packed_bk; 64 bf16 a slice unpacked)"),
    bw=legal((8, 16, 32, 64, 128), rule="ConvSchedule._problems: one box of output columns is "
             "8, 16, 32, 64 or 128 rows of the tile"),
    rowbox=legal((False, True), rule="argus/kernels/conv.py (the A tile as one TMA box a K "
                 "step)"),
    taps_per_slice=legal((1, 2, 4, 8), low=1, rule="ConvSchedule.taps_per_slice >= 1 (K "
                         "slices a step; shared memory is read from the lowering)"),
    ctas_per_sm=legal((1, 2), rule="ag.occupancy: CTAs an SM (ConvSchedule._problems: the "
                      "entry registers)"),
    pingpong=legal((False, True), rule="argus/kernels/conv.py (two consumer warpgroups own "
                   "whole tiles in turns; measured -3% to +7% against the cooperative tile on "
                   "the UNet layers, docs/perf/conv.md, so a candidate, not a default)"),
    halo=fixed("not searched: unmeasured on the GPU (argus.ops.conv.schedule_for)"),
    promote=fixed("the fp32 split's, not a 16-bit layer's"),
    nchw_epilogue=fixed("the family's result is channels-last"),
)

CONV_CONSTRAINTS = (
    Constraint("rowbox_layer", lambda s, f: not s["rowbox"] or (
        f["groups"] == 1 and 1 <= f["stride_h"] <= 8 and 1 <= f["stride_w"] <= 8),
        "rowbox=True at groups={groups}, stride ({stride_h}, {stride_w}): the A tile as one box "
        "of the [N, H, W, C] input needs one group and strides of at most 8",
        "use rowbox=False for this layer",
        "argus/kernels/conv.py conv_kernel (rowbox: the TMA unit's element strides <= 8)",
        reads=("rowbox",)),
    Constraint("tma_store_channels", lambda s, f: s["epilogue"] == "direct" or f["Kg"] % 8 == 0,
               "epilogue='tma' with {Kg} output channels per group: the TMA store's rows of "
               "channels must be 16-byte aligned", "use epilogue='direct' (and bw=64)",
               "argus.ops.conv.schedule_for (tma_ok: Kg % 8 == 0)", reads=("epilogue",)),
    Constraint("packed_grouped_stride", lambda s, f: s["taps_per_slice"] == 1 or (
        f["groups"] == 1 or f["stride_w"] == 1),
        "taps_per_slice={taps_per_slice} at groups={groups}, stride_w={stride_w}: each packed "
        "tap's box lies in its own stride-phase plane, which the verifier cannot prove yet",
        "use taps_per_slice=1 for this layer",
        "argus/kernels/conv.py conv_kernel (packed taps of a grouped column-strided layer)",
        reads=("taps_per_slice",)),
)


@functools.cache
def declare_library() -> None:
    """Register the declarations above (once per process)."""
    from argus.compose.gemm import MatmulSchedule
    from argus.kernels.attention import AttentionSchedule
    from argus.kernels.conv import ConvSchedule
    from argus.compose.tile import TileSchedule
    from argus.kernels.gemm import GemmSchedule
    from argus.kernels.moe import MoeSchedule
    from argus.kernels.moe_fp8 import MoeFp8Schedule
    from argus.kernels.warp_specialized import WarpSpecializedSchedule

    declare(WarpSpecializedSchedule, WARP_SPECIALIZED, WARP_SPECIALIZED_CONSTRAINTS)
    declare(GemmSchedule, GEMM, GEMM_CONSTRAINTS)
    declare(TileSchedule, TILE, TILE_CONSTRAINTS)
    declare(MatmulSchedule, MATMUL, MATMUL_CONSTRAINTS)
    declare(AttentionSchedule, ATTENTION, ATTENTION_CONSTRAINTS)
    declare(MoeSchedule, MOE, MOE_CONSTRAINTS)
    declare(MoeFp8Schedule, MOE_FP8, MOE_FP8_CONSTRAINTS)
    declare(ConvSchedule, CONV, CONV_CONSTRAINTS)


__all__ = ["SplitSchedule", "declare_library"]
