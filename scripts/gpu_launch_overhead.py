"""How much of a small GEMM's measured time is host time? For a few shapes: host microseconds
per call of argus.ops.matmul and torch.matmul (launches queued behind a long GPU sleep, so the
host never waits), the usual `measure` median (events around each call, L2 flushed), and the
kernel alone from CUDA-graph replay (20 calls per graph, no host work in the loop)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def host_us(fn, calls=300):
    import torch

    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time queued ahead of the launches
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return dt


def main() -> int:
    import torch

    from argus.bench.timing import graph_replay_us, measure
    from argus.ops import matmul

    shapes = [(16, 8192, 8192), (128, 8192, 8192), (1024, 1024, 1024), (4096, 4096, 4096)]
    print("| M x N x K | layout | host us/call ours | torch | measure() us ours | torch | "
          "graph replay us ours | torch |")
    print("|---|---|---|---|---|---|---|---|")
    for m, n, k in shapes:
        for layout in ("NN", "NT"):
            a = torch.randn(m, k, device="cuda").bfloat16()
            b = torch.randn(n, k, device="cuda").bfloat16().T if layout == "NT" else \
                torch.randn(k, n, device="cuda").bfloat16()
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.empty_like(out)

            def ours():
                matmul(a, b, out)

            def theirs():
                torch.matmul(a, b, out=ref)
            ours()
            theirs()
            torch.cuda.synchronize()
            row = [host_us(ours), host_us(theirs),
                   measure(ours, trials=100).median_ms * 1e3,
                   measure(theirs, trials=100).median_ms * 1e3]
            try:
                row += [graph_replay_us(ours), graph_replay_us(theirs)]
            except Exception as e:  # noqa: BLE001 - say so, keep the other numbers
                print(f"graph capture failed: {type(e).__name__}: {e}")
                row += [float("nan"), float("nan")]
            print(f"| {m}x{n}x{k} | {layout} | " + " | ".join(f"{x:.1f}" for x in row) + " |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
