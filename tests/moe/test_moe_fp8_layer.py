"""The fp8 MoE layer (argus.ops.moe with e4m3 weights and w13_scale / w2_scale) without a GPU:
the block-scaled grouped GEMMs (argus/kernels/moe_fp8.py grouped_gemm_fp8_kernel) and the
whole expert half in the interpreter against a float64 reference with the same quantization
(argus.ops.moe.reference_fp8), for block, per-expert and per-tensor weight scales; the
argument checks; the verifier; NVRTC builds without spills."""

from dataclasses import replace

import pytest

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.errors import LaunchError
from argus.kernels.moe_fp8 import (FP8_PREFILL, FP8_PREFILL_OVERLAP, FP8_PREFILL_SPLIT_SMEM_TMA,
                                   FP8_SMALL, MoeFp8Schedule, grouped_gemm_fp8_kernel)
from argus.runtime import nvrtc_available
from tests.fp8_k_loops import k_loop_kernel

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

E4M3 = torch.float8_e4m3fn


def _spread(shape, seed):
    """Scales over two orders of magnitude, so a scale applied to the wrong block (expert,
    plane, row block or K block) shows."""
    g = torch.Generator().manual_seed(seed)
    return torch.exp(torch.rand(shape, generator=g) * 4.6 - 2.3)


def _fp8_weights(E, H, I, seed, form="block"):
    """e4m3 weights (values spread over e4m3's range) and their scales in one of the forms
    argus.ops.moe takes: [E, N/128, K/128] blocks, [E] per expert, or one element."""
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, generator=g) * 60).clamp(-448, 448).to(E4M3)
    w2 = (torch.randn(E, H, I, generator=g) * 60).clamp(-448, 448).to(E4M3)
    shapes = {"block": ((E, 2 * I // 128, H // 128), (E, H // 128, I // 128)),
              "expert": ((E,), (E,)), "tensor": ((), ())}[form]
    s13 = _spread(shapes[0], seed + 1) / (60 * H ** 0.5)
    s2 = _spread(shapes[1], seed + 2) / (60 * I ** 0.5)
    return w13, w2, s13, s2


def _problem(T, E, k, H, I, seed, form="block"):
    w13, w2, s13, s2 = _fp8_weights(E, H, I, seed, form)
    g = torch.Generator().manual_seed(seed + 3)
    x = torch.randn(T, H, generator=g).bfloat16()
    # skewed routing: expert 0 popular, the last expert never chosen (a zero-token expert)
    scores = torch.rand(T, E - 1, generator=g)
    scores[:, 0] += 0.5
    ids = scores.topk(k, dim=1).indices.int()
    weights = torch.rand(T, k, generator=g)
    return x, w13, w2, s13, s2, ids, weights


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.parametrize("T,E,k,H,I,schedule,form", [
    (37, 4, 2, 256, 256, FP8_SMALL, "block"),                    # 64-row tiles
    (150, 4, 2, 256, 256, FP8_PREFILL, "block"),                 # 128 x 128, 2 consumers
    # the gate-up's SiLU branch-free (ex2.approx, rsqrt(d)^2: the bench's fast_rsqrt_silu)
    (150, 4, 2, 256, 256, replace(FP8_PREFILL, fast_silu=True, rsqrt_silu=True), "block"),
    (150, 4, 2, 256, 128, FP8_PREFILL_OVERLAP, "block"),         # overlapped promotion
    (150, 4, 2, 128, 128, replace(FP8_PREFILL, late_release=True), "block"),  # dense order
    (150, 4, 2, 128, 256, replace(FP8_PREFILL, stages=3, cluster_m=2, epilogue="tma"),
     "block"),                                                   # CTA pairs, TMA store
    (70, 5, 3, 256, 128, FP8_SMALL, "expert"),                   # per-expert scales
    (20, 3, 2, 128, 128, FP8_SMALL, "tensor"),                   # one scale
    # 8 units on 2 persistent CTAs: the ring, the carried accumulator and the scales wrap
    (150, 4, 2, 128, 256, replace(FP8_PREFILL, stages=2, num_sms=2, group_m=1), "block"),
])
def test_fp8_layer_matches_float64(T, E, k, H, I, schedule, form):
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=T + E, form=form)
    layer = M.Layer(T, H, I, E, k, schedule)
    assert layer.fp8
    scratch = {}
    out = M.experts(x, w13, w2, ids, weights, layer, interpret=True, scratch=scratch,
                    scales=(s13, s2))
    exact = M.reference_fp8(x, w13, w2, s13, s2, ids, weights)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    # fp32 accumulation, h and y rounded to bf16 (h's re-quantization agrees with the
    # reference's but for the rare bf16 h one ulp apart): ~2e-3
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    # the x quantization is the permute's, bit for bit, on the non-padding rows
    pos = scratch["pos"].view(-1).long()
    from argus.ops.quantize_fp8 import reference as quantize
    q, sc = quantize(x)
    token = torch.arange(T * k) // k
    assert torch.equal(scratch["xq"][pos].view(torch.uint8),
                       q.view(T, H)[token].view(torch.uint8))
    assert torch.equal(scratch["xs"][:, pos], sc[token].T)


def test_the_check_sees_a_wrong_weight_scale():
    """The tolerance above can fail: the reference with the gate and up planes' scales
    swapped, or one K block's scale moved to another, is far from the kernels' result."""
    T, E, k, H, I = 150, 4, 2, 256, 256
    x, w13, w2, s13, s2, ids, weights = _problem(T, E, k, H, I, seed=5)
    out = M.experts(x, w13, w2, ids, weights, M.Layer(T, H, I, E, k, FP8_PREFILL),
                    interpret=True, scales=(s13, s2))
    assert _rel(out, M.reference_fp8(x, w13, w2, s13, s2, ids, weights)) < 1e-2
    planes = s13.view(E, 2, I // 128, H // 128)
    swapped = planes.flip(1).reshape(s13.shape).contiguous()
    assert _rel(out, M.reference_fp8(x, w13, w2, swapped, s2, ids, weights)) > 0.1
    rolled = s2.roll(1, dims=2).contiguous()
    assert _rel(out, M.reference_fp8(x, w13, w2, s13, rolled, ids, weights)) > 0.1


def test_fp8_layer_from_logits_end_to_end():
    """_run with e4m3 weights and no schedule: DeepSeek-V3's grouped sigmoid routing, the
    layer's own fp8 schedule choice, against float64 on torch's routing."""
    T, E, k, H, I = 40, 8, 4, 128, 128
    w13, w2, s13, s2 = _fp8_weights(E, H, I, seed=21)
    g = torch.Generator().manual_seed(22)
    x = torch.randn(T, H, generator=g).bfloat16()
    logits = torch.randn(T, E, generator=g)
    out = M._run(x, w13, w2, logits, k, True, "softmax", "silu", None, None, None, 0, 0, 1.0,
                 None, interpret=True, w13_scale=s13, w2_scale=s2)
    assert M._layer(T, H, I, E, k, None, True).schedule == FP8_SMALL
    p = torch.softmax(logits.double(), dim=1)
    tv, ti = p.topk(k, dim=1)
    exact = M.reference_fp8(x, w13, w2, s13, s2, ti, tv / tv.sum(dim=1, keepdim=True))
    assert _rel(out, exact) < 1e-2


def test_fp8_schedule_choice():
    # DeepSeek-V3 prefill: the split 128 x 256 with smem scales and the TMA store (859 against
    # FP8_PREFILL's 603 TFLOP/s at T = 16384, H100, docs/perf/moe.md), on the persistent walk
    # from 129 rows an expert on either card; at 32 to 128 (T = 1024 .. 4096) with the gate-up
    # quantizing h itself, on one CTA a unit on the H100 class (measured 8-13% faster there),
    # on the walk on the H200 class (the unit grid measured 2-6% slower there)
    grid = replace(FP8_PREFILL_SPLIT_SMEM_TMA, persistent=False, quantize_out=True)
    walk_q = replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True)
    assert M.FP8_PREFILL_UNIT_GRID == grid and M.FP8_PREFILL_WALK_FUSED_QUANTIZE == walk_q
    band = {M.CARD_H100: grid, M.CARD_H200: walk_q}
    assert set(band) == set(M.CARDS)
    for card, mid in band.items():
        rule = lambda T, k=8, E=256: M.fp8_schedule_for(T, k, E, card=card)  # noqa: E731
        assert rule(16384) == FP8_PREFILL_SPLIT_SMEM_TMA, card
        assert rule(8192) == FP8_PREFILL_SPLIT_SMEM_TMA, card
        assert rule(4097) == FP8_PREFILL_SPLIT_SMEM_TMA, card
        assert rule(4096) == mid and rule(2048) == mid and rule(1024) == mid, card
        assert rule(1023) == FP8_SMALL, card
        assert rule(16) == FP8_SMALL, card                # no fp8 decode form yet
        assert rule(16, 8, 4) == mid, card                # 32 rows on each of 4 experts
        assert rule(64, 8, 4) == mid, card                # 128 rows: the band's top
        assert rule(65, 8, 4) == FP8_PREFILL_SPLIT_SMEM_TMA, card
    assert not M._layer(16, 256, 256, 8, 2, None, True).schedule.swap_ab


@pytest.mark.parametrize("name,gib,card", [
    ("NVIDIA H100 80GB HBM3", 79.1, "h100"), ("NVIDIA H100 NVL", 93.6, "h100"),
    ("NVIDIA H800", 79.1, "h100"), ("NVIDIA H200", 139.8, "h200"),
    ("NVIDIA H200 NVL", 139.8, "h200"),
    ("NVIDIA Hopper X", 141.0, "h200"),          # unknown name, HBM3e-sized memory
    ("NVIDIA Hopper X", 64.0, "h100"),           # unknown: the rule as first measured
])
def test_card_class(name, gib, card):
    assert M.card_class(name, int(gib * (1 << 30))) == card


def test_card_of_asks_the_driver_once_per_device(monkeypatch):
    """The op's card lookup (it runs on every call): the device's name and memory read once,
    then a dict lookup; CPU tensors (the interpreter) take the H100 class without asking."""
    from types import SimpleNamespace

    asked = []

    def props(index):
        asked.append(index)
        return SimpleNamespace(name=["NVIDIA H100 80GB HBM3", "NVIDIA H200"][index],
                               total_memory=[80, 141][index] << 30)

    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    monkeypatch.setattr(M, "_DEVICE_CARDS", {})
    cards = [M.card_of(torch.device("cuda", i)) for i in (0, 1, 1, 0, 1)]
    assert cards == ["h100", "h200", "h200", "h100", "h200"] and asked == [0, 1]
    assert M.card_of(torch.device("cpu")) == M.CARD_H100 and asked == [0, 1]


def test_the_rule_refuses_an_unknown_card():
    with pytest.raises(LaunchError, match="card='a100' is not one of") as exc:
        M.fp8_schedule_for(16384, 8, 256, card="a100")
    assert "CARD_H200" in exc.value.fix
    # no card named: default_card (the current CUDA device's class, else the H100 class)
    assert M.fp8_schedule_for(2048, 8, 256) == M.fp8_schedule_for(2048, 8, 256,
                                                                   M.default_card())
    if not torch.cuda.is_available():
        assert M.default_card() == M.CARD_H100


@pytest.mark.parametrize("kwargs,words", [
    (dict(bn=192), "bn=192 exceeds the register budget"),
    (dict(bn=160, overlap=True), "bn <= 128 with overlap"),
    (dict(bk=64), "bk=64"),
    (dict(bm=64, consumers=1, bn=8, swap_ab=True, cluster_m=1), "no swap-AB"),
])
def test_fp8_schedule_refuses_what_it_cannot_run(kwargs, words):
    with pytest.raises(ValueError, match=words):
        MoeFp8Schedule(**kwargs)


def test_gate_up_halves_must_not_straddle_a_weight_block():
    """bn = 160: the gate-up's 80-row halves would straddle 128-row weight blocks; the layer
    refuses it for the gate-up (the down GEMM may straddle: two scales per column)."""
    s = MoeFp8Schedule(bn=160, stages=3)
    assert not s.gate_up_fits
    with pytest.raises(LaunchError, match="bn/2 must divide 128"):
        M._layer(300, 256, 256, 4, 2, s, True)
    with pytest.raises(ag.TraceError, match="one 128-row"):
        lower_only(grouped_gemm_fp8_kernel(True), s=s)
    assert M._layer(300, 256, 256, 4, 2, (FP8_PREFILL, s), True).down == s


def test_the_global_scale_kernel_refuses_smem_scales():
    """grouped_gemm_fp8_kernel reads the block scales from global memory: a schedule asking
    for them through shared memory (the smem kernel's) is refused, not traced with global
    scales as if the field were not set."""
    with pytest.raises(ag.TraceError, match="grouped_gemm_fp8_smem_kernel"):
        lower_only(grouped_gemm_fp8_kernel(False), s=FP8_PREFILL_SPLIT_SMEM_TMA)


def test_schedule_kind_must_match_the_weights():
    from argus.kernels.moe import SMALL

    with pytest.raises(LaunchError, match="MoeFp8Schedule"):
        M._layer(300, 256, 256, 4, 2, SMALL, True)
    with pytest.raises(LaunchError, match="MoeSchedule"):
        M._layer(300, 256, 256, 4, 2, FP8_SMALL, False)


# ----------------------------------------------------------------------------- op checks


class _PretendCuda(torch.Tensor):
    """A CPU tensor whose is_cuda is True: reaches the op's checks after the device check."""

    @property
    def is_cuda(self):
        return True


def _cuda(t):
    return t.as_subclass(_PretendCuda) if isinstance(t, torch.Tensor) else t


def _op_args(E=4, H=256, I=256, T=8, k=2):
    w13, w2, s13, s2 = _fp8_weights(E, H, I, seed=1)
    x = torch.randn(T, H).bfloat16()
    logits = torch.randn(T, E)
    return dict(x=x, w13=w13, w2=w2, logits=logits, s13=s13, s2=s2, k=k)


def _call(a):
    from argus.ops import moe

    return moe(_cuda(a["x"]), _cuda(a["w13"]), _cuda(a["w2"]), _cuda(a["logits"]), a["k"],
               w13_scale=None if a["s13"] is None else _cuda(a["s13"]),
               w2_scale=None if a["s2"] is None else _cuda(a["s2"]))


@pytest.mark.parametrize("change,message", [
    (dict(s13=None), "the weights are float8_e4m3fn but w13_scale is None"),
    (dict(s2=None), "w2_scale is None"),
    (dict(s13=torch.ones(4, 2, 4)), "w13_scale has shape \\(4, 2, 4\\); it must be one float32 "
                                    "element \\(per tensor\\), \\[E\\] = \\[4\\] \\(per "
                                    "expert\\) or \\[E, N/128, K/128\\] = \\[4, 4, 2\\]"),
    (dict(s2=torch.ones(3)), "w2_scale has shape \\(3,\\)"),
    (dict(s2=torch.ones(4, 2, 2, dtype=torch.float64)), "w2_scale is torch.float64; weight "
                                                        "scales are float32"),
    (dict(s13=torch.ones(4, 2, 4).transpose(1, 2)), "w13_scale is not contiguous"),
    (dict(w2=torch.zeros(4, 256, 256, dtype=torch.bfloat16)), "w2 is torch.bfloat16.*both"),
    (dict(x=torch.zeros(8, 256, dtype=E4M3)), "x is torch.float8_e4m3fn"),
    (dict(s13=[1.0]), "w13_scale must be a torch.Tensor"),
], ids=["no_w13_scale", "no_w2_scale", "w13_scale_shape", "w2_scale_shape", "f64", "strided",
        "mixed", "fp8_x", "list"])
def test_moe_refuses_bad_fp8_input(change, message):
    a = _op_args()
    a.update(change)
    with pytest.raises(LaunchError, match=message):
        _call(a)


def test_moe_refuses_scales_with_bf16_weights_and_ragged_sizes():
    a = _op_args()
    a.update(w13=torch.zeros(4, 512, 256, dtype=torch.bfloat16),
             w2=torch.zeros(4, 256, 256, dtype=torch.bfloat16))
    with pytest.raises(LaunchError, match="scales go with float8_e4m3fn weights"):
        _call(a)
    b = _op_args(H=192, I=256)
    b.update(s13=torch.ones(()), s2=torch.ones(()))
    with pytest.raises(LaunchError, match="H=192 and I=256 multiples of 128"):
        _call(b)


def test_per_tensor_scales_are_broadcast_block_scales():
    s = torch.tensor(0.25)
    blocks = M._block_scales(s, 3, 256, 384)
    assert tuple(blocks.shape) == (3, 2, 3) and bool((blocks == 0.25).all())
    per_expert = M._block_scales(torch.tensor([1.0, 2.0, 3.0]), 3, 256, 384)
    assert per_expert[:, 1, 2].tolist() == [1.0, 2.0, 3.0]
    given = torch.ones(3, 2, 3)
    assert M._block_scales(given, 3, 256, 384) is given   # block scales: no copy


# ----------------------------------------------------------------------------- verifier, NVRTC


@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("schedule", [FP8_PREFILL, FP8_SMALL,
                                      replace(FP8_PREFILL, stages=5, cluster_m=2,
                                              epilogue="tma")],
                         ids=["prefill", "small", "cluster_tma"])
def test_fp8_grouped_gemm_verifies_clean(gated, schedule):
    """Zero findings, and no tile reads another expert's weights (wgmma.agree on the expert
    tags, as the bf16 grouped GEMM)."""
    report = verify.run(lower_only(grouped_gemm_fp8_kernel(gated), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert "wgmma.agree" in {o.code for o in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("schedule", [FP8_PREFILL, FP8_SMALL,
                                      replace(FP8_PREFILL, stages=5, cluster_m=2,
                                              epilogue="tma")],
                         ids=["prefill", "small", "cluster_tma"])
def test_fp8_grouped_gemm_builds_without_spills(gated, schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(grouped_gemm_fp8_kernel(gated), s=schedule))
    # the per-row scales load straight into the accumulator's rows
    assert "convert_layout" not in source.text
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert f"wgmma.mma_async.sync.aligned.m64n{schedule.bn}k32.f32.e4m3.e4m3" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("late", [False, True], ids=["early", "late"])
def test_stage_released_before_the_promotion(late):
    """The default serial promotion releases each stage once its wgmma group has retired and
    promotes after (PTX: the mbarrier.arrive comes before the first fma following the
    wgmma wait); late_release keeps gemm_fp8.promoted_mma's order (the FMAs first)."""
    import re

    from argus.runtime.compile import compile_cuda

    s = replace(FP8_PREFILL, late_release=late)
    source = codegen.render(lower_only(grouped_gemm_fp8_kernel(False), s=s))
    ptx = compile_cuda(source.text, [source.name], use_cache=False).ptx
    loop = ptx[ptx.index("wgmma.wait_group", ptx.index("wgmma.mma_async")):]
    arrive = re.search(r"mbarrier\.arrive", loop).start()
    fma = re.search(r"fma\.rn\.f32", loop).start()
    assert (arrive < fma) != late, (arrive, fma)


def test_verifier_catches_an_early_release_promotion_that_overwrites(monkeypatch):
    """Seeded bug: the early-release loop with `acc = part * s` (the last K block only)
    instead of `acc = acc + part * s`: wgmma.k-once reports it; the real loop verifies."""
    import argus.kernels.moe_fp8 as MF

    def overwrites(ring, k_steps, wg, scales):
        rows = ring.bm // ring.consumers
        acc = ag.zeros((rows, ring.bn), ag.f32)
        part = ag.zeros((rows, ring.bn), ag.f32)
        for k in ag.range(k_steps):
            with ring.pipe.consume() as stage:
                ag.wgmma(ring.a[stage].rows_of(wg * rows, rows),
                         ring.b[stage].rows_of(0, ring.bn), part, overwrite=True)
            acc = part * scales.combine(*scales.fetch(k))
        return acc

    fresh = MF.grouped_gemm_fp8_kernel.__wrapped__   # a new KernelFunction: no cached trace
    clean = verify.run(lower_only(fresh(False), s=FP8_PREFILL))
    assert not clean.errors and "wgmma.k-once" in {o.code for o in clean.proven}
    monkeypatch.setattr(MF, "early_release_promoted_mma", overwrites)
    codes = {d.code for d in verify.run(lower_only(fresh(False), s=FP8_PREFILL)).errors}
    assert "wgmma.k-once" in codes


def test_verifier_k_once_sees_an_overwriting_wgmma_in_a_k_loop():
    """A wgmma with overwrite=True (scale-d = 0) in the K loop keeps only its last block:
    stored as it is, or added into a variable made afresh each step, it misses K. The rule
    used to count the accumulator's loop as a reduction because the accumulator was defined
    outside it (the early-release promotion's seeded bug verified clean)."""
    def variant(mode: str):
        def k_loop(ring, k_steps, wg):
            acc = ag.zeros((64, 128), ag.f32)
            part = ag.zeros((64, 128), ag.f32)
            for k in ag.range(k_steps):
                with ring.pipe.consume() as stage:
                    ag.wgmma(ring.a[stage].rows_of(wg * 64, 64), ring.b[stage].rows_of(0, 128),
                             part, overwrite=mode != "accumulate")
                if mode == "promote":
                    acc = acc + part * 0.5
            return acc if mode == "promote" else part
        return k_loop_kernel(f"k_loop_{mode}", k_loop)

    for mode, bad in (("overwrite", True), ("promote", False), ("accumulate", False)):
        codes = {d.code for d in verify.run(lower_only(variant(mode))).errors}
        assert ("wgmma.k-once" in codes) == bad, (mode, codes)
