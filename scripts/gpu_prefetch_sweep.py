#!/usr/bin/env python3
"""The looped softmax against the copy ceiling for each register-ring depth of lower/prefetch.py
and with / without the exchange-release rule of lower/smem.py (device run): which the passes
should pick, measured rather than guessed.

Run from the repository root on a Hopper GPU:

    ARGUS_VERIFY=0 python3 -u scripts/gpu_prefetch_sweep.py [--out "$OUT/sweep"] \
        [--bn 2048,4096] [--variants default,depth2,...] [--with-compile]

For each block width BN of examples/softmax_online.py (more than one block per pass at the
default 8192 x 8192 fp32) it compiles and times the kernel in the variants of VARIANTS, in one
process, with the same timing and correctness checks as scripts/gpu_memory_bound.py (whose
`run_example` and `copy_bandwidth` it calls: CUDA events, L2 flush, median of >= 100 trials in
rounds alternating with torch eager, every variant checked against the float64 reference on
two draws); torch.compile only with --with-compile (the same baseline every time). The
variants differ only in the passes' module constants (or, for "keep-release", lower/smem.py's
release rule switched off), set here before each compile; they run one after the other, so
compare them within the round spread.

Prints one line per variant (ms, % of the copy bandwidth, registers) and, with --out, writes
sweep.json and the generated CUDA of each variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

# label -> module constants of lower/prefetch.py for the variant ("default": the passes' own
# choice; MAX_BLOCK_REGS 16 lets BN 4096's 16-register blocks have a ring)
VARIANTS = {
    "default": {},
    "keep-release": {},        # lower/smem.py's release rule off: 4 barriers a block, as before
    "off": {"MAX_BLOCK_REGS": 0},
    "depth1": {"DEPTH": 1, "MAX_BLOCK_REGS": 16},
    "depth2": {"DEPTH": 2, "MAX_BLOCK_REGS": 16},
    "depth3": {"DEPTH": 3, "MAX_BLOCK_REGS": 16},
    "depth4": {"DEPTH": 4, "MAX_BLOCK_REGS": 16},
    # the ring only in loops without a reduction (the normalizing pass), one block ahead:
    # that loop's registers stay under the reducing loop's peak (BN 4096: 56 registers against
    # 64 with both loops ringed, 48 with none; NVRTC 13.0), so the row's second read is not
    # one L2 round trip per block
    "pass2-depth1": {"DEPTH": 1, "MAX_BLOCK_REGS": 16},
}


def _without_reductions(pipeline):
    """lower/prefetch.py's per-loop rewrite, applied only to loops with no reduction."""
    from argus.ir import ops as O

    def rewrite(loop, ids, threads):
        if any(isinstance(op, O.Reduce) for op in loop.body.walk()):
            return [loop]
        return pipeline(loop, ids, threads)

    return rewrite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--bn", default="2048,4096")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--with-compile", action="store_true",
                        help="also time torch.compile (the same for every variant)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu_prefetch_sweep: needs a CUDA GPU", file=sys.stderr)
        return 2
    import gpu_memory_bound as mb

    from argus.lower import prefetch, smem

    defaults = {k: getattr(prefetch, k) for k in ("MAX_BLOCK_REGS", "DEPTH")}
    release_rule, pipeline = smem._release_barriers, prefetch._pipeline
    labels = [v for v in args.variants.split(",") if v]
    unknown = [v for v in labels if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    copy = mb.copy_bandwidth(args.rows, args.cols, args.rounds, args.trials)
    print(f"copy: {copy['gbs']:.0f} GB/s ({copy['ms']:.4f} ms)", flush=True)
    rows, ok = [], True
    for bn in (int(b) for b in args.bn.split(",") if b):
        for label in labels:
            for k, v in {**defaults, **VARIANTS[label]}.items():
                setattr(prefetch, k, v)
            if label == "keep-release":
                smem._release_barriers = lambda kernel: kernel
            if label == "pass2-depth1":
                prefetch._pipeline = _without_reductions(pipeline)
            try:
                r = mb.run_example("softmax_online", args.rows, args.cols, args.rounds,
                                   args.trials, out, {"BN": bn}, args.with_compile)
            except Exception as exc:  # noqa: BLE001 - one failing variant must not hide the rest
                traceback.print_exc()
                print(f"BN {bn:5d} {label:12s}: FAILED {type(exc).__name__}: {exc}", flush=True)
                rows.append({"variant": label, "bn": bn, "error": repr(exc)})
                ok = False
                continue
            finally:
                for k, v in defaults.items():
                    setattr(prefetch, k, v)
                smem._release_barriers = release_rule
                prefetch._pipeline = pipeline
            r["variant"] = label
            rows.append(r)
            ok &= bool(r["ok"])
            pct = 100 * r["ours_gbs"] / copy["gbs"]
            print(f"BN {bn:5d} {label:12s}: {r['ours_ms']:.4f} ms  {pct:5.1f}% copy BW  "
                  f"(eager {r['eager_ms']:.4f} ms, torch.compile "
                  f"{r.get('compile_ms', float('nan')):.4f} ms, round spread "
                  f"{mb.spread(r['ours_rounds_ms']):.1%})  {r['resources']}  SASS {r['sass']}"
                  + ("" if r["ok"] else "  <-- WRONG RESULT"), flush=True)
            if out is not None:   # run_example wrote the CUDA under the BN label: keep each
                src = out / f"softmax_online_BN{bn}.cu"
                if src.exists():
                    src.rename(out / f"softmax_online_BN{bn}_{label.replace(' ', '')}.cu")
    if out is not None:
        (out / "sweep.json").write_text(json.dumps({"copy": copy, "rows": rows}, indent=1,
                                                   default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
