"""GPU tier: MoeSchedule(persistent=False), the prefill grouped GEMMs on one CTA (or cluster) per
unit of the largest layout (argus/kernels/moe.py unit_programs), on the card: the layer
bit-identical to the persistent schedule, fp8 (the prefill default FP8_PREFILL_SPLIT_SMEM_TMA
on both GEMMs and on the gate-up only, the global-scale 2x1 cluster) and bf16 (the rule's
PREFILL_TMA_CLUSTER, PREFILL_TMA), with zero-row experts (CTAs past the counted units exit);
and under CUDA-graph replay with new routing (the grid is a host integer from shapes; the
unit count is read on the device). tests/moe/test_moe_unit_grid.py is the CPU tier
(interpreter, verifier, NVRTC)."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_moe_fp8_gpu import _fp8_layer  # noqa: E402
from tests.gpu.test_moe_skip_pad_halves_gpu import (  # noqa: E402
    _bf16_layer,
    _bits,
    _fp8_outs,
    _replay_matches,
    _routing,
)

pytestmark = hopper_only()


def _grid(s):
    return replace(s, persistent=False)


@pytest.mark.parametrize("variant", ["split_smem_tma", "split_smem_tma_gateup",
                                     "split_tma_cluster"])
def test_fp8_unit_grid_is_bit_identical_on_the_card(variant):
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA
    from argus.ops.moe import reference_fp8

    base = {"split_smem_tma": (FP8_PREFILL_SPLIT_SMEM_TMA,) * 2,
            "split_smem_tma_gateup": (FP8_PREFILL_SPLIT_SMEM_TMA,) * 2,
            "split_tma_cluster": (replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2),) * 2}[variant]
    unit = (_grid(base[0]), base[1]) if variant.endswith("gateup") else \
        (_grid(base[0]), _grid(base[1]))
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, _, w13, s13, w2, s2 = layer = _fp8_layer(T, E, H, I, seed=3)
    ids, w = _routing(T, E, k, seed=4)
    outs = _fp8_outs(layer, ids, w, (base, unit))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    err = ((outs[1].double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


def test_fp8_unit_grid_at_deepseek_v3_width():
    """DeepSeek-V3's H and I (32 of its experts, 3 of them without rows): 56 K blocks in the
    gate-up, 16 in the down, a grid of several waves."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    T, E, k, H, I = 2048, 32, 8, 7168, 2048
    layer = _fp8_layer(T, E, H, I, seed=5)
    ids, w = _routing(T, E, k, seed=6, empty=3)
    outs = _fp8_outs(layer, ids, w, (FP8_PREFILL_SPLIT_SMEM_TMA,
                                     _grid(FP8_PREFILL_SPLIT_SMEM_TMA)))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))


@pytest.mark.parametrize("cluster", [False, True], ids=["tma", "tma_cluster"])
def test_bf16_unit_grid_is_bit_identical_on_the_card(cluster):
    from argus.kernels.moe import PREFILL_TMA, PREFILL_TMA_CLUSTER
    from argus.ops import moe
    from argus.ops.moe import reference

    base = PREFILL_TMA_CLUSTER if cluster else PREFILL_TMA
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, w13, w2 = _bf16_layer(T, E, H, I, seed=7)
    ids, w = _routing(T, E, k, seed=8)
    outs = [moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, schedule=s)
            for s in (base, _grid(base))]
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    ref = reference(x, w13, w2, ids, w)
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2


def test_fp8_unit_grid_under_graph_replay_sees_new_routing():
    """Captured once on the unit grid, replayed with other routing (none empty, then five
    experts without rows): the grid was fixed at capture from shapes, the units each replay
    walks come from the device's count, and the result equals the persistent schedule run
    eagerly on the same routing."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    _replay_matches(_grid(FP8_PREFILL_SPLIT_SMEM_TMA), FP8_PREFILL_SPLIT_SMEM_TMA)
