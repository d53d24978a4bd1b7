#!/usr/bin/env python3
"""The looped softmax against the copy ceiling for each register-ring depth of lower/prefetch.py
(device run): which depth the pass should pick, measured rather than guessed.

Run from the repository root on a Hopper GPU:

    python3 -u scripts/gpu_prefetch_sweep.py [--out "$OUT/sweep"] [--bn 1024,2048,4096]

For each block width BN of examples/softmax_online.py (more than one block per pass at the
default 8192 x 8192 fp32) it compiles and times the kernel with the pass off (loads where the
user wrote them) and with the ring 1, 2, 3 (the pass's own DEPTH) and 5 blocks deep, in one
process, with the same timing and correctness checks as scripts/gpu_memory_bound.py (whose
`run_example` and `copy_bandwidth` it calls: CUDA events, L2 flush, median of >= 100 trials in
rounds alternating with torch eager and torch.compile, every variant checked against the float64
reference on two draws). The variants differ only in the pass's module constants, set here
before each compile; they run one after the other, so compare them within the round spread.

Prints one line per variant (ms, % of the copy bandwidth, registers) and, with --out, writes
sweep.json and the generated CUDA of each variant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

# (label, module constants of lower/prefetch.py for the variant)
VARIANTS = (
    ("off", {"MAX_BLOCK_REGS": 0}),
    ("depth 1", {"DEPTH": 1}),
    ("depth 2", {"DEPTH": 2}),
    ("depth 3", {"DEPTH": 3}),      # the pass's own choice
    ("depth 5", {"DEPTH": 5}),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--bn", default="1024,2048,4096")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu_prefetch_sweep: needs a CUDA GPU", file=sys.stderr)
        return 2
    import gpu_memory_bound as mb

    from argus.lower import prefetch

    defaults = {k: getattr(prefetch, k) for k in ("MAX_BLOCK_REGS", "DEPTH")}
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    copy = mb.copy_bandwidth(args.rows, args.cols, args.rounds, args.trials)
    print(f"copy: {copy['gbs']:.0f} GB/s ({copy['ms']:.4f} ms)", flush=True)
    rows, ok = [], True
    for bn in (int(b) for b in args.bn.split(",") if b):
        for label, consts in VARIANTS:
            for k, v in {**defaults, **consts}.items():
                setattr(prefetch, k, v)
            try:
                r = mb.run_example("softmax_online", args.rows, args.cols, args.rounds,
                                   args.trials, out, {"BN": bn})
            finally:
                for k, v in defaults.items():
                    setattr(prefetch, k, v)
            r["variant"] = label
            rows.append(r)
            ok &= bool(r["ok"])
            pct = 100 * r["ours_gbs"] / copy["gbs"]
            print(f"BN {bn:5d} {label:8s}: {r['ours_ms']:.4f} ms  {pct:5.1f}% copy BW  "
                  f"(torch.compile {r.get('compile_ms', float('nan')):.4f} ms, round spread "
                  f"{mb.spread(r['ours_rounds_ms']):.1%})  {r['resources']}"
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
