#!/usr/bin/env python3
"""The compose scan template's schedules against torch.cumsum on a GPU (device run).

    python3 -u scripts/gpu_scan_bench.py [--quick] [--out DIR]

For each shape (rows x length, the scan along the last axis: KernelBench L1/89-93 are 32768 x
32768; 64 x 4194304 is few long rows, the segmented two-pass scan), the default that `plan`
picks (marked *) and a few other ScanSchedules (argus/compose/scan.py: rows per one-warp CTA,
bn elements per block, segments) are checked against the float64 cumsum (relative L2 error,
the strict bound 1e-5) and timed with argus.bench.timing.measure (CUDA events, whole-device
sync, L2 flush per trial, median), next to torch eager. Printed: one row per schedule (ms,
GB/s for one read and one write of the tensor, x eager; above 1 is faster), then per shape the
fastest correct schedule. A schedule that fails to compile or launch is reported with its
error and the sweep goes on. --quick (< 60 s on an H200): the default and 3 others, 100
trials each; the full sweep has 7 others. With --out: scan_bench.json.
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
# compile without the verifier unless asked (ARGUS_VERIFY=1): the scan kernels verify clean on
# the CPU (tests/verify/test_scan_verify.py), and the 12 kernels of --quick cost
# ~2-6 s of z3 each, which would not fit the step's 60 s
os.environ.setdefault("ARGUS_VERIFY", "0")

SHAPES = [(32768, 32768), (64, 1 << 22)]
QUICK = [(4, 128, 0), (1, 256, 0), (2, 256, 0)]          # (rows, bn, segments); 0: plan's
SWEEP = QUICK + [(1, 128, 0), (8, 128, 0), (2, 64, 0), (4, 256, 0)]


def main(argv=None) -> int:
    import torch

    from argus.bench.timing import measure
    from argus.compose.scan import ScanSchedule, plan, scan_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return 1
    start = time.time()
    print(f"== scan bench on {torch.cuda.get_device_name()}")
    rows_out = []
    for o, length in SHAPES:
        torch.manual_seed(0)
        x = torch.rand(o, length, device="cuda")
        ref = x.double().cumsum(1)
        y = torch.empty_like(x)
        eager = measure(lambda: torch.cumsum(x, 1)).median_ms
        gbs = lambda ms: 2 * x.numel() * 4 / ms / 1e6                       # noqa: E731
        print(f"\n-- {o} x {length}: torch eager {eager:.3f} ms ({gbs(eager):.0f} GB/s)")
        default = plan(ScanSchedule(), o, length)
        sweep = [ScanSchedule()] + [ScanSchedule(*s) for s in (QUICK if args.quick else SWEEP)]
        best, seen = None, set()
        for sched in sweep:
            full = plan(sched, o, length)
            if full in seen:
                continue
            seen.add(full)
            tag = f"rows={full.rows:2d} bn={full.bn:3d} seg={full.segments:4d}"
            tag += " *" if sched == ScanSchedule() else ""
            try:
                y.fill_(float("nan"))
                scan_rows(x, y, "sum", False, False, sched)
                torch.cuda.synchronize()
                err = ((y.double() - ref).norm() / ref.norm()).item()
                ms = measure(lambda: scan_rows(x, y, "sum", False, False, sched)).median_ms
            except Exception as exc:  # noqa: BLE001 - one schedule's failure is its row
                print(f"   {tag}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                traceback.print_exc(limit=2)
                continue
            ok = err <= 1e-5
            print(f"   {tag}: {ms:8.3f} ms {gbs(ms):6.0f} GB/s  {eager / ms:5.2f}x eager  "
                  f"rel_l2 {err:.1e}{'' if ok else '  WRONG'}", flush=True)
            rows_out.append({"shape": [o, length], "schedule": full.__dict__, "ms": ms,
                             "eager_ms": eager, "rel_l2": err, "default": full == default})
            if ok and (best is None or ms < best[0]):
                best = (ms, tag)
        if best:
            print(f"   fastest correct: {best[1]} {best[0]:.3f} ms = {eager / best[0]:.2f}x eager")
        del x, ref, y
        torch.cuda.empty_cache()
    print(f"\n({time.time() - start:.0f} s)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "scan_bench.json").write_text(json.dumps(rows_out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
