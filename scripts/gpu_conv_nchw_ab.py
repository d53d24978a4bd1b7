"""The implicit-GEMM convolution's NCHW epilogue (the accumulator stored transposed into an
NCHW result) against its channels-last epilogue, on the same rounded fp32 input under
precision="tf32", at KernelBench level-1 conv shapes (batch as upstream): argus.ops.conv's
`convolve(..., nchw=True)` vs `nchw=False`, each call's GPU time (argus.runtime.timing.
measure_alternating: CUDA events, L2 flushed, medians), equal results checked first.

    python scripts/gpu_conv_nchw_ab.py

Both calls include the input's rounding pass (the same in both); the difference is the
epilogue. Look for: NCHW no slower than channels-last (it saves eager's nhwc -> nchw pass).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (name, x shape, weight shape, stride, padding, dilation)
CASES = [
    ("L1/67 conv1d", (32, 64, 131072), (128, 64, 3), 1, 0, 1),
    ("L1/76 conv1d s3 d4", (64, 64, 524280), (128, 64, 3), 3, 0, 4),
    ("L1/55 conv2d", (8, 64, 512, 1024), (128, 64, 3, 3), 1, 0, 1),
    ("L1/80 conv2d dil", (8, 32, 512, 512), (64, 32, 5, 9), 1, (2, 4), (2, 3)),
]


def main() -> int:
    import torch

    from argus.ops.conv import convolve
    from argus.runtime.timing import measure_alternating

    for name, xs, ws, st, pd, dl in CASES:
        one_d = len(xs) == 3
        x = torch.randn(*xs, device="cuda")
        w = torch.randn(*ws, device="cuda") / (ws[1] * ws[-1]) ** 0.5
        if one_d:
            x, w = x.unsqueeze(2), w.unsqueeze(2)
            st, pd, dl = (1, st), (0, pd), (1, dl)
        calls = {nchw: (lambda nchw=nchw: convolve(x, w, None, st, pd, dl, precision="tf32",
                                                     nchw=nchw)) for nchw in (True, False)}
        a, b = calls[True](), calls[False]()
        same = torch.equal(a, b.contiguous())
        del a, b
        t = measure_alternating([calls[True], calls[False]], rounds=3)
        ms = [tt.median_ms for tt in t]
        print(f"{name:22s} nchw {ms[0]:8.3f} ms   channels-last {ms[1]:8.3f} ms   "
              f"nchw / cl {ms[0] / ms[1]:5.2f}   equal: {same}")
        del x, w
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
