"""Where a composed solution's time goes, on the GPU: host microseconds per forward (launches
queued behind a long GPU sleep, so the host never waits), the forward's GPU time back to back
(CUDA events, no L2 flush), and each Argus launch alone (events around every launch of one
forward), with the bytes each kernel's tensors hold and the bandwidth that implies.

    .venv/bin/python -m argus kernelbench solve --level 1 --ids 12 --compose-only --out /tmp/s
    .venv/bin/python scripts/gpu_compose_profile.py /tmp/s/solutions/level1/12_*.py

A forward whose host time exceeds its GPU time is launch-overhead bound; a launch far below
~3.5 TB/s over its bytes is a slow kernel (bytes count every tensor argument once: a lower
bound on the traffic, exact for elementwise kernels).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch

    import argus.compose.gemm as gemm
    import argus.compose.launch as launch
    import argus.compose.pool as pool
    import argus.compose.runtime as runtime
    import argus.compose.scan as scan

    path = Path(sys.argv[1])
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.ModelNew(*mod.get_init_inputs()).cuda().eval()
    xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    with torch.no_grad():
        model(*xs)                                  # lowering, NVRTC
        torch.cuda.synchronize()

        calls = 50
        torch.cuda._sleep(2_000_000_000)
        t0 = time.perf_counter()
        for _ in range(calls):
            model(*xs)
        host_us = (time.perf_counter() - t0) / calls * 1e6
        torch.cuda.synchronize()

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            model(*xs)
        end.record()
        torch.cuda.synchronize()
        gpu_us = start.elapsed_time(end) / calls * 1e3

        launches = []
        sites = ((runtime, "_run"), (gemm, "run"), (pool, "_run"), (scan, "_run"),
                 (launch, "_run"))
        originals = [(m, n, getattr(m, n)) for m, n in sites]

        def timed(orig):
            def run(kernel, tensors, **constexprs):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                orig(kernel, tensors, **constexprs)
                b.record()
                nbytes = sum(t.numel() * t.element_size() for t in tensors)
                launches.append((getattr(kernel, "name", str(kernel)), a, b, nbytes))
            return run

        for m, n, orig in originals:
            setattr(m, n, timed(orig))
        try:
            model(*xs)
            torch.cuda.synchronize()
        finally:
            for m, n, orig in originals:
                setattr(m, n, orig)

    print(f"{path.name}: host {host_us:.1f} us per forward, GPU {gpu_us:.1f} us per forward "
          f"(back to back){'  HOST-BOUND' if host_us > gpu_us else ''}")
    total = 0.0
    for name, a, b, nbytes in launches:
        us = a.elapsed_time(b) * 1e3
        total += us
        print(f"  {name:28s} {us:10.1f} us  {nbytes / 1e6:10.1f} MB  "
              f"{nbytes / max(us, 1e-3) / 1e6:6.2f} TB/s")
    print(f"  {'sum of launches':28s} {total:10.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
