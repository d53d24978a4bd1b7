"""argus.ops.attention against torch SDPA with each backend (cuDNN, flash, efficient), in one
process on this GPU.

    python3 scripts/gpu_attention_bench.py [--quick] [--out DIR] [--dims 64,128]
        [--lengths 1024,2048] [--mask both|full|causal] [--no-gqa] [--variants ...]
        [--backends cudnn,flash,efficient]

bf16 prefill, 16k total tokens per case (B * S = 16384), heads * head_dim = 2048: head dims 64,
128, 256 x S 512, 1k, 2k, 4k, 8k, 16k x full / causal, plus GQA 8:1 at head dim 128 (32 query
heads, 4 kv heads). Causal FLOPs are counted as half of 4 * B * H * S^2 * D. Each case first
checks our output against a float64 reference on fresh random data (256 sampled query rows of
every head, exact softmax), then times ours and each backend with argus.runtime.timing.measure
(CUDA events, L2 flushed, medians of 100 trials). --quick: S in {1k, 4k, 16k} at head dims 64
and 128, full and causal, and the GQA case at 8k. --variants picks our schedules
(variant_schedule; each checked against float64 too); --dims, --lengths, --mask and
--no-gqa narrow the cases; --kernel-only adds the
default schedule's kernel (default_schedule for the case's head dim, mask and S), launch
prepared once and replayed (no host work per call), which separates host overhead from
kernel time. Prints a table (TFLOP/s, ours / each backend) and writes
attention_bench.json to --out. --hide-host: every timed call of the prefill cases (ours, the
kernels, fp8, the backends) is queued behind a GPU sleep of HIDE_HOST_CYCLES (~0.5 ms,
measure's setup, outside the timed region), so no call's host work (ours ~88 us before
2026-12-04's repeated-call memo, cuDNN's SDPA ~42 us) outlasts the L2 flush and leaves the
device idle inside the timed region: device time against device time.

    python3 scripts/gpu_attention_bench.py --decode [--batches 1,32,64,128] [--kv 8192,32768]
        [--queries 1,16] [--dims 128] [--heads 32:8] [--backends cudnn,flash,efficient,math]

--decode: the decode sweep (argus.ops.attention's split-KV path for Sq <= 16): bf16, GQA 32:8
(--heads), non-causal (torch's is_causal aligns a short query top-left, ours bottom-right; the
mask changes no bytes), batch x KV length x query tokens. Per case, on fresh torch.randn data:
ours through the public op (host work included), `kernel` (our launches prepared once and
replayed: no host work), every SDPA backend that runs the case, and a device copy of the same
bytes as K and V (`dst.copy_(src)`, the copy bandwidth counts read + write: 2 x bytes / time),
each timed by argus.runtime.timing.measure (256 MB L2 flush before every trial, median of 100).
Prints KV bytes read per second (K + V bytes / time) as % of the copy bandwidth, ours against
each backend, the splits chosen, and the error against float64 (the first 4 sequences). Writes
attention_decode_bench.json to --out. The bar (issue 14): >= 1.0x cuDNN at batch >= 32 and
KV >= 8k; >= 60% of copy bandwidth with 8-16 query tokens; >= 75% at batch 1.

--decode-variants: our launches at other schedules beside the default (decode_variant: ring
depth, key block, consumer warpgroups, forced or occupancy-rule splits, the staggered walk, the
split kernel without its combine, two CTAs an SM by the occupancy hint (bn64+st2+occ2), the
combine fused into the split kernel (fused)). --flush read: the L2 emptied by a 256 MB read
instead of measure's 256 MB write before each timed call (no dirty lines to write back during
the call).

--fp8 default,fold: the FP8 forward (argus.ops.attention_fp8) beside the bf16 cases, in the
same run as cuDNN's bf16 SDPA: q, k and v quantized per tensor to e4m3 (scale amax / 448) from
the case's bf16 data; per fp8 variant (fp8_variant_schedule: "default" is fp8_schedule, then
'+' joins of fold, plain, tma, bnN, stN, pvt, shfl, emuN (exp2_emulate); fold with the
overlap needs ARGUS_VERIFY=0) three columns: fp8_<v> (the op, V transposed by it on every
call), fp8vt_<v> (the op with V given transposed: no copy) and fp8k_<v> (the kernel's launch
prepared once: no host work, no copy). The op permutes V^T's keys for the shuffle-free P
whenever it transposes V (schedule permuted_vt, target/fragments.py AccOrderA8); V given
transposed keeps the quad shuffles (AccToA8). `pvt`: the kernel column runs the permuted
kernel on the op's permuted V^T (fp8k_default is the shuffling kernel); `shfl`: the op columns
run with the permutation off (argus.ops.attention_fp8.PERMUTED_VT = False), the op before it.
So `--fp8 default,pvt,shfl` gives the old and new kernel (fp8k_default, fp8k_pvt) and op
(fp8_shfl, fp8_default) in one run.
Each is checked against float64 attention on the dequantized inputs (rel error columns).
FP8 FLOPs are counted like bf16's. The fp8 table prints TFLOP/s and fp8 x cudnn (bf16).

--paged 16,128: ours on paged copies of the same K and V too (attention_decode with a block
table over a random page permutation; one split per sequence while the split paged kernel is
not proven, unless ARGUS_VERIFY=0). --graph: ours captured in a CUDA graph (device time without
host work) and the op's host time per repeated call (CPU clock).
"""

import argparse
import contextlib
import functools
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKENS, HIDDEN = 16384, 2048
# --hide-host's GPU sleep before each timed call (torch.cuda._sleep cycles; ~0.5 ms at the
# H200's ~1.98 GHz): several times a call's host work (88 us the most measured), while 100
# trials add only ~50 ms a measure
HIDE_HOST_CYCLES = 1_000_000


def cases(quick: bool, dims=None, lengths=None, masks=(False, True), gqa: bool = True):
    lengths = lengths or ((1024, 4096, 16384) if quick else (512, 1024, 2048, 4096, 8192, 16384))
    dims = dims or ((64, 128) if quick else (64, 128, 256))
    out = [(d, S, causal, HIDDEN // d, HIDDEN // d) for d in dims for S in lengths
           for causal in masks]
    for S in ((8192,) if quick else (2048, 8192, 16384)) if gqa else ():
        for causal in masks:
            out.append((128, S, causal, 32, 4))   # GQA 8:1
    return out


def check(out, q, k, v, causal, rows=256) -> float:
    """Relative error of `rows` random query rows of every (batch, head) against float64."""
    import torch

    S, SK = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    idx = torch.randperm(S, generator=torch.Generator().manual_seed(0))[:rows].cuda()
    qd = q[:, :, idx].double()
    kd, vd = (t.double().repeat_interleave(group, 1) for t in (k, v))
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.arange(SK, device="cuda")[None, :] <= (idx[:, None] + SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    ref = torch.softmax(s, -1).nan_to_num(0.0) @ vd
    return ((out[:, :, idx].double() - ref).norm() / ref.norm()).item()


def variant_schedule(variant: str, head_dim: int, causal: bool, seq_len: int | None = None):
    """The schedule of an `ours` variant: "default" is argus.ops.attention's own choice
    (default_schedule, by head dim, mask and query length); the others start from the plain
    loop at FA3's tiles (base_schedule; "plain" is that alone) and add, joined by "+": the
    persistent walk, the intra-warpgroup overlap ("overlap": S ahead; "fa3": FA3's order, P V
    in flight during the softmax, fa3_overlap_schedule's tile shapes), ping-pong
    ("pingpong"), two or three consumer warpgroups ("2wg", "3wg": 192 query rows in three
    160-register warpgroups, head dim 64's base shape), or a key block size ("bn64", "bn192")
    (block_n halved until the registers fit unless "bnN" fixes it). The softmax's
    instruction diet: "ex2" (approx_exp2: exp2 on the SFU alone), "fold" (fold_scale: the
    scale folded into the exponent's FFMA), "fast" (both); "default+fast" is the default
    schedule with both (the default schedule has it already; "default+exact" turns it off).
    "stN" sets the depth of the K and V rings (e.g. "default+fast+st3":
    three stages fit beside Q at head dim 128, 225 KB). "tma": the stmatrix + TMA-store
    epilogue, "direct" the st.global one (hd128's default is "tma" since 2026-12-04);
    "tmaN" the same epilogue staging N columns of O a round (store_cols; "default+tma128" at
    head dim 256, where a whole 128 x 256 staging tile does not fit beside Q and the rings);
    "persistent" applies to "default" too ("default+tma+persistent"). "emuN": N of every 16
    groups of 8 keys compute P's exp2 on the FMA pipe (exp2_emulate, FA4's partial emulation;
    "default+emu4": a quarter). "lpt" (on "default" too): tile_order "lpt", the tiles handed
    out heads fastest, then m tiles (causal: longest first), batches slowest, in the
    one-CTA-per-tile grid and the persistent walk alike. "occ2": two CTAs an SM
    (ctas_per_sm=2) at head dim 64, 128 x 64 tiles in two 104-register consumer warpgroups,
    the plain loop (the overlap spills there); "occ2+fast" with the softmax diet, as the
    default has it. "own" (own_blocks, causal; not with ping-pong): each consumer warpgroup
    computes only the KV blocks its own rows may see and releases the tile's others unread
    (128 x 64 at head dim 256: one block a tile). "occ2" at head dim 128: two CTAs an SM in
    64 x 64 tiles, one 232-register consumer warpgroup each in FA3's overlap order, O through
    stmatrix + TMA ("occ2+direct": st.global); 2 x (16 KB Q + 64 KB K, V + 16 KB O) of shared
    memory (head dim 256 does not fit two CTAs: ptxas compiles the kernel at the 128
    registers a thread enters with, and O alone takes 128). "earlyq" (with FA3's overlap:
    "default", "fa3", hd128's "occ2"): Q's stage released right after the tile's last
    S = Q K^T, so the persistent walk ("+persistent") loads the next tile's Q during this
    tile's last P V and O store (FA3's QueryEmpty point); e.g. "default+persistent+earlyq",
    "occ2+fast+persistent+earlyq". "snake" (implies "persistent"): tile_order "snake", the
    persistent walk in "head" order with every second round handed to the CTAs in reverse, so
    causal tiles even out per CTA (FA3 walks causal tiles dynamically); e.g.
    "default+snake+earlyq", "default+snake" (hd64's two-CTA default). "cl2" (full masks):
    cluster_m=2, adjacent m tiles in a 2-CTA cluster sharing each K and V block by TMA
    multicast (FA3's ClusterM at head dims >= 128); "default+cl2" keeps the default's walk
    (refused at head dim 256's short full masks: the walk spills there), "default+grid+cl2"
    the one-CTA-a-tile grid ("grid": persistent and early_q_release off on the default).
    "pfq" (implies "persistent"): prefetch_next_q, the walk's producer prefetching the Q tile
    of its next unit into L2 as each unit's loads start; e.g. "default+tma128+pfq" at head
    dim 256, "default+pfq" at 128. "packp" (with FA3's overlap order: "default" at head dims
    128 and 256, "fa3"): packed_p, P_{j-1} carried across the loop's back edge as the packed
    bf16 A fragment (block_n / 4 registers) instead of fp32; with it FA3's wider key blocks
    build with fewer spills, and "bnN" applies to "default" too: "default+packp+bn160" at
    head dim 128, "default+packp+bn176+direct" (FA3's 128 x 176; no spills since h302, 120 B
    full before; the TMA-store epilogue does not fit there, "+direct"),
    "default+packp+bn80+direct" at 256. "ppfa3" (on "default"): FA3's full configuration,
    ping-pong (ordered) with FA3's overlap order (fa3_overlap), the turn around S_j and
    P_{j-1} V_{j-1}; at head dim 64 on the 192 x 128 tile of three warpgroups (the two-CTA
    default of short lengths replaced): "default+ppfa3+packp" (P carried packed: the fp32
    carry spills at head dim 64), "default+ppfa3+packp+bn176+direct" (128 x 176 at 128).
    "olate" (with FA3's overlap order): rescale_after_pv, O rescaled by the new row scale
    after P V retires and the next P V issued unscaled (FA3's rescale_o after the wait), on the
    order without the turns (ping-pong, "ppfa3", always takes it since h309): "default+olate"
    at head dims 128 and 256. "sumend" (any loop): defer_row_sum, the running row sum kept as
    each thread's partial (P's columns folded by 8-column windows) and reduced across the quad
    once after the KV loop (FA3's online_softmax: no warp reduce of the sum per block), e.g.
    "default+sumend". "ekr" (with FA3's overlap order, bf16 / f16 without ping-pong):
    early_k_release, K_j released after wait 1 (S_j retired, P_{j-1} V_{j-1} in flight) and
    before the softmax of S_j, FA3's order, e.g. "default+ekr". "copyfence" changes no
    schedule field: the variant's kernels
    are built with every wgmma register-A fence a copy (a_fence, ARGUS_WGMMA_A_FENCE=copy),
    e.g. "default+copyfence" against "default" (lowering's choice since h314)."""
    import dataclasses

    from argus.kernels.attention import (AttentionSchedule, base_schedule, default_schedule,
                                         fa3_overlap_schedule)

    # only what the variant names: "default" alone is the op's schedule as it runs, diet on
    # (until 2026-12-03 this dict always carried both fields, so "default" ran exact: every
    # `ours` column from 2026-12-02 12:10 to then measured the diet off)
    diet = {}
    if "ex2" in variant or "fast" in variant:
        diet["approx_exp2"] = True
    if "fold" in variant or "fast" in variant:
        diet["fold_scale"] = True
    if "exact" in variant.split("+"):     # the diet off (the default schedule has it on)
        diet = {"approx_exp2": False, "fold_scale": False}
    if "snake" in variant.split("+") and "persistent" not in variant.split("+"):
        variant += "+persistent"   # the snake orders the persistent walk's rounds
    if "pfq" in variant.split("+") and "persistent" not in variant.split("+"):
        variant += "+persistent"   # the next unit's Q is the persistent walk's
    parts = variant.split("+")
    if sum(p.startswith("bn") and p[2:].isdigit() for p in parts) > 1:
        raise ValueError(f"{variant}: more than one key block size (bnN)")
    depth = [int(p[2:]) for p in parts if p.startswith("st") and p[2:].isdigit()]
    if depth:
        diet["stages"] = depth[0]
    # "emuN": N of every 16 key groups of P's exp2 on the FMA pipe (exp2_emulate; needs the
    # SFU exp2, which every default schedule has)
    emulate = [int(p[3:]) for p in parts if p.startswith("emu") and p[3:].isdigit()]
    if emulate:
        diet["exp2_emulate"] = emulate[0]
    # "tma": the stmatrix + TMA-store epilogue (an O staging tile in shared memory) instead of
    # st.global from registers; "persistent" on the default too
    extra = {"epilogue": "tma"} if "tma" in parts else {}
    if "direct" in parts:   # st.global from registers (the defaults at hd128, hd256 and
        extra.update(epilogue="direct", store_cols=0)   # short hd64 store through TMA)
    # "tmaN": the TMA-store epilogue staging N columns of O per round (store_cols), so it
    # fits beside head dim 256's Q and rings ("default+tma128": two rounds of 128 columns)
    rounds = [int(p[3:]) for p in parts if p.startswith("tma") and p[3:].isdigit()]
    if rounds:
        extra.update(epilogue="tma", store_cols=rounds[0])
    if "lpt" in parts:      # heads fastest, then m tiles longest first (tile_order "lpt")
        extra["tile_order"] = "lpt"
    if "snake" in parts:    # the persistent walk, odd rounds reversed (tile_order "snake")
        extra["tile_order"] = "snake"
    if "cl2" in parts:      # full masks: CTA pairs share K and V by TMA multicast
        extra["cluster_m"] = 2
    if "own" in parts:      # causal: each warpgroup computes only the blocks its rows see
        extra["own_blocks"] = True
    if "earlyq" in parts:   # Q released after the tile's last S (fa3_overlap schedules)
        extra["early_q_release"] = True
    if "pfq" in parts:      # the walk's producer prefetches its next unit's Q into L2
        extra["prefetch_next_q"] = True
    if "packp" in parts:    # P carried as the packed 16-bit A fragment (fa3_overlap)
        extra["packed_p"] = True
    if "olate" in parts:    # O rescaled after P V retires (fa3_overlap)
        extra["rescale_after_pv"] = True
    if "sumend" in parts:   # the row sum kept per thread, reduced across the quad at the end
        extra["defer_row_sum"] = True
    if "ekr" in parts:      # K_j released after S_j retires, before its softmax (fa3_overlap)
        extra["early_k_release"] = True
    if "cl2" in parts and causal:
        raise ValueError("cl2: full masks only")
    if parts[0] == "default":
        if "persistent" in parts:
            extra["persistent"] = True
        if "grid" in parts:     # one CTA a tile (the default walks at short full masks)
            extra["persistent"] = False
            extra["early_q_release"] = False
        if "cl2" in parts and default_schedule(head_dim, causal, seq_len).tile_order == "lpt":
            extra["tile_order"] = "head"   # full masks: the order only moves L2 reuse
        if "ppfa3" in parts:
            # FA3's full configuration: ping-pong turns around both GEMM issues of the overlap
            # order (ordered + fa3_overlap); where the default runs two CTAs an SM (head dim
            # 64's short lengths) base_schedule's one-CTA tile (192 x 128, three warpgroups);
            # own_blocks off (head dim 256's causal 2k / 4k default takes it: ping-pong has
            # every warpgroup take every step, so the schedule refuses the pair)
            extra.update(ordered=True, fa3_overlap=True, intra_wg_overlap=False,
                         own_blocks=False)
            if default_schedule(head_dim, causal, seq_len).ctas_per_sm > 1:
                base = base_schedule(head_dim)
                extra.update({f: getattr(base, f) for f in (
                    "block_m", "block_n", "consumers", "producer_regs", "consumer_regs",
                    "ctas_per_sm", "tile_order")})
        keys = [int(p[2:]) for p in parts if p.startswith("bn") and p[2:].isdigit()]
        if keys:                # a key block size on the default (FA3's wider tiles, packp)
            extra["block_n"] = keys[0]
        return dataclasses.replace(default_schedule(head_dim, causal, seq_len), **diet,
                                   **extra)
    if parts[0] == "occ2" and head_dim == 128:
        # two CTAs an SM at head dim 128: one 64-row consumer warpgroup each (ptxas compiles
        # the kernel at the 128 registers 256 threads enter with: O 64 + S 32 + P 16 fit,
        # two warpgroups' 80 do not), FA3's overlap order, 64-key blocks (two CTAs' Q, K, V
        # and O staging in 2 x 97 KB of shared memory)
        extra.setdefault("epilogue", "tma")
        return AttentionSchedule(block_m=64, block_n=64, consumers=1, producer_regs=24,
                                 consumer_regs=232, ctas_per_sm=2, fa3_overlap=True,
                                 persistent="persistent" in parts, **diet, **extra)
    if parts[0] == "occ2":  # two CTAs an SM: half the registers, the plain loop at 128 x 64
        return AttentionSchedule(block_m=128, block_n=64, consumers=2, producer_regs=24,
                                 consumer_regs=104, ctas_per_sm=2,
                                 persistent="persistent" in parts, **diet, **extra)
    s = fa3_overlap_schedule(head_dim, causal) if "fa3" in variant else base_schedule(head_dim)
    if "2wg" in variant:   # two consumer warpgroups of 64 rows (head dim 64 defaults to 3)
        s = dataclasses.replace(s, block_m=128, consumers=2, producer_regs=24,
                                consumer_regs=240, block_n=base_schedule(head_dim).block_n)
    if "3wg" in variant:   # three consumer warpgroups of 64 rows (head dims 128, 256 default to 2)
        s = dataclasses.replace(s, block_m=192, consumers=3, producer_regs=32, consumer_regs=160)
    fields = {"persistent": "persistent" in variant, "intra_wg_overlap": "overlap" in variant,
              "ordered": "pingpong" in variant, **diet, **extra}
    s = dataclasses.replace(s, **fields)
    fixed = [int(p[2:]) for p in variant.split("+") if p.startswith("bn")]
    if fixed:
        return dataclasses.replace(s, block_n=fixed[0])
    while s.problems_for(head_dim) and s.block_n > 32:
        s = dataclasses.replace(s, block_n=s.block_n // 2)
    return s


@contextlib.contextmanager
def a_fence(variant: str):
    """"copyfence" in a variant: its kernels built (and run) under ARGUS_WGMMA_A_FENCE=copy,
    every wgmma register-A fence an identity-prmt copy (the fence of commit 9879b96), instead
    of lowering's choice (copy only for a loop-invariant fragment: ping-pong's Q; argus/
    config.py). The variant's schedule is the same as without the token: the compiled
    kernels (argus/kernel_api.py) and the op's memos of kernels, launches and calls
    (argus/build_memo.py) key on the variable, so both builds live in one process and
    its calls fetch the kernel of the fence in force."""
    import os

    if "copyfence" not in variant.split("+"):
        yield
        return
    old = os.environ.get("ARGUS_WGMMA_A_FENCE")
    os.environ["ARGUS_WGMMA_A_FENCE"] = "copy"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ARGUS_WGMMA_A_FENCE", None)
        else:
            os.environ["ARGUS_WGMMA_A_FENCE"] = old


def kernel_plan(q, k, v, causal, schedule=None):
    """A schedule's kernel (default: argus.ops.attention's own choice for this head dim, mask
    and query length), launch prepared for these tensors: no host work per call."""
    import torch

    from argus.kernels.attention import LOG2E, attention_kernel, default_schedule

    d = q.shape[-1]
    out = torch.empty_like(q)
    kernel = attention_kernel(d, argus_dtype(q), causal, False).compile(
        s=schedule or default_schedule(d, causal, q.shape[2]))
    return kernel.prepare(q, k, v, out, _scalars={"qk_scale": LOG2E / math.sqrt(d)})


def fp8_variant_schedule(variant: str, head_dim: int, causal: bool,
                         seq_len: int | None = None):
    """An FP8 variant's schedule: "default" is argus.ops.attention_fp8's (fp8_schedule);
    '+' joins add "fold" (fold_scale: with the overlap it does not verify yet, ARGUS_VERIFY=0),
    "plain" (no overlap: the plain loop, which verifies folded), "tma" (the stmatrix + TMA
    store epilogue), "bnN" (block_n), "stN" (ring depth), "pvt" (permuted_vt: the kernel on a
    permuted V^T, no P shuffles), "shfl" (the op without the permutation; the schedule is
    the default's: fp8_case reads the token), "emuN" (exp2_emulate: N of every 16 groups of
    8 keys compute P's exp2 on the FMA pipe; "emu0" is the default's SFU-only) and "ppfa3"
    (FA3's FP8 configuration: ping-pong turns around both GEMM issues of the overlap order,
    ordered + fa3_overlap, Q in shared memory; own_blocks off as for the bf16 token),
    "nopp" (no turns), "olate" (rescale_after_pv: O rescaled after P V retires, on the
    overlap order without the turns; "ppfa3" always takes it; the default at every head dim
    since 2026-12-07), "oearly" (rescale_after_pv off: O rescaled at P V's issue, the
    default before that) and "packp" (packed_p, h313: P_{j-1} carried across the overlap
    loop's back edge as e4m3 words, four a register, block_n / 8 a thread instead of
    block_n / 2 fp32; what lets "bn192" / "bn224" / "bn256" fit at head dim 128, e.g.
    "pvt+packp+bn192"; at head dim 128 the default since 2026-12-07: 224 keys full, 192
    causal), "narrow" (the 128-key tile with P in fp32, fp8_schedule(wide_keys=False): the
    default before; "plain" implies it, packed P being the overlap order's carry), "ekr"
    (early_k_release, h328: FA3's early K release, K_j released after S_j retires -- wait_group
    of the V^T atoms' P V groups -- before the softmax of S_j; with the default's late rescale,
    e.g. "pvt+ekr"; not with "ppfa3"), "noekr" (early K release off)."""
    import dataclasses

    from argus.kernels.attention import fp8_schedule

    fields = {}
    parts = variant.split("+")
    wide = "narrow" not in parts and "plain" not in parts
    for part in parts:
        if part in ("default", "narrow"):
            continue
        if part == "fold":
            fields["fold_scale"] = True
        elif part == "plain":   # the late rescale belongs to the overlap order
            # (and early K release: both reorder that loop)
            fields.update(fa3_overlap=False, rescale_after_pv=False, early_k_release=False)
        elif part == "tma":
            fields["epilogue"] = "tma"
        elif part == "pvt":
            fields["permuted_vt"] = True
        elif part == "shfl":
            continue
        elif part[:2] in ("bn", "st") and part[2:].isdigit():
            fields["block_n" if part[:2] == "bn" else "stages"] = int(part[2:])
        elif part[:3] == "emu" and part[3:].isdigit():
            fields["exp2_emulate"] = int(part[3:])
        elif part == "ppfa3":   # (ping-pong does not take early K release)
            fields.update(ordered=True, fa3_overlap=True, intra_wg_overlap=False,
                          own_blocks=False, early_k_release=False)
        elif part == "nopp":
            fields["ordered"] = False
        elif part == "olate":
            fields["rescale_after_pv"] = True
        elif part == "oearly":
            fields["rescale_after_pv"] = False
        elif part == "packp":   # P carried as packed e4m3 across the overlap loop's back edge
            fields["packed_p"] = True
        elif part == "ekr":     # K_j released after S_j retires, before its softmax (h328)
            fields["early_k_release"] = True
        elif part == "noekr":   # early K release off (for a default that may take it)
            fields["early_k_release"] = False
        else:
            raise ValueError(f"fp8 variant {variant!r}: unknown token {part!r}")
    return dataclasses.replace(fp8_schedule(head_dim, causal, wide_keys=wide), **fields)


def fp8_case(row, q, k, v, causal, flops, variants, measure, kernel_only=False) -> None:
    """The FP8 columns of one case (see --fp8) into `row`; kernel_only (--fp8-kernel-only):
    the kernel's prepared launch alone (fp8k_*), not the op's two calls."""
    import importlib

    import torch

    import argus.ops
    from argus.kernels.attention import LOG2E, attention_kernel

    # the module (argus.ops.attention_fp8 is also the op function's name in argus.ops)
    fp8_op = importlib.import_module("argus.ops.attention_fp8")
    transposed_v, kernel_v = fp8_op.transposed_v, fp8_op.kernel_v

    def quant(x):
        s = x.abs().amax().float().item() / 448.0
        return (x.float() / s).to(torch.float8_e4m3fn), s

    (q8, qs), (k8, ks), (v8, vs) = quant(q), quant(k), quant(v)
    vt8 = transposed_v(v8, "bhsd", False)
    vt8p, _ = kernel_v(v8, "bhsd", False)      # keys permuted (the `pvt` kernel's input)
    d = q.shape[-1]
    deq = [t.float() * s for t, s in ((q8, qs), (k8, ks), (v8, vs))]
    scales = {"q_scale": qs, "k_scale": ks, "v_scale": vs}
    for variant in variants:
        schedule = fp8_variant_schedule(variant, d, causal, q.shape[2])
        for name, fn in () if kernel_only else ((f"fp8_{variant}", lambda: argus.ops.attention_fp8(
                            q8, k8, v8, causal=causal, schedule=schedule, **scales)),
                         (f"fp8vt_{variant}", lambda: argus.ops.attention_fp8(
                            q8, k8, vt8, causal=causal, v_transposed=True, schedule=schedule,
                            **scales))):
            fp8_op.PERMUTED_VT = "shfl" not in variant.split("+")
            try:
                out = fn()
                torch.cuda.synchronize()
                row[f"{name}_rel_error"] = check(out, *deq, causal)
                t = measure(fn, trials=100, warmup=5)
                row[f"{name}_ms"], row[f"{name}_tflops"] = t.median_ms, flops / t.median_ms / 1e9
                row[f"{name}_schedule"] = repr(schedule)
            except Exception as e:  # noqa: BLE001 - report and go on
                row[f"{name}_ms"] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            finally:
                fp8_op.PERMUTED_VT = True
        name = f"fp8k_{variant}"
        try:
            out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
            kernel = attention_kernel(d, argus_e4m3(), causal, False,
                                      schedule.permuted_vt).compile(s=schedule)
            plan = kernel.prepare(q8, k8, vt8p if schedule.permuted_vt else vt8, out, _scalars={
                "qk_scale": LOG2E / math.sqrt(d) * qs * ks, "o_scale": vs})
            plan()
            torch.cuda.synchronize()
            row[f"{name}_rel_error"] = check(out, *deq, causal)
            t = measure(plan, trials=100, warmup=5)
            row[f"{name}_ms"], row[f"{name}_tflops"] = t.median_ms, flops / t.median_ms / 1e9
        except Exception as e:  # noqa: BLE001
            row[f"{name}_ms"] = None
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def argus_e4m3():
    import argus as ag

    return ag.e4m3


def argus_dtype(t):
    import argus as ag

    return ag.bf16 if str(t.dtype) == "torch.bfloat16" else ag.f16


def decode_variant(variant: str, head_dim: int, rows: int, units: int = 1, keys: int = 0):
    """(schedule, splits, launches) of a decode variant for `units` (batch x kv heads) CTAs'
    work over `keys` keys: "default" is the op's own choice; else '+' joins of
    "bnN" (block_n), "stN" (ring stages), "wgN" (consumer warpgroups), "exact" (the
    full-range exp2), "staggerN" (DecodeSchedule.stagger = N blocks: the direct kernel's CTAs
    start their walks at 8 different offsets), "streams2" (DecodeSchedule.streams: the direct
    kernel walks the two halves of its blocks alternately; these two with one split only)
    applied to default_decode_schedule(head_dim, rows); "sN" (N splits instead of num_splits'
    choice), "ctaN" (num_splits(..., ctas_per_sm=N): a grid of N CTAs per SM, shorter splits);
    "nocombine" (time the first launch only: the split kernel without the combine, so the
    combine's cost is the difference; launches is then 1, else None: all); "occN"
    (DecodeSchedule.ctas_per_sm = N, the occupancy hint: __launch_bounds__(256, N), the
    consumers' registers cut to their share of 65536 / N (232 at N = 2 with one consumer
    warpgroup beside the 24 of the producer), and the op's split rule fills N CTA
    slots an SM; give it a ring that fits 1/N of the shared memory, e.g. bn64+st2+occ2);
    "fused" (DecodeSchedule.fused_combine: the last split of each head merges, one launch;
    the rings made shallower where the merge's buffers need it, with_fused_combine)."""
    import dataclasses

    from argus.kernels.attention_decode import (default_decode_schedule, num_splits,
                                                with_fused_combine)

    s, splits, launches, per_sm = default_decode_schedule(head_dim, rows), None, None, None
    fields = {}
    for part in variant.split("+"):
        if part == "default":
            continue
        if part == "exact":
            fields["approx_exp2"] = False
        elif part == "nocombine":
            launches = 1
        elif part[:2] in ("bn", "st", "wg") and part[2:].isdigit():
            fields[{"bn": "block_n", "st": "stages", "wg": "consumers"}[part[:2]]] = \
                int(part[2:])
        elif part.startswith("stagger") and part[7:].isdigit():
            fields["stagger"] = int(part[7:])
        elif part.startswith("streams") and part[7:].isdigit():
            fields["streams"] = int(part[7:])
        elif part.startswith("cta") and part[3:].isdigit():
            per_sm = int(part[3:])
        elif part.startswith("occ") and part[3:].isdigit():
            fields["ctas_per_sm"] = int(part[3:])
        elif part == "fused":
            fields["fused_combine"] = True
        elif part[:1] == "s" and part[1:].isdigit():
            splits = int(part[1:])
        else:
            raise ValueError(f"decode variant {variant!r}: unknown token {part!r}")
    if fields.get("ctas_per_sm", 1) > 1:   # the consumers' share of 65536 / N registers
        per_wg = 65536 // 128 // fields["ctas_per_sm"] - s.producer_regs
        fields["consumer_regs"] = min(s.consumer_regs,
                                      per_wg // fields.get("consumers", s.consumers) // 8 * 8)
    schedule = dataclasses.replace(s, **fields) if fields else None
    if schedule is not None and schedule.fused_combine:
        schedule = with_fused_combine(schedule, head_dim)
    if per_sm is not None:
        if splits is not None:
            raise ValueError(f"decode variant {variant!r}: ctaN and sN both set the splits")
        block_n = (schedule or s).block_n
        splits = num_splits(units, max(1, -(-keys // block_n)), ctas_per_sm=per_sm)
    return schedule, splits, launches


def decode_plans(q, k, v, schedule=None, splits=None, launches=None):
    """Our decode launches for these tensors, compiled and prepared once (the op's own host
    path recording instead of launching): a function replaying them (the first `launches`
    of them; None: all), no host work per call but the launches. Holds the partial buffers
    the op allocated; `replay.out` is the output the launches write."""
    import torch

    from argus.ops.attention_decode import run_decode

    plans, held = [], []

    def record(kernel_fn, compile_time, tensors, scalars):
        held.append(tensors)
        plan = kernel_fn.compile(**compile_time).prepare(*tensors, _scalars=scalars)
        if plan is not False:
            plans.append(plan)

    out, _ = run_decode(q, k, v, False, 1.0 / math.sqrt(q.shape[-1]), "bhsd", False,
                        schedule=schedule, splits=splits, execute=record)
    torch.cuda.synchronize()
    total, plans = len(plans), plans[:launches]

    def replay():
        for plan in plans:
            plan()
    replay.held, replay.out = held, out
    replay.launches, replay.total = len(plans), total
    return replay


def decode_check(out, q, k, v, batches: int = 4) -> float:
    """Relative error of the first `batches` sequences against float64 (non-causal)."""
    import torch

    qd, kd, vd = (t[:batches].double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    ref = torch.softmax(qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ vd
    return ((out[:batches].double() - ref).norm() / ref.norm()).item()


def decode_main(args) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import argus.ops
    from argus.kernels.attention_decode import default_decode_schedule, num_splits
    from argus.runtime.timing import measure

    backends = {"cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None),
                "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "math": SDPBackend.MATH}
    wanted = args.backends.split(",") if args.backends else list(backends)
    backends = {n: b for n, b in backends.items() if b is not None and n in wanted}
    batches = [int(x) for x in args.batches.split(",")]
    kvs = [int(x) for x in args.kv.split(",")]
    queries = [int(x) for x in args.queries.split(",")]
    dims = [int(x) for x in args.dims.split(",")] if args.dims else [128]
    H, HKV = (int(x) for x in args.heads.split(":"))
    variants = ["default"] + [x for x in args.decode_variants.split(",") if x and x != "default"]
    pages = [int(x) for x in args.paged.split(",") if x]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; decode, bf16, GQA {H}:{HKV}; L2 flush: "
          f"{args.flush}", flush=True)
    rows = []
    for d in dims:
        for B in batches:
            for SK in kvs:
                for S in queries:
                    rows.append(decode_case(B, SK, S, d, H, HKV, backends, measure, sdpa_kernel,
                                            default_decode_schedule, num_splits, variants,
                                            paged=pages, graph=args.graph, flush=args.flush))
                    print(json.dumps(rows[-1]), flush=True)
                    # after every case: a run cut by its time limit keeps what it measured
                    (args.out / "attention_decode_bench.json").write_text(
                        json.dumps(rows, indent=2))
    mine = [f"paged{p}" for p in pages] + (["graph"] if args.graph else [])
    print_decode_table(rows, list(backends), variants, mine)
    return 0


def decode_table_from(path: Path) -> int:
    """The --decode tables of a saved attention_decode_bench.json: the variants and backends
    are read back from its keys (kernel_<variant>_*, <backend>_ms)."""
    rows = json.loads(Path(path).read_text())
    ours = {"ours", "kernel", "copy", "graph"}
    variants, names, mine = ["default"], [], []
    for r in rows:
        for key in r:
            if not key.endswith(("_ms", "_error")) or key.endswith("rel_error"):
                continue
            name = key.rsplit("_", 1)[0]
            if name.startswith("kernel_") and name[7:] not in variants:
                variants.append(name[7:])
            elif name.startswith(("paged", "graph")) and name not in mine:
                mine.append(name)
            elif name not in ours and not name.startswith(("kernel", "paged")) \
                    and name not in names:
                names.append(name)
    print_decode_table(rows, names, variants, mine)
    return 0


def print_decode_table(rows, names, variants=("default",), mine=()) -> None:
    extra = [f"kernel_{x}" for x in variants if x != "default"] + list(mine)
    print("\n| hd | B | KV | Sq | splits | rel err | copy TB/s | ours % | kernel % | "
          + "".join(f"{x[7:] if x.startswith('kernel_') else x} % | " for x in extra)
          + " | ".join(f"{n} %" for n in names) + " | "
          + " | ".join(f"ours x {n}" for n in names) + " | ours us | kernel us | "
          + " | ".join(f"{n} us" for n in names) + " |")
    print("|---|---|---|---|---|---|---|---|---|" + "---|" * (3 * len(names) + 2 + len(extra)))

    def pct(r, n):
        return f"{r[f'{n}_pct']:.0f}" if r.get(f"{n}_pct") else r.get(f"{n}_error", "n/a")[:40]

    def us(r, n):
        return f"{1000 * r[f'{n}_ms']:.1f}" if r.get(f"{n}_ms") else "n/a"
    if any("host_us" in r for r in rows):
        print("\nhost time of a repeated call through argus.ops.attention (us): "
              + ", ".join(f"B{r['B']} KV{r['SK']} Sq{r['S']}: {r['host_us']:.1f}"
                          for r in rows if "host_us" in r))
    for r in rows:
        ratio = [f"{r[f'{n}_ms'] / r['ours_ms']:.2f}" if r.get("ours_ms") and r.get(f"{n}_ms")
                 else "n/a" for n in names]
        print(f"| {r['head_dim']} | {r['B']} | {r['SK']} | {r['S']} | {r.get('splits')} | "
              f"{r.get('rel_error', float('nan')):.1e} | {r.get('copy_tbps', 0):.2f} | "
              f"{pct(r, 'ours')} | {pct(r, 'kernel')} | "
              + "".join(f"{pct(r, x)} | " for x in extra)
              + " | ".join(pct(r, n) for n in names) + " | " + " | ".join(ratio) + " | "
              + f"{us(r, 'ours')} | {us(r, 'kernel')} | "
              + " | ".join(us(r, n) for n in names) + " |")
    print_speedups(rows, [x for x in variants if x != "default"], names)


def print_speedups(rows, variants, names) -> None:
    """Each variant's and each backend's speed against our default launches on the same data
    (default kernel time / its time: > 1 is faster), free of the copy reference's own noise
    (the % columns divide by a copy timed separately in each case)."""
    if not variants and not names:
        return
    cols = [f"kernel_{x}" for x in variants] + list(names)
    print("\n| B | KV | Sq | kernel us | "
          + " | ".join(f"{c[7:] if c.startswith('kernel_') else c} x kernel" for c in cols)
          + " |")
    print("|---|---|---|---|" + "---|" * len(cols))
    for r in rows:
        base = r.get("kernel_ms")
        cells = [f"{base / r[f'{c}_ms']:.3f}" if base and r.get(f"{c}_ms") else "n/a"
                 for c in cols]
        print(f"| {r['B']} | {r['SK']} | {r['S']} | "
              + (f"{1000 * base:.1f}" if base else "n/a") + " | " + " | ".join(cells) + " |")


def paged_copy(k, v, page_size: int, g):
    """k and v [B, HKV, SK, D] as paged caches [pages, page_size, HKV, D] on a random page
    permutation (a few spare pages), the block table and seq_lens: the same keys."""
    import torch

    B, HKV, SK, D = k.shape
    per = -(-SK // page_size)
    pages = B * per + 7
    order = torch.randperm(pages, device=k.device, generator=g)[:B * per].view(B, per)
    caches = []
    for t in (k, v):
        cache = torch.zeros(pages, page_size, HKV, D, device=k.device, dtype=k.dtype)
        padded = torch.zeros(B, per * page_size, HKV, D, device=k.device, dtype=k.dtype)
        padded[:, :SK] = t.transpose(1, 2)
        cache[order.reshape(-1)] = padded.view(B * per, page_size, HKV, D)
        caches.append(cache)
    lens = torch.full((B,), SK, dtype=torch.int32, device=k.device)
    return caches[0], caches[1], order.int().contiguous(), lens


def host_time_us(fn, calls: int = 200) -> float:
    """CPU time per call of `fn` over calls whose kernels the GPU runs faster than the host
    issues them (best of 5 rounds; a sync between rounds)."""
    import time

    import torch

    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return 1e6 * best


def decode_case(B, SK, S, d, H, HKV, backends, measure, sdpa_kernel, default_decode_schedule,
                num_splits, variants=("default",), paged=(), graph=False,
                flush: str = "write") -> dict:
    """One decode case: ours, our replayed launches, each SDPA backend and the copy, timed on
    fresh random data; KV bytes per second as % of the copy bandwidth of the same bytes.
    paged: page sizes at which ours also runs on a paged copy of K and V; graph: ours also
    captured in a CUDA graph and replayed, and the op's host time per repeated call.
    flush: "write" (measure's own L2 flush: it writes 256 MB, so the timed call starts with
    the L2 full of dirty lines, whose write-back shares HBM with the call's reads) or "read"
    (before each trial, outside the timed region, a read of a 256 MB buffer nobody writes:
    the L2 holds clean lines, so a read-only kernel's time is its reads alone)."""
    import torch

    import argus.ops

    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + SK * 101 + S * 7 + d)
    q = torch.randn(B, H, S, d, device="cuda", generator=g, dtype=torch.bfloat16)
    k, v = (torch.randn(B, HKV, SK, d, device="cuda", generator=g, dtype=torch.bfloat16)
            for _ in range(2))
    kv_bytes = 2 * k.numel() * k.element_size()
    schedule = default_decode_schedule(d, H // HKV * S)
    row = {"head_dim": d, "B": B, "SK": SK, "S": S, "H": H, "HKV": HKV, "kv_bytes": kv_bytes,
           "flush": flush,
           "splits": num_splits(B * HKV, -(-SK // schedule.block_n)), "schedule": repr(schedule)}

    clean = torch.ones(256 << 20, device="cuda", dtype=torch.uint8) if flush == "read" \
        else None

    def read_flush():
        torch.amax(clean)   # reads all 256 MB: every dirty L2 line is written back first

    def timed(name, fn):
        try:
            fn()
            torch.cuda.synchronize()
            if clean is None:
                t = measure(fn, trials=100, warmup=5)
            else:
                t = measure(fn, trials=100, warmup=5, flush_l2=False, setup=read_flush)
            row[f"{name}_ms"] = t.median_ms
            row[f"{name}_tbps"] = kv_bytes / t.median_ms / 1e9
        except Exception as e:  # noqa: BLE001 - report and go on (a backend may refuse)
            row[f"{name}_ms"] = None
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
            torch.cuda.empty_cache()

    # the copy bandwidth of the same bytes (read + write counted), fresh random source
    src = torch.randn(kv_bytes // 2, device="cuda", generator=g, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    timed("copy", lambda: dst.copy_(src))
    del src, dst
    copy_tbps = 2 * row["copy_tbps"] if row.get("copy_ms") else float("nan")
    row["copy_tbps"] = copy_tbps
    try:
        out = argus.ops.attention(q, k, v)
        torch.cuda.synchronize()
        row["rel_error"] = decode_check(out, q, k, v)
        del out
    except Exception as e:  # noqa: BLE001
        row["ours_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    if "ours_error" not in row:
        timed("ours", lambda: argus.ops.attention(q, k, v))
    for variant in variants:
        name = "kernel" if variant == "default" else f"kernel_{variant}"
        if "ours_error" in row and variant == "default":
            continue
        try:
            schedule, splits, launches = decode_variant(variant, d, H // HKV * S, B * HKV, SK)
            replay = decode_plans(q, k, v, schedule, splits, launches)
            replay()
            torch.cuda.synchronize()
            if replay.launches == replay.total:   # "nocombine" leaves the output unwritten
                row[f"{name}_rel_error"] = decode_check(replay.out, q, k, v)
            row[f"{name}_launches"] = replay.launches
            row[f"{name}_splits"] = splits
            timed(name, replay)
            del replay
        except Exception as e:  # noqa: BLE001
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    for page_size in paged:
        name = f"paged{page_size}"
        try:
            kc, vc, table, lens = paged_copy(k, v, page_size, g)
            out = argus.ops.attention_decode(q, kc, vc, table, lens)
            torch.cuda.synchronize()
            row[f"{name}_rel_error"] = decode_check(out, q, k, v)
            timed(name, lambda: argus.ops.attention_decode(q, kc, vc, table, lens))
            del kc, vc, out
        except Exception as e:  # noqa: BLE001
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    if graph and "ours_error" not in row:
        try:
            row["host_us"] = host_time_us(lambda: argus.ops.attention(q, k, v))
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                argus.ops.attention(q, k, v)
            timed("graph", captured.replay)
            del captured
        except Exception as e:  # noqa: BLE001
            row["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    for name, backend in backends.items():
        with sdpa_kernel([backend]):
            timed(name, lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, enable_gqa=H != HKV))
    mine = ["kernel" if x == "default" else f"kernel_{x}" for x in variants]
    mine += [f"paged{p}" for p in paged] + (["graph"] if graph else [])
    for name in ["ours", *mine, *backends]:
        if row.get(f"{name}_ms"):
            row[f"{name}_pct"] = 100.0 * row[f"{name}_tbps"] / copy_tbps
    del q, k, v, clean
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--decode", action="store_true",
                        help="the decode sweep (Sq <= 16 against a KV cache; see the docstring)")
    parser.add_argument("--batches", default="1,32,64,128", help="--decode: batch sizes")
    parser.add_argument("--kv", default="8192,32768", help="--decode: KV lengths")
    parser.add_argument("--queries", default="1,16", help="--decode: query tokens (<= 16)")
    parser.add_argument("--heads", default="32:8", help="--decode: query heads:kv heads")
    parser.add_argument("--table-from", type=Path, default=None,
                        help="print the --decode tables of an attention_decode_bench.json "
                             "(written after every case: a run cut short keeps its rows)")
    parser.add_argument("--flush", default="write", choices=("write", "read"),
                        help="--decode: how the L2 is flushed before each timed call: 'write' "
                             "(measure's 256 MB write, dirty lines left) or 'read' (a read of "
                             "256 MB, clean lines left; see decode_case)")
    parser.add_argument("--decode-variants", default="default",
                        help="--decode: our launches with other schedules, comma-separated "
                             "'+' joins of bnN, stN, wgN, sN (N splits), ctaN (num_splits "
                             "for N CTAs per SM), staggerN / streams2 (rotated / two-stream "
                             "walks, one split), exact, "
                             "nocombine (the split kernel alone) (e.g. st2,bn176+st2,cta2,"
                             "s1+stagger2); each checked against float64 (but nocombine) and "
                             "timed as replayed launches (decode_variant)")
    parser.add_argument("--paged", default="",
                        help="--decode: also time the paged path (attention_decode with a "
                             "block table) at these page sizes, e.g. 16,128 (the same K and V "
                             "on a random page permutation)")
    parser.add_argument("--graph", action="store_true",
                        help="--decode: also time ours captured in a CUDA graph (device time "
                             "without the op's host work) and measure the op's host time per "
                             "repeated call")
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--variants", default="default",
                        help="comma-separated: default (the op's choice), plain, persistent, "
                             "overlap, fa3, pingpong, 2wg, 3wg, occ2, lpt, own, earlyq, snake, "
                             "cl2, grid, bnN, packp, ppfa3, olate, sumend, ekr, "
                             "stN, emuN, "
                             "ex2, fold, fast or '+' "
                             "joins of them (default+fast: the op's choice with the softmax "
                             "diet; each "
                             "timed through argus.ops.attention; overlap verifies clean since "
                             "h329, 2026-12-07)")
    parser.add_argument("--dims", default="", help="head dims, e.g. 64,128,256 (default: "
                                                   "64,128 with --quick, else all three)")
    parser.add_argument("--lengths", default="", help="sequence lengths, e.g. 1024,2048 "
                                                      "(default: by --quick)")
    parser.add_argument("--mask", choices=("both", "full", "causal"), default="both")
    parser.add_argument("--no-gqa", action="store_true", help="leave out the GQA 8:1 cases")
    parser.add_argument("--backends", default="",
                        help="the torch SDPA backends to time (comma-separated; default "
                             "cudnn,flash,efficient, and math too with --decode)")
    parser.add_argument("--fp8", default="",
                        help="also run the FP8 forward (argus.ops.attention_fp8) per case at "
                             "these fp8 variants, comma-separated (default, fold, plain, tma, "
                             "bnN, stN, emuN, pvt, shfl, ppfa3, nopp, olate, oearly, packp, ekr, "
                             "narrow or '+' joins; fp8_variant_schedule), beside cuDNN bf16")
    parser.add_argument("--fp8-kernel-only", action="store_true",
                        help="with --fp8: time the FP8 kernel's prepared launch alone (the "
                             "fp8k_* columns), not the op (fp8_*, fp8vt_*)")
    parser.add_argument("--hide-host", action="store_true",
                        help="queue each timed prefill call behind a ~0.5 ms GPU sleep "
                             "(measure's setup): device time only, the calls' host work "
                             "hidden for ours and the backends alike")
    parser.add_argument("--kernel-only", action="store_true",
                        help="also time each variant's prepared launch (no host work per "
                             "call): the kernel / kernel_<variant> columns")
    args = parser.parse_args()
    variants = list(dict.fromkeys(args.variants.split(",")))  # a repeat would share its keys
    fp8_variants = [x for x in dict.fromkeys(args.fp8.split(",")) if x]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.table_from:
        return decode_table_from(args.table_from)
    if args.decode:
        return decode_main(args)
    args.backends = args.backends or "cudnn,flash,efficient"
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import argus.ops
    from argus.runtime.timing import measure

    if args.hide_host:
        measure = functools.partial(
            measure, setup=lambda: torch.cuda._sleep(HIDE_HOST_CYCLES))
    backends = {"cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None),
                "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    backends = {k: v for k, v in backends.items()
                if v is not None and k in args.backends.split(",")}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; host work hidden behind a GPU sleep: "
          f"{args.hide_host}", flush=True)
    rows = []
    dims = tuple(int(x) for x in args.dims.split(",")) if args.dims else None
    lengths = tuple(int(x) for x in args.lengths.split(",")) if args.lengths else None
    masks = {"both": (False, True), "full": (False,), "causal": (True,)}[args.mask]
    for d, S, causal, H, HKV in cases(args.quick, dims, lengths, masks, not args.no_gqa):
        B = max(1, TOKENS // S)
        g = torch.Generator(device="cuda").manual_seed(d + S + causal)
        q = torch.randn(B, H, S, d, device="cuda", generator=g, dtype=torch.bfloat16)
        k, v = (torch.randn(B, HKV, S, d, device="cuda", generator=g, dtype=torch.bfloat16)
                for _ in range(2))
        flops = 4 * B * H * S * S * d / (2 if causal else 1)
        row = {"head_dim": d, "S": S, "B": B, "H": H, "HKV": HKV, "causal": causal,
               "hide_host": args.hide_host}
        for variant in variants:
            name = "ours" if variant == "default" else f"ours_{variant}"
            try:
                with a_fence(variant):
                    schedule = variant_schedule(variant, d, causal, S)
                    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
                    torch.cuda.synchronize()
                    row[f"{name}_rel_error"] = check(out, q, k, v, causal)
                    t = measure(lambda: argus.ops.attention(q, k, v, causal=causal,
                                                            schedule=schedule),
                                trials=100, warmup=5)
                row[f"{name}_ms"], row[f"{name}_tflops"] = t.median_ms, flops / t.median_ms / 1e9
                row[f"{name}_schedule"] = repr(schedule)
            except Exception as e:  # noqa: BLE001 - report and go on with the other cases
                row[f"{name}_ms"] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        row["rel_error"] = row.get("ours_rel_error", float("nan"))
        if fp8_variants:
            fp8_case(row, q, k, v, causal, flops, fp8_variants, measure,
                     args.fp8_kernel_only)
        if args.kernel_only:
            # each variant's launch prepared once and replayed: no host work per call. The op's
            # call can read up to 20% above its kernel at S 2048 (its host time outlasts the
            # L2 flush before each timed call: scripts/gpu_attention_host.py), so variants are
            # compared on these columns
            for variant in variants:
                name = "kernel" if variant == "default" else f"kernel_{variant}"
                try:
                    with a_fence(variant):
                        plan = kernel_plan(q, k, v, causal,
                                           variant_schedule(variant, d, causal, S))
                        t = measure(plan, trials=100, warmup=5)
                    row[f"{name}_ms"], row[f"{name}_tflops"] = \
                        t.median_ms, flops / t.median_ms / 1e9
                except Exception as e:  # noqa: BLE001
                    row[f"{name}_ms"] = None
                    row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        for name, backend in backends.items():
            try:
                with sdpa_kernel([backend]):
                    fn = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                        q, k, v, is_causal=causal, enable_gqa=H != HKV)
                    fn()
                    t = measure(fn, trials=100, warmup=5)
                row[f"{name}_ms"], row[f"{name}_tflops"] = t.median_ms, flops / t.median_ms / 1e9
            except Exception as e:  # noqa: BLE001 - a backend may not support the case
                row[f"{name}_ms"] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    (args.out / "attention_bench.json").write_text(json.dumps(rows, indent=2))
    names = list(backends)
    mine = ["ours" if v == "default" else f"ours_{v}" for v in variants]
    mine += [("kernel" if v == "default" else f"kernel_{v}") for v in variants] \
        if args.kernel_only else []
    if fp8_variants:
        print_fp8_table(rows, fp8_variants, names, args.fp8_kernel_only)
    print("\n| hd | S | B x H (kv) | causal | rel err | " + " | ".join(mine) + " | "
          + " | ".join(f"{n}" for n in names) + " | "
          + " | ".join(f"ours x {n}" for n in names) + " |")
    print("|---|---|---|---|---|" + "---|" * (len(mine) + 2 * len(names)))

    def cell(r, n):
        return f"{r[f'{n}_tflops']:.0f}" if r.get(f"{n}_ms") else r.get(f"{n}_error", "n/a")
    for r in rows:
        ours = r.get("ours_tflops")
        ratio = [f"{ours / r[f'{n}_tflops']:.2f}" if ours and r.get(f"{n}_ms") else "n/a"
                 for n in names]
        print(f"| {r['head_dim']} | {r['S']} | {r['B']} x {r['H']} ({r['HKV']}) | "
              f"{'yes' if r['causal'] else 'no'} | {r.get('rel_error', float('nan')):.1e} | "
              + " | ".join(cell(r, n) for n in mine) + " | "
              + " | ".join(cell(r, n) for n in names) + " | " + " | ".join(ratio) + " |")
    return 0


def print_fp8_table(rows, variants, names, kernel_only=False) -> None:
    """TFLOP/s of the FP8 columns, their error against float64 on the dequantized inputs, and
    each against the bf16 backends timed in the same case (cuDNN first); kernel_only: the
    fp8k_* columns alone (the error is then the kernel's)."""
    kinds = ("fp8k",) if kernel_only else ("fp8", "fp8vt", "fp8k")
    cols = [f"{kind}_{v}" for v in variants for kind in kinds]
    print("\n| hd | S | causal | " + " | ".join(cols) + " | fp8 rel err | "
          + " | ".join(f"{c} x {n}" for c in cols for n in names[:1]) + " |")
    print("|---|---|---|" + "---|" * (len(cols) + 1 + len(cols) * len(names[:1])))
    for r in rows:
        cells = [f"{r[f'{c}_tflops']:.0f}" if r.get(f"{c}_ms") else
                 r.get(f"{c}_error", "n/a")[:40] for c in cols]
        ratio = [f"{r[f'{c}_tflops'] / r[f'{n}_tflops']:.2f}"
                 if r.get(f"{c}_ms") and r.get(f"{n}_ms") else "n/a"
                 for c in cols for n in names[:1]]
        err = r.get(f"{kinds[0]}_{variants[0]}_rel_error", float("nan"))
        print(f"| {r['head_dim']} | {r['S']} | {'yes' if r['causal'] else 'no'} | "
              + " | ".join(cells) + f" | {err:.1e} | " + " | ".join(ratio) + " |")


if __name__ == "__main__":
    sys.exit(main())
