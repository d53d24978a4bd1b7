"""Device time of the MoE decode experts without programmatic dependent launch, with it (the
op's default), and with it plus the weight prefetch before the wait (MoeSchedule.prefetch:
each GEMM's first unit's first n K steps of weights into L2 while the kernel before still
runs, the permute launched with PDL; docs/pdl.md), host launch cost hidden: the calls are
queued behind a GPU sleep, so the device runs them back to back and the events around them
time the device alone. One call's output of each mode is checked bit-equal to the first
mode's (the timed calls are not checked). The schedules are written out here: at split_k 1
they are the op's own decode_schedules at these shapes (gate-up 8 stages, down 15, bn 8).
Prefetch modes: "pf1x" n = each GEMM's ring depth (gate-up 8, down 15), "pf2x" twice that,
"pfgu" / "pfdn" the gate-up's or the down's alone (the down's early CTAs prefetch long before
they use it, which L2 may not keep through the gate-up's stream).

    python3 -u scripts/gpu_moe_pdl.py [--calls 60] [--rounds 5]
Shapes: Qwen3-30B-A3B (H 2048, I 768, E 128, k 8) and Mixtral (H 4096, I 14336, E 8, k 2) at
T = 1, split_k 1 and 4 for Qwen3's gate-up."""

import argparse
import statistics

import torch

from argus.kernels.moe import decode_schedule
import importlib

M = importlib.import_module("argus.ops.moe")   # argus.ops.moe the attribute is the op function

MODELS = {"qwen3-30b-a3b": (2048, 768, 128, 8), "mixtral": (4096, 14336, 8, 2)}


def device_us(fn, calls: int) -> float:
    fn()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(2e8))          # ~0.1 s of GPU cycles: the host queues every call
    t0.record()
    for _ in range(calls):
        fn()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) * 1e3 / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; device us per call, "
          f"median of {args.rounds} rounds of {args.calls} queued calls")
    for model, (H, I, E, k) in MODELS.items():
        g = torch.Generator().manual_seed(3)
        w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16().cuda()
        w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16().cuda()
        x = torch.randn(1, H, generator=g).bfloat16().cuda()
        ids = torch.randperm(E, generator=g)[:k].reshape(1, k).cuda()
        weights = torch.rand(1, k, generator=g).cuda()
        for splits in ((1, 4) if model == "qwen3-30b-a3b" else (1,)):
            res, ref = {}, None
            # mode -> (pdl, gate-up prefetch, down prefetch)
            modes = {"off": (False, 0, 0), "pdl": (True, 0, 0), "pf1x": (True, 8, 15),
                     "pf2x": (True, 16, 30), "pfgu": (True, 8, 0), "pfdn": (True, 0, 15)}
            for mode, (pdl, pf_gu, pf_dn) in modes.items():
                layer = M.Layer(1, H, I, E, k,
                                decode_schedule(8, split_k=splits, pdl=pdl, prefetch=pf_gu),
                                decode_schedule(8, stages=15, pdl=pdl, prefetch=pf_dn))
                out = M.experts(x, w13, w2, ids, weights, layer)
                torch.cuda.synchronize()
                ref = out.clone() if ref is None else ref
                assert torch.equal(out, ref), f"{model} split {splits} {mode}: bits differ"
                res[mode] = statistics.median(
                    device_us(lambda: M.experts(x, w13, w2, ids, weights, layer), args.calls)
                    for _ in range(args.rounds))
            print(f"{model:14s} T=1 split_k={splits}: PDL off {res['off']:7.2f} us, "
                  f"on {res['pdl']:7.2f} us ({res['off'] - res['pdl']:+.2f} us), "
                  f"+prefetch 1x {res['pf1x']:7.2f} us ({res['pdl'] - res['pf1x']:+.2f} us "
                  f"vs on), 2x {res['pf2x']:7.2f} us ({res['pdl'] - res['pf2x']:+.2f} us), "
                  f"gate-up only {res['pfgu']:7.2f} us ({res['pdl'] - res['pfgu']:+.2f} us), "
                  f"down only {res['pfdn']:7.2f} us ({res['pdl'] - res['pfdn']:+.2f} us)",
                  flush=True)


if __name__ == "__main__":
    main()
