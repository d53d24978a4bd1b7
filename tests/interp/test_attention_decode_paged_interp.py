"""The paged decode path (argus.ops.attention_decode with block_table and seq_lens) in the numpy
interpreter against a float64 reference: caches [num_pages, page_size, Hkv, D] whose pages are
a random permutation shared out to the sequences, ragged lengths (0 keys, part of a page, whole
pages, the table's full length), page sizes below the KV block (block_n = page_size), equal to
it and above it (two blocks per page), causal (bottom-right per sequence), splits chosen and
forced (a split of a short sequence without blocks), GQA packing, the [B, S, H, D] layout, and
clear errors for bad block tables, lengths, shapes and dtypes."""

import math

import pytest
import torch

from argus.errors import LaunchError
from argus.kernels.attention_decode import DecodeSchedule, default_decode_schedule
from argus.ops.attention_decode import run_decode


def interpret(kernel_fn, compile_time, tensors, scalars):
    kernel_fn.interpret(*tensors, **scalars, **compile_time)


def paged_inputs(lens, H, HKV, S, D, page_size, *, spare_pages=3, max_pages=None, seed=0,
                 layout="bhsd", dtype=torch.bfloat16):
    """q, the caches, the block table (a random permutation of the pages; unused entries hold
    -1, never read) and seq_lens, plus each sequence's dense K and V [HKV, len, D]."""
    g = torch.Generator().manual_seed(seed)
    B = len(lens)
    need = [-(-n // page_size) for n in lens]
    max_pages = max_pages or max(1, max(need))
    pages = sum(need) + spare_pages
    k_cache = torch.randn(pages, page_size, HKV, D, generator=g).to(dtype)
    v_cache = torch.randn(pages, page_size, HKV, D, generator=g).to(dtype)
    order = torch.randperm(pages, generator=g)
    table = torch.full((B, max_pages), -1, dtype=torch.int32)
    dense, used = [], 0
    for b, n in enumerate(lens):
        ids = order[used:used + need[b]]
        used += need[b]
        table[b, :need[b]] = ids.int()
        k = k_cache[ids].reshape(-1, HKV, D)[:n].transpose(0, 1)
        v = v_cache[ids].reshape(-1, HKV, D)[:n].transpose(0, 1)
        dense.append((k, v))
    q = torch.randn(B, H, S, D, generator=g).to(dtype)
    if layout == "bshd":
        q = q.transpose(1, 2).contiguous()
    return q, k_cache, v_cache, table, torch.tensor(lens, dtype=torch.int32), dense


def reference(q, dense, causal: bool, scale: float):
    """float64 per sequence (bhsd q): GQA, bottom-right causal mask; no key -> 0, LSE -inf."""
    outs, lses = [], []
    for b, (k, v) in enumerate(dense):
        qd = q[b].double()
        group = qd.shape[0] // k.shape[0]
        kd = k.double().repeat_interleave(group, 0)
        vd = v.double().repeat_interleave(group, 0)
        s = qd @ kd.transpose(-1, -2) * scale
        if causal:
            S, SK = qd.shape[1], kd.shape[1]
            s = s.masked_fill(~torch.ones(S, SK, dtype=torch.bool).tril(SK - S), float("-inf"))
        outs.append(torch.softmax(s, -1).nan_to_num(0.0) @ vd if s.shape[-1] else
                    torch.zeros(qd.shape, dtype=torch.float64))
        lses.append(torch.logsumexp(s, -1))
    return torch.stack(outs), torch.stack(lses)


def check(lens, H, HKV, S, D, page_size, causal, *, layout="bhsd", splits=None, schedule=None,
          max_pages=None, seed=0):
    q, kc, vc, table, sl, dense = paged_inputs(lens, H, HKV, S, D, page_size, seed=seed,
                                               layout=layout, max_pages=max_pages)
    scale = 1.0 / math.sqrt(D)
    out, lse = run_decode(q, kc, vc, causal, scale, layout, True, block_table=table,
                          seq_lens=sl, splits=splits, schedule=schedule, execute=interpret)
    assert tuple(out.shape) == tuple(q.shape)
    got = out if layout == "bhsd" else out.transpose(1, 2)
    want, want_lse = reference(q if layout == "bhsd" else q.transpose(1, 2), dense, causal,
                               scale)
    assert not torch.isnan(got.float()).any(), "rows left unwritten (NaN)"
    err = (got.double() - want).abs().max().item()
    assert err < 2e-2 * max(1.0, want.abs().max().item()), f"max abs error {err}"
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite), "LSE -inf exactly where no key is seen"
    if finite.any():
        assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("page_size", [16, 64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_ragged_sequences_on_permuted_pages(page_size, causal):
    """Four sequences of 0, 37, page_size and 2.5 pages' keys (at least 200): whole pages,
    part of one and none, on pages in random order; block_n = min(128, page_size) (two
    blocks per 256-key page)."""
    lens = [0, 37, page_size, max(200, 5 * page_size // 2)]
    check(lens, 8, 2, 2, 64, page_size, causal)


@pytest.mark.parametrize("splits", [1, 3])
def test_forced_splits_and_short_sequences(splits):
    """One split (the direct kernel) and three of a table sized for 6 blocks: the 1-block
    sequence leaves two splits without blocks (zeros, LSE -inf, weighed 0); 4 query tokens x
    GQA 4:1 = 16 packed rows; a length past the table's pages is clamped to them."""
    schedule = DecodeSchedule(block_n=64, stages=2)
    check([64, 300, 384], 8, 2, 4, 64, 64, True, splits=splits, schedule=schedule,
          max_pages=6)


def test_bshd_query_and_one_token():
    check([129, 5], 4, 1, 1, 64, 32, False, layout="bshd")


@pytest.mark.parametrize("D", [128, 256])
def test_head_dims(D):
    check([150, 70], 4, 2, 1, D, 64, True)


def test_the_schedule_takes_blocks_of_one_small_page():
    for page_size in (16, 32, 64):
        s = default_decode_schedule(128, 4, page_size=page_size)
        assert s.block_n == page_size and s.problems_for(128) == []
    assert default_decode_schedule(128, 4, page_size=256).block_n == 128
    assert default_decode_schedule(128, 4, page_size=256) == default_decode_schedule(128, 4)


def _call(q, kc, vc, table, sl, **kw):
    return run_decode(q, kc, vc, False, 0.125, kw.pop("layout", "bhsd"), False,
                      block_table=table, seq_lens=sl, execute=interpret, **kw)


def test_bad_paged_inputs_get_clear_errors():
    q, kc, vc, table, sl, _ = paged_inputs([40, 20], 4, 2, 1, 64, 16)
    cases = [
        ((q, kc, vc, table.long(), sl), "block_table is torch.int64; it must be torch.int32"),
        ((q, kc, vc, table, sl.long()), "seq_lens is torch.int64"),
        ((q, kc, vc, table[:1], sl), r"block_table has shape \(1, 3\); it must be \[batch, "
                                     r"max_pages\] with batch = 2"),
        ((q, kc, vc, table, sl[:, None]), r"seq_lens has shape \(2, 1\)"),
        ((q, kc, vc, table, None), "seq_lens must be a torch.Tensor"),
        ((q, kc.float(), vc, table, sl), "must all be bfloat16 or all float16"),
        ((q, kc[:, :8], vc[:, :8], table, sl), "page_size 8 .* is not a power of two >= 16"),
        ((q, kc[..., :32], vc[..., :32], table, sl), "q has head dim 64, the caches have 32"),
        ((q[:, :3], kc, vc, table, sl), "multiple of the kv heads"),
        ((q, kc, vc[:, :, :1], table, sl), "differ"),
        ((q, kc.transpose(1, 2), vc, table, sl), "differ"),
        ((q, torch.randn(*kc.shape[:3], 128).bfloat16()[..., ::2], vc, table, sl),
         "k_cache .* cannot be read by TMA"),
    ]
    for args, words in cases:
        with pytest.raises(LaunchError, match=words):
            _call(*args)
    bad = table.clone()
    bad[1, 1] = 99
    with pytest.raises(LaunchError, match=r"block_table\[1, 1\] = 99 is not a page of the caches"):
        _call(q, kc, vc, bad, sl)
    bad = table.clone()
    bad[1, 2] = 99          # past sequence 1's 2 pages: never read, fine
    _call(q, kc, vc, bad, sl)
    with pytest.raises(LaunchError, match=r"seq_lens\[0\] = 49 is outside \[0, 48\]"):
        _call(q, kc, vc, table, torch.tensor([49, 20], dtype=torch.int32))
    with pytest.raises(LaunchError, match="Argus kernels run on a CUDA device"):
        from argus.ops import attention_decode
        attention_decode(q, kc, vc, table, sl)


def test_splits_run_where_allowed(monkeypatch):
    """With the split paged kernel not proven (PAGED_SPLITS_VERIFIED False, the switch kept
    for a kernel change the verifier does not prove yet), a paged call with verification on
    runs one split; proven (the default since issue 13) or with verification off num_splits
    chooses, here 4 splits of a 16-block table for 2 (sequence, kv head) units, two of them
    empty for the short sequence."""
    import importlib

    from argus.kernels.attention_decode import num_splits

    mod = importlib.import_module("argus.ops.attention_decode")
    launches = []

    def count(kernel_fn, compile_time, tensors, scalars):
        launches.append(tensors[-1].shape)
        interpret(kernel_fn, compile_time, tensors, scalars)

    q, kc, vc, table, sl, _ = paged_inputs([100, 1000], 4, 1, 1, 64, 64, max_pages=16)
    assert mod.PAGED_SPLITS_VERIFIED
    monkeypatch.setenv("ARGUS_VERIFY", "1")
    run_decode(q, kc, vc, False, 0.125, "bhsd", False, block_table=table, seq_lens=sl,
               execute=count)
    assert len(launches) == 2 and launches[0][1] == num_splits(2, 16)   # split + combine
    monkeypatch.setattr(mod, "PAGED_SPLITS_VERIFIED", False)
    launches.clear()
    run_decode(q, kc, vc, False, 0.125, "bhsd", False, block_table=table, seq_lens=sl,
               execute=count)
    assert len(launches) == 1                          # the direct kernel alone
    monkeypatch.setattr(mod, "PAGED_SPLITS_VERIFIED", True)
    assert num_splits(2, 16) > 1
    check([100, 1000], 4, 1, 1, 64, 64, True, max_pages=16)
    monkeypatch.setattr(mod, "PAGED_SPLITS_VERIFIED", False)
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    launches.clear()
    run_decode(q, kc, vc, False, 0.125, "bhsd", False, block_table=table, seq_lens=sl,
               execute=count)
    assert len(launches) == 2 and launches[0][1] == num_splits(2, 16)   # split + combine
