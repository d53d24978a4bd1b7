"""GPU tier for argus.ops.attention_fp8 (the FP8 e4m3 forward): first the 8-bit register-A
wgmma alone (P gathered from the accumulator into the A fragment by quad shuffles,
target/fragments.py AccToA8) against the interpreter and float64, then the op on fresh random
data against float64 attention on the dequantized inputs (ragged lengths, GQA, causal with
Sq < Skv and Sq > Skv, both layouts, V given transposed, every head dim, the log-sum-exp) and
against torch SDPA on the dequantized bf16 inputs. Written 2026-12-03 without a GPU; first run
on the H200 2026-12-04, which set the accumulation bounds below (docs/perf/attention.md, "FP8
forward")."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

E4M3 = torch.float8_e4m3fn
# Hopper's FP8 wgmma accumulator keeps about 14 mantissa bits, not fp32's 24 (DeepSeek-V3
# technical report, section 3.3.2). A score then moves by up to ~2^-14 of sum_d |q_d k_d|, and
# the log-sum-exp with it: measured on the H200 2026-12-04 (scripts/gpu_fp8_accum_probe.py), the
# op's LSE is within 2e-6 of one computed from cuBLAS's own FP8 GEMM scores and up to 1.5x
# 2^-13 * scale * max_j sum_d |q_d k_d| from float64. The tests bound it at 2^-11 of that.
ACCUMULATION_BOUND_LOG2 = -11


def test_register_a_fp8_wgmma_matches_the_interpreter():
    """Isolates the fragment gather: a wrong lane, register or byte selector in AccToA8
    scrambles P's columns and misses float64 by O(1)."""
    from argus.compiler import compile_kernel
    from tests.unit.test_fp8_register_a import _inputs, two_gemms_fp8

    q, k, vt, o = _inputs(bh=3, s=200, seed=5)
    two_gemms_fp8.interpret(q, k, vt, o)
    qc, kc, vc = (t.cuda() for t in (q, k, vt))
    oc = torch.full(o.shape, float("nan"), device="cuda")
    compile_kernel(two_gemms_fp8)(qc, kc, vc, oc)
    torch.cuda.synchronize()
    s = (q.double() @ k.double().transpose(1, 2)).float() * 0.125
    ref = s.to(E4M3).double() @ vt.double().transpose(1, 2)
    # not exact: Hopper's FP8 accumulator keeps ~14 bits (DeepSeek-V3 report, section 3.3.2;
    # ACCUMULATION_BOUND_LOG2 above), so a few scores land across an e4m3 rounding boundary from the
    # float64 ones and P changes there by one e4m3 step. Measured on the H200 2026-12-04:
    # 2e-3 relative; a wrong lane, register or byte selector scrambles P: O(1)
    assert (oc.double().cpu() - ref).norm() / ref.norm() < 1e-2
    assert (oc.cpu().double() - o.double()).norm() / o.double().norm() < 1e-2


def quantize(x):
    s = x.abs().amax().float().item() / 448.0
    return (x.float() / s).to(E4M3), s


def _inputs(B, H, HKV, S, SK, D, layout, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if layout == "bhsd":
        shapes = ((B, H, S, D), (B, HKV, SK, D), (B, HKV, SK, D))
    else:
        shapes = ((B, S, H, D), (B, SK, HKV, D), (B, SK, HKV, D))
    amp = (3.0, 1.0, 0.5)
    return [quantize(torch.randn(*s, device="cuda", generator=g) * a)
            for s, a in zip(shapes, amp)]


def reference(q, k, v, causal: bool, scale: float):
    """float64 in [B, H, S, D] on dequantized inputs: GQA, bottom-right causal mask, rows
    without keys zero (LSE -inf)."""
    group = q.shape[1] // k.shape[1]
    kd, vd = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ kd.transpose(-1, -2) * scale
    if causal:
        S, SK = q.shape[-2], k.shape[-2]
        keep = torch.ones(S, SK, dtype=torch.bool, device=q.device).tril(SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ vd, torch.logsumexp(s, -1)


CASES = [  # B, H, HKV, S, SK, D, causal, layout
    (2, 4, 4, 1000, 777, 128, False, "bhsd"),
    (2, 4, 4, 1000, 777, 128, True, "bhsd"),
    (1, 8, 2, 513, 1500, 128, True, "bhsd"),      # GQA 4:1, Sq < Skv
    (1, 8, 1, 700, 300, 128, True, "bshd"),       # MQA, Sq > Skv: empty rows
    (3, 2, 2, 257, 257, 64, False, "bshd"),
    (2, 4, 4, 1000, 777, 64, True, "bhsd"),
    (1, 4, 2, 640, 1111, 256, False, "bhsd"),
    (1, 4, 2, 640, 1111, 256, True, "bshd"),
]


@pytest.mark.parametrize("B,H,HKV,S,SK,D,causal,layout", CASES)
def test_matches_float64(B, H, HKV, S, SK, D, causal, layout):
    assert_matches_float64(B, H, HKV, S, SK, D, causal, layout)


def assert_matches_float64(B, H, HKV, S, SK, D, causal, layout, schedule=None):
    """The op (under `schedule`, or its own) on fresh data against float64 attention on the
    dequantized inputs: output, and the LSE within the FP8 accumulator's bound."""
    import argus.ops

    (q, qs), (k, ks), (v, vs) = _inputs(B, H, HKV, S, SK, D, layout, seed=S + SK + D)
    scale = 1.0 / math.sqrt(D)
    out, lse = argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs,
                                       causal=causal, layout=layout, return_lse=True,
                                       schedule=schedule)
    torch.cuda.synchronize()
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    t = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2))
    want, want_lse = reference(*(t(x).double() * s for x, s in ((q, qs), (k, ks), (v, vs))),
                               causal, scale)
    got = t(out).double()
    assert not torch.isnan(got).any()
    err = (got - want).abs()
    # e4m3 P and V: the interpreter measured max 1.0-2.2% of max |out|, RMS 1.5-2.2%
    assert err.max().item() < 0.05 * want.abs().max().item()
    assert err.pow(2).mean().sqrt().item() < 0.035 * want.pow(2).mean().sqrt().item()
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    bound = accumulation_bound(*(t(x).double() * s for x, s in ((q, qs), (k, ks))), scale)
    assert ((lse.double() - want_lse).abs() <= bound)[finite].all()


def accumulation_bound(q, k, scale):
    """Per query row, how far the FP8 accumulator may move the LSE (ACCUMULATION_BOUND_LOG2):
    the largest sum_d |q_d k_d| over the row's keys (GQA-expanded), scaled. Masked keys are
    counted too: a looser bound, never a wrong one."""
    group = q.shape[1] // k.shape[1]
    mags = q.abs() @ k.abs().repeat_interleave(group, 1).transpose(-1, -2)
    return 2.0 ** ACCUMULATION_BOUND_LOG2 * scale * mags.amax(-1)


@pytest.mark.parametrize("D", [64, 128, 256])
def test_lse_matches_the_hardware_fp8_gemm(D):
    """The LSE against one computed from cuBLAS's FP8 GEMM (torch._scaled_mm, the same tensor
    core accumulator): what is left of the float64 gap is ours, and was 2e-6 on the H200."""
    import argus.ops

    (q, qs), (k, ks), (v, vs) = _inputs(1, 4, 4, 1024, 1024, D, "bhsd", seed=D)
    _, lse = argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs,
                                     return_lse=True)
    one = torch.ones((), device="cuda")
    scores = torch.stack([torch._scaled_mm(q[0, h], k[0, h].t(), one * qs, one * ks,
                                           out_dtype=torch.float32, use_fast_accum=True)
                          for h in range(4)])[None].double() / math.sqrt(D)
    want = torch.logsumexp(scores, -1)
    assert (lse.double() - want).abs().max().item() < 1e-4


@pytest.mark.parametrize("D,causal", [(128, False), (128, True), (64, True), (256, False)])
def test_close_to_sdpa_on_dequantized_bf16(D, causal):
    """Against torch SDPA on the dequantized inputs in bf16 (Sq == Skv, where torch's causal
    mask and ours agree): the FP8 output is as close to it as e4m3 allows."""
    import argus.ops

    (q, qs), (k, ks), (v, vs) = _inputs(2, 8, 8, 1024, 1024, D, "bhsd", seed=D + causal)
    out = argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs, causal=causal)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        *((x.float() * s).bfloat16() for x, s in ((q, qs), (k, ks), (v, vs))),
        is_causal=causal)
    torch.cuda.synchronize()
    rel = ((out.double() - sdpa.double()).norm() / sdpa.double().norm()).item()
    assert rel < 0.04, rel


@pytest.mark.parametrize("SK", [1024, 1000])
def test_v_given_transposed_is_the_same(SK):
    """v [B, Hkv, D, Skv] read in place (SK % 16 == 0) or copied (else): bit-identical to the
    op transposing v itself."""
    import argus.ops

    (q, qs), (k, ks), (v, vs) = _inputs(1, 4, 2, 512, SK, 128, "bhsd", seed=SK)
    a = argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs)
    b = argus.ops.attention_fp8(q, k, v.transpose(-1, -2).contiguous(), q_scale=qs,
                                k_scale=ks, v_scale=vs, v_transposed=True)
    torch.cuda.synchronize()
    assert torch.equal(a, b)


def test_tensor_scales_and_fold_variants_agree():
    """One-element tensor scales read like floats; the plain loop with the folded scale (the
    verified alternative to the default overlap) gives the same numbers within e4m3 noise."""
    import dataclasses

    import argus.ops
    from argus.kernels.attention import fp8_schedule

    (q, qs), (k, ks), (v, vs) = _inputs(1, 4, 4, 777, 777, 128, "bhsd", seed=11)
    a = argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs, causal=True)
    b = argus.ops.attention_fp8(q, k, v, q_scale=torch.tensor(qs, device="cuda"),
                                k_scale=torch.tensor([ks]), v_scale=vs, causal=True)
    # the plain loop at the 128-key tile: packed P (the default's, at 192 keys) is the overlap
    # order's carry and needs fa3_overlap
    plain = dataclasses.replace(fp8_schedule(128, True), fa3_overlap=False, rescale_after_pv=False,
                                packed_p=False, block_n=128, fold_scale=True)
    c = argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs, causal=True,
                                schedule=plain)
    torch.cuda.synchronize()
    assert torch.equal(a, b)
    assert ((a.double() - c.double()).norm() / a.double().norm()).item() < 0.02


def test_under_torch_compile_matches_eager():
    """torch.compile traces through argus::attention_fp8 (the custom op): same output."""
    import argus.ops

    (q, qs), (k, ks), (v, vs) = _inputs(1, 4, 2, 300, 500, 128, "bhsd", seed=7)

    def f(q, k, v):
        return argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs,
                                       causal=True)
    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    torch.cuda.synchronize()
    assert torch.equal(eager, compiled)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D,SK", [(64, 1), (128, 1000), (256, 37), (128, 2048)])
def test_v_transpose_is_bit_exact(layout, D, SK):
    """The op's V transpose on the GPU: the torch word path (`_word_transpose`: an 8-byte word
    pass, then the bytes inside each word) is byte-for-byte torch's transpose, every byte value
    included (NaN payloads, -0), into rows padded to a multiple of 16 keys; `transposed_v` (the
    Argus V^T kernel on CUDA tensors) gives the same bytes but a NaN's sign (0xFF as 0x7F)."""
    import importlib

    mod = importlib.import_module("argus.ops.attention_fp8")
    B, HKV = 2, 3
    shape = (B, HKV, SK, D) if layout == "bhsd" else (B, SK, HKV, D)
    g = torch.Generator(device="cuda").manual_seed(SK + D)
    v = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8, device="cuda").view(E4M3)
    vb = v if layout == "bhsd" else v.transpose(1, 2)
    pad = max(16, -(-SK // 16) * 16)
    store = torch.full((B, HKV, D, pad), 0x55, dtype=torch.uint8, device="cuda").view(E4M3)
    assert mod._word_transpose(vb, store) is True
    got = mod.transposed_v(v, layout, False)
    torch.cuda.synchronize()
    ref = vb.transpose(-1, -2).contiguous().view(torch.uint8)
    assert torch.equal(store[..., :SK].view(torch.uint8), ref)
    assert got.stride(-2) == pad
    _same_but_nan_sign(got.view(torch.uint8), ref)


def _same_but_nan_sign(got, want):
    """got == want byte for byte, except that the V^T kernel may write e4m3's negative NaN
    (0xFF) as the positive one (0x7F): the GPU's e4m3 conversions (argus/kernels/attention_vt.py)."""
    diff = got != want
    bad = (diff & ~((want == 0xFF) & (got == 0x7F))).nonzero()
    assert bad.numel() == 0, (f"{bad.shape[0]} bytes differ beyond a NaN's sign, first at "
                              f"{bad[0].tolist()}: {int(got[tuple(bad[0])]):#04x} vs "
                              f"{int(want[tuple(bad[0])]):#04x}")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D,SK", [(64, 1), (128, 1000), (256, 37), (128, 2048)])
def test_permuted_v_transpose_is_bit_exact(layout, D, SK):
    """The op's permuted V^T on the GPU (kernel_v: each 32-key group in acc_order_col's order,
    Skv rounded up to 32, keys past it zero) is byte for byte (but a NaN's sign) the CPU
    reference built key by key from target/fragments.py acc_order_col."""
    import importlib

    import numpy as np

    from argus.target.fragments import acc_order_col

    mod = importlib.import_module("argus.ops.attention_fp8")
    B, HKV = 2, 3
    shape = (B, HKV, SK, D) if layout == "bhsd" else (B, SK, HKV, D)
    g = torch.Generator(device="cuda").manual_seed(SK + D)
    v = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8, device="cuda").view(E4M3)
    got, permuted = mod.kernel_v(v, layout, False)
    torch.cuda.synchronize()
    assert permuted
    vb = (v if layout == "bhsd" else v.transpose(1, 2)).view(torch.uint8).cpu()
    skv = -(-SK // 32) * 32
    keys = torch.from_numpy(acc_order_col(np.arange(skv)).astype(np.int64))
    ref = torch.zeros((B, HKV, D, skv), dtype=torch.uint8)
    inside = keys < SK
    ref[..., inside] = vb[..., keys[inside], :].transpose(-1, -2)
    _same_but_nan_sign(got.view(torch.uint8).cpu(), ref)


@pytest.mark.parametrize("causal", [False, True])
def test_permuted_and_gathered_p_agree(causal):
    """The op with the permuted V^T (shuffle-free P, its default) against the same op with the
    permutation off (AccToA8's quad gather): the same products summed in another key order,
    so equal up to the FP8 accumulator's rounding, and both near float64."""
    import importlib

    mod = importlib.import_module("argus.ops.attention_fp8")
    g = torch.Generator(device="cuda").manual_seed(11)
    B, H, HKV, S, SK, D = 2, 8, 2, 300, 1000, 128
    q = (torch.randn(B, H, S, D, device="cuda", generator=g) * 3).to(E4M3)
    k = torch.randn(B, HKV, SK, D, device="cuda", generator=g).to(E4M3)
    v = torch.randn(B, HKV, SK, D, device="cuda", generator=g).to(E4M3)
    scales = {"q_scale": 0.5, "k_scale": 0.25, "v_scale": 2.0}
    new = mod.attention_fp8(q, k, v, causal=causal, **scales)
    mod.PERMUTED_VT = False
    try:
        old = mod.attention_fp8(q, k, v, causal=causal, **scales)
    finally:
        mod.PERMUTED_VT = True
    torch.cuda.synchronize()
    err = (new.float() - old.float()).abs().max().item()
    assert err <= 2e-2 * old.float().abs().max().item(), err


PING_PONG_CASES = [(2, 4, 4, 1000, 777, 128, False, "bhsd"),
                   (2, 4, 4, 1000, 777, 128, True, "bhsd"),
                   (1, 8, 2, 513, 1500, 128, True, "bhsd"),     # GQA 4:1, Sq < Skv
                   (1, 8, 1, 700, 300, 128, True, "bshd"),      # MQA, Sq > Skv: empty rows
                   (2, 4, 4, 1000, 777, 64, True, "bhsd"),
                   (1, 4, 2, 640, 1111, 256, False, "bhsd")]


@pytest.mark.parametrize("B,H,HKV,S,SK,D,causal,layout", PING_PONG_CASES)
def test_ping_pong_with_fa3_overlap_matches_float64(B, H, HKV, S, SK, D, causal, layout):
    """FA3's FP8 configuration (the fp8 bench token `ppfa3`, h308): fp8_schedule with the
    consumer warpgroups taking turns (ordered) around S_j and P_{j-1} V_{j-1}, Q in shared
    memory; the op's permuted V^T. A turn passed early or a P V of the wrong block shows as
    O(1) errors; a deadlock in the turns as a hang."""
    import dataclasses

    from argus.kernels.attention import fp8_schedule

    schedule = dataclasses.replace(fp8_schedule(D, causal), ordered=True)
    assert schedule.fa3_overlap and not schedule.q_in_registers
    assert_matches_float64(B, H, HKV, S, SK, D, causal, layout, schedule=schedule)
