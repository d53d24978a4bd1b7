"""GPU tier: argus.ops.moe's routing (route, then layout: the kernels of
argus/kernels/moe_routing.py, compiled) against the torch / pure-Python references of
tests/moe/routing_reference.py: ids exactly (the lower expert index wins ties), weights to a
few ulps, expert_start, tile_expert, tiles, pos and tile_rows exactly, at DeepSeek-V3's,
Qwen3's and Mixtral's routing, decode and prefill sizes, with tied logits (the interpreter
tests' check, tests/moe/test_moe_routing_split.py, on the card). The references compute the
grouped router's sigmoid as the kernel does (1 / (1 + exp(-x)), expf both), so that its ties
between group sums are the same ties."""

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
@pytest.mark.parametrize("tile_rows", [False, True])
def test_routing_matches_the_reference(name, T, tied, tile_rows):
    from argus.kernels import moe_routing as R
    from tests.moe import routing_reference as REF

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    bench = importlib.import_module("gpu_moe_bench")
    from argus.ops import moe_module as M
    E, k, H, I, routing = bench.MODELS[name]
    g = torch.Generator(device="cuda").manual_seed(T)
    logits = torch.randn(T, E, device="cuda", generator=g)
    if tied:
        logits = (logits * 2).round() / 2
    bias = (torch.randn(E, device="cuda", generator=g) * 4).round() / 32
    layer = M._layer(T, H, I, E, k, None)
    if tile_rows:   # a prefill schedule that skips padding halves: the layout writes TileRows
        if T <= 64:
            pytest.skip("decode schedules (swap_ab) take no TileRows")
        s = importlib.import_module("argus.kernels.moe").PREFILL
        import dataclasses
        layer = dataclasses.replace(layer, schedule=dataclasses.replace(
            s, skip_pad_halves=True), down_schedule=None)
    ws = M.routing_workspace(layer, torch.device("cuda"))
    for buf in ws.values():
        buf.fill_(-7)
    bench.routing_launches(M._launcher(False), logits, bias, layer, routing, ws)
    torch.cuda.synchronize()
    if routing[0] == "softmax":
        ids, weights = REF.topk_softmax(logits, k, routing[1])
    else:
        _, groups, topk_groups, scale = routing
        ids, weights = REF.topk_sigmoid_grouped(logits, bias, k, groups, topk_groups, True,
                                                float(scale))
    assert torch.equal(ws["ids"].view(T, k), ids)
    torch.testing.assert_close(ws["weights"], weights, rtol=2e-6, atol=1e-7)
    pad = layer.schedule.pad
    want = REF.layout(ids.view(-1), E, pad, R.max_padded_rows(T * k, E, pad) // pad)
    for key, got in (("start", "expert_start"), ("te", "tile_expert"), ("tiles", "tiles"),
                     ("pos", "pos")) + ((("rows", "tile_rows"),) if tile_rows else ()):
        assert torch.equal(ws[got].cpu(), want[key]), key
