"""Time examples/flash_attention.py (the minimal FlashAttention forward that proves compiler
core 2's constructs) against every torch SDPA backend on this GPU, in one process.

    python3 scripts/gpu_attention_example_bench.py [--out DIR]

bf16, 16k total tokens per case (B * S = 16384), heads * head_dim = 2048, full and causal.
Each case first checks the output against a float64 reference on fresh random data (a
subsample of query rows, exact softmax), then times ours and each SDPA backend with
argus.runtime.timing.measure (CUDA events, L2 flushed, medians). Prints one table last and
writes attention_example.json. This example is one consumer warpgroup per 64 queries and waits
for each P.V: it is a correctness vehicle, not the production operator (argus.ops.attention).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sdpa_backends():
    import torch
    from torch.nn.attention import SDPBackend

    names = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None)}
    return {k: v for k, v in names.items() if v is not None}, torch


def check(fa, o, q, k, v, causal, rows=256) -> float:
    """Relative error of `rows` random query rows of every (batch, head) against float64."""
    import torch

    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(q.shape[1], generator=g)[:rows].cuda()
    qd = q[:, idx].double()
    s = qd @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        S, SK = q.shape[1], k.shape[1]
        keep = torch.arange(SK, device="cuda")[None, :] <= (idx[:, None] + SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    ref = torch.softmax(s, -1).nan_to_num(0.0) @ v.double()
    return ((o[:, idx].double() - ref).norm() / ref.norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from torch.nn.attention import sdpa_kernel

    from argus.compiler import compile_kernel
    from argus.demo import load_example
    from argus.runtime.timing import measure

    backends, torch = sdpa_backends()
    fa = load_example("flash_attention")
    rows = []
    for d, causal in ((64, False), (64, True), (128, False), (128, True)):
        H, S = 2048 // d, 4096
        B = 16384 // S
        g = torch.Generator(device="cuda").manual_seed(d + causal)
        q, k, v = (torch.randn(B, H, S, d, device="cuda", generator=g, dtype=torch.bfloat16)
                   for _ in range(3))
        o = torch.empty_like(q)
        kern = compile_kernel(fa.attention_kernel(d, causal))
        flat = [t.view(B * H, S, d) for t in (q, k, v, o)]
        kern(*flat)
        torch.cuda.synchronize()
        err = check(fa, flat[3], *flat[:3], causal)
        flops = 4 * B * H * S * S * d / (2 if causal else 1)
        ours = measure(lambda: kern(*flat), trials=100, warmup=5)
        row = {"head_dim": d, "causal": causal, "B": B, "H": H, "S": S, "rel_error": err,
               "ours_ms": ours.median_ms, "ours_tflops": flops / ours.median_ms / 1e9,
               "registers": kern.resources.registers,
               "spills": kern.resources.spill_stores + kern.resources.spill_loads}
        for name, backend in backends.items():
            try:
                with sdpa_kernel([backend]):
                    t = measure(lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=causal), trials=100, warmup=5)
                row[f"{name}_ms"] = t.median_ms
                row[f"{name}_tflops"] = flops / t.median_ms / 1e9
            except Exception as e:  # noqa: BLE001 - a backend may not support the case
                row[f"{name}_ms"] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "attention_example.json").write_text(json.dumps(rows, indent=2))
    names = list(backends)
    print("\n| hd | causal | rel err | regs | spills | ours TFLOP/s | "
          + " | ".join(f"{n} TFLOP/s" for n in names) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(names))
    for r in rows:
        cells = [f"{r[f'{n}_tflops']:.0f}" if r.get(f"{n}_ms") else "n/a" for n in names]
        print(f"| {r['head_dim']} | {r['causal']} | {r['rel_error']:.1e} | {r['registers']} | "
              f"{r['spills']} | {r['ours_tflops']:.0f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
