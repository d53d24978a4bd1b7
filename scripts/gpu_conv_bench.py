"""argus.ops.conv2d / conv1d against cuDNN (torch.nn.functional) in the same run, on
ResNet-50-like layers (bf16, channels-last, as cuDNN runs them fastest) and on the convolution
tasks of KernelBench level 1 (read from the KernelBench checkout at run time: --kernelbench;
nothing of it is copied into this repository), bf16 and the task's fp32.

Each row: the layer, our time and cuDNN's (medians, argus.runtime.timing.measure_alternating:
L2 flushed, alternating rounds), the ratio cuDNN / ours (> 1: we are faster), and the max
relative error of ours and of cuDNN against a float64 reference on the same fresh data. Tasks
the ops refuse (LaunchError) are listed as skipped, with the reason. The ResNet rows also time
`kernel`: the kernel's prepared launch replayed on fixed operands (no host work: no operand
preparation, no launch-plan lookup), so host overhead and kernel time can be told apart (the
stride-1 1x1 rows: matmul's GEMM kernel, which argus.ops.conv's pointwise route runs them on;
the stem: the im2col route's gather and GEMM, one after the other).

`--fp32`: the same ResNet layers in fp32, ours as the strict bf16 split (6 terms, promoted) and
the relaxed one (1 term), against cuDNN with TF32 off (torch.backends.cudnn.allow_tf32 = False:
fp32 accuracy, the strict track's peer) and on (torch's default for convolutions), each with its
normwise error against float64.

    python scripts/gpu_conv_bench.py            # everything (minutes)
    python scripts/gpu_conv_bench.py --quick    # 3 ResNet layers + the 2-d KernelBench tasks
                                                # at batch 1 (seconds)
    python scripts/gpu_conv_bench.py --quick --skip-kernelbench --fp32
    python scripts/gpu_conv_bench.py --variants   # the quick layers' kernel alone under
                                                # neighbouring schedules (cluster, rowbox, halo)
    python scripts/gpu_conv_bench.py --variants default,rowbox    # some of them
    python scripts/gpu_conv_bench.py --variants default,taps,norowbox,norowbox-taps
                                                # packed taps (ConvSchedule.taps_per_slice)
    python scripts/gpu_conv_bench.py --rowbox   # all ResNet-50 layers, kernel alone: the
                                                # default (rowbox where it applies) vs
                                                # rowbox=False vs cuDNN, with geomeans; on
                                                # c3-c5 also the small-image candidates (bm 64,
                                                # one consumer) and schedule_for's rule; on
                                                # the strided layers the strided rowbox
                                                # (element-strided box, opt-in), and after
                                                # the table ResNet-50's other strided layers;
                                                # 'op' (argus.ops.conv2d as called: the 1x1
                                                # layers on the pointwise GEMM, the stem on
                                                # im2col) and 'op kernel' (its route's kernels
                                                # alone) on every layer: the HEADLINE geomean
                                                # is cudnn/op, the kernel-alone one after it
    python scripts/gpu_conv_bench.py --rowbox --dry   # no GPU: what 'op' runs per layer,
                                                # built on meta tensors (route, schedule)
    python scripts/gpu_conv_bench.py --strided  # only ResNet-50's 7 strided layers: default
                                                # vs strided rowbox vs cuDNN (kernel alone)
    python scripts/gpu_conv_bench.py --cases depthwise,pointwise   # fp32 under tf32: the
                                                # depthwise and 1x1 routes (and compose's
                                                # depthwise template) vs cuDNN TF32, < 1 min with
                                                # ARGUS_VERIFY=0; --before adds the implicit GEMM
                                                # they left
    python scripts/gpu_conv_bench.py --pointwise16   # ResNet-50's stride-1 1x1 layers (bf16,
                                                # channels-last, batch 32): the pointwise route
                                                # (matmul's GEMM) vs the implicit GEMM vs cuDNN,
                                                # and the GEMM alone vs cuBLAS; --tune first
                                                # tunes each GEMM problem (tune_matmul)
    python scripts/gpu_conv_bench.py --stem     # the few-channel stems (ResNet-50's 7x7/2,
                                                # AlexNet's 11x11/4 = L1/50): the im2col route
                                                # vs the implicit GEMM vs cuDNN, and the
                                                # route's gather and GEMM alone
    python scripts/gpu_conv_bench.py --unet     # UNet-like layers (bf16, channels-last, batch
                                                # 8): the 3x3 convolutions of a 64-1024 UNet
                                                # and its 2x2/2 up-convolutions, the ops as
                                                # called vs cuDNN, with a geomean; --dry: built
                                                # on meta tensors, no GPU
    python scripts/gpu_conv_bench.py --unet --variants default,norowbox,taps,gemm
                                                # the UNet 3x3 rows on 64^2+ images under the
                                                # --variants schedules
    python scripts/gpu_conv_bench.py --unet --variants default,tma-epilogue,pingpong,pingpong-tma
                                                # ping-pong consumers (ConvSchedule.pingpong)
                                                # against the default and its TMA epilogue
    python scripts/gpu_conv_bench.py --profile "c4 3x3 256"   # torch.profiler: GPU time per
                                                # kernel (ours, operand preparation, cuDNN's)
                                                # and host time per call, for one layer
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, N, C, H, W, K, R, S, stride, padding): ResNet-50 convolutions at batch 32
RESNET50 = [
    ("stem 7x7/2", 32, 3, 224, 224, 64, 7, 7, 2, 3),
    ("c2 1x1 64->64", 32, 64, 56, 56, 64, 1, 1, 1, 0),
    ("c2 3x3 64", 32, 64, 56, 56, 64, 3, 3, 1, 1),
    ("c2 1x1 64->256", 32, 64, 56, 56, 256, 1, 1, 1, 0),
    ("c3 3x3 128/2", 32, 128, 56, 56, 128, 3, 3, 2, 1),
    ("c3 3x3 128", 32, 128, 28, 28, 128, 3, 3, 1, 1),
    ("c3 1x1 512->128", 32, 512, 28, 28, 128, 1, 1, 1, 0),
    ("c4 3x3 256", 32, 256, 14, 14, 256, 3, 3, 1, 1),
    ("c4 1x1 1024->256", 32, 1024, 14, 14, 256, 1, 1, 1, 0),
    ("c5 3x3 512", 32, 512, 7, 7, 512, 3, 3, 1, 1),
    ("c5 1x1 512->2048", 32, 512, 7, 7, 2048, 1, 1, 1, 0),
]
QUICK = ("c2 3x3 64", "c3 3x3 128", "c4 3x3 256")
# ResNet-50's other strided convolutions (torchvision v1.5: the 3x3 of c4's and c5's first
# block, and the 1x1 / 2 downsamples of c3-c5): with the stem and c3/2 above, every strided
# layer, for the strided rowbox (schedule_for(strided_rowbox=True))
RESNET50_STRIDED_EXTRA = [
    ("c4 3x3 256/2", 32, 256, 28, 28, 256, 3, 3, 2, 1),
    ("c5 3x3 512/2", 32, 512, 14, 14, 512, 3, 3, 2, 1),
    ("c3 1x1/2 256->512", 32, 256, 56, 56, 512, 1, 1, 2, 0),
    ("c4 1x1/2 512->1024", 32, 512, 28, 28, 1024, 1, 1, 2, 0),
    ("c5 1x1/2 1024->2048", 32, 1024, 14, 14, 2048, 1, 1, 2, 0),
]


# UNet-like layers (Ronneberger et al.'s widths 64-1024 on a 256x256 input, batch 8, padded 3x3
# convolutions; the decoder's first 3x3 reads the skip concatenation, twice the channels): bf16,
# channels-last. (name, N, C, H, W, K, R, S, stride, padding). The 1x1 head (64 -> 2 classes)
# is left out: 2 bf16 output channels are 4 bytes a row, under TMA's 16-byte alignment.
UNET = [
    ("enc1 3x3 3->64 256^2", 8, 3, 256, 256, 64, 3, 3, 1, 1),
    ("enc1 3x3 64 256^2", 8, 64, 256, 256, 64, 3, 3, 1, 1),
    ("enc2 3x3 64->128 128^2", 8, 64, 128, 128, 128, 3, 3, 1, 1),
    ("enc2 3x3 128 128^2", 8, 128, 128, 128, 128, 3, 3, 1, 1),
    ("enc3 3x3 128->256 64^2", 8, 128, 64, 64, 256, 3, 3, 1, 1),
    ("enc3 3x3 256 64^2", 8, 256, 64, 64, 256, 3, 3, 1, 1),
    ("enc4 3x3 256->512 32^2", 8, 256, 32, 32, 512, 3, 3, 1, 1),
    ("enc4 3x3 512 32^2", 8, 512, 32, 32, 512, 3, 3, 1, 1),
    ("mid 3x3 512->1024 16^2", 8, 512, 16, 16, 1024, 3, 3, 1, 1),
    ("mid 3x3 1024 16^2", 8, 1024, 16, 16, 1024, 3, 3, 1, 1),
    ("dec4 3x3 1024->512 32^2", 8, 1024, 32, 32, 512, 3, 3, 1, 1),
    ("dec3 3x3 512->256 64^2", 8, 512, 64, 64, 256, 3, 3, 1, 1),
    ("dec2 3x3 256->128 128^2", 8, 256, 128, 128, 128, 3, 3, 1, 1),
    ("dec1 3x3 128->64 256^2", 8, 128, 256, 256, 64, 3, 3, 1, 1),
]
# the decoder's 2x2 / 2 up-convolutions (conv_transpose2d): (name, N, C, H, W, K) on the
# smaller image, the output twice its height and width
UNET_UP = [
    ("up4 2x2/2 1024->512 16^2", 8, 1024, 16, 16, 512),
    ("up3 2x2/2 512->256 32^2", 8, 512, 32, 32, 256),
    ("up2 2x2/2 256->128 64^2", 8, 256, 64, 64, 128),
    ("up1 2x2/2 128->64 128^2", 8, 128, 128, 128, 64),
]


def _rel(out, ref) -> float:
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _bench(ours, theirs, quick: bool, kernel=None):
    """Median ms of ours and theirs (and of `kernel`, the prepared launch, when given)."""
    from argus.runtime.timing import measure_alternating

    fns = [ours, theirs] + ([kernel] if kernel is not None else [])
    for f in fns:
        f()
    times = measure_alternating(fns, rounds=1 if quick else 3, trials=100,
                                warmup=5 if quick else 20)
    return tuple(t.median_ms for t in times)


def _row(name, ms_ours, ms_cudnn, err_ours, err_cudnn, flops):
    tf = flops / (ms_ours * 1e-3) / 1e12
    print(f"{name:58s} ours {ms_ours:9.4f} ms ({tf:6.1f} TF/s)  cudnn {ms_cudnn:9.4f} ms  "
          f"cudnn/ours {ms_cudnn / ms_ours:5.2f}x  err ours {err_ours:.1e} cudnn "
          f"{err_cudnn:.1e}", flush=True)
    return ms_cudnn / ms_ours


def resnet(quick: bool) -> list[float]:
    import torch
    import torch.nn.functional as F

    import argus.ops as ops

    ratios = []
    print("== ResNet-50 layers, bf16, channels-last, batch 32")
    for name, N, C, H, W, K, R, S, st, pad in RESNET50:
        if quick and name not in QUICK:
            continue
        g = torch.Generator(device="cuda").manual_seed(len(ratios))
        x = torch.randn(N, C, H, W, device="cuda", generator=g).bfloat16() \
            .to(memory_format=torch.channels_last)
        w = (torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)) \
            .bfloat16().to(memory_format=torch.channels_last)
        ref = F.conv2d(x.double(), w.double(), None, st, pad)
        y = ops.conv2d(x, w, None, st, pad)
        err = _rel(y, ref)
        err_c = _rel(F.conv2d(x, w, None, st, pad), ref)
        launch = _prepared(x, w, st, pad)
        ms, ms_c, ms_k = _bench(lambda: ops.conv2d(x, w, None, st, pad),
                                lambda: F.conv2d(x, w, None, st, pad), quick, launch)
        P, Q = ref.shape[2], ref.shape[3]
        flops = 2 * N * P * Q * K * C * R * S
        ratios.append(_row(name, ms, ms_c, err, err_c, flops))
        print(f"{'':58s} kernel {ms_k:9.4f} ms ({flops / (ms_k * 1e-3) / 1e12:6.1f} TF/s)  "
              f"cudnn/kernel {ms_c / ms_k:5.2f}x  host+prep {ms - ms_k:8.4f} ms", flush=True)
    return ratios


def _unet_operands(row, device: str, seed: int):
    """x and w of one UNET / UNET_UP row (bf16, channels-last) and the call's arguments:
    (x, w, conv args, torch's function, ours, FLOPs)."""
    import torch
    import torch.nn.functional as F

    import argus.ops as ops

    if len(row) == 10:
        name, N, C, H, W, K, R, S, st, pad = row
        wshape, args, fns = (K, C, R, S), (None, st, pad), (F.conv2d, ops.conv2d)
        flops = 2 * N * H * W * K * C * R * S
    else:
        name, N, C, H, W, K = row
        wshape, args = (C, K, 2, 2), (None, 2, 0)
        fns, flops = (F.conv_transpose2d, ops.conv_transpose2d), 2 * N * H * W * K * C * 4
    g = torch.Generator(device=device).manual_seed(seed) if device != "meta" else None
    if device == "meta":
        x = torch.empty(N, C, H, W, dtype=torch.bfloat16, device="meta")
        w = torch.empty(*wshape, dtype=torch.bfloat16, device="meta")
    else:
        x = torch.randn(N, C, H, W, device=device, generator=g).bfloat16()
        fan_in = C if len(row) != 10 else C * wshape[2] * wshape[3]   # inputs an output sums
        w = (torch.randn(*wshape, device=device, generator=g) / math.sqrt(fan_in)).bfloat16()
    x = x.to(memory_format=torch.channels_last)
    w = w.to(memory_format=torch.channels_last)
    return name, x, w, args, fns[0], fns[1], flops


def unet(dry: bool) -> list[float]:
    """--unet: argus.ops.conv2d / conv_transpose2d as called against cuDNN (torch) on the UNET
    and UNET_UP layers, one row each: times, TF/s, cuDNN / ours, errors against float64; a
    layer the op refuses is listed as skipped with the reason. --dry (no GPU): each 3x3
    layer's route and schedule (each up-convolution's result), built on meta tensors (traced, verified per ARGUS_VERIFY,
    compiled by NVRTC), nothing launched."""
    import time

    from argus.errors import LaunchError
    from argus.ops import conv as conv_ops

    ratios = []
    print("== UNet-like layers, bf16, channels-last, batch 8" + (" (dry: built, not run)"
                                                                  if dry else ""))
    for seed, row in enumerate(UNET + UNET_UP):
        name, x, w, args, theirs, ours, flops = _unet_operands(row, "meta" if dry else "cuda",
                                                               seed)
        if dry and row in UNET_UP:        # the gradient form's convolutions, built
            t0 = time.perf_counter()
            y = conv_ops.conv_transpose2d(x, w, *args, run=conv_ops.convolve)
            print(f"{name:28s} conv_transpose2d result {tuple(y.shape)}; built in "
                  f"{time.perf_counter() - t0:5.1f} s", flush=True)
            continue
        if dry:
            kind = conv_ops.route(x, w, *args, 1)
            t0 = time.perf_counter()
            y = conv_ops.convolve(x, w, *args)
            what = (conv_ops.schedule_for(x, w, args[1], args[2], 1, 1)
                    if kind == "implicit_gemm" else "")
            print(f"{name:28s} route {kind:13s} result {tuple(y.shape)}; built in "
                  f"{time.perf_counter() - t0:5.1f} s; {what}", flush=True)
            continue
        ref = theirs(x.double(), w.double(), *args)
        try:
            err = _rel(ours(x, w, *args), ref)
        except LaunchError as e:
            print(f"{name:58s} skipped: {str(e).splitlines()[0][:100]}", flush=True)
            continue
        err_c = _rel(theirs(x, w, *args), ref)
        ms, ms_c = _bench(lambda: ours(x, w, *args), lambda: theirs(x, w, *args), False)
        ratios.append(_row(name, ms, ms_c, err, err_c, flops))
    if ratios:
        print(f"UNet geomean cudnn/ours: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x "
              f"over {len(ratios)} of {len(UNET) + len(UNET_UP)} layers", flush=True)
    return ratios


def _prepared(x, w, stride, padding, schedule=None):
    """The conv kernel's launch plan on fixed operands (what ops.conv2d launches for x, w, or
    with `schedule`: the implicit GEMM), prepared once: calling it is one cuLaunchKernelEx.
    A layer `route` sends to "pointwise" (bf16 1x1, no schedule) launches matmul's GEMM on
    x's [N*H*W, C] view instead: that kernel's plan."""
    import torch

    from argus.ops import conv as conv_ops

    if schedule is None and conv_ops.route(x, w, None, stride, padding, 1) == "im2col":
        gather, gemm, keep = _im2col_steps(x, w, None, stride, padding)
        return lambda: (gather(), gemm(), keep)
    if schedule is None and conv_ops.route(x, w, None, stride, padding, 1) == "pointwise":
        N, C, H, W = x.shape
        K = w.shape[0]
        A, Wk = x.permute(0, 2, 3, 1).reshape(N * H * W, C), w.reshape(K, C)
        out2 = torch.empty(N * H * W, K, dtype=x.dtype, device=x.device)
        _, runner = conv_ops.pointwise_gemm(A, Wk, out2)
        runner(A, Wk, out2)
        plan = runner.plan_for(A, Wk, out2)
        return lambda: (plan(), (A, Wk, out2))
    s = schedule or conv_ops.schedule_for(x, w, stride, padding, 1, 1)
    X, Wt, _, view, b, sizes, geom, idt, odt = conv_ops.operands(x, w, None, stride, padding,
                                                                 1, 1, s.bk, rowbox=s.rowbox)
    compiled = conv_ops.conv_kernel(idt, odt, False, "none").compile(geom=geom, s=s)
    compiled(X, Wt, view, b, *sizes)
    plan = compiled.plan_for(X, Wt, view, b, *sizes)
    keep = (X, Wt, view, b)              # the plan holds raw pointers: keep the buffers alive
    return lambda: (plan(), keep)


def _im2col_steps(x, w, b, stride, padding):
    """The im2col route's two kernels on fixed operands, as `_im2col` (argus.ops.conv) runs
    them (its `_Gather`: the row-run or the per-tap gather), each prepared once (a launch
    plan: one cuLaunchKernelEx): (the gather, the GEMM, the buffers the plans point into)."""
    import torch

    from argus import dtypes
    from argus.ops import conv as conv_ops

    K = w.shape[0]
    gather = conv_ops._Gather.of(x, w, stride, padding, 1)
    kc = gather.k(b is not None, x.dtype == torch.float32)
    X = gather.x_view(x)
    A = torch.empty(gather.m, gather.pitch, dtype=x.dtype, device=x.device)
    Av = gather.a_view(A)
    Wk = conv_ops._im2col_weight(w, b, gather)
    out2 = torch.empty(gather.m, K, dtype=x.dtype, device=x.device)
    dtype = {torch.bfloat16: dtypes.bf16, torch.float16: dtypes.f16,
             torch.float32: dtypes.f32}[x.dtype]
    kernel = gather.kernel(dtype).compile(**gather.constexprs())
    kernel(X, Av)
    _, runner = conv_ops.pointwise_gemm(A[:, :kc], Wk[:, :kc], out2)
    runner(A[:, :kc], Wk[:, :kc], out2)
    return (kernel.plan_for(X, Av), runner.plan_for(A[:, :kc], Wk[:, :kc], out2),
            (X, A, Wk, out2))


VARIANTS = ("default", "previous", "rowbox", "rowbox-nocluster", "norowbox", "halo",
            "halo-nocluster", "taps", "norowbox-taps", "gemm", "tma-epilogue", "2sm",
            "bm64-2sm", "pingpong", "pingpong-tma", "op")


def _layer(N, C, H, W, K, R, S, seed: int):
    """bf16 channels-last input and weight of one ResNet layer."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(N, C, H, W, device="cuda", generator=g).bfloat16() \
        .to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)) \
        .bfloat16().to(memory_format=torch.channels_last)
    return x, w


def rowbox_table() -> None:
    """Every ResNet-50 layer (bf16, channels-last, batch 32), the kernel alone (prepared
    launches, no host work), each checked against float64 first: the default schedule
    (rowbox where it applies: 2-d, stride 1, one group), the same with rowbox=False (one TMA
    box per output row, the default before), and cuDNN; the geomeans of cuDNN / ours over all
    layers and over the layers rowbox takes. "default" is the schedule before the small-image
    rule (argus.ops.conv.SMALL_IMAGE_RULE off), as docs/perf/conv.md measured it; on the
    rowbox layers with the TMA-store epilogue (c3 / c4 / c5) the small-image candidates
    (`_small_image_candidates`) run too, each row with its tiles' useful fraction, and the
    geomean "with the small-image rule" is schedule_for's pick now on every layer (the
    rule's row where it differs from the default). On the strided layers (stem, c3/2) the
    strided rowbox candidates run too (`_strided_rowbox_candidates`), with a geomean "with the
    strided rowbox" (the rule's pick, the strided rowbox on the layers it ran); after the
    table, ResNet-50's other strided layers (`strided_table`). On every layer "op":
    argus.ops.conv2d as a user calls it (its route, `conv_ops.route`: the 1x1 layers run on
    matmul's GEMM, the stem on im2col, the rest on the implicit GEMM under schedule_for's rule;
    with the host path), checked against float64 first, and "op kernel" (`_prepared` without a
    schedule: the route's kernels alone); the HEADLINE geomean is cuDNN / op over the layers
    (what users get), then cuDNN / op kernel, then the kernel-alone geomean of the implicit
    GEMM on every layer (the number docs/perf/conv.md reported before 2026-12-05, whose 1x1
    and stem rows are not what the op runs). Run with the default
    ARGUS_VERIFY=1 to see the compile (and verification) time of each schedule too;
    ARGUS_VERIFY=0 times the same kernels."""
    import time

    import torch.nn.functional as F

    import argus.ops as ops
    from argus.ops import conv as conv_ops
    from argus.runtime.timing import measure_alternating

    print("== ResNet-50, kernel alone: default (rowbox where it applies) vs rowbox=False vs "
          "cuDNN (bf16, channels-last, batch 32); 'op': argus.ops.conv2d as called (the "
          "headline), 'op kernel': its route's kernels alone")
    ratios: dict[str, list] = {"default": [], "rowbox=False": [], "default, rowbox layers": [],
                               "rowbox=False, rowbox layers": []}
    small: dict[str, list] = {"with the small-image rule": [], "with the strided rowbox": []}
    # the headline: cuDNN / what the op runs, per layer (`op`); then the kernel alone
    headline: dict[str, list] = {"op (argus.ops.conv2d)": [],
                                 "op kernel (the route's kernels alone)": []}
    wrong_defaults: list[str] = []      # layers where the default (the rule) computed wrong
    for i, (name, N, C, H, W, K, R, S, st, pad) in enumerate(RESNET50):
        x, w = _layer(N, C, H, W, K, R, S, i)
        ref = F.conv2d(x.double(), w.double(), None, st, pad)
        # "default": the schedule before the small-image rule (conv_ops.SMALL_IMAGE_RULE), so
        # these rows and geomeans mean what they meant in docs/perf/conv.md
        scheds = {"default": _without_small_image_rule(
                      lambda: conv_ops.schedule_for(x, w, st, pad, 1, 1)),
                  "rowbox=False": conv_ops.schedule_for(x, w, st, pad, 1, 1, rowbox=False)}
        scheds.update(_small_image_candidates(x, w, st, pad, scheds["default"]))
        scheds.update(_strided_rowbox_candidates(x, w, st, pad, scheds["default"]))
        fns, ok = {}, True
        for label, sched in scheds.items():
            t0 = time.perf_counter()
            try:
                err = _rel(conv_ops.convolve(x, w, None, st, pad, schedule=sched), ref)
            except Exception as e:      # a candidate that does not build is reported, not fatal
                if not _candidate(label):
                    raise
                print(f"{name:18s} {label:13s} FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            first = time.perf_counter() - t0
            print(f"{name:18s} {label:13s} rowbox {sched.rowbox!s:5s} bm {sched.bm} bn "
                  f"{sched.bn} bw {sched.bw} consumers {sched.consumers} cluster "
                  f"{sched.cluster_m} stages {sched.stages} epilogue {sched.epilogue} useful "
                  f"{_useful(sched, ref):.0%}; first call "
                  f"(compile, verify) {first:6.1f} s; max rel err {err:.1e}", flush=True)
            if err > 1e-2:
                print(f"{name:18s} {label:13s} WRONG")
                # a wrong small-image candidate is left out; the layer's other rows stay. The
                # rule's own schedule is the default since 52324dc: a wrong one fails the run
                if label == "small-image rule":
                    wrong_defaults.append(name)
                ok = ok and _candidate(label)
                continue
            fns[label] = _prepared(x, w, st, pad, sched)
        if not ok:
            continue
        # "op": argus.ops.conv2d as a user calls it (its route: the pointwise GEMM on the 1x1
        # layers, im2col on the stem, else the implicit GEMM under schedule_for's rule, and
        # the host path); "op kernel": that route's kernels alone (prepared launches). A
        # wrong op fails the run after the table, as a wrong default does
        kind = conv_ops.route(x, w, None, st, pad, 1)
        err_op = _rel(ops.conv2d(x, w, None, st, pad), ref)
        print(f"{name:18s} op            route {kind}; max rel err {err_op:.1e}", flush=True)
        if err_op > 1e-2:
            print(f"{name:18s} op            WRONG", flush=True)
            wrong_defaults.append(f"{name} (op)")
        else:
            fns["op"] = lambda x=x, w=w, st=st, pad=pad: ops.conv2d(x, w, None, st, pad)
            fns["op kernel"] = _prepared(x, w, st, pad)
        fns["cudnn"] = lambda x=x, w=w, st=st, pad=pad: F.conv2d(x, w, None, st, pad)
        times = measure_alternating(list(fns.values()), rounds=3, trials=100, warmup=20)
        ms = {label: t.median_ms for label, t in zip(fns, times)}
        flops = 2 * ref.numel() * C * R * S
        cells = "  ".join(f"{label} {t:8.4f} ms ({flops / (t * 1e-3) / 1e12:6.1f} TF/s)"
                          for label, t in ms.items())
        took = scheds["default"].rowbox
        print(f"{name:18s} {cells}  cudnn/default {ms['cudnn'] / ms['default']:5.2f}x  "
              f"cudnn/rowbox=False {ms['cudnn'] / ms['rowbox=False']:5.2f}x", flush=True)
        if "op" in ms:
            print(f"{name:18s} op (route {kind}) {ms['op']:8.4f} ms  op kernel "
                  f"{ms['op kernel']:8.4f} ms  cudnn/op {ms['cudnn'] / ms['op']:5.2f}x  "
                  f"cudnn/op kernel {ms['cudnn'] / ms['op kernel']:5.2f}x", flush=True)
            headline["op (argus.ops.conv2d)"].append(ms["cudnn"] / ms["op"])
            headline["op kernel (the route's kernels alone)"].append(
                ms["cudnn"] / ms["op kernel"])
        for label in ("default", "rowbox=False"):
            ratios[label].append(ms["cudnn"] / ms[label])
            if took:
                ratios[f"{label}, rowbox layers"].append(ms["cudnn"] / ms[label])
        # the small-image rule: schedule_for now, which is "default" on the layers it keeps
        if "small-image rule" in scheds and "small-image rule" not in ms:
            continue                    # the rule's schedule was wrong: no geomean for it
        rule = "small-image rule" if "small-image rule" in ms else "default"
        small["with the small-image rule"].append(ms["cudnn"] / ms[rule])
        small["with the strided rowbox"].append(
            ms["cudnn"] / ms["strided rowbox" if "strided rowbox" in ms else rule])
        for label in ms:
            if _candidate(label):
                small.setdefault(f"{label}, layers it ran", []).append(ms["cudnn"] / ms[label])
                small.setdefault(f"default on those layers ({label})", []).append(
                    ms["cudnn"] / ms["default"])
    for label, rs in headline.items():
        if rs:
            print(f"HEADLINE geomean cudnn/{label}: "
                  f"{math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over {len(rs)} layers")
    rs = small["with the small-image rule"]
    if rs:
        print(f"kernel-alone geomean cudnn/implicit GEMM (schedule_for now, every layer on the "
              f"implicit GEMM kernel; the 1x1 layers and the stem are not what the op runs): "
              f"{math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over {len(rs)} layers")
    for label, rs in list(ratios.items()) + list(small.items()):
        if rs:
            print(f"geomean cudnn/ours, {label}: "
                  f"{math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over {len(rs)} layers")
    strided_table(RESNET50_STRIDED_EXTRA, seed=len(RESNET50))
    if wrong_defaults:
        raise SystemExit(f"WRONG results from the default (small-image rule) schedule or the "
                         f"op on {', '.join(wrong_defaults)}")


def rowbox_dry() -> None:
    """--rowbox --dry, no GPU: for every RESNET50 layer, what the table's "op" column runs:
    argus.ops.conv2d on meta tensors (bf16, channels-last, batch 32), which routes, builds
    (traces, verifies per ARGUS_VERIFY, compiles with NVRTC) and never launches (through
    argus.ops.conv.convolve, which ops.conv2d calls in eager mode: conv2d itself refuses
    non-CUDA tensors), and the
    route's kernel schedule (the pointwise GEMM's from `pointwise_gemm`, the implicit GEMM's
    from schedule_for). Nothing is timed."""
    import time

    import torch

    from argus.ops import conv as conv_ops

    for name, N, C, H, W, K, R, S, st, pad in RESNET50:
        x = torch.empty(N, C, H, W, dtype=torch.bfloat16, device="meta") \
            .to(memory_format=torch.channels_last)
        w = torch.empty(K, C, R, S, dtype=torch.bfloat16, device="meta") \
            .to(memory_format=torch.channels_last)
        kind = conv_ops.route(x, w, None, st, pad, 1)
        t0 = time.perf_counter()
        y = conv_ops.convolve(x, w, None, st, pad)
        built = time.perf_counter() - t0
        if kind == "pointwise":
            A, Wk = x.permute(0, 2, 3, 1).reshape(N * H * W, C), w.reshape(K, C)
            out2 = torch.empty(N * H * W, K, dtype=x.dtype, device="meta")
            what = conv_ops.pointwise_gemm(A, Wk, out2)[0]
        elif kind == "implicit_gemm":
            what = conv_ops.schedule_for(x, w, st, pad, 1, 1)
        else:
            what = "(the gather and matmul's GEMM)"
        print(f"{name:18s} op route {kind:13s} result {tuple(y.shape)}; built in {built:5.1f} s; "
              f"{what}", flush=True)


def _candidate(label: str) -> bool:
    """A row that may fail (to build, or wrong: left out, reported) without failing the run:
    the small-image and strided-rowbox candidates."""
    return label.startswith(("small-image", "strided"))


def _strided_rowbox_candidates(x, w, st, pad, default) -> dict:
    """On a strided layer: "strided rowbox", schedule_for(strided_rowbox=True) (the A tile one
    TMA box read with element strides, ConvSchedule.rowbox; opt-in, docs/perf/conv.md
    "Strided rowbox"), and the same without the 2x1 cluster where it has one."""
    import dataclasses

    from argus.ops import conv as conv_ops

    if st == 1:
        return {}
    cand = conv_ops.schedule_for(x, w, st, pad, 1, 1, strided_rowbox=True)
    if not cand.rowbox or cand == default:
        return {}
    out = {"strided rowbox": cand}
    if cand.cluster_m > 1:
        out["strided rowbox cl1"] = dataclasses.replace(cand, cluster_m=1)
    return out


def strided_table(layers=None, seed: int = 0) -> None:
    """ResNet-50's strided layers (default: all 7, RESNET50's stem and c3/2 and
    RESNET50_STRIDED_EXTRA; bf16, channels-last, batch 32), the kernel alone, each checked
    against float64 first: the default (per-row boxes) vs the strided rowbox candidates vs
    cuDNN, with geomeans. A wrong or failing candidate is reported and left out; a wrong
    default fails the run."""
    import time

    import torch.nn.functional as F

    from argus.ops import conv as conv_ops
    from argus.runtime.timing import measure_alternating

    if layers is None:
        layers = [r for r in RESNET50 if r[8] > 1] + RESNET50_STRIDED_EXTRA
    print("== ResNet-50 strided layers, kernel alone: default vs strided rowbox vs cuDNN "
          "(bf16, channels-last, batch 32)")
    geo: dict[str, list] = {}
    for i, (name, N, C, H, W, K, R, S, st, pad) in enumerate(layers):
        x, w = _layer(N, C, H, W, K, R, S, seed + i)
        ref = F.conv2d(x.double(), w.double(), None, st, pad)
        default = conv_ops.schedule_for(x, w, st, pad, 1, 1)
        scheds = {"default": default}
        scheds.update(_strided_rowbox_candidates(x, w, st, pad, default))
        fns = {}
        for label, sched in scheds.items():
            t0 = time.perf_counter()
            try:
                err = _rel(conv_ops.convolve(x, w, None, st, pad, schedule=sched), ref)
            except Exception as e:
                if not _candidate(label):
                    raise
                print(f"{name:20s} {label:18s} FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            print(f"{name:20s} {label:18s} rowbox {sched.rowbox!s:5s} bm {sched.bm} bn "
                  f"{sched.bn} bw {sched.bw} bk {sched.bk} taps {sched.taps_per_slice} cluster "
                  f"{sched.cluster_m} stages {sched.stages} epilogue {sched.epilogue}; first "
                  f"call {time.perf_counter() - t0:6.1f} s; max rel err {err:.1e}", flush=True)
            if err > 1e-2:
                print(f"{name:20s} {label:18s} WRONG", flush=True)
                if not _candidate(label):
                    raise SystemExit(f"WRONG result from the default schedule on {name}")
                continue
            fns[label] = _prepared(x, w, st, pad, sched)
        fns["cudnn"] = lambda x=x, w=w, st=st, pad=pad: F.conv2d(x, w, None, st, pad)
        times = measure_alternating(list(fns.values()), rounds=3, trials=100, warmup=20)
        ms = {label: t.median_ms for label, t in zip(fns, times)}
        cells = "  ".join(f"{label} {t:8.4f} ms" for label, t in ms.items())
        ratios = "  ".join(f"cudnn/{label} {ms['cudnn'] / t:5.2f}x" for label, t in ms.items()
                           if label != "cudnn")
        print(f"{name:20s} {cells}  {ratios}", flush=True)
        for label, t in ms.items():
            if label != "cudnn":
                geo.setdefault(label, []).append(ms["cudnn"] / t)
        best = min(t for label, t in ms.items() if label != "cudnn")
        geo.setdefault("best of the rows", []).append(ms["cudnn"] / best)
    for label, rs in geo.items():
        print(f"geomean cudnn/ours (strided layers), {label}: "
              f"{math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over {len(rs)} layers")


def _without_small_image_rule(make):
    """make() with argus.ops.conv.SMALL_IMAGE_RULE off: the schedule before the rule."""
    from argus.ops import conv as conv_ops

    keep = conv_ops.SMALL_IMAGE_RULE
    conv_ops.SMALL_IMAGE_RULE = False
    try:
        return make()
    finally:
        conv_ops.SMALL_IMAGE_RULE = keep


def _useful(sched, ref) -> float:
    """The fraction of the schedule's tile pixels that are real outputs (rowbox: per-image
    tiles, argus.ops.conv.rowbox_useful; else tiles of the flattened N * P rows)."""
    from argus.ops import conv as conv_ops

    N, P, Q = ref.shape[0], ref.shape[2], ref.shape[3]
    if sched.rowbox:
        return conv_ops.rowbox_useful(P, Q, sched.bm, sched.bw)
    rows = sched.bm // sched.bw
    return N * P * Q / (-(-N * P // rows) * rows * -(-Q // sched.bw) * sched.bw)


def _small_image_candidates(x, w, st, pad, default) -> dict:
    """Issue 17's candidates on the layers whose default is a rowbox schedule with the
    TMA-store epilogue (bw < 64: c3 / c4 / c5): 64-pixel tiles with one consumer warpgroup
    (bm 64, consumers 1) at bn 128 / 64, with and without the 2x1 cluster, and
    "small-image rule": what schedule_for picks now (argus.ops.conv.SMALL_IMAGE_RULE), where
    it differs from the default, and bm 64 at two CTAs an SM (ConvSchedule.ctas_per_sm). Each
    once (a candidate equal to an earlier one is left out)."""
    import dataclasses

    from argus.ops import conv as conv_ops

    if not (default.rowbox and default.epilogue == "tma"):
        return {}
    out = {}
    now = conv_ops.schedule_for(x, w, st, pad, 1, 1)
    if now != default:
        out["small-image rule"] = now
    for bn in (128, 64):
        for cluster in (2, 1):
            stages = max(4, min(6, (conv_ops._SMEM_BUDGET - 64 * bn * 2) //
                                ((64 + bn) * 64 * 2)))
            cand = dataclasses.replace(default, bm=64, consumers=1, bn=bn, cluster_m=cluster,
                                       stages=stages)
            if cand != default and cand not in out.values():
                out[f"small-image bm64 bn{bn} cl{cluster}"] = cand
    # two CTAs an SM (ConvSchedule.ctas_per_sm = 2: 256 threads enter with 128 registers,
    # consumers 216; shared memory within smem_per_sm_share(2): bn 128 in 3 stages, bn 64 in 6)
    for bn, stages in ((128, 3), (64, 6)):
        out[f"small-image bm64 bn{bn} cl2 2/SM"] = dataclasses.replace(
            default, bm=64, consumers=1, bn=bn, cluster_m=2, stages=stages, ctas_per_sm=2,
            consumer_regs=216)
    return out


# the --variants ping-pong rows' epilogues, named: schedule_for's own is the TMA-store one for
# a channels-last x's wide layers since stop 50, so "pingpong" taking the default's timed the
# "pingpong-tma" kernel twice (docs/perf/conv.md, the ping-pong table of 2026-12-06 08:15)
PINGPONG_EPILOGUES = {"pingpong": "direct", "pingpong-tma": "tma"}


def _pingpong(one, step: int, epilogue: str | None = None):
    """The rowbox schedule `one` with ping-pong consumers (ConvSchedule.pingpong) and the
    epilogue asked (None: one's), its ring as deep as the shared memory left beside the
    TMA-store epilogue's staging (both warpgroups' bm x bn 16-bit tiles) allows, 2 to 6
    stages of `step` bytes."""
    import dataclasses

    from argus.ops import conv as conv_ops

    epilogue = epilogue or one.epilogue
    staging = 2 * one.bm * one.bn * 2 if epilogue == "tma" else 0
    return dataclasses.replace(one, pingpong=True, epilogue=epilogue, stages=max(
        2, min(6, (conv_ops._SMEM_BUDGET - staging) // step)))


def variants(which: tuple[str, ...] = VARIANTS, layers: str = "resnet") -> None:
    """The quick ResNet layers' kernel alone (prepared launches, no host work) under the
    default schedule (2x1 weight-multicast cluster, rowbox where it applies) and its
    neighbours: the earlier default (per-row boxes, no cluster, 4 stages), rowbox=False (the
    per-row boxes with the default's cluster and stages), the whole A tile as one TMA box per
    K step (rowbox) with and without the cluster, the halo row reuse with and without the
    cluster; each checked against float64 once; `gemm`: the same GEMM shape on pre-gathered
    operands (ours, cuBLAS). `which`: the rows to run (names of VARIANTS). One compile per
    row: run with ARGUS_VERIFY=0 (the halo kernel's verification takes minutes). `layers`:
    "resnet" (QUICK, batch 32) or "unet" (UNET's 3x3 rows on 64^2 images and larger, batch
    8, where the ops trail cuDNN most: docs/perf/conv.md, "UNet-like layers")."""
    import dataclasses

    import torch
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops
    from argus.runtime.timing import measure_alternating

    if layers == "unet":
        chosen = [r for r in UNET if r[3] >= 64]     # the RGB input layer too (C = 3)
    else:
        chosen = [r for r in RESNET50 if r[0] in QUICK]
    print(f"== kernel alone per schedule (bf16, channels-last, {layers} layers); ms, TF/s, "
          f"vs cuDNN")
    for name, N, C, H, W, K, R, S, st, pad in chosen:
        g = torch.Generator(device="cuda").manual_seed(7)
        x = torch.randn(N, C, H, W, device="cuda", generator=g).bfloat16() \
            .to(memory_format=torch.channels_last)
        w = (torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)) \
            .bfloat16().to(memory_format=torch.channels_last)
        ref = F.conv2d(x.double(), w.double(), None, st, pad)
        base = conv_ops.schedule_for(x, w, st, pad, 1, 1)
        halo = conv_ops.schedule_for(x, w, st, pad, 1, 1, halo=True)
        rowbox = conv_ops.schedule_for(x, w, st, pad, 1, 1, rowbox=True)
        per_row = conv_ops.schedule_for(x, w, st, pad, 1, 1, rowbox=False)
        rows = {"default (schedule_for)": ("default", base),
                "previous (no cluster, 4 stages)": (
                    "previous", dataclasses.replace(per_row, cluster_m=1, stages=4)),
                "rowbox=False (per-row boxes)": ("norowbox", per_row)}
        if rowbox.rowbox:
            rows["rowbox + cluster"] = ("rowbox", dataclasses.replace(rowbox, cluster_m=2))
            rows["rowbox, no cluster"] = ("rowbox-nocluster",
                                          dataclasses.replace(rowbox, cluster_m=1))
        # packed taps (ConvSchedule.taps_per_slice=2: 2 taps of 64 channels a K step
        # for c2; c3 / c4's 128 / 256 channels: 2 slices a step), on the default's producer
        # (rowbox where it applies) and on the per-row boxes
        rows["taps (2 K slices a step)"] = (
            "taps", conv_ops.schedule_for(x, w, st, pad, 1, 1, taps_per_slice=2))
        rows["taps, per-row boxes"] = (
            "norowbox-taps", conv_ops.schedule_for(x, w, st, pad, 1, 1, rowbox=False,
                                                   taps_per_slice=2))
        # the rowbox tile's epilogue through stmatrix + TMA stores (its global writes
        # overlapping the next tile's loads) instead of st.global from registers; two CTAs an
        # SM (half the ring each: one CTA's epilogue overlaps the other's K loop on these
        # short, 9-step K loops), with 128- or 64-pixel tiles
        if rowbox.rowbox:
            one = dataclasses.replace(rowbox, cluster_m=1)
            step = (128 + one.bn) * one.bk * one.taps_per_slice * 2     # bytes a stage
            tries = {
                "tma epilogue, no cluster": ("tma-epilogue", lambda: dataclasses.replace(
                    one, epilogue="tma")),
                "2 CTAs an SM (bm 128)": ("2sm", lambda: dataclasses.replace(
                    one, ctas_per_sm=2, consumer_regs=96, producer_regs=40,
                    stages=max(2, min(4, (100 * 1024 - 128 * one.bn * 2) // step)))),
                "2 CTAs an SM (bm 64, 1 wg)": ("bm64-2sm", lambda: dataclasses.replace(
                    one, bm=64, bw=64, consumers=1, ctas_per_sm=2, consumer_regs=216,
                    stages=max(2, min(6, (100 * 1024 - 64 * one.bn * 2) //
                                      (step * (64 + one.bn) // (128 + one.bn)))))),
                # ping-pong (ConvSchedule.pingpong: each consumer warpgroup owns whole 128-row
                # tiles, taking units in turns, so one's epilogue overlaps the other's K loop);
                # the TMA-store epilogue stages both warpgroups' whole tiles (2 x 128 x bn)
                "ping-pong (bm 128 a warpgroup)": ("pingpong", lambda: _pingpong(
                    one, step, PINGPONG_EPILOGUES["pingpong"])),
                "ping-pong, tma epilogue": ("pingpong-tma", lambda: _pingpong(
                    one, step, PINGPONG_EPILOGUES["pingpong-tma"]))}
            for label, (key, make) in tries.items():
                if key not in which:
                    continue
                try:
                    rows[label] = (key, make())
                except ValueError as e:     # a schedule the layer cannot take: say so
                    print(f"{name:24s} {label:32s} skipped: {str(e).splitlines()[0][:120]}")
        if halo.halo:
            rows["halo + cluster"] = ("halo", halo)
            rows["halo, no cluster"] = ("halo-nocluster", dataclasses.replace(halo, cluster_m=1))
        rows = {label: sched for label, (key, sched) in rows.items() if key in which}
        fns = {}
        for label, sched in rows.items():
            try:
                y = conv_ops.convolve(x, w, None, st, pad, schedule=sched)
            except Exception as e:          # a neighbour the kernel refuses: say so, go on
                print(f"{name:24s} {label:32s} skipped: {str(e).splitlines()[0][:120]}")
                continue
            err = _rel(y, ref)
            if err > 1e-2:
                print(f"{name:24s} {label:32s} WRONG: max rel err {err:.1e}")
                continue
            print(f"{name:24s} {label:32s} bn {sched.bn} bw {sched.bw} stages {sched.stages} "
                  f"cluster {sched.cluster_m} epilogue {sched.epilogue} bk {sched.bk} "
                  f"taps_per_slice {sched.taps_per_slice}", flush=True)
            fns[label] = _prepared(x, w, st, pad, sched)
        if "gemm" in which:
            # the same GEMM (M = N*P*Q, N = K, K = C*R*S) with A already im2col'd: what our
            # GEMM kernel (its tuned default, and the conv's 128 x bn tile) and cuBLAS take
            # without any gather; tells a slow producer from a slow main loop / tile shape
            from argus.kernels.gemm import GemmSchedule
            from argus.ops import matmul

            M, Kd = ref.numel() // K, C * R * S
            a = torch.randn(M, Kd, device="cuda", generator=g).bfloat16()
            bt = torch.randn(K, Kd, device="cuda", generator=g).bfloat16()
            c = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
            gemms = {f"gemm {M}x{K}x{Kd} ours (default)": None,
                     f"gemm ours 128x{base.bn}, {base.stages} st": GemmSchedule(
                         bm=128, bn=base.bn, stages=base.stages)}
            for label, gs in gemms.items():
                try:
                    matmul(a, bt.T, c, schedule=gs)
                except Exception as e:      # a schedule the GEMM refuses: say so, go on
                    print(f"{name:24s} {label:32s} skipped: {str(e).splitlines()[0][:90]}")
                    continue
                fns[label] = lambda gs=gs: matmul(a, bt.T, c, schedule=gs)
            fns["gemm cuBLAS"] = lambda: torch.matmul(a, bt.T)
        if "op" in which:
            # the op as called (its route: im2col for the RGB layer, where "default" is the
            # implicit GEMM's packed-taps schedule; host work included)
            fns[f"op as called ({conv_ops.route(x, w, None, st, pad, 1)})"] = \
                lambda: conv_ops.convolve(x, w, None, st, pad)
        fns["cudnn"] = lambda: F.conv2d(x, w, None, st, pad)
        for f in fns.values():
            f()
        times = measure_alternating(list(fns.values()), rounds=1, trials=100, warmup=5)
        flops = 2 * ref.numel() * C * R * S
        ms_c = times[-1].median_ms
        for label, t in zip(fns, times):
            print(f"{name:24s} {label:32s} {t.median_ms:8.4f} ms "
                  f"({flops / (t.median_ms * 1e-3) / 1e12:6.1f} TF/s)  cudnn/this "
                  f"{ms_c / t.median_ms:5.2f}x", flush=True)


def fp32(quick: bool) -> None:
    import torch
    import torch.nn.functional as F

    from argus.ops.conv import convolve

    print("== ResNet-50 layers, fp32 (NCHW), batch 32: ours strict (6 terms, promoted) and "
          "relaxed (1 term) vs cuDNN TF32 off / on")
    for name, N, C, H, W, K, R, S, st, pad in RESNET50:
        if quick and name not in QUICK:
            continue
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(N, C, H, W, device="cuda", generator=g)
        w = torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)
        ref = F.conv2d(x.double(), w.double(), None, st, pad)

        def rel(y):
            return ((y.double() - ref).norm() / ref.norm()).item()

        def cudnn(tf32: bool):
            def call():
                old = torch.backends.cudnn.allow_tf32
                torch.backends.cudnn.allow_tf32 = tf32
                try:
                    return F.conv2d(x, w, None, st, pad)
                finally:
                    torch.backends.cudnn.allow_tf32 = old
            return call

        fns = {"ours strict": lambda: convolve(x, w, None, st, pad, terms=6),
               "ours relaxed": lambda: convolve(x, w, None, st, pad, terms=1),
               "cudnn fp32": cudnn(False), "cudnn tf32": cudnn(True)}
        errs = {k: rel(f()) for k, f in fns.items()}
        from argus.runtime.timing import measure_alternating

        times = measure_alternating(list(fns.values()), rounds=1 if quick else 3, trials=100,
                                    warmup=5)
        cells = "  ".join(f"{k} {t.median_ms:8.4f} ms (err {errs[k]:.1e})"
                          for k, t in zip(fns, times))
        print(f"{name:20s} {cells}", flush=True)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kernelbench(root: Path, quick: bool) -> list[float]:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import argus.ops as ops
    from argus.errors import LaunchError

    ratios = []
    files = sorted((root / "level1").glob("*conv*.py"), key=lambda p: int(p.stem.split("_")[0]))
    print(f"== KernelBench level 1 convolution tasks ({root}); batch 1 with --quick")
    for path in files:
        if quick and "2D" not in path.stem:
            continue
        mod = _load(path)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).cuda()
        conv = next((m for m in model.modules()
                     if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
        kinds = {nn.Conv1d: (ops.conv1d, F.conv1d), nn.Conv2d: (ops.conv2d, F.conv2d),
                 nn.Conv3d: (ops.conv3d, F.conv3d),
                 nn.ConvTranspose1d: (ops.conv_transpose1d, F.conv_transpose1d),
                 nn.ConvTranspose2d: (ops.conv_transpose2d, F.conv_transpose2d),
                 nn.ConvTranspose3d: (ops.conv_transpose3d, F.conv_transpose3d)}
        if conv is None or type(conv) not in kinds:
            print(f"{path.stem[:58]:58s} skipped: {type(conv).__name__} not implemented yet")
            continue
        inputs = [t.cuda() for t in mod.get_inputs()]
        x = inputs[0][:1] if quick else inputs[0]
        fn, tfn = kinds[type(conv)]
        if isinstance(conv, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
            args = (conv.stride, conv.padding, conv.output_padding, conv.groups, conv.dilation)
        else:
            args = (conv.stride, conv.padding, conv.dilation, conv.groups)
        if isinstance(conv.padding, str):
            print(f"{path.stem[:58]:58s} skipped: padding={conv.padding!r}")
            continue
        w, b = conv.weight.detach(), None if conv.bias is None else conv.bias.detach()
        ref = tfn(x.double(), w.double(), None if b is None else b.double(), *args)
        for dtype in (torch.bfloat16, torch.float32):
            xd, wd = x.to(dtype), w.to(dtype)
            bd = None if b is None else b.to(dtype)
            if dtype == torch.bfloat16 and x.dim() in (4, 5):   # what cuDNN runs fastest
                xd = xd.to(memory_format=torch.channels_last if x.dim() == 4 else
                           torch.channels_last_3d)
            name = f"{path.stem[:50]} {str(dtype)[6:]}"
            try:
                err = _rel(fn(xd, wd, bd, *args), ref)
            except LaunchError as e:
                print(f"{name:58s} skipped: {str(e).splitlines()[0][:100]}")
                break
            err_c = _rel(tfn(xd, wd, bd, *args), ref)
            ms, ms_c = _bench(lambda: fn(xd, wd, bd, *args), lambda: tfn(xd, wd, bd, *args),
                              quick)
            flops = 2 * ref.numel() * w[0].numel()
            ratios.append(_row(name, ms, ms_c, err, err_c, flops))
    return ratios


# --cases: (name, N, C, H, W, multiplier, R, S, stride, padding, dilation), fp32 NCHW.
# KernelBench L1/82-85 at batch 1 (the tasks' own channels and sizes; --quick's batch, so the
# rows compare with docs/perf/conv.md's 2baa4ab table) and MobileNetV2-like layers at batch 32.
DEPTHWISE = [
    ("L1/82 dw 3x3 64x512x512", 1, 64, 512, 512, 1, 3, 3, 1, 0, 1),
    ("L1/83 dw 3x1 8x512x512", 1, 8, 512, 512, 1, 3, 1, 1, 0, 1),
    ("L1/84 dw 3x3 128x256x512", 1, 128, 256, 512, 1, 3, 3, 1, 0, 1),
    ("L1/85 dw 3x7 128x128x256", 1, 128, 128, 256, 1, 3, 7, 1, 0, 1),
    ("mbv2 dw 3x3 144x56x56", 32, 144, 56, 56, 1, 3, 3, 1, 1, 1),
    ("mbv2 dw 3x3/2 96x112x112", 32, 96, 112, 112, 1, 3, 3, 2, 1, 1),
    ("mbv2 dw 3x3 576x14x14", 32, 576, 14, 14, 1, 3, 3, 1, 1, 1),
]
# (name, N, C, H, W, K, channels_last): 1x1, stride 1, no padding, no bias, fp32
POINTWISE = [
    ("L1/87 pw 64->128 1024x1024", 1, 64, 1024, 1024, 128, False),
    ("c2 1x1 64->256 56x56", 32, 64, 56, 56, 256, False),
    ("c4 1x1 1024->256 14x14", 32, 1024, 14, 14, 256, False),
    ("c5 1x1 512->2048 7x7", 32, 512, 7, 7, 2048, False),
    ("c4 1x1 1024->256 14x14 NHWC", 32, 1024, 14, 14, 256, True),
]
CASES = ("depthwise", "pointwise")


def _tf32_cudnn(fn):
    """fn with cuDNN's TF32 switch on for the call (PyTorch's default for convolutions)."""
    import torch

    def call():
        old = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = True
        try:
            return fn()
        finally:
            torch.backends.cudnn.allow_tf32 = old
    return call


def _norm_rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _case_row(name: str, fns: dict, ref, flops: float, nbytes: float) -> float:
    """Time every entry of fns (L2 flushed, alternating; entries that raise are reported and
    dropped), print one row (ms, normwise error against float64 of each, cuDNN / ours, ours'
    GF/s and GB/s of the least traffic: the input read and the output written once) and
    return cuDNN / ours."""
    errs, ok = {}, {}
    for key, f in fns.items():
        try:
            errs[key] = _norm_rel(f(), ref)
            ok[key] = f
        except Exception as e:  # noqa: BLE001 - a failing column is reported, the row goes on
            print(f"{name:30s} {key}: failed: {str(e).splitlines()[0][:120]}", flush=True)
    if "ours" not in ok or "cudnn tf32" not in ok:
        return float("nan")
    from argus.runtime.timing import measure_alternating

    times = measure_alternating(list(ok.values()), rounds=1, trials=100, warmup=5)
    ms = {k: t.median_ms for k, t in zip(ok, times)}
    cells = "  ".join(f"{k} {ms[k]:8.4f} ms (err {errs[k]:.1e})" for k in ok)
    ratio = ms["cudnn tf32"] / ms["ours"]
    extra = "  ".join(f"cudnn/{k} {ms['cudnn tf32'] / ms[k]:5.2f}x" for k in ok
                      if k not in ("ours", "cudnn tf32"))
    sec = ms["ours"] * 1e-3
    print(f"{name:30s} {cells}  cudnn/ours {ratio:5.2f}x (ours {flops / sec / 1e9:.0f} GF/s, "
          f"{nbytes / sec / 1e9:.0f} GB/s)  {extra}", flush=True)
    return ratio


def cases(which: tuple[str, ...], before: bool) -> None:
    """--cases: the depthwise and pointwise convolutions under tf32 (fp32 NCHW inputs, as
    KernelBench passes them) through argus.ops.conv.convolve(precision="tf32") and its dispatch
    (`route`: "ours"), against cuDNN with TF32 on, in the same run; the depthwise rows also
    time compose's CUDA-core template ("compose dw", which compose's run_conv still runs for
    fp32 depthwise nodes: whether it should take the new kernel instead). `before` adds the
    implicit GEMM that both took at 2baa4ab (a ConvSchedule passed: "gemm")."""
    import types

    import torch
    import torch.nn.functional as F

    from argus.compose.conv import run_depthwise
    from argus.ops import conv as conv_ops

    ratios = []
    if "depthwise" in which:
        print("== depthwise fp32 NCHW under tf32: ours (route depthwise) vs cuDNN TF32")
        for name, N, C, H, W, mult, R, S, st, pad, dil in DEPTHWISE:
            g = torch.Generator(device="cuda").manual_seed(len(ratios))
            x = torch.randn(N, C, H, W, device="cuda", generator=g)
            w = torch.randn(C * mult, 1, R, S, device="cuda", generator=g) / math.sqrt(R * S)
            args = (None, st, pad, dil, C)
            ref = F.conv2d(x.double(), w.double(), *args)
            assert conv_ops.route(x, w, None, st, pad, C, precision="tf32") == "depthwise"
            node = types.SimpleNamespace(
                attrs={"dims": 2, "kernel": (R, S), "stride": (st, st), "padding": (pad, pad),
                       "dilation": (dil, dil), "transposed": False, "groups": C},
                shape=tuple(ref.shape), dtype=torch.float32)
            fns = {"ours": lambda: conv_ops.convolve(x, w, *args, precision="tf32"),
                   "cudnn tf32": _tf32_cudnn(lambda: F.conv2d(x, w, *args)),
                   "compose dw": lambda: run_depthwise(node, x, w, None)}
            if before:
                s = conv_ops.schedule_for(x, w, st, pad, dil, C, precision="tf32")
                fns["gemm"] = lambda: conv_ops.convolve(x, w, *args, schedule=s,
                                                        precision="tf32")
            ratios.append(_case_row(name, fns, ref, 2.0 * ref.numel() * R * S,
                                    4.0 * (x.numel() + ref.numel())))
    if "pointwise" in which:
        print("== pointwise 1x1 fp32 under tf32: ours (route pointwise: matmul's tf32 GEMM) "
              "vs cuDNN TF32")
        for name, N, C, H, W, K, cl in POINTWISE:
            g = torch.Generator(device="cuda").manual_seed(len(ratios))
            x = torch.randn(N, C, H, W, device="cuda", generator=g)
            if cl:
                x = x.to(memory_format=torch.channels_last)
            w = torch.randn(K, C, 1, 1, device="cuda", generator=g) / math.sqrt(C)
            ref = F.conv2d(x.double(), w.double())
            assert conv_ops.route(x, w, None, 1, 0, 1, precision="tf32") == "pointwise"
            fns = {"ours": lambda: conv_ops.convolve(x, w, precision="tf32"),
                   "cudnn tf32": _tf32_cudnn(lambda: F.conv2d(x, w))}
            if before:
                s = conv_ops.schedule_for(x, w, 1, 0, 1, 1, precision="tf32")
                fns["gemm"] = lambda: conv_ops.convolve(x, w, schedule=s, precision="tf32")
            ratios.append(_case_row(name, fns, ref, 2.0 * ref.numel() * C,
                                    4.0 * (x.numel() + ref.numel())))
    good = [r for r in ratios if r == r]
    if good:
        print(f"--cases geomean cudnn/ours: {math.exp(sum(map(math.log, good)) / len(good)):.3f}x "
              f"over {len(good)} rows")


# (name, N, C, H, W, K): ResNet-50's stride-1 1x1 convolutions at batch 32 (the v1.5
# bottlenecks' reductions and expansions; the first five are RESNET50's 1x1 rows, same names),
# bf16 channels-last unless the name says; the 1x1 / 2 projections stay on the implicit GEMM
POINTWISE_16 = [
    ("c2 1x1 64->64", 32, 64, 56, 56, 64),
    ("c2 1x1 64->256", 32, 64, 56, 56, 256),
    ("c3 1x1 512->128", 32, 512, 28, 28, 128),
    ("c4 1x1 1024->256", 32, 1024, 14, 14, 256),
    ("c5 1x1 512->2048", 32, 512, 7, 7, 2048),
    ("c2 1x1 256->64", 32, 256, 56, 56, 64),
    ("c3 1x1 128->512", 32, 128, 28, 28, 512),
    ("c4 1x1 256->1024", 32, 256, 14, 14, 1024),
    ("c5 1x1 2048->512", 32, 2048, 7, 7, 512),
    ("c4 1x1 1024->256 fp16", 32, 1024, 14, 14, 256),
    ("c4 1x1 1024->256 NCHW x", 32, 1024, 14, 14, 256),
]


# (name, N, C, H, W, K, R, S, stride, padding, bias, channels_last): convolutions of few input
# channels, which argus.ops.conv's im2col route takes (issue 17): ResNet-50's stem (the
# RESNET50 row) and AlexNet's 11x11/4 stem (KernelBench L1/50's layer, its batch 256, with its
# bias; and at batch 32), bf16; "fp32": fp32 under tf32 (KernelBench's own dtype for L1/50,
# an NCHW x as it passes it) against cuDNN TF32. A batch whose A passes IM2COL_MAX_BYTES runs
# in chunks ("ours"; the gather and GEMM columns time the whole batch's A at once); a row the
# route does not take is printed as such, without those two columns
STEMS = [
    ("stem 7x7/2 3->64 b32", 32, 3, 224, 224, 64, 7, 7, 2, 3, False, True),
    ("stem 7x7/2 3->64 b32 NCHW x", 32, 3, 224, 224, 64, 7, 7, 2, 3, False, False),
    ("L1/50 11x11/4 3->96 b256 bias", 256, 3, 224, 224, 96, 11, 11, 4, 2, True, True),
    ("11x11/4 3->96 b32 bias", 32, 3, 224, 224, 96, 11, 11, 4, 2, True, True),
    ("L1/50 fp32 tf32 b256 NCHW x", 256, 3, 224, 224, 96, 11, 11, 4, 2, True, False),
    ("L1/50 fp32 tf32 b256 ch-last", 256, 3, 224, 224, 96, 11, 11, 4, 2, True, True),
]


def _with_rows_kernel(choice: str | None, fn):
    """fn() with argus.ops.conv.IM2COL_GATHER = choice (None: as it is), restored after:
    which kernels gather the row runs (channels-last x) and plane runs (NCHW x): "warp",
    "pixels", "staged" or "span"."""
    from argus.ops import conv as conv_ops

    if choice is None:
        return fn()
    before = conv_ops.IM2COL_GATHER
    conv_ops.IM2COL_GATHER = choice
    try:
        return fn()
    finally:
        conv_ops.IM2COL_GATHER = before


def gather_choices(spec: str | None) -> tuple[str, ...]:
    """--gather's kernels in order: a comma-separated list of argus.ops.conv.IM2COL_GATHERS
    ("warp", "pixels", "staged", "span"), "both" standing for warp,pixels; () for None (as
    it is)."""
    from argus.ops.conv import IM2COL_GATHERS

    out: list[str] = []
    for v in (spec or "").split(","):
        v = v.strip()
        for kind in (("warp", "pixels") if v == "both" else (v,) if v else ()):
            if kind not in IM2COL_GATHERS:
                raise SystemExit(f"--gather: unknown gather {kind!r}; choose from "
                                 f"{', '.join(IM2COL_GATHERS)} or both (= warp,pixels), "
                                 f"comma-separated")
            if kind not in out:
                out.append(kind)
    return tuple(out)


def stems(gather_choice: str | None = None) -> None:
    """--stem: the STEMS layers (bf16; fp32 rows under tf32 against cuDNN with TF32 on) on
    argus.ops.conv's im2col route ("ours": `convolve`, routed to the gather kernel + matmul's
    GEMM), on the implicit GEMM they took before (a ConvSchedule passed: "implicit",
    schedule_for's), against cuDNN (channels-last weight; x as the row says), in one run
    (L2 flushed, alternating rounds); then the
    route's two kernels alone on fixed operands (prepared launches, no host work): "gather"
    and "gemm" (their sum against "ours" is the host overhead). Each column's normwise error
    against float64 first (a wrong column is reported, not timed); the geomeans of
    cudnn/ours and cudnn/implicit over the rows.

    `gather_choice` (--gather): which kernels gather the row runs (channels-last x) and plane
    runs (NCHW x) (IM2COL_GATHER): "warp" (one pixel a warp), "pixels" (one pixel a thread,
    ag.gather and 16-byte stores), "staged" (the pixel kernel with each CTA's rows of A staged
    in shared memory and TMA-stored), "span" (the staged kernel reading each filter row's
    input span once a CTA into shared memory and gathering the pixels' values from there), or
    several, comma-separated ("both" = warp,pixels): the
    rows a row- or plane-run gather serves then get "ours" and "gather" for each, as
    "ours[warp]" / "gather[warp]", "ours[staged]" / "gather[staged]", ... (each on its own
    copy of x, so the route's replay of one never serves the other); the geomean line's "ours"
    is the first one's."""
    import torch
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops
    from argus.runtime.timing import measure_alternating

    kinds = gather_choices(gather_choice)
    if len(kinds) == 1:                        # the whole run on one row-run kernel
        conv_ops.IM2COL_GATHER = kinds[0]
    print(f"row- and plane-run gathers: {gather_choice or conv_ops.IM2COL_GATHER} "
          "(argus.ops.conv.IM2COL_GATHER)")
    print("== few-channel stems (bf16; fp32 rows: tf32): ours (route im2col: gather + "
          "matmul's GEMM) vs implicit GEMM vs cuDNN; the gather and the GEMM alone")
    ratios: dict[str, list] = {"cudnn/ours": [], "cudnn/implicit": []}
    for i, (name, N, C, H, W, K, R, S, st, pad, bias, cl) in enumerate(STEMS):
        g = torch.Generator(device="cuda").manual_seed(200 + i)
        dtype = torch.float32 if "fp32" in name else torch.bfloat16
        prec = "tf32" if dtype == torch.float32 else None
        x = torch.randn(N, C, H, W, device="cuda", generator=g).to(dtype)
        if cl:
            x = x.to(memory_format=torch.channels_last)
        w = (torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)) \
            .to(dtype).to(memory_format=torch.channels_last)
        b = torch.randn(K, device="cuda", generator=g).to(dtype) if bias else None
        kind = conv_ops.route(x, w, b, st, pad, 1, precision=prec)
        gather_kind = conv_ops._Gather.of(x, w, st, pad, 1)
        print(f"{name:32s} route {kind}; gather {gather_kind.kind} "
              f"{gather_kind.tile}, A {gather_kind.m} x {gather_kind.pitch} "
              f"({gather_kind.m * gather_kind.pitch * x.element_size() / 1e6:.0f} MB, "
              f"bound {conv_ops.IM2COL_MAX_BYTES / 1e6:.0f} MB)", flush=True)
        ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), st, pad)
        sched = conv_ops.schedule_for(x, w, st, pad, 1, 1, precision=prec)
        cudnn = lambda: F.conv2d(x, w, b, st, pad)       # noqa: E731
        fns = {"ours": lambda: conv_ops.convolve(x, w, b, st, pad, precision=prec),
               "implicit": lambda: conv_ops.convolve(x, w, b, st, pad, schedule=sched,
                                                     precision=prec),
               "cudnn": _tf32_cudnn(cudnn) if prec else cudnn}
        choices: list = [None]
        if kind == "im2col" and gather_kind.kind != "taps" and len(kinds) > 1:
            del fns["ours"]
            choices = list(kinds)
        for choice in choices if kind == "im2col" else ():
            tag = f"[{choice}]" if choice else ""
            xc = x.clone() if tag else x      # its own x: the route's replay is per x
            if tag:
                fns["ours" + tag] = (lambda xc=xc, choice=choice: _with_rows_kernel(
                    choice, lambda: conv_ops.convolve(xc, w, b, st, pad, precision=prec)))
            gather, gemm, keep = _with_rows_kernel(
                choice, lambda xc=xc: _im2col_steps(xc, w, b, st, pad))
            fns["gather" + tag] = lambda gather=gather, keep=keep: (gather(), keep)
            if "gemm" not in fns:              # the same GEMM whichever kernel gathered
                fns["gemm"] = lambda gemm=gemm, keep=keep: (gemm(), keep)
        errs, ok = {}, {}
        for key, f in fns.items():
            try:
                y = f()
                errs[key] = 0.0 if key.startswith(("gather", "gemm")) else _norm_rel(y, ref)
            except Exception as e:  # noqa: BLE001 - a failing column is reported, the row goes on
                print(f"{name:32s} {key}: failed: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            if errs[key] > 1e-2:
                print(f"{name:32s} {key}: WRONG (normwise error {errs[key]:.1e})", flush=True)
                continue
            ok[key] = f
        times = measure_alternating(list(ok.values()), rounds=3, trials=100, warmup=10)
        ms = {k: t.median_ms for k, t in zip(ok, times)}
        flops = 2.0 * ref.numel() * C * R * S
        cells = "  ".join(f"{k} {ms[k]:7.4f} ms" + (f" (err {errs[k]:.1e})" if not
                          k.startswith(("gather", "gemm")) else "") for k in ok)
        for tag in (f"[{k}]" for k in kinds):  # several gathers: each kernel's ratios
            if "ours" + tag in ms and "cudnn" in ms:
                cells += f"  cudnn/ours{tag} {ms['cudnn'] / ms['ours' + tag]:5.2f}x"
        mine = [ms["ours" + f"[{k}]"] for k in kinds if "ours" + f"[{k}]" in ms]
        if "ours" not in ms and mine:          # the geomeans' "ours": the first gather's
            ms["ours"] = mine[0]
        for label in ratios:
            theirs, mine = label.split("/")
            if theirs in ms and mine in ms:
                ratios[label].append(ms[theirs] / ms[mine])
        pairs = "  ".join(f"{label} {ms[label.split('/')[0]] / ms[label.split('/')[1]]:5.2f}x"
                          for label in ratios if all(k in ms for k in label.split("/")))
        tf = flops / (ms["ours"] * 1e-3) / 1e12 if "ours" in ms else float("nan")
        print(f"{name:32s} {cells}  {pairs}  (ours {tf:.1f} useful TF/s)", flush=True)
    for label, rs in ratios.items():
        if rs:
            print(f"geomean {label}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over "
                  f"{len(rs)} rows")


def pointwise16(tune: bool) -> None:
    """--pointwise16: ResNet-50's stride-1 1x1 convolutions in bf16 (channels-last, batch 32;
    one fp16 row, one NCHW-input row) on argus.ops.conv's pointwise route ("ours":
    `convolve`, routed to matmul's 16-bit GEMM on x's [N*H*W, C] view), on the implicit GEMM
    they took before (a ConvSchedule passed: "implicit", schedule_for's), against cuDNN, in one
    run (L2 flushed, alternating rounds); then the same GEMM alone: argus.ops.matmul into a
    preallocated output ("gemm": its replayed launch, no conv host path) and cuBLAS
    (torch.matmul, "cublas"), which bound what the route can reach, and for 64 output
    channels the GEMM on a 128x64 tile ("gemm 128x64": not among matmul's candidates for so
    many rows, which all compute 128 or more columns a tile). Each column's normwise
    error against float64 first (a wrong column is reported, not timed). `tune`: tune_matmul
    each GEMM problem first (records the winner in the tuning cache, which the route reads)."""
    import torch
    import torch.nn.functional as F

    from argus.kernels.gemm import GemmSchedule
    from argus.ops import conv as conv_ops
    from argus.ops import matmul as ops_matmul
    from argus.ops import tune_matmul
    from argus.ops.matmul import forget_choices
    from argus.runtime.timing import measure_alternating

    print("== ResNet-50 1x1 (stride 1), bf16 channels-last, batch 32: ours (route pointwise: "
          "matmul's GEMM) vs implicit GEMM vs cuDNN; the GEMM alone vs cuBLAS")
    ratios: dict[str, list] = {"cudnn/ours": [], "cudnn/implicit": [], "cublas/gemm": [],
                               "gemm/ours": []}
    for i, (name, N, C, H, W, K) in enumerate(POINTWISE_16):
        dtype = torch.float16 if "fp16" in name else torch.bfloat16
        g = torch.Generator(device="cuda").manual_seed(100 + i)
        x = torch.randn(N, C, H, W, device="cuda", generator=g).to(dtype)
        if "NCHW" not in name:
            x = x.to(memory_format=torch.channels_last)
        w = (torch.randn(K, C, 1, 1, device="cuda", generator=g) / math.sqrt(C)).to(dtype)
        assert conv_ops.route(x, w, None, 1, 0, 1) == "pointwise", name
        M = N * H * W
        A = x.permute(0, 2, 3, 1).reshape(M, C)        # a view when channels-last
        if A.stride(-1) != 1:
            A = A.contiguous()
        Wk = w.reshape(K, C)
        c = torch.empty(M, K, device="cuda", dtype=dtype)
        if tune:
            result = tune_matmul(A, Wk.t(), c, progress=None)
            print(f"{name:26s} tuned {result.problem.key}: {result.best_ms * 1e3:.1f} us "
                  f"{result.best}", flush=True)
            forget_choices()
            conv_ops._POINTWISE.clear()
            conv_ops._REPEATS.clear()
        ref = F.conv2d(x.double(), w.double())
        sched = conv_ops.schedule_for(x, w, 1, 0, 1, 1)
        fns = {"ours": lambda: conv_ops.convolve(x, w),
               "implicit": lambda: conv_ops.convolve(x, w, schedule=sched),
               "cudnn": lambda: F.conv2d(x, w),
               "gemm": lambda: ops_matmul(A, Wk.t(), c),
               "cublas": lambda: torch.matmul(A, Wk.t())}
        if K <= 64:
            # matmul's candidates have no tile narrower than 128 columns for M > 256, so an
            # N = 64 GEMM computes half its wgmma columns on padding: does a 128x64 tile pay?
            narrow = GemmSchedule(bm=128, bn=64, stages=6, epilogue="tma")
            fns["gemm 128x64"] = lambda: ops_matmul(A, Wk.t(), c, schedule=narrow)
        errs, ok = {}, {}
        for key, f in fns.items():
            try:
                y = f()
                y = y.view(N, H, W, K).permute(0, 3, 1, 2) if y.dim() == 2 else y
                errs[key] = _norm_rel(y, ref)
            except Exception as e:  # noqa: BLE001 - a failing column is reported, the row goes on
                print(f"{name:26s} {key}: failed: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            if errs[key] > 1e-2:
                print(f"{name:26s} {key}: WRONG (normwise error {errs[key]:.1e})", flush=True)
                continue
            ok[key] = f
        chosen, _ = conv_ops.pointwise_gemm(A, Wk, c)
        print(f"{name:26s} GEMM {M}x{K}x{C}: {chosen}", flush=True)
        times = measure_alternating(list(ok.values()), rounds=3, trials=100, warmup=20)
        ms = {k: t.median_ms for k, t in zip(ok, times)}
        flops = 2.0 * M * K * C
        cells = "  ".join(f"{k} {ms[k]:7.4f} ms ({flops / (ms[k] * 1e-3) / 1e12:5.1f} TF/s, "
                          f"err {errs[k]:.1e})" for k in ok)
        for label in ratios:
            theirs, mine = label.split("/")
            if theirs in ms and mine in ms:
                ratios[label].append(ms[theirs] / ms[mine])
        pairs = "  ".join(f"{label} {ms[label.split('/')[0]] / ms[label.split('/')[1]]:5.2f}x"
                          for label in ratios if all(k in ms for k in label.split("/")))
        print(f"{name:26s} {cells}  {pairs}", flush=True)
    for label, rs in ratios.items():
        if rs:
            print(f"geomean {label}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over "
                  f"{len(rs)} rows")


def profile(layer: str) -> None:
    """Where one ResNet layer's time goes: torch.profiler over 20 calls of ops.conv2d and 20 of
    F.conv2d (bf16, channels-last), the CUDA kernels by total GPU time, and the host time per
    call of each (wall time of the calls without synchronizing, divided by 20)."""
    import time

    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import argus.ops as ops

    row = next((r for r in RESNET50 if r[0] == layer), None)
    if row is None:
        raise SystemExit(f"--profile: no layer {layer!r}; one of {[r[0] for r in RESNET50]}")
    name, N, C, H, W, K, R, S, st, pad = row
    x = torch.randn(N, C, H, W, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, device="cuda") / math.sqrt(C * R * S)).bfloat16() \
        .to(memory_format=torch.channels_last)
    for label, fn in (("ours", lambda: ops.conv2d(x, w, None, st, pad)),
                      ("cudnn", lambda: F.conv2d(x, w, None, st, pad))):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        host_ms = (time.perf_counter() - t0) / 20 * 1e3
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        print(f"== {name} {label}: host {host_ms:.4f} ms per call (launch side, unsynchronized)")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few layers, batch 1 tasks")
    ap.add_argument("--kernelbench", type=Path, default=Path("/work/shared/kernelbench"),
                    help="KernelBench checkout (its level1/*conv*.py are read, not copied)")
    ap.add_argument("--skip-kernelbench", action="store_true")
    ap.add_argument("--fp32", action="store_true", help="also the fp32 table (split vs cuDNN "
                                                        "with TF32 off and on)")
    ap.add_argument("--variants", nargs="?", const=",".join(VARIANTS), default=None,
                    metavar="LIST",
                    help="the quick layers' kernel alone under neighbouring schedules, and "
                         f"stop; LIST: comma-separated rows of {','.join(VARIANTS)} (all)")
    ap.add_argument("--rowbox", action="store_true",
                    help="all ResNet-50 layers, kernel alone: the default (rowbox where it "
                         "applies) vs rowbox=False vs cuDNN, and stop")
    ap.add_argument("--dry", action="store_true",
                    help="with --rowbox: no GPU; build what the 'op' column runs per layer "
                         "on meta tensors and print its route and schedule")
    ap.add_argument("--unet", action="store_true",
                    help="UNet-like layers (bf16, channels-last): ops.conv2d and "
                         "conv_transpose2d as called vs cuDNN; with --dry, built on meta "
                         "tensors without a GPU")
    ap.add_argument("--strided", action="store_true",
                    help="ResNet-50's strided layers, kernel alone: the default vs the strided "
                         "rowbox (opt-in) vs cuDNN, and stop")
    ap.add_argument("--profile", metavar="LAYER", default=None,
                    help="profile one ResNet layer (e.g. 'c4 3x3 256') and stop")
    ap.add_argument("--cases", metavar="LIST", default=None,
                    help="the depthwise / pointwise convolutions under tf32 against cuDNN "
                         f"TF32 (comma-separated of {','.join(CASES)}), and stop")
    ap.add_argument("--pointwise16", action="store_true",
                    help="ResNet-50's stride-1 1x1 layers in bf16: the pointwise route vs the "
                         "implicit GEMM vs cuDNN, the GEMM alone vs cuBLAS, and stop")
    ap.add_argument("--stem", action="store_true",
                    help="the few-channel stems (ResNet-50's 7x7/2, AlexNet's 11x11/4: "
                         "KernelBench L1/50) in bf16: the im2col route vs the implicit GEMM vs "
                         "cuDNN, the gather and the GEMM alone, and stop")
    ap.add_argument("--gather", default=None, metavar="LIST",
                    help="with --stem: the kernels that gather the row / plane runs of a "
                         "channels-last / NCHW x (argus.ops.conv.IM2COL_GATHER: warp, pixels, "
                         "staged; default: as it is), or several side by side, comma-separated "
                         "('both' = warp,pixels; ours[...] and gather[...] columns)")
    ap.add_argument("--tune", action="store_true",
                    help="with --pointwise16: tune_matmul each GEMM problem first")
    ap.add_argument("--before", action="store_true",
                    help="with --cases: also time the implicit GEMM both took before the "
                         "dispatch (a ConvSchedule passed)")
    args = ap.parse_args()
    if args.cases:
        which = tuple(v.strip() for v in args.cases.split(",") if v.strip())
        bad = [v for v in which if v not in CASES]
        if bad:
            raise SystemExit(f"--cases: unknown {bad}; choose from {CASES}")
        cases(which, args.before)
        return
    if args.pointwise16:
        pointwise16(args.tune)
        return
    if args.stem:
        stems(args.gather)
        return
    if args.profile:
        profile(args.profile)
        return
    if args.unet and not args.variants:
        unet(args.dry)
        return
    if args.rowbox:
        if args.dry:
            rowbox_dry()
        else:
            rowbox_table()
        return
    if args.strided:
        strided_table()
        return
    if args.variants:
        which = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        bad = [v for v in which if v not in VARIANTS]
        if bad:
            raise SystemExit(f"--variants: unknown rows {bad}; choose from {VARIANTS}")
        variants(which, "unet" if args.unet else "resnet")
        return
    ratios = resnet(args.quick)
    if args.fp32:
        fp32(args.quick)
    if ratios:
        print(f"ResNet-50 geomean cudnn/ours: "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x")
    if not args.skip_kernelbench and args.kernelbench.exists():
        kb = kernelbench(args.kernelbench, args.quick)
        if kb:
            print(f"KernelBench conv geomean cudnn/ours: "
                  f"{math.exp(sum(map(math.log, kb)) / len(kb)):.3f}x over {len(kb)} rows")


if __name__ == "__main__":
    main()
