"""fp8 GEMM benchmark on the GPU: argus.ops.scaled_matmul vs torch._scaled_mm in one process.

For each shape (x [M, K] e4m3 @ W [N, K] e4m3 with per-tensor scales, bf16 out):
  1. tune: argus.ops.tune.tune_scaled_matmul on one set of random inputs: every
     Fp8GemmSchedule candidate built (compiled, run once) before any is timed, then screened
     (--tune-trials calls each), the three fastest timed again in alternating rounds, the
     winner cached on disk;
  2. check: the plain call (the tuned choice) on fresh random data (another seed) against a
     float64 reference of the dequantized inputs; a row whose error exceeds
     max(2 x torch._scaled_mm's, 4e-3) is WRONG and the script exits 1;
  3. time, nothing compiling: ours, torch._scaled_mm(a, W.t(), scale_a, scale_b,
     out_dtype=bf16) (cuBLASLt; default accumulation and use_fast_accum) and our prepared
     launch alone (the op's host work left out) in --repeats rounds, the order reversed every
     other round, each round a median of --trials L2-flushed calls; the ratio is the median of
     the rounds' ratios, the spread their min..max.
Reports TFLOP/s and the ratio. Then disassembles the chosen
kernels and checks the SASS has QGMMA (fp8 wgmma) and no HGMMA/HMMA path. Prints a markdown
table last and writes fp8.json / fp8.md under --out. Budget: a few minutes on an H200.
Per-tensor rows also time two promoting schedules (Fp8GemmSchedule(promote=True): each 128-K
block's partial added into fp32 on the CUDA cores) and report their error next to cuBLAS's.

`--block`: block-scaled fp8 instead (1x128 activation scales, 128x128 weight scales, the
DeepSeek-V3 / DeepGEMM convention) at DeepSeek-V3 shapes (M 4096 / 8192 x (N, K) of its
projections): tuned over the block-scaled candidates, error against float64 of the
dequantized product, TFLOP/s (DeepGEMM publishes 1500-1550 on an H800; our bar is 1400), and
torch._scaled_mm's block-scaled mode where this torch has it (else its per-tensor time on the
same shape, as a speed reference only). Writes fp8_block.json / fp8_block.md.

`--block --overlap`: also time four overlapped-promotion schedules (Fp8GemmSchedule(...,
overlap=True): block k's wgmma issued before block k - 1 is promoted) beside the tuned one,
each checked against the same float64 reference; the table gains a "best variant" column
(best overlapped schedule) and the best of all is reported. `--block --smem`: also time block
scales through shared memory (smem_scales=True) and the serial promotion's two release orders
(late_release=True against the default early release), the same way (verified kernels; the
overlapped loop is proven by the promoted-sum k-once since 499d37c).

`--variants`: the structural variants of docs/perf/fp8.md "DeepGEMM compared" (wave-filling
widths 144 / 160 with the TMA epilogue, the N-split 128 x 192 and 128 x 256 tiles of
Fp8GemmSchedule(n_split=2), ...) side by side at DeepSeek-V3 shapes (VARIANT_SHAPES unless
--shapes): no tuning; every variant checked against the float64 reference of the dequantized
product (relative error <= VARIANT_MAX_ERR, else the row says WRONG) and timed (L2 flushed,
median), torch._scaled_mm's block-scaled mode beside them; a table of TFLOP/s per variant and
shape with each variant's registers and spill bytes, and the best per shape. Writes
fp8_variants.json / fp8_variants.md. About 2 minutes on an H200. `--only SUBSTRING ...`
times only the variants so named, `--rounds N` each N times in alternating order (the median
in the table: one timing per cell moved up to 20% between calls), `--ceiling` adds per-tensor
fp8 at the same tiles without and with promotion (how much of the gap is the tile, how much
the block scales), `--graphs` each call also replayed from a CUDA graph (in parentheses: the
kernel without the op's per-call host work).

`--promote-every 1,2,4,8`: per-tensor promotion intervals (Fp8GemmSchedule(promote=True,
promote_every=N): a partial over N K steps, then one FADD into fp32) at fixed tiles, no tuning
(`interval_schedules`: M > 256 128 x 192 / 160 / 128 with 2x1 clusters and the TMA-store
epilogue, 192 only for N >= 2; M <= 128 the weight-streaming rule's pick), beside the plain
default and torch._scaled_mm, each checked against float64 on the same inputs and timed in
--repeats alternating rounds of --trials calls; a table of ratio (torch / ours) and error per N
last. Writes fp8_promote_every.json / .md. Estimated 1.5-3 minutes with --trials 30
--repeats 3 (about 22 kernels at 2-3 s of verify + NVRTC each on a CPU, ~10 s of timed
calls; not yet run on a GPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192), (4096, 14336, 4096),
          (2048, 7168, 2048), (128, 8192, 8192), (16, 8192, 8192)]
# DeepSeek-V3 projections (N, K), as DeepGEMM benchmarks them
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
               (7168, 2048)]
BLOCK_SHAPES = [(m, n, k) for m in (4096, 8192) for n, k in DEEPSEEK_NK]
# --variants: the two shapes measured since bfd5e84, DeepGEMM's best (7168x16384), the
# wave-quantized N = 2112 and a square-ish K-heavy one
VARIANT_SHAPES = [(4096, 7168, 2048), (4096, 24576, 1536), (4096, 7168, 16384),
                  (4096, 2112, 7168), (4096, 4096, 7168)]
# a variant's relative error bound against float64: ours and cuBLAS's block-scaled mode gave
# 1.7e-3 at every DeepSeek-V3 shape (docs/perf/fp8.md); a scale applied to the wrong block,
# row or K step gives 1e-2 and more
VARIANT_MAX_ERR = 4e-3


def log(msg: str) -> None:
    print(msg, flush=True)


def _scaled_mm(a, w, sa, sb, fast: bool):
    import torch

    r = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                         use_fast_accum=fast)
    return r[0] if isinstance(r, tuple) else r


def tune(a, w, sa, sb, out, trials: int, block: bool = False, promote: bool = False):
    """tune_scaled_matmul (candidates built first, screen, alternating finals), the winner
    cached; returns (winner, [(screen ms, schedule)], [(final ms, schedule)]). `block` is
    read from the scales by the op; kept for the callers' readability. promote: over
    fp8_schedules.promoted_candidates (every schedule promotes) instead of the plain set."""
    from argus.ops.fp8_schedules import promoted_candidates
    from argus.ops.tune import tune_scaled_matmul

    result = tune_scaled_matmul(a, w, sa, sb, out, trials=trials, finalists=3, rounds=3,
                                progress=lambda line: log("    " + line),
                                schedules=promoted_candidates if promote else None)
    for s, why in result.failed:
        log(f"    candidate {s} failed: {why}")
    return result.best, list(result.screened), list(result.finals)


def per_tensor_inputs(m, n, k, seed: int):
    """e4m3 activations ~ N(0, 3^2) and weights ~ N(0, 0.05^2), quantized with per-tensor
    scales the way an fp8 inference stack does it (amax / 448): (a, w, scale_a, scale_b)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g) * 3.0
    wf = torch.randn(n, k, device="cuda", generator=g) * 0.05
    sa = (x.abs().amax() / 448.0).float()
    sb = (wf.abs().amax() / 448.0).float()
    return (x / sa).to(torch.float8_e4m3fn), (wf / sb).to(torch.float8_e4m3fn), sa, sb


# ours without promotion gave 1.9-2.6e-3 against torch._scaled_mm's 1.7e-3 (docs/perf/fp8.md);
# a kernel that reads a wrong tile, scale or K step is off by 1e-2 and more
PER_TENSOR_MAX_ERR = 4e-3


def error_ok(err: float, torch_err: float) -> bool:
    """Whether our error passes: at most twice torch._scaled_mm's on the same data, or
    PER_TENSOR_MAX_ERR (False for NaN: an unwritten tile of the NaN-filled output)."""
    return bool(err <= max(2 * torch_err, PER_TENSOR_MAX_ERR))


def alternate(fns: dict, repeats: int, time_one) -> dict:
    """Time every named call of `fns` in `repeats` rounds, the order reversed every other
    round (so neither side always runs right after the other's clock and cache state);
    time_one(fn) -> median ms of one measurement. Returns {name: [ms per round]}."""
    names = list(fns)
    rounds: dict = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            rounds[name].append(time_one(fns[name]))
    return rounds


def ratio_summary(theirs_ms: list, ours_ms: list) -> dict:
    """Per-round ratios theirs / ours (> 1: ours faster): median, min, max, and each side's
    median time."""
    import statistics

    ratios = sorted(t / o for t, o in zip(theirs_ms, ours_ms))
    return {"ratio": statistics.median(ratios), "ratio_min": ratios[0],
            "ratio_max": ratios[-1], "ratios": ratios,
            "ours_ms": statistics.median(ours_ms), "theirs_ms": statistics.median(theirs_ms)}


def bench_case(m, n, k, trials, repeats: int = 5, tune_trials: int = 20,
               promote: bool = False):
    import torch

    from argus.bench.timing import measure
    from argus.ops import scaled_matmul
    from argus.ops.scaled_matmul import prepared_launch

    seed = m * 7 + n * 3 + k
    a, w, sa, sb = per_tensor_inputs(m, n, k, seed)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    best, tried, finals = tune(a, w, sa, sb, out, trials=tune_trials, promote=promote)
    del a, w
    # the check and the timing on fresh data: the tuned choice, not the tuning's buffers
    a, w, sa, sb = per_tensor_inputs(m, n, k, seed + 1)
    out.fill_(float("nan"))
    scaled_matmul(a, w, sa, sb, out=out)
    theirs = _scaled_mm(a, w, sa, sb, fast=False)
    torch.cuda.synchronize()
    ref = (a.double() * sa.double()) @ (w.double() * sb.double()).T
    err = rel_error(out, ref)
    err_torch = rel_error(theirs, ref)
    ok = error_ok(err, err_torch)
    del theirs
    fns = {"ours": lambda: scaled_matmul(a, w, sa, sb, out=out),
           "torch": lambda: _scaled_mm(a, w, sa, sb, fast=False),
           "torch_fast": lambda: _scaled_mm(a, w, sa, sb, fast=True)}
    plan = prepared_launch(a, w, sa, sb, out)
    if plan is not None:    # the kernel alone: how much of ours is the op's host work
        fns["ours_launch"] = plan
    for fn in fns.values():  # first calls (cuBLASLt's heuristics) outside the timing
        fn()
    torch.cuda.synchronize()
    rounds = alternate(fns, repeats, lambda fn: measure(fn, trials=trials,
                                                        warmup=10).median_ms)
    base = ratio_summary(rounds["torch"], rounds["ours"])
    fast = ratio_summary(rounds["torch_fast"], rounds["ours"])
    flops = 2 * m * n * k
    promoted = []
    for s in ([] if promote else _promoted_schedules(m)):
        p_err, tflops = check_and_time(a, w, sa, sb, ref, s, out, trials)
        promoted.append({"schedule": repr(s), "rel_error": p_err, "tflops": tflops})
        log(f"    promoted {s}: {tflops:.0f} TFLOP/s, err {p_err:.1e}")
    del ref
    launch_ms = sorted(rounds["ours_launch"])[repeats // 2] if plan is not None else None
    row = {"M": m, "N": n, "K": k, "rel_error": err, "torch_rel_error": err_torch, "ok": ok,
           "ours_ms": base["ours_ms"], "torch_ms": base["theirs_ms"],
           "torch_fast_ms": fast["theirs_ms"], "ours_launch_ms": launch_ms,
           "ours_tflops": flops / base["ours_ms"] / 1e9,
           "torch_tflops": flops / base["theirs_ms"] / 1e9,
           "torch_fast_tflops": flops / fast["theirs_ms"] / 1e9,
           "ratio": base["ratio"], "ratio_min": base["ratio_min"],
           "ratio_max": base["ratio_max"], "ratio_fast": fast["ratio"],
           "rounds_ms": rounds, "schedule": repr(best),
           "candidates": [(ms, repr(s)) for ms, s in tried],
           "finals": [(ms, repr(s)) for ms, s in finals], "promoted": promoted}
    log(f"{m}x{n}x{k}: ours {row['ours_tflops']:.0f} TFLOP/s, torch {row['torch_tflops']:.0f} "
        f"(fast accum {row['torch_fast_tflops']:.0f}), ratio {row['ratio']:.3f} "
        f"[{row['ratio_min']:.3f}, {row['ratio_max']:.3f}] over {repeats} rounds"
        + (f", launch alone {launch_ms * 1e3:.1f} us vs op {base['ours_ms'] * 1e3:.1f} us"
           if launch_ms is not None else "")
        + f", err {err:.1e} (torch {err_torch:.1e}){'' if ok else ' WRONG'}, {best}")
    for ms, s in tried:  # what tuning saw, fastest first
        log(f"    {ms * 1e3:8.1f} us  {s}")
    for ms, s in finals:
        log(f"    final {ms * 1e3:8.1f} us  {s}")
    return row


def _promoted_schedules(m: int):
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule

    if m <= 256:
        return [Fp8GemmSchedule(bm=128, bn=64, stages=8, promote=True)]
    return [Fp8GemmSchedule(bn=128, stages=6, promote=True),
            Fp8GemmSchedule(bn=160, stages=5, promote=True, cluster_m=2)]


def quantize_blocks(x, w):
    """DeepSeek-V3 quantization: x per 1x128 (token, K block), w per 128x128 block, amax ->
    448. Returns (a, w8, scale_a [M, K/128] MN-major, scale_b [N/128, K/128])."""
    import torch

    m, k = x.shape
    n = w.shape[0]
    xb = x.view(m, k // 128, 128)
    sa = (xb.abs().amax(-1) / 448).clamp_min(1e-12)
    a = (xb / sa[..., None]).to(torch.float8_e4m3fn).view(m, k)
    npad = -(-n // 128) * 128
    wb = torch.nn.functional.pad(w, (0, 0, 0, npad - n)).view(npad // 128, 128, k // 128, 128)
    sb = (wb.abs().amax(dim=(1, 3)) / 448).clamp_min(1e-12)
    w8 = (wb / sb[:, None, :, None]).to(torch.float8_e4m3fn).view(npad, k)[:n].contiguous()
    return a, w8, sa.t().contiguous().t(), sb.contiguous()


def block_inputs(m, n, k):
    """A block-scaled shape's inputs, seeded by the shape (activations ~ N(0, 3^2), weights ~
    N(0, 0.05^2), quantized by quantize_blocks), and the float64 product of their dequantized
    values that every schedule is checked against: (a, w8, scale_a, scale_b, ref)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(m * 7 + n * 3 + k)
    x = torch.randn(m, k, device=device, generator=g) * 3.0
    wf = torch.randn(n, k, device=device, generator=g) * 0.05
    a, w, sa, sb = quantize_blocks(x, wf)
    del x, wf
    a64 = a.double() * sa.double().repeat_interleave(128, 1)
    w64 = w.double() * sb.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    return a, w, sa, sb, a64 @ w64.T


def rel_error(out, ref) -> float:
    """Relative Frobenius error of `out` against the float64 `ref` (NaN where out has one)."""
    return ((out.double() - ref).norm() / ref.norm()).item()


def check_and_time(a, w, sa, sb, ref, schedule, out, trials: int) -> tuple[float, float]:
    """One schedule: its output into `out` (NaN-filled first, so a tile it never writes
    shows) against `ref`, then its L2-flushed median call: (relative error, TFLOP/s). A
    schedule reading its block scales through shared memory gets them K-major (rows 16-byte
    pitched at these K), the layout it loads, so that no timed call copies them."""
    import torch

    from argus.bench.timing import measure
    from argus.ops import scaled_matmul

    scale_a = sa.contiguous() if getattr(schedule, "smem_scales", False) else sa
    out.fill_(float("nan"))
    scaled_matmul(a, w, scale_a, sb, out=out, schedule=schedule)
    torch.cuda.synchronize()
    err = rel_error(out, ref)
    t = measure(lambda: scaled_matmul(a, w, scale_a, sb, out=out, schedule=schedule),
                trials=trials, warmup=10)
    return err, 2 * a.shape[0] * w.shape[0] * a.shape[1] / t.median_ms / 1e9


def _overlap_schedules():
    """The overlapped-promotion schedules timed by --overlap (bn <= 128: three accumulators)."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule

    # a power-of-two ring (4) turns the step counter's % and / into masks and shifts
    return [Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True),
            Fp8GemmSchedule(bn=128, stages=4, promote=True, overlap=True, cluster_m=2),
            Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True, cluster_m=2),
            Fp8GemmSchedule(bn=128, stages=5, promote=True, overlap=True, cluster_m=2,
                            epilogue="tma")]


def _smem_schedules():
    """The schedules timed by --smem: block scales through shared memory (smem_scales=True:
    TMA-loaded with each stage, read by the consumers there, the stage released before the
    promotion's FFMAs), and the serial promotion with the stage released after the FFMAs
    (late_release=True: the order measured at 794-947 TFLOP/s) and before them (the default
    now), all at the tuned block-scaled shape of docs/perf/fp8.md."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule

    return [Fp8GemmSchedule(bn=128, stages=6, promote=True, smem_scales=True),
            Fp8GemmSchedule(bn=128, stages=5, promote=True, smem_scales=True, cluster_m=2,
                            epilogue="tma"),
            Fp8GemmSchedule(bn=128, stages=6, promote=True, smem_scales=True, cluster_m=2),
            Fp8GemmSchedule(bn=128, stages=5, promote=True, cluster_m=2, epilogue="tma"),
            Fp8GemmSchedule(bn=128, stages=5, promote=True, late_release=True, cluster_m=2,
                            epilogue="tma")]


def variant_schedules() -> list[tuple[str, object]]:
    """(name, schedule) of --variants: the overlap 128 x 128 (the block-scaled default outside
    fp8_schedules._split_measured_best's shapes) first, then what DeepGEMM does
    differently (docs/perf/fp8.md "DeepGEMM compared", 2026-12-03): its serial promotion at
    128 x 128, wave-filling widths (144, 160; TMA epilogue in 32 / 16-column blocks), larger
    tiles through the N-split loop (n_split=2: 128 x 192, 128 x 256, with its own partial and
    sum per half), the 176-wide split for N = 2112 (12 tiles per row: 384 tiles, 2.9 waves).
    Stages: as many as fit beside the staging buffer (Fp8GemmSchedule.smem_bytes)."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule as S

    return [
        ("overlap 128x128", S(bn=128, stages=5, promote=True, overlap=True, cluster_m=2,
                              epilogue="tma")),
        ("serial 128x128", S(bn=128, stages=5, promote=True, cluster_m=2, epilogue="tma")),
        ("serial 128x144", S(bn=144, stages=5, promote=True, cluster_m=2, epilogue="tma")),
        ("serial 128x160", S(bn=160, stages=5, promote=True, cluster_m=2, epilogue="tma")),
        ("split-overlap 128x128", S(bn=128, stages=6, promote=True, n_split=2,
                                    split_overlap=True, cluster_m=2, epilogue="tma")),
        ("split 128x192", S(bn=192, stages=5, promote=True, n_split=2, cluster_m=2,
                            epilogue="tma")),
        ("split-overlap 128x192", S(bn=192, stages=5, promote=True, n_split=2,
                                    split_overlap=True, cluster_m=2, epilogue="tma")),
        ("split 128x256 st3", S(bn=256, stages=3, promote=True, n_split=2, epilogue="tma")),
        ("split 128x256 st4", S(bn=256, stages=4, promote=True, n_split=2, epilogue="tma")),
        # DeepGEMM's raster groups 8 or 16 tiles, whichever wave reads fewer operand rows:
        # 16 x 128 rows of A + 9 x 256 of W at 128 x 256, against 8 x 128 + 17 x 256
        ("split 128x256 st4 g16", S(bn=256, stages=4, promote=True, n_split=2, group_m=16,
                                    epilogue="tma")),
        ("split 128x256 direct", S(bn=256, stages=4, promote=True, n_split=2)),
        # multicast W at 128 x 256 (spilled 480 bytes before ad633c5's pinned second half;
        # none since, on the CPU build; not re-measured on the GPU)
        ("split 128x256 cluster", S(bn=256, stages=3, promote=True, n_split=2, cluster_m=2,
                                    epilogue="tma")),
        # the default split's ring (4 stages, 224 KB with the staging buffer) with W multicast:
        # a third less L2 -> SM traffic per FLOP (32 KB per 128-K block, 48 KB without), as
        # DeepGEMM runs its 256 x 128 tile (docs/perf/fp8.md "Why the split loop stops near
        # 1000"); 168 registers, no spills on the CPU build
        ("split 128x256 st4 cluster", S(bn=256, stages=4, promote=True, n_split=2,
                                        cluster_m=2, epilogue="tma")),
        # the same on 128 SMs: as many waves of 128 x 256 tiles as 132 SMs take at 4 of the 5
        # VARIANT_SHAPES (fp8_schedules.fewest_sms, DeepGEMM's rule: less L2 use and less
        # clock drop under fp8 load)
        ("split 128x256 st4 cluster 128 SMs", S(bn=256, stages=4, promote=True, n_split=2,
                                                cluster_m=2, epilogue="tma", num_sms=128)),
        ("split 128x176 direct", S(bn=176, stages=5, promote=True, n_split=2, cluster_m=2)),
        # block scales through shared memory with each stage (DeepGEMM's path for scale_a)
        ("serial 128x128 smem scales", S(bn=128, stages=5, promote=True, smem_scales=True,
                                         cluster_m=2, epilogue="tma")),
        ("split 128x256 smem scales", S(bn=256, stages=3, promote=True, n_split=2,
                                        smem_scales=True, epilogue="tma")),
        # the same on one CTA a tile (persistent=False): the hardware hands tiles out in launch
        # order, so neighbouring tiles that share A rows and W columns run together instead
        # of drifting apart over a persistent walk (the fp8 MoE gate-up's L2 hit rose from
        # 39% to 67% so, docs/perf/moe.md 2026-12-06); g16 groups 16 tiles down M
        ("split 128x256 smem scales grid", S(bn=256, stages=3, promote=True, n_split=2,
                                             smem_scales=True, epilogue="tma",
                                             persistent=False)),
        ("split 128x256 smem scales grid g16", S(bn=256, stages=3, promote=True, n_split=2,
                                                 smem_scales=True, epilogue="tma",
                                                 persistent=False, group_m=16)),
        # all of DeepGEMM's 256 x 128 configuration at once (transposed): one partial live,
        # W multicast, the activation scales by TMA with each stage (0 spills on the CPU
        # build, 95-99 bookkeeping instructions per K block against the default's 114)
        ("split 128x256 smem scales cluster", S(bn=256, stages=3, promote=True, n_split=2,
                                                smem_scales=True, cluster_m=2,
                                                epilogue="tma")),
        # staggered consumers (stagger=True, docs/perf/fp8.md "Staggered consumers"): the two
        # warpgroups issue each K block's wgmma in turns (ag.ordered), so one promotes while
        # the other's group runs; each against the serial row of the same tile above
        ("staggered 128x128", S(bn=128, stages=5, promote=True, stagger=True, cluster_m=2,
                                epilogue="tma")),
        ("staggered 128x128 smem scales", S(bn=128, stages=5, promote=True, smem_scales=True,
                                            stagger=True, cluster_m=2, epilogue="tma")),
        # the split 128 x 256 (the default) with each column half's issue an ordered section
        # inside the step: warpgroup 0's half 0, warpgroup 1's half 0, warpgroup 0's half 1,
        # ...; each against its unstaggered row above
        ("staggered split 128x256 smem scales", S(bn=256, stages=3, promote=True, n_split=2,
                                                  smem_scales=True, stagger=True,
                                                  epilogue="tma")),
        ("staggered split 128x256 smem scales cluster", S(bn=256, stages=3, promote=True,
                                                          n_split=2, smem_scales=True,
                                                          stagger=True, cluster_m=2,
                                                          epilogue="tma")),
        ("staggered split 128x256 st4", S(bn=256, stages=4, promote=True, n_split=2,
                                          stagger=True, epilogue="tma")),
        # three consumer warpgroups of 64 x 128 (a 192 x 128 tile, attention's 3 x 160 + 32
        # registers): round robin, so each promotion has the other two groups (512 tensor
        # cycles) to hide behind; the serial row of the same tile is the stagger's control
        ("serial 192x128 c3 smem scales", S(bm=192, consumers=3, bn=128, stages=4,
                                            promote=True, smem_scales=True, cluster_m=2,
                                            epilogue="tma", producer_regs=32,
                                            consumer_regs=160)),
        ("serial 192x128 c3 smem scales grid", S(bm=192, consumers=3, bn=128, stages=4,
                                                 promote=True, smem_scales=True, cluster_m=2,
                                                 epilogue="tma", producer_regs=32,
                                                 consumer_regs=160, persistent=False)),
        ("staggered 192x128 c3", S(bm=192, consumers=3, bn=128, stages=4, promote=True,
                                   stagger=True, cluster_m=2, epilogue="tma", producer_regs=32,
                                   consumer_regs=160)),
        ("staggered 192x128 c3 smem scales", S(bm=192, consumers=3, bn=128, stages=4,
                                               promote=True, smem_scales=True, stagger=True,
                                               cluster_m=2, epilogue="tma", producer_regs=32,
                                               consumer_regs=160)),
    ]


def ceiling_schedules() -> list[tuple[str, object]]:
    """(name, schedule) of --ceiling: per-tensor fp8 (unit scalar scales) at the block-scaled
    variants' tiles, without and with the promotion, so that one run says how much of the
    block-scaled gap is the tile (its wgmma shape, shared-memory and L2 traffic) and how much
    the promotion and scale loads: the per-tensor 128 x 256 (one m64n256 wgmma per K slice)
    reached 1300-1400 TFLOP/s where every block-scaled loop (m64n128 wgmmas) stopped near
    1000-1100 (docs/perf/fp8.md)."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule as S

    return [
        ("per-tensor 128x256 st3 cluster", S(stages=3, cluster_m=2, epilogue="tma")),
        ("per-tensor 128x256 st3", S(stages=3, epilogue="tma")),
        ("per-tensor 128x128 st5 cluster", S(bn=128, stages=5, cluster_m=2, epilogue="tma")),
        ("per-tensor split 128x256 st4 promoted", S(bn=256, stages=4, promote=True, n_split=2,
                                                    epilogue="tma")),
        ("per-tensor split 128x256 st4 cluster promoted",
         S(bn=256, stages=4, promote=True, n_split=2, cluster_m=2, epilogue="tma")),
    ]


def select_variants(variants, only) -> list:
    """The (name, schedule) pairs whose name contains one of `only` (all when it is empty);
    SystemExit naming the known names when none matches, so a typo costs no device time."""
    if not only:
        return list(variants)
    chosen = [(name, s) for name, s in variants if any(o in name for o in only)]
    if not chosen:
        raise SystemExit(f"--only {' '.join(only)} matches no variant; the names are: "
                         + ", ".join(name for name, _ in variants))
    return chosen


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The timing order of each round: forwards, then backwards, alternating, so that no
    variant is always timed first (the clock and L2 state drift within a call, docs/perf/
    fp8.md: up to 20% per cell between single timings)."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def graph_call(call):
    """`call` captured in a CUDA graph of one call (after a warm call outside the capture),
    returned as the graph's replay: timed by `measure` (L2 flushed before each replay) it is
    the kernels alone, without the op's host work per call, which `measure` counts whenever
    it outlasts the flush (the per-tensor op spent 6-47 us per call beyond its launch,
    docs/perf/fp8.md, 2026-12-04)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay


def bench_variants_case(m, n, k, trials, variants, rounds: int = 1,
                        graphs: bool = False) -> dict:
    """One shape of --variants: every variant against float64 (per-tensor ones, names
    starting "per-tensor", against the float64 product of the unscaled fp8 inputs), then
    timed in `rounds` alternating rounds: the median TFLOP/s, and every round's. `graphs`:
    also each variant's and torch's call replayed from a CUDA graph ("graph_tflops": the
    kernel without the op's host work)."""
    import torch

    from argus.bench.timing import measure
    from argus.ops import scaled_matmul

    a, w, sa, sb, ref = block_inputs(m, n, k)
    flops = 2 * m * n * k
    row = {"M": m, "N": n, "K": k, "variants": {}}
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    one = torch.ones(1, device="cuda", dtype=torch.float32)
    ref_plain = None
    calls = {}
    for name, s in variants:
        try:
            if name.startswith("per-tensor"):
                if ref_plain is None:
                    ref_plain = a.double() @ w.double().T
                out.fill_(float("nan"))
                call = functools.partial(scaled_matmul, a, w, one, one, out=out, schedule=s)
                call()
                torch.cuda.synchronize()
                err = rel_error(out, ref_plain)
            else:
                scale_a = sa.contiguous() if s.smem_scales else sa
                out.fill_(float("nan"))
                call = functools.partial(scaled_matmul, a, w, scale_a, sb, out=out, schedule=s)
                call()
                torch.cuda.synchronize()
                err = rel_error(out, ref)
            ok = bool(err <= VARIANT_MAX_ERR)   # NaN compares False
            row["variants"][name] = {"rel_error": err, "ok": ok, "rounds": []}
            calls[name] = call
        except Exception as e:  # noqa: BLE001 - record and go on
            first = (str(e).splitlines() or [""])[0]
            row["variants"][name] = {"error": f"{type(e).__name__}: {first}"}
            log(f"  {m}x{n}x{k} {name:28s} FAILED {row['variants'][name]['error'][:200]}")
    for order in round_orders(list(calls), rounds):
        for name in order:
            t = measure(calls[name], trials=trials, warmup=10)
            row["variants"][name]["rounds"].append(flops / t.median_ms / 1e9)
    for name, call in calls.items():
        v = row["variants"][name]
        if graphs:
            try:
                t = measure(graph_call(call), trials=trials, warmup=10)
                v["graph_tflops"] = flops / t.median_ms / 1e9
            except Exception as e:  # noqa: BLE001 - the op's numbers stand without it
                v["graph_error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        v["tflops"] = statistics.median(v["rounds"])
        log(f"  {m}x{n}x{k} {name:28s} {v['tflops']:6.0f} TFLOP/s "
            f"[{min(v['rounds']):.0f}, {max(v['rounds']):.0f}]"
            + (f" graph {v['graph_tflops']:.0f}" if "graph_tflops" in v else "")
            + f" err {v['rel_error']:.1e}{'' if v['ok'] else ' WRONG'}")
    try:   # cuBLAS's block-scaled mode, where this torch has it
        def theirs():
            return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb.t(),
                                    out_dtype=torch.bfloat16)
        t = measure(theirs, trials=trials, warmup=10)
        row["torch_block_tflops"] = flops / t.median_ms / 1e9
        if graphs:
            t = measure(graph_call(theirs), trials=trials, warmup=10)
            row["torch_block_graph_tflops"] = flops / t.median_ms / 1e9
    except (RuntimeError, TypeError, ValueError) as e:
        row["torch_block"] = f"unavailable: {str(e).splitlines()[0][:160]}"
    del ref
    return row


def variants_table(rows, variants, resources: dict) -> str:
    """Variants down, shapes across: TFLOP/s (WRONG / FAILED where so; the CUDA graph's in
    parentheses where --graphs took it), each variant's geomean over the shapes it ran right
    on (the op's), registers and spill bytes; torch and the best last."""
    shapes = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows]
    lines = ["| variant | " + " | ".join(shapes) + " | geomean | regs / spill B |",
             "|---|" + "---|" * (len(shapes) + 2)]
    for name, _ in variants:
        cells, good = [], []
        for r in rows:
            v = r.get("variants", {}).get(name, {})
            if "tflops" not in v:
                cells.append("FAILED" if "error" in v else "")
            elif not v["ok"]:
                cells.append(f"WRONG {v['rel_error']:.1e}")
            else:
                cells.append(f"{v['tflops']:.0f}" + (f" ({v['graph_tflops']:.0f})"
                                                      if "graph_tflops" in v else ""))
                good.append(v["tflops"])
        geo = f"{math.exp(sum(map(math.log, good)) / len(good)):.0f}" if good else ""
        res = resources.get(name, {})
        regs = f"{res.get('registers', '?')} / {res.get('spill_bytes', '?')}"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {geo} | {regs} |")
    lines.append("| torch._scaled_mm block | " + " | ".join(
        (f"{r['torch_block_tflops']:.0f}" + (f" ({r['torch_block_graph_tflops']:.0f})"
                                             if "torch_block_graph_tflops" in r else ""))
        if "torch_block_tflops" in r else "n/a" for r in rows) + " | | |")
    best = []
    for r in rows:
        ok = [(v["tflops"], name) for name, v in r.get("variants", {}).items() if v.get("ok")]
        best.append(f"{max(ok)[0]:.0f} ({max(ok)[1]})" if ok else "none")
    lines.append("| best | " + " | ".join(best) + " | | |")
    return "\n".join(lines)


def main_variants(args, shapes, started) -> int:
    import torch

    import argus as ag
    from argus.kernels.gemm_fp8 import (gemm_fp8_blockscaled_kernel,
                                        gemm_fp8_blockscaled_smem_kernel, gemm_fp8_kernel)

    variants = select_variants(variant_schedules() + (ceiling_schedules() if args.ceiling
                                                        else []), args.only)
    rows = []
    for (m, n, k) in shapes:
        try:
            rows.append(bench_variants_case(m, n, k, args.trials, variants, args.rounds,
                                            args.graphs))
        except Exception as e:  # noqa: BLE001 - record and continue
            log(f"{m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
            rows.append({"M": m, "N": n, "K": k, "error": repr(e)})
        torch.cuda.empty_cache()
        # the table so far, in case the device's time limit stops the run
        (args.out / "fp8_variants.md").write_text(variants_table(rows, variants, {}) + "\n")
    resources = {}
    for name, s in variants:
        try:   # the op compiled these already: the compile cache answers
            kernel = gemm_fp8_kernel if name.startswith("per-tensor") else \
                gemm_fp8_blockscaled_smem_kernel if s.smem_scales else \
                gemm_fp8_blockscaled_kernel
            resources[name] = _resources_entry(kernel(ag.bf16).compile(s=s))
        except Exception as e:  # noqa: BLE001
            resources[name] = {"error": repr(e)[:200]}
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("ARGUS_COMMIT", "unknown"),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows,
              "schedules": {name: repr(s) for name, s in variants}, "resources": resources,
              "wall_s": time.time() - started}
    (args.out / "fp8_variants.json").write_text(json.dumps(result, indent=1, default=str))
    text = variants_table(rows, variants, resources) + \
        f"\n\nwall {time.time() - started:.0f} s; schedules in fp8_variants.json"
    (args.out / "fp8_variants.md").write_text(text + "\n")
    print(text)
    return 0


def bench_block_case(m, n, k, trials, overlap: bool = False, smem: bool = False):
    import torch

    from argus.bench.timing import measure
    from argus.ops import scaled_matmul

    a, w, sa, sb, ref = block_inputs(m, n, k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    best, tried, _ = tune(a, w, sa, sb, out, trials=10, block=True)
    out.fill_(float("nan"))
    scaled_matmul(a, w, sa, sb, out=out)
    torch.cuda.synchronize()
    err = rel_error(out, ref)
    flops = 2 * m * n * k
    ours = measure(lambda: scaled_matmul(a, w, sa, sb, out=out), trials=trials, warmup=10)
    row = {"M": m, "N": n, "K": k, "rel_error": err, "ours_ms": ours.median_ms,
           "ours_tflops": flops / ours.median_ms / 1e9, "schedule": repr(best),
           "candidates": [(ms, repr(s)) for ms, s in tried]}
    try:  # cuBLAS's own block-scaled mode, where this torch exposes it
        theirs = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb.t(),
                                  out_dtype=torch.bfloat16)
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        row["torch_block_rel_error"] = rel_error(theirs, ref)
        t = measure(lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb.t(),
                                             out_dtype=torch.bfloat16), trials=trials, warmup=10)
        row["torch_block_tflops"] = flops / t.median_ms / 1e9
    except (RuntimeError, TypeError, ValueError) as e:
        row["torch_block"] = f"unavailable: {str(e).splitlines()[0][:160]}"
        one = torch.ones((), device="cuda")
        t = measure(lambda: _scaled_mm(a, w, one, one, fast=False), trials=trials, warmup=10)
        row["torch_per_tensor_tflops"] = flops / t.median_ms / 1e9
    variants = (_overlap_schedules() if overlap else []) + (_smem_schedules() if smem else [])
    if variants:
        row["overlap"] = []   # every variant schedule (the key predates --smem)
        for s in variants:
            try:
                o_err, tflops = check_and_time(a, w, sa, sb, ref, s, out, trials)
                row["overlap"].append({"schedule": repr(s), "rel_error": o_err,
                                       "tflops": tflops,
                                       "ok": bool(o_err <= 2 * max(err, 1e-3))})
                log(f"    variant {tflops:6.0f} TFLOP/s, err {o_err:.1e} "
                    f"{'' if row['overlap'][-1]['ok'] else 'WRONG '}{s}")
            except Exception as e:  # noqa: BLE001 - record and go on
                row["overlap"].append({"schedule": repr(s), "error": repr(e)[:300]})
                log(f"    variant FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]} {s}")
    del ref
    log(f"{m}x{n}x{k} block-scaled: ours {row['ours_tflops']:.0f} TFLOP/s, err {err:.1e}, "
        f"torch {row.get('torch_block_tflops', row.get('torch_per_tensor_tflops', 0)):.0f} "
        f"({'block' if 'torch_block_tflops' in row else 'per-tensor, speed reference'}), "
        f"{best}")
    for ms, s in sorted(tried, key=lambda r: r[0]):
        log(f"    {ms * 1e3:8.1f} us  {s}")
    return row


def _best_overlap(r) -> dict | None:
    ok = [o for o in r.get("overlap", []) if o.get("ok")]
    return max(ok, key=lambda o: o["tflops"]) if ok else None


def block_table(rows, started) -> str:
    overlap = any("overlap" in r for r in rows)
    lines = ["| M x N x K | ours TFLOP/s | torch._scaled_mm TFLOP/s | rel err ours / torch | "
             "schedule |" + (" best variant TFLOP/s (err) |" if overlap else ""),
             "|---|---|---|---|---|" + ("---|" if overlap else "")]
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "ours_tflops" not in r:
            lines.append(f"| {shape} | failed | | | |")
            continue
        if "torch_block_tflops" in r:
            theirs = f"{r['torch_block_tflops']:.0f} (block)"
            errs = f"{r['rel_error']:.1e} / {r['torch_block_rel_error']:.1e}"
        else:
            theirs = f"{r.get('torch_per_tensor_tflops', 0):.0f} (per-tensor)"
            errs = f"{r['rel_error']:.1e} / -"
        best = _best_overlap(r)
        extra = ""
        if overlap:
            extra = " none correct |" if best is None else \
                f" {best['tflops']:.0f} ({best['rel_error']:.1e}) " \
                f"`{best['schedule'].replace('Fp8GemmSchedule', '')}` |"
        lines.append(f"| {shape} | {r['ours_tflops']:.0f} | {theirs} | {errs} | "
                     f"`{r['schedule'].replace('Fp8GemmSchedule', '')}` |{extra}")
    ok = [r["ours_tflops"] for r in rows if "ours_tflops" in r]
    if ok:
        lines.append(f"\nblock-scaled: min {min(ok):.0f}, geomean "
                     f"{math.exp(sum(map(math.log, ok)) / len(ok)):.0f} TFLOP/s (bar >= 1400); "
                     f"wall {time.time() - started:.0f} s")
    both = [max(r["ours_tflops"], (_best_overlap(r) or {}).get("tflops", 0)) for r in rows
            if "ours_tflops" in r]
    if overlap and both:
        lines.append(f"best of tuned and overlapped: min {min(both):.0f}, geomean "
                     f"{math.exp(sum(map(math.log, both)) / len(both)):.0f} TFLOP/s "
                     f"(bar >= 1400)")
    return "\n".join(lines)


def sass_report(rows) -> dict:
    import argus as ag
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel, \
        gemm_fp8_kernel, gemm_fp8_partials_kernel
    from argus.runtime.sass import check_sass, disassemble, instruction_histogram

    report = {}
    kinds = {(r["schedule"], "ratio" not in r) for r in rows}
    kinds |= {(o["schedule"], True) for r in rows for o in r.get("overlap", [])[:1]}
    for sched, block in sorted(kinds):
        s = eval(sched, {"Fp8GemmSchedule": Fp8GemmSchedule})  # our own repr
        kernel = gemm_fp8_blockscaled_kernel(ag.bf16) if block else gemm_fp8_kernel(ag.bf16)
        if s.split_k > 1:   # split-K's first kernel (the partials; the sum is a plain pass)
            kernel, s = gemm_fp8_partials_kernel(), dataclasses.replace(s, split_k=1)
        ck = kernel.compile(s=s)
        sass = disassemble(ck.binary.cubin)
        entry = _resources_entry(ck)
        if sass is None:
            entry["check"] = "no disassembler found"
        else:
            hist = instruction_histogram(sass)
            # spills are local-memory traffic: none in the SASS is the same fact as ptxas's
            # "0 bytes spill", read from the code itself
            entry.update({op: sum(v for name, v in hist.items() if name == op)
                          for op in ("QGMMA", "HGMMA", "HMMA", "LDL", "STL")})
            entry["check"] = str(check_sass(sass, want=("QGMMA",),
                                            forbid=("HGMMA", "HMMA", "LDL", "STL")))
        report[sched] = entry
    return report


def _sass_line(sass: dict) -> str:
    """The SASS report for the markdown (the log diagnostics stay in the JSON)."""
    return "SASS: " + "; ".join(
        f"{k}: { {f: v for f, v in e.items() if f != 'log_diagnostics'} }"
        for k, e in sass.items())


def _resources_entry(ck) -> dict:
    """Registers and spill bytes, and where they come from: ptxas's report in the compiler
    log, or the cubin's own record (Binary.resource's fallback; on the H200 the log of the
    block-scaled kernel came back without the report, so the diagnostics of such a log go
    into the JSON to find out why)."""
    binary = ck.binary
    entry: dict = {}
    if not any(r.name == ck.name for r in binary.resources):
        entry["report"] = "cubin (ptxas report missing from the log)"
        entry["log_diagnostics"] = {
            "log_chars": len(binary.log), "from_cache": binary.from_cache,
            "compiler": binary.compiler, "symbols": dict(binary.symbols),
            "entries_in_log": re.findall(r"Compiling entry function '([^']+)'", binary.log),
            "log_tail": binary.log[-600:]}
    else:
        entry["report"] = "ptxas"
    try:
        res = ck.resources
    except KeyError as e:   # no report and a stack frame: the SASS's LDL/STL still tell
        entry["resources_error"] = str(e)
        return entry
    entry.update({"spill_bytes": res.spill_stores + res.spill_loads,
                  "registers": res.registers, "stack_frame": res.stack_frame})
    return entry


# ---- --promote-every: the per-tensor promotion interval against torch._scaled_mm ------------


def interval_schedules(m: int, n: int, k: int, every: int) -> list[tuple[str, object]]:
    """(name, schedule) of the per-tensor schedules promoting every `every` K steps that
    --promote-every times at one shape, no tuning: M > 256 at 128-row tiles of 192 (N >= 2
    only: two 96-column accumulators; the every-block loop holds at most 160), 160 and 128
    columns, 2x1 clusters, the TMA-store epilogue; M <= 128 the weight-streaming rule's pick
    (swap-AB) promoting every `every` steps; else the 128 x 64 tile."""
    from argus.ops import fp8_schedules
    from argus.ops.fp8_schedules import Fp8GemmSchedule, Fp8Problem

    p = Fp8Problem(m, n, k, "bf16", True)
    if fp8_schedules.weight_bound(p):
        pick = dataclasses.replace(fp8_schedules.weight_streaming(p), promote=False,
                                   promote_every=1)
        if pick.split_k > 1:
            return []   # split-K's partials kernel runs the plain loop
        return [(f"stream {pick.bm}x{pick.bn}", dataclasses.replace(
            pick, promote=True, promote_every=max(1, every // pick.k_atoms)))]
    if m <= 256:
        return [("128x64", Fp8GemmSchedule(bm=128, bn=64, stages=8, promote=True,
                                           promote_every=every))]
    out = []
    for bn in (192, 160, 128):
        if bn > 160 and every == 1:
            continue
        stages = min(6, (200 * 1024 - 128 * bn * 2) // ((128 + bn) * 128))
        out.append((f"128x{bn} tma c2", Fp8GemmSchedule(bn=bn, stages=stages, epilogue="tma",
                                                         cluster_m=2, promote=True,
                                                         promote_every=every)))
    return out


def plain_default(m: int, n: int, k: int):
    """The untuned default without promotion (fp8_schedules.heuristic, promote off): the speed
    the interval is weighed against besides torch."""
    from argus.ops import fp8_schedules
    from argus.ops.fp8_schedules import Fp8Problem

    s = fp8_schedules.heuristic(Fp8Problem(m, n, k, "bf16", True))
    return dataclasses.replace(s, promote=False, promote_every=1)


def bench_promote_every_case(m, n, k, everys, trials: int, repeats: int) -> dict:
    """One shape: torch._scaled_mm (default accumulation), the plain default and every
    interval schedule, each checked against float64 on the same inputs (relative Frobenius
    error, bf16 out) and timed in `repeats` alternating rounds (L2 flushed, median of
    `trials`); ratio = median over the rounds of torch's time over ours."""
    import torch

    from argus.bench.timing import measure
    from argus.ops import scaled_matmul

    a, w, sa, sb = per_tensor_inputs(m, n, k, m * 7 + n * 3 + k + 1)
    ref = (a.double() * sa.double()) @ (w.double() * sb.double()).T
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = _scaled_mm(a, w, sa, sb, fast=False)
    torch.cuda.synchronize()
    row = {"M": m, "N": n, "K": k, "torch_rel_error": rel_error(theirs, ref), "entries": {}}
    del theirs
    named = [("plain default", 0, plain_default(m, n, k))]
    for every in everys:
        named += [(name, every, s) for name, s in interval_schedules(m, n, k, every)]
    fns = {"torch": lambda: _scaled_mm(a, w, sa, sb, fast=False)}
    for name, every, s in named:
        key = f"N={every} {name}" if every else name
        try:
            out.fill_(float("nan"))
            scaled_matmul(a, w, sa, sb, out=out, schedule=s)   # builds it (not timed)
            torch.cuda.synchronize()
            err = rel_error(out, ref)
        except Exception as e:  # noqa: BLE001 - record and continue
            log(f"    {key}: FAILED {type(e).__name__}: {e}")
            row["entries"][key] = {"every": every, "schedule": repr(s), "failed": repr(e)}
            continue
        row["entries"][key] = {"every": every, "schedule": repr(s), "rel_error": err}
        fns[key] = functools.partial(scaled_matmul, a, w, sa, sb, out=out, schedule=s)
    del ref
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    rounds = alternate(fns, repeats, lambda fn: measure(fn, trials=trials,
                                                        warmup=5).median_ms)
    flops = 2 * m * n * k
    row["torch_tflops"] = flops / statistics.median(rounds["torch"]) / 1e9
    for key, e in row["entries"].items():
        if key not in rounds:
            continue
        summ = ratio_summary(rounds["torch"], rounds[key])
        e.update(ratio=summ["ratio"], ratio_min=summ["ratio_min"], ratio_max=summ["ratio_max"],
                 tflops=flops / summ["ours_ms"] / 1e9)
        log(f"  {m}x{n}x{k} {key}: {e['tflops']:.0f} TFLOP/s, ratio {e['ratio']:.3f} "
            f"[{e['ratio_min']:.3f}, {e['ratio_max']:.3f}], err {e['rel_error']:.2e} (torch "
            f"{row['torch_rel_error']:.2e}) {e['schedule']}")
    return row


def best_of(row: dict, every) -> dict | None:
    """The fastest entry of interval `every` (0: the plain default) at one shape."""
    got = [e for e in row["entries"].values() if e["every"] == every and "ratio" in e]
    return max(got, key=lambda e: e["ratio"]) if got else None


def promote_every_table(rows: list, everys: list) -> str:
    """Per shape: torch's TFLOP/s and error, then the plain default's and each interval's best
    tile: ratio vs torch (> 1: ours faster) and error (ours / torch); last the geomean ratio
    per column over the shapes that have it, and how many rows' error is within 1% of
    torch's (the bar: no worse than cuBLAS's)."""
    cols = [0] + list(everys)
    names = ["plain default"] + [f"N={n}" for n in everys]
    lines = ["| M x N x K | torch TFLOP/s (err) | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(cols)]
    per_col: dict = {c: [] for c in cols}
    ok_err: dict = {c: 0 for c in cols}
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "torch_tflops" not in r:
            lines.append(f"| {shape} | failed |" + " |" * len(cols))
            continue
        cells = []
        for c in cols:
            e = best_of(r, c)
            if e is None:
                cells.append("-")
                continue
            per_col[c].append(e["ratio"])
            ok_err[c] += e["rel_error"] <= 1.01 * r["torch_rel_error"]
            cells.append(f"{e['ratio']:.3f} ({e['rel_error']:.2e})")
        lines.append(f"| {shape} | {r['torch_tflops']:.0f} ({r['torch_rel_error']:.2e}) | "
                     + " | ".join(cells) + " |")
    geo = [f"{math.exp(sum(map(math.log, v)) / len(v)):.3f} over {len(v)}" if v else "-"
           for v in per_col.values()]
    lines.append("| geomean ratio | | " + " | ".join(geo) + " |")
    lines.append("| err <= 1.01 x torch | | " + " | ".join(
        f"{ok_err[c]} of {len(per_col[c])}" for c in cols) + " |")
    return "\n".join(lines) + ("\n\ncells: ratio torch / ours of the fastest tile (> 1: ours "
                               "faster), in parentheses our relative error vs float64")


def main_promote_every(args, shapes, started) -> int:
    import torch

    everys = [int(x) for x in args.promote_every.split(",")]
    rows = []
    for (m, n, k) in shapes:
        try:
            rows.append(bench_promote_every_case(m, n, k, everys, args.trials, args.repeats))
        except Exception as e:  # noqa: BLE001 - record and continue
            log(f"{m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
            rows.append({"M": m, "N": n, "K": k, "error": repr(e)})
        torch.cuda.empty_cache()
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("ARGUS_COMMIT", "unknown"),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows,
              "everys": everys, "wall_s": time.time() - started}
    (args.out / "fp8_promote_every.json").write_text(json.dumps(result, indent=1, default=str))
    text = promote_every_table(rows, everys) + f"\nwall {time.time() - started:.0f} s"
    (args.out / "fp8_promote_every.md").write_text(text + "\n")
    print(text)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--trials", type=int, default=100,
                        help="timed calls per measurement (one round of one side)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="per-tensor: rounds of ours / torch._scaled_mm, alternating")
    parser.add_argument("--tune-trials", type=int, default=20,
                        help="per-tensor: calls per candidate in the tuning screen")
    parser.add_argument("--promote", action="store_true",
                        help="per-tensor: tune over the promoting schedules only "
                             "(fp8_schedules.promoted_candidates: cuBLAS's accuracy); writes "
                             "fp8_promoted.json / .md")
    parser.add_argument("--shapes", default="",
                        help="only these MxNxK shapes (comma-separated), e.g. 16x8192x8192")
    parser.add_argument("--block", action="store_true",
                        help="block-scaled fp8 (1x128 / 128x128 scales) at DeepSeek-V3 shapes")
    parser.add_argument("--overlap", action="store_true",
                        help="with --block: also time the overlapped-promotion schedules")
    parser.add_argument("--smem", action="store_true",
                        help="with --block: also time block scales through shared memory "
                             "(smem_scales) and the serial promotion's two release orders")
    parser.add_argument("--variants", action="store_true",
                        help="block-scaled structural variants side by side, no tuning "
                             "(variant_schedules; VARIANT_SHAPES unless --shapes)")
    parser.add_argument("--only", nargs="+", default=[], metavar="SUBSTRING",
                        help="with --variants: only the variants whose name contains one of "
                             "these (e.g. --only 'overlap 128x128' 'split 128x256 st4')")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --variants: timing rounds per variant, alternating order; "
                             "the table shows the median")
    parser.add_argument("--graphs", action="store_true",
                        help="with --variants: also time each call replayed from a CUDA graph "
                             "(the kernel without the op's host work), in parentheses")
    parser.add_argument("--ceiling", action="store_true",
                        help="with --variants: also per-tensor fp8 at the same tiles, without "
                             "and with promotion (ceiling_schedules)")
    parser.add_argument("--promote-every", default="", metavar="N,N,...",
                        help="per-tensor: time the promotion intervals N (e.g. 1,2,4,8: "
                             "Fp8GemmSchedule(promote=True, promote_every=N), fixed tiles, no "
                             "tuning) and the plain default against torch._scaled_mm, with "
                             "each one's error vs float64; writes fp8_promote_every.json / .md")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from argus.bench.tee import Tee

    sys.stdout = Tee(sys.stdout, args.out / "progress.log")
    import torch

    started = time.time()
    log(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    shapes = VARIANT_SHAPES if args.variants else BLOCK_SHAPES if args.block else SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    if args.variants:
        return main_variants(args, shapes, started)
    if args.block:
        return main_block(args, shapes, started)
    if args.promote_every:
        return main_promote_every(args, shapes, started)
    rows = []
    for (m, n, k) in shapes:
        try:
            rows.append(bench_case(m, n, k, args.trials, args.repeats, args.tune_trials,
                                   args.promote))
        except Exception as e:  # noqa: BLE001 - record and continue
            log(f"{m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
            rows.append({"M": m, "N": n, "K": k, "error": repr(e)})
        torch.cuda.empty_cache()
    ok = [r for r in rows if "ratio" in r]
    # a WRONG row's speed counts for nothing: the geomean is over the right rows only
    right = [r for r in ok if r["ok"]]
    geo = math.exp(sum(math.log(r["ratio"]) for r in right) / len(right)) if right else \
        float("nan")
    sass = sass_report(ok)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("ARGUS_COMMIT", "unknown"),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows,
              "geomean_ratio": geo, "promote": args.promote, "sass": sass,
              "wall_s": time.time() - started}
    stem = "fp8_promoted" if args.promote else "fp8"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
    text = per_tensor_table(rows, geo, args.repeats) + \
        f"; wall {time.time() - started:.0f} s\n" + _sass_line(sass)
    if args.promote:
        text = "tuned over fp8_schedules.promoted_candidates (every schedule promotes)\n\n" \
            + text
    (args.out / f"{stem}.md").write_text(text + "\n")
    print(text)
    bad = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows if not r.get("ok")]
    if bad:
        log(f"FAILED or WRONG: {', '.join(bad)} (see the rows above and {stem}.json)")
    return 1 if bad else 0


def per_tensor_table(rows, geo: float, repeats: int) -> str:
    """The per-tensor markdown: per shape TFLOP/s of both sides (medians over the rounds), the
    median ratio and its spread over the rounds, the prepared launch alone, errors."""
    header = ("| M x N x K | ours TFLOP/s | torch._scaled_mm TFLOP/s | ratio [min, max] | "
              "torch fast-accum TFLOP/s | ratio (fast) | ours op / launch us | "
              "rel err (ours / torch) |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "ratio" not in r:
            lines.append(f"| {shape} | failed | | | | | | |")
            continue
        launch = f"{r['ours_launch_ms'] * 1e3:.1f}" if r.get("ours_launch_ms") else "-"
        lines.append(f"| {shape} | {r['ours_tflops']:.0f} | {r['torch_tflops']:.0f} | "
                     f"{r['ratio']:.3f} [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}] | "
                     f"{r['torch_fast_tflops']:.0f} | {r['ratio_fast']:.3f} | "
                     f"{r['ours_ms'] * 1e3:.1f} / {launch} | "
                     f"{r['rel_error']:.1e} / {r['torch_rel_error']:.1e}"
                     f"{'' if r.get('ok') else ' WRONG'} |")
    lines.append(f"\ngeomean ratio vs torch._scaled_mm {geo:.3f} (medians of {repeats} "
                 f"alternating rounds per shape)")
    return "\n".join(lines)


def main_block(args, shapes, started) -> int:
    import torch

    rows = []
    for (m, n, k) in shapes:
        try:
            rows.append(bench_block_case(m, n, k, args.trials, overlap=args.overlap,
                                         smem=args.smem))
        except Exception as e:  # noqa: BLE001 - record and continue
            log(f"{m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
            rows.append({"M": m, "N": n, "K": k, "error": repr(e)})
        torch.cuda.empty_cache()
    ok = [r for r in rows if "ours_tflops" in r]
    sass = sass_report(ok)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("ARGUS_COMMIT", "unknown"),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows,
              "sass": sass, "wall_s": time.time() - started}
    (args.out / "fp8_block.json").write_text(json.dumps(result, indent=1, default=str))
    text = block_table(rows, started) + "\n" + _sass_line(sass)
    (args.out / "fp8_block.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
