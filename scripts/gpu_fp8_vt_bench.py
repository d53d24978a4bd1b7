#!/usr/bin/env python3
"""argus.ops.attention_fp8's V transpose (V [B, Hkv, Skv, D] e4m3 -> V^T [B, Hkv, D, Skv] in
rows padded to 16 keys) against its alternatives (device run).

Run from the repository root on a Hopper GPU:

    python3 -u scripts/gpu_fp8_vt_bench.py [--lengths 2048,8192,16384] [--dim 128]

For B 8, Hkv 16 (the --no-gqa attention bench's V) it times, in one process:
  - copy: a plain byte copy of V (the bandwidth ceiling of this run);
  - bytes: one torch byte copy of the transposed view (the op's path before 2026-12-04;
    measured ~0.19 ms at S 2048 through the op);
  - word16 / word32 / word64: a word transpose at 2 / 4 / 8 bytes, then the bytes inside each
    word (argus.ops.attention_fp8._transpose_as_words; the op takes word64, else word32);
  - intmm: V^T = I V^T as an exact int8 GEMM (torch._int_mm, int32 out: bytes as int8 lose
    nothing, unlike an e4m3 GEMM, where -0 becomes +0 and a NaN spreads over its key), then the
    int32 [D, B Hkv Skv] result narrowed to bytes into [B, Hkv, D, Skv];
  - op: transposed_v itself (allocation included).
Every variant's bytes are compared with torch's transpose first (MISMATCH skips its timing).
Bytes moved: 2 x B Hkv Skv D (read + write). argus.runtime.timing.measure (CUDA events, L2
flushed, median of >= 100). No numbers in the repository come from this script until it is run.
"""

import argparse
import importlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from argus.runtime.timing import measure  # noqa: E402

mod = importlib.import_module("argus.ops.attention_fp8")
E4M3 = torch.float8_e4m3fn
WORDS = (2, 4, 8)


def intmm_transpose(x, store, SK, eye):
    B, H, S, D = x.shape
    flat = x.view(torch.uint8).view(torch.int8).reshape(B * H * S, D)   # row-major [BHS, D]
    prod = torch._int_mm(eye, flat.t())                                # [D, BHS] int32
    out = store.view(torch.uint8)[..., :SK]
    out.copy_(prod.view(D, B, H, S).permute(1, 2, 0, 3))               # int32 -> byte: mod 256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="2048,8192,16384")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()
    B, H, D = args.batch, args.heads, args.dim
    for SK in (int(s) for s in args.lengths.split(",")):
        v = torch.randint(0, 256, (B, H, SK, D), dtype=torch.uint8, device="cuda").view(E4M3)
        pad = max(16, -(-SK // 16) * 16)
        store = torch.empty((B, H, D, pad), dtype=E4M3, device="cuda")
        vt = store[..., :SK]
        ref = v.transpose(-1, -2).contiguous().view(torch.uint8)
        flat = torch.empty_like(v)
        eye = torch.eye(D, dtype=torch.int8, device="cuda")
        variants = {
            "copy": (lambda: flat.copy_(v), None),
            "bytes": (lambda: vt.copy_(v.transpose(-1, -2)), vt),
            **{f"word{8 * w}": ((lambda w=w: mod._transpose_as_words(v, store, w)), vt)
               for w in WORDS},
            "intmm": (lambda: intmm_transpose(v, store, SK, eye), vt),
            "op": (lambda: mod.transposed_v(v, "bhsd", False), None),
        }
        nbytes = 2 * v.numel()
        for name, (fn, out) in variants.items():
            store.view(torch.uint8).fill_(0)
            try:
                got = fn()
            except RuntimeError as e:  # e.g. _int_mm's shape rules
                print(f"S {SK:6d} {name:7s} FAILED {str(e)[:120]}", flush=True)
                continue
            torch.cuda.synchronize()
            got = out if out is not None else got
            if name != "copy" and not torch.equal(got.view(torch.uint8), ref):
                print(f"S {SK:6d} {name:7s} MISMATCH", flush=True)
                continue
            t = measure(fn, trials=args.trials)
            ms = t.median_ms
            print(f"S {SK:6d} D {D} {name:7s} {ms * 1e3:8.1f} us  "
                  f"{nbytes / (ms * 1e-3) / 1e12:5.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
