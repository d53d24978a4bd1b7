#!/usr/bin/env python3
"""The fused tile template's CTA order, "cols" (the default since this script: a row block's
column blocks one after another, consecutive CTAs stream consecutive memory) against "rows"
(the order before: consecutive CTAs a row block apart, 64 KB for rows of 8192 floats), next to
torch eager and the device copy, on a GPU (device run).

    python3 -u scripts/gpu_tile_order.py [--out DIR]

Why: KernelBench L1/20 LeakyReLU ran at 0.92x eager and L1/29 Softplus at 0.96x on the H200
(eager is at copy bandwidth there), and the elementwise example at 94.5% of the copy while
torch.compile reached 99.3% with about the same tile per CTA (docs/perf/core2.md). The one
difference in the generated code that we know of: torch and Inductor launch consecutive CTAs on
consecutive memory, ours launched them a power-of-two stride apart. Cases: the composed
L1/19-32 shape (4096 x 393216 fp32) for a one-op activation (leaky_relu) and an exp/log one
(softplus), and a middle-dim sum (L1/47-like, 128 x 4096 x 4096 over dim 1: kept column
blocks). Each is checked against torch (max relative error) and timed with
argus.bench.timing.measure (CUDA events, L2 flush, median): ms, GB/s over the tensors read and
written, % of the copy bandwidth measured in the same run, x eager. What to look for: whether
"cols" is at or above "rows" on every case (keep the default), or below (make "rows" the
default again: one line in TileSchedule).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ARGUS_VERIFY", "0")


def composed(f, x, order: str):
    """(ModelNew of forward f whose tile kernels run the default tile in CTA order `order`,
    the first kernel's groups)."""
    import torch.nn as nn

    from argus.compose.runtime import ComposedModel, Program, default_schedule
    from argus.compose.tile import TileSchedule, groups_of

    model = type("M", (nn.Module,), {"forward": lambda self, a: f(a)})
    probe = Program.build(model(), [x.to("meta")])
    kernel = next(s.kernel for s in probe.plan.steps if s.kind == "kernel")
    base = default_schedule(kernel)

    class ModelNew(ComposedModel):
        MODEL = model
        SCHEDULES = {"tile": TileSchedule(base.rows, base.bn, base.threads, order)}

    return ModelNew(), [(g.size, "R" if g.reduced else "K") for g in groups_of(kernel)]


def main(argv=None) -> int:
    import torch
    import torch.nn.functional as F

    from argus.bench.timing import measure

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return 1
    start = time.time()
    print(f"== tile order on {torch.cuda.get_device_name()}")
    cases = [("leaky_relu 4096x393216", (4096, 393216), F.leaky_relu),
             ("softplus 4096x393216", (4096, 393216), F.softplus),
             ("middle-dim sum 128x4096x4096", (128, 4096, 4096), lambda x: x.sum(1))]
    out = []
    for name, shape, f in cases:
        torch.manual_seed(0)
        x = torch.randn(shape, device="cuda")
        ref = f(x)
        moved = (x.numel() + ref.numel()) * 4
        y = torch.empty_like(x)
        copy = measure(lambda: y.copy_(x)).median_ms
        copy_gbs = 2 * x.numel() * 4 / copy / 1e6
        del y
        eager = measure(lambda: f(x)).median_ms
        print(f"\n-- {name}: copy {copy:.3f} ms ({copy_gbs:.0f} GB/s), eager {eager:.3f} ms "
              f"({moved / eager / 1e6:.0f} GB/s)")
        for order in ("cols", "rows"):
            new, groups = composed(f, x, order)
            with torch.no_grad():
                got = new(x)
                torch.cuda.synchronize()
                err = ((got - ref).abs().max() / ref.abs().max()).item()
                ms = measure(lambda: new(x)).median_ms
            gbs = moved / ms / 1e6
            print(f"   order={order}: {ms:8.3f} ms {gbs:6.0f} GB/s ({100 * gbs / copy_gbs:5.1f}% "
                  f"of copy)  {eager / ms:5.2f}x eager  max rel err {err:.1e}  groups "
                  f"{groups}",
                  flush=True)
            out.append({"case": name, "order": order, "ms": ms, "eager_ms": eager,
                        "copy_ms": copy, "pct_copy": 100 * gbs / copy_gbs, "err": err})
        del x, ref
        torch.cuda.empty_cache()
    print(f"\n({time.time() - start:.0f} s)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "tile_order.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
