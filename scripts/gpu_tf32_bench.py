"""tf32 on the GPU: Argus's tf32 products (wgmma `.tf32`) against cuBLAS / cuDNN with TF32 on,
in one run, with every result checked against float64.

GEMM: argus.ops.matmul(a, b, precision="tf32") vs torch.matmul with
torch.backends.cuda.matmul.allow_tf32 = True, three rows per shape, every time including our
rounding passes (argus.ops.matmul.tf32_operands: both operands rounded to tf32 to nearest, as
cuBLAS does): "x@W.T" (W [N, K] a plain tensor: A and W each rounded every call), "x@W" (a
plain [K, N] W, rounded and made K-major every call: a transient B), "x@W param" (W an
nn.Parameter [K, N]: rounded and made K-major once, kept per version by argus/ops/weight_cache,
so repeated calls round only A). After each shape, the A pass alone (ms, GB/s). Convolution: argus.ops.conv.convolve(...,
precision="tf32") (compose's ConvRun(precision="tf32"), `argus kernelbench solve --precision
tf32`) vs F.conv* with torch.backends.cudnn.allow_tf32 = True (PyTorch eager's default for
convolutions: what KernelBench's fp32 conv tasks are timed against), on fp32 ResNet-50 layers
(NCHW, as the tasks pass them) and on the KernelBench level-1 convolution tasks (read from the
checkout at run time; nothing of it is copied here), plus the strict split (6 terms) for scale.

Each row: median ms (argus.runtime.timing.measure_alternating: L2 flushed, alternating
rounds), TF/s, the ratio theirs / ours (> 1: we are faster), and the normwise relative error of
each against float64 (tf32 on signed data: ~3e-4; a row whose error exceeds 5e-3 is marked BAD).

    python scripts/gpu_tf32_bench.py --quick      # 3 GEMMs, 3 ResNet layers, 2-d tasks, batch 1
    python scripts/gpu_tf32_bench.py              # everything (minutes)
    python scripts/gpu_tf32_bench.py --quick --skip-kernelbench --no-gemm
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GEMMS = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 7168, 2048), (128, 8192, 8192),
         (16, 8192, 8192), (4095, 4097, 4096)]
QUICK_GEMMS = [(4096, 4096, 4096), (128, 8192, 8192), (4095, 4097, 4096)]
# (name, N, C, H, W, K, R, S, stride, padding): ResNet-50 convolutions at batch 32
RESNET50 = [
    ("stem 7x7/2", 32, 3, 224, 224, 64, 7, 7, 2, 3),
    ("c2 3x3 64", 32, 64, 56, 56, 64, 3, 3, 1, 1),
    ("c2 1x1 64->256", 32, 64, 56, 56, 256, 1, 1, 1, 0),
    ("c3 3x3 128", 32, 128, 28, 28, 128, 3, 3, 1, 1),
    ("c4 3x3 256", 32, 256, 14, 14, 256, 3, 3, 1, 1),
    ("c4 1x1 1024->256", 32, 1024, 14, 14, 256, 1, 1, 1, 0),
    ("c5 3x3 512", 32, 512, 7, 7, 512, 3, 3, 1, 1),
]
QUICK_LAYERS = ("c2 3x3 64", "c3 3x3 128", "c4 3x3 256")
BAD = 5e-3


def _rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@functools.lru_cache(maxsize=None)
def _tf32_flags():
    import torch

    return torch.backends.cuda.matmul, torch.backends.cudnn


def _with_tf32(fn):
    """fn with cuBLAS's and cuDNN's TF32 switches on for the call (restored after)."""
    def call(*a, **k):
        matmul, cudnn = _tf32_flags()
        old = matmul.allow_tf32, cudnn.allow_tf32
        matmul.allow_tf32 = cudnn.allow_tf32 = True
        try:
            return fn(*a, **k)
        finally:
            matmul.allow_tf32, cudnn.allow_tf32 = old
    return call


def _time(fns: dict, quick: bool) -> dict:
    from argus.runtime.timing import measure_alternating

    for f in fns.values():
        f()
    times = measure_alternating(list(fns.values()), rounds=1 if quick else 3, trials=100,
                                warmup=5 if quick else 20)
    return {k: t.median_ms for k, t in zip(fns, times)}


def _print(name: str, ms: dict, errs: dict, flops: float, ours: str, theirs: str) -> float:
    cells = "  ".join(f"{k} {ms[k]:8.4f} ms ({flops / (ms[k] * 1e-3) / 1e12:6.1f} TF/s, err "
                      f"{errs[k]:.1e}{' BAD' if errs[k] > BAD else ''})" for k in ms)
    ratio = ms[theirs] / ms[ours]
    print(f"{name:44s} {cells}  {theirs}/{ours} {ratio:5.2f}x", flush=True)
    return ratio


def gemm(quick: bool) -> list[float]:
    import torch

    from argus.ops import matmul
    from argus.ops.matmul import tf32_operands

    print("== GEMM fp32 inputs: ours tf32 vs cuBLAS TF32 on")
    ratios = []
    for m, n, k in QUICK_GEMMS if quick else GEMMS:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", generator=g)
        for layout in ("x@W.T", "x@W", "x@W param"):
            w = torch.randn(n, k, device="cuda", generator=g) if layout == "x@W.T" else \
                torch.randn(k, n, device="cuda", generator=g)
            b = w.T if layout == "x@W.T" else w
            if layout == "x@W param":
                b = torch.nn.Parameter(w)
            ref = a.double() @ b.detach().double()
            out = torch.empty(m, n, device="cuda")
            fns = {"ours tf32": lambda: matmul(a, b, out, precision="tf32"),
                   "cublas tf32": _with_tf32(lambda: torch.matmul(a, b.detach()))}
            errs = {key: _rel(f(), ref) for key, f in fns.items()}
            ms = _time(fns, quick)
            ratios.append(_print(f"{m}x{n}x{k} {layout}", ms, errs, 2.0 * m * n * k,
                                 "ours tf32", "cublas tf32"))
        ms = _time({"A pass": lambda: tf32_operands(a, b)}, quick)["A pass"]
        print(f"{'':44s} A's rounding pass alone (B kept): {ms:8.4f} ms "
              f"({2 * a.numel() * 4 / (ms * 1e-3) / 1e9:6.0f} GB/s)", flush=True)
    return ratios


def resnet(quick: bool) -> list[float]:
    import torch
    import torch.nn.functional as F

    from argus.ops.conv import convolve

    print("== ResNet-50 layers, fp32 NCHW, batch 32: ours tf32 (and the strict 6-term split) "
          "vs cuDNN TF32 on")
    ratios = []
    for name, N, C, H, W, K, R, S, st, pad in RESNET50:
        if quick and name not in QUICK_LAYERS:
            continue
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(N, C, H, W, device="cuda", generator=g)
        w = torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)
        ref = F.conv2d(x.double(), w.double(), None, st, pad)
        fns = {"ours tf32": lambda: convolve(x, w, None, st, pad, precision="tf32"),
               "ours split6": lambda: convolve(x, w, None, st, pad, terms=6),
               "cudnn tf32": _with_tf32(lambda: F.conv2d(x, w, None, st, pad))}
        errs = {key: _rel(f(), ref) for key, f in fns.items()}
        ms = _time(fns, quick)
        ratios.append(_print(name, ms, errs, 2.0 * ref.numel() * C * R * S, "ours tf32",
                             "cudnn tf32"))
    return ratios


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tf32_conv(conv):
    """The tf32 form of a KernelBench task's convolution module: (ours, cuDNN's, args), or
    None when ours has no form for it."""
    import torch.nn as nn
    import torch.nn.functional as F

    import argus.ops as ops
    from argus.ops.conv import convolve

    run = functools.partial(convolve, precision="tf32")
    if isinstance(conv, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        args = (conv.stride, conv.padding, conv.output_padding, conv.groups, conv.dilation)
        ours, theirs = {nn.ConvTranspose1d: (ops.conv_transpose1d, F.conv_transpose1d),
                        nn.ConvTranspose2d: (ops.conv_transpose2d, F.conv_transpose2d),
                        nn.ConvTranspose3d: (ops.conv_transpose3d, F.conv_transpose3d)
                        }[type(conv)]
        return functools.partial(ours, run=run), theirs, args
    args = (conv.stride, conv.padding, conv.dilation, conv.groups)
    if isinstance(conv, nn.Conv1d):
        def conv1d(x, w, b, stride, padding, dilation, groups):
            return run(x.unsqueeze(2), w.unsqueeze(2), b, (1, stride[0]), (0, padding[0]),
                       (1, dilation[0]), groups).squeeze(2)
        return conv1d, F.conv1d, args
    if isinstance(conv, (nn.Conv2d, nn.Conv3d)):
        return run, F.conv2d if isinstance(conv, nn.Conv2d) else F.conv3d, args
    return None


def kernelbench(root: Path, quick: bool) -> list[float]:
    import torch

    from argus.errors import LaunchError

    ratios = []
    files = sorted((root / "level1").glob("*conv*.py"), key=lambda p: int(p.stem.split("_")[0]))
    print(f"== KernelBench level 1 convolution tasks in fp32 ({root}): ours tf32 vs cuDNN TF32 "
          f"on (eager's default); batch 1 with --quick")
    for path in files:
        if quick and "2D" not in path.stem:
            continue
        mod = _load(path)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).cuda()
        conv = next((m for m in model.modules()
                     if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
        form = None if conv is None or isinstance(conv.padding, str) else _tf32_conv(conv)
        name = path.stem[:44]
        if form is None:
            print(f"{name:44s} skipped: {type(conv).__name__} / padding not handled here")
            continue
        ours, theirs, args = form
        x = [t.cuda() for t in mod.get_inputs()][0].float()
        x = x[:1] if quick else x
        w = conv.weight.detach().float()
        b = None if conv.bias is None else conv.bias.detach().float()
        ref = theirs(x.double(), w.double(), None if b is None else b.double(), *args)
        fns = {"ours tf32": lambda: ours(x, w, b, *args),
               "cudnn tf32": _with_tf32(lambda: theirs(x, w, b, *args))}
        try:
            errs = {key: _rel(f(), ref) for key, f in fns.items()}
        except LaunchError as e:
            print(f"{name:44s} skipped: {str(e).splitlines()[0][:100]}")
            continue
        ms = _time(fns, quick)
        ratios.append(_print(name, ms, errs, 2.0 * ref.numel() * w[0].numel(), "ours tf32",
                             "cudnn tf32"))
    return ratios


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few shapes, batch 1 tasks")
    ap.add_argument("--kernelbench", type=Path, default=Path("/work/shared/kernelbench"),
                    help="KernelBench checkout (its level1/*conv*.py are read, not copied)")
    ap.add_argument("--skip-kernelbench", action="store_true")
    ap.add_argument("--no-gemm", action="store_true")
    ap.add_argument("--no-resnet", action="store_true")
    args = ap.parse_args()
    summary = {}
    if not args.no_gemm:
        summary["GEMM cublas/ours"] = gemm(args.quick)
    if not args.no_resnet:
        summary["ResNet-50 fp32 cudnn/ours"] = resnet(args.quick)
    if not args.skip_kernelbench and args.kernelbench.exists():
        summary["KernelBench conv fp32 cudnn/ours"] = kernelbench(args.kernelbench, args.quick)
    for label, ratios in summary.items():
        if ratios:
            print(f"{label} geomean: {_geomean(ratios):.3f}x over {len(ratios)} rows")


if __name__ == "__main__":
    main()
