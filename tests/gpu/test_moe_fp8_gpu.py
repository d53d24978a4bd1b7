"""GPU tier: the fp8 MoE path's activation quantization (argus/kernels/moe_fp8.py) on the card,
bit for bit against the torch reference of tests/moe/test_moe_fp8_interp.py computed on the GPU
(e4m3 bytes and f32 scales), at DeepSeek-V3's hidden size."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.moe.test_moe_fp8_interp import SENTINEL, activations  # noqa: E402

import argus as ag  # noqa: E402
from argus.kernels.moe_fp8 import (AMAX_FLOOR, E4M3_MAX, GROUP,  # noqa: E402
                                   permute_quantize_kernel, quantize_1x128_kernel)
from argus.ops.quantize_fp8 import reference as quantize_reference  # noqa: E402

pytestmark = hopper_only()

E4M3 = torch.float8_e4m3fn


def _reference(x: torch.Tensor):
    """x [M, K] -> (e4m3 [M, K/128, 128], scales [M, K/128]) with the kernel's rounding, on the
    GPU: argus.ops.quantize_fp8.reference (correctly rounded f32 divisions; torch's own
    `amax / 448.0` on CUDA is amax * fl(1/448), which differs in the last bit for about half
    the groups, the scale mismatches the quick tier saw)."""
    return quantize_reference(x)


def _bytes_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    bad = (a.view(torch.uint8) != b.view(torch.uint8)).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} e4m3 bytes differ, first at {bad[0].tolist()}"


@pytest.mark.parametrize("src,groups,threads", [(ag.bf16, 4, 32), (ag.f32, 8, 32),
                                                 (ag.bf16, 4, 128)])
@pytest.mark.parametrize("rows", [1, 333, 4096])
def test_quantize_1x128_matches_torch(src, groups, threads, rows):
    cols = 7168
    x = torch.from_numpy(activations(rows, cols)).cuda().to(src.torch_dtype())
    xq = torch.zeros(rows, cols // GROUP, GROUP, device="cuda").to(E4M3)
    padded = (rows + 3) // 4 * 4
    scale_t = torch.full((cols // GROUP, padded), SENTINEL, device="cuda")
    quantize_1x128_kernel(src, groups, threads)(x.view(rows, -1, GROUP), xq, scale_t)
    torch.cuda.synchronize()
    q_ref, s_ref = _reference(x)
    _bytes_equal(xq, q_ref)
    assert torch.equal(scale_t[:, :rows], s_ref.T)
    assert bool((scale_t[:, rows:] == SENTINEL).all())


@pytest.mark.parametrize("tokens,top_k", [(16, 8), (1000, 2)])
def test_permute_quantize_matches_torch(tokens, top_k):
    cols = 4096
    x = torch.from_numpy(activations(tokens, cols, seed=top_k)).cuda().to(torch.bfloat16)
    entries = tokens * top_k
    order = np.random.default_rng(top_k).permutation(entries)
    pos_host = order + order // 3          # a padding row after every third entry
    rows = int(pos_host.max()) + 1
    pos = torch.from_numpy(pos_host.astype(np.int32)).cuda().view(-1, 1)
    xq = torch.full((rows, cols // GROUP, GROUP), SENTINEL, device="cuda").to(E4M3)
    scale_t = torch.full((cols // GROUP, rows), SENTINEL, device="cuda")
    permute_quantize_kernel(top_k, 4)(x.view(tokens, -1, GROUP), pos, xq, scale_t)
    torch.cuda.synchronize()
    q_ref, s_ref = _reference(x)
    token_of = torch.arange(entries, device="cuda") // top_k
    index = pos.view(-1).long()
    _bytes_equal(xq[index], q_ref[token_of])
    assert torch.equal(scale_t[:, index], s_ref[token_of].T)
    written = torch.zeros(rows, dtype=torch.bool, device="cuda")
    written[index] = True
    assert bool((xq[~written].float() == SENTINEL).all())
    assert bool((scale_t[:, ~written] == SENTINEL).all())


def test_quantize_fp8_op_feeds_scaled_matmul():
    """argus.ops.quantize_fp8's (xq, scale) go into argus.ops.scaled_matmul's block-scaled path
    as they are (scale is MN-major, no copy): the product is bit for bit the one of the
    reference quantization fed through the row-major scale path (a copy), it matches float64
    of the dequantized operands within the fp8 tensor core's accumulation error, and x @ w.T
    within fp8's error."""
    from argus.ops import quantize_fp8, scaled_matmul

    m, n, k = 333, 512, 1024
    gen = torch.Generator(device="cuda").manual_seed(16)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=gen)
    xq, sa = quantize_fp8(x)
    assert xq.dtype == E4M3 and tuple(sa.shape) == (m, k // GROUP) and sa.stride(0) == 1
    q_ref, s_ref = _reference(x)
    _bytes_equal(xq.view(m, -1, GROUP), q_ref)
    assert torch.equal(sa, s_ref)
    blocks = w.view(n // GROUP, GROUP, k // GROUP, GROUP)
    sb = blocks.abs().amax(dim=(1, 3)).clamp(min=AMAX_FLOOR) / E4M3_MAX
    wq = (blocks / sb[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).view(n, k)
    out = scaled_matmul(xq, wq, sa, sb, out_dtype=torch.float32)
    torch.cuda.synchronize()
    # the same kernel on the same bits: the bit-exact reference quantization, its row-major
    # scales transposed into a copy by the op, gives the same fp32 output to the bit
    assert s_ref.stride(1) == 1
    assert torch.equal(scaled_matmul(q_ref.reshape(m, k), wq, s_ref, sb,
                                     out_dtype=torch.float32), out)
    a64 = xq.double() * sa.double().repeat_interleave(GROUP, 1)
    b64 = wq.double() * sb.double().repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)
    ref = a64 @ b64.T
    # Not fp32's ~1e-7: the e4m3 products are exact, but Hopper's fp8 wgmma accumulates each
    # 128-K block (4 k32 steps, promoted to fp32 on the CUDA cores after each block) in a
    # 22-bit float (e8m13: 13 mantissa bits, truncated; DeepSeek-V3 section 3.5.2,
    # SageAttention2), whose unit is 2^-13 = 1.2e-4 of the running partial: measured 1.27e-4
    # on the H200 (2026-12-02), against the 1e-5 this test first asked. One unit per k32
    # step of a block: 4 * 2^-13 = 4.9e-4 (test_ops_scaled_matmul_gpu.py bounds the same path
    # by 5e-4). A misread scale (another token's or block's) moves the result by 10% or more.
    assert (out.double() - ref).norm() / ref.norm() < 4 * 2.0 ** -13
    exact = x.double() @ w.double().T
    assert (out.double() - exact).norm() / exact.norm() < 0.05


# ----------------------------------------------------------------------------- the fp8 layer


def _fp8_layer(T, E, H, I, seed, form="block"):
    """x, logits, e4m3 weights from bf16 ones with 128x128 block scales (amax / 448), in the
    scale form asked for (per expert / per tensor: the weights quantized with that scale)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
    logits = torch.randn(T, E, generator=g, device="cuda")
    out = []
    for n, k in ((2 * I, H), (H, I)):
        w = torch.randn(E, n, k, generator=g, device="cuda") / k ** 0.5
        if form == "block":
            blocks = w.view(E, n // GROUP, GROUP, k // GROUP, GROUP)
            scale = blocks.abs().amax(dim=(2, 4)).clamp(min=AMAX_FLOOR) / E4M3_MAX
            q = (blocks / scale[:, :, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
            out += [q.view(E, n, k), scale.contiguous()]
        else:
            scale = w.abs().amax(dim=(1, 2)) / E4M3_MAX if form == "expert" else \
                w.abs().amax() / E4M3_MAX
            q = (w / scale.view(-1, 1, 1)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
            out += [q, scale.float()]
    w13, s13, w2, s2 = out
    return x, logits, w13, s13, w2, s2


@pytest.mark.parametrize("T,E,k,H,I,form", [
    (777, 16, 4, 1024, 512, "block"),
    (5000, 8, 2, 1024, 1024, "block"),          # the prefill default, many units per expert
    (16, 8, 2, 512, 256, "block"),              # decode-sized: the 64-row schedule
    (300, 8, 2, 512, 256, "expert"),
    (300, 8, 2, 512, 256, "tensor"),
    (512, 32, 8, 7168, 2048, "block"),          # DeepSeek-V3's H and I (32 of its experts)
    # the prefill default (FP8_PREFILL_SPLIT_SMEM_TMA) off DeepSeek-V3's shapes: H/128 odd
    # (the down's last tile one real half, its second weight-scale block past the tensor in
    # the TMA box), K/128 = 3, 5, 6, 11 (weight scales zero-padded per call), a broadcast
    # per-tensor scale then padded; past 256 rows an expert (the persistent walk; 777 x 4 / 16
    # and DeepSeek-V2-Lite's row take the default on one CTA a unit)
    (1500, 8, 2, 384, 384, "block"),
    (1200, 8, 2, 640, 768, "tensor"),
    (1024, 4, 1, 2048, 1408, "block"),          # DeepSeek-V2-Lite's H and I
])
def test_moe_fp8_matches_float64(T, E, k, H, I, form):
    """argus.ops.moe with e4m3 weights against float64 with the same quantization
    (reference_fp8: x and h quantized 1x128 as the kernels do)."""
    from argus.ops import moe
    from argus.ops.moe import reference_fp8

    x, logits, w13, s13, w2, s2 = _fp8_layer(T, E, H, I, seed=T + E, form=form)
    out = moe(x, w13, w2, logits, k, w13_scale=s13, w2_scale=s2)
    p = torch.softmax(logits.double(), dim=1)
    w, ids = p.topk(k, dim=1)
    w = w / w.sum(dim=1, keepdim=True)
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    assert out.shape == (T, H) and out.dtype == torch.bfloat16
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


@pytest.mark.parametrize("variant", ["default", "overlap", "cluster_tma", "small",
                                     "late_release", "fast_rsqrt_silu", "split", "split_tma",
                                     "split_smem", "split_smem_tma", "smem",
                                     "split_smem_tma_fusedq", "split_smem_fusedq4"])
def test_moe_fp8_schedules_on_the_card(variant, monkeypatch):
    """Every fp8 schedule the bench times, on one layer, against float64 (overlapped
    promotion compiles without the verifier: its wgmma.k-once is not proven yet)."""
    from dataclasses import replace

    from argus.kernels.moe_fp8 import (FP8_PREFILL, FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_SMEM,
                                       FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA,
                                       FP8_SMALL)
    from argus.ops import moe
    from argus.ops.moe import reference_fp8

    # the split and smem-scale schedules (n_split=2, smem_scales) at I = 768: the down's
    # K/128 = 6, so its weight scales are padded to 8 columns for the scale boxes
    schedule = {"split": FP8_PREFILL_SPLIT, "split_tma": FP8_PREFILL_SPLIT_TMA,
                "split_smem": FP8_PREFILL_SPLIT_SMEM,
                "split_smem_tma": FP8_PREFILL_SPLIT_SMEM_TMA,
                "smem": replace(FP8_PREFILL, smem_scales=True),
                "default": FP8_PREFILL, "overlap": replace(FP8_PREFILL, overlap=True),
                "cluster_tma": replace(FP8_PREFILL, stages=5, cluster_m=2, epilogue="tma"),
                "small": FP8_SMALL,
                "late_release": replace(FP8_PREFILL, late_release=True),
                "fast_rsqrt_silu": replace(FP8_PREFILL, fast_silu=True,
                                           rsqrt_silu=True),
                # the gate-up quantizing its own output (quantize_out): scripts/gpu_moe_bench.py
                "split_smem_tma_fusedq": replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True),
                "split_smem_fusedq4": (replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True,
                                               stages=4), FP8_PREFILL_SPLIT_SMEM_TMA),
                }[variant]
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, logits, w13, s13, w2, s2 = _fp8_layer(T, E, H, I, seed=3)
    g = torch.Generator(device="cuda").manual_seed(4)
    ids = torch.rand(T, E, generator=g, device="cuda").topk(k, dim=1).indices
    w = torch.rand(T, k, generator=g, device="cuda")
    if variant == "overlap":   # the verifier switch is read at compile time
        monkeypatch.setenv("ARGUS_VERIFY", "0")
    out = moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, w13_scale=s13, w2_scale=s2,
              schedule=schedule)
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


def test_moe_fp8_fused_quantize_is_bit_identical_on_the_card():
    """quantize_out (the gate-up writing h in e4m3 plus its 1x128 scales) gives the layer the
    unfused default computes (bf16 h, then quantize_1x128), bit for bit, as in the
    interpreter (tests/moe/test_moe_fp8_fused_quantize.py)."""
    from dataclasses import replace

    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA
    from argus.ops import moe

    T, E, k, H, I = 1500, 16, 4, 1024, 768
    x, logits, w13, s13, w2, s2 = _fp8_layer(T, E, H, I, seed=3)
    g = torch.Generator(device="cuda").manual_seed(4)
    ids = torch.rand(T, E, generator=g, device="cuda").topk(k, dim=1).indices
    w = torch.rand(T, k, generator=g, device="cuda")
    outs = [moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, w13_scale=s13,
                w2_scale=s2, schedule=s)
            for s in (FP8_PREFILL_SPLIT_SMEM_TMA,
                      replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True))]
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


@pytest.mark.parametrize("form", ["block", "tensor"])
def test_moe_fp8_kept_scale_operands_replay_and_see_updates(form):
    """Weight scales that need a copy (K/128 = 5 and 6 through the smem_scales default: padded;
    a per-tensor scale: broadcast and padded) are derived once per scale tensor and version
    (argus.ops.moe._scale_operand): a repeated call into one `out` replays its plans on the
    kept operands, a call after an in-place update of the scales equals a fresh call on new
    tensors bit for bit, and a captured graph re-derives them from the scales' current values
    at each replay (tests/moe/test_moe_fp8_scale_cache.py runs the host side on the CPU)."""

    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as S
    from argus.ops import moe
    from argus.ops import moe_module as M
    T, E, k, H, I = 64, 8, 2, 640, 768
    x, _, w13, s13, w2, s2 = _fp8_layer(T, E, H, I, seed=31, form=form)
    g = torch.Generator(device="cuda").manual_seed(32)
    ids = torch.rand(T, E, generator=g, device="cuda").topk(k, dim=1).indices.int()
    w = torch.rand(T, k, generator=g, device="cuda")

    def call(out, a, b):
        return moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w, w13_scale=a,
                   w2_scale=b, schedule=S, out=out)

    out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
    first = call(out, s13, s2).clone()
    programs = M._workspace(M._layer(T, H, I, E, k, S, True), x.device, False)["programs"]
    recorded = len(programs)
    assert recorded >= 1
    assert torch.equal(call(out, s13, s2), first) and len(programs) == recorded   # replayed
    s13.mul_(0.5)
    s2.mul_(2.0)
    updated = call(out, s13, s2).clone()
    assert len(programs) == recorded + 1                   # the new operands: recorded anew
    assert torch.equal(updated, call(None, s13.clone(), s2.clone()))
    assert not torch.equal(updated, first)
    torch.cuda.synchronize()
    captured = torch.empty_like(out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(captured, s13, s2)
    s2.mul_(0.25)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, call(None, s13.clone(), s2.clone()))


@pytest.mark.parametrize("which", ["both", "down", "gate_up"])
@pytest.mark.parametrize("T,E,k,H,I", [(1500, 16, 4, 1024, 768),
                                       (512, 32, 8, 7168, 2048)])   # DeepSeek-V3's H and I
def test_moe_fp8_half_tile_last_is_bit_identical_on_the_card(which, T, E, k, H, I):
    """MoeFp8Schedule.half_tile_last (an expert's last m-tile of <= 64 routed rows computed
    by both consumer warpgroups on its rows [0, 64), a column half each) gives the layer of
    the prefill default bit for bit (the same wgmma K blocks and promotions per element: as
    in the interpreter, tests/moe/test_moe_half_tile.py), on both GEMMs or one of them, at
    routing with zero-row experts and last tiles of <= 64 and > 64 rows; and float64 within
    the default's tolerance."""
    from dataclasses import replace

    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as D
    from argus.ops.moe import reference_fp8
    from tests.gpu.test_moe_skip_pad_halves_gpu import _bits, _fp8_outs, _routing, _tails

    half = replace(D, half_tile_last=True)
    schedule = {"both": half, "down": (D, half), "gate_up": (half, D)}[which]
    x, _, w13, s13, w2, s2 = layer = _fp8_layer(T, E, H, I, seed=3 + T)
    ids, w = _routing(T, E, k, seed=4 + T, empty=2 if E == 16 else 3)
    tails = _tails(ids, E)
    assert any(0 < t <= 64 for t in tails) and any(t > 64 for t in tails), tails
    outs = _fp8_outs(layer, ids, w, (D, schedule))
    assert torch.equal(_bits(outs[0]), _bits(outs[1]))
    ref = reference_fp8(x, w13, w2, s13, s2, ids, w)
    err = ((outs[1].double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err
