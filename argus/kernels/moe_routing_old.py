"""The routing kernels as they were before the h263 rework (kept only for comparison: the
interpreter tests check the new kernels bit for bit against these, and
scripts/gpu_moe_bench.py --routing times old against new; argus.ops.moe does not use them).
Kernel names end in "_old". What follows is the original docstring.

Mixture-of-experts routing on the GPU, as DSL kernels: top-k, per-expert counts, prefix sums
and the permutation into DeepGEMM's "contiguous" layout (each expert's rows padded to the
grouped GEMM's BLOCK_M), then the copy of token rows into that layout and the final combine.

The pipeline, for T tokens, E experts, top-k k, N = T * k (token, slot) entries:

    topk_softmax / topk_sigmoid_grouped   logits [T, E]       -> ids [T, k], weights [T, k]
    count        (grid: chunks of entries) ids [N]            -> counts [C, E]
    scan         (one CTA)                counts               -> chunk_base [C, E], totals [1, E]
    layout       (one CTA)                totals               -> expert_start [1, E] (rows),
                                                                  tile_expert [MT, 1], tiles [1, 1]
    positions    (grid: chunks)           ids, chunk_base, expert_start -> pos [N, 1]
    (count, scan, layout and positions are one launch, layout_small, for a few entries)
    permute      (grid: tokens x columns) x [T, H], pos        -> xp [M_pad, H]
    (the grouped GEMMs of argus/kernels/moe.py run over xp's first tiles[0] * BM rows)
    combine      (grid: tokens x columns) y [M_pad, H], pos, weights -> out [T, H]

The DSL has no atomics, scans or sorting, and needs none here: a count is the column sum of a
one-hot tile (ids[:, None] == arange(E)[None, :]); an exclusive prefix sum over E experts is
the column sum of a strictly-triangular mask times the values; the rank of an entry among the
earlier entries of its chunk with the same expert is the row sum of an [S, S] comparison. Every
step is a fixed-size tile computation or a loop with a carried tile, so nothing waits on the
host and the whole routing can be captured in a CUDA graph.

Invariants (tests/moe/test_moe_interp.py checks each against a torch reference; the permute's
distinct rows and the combine's own-token rows are also proven by the verifier from tags that
state routing's contract, tests/moe/test_moe_verify.py):
  * pos is a bijection from the N entries onto the non-padding rows of the layout; entries of
    expert e land in rows [expert_start[e], expert_start[e] + count[e]), in token order
    (stable: chunk order, then order inside the chunk), so routing is deterministic;
  * expert_start[e] is a multiple of BM, and tile_expert[m] == e exactly for the m-tiles of
    expert e's padded segment; tiles[0] counts the m-tiles of all segments; tile_expert is -1
    after them;
  * padding rows are never written by permute and never read by combine.
"""

import functools
import math

import argus as ag
from argus.dtypes import DType

SUB = 32          # entries per inner step of count / positions: [SUB, BE] one-hot tiles
MAX_CHUNKS = 128  # chunks of entries: the serial loop of `scan` walks this many at most
EB = 32           # experts (m-tiles) per step of `layout`: [EB, BE] tiles
# at most this many entries, and tiles of at most SMALL_EXPERTS experts, take
# layout_small_kernel: one launch for count, scan, layout and positions, walking the entries
# twice in steps of SUB. Its serial [EB, BE] steps grow with the expert tile: at 256
# (DeepSeek-V3) about twice the four kernels' longest chain, for a layer whose GEMMs are long
# anyway; 1024-wide tiles spill
SMALL_ENTRIES = 256
SMALL_EXPERTS = 128
NEG_INF = float("-inf")
# the routers run one warp per token: their k rounds of row reductions (argmax, max, sums;
# ~50 for DeepSeek-V3's grouped top-8) are then warp shuffles, with no block-wide barrier and
# shared-memory exchange each, on the critical path of a decode layer
ROUTER_THREADS = 32


def block_experts(num_experts: int) -> int:
    """The tile width covering E experts: a power of two, at least 32."""
    be = 32
    while be < num_experts:
        be *= 2
    return be


def small_layout(entries: int, num_experts: int) -> bool:
    """Whether layout_small_kernel takes the layout of `entries` (token, slot) entries."""
    return entries <= SMALL_ENTRIES and block_experts(num_experts) <= SMALL_EXPERTS


def chunk_entries(entries: int) -> int:
    """Entries per chunk: a multiple of SUB, at most MAX_CHUNKS chunks, and about sqrt(SUB *
    N / 2) entries, which balances the critical path: count and positions walk a chunk in
    chunk / SUB steps each, the scan walks the chunks one by one (N / chunk serial steps, a
    global load each). At N = 4096 that is 16 chunks of 256 (32 steps) instead of 128 chunks
    of 32 (130). The kernels take the chunk count from their operands' shapes (`_chunk`)."""
    balanced = math.isqrt(SUB * entries // 2)
    per = max(-(-entries // MAX_CHUNKS), balanced)
    return max(SUB, -(-per // SUB) * SUB)


def max_padded_rows(entries: int, num_experts: int, bm: int) -> int:
    """An upper bound on the rows of the padded layout: each non-empty expert (at most
    min(E, entries) of them) wastes fewer than bm rows. A multiple of bm."""
    rows = entries + min(num_experts, entries) * (bm - 1)
    return -(-rows // bm) * bm


# ----------------------------------------------------------------------------- top-k


@functools.lru_cache(maxsize=None)
def topk_softmax_kernel(logit_dtype: DType, top_k: int, renormalize: bool,
                        be: int) -> ag.KernelFunction:
    """ids, weights = top-k of softmax(logits) per token (ties: the lower expert index), the
    weights divided by their sum when `renormalize` (Mixtral, Qwen3-MoE)."""

    def moe_topk_softmax(Logits: ag.Tensor["T", "E", logit_dtype],
                         Ids: ag.Tensor["T", top_k, ag.i32],
                         Weights: ag.Tensor["T", top_k, ag.f32], ROWS: int = 1):
        (pid,) = ag.grid(ag.cdiv(Logits.shape[0], ROWS))
        row0 = pid * ROWS
        cols = ag.arange(be)[None, :]
        x = ag.load(Logits, (row0, 0), (ROWS, be), other=float("-inf")).to(ag.f32)
        e = ag.exp(x - x.max(axis=1))
        # columns past E and winners of earlier rounds are -inf: below every real expert
        # (k <= E leaves a real one in every round), and the identity of the max
        p = ag.where(cols < Logits.shape[1], e / e.sum(axis=1), NEG_INF)
        picked = []
        for j in range(top_k):   # k rounds of argmax, each masking its winner
            best = p.argmax(axis=1)
            picked.append((best, p.max(axis=1)))
            p = ag.where(cols == best, NEG_INF, p)
        _store_topk(Ids, Weights, row0, picked, renormalize, 1.0)

    name = f"moe_topk_softmax_old_{logit_dtype.name}_k{top_k}" + ("_renorm" if renormalize else "")
    return ag.kernel(moe_topk_softmax, threads=ROUTER_THREADS, name=name)


@functools.lru_cache(maxsize=None)
def topk_sigmoid_grouped_kernel(logit_dtype: DType, top_k: int, renormalize: bool, be: int,
                                num_groups: int, topk_groups: int,
                                scale: float) -> ag.KernelFunction:
    """DeepSeek-V3 routing: scores = sigmoid(logits); the choice uses scores + bias (the
    learned correction) restricted to the `topk_groups` groups (of E / num_groups contiguous
    experts) whose two best biased scores sum highest; the weights are the unbiased scores of
    the chosen experts, renormalized when asked, times `scale` (routed_scaling_factor)."""

    def moe_topk_sigmoid_grouped(Logits: ag.Tensor["T", "E", logit_dtype],
                                 Bias: ag.Tensor[1, "E", ag.f32],
                                 Ids: ag.Tensor["T", top_k, ag.i32],
                                 Weights: ag.Tensor["T", top_k, ag.f32], ROWS: int = 1):
        (pid,) = ag.grid(ag.cdiv(Logits.shape[0], ROWS))
        row0 = pid * ROWS
        E = Logits.shape[1]
        cols = ag.arange(be)[None, :]
        valid = cols < E
        score = ag.sigmoid(ag.load(Logits, (row0, 0), (ROWS, be)).to(ag.f32))
        choice = ag.where(valid, score + ag.load(Bias, (0, 0), (1, be)), NEG_INF)
        # integer division: experts [g * E / G, (g + 1) * E / G) form group g
        group = cols * num_groups / E
        # each group's score: the sum of its two best biased scores, spread over its columns
        group_score = ag.where(valid, choice * 0.0, NEG_INF)
        for g in range(num_groups):
            mine = ag.where(group == g, choice, NEG_INF)
            first = mine.argmax(axis=1)
            second = ag.where(cols == first, NEG_INF, mine).max(axis=1)
            group_score = ag.where(group == g, mine.max(axis=1) + second, group_score)
        keep = cols < 0   # all false
        for _ in range(topk_groups):
            best_group = ag.where(cols == group_score.argmax(axis=1), group, 0).sum(axis=1)
            keep = keep | (group == best_group)
            group_score = ag.where(group == best_group, NEG_INF, group_score)
        choice = ag.where(keep, choice, NEG_INF)
        picked = []
        for j in range(top_k):
            best = choice.argmax(axis=1)
            picked.append((best, ag.where(cols == best, score, 0.0).sum(axis=1)))
            choice = ag.where(cols == best, NEG_INF, choice)
        _store_topk(Ids, Weights, row0, picked, renormalize, scale)

    name = (f"moe_topk_sigmoid_old_{logit_dtype.name}_k{top_k}_g{num_groups}_{topk_groups}"
            + ("_renorm" if renormalize else ""))
    return ag.kernel(moe_topk_sigmoid_grouped, threads=ROUTER_THREADS, name=name)


def _store_topk(Ids, Weights, row0, picked, renormalize: bool, scale: float) -> None:
    """Store the k (expert, weight) column tiles of a top-k, the weights renormalized to sum 1
    and multiplied by `scale` as asked."""
    total = picked[0][1]
    for _, w in picked[1:]:
        total = total + w
    for j, (best, w) in enumerate(picked):
        ag.store(Ids, (row0, j), best)
        if renormalize:
            w = w / total
        ag.store(Weights, (row0, j), w * scale if scale != 1.0 else w)


# ----------------------------------------------------------------------------- counts and layout


def _indicator(cond):
    """The i32 tile 1 where `cond` holds, else 0 (a count once summed)."""
    return ag.where(cond, ag.full((1,) * len(cond.shape), 1, ag.i32), 0)


def _chunk(entries, chunks):
    """Entries per chunk from the runtime N and chunk count C (no scalar parameter: launches
    stay cached): N / C rounded up to a multiple of SUB, so C chunks cover all N entries (the
    host picked C = ceil(N / chunk_entries(N)); this may come out smaller than that chunk,
    never too small)."""
    return ag.cdiv(ag.cdiv(entries, chunks), SUB) * SUB


def _one_hot(ids, be: int):
    """[S, BE]: entry i is expert j (ids of -1, past the end, match nothing)."""
    return ids[:, None] == ag.arange(be)[None, :]


def _store_tile_experts(TileExpert, start, tiles, num_experts) -> None:
    """TileExpert[m] = the expert of m-tile m, -1 past the last: how many segments (of experts
    < E, segment e = tiles [start[e], start[e] + tiles[e])) end at or before m."""
    cols = ag.arange(start.shape[1])[None, :]
    end = start + tiles
    for m0 in ag.range(0, TileExpert.shape[0], EB):
        m = ag.arange(EB)[:, None] + m0                                # [EB, 1]
        expert = _indicator((end <= m) & (cols < num_experts)).sum(axis=1)
        ag.store(TileExpert, (m0, 0), ag.where(expert < num_experts, expert, -1))


def _positions_step(Ids, Peers, Pos, at, base, be: int):
    """Pos of the SUB entries from `at`: base (each expert's next free row, [1, be]) plus the
    rank among the step's earlier entries of the same expert; returns base past them. The ids
    are loaded once per use: each vector then takes the layout of its one user."""
    earlier = ag.arange(SUB)[None, :] < ag.arange(SUB)[:, None]   # [i, i']: i' before i
    ids = ag.load(Ids, (at,), (SUB,), other=-1)
    mine = ag.load(Ids, (at,), (SUB,), other=-1)
    peers = ag.load(Peers, (at,), (SUB,), other=-1)
    hot = _one_hot(ids, be)
    rank = _indicator((mine[:, None] == peers[None, :]) & earlier).sum(axis=1)
    ag.store(Pos, (at, 0), ag.where(hot, base, 0).sum(axis=1) + rank)
    return base + _indicator(hot).sum(axis=0)


@functools.lru_cache(maxsize=None)
def count_kernel(be: int) -> ag.KernelFunction:
    """counts[c, e] = entries of chunk c routed to expert e."""

    def moe_count(Ids: ag.Tensor["N", ag.i32], Counts: ag.Tensor["C", "E", ag.i32]):
        (c,) = ag.grid(Counts.shape[0])
        chunk = _chunk(Ids.shape[0], Counts.shape[0])
        counts = ag.zeros((1, be), ag.i32)
        for s in ag.range(0, chunk, SUB):
            ids = ag.load(Ids, (c * chunk + s,), (SUB,), other=-1)
            counts = counts + _indicator(_one_hot(ids, be)).sum(axis=0)
        ag.store(Counts, (c, 0), counts)

    return ag.kernel(moe_count, threads=128, name=f"moe_count_old_{be}")


@functools.lru_cache(maxsize=None)
def scan_kernel(be: int) -> ag.KernelFunction:
    """One CTA: chunk_base[c, e] = entries of expert e in chunks before c, and totals[0, e] =
    all entries of expert e."""

    # The outputs name their dims apart from the counts' ("CB", "ES"): a scan's value at chunk
    # c sums the counts of other chunks, so the verifier's store.coords claim "the value comes
    # from the destination's coordinates" holds along the expert axis (checked) and not
    # along the scan.
    def moe_scan(Counts: ag.Tensor["C", "E", ag.i32], ChunkBase: ag.Tensor["CB", "E", ag.i32],
                 Totals: ag.Tensor[1, "E", ag.i32]):
        (pid,) = ag.grid(1)
        ag.tag_assume(lambda: ag.sym(ChunkBase.shape[0]) == ag.sym(Counts.shape[0]))
        running = ag.zeros((1, be), ag.i32)
        for c in ag.range(ChunkBase.shape[0]):   # a serial scan over the (few) chunks
            counts = ag.load(Counts, (c, 0), (1, be))
            ag.store(ChunkBase, (c, 0), running)
            running = running + counts
        ag.store(Totals, (0, 0), running)

    return ag.kernel(moe_scan, threads=128, name=f"moe_scan_old_{be}")


@functools.lru_cache(maxsize=None)
def layout_kernel(be: int, bm: int) -> ag.KernelFunction:
    """One CTA, from the per-expert totals: the padded segments expert_start[0, e] (rows,
    multiples of bm), tiles[0, 0] = the m-tiles of all segments, and tile_expert[m, 0] = the
    expert of m-tile m (-1 past the last segment)."""

    # TotalsCol is the totals again as one column ([E, 1]): the prefix sum over experts pairs
    # each expert (a column of the tile) with the earlier ones (rows), EB of them per step.
    # ExpertStart names its dim apart ("ES"): its value at e sums other experts' tiles.
    def moe_layout(Totals: ag.Tensor[1, "E", ag.i32], TotalsCol: ag.Tensor["EC", 1, ag.i32],
                   ExpertStart: ag.Tensor[1, "ES", ag.i32], TileExpert: ag.Tensor["MT", 1, ag.i32],
                   Tiles: ag.Tensor[1, 1, ag.i32]):
        (pid,) = ag.grid(1)
        E = Totals.shape[1]
        ag.tag_assume(lambda: ag.tag_all(ag.sym(TotalsCol.shape[0]) == ag.sym(E),
                                         ag.sym(ExpertStart.shape[1]) == ag.sym(E)))
        cols = ag.arange(be)[None, :]
        # m-tiles per expert (integer division; 0 past E)
        tiles = ag.where(cols < E, (ag.load(Totals, (0, 0), (1, be)) + (bm - 1)) / bm, 0)
        # exclusive prefix sum over experts: start[e] = sum of tiles[e'] for e' < e
        start = ag.zeros((1, be), ag.i32)
        for e0 in ag.range(0, E, EB):
            earlier = ag.arange(EB)[:, None] + e0                        # [EB, 1]: e'
            block = ag.load(TotalsCol, (e0, 0), (EB, 1))
            block = ag.where(earlier < E, (block + (bm - 1)) / bm, 0)
            start = start + ag.where(earlier < cols, block, 0).sum(axis=0)
        ag.store(ExpertStart, (0, 0), start * bm)
        ag.store(Tiles, (0, 0), tiles.sum(axis=1))
        _store_tile_experts(TileExpert, start, tiles, E)

    return ag.kernel(moe_layout, threads=128, name=f"moe_layout_old_{be}_{bm}")


@functools.lru_cache(maxsize=None)
def positions_kernel(be: int) -> ag.KernelFunction:
    """pos[i] = the padded-layout row of entry i: its expert's segment start, plus the entries
    of that expert in earlier chunks, plus those earlier in its own chunk."""

    # `Peers` is the same ids again, under its own dim: the rank compares entry i with the
    # other entries i' of its step, a pairwise comparison the verifier's ew.broadcast rule
    # (a row vector combined with a tile describes the tile's own columns) would refuse
    # between two views of one index space.
    def moe_positions(Ids: ag.Tensor["N", ag.i32], Peers: ag.Tensor["NP", ag.i32],
                      ChunkBase: ag.Tensor["C", "E", ag.i32],
                      ExpertStart: ag.Tensor[1, "E", ag.i32], Pos: ag.Tensor["N", 1, ag.i32]):
        (c,) = ag.grid(ChunkBase.shape[0])
        chunk = _chunk(Ids.shape[0], ChunkBase.shape[0])
        base = ag.load(ChunkBase, (c, 0), (1, be)) + ag.load(ExpertStart, (0, 0), (1, be))
        for s in ag.range(0, chunk, SUB):
            base = _positions_step(Ids, Peers, Pos, c * chunk + s, base, be)

    return ag.kernel(moe_positions, threads=128, name=f"moe_positions_old_{be}")
