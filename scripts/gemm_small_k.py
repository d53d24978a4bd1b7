"""ResNet-50's stride-1 1x1 convolutions as GEMMs (issue 17): argus.ops.matmul's schedule
candidates for these small-K, memory-bound problems, checked on the CPU and timed on the GPU
against cuBLAS (torch.matmul) and cuDNN (the convolution itself) in the same run.

A bf16 channels-last 1x1 convolution, stride 1, no padding, is the GEMM
out [N*H*W, K_out] = x [N*H*W, C] @ W [K_out, C]^T, which argus.ops.conv's pointwise route runs
on matmul's kernel with the untuned model's schedule (argus/ops/gemm_model.py). That model was
fitted on K >= 1000 and has no DRAM term: at K = 64 it predicts 3-6 us where the route measured
16-23 us (docs/perf/conv.md "The pointwise route measured", "1x1 layers: the op's route and
small-K GEMM candidates"). CANDIDATES are the tiles such a problem may want (128x64 for
N = 64: no padding columns; ping-pong so one tile's epilogue runs under the other's loads and
MMAs; deep rings so the producer runs several tiles ahead; TMA-store epilogues), none of them a
default: `--gpu` times them so a rule can be picked from data.

    .venv/bin/python scripts/gemm_small_k.py --check      # CPU: every candidate verified
                                                          # (0 findings) and built by NVRTC
                                                          # for sm_90a (registers, spills)
    python scripts/gemm_small_k.py --gpu                  # GPU: per shape the op (ops.conv2d),
                                                          # the untuned pick, every candidate,
                                                          # cuBLAS and cuDNN, L2 flushed,
                                                          # alternating rounds; geomeans
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, N, C, H, W, K_out, dtype): ResNet-50's stride-1 1x1 convolutions at batch 32 (the
# v1.5 bottlenecks' reductions and expansions; scripts/gpu_conv_bench.py's POINTWISE_16 rows),
# channels-last; the GEMM is M = N*H*W, K = C, N = K_out
SHAPES = [
    ("c2 1x1 64->64", 32, 64, 56, 56, 64, "bf16"),
    ("c2 1x1 64->256", 32, 64, 56, 56, 256, "bf16"),
    ("c2 1x1 256->64", 32, 256, 56, 56, 64, "bf16"),
    ("c3 1x1 512->128", 32, 512, 28, 28, 128, "bf16"),
    ("c3 1x1 128->512", 32, 128, 28, 28, 512, "bf16"),
    ("c4 1x1 1024->256", 32, 1024, 14, 14, 256, "bf16"),
    ("c4 1x1 256->1024", 32, 256, 14, 14, 1024, "bf16"),
    ("c5 1x1 512->2048", 32, 512, 7, 7, 2048, "bf16"),
    ("c5 1x1 2048->512", 32, 2048, 7, 7, 512, "bf16"),
    ("c4 1x1 1024->256 fp16", 32, 1024, 14, 14, 256, "f16"),
]


def candidates() -> dict:
    """label -> GemmSchedule: tiles for a memory-bound GEMM of small K, each with a ring of
    at least ~24 KB a stage and 5-8 stages (with K = 64 a tile is one pipeline step, so the
    producer of the persistent walk loads up to `stages` tiles ahead: 96-192 KB of A in flight
    an SM, against the ~32 KB that HBM's latency x bandwidth needs) and the TMA-store epilogue
    (its bulk stores run while the next tile is multiplied; the read-wait is deferred to the
    next stmatrix into the slot). Shared memory: ring + staging within the 225 KB a CTA may
    opt into (the build refuses a schedule past it)."""
    from argus.kernels.gemm import GemmSchedule as G

    return {
        # N = 64 (c2 64->64, 256->64): a 64-wide tile computes no padding columns
        "coop 128x64 tma s8": G(bm=128, bn=64, stages=8, epilogue="tma"),
        "pp 128x64 tma s8": G(bm=128, bn=64, stages=8, pingpong=True, epilogue="tma"),
        "pp 128x64 direct s8": G(bm=128, bn=64, stages=8, pingpong=True),
        "1wg 64x64 tma s12": G(bm=64, bn=64, consumers=1, stages=12, epilogue="tma"),
        # 128-wide tiles: the cooperative one with the whole tile staged, the ping-pong with
        # 64-row tiles (two tiles in flight, each epilogue under the other's turn)
        "coop 128x128 tma s6": G(bm=128, bn=128, stages=6, epilogue="tma"),
        "pp 64x128 tma s8": G(bm=64, bn=128, stages=8, pingpong=True, epilogue="tma"),
        "1wg 64x128 tma s8": G(bm=64, bn=128, consumers=1, stages=8, epilogue="tma"),
        # 256-wide (N = 256 .. 2048): ping-pong 64x256 staged in 64-column rounds
        "pp 64x256 tma s5 cols64": G(bm=64, bn=256, stages=5, pingpong=True, epilogue="tma",
                                     store_cols=64),
        # the one of candidates() (the heuristic's tile for large M): the cooperative
        # reference, for the shapes whose untuned pick is another tile
        "coop 128x256 tma s3": G(bm=128, bn=256, stages=3, epilogue="tma"),
    }


def problem_for(shape):
    """matmul's Problem of a SHAPES row (what the pointwise route's GEMM keys on)."""
    from argus.ops.schedules import Problem

    name, N, C, H, W, K, dt = shape
    return Problem(N * H * W, K, C, 1, dt, dt, "nk", True)


def interpret_error(s, dt: str = "bf16", m: int = 300, n: int = 200, k: int = 72) -> float:
    """Max relative error against float64 of the GEMM under schedule `s` in the numpy
    interpreter (CPU) on a ragged problem: partial tiles in M and N, a K tail (72 = 64 + 8)."""
    import torch

    import argus as ag
    from argus.kernels.gemm import gemm_kernel

    g = torch.Generator().manual_seed(0)
    dtype, adt = (torch.float16, ag.f16) if dt == "f16" else (torch.bfloat16, ag.bf16)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, k, generator=g).to(dtype)
    c = torch.zeros(m, n, dtype=dtype)
    gemm_kernel(adt, adt, "nk", False).interpret(a, b, c, s=s)
    ref = a.double() @ b.double().t()
    return ((c.double() - ref).abs().max() / ref.abs().max()).item()


def check(verify_kernels: bool) -> int:
    """Every candidate (and each shape's untuned pick) for both dtypes: the interpreter's
    error against float64 (`interpret_error`; rounding the output costs up to 2^-8 relative in
    bf16, 2^-11 in fp16: bounds 8e-3 and 1e-3), the verifier's findings (errors and unknowns;
    0 / 0 is the bar) and the NVRTC sm_90a build's registers and spill bytes. The GEMM kernel
    takes M, N, K at run time, so one build serves every shape."""
    from argus import verify
    from argus.compiler import compile_kernel, lower_only
    from argus.ops.schedules import kernel_for, untuned

    scheds = dict(candidates())
    for shape in SHAPES:
        pick = untuned(problem_for(shape))
        if pick not in scheds.values():
            scheds[f"untuned pick ({shape[0]})"] = pick
    bad = 0
    for dt in ("bf16", "f16"):
        p = problem_for(("", 32, 64, 56, 56, 64, dt))
        for label, s in scheds.items():
            kernel, run = kernel_for(p, s)
            t0 = time.perf_counter()
            try:
                err = interpret_error(run, dt)
                if verify_kernels:
                    report = verify.run(lower_only(kernel, s=run))
                    errors = [d.code for d in report.errors]
                    unknown = [d.code for d in report.unknowns]
                    proven = len(report.proven)
                res = compile_kernel(kernel, verify=False, s=run).resources
            except Exception as e:      # a candidate that does not build: reported, counted
                print(f"{dt:4s} {label:34s} FAILED: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:160]}", flush=True)
                bad += 1
                continue
            r = res
            ver = (f"verify: {proven} proven, errors {errors or 0}, unknown {unknown or 0}; "
                   if verify_kernels else "")
            spills = (r.spill_stores, r.spill_loads)
            bad += bool(spills != (0, 0) or (verify_kernels and (errors or unknown))
                        or err > (8e-3 if dt == "bf16" else 1e-3))
            print(f"{dt:4s} {label:34s} interpreter err {err:.1e}; "
                  f"{ver}{r.registers} registers, spill stores / loads "
                  f"{spills} B; "
                  f"{time.perf_counter() - t0:5.1f} s", flush=True)
    print(f"{bad} candidate(s) failed a check")
    return 1 if bad else 0


def gpu(shapes=SHAPES, device: str = "cuda") -> None:
    """Per SHAPES row: "op" (argus.ops.conv2d as a user calls it: the pointwise route),
    "pick" (matmul's untuned schedule on x's [M, C] view into a preallocated output: the
    route's GEMM alone), each candidate (the same GEMM under it), cuBLAS (torch.matmul) and
    cuDNN (F.conv2d), every column checked against float64 first (a wrong or failing candidate
    is reported and left out), then timed in one measure_alternating call (L2 flushed, 3
    alternating rounds of 100 calls). Prints per row the times, cudnn/x and cublas/x, the
    fastest candidate; then geomeans of cudnn/op, cudnn/pick, cudnn/best candidate,
    cublas/pick, cublas/best, and for each candidate over the rows it ran."""
    import torch
    import torch.nn.functional as F

    import argus.ops as ops
    from argus.ops import gemm_model
    from argus.ops import matmul as ops_matmul
    from argus.ops.matmul import device_name
    from argus.ops.schedules import choose
    from argus.runtime.timing import measure_alternating

    cands = candidates()
    geo: dict[str, list] = {}
    print(f"== small-K GEMMs: ResNet-50 1x1 layers (batch 32, channels-last) on "
          f"{torch.cuda.get_device_name() if device == 'cuda' else device}; times in ms")
    for i, shape in enumerate(shapes):
        name, N, C, H, W, K, dt = shape
        dtype = torch.float16 if dt == "f16" else torch.bfloat16
        g = torch.Generator(device=device).manual_seed(300 + i)
        x = torch.randn(N, C, H, W, device=device, generator=g).to(dtype) \
            .to(memory_format=torch.channels_last)
        w = (torch.randn(K, C, 1, 1, device=device, generator=g) / math.sqrt(C)).to(dtype)
        M = N * H * W
        A = x.permute(0, 2, 3, 1).reshape(M, C)          # a view: channels-last
        Wk = w.reshape(K, C)
        c = torch.empty(M, K, device=device, dtype=dtype)
        ref = (A.double() @ Wk.double().t())
        p = problem_for(shape)
        pick = choose(p, device_name(A.device) if A.is_cuda else None)
        fns = {"op": lambda: ops.conv2d(x, w),
               "pick": lambda: ops_matmul(A, Wk.t(), c),
               "cublas": lambda: torch.matmul(A, Wk.t()),
               "cudnn": lambda: F.conv2d(x, w)}
        for label, s in cands.items():
            fns[label] = lambda s=s: ops_matmul(A, Wk.t(), c, schedule=s)
        ok = {}
        for label, f in fns.items():
            try:
                y = f()
                y2 = y.permute(0, 2, 3, 1).reshape(M, K) if y.dim() == 4 else y
                err = ((y2.double() - ref).norm() / ref.norm()).item()
            except Exception as e:  # noqa: BLE001 - a failing column is reported, the row goes on
                print(f"{name:24s} {label:26s} FAILED: {str(e).splitlines()[0][:120]}",
                      flush=True)
                if label in ("op", "pick", "cublas", "cudnn"):
                    raise
                continue
            if err > 1e-2:
                print(f"{name:24s} {label:26s} WRONG (normwise error {err:.1e})", flush=True)
                if label in ("op", "pick"):
                    raise SystemExit(f"WRONG result from the default ({label}) on {name}")
                continue
            ok[label] = f
        print(f"{name:24s} GEMM {M}x{K}x{C}; pick {pick}", flush=True)
        times = measure_alternating(list(ok.values()), rounds=3, trials=100, warmup=20)
        ms = {label: t.median_ms for label, t in zip(ok, times)}
        mine = {k: v for k, v in ms.items() if k in cands}
        best = min(mine, key=mine.get) if mine else None
        nbytes = (M * C + K * C + M * K) * 2
        print(f"{name:24s} least traffic {nbytes / 1e6:.1f} MB = "
              f"{nbytes / 4.3e12 * 1e6:.1f} us at 4.3 TB/s", flush=True)
        for label, t in ms.items():
            # the untuned model's prediction (gemm_model.predict_us, no corrections): how far
            # it is from these memory-bound problems
            s = cands.get(label, pick if label == "pick" else None)
            model = f"  model {gemm_model.predict_us(p, s):6.1f} us" if s is not None else ""
            print(f"{name:24s} {label:26s} {t:8.4f} ms ({nbytes / (t * 1e-3) / 1e9:6.0f} GB/s)"
                  f"  cudnn/this {ms['cudnn'] / t:5.2f}x  cublas/this {ms['cublas'] / t:5.2f}x"
                  f"{model}" + ("  <- fastest candidate" if label == best else ""), flush=True)
        for label in ("op", "pick"):
            geo.setdefault(f"cudnn/{label}", []).append(ms["cudnn"] / ms[label])
            geo.setdefault(f"cublas/{label}", []).append(ms["cublas"] / ms[label])
        if best:
            geo.setdefault("cudnn/best candidate", []).append(ms["cudnn"] / ms[best])
            geo.setdefault("cudnn/best of pick and candidates", []).append(
                ms["cudnn"] / min(ms[best], ms["pick"]))
            geo.setdefault("cublas/best candidate", []).append(ms["cublas"] / ms[best])
        for label, t in mine.items():
            geo.setdefault(f"cudnn/{label}", []).append(ms["cudnn"] / t)
    for label, rs in geo.items():
        print(f"geomean {label}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over "
              f"{len(rs)} rows")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="CPU: verify and build every "
                                                         "candidate (NVRTC sm_90a)")
    ap.add_argument("--no-verify", action="store_true", help="with --check: builds only")
    ap.add_argument("--gpu", action="store_true", help="time the candidates on the GPU")
    args = ap.parse_args(argv)
    if args.check:
        return check(not args.no_verify)
    if args.gpu:
        gpu()
        return 0
    ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
