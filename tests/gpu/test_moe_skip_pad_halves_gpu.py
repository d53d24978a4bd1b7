"""GPU tier: MoeSchedule.skip_pad_halves (a consumer warpgroup whose 64 rows of an m-tile are
all padding only releases the unit's stages; argus/kernels/moe.py consume_unit) on the card:
the layer bit-identical to the same schedule without the skip, fp8 (the prefill default
FP8_PREFILL_SPLIT_SMEM_TMA, with rsqrt_silu, with the fused quantize) and bf16 (PREFILL_TMA, the
rule's 2x1-cluster PREFILL_TMA_CLUSTER), at routing with zero-row experts and experts whose
last tile holds <= 64 and > 64 rows; and under CUDA-graph replay with new routing (TileRows
is written by the layout kernel on the device). tests/moe/test_moe_skip_pad_halves.py is the
CPU tier (interpreter, verifier, NVRTC)."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_moe_fp8_gpu import _fp8_layer  # noqa: E402

pytestmark = hopper_only()


def _routing(T, E, k, seed, empty=2):
    """ids [T, k] over the first E - empty experts (the last `empty` get no row), skewed so
    the experts' row counts (and their last tiles' rows) spread, and weights."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.rand(T, E - empty, generator=g, device="cuda")
    scores = scores * torch.linspace(0.3, 1.0, E - empty, device="cuda")
    ids = scores.topk(k, dim=1).indices
    return ids, torch.rand(T, k, generator=g, device="cuda")


def _tails(ids, E, pad=128):
    counts = torch.bincount(ids.view(-1), minlength=E)
    return [int(c) % pad for c in counts.tolist() if c]


def _bits(t):
    return t.view(torch.int16)


def _bf16_layer(T, E, H, I, seed):
    """x [T, H] and bf16 weights w13 [E, 2I, H], w2 [E, H, I] (scaled by 1 / sqrt(fan-in))."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
    w13 = (torch.randn(E, 2 * I, H, generator=g, device="cuda") / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g, device="cuda") / I ** 0.5).bfloat16()
    return x, w13, w2


def _fp8_outs(layer, ids, w, schedules):
    """The fp8 layer `layer` (_fp8_layer's x, logits, w13, s13, w2, s2) on routing (ids [T, k],
    weights w) with each of `schedules`, in order."""
    from argus.ops import moe

    x, _, w13, s13, w2, s2 = layer
    return [moe(x, w13, w2, None, ids.shape[1], topk_ids=ids, topk_weights=w, w13_scale=s13,
                w2_scale=s2, schedule=s) for s in schedules]


def _replay_matches(schedule, reference):
    """Asserts that an fp8 layer captured once in a CUDA graph with `schedule` and replayed with
    other routing copied into the captured ids and weights (none empty, then five experts
    without rows) equals `reference` run eagerly on the same routing, bit for bit: whatever
    the schedule reads of the routing comes from the device at each replay."""
    T, E, k, H, I = 1024, 16, 4, 1024, 512
    layer = _fp8_layer(T, E, H, I, seed=9)
    ids, w = _routing(T, E, k, seed=10)
    _fp8_outs(layer, ids, w, [schedule])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = _fp8_outs(layer, ids, w, [schedule])
    for seed, empty in ((11, 0), (12, 5)):
        new_ids, new_w = _routing(T, E, k, seed=seed, empty=empty)
        ids.copy_(new_ids)
        w.copy_(new_w)
        graph.replay()
        torch.cuda.synchronize()
        (eager,) = _fp8_outs(layer, ids, w, [reference])
        assert torch.equal(_bits(out), _bits(eager))


@pytest.mark.parametrize("variant", ["split_smem_tma", "split_smem_tma_rsqrt",
                                     "split_smem_tma_fusedq"])
def test_fp8_skip_is_bit_identical_on_the_card(variant):
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA
    from argus.ops.moe import reference_fp8

    base = {"split_smem_tma": FP8_PREFILL_SPLIT_SMEM_TMA,
            "split_smem_tma_rsqrt": replace(FP8_PREFILL_SPLIT_SMEM_TMA, rsqrt_silu=True),
            "split_smem_tma_fusedq": replace(FP8_PREFILL_SPLIT_SMEM_TMA,
                                             quantize_out=True)}[variant]
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, _, w13, s13, w2, s2 = layer = _fp8_layer(T, E, H, I, seed=3)
    ids, w = _routing(T, E, k, seed=4)
    tails = _tails(ids, E)
    assert any(0 < t <= 64 for t in tails) and any(t > 64 for t in tails), tails
    outs = _fp8_outs(layer, ids, w, (base, replace(base, skip_pad_halves=True)))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    err = ((outs[1].double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


def test_fp8_skip_at_deepseek_v3_width():
    """DeepSeek-V3's H and I (32 of its experts): 56 K blocks in the gate-up, 16 in the
    down, so a skipped warpgroup releases many stages per unit."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    T, E, k, H, I = 512, 32, 8, 7168, 2048
    layer = _fp8_layer(T, E, H, I, seed=5)
    ids, w = _routing(T, E, k, seed=6, empty=3)
    outs = _fp8_outs(layer, ids, w, (FP8_PREFILL_SPLIT_SMEM_TMA,
                                     replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True)))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))


@pytest.mark.parametrize("cluster", [False, True], ids=["tma", "tma_cluster"])
def test_bf16_skip_is_bit_identical_on_the_card(cluster):
    from argus.kernels.moe import PREFILL_TMA, PREFILL_TMA_CLUSTER
    from argus.ops import moe
    from argus.ops.moe import reference

    base = PREFILL_TMA_CLUSTER if cluster else PREFILL_TMA
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, w13, w2 = _bf16_layer(T, E, H, I, seed=7)
    ids, w = _routing(T, E, k, seed=8)
    # some expert's last unit leaves its last 64-row warpgroup all padding: a skip happens
    tails = _tails(ids, E, base.pad)
    assert any(0 < t <= base.pad - 64 for t in tails), tails
    outs = [moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, schedule=s)
            for s in (base, replace(base, skip_pad_halves=True))]
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    ref = reference(x, w13, w2, ids, w)
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2


def test_fp8_skip_under_graph_replay_sees_new_routing():
    """Captured once with the skip, replayed with other routing: each replay's TileRows comes
    from the layout kernel on the device (nothing read on the host), and the result equals
    the schedule without the skip run eagerly on the same routing."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    _replay_matches(replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True),
                    FP8_PREFILL_SPLIT_SMEM_TMA)
