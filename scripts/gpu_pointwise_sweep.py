"""Why KernelBench L1/87 (a 1x1 fp32 convolution, 16 x 64 x 1024 x 1024 -> 128 channels,
NCHW) runs its per-image tf32 GEMMs at half of the bandwidth eager's one cutlass GEMM reaches
(2026-12-04: 16 launches of argus_gemm_tf32_f32_nk, 7.3 ms for 12.9 GB, 1.76 TB/s; eager
3.43 ms, 3.76 TB/s). Each image is out[n] [128, H*W] = Wr [128, 64] @ Xr[n]^T: M = 128,
N = 1M, K = 64, so the tile's main loop is 2 bk-32 steps and its time is the store of its
output (2x the input bytes) and the per-tile bookkeeping. argus.ops.schedules picks the
skinny-M heuristic for M <= 256 (bm 128, bn 64, 8 stages, cooperative, direct epilogue):
every 128 x 64 tile reloads the whole 32 KB weight (2/3 of each tile's TMA bytes) and both
consumer warpgroups store at once with no MMA under the stores. The candidates for M <= 256
have no ping-pong and no tile wider than 128, so tuning cannot find a fix.

This times, on the rounded operands of one image, each GEMM schedule below (CUDA events,
median of 20, correctness against torch first) and the implicit-GEMM convolution with its
NCHW epilogue on the same rounded input (bm 128 pixels x bn 128 channels, the whole weight
per tile, 2 K steps; its kernel's own time from torch.profiler), and prints ms and TB/s over the in + out bytes per image:

    python scripts/gpu_pointwise_sweep.py [--n-pixels 1048576]

The row for the NCHW kernel (argus/kernels/conv_pointwise_nchw.py: x read in place as the
tf32 register A, one launch for all images; what argus.ops.conv's pointwise route now runs on
an NCHW x of large images) times the whole KernelBench L1/87 problem (x [16, 64, 1024, 1024]
-> 128 channels) against eager's F.conv2d with TF32 on (CUDA events, median of 10, L2 flushed
before each call by writing a 256 MB buffer), after checking it against the float64 conv of
the tf32-rounded operands:

    python scripts/gpu_pointwise_sweep.py --only-nchw [--batch 16 --height 1024 --width 1024]

Look for: the kernel's ms and TB/s against eager's 3.41 ms / 3.76 TB/s (the GEMM form:
2.15 + 7.3 ms), its error ~1e-7 against the tf32 model, and the route's time (convolve: the
same kernel plus the host work of a replayed call).

Look for: which schedule (ping-pong: one consumer's stores under the other's MMAs; bn 128 /
256: fewer tiles, the weight reloaded per more output) comes near eager's 3.76 TB/s. The
winner is a candidate to add to argus/ops/schedules.candidates for small-K, huge-N problems
(that changes the candidates' fingerprint: re-tune the M <= 256 entries).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SCHEDULES = [
    dict(bm=128, bn=64, stages=8),                                   # today's choice
    dict(bm=128, bn=128, stages=6),
    dict(bm=128, bn=256, stages=4),
    dict(bm=128, bn=128, stages=6, pingpong=True),
    dict(bm=64, bn=256, stages=5, pingpong=True),
    dict(bm=128, bn=128, stages=6, persistent=False),
    dict(bm=128, bn=256, stages=4, persistent=False),
    dict(bm=64, bn=128, consumers=1, stages=8),
]


def _time(fn, torch, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def _kernel_ms(fn, torch, needle: str, reps: int = 10) -> float:
    """The CUDA time per call of the kernels whose name holds `needle` (torch.profiler), so a
    pass around the kernel (the convolution's input rounding) is not counted."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.events()
                if e.device_type.name == "CUDA" and needle in e.name)
    return total / reps / 1e3


def _time_flushed(fn, torch, reps: int = 10) -> float:
    """Median ms of fn over `reps` calls, each after writing a 256 MB buffer (more than the
    H200's L2), so no call finds x or the result in L2."""
    scrub = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        scrub.fill_(1)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def nchw_kernel_row(torch, N: int, C: int, K: int, H: int, W: int) -> None:
    """The NCHW pointwise kernel on the whole problem against eager (see the module doc)."""
    import torch.nn.functional as F

    from argus.kernels.conv_pointwise_nchw import KV, pointwise_nchw_kernel, stages_for
    from argus.ops import conv as conv_ops

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, C, H, W, generator=g, device="cuda")
    w = torch.randn(K, C, 1, 1, generator=g, device="cuda") / C ** 0.5
    HW = H * W
    nbytes = (N * C * HW + N * K * HW) * 4
    kp = -(-C // KV) * KV
    Wp = conv_ops._pointwise_nchw_weight(w, kp)
    run = pointwise_nchw_kernel(kp, K, stages=stages_for(kp, K)).compile()
    out = torch.empty(N, K, H, W, device="cuda")
    X, Y = x.view(N, C, HW), out.view(N, K, HW)
    run(X, Wp, Y)
    torch.cuda.synchronize()
    # the tf32 model on the first and last images (float64 of the rounded operands)
    for n in (0, N - 1):
        ref = F.conv2d(conv_ops.round_to_tf32(x[n:n + 1]).double(),
                       conv_ops.round_to_tf32(w).double())
        err = ((out[n:n + 1].double() - ref).norm() / ref.norm()).item()
        print(f"  nchw kernel image {n}: err {err:.1e} against the tf32 model")
    ms = _time_flushed(lambda: run(X, Wp, Y), torch)
    print(f"  nchw kernel (one launch, x read in place): {ms:.3f} ms, "
          f"{nbytes / ms / 1e9:.2f} TB/s")
    ms = _time_flushed(lambda: conv_ops.convolve(x, w, precision="tf32"), torch)
    print(f"  argus.ops.conv.convolve(precision='tf32') (the route): {ms:.3f} ms, "
          f"{nbytes / ms / 1e9:.2f} TB/s")
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        ms = _time_flushed(lambda: F.conv2d(x, w), torch)
    finally:
        torch.backends.cudnn.allow_tf32 = old
    print(f"  eager F.conv2d (TF32 on): {ms:.3f} ms, {nbytes / ms / 1e9:.2f} TB/s")


def main() -> int:
    import torch

    from argus.kernels.gemm import GemmSchedule
    from argus.ops import conv as conv_ops
    from argus.ops.matmul import compiled_for, problem_of

    ap = argparse.ArgumentParser()
    ap.add_argument("--n-pixels", type=int, default=1 << 20)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--out-channels", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--height", type=int, default=1024)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--only-nchw", action="store_true",
                    help="only the NCHW kernel's row on the whole problem (and eager's)")
    args = ap.parse_args()
    HW, C, K = args.n_pixels, args.channels, args.out_channels
    print(f"whole problem: x [{args.batch}, {C}, {args.height}, {args.width}] -> {K} channels")
    nchw_kernel_row(torch, args.batch, C, K, args.height, args.width)
    if args.only_nchw:
        return 0
    g = torch.Generator(device="cuda").manual_seed(0)
    Xr = conv_ops.round_to_tf32(torch.randn(HW, C, generator=g, device="cuda"))
    Wr = conv_ops.round_to_tf32(torch.randn(K, C, generator=g, device="cuda") / C ** 0.5)
    ref = (Wr.double() @ Xr.double().t()).float()
    nbytes = (HW * C + HW * K) * 4
    print(f"per image: out [{K}, {HW}] = W [{K}, {C}] @ X^T, in + out {nbytes / 1e9:.3f} GB")
    for fields in SCHEDULES:
        s = GemmSchedule(bk=32, **fields)
        out = torch.empty(K, HW, device="cuda")
        try:
            problem, _ = problem_of(Wr, Xr.t(), out, "tf32")
            run = compiled_for(problem, s)
            run(Wr, Xr, out)
            torch.cuda.synchronize()
            err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
            ms = _time(lambda: run(Wr, Xr, out), torch)
            print(f"  gemm {fields}: {ms:.3f} ms, {nbytes / ms / 1e9:.2f} TB/s, err {err:.1e}")
        except Exception as e:            # noqa: BLE001 - report every candidate, go on
            print(f"  gemm {fields}: failed: {type(e).__name__}: {str(e)[:200]}")
    # the implicit GEMM with its NCHW epilogue on the same rounded input (one image, 1 x HW)
    x = Xr.t().contiguous().view(1, C, 1, HW)
    w = Wr.view(K, C, 1, 1)
    for bn in (128, 64):
        s = conv_ops.ConvSchedule(bm=128, bn=bn, bk=32, bw=64, stages=6 if bn == 128 else 8,
                                  consumers=2, epilogue="direct", cluster_m=2)
        try:
            y = conv_ops.convolve(x, w, None, 1, 0, 1, 1, schedule=s, precision="tf32",
                                  nchw=True)
            torch.cuda.synchronize()
            err = ((y.view(K, HW).double() - ref.double()).norm() / ref.double().norm()).item()
            ms = _kernel_ms(lambda: conv_ops.convolve(x, w, None, 1, 0, 1, 1, schedule=s,
                                                      precision="tf32", nchw=True), torch,
                            "conv2d")
            print(f"  implicit GEMM nchw bn={bn} (the kernel alone): {ms:.3f} ms, "
                  f"{nbytes / ms / 1e9:.2f} TB/s, err {err:.1e}")
        except Exception as e:            # noqa: BLE001
            print(f"  implicit GEMM nchw bn={bn}: failed: {type(e).__name__}: {str(e)[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
