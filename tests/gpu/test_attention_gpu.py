"""GPU tier for argus.ops.attention: the library FlashAttention forward on the device against a
float64 reference on fresh random data (ragged lengths, GQA / MQA, causal with Sq < Skv and
Sq > Skv, both layouts, every head dim, bf16 and fp16, the log-sum-exp), against torch SDPA,
under torch.compile and inside a CUDA graph."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def reference(q, k, v, causal: bool, scale: float):
    """float64 in [B, H, S, D]: GQA by repeating kv heads, bottom-right causal mask, rows
    without keys zero (LSE -inf)."""
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


def _assert_close_per_block(out, want, rows):
    """Every 64-row block of `out` ([B, H, S, D]) within 2e-2 of the float64 `want` (max abs
    error), over the first `rows` query rows: a block-local bug cannot hide in a mean."""
    err = (out.double() - want).abs()
    per_block = [err[:, :, r:r + 64].max().item() for r in range(0, rows, 64)]
    assert max(per_block) < 2e-2, f"max abs error per 64-row block {per_block}"


CASES = [  # B, H, HKV, S, SK, D, causal, layout, dtype
    (2, 4, 4, 1000, 777, 64, False, "bhsd", torch.bfloat16),
    (2, 4, 4, 1000, 777, 64, True, "bhsd", torch.bfloat16),
    (1, 8, 2, 513, 1500, 128, True, "bhsd", torch.bfloat16),      # GQA 4:1, Sq < Skv
    (1, 8, 1, 700, 300, 128, True, "bshd", torch.bfloat16),       # MQA, Sq > Skv: empty rows
    (3, 2, 2, 257, 257, 128, False, "bshd", torch.float16),
    (1, 4, 2, 640, 1111, 256, False, "bhsd", torch.bfloat16),
    (1, 4, 2, 640, 1111, 256, True, "bshd", torch.float16),
    (4, 2, 1, 1, 4097, 128, True, "bhsd", torch.bfloat16),        # one query row (decode-like)
]


@pytest.mark.parametrize("B,H,HKV,S,SK,D,causal,layout,dtype", CASES)
def test_matches_float64(B, H, HKV, S, SK, D, causal, layout, dtype):
    import argus.ops

    q, k, v = _inputs(B, H, HKV, S, SK, D, layout, dtype, seed=S + SK + D)
    scale = 1.0 / math.sqrt(D)
    out, lse = argus.ops.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    torch.cuda.synchronize()
    assert out.shape == q.shape and out.dtype == dtype
    views = (q, k, v, out) if layout == "bhsd" else tuple(t.transpose(1, 2)
                                                          for t in (q, k, v, out))
    want, want_lse = reference(*views[:3], causal, scale)
    got = views[3]
    assert not torch.isnan(got).any()
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, f"relative error {err}"
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_sdpa(D, causal):
    """Same lengths (where torch's top-left causal mask equals our bottom-right one), GQA."""
    import argus.ops

    q, k, v = _inputs(2, 8, 2, 1536, 1536, D, "bhsd", torch.bfloat16, seed=D + causal)
    ours = argus.ops.attention(q, k, v, causal=causal, scale=0.3)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                              scale=0.3, enable_gqa=True)
    err = ((ours.float() - theirs.float()).norm() / theirs.float().norm()).item()
    assert err < 1e-2, err


def test_torch_compile_and_cuda_graph():
    import argus.ops

    q, k, v = _inputs(2, 4, 2, 600, 900, 128, "bshd", torch.bfloat16, seed=7)

    def f(q, k, v):
        return argus.ops.attention(q * 1.0, k, v, causal=True, layout="bshd") + 1

    eager = f(q, k, v)
    compiled = torch.compile(f)(q, k, v)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)

    static = [t.clone() for t in (q, k, v)]
    f(*static)  # compile and prepare outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = f(*static)
    fresh = _inputs(2, 4, 2, 600, 900, 128, "bshd", torch.bfloat16, seed=8)
    for s, t in zip(static, fresh):
        s.copy_(t)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, f(*fresh), rtol=0, atol=0)


def test_unaddressable_strides_get_a_clear_error():
    import argus.ops
    from argus.errors import LaunchError

    q, k, v = _inputs(1, 2, 2, 64, 64, 128, "bhsd", torch.bfloat16, seed=1)
    with pytest.raises(LaunchError, match="cannot be read by TMA"):
        argus.ops.attention(q.transpose(2, 3).contiguous().transpose(2, 3), k, v)
    with pytest.raises(LaunchError, match="cannot be read by TMA"):
        argus.ops.attention(torch.empty(q.numel() + 8, dtype=q.dtype, device=q.device)
                            [1:1 + q.numel()].view_as(q), k, v)


SCHEDULES = {  # variants of the plain loop (base_schedule), on ragged lengths, causal
    "tma-store": lambda d: dict(epilogue="tma"),
    "persistent": lambda d: dict(persistent=True),
    "two-warpgroups": lambda d: dict(block_m=128, consumers=2, producer_regs=24,
                                     consumer_regs=240),
    "intra-wg-overlap": lambda d: dict(intra_wg_overlap=True, block_n=64),
    "ping-pong": lambda d: dict(ordered=True),
    # FA3's order (P V in flight during the softmax), fa3_overlap_schedule's tile shapes
    "fa3-overlap": lambda d: dict(fa3_overlap=True, block_n=64 if d == 64 else 112),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("D", [64, 128])
def test_schedules_match_float64(name, D, monkeypatch):
    """Every schedule the bench measures computes the same attention (the intra-wg-overlap
    variant is compiled without the verifier; fa3-overlap verifies)."""
    import dataclasses

    import argus.ops
    from argus.kernels.attention import base_schedule

    if name == "intra-wg-overlap":  # reduce.coverage of its peeled last row sum: unproven
        monkeypatch.setenv("ARGUS_VERIFY", "0")
    schedule = dataclasses.replace(base_schedule(D), **SCHEDULES[name](D))
    q, k, v = _inputs(2, 4, 2, 777, 1000, D, "bshd", torch.bfloat16, seed=D)
    out, lse = argus.ops.attention(q, k, v, causal=True, layout="bshd", return_lse=True,
                                   schedule=schedule)
    views = tuple(t.transpose(1, 2) for t in (q, k, v, out))
    want, want_lse = reference(*views[:3], True, 1.0 / math.sqrt(D))
    err = ((views[3].double() - want).norm() / want.norm()).item()
    assert err < 1e-2, f"{name}: relative error {err}"
    assert (lse.double() - want_lse).abs().max().item() < 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_pingpong_head_dim_128_every_kv_block(causal, dtype):
    """Ping-pong at head dim 128 (Q's wgmma A fragment in registers across the KV loop): every
    64-row block right, not only the ones that see a single KV block. ptxas (NVRTC 13.0)
    reused Q's registers for P and the kernel computed S = P K^T from the second KV block on
    (max abs error 0.25-0.33); tests/unit/test_wgmma_register_a_ptx.py checks the code on
    the CPU."""
    import dataclasses

    import argus.ops
    from argus.kernels.attention import base_schedule

    schedule = dataclasses.replace(base_schedule(128), ordered=True)
    q, k, v = _inputs(1, 2, 2, 512, 512, 128, "bhsd", dtype, seed=128)
    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(128))
    _assert_close_per_block(out, want, 512)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_overlap_every_kv_block(D, causal):
    """fa3_overlap_schedule (FA3's order: P_{j-1} V_{j-1} in flight while the softmax of S_j
    runs; its packed A registers live past their issue block until the wait 0) against
    float64, every 64-row block, GQA 2:1, many KV blocks per tile: a P register reused while
    its wgmma still reads it, or a wait that lets S or P V run past its reader, shows here."""
    import argus.ops
    from argus.kernels.attention import fa3_overlap_schedule

    q, k, v = _inputs(2, 4, 2, 1024, 1100, D, "bhsd", torch.bfloat16, seed=D + causal)
    out = argus.ops.attention(q, k, v, causal=causal,
                              schedule=fa3_overlap_schedule(D, causal))
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, 1024)


@pytest.mark.parametrize("D,causal,S", [(64, False, 1024), (64, True, 1024), (64, True, 1100),
                                        (128, False, 1024), (128, True, 1100),
                                        (256, False, 1024), (256, True, 1100)])
def test_default_schedules_every_kv_block(D, causal, S):
    """argus.ops.attention's own choice (default_schedule by head dim, mask and query length:
    ping-pong at full head dim 64, two overlapped warpgroups at short causal head dim 64,
    FA3's order at 128 and 256) against float64, every 64-row block, GQA 2:1, SK = S + 76."""
    import argus.ops

    q, k, v = _inputs(2, 4, 2, S, S + 76, D, "bhsd", torch.bfloat16, seed=D + S + causal)
    out = argus.ops.attention(q, k, v, causal=causal)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, S)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_wide_candidate(D, causal):
    """192-key blocks in the plain loop (bench variant `bn192`): FA3's head-dim-64 tile for
    full masks (192 x 192, three warpgroups) and 128 x 192 at head dim 128; every 64-row
    block against float64, ragged lengths."""
    import dataclasses

    import argus.ops
    from argus.kernels.attention import base_schedule

    schedule = dataclasses.replace(base_schedule(D), block_n=192)
    q, k, v = _inputs(2, 4, 2, 1000, 1111, D, "bhsd", torch.bfloat16, seed=192 + D + causal)
    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, 1000)


PACKED_P = [("default+packp", 128), ("default+packp+bn160", 128),
            ("default+packp+bn176+direct", 128), ("default+packp+bn80+direct", 256)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant,D", PACKED_P, ids=[f"{v}-d{d}" for v, d in PACKED_P])
def test_packed_p_candidate(variant, D, causal):
    """P carried as the packed bf16 A fragment (packed_p, h295) at FA3's wider key blocks
    (bench variants `packp`, `bnN`): every 64-row block against float64, ragged lengths,
    GQA 2:1."""
    import argus.ops
    from tests.loading import load_script

    schedule = load_script("gpu_attention_bench").variant_schedule(variant, D, causal, 4096)
    assert schedule.packed_p
    q, k, v = _inputs(2, 4, 2, 1000, 1111, D, "bhsd", torch.bfloat16, seed=295 + D + causal)
    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, 1000)


# FA3's full configuration (h304): ping-pong turns around S_j and P_{j-1} V_{j-1} in the overlap
# order; (variant, head dim, the bench length that picks the default: the grid, the walks)
PING_PONG_FA3 = [("default+ppfa3+packp", 64, 16384), ("default+ppfa3", 128, 16384),
                 ("default+ppfa3", 128, 2048), ("default+ppfa3+packp+bn176+direct", 128, 16384)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant,D,seq_len", PING_PONG_FA3,
                         ids=[f"{v}-d{d}-S{n}" for v, d, n in PING_PONG_FA3])
def test_ping_pong_with_fa3_overlap(variant, D, seq_len, causal):
    """Ping-pong (ordered) with FA3's overlap order (bench token `ppfa3`): every 64-row block
    against float64, ragged lengths, GQA 2:1, many KV blocks a tile (turns going round many
    times between the warpgroups, a turn taken while Q, K and V slots are held): a turn that
    lets a warpgroup read S or P V before its wait, or a hang, shows here."""
    import argus.ops
    from tests.loading import load_script

    schedule = load_script("gpu_attention_bench").variant_schedule(variant, D, causal, seq_len)
    assert schedule.ordered and schedule.fa3_overlap
    q, k, v = _inputs(2, 4, 2, 1000, 1111, D, "bhsd", torch.bfloat16, seed=304 + D + causal)
    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, 1000)


@pytest.mark.parametrize("scale", [None, -0.05], ids=["default-scale", "negative-scale"])
@pytest.mark.parametrize("D,causal,S", [(64, False, 1000), (64, True, 1000), (64, True, 3000),
                                        (128, False, 1000), (128, True, 1000),
                                        (256, True, 1000)])
def test_softmax_diet(D, causal, S, scale):
    """The default schedules with the softmax diet (approx_exp2 + fold_scale, bench variant
    `default+fast`): every 64-row block and the LSE against float64, ragged lengths, Sq < Skv;
    a negative scale runs the unfolded schedule (argus.ops.attention.for_scale)."""
    import dataclasses

    import argus.ops
    from argus.kernels.attention import default_schedule

    schedule = dataclasses.replace(default_schedule(D, causal, S), approx_exp2=True,
                                   fold_scale=True)
    q, k, v = _inputs(2, 4, 2, S, S + 111, D, "bhsd", torch.bfloat16, seed=7 + D + causal)
    out, lse = argus.ops.attention(q, k, v, causal=causal, scale=scale, schedule=schedule,
                                   return_lse=True)
    want, want_lse = reference(q, k, v, causal, scale or 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, S)
    assert (lse.double() - want_lse).abs().max().item() < 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_three_warpgroups_at_head_dim_128(causal):
    """Bench candidate `3wg+fast` (192 x 128, three warpgroups, the plain loop with the softmax
    diet) at head dim 128: every 64-row block against float64, ragged lengths."""
    import argus.ops
    from argus.kernels.attention import AttentionSchedule

    schedule = AttentionSchedule(block_m=192, block_n=128, consumers=3, producer_regs=32,
                                 consumer_regs=160, approx_exp2=True, fold_scale=True)
    q, k, v = _inputs(2, 4, 2, 1000, 1111, 128, "bhsd", torch.bfloat16, seed=3 + causal)
    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(128))
    _assert_close_per_block(out, want, 1000)


SHORT_LEVERS = [("default+snake+earlyq", 128, True), ("default+snake", 128, True),
                ("default+snake", 64, True), ("default+snake+earlyq", 256, True),
                ("default+snake", 256, True),
                ("default+cl2", 128, False), ("default+cl2", 64, False),
                ("default+grid+cl2", 256, False), ("default+grid+cl2", 128, False),
                # h290: O through two 128-column TMA-store rounds at head dim 256, the next
                # unit's Q prefetched into L2 (tests/unit/test_attention_store_rounds.py)
                ("default+tma128", 256, False), ("default+tma128", 256, True),
                ("default+tma128+pfq", 256, False), ("default+tma128+pfq", 256, True),
                ("default+pfq", 128, False), ("default+pfq", 128, True),
                # h292: O by stmatrix + TMA store at head dim 64 (two CTAs an SM at 1000 and
                # at causal 2100, ping-pong at full 2100; tests/unit/test_attention_tma_hd64.py)
                ("default+tma", 64, False), ("default+tma", 64, True)]


@pytest.mark.parametrize("S", [1000, 2100])
@pytest.mark.parametrize("variant,D,causal", SHORT_LEVERS,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}"
                              for v, d, c in SHORT_LEVERS])
def test_short_prefill_levers(variant, D, causal, S):
    """tile_order "snake" (the causal walk, odd rounds reversed) and cluster_m=2 (full masks,
    K and V multicast to a CTA pair; odd m tile counts at S 2100 with 128-row tiles): every
    64-row block against float64, GQA 2:1, SK = S + 76 (bench tokens, scripts/
    gpu_attention_bench.py variant_schedule; 2100 takes the 2k rule's schedule)."""
    import argus.ops
    from tests.loading import load_script

    schedule = load_script("gpu_attention_bench").variant_schedule(
        variant, D, causal, 1024 if S <= 1024 else 2048)
    q, k, v = _inputs(2, 4, 2, S, S + 76, D, "bhsd", torch.bfloat16, seed=D + S + causal)
    out = argus.ops.attention(q, k, v, causal=causal, schedule=schedule)
    want, _ = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    _assert_close_per_block(out, want, S)
