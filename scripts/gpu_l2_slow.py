#!/usr/bin/env python3
"""Before / after of KernelBench L2/8's convolution and L2/8's and L2/11's max pools on a GPU
(device run, < 90 s): each variant checked against torch and timed with
argus.bench.timing.measure (CUDA events, L2 flush, median), next to torch eager; a short
table last.

    python3 -u scripts/gpu_l2_slow.py [--quick] [--conv-only] [--out DIR]

- L2/8 conv: Conv3d 8 -> 16, 3x3x3, x [128, 8, 16, 64, 64] fp32, bias, under tf32
  (argus.ops.conv.convolve(precision="tf32"), the NCDHW result compose asks for). Variants:
  "bn64" (the tf32 schedule before: a 64-wide output-channel tile for 16 channels), "bn16"
  and "bn32" (the same schedule with a narrower tile; bn16 is argus.ops.conv.tf32_bn's pick,
  the default since 2846380), "im2col" (the im2col route, IM2COL_MAX_CHANNELS_TF32 raised to 8 for
  this call: the voxel gather writes A [M, 216 + bias], then the tf32 GEMM), "taps4" (packed
  taps, ConvSchedule.taps_per_slice: 4 taps of 8 channels in each 32-deep K step, 7 steps a
  tile instead of 27; "taps4-nocluster" without the 2x1 cluster, "taps2" 2 a step). Checked against
  torch's fp32 conv3d with TF32 off (normwise relative error; tf32's is ~3e-4). Eager is
  F.conv3d with cuDNN's default allow_tf32 (what KernelBench's eager runs).
- pools: MaxPool3d(2) over L2/8's [128, 16, 14, 62, 62] and MaxPool2d(2) over L2/11's
  [512, 128, 34, 34], argus.compose.pool.run_pool at rows=1 (before) and at
  pool_rows_per_cta's pick (after; --quick skips the other row counts), bit for bit against
  torch's max pool.
What to look for: the "after" rows' x-eager against the "before" rows'; a bn16 slower than
bn64 would say the implicit GEMM is not bound by its products at this shape (then the
producer's per-row boxes: 3-d has no rowbox).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ARGUS_VERIFY", "0")


def _rel(y, ref) -> float:
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


def conv_rows(quick: bool) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from argus.bench.timing import measure
    from argus.ops import conv as C

    torch.manual_seed(0)
    x = torch.randn(CONV_X, device=DEVICE)
    w = torch.randn(CONV_W, device=DEVICE) * 0.1
    b = torch.randn(CONV_W[0], device=DEVICE)
    torch.backends.cudnn.allow_tf32 = False
    ref = F.conv3d(x, w, b)
    torch.backends.cudnn.allow_tf32 = True
    eager = measure(lambda: F.conv3d(x, w, b), trials=100).median_ms
    flop = 2 * ref.numel() * w[0].numel()
    print(f"\n-- L2/8 conv {tuple(x.shape)} -> {tuple(ref.shape)}: eager (cuDNN tf32) "
          f"{eager:.3f} ms ({flop / eager / 1e9:.1f} TFLOP/s)", flush=True)
    base = C.schedule_for(x, w, 1, 0, 1, 1, precision="tf32")
    variants = [("bn64", dataclasses.replace(base, bn=64)),
                ("bn16", dataclasses.replace(base, bn=16))]
    if not quick:
        variants.append(("bn32", dataclasses.replace(base, bn=32)))
    # packed taps: 4 taps of 8 channels in each 32-deep K step (bk 8, 32-byte atoms) instead
    # of one tap a step (ConvSchedule.taps_per_slice; schedule_for(taps_per_slice="auto"))
    taps = C.schedule_for(x, w, 1, 0, 1, 1, precision="tf32", taps_per_slice="auto")
    variants += [("taps4", taps), ("taps4-nocluster", dataclasses.replace(taps, cluster_m=1))]
    if not quick:
        variants.append(("taps2", dataclasses.replace(taps, taps_per_slice=2)))
    variants.append(("im2col", "im2col"))
    out = []
    for tag, s in variants:
        t0 = time.time()
        saved = C.IM2COL_MAX_CHANNELS_TF32
        try:
            if s == "im2col":
                C.IM2COL_MAX_CHANNELS_TF32 = 8
                route = C.route(x, w, b, 1, 0, 1, precision="tf32")
                if route != "im2col":
                    raise RuntimeError(f"route {route!r}, not im2col, at C = 8")
                fn = lambda: C.convolve(x, w, b, precision="tf32", nchw=True)   # noqa: E731
                took, inner = [], C._im2col

                def spy(*a, **k):
                    res = inner(*a, **k)
                    took.append(res[0] is not None)
                    return res
                C._im2col = spy
                try:
                    fn()
                finally:
                    C._im2col = inner
                if not all(took) or not took:
                    raise RuntimeError("the im2col route fell back to the implicit GEMM (no "
                                       "tf32 GEMM schedule for the problem)")
            else:
                fn = lambda s=s: C.convolve(x, w, b, precision="tf32", schedule=s,  # noqa: E731
                                            nchw=True)
            y = fn()
            torch.cuda.synchronize()
            err = _rel(y, ref)
            ok = y.shape == ref.shape and err <= 2e-3
            ms = measure(fn, trials=100).median_ms
        except Exception as exc:  # noqa: BLE001 - one variant's failure is its row
            print(f"   {tag}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            traceback.print_exc(limit=3)
            out.append({"case": "L2/8 conv", "variant": tag, "ok": False})
            continue
        finally:
            C.IM2COL_MAX_CHANNELS_TF32 = saved
        print(f"   {tag:7s}: {ms:8.3f} ms  {flop / ms / 1e9:6.1f} TFLOP/s  {eager / ms:5.2f}x "
              f"eager  rel err {err:.1e}  {'ok' if ok else 'WRONG'}  (built+checked in "
              f"{time.time() - t0:.0f} s)", flush=True)
        out.append({"case": "L2/8 conv", "variant": tag, "ms": ms, "eager_ms": eager,
                    "rel_err": err, "ok": ok})
        del y
    del x, ref
    torch.cuda.empty_cache()
    return out


# L2/8's convolution (x, weight) and the pools' inputs (names, shapes); DEVICE: where they live
CONV_X, CONV_W = (128, 8, 16, 64, 64), (16, 8, 3, 3, 3)
DEVICE = "cuda"
POOLS = [("L2/8 pool", (128, 16, 14, 62, 62)), ("L2/11 pool", (512, 128, 34, 34))]


def pool_rows(quick: bool) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from argus.bench.timing import measure
    from gpu_pool_sweep import pool_node, rule_rows, time_at_rows   # scripts/, beside this one

    out = []
    for name, shape in POOLS:
        torch.manual_seed(0)
        x = torch.randn(shape, device=DEVICE)
        n = x.dim() - 2
        f = F.max_pool2d if n == 2 else F.max_pool3d
        ref = f(x, 2)
        node = pool_node(ref, "max", 2, 2, 0, 1)
        eager = measure(lambda: f(x, 2), trials=100).median_ms
        gbs = lambda ms: (x.numel() + ref.numel()) * 4 / ms / 1e6         # noqa: E731
        after = rule_rows(ref, 2 ** n)
        print(f"\n-- {name} {shape}: torch eager {eager:.3f} ms ({gbs(eager):.0f} GB/s); "
              f"rule: {after} rows", flush=True)
        counts = [1, after] if quick else sorted({1, 2, 4, 8, after})
        for rows in counts:
            tag = "before" if rows == 1 else ("after" if rows == after else "")
            try:
                y, ms = time_at_rows(node, x, rows)
                ok = torch.equal(y, ref)
            except Exception as exc:  # noqa: BLE001
                print(f"   rows={rows}: FAILED {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200]}")
                traceback.print_exc(limit=3)
                continue
            print(f"   rows={rows} {tag:6s}: {ms:8.3f} ms {gbs(ms):6.0f} GB/s  "
                  f"{eager / ms:5.2f}x eager  {'exact' if ok else 'WRONG'}", flush=True)
            out.append({"case": name, "variant": f"rows={rows} {tag}".strip(), "ms": ms,
                        "eager_ms": eager, "ok": ok})
        del x, ref
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="no bn32, pools at rows 1 and the rule")
    ap.add_argument("--out", default=None)
    ap.add_argument("--conv-only", action="store_true", help="L2/8's convolution only")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return 1
    start = time.time()
    print(f"== L2/8 and L2/11 before / after on {torch.cuda.get_device_name()}")
    rows = ([] if args.conv_only else pool_rows(args.quick)) + conv_rows(args.quick)
    print(f"\n({time.time() - start:.0f} s)\n")
    print("| case | variant | ms | eager ms | x eager | correct |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "ms" not in r:
            print(f"| {r['case']} | {r['variant']} | failed | | | |")
            continue
        print(f"| {r['case']} | {r['variant']} | {r['ms']:.3f} | {r['eager_ms']:.3f} | "
              f"{r['eager_ms'] / r['ms']:.2f}x | {'yes' if r['ok'] else 'NO'} |")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "l2_slow.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
