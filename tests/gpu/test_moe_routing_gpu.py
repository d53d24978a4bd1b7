"""GPU tier: the reworked routing kernels (argus/kernels/moe_routing.py) against the ones before
them (moe_routing_old.py), compiled, bit for bit: ids, weights, expert_start, tile_expert,
tiles and pos, at DeepSeek-V3's, Qwen3's and Mixtral's routing, decode and prefill sizes, with
tied logits (the interpreter tests' check, tests/moe/test_moe_routing_split.py, on the card:
the order of the GPU's reductions is what makes the weights' bits)."""

import importlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "mixtral"])
@pytest.mark.parametrize("T", [1, 64, 4097])
@pytest.mark.parametrize("tied", [False, True])
def test_routing_matches_the_old_kernels_bit_for_bit(name, T, tied):
    from argus.kernels import moe_routing as R
    from argus.kernels import moe_routing_old as OLD

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    bench = importlib.import_module("gpu_moe_bench")
    M = importlib.import_module("argus.ops.moe")
    E, k, H, I, routing = bench.MODELS[name]
    g = torch.Generator(device="cuda").manual_seed(T)
    logits = torch.randn(T, E, device="cuda", generator=g)
    if tied:
        logits = (logits * 2).round() / 2
    bias = (torch.randn(E, device="cuda", generator=g) * 4).round() / 32
    layer = M._layer(T, H, I, E, k, None)
    N, pad = T * k, layer.schedule.pad
    MT = R.max_padded_rows(N, E, pad) // pad
    i32 = dict(dtype=torch.int32, device="cuda")

    def bufs(mod):
        C = -(-N // mod.chunk_entries(N))
        return dict(ids=torch.full((N,), -7, **i32),
                    weights=torch.full((T, k), -7.0, device="cuda"),
                    counts=torch.empty(C, E, **i32), base=torch.empty(C, E, **i32),
                    steps=torch.empty(R.step_base_shape(N, E), **i32),
                    totals=torch.empty(1, E, **i32), start=torch.full((1, E), -7, **i32),
                    te=torch.full((MT, 1), -7, **i32), tiles=torch.full((1, 1), -7, **i32),
                    pos=torch.full((N, 1), -7, **i32))

    run = M._launcher(False)
    old, new = bufs(OLD), bufs(R)
    bench.routing_launches(OLD, run, logits, bias, layer, routing, old)
    bench.routing_launches(R, run, logits, bias, layer, routing, new)
    torch.cuda.synchronize()
    for key in ("ids", "weights", "start", "tiles", "pos", "te"):
        assert torch.equal(old[key], new[key]), key
