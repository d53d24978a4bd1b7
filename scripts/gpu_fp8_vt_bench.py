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
  - op: transposed_v itself (allocation included);
and the op's permuted V^T (kernel_v: rows of 32-key groups in acc_order_col order, ragged tail
zero), each compared byte for byte with the torch permuted path's output:
  - wperm: the torch word passes (_transpose_as_words(..., 8, permuted=True): the op before the
    Argus kernels);
  - kperm: the op's path now (_kernel_transpose: argus/kernels/attention_vt.py's word kernel,
    vt_word_kernel, its prepared launch kept per buffers);
  - kbyte: the op's path with VT_WORDS off (the flat byte kernel, the op before the word
    kernel);
  - kword<r> with --word-rows 1,2,4 (and --word-groups 4,8,16: kword<r>g<n>): the word kernel
    at r rows of V^T a thread (and n 4-key groups a CTA), launched through Compiled.__call__;
  - k4d: the 4-d kernel (any strides; the op's for a V no flat view covers);
  - kperm<n> with --keys 16,32,...: the flat kernel at n keys a CTA, launched through
    Compiled.__call__;
  - knat: the 4-d kernel in natural key order against torch's transpose;
  - wnat: the word kernel in natural key order (the op's transposed_v) against it.
A variant whose bytes differ prints MISMATCH with how many, and how many of them are a 0xFF
(NaN with the sign bit) written as 0x7F, the kernels' one known difference (the GPU's e4m3
conversions drop a NaN's sign); it is timed anyway with --time-mismatched (NOT EXACT). The
data is random bytes, so about 1 in 256 is 0xFF. Bytes moved: 2 x B Hkv Skv D (read + write).
argus.runtime.timing.measure (CUDA events, L2 flushed, median of >= 100). --skip-words leaves
out bytes / word16 / word32 / word64 / intmm.

--op: then argus.ops.attention_fp8 end to end (B = 16384 / S, H = Hkv = 2048 / D, as
scripts/gpu_attention_bench.py --no-gqa) at the same lengths, full and causal, with V^T made by
the torch word passes (VT_KERNEL = False, the old op), by the byte kernel (VT_WORDS = False,
byte_vt) and by the word kernel (the default, kernel_vt): us and TFLOP/s
(4 B H S^2 D, halved causal), and the max |difference| of the two outputs (0 expected: the
same V^T up to NaN signs, the same kernel; random normal data has no NaN).

The numbers in argus/kernels/attention_vt.py's docstring come from this script's run on the
H200 on 2026-12-04 (--skip-words --keys 16,32,64,128 --time-mismatched --op); the word
kernel's (not yet measured): scripts/gpu_round2.sh vt60 (--skip-words --time-mismatched
--word-rows 1,2,4 --word-groups 4,8,16 --op).
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


def mismatch(got, ref) -> str:
    bad = got != ref
    n = int(bad.sum())
    nan_sign = int((bad & (ref == 0xFF) & (got == 0x7F)).sum())
    return f"MISMATCH {n} bytes ({nan_sign} of them 0xFF written as 0x7F)"


def _op_path(on: bool, words: bool):
    """Set the op's V^T path: torch word passes (on False), byte kernels, word kernel."""
    mod.VT_KERNEL, mod.VT_WORDS = on, words


def op_bench(D, lengths, trials):
    """argus.ops.attention_fp8 with the old (torch), byte-kernel and word-kernel V^T, --op."""
    import argus.ops

    for SK in lengths:
        B, H = max(1, 16384 // SK), 2048 // D
        g = torch.Generator(device="cuda").manual_seed(SK)
        q, k, v = ((torch.randn(B, H, SK, D, device="cuda", generator=g) / 4)
                   .to(E4M3) for _ in range(3))
        for causal in (False, True):
            flops = 4 * B * H * SK * SK * D / (2 if causal else 1)
            outs, cols = {}, []
            for name, on, words in (("torch_vt", False, False), ("byte_vt", True, False),
                                    ("kernel_vt", True, True)):
                _op_path(on, words)
                try:
                    fn = (lambda: argus.ops.attention_fp8(q, k, v, q_scale=1.0, k_scale=1.0,
                                                          v_scale=1.0, causal=causal))
                    outs[name] = fn().float()
                    torch.cuda.synchronize()
                    ms = measure(fn, trials=trials).median_ms
                    cols.append(f"{name} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.1f} TFLOP/s")
                finally:
                    _op_path(True, True)
            diff = max((outs["torch_vt"] - outs[n]).abs().max().item()
                       for n in ("byte_vt", "kernel_vt"))
            print(f"op S {SK:6d} D {D} B {B} H {H} {'causal' if causal else 'full  '}  "
                  + "  ".join(cols) + f"  max|diff| {diff:g}", flush=True)


def byte_path(fn):
    """fn() with the op's V^T by the byte kernels (VT_WORDS off), as the op before the word
    kernel: its prepared launch is kept apart (the launch memo's key has VT_WORDS)."""
    mod.VT_WORDS = False
    try:
        return fn()
    finally:
        mod.VT_WORDS = True


def main():
    # the word kernel is what this bench measures (kperm, kword, the op's kernel_vt): on
    # whatever the op's default is (attention_fp8.VT_WORDS, on since 2026-12-07)
    mod.VT_WORDS = True
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="2048,8192,16384")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--keys", default="", help="also time the flat V^T kernel at these keys "
                    "a CTA (multiples of 16), e.g. 16,32,64")
    ap.add_argument("--word-rows", default="", help="also time the word V^T kernel at these "
                    "rows of V^T a thread (1, 2, 4), e.g. 1,2,4")
    ap.add_argument("--word-groups", default="", help="with --word-rows: also these 4-key "
                    "groups a CTA (multiples of 4), e.g. 4,8,16 (default: the kernel's)")
    ap.add_argument("--op", action="store_true", help="then time attention_fp8 end to end, "
                    "old and new V^T")
    ap.add_argument("--skip-words", action="store_true", help="leave out word16/32/64, bytes "
                    "and intmm (the slow torch variants measured 2026-12-04)")
    ap.add_argument("--time-mismatched", action="store_true", help="time the Argus kernel "
                    "variants even where their bytes differ (marked NOT EXACT)")
    args = ap.parse_args()
    from argus.kernels.attention_vt import (WORD_GROUPS_PER_CTA, vt_flat_kernel, vt_kernel,
                                            vt_word_kernel)
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
        if args.skip_words:
            variants = {n: variants[n] for n in ("copy", "op")}
        # the permuted V^T [B, H, D, SK rounded up to 32]: the torch path's bytes are the
        # reference (tests/unit/test_attention_fp8_permuted.py checks them against a loop)
        pstore = torch.empty((B, H, D, -(-SK // 32) * 32), dtype=E4M3, device="cuda")
        pref = torch.empty_like(pstore)
        assert mod._transpose_as_words(v, pref, 8, permuted=True)
        pref = pref.view(torch.uint8).clone()
        perm_variants = {
            "wperm": lambda: mod._transpose_as_words(v, pstore, 8, permuted=True),
            "kperm": lambda: mod._kernel_transpose(v, pstore, permuted=True),
            "kbyte": lambda: byte_path(lambda: mod._kernel_transpose(v, pstore, permuted=True)),
            "k4d": lambda k4=vt_kernel(D, True).compile(): k4(v, pstore),
        }
        vflat = mod._flat_storage(v)
        for n in (int(x) for x in args.keys.split(",") if x):
            kern = vt_flat_kernel(D, True, n, D).compile()
            perm_variants[f"kperm{n}"] = (
                lambda kern=kern: kern(vflat, pstore, SK, *v.stride()[:3]))
        vwords = vflat.view(torch.uint8).view(torch.int32)
        word_scalars = (SK, H, *(st // 4 for st in v.stride()[:3]))
        groups = [int(x) for x in args.word_groups.split(",") if x] or [WORD_GROUPS_PER_CTA]
        for r in (int(x) for x in args.word_rows.split(",") if x):
            for n in groups:
                kern = vt_word_kernel(D, True, n, D // 4, r).compile()
                vtw = pstore.view(torch.uint8).view(torch.int32).view(B * H, D // r, r, -1)
                tag = f"kword{r}" + (f"g{n}" if args.word_groups else "")
                perm_variants[tag] = (
                    lambda kern=kern, vtw=vtw: kern(vwords, vtw, *word_scalars))
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
                print(f"S {SK:6d} {name:7s} {mismatch(got.view(torch.uint8), ref)}",
                      flush=True)
                if not args.time_mismatched:
                    continue
            t = measure(fn, trials=args.trials)
            ms = t.median_ms
            print(f"S {SK:6d} D {D} {name:7s} {ms * 1e3:8.1f} us  "
                  f"{nbytes / (ms * 1e-3) / 1e12:5.2f} TB/s", flush=True)
        natural = torch.empty((B, H, D, pad), dtype=E4M3, device="cuda")
        kn = vt_kernel(D, False).compile()
        checks = [(name, fn, pstore, pref) for name, fn in perm_variants.items()]
        checks.append(("knat", lambda: kn(v, natural), natural[..., :SK], ref))
        checks.append(("wnat", lambda: mod._kernel_transpose(v, natural, permuted=False),
                       natural[..., :SK], ref))
        for name, fn, out, want in checks:
            out.view(torch.uint8).fill_(0xAA)       # a byte the transposes never leave behind
            if fn() is False:
                print(f"S {SK:6d} {name:7s} NOT RUN (the path refused these tensors)")
                continue
            torch.cuda.synchronize()
            got = out.view(torch.uint8)
            exact = torch.equal(got, want)
            if not exact:
                print(f"S {SK:6d} {name:7s} {mismatch(got, want)}", flush=True)
                if not args.time_mismatched:
                    continue
            ms = measure(fn, trials=args.trials).median_ms
            print(f"S {SK:6d} D {D} {name:7s} {ms * 1e3:8.1f} us  "
                  f"{nbytes / (ms * 1e-3) / 1e12:5.2f} TB/s  "
                  f"({'bit-exact' if exact else 'NOT EXACT'})", flush=True)
    if args.op:
        op_bench(D, [int(s) for s in args.lengths.split(",")], args.trials)


if __name__ == "__main__":
    main()
