"""The routing kernels (argus/kernels/moe_routing.py: the grouped router's [G, E/G] tile, the
scan over expert blocks, the layout over m-tile blocks, chunks of at most CHUNK entries) in the
interpreter against torch / pure-Python references of the same outputs
(tests/moe/routing_reference.py: ids and weights with the kernels' tie rule, the lower expert
index wins and a NaN ranks first; expert_start, tile_expert, tiles, pos, totals, tile_rows), at
sizes where the split matters: T no multiple of anything, E 8 .. 256 (and 1024 for the layout),
k 1 .. 8, renormalize on and off, bf16 and f32 logits, logits with many ties (values on a coarse
grid, so equal scores, equal group scores and equal choices occur in most tokens), NaN rows,
several scan steps and layout CTAs, zero-row experts. (The kernels before the h263 rework were
compared with these bit for bit, in the interpreter and on an H100: docs/perf/moe.md.)"""

import pytest
import torch

import argus as ag
from argus.kernels import moe_routing as R
from argus.runtime import nvrtc_available
from tests.moe import routing_reference as REF


def _tied_logits(T, E, seed, levels=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-levels, levels + 1, (T, E), generator=g).float() / 4)


def _same_weights(got, want):
    """The kernels' weights against the reference's: NaN where it is NaN, else equal to a few
    ulps (the reference's softmax sums its row in another order)."""
    assert torch.equal(got.isnan(), want.isnan())
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-7, equal_nan=True)


def _grouped(logits, bias, k, G, TG, renorm, scale):
    T, E = logits.shape
    ids = torch.full((T, k), -7, dtype=torch.int32)
    w = torch.full((T, k), -7.0)
    dt = ag.bf16 if logits.dtype == torch.bfloat16 else ag.f32
    R.topk_sigmoid_grouped_kernel(dt, k, renorm, R.block_experts(E), G, TG, scale).interpret(
        logits.reshape(T * G, E // G), logits, bias.view(G, E // G), ids, w)
    return ids, w


@pytest.mark.parametrize("T,E,k,G,TG,renorm,dtype", [
    (37, 256, 8, 8, 4, True, torch.float32),     # DeepSeek-V3
    (19, 256, 8, 8, 4, False, torch.bfloat16),
    (11, 256, 1, 8, 4, True, torch.float32),
    (23, 64, 2, 4, 2, True, torch.float32),
    (9, 32, 4, 4, 2, False, torch.float32),      # 8 experts a group
])
def test_grouped_sigmoid_router_matches_the_reference(T, E, k, G, TG, renorm, dtype):
    logits = _tied_logits(T, E, seed=T + E).to(dtype)
    g = torch.Generator().manual_seed(E)
    # a bias on the same grid: biased choices tie too
    bias = torch.randint(-2, 3, (E,), generator=g).float() / 8
    ids, w = _grouped(logits, bias, k, G, TG, renorm, 2.5)
    want_ids, want_w = REF.topk_sigmoid_grouped(logits, bias, k, G, TG, renorm, 2.5)
    assert torch.equal(ids, want_ids)
    _same_weights(w, want_w)


def test_grouped_sigmoid_router_nan_ranks_first():
    """A NaN score ranks above every number (torch.topk's rule): its group first, then it."""
    T, E, k, G, TG = 3, 256, 8, 8, 4
    logits = _tied_logits(T, E, seed=1)
    logits[0, 77] = float("nan")
    logits[2, 5] = logits[2, 200] = float("nan")
    bias = torch.zeros(E)
    ids, w = _grouped(logits, bias, k, G, TG, False, 1.0)
    want_ids, want_w = REF.topk_sigmoid_grouped(logits, bias, k, G, TG, False, 1.0)
    assert torch.equal(ids, want_ids)
    assert ids[0, 0] == 77 and ids[2, :2].tolist() == [5, 200]
    _same_weights(w, want_w)


@pytest.mark.parametrize("T,E,k,renorm,dtype", [
    (37, 128, 8, True, torch.float32),       # Qwen3
    (29, 8, 2, True, torch.bfloat16),        # Mixtral
    (13, 8, 1, False, torch.float32),
    (21, 40, 8, False, torch.float32),       # E no power of two: padding columns
    (5, 256, 8, True, torch.bfloat16),
])
def test_softmax_router_matches_the_reference(T, E, k, renorm, dtype):
    logits = _tied_logits(T, E, seed=T * E, levels=3).to(dtype)
    logits[1, E // 2] = float("nan")      # a NaN row: every probability NaN
    dt = ag.bf16 if dtype == torch.bfloat16 else ag.f32
    ids, w = torch.full((T, k), -7, dtype=torch.int32), torch.full((T, k), -7.0)
    R.topk_softmax_kernel(dt, k, renorm, R.block_experts(E)).interpret(logits, ids, w)
    want_ids, want_w = REF.topk_softmax(logits, k, renorm)
    assert torch.equal(ids, want_ids)
    assert ids[1].tolist() == list(range(k)) and w[1].isnan().all()
    _same_weights(w, want_w)


def _chain(flat, E, bm):
    """count, scan, layout, positions on flat ids (the kernels' own chunking)."""
    N, be = flat.numel(), R.block_experts(E)
    C, S, _ = R.step_base_shape(N, E)
    i32 = dict(dtype=torch.int32)
    counts, base = torch.full((C, E), -7, **i32), torch.full((C, E), -7, **i32)
    totals, start = torch.full((1, E), -7, **i32), torch.full((1, E), -7, **i32)
    MT = R.max_padded_rows(N, E, bm) // bm
    te, tiles = torch.full((MT, 1), -7, **i32), torch.full((1, 1), -7, **i32)
    pos = torch.full((N, 1), -7, **i32)
    step = torch.full((C, S, E), -7, **i32)
    R.count_kernel(be).interpret(flat, counts, step)
    R.scan_kernel(be).interpret(counts, base, totals)
    R.layout_kernel(be, bm).interpret(totals, start, te, tiles)
    R.positions_kernel(be).interpret(flat, flat, base, step, start, pos)
    return dict(start=start, te=te, tiles=tiles, pos=pos, totals=totals, C=C, MT=MT)


@pytest.mark.parametrize("T,E,k,bm", [
    (2100, 256, 8, 128),   # 16800 entries: 66 chunks (two scan steps), 270 m-tiles (9 CTAs)
    (1000, 128, 8, 64),    # Qwen3's experts: 32 chunks
    (4101, 8, 2, 128),     # Mixtral: 8202 entries, 33 chunks, one scan CTA of 32 threads
    (129, 8, 1, 64),       # k 1, past layout_small
    (300, 256, 8, 8),      # small segments: many m-tiles
])
def test_layout_chain_matches_the_reference(T, E, k, bm):
    g = torch.Generator().manual_seed(T)
    scores = torch.rand(T, E, generator=g)
    scores[:, 0] += 0.3                 # a popular expert
    scores[:, E - 1] = -1.0             # an expert never chosen
    flat = scores.topk(k, dim=1).indices.int().view(-1).contiguous()
    new = _chain(flat, E, bm)
    assert new["C"] == -(-flat.numel() // R.CHUNK) or flat.numel() < 4096
    if T == 2100:
        assert new["C"] > R.SCAN_ROWS and -(-new["MT"] // R.EB) > 1
    want = REF.layout(flat, E, bm, new["MT"])
    for key in ("start", "te", "tiles", "pos", "totals"):
        assert torch.equal(new[key], want[key]), key


@pytest.mark.parametrize("T,E,k,bm,unused,ctas", [
    (2100, 256, 8, 128, (255,), 13),             # DeepSeek-V3's experts
    (1000, 128, 8, 64, (0, 77, 127), 8),         # zero-row experts first, inside, last
    (4101, 8, 2, 128, (3,), 3),
    (129, 8, 1, 64, (0,), 1),
    (300, 256, 8, 8, (1, 2, 3, 200, 255), 17),   # m-tiles of 8 rows
    (777, 64, 4, 16, tuple(range(0, 64, 5)), 8),
])
def test_layout_tile_rows_match_the_reference(T, E, k, bm, unused, ctas):
    """layout_kernel(tile_rows=True) (the warp per 32 m-tiles) writes expert_start,
    tile_expert, tiles and TileRows as the counts imply; up to 17 layout CTAs, zero-row
    experts (no m-tile) and T no multiple of anything."""
    g = torch.Generator().manual_seed(T + bm)
    scores = torch.rand(T, E, generator=g)
    scores[:, 0 if 0 not in unused else E // 2] += 0.3
    scores[:, list(unused)] = -1.0
    flat = scores.topk(k, dim=1).indices.int().view(-1).contiguous()
    N, be, i32 = flat.numel(), R.block_experts(E), dict(dtype=torch.int32)
    MT = R.max_padded_rows(N, E, bm) // bm
    want = REF.layout(flat, E, bm, MT)
    assert all(want["totals"][0, e] == 0 for e in unused)
    start, tiles = torch.full((1, E), -7, **i32), torch.full((1, 1), -7, **i32)
    te, rows = torch.full((MT, 1), -7, **i32), torch.full((MT, 1), -7, **i32)
    R.layout_kernel(be, bm, True).interpret(want["totals"].clone(), start, te, tiles, rows)
    assert -(-MT // R.EB) == ctas               # layout CTAs (a warp per EB m-tiles)
    for key, got in (("start", start), ("te", te), ("tiles", tiles), ("rows", rows)):
        assert torch.equal(got, want[key]), key


@pytest.mark.parametrize("T,E,k,bm,unused", [
    (13, 8, 2, 16, (5,)),                   # Mixtral decode
    (32, 128, 8, 8, (0, 64, 127)),          # 256 entries: the largest layout_small takes
    (7, 32, 4, 64, (1, 30, 31)),
    (1, 256, 8, 128, ()),                   # DeepSeek-V3 decode: block_experts 256
])
def test_small_layout_tile_rows_match_the_reference(T, E, k, bm, unused):
    """layout_small_kernel(tile_rows=True) (decode: count, scan, layout and positions in one
    CTA) writes the layout the ids imply, TileRows included."""
    g = torch.Generator().manual_seed(T * E)
    scores = torch.rand(T, E, generator=g)
    if unused:
        scores[:, list(unused)] = -1.0
    flat = scores.topk(k, dim=1).indices.int().view(-1).contiguous()
    N, be, i32 = flat.numel(), R.block_experts(E), dict(dtype=torch.int32)
    assert R.small_layout(N, E) or be > R.SMALL_EXPERTS
    MT = R.max_padded_rows(N, E, bm) // bm
    want = REF.layout(flat, E, bm, MT)
    new = dict(start=torch.full((1, E), -7, **i32), te=torch.full((MT, 1), -7, **i32),
               tiles=torch.full((1, 1), -7, **i32), pos=torch.full((N, 1), -7, **i32),
               rows=torch.full((MT, 1), -7, **i32))
    R.layout_small_kernel(be, bm, True).interpret(flat, flat, new["start"], new["te"],
                                                  new["tiles"], new["pos"], new["rows"])
    for key in ("start", "te", "tiles", "pos", "rows"):
        assert torch.equal(new[key], want[key]), key


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("build", [
    lambda: R.scan_kernel(256), lambda: R.scan_kernel(128), lambda: R.scan_kernel(32),
    lambda: R.layout_kernel(256, 128), lambda: R.layout_kernel(32, 64),
    lambda: R.layout_kernel(256, 128, True), lambda: R.layout_kernel(32, 64, True),
    lambda: R.layout_kernel(512, 128, True), lambda: R.layout_kernel(1024, 128, True),
    lambda: R.layout_kernel(1024, 128),
    lambda: R.layout_small_kernel(128, 8, True), lambda: R.layout_small_kernel(32, 16, True),
    lambda: R.count_kernel(256), lambda: R.positions_kernel(256),
    lambda: R.topk_sigmoid_grouped_kernel(ag.bf16, 8, True, 256, 8, 4, 2.5),
    lambda: R.topk_softmax_kernel(ag.bf16, 8, True, 128),
], ids=["scan256", "scan128", "scan32", "layout256", "layout32", "layout_rows256",
        "layout_rows32", "layout_rows512", "layout_rows1024", "layout1024",
        "layout_small_rows128", "layout_small_rows32", "count256", "positions256",
        "sigmoid_bf16", "softmax_bf16_E128"])
def test_reworked_routing_builds_for_sm90a_without_spills(build):
    """NVRTC to sm_90a: the scan's [64, 128] register tile (a column a thread) and the rest
    build without spills; the routers stay free of block barriers."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(build()))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert binary.arch == "sm_90a" and not res.spills, res.summary()
    if "topk" in source.name or "scan" in source.name:
        assert res.barriers == 0, res.summary()


@pytest.mark.parametrize("E,bm", [(600, 16), (1024, 64), (300, 8)])
def test_layout_tile_rows_past_256_experts(E, bm):
    """Past 256 experts the tile_rows layout takes fewer m-tiles a CTA (layout_tiles: 8 at
    1024, 16 at 512, so the rows variant builds without spills); its outputs stay those the
    counts imply, over many CTAs."""
    T, k = 300, 8
    g = torch.Generator().manual_seed(E)
    scores = torch.rand(T, E, generator=g)
    scores[:, :E // 3] = -1.0                 # a third of the experts never chosen
    flat = scores.topk(k, dim=1).indices.int().view(-1)
    n = torch.bincount(flat.long(), minlength=E)
    N, be, i32 = flat.numel(), R.block_experts(E), dict(dtype=torch.int32)
    eb = R.layout_tiles(be, True)
    assert eb == R.EB * 256 // be and R.layout_tiles(be, False) == R.EB
    MT = R.max_padded_rows(N, E, bm) // bm
    start, tiles = torch.full((1, E), -7, **i32), torch.full((1, 1), -7, **i32)
    te, rows = torch.full((MT, 1), -7, **i32), torch.full((MT, 1), -7, **i32)
    R.layout_kernel(be, bm, True).interpret(n.int().view(1, E), start, te, tiles, rows)
    assert -(-MT // eb) > 1
    padded = (n + bm - 1) // bm * bm
    assert start.view(-1).tolist() == (torch.cumsum(padded, 0) - padded).tolist()
    assert tiles.item() == padded.sum().item() // bm
    owner = [e for e in range(E) for _ in range(padded[e].item() // bm)]
    assert te.view(-1).tolist() == owner + [-1] * (MT - len(owner))
    expect = REF.routed_rows(n.tolist(), bm)
    assert rows.view(-1).tolist() == expect + [0] * (MT - len(expect))


@pytest.mark.parametrize("short", ["steps", "chunks"])
def test_count_and_positions_refuse_chunks_that_miss_entries(short):
    """count and positions state (ag.require: checked before every launch, a premise of the
    verifier) that their chunks cover the ids: C * S * SUB >= N, step_base a row per chunk.
    One step or one chunk short would drop the last entries silently."""
    from argus.errors import LaunchError

    N, E = 1000, 8
    ids = torch.randint(0, E, (N,), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    C, S, _ = R.step_base_shape(N, E)
    assert C * S * R.SUB >= N
    C2, S2 = (C, S - 1) if short == "steps" else (C - 1, S)
    assert C2 * S2 * R.SUB < N
    i32 = dict(dtype=torch.int32)
    be = R.block_experts(E)
    with pytest.raises(LaunchError, match="C \\* S \\* 32 >= N"):
        R.count_kernel(be).interpret(ids, torch.empty(C2, E, **i32),
                                     torch.empty(C2, S2, E, **i32))
    with pytest.raises(LaunchError, match="C \\* S \\* 32 >= N"):
        R.positions_kernel(be).interpret(ids, ids, torch.zeros(C2, E, **i32),
                                         torch.zeros(C2, S2, E, **i32),
                                         torch.zeros(1, E, **i32), torch.empty(N, 1, **i32))
    with pytest.raises(LaunchError, match="a row per chunk"):
        R.positions_kernel(be).interpret(ids, ids, torch.zeros(C, E, **i32),
                                         torch.zeros(C + 1, S, E, **i32),
                                         torch.zeros(1, E, **i32), torch.empty(N, 1, **i32))
