"""GPU tier: MoeFp8Schedule.pair_multicast (the fp8 smem-scale grouped GEMMs in 2-CTA clusters
along M, the weight tile multicast by a pair whose two m-tiles have one expert, 128-row padding
kept; argus/kernels/moe_fp8.py) on the card: the layer bit-identical to the default
FP8_PREFILL_SPLIT_SMEM_TMA, both GEMMs paired and the gate-up alone (the bench's
split_smem_tma_pair and split_smem_tma_pair_gateup), with quantize_out and skip_pad_halves, at
routings with zero-row experts, pairs straddling two experts and an odd m-tile count; and at
DeepSeek-V3's widths. tests/moe/test_moe_fp8_pair_multicast.py is the CPU tier (interpreter,
verifier, NVRTC)."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_moe_fp8_gpu import _fp8_layer  # noqa: E402
from tests.gpu.test_moe_skip_pad_halves_gpu import _bits, _fp8_outs, _routing  # noqa: E402

pytestmark = hopper_only()


def _m_tiles(ids, E, pad=128):
    counts = torch.bincount(ids.view(-1), minlength=E)
    return [-(-int(c) // pad) for c in counts.tolist()]


def _schedules(variant):
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as D

    pair = replace(D, pair_multicast=True)
    quant = replace(D, quantize_out=True, stages=4)
    skip = replace(D, skip_pad_halves=True)
    return {"pair": (pair, D),
            "pair_gateup": ((pair, D), D),
            "quantize_out": ((replace(quant, pair_multicast=True), pair), (quant, D)),
            "skip_pad_halves": (replace(skip, pair_multicast=True), skip)}[variant]


@pytest.mark.parametrize("seed", [4, 7])
@pytest.mark.parametrize("variant", ["pair", "pair_gateup", "quantize_out", "skip_pad_halves"])
def test_pair_multicast_is_bit_identical_on_the_card(variant, seed):
    from argus.ops.moe import reference_fp8

    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, _, w13, s13, w2, s2 = layer = _fp8_layer(T, E, H, I, seed=3)
    ids, w = _routing(T, E, k, seed=seed)
    tiles = _m_tiles(ids, E)
    assert 0 in tiles and any(t % 2 for t in tiles), tiles   # zero-row experts, straddles
    paired, base = _schedules(variant)
    outs = _fp8_outs(layer, ids, w, (base, paired))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    err = ((outs[1].double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


@pytest.mark.parametrize("odd", [False, True])
def test_pair_multicast_at_deepseek_v3_width(odd):
    """DeepSeek-V3's H and I (32 of its experts): 56 K blocks in the gate-up, 16 in the
    down; the m-tile count odd or even (the last pair's second CTA without an m-tile)."""
    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as D

    T, E, k, H, I = 512, 32, 8, 7168, 2048
    layer = _fp8_layer(T, E, H, I, seed=5)
    for seed in range(6, 40):
        ids, w = _routing(T, E, k, seed=seed, empty=3)
        if sum(_m_tiles(ids, E)) % 2 == odd:
            break
    outs = _fp8_outs(layer, ids, w, (D, replace(D, pair_multicast=True)))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
