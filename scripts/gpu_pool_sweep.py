#!/usr/bin/env python3
"""The compose pooling template's rows per CTA against torch eager on a GPU (device run).

    python3 -u scripts/gpu_pool_sweep.py [--quick] [--out DIR]

Why: KernelBench L1/43 (MaxPool3d k3 s2 p1 d3 over 16x32x128^3 fp32) ran at 0.57x eager on
the H200 (6.84 ms vs 3.92) and L1/44 (AvgPool1d k8 s1 over 64x128x65536) at 0.46x
torch.compile. The template (argus/compose/pool.py) issues one 4-byte load per window offset
per output; its CUDA computed each load's 64-bit offset behind a branch per load (38 SASS
instructions a load, 8304 a thread at 8 rows: issue-bound). 69b8dc7 computes the offsets
outside the conditions (17 a load, predicated) and bounds the unrolled loads to 64 a thread
(L1/43: 2 rows, 64 registers; 8 rows would take 214). For each shape, every `rows` in the
sweep (the template's default marked *) is checked against torch's pooling (max error) and
timed with argus.bench.timing.measure (CUDA events, L2 flush, median), next to torch eager:
ms, GB/s over one read of the input and one write of the output, x eager. What to look for:
L1/43 at the default above 1.0x eager, and whether another `rows` beats the default (then
`pool.pool_rows_per_cta` should pick it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ARGUS_VERIFY", "0")

# (name, input shape, kind, kernel, stride, padding, dilation): KernelBench L1/41-46's
# configurations at upstream sizes (the task files' numbers, not their code)
CASES = [
    ("L1/43 max3d", (16, 32, 128, 128, 128), "max", 3, 2, 1, 3),
    ("L1/46 avg3d", (16, 32, 128, 128, 256), "avg", 3, 2, 1, 1),
    ("L1/42 max2d", (32, 64, 512, 512), "max", 4, 1, 1, 1),
    ("L1/44 avg1d", (64, 128, 65536), "avg", 8, 1, 4, 1),
    ("L1/41 max1d", (64, 192, 65536), "max", 8, 1, 4, 3),
]
ROWS = [1, 2, 4, 8]


def torch_pool(x, kind, k, s, p, d):
    import torch.nn.functional as F

    n = x.dim() - 2
    if kind == "max":
        f = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[n - 1]
        return f(x, k, s, p, d)
    f = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[n - 1]
    return f(x, k, s, p)


def pool_node(ref, kind: str, k: int, s: int, p: int, d: int):
    """compose's pool node (argus.compose.graph.Node) of the pooling whose result is `ref`: a
    `kind` ("max" / "avg") window of k per spatial dim, stride s, padding p, dilation d."""
    import torch

    from argus.compose.graph import Node

    n = ref.dim() - 2
    return Node("pool", (), tuple(ref.shape), torch.float32,
                {"kind": kind, "dims": n, "kernel": (k,) * n, "stride": (s,) * n,
                 "padding": (p,) * n, "dilation": (d,) * n})


def rule_rows(ref, window: int) -> int:
    """pool_rows_per_cta's pick for the result `ref` and a window of `window` loads: the
    column tile and row count run_pool (argus/compose/pool.py) passes it."""
    import argus.compose.pool as pool

    nrows = ref.numel() // ref.shape[-1]
    bn = min(256, 1 << max(0, (ref.shape[-1] - 1).bit_length()))
    return pool.pool_rows_per_cta(bn, window, nrows)


def time_at_rows(node, x, rows: int):
    """(result, median ms) of run_pool(node, x) with the template at `rows` output rows a CTA:
    the rule overridden for this call and restored after (raise or not); the result from one
    call, then argus.bench.timing.measure (CUDA events, L2 flush, median of 100)."""
    import torch

    import argus.compose.pool as pool
    from argus.bench.timing import measure

    rule = pool.pool_rows_per_cta
    pool.pool_rows_per_cta = lambda *_a: rows
    try:
        y = pool.run_pool(node, x)
        torch.cuda.synchronize()
        return y, measure(lambda: pool.run_pool(node, x)).median_ms
    finally:
        pool.pool_rows_per_cta = rule


def main(argv=None) -> int:
    import torch

    from argus.bench.timing import measure

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="L1/43 and L1/44 only")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return 1
    start = time.time()
    print(f"== pool sweep on {torch.cuda.get_device_name()}")
    out = []
    for name, shape, kind, k, s, p, d in CASES:
        if args.quick and not name.startswith(("L1/43", "L1/44")):
            continue
        torch.manual_seed(0)
        x = torch.rand(shape, device="cuda")
        n = x.dim() - 2
        ref = torch_pool(x, kind, k, s, p, d)
        node = pool_node(ref, kind, k, s, p, d)
        eager = measure(lambda: torch_pool(x, kind, k, s, p, d)).median_ms
        gbs = lambda ms: (x.numel() + ref.numel()) * 4 / ms / 1e6         # noqa: E731
        print(f"\n-- {name} {tuple(shape)}: torch eager {eager:.3f} ms ({gbs(eager):.0f} GB/s)")
        dflt = rule_rows(ref, k ** n)
        for rows in sorted(set(ROWS + [dflt])):
            tag = f"rows={rows}{' *' if rows == dflt else ''}"
            try:
                y, ms = time_at_rows(node, x, rows)
                err = (y - ref).abs().max().item()
            except Exception as exc:  # noqa: BLE001 - one schedule's failure is its row
                print(f"   {tag}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                traceback.print_exc(limit=2)
                continue
            print(f"   {tag:9s}: {ms:8.3f} ms {gbs(ms):6.0f} GB/s  {eager / ms:5.2f}x eager  "
                  f"max err {err:.1e}", flush=True)
            out.append({"case": name, "rows": rows, "default": rows == dflt, "ms": ms,
                        "eager_ms": eager, "max_err": err})
        del x, ref
        torch.cuda.empty_cache()
    print(f"\n({time.time() - start:.0f} s)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "pool_sweep.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
