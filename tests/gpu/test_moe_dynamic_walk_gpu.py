"""GPU tier: MoeSchedule(scheduler="dynamic"), the fp8 prefill grouped GEMMs on the dynamic
persistent walk (each CTA's producer draws its units from a per-stream work word,
argus/kernels/moe.py _draws / _slots; argus.ops.dynamic_walk.work_word), on the card: the
layer bit-identical to the static walk (the default FP8_PREFILL_SPLIT_SMEM_TMA on both GEMMs
and on the gate-up only, the fused quantize, the global-scale split), zero-row experts; the
word back at 0 after every call; DeepSeek-V3's widths; repeated calls on the op's replayed
launch plans; CUDA-graph replay with new routing (a graph's own word: the unit count changes
per replay, the word is left at 0 by each); two streams at once (a word each).
tests/moe/test_moe_dynamic_walk.py is the CPU tier (interpreter, verifier, NVRTC)."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_moe_fp8_gpu import _fp8_layer  # noqa: E402
from tests.gpu.test_moe_skip_pad_halves_gpu import (  # noqa: E402
    _bits,
    _fp8_outs,
    _replay_matches,
    _routing,
)

pytestmark = hopper_only()


def _dyn(s):
    return replace(s, scheduler="dynamic")


def _word():
    from argus.ops.dynamic_walk import work_word

    torch.cuda.synchronize()
    return work_word(torch.device("cuda", torch.cuda.current_device())).item()


def _variants():
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA

    smem = FP8_PREFILL_SPLIT_SMEM_TMA
    fused = replace(smem, quantize_out=True)
    return {"split_smem_tma": ((smem, smem), (_dyn(smem), _dyn(smem))),
            "split_smem_tma_gateup": ((smem, smem), (_dyn(smem), smem)),
            "split_smem_tma_fusedq": ((fused, smem), (_dyn(fused), _dyn(smem))),
            "split_smem_tma_sms8": ((replace(smem, num_sms=8),) * 2,
                                    (_dyn(replace(smem, num_sms=8)),) * 2),
            "split_tma": ((FP8_PREFILL_SPLIT_TMA,) * 2, (_dyn(FP8_PREFILL_SPLIT_TMA),) * 2)}


@pytest.mark.parametrize("variant", ["split_smem_tma", "split_smem_tma_gateup",
                                     "split_smem_tma_fusedq", "split_smem_tma_sms8",
                                     "split_tma"])
def test_fp8_dynamic_walk_is_bit_identical_on_the_card(variant):
    from argus.ops.moe import reference_fp8

    static, dynamic = _variants()[variant]
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, _, w13, s13, w2, s2 = layer = _fp8_layer(T, E, H, I, seed=3)
    ids, w = _routing(T, E, k, seed=4)
    outs = _fp8_outs(layer, ids, w, (static, dynamic, dynamic, dynamic))
    assert _word() == 0
    for out in outs[1:]:
        assert torch.equal(_bits(outs[0]), _bits(out))
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    err = ((outs[1].double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


def test_fp8_dynamic_walk_at_deepseek_v3_width():
    """DeepSeek-V3's H and I (32 of its experts, 3 of them without rows): 56 K blocks in the
    gate-up, 16 in the down, several units a CTA."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    T, E, k, H, I = 2048, 32, 8, 7168, 2048
    layer = _fp8_layer(T, E, H, I, seed=5)
    ids, w = _routing(T, E, k, seed=6, empty=3)
    outs = _fp8_outs(layer, ids, w, (FP8_PREFILL_SPLIT_SMEM_TMA,
                                     _dyn(FP8_PREFILL_SPLIT_SMEM_TMA)))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    assert _word() == 0


def test_fp8_dynamic_walk_on_replayed_launch_plans():
    """With `out` given, the op's second and later calls replay the first's launch plans (the
    work word's address among them): each gives the same bits, the word stays 0."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA
    from argus.ops import moe

    T, E, k, H, I = 512, 16, 4, 1024, 512
    x, _, w13, s13, w2, s2 = _fp8_layer(T, E, H, I, seed=13)
    ids, w = _routing(T, E, k, seed=14)
    ids = ids.int()   # int32 ids and f32 weights: the kernels read them as they are (replayable)
    s = _dyn(FP8_PREFILL_SPLIT_SMEM_TMA)
    ref = moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, w13_scale=s13, w2_scale=s2,
              schedule=FP8_PREFILL_SPLIT_SMEM_TMA)
    out = torch.empty_like(x)
    for _ in range(4):
        out.zero_()
        moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, w13_scale=s13, w2_scale=s2,
            schedule=s, out=out)
        assert torch.equal(_bits(out), _bits(ref))
        assert _word() == 0


def test_fp8_dynamic_walk_under_graph_replay_sees_new_routing():
    """Captured once, replayed with other routing (none empty, then five experts without
    rows): each replay draws the unit count of its own routing from the graph's word (left
    at 0 by the replay before) and equals the static walk run eagerly."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    _replay_matches(_dyn(FP8_PREFILL_SPLIT_SMEM_TMA), FP8_PREFILL_SPLIT_SMEM_TMA)


def test_fp8_dynamic_walk_on_two_streams_at_once():
    """Two layers launched on two streams without a sync between them: a work word each
    (per stream), so neither draws the other's units; each equals the static walk."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA

    T, E, k, H, I = 1500, 16, 4, 1024, 768
    layers = [_fp8_layer(T, E, H, I, seed=s) for s in (21, 22)]
    routes = [_routing(T, E, k, seed=s) for s in (23, 24)]
    refs = [_fp8_outs(layer, *r, [FP8_PREFILL_SPLIT_SMEM_TMA])[0]
            for layer, r in zip(layers, routes)]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in layers]
    outs = []
    for stream, layer, r in zip(streams, layers, routes):
        with torch.cuda.stream(stream):
            outs += _fp8_outs(layer, *r, [_dyn(FP8_PREFILL_SPLIT_SMEM_TMA)] * 3)
    torch.cuda.synchronize()
    for j, ref in enumerate(refs):
        for out in outs[3 * j:3 * j + 3]:
            assert torch.equal(_bits(out), _bits(ref))
