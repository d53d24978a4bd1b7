"""GPU tier for the decode path (argus.ops.attention with Sq <= 16, argus.ops.attention_decode):
the split-KV kernels and the combine on the device against float64 on fresh random data
(batch 1 with many splits, batch 32 with one, 1 / 8 / 16 query tokens, GQA and MQA, causal
bottom-right, KV lengths off the block, both layouts, fp16, every head dim, more packed rows
than one tile), against torch SDPA, and inside a CUDA graph."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def reference(q, k, v, causal: bool, scale: float):
    group = q.shape[1] // k.shape[1]
    kd = k.double().repeat_interleave(group, 1)
    vd = v.double().repeat_interleave(group, 1)
    s = q.double() @ kd.transpose(-1, -2) * scale
    if causal:
        S, SK = q.shape[-2], k.shape[-2]
        keep = torch.ones(S, SK, dtype=torch.bool, device=q.device).tril(SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ vd, torch.logsumexp(s, -1)


def _inputs(B, H, HKV, S, SK, D, layout, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if layout == "bhsd":
        shapes = ((B, H, S, D), (B, HKV, SK, D), (B, HKV, SK, D))
    else:
        shapes = ((B, S, H, D), (B, SK, HKV, D), (B, SK, HKV, D))
    return tuple(torch.randn(*s, device="cuda", generator=g, dtype=dtype) for s in shapes)


CASES = [  # B, H, HKV, S, SK, D, causal, layout, dtype, splits
    (1, 32, 8, 1, 8191, 128, False, "bhsd", torch.bfloat16, None),    # batch 1: ~16 splits
    (1, 32, 8, 16, 8193, 128, True, "bhsd", torch.bfloat16, None),    # speculative, causal
    (32, 32, 8, 1, 2049, 128, False, "bhsd", torch.bfloat16, None),   # one split, direct
    (2, 32, 8, 8, 3000, 128, True, "bshd", torch.bfloat16, None),     # bshd: q and O copied
    (1, 8, 1, 16, 1500, 128, True, "bhsd", torch.bfloat16, None),     # MQA: 128 rows, 2 WGs
    (1, 32, 1, 5, 999, 64, True, "bhsd", torch.float16, None),        # 160 rows: 2 chunks
    (3, 16, 4, 4, 777, 256, False, "bshd", torch.bfloat16, 3),
    (2, 4, 2, 12, 5, 64, True, "bhsd", torch.bfloat16, None),          # Sq > Skv: empty rows
    (1, 8, 2, 2, 1000, 64, False, "bhsd", torch.bfloat16, 7),          # forced splits
]


@pytest.mark.parametrize("B,H,HKV,S,SK,D,causal,layout,dtype,splits", CASES)
def test_matches_float64(B, H, HKV, S, SK, D, causal, layout, dtype, splits):
    import argus.ops

    q, k, v = _inputs(B, H, HKV, S, SK, D, layout, dtype, seed=S + SK + D)
    scale = 1.0 / math.sqrt(D)
    out, lse = argus.ops.attention_decode(q, k, v, causal=causal, layout=layout,
                                          return_lse=True, splits=splits)
    torch.cuda.synchronize()
    assert out.shape == q.shape and out.dtype == dtype
    views = (q, k, v, out) if layout == "bhsd" else tuple(t.transpose(1, 2)
                                                          for t in (q, k, v, out))
    want, want_lse = reference(*views[:3], causal, scale)
    got = views[3]
    assert not torch.isnan(got).any()
    err = ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err < 1e-2, f"relative error {err}"
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3
    if splits is None:   # the public op takes the same path
        again = argus.ops.attention(q, k, v, causal=causal, layout=layout)
        torch.testing.assert_close(again, out, rtol=0, atol=0)


@pytest.mark.parametrize("S", [1, 16])
def test_matches_torch_sdpa(S):
    import argus.ops

    q, k, v = _inputs(4, 32, 8, S, 4096, 128, "bhsd", torch.bfloat16, seed=S)
    ours = argus.ops.attention(q, k, v, scale=0.3)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3,
                                                              enable_gqa=True)
    err = ((ours.float() - theirs.float()).norm() / theirs.float().norm()).item()
    assert err < 1e-2, err


def test_cuda_graph_with_splits():
    """Batch 1 (several splits: decode, then combine) captured and replayed on new data."""
    import argus.ops

    def f(q, k, v):
        return argus.ops.attention(q, k, v, causal=True)

    static = list(_inputs(1, 32, 8, 4, 5000, 128, "bhsd", torch.bfloat16, seed=1))
    f(*static)  # compile and prepare outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = f(*static)
    fresh = _inputs(1, 32, 8, 4, 5000, 128, "bhsd", torch.bfloat16, seed=2)
    for s, t in zip(static, fresh):
        s.copy_(t)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, f(*fresh), rtol=0, atol=0)
