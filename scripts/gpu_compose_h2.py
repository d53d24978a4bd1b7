#!/usr/bin/env python3
"""Composed-program changes of 2026-12-02 (helper 2), timed on a GPU against torch eager
(device run). Each case is checked against torch, then timed with argus.bench.timing.measure
(CUDA events, L2 flush, median) beside eager, in the same process:

    python3 -u scripts/gpu_compose_h2.py [--cases host,fold,splitk,l16] [--out DIR]

* host (L1/12, diag(A) @ B as A.unsqueeze(1) * B at 4096 x 4096; 0.86x eager, host-bound):
  the composed forward with the host path of 919392b (run plan, compiled-kernel cache), and
  the per-call wall time of back-to-back forwards without a sync (host microseconds a call:
  above the kernel's time means the GPU waits for Python).
* fold (L1/48, mean over dim 1 of 128 x 4096 x 4095; 0.76x eager): the default tile now
  (rows folded four at a time into 16-byte rows, 2b0aa3c; the long loop split toward
  LONG_LOOP_CTAS CTAs, the slices summed in the fold pass), each half alone, and neither (the
  kernel before), on the task's shape and the aligned 128 x 4096 x 4096 control (never
  folded; 0.97x eager in scripts/gpu_tile_order.py). What to look for: the default at or
  above the others; else set TileSchedule.fold / .ctas defaults to the winner.
* splitk (5475946, split-K by plan_split): 256 x 256 x 8192 and 128 x 128 x 65536 (fp32
  strict adapter) with the cost rule's chunks against the accuracy bound's (plan_split
  patched to the bound), each with its max relative error against float64.
* l16 (L1/6, 256 x 256 x 2^19): the adapter's time by kernel (events around every compose
  launch: split A, split B, the three group GEMMs, the chunk sums), to say where its ~1.95 ms
  go (docs/perf/kernelbench.md estimates 6.3 GB of traffic).
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


def composed(forward, schedules=None):
    import torch.nn as nn

    from argus.compose.runtime import ComposedModel

    model = type("M", (nn.Module,), {"forward": forward})
    return type("New", (ComposedModel,), {"MODEL": model, "SCHEDULES": schedules or {}})()


def rel_err(got, ref) -> float:
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def case_host(out: list) -> None:
    import torch

    from argus.bench.timing import measure

    a, b = torch.rand(4096, device="cuda"), torch.rand(4096, 4096, device="cuda")
    new = composed(lambda self, x, y: x.unsqueeze(1) * y)
    with torch.no_grad():
        err = rel_err(new(a, b), a.unsqueeze(1) * b)
        ms = measure(lambda: new(a, b)).median_ms
        eager = measure(lambda: a.unsqueeze(1) * b).median_ms
        for name, fn in (("composed", lambda: new(a, b)), ("eager", lambda: a.unsqueeze(1) * b)):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(200):
                fn()
            host_us = (time.perf_counter() - t) / 200 * 1e6
            torch.cuda.synchronize()
            print(f"   {name}: {host_us:.1f} us of host time a call (back to back, no sync)")
            out.append({"case": "host", "what": name, "host_us": host_us})
    print(f"-- L1/12 diag: composed {ms:.4f} ms, eager {eager:.4f} ms, {eager / ms:.2f}x eager, "
          f"rel err {err:.1e}")
    out.append({"case": "host", "ms": ms, "eager_ms": eager, "err": err})


def case_fold(out: list) -> None:
    import torch

    from argus.bench.timing import measure
    from argus.compose.tile import LONG_LOOP_CTAS, TileSchedule

    for shape in ((128, 4096, 4095), (128, 4096, 4096)):
        x = torch.rand(shape, device="cuda")
        ref = torch.mean(x, 1)
        eager = measure(lambda: torch.mean(x, 1)).median_ms
        print(f"-- mean over dim 1 of {shape}: eager {eager:.3f} ms "
              f"({x.numel() * 4 / eager / 1e6:.0f} GB/s)")
        # default_schedule's tile: the default now (folded, the long loop split toward
        # LONG_LOOP_CTAS), folded only, split only, neither (before this session), and the
        # default at BN 512
        for fold, bn, ctas in ((True, 1024, LONG_LOOP_CTAS), (True, 1024, 0),
                               (False, 1024, LONG_LOOP_CTAS), (False, 1024, 0),
                               (True, 512, LONG_LOOP_CTAS)):
            base = TileSchedule(rows=2, bn=bn, threads=256, fold=fold, ctas=ctas)
            new = composed(lambda self, a: torch.mean(a, 1), {"tile": base})
            with torch.no_grad():
                err = rel_err(new(x), ref)
                ms = measure(lambda: new(x)).median_ms
                prog = next(iter(new._programs.values()))
                folded = [(k.facts.get("fold"), k.facts["split"]) for k in
                          prog.launches.values()]
            print(f"   fold={fold} bn={bn} ctas={ctas}: {ms:.3f} ms "
                  f"({x.numel() * 4 / ms / 1e6:.0f} GB/s) {eager / ms:.2f}x eager, rel err "
                  f"{err:.1e}, (fold, split) {folded}", flush=True)
            out.append({"case": "fold", "shape": shape, "fold": fold, "bn": bn, "ctas": ctas,
                        "ms": ms, "eager_ms": eager, "err": err})
        del x, ref
        torch.cuda.empty_cache()


def case_splitk(out: list) -> None:
    import torch

    from argus.bench.timing import measure
    from argus.compose import gemm

    rule = gemm.plan_split
    for m, n, k in ((256, 256, 8192), (128, 128, 65536)):
        a, b = torch.rand(m, k, device="cuda"), torch.rand(k, n, device="cuda")
        ref = a.double() @ b.double()
        eager = measure(lambda: a @ b).median_ms
        print(f"-- {m} x {n} x {k} fp32: eager {eager:.3f} ms")
        for name in ("rule", "bound"):
            if name == "bound":
                def bound(rows, n_, k_, nb, layout, terms, max_chunk=gemm.MAX_CHUNK,
                          may_group=True, at_least=0):
                    c, kc = gemm.plan_chunks(k_, terms, max_chunk)
                    grouped = may_group and nb == 1 and gemm.groups_pay(
                        3, rows * c * kc, n_ * c * kc, rows * n_, c)
                    return c, kc, grouped
                gemm.plan_split = bound
            chosen = gemm.plan_split(m, n, k, 1, "kn", 6)
            c = torch.empty(m, n, device="cuda")
            gemm.matmul(a, b, c)
            err = rel_err(c, ref)
            ms = measure(lambda: gemm.matmul(a, b, c)).median_ms
            gemm.plan_split = rule
            print(f"   {name} {chosen}: {ms:.3f} ms, {eager / ms:.2f}x eager, rel err {err:.1e}",
                  flush=True)
            out.append({"case": "splitk", "mnk": (m, n, k), "plan": name, "chosen": chosen,
                        "ms": ms, "eager_ms": eager, "err": err})


def case_l16(out: list) -> None:
    import torch

    from argus.compose import gemm, launch

    a, b = torch.rand(256, 2 ** 19, device="cuda"), torch.rand(2 ** 19, 256, device="cuda")
    c = torch.empty(256, 256, device="cuda")
    gemm.matmul(a, b, c)
    print(f"-- L1/6 256 x 256 x 2^19: rel err {rel_err(c, a.double() @ b.double()):.1e}")
    events = []
    real = launch.run

    def timed(kernel, tensors, **kw):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        real(kernel, tensors, **kw)
        end.record()
        events.append((getattr(kernel, "__name__", None) or getattr(kernel, "name", "?"),
                       start, end))
    gemm.run = timed
    try:
        for _ in range(3):
            events.clear()
            torch.cuda.synchronize()
            t = time.perf_counter()
            gemm.matmul(a, b, c)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t) * 1e3
    finally:
        gemm.run = real
    total = 0.0
    for name, start, end in events:
        ms = start.elapsed_time(end)
        total += ms
        print(f"   {name:28s} {ms:8.3f} ms")
        out.append({"case": "l16", "kernel": name, "ms": ms})
    print(f"   sum of kernels {total:.3f} ms, wall {wall:.3f} ms")


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="host,fold,splitk,l16")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return 1
    print(f"== compose (helper 2) on {torch.cuda.get_device_name()}")
    start, out = time.time(), []
    cases = {"host": case_host, "fold": case_fold, "splitk": case_splitk, "l16": case_l16}
    for name in args.cases.split(","):
        cases[name](out)
        torch.cuda.empty_cache()
    print(f"\n({time.time() - start:.0f} s)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "compose_h2.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
