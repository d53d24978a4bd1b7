"""argus.ops.attention against torch SDPA with each backend (cuDNN, flash, efficient), in one
process on this GPU.

    python3 scripts/gpu_attention_bench.py [--quick] [--out DIR]

bf16 prefill, 16k total tokens per case (B * S = 16384), heads * head_dim = 2048: head dims 64,
128, 256 x S 512, 1k, 2k, 4k, 8k, 16k x full / causal, plus GQA 8:1 at head dim 128 (32 query
heads, 4 kv heads). Causal FLOPs are counted as half of 4 * B * H * S^2 * D. Each case first
checks our output against a float64 reference on fresh random data (256 sampled query rows of
every head, exact softmax), then times ours and each backend with argus.runtime.timing.measure
(CUDA events, L2 flushed, medians of 100 trials). --quick: S in {1k, 4k, 16k} at head dims 64
and 128, full and causal, and the GQA case at 8k. Prints a table (TFLOP/s, ours / each backend)
and writes attention_bench.json to --out.
"""

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKENS, HIDDEN = 16384, 2048


def cases(quick: bool):
    lengths = (1024, 4096, 16384) if quick else (512, 1024, 2048, 4096, 8192, 16384)
    dims = (64, 128) if quick else (64, 128, 256)
    out = [(d, S, causal, HIDDEN // d, HIDDEN // d) for d in dims for S in lengths
           for causal in (False, True)]
    for S in ((8192,) if quick else (2048, 8192, 16384)):
        for causal in (False, True):
            out.append((128, S, causal, 32, 4))   # GQA 8:1
    return out


def check(out, q, k, v, causal, rows=256) -> float:
    """Relative error of `rows` random query rows of every (batch, head) against float64."""
    import torch

    S, SK = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    idx = torch.randperm(S, generator=torch.Generator().manual_seed(0))[:rows].cuda()
    qd = q[:, :, idx].double()
    kd, vd = (t.double().repeat_interleave(group, 1) for t in (k, v))
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.arange(SK, device="cuda")[None, :] <= (idx[:, None] + SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    ref = torch.softmax(s, -1).nan_to_num(0.0) @ vd
    return ((out[:, :, idx].double() - ref).norm() / ref.norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import argus.ops
    from argus.runtime.timing import measure

    backends = {"cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None),
                "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    backends = {k: v for k, v in backends.items() if v is not None}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}", flush=True)
    rows = []
    for d, S, causal, H, HKV in cases(args.quick):
        B = max(1, TOKENS // S)
        g = torch.Generator(device="cuda").manual_seed(d + S + causal)
        q = torch.randn(B, H, S, d, device="cuda", generator=g, dtype=torch.bfloat16)
        k, v = (torch.randn(B, HKV, S, d, device="cuda", generator=g, dtype=torch.bfloat16)
                for _ in range(2))
        flops = 4 * B * H * S * S * d / (2 if causal else 1)
        row = {"head_dim": d, "S": S, "B": B, "H": H, "HKV": HKV, "causal": causal}
        try:
            out = argus.ops.attention(q, k, v, causal=causal)
            torch.cuda.synchronize()
            row["rel_error"] = check(out, q, k, v, causal)
            t = measure(lambda: argus.ops.attention(q, k, v, causal=causal), trials=100,
                        warmup=5)
            row["ours_ms"], row["ours_tflops"] = t.median_ms, flops / t.median_ms / 1e9
        except Exception as e:  # noqa: BLE001 - report and go on with the other cases
            row["ours_ms"] = None
            row["ours_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        for name, backend in backends.items():
            try:
                with sdpa_kernel([backend]):
                    fn = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                        q, k, v, is_causal=causal, enable_gqa=H != HKV)
                    fn()
                    t = measure(fn, trials=100, warmup=5)
                row[f"{name}_ms"], row[f"{name}_tflops"] = t.median_ms, flops / t.median_ms / 1e9
            except Exception as e:  # noqa: BLE001 - a backend may not support the case
                row[f"{name}_ms"] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    (args.out / "attention_bench.json").write_text(json.dumps(rows, indent=2))
    names = list(backends)
    print("\n| hd | S | B x H (kv) | causal | rel err | ours | "
          + " | ".join(f"{n}" for n in names) + " | "
          + " | ".join(f"x {n}" for n in names) + " |")
    print("|---|---|---|---|---|---|" + "---|" * (2 * len(names)))
    for r in rows:
        ours = r.get("ours_tflops")
        tf = [f"{r[f'{n}_tflops']:.0f}" if r.get(f"{n}_ms") else "n/a" for n in names]
        ratio = [f"{ours / r[f'{n}_tflops']:.2f}" if ours and r.get(f"{n}_ms") else "n/a"
                 for n in names]
        print(f"| {r['head_dim']} | {r['S']} | {r['B']} x {r['H']} ({r['HKV']}) | "
              f"{'yes' if r['causal'] else 'no'} | {r.get('rel_error', float('nan')):.1e} | "
              f"{f'{ours:.0f}' if ours else r.get('ours_error', 'n/a')} | " + " | ".join(tf)
              + " | " + " | ".join(ratio) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
