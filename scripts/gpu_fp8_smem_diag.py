"""Diagnose the smem_scales fp8 kernel's device trap (issue 18): one schedule, one shape per
process (a trap poisons the CUDA context), so compute-sanitizer can name the faulting access.
    ARGUS_FP8_SMEM_DEVICE=1 compute-sanitizer --tool memcheck python3 scripts/gpu_fp8_smem_diag.py 1000 300 640 0
Prints the result or the error; writes the kernel's CUDA source and SASS next to $OUT."""
import importlib
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from tests.gpu.test_ops_scaled_matmul_gpu import _block_ref, _quantize_blocks, _rel  # noqa: E402


def main() -> None:
    m, n, k, which = (int(v) for v in sys.argv[1:5])
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule
    from argus.ops import scaled_matmul

    op = importlib.import_module("argus.ops.scaled_matmul")
    op.SMEM_SCALES_ON_DEVICE = True
    schedules = [Fp8GemmSchedule(bn=128, stages=6, promote=True, smem_scales=True),
                 Fp8GemmSchedule(bn=128, stages=5, promote=True, smem_scales=True, cluster_m=2,
                                 epilogue="tma"),
                 Fp8GemmSchedule(bn=160, stages=5, promote=True, smem_scales=True),
                 Fp8GemmSchedule(bn=128, stages=6, promote=True)]
    s = schedules[which]
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda")
    a, w8, sa, sb = _quantize_blocks(x, torch.randn(n, k, device="cuda") * 0.05)
    print("sa", tuple(sa.shape), sa.stride(), "sb", tuple(sb.shape), sb.stride(), flush=True)
    out = scaled_matmul(a, w8, sa, sb, schedule=s)
    torch.cuda.synchronize()
    print("ok", s, "rel", _rel(out, _block_ref(a, w8, sa, sb)), flush=True)


if __name__ == "__main__":
    main()
