#!/usr/bin/env python3
"""The strided transposed convolution's phase interleave (argus/kernels/conv_interleave.py) on
the GPU: the old direct kernel (`interleave_kernel`, 32-thread CTAs of [32 outputs, 32
channels]) against the rows form (`interleave_rows_kernel`, CTAs of 64..256 threads along the
output rows, rh rows a thread: the tile `rows_tile` picks, then [256 x 8] and [128 x 16]), and
torch's per-phase strided copies (the fallback), on NCDHW phase outputs (the NCHW epilogue's
layout: KernelBench L1/73's route), each phase a cropped view of a bigger conv output as the
op passes them.

Run from the repository root on a Hopper GPU (< 60 s, ~4 GB of device memory):

    python3 -u scripts/gpu_conv_interleave_bench.py

Shapes: L1/73 (out [4, 32, 63, 127, 255] fp32, stride 2: 1.04 GB), a 2-d stride-2 fp32 one
(out [16, 64, 255, 255]) and a 2-d stride-3 bf16 one with tap-less bias phases. Timing: CUDA
events around `--iters` back-to-back forwards of one interleave (all its launches) after
`--warmup`, the median of `--rounds` rounds; the output is far bigger than L2. GB/s = (phase
bytes read + output bytes written) / time. Correctness: every variant's output bit for bit
against torch's strided assignment out[..., a_d::s_d, a_h::s_h, a_w::s_w] = phase (and so
against the old kernel), the output poisoned with NaN before the checked run. Last line: ok
or FAILED.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = [
    # name, dtype, output [N, K, D, H, W] (2-d: D = 1), stride (s_d, s_h, s_w), bias, no-tap phases
    ("L1/73 3-d s2 f32", "float32", (4, 32, 63, 127, 255), (2, 2, 2), False, ()),
    ("2-d s2 f32", "float32", (16, 64, 1, 255, 255), (1, 2, 2), False, ()),
    ("2-d s3 bf16 bias", "bfloat16", (8, 96, 1, 301, 301), (1, 3, 3), True, ((0, 2, 1),)),
]


def _phases(torch, shape, st, dtype, empty, gen, device="cuda"):
    """{(a_d, a_h, a_w): NCDHW view [N, K, nd, nh, nw] cropped from a bigger tensor, or None}."""
    n, k, *outs = shape
    phases = {}
    for phase in itertools.product(*(range(min(s_, o)) for s_, o in zip(st, outs))):
        if phase in empty:
            phases[phase] = None
            continue
        counts = [len(range(a, o, s_)) for a, o, s_ in zip(phase, outs, st)]
        big = torch.randn(n, k, *(c + 1 for c in counts), device=device, generator=gen,
                          dtype=torch.float32).to(dtype)
        phases[phase] = big[:, :, 1:, 1:, 1:]
    return phases


def _launches(torch, out, phases, bias, st, variant):
    """[(kernel, args)] of one interleave: 'old' the direct kernel, (threads, rh) the rows
    form; the views as argus.ops.conv `_interleave` cuts them."""
    from argus.kernels.conv_interleave import interleave_kernel, interleave_rows_kernel, rows_tile

    dt = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[out.dtype]
    calls = []
    for a_d, a_h in itertools.product(*(range(min(s_, n)) for s_, n in zip(st[:2],
                                                                             out.shape[2:4]))):
        kinds, tensors = [], []
        for a_w in range(min(st[2], out.shape[4])):
            y = phases[(a_d, a_h, a_w)]
            if y is None:
                kinds.append("bias" if bias is not None else "zero")
            else:
                kinds.append("nc")
                tensors.append(y)
        group = out[:, :, a_d::st[0], a_h::st[1], :]
        extra = (bias,) if "bias" in kinds else ()
        if variant == "old":
            kernel = interleave_kernel(tuple(kinds), st[2], dt, 32)
            dst = group.permute(0, 2, 3, 4, 1).unsqueeze(-1)
        else:
            threads, rh = (rows_tile(group.shape[4], group.shape[3], kinds.count("nc"))
                           if variant == "rows" else variant)
            kernel = interleave_rows_kernel(tuple(kinds), st[2], dt, threads, rh)
            dst = group.transpose(3, 4).unsqueeze(-1)
        calls.append((kernel, (dst, *tensors, *extra)))
    return calls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch

    from argus.kernels.conv_interleave import rows_tile

    ok = True
    began = time.time()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, dtype_name, shape, st, with_bias, empty in SHAPES:
        dtype = getattr(torch, dtype_name)
        phases = _phases(torch, shape, st, dtype, empty, gen)
        bias = torch.randn(shape[1], device="cuda", generator=gen).to(dtype) \
            if with_bias else None

        def torch_copies(out):
            """torch's strided assignment of every phase (a zero phase: the bias or zeros):
            the reference, and the variant timed as "torch strided copies"."""
            for phase, y in phases.items():
                target = out[(slice(None), slice(None)) + tuple(slice(a, None, s_)
                                                                for a, s_ in zip(phase, st))]
                if y is None:
                    target.copy_(torch.zeros_like(target) if bias is None else
                                 bias.view(1, -1, 1, 1, 1).expand_as(target))
                else:
                    target.copy_(y)

        ref = torch.empty(shape, device="cuda", dtype=dtype)
        torch_copies(ref)
        out = torch.empty_like(ref)
        moved = out.numel() * out.element_size() + sum(
            y.numel() * y.element_size() for y in phases.values() if y is not None)
        n_, k_, d_, h_, w_ = shape
        hq = len(range(0, h_, st[1]))
        chosen = rows_tile(w_, hq, sum(1 for a_w in range(st[2])
                                       if phases.get((0, 0, a_w)) is not None))
        variants = ["old", "rows"] + [v for v in [(256, 8), (128, 16)] if v != chosen]
        fns = {"torch strided copies": lambda: torch_copies(out)}
        for v in variants:
            calls = [(k.compile(), a) for k, a in _launches(torch, out, phases, bias, st, v)]

            def run(calls=calls):
                for kernel, a in calls:
                    kernel(*a)
            label = ("old interleave_kernel k32" if v == "old" else
                     f"rows {chosen[0]}x{chosen[1]} (rows_tile)" if v == "rows" else
                     f"rows {v[0]}x{v[1]}")
            fns[label] = run
        print(f"\n{name}: out {list(shape)} {dtype_name} stride {st}, "
              f"{moved / 1e9:.3f} GB moved", flush=True)
        copy_src = torch.empty_like(out)
        fns["device copy (same bytes out)"] = lambda: out.copy_(copy_src)
        for label, fn in fns.items():
            if not label.startswith("device copy"):
                out.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                exact = torch.equal(out.view(torch.int16 if out.element_size() == 2 else
                                             torch.int32),
                                    ref.view(torch.int16 if ref.element_size() == 2 else
                                             torch.int32))
                ok &= exact
            else:
                exact = None
            for _ in range(args.warmup):
                fn()
            times = []
            for _ in range(args.rounds):
                start, end = torch.cuda.Event(enable_timing=True), \
                    torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                for _ in range(args.iters):
                    fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / args.iters)
            ms = statistics.median(times)
            nbytes = 2 * out.numel() * out.element_size() if label.startswith("device") \
                else moved
            print(f"  {label:34s} {ms:8.3f} ms {nbytes / ms / 1e6:8.0f} GB/s  "
                  f"spread {max(times) - min(times):.3f} ms  "
                  f"{'' if exact is None else 'bit-exact' if exact else 'MISMATCH'}",
                  flush=True)
        del phases, ref, out, copy_src
        torch.cuda.empty_cache()
    print(f"{time.time() - began:.1f} s")
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
