"""Launch argus.ops.scaled_matmul (block-scaled, or per-tensor for the --ceiling variants of
scripts/gpu_fp8_bench.py) with named variants on one shape, and torch._scaled_mm's
block-scaled mode, a few times each, for Nsight Compute to compare the kernels' counters:
is the tensor pipe idle while both consumer warpgroups promote (stalls at the wgmma wait,
`WARPGROUP.DEPBAR`), or is the loop short of shared-memory or L2 bandwidth?

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        -k regex:'argus_gemm_fp8|sm90|nvjet|gemm' --launch-skip 1 \
        python3 scripts/gpu_ncu_fp8.py 4096 7168 2048 'split 128x256 st4' \
        'split 128x256 st4 cluster' 'per-tensor split 128x256 st4 promoted' \
        'per-tensor 128x256 st3 cluster'

(ComputeWorkloadAnalysis: the tensor pipe's utilization; WarpStateStats: where the
consumers stall, at the wgmma wait or at the full barrier; MemoryWorkloadAnalysis: L2 and
shared-memory throughput.)

Each named variant runs three times (the first compiles; skip it with --launch-skip or read
the later ones), then torch._scaled_mm block-scaled three times. A name is matched exactly
against gpu_fp8_bench.variant_schedules() + ceiling_schedules(); an unknown name stops the
run before any launch, listing the known ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    import importlib.util

    import torch

    from argus.ops import scaled_matmul

    spec = importlib.util.spec_from_file_location("gpu_fp8_bench",
                                                  ROOT / "scripts" / "gpu_fp8_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    m, n, k = (int(x) for x in sys.argv[1:4])
    known = dict(bench.variant_schedules() + bench.ceiling_schedules())
    names = sys.argv[4:] or ["split 128x256 st4", "split 128x256 st4 cluster"]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(known)}")
    a, w, sa, sb, _ = bench.block_inputs(m, n, k)
    one = torch.ones(1, device="cuda", dtype=torch.float32)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for name in names:
        s = known[name]
        plain = name.startswith("per-tensor")
        scale_a = one if plain else sa.contiguous() if s.smem_scales else sa
        for _ in range(3):
            scaled_matmul(a, w, scale_a, one if plain else sb, out=out, schedule=s)
        torch.cuda.synchronize()
        print("done", name, flush=True)
    for _ in range(3):
        torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    print("done torch._scaled_mm block", m, n, k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
