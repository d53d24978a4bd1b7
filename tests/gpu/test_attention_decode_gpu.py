"""GPU tier for the decode path (argus.ops.attention with Sq <= 16, argus.ops.attention_decode):
the split-KV kernels and the combine on the device against float64 on fresh random data
(batch 1 with many splits, batch 32 with one, 1 / 8 / 16 query tokens, GQA and MQA, causal
bottom-right, KV lengths off the block, both layouts, fp16, every head dim, more packed rows
than one tile), against torch SDPA, and inside a CUDA graph; and every schedule the decode
bench's --decode-variants time (176/192/64-key blocks, the staggered and two-stream walks,
cta2 splits, two CTAs an SM by the occupancy hint, the fused combine and its counters)."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.test_attention_gpu import _inputs, reference  # noqa: E402
from tests.loading import load_script  # noqa: E402

pytestmark = hopper_only()


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


def _variant(name, B, HKV, SK, rows):
    """(schedule, splits) of a --decode-variants token of scripts/gpu_attention_bench.py,
    for the (batch x kv heads) units and keys of a case."""
    module = load_script("gpu_attention_bench")
    schedule, splits, _ = module.decode_variant(name, 128, rows, B * HKV, SK)
    return schedule, splits


VARIANTS = [  # variant, B, S, SK, causal: the schedules the decode bench times beside ours
    ("bn176+st2", 1, 1, 8191, False),     # 176-key blocks, 16 splits (47 blocks: uneven)
    ("bn192+st2", 32, 16, 8193, True),    # 192-key blocks, direct, causal, key tail
    ("bn64+st6", 1, 4, 5000, True),
    ("wg2+st2", 4, 1, 3001, False),       # a second consumer warpgroup of padding rows
    ("stagger2", 32, 1, 8191, False),     # rotated walks: 8 start offsets, tail mid-walk
    ("stagger8+bn176+st2", 40, 4, 3000, True),   # rotations past n (clamped), causal
    ("streams2", 32, 1, 8191, False),     # two interleaved halves, odd block count
    ("streams2+stagger2", 33, 8, 1000, True),
    ("cta2", 1, 1, 8192, False),          # 32 splits of 2 blocks
    ("cta2", 1, 16, 32768, True),
    ("bn64+st2+occ2", 1, 1, 8191, False),   # two CTAs an SM: 32 splits, 128 registers
    ("bn64+st2+occ2", 32, 16, 8193, True),  # two CTAs an SM, direct
    ("fused", 1, 1, 8191, False),         # the last split of each head merges (atomics)
    ("fused", 1, 16, 8193, True),         # 64 packed rows: 16 merge chunks, causal
    ("bn64+st2+occ2+fused", 1, 1, 32768, False),
]


@pytest.mark.parametrize("variant", ["fused", "bn64+st2+occ2+fused"])
def test_fused_counters_repeat_and_stay_zero(variant):
    """The fused kernel's counters (argus/ops/attention_decode._COUNTERS) reset themselves:
    ten calls in a row on the same stream, each against float64, and the counters are zero
    after every one (a counter left off zero would make the next call's wrong CTA merge)."""
    import importlib

    import argus.ops
    # argus.ops re-exports the function attention_decode under the module's own name
    opmod = importlib.import_module("argus.ops.attention_decode")

    H, HKV, D, B, S, SK = 32, 8, 128, 1, 1, 8191
    schedule, splits = _variant(variant, B, HKV, SK, H // HKV * S)
    q, k, v = _inputs(B, H, HKV, S, SK, D, "bhsd", torch.bfloat16, seed=7)
    want, _ = reference(q, k, v, False, 1.0 / math.sqrt(D))
    for _ in range(10):
        out = argus.ops.attention_decode(q, k, v, splits=splits, schedule=schedule)
        torch.cuda.synchronize()
        err = ((out.double() - want).norm() / want.norm()).item()
        assert err < 1e-2, f"{variant}: relative error {err}"
        counters = [c for key, c in opmod._COUNTERS.items()   # (device, stream, B, HKV, 2)
                    if key[2:4] == (B, HKV)]
        assert counters and all(int(c.abs().sum()) == 0 for c in counters)


def test_two_ctas_an_sm_occupancy():
    """The occupancy hint holds on the device: the driver's occupancy calculator puts two
    CTAs of the bn64+st2+occ2 split kernel on an SM (its dynamic shared memory included)."""
    import argus as ag
    from argus.kernels.attention_decode import decode_kernel
    from argus.runtime import driver as D
    from argus.runtime.context import _driver

    schedule, _ = _variant("bn64+st2+occ2", 1, 8, 8192, 4)
    c = ag.compile(decode_kernel(128, ag.bf16, False, True), s=schedule)
    device = torch.cuda.current_device()
    fn = D.get_function(c.binary, c.source.name, device)
    D._opt_in_smem(c.binary, c.source.name, device, fn, c.source.dynamic_smem)
    err, blocks = _driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
        fn, c.source.threads, c.source.dynamic_smem)
    assert int(err) == 0 and blocks >= 2, (err, blocks)
    assert c.resources.registers <= 128 and not c.resources.spills


@pytest.mark.parametrize("variant,B,S,SK,causal", VARIANTS)
def test_bench_variants_match_float64(variant, B, S, SK, causal):
    """Every schedule and split count the decode bench's variants run (GQA 32:8, hd128) on
    the device against float64, through argus.ops.attention_decode(schedule=, splits=)."""
    import argus.ops

    H, HKV, D = 32, 8, 128
    schedule, splits = _variant(variant, B, HKV, SK, H // HKV * S)
    q, k, v = _inputs(B, H, HKV, S, SK, D, "bhsd", torch.bfloat16, seed=B + S + SK)
    out, lse = argus.ops.attention_decode(q, k, v, causal=causal, return_lse=True,
                                          splits=splits, schedule=schedule)
    torch.cuda.synchronize()
    want, want_lse = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    assert not torch.isnan(out).any()
    err = ((out.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, f"{variant}: relative error {err}"
    finite = torch.isfinite(want_lse)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3


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


# ----------------------------------------------------------------------------- paged KV cache


def _paged(lens, H, HKV, S, D, page_size, dtype=torch.bfloat16, seed=0, spare=5):
    """q, caches [pages, page_size, HKV, D] on a random page permutation, the block table,
    seq_lens and each sequence's dense K and V [HKV, len, D] (for the reference)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    need = [-(-n // page_size) for n in lens]
    pages = sum(need) + spare
    kc = torch.randn(pages, page_size, HKV, D, device="cuda", generator=g, dtype=dtype)
    vc = torch.randn(pages, page_size, HKV, D, device="cuda", generator=g, dtype=dtype)
    order = torch.randperm(pages, device="cuda", generator=g)
    table = torch.full((len(lens), max(need)), -1, dtype=torch.int32, device="cuda")
    dense, used = [], 0
    for b, n in enumerate(lens):
        ids = order[used:used + need[b]]
        used += need[b]
        table[b, :need[b]] = ids.int()
        dense.append(tuple(c[ids].reshape(-1, HKV, D)[:n].transpose(0, 1) for c in (kc, vc)))
    q = torch.randn(len(lens), H, S, D, device="cuda", generator=g, dtype=dtype)
    return q, kc, vc, table, torch.tensor(lens, dtype=torch.int32, device="cuda"), dense


def _paged_reference(q, dense, causal, scale):
    outs = []
    for b, (k, v) in enumerate(dense):
        want, _ = reference(q[b:b + 1], k[None], v[None], causal, scale)
        outs.append(want[0])
    return torch.stack(outs)


PAGED = [  # lens, H, HKV, S, D, page_size, causal
    ([8191, 5, 0, 3000], 32, 8, 1, 128, 16, False),
    ([4096, 1000, 77], 32, 8, 4, 128, 64, True),
    ([10000], 32, 8, 1, 128, 256, False),              # batch 1
    ([700, 1300], 16, 4, 16, 64, 128, True),
    ([2000, 513], 8, 2, 2, 256, 32, False),
]


@pytest.mark.parametrize("lens,H,HKV,S,D,page_size,causal", PAGED)
def test_paged_matches_float64(lens, H, HKV, S, D, page_size, causal):
    import argus.ops

    q, kc, vc, table, sl, dense = _paged(lens, H, HKV, S, D, page_size, seed=len(lens) + D)
    scale = 1.0 / math.sqrt(D)
    out = argus.ops.attention_decode(q, kc, vc, table, sl, causal=causal)
    torch.cuda.synchronize()
    want = _paged_reference(q, dense, causal, scale)
    assert not torch.isnan(out).any()
    err = ((out.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err < 1e-2, f"relative error {err}"


def test_paged_splits(monkeypatch):
    """The split paged kernel, proven by the verifier since f25bce3 (k-once over a paged split:
    the logical key tag has an extent), with verification on and off, against float64."""
    import argus.ops

    q, kc, vc, table, sl, dense = _paged([9000, 100, 4000], 32, 8, 1, 128, 64, seed=3)
    want = _paged_reference(q, dense, False, 1.0 / math.sqrt(128))
    for verify in ("1", "0"):
        monkeypatch.setenv("ARGUS_VERIFY", verify)
        out = argus.ops.attention_decode(q, kc, vc, table, sl, splits=8)
        err = ((out.double() - want).norm() / want.norm()).item()
        assert err < 1e-2, (verify, err)


def test_paged_cuda_graph_follows_the_table():
    """A decoding step captured once and replayed as the lengths grow and the table changes
    (the kernel reads both on the device)."""
    import argus.ops

    q, kc, vc, table, sl, _ = _paged([3000, 1000], 32, 8, 1, 128, 64, seed=5, spare=20)

    def f():
        return argus.ops.attention_decode(q, kc, vc, table, sl, causal=True)

    f()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = f()
    for lens in ([3001, 1000], [2500, 1700]):
        q2, kc2, vc2, table2, sl2, dense = _paged(lens, 32, 8, 1, 128, 64, seed=sum(lens))
        pages = min(kc.shape[0], kc2.shape[0])
        kc[:pages].copy_(kc2[:pages])
        vc[:pages].copy_(vc2[:pages])
        q.copy_(q2)
        table.fill_(-1)
        table[:, :table2.shape[1]].copy_(table2[:, :table.shape[1]])
        sl.copy_(sl2)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, f(), rtol=0, atol=0)


def test_repeated_call_host_time():
    """Host time of a repeated decode call (the op's Python, allocations and launches), timed
    on the CPU over calls whose kernels are shorter than it (1 sequence, 256 keys). Printed;
    bounded generously (before the signature cache: 80-150 us a call on the H200's host)."""
    import time

    import argus.ops

    q, k, v = _inputs(1, 32, 8, 1, 256, 128, "bhsd", torch.bfloat16, seed=9)
    for _ in range(20):
        argus.ops.attention(q, k, v)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            argus.ops.attention(q, k, v)
        best = min(best, (time.perf_counter() - t0) / 200)
        torch.cuda.synchronize()
    print(f"repeated decode call: {best * 1e6:.1f} us of host time")
    assert best < 40e-6, f"{best * 1e6:.1f} us of host time per repeated decode call"
