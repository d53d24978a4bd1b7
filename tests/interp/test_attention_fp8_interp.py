"""The FP8 (e4m3) attention forward (argus/kernels/attention.py with dtype e4m3, through
argus.ops.attention_fp8's run_fp8) in the numpy interpreter against float64 attention on the
dequantized inputs: sequence lengths that are and are not multiples of the blocks (ragged
keys and queries), causal and full masks, more queries than keys, GQA, the [B, S, H, D]
layout, V given transposed, head dims 64 / 128 / 256, the log-sum-exp, the schedule variants,
and the op's refusals."""

import math

import pytest
import torch

from argus.errors import LaunchError
from argus.kernels.attention import P_SCALE, AttentionSchedule, fp8_schedule
from argus.ops.attention_fp8 import run_fp8

E4M3 = torch.float8_e4m3fn


def _interpret(kernel_fn, compile_time, tensors, scalars):
    kernel_fn.interpret(*tensors, **scalars, **compile_time)


def quantize(x):
    """Per-tensor e4m3 quantization: (x / s) in e4m3 and s = amax / 448."""
    s = x.abs().max().item() / 448.0
    return (x / s).to(E4M3), s


def inputs(B, H, HKV, S, SK, D, *, layout="bhsd", seed=0):
    g = torch.Generator().manual_seed(seed)
    shape_q = (B, H, S, D) if layout == "bhsd" else (B, S, H, D)
    shape_kv = (B, HKV, SK, D) if layout == "bhsd" else (B, SK, HKV, D)
    q, qs = quantize(torch.randn(shape_q, generator=g) * 3.0)
    k, ks = quantize(torch.randn(shape_kv, generator=g))
    v, vs = quantize(torch.randn(shape_kv, generator=g) * 0.5)
    return q, k, v, qs, ks, vs


def reference(q, k, v, qs, ks, vs, causal, layout="bhsd", scale=None):
    """float64 attention on the dequantized inputs, in [B, H, S, D], GQA, FlashAttention's
    bottom-right causal mask; rows without a key are zero, their log-sum-exp -inf."""
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    qd, kd, vd = q.double() * qs, k.double() * ks, v.double() * vs
    group = q.shape[1] // k.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = qd @ kd.transpose(-1, -2) * scale
    if causal:
        S, SK = q.shape[-2], k.shape[-2]
        s = s.masked_fill(~torch.ones(S, SK, dtype=torch.bool).tril(SK - S), float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ vd, torch.logsumexp(s, -1)


def run(q, k, v, qs, ks, vs, causal, *, layout="bhsd", v_transposed=False, schedule=None,
        scale=None):
    out, lse = run_fp8(q, k, v, qs, ks, vs, causal, scale, layout, v_transposed, True,
                       schedule=schedule, execute=_interpret)
    return (out.transpose(1, 2) if layout == "bshd" else out), lse


def check_schedule(schedule, shape, head_dim, causal, permuted, monkeypatch):
    """The op's run with `schedule`, V^T made permuted or not (the op sets permuted_vt from
    PERMUTED_VT), on fresh inputs of `shape` (B, H, HKV, S, SK), against float64."""
    import importlib

    # the module (argus.ops.attention_fp8 is also the op function's name in argus.ops)
    monkeypatch.setattr(importlib.import_module("argus.ops.attention_fp8"), "PERMUTED_VT",
                        permuted)
    B, H, HKV, S, SK = shape
    q, k, v, qs, ks, vs = inputs(B, H, HKV, S, SK, head_dim, seed=S + SK + causal)
    assert_close(*run(q, k, v, qs, ks, vs, causal, schedule=schedule),
                 *reference(q, k, v, qs, ks, vs, causal))


def assert_close(got, lse, want, want_lse):
    """e4m3 P and V: about 2% of max |out| at most, 1-2% RMS (measured 2026-12-03 on these
    shapes: max 1.0-2.2%, RMS 1.5-2.2%); the LSE (from fp32 scores of exact e4m3 products)
    within 1e-4."""
    assert got.dtype == torch.bfloat16
    assert not torch.isnan(got.float()).any(), "rows left unwritten (NaN)"
    err = (got.double() - want).abs()
    assert err.max().item() < 0.05 * max(want.abs().max().item(), 1e-3), err.max().item()
    rms = want.pow(2).mean().sqrt().item()
    assert err.pow(2).mean().sqrt().item() < 0.035 * max(rms, 1e-3)
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite), "LSE -inf exactly where no key is seen"
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-4


@pytest.mark.parametrize("S,SK", [(64, 64), (100, 150), (200, 136), (130, 260)])
@pytest.mark.parametrize("causal", [False, True])
def test_lengths_and_masks_hd128(S, SK, causal):
    """Ragged query rows (not stored) and keys (masked to -inf; V^T's rows padded, the padding
    never read), causal diagonals, one to three KV blocks in the overlapped loop."""
    q, k, v, qs, ks, vs = inputs(1, 2, 2, S, SK, 128)
    assert_close(*run(q, k, v, qs, ks, vs, causal), *reference(q, k, v, qs, ks, vs, causal))


@pytest.mark.parametrize("D", [64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims(D, causal):
    q, k, v, qs, ks, vs = inputs(1, 1, 1, 90, 200, D, seed=1)
    assert_close(*run(q, k, v, qs, ks, vs, causal), *reference(q, k, v, qs, ks, vs, causal))


@pytest.mark.parametrize("causal", [False, True])
def test_more_queries_than_keys(causal):
    """S > SK: under the causal mask the first S - SK rows see no key: zeros, LSE -inf."""
    q, k, v, qs, ks, vs = inputs(1, 1, 1, 200, 40, 128, seed=2)
    got, lse = run(q, k, v, qs, ks, vs, causal)
    assert_close(got, lse, *reference(q, k, v, qs, ks, vs, causal))
    if causal:
        assert (got[..., :160, :] == 0).all() and torch.isinf(lse[..., :160]).all()


def test_gqa_bshd_layout():
    q, k, v, qs, ks, vs = inputs(2, 4, 2, 70, 100, 128, layout="bshd", seed=3)
    got, lse = run(q, k, v, qs, ks, vs, True, layout="bshd")
    assert_close(got, lse, *reference(q, k, v, qs, ks, vs, True, layout="bshd"))


@pytest.mark.parametrize("SK", [96, 100])
def test_v_given_transposed(SK):
    """v [B, Hkv, D, Skv]: read in place when TMA can address it (Skv a multiple of 16),
    copied into padded rows otherwise; the same result as v in k's layout."""
    q, k, v, qs, ks, vs = inputs(1, 2, 1, 64, SK, 128, seed=4)
    vt = v.transpose(-1, -2).contiguous()
    got, lse = run(q, k, vt, qs, ks, vs, False, v_transposed=True)
    assert_close(got, lse, *reference(q, k, v, qs, ks, vs, False))
    same, _ = run(q, k, v, qs, ks, vs, False)
    assert torch.equal(got, same)


def test_scales_are_applied_and_tensor_scales_read():
    """Each scale matters (doubling v_scale doubles the output, q_scale sharpens the
    softmax), and one-element tensors are read like floats; a softmax scale is honoured."""
    q, k, v, qs, ks, vs = inputs(1, 1, 1, 64, 64, 128, seed=5)
    base, _ = run(q, k, v, qs, ks, vs, False)
    twice, _ = run(q, k, v, torch.tensor([qs]), torch.tensor(ks), 2 * vs, False)
    assert torch.allclose(twice.float(), 2 * base.float(), rtol=1e-2, atol=1e-3)
    got, lse = run(q, k, v, qs, ks, vs, False, scale=0.3)
    assert_close(got, lse, *reference(q, k, v, qs, ks, vs, False, scale=0.3))


def test_p_is_quantized_with_p_scale():
    """One KV block (the running max is the row max): the output matches the model that
    rounds P_SCALE * exp(s - max) to e4m3 far better than exact attention, and better than
    P rounded without the scale (subnormal e4m3 below 2^-6). Measured 2026-12-03: RMS 4.1e-4
    against the model, 1.0e-3 against the unscaled one, 3.2e-3 against exact."""
    q, k, v, qs, ks, vs = inputs(1, 2, 2, 64, 128, 128, seed=6)
    got, _ = run(q, k, v, qs, ks, vs, False)
    qd, kd, vd = q.double() * qs, k.double() * ks, v.double() * vs
    s = qd @ kd.transpose(-1, -2) / math.sqrt(128)
    p = torch.exp(s - s.amax(-1, keepdim=True))

    def model(p_scale):
        pq = (p * p_scale).float().to(E4M3).double() / p_scale
        return pq @ vd / p.sum(-1, keepdim=True)

    exact = torch.softmax(s, -1) @ vd
    err = {name: (got.double() - want).pow(2).mean().sqrt().item()
           for name, want in (("model", model(P_SCALE)), ("unscaled", model(1.0)),
                              ("exact", exact))}
    assert err["model"] < 0.25 * err["exact"], err
    assert err["model"] < 0.5 * err["unscaled"], err


@pytest.mark.parametrize("schedule", [
    AttentionSchedule(block_m=128, block_n=128, approx_exp2=True, fold_scale=True),
    AttentionSchedule(block_m=128, block_n=128, fa3_overlap=True, fold_scale=True),
    AttentionSchedule(block_m=64, block_n=64, consumers=1, intra_wg_overlap=True),
    AttentionSchedule(block_m=192, block_n=128, consumers=3, producer_regs=32,
                      consumer_regs=160, epilogue="tma"),
    AttentionSchedule(block_m=128, block_n=256),
    AttentionSchedule(block_m=128, block_n=128, persistent=True, num_sms=3),
], ids=["plain-folded", "fa3-folded", "overlap-1wg", "3wg-tma", "block-n-256", "persistent"])
def test_schedule_variants(schedule):
    q, k, v, qs, ks, vs = inputs(1, 2, 1, 150, 300, 64, seed=7)
    assert_close(*run(q, k, v, qs, ks, vs, True, schedule=schedule),
                 *reference(q, k, v, qs, ks, vs, True))


def _ok():
    return inputs(1, 1, 1, 64, 64, 128)


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v, s: ((q.bfloat16(), k, v), s), "must all be float8_e4m3fn"),
    (lambda q, k, v, s: ((q, k, v.float()), s), "must all be float8_e4m3fn"),
    (lambda q, k, v, s: ((q[0], k, v), s), "must be 4-d"),
    (lambda q, k, v, s: ((q, k, v[:, :, :32]), s), "it must be k's shape"),
    (lambda q, k, v, s: ((q[..., :32], k[..., :32], v[..., :32]), s), "head dim 32"),
    (lambda q, k, v, s: ((q, torch.cat([k, k], 1), torch.cat([v, v], 1)), s),
     "multiple of the key/value heads"),
    (lambda q, k, v, s: ((q, k, v), (float("nan"), s[1], s[2])), "q_scale=nan is not finite"),
    (lambda q, k, v, s: ((q, k, v), (s[0], torch.ones(2), s[2])), "k_scale is a tensor of 2"),
    (lambda q, k, v, s: ((q, k, v), (s[0], s[1], "x")), "v_scale='x' is not a number"),
])
def test_bad_inputs_are_refused(change, words):
    q, k, v, qs, ks, vs = _ok()
    (q, k, v), (qs, ks, vs) = change(q, k, v, (qs, ks, vs))
    with pytest.raises(LaunchError, match=words):
        run(q, k, v, qs, ks, vs, False)


def test_v_transposed_with_the_wrong_shape_is_refused():
    q, k, v, qs, ks, vs = _ok()
    with pytest.raises(LaunchError, match=r"it must be \[B, Hkv, D, Skv\]"):
        run(q, k, v, qs, ks, vs, False, v_transposed=True)


def test_a_schedule_the_fp8_kernel_cannot_run_is_refused():
    q, k, v, qs, ks, vs = _ok()
    for bad, words in ((AttentionSchedule(block_n=96), "block_n=96"),
                       (AttentionSchedule(consumers=2, ordered=True), "ping-pong")):
        with pytest.raises(LaunchError, match=words):
            run(q, k, v, qs, ks, vs, False, schedule=bad)


def test_the_bf16_op_points_fp8_inputs_here():
    from argus.ops.attention_inputs import check

    q, k, v, *_ = _ok()
    with pytest.raises(LaunchError) as e:
        check(q, k, v, device=False)
    assert "argus.ops.attention_fp8" in str(e.value)


def test_default_schedule_is_fp8_legal():
    for D in (64, 128, 256):
        for causal in (False, True):
            assert fp8_schedule(D, causal).problems_for(D, __import__("argus").e4m3) == []


def test_the_custom_op_fake_gives_shapes_and_checks():
    """Under a tracer (fake tensors) the call goes through argus::attention_fp8, whose fake
    returns the output and LSE shapes and runs the same checks."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import argus.ops

    q, k, v, qs, ks, vs = inputs(2, 4, 2, 70, 100, 128, layout="bshd")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        out, lse = argus.ops.attention_fp8(fq, fk, fv, q_scale=qs, k_scale=ks, v_scale=vs,
                                           layout="bshd", return_lse=True)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert lse.shape == (2, 4, 70) and lse.dtype == torch.float32
        with pytest.raises(LaunchError, match="must all be float8_e4m3fn"):
            argus.ops.attention_fp8(fq.bfloat16(), fk, fv, q_scale=qs, k_scale=ks,
                                    v_scale=vs, layout="bshd")


def test_a_negative_scale_product_runs_unfolded():
    """q_scale * k_scale < 0 flips the scores: a schedule with the folded scale (the row max
    of the raw scores, right only for a positive scale) is run unfolded (for_scale), and the
    result is still the float64 one."""
    q, k, v, qs, ks, vs = inputs(1, 2, 2, 100, 150, 128, seed=8)
    folded = AttentionSchedule(block_m=128, block_n=128, approx_exp2=True, fold_scale=True)
    got, lse = run(q, k, v, qs, -ks, vs, True, schedule=folded)
    assert_close(got, lse, *reference(q, k, v, qs, -ks, vs, True))


def test_cpu_tensors_are_refused_by_the_launch():
    import argus.ops

    q, k, v, qs, ks, vs = _ok()
    with pytest.raises(LaunchError, match="CUDA"):
        argus.ops.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs)


@pytest.mark.parametrize("S,SK,causal", [(1, 300, True), (1, 1, False), (5, 17, True)])
def test_short_queries_and_keys(S, SK, causal):
    """A handful of query rows or keys (attention_fp8 has no decode kernel: the prefill kernel
    runs them, one tile, mostly masked)."""
    q, k, v, qs, ks, vs = inputs(2, 2, 1, S, SK, 128, seed=9)
    assert_close(*run(q, k, v, qs, ks, vs, causal), *reference(q, k, v, qs, ks, vs, causal))
