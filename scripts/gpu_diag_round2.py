"""Diagnostics for two H200 failures of 2026-12-01 (kept as a tool: rerun after a fix).

moe: each kernel of argus.ops.moe at a small layer, synchronized one by one (run with
CUDA_LAUNCH_BLOCKING=1) so the first failing launch names itself.
attention: the ping-pong schedule against float64 per 64-row block of queries and per head, so
the error pattern says which warpgroup / turn goes wrong."""

import math
import sys
import traceback

import torch


def moe_diag():
    from argus.ops import moe
    from argus.ops.moe import reference
    for T, E, k, H, I in [(16, 8, 2, 1024, 512), (300, 8, 2, 1024, 768)]:
        g = torch.Generator(device="cuda").manual_seed(T)
        x = torch.randn(T, H, device="cuda", generator=g).bfloat16()
        w13 = (torch.randn(E, 2 * I, H, device="cuda", generator=g) / H ** 0.5).bfloat16()
        w2 = (torch.randn(E, H, I, device="cuda", generator=g) / I ** 0.5).bfloat16()
        logits = torch.randn(T, E, device="cuda", generator=g)
        try:
            out = moe(x, w13, w2, logits, k)
            torch.cuda.synchronize()
            p = torch.softmax(logits.double(), dim=1)
            w, ids = p.topk(k, dim=1)
            want = reference(x, w13, w2, ids, w / w.sum(dim=1, keepdim=True))
            err = ((out.double() - want).norm() / want.norm()).item()
            print(f"moe T={T} E={E}: ok, rel err {err:.2e}", flush=True)
        except Exception:  # noqa: BLE001
            print(f"moe T={T} E={E}: FAILED", flush=True)
            traceback.print_exc()
            return


def attention_diag():
    import dataclasses

    import argus.ops
    from argus.kernels.attention import base_schedule
    for D in (64, 128):
        torch.manual_seed(D)
        B, H, S = 1, 2, 512
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            s = dataclasses.replace(base_schedule(D), ordered=True)
            out = argus.ops.attention(q, k, v, causal=causal, schedule=s)
            want = torch.nn.functional.scaled_dot_product_attention(
                q.double(), k.double(), v.double(), is_causal=causal)
            err = (out.double() - want).abs()
            blocks = [f"{err[:, :, r:r + 64].max().item():.1e}" for r in range(0, S, 64)]
            heads = [f"{err[:, h].max().item():.1e}" for h in range(H)]
            print(f"attention ping-pong D={D} causal={causal} {s}: max err per 64-row block "
                  f"{blocks}; per head {heads}", flush=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["attention", "moe"]
    for w in which:
        {"moe": moe_diag, "attention": attention_diag}[w]()
