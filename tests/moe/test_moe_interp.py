"""The MoE layer in the interpreter (argus/ops/moe.py, argus/kernels/moe*.py) against float64
torch: routing (softmax top-k with and without renormalization, DeepSeek-V3's grouped sigmoid),
the contiguous layout (counts, padded segments, tile -> expert map, positions), and the whole
layer with ragged expert counts, zero-token experts, one token and a T that is no multiple of
anything. Padding rows of the permuted input are NaN here, so any that reaches the output
shows."""

import pytest
import torch

from dataclasses import replace

from argus.kernels.moe import (PREFILL, PREFILL_CLUSTER, PREFILL_TMA, PREFILL_TMA_CLUSTER, SMALL,
                              TINY, MoeSchedule, decode_schedule)
from argus.kernels import moe_routing as R

from argus.ops import moe_module as M


def _weights(E, H, I, seed):
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16()
    return w13, w2


def _ids_skewed(T, E, k, seed):
    """top-k ids with a skew: expert 0 popular, the last expert never chosen."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(T, E - 1, generator=g)
    scores[:, 0] += 0.5
    return scores.topk(k, dim=1).indices.int()


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.parametrize("T,E,k,H,I,schedule", [
    (1, 4, 2, 64, 64, SMALL),
    (37, 8, 2, 64, 128, SMALL),
    (100, 6, 2, 128, 64, SMALL),
    (70, 4, 2, 64, 64, PREFILL),
    (9, 4, 2, 128, 64, TINY),                                   # 64 x 64 tiles
    (150, 4, 2, 64, 128, PREFILL_CLUSTER),                      # CTA pairs, 256-row padding
    (130, 4, 2, 128, 128, PREFILL_TMA_CLUSTER),                 # both
    (70, 4, 2, 64, 128, PREFILL_TMA),                           # stmatrix + TMA store
    (50, 4, 2, 64, 128, replace(PREFILL_TMA, store_cols=64)),   # in 64-column rounds
    # decode (swap-AB): token tiles of 8..64 rows as wgmma N, 64 weight rows as M
    (1, 4, 2, 64, 64, decode_schedule(8)),                      # one token
    (13, 6, 3, 128, 72, decode_schedule(16, stages=3)),         # k 3, I past a 64-row tile
    (37, 5, 2, 64, 128, decode_schedule(8, stages=2)),          # experts of several tiles
    (64, 8, 2, 128, 64, decode_schedule(32)),
])
def test_layer_matches_float64(T, E, k, H, I, schedule):
    w13, w2 = _weights(E, H, I, seed=T)
    g = torch.Generator().manual_seed(T + 1)
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = _ids_skewed(T, E, k, seed=T + 2)
    weights = torch.rand(T, k, generator=g)
    layer = M.Layer(T, H, I, E, k, schedule)
    scratch = {}
    out = M.experts(x, w13, w2, ids, weights, layer, interpret=True, scratch=scratch)
    exact = M.reference(x, w13, w2, ids, weights)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)

    # the layout: segments in expert order, each padded to bm, in token order within
    counts = torch.bincount(ids.view(-1).long(), minlength=E)
    assert counts[E - 1] == 0     # a zero-token expert
    bm = schedule.pad   # rows per expert segment unit: bm, or 2 * bm for CTA pairs
    padded = (counts + bm - 1) // bm * bm
    start = torch.cumsum(padded, 0) - padded
    assert scratch["expert_start"].view(-1).tolist() == start.tolist()
    assert scratch["tiles"].item() == padded.sum().item() // bm
    te = scratch["tile_expert"].view(-1)
    expect_te = torch.repeat_interleave(torch.arange(E), padded // bm)
    n = expect_te.numel()
    assert te[:n].tolist() == expect_te.tolist() and (te[n:] == -1).all()
    pos = scratch["pos"].view(-1).long()
    flat = ids.view(-1).long()
    for e in range(E):
        mine = (flat == e).nonzero().view(-1)      # entries of e in token order
        assert pos[mine].tolist() == list(range(start[e], start[e] + counts[e]))


@pytest.mark.parametrize("T,E,k,H,I,gate_up_splits,down_splits", [
    (3, 5, 2, 128, 192, 2, 3),     # both GEMMs: slices of one 64-column K step each
    (11, 4, 3, 192, 64, 2, 1),     # the gate-up alone (then split_finish); slices of 96: a
                                   # box crossing a slice's edge reads zeros, not the next
    (6, 6, 2, 64, 256, 1, 4),      # the down alone (the combine adds the slices)
])
def test_decode_split_k_matches_float64(T, E, k, H, I, gate_up_splits, down_splits):
    """Decode GEMMs cut along K (K-slice views in front, as the library's split-K): fp32
    partial sums per slice, added up by split_finish (before SiLU) and by the combine."""
    w13, w2 = _weights(E, H, I, seed=T + 50)
    g = torch.Generator().manual_seed(T + 51)
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = _ids_skewed(T, E, k, seed=T + 52)
    weights = torch.rand(T, k, generator=g)
    layer = M.Layer(T, H, I, E, k, decode_schedule(8, stages=2, split_k=gate_up_splits),
                    decode_schedule(8, stages=3, split_k=down_splits))
    out = M.experts(x, w13, w2, ids, weights, layer, interpret=True)
    exact = M.reference(x, w13, w2, ids, weights)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)


@pytest.mark.parametrize("T,E,k,H,I,splits,bn", [
    (3, 5, 2, 128, 192, 2, 8),     # slices of one 64-column K step; I of three weight tiles
    (11, 4, 3, 192, 64, 2, 8),     # slices of 96: a box crossing a slice's edge reads zeros
    (5, 6, 2, 256, 72, 4, 16),     # four slices; I past a 64-row weight tile (ragged last)
])
def test_fused_split_finish_matches_the_split_finish_kernel(T, E, k, H, I, splits, bn):
    """The gate-up cut along K with its split finish inside the GEMM (fused_finish: the last
    K slice of each (token tile, weight tile) adds the slices up and stores h) gives the
    layer of the separate split finish kernel bit for bit (the same fp32 sums in slice order,
    whichever slice arrives last), matches float64, leaves every arrival counter at zero
    (they reset themselves, so the next call reuses them), and a second call on the same
    workspace with new inputs is right too."""
    w13, w2 = _weights(E, H, I, seed=T + 60)
    g = torch.Generator().manual_seed(T + 61)
    down = decode_schedule(bn, stages=3)
    outs, ws = [], None
    for fused in (False, True):
        x = torch.randn(T, H, generator=torch.Generator().manual_seed(T)).bfloat16()
        ids = _ids_skewed(T, E, k, seed=T + 62)
        weights = torch.rand(T, k, generator=torch.Generator().manual_seed(T + 63))
        gate_up = decode_schedule(bn, stages=2, split_k=splits, fused_finish=fused)
        layer = M.Layer(T, H, I, E, k, gate_up, down)
        scratch = {}
        outs.append(M.experts(x, w13, w2, ids, weights, layer, interpret=True, scratch=scratch))
        if fused:
            ws = scratch
            assert "h_count" in scratch and (scratch["h_count"] == 0).all()
            tiles = int(scratch["tiles"][0, 0])
            assert scratch["h_count"].shape == (layer.padded_rows // bn, -(-I // 64))
            assert tiles <= scratch["h_count"].shape[0]
        else:
            assert "h_count" not in scratch
    exact = M.reference(x, w13, w2, ids, weights)
    assert torch.equal(outs[0], outs[1])
    assert not torch.isnan(outs[1]).any(), "a padding row reached the output"
    assert _rel(outs[1], exact) < 1e-2, _rel(outs[1], exact)
    # the same workspace (its counters as the first call left them) on other inputs
    x2 = torch.randn(T, H, generator=g).bfloat16()
    ids2 = _ids_skewed(T, E, k, seed=T + 64)
    w2nd = torch.rand(T, k, generator=g)
    out2 = M.experts(x2, w13, w2, ids2, w2nd, layer, interpret=True, ws=ws)
    assert _rel(out2, M.reference(x2, w13, w2, ids2, w2nd)) < 1e-2
    assert (ws["h_count"] == 0).all()


def test_fused_split_finish_is_off_by_default():
    """The rule never takes the fused split finish (its counter is not proven by the
    verifier yet: tests/moe/test_moe_verify.py), and it needs the decode form."""
    for T, k, E, H, I in [(1, 8, 128, 2048, 768), (1, 2, 8, 4096, 14336), (1, 1, 8, 8, 16384),
                          (1, 8, 256, 7168, 2048)]:
        assert not any(s.fused_finish for s in M.decode_schedules(T, k, E, H, I))
    with pytest.raises(ValueError, match="fused_finish"):
        MoeSchedule(bm=64, bn=64, consumers=1, fused_finish=True)


@pytest.mark.parametrize("splits,bn,I,tiles", [
    (2, 8, 320, 3),      # blocks of 128 columns: two whole, one ragged (64)
    (4, 16, 192, 2),     # blocks of 64 columns: three
    (3, 64, 40, 1),      # one block of 16 columns wider than I
])
def test_split_finish_spreads_column_blocks(splits, bn, I, tiles):
    """The split finish alone against float64: h = silu(sum of gate slices) * sum of up
    slices for the counted token tiles, over several (token tile, column block) CTAs; rows
    past the counted tiles stay untouched."""
    from argus.kernels.moe import split_finish_kernel

    rows = (tiles + 2) * bn   # the layout holds more rows than the tiles routing counted
    g = torch.Generator().manual_seed(splits * 100 + bn)
    parts = torch.randn(splits, 2, rows, I, generator=g)
    h = torch.full((rows, I), float("nan"), dtype=torch.bfloat16)
    split_finish_kernel(splits, bn).interpret(parts, torch.tensor([[tiles]], dtype=torch.int32),
                                              h)
    gate, up = parts.double().sum(dim=0)
    want = (gate * torch.sigmoid(gate) * up)[:tiles * bn]
    got = h[:tiles * bn].double()
    assert (got - want).abs().max() <= 1e-2 * want.abs().max(), (got - want).abs().max()
    assert torch.isnan(h[tiles * bn:].float()).all(), "a row past the counted tiles was written"


def test_decode_splits_only_where_few_units_cannot_saturate_hbm():
    """The K split (argus.ops.moe.decode_splits) buys busy SMs, not a full last wave: one Qwen3
    token's gate-up (8 experts x 12 tiles = 96 units) keeps 96 SMs streaming with 136 KB in
    flight each, more than HBM's rate needs, so it is not cut (cut in 4 it filled the last
    wave, and the 5 us split finish held the GEMMs at 61% of the floor on the H200); nor are
    the bench models' decode GEMMs at T = 1, 16, 64. One expert's two 64-column tiles over
    K = 16384 keep two SMs busy: cut in 4 (the most). A short K is never cut below 8 steps a
    slice."""
    for T, k, E, H, I in [(1, 8, 128, 2048, 768), (16, 8, 128, 2048, 768),
                          (64, 8, 128, 2048, 768), (1, 2, 8, 4096, 14336),
                          (16, 2, 8, 4096, 14336), (1, 8, 256, 7168, 2048)]:
        gate_up, down = M.decode_schedules(T, k, E, H, I)
        assert (gate_up.split_k, down.split_k, gate_up.pad) == (1, 1, down.pad), (T, E)
    assert M.decode_splits(1, 1, 8, 8, 128, 16384, gated=True) == 4
    assert M.decode_splits(1, 1, 8, 8, 128, 16384, gated=False) == 4
    assert M.decode_splits(1, 1, 8, 8, 128, 64 * 15, gated=True) == 1


def test_decode_stages_keep_the_same_bytes_in_flight():
    """The down GEMM's stages are about half the gate-up's (one weight plane), so its ring is
    about twice as deep; a ring holds DECODE_IN_FLIGHT bytes to within one stage, or more where
    the floor of 8 stages rules (wide token tiles), and fits shared memory."""
    for bn in (8, 16, 32, 64):
        for gated in (True, False):
            stages = M.decode_stages(bn, gated)
            held = stages * ((2 if gated else 1) * 64 + bn) * 64 * 2
            assert 8 <= stages <= 16 and held <= 200 << 10, (bn, gated, stages)
            assert stages == 8 or held > M.DECODE_IN_FLIGHT - (((2 if gated else 1) * 64 + bn)
                                                               * 64 * 2)
    assert (M.decode_stages(8, True), M.decode_stages(8, False)) == (8, 15)


def test_schedule_pair_sets_each_gemm():
    """moe(schedule=(gate_up, down)) gives each GEMM its own (the bench's rule variants); one
    schedule is both GEMMs'; none is the decode rule's pair."""
    gate_up, down = decode_schedule(8, split_k=2), decode_schedule(8, stages=15)
    layer = M._layer(5, 128, 128, 16, 4, (gate_up, down))
    assert (layer.schedule, layer.down) == (gate_up, down)
    assert M._layer(5, 128, 128, 16, 4, gate_up).down == gate_up
    assert (M._layer(5, 128, 128, 16, 4, None).schedule, M._layer(5, 128, 128, 16, 4, None).down
            ) == M.decode_schedules(5, 4, 16, 128, 128)


def test_decode_stream_model():
    """decode_stream_us against hand arithmetic: a full wave at HBM's rate, a wave of two SMs
    at their own rate (in-flight bytes per load latency), the waves added."""
    bw, lat = M.DECODE_BYTES_PER_US, M.DECODE_LATENCY_US
    assert M.decode_stream_us(132, 1e6, 136 << 10) == pytest.approx(132e6 / bw)
    assert M.decode_stream_us(2, 1e6, 136 << 10) == pytest.approx(1e6 / ((136 << 10) / lat))
    assert M.decode_stream_us(134, 1e6, 136 << 10) == pytest.approx(
        132e6 / bw + 1e6 / ((136 << 10) / lat))
    # a partial wave of 96 SMs still saturates: the time of its bytes at HBM's rate
    assert M.decode_stream_us(96, 1e6, 136 << 10) == pytest.approx(96e6 / bw)


def test_split_that_does_not_cut_k_evenly_is_refused():
    from argus.errors import LaunchError

    with pytest.raises(LaunchError, match="split_k=3 must cut its K=128"):
        M.Layer(3, 128, 64, 4, 2, decode_schedule(8, split_k=3), decode_schedule(8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_topk_matches_torch(dtype, renormalize):
    T, E, k = 29, 8, 2
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(T, E, generator=g).to(dtype)
    layer = M.Layer(T, 64, 64, E, k, SMALL)
    ids, w = M.route(logits, layer, renormalize=renormalize, interpret=True)
    p = torch.softmax(logits.double(), dim=1)
    tv, ti = p.topk(k, dim=1)
    if renormalize:
        tv = tv / tv.sum(dim=1, keepdim=True)
    assert (ids == ti).all()
    assert (w.double() - tv).abs().max() < 1e-5


def test_grouped_sigmoid_topk_matches_deepseek_v3():
    """DeepSeek-V3's router (E 32 in 4 groups, 2 groups kept, k 4) against its torch form."""
    T, E, k, G, TG, scale = 17, 32, 4, 4, 2, 2.5
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(T, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.1
    layer = M.Layer(T, 64, 64, E, k, SMALL)
    ids, w = M.route(logits, layer, scoring="sigmoid", bias=bias, num_expert_group=G,
                     topk_group=TG, routed_scaling_factor=scale, interpret=True)
    s = torch.sigmoid(logits.double())
    choice = s + bias.double()
    group = choice.view(T, G, E // G).topk(2, dim=2).values.sum(dim=2)
    keep = torch.zeros(T, G).scatter_(1, group.topk(TG, dim=1).indices, 1.0)
    mask = keep.repeat_interleave(E // G, dim=1).bool()
    ti = choice.masked_fill(~mask, float("-inf")).topk(k, dim=1).indices
    tv = s.gather(1, ti)
    tv = tv / tv.sum(dim=1, keepdim=True) * scale
    assert (ids.long().sort(dim=1).values == ti.sort(dim=1).values).all()
    order = ids.long().argsort(dim=1)
    got = w.double().gather(1, order)
    want = tv.gather(1, ti.argsort(dim=1))
    assert (got - want).abs().max() < 1e-5


def test_layer_from_logits_end_to_end():
    T, E, k, H, I = 23, 8, 2, 64, 64
    w13, w2 = _weights(E, H, I, seed=9)
    g = torch.Generator().manual_seed(10)
    x = torch.randn(T, H, generator=g).bfloat16()
    logits = torch.randn(T, E, generator=g)
    out = M._run(x, w13, w2, logits, k, True, "softmax", "silu", None, None, None, 0, 0, 1.0,
                 SMALL, interpret=True)
    p = torch.softmax(logits.double(), dim=1)
    tv, ti = p.topk(k, dim=1)
    exact = M.reference(x, w13, w2, ti, tv / tv.sum(dim=1, keepdim=True))
    assert _rel(out, exact) < 1e-2


def test_decode_layer_from_logits_picks_swap_ab():
    """Five tokens with no schedule given: argus.ops.moe's own choice (the swap-AB decode
    schedules), from the logits, against float64."""
    T, E, k, H, I = 5, 16, 4, 128, 128
    w13, w2 = _weights(E, H, I, seed=13)
    g = torch.Generator().manual_seed(14)
    x = torch.randn(T, H, generator=g).bfloat16()
    logits = torch.randn(T, E, generator=g)
    assert all(s.swap_ab for s in M.decode_schedules(T, k, E, H, I))
    out = M._run(x, w13, w2, logits, k, True, "softmax", "silu", None, None, None, 0, 0, 1.0,
                 None, interpret=True)
    p = torch.softmax(logits.double(), dim=1)
    tv, ti = p.topk(k, dim=1)
    exact = M.reference(x, w13, w2, ti, tv / tv.sum(dim=1, keepdim=True))
    assert _rel(out, exact) < 1e-2


def test_layout_with_chunks_longer_than_one_step():
    """4200 entries: 17 chunks of 256 (R.CHUNK: eight 32-entry steps each, the last chunk
    partial); pos is the stable expert-major order with each segment padded to bm,
    tile_expert labels every m-tile."""
    from argus.kernels import moe_routing as R

    T, E, k, bm = 2100, 8, 2, 64
    ids = _ids_skewed(T, E, k, seed=12)
    N, be = T * k, R.block_experts(E)
    chunk = R.chunk_entries(N)
    assert chunk == 256
    C = -(-N // chunk)
    i32 = dict(dtype=torch.int32)
    counts = torch.full((C, E), -7, **i32)
    base, start = torch.full((C, E), -7, **i32), torch.full((1, E), -7, **i32)
    MT = R.max_padded_rows(N, E, bm) // bm
    te, tiles = torch.full((MT, 1), -7, **i32), torch.full((1, 1), -7, **i32)
    totals = torch.full((1, E), -7, **i32)
    pos = torch.full((N, 1), -7, **i32)
    flat = ids.view(-1)
    steps = torch.full(R.step_base_shape(N, E), -7, **i32)
    R.count_kernel(be).interpret(flat, counts, steps)
    R.scan_kernel(be).interpret(counts, base, totals)
    R.layout_kernel(be, bm).interpret(totals, start, te, tiles)
    R.positions_kernel(be).interpret(flat, flat, base, steps, start, pos)
    n = torch.bincount(flat.long(), minlength=E)
    padded = (n + bm - 1) // bm * bm
    first = torch.cumsum(padded, 0) - padded
    expect = torch.empty(N, dtype=torch.long)
    for e in range(E):
        mine = (flat == e).nonzero().view(-1)
        expect[mine] = first[e] + torch.arange(n[e])
    assert pos.view(-1).long().tolist() == expect.tolist()
    labels = torch.repeat_interleave(torch.arange(E), padded // bm)
    assert te.view(-1)[:labels.numel()].tolist() == labels.tolist()
    assert (te.view(-1)[labels.numel():] == -1).all() and tiles.item() == labels.numel()


@pytest.mark.parametrize("T,E,k,bm", [
    (1, 8, 2, 8),        # one token: one step, two experts
    (16, 128, 8, 8),     # Qwen3's experts at 16 tokens: 128 entries, four EB blocks
    (30, 40, 8, 16),     # 240 entries (8 steps), E no power of two, the last expert unused
])
def test_small_layout_in_one_launch(T, E, k, bm):
    """layout_small (decode: count, scan, layout and positions in one CTA) against torch: the
    stable expert-major order with each segment padded to bm, and every m-tile labelled."""
    from argus.kernels import moe_routing as R

    ids = _ids_skewed(T, E, k, seed=T + E)
    N, be = T * k, R.block_experts(E)
    assert R.small_layout(N, E)
    i32 = dict(dtype=torch.int32)
    MT = R.max_padded_rows(N, E, bm) // bm
    start, tiles = torch.full((1, E), -7, **i32), torch.full((1, 1), -7, **i32)
    te, pos = torch.full((MT, 1), -7, **i32), torch.full((N, 1), -7, **i32)
    flat = ids.view(-1)
    R.layout_small_kernel(be, bm).interpret(flat, flat, start, te, tiles, pos)
    n = torch.bincount(flat.long(), minlength=E)
    padded = (n + bm - 1) // bm * bm
    first = torch.cumsum(padded, 0) - padded
    assert start.view(-1).tolist() == first.tolist()
    expect = torch.empty(N, dtype=torch.long)
    for e in range(E):
        mine = (flat == e).nonzero().view(-1)
        expect[mine] = first[e] + torch.arange(n[e])
    assert pos.view(-1).long().tolist() == expect.tolist()
    labels = torch.repeat_interleave(torch.arange(E), padded // bm)
    assert te.view(-1)[:labels.numel()].tolist() == labels.tolist()
    assert (te.view(-1)[labels.numel():] == -1).all() and tiles.item() == labels.numel()


def test_small_layout_threshold():
    from argus.kernels import moe_routing as R

    assert R.small_layout(256, 128) and not R.small_layout(257, 8)
    assert not R.small_layout(8, 256)    # DeepSeek-V3's 256 experts: the four kernels


def test_chunks_balance_the_scan_against_the_steps():
    """chunk_entries keeps at most MAX_CHUNKS chunks of whole SUB steps, covers every entry
    with the chunk the kernels derive from N and the chunk count, and keeps the critical path
    (count's and positions' steps per chunk plus the scan's chunks) short: 32 steps at 4096
    entries (was 130 with the most chunks allowed)."""
    from argus.kernels import moe_routing as R

    for N in list(range(1, 3000)) + [4096, 8192, 32768, 131072, 262144]:
        chunk = R.chunk_entries(N)
        C = -(-N // chunk)
        device = -(-(-(-N // C)) // R.SUB) * R.SUB   # _chunk(N, C)
        assert chunk % R.SUB == 0 and C <= R.MAX_CHUNKS and device * C >= N, N
        assert device == chunk, N   # the kernels walk the chunks the host sized
    chunk = R.chunk_entries(4096)
    assert 2 * chunk // R.SUB + -(-4096 // chunk) == 32


def test_schedule_choice():
    """Prefill tiles when experts average 128 rows (in CTA pairs from 1024); narrow ones when
    the down projection of the touched experts would leave SMs idle; swap-AB decode up to
    DECODE_MAX_TOKENS tokens, its token tile twice the average rows per touched expert."""
    assert M.schedule_for(16384, 2, 8, 4096) == PREFILL_TMA_CLUSTER
    assert M.schedule_for(16384, 8, 256, 7168) == PREFILL_TMA
    assert M.schedule_for(100, 8, 256, 7168) == SMALL
    assert M.schedule_for(65, 2, 8, 2048) == TINY
    assert M.DECODE_MAX_TOKENS == 64
    for T, k, E, bn in [(1, 2, 8, 8), (16, 2, 8, 8), (16, 8, 256, 8), (64, 2, 8, 32),
                        (64, 8, 128, 8), (40, 4, 4, 64)]:
        s = M.schedule_for(T, k, E, 4096)
        assert s.swap_ab and s.bn == bn and s.pad == bn, (T, k, E, s)


@pytest.mark.parametrize("kwargs,words", [
    (dict(bm=128, consumers=2), "bm=64, consumers=1"),
    (dict(bn=8, cluster_m=2), "cluster_m=1"),
    (dict(bn=12), "multiple of 8"),
    (dict(swap_ab=False, split_k=2), "only with swap_ab"),
])
def test_decode_schedule_refuses_what_it_cannot_run(kwargs, words):
    base = dict(bm=64, bn=8, consumers=1, swap_ab=True)
    with pytest.raises(ValueError, match=words):
        MoeSchedule(**{**base, **kwargs})


@pytest.mark.parametrize("groups", [dict(), dict(num_expert_group=0, topk_group=0),
                                    dict(num_expert_group=5, topk_group=2),
                                    dict(num_expert_group=4, topk_group=1)])
def test_route_sigmoid_without_valid_groups_says_how_to_fix(groups):
    """route() called directly (no moe() check before it) with the grouped sigmoid router and
    no groups, groups not dividing E, or too few experts in the kept groups: a LaunchError
    naming the groups and the fix, not a ZeroDivisionError from E // num_expert_group."""
    from argus.errors import LaunchError

    T, E, k = 3, 32, 10   # 4 groups of 8 keeping 1: 8 < k experts
    layer = M.Layer(T, 64, 64, E, k, SMALL)
    with pytest.raises(LaunchError, match="num_expert_group") as err:
        M.route(torch.randn(T, E), layer, scoring="sigmoid", interpret=True, **groups)
    assert "fix: pass the model's num_expert_group and topk_group" in str(err.value)
    with pytest.raises(LaunchError, match="scoring='sigmod'"):
        M.route(torch.randn(T, E), layer, scoring="sigmod", interpret=True)


@pytest.mark.parametrize("T,E,k,small", [(4, 32, 8, True), (32, 128, 8, True),
                                         (33, 128, 8, False), (4, 256, 8, False),
                                         (500, 8, 2, False)])
def test_routing_workspace_holds_only_its_paths_buffers(T, E, k, small):
    """layout_small (a few entries, at most 128 experts) needs no counts, chunk bases, step
    bases or totals: the workspace holds them only for the four-kernel path, sized from the
    layer's host integers (a captured graph replays on them); the layer still runs."""
    layer = M.Layer(T, 64, 64, E, k, SMALL)
    assert R.small_layout(T * k, E) == small
    ws = M.routing_workspace(layer, torch.device("cpu"))
    chain = {"counts", "chunk_base", "step_base", "totals"}
    assert chain.isdisjoint(ws) if small else chain <= set(ws)
    if not small:
        C, S, _ = R.step_base_shape(T * k, E)
        assert ws["step_base"].shape == (C, S, E) and ws["counts"].shape == (C, E)
    full = M._workspace(layer, torch.device("cpu"), True)
    assert chain.isdisjoint(full) if small else chain <= set(full)
    ids = _ids_skewed(T, E, k, seed=T).reshape(-1).contiguous()
    M.layout(ids, layer, M._launcher(True), ws)
    n = torch.bincount(ids.long(), minlength=E)
    assert ws["tiles"].item() == ((n + SMALL.pad - 1) // SMALL.pad).sum().item()
