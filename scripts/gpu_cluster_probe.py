"""Why are 2x1-cluster GEMM schedules slower? For the persistent cluster GEMM: how many
2-CTA clusters the driver can keep resident (cuOccupancyMaxActiveClusters) against the 66 the
grid asks for, and the time of cluster schedules with fewer persistent clusters, beside the
best non-cluster schedule, on a few shapes."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch
    from cuda.bindings import driver

    import argus as ag
    from argus.bench.timing import measure
    from argus.kernels.gemm import GemmSchedule, gemm_kernel
    from argus.ops import matmul

    base = GemmSchedule(epilogue="tma", stages=3)
    for label, s in [("tma", dataclasses.replace(base, cluster_m=2)),
                     ("direct", GemmSchedule(stages=4, cluster_m=2))]:
        a = torch.randn(4096, 4096, device="cuda").bfloat16()
        w = torch.randn(4096, 4096, device="cuda").bfloat16()
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
        ck = gemm_kernel(ag.bf16, ag.bf16, "nk", False).compile(s=s)
        ck(a, w, out)
        plan = ck.plan_for(a, w, out)
        err, n = driver.cuOccupancyMaxActiveClusters(plan.function, plan.config)
        print(f"{label}: max active 2-CTA clusters {n} ({err}); grid asks for "
              f"{plan.config.gridDimX // 2}", flush=True)
    shapes = [(8192, 8192, 8192), (8192, 28672, 8192), (2048, 7168, 2048)]
    print("| shape | schedule | us |")
    print("|---|---|---|")
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ w.float().T
        cands = [("tma", base), ("tma g16", dataclasses.replace(base, group_m=16))]
        for sms in (132, 128, 120, 112):
            cands.append((f"tma c2 {sms}", dataclasses.replace(base, cluster_m=2, num_sms=sms)))
            cands.append((f"direct c2 {sms}", GemmSchedule(stages=4, cluster_m=2, num_sms=sms)))
        for label, s in cands:
            try:
                matmul(a, w.T, out, schedule=s)
                rel = ((out.float() - ref).norm() / ref.norm()).item()
                t = measure(lambda s=s: matmul(a, w.T, out, schedule=s), trials=30,
                            allow_few_trials=True)
                print(f"| {m}x{n}x{k} | {label} | {t.median_ms * 1e3:.1f} (err {rel:.1e}) |",
                      flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"| {m}x{n}x{k} | {label} | failed: {type(e).__name__}: {e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
