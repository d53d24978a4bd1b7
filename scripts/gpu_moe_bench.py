"""MoE layer benchmark on the GPU: argus.ops.moe against two torch paths, in one process.

For each model (E experts, top-k, hidden H, expert intermediate I) and token count T, on fresh
random bf16 data:
  ours     argus.ops.moe(x, w13, w2, logits, k, ...): routing, permutation, both grouped GEMMs
           and the combine, all Argus kernels;
  loop     torch's own routing (softmax / grouped-sigmoid top-k), then per expert: gather its
           tokens, x @ w13[e].T, silu(gate) * up, @ w2[e].T, times the routing weight,
           index_add_ into the output (the per-expert torch.mm loop);
  grouped  the same routing, tokens sorted by expert (argsort), torch._grouped_mm for the two
           GEMMs with cumulative offsets, silu * up, weights, index_add_.
The whole layer is timed for each (median of L2-flushed trials, CUDA events; argus.bench.timing).
Prefill (T > 64) reports TFLOP/s (2 * T * k * 3 * H * I flops); decode (T <= 64) reports the
percent of the weight-read floor: the bytes of the experts the batch touches over the device
copy bandwidth measured in the same run (a large device-to-device copy, read + write counted),
so 100% means reading exactly those weights at copy speed. For decode rows the expert GEMMs of
ours are also timed alone (torch.profiler device time of the moe_gate_up*, moe_split_finish*
and moe_down* kernels, the swap-AB decode path of argus/kernels/moe.py) against the same
floor: the issue's bar is >= 95% for them. Decode rows also print where the rest of the
layer goes: the device time of ours' other kernels (routing, permute, combine), the host time
of one call (the time to enqueue its launches: decode layers are host-bound when it exceeds
the device time), and ours timed with the replay of recorded launch plans turned off
("ours-noreplay": every launch re-checks its arguments, as before argus.ops.moe replayed
repeated calls), and ours captured in a CUDA graph and replayed (no host work at all, calls
back to back without an L2 flush: what a graph-captured decode loop sees). Every path's
output is checked against a float64 reference on the same routing (relative Frobenius error
< 1e-2).

    python scripts/gpu_moe_bench.py                 # all models, T = 1 ... 16384
    python scripts/gpu_moe_bench.py --quick         # T = 1, 16, 64 and 4096, fewer trials
    python scripts/gpu_moe_bench.py --models mixtral --tokens 16 16384
    python scripts/gpu_moe_bench.py --decode        # T = 1, 16, 64 only
    python scripts/gpu_moe_bench.py --decode --rule-variants --models qwen3-30b-a3b
                                                    # and the decode rule's alternatives
                                                    # (gate-up-split*-fused: ARGUS_VERIFY=0)
    python scripts/gpu_moe_bench.py --fixed-cost --models qwen3-30b-a3b
                                                    # decode GEMMs: fixed us per kernel and
                                                    # stream rate, fitted over 8..64 experts
    python scripts/gpu_moe_bench.py --quick --variants   # also other GEMM schedules
    python scripts/gpu_moe_bench.py --quick --breakdown  # ours' device time per kernel
    ARGUS_VERIFY=0 python scripts/gpu_moe_bench.py --models mixtral --tokens 16384 \
        --trials 10 --prefill-variants      # issue 16's prefill bar: the rule's schedules and
                                            # prefill_variants(), each by kernel, and dense
                                            # references of the same FLOPs (~2 min)
    python scripts/gpu_moe_bench.py --routing       # the routing alone (route + layout);
                                                    # the old chain's: docs/perf/moe.md
    ARGUS_VERIFY=0 python scripts/gpu_moe_bench.py --fp8 # DeepSeek-V3 fp8 (block scales),
                                                    # T = 4096 and 16384, ~1 min
    python scripts/gpu_moe_bench.py --fp8 --tokens 8192 --rounds 3 \
        --fp8-only split_smem_tma split_smem_tma_grid   # the paths timed in 3 rounds that
                                                    # alternate and rotate (the first path
                                                    # measured in a process runs fastest),
                                                    # median round, spread in the log
    python3 -u scripts/gpu_moe_bench.py --fp8 --tokens 4096 8192 16384 --rounds 3 \
        --fp8-only split_smem_tma split_smem_tma_grid split_smem_tma_dyn
                                                    # the static walk, one CTA a unit and
                                                    # the dynamic walk (scheduler="dynamic")

Prints one line per measurement, then a markdown table; writes moe.json and moe.md under --out.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: (E, top_k, H, I, routing); routing: ("softmax", renormalize) or
# ("sigmoid", groups, topk_groups, routed_scaling_factor)
MODELS = {
    "mixtral": (8, 2, 4096, 14336, ("softmax", True)),
    "deepseek-v3": (256, 8, 7168, 2048, ("sigmoid", 8, 4, 2.5)),
    "qwen3-30b-a3b": (128, 8, 2048, 768, ("softmax", True)),
}
TOKENS = [1, 16, 64, 256, 1024, 4096, 16384]
QUICK_TOKENS = [1, 16, 64, 4096]
DECODE_MAX = 64


def log(msg: str) -> None:
    print(msg, flush=True)


def torch_route(logits, k, routing, bias):
    """torch's own top-k for the model's routing: (ids int64 [T, k], weights fp32 [T, k])."""
    import torch

    if routing[0] == "softmax":
        w, ids = torch.softmax(logits.float(), dim=1).topk(k, dim=1)
        return ids, (w / w.sum(dim=1, keepdim=True) if routing[1] else w)
    _, groups, topk_groups, scale = routing
    T, E = logits.shape
    s = torch.sigmoid(logits.float())
    choice = s + bias
    group = choice.view(T, groups, E // groups).topk(2, dim=2).values.sum(dim=2)
    keep = torch.zeros_like(group).scatter_(1, group.topk(topk_groups, dim=1).indices, 1.0)
    mask = keep.repeat_interleave(E // groups, dim=1).bool()
    ids = choice.masked_fill(~mask, float("-inf")).topk(k, dim=1).indices
    w = s.gather(1, ids)
    return ids, w / w.sum(dim=1, keepdim=True) * scale


def loop_layer(x, w13, w2, logits, k, routing, bias):
    """The per-expert torch.mm loop (host syncs on the expert's token list, as users write)."""
    import torch
    import torch.nn.functional as F

    ids, w = torch_route(logits, k, routing, bias)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    inter = w2.shape[2]
    for e in range(w13.shape[0]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = x[tok] @ w13[e].T
        h = F.silu(gu[:, :inter]) * gu[:, inter:]
        y = h @ w2[e].T
        out.index_add_(0, tok, y.float() * w[tok, slot, None])
    return out.bfloat16()


def grouped_layer(x, w13, w2, logits, k, routing, bias):
    """torch._grouped_mm over the tokens sorted by expert."""
    import torch
    import torch.nn.functional as F

    ids, w = torch_route(logits, k, routing, bias)
    E, inter = w13.shape[0], w2.shape[2]
    flat = ids.reshape(-1)
    order = flat.argsort(stable=True)
    tok = order // k
    offs = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
    xs = x[tok]
    gu = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    h = F.silu(gu[:, :inter]) * gu[:, inter:]
    y = torch._grouped_mm(h, w2.transpose(1, 2), offs=offs)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y.float() * w.reshape(-1)[order, None])
    return out.bfloat16()


def ours_layer(x, w13, w2, logits, k, routing, bias, schedule=None, out=None):
    """argus.ops.moe; with `out` (a decode loop's static output buffer) repeated calls
    replay their launches, without it every call launches anew."""
    from argus.ops import moe

    if routing[0] == "softmax":
        return moe(x, w13, w2, logits, k, renormalize=routing[1], schedule=schedule, out=out)
    _, groups, topk_groups, scale = routing
    return moe(x, w13, w2, logits, k, scoring="sigmoid", e_score_correction_bias=bias,
               num_expert_group=groups, topk_group=topk_groups, routed_scaling_factor=scale,
               schedule=schedule, out=out)


def variants(tokens: int):
    """Other grouped-GEMM schedules timed with --variants (name -> MoeSchedule): the data for
    choosing argus.ops.moe.schedule_for's thresholds and defaults (the swap-AB decode ones at
    decode sizes only)."""
    from dataclasses import replace

    from argus.kernels.moe import (PREFILL, PREFILL_CLUSTER, PREFILL_TMA, PREFILL_TMA_CLUSTER,
                                   SMALL, TINY, decode_schedule)

    # with PDL, as argus.ops.moe.decode_schedules, and named so: "decode-n8-nopdl" is the
    # plain launch (MoeSchedule's repr shows pdl=True when on)
    decode = {"decode-n8-pdl": decode_schedule(8, pdl=True),
              "decode-n8-nopdl": decode_schedule(8),
              "decode-n16-pdl": decode_schedule(16, pdl=True),
              "decode-n8-4stages-pdl": decode_schedule(8, stages=4, pdl=True),
              "decode-n8-12stages-pdl": decode_schedule(8, stages=12, pdl=True),
              "decode-n8-split2-pdl": decode_schedule(8, split_k=2, pdl=True)} \
        if tokens <= DECODE_MAX else {}
    return {**decode, "128x256": PREFILL, "128x256-g16": replace(PREFILL, group_m=16),
            "128x256-tma": PREFILL_TMA, "128x256-cluster2": PREFILL_CLUSTER,
            "128x256-tma-cluster2": PREFILL_TMA_CLUSTER,
            "128x256-tma-s4c128": replace(PREFILL_TMA, stages=4, store_cols=128),
            "128x128": replace(PREFILL, bn=128, stages=6), "64x128": SMALL, "64x64": TINY,
            "64x128-s8": replace(SMALL, stages=8), "64x256": replace(SMALL, bn=256, stages=5)}


def prefill_variants() -> dict:
    """The prefill GEMMs' schedule alternatives timed with --prefill-variants, as (gate-up,
    down) pairs (name -> pair), one change each against the rule's PREFILL_TMA_CLUSTER
    (128x256, 3 stages, TMA store, 2x1 clusters) where possible: the dense GEMM's fastest ring
    (4 stages; the down's TMA store in rounds of 128 columns to make room for it), the
    grouped raster's group_m (m-units of 256 rows walked down before moving along N: 4, 8 =
    the rule's, 16 = about one Mixtral expert at T = 16384), 128-row padding without
    clusters, the register epilogue with clusters, the gate-up's SiLU on the SFU
    (fast_silu: its epilogue runs while no wgmma issues), and CTA pairs along N (cluster_n=2:
    the pair shares the token tile, experts pad to 128 rows) last. The data for docs/perf/moe.md's
    T = 16384 accounting (issue 16's >= 700 TFLOP/s bar)."""
    from dataclasses import replace

    from argus.kernels.moe import (PREFILL_CLUSTER, PREFILL_DOWN_PAIR_N, PREFILL_DOWN_S4,
                                   PREFILL_GATE_UP_PAIR_N, PREFILL_GATE_UP_S4, PREFILL_TMA,
                                   PREFILL_TMA_CLUSTER)

    base = PREFILL_TMA_CLUSTER
    best = (PREFILL_GATE_UP_S4, PREFILL_DOWN_S4)
    return {"gate-up-4st": (PREFILL_GATE_UP_S4, base),
            "down-4st-c128": (base, PREFILL_DOWN_S4),
            "both-4st": best,
            # the gated epilogue's SiLU on the SFU's ex2.approx (MoeSchedule.fast_silu)
            "both-4st-fast-silu": (replace(PREFILL_GATE_UP_S4, fast_silu=True),
                                   PREFILL_DOWN_S4),
            "both-4st-g4": tuple(replace(s, group_m=4) for s in best),
            "both-4st-g16": tuple(replace(s, group_m=16) for s in best),
            "both-4st-nocluster": (replace(PREFILL_TMA, stages=4),
                                   replace(PREFILL_TMA, stages=4, store_cols=128)),
            "register-epilogue-cluster": (PREFILL_CLUSTER, PREFILL_CLUSTER),
            # last (the newest kernels: a device fault would not cost the earlier numbers):
            # CTA pairs along N sharing the token tile, 128-row padding; group_m 16 walks the
            # same 2048 rows per group as the rule's 8 units of 256
            "both-4st-pair-n": (PREFILL_GATE_UP_PAIR_N, PREFILL_DOWN_PAIR_N),
            "both-4st-pair-n-g16": (replace(PREFILL_GATE_UP_PAIR_N, group_m=16),
                                    replace(PREFILL_DOWN_PAIR_N, group_m=16)),
            # every candidate at once: what they add up to in the same run
            "pair-n-g16-fast-silu": (replace(PREFILL_GATE_UP_PAIR_N, group_m=16,
                                             fast_silu=True),
                                     replace(PREFILL_DOWN_PAIR_N, group_m=16)),
            # the rule's own gate-up (3 stages, 2x1 clusters) with a cheaper SiLU epilogue, the
            # down unchanged (2026-12-04: the only fast-SiLU run so far was on the slower
            # 4-stage ring, -3.2% gate-up us). fast_silu: ex2.approx, still an IEEE division
            # per element (a slow-path branch each); rsqrt_silu: the division as rsqrt(d)^2,
            # branch-free (SASS of the rule's gate-up: 2384 instructions, 64 CALLs -> 1592
            # with rsqrt_silu, 1080 with both; tests/moe/test_moe_prefill_schedules.py)
            # (the rule takes rsqrt_silu since 2026-12-04: rule-ieee-silu is the division)
            "rule-ieee-silu": (replace(base, rsqrt_silu=False), base),
            "rule-fast-silu": (replace(base, fast_silu=True, rsqrt_silu=False), base),
            "rule-fast-rsqrt-silu": (replace(base, fast_silu=True, rsqrt_silu=True), base),
            # CTA pairs along N on the rule's 3-stage ring (the 12-03 run timed them at 4
            # stages only, where the rule's own pair of forms lost 6-11% of gate-up time to 3):
            # 128-row padding (~1.8% rows at Mixtral T = 16384 against the rule's ~3.9%)
            "pair-n-3st": (replace(base, cluster_m=1, cluster_n=2),
                           replace(base, cluster_m=1, cluster_n=2)),
            # ... walking 16 m-tiles of 128 rows per raster group (the rule's 8 of 256 rows:
            # at 4 stages g16 took 3% off pair-N's gate-up, 11883 vs 12269 us), and with the
            # branch-free SiLU too
            "pair-n-3st-g16": (replace(base, cluster_m=1, cluster_n=2, group_m=16),
                               replace(base, cluster_m=1, cluster_n=2, group_m=16)),
            "pair-n-3st-g16-fast-rsqrt-silu": (replace(base, cluster_m=1, cluster_n=2,
                                                       group_m=16, fast_silu=True,
                                                       rsqrt_silu=True),
                                               replace(base, cluster_m=1, cluster_n=2,
                                                       group_m=16)),
            # MoeSchedule.skip_pad_halves on the rule's schedules (both GEMMs): a consumer
            # warpgroup whose rows of an m-tile are all padding only releases the unit's
            # stages; with 2x1 clusters (256-row units) the pair's second CTA skips whole
            # when its expert's last unit has <= 128 rows. Not measured on a GPU yet
            "rule-skip": (replace(base, skip_pad_halves=True),
                          replace(base, skip_pad_halves=True)),
            # one cluster a unit instead of the persistent walk (MoeSchedule persistent=False:
            # the hardware hands units out in order), so the m-tiles sharing a weight tile
            # stay in step and share its L2 reads (the fp8 gate-up's persistent CTAs drift
            # apart: ncu, 2026-12-06, docs/perf/moe.md)
            "rule-grid": (replace(base, persistent=False), replace(base, persistent=False)),
            "tma-skip": (replace(PREFILL_TMA, skip_pad_halves=True),
                         replace(PREFILL_TMA, skip_pad_halves=True))}


# --prefill-only: the variants run_prefill_variants times besides the rule (all when empty)
PREFILL_ONLY: tuple = ()


def split_gemm_time(per: dict) -> tuple[float, float, float]:
    """(gate-up us, down us, every other kernel's us) of a kernel_breakdown."""
    gate_up = sum(us for key, us in per.items() if "moe_gate_up" in key)
    down = sum(us for key, us in per.items() if "moe_down" in key)
    return gate_up, down, sum(per.values()) - gate_up - down


def padded_rows(ids, E: int, pad: int) -> int:
    """Rows the grouped GEMMs compute for routing `ids`: each expert's rows padded to `pad`."""
    import torch

    counts = torch.bincount(ids.reshape(-1), minlength=E)
    return int(((counts + pad - 1) // pad * pad).sum().item())


def prefill_breakdown(label: str, fn, N: int, H: int, I: int, rows: int, reps: int = 3) -> dict:
    """Device time per kernel of one prefill layer call (torch.profiler) and each GEMM's
    TFLOP/s on the routed rows (N = T * k; the bar's count) and on the rows it computes
    (`rows`, padding included), logged as one line."""
    per = kernel_breakdown(fn, reps=reps)
    gate_up, down, other = split_gemm_time(per)
    flops_gu, flops_dn = 2.0 * N * H * 2 * I, 2.0 * N * I * H
    out = dict(kernels_us=per, gate_up_us=gate_up, down_us=down, other_us=other,
               padded_rows=rows, routed_rows=N)
    for name, us, flops in (("gate_up", gate_up, flops_gu), ("down", down, flops_dn)):
        out[f"{name}_tflops"] = flops / (us * 1e-6) / 1e12 if us else float("nan")
        out[f"{name}_tflops_padded"] = out[f"{name}_tflops"] * rows / N
    log(f"{label}: gate-up {gate_up:.0f} us ({out['gate_up_tflops']:.0f} TFLOP/s routed, "
        f"{out['gate_up_tflops_padded']:.0f} on {rows} padded rows), down {down:.0f} us "
        f"({out['down_tflops']:.0f} / {out['down_tflops_padded']:.0f}), other kernels "
        f"{other:.0f} us: " + ", ".join(f"{key.split('(')[0][:36]} {us:.1f}"
                                        for key, us in per.items()
                                        if "moe_gate_up" not in key and "moe_down" not in key))
    return out


def dense_references(N: int, H: int, I: int, w13, w2, trials: int, allow_few: bool) -> dict:
    """The same FLOPs as one dense GEMM each, in the same run: cuBLAS (torch.mm) and Argus's
    dense kernel with the grouped GEMM's schedules (argus.ops.matmul, fixed schedule, no
    tuning), x [N, H] @ w13[0].T -> [N, 2I] and h [N, I] @ w2[0].T -> [N, H]: what the card
    sustains on these sizes, so that the grouped GEMMs' rates read against a ceiling measured
    beside them (sustained rates of long GEMMs sit below short ones': clocks)."""
    import torch

    from argus.bench.timing import measure
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul

    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(N, H, generator=g, device="cuda").bfloat16()
    h = torch.randn(N, I, generator=g, device="cuda").bfloat16()
    shapes = {"gate-up": (a, w13[0].T, 2.0 * N * H * 2 * I),
              "down": (h, w2[0].T, 2.0 * N * I * H)}
    kinds = {"cublas": None,
             "argus-3st": GemmSchedule(stages=3, epilogue="tma", cluster_m=2),
             "argus-4st-c128": GemmSchedule(stages=4, epilogue="tma", cluster_m=2,
                                            store_cols=128)}
    out: dict = {}
    for shape, (lhs, rhs, flops) in shapes.items():
        for kind, sched in kinds.items():
            label = f"dense {shape} {N}x{rhs.shape[1]}x{lhs.shape[1]} {kind}"
            try:
                fn = (lambda lhs=lhs, rhs=rhs: torch.mm(lhs, rhs)) if sched is None else \
                    (lambda lhs=lhs, rhs=rhs, sched=sched: matmul(lhs, rhs, schedule=sched))
                fn()
                torch.cuda.synchronize()
                t = measure(fn, trials=trials, allow_few_trials=allow_few)
                out[f"{shape} {kind}"] = dict(ms=t.median_ms,
                                              tflops=flops / (t.median_ms * 1e-3) / 1e12)
                log(f"{label}: {t.median_ms:.3f} ms {out[f'{shape} {kind}']['tflops']:.0f} "
                    f"TFLOP/s")
            except Exception as e:  # noqa: BLE001 - a reference failing is reported
                out[f"{shape} {kind}"] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
                log(f"{label}: FAILED {out[f'{shape} {kind}']['error']}")
            torch.cuda.empty_cache()
    return out


def run_prefill_variants(name, T, x, w13, w2, logits, k, routing, bias, ids, exact, trials,
                         allow_few, row, rounds: int = 3) -> None:
    """--prefill-variants at one prefill shape: ours with the rule's schedule and each pair of
    prefill_variants(), every one checked against float64 and broken down by kernel
    (profiler), then all timed as whole layers in `rounds` alternating rounds (in_rounds;
    each the median of L2-flushed CUDA-event trials; the median round reported), after the
    dense references, then broken down again as hot as the timing left the card. Fills
    row["prefill"]; prefill_table() renders it."""
    import torch

    from argus.ops.moe import schedule_for

    E, _, H, I, _ = MODELS[name]
    N = T * k
    flops = 2.0 * N * 3 * H * I
    # the dense references first: a variant that faults the device would take every later
    # measurement of the process with it
    result: dict = {"dense": dense_references(N, H, I, w13, w2, trials, allow_few)}
    row["prefill"] = result
    calls = {}
    chosen = [(v, p) for v, p in prefill_variants().items()
              if not PREFILL_ONLY or v in PREFILL_ONLY]
    for v, pair in [("rule", None), *chosen]:
        label = f"{name} T={T} prefill {v}"
        try:
            pad = (pair[0] if pair else schedule_for(T, k, E, H)).pad

            def call(pair=pair):
                return ours_layer(x, w13, w2, logits, k, routing, bias, schedule=pair)
            out = call()
            torch.cuda.synchronize()
            err = ((out.double() - exact).norm() / exact.norm()).item()
            del out
            entry = dict(rel_err=err, ok=err < 1e-2,
                         schedules=[repr(s) for s in pair] if pair else None)
            log(f"{label}: rel_err={err:.2e}{'' if err < 1e-2 else '  WRONG'}")
            entry.update(prefill_breakdown(label, call, N, H, I, padded_rows(ids, E, pad)))
            result[v] = entry
            calls[v] = call
        except Exception as e:  # noqa: BLE001 - a variant failing is reported, not fatal
            result[v] = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
            log(f"{label}: FAILED {result[v]['error']}")
        with contextlib.suppress(RuntimeError):   # a faulted context fails here too
            torch.cuda.empty_cache()
    # the rule once more, each timed call queued behind a GPU sleep (hide_host): its host
    # work (the op's checks and nine launches) then runs while the device still sleeps, so
    # "rule" minus "rule-hidden-host" is what the layer loses to the device waiting on the
    # host after the L2 flush
    if "rule" in calls:
        result[HIDDEN_HOST] = {key: value for key, value in result["rule"].items()
                               if key != "schedules"}
        calls[HIDDEN_HOST] = calls["rule"]
    time_prefill_layers(f"{name} T={T} prefill", calls, result, flops, trials, allow_few,
                        rounds)
    hot_prefill_breakdowns(f"{name} T={T} prefill", calls, result, trials, rounds)


def time_prefill_layers(label, calls, result, flops, trials, allow_few, rounds) -> None:
    """run_prefill_variants' timing: each of `calls` ({variant: layer call}) as a whole layer
    in `rounds` rounds that alternate and rotate (in_rounds: clock and power drift over the
    run falls on every variant alike, not on the last ones), HIDDEN_HOST behind hide_host;
    the median round's ms and TFLOP/s into result[variant]."""
    timed = in_rounds([(v, functools.partial(layer_ms, call, trials, allow_few,
                                             hide_host if v == HIDDEN_HOST else None))
                       for v, call in calls.items()], rounds)
    for v, ms in timed.items():
        if isinstance(ms, Exception):
            log(f"{label} {v}: timing failed: {type(ms).__name__}: {str(ms)[:200]}")
            continue
        result[v].update(ms=statistics.median(ms), **rounds_entry("rounds_ms", ms))
        result[v]["tflops"] = flops / (result[v]["ms"] * 1e-3) / 1e12
        log(f"{label} {v}: {result[v]['ms']:.3f} ms {result[v]['tflops']:.0f} TFLOP/s "
            f"(whole layer{spread(ms, 'ms')})")


def hot_prefill_breakdowns(label, calls, result, trials, rounds) -> None:
    """run_prefill_variants' second breakdown: each timed variant's kernels (not HIDDEN_HOST's:
    the rule's again) profiled in `rounds` rounds right after the timing, the card as hot as
    in the timed rounds; per kernel the median round, gate-up, down and other us and their
    sum into result[variant]. Why hot: the 12-03 run's first (cold) breakdown summed to
    16.1 ms against an 18.2-18.8 ms timed layer. Layer ms above this hot sum is time between
    kernels (host, launch gaps); a hot sum above the cold one is the kernels running slower
    when hot (clocks under sustained power), which no schedule change removes."""
    hot = in_rounds([(v, functools.partial(kernel_breakdown, call, reps=max(trials, 10)))
                     for v, call in calls.items()
                     if "ms" in result[v] and v != HIDDEN_HOST], rounds)
    for v, pers in hot.items():
        if isinstance(pers, Exception):
            log(f"{label} {v}: hot breakdown failed: {type(pers).__name__}: {str(pers)[:200]}")
            continue
        gate_up, down, other = split_gemm_time(median_kernels(pers))
        sums = [sum(per.values()) / 1e3 for per in pers]
        result[v].update(hot_gate_up_us=gate_up, hot_down_us=down, hot_other_us=other,
                         hot_kernels_ms=(gate_up + down + other) / 1e3,
                         **rounds_entry("hot_rounds_ms", sums))
        log(f"{label} {v}: kernels hot {result[v]['hot_kernels_ms']:.3f} ms (gate-up "
            f"{gate_up:.0f} us, down {down:.0f} us, other {other:.0f} us{spread(sums, 'ms')}) "
            f"against the layer's {result[v]['ms']:.3f} ms")


HIDDEN_HOST = "rule-hidden-host"
# hide_host's GPU sleep (torch.cuda._sleep cycles): ~1 ms at the H200's clocks, several times
# the host work of a prefill call before its GEMMs are queued
HIDE_HOST_CYCLES = 2_000_000


def hide_host() -> None:
    """A timed call's setup (outside its events, before the L2 flush): the device sleeps while
    the host queues the call, so no host work leaves the device idle inside the timing."""
    import torch

    if torch.cuda.is_available():
        torch.cuda._sleep(HIDE_HOST_CYCLES)


def in_rounds(calls, rounds: int) -> dict:
    """Each (name, fn) of `calls` called once a round for `rounds` rounds that alternate
    between them and rotate which comes first (round r starts at the r-th call: A B C,
    B C A, C A B, A B C, ...), so that drift over the run (clocks, heat) falls on every call
    alike rather than favouring the first: one H100 process measured the same DeepSeek-V3
    T = 8192 fp8 layer at 7.742 ms as its first path and 8.597 ms as its third. One round
    is the calls in order. Returns {name: [fn()'s result each round]}, or {name: the
    exception} for a call that raised: it sits out the later rounds, the rest go on (a
    device fault fails every later call, whichever it is charged to)."""
    results: dict = {name: [] for name, _ in calls}
    for r in range(rounds):
        start = r % len(calls) if calls else 0
        for name, fn in calls[start:] + calls[:start]:
            if isinstance(results[name], list):
                try:
                    results[name].append(fn())
                except Exception as e:  # noqa: BLE001 - handed back to the caller
                    results[name] = e
    return results


def layer_ms(call, trials: int, allow_few: bool = True, setup=None) -> float:
    """Median ms of `trials` L2-flushed CUDA-event timed calls of `call` (3 warm-up calls;
    `setup` before each, outside the timing: argus.bench.timing.measure)."""
    from argus.bench.timing import measure

    return measure(call, trials=trials, warmup=3, allow_few_trials=allow_few,
                   setup=setup).median_ms


def median_kernels(pers: list) -> dict:
    """Per kernel the median device time over rounds of kernel_breakdown (a kernel missing
    from a round counts over the rounds it is in), largest first; one round: that round."""
    keys = {key for per in pers for key in per}
    out = {key: statistics.median(per[key] for per in pers if key in per) for key in keys}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def spread(values: list, unit: str, fmt: str = ".3f") -> str:
    """', N rounds LO-HI unit' for a log line; '' for one round (the log as before rounds)."""
    if len(values) < 2:
        return ""
    return f", {len(values)} rounds {min(values):{fmt}}-{max(values):{fmt}} {unit}"


def rounds_entry(key: str, values: list) -> dict:
    """{key: each round's value} for a JSON row; {} for one round (the row as before)."""
    return {key: list(values)} if len(values) > 1 else {}


def prefill_table(rows) -> str:
    """The --prefill-variants table: per variant the whole layer and each kernel group."""
    lines = []
    for r in rows:
        res = r.get("prefill")
        if not res:
            continue
        lines += [f"\n{r['model']} T = {r['T']} (routed rows {r['T'] * r['k']}):",
                  "| variant | layer ms | layer TFLOP/s | gate-up us (TFLOP/s routed / padded) "
                  "| down us (TFLOP/s routed / padded) | other kernels us | rel err "
                  "| kernels ms cold / hot |",
                  "|---|---|---|---|---|---|---|---|"]
        for v, d in res.items():
            if v == "dense":
                continue
            if "ms" not in d:
                lines.append(f"| {v} | fail | - | - | - | - | {d.get('error', 'no time')[:60]} "
                             f"| - |")
                continue
            # the kernels' device times summed: first profile (cold) / after the timing (hot)
            cold = (d["gate_up_us"] + d["down_us"] + d["other_us"]) / 1e3
            hot = f"{d['hot_kernels_ms']:.3f}" if "hot_kernels_ms" in d else "-"
            lines.append(
                f"| {v} | {d['ms']:.3f} | {d['tflops']:.0f} | {d['gate_up_us']:.0f} "
                f"({d['gate_up_tflops']:.0f} / {d['gate_up_tflops_padded']:.0f}) | "
                f"{d['down_us']:.0f} ({d['down_tflops']:.0f} / {d['down_tflops_padded']:.0f}) "
                f"| {d['other_us']:.0f} | {d['rel_err']:.1e}{'' if d['ok'] else ' WRONG'} "
                f"| {cold:.3f} / {hot} |")
        dense = res.get("dense", {})
        if dense:
            lines.append("\ndense references (same FLOPs, one GEMM): " + "; ".join(
                f"{key} {d['ms']:.3f} ms {d['tflops']:.0f} TFLOP/s" if "ms" in d else
                f"{key} failed" for key, d in dense.items()))
    return "\n".join(lines)


def decode_rule_variants(T: int, k: int, E: int, H: int, I: int) -> dict:
    """The decode rule's own alternatives (argus.ops.moe.decode_schedules), one change each,
    as (gate-up, down) pairs: without PDL, with the weight prefetch before the PDL wait at
    one and two ring depths, the down's ring at 8 stages (the rule's decode_stages gives it
    about twice the gate-up's) and the gate-up cut in 2 or 4 along K (the rule before
    2026-12-02 08:00 cut it to fill the last wave: Qwen3 T = 1 in 4, T = 16 and 64 in 2,
    Mixtral T = 1 in 2). Their "GEMMs % of floor" beside ours' says what each change did."""
    from dataclasses import replace

    M = importlib.import_module("argus.ops.moe")
    gate_up, down = M.decode_schedules(T, k, E, H, I)
    out = {}
    # the plain launch, and the weight prefetch before the PDL wait (MoeSchedule.prefetch: n
    # K steps of each GEMM's first unit into L2, n = its ring depth or twice it; the permute
    # takes PDL then). Per-kernel durations include the wait, so the layer's time ("ours ms")
    # is what shows these; scripts/gpu_moe_pdl.py times the device alone
    out["no-pdl"] = (replace(gate_up, pdl=False, prefetch=0),
                     replace(down, pdl=False, prefetch=0, pdl_combine=False))
    # the decode default prefetches one ring (since 2026-12-04): the PDL launch without it
    out["no-prefetch"] = (replace(gate_up, prefetch=0), replace(down, prefetch=0))
    for times in (1, 2):
        out[f"prefetch{times}x"] = (replace(gate_up, prefetch=times * gate_up.stages),
                                    replace(down, prefetch=times * down.stages))
    # each GEMM's half alone: the down's early CTAs (on SMs the gate-up leaves) prefetch
    # long before they use it, which L2 may not keep through the gate-up's stream
    out["prefetch-gate-up"] = (replace(gate_up, prefetch=gate_up.stages), down)
    out["prefetch-down"] = (gate_up, replace(down, prefetch=down.stages))
    # the decode default launches the combine with PDL after the down (MoeSchedule.
    # pdl_combine, since 2026-12-04): its launch and prologue overlap the down's tail; the
    # plain combine launch beside it
    out["no-pdl-combine"] = (gate_up, replace(down, pdl_combine=False))
    if down.stages != 8:
        out["down-8-stages"] = (gate_up, replace(down, stages=8))
    for splits in (2, 4):
        if H % (64 * splits) == 0 and H // (64 * splits) >= 8:
            if splits != gate_up.split_k:
                out[f"gate-up-split{splits}"] = (replace(gate_up, split_k=splits,
                                                         fused_finish=False), down)
            # the same cut with the split finish inside the GEMM (MoeSchedule.fused_finish:
            # the last K slice of a unit writes h; no moe_split_finish launch). Its ticket
            # counter sits in the persistent unit loop, which argus.verify's atomic.tickets
            # does not cover yet: run with ARGUS_VERIFY=0 (tests/moe/test_moe_verify.py)
            out[f"gate-up-split{splits}-fused"] = (replace(gate_up, split_k=splits,
                                                           fused_finish=True), down)
    return out


def fixed_cost_fit(name: str, copy_bw: float, rows: list, experts=(8, 16, 24, 32, 48, 64),
                   reps: int = 20) -> None:
    """--fixed-cost: how much of a decode GEMM kernel is a fixed cost and how much is its
    weight stream. One model's sizes; T = m / k tokens with precomputed routing onto m
    distinct experts (every expert touched once: bn 8, the rule's schedules, no K split at
    the sizes of the bench's models); per GEMM kernel the profiler's device time against
    its weight bytes, and a least-squares line us = fixed + bytes / rate over the points.
    At Qwen3-30B-A3B T = 1 (8 experts) the floor is 17.8 us and both kernels together 24 us
    (docs/perf/moe.md): the fit says whether that is a constant per launch (the line's
    intercept; then only fewer kernels or overlapped launches help) or a slower stream at
    few units (points above the line at small m)."""
    import torch

    M = importlib.import_module("argus.ops.moe")
    E, k, H, I, _ = MODELS[name]
    g = torch.Generator(device="cuda").manual_seed(7)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device="cuda") / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g, device="cuda") / I ** 0.5).bfloat16()
    points = {"gate_up": [], "down": []}
    for m in experts:
        if m % k or m > E:
            continue
        T = m // k
        x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
        ids = torch.randperm(E, generator=torch.Generator().manual_seed(m))[:m].view(T, k)
        ids = ids.to(device="cuda", dtype=torch.int32)
        w = torch.softmax(torch.randn(T, k, device="cuda"), dim=1)
        out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
        gate_up, down = M.decode_schedules(T, k, E, H, I)

        def call():
            return M.moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, out=out)
        call()
        torch.cuda.synchronize()
        per = kernel_breakdown(call, reps=reps)
        gu = sum(us for key, us in per.items() if "moe_gate_up" in key)
        dn = sum(us for key, us in per.items() if "moe_down" in key)
        fin = sum(us for key, us in per.items() if "moe_split_finish" in key)
        plane = m * H * I * 2
        points["gate_up"].append((2 * plane, gu))
        points["down"].append((plane, dn))
        rows.append(dict(model=name, fixed_cost_point=dict(
            experts=m, T=T, gate_up_us=gu, down_us=dn, split_finish_us=fin,
            gate_up_split=gate_up.split_k, down_split=down.split_k, bytes_gate_up=2 * plane,
            bytes_down=plane)))
        log(f"{name:14s} fixed-cost m={m:3d} experts (T={T}): gate-up {gu:7.1f} us "
            f"({2 * plane / gu / 1e6:.2f} TB/s, floor {2 * plane / copy_bw * 1e6:.1f} us, "
            f"split {gate_up.split_k}), down {dn:7.1f} us ({plane / dn / 1e6:.2f} TB/s, "
            f"floor {plane / copy_bw * 1e6:.1f} us, split {down.split_k})"
            + (f", split finish {fin:.1f} us" if fin else ""))
    for gemm, pts in points.items():
        if len(pts) < 2:
            continue
        n = len(pts)
        mx = sum(b for b, _ in pts) / n
        my = sum(t for _, t in pts) / n
        sxx = sum((b - mx) ** 2 for b, _ in pts)
        slope = sum((b - mx) * (t - my) for b, t in pts) / sxx if sxx else float("nan")
        fixed = my - slope * mx
        resid = [t - (fixed + slope * b) for b, t in pts]
        rows.append(dict(model=name, fixed_cost_fit=dict(gemm=gemm, fixed_us=fixed,
                                                         rate_tbps=1 / slope / 1e6,
                                                         residuals_us=resid)))
        log(f"{name:14s} fixed-cost fit {gemm}: {fixed:.2f} us fixed + bytes at "
            f"{1 / slope / 1e6:.2f} TB/s (copy {copy_bw / 1e12:.2f}); residuals "
            + ", ".join(f"{r:+.2f}" for r in resid) + " us")


def reference(x, w13, w2, ids, w):
    """float64, per expert (bounded memory), on the same routing."""
    from argus.ops.moe import reference as ref

    return ref(x, w13, w2, ids, w)


def copy_bandwidth(trials: int, allow_few: bool) -> float:
    """Device copy bandwidth in bytes/s (read + write counted), 2 GiB source."""
    import torch

    from argus.bench.timing import measure

    n = 1 << 30
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), trials=trials, allow_few_trials=allow_few)
    del src, dst
    return 2 * 2 * n / (t.median_ms * 1e-3)


def kernel_breakdown(fn, reps: int = 10) -> dict:
    """Device time per kernel of `fn` (torch.profiler, CUDA activity), averaged over reps:
    where the layer's time goes (routing, permute, the two GEMMs, combine)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out: dict = {}
    for evt in prof.key_averages():
        us = getattr(evt, "device_time_total", None)
        if us is None:
            us = getattr(evt, "cuda_time_total", 0)
        if us:
            out[evt.key] = us / reps
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


GEMM_KERNELS = ("moe_gate_up", "moe_split_finish", "moe_down")


def gemm_rate(kernel: str, us: float, plane_bytes: int) -> str:
    """' at N TB/s' for a decode GEMM kernel's weight read (the gate-up reads two planes of
    the touched experts' weights, the down one; plane_bytes = touched * H * I * 2), '' for
    other kernels: with the kernel times it shows each GEMM's fixed cost beside its rate."""
    planes = 2 if "moe_gate_up" in kernel else 1 if "moe_down" in kernel else 0
    return f" at {planes * plane_bytes / us / 1e6:.2f} TB/s" if planes and us else ""


def gemm_floor(fn, floor_ms: float) -> tuple[float, dict, dict]:
    """(percent of the weight-read floor, device us per GEMM kernel, device us per other
    kernel) of ours: the floor percent of the expert GEMMs alone, from the profiler's device
    time of the kernels named in GEMM_KERNELS."""
    per = kernel_breakdown(fn)
    mine = {key: us for key, us in per.items()
            if any(name in key for name in GEMM_KERNELS)}
    others = {key: us for key, us in per.items() if key not in mine}
    total_ms = sum(mine.values()) / 1e3
    return (100.0 * floor_ms / total_ms if total_ms else float("nan")), mine, others


def gemm_spans(events) -> list[float]:
    """The expert GEMMs' span in each call of a profiled stretch of layer calls: `events` are
    the stretch's kernels as (name, start us, end us), in any order. A call's GEMMs are a run
    of kernels named in GEMM_KERNELS, consecutive by start; its span runs from the end of the
    kernel started last before the run (the permute, or whatever the stream ran there) to the
    run's last end. Summed profiler durations overstate PDL kernels: a PDL kernel starts
    while its predecessor runs and its duration counts its griddepcontrol.wait (the down's
    CTAs start on SMs the gate-up's first CTAs leave: at Mixtral T = 16 its duration was 294
    us with PDL against 194 us without, same run, 2026-12-04 10:28). The span counts the GEMMs'
    work once and no wait for a kernel before them (none of their reads but a weight prefetch
    can precede that kernel's end). A run with no kernel before it is left out (it has no
    start to measure from)."""
    order = sorted(events, key=lambda e: (e[1], e[2]))
    spans, prev_end, run_end = [], None, None
    for name, start, end in order:
        if any(g in name for g in GEMM_KERNELS):
            run_end = end if run_end is None else max(run_end, end)
            continue
        if run_end is not None and prev_end is not None:   # a run closed by this kernel
            spans.append(run_end - prev_end)
        prev_end, run_end = end, None
    if run_end is not None and prev_end is not None:
        spans.append(run_end - prev_end)
    return spans


def gemm_span_floor(fn, floor_ms: float, reps: int = 10) -> tuple[float, float]:
    """(percent of the weight-read floor, median us) of the expert GEMMs' span (gemm_spans)
    over `reps` profiled calls of `fn`, queued behind a GPU sleep (queued_device_us's way): a
    decode call's host time (~100 us at Qwen3 T = 1) exceeds its device time, so calls
    issued as the device runs them leave gaps between kernels that are the host's, not the
    GEMMs' (the first run without the sleep, 2026-12-04 11:03: Qwen3 T = 1 span 33 us for
    ~24 us of GEMM durations). With PDL the floor percent summed durations cannot give."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(int(2e8))   # the host queues every call before the device gets there
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    spans = gemm_spans(kernels)
    if not spans:
        return float("nan"), float("nan")
    us = statistics.median(spans)
    return 100.0 * floor_ms * 1e3 / us, us


def queued_device_us(fn, calls: int = 40, rounds: int = 5) -> float:
    """Device us a call with the host's launch cost hidden (scripts/gpu_moe_pdl.py's method):
    `calls` calls queued behind a GPU sleep, timed by events around them, median of
    `rounds`. Back to back, so a PDL kernel's early start shows (per-kernel profiler
    durations include its wait and cannot); no L2 flush between calls."""
    import statistics

    import torch

    def once():
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(2e8))
        t0.record()
        for _ in range(calls):
            fn()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) * 1e3 / calls
    fn()
    return statistics.median(once() for _ in range(rounds))


def host_us(fn, reps: int = 50) -> float:
    """Median host time of one call in microseconds, the device idle and its queue empty
    before each: the time to enqueue the call's launches (they run asynchronously)."""
    import torch

    fn()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(samples) * 1e6


@contextlib.contextmanager
def replay_off():
    """argus.ops.moe without the replay of recorded launch plans (its recorded calls
    forgotten, none recorded): every launch looks up and checks its arguments."""
    M = importlib.import_module("argus.ops.moe")
    saved = M._PROGRAMS
    for ws in M._WORKSPACES.values():
        ws.get("programs", {}).clear()
    M._PROGRAMS = 0
    try:
        yield
    finally:
        M._PROGRAMS = saved


def ours_without_replay(*args, **kw):
    with replay_off():
        return ours_layer(*args, **kw)


def run_model(name, tokens, trials, allow_few, copy_bw, rows, with_variants=False,
              breakdown=False, decode_variants=False, prefill_variants_too=False,
              prefill_rounds=3):
    import torch

    from argus.bench.timing import graph_replay_us, measure

    E, k, H, I, routing = MODELS[name]
    g = torch.Generator(device="cuda").manual_seed(len(name))
    w13 = (torch.randn(E, 2 * I, H, generator=g, device="cuda") / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g, device="cuda") / I ** 0.5).bfloat16()
    bias = (torch.randn(E, generator=g, device="cuda") * BIAS_SCALE) \
        if routing[0] == "sigmoid" else None
    expert_bytes = 3 * H * I * 2
    for T in tokens:
        x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
        logits = torch.randn(T, E, generator=g, device="cuda")
        ids, w = torch_route(logits, k, routing, bias)
        exact = reference(x, w13, w2, ids, w)
        flops = 2.0 * T * k * 3 * H * I
        touched = int(torch.unique(ids).numel())
        floor_ms = touched * expert_bytes / copy_bw * 1e3
        row = dict(model=name, E=E, k=k, H=H, I=I, T=T, touched_experts=touched,
                   floor_ms=floor_ms, flops=flops)
        # decode: ours writes into one output buffer, as a decode loop would, so repeated
        # calls replay (argus.ops.moe records launches only for a caller's `out`)
        ours = functools.partial(ours_layer, out=torch.empty(T, H, dtype=torch.bfloat16,
                                                             device="cuda")) \
            if T <= DECODE_MAX else ours_layer
        paths = [("ours", ours), ("loop", loop_layer), ("grouped", grouped_layer)]
        if T <= DECODE_MAX:
            paths.append(("ours-noreplay", ours_without_replay))
        if with_variants:
            paths += [(f"ours@{v}", functools.partial(ours_layer, schedule=sch))
                      for v, sch in variants(T).items()]
        for path, fn in paths:
            try:
                out = fn(x, w13, w2, logits, k, routing, bias)
                torch.cuda.synchronize()
                err = ((out.double() - exact).norm() / exact.norm()).item()
                t = measure(lambda: fn(x, w13, w2, logits, k, routing, bias), trials=trials,
                            allow_few_trials=allow_few)
                row[path] = dict(ms=t.median_ms, rel_err=err, ok=err < 1e-2,
                                 tflops=flops / (t.median_ms * 1e-3) / 1e12,
                                 floor_pct=100.0 * floor_ms / t.median_ms)
                log(f"{name:14s} T={T:6d} {path:8s} {t.median_ms:9.3f} ms  "
                    f"{row[path]['tflops']:7.1f} TFLOP/s  {row[path]['floor_pct']:6.1f}% of "
                    f"floor  rel_err={err:.2e}{'' if err < 1e-2 else '  WRONG'}")
            except Exception as e:  # noqa: BLE001 - a failing path is reported, not fatal
                row[path] = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
                log(f"{name:14s} T={T:6d} {path:8s} FAILED {row[path]['error']}")
            torch.cuda.empty_cache()
        if T <= DECODE_MAX and "ms" in row.get("ours", {}):
            try:
                def call():
                    return ours(x, w13, w2, logits, k, routing, bias)
                pct, mine, others = gemm_floor(call, floor_ms)
                row["ours_gemms"] = dict(floor_pct=pct, kernels_us=mine)
                log(f"{name:14s} T={T:6d} ours GEMMs {pct:6.1f}% of floor (" +
                    ", ".join(f"{key.split('(')[0][:32]} {us:.1f} us"
                              f"{gemm_rate(key, us, touched * H * I * 2)}"
                              for key, us in mine.items()) + ")")
                # with PDL the durations above count the down's wait; the span does not
                try:
                    span_pct, span_us = gemm_span_floor(call, floor_ms)
                    row["ours_gemms"].update(span_floor_pct=span_pct, span_us=span_us)
                    log(f"{name:14s} T={T:6d} ours GEMMs span {span_us:.1f} us = "
                        f"{span_pct:6.1f}% of floor (the end of the kernel before the "
                        f"gate-up to the down's end, calls back to back)")
                except Exception as e:  # noqa: BLE001 - a diagnostic of its own
                    log(f"{name:14s} T={T:6d} GEMM span failed: {type(e).__name__}: {e}")
                host = host_us(call)
                with replay_off():
                    host_cold = host_us(call)
                device = sum(mine.values()) + sum(others.values())
                try:
                    graph = graph_replay_us(call, per_graph=10, replays=10)
                except Exception as e:  # noqa: BLE001 - a diagnostic of its own
                    log(f"{name:14s} T={T:6d} CUDA graph timing failed: {type(e).__name__}: {e}")
                    graph = float("nan")
                row["ours_host"] = dict(host_us=host, host_us_noreplay=host_cold,
                                        device_us=device, graph_us=graph,
                                        other_kernels_us=others)
                log(f"{name:14s} T={T:6d} ours host {host:.1f} us a call ({host_cold:.1f} us "
                    f"without replay), device {device:.1f} us, CUDA graph {graph:.1f} us a "
                    f"call, other kernels " +
                    ", ".join(f"{key.split('(')[0][:32]} {us:.1f} us"
                              for key, us in others.items()))
            except Exception as e:  # noqa: BLE001 - a diagnostic
                log(f"{name:14s} T={T:6d} GEMM timing failed: {type(e).__name__}: {e}")
        if decode_variants and T <= DECODE_MAX and "ours_gemms" in row:
            base = row["ours_gemms"]["floor_pct"]
            base_span = row["ours_gemms"].get("span_floor_pct", float("nan"))
            try:   # the rule's layer, device time (queued calls), beside each variant's
                base_us = queued_device_us(
                    lambda: ours_layer(x, w13, w2, logits, k, routing, bias))
                row["ours_queued_us"] = base_us
                log(f"{name:14s} T={T:6d} rule layer {base_us:7.2f} us device (queued calls)")
            except Exception as e:  # noqa: BLE001 - a diagnostic
                base_us = float("nan")
                log(f"{name:14s} T={T:6d} queued timing failed: {type(e).__name__}: {e}")
            for v, pair in decode_rule_variants(T, k, E, H, I).items():
                try:
                    static = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")

                    def call(pair=pair, static=static):
                        return ours_layer(x, w13, w2, logits, k, routing, bias, schedule=pair,
                                          out=static)
                    out = call()
                    torch.cuda.synchronize()
                    err = ((out.double() - exact).norm() / exact.norm()).item()
                    pct, mine, _ = gemm_floor(call, floor_ms)
                    span_pct, span_us = gemm_span_floor(call, floor_ms)
                    layer_us = queued_device_us(call)
                    row[f"rule@{v}"] = dict(gemm_floor_pct=pct, kernels_us=mine, rel_err=err,
                                            queued_us=layer_us, span_floor_pct=span_pct,
                                            span_us=span_us)
                    log(f"{name:14s} T={T:6d} rule@{v:16s} GEMMs {pct:6.1f}% of floor "
                        f"({pct - base:+.1f} vs ours), span {span_pct:6.1f}% "
                        f"({span_pct - base_span:+.1f}), layer {layer_us:7.2f} us device "
                        f"({layer_us - base_us:+.2f} vs ours)  rel_err={err:.2e}"
                        f"{'' if err < 1e-2 else '  WRONG'} (" +
                        ", ".join(f"{key.split('(')[0][:32]} {us:.1f} us"
                                  for key, us in mine.items()) + ")")
                except Exception as e:  # noqa: BLE001 - a variant failing is reported
                    log(f"{name:14s} T={T:6d} rule@{v} FAILED {type(e).__name__}: {e}")
        if prefill_variants_too and T > DECODE_MAX:
            run_prefill_variants(name, T, x, w13, w2, logits, k, routing, bias, ids, exact,
                                 trials, allow_few, row, prefill_rounds)
        if breakdown:
            try:
                per = kernel_breakdown(lambda: ours_layer(x, w13, w2, logits, k, routing, bias))
                row["ours_kernels_us"] = per
                log(f"{name:14s} T={T:6d} ours by kernel (us): " +
                    ", ".join(f"{key.split('(')[0][:40]} {us:.1f}" for key, us in per.items()))
            except Exception as e:  # noqa: BLE001 - the breakdown is a diagnostic
                log(f"{name:14s} T={T:6d} breakdown failed: {type(e).__name__}: {e}")
        rows.append(row)
        del x, logits, exact


# ----------------------------------------------------------------------------- fp8 (--fp8)

FP8_MODEL = "deepseek-v3"
FP8_TOKENS = [4096, 16384]
FP8_GEMM_KERNELS = ("moe_fp8_gate_up", "moe_fp8_down")


def quantize_blocks(w):
    """w [N, K] bf16 (N, K multiples of 128) -> (e4m3 [N, K], scales [N/128, K/128] f32,
    dequantized bf16 [N, K]): DeepSeek-V3's 128x128 weight blocks, amax / 448."""
    import torch

    n, k = w.shape
    blocks = w.float().view(n // 128, 128, k // 128, 128)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    deq = (q.float() * scale[:, None, :, None]).view(n, k).bfloat16()
    return q.view(n, k), scale, deq


def fp8_weights(E, H, I, g):
    """(w13 e4m3, w13_scale, w2 e4m3, w2_scale, w13 dequantized bf16, w2 dequantized bf16),
    expert by expert (a float32 copy of all of DeepSeek-V3's weights would take 34 GB)."""
    import torch

    e4m3 = dict(dtype=torch.float8_e4m3fn, device="cuda")
    w13, w2 = torch.empty(E, 2 * I, H, **e4m3), torch.empty(E, H, I, **e4m3)
    s13 = torch.empty(E, 2 * I // 128, H // 128, device="cuda")
    s2 = torch.empty(E, H // 128, I // 128, device="cuda")
    d13 = torch.empty(E, 2 * I, H, dtype=torch.bfloat16, device="cuda")
    d2 = torch.empty(E, H, I, dtype=torch.bfloat16, device="cuda")
    for e in range(E):
        w13[e], s13[e], d13[e] = quantize_blocks(
            (torch.randn(2 * I, H, generator=g, device="cuda") / H ** 0.5).bfloat16())
        w2[e], s2[e], d2[e] = quantize_blocks(
            (torch.randn(H, I, generator=g, device="cuda") / I ** 0.5).bfloat16())
    return w13, s13, w2, s2, d13, d2


def fp8_variants() -> dict:
    """The fp8 grouped GEMM's other schedules (both GEMMs): overlapped promotion (not proven
    by the verifier yet: compiles with ARGUS_VERIFY=0 only), CTA pairs with the TMA-store
    epilogue (the dense block-scaled kernel's fastest), the TMA store alone, overlap with
    both, the stage released after the promotion (gemm_fp8.promoted_mma's order; the default
    releases it before), 64-row tiles, and gemm_fp8's split 128 x 256 (n_split=2:
    split_promoted_mma, the dense kernel's faster promotion) from registers and with the TMA
    store."""
    from dataclasses import replace

    from argus.kernels.moe_fp8 import (FP8_PREFILL, FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_SMEM,
                                       FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA,
                                       FP8_SMALL)

    pair = replace(FP8_PREFILL, stages=5, cluster_m=2, epilogue="tma")
    # the TMA-store epilogue without clusters keeps 128-row padding (pairs pad to 256)
    return {# the prefill default before 2026-12-06: 128 x 128, global scales, direct store
            "plain128": FP8_PREFILL,
            "overlap": replace(FP8_PREFILL, overlap=True), "cluster_tma": pair,
            "tma": replace(FP8_PREFILL, stages=5, epilogue="tma"),
            "overlap_cluster_tma": replace(pair, overlap=True),
            # the dense kernel's serial order: the stage released after the promotion
            "late_release": replace(FP8_PREFILL, late_release=True),
            # 64-row tiles: half the padding per expert (DeepSeek-V3 at T = 4096 averages
            # 128 rows an expert, so 128-row padding adds about half again)
            "small": FP8_SMALL,
            # the gate-up's SiLU epilogue branch-free on the SFU (MoeSchedule.fast_silu and
            # rsqrt_silu: no IEEE division, two MUFU per element; the down ignores both): the
            # fp8 GEMM's units take about half the bf16 one's time, so the same epilogue is
            # twice the share
            "fast_rsqrt_silu": replace(FP8_PREFILL, fast_silu=True, rsqrt_silu=True),
            # 128 x 256 tiles with each K block's wgmma split into two 128-column halves, one
            # partial live at a time (MoeFp8Schedule.n_split; the dense kernel's "split
            # 128x256" measured 1096-1207 TFLOP/s, docs/perf/fp8.md): the gate-up's halves are
            # its gate and up planes, the down's the tile's two weight blocks. DeepSeek-V3
            # T = 16384: 691 / 713 TFLOP/s (H100, 2026-12-06, docs/perf/moe.md)
            "split": FP8_PREFILL_SPLIT,
            "split_tma": FP8_PREFILL_SPLIT_TMA,
            "split_tma_fast_rsqrt_silu": replace(FP8_PREFILL_SPLIT_TMA, fast_silu=True,
                                                 rsqrt_silu=True),
            # the split with the block scales through shared memory (smem_scales: the dense
            # kernel's default, 1082 against the global-scale split's 989 TFLOP/s geomean):
            # K-major activation scales from the quantizers, one TMA box a stage; the serial
            # 128 x 128 with smem scales beside it. DeepSeek-V3 T = 16384: 778 / 859 / 495
            # TFLOP/s (H100, 2026-12-06, docs/perf/moe.md); split_smem_tma is the default now
            "split_smem": FP8_PREFILL_SPLIT_SMEM,
            "split_smem_tma": FP8_PREFILL_SPLIT_SMEM_TMA,
            "smem": replace(FP8_PREFILL, smem_scales=True),
            # the gate-up quantizing its own output (quantize_out: h in e4m3 plus its 1x128
            # scales from the epilogue, no bf16 h, no quantize_1x128 launch; bit-identical to
            # split_smem_tma in the interpreter). Its e4m3 tile is stored from registers (no
            # staging), so the gate-up has room for a 4th stage: the second variant (the down
            # keeps split_smem_tma). Not measured on a GPU yet
            "split_smem_tma_fusedq": replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True),
            "split_smem_fusedq4": (replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True,
                                           stages=4), FP8_PREFILL_SPLIT_SMEM_TMA),
            # the default's gate-up with the bf16 rule's SiLU (rsqrt_silu: no IEEE division,
            # none of its 64 slow-path CALLs; -6.4% on the bf16 gate-up, docs/perf/moe.md),
            # and fast_silu on top; and both with the fused quantize
            "split_smem_tma_rsqrt": replace(FP8_PREFILL_SPLIT_SMEM_TMA, rsqrt_silu=True),
            "split_smem_tma_fast_rsqrt": replace(FP8_PREFILL_SPLIT_SMEM_TMA, rsqrt_silu=True,
                                                 fast_silu=True),
            "split_smem_tma_fusedq_rsqrt": replace(FP8_PREFILL_SPLIT_SMEM_TMA, rsqrt_silu=True,
                                                   quantize_out=True),
            # 2-CTA clusters along M, the weight tile multicast to the pair (global scales:
            # smem scales refuse clusters; experts padded to 256 rows): the gate-up read ~3x
            # its bytes from DRAM at a 35% L2 hit rate (ncu, H100, 2026-12-06), its m-tiles
            # of one expert drifting apart over its long units; a pair reads a weight slice
            # once, in lockstep. With skip_pad_halves the pair's second CTA skips a unit of
            # <= 128 routed rows
            "split_tma_cluster": replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2),
            "split_tma_cluster_skip": replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2,
                                              skip_pad_halves=True),
            # one CTA a unit (MoeSchedule persistent=False: the hardware hands units out in
            # order as SMs free up) instead of the persistent walk, whose CTAs drift apart
            # over ~140 long gate-up units so the m-tiles of one expert stop sharing weight
            # reads in L2; on both GEMMs, and on the gate-up only
            "split_smem_tma_grid": replace(FP8_PREFILL_SPLIT_SMEM_TMA, persistent=False),
            # the persistent walk with its units drawn from a work counter in the order CTAs
            # ask (MoeSchedule.scheduler="dynamic", docs/design/dynamic_scheduler.md): the
            # grid's locality (the running units neighbours in the raster) with the start
            # paid once per SM; both GEMMs, and with the fused quantize. Not measured yet
            "split_smem_tma_dyn": replace(FP8_PREFILL_SPLIT_SMEM_TMA, scheduler="dynamic"),
            "split_smem_tma_dyn_fusedq": replace(FP8_PREFILL_SPLIT_SMEM_TMA, scheduler="dynamic",
                                                 quantize_out=True),
            # the dynamic walk m-tile by m-tile (group_m 1: an m-tile's n-tiles drawn
            # together, its A box read once while an expert's weight tiles stay in L2 for
            # its next m-tile). A probe of scripts/moe_l2_model.py's L2 reading more than a
            # candidate: the model gives its gate-up ~8.6 GB with one 50 MB LRU but ~22.9 GB
            # with 25 MB a partition, against the dynamic default's ~11.1 / ~11.8 (T = 16384;
            # the static walk measured 21-28 GB; docs/perf/moe.md 2026-12-07): ncu's DRAM
            # bytes of the two tell which reading holds. Not measured
            "split_smem_tma_dyn_g1": replace(FP8_PREFILL_SPLIT_SMEM_TMA, scheduler="dynamic",
                                             group_m=1),
            # the persistent walk on fewer SMs (DeepGEMM picks the fewest SMs that keep the
            # waves: less L2 contention and clock drop under fp8 load; the dense kernel's
            # "128 SMs" variant led at 2 of 5 shapes, docs/perf/fp8.md)
            "split_smem_tma_sms128": replace(FP8_PREFILL_SPLIT_SMEM_TMA, num_sms=128),
            "split_smem_tma_sms120": replace(FP8_PREFILL_SPLIT_SMEM_TMA, num_sms=120),
            # the fused quantize (quantize_out) on the unit grid, the rule's form to 256 rows
            "split_smem_tma_grid_fusedq": replace(FP8_PREFILL_SPLIT_SMEM_TMA, persistent=False,
                                                  quantize_out=True),
            # the few-rows tile (decode-to-prefill boundary) on one CTA a unit
            "small_grid": replace(FP8_SMALL, persistent=False),
            "split_smem_tma_grid_gateup": (replace(FP8_PREFILL_SPLIT_SMEM_TMA,
                                                   persistent=False),
                                           FP8_PREFILL_SPLIT_SMEM_TMA),
            # the default with MoeSchedule.skip_pad_halves (both GEMMs): a consumer
            # warpgroup whose 64 rows of an expert's last m-tile are all padding only
            # releases the unit's stages (no wgmma, promotion or epilogue; TileRows from the
            # layout kernel). Bit-identical routed rows in the interpreter; not measured on a
            # GPU yet (docs/perf/moe.md: the estimate)
            "split_smem_tma_skip": replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True),
            "split_smem_tma_rsqrt_skip": replace(FP8_PREFILL_SPLIT_SMEM_TMA, rsqrt_silu=True,
                                                 skip_pad_halves=True),
            # an expert's last m-tile of <= 64 routed rows as a half tile
            # (MoeFp8Schedule.half_tile_last, h297's design): both consumer warpgroups on
            # its rows [0, 64), a column half each, instead of one of them on 64 padding
            # rows; both GEMMs, and the down only (its simpler epilogue). Bit-identical
            # routed rows in the interpreter; not measured on a GPU yet (upper bound at the
            # bench routing: 5.9-6.5% fewer tile-equivalents, docs/perf/moe.md)
            "split_smem_tma_half": replace(FP8_PREFILL_SPLIT_SMEM_TMA, half_tile_last=True),
            "split_smem_tma_half_down": (FP8_PREFILL_SPLIT_SMEM_TMA,
                                         replace(FP8_PREFILL_SPLIT_SMEM_TMA,
                                                 half_tile_last=True)),
            # the same on walks that hand units out in order as CTAs free up (h310): on the
            # static walk a half unit puts its CTA ahead of the CTAs it shared weight tiles
            # with, for good (measured 2026-12-07: gate-up 7531 -> 9969 us; the L2 model's
            # DRAM reads 11.6 -> 27.4 GB in lock-step, docs/perf/moe.md); against
            # split_smem_tma_dyn / split_smem_tma_grid
            "split_smem_tma_half_dyn": replace(FP8_PREFILL_SPLIT_SMEM_TMA, half_tile_last=True,
                                               scheduler="dynamic"),
            "split_smem_tma_half_grid": replace(FP8_PREFILL_SPLIT_SMEM_TMA, half_tile_last=True,
                                                persistent=False),
            # same-expert pair multicast (MoeFp8Schedule.pair_multicast): 2-CTA clusters
            # along M whose two m-tiles share the weight tile by TMA multicast when they have
            # one expert, 128-row padding kept (the gate-up's weights were read ~3x from DRAM
            # at DeepSeek-V3 T = 16384, docs/perf/moe.md); both GEMMs, and the gate-up only.
            # Bit-identical routed rows in the interpreter; not measured on a GPU yet
            "split_smem_tma_pair": replace(FP8_PREFILL_SPLIT_SMEM_TMA, pair_multicast=True),
            "split_smem_tma_pair_gateup": (replace(FP8_PREFILL_SPLIT_SMEM_TMA,
                                                   pair_multicast=True),
                                           FP8_PREFILL_SPLIT_SMEM_TMA),
            # both at once: pairs in lockstep, and the pairs handed out in order (verifies
            # with zero findings; not measured)
            "split_smem_tma_pair_grid": replace(FP8_PREFILL_SPLIT_SMEM_TMA, pair_multicast=True,
                                                persistent=False)}


# --fp8-only: the fp8 variants timed (all of fp8_variants() when empty); each of them also gets
# its GEMM kernels' device time (profiler), as the default does
FP8_ONLY: tuple = ()
# sigmoid routing's e_score_correction_bias scale (--bias-scale)
BIAS_SCALE: float = 0.1


def run_fp8(tokens, trials, rows, with_variants=True, rounds: int = 1):
    """DeepSeek-V3 with e4m3 weights and 128x128 block scales: ours fp8 (argus.ops.moe with
    w13_scale / w2_scale), ours bf16 and torch._grouped_mm on the dequantized weights (the
    same function in bf16), the whole layer with routing, in one process; fp8 checked against
    argus.ops.moe.reference_fp8 (float64, the kernels' quantization), the bf16 paths against
    the float64 layer of the dequantized weights. Also ours fp8's GEMM kernels alone
    (profiler device time) as TFLOP/s. Every path is checked once, then timed in `rounds`
    rounds that alternate and rotate (in_rounds), then broken down likewise; the median round
    is reported."""
    import torch

    from argus.ops import moe
    from argus.ops.moe import reference_fp8

    E, k, H, I, routing = MODELS[FP8_MODEL]
    _, groups, topk_groups, rscale = routing
    g = torch.Generator(device="cuda").manual_seed(16)
    t0 = time.time()
    w13, s13, w2, s2, d13, d2 = fp8_weights(E, H, I, g)
    bias = torch.randn(E, generator=g, device="cuda") * BIAS_SCALE
    torch.cuda.synchronize()
    log(f"fp8 weights ({E} experts, 128x128 blocks) in {time.time() - t0:.1f} s")

    def ours_fp8(x, logits, schedule=None):
        return moe(x, w13, w2, logits, k, scoring="sigmoid", e_score_correction_bias=bias,
                   num_expert_group=groups, topk_group=topk_groups,
                   routed_scaling_factor=rscale, w13_scale=s13, w2_scale=s2,
                   schedule=schedule)

    def ours_bf16(x, logits):
        return ours_layer(x, d13, d2, logits, k, routing, bias)

    def grouped(x, logits):
        return grouped_layer(x, d13, d2, logits, k, routing, bias)

    for T in tokens:
        x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
        logits = torch.randn(T, E, generator=g, device="cuda")
        ids, w = torch_route(logits, k, routing, bias)
        t0 = time.time()
        exact = {"fp8": reference_fp8(x, w13, w2, s13, s2, ids, w),
                 "bf16": reference(x, d13, d2, ids, w)}
        torch.cuda.synchronize()
        log(f"{FP8_MODEL} T={T}: float64 references in {time.time() - t0:.1f} s")
        flops = 2.0 * T * k * 3 * H * I
        row = dict(model=FP8_MODEL, E=E, k=k, H=H, I=I, T=T, flops=flops, fp8=True)
        # rows the GEMMs compute beyond the routed ones: each expert padded to the tile
        counts = torch.bincount(ids.reshape(-1), minlength=E)
        row["padding_pct"] = {pad: 100.0 * (((counts + pad - 1) // pad * pad).sum().item()
                                            / (T * k) - 1) for pad in (64, 128, 256)}
        row["expert_rows"] = dict(bias_scale=BIAS_SCALE, max=int(counts.max()),
                                  median=int(counts.median()), empty=int((counts == 0).sum()))
        log(f"{FP8_MODEL} T={T}: padding to 64 / 128 / 256 rows adds " +
            " / ".join(f"{v:.0f}%" for v in row["padding_pct"].values()) + " rows; rows an "
            f"expert max {row['expert_rows']['max']}, median {row['expert_rows']['median']}, "
            f"{row['expert_rows']['empty']} experts empty (bias scale {BIAS_SCALE})")
        paths = [("ours-fp8", "fp8", ours_fp8), ("ours-bf16", "bf16", ours_bf16),
                 ("grouped", "bf16", grouped)]
        if with_variants:
            paths += [(f"ours-fp8@{v}", "fp8", functools.partial(ours_fp8, schedule=sch))
                      for v, sch in fp8_variants().items() if not FP8_ONLY or v in FP8_ONLY]
        label = f"{FP8_MODEL} T={T:6d}"
        calls = check_fp8_paths(label, paths, x, logits, exact, row)
        time_fp8_paths(label, calls, row, flops, trials, rounds)
        # the GEMM kernels alone: the default's, and with --fp8-only each variant's
        fp8_breakdowns(label, [(p, call) for p, call in calls if "ms" in row[p] and (
            p == "ours-fp8" or FP8_ONLY and p.startswith("ours-fp8@"))], row, flops, rounds)
        rows.append(row)
        del x, logits, exact
        torch.cuda.empty_cache()


def check_fp8_paths(label, paths, x, logits, exact, row) -> list:
    """run_fp8's checks, once a path before any timing: each (path, kind, fn) of `paths` called
    on (x, logits) against exact[kind] (float64); its relative error into row[path], or its
    failure. Returns the (path, call) that ran, call taking no arguments."""
    import torch

    calls = []
    for path, kind, fn in paths:
        call = functools.partial(fn, x, logits)
        try:
            out = call()
            torch.cuda.synchronize()
            err = ((out.double() - exact[kind]).norm() / exact[kind].norm()).item()
            del out
            row[path] = dict(rel_err=err, ok=err < 1e-2)
            calls.append((path, call))
        except Exception as e:  # noqa: BLE001 - a failing path is reported, not fatal
            row[path] = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
            log(f"{label} {path:28s} FAILED {row[path]['error']}")
        torch.cuda.empty_cache()
    return calls


def time_fp8_paths(label, calls, row, flops, trials, rounds) -> None:
    """run_fp8's timing: each checked (path, call) as a whole layer in `rounds` rounds
    (in_rounds); the median round's ms and TFLOP/s into row[path], one log line a path."""
    timed = in_rounds([(path, functools.partial(layer_ms, call, trials))
                       for path, call in calls], rounds)
    for path, ms in timed.items():
        if isinstance(ms, Exception):
            row[path] = dict(error=f"{type(ms).__name__}: {str(ms)[:300]}")
            log(f"{label} {path:28s} FAILED {row[path]['error']}")
            continue
        d = row[path]
        d.update(ms=statistics.median(ms), **rounds_entry("rounds_ms", ms))
        d["tflops"] = flops / (d["ms"] * 1e-3) / 1e12
        log(f"{label} {path:28s} {d['ms']:8.3f} ms {d['tflops']:7.1f} TFLOP/s  "
            f"rel_err={d['rel_err']:.2e}{'' if d['ok'] else '  WRONG'}{spread(ms, 'ms')}")


def fp8_breakdowns(label, calls, row, flops, rounds) -> None:
    """run_fp8's GEMM kernels alone: each (path, call) profiled in `rounds` rounds
    (in_rounds, 5 calls each); per kernel the median round into row[path_kernels_us], the
    fp8 GEMMs' sum (median round) and its TFLOP/s into row[path_gemms]."""
    profiled = in_rounds([(path, functools.partial(kernel_breakdown, call, reps=5))
                          for path, call in calls], rounds)
    for path, pers in profiled.items():
        if isinstance(pers, Exception):   # the breakdown is a diagnostic
            log(f"{label} {path} breakdown failed: {type(pers).__name__}: {pers}")
            continue
        gemms = [sum(us for key, us in per.items()
                     if any(name in key for name in FP8_GEMM_KERNELS)) for per in pers]
        per = median_kernels(pers)
        gemm_us = statistics.median(gemms)
        row[f"{path}_kernels_us"] = per
        row[f"{path}_gemms"] = dict(us=gemm_us, tflops=flops / (gemm_us * 1e-6) / 1e12,
                                    **rounds_entry("rounds_us", gemms))
        log(f"{label} {path} GEMMs {gemm_us / 1e3:.3f} ms "
            f"{row[f'{path}_gemms']['tflops']:.1f} TFLOP/s"
            f"{spread([us / 1e3 for us in gemms], 'ms')}; by kernel (us): " +
            ", ".join(f"{key.split('(')[0][:40]} {us:.1f}" for key, us in per.items()))


def fp8_table(rows) -> str:
    paths = sorted({p for r in rows for p in r if p.startswith(("ours-", "grouped"))
                    and isinstance(r[p], dict) and ("ms" in r[p] or "error" in r[p])},
                   key=lambda p: (not p.startswith("ours-fp8"), "@" in p, p))
    lines = ["| model | T | path | ms | TFLOP/s | rel err | vs grouped_mm (bf16) | "
             "vs ours bf16 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        base = r.get("grouped", {}).get("ms")
        bf16 = r.get("ours-bf16", {}).get("ms")
        for p in paths:
            d = r.get(p, {})
            if "ms" not in d:
                lines.append(f"| {r['model']} | {r['T']} | {p} | fail | - | - | - | - |")
                continue
            vs_grouped = f"{base / d['ms']:.2f}x" if base else "-"
            vs_bf16 = f"{bf16 / d['ms']:.2f}x" if bf16 else "-"
            lines.append(f"| {r['model']} | {r['T']} | {p} | {d['ms']:.3f} | "
                         f"{d['tflops']:.0f} | {d['rel_err']:.1e}"
                         f"{'' if d['ok'] else ' WRONG'} | {vs_grouped} | {vs_bf16} |")
        for p in paths:
            if f"{p}_gemms" in r:
                gm = r[f"{p}_gemms"]
                lines.append(f"| {r['model']} | {r['T']} | {p} GEMM kernels only | "
                             f"{gm['us'] / 1e3:.3f} | {gm['tflops']:.0f} | - | - | - |")
    for r in rows:
        if r["T"] == 16384:
            best = max(((r[p]["tflops"], p) for p in paths
                        if p.startswith("ours-fp8") and r.get(p, {}).get("ok")),
                       default=(0.0, "none correct"))
            lines.append(f"\nbar (fp8 block-scaled >= 1200 TFLOP/s at {r['model']} T = 16384, "
                         f"the whole layer): default {r.get('ours-fp8', {}).get('tflops', 0):.0f}"
                         f", best {best[0]:.0f} ({best[1]})")
    return "\n".join(lines)


def table(rows) -> str:
    head = ("| model | T | ours ms | loop ms | grouped_mm ms | ours | ours GEMMs | best torch "
            "| vs best torch | ours no replay ms | host us (no replay) / device us / graph us |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        def ms(p):
            return f"{r[p]['ms']:.3f}" if "ms" in r.get(p, {}) else "fail"

        def metric(p):
            if "ms" not in r.get(p, {}):
                return "-"
            if r["T"] <= DECODE_MAX:
                return f"{r[p]['floor_pct']:.0f}% floor"
            return f"{r[p]['tflops']:.0f} TFLOP/s"
        torch_ms = [r[p]["ms"] for p in ("loop", "grouped") if "ms" in r.get(p, {})]
        best = min(torch_ms) if torch_ms else float("nan")
        best_p = min((p for p in ("loop", "grouped") if "ms" in r.get(p, {})),
                     key=lambda p: r[p]["ms"], default=None)
        speed = f"{best / r['ours']['ms']:.2f}x" if "ms" in r.get("ours", {}) and torch_ms \
            else "-"
        gemms = f"{r['ours_gemms']['floor_pct']:.0f}% floor" if "ours_gemms" in r else "-"
        h = r.get("ours_host")
        host = (f"{h['host_us']:.0f} ({h['host_us_noreplay']:.0f}) / {h['device_us']:.0f} / "
                f"{h['graph_us']:.0f}" if h else "-")
        norep = ms("ours-noreplay") if "ours-noreplay" in r else "-"
        lines.append(f"| {r['model']} | {r['T']} | {ms('ours')} | {ms('loop')} | "
                     f"{ms('grouped')} | {metric('ours')} | {gemms} | "
                     f"{metric(best_p) if best_p else '-'} | {speed} | {norep} | {host} |")
    ratios = []
    for r in rows:
        torch_ms = [r[p]["ms"] for p in ("loop", "grouped") if "ms" in r.get(p, {})]
        if r["T"] >= 1024 and torch_ms and "ms" in r.get("ours", {}):
            ratios.append(min(torch_ms) / r["ours"]["ms"])
    if ratios:
        gm = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
        lines.append(f"\nprefill (T >= 1024) geomean speedup over the best torch path: "
                     f"{gm:.2f}x over {len(ratios)} shapes")
    return "\n".join(lines)


ROUTING_TOKENS = [1, 16, 64, 4096, 16384]


def routing_launches(run, logits, bias, layer, routing, ws) -> None:
    """The routing of argus.ops.moe (its route: the top-k router; then its layout: counts,
    scan, layout and positions, or layout_small) into the call's workspace `ws`."""
    M = importlib.import_module("argus.ops.moe")
    if routing[0] == "softmax":
        M.route(logits, layer, renormalize=routing[1], run=run, ws=ws)
    else:
        _, groups, topk_groups, scale = routing
        M.route(logits, layer, scoring="sigmoid", bias=bias, num_expert_group=groups,
                topk_group=topk_groups, routed_scaling_factor=scale, run=run, ws=ws)
    M.layout(ws["ids"], layer, run, ws)


def run_routing(models, tokens, trials: int, rows: list) -> None:
    """--routing: the routing alone (routing_launches: argus.ops.moe's route and layout), CUDA
    events around `reps` calls back to back (no L2 flush: the logits, 16 MB at DeepSeek-V3's
    T = 16384, are what a layer's router reads right after the gate GEMM wrote them), the
    least of `trials` rounds. The kernels before the h263 rework (moe_routing_old.py, deleted
    since) were timed against these on an H100 on 2026-12-06: their numbers live in
    docs/perf/moe.md."""
    import torch

    M = importlib.import_module("argus.ops.moe")
    run = M._launcher(False)
    dev = torch.device("cuda")
    for name in models:
        E, k, H, I, routing = MODELS[name]
        for T in tokens:
            g = torch.Generator(device=dev).manual_seed(T)
            logits = torch.randn(T, E, device=dev, generator=g)
            bias = torch.randn(E, device=dev, generator=g) * BIAS_SCALE
            layer = M._layer(T, H, I, E, k, None)
            ws = M.routing_workspace(layer, dev)
            routing_launches(run, logits, bias, layer, routing, ws)   # compile, warm up
            torch.cuda.synchronize()
            reps = 20 if T >= 4096 else 200
            best = float("inf")
            for _ in range(trials):
                start, end = torch.cuda.Event(True), torch.cuda.Event(True)
                start.record()
                for _ in range(reps):
                    routing_launches(run, logits, bias, layer, routing, ws)
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) * 1e3 / reps)
            rows.append(dict(model=name, T=T, us=best, bias_scale=BIAS_SCALE))
            log(f"routing {name:14s} T={T:6d}: {best:8.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="T = 1, 16, 64 and 4096, 20 trials")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--tokens", nargs="*", type=int, default=None)
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--decode", action="store_true",
                    help="T = 1, 16, 64 only (the decode bar's shapes), 20 trials")
    ap.add_argument("--rule-variants", action="store_true",
                    help="decode rows also time the decode rule's alternatives, one change "
                         "each (rule@<change>: GEMMs %% of floor)")
    ap.add_argument("--fixed-cost", action="store_true",
                    help="decode GEMMs' fixed cost per kernel: each --models' sizes with "
                         "8..64 touched experts (precomputed routing), per-kernel device time "
                         "against weight bytes, a line fixed + bytes / rate (fixed_cost_fit); "
                         "then exits")
    ap.add_argument("--variants", action="store_true",
                    help="also time ours with other grouped-GEMM schedules (ours@<name>)")
    ap.add_argument("--prefill-variants", action="store_true",
                    help="prefill rows (T > 64) also time the prefill GEMMs' schedule pairs "
                         "(prefill_variants: stages, store rounds, group_m, clusters), each "
                         "broken down by kernel, and dense references of the same FLOPs "
                         "(cuBLAS, Argus's dense GEMM); with --models mixtral --tokens 16384: "
                         "issue 16's prefill bar, ~2 min")
    ap.add_argument("--prefill-only", nargs="+", default=(), metavar="VARIANT",
                    choices=list(prefill_variants()),
                    help="--prefill-variants times only these (and the rule): fewer layers "
                         "in each alternating round, so more rounds fit the same minutes")
    ap.add_argument("--breakdown", action="store_true",
                    help="print ours' device time per kernel (torch.profiler)")
    ap.add_argument("--fp8", action="store_true",
                    help="DeepSeek-V3 with e4m3 weights and 128x128 block scales at T = 4096 "
                         "and 16384 (--tokens to change): ours fp8 (and its schedule "
                         "variants, unless --no-variants) against ours bf16 and "
                         "torch._grouped_mm on the dequantized weights")
    ap.add_argument("--no-variants", action="store_true",
                    help="--fp8: time the default fp8 schedule only")
    ap.add_argument("--fp8-only", nargs="+", default=(), metavar="VARIANT",
                    choices=list(fp8_variants()),
                    help="--fp8: time only these variants beside the default (each with its "
                         "GEMM kernels' device time, as the default)")
    ap.add_argument("--rounds", type=int, default=None, metavar="N",
                    help="--fp8 and --prefill-variants: time every path (and its kernel "
                         "breakdown) in N rounds that alternate between the paths and rotate "
                         "which comes first, and report the median round (each round's value "
                         "in the JSON, their spread in the log); default 1 for --fp8, 3 for "
                         "--prefill-variants")
    ap.add_argument("--routing", action="store_true",
                    help="time the routing alone (argus.ops.moe's route and layout) at "
                         "T = 1, 16, 64, 4096, 16384 (or --tokens) with CUDA events, least "
                         "of 5 rounds (or --trials)")
    ap.add_argument("--bias-scale", type=float, default=0.1, metavar="S",
                    help="sigmoid routing (DeepSeek-V3): e_score_correction_bias = S x N(0, 1) "
                         "per expert. 0.1 (the default) skews the load hard (at T = 16384 the "
                         "busiest expert gets ~10x the mean rows, ~30 of 256 get none); 0 is "
                         "the balanced load the model's learned bias aims at (rows an expert "
                         "T k / E with a standard deviation near sqrt(T k / E))")
    ap.add_argument("--out", default="bench_out/moe")
    args = ap.parse_args()
    if not 0 <= args.bias_scale < math.inf:     # NaN and inf too: they poison the routing
        ap.error("--bias-scale takes a finite S >= 0")
    global BIAS_SCALE
    BIAS_SCALE = args.bias_scale
    if args.rounds is not None and args.rounds < 1:
        ap.error("--rounds takes N >= 1")
    global PREFILL_ONLY
    PREFILL_ONLY = tuple(args.prefill_only)
    global FP8_ONLY
    FP8_ONLY = tuple(args.fp8_only)

    import torch

    if args.routing:
        rows = []
        run_routing(args.models, args.tokens or ROUTING_TOKENS, args.trials or 5, rows)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "moe_routing.json").write_text(json.dumps(rows, indent=1))
        return
    if args.fp8:
        trials = args.trials or 20
        rounds = args.rounds or 1
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        card = torch.cuda.get_device_name()
        log(f"# MoE fp8 bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit "
            f"{commit}, {card}, torch {torch.__version__}, trials {trials}"
            + (f", {rounds} alternating rounds" if rounds > 1 else ""))
        rows: list = []
        run_fp8(args.tokens or FP8_TOKENS, trials, rows, with_variants=not args.no_variants,
                rounds=rounds)
        md = fp8_table(rows)
        log("\n" + md)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "moe_fp8.json").write_text(json.dumps(dict(
            commit=commit, card=card, trials=trials, rows=rows,
            **({"rounds": rounds} if rounds > 1 else {})), indent=1))
        (out / "moe_fp8.md").write_text(md + "\n")
        if any(r.get("ours-fp8", {}).get("ok") is False for r in rows):
            log("WRONG RESULTS (ours-fp8)")
            sys.exit(1)
        return

    tokens = args.tokens or ([1, 16, 64] if args.decode else
                             QUICK_TOKENS if args.quick else TOKENS)
    trials = args.trials or (20 if args.quick or args.decode else 100)
    allow_few = trials < 100
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    card = torch.cuda.get_device_name()
    log(f"# MoE bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
        f"{card}, torch {torch.__version__}, trials {trials}")
    copy_bw = copy_bandwidth(trials, allow_few)
    log(f"device copy bandwidth: {copy_bw / 1e12:.2f} TB/s (read + write)")
    rows: list = []
    if args.fixed_cost:
        for name in args.models:
            fixed_cost_fit(name, copy_bw, rows)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "moe_fixed_cost.json").write_text(json.dumps(dict(
            commit=commit, card=card, copy_bw=copy_bw, rows=rows), indent=1))
        return
    for name in args.models:
        run_model(name, tokens, trials, allow_few, copy_bw, rows, args.variants, args.breakdown,
                  decode_variants=args.rule_variants,
                  prefill_variants_too=args.prefill_variants,
                  prefill_rounds=args.rounds or 3)
        torch.cuda.empty_cache()
    md = table(rows) + ("\n" + prefill_table(rows) if args.prefill_variants else "")
    log("\n" + md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "moe.json").write_text(json.dumps(dict(commit=commit, card=card, copy_bw=copy_bw,
                                                  trials=trials, bias_scale=BIAS_SCALE,
                                                  rows=rows), indent=1))
    (out / "moe.md").write_text(md + "\n")
    wrong = [r for r in rows for p in ("ours",) if r.get(p, {}).get("ok") is False]
    if wrong:
        log(f"WRONG RESULTS: {[(r['model'], r['T']) for r in wrong]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
