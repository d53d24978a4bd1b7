"""argus.ops.moe on the GPU, one schedule per subprocess (a kernel fault kills the CUDA context,
so in one pytest process the first failure makes every later MoE test fail the same way).

For each MoE schedule: the producer roles of both grouped GEMMs are checked to be elected
(one thread issues the pipeline steps: the cause of the 'unspecified launch failure' in
argus_moe_gate_up fixed in 8c03698), then the layer runs with each kernel synchronized and is
compared with the float64 reference.

    CUDA_LAUNCH_BLOCKING=1 .venv/bin/python scripts/gpu_moe_repro.py

prints one line per (schedule, layer): 'ok rel err ...' (< 1e-2 expected) or FAILED with the
error; exits 1 when any failed."""

import subprocess
import sys

SCHEDULES = ("TINY", "SMALL", "PREFILL", "PREFILL_TMA", "PREFILL_CLUSTER", "PREFILL_TMA_CLUSTER",
             "DECODE", "DECODE_N32_SPLIT2")
LAYERS = ((16, 8, 2, 1024, 512), (777, 16, 4, 1024, 512))


def one(schedule: str) -> None:
    import torch

    from argus.kernels import moe as MK
    from argus.ops import moe
    from argus.ops.moe import reference

    # the swap-AB decode schedules: token tiles of 8, and of 32 with both GEMMs cut in 2 along K
    s = MK.decode_schedule(32, split_k=2) if schedule == "DECODE_N32_SPLIT2" else \
        getattr(MK, schedule)
    for gated in (True, False):
        text = MK.grouped_gemm_kernel(gated, s.split_k > 1).compile(s=s).source.text
        producer = text[text.index("// role producer"):text.index("// role consumer")]
        elected = producer.index("if (gtid == 0)") < producer.index("mbar_arrive_expect_tx")
        print(f"{schedule} {'gate_up' if gated else 'down'}: producer elected: {elected}",
              flush=True)
    for T, E, k, H, I in LAYERS:
        g = torch.Generator(device="cuda").manual_seed(T)
        x = torch.randn(T, H, device="cuda", generator=g).bfloat16()
        w13 = (torch.randn(E, 2 * I, H, device="cuda", generator=g) / H ** 0.5).bfloat16()
        w2 = (torch.randn(E, H, I, device="cuda", generator=g) / I ** 0.5).bfloat16()
        ids = torch.rand(T, E, device="cuda", generator=g).topk(k, dim=1).indices
        w = torch.rand(T, k, device="cuda", generator=g)
        out = moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, schedule=s)
        torch.cuda.synchronize()
        want = reference(x, w13, w2, ids, w)
        err = ((out.double() - want).norm() / want.norm()).item()
        print(f"{schedule} T={T} E={E} k={k}: ok rel err {err:.2e}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(sys.argv[1])
        sys.exit(0)
    failed = 0
    for name in SCHEDULES:
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                           timeout=600)
        print(r.stdout, end="", flush=True)
        if r.returncode:
            failed += 1
            print(f"{name}: FAILED\n" + "\n".join(r.stderr.strip().splitlines()[-6:]),
                  flush=True)
    sys.exit(1 if failed else 0)
