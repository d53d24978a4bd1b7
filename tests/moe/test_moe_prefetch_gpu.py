"""GPU tier (`pytest -m gpu`, skipped without a Hopper GPU): the decode GEMMs' weight prefetch
before the PDL wait (MoeSchedule.prefetch) and the PDL permute before the gate-up, compiled
with the verifier on (the kernels verify clean). The layer must be bit-equal to the op's
PDL launch without prefetch on the same inputs, over several calls back to back on the same
buffers (replayed launch plans: the kernels overlap as in a decode loop) with new inputs each
time, and close to float64; at Qwen3-30B-A3B's sizes (T = 1, 16; gate-up whole and cut in 4)
and Mixtral's (T = 1). The same with the combine launched with PDL after the down
(MoeSchedule.pdl_combine), with and without the prefetch."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

from argus.ops import moe_module as M  # noqa: E402


@pytest.mark.parametrize("model,T,splits,mode", [
    ("qwen3", 1, 1, "prefetch"), ("qwen3", 1, 4, "prefetch"), ("qwen3", 16, 1, "prefetch"),
    ("mixtral", 1, 1, "prefetch"), ("qwen3", 1, 1, "pdl-combine"), ("qwen3", 16, 1, "both"),
    ("mixtral", 1, 1, "both")])
def test_prefetch_layer_is_bit_equal_to_the_default(model, T, splits, mode):
    E, k, H, I = (128, 8, 2048, 768) if model == "qwen3" else (8, 2, 4096, 14336)
    g = torch.Generator(device="cuda").manual_seed(T * 10 + splits)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device="cuda") / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g, device="cuda") / I ** 0.5).bfloat16()
    gate_up, down = M.decode_schedules(T, k, E, H, I)   # the default prefetches one ring
    gate_up, down = replace(gate_up, split_k=splits, prefetch=0), replace(down, prefetch=0)
    base = (gate_up, down)
    n = 0 if mode == "pdl-combine" else 1   # the prefetch: ring depths, or none
    fetched = (replace(gate_up, prefetch=n * gate_up.stages),
               replace(down, prefetch=n * down.stages, pdl_combine=mode != "prefetch"))
    x = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
    logits = torch.empty(T, E, device="cuda")
    outs = {name: torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
            for name in ("base", "fetched")}
    for call in range(3):   # the same buffers: the second and third calls replay their plans
        x.copy_(torch.randn(T, H, generator=g, device="cuda"))
        logits.copy_(torch.randn(T, E, generator=g, device="cuda"))
        for _ in range(4):   # back to back, so each call's kernels overlap the one before
            M.moe(x, w13, w2, logits, k, schedule=fetched, out=outs["fetched"])
        M.moe(x, w13, w2, logits, k, schedule=base, out=outs["base"])
        torch.cuda.synchronize()
        assert torch.equal(outs["fetched"], outs["base"]), (model, T, splits, mode, call)
        p = torch.softmax(logits.double(), dim=1)
        w, ids = p.topk(k, dim=1)
        ref = M.reference(x, w13, w2, ids, w / w.sum(dim=1, keepdim=True))
        err = ((outs["fetched"].double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (model, T, splits, mode, call, err)
