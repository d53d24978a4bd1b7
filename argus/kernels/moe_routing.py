"""Mixture-of-experts routing on the GPU, as DSL kernels: top-k, per-expert counts, prefix sums
and the permutation into DeepGEMM's "contiguous" layout (each expert's rows padded to the
grouped GEMM's BLOCK_M), then the copy of token rows into that layout and the final combine.

The pipeline, for T tokens, E experts, top-k k, N = T * k (token, slot) entries:

    topk_softmax / topk_sigmoid_grouped   logits [T, E]       -> ids [T, k], weights [T, k]
    count        (grid: chunks of entries) ids [N]            -> counts [C, E], step_base [C, S, E]
    scan         (a CTA per 128 experts)  counts               -> chunk_base [C, E], totals [1, E]
    layout       (a CTA per 32 m-tiles)   totals               -> expert_start [1, E] (rows),
                                                                  tile_expert [MT, 1], tiles [1, 1]
                                          (tile_rows=True: tile_rows [MT, 1] too, each m-tile's
                                          routed rows, for MoeSchedule.skip_pad_halves)
    positions    (a thread an entry)      ids, chunk_base, step_base, expert_start -> pos [N, 1]
    (count, scan, layout and positions are one launch, layout_small, for a few entries)
    permute      (grid: tokens x columns) x [T, H], pos        -> xp [M_pad, H]
    (the grouped GEMMs of argus/kernels/moe.py run over xp's first tiles[0] * BM rows)
    combine      (grid: tokens x columns) y [M_pad, H], pos, weights -> out [T, H]

No atomics or sorting (routing stays deterministic); the scan over chunks is ag.scan down a
column in registers. A count is the column sum of a one-hot tile (ids[:, None] ==
arange(E)[None, :]); an exclusive prefix sum over E experts is the column sum of a
strictly-triangular mask times the values (layout_small; layout_kernel scans the [1, BE] row);
the rank of an entry among the earlier entries of its 32-entry step with the same expert is the
row sum of a row of SUB comparisons (the chunk's earlier steps: count's step_base). Every
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
MAX_CHUNKS = 1024  # chunks of entries: `scan` walks them SCAN_ROWS at a time
CHUNK = 256       # entries a chunk at most (while under MAX_CHUNKS chunks): CTAs for every SM
SCAN_ROWS = 64    # chunks per step of `scan`: a [SCAN_ROWS, 128] tile, a column a thread
EB = 32           # experts (m-tiles) per step of `layout`: [EB, BE] tiles
POSITIONS = 128   # entries per CTA of `positions`, a thread each
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
    """Entries per chunk: a multiple of SUB, at most MAX_CHUNKS chunks, about sqrt(SUB * N / 2)
    entries but at most CHUNK. sqrt(SUB * N / 2) balanced the critical path when the scan
    walked the chunks one by one (N = 4096: 16 chunks of 256, 32 steps instead of 130); the
    scan now walks SCAN_ROWS chunks a step, so past 4096 entries the chunks stop growing
    and their number grows instead: count and positions keep eight steps a chunk and get a
    CTA for every SM (DeepSeek-V3 at T = 16384: 512 chunks of 256 instead of 90 of 1472,
    whose 46 serial steps on 90 SMs were most of the routing's time). The kernels take the
    chunk from their operands' shapes (no scalar parameter: launches stay cached): the chunk
    count from counts' rows, its SUB-entry steps from step_base's (`step_base_shape`)."""
    balanced = min(CHUNK, math.isqrt(SUB * entries // 2))
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
        # the expert index in f32 (exact): the min over the hits starts from +inf, the min's
        # identity (the verifier's fill.identity)
        expert = cols.to(ag.f32)
        picked = []
        for j in range(top_k):   # k rounds, each masking its winner
            # the winner: the lowest expert holding the max (the lowest NaN when there is
            # one), as the argmax before it, from a max and a min (one shuffle and one
            # max / min a level, not the argmax's two shuffles and NaN-aware compare); its
            # weight is the max itself
            top = p.max(axis=1)
            hit = ag.where(top != top, p != p, p == top)
            lowest = ag.where(hit, expert, float("inf")).min(axis=1)
            picked.append((lowest.to(ag.i32), top))
            p = ag.where(expert == lowest, NEG_INF, p)
        _store_topk(Ids, Weights, row0, picked, renormalize, 1.0)

    name = f"moe_topk_softmax_{logit_dtype.name}_k{top_k}" + ("_renorm" if renormalize else "")
    return ag.kernel(moe_topk_softmax, threads=ROUTER_THREADS, name=name)


def block_groups(num_experts: int, num_groups: int) -> tuple[int, int]:
    """The [GB, BG] tile of a grouped router: GB >= num_groups rows (a power of two), one per
    expert group, and BG >= E / num_groups columns (a power of two, at least 2), one per
    expert of a group."""
    gb = 1
    while gb < num_groups:
        gb *= 2
    bg, per = 2, -(-num_experts // num_groups)
    while bg < per:
        bg *= 2
    return gb, bg


@functools.lru_cache(maxsize=None)
def topk_sigmoid_grouped_kernel(logit_dtype: DType, top_k: int, renormalize: bool, be: int,
                                num_groups: int, topk_groups: int,
                                scale: float) -> ag.KernelFunction:
    """DeepSeek-V3 routing: scores = sigmoid(logits); the choice uses scores + bias (the
    learned correction) restricted to the `topk_groups` groups (of E / num_groups contiguous
    experts) whose two best biased scores sum highest; the weights are the unbiased scores of
    the chosen experts, renormalized when asked, times `scale` (routed_scaling_factor).

    One warp a token, its logits as a [GB, BG] tile (a row per group: the host passes them as
    [T * G, E / G], and as [T, E] for the winners' weights, the bias as [G, E / G]);
    lane l holds expert l of every group, so a group's statistics are row reductions (five
    shuffle levels for all groups at once), the choice of groups is a column reduction
    inside each thread, which takes the chosen groups' rows out (a register a lane each), and
    each of the k rounds is a max and a min over those (inside the thread, then across lanes).
    Ties as torch.topk and the one-row kernel before it: the lower expert index; a NaN ranks
    above every number."""
    gb, bg = block_groups(be, num_groups)

    def moe_topk_sigmoid_grouped(Logits: ag.Tensor["TG", "EG", logit_dtype],
                                 Flat: ag.Tensor["T", "E", logit_dtype],
                                 Bias: ag.Tensor["G", "EG", ag.f32],
                                 Ids: ag.Tensor["T", top_k, ag.i32],
                                 Weights: ag.Tensor["T", top_k, ag.f32]):
        (t,) = ag.grid(Ids.shape[0])
        per = Logits.shape[1]                            # experts a group: E / G
        rows = ag.arange(gb)[:, None]                    # [GB, 1]: group g
        cols = ag.arange(bg)[None, :]                    # [1, BG]: expert of the group
        valid = (rows < num_groups) & (cols < per)
        score = ag.sigmoid(ag.load(Logits, (t * num_groups, 0), (gb, bg)).to(ag.f32))
        choice = ag.where(valid, score + ag.load(Bias, (0, 0), (gb, bg)), NEG_INF)
        # the expert index in f32 (exact below 2^24): its min over the hits starts from +inf,
        # the min's identity (what the verifier's fill.identity asks of masked elements); its
        # own index tiles, anchored to the scores' layout by a where (see `group`)
        expert = (ag.arange(gb)[:, None] * per + ag.arange(bg)[None, :]).to(ag.f32)
        expert = ag.where(score == score, expert, expert)
        # each group's score: the sum of its two best biased scores (the best twice when it
        # occurs twice; NaN when the group holds one)
        best = choice.max(axis=1)                                       # [GB, 1]
        twice = _indicator(choice == best).sum(axis=1) > 1
        second = ag.where(twice, best, ag.where(choice == best, NEG_INF, choice).max(axis=1))
        group_score = best + second
        # the group index as a [GB, 1] tile in the row statistics' layout (a where on one of
        # them anchors it: an index tile alone would take a layout of its own, and each use
        # beside the statistics would cost a shared-memory conversion)
        group = ag.where(best == best, ag.arange(gb)[:, None], ag.arange(gb)[:, None])
        # the best groups (the lower group on ties), each group's row of choices and expert
        # indices taken out as a [1, BG] tile (one register a lane): the k rounds then work on
        # topk_groups registers a lane instead of GB
        kept, ids = [], []
        for _ in range(topk_groups):
            chosen = group == group_score.argmax(axis=0)                 # [GB, 1]
            group_score = ag.where(chosen, NEG_INF, group_score)
            kept.append(ag.where(chosen, choice, NEG_INF).max(axis=0))   # [1, BG]
            ids.append(ag.where(chosen, expert, 0.0).sum(axis=0))        # (one term: exact)
        picked = []
        for j in range(top_k):
            top = kept[0]
            for row in kept[1:]:
                top = ag.maximum(top, row)
            top = top.max(axis=1)                                        # [1, 1]
            # the lowest expert holding the max (the lowest NaN when there is one)
            lowest = None
            for row, index in zip(kept, ids):
                hit = ag.where(top != top, row != row, row == top)
                mine = ag.where(hit, index, float("inf"))
                lowest = mine if lowest is None else ag.minimum(lowest, mine)
            lowest = lowest.min(axis=1)
            best = lowest.to(ag.i32)
            # its weight: the unbiased score, recomputed from its logit (the same sigmoid of
            # the same value; a gather from L1 instead of two more reductions a round)
            at = ag.gather(Flat, (t, best))
            picked.append((best, ag.sigmoid(at.to(ag.f32))))
            kept = [ag.where(index == lowest, NEG_INF, row) for row, index in zip(kept, ids)]
        _store_topk(Ids, Weights, t, picked, renormalize, scale)

    name = (f"moe_topk_sigmoid_{logit_dtype.name}_k{top_k}_g{num_groups}_{topk_groups}"
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


def _one_hot(ids, be: int):
    """[S, BE]: entry i is expert j (ids of -1, past the end, match nothing)."""
    return ids[:, None] == ag.arange(be)[None, :]


def _store_tile_block(TileExpert, m0, start, tiles, num_experts, rows=None,
                      eb: int = EB) -> None:
    """TileExpert[m] for the eb m-tiles from m0: the expert of m-tile m, -1 past the last: how
    many segments (of experts < E, segment e = tiles [start[e], start[e] + tiles[e])) end at
    or before m. rows = (TileRows, counts, bm): TileRows[m] = the routed (non-padding) rows of
    m-tile m as well, 1..bm inside a segment (its last m-tile: count - (tiles - 1) bm; the
    others bm), 0 past the last (`tile_rows`: what lets the grouped GEMMs skip a warpgroup's
    all-padding rows, MoeSchedule.skip_pad_halves)."""
    cols = ag.arange(start.shape[1])[None, :]
    m = ag.arange(eb)[:, None] + m0                                    # [eb, 1]
    end = start + tiles
    expert = _indicator((end <= m) & (cols < num_experts)).sum(axis=1)
    ag.store(TileExpert, (m0, 0), ag.where(expert < num_experts, expert, -1))
    if rows is not None:
        TileRows, counts, bm = rows
        # the routed rows of segment e past m-tile m's first row: start[e] bm + count[e]
        # (the segment's first padding row) - m bm, at most bm; only m's own segment
        # (start[e] <= m < end[e], so it is >= 1 there) adds to the row sum
        left = ag.minimum((start - m) * bm + counts, bm)
        mine = (start <= m) & (m < end) & (cols < num_experts)
        ag.store(TileRows, (m0, 0), ag.where(mine, left, 0).sum(axis=1))


def _store_tile_experts(TileExpert, start, tiles, num_experts, rows=None) -> None:
    """TileExpert[m] (and TileRows[m], rows as _store_tile_block's) for every m-tile, EB a
    step (one CTA: layout_small)."""
    for m0 in ag.range(0, TileExpert.shape[0], EB):
        _store_tile_block(TileExpert, m0, start, tiles, num_experts, rows)


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
    """counts[c, e] = entries of chunk c routed to expert e, and step_base[c, q, e] = entries of
    expert e in steps 0..q-1 of chunk c (SUB entries a step: what positions adds to the
    chunk's base, so that it needs no walk of its own). The chunk is step_base.shape[1] steps:
    the host sizes it so (chunk_entries(N) / SUB)."""

    def moe_count(Ids: ag.Tensor["N", ag.i32], Counts: ag.Tensor["C", "E", ag.i32],
                  StepBase: ag.Tensor["C", "S", "E", ag.i32]):
        (c,) = ag.grid(Counts.shape[0])
        steps = StepBase.shape[1]
        _require_chunks_cover(Ids, Counts, StepBase)
        counts = ag.zeros((1, be), ag.i32)
        for q in ag.range(steps):
            ag.store(StepBase, (c, q, 0), counts)
            ids = ag.load(Ids, ((c * steps + q) * SUB,), (SUB,), other=-1)
            counts = counts + _indicator(_one_hot(ids, be)).sum(axis=0)
        ag.store(Counts, (c, 0), counts)

    return ag.kernel(moe_count, threads=128, name=f"moe_count_{be}")


def _require_chunks_cover(Ids, Counts, StepBase) -> None:
    """The launch precondition of count and positions (checked before every launch, a premise
    of the verifier): the chunks (Counts' rows, StepBase's too) of StepBase.shape[1] steps of
    SUB entries cover the N entries; a smaller shape would drop entries past them silently
    (count: never counted; positions: chunk bases read past the last chunk)."""
    C, CS, S, N = (ag.sym(d) for d in (Counts.shape[0], StepBase.shape[0],
                                       StepBase.shape[1], Ids.shape[0]))
    ag.require(CS == C, "step_base [C, S, E] must have a row per chunk, as the chunk "
               "counts / bases [C, E] (size both from step_base_shape(N, E))")
    ag.require(C * S * SUB >= N,
               f"the chunks must cover the N ids: C chunks of S steps of {SUB} entries "
               f"(step_base [C, S, E]) with C * S * {SUB} >= N, else the entries past them are "
               f"dropped (size step_base from step_base_shape(N, E))")


def step_base_shape(entries: int, num_experts: int) -> tuple[int, int, int]:
    """count's step_base: [chunks, steps a chunk, E]."""
    chunk = chunk_entries(entries)
    return -(-entries // chunk), chunk // SUB, num_experts


def scan_experts(be: int) -> int:
    """Experts per CTA of `scan` (and its threads): a column a thread, at most 128."""
    return min(be, 128)


@functools.lru_cache(maxsize=None)
def scan_kernel(be: int) -> ag.KernelFunction:
    """chunk_base[c, e] = entries of expert e in chunks before c, and totals[0, e] = all
    entries of expert e. A CTA per block of scan_experts(be) experts, a thread per expert: each
    step loads SCAN_ROWS chunks' counts ([SCAN_ROWS, EBS], a column a thread) and scans them
    down the column in registers (ag.scan along axis 0: no shuffle, no barrier), so the
    serial chain is C / SCAN_ROWS steps (8 at DeepSeek-V3's T = 16384), not C."""
    ebs = scan_experts(be)

    # The outputs name their dims apart from the counts' ("CB", "ES"): a scan's value at chunk
    # c sums the counts of other chunks, so the verifier's store.coords claim "the value comes
    # from the destination's coordinates" holds along the expert axis (checked) and not
    # along the scan.
    def moe_scan(Counts: ag.Tensor["C", "E", ag.i32], ChunkBase: ag.Tensor["CB", "E", ag.i32],
                 Totals: ag.Tensor[1, "E", ag.i32]):
        (block,) = ag.grid(ag.cdiv(Counts.shape[1], ebs))
        ag.tag_assume(lambda: ag.sym(ChunkBase.shape[0]) == ag.sym(Counts.shape[0]))
        e0 = block * ebs
        running = ag.zeros((1, ebs), ag.i32)
        for c0 in ag.range(0, ChunkBase.shape[0], SCAN_ROWS):
            counts = ag.load(Counts, (c0, e0), (SCAN_ROWS, ebs))
            before, running = ag.scan(counts, "sum", 0, running, exclusive=True)
            ag.store(ChunkBase, (c0, e0), before)
        ag.store(Totals, (0, e0), running)

    return ag.kernel(moe_scan, threads=ebs, name=f"moe_scan_{be}")


def layout_tiles(be: int, tile_rows: bool) -> int:
    """M-tiles per CTA (a warp) of `layout`: EB, and with tile_rows past 256 experts fewer,
    so that its [eb, BE] step stays at 256 values a thread (the rows variant holds more of
    them live: at [32, 512] it spilled 32 B, at [32, 1024] 176 B in NVRTC)."""
    return EB if not tile_rows or be <= 256 else max(1, EB * 256 // be)


@functools.lru_cache(maxsize=None)
def layout_kernel(be: int, bm: int, tile_rows: bool = False) -> ag.KernelFunction:
    """From the per-expert totals: the padded segments expert_start[0, e] (rows, multiples of
    bm), tiles[0, 0] = the m-tiles of all segments, and tile_expert[m, 0] = the expert of
    m-tile m (-1 past the last segment). A warp per EB m-tiles: each works out the segments
    (the prefix over experts is one ag.scan along the [1, BE] row: registers, then five
    shuffle levels) and labels its own m-tiles (one [EB, BE] step), so nothing is serial;
    before, one CTA took E / EB prefix steps and MT / EB labelling steps (48 at DeepSeek-V3's
    T = 16384). CTA 0 stores expert_start and tiles (each CTA stores them at its own row, past
    the end but for CTA 0's, so the verifier sees one writer an element without a branch).
    tile_rows: one more output after tiles, TileRows [MT, 1], the routed rows of each m-tile
    (_store_tile_block, in the same [EB, BE] step as the labels: each CTA its own EB m-tiles;
    0 past the last), for the grouped GEMMs' MoeSchedule.skip_pad_halves; past 256 experts
    a CTA then takes fewer m-tiles (layout_tiles: no spills up to 1024 experts)."""

    eb = layout_tiles(be, tile_rows)

    # ExpertStart names its dim apart ("ES"): its value at e sums other experts' tiles.
    def layout(Totals, ExpertStart, TileExpert, Tiles, TileRows):
        (block,) = ag.grid(ag.cdiv(TileExpert.shape[0], eb))
        E = Totals.shape[1]
        ag.tag_assume(lambda: ag.sym(ExpertStart.shape[1]) == ag.sym(E))
        cols = ag.arange(be)[None, :]
        # m-tiles per expert (integer division; 0 past E)
        tiles = ag.where(cols < E, (ag.load(Totals, (0, 0), (1, be)) + (bm - 1)) / bm, 0)
        # exclusive prefix sum over experts: start[e] = sum of tiles[e'] for e' < e
        start, total = ag.scan(tiles, "sum", 1, exclusive=True)
        # CTA 0's row: the other CTAs' rows lie past these one-row tensors and are dropped
        ag.store(ExpertStart, (block, 0), start * bm)
        ag.store(Tiles, (block, 0), total)
        rows = None if TileRows is None else \
            (TileRows, ag.where(cols < E, ag.load(Totals, (0, 0), (1, be)), 0), bm)
        _store_tile_block(TileExpert, block * eb, start, tiles, E, rows, eb)

    if tile_rows:
        def moe_layout_rows(Totals: ag.Tensor[1, "E", ag.i32],
                            ExpertStart: ag.Tensor[1, "ES", ag.i32],
                            TileExpert: ag.Tensor["MT", 1, ag.i32],
                            Tiles: ag.Tensor[1, 1, ag.i32],
                            TileRows: ag.Tensor["MT", 1, ag.i32]):
            layout(Totals, ExpertStart, TileExpert, Tiles, TileRows)

        return ag.kernel(moe_layout_rows, threads=32, name=f"moe_layout_rows_{be}_{bm}")

    def moe_layout(Totals: ag.Tensor[1, "E", ag.i32], ExpertStart: ag.Tensor[1, "ES", ag.i32],
                   TileExpert: ag.Tensor["MT", 1, ag.i32], Tiles: ag.Tensor[1, 1, ag.i32]):
        layout(Totals, ExpertStart, TileExpert, Tiles, None)

    return ag.kernel(moe_layout, threads=32, name=f"moe_layout_{be}_{bm}")


@functools.lru_cache(maxsize=None)
def positions_kernel(be: int) -> ag.KernelFunction:
    """pos[i] = the padded-layout row of entry i: its expert's segment start, plus the entries
    of that expert in earlier chunks (chunk_base), in earlier steps of its chunk (step_base),
    and earlier in its own SUB-entry step (its rank). A thread an entry, POSITIONS entries a
    CTA, nothing serial: the three bases are gathered at the entry's expert, and the rank is a
    row of SUB comparisons inside the thread (the step's ids gathered into each thread's row:
    layout "rows", no shuffle, no barrier). Before, a CTA walked its chunk in [SUB, BE] steps
    whose base lookup was a row sum across the CTA (46 steps at DeepSeek-V3's T = 16384)."""

    # `Peers` is the same ids again, under its own dim: the rank compares entry i with the
    # other entries i' of its step, a pairwise comparison the verifier's ew.broadcast rule
    # (a row vector combined with a tile describes the tile's own columns) would refuse
    # between two views of one index space.
    def moe_positions(Ids: ag.Tensor["N", ag.i32], Peers: ag.Tensor["NP", ag.i32],
                      ChunkBase: ag.Tensor["C", "E", ag.i32],
                      StepBase: ag.Tensor["CS", "S", "E", ag.i32],
                      ExpertStart: ag.Tensor[1, "E", ag.i32], Pos: ag.Tensor["N", 1, ag.i32]):
        (pid,) = ag.grid(ag.cdiv(Ids.shape[0], POSITIONS))
        steps = StepBase.shape[1]                                        # a chunk's
        _require_chunks_cover(Ids, ChunkBase, StepBase)
        entry = ag.arange(POSITIONS)[:, None] + pid * POSITIONS          # [P, 1]: i
        mine = ag.gather(Ids, (entry,), other=-1)                        # [P, 1]: its expert
        step = entry / SUB
        # the step's ids in each thread's row: i' = step * SUB + j, j < SUB
        peers = ag.gather(Peers, (step * SUB + ag.arange(SUB)[None, :],), other=-1)
        earlier = step * SUB + ag.arange(SUB)[None, :] < entry           # [P, SUB]: i' < i
        rank = _indicator((peers == mine) & earlier).sum(axis=1)
        base = (ag.gather(ExpertStart, (0, mine)) + ag.gather(ChunkBase, (step / steps, mine))
                + ag.gather(StepBase, (step / steps, step % steps, mine)))
        ag.store(Pos, (pid * POSITIONS, 0), base + rank)

    return ag.kernel(moe_positions, threads=POSITIONS, name=f"moe_positions_{be}")


@functools.lru_cache(maxsize=None)
def layout_small_kernel(be: int, bm: int, tile_rows: bool = False) -> ag.KernelFunction:
    """One CTA, for a few entries (decode: at most SMALL_ENTRIES): count, scan, layout and
    positions above in one launch, since a decode layer is bound by its launches, not by
    these few steps. The counts are one chunk's, so the scan has nothing to add; the prefix
    over experts takes each block of EB experts' tile counts as a column by summing the
    diagonal of an [EB, BE] tile (layout_kernel loads that column from memory instead).
    Outputs as the four kernels': expert_start [1, E], tile_expert [MT, 1], tiles [1, 1],
    pos [N, 1]; tile_rows: then TileRows [MT, 1] (layout_kernel's)."""

    def layout(Ids, Peers, ExpertStart, TileExpert, Tiles, Pos, TileRows):
        (pid,) = ag.grid(1)
        E, N = ExpertStart.shape[1], Ids.shape[0]
        cols = ag.arange(be)[None, :]
        counts = ag.zeros((1, be), ag.i32)
        for s in ag.range(0, N, SUB):
            ids = ag.load(Ids, (s,), (SUB,), other=-1)
            counts = counts + _indicator(_one_hot(ids, be)).sum(axis=0)
        # m-tiles per expert (integer division; 0 past E)
        tiles = ag.where(cols < E, (counts + (bm - 1)) / bm, 0)
        # exclusive prefix sum over experts: start[e] = sum of tiles[e'] for e' < e
        start = ag.zeros((1, be), ag.i32)
        for e0 in ag.range(0, E, EB):
            earlier = ag.arange(EB)[:, None] + e0                        # [EB, 1]: e'
            block = ag.where(earlier == cols, tiles, 0).sum(axis=1)      # [EB, 1]: tiles[e']
            start = start + ag.where(earlier < cols, block, 0).sum(axis=0)
        ag.store(ExpertStart, (0, 0), start * bm)
        ag.store(Tiles, (0, 0), tiles.sum(axis=1))
        _store_tile_experts(TileExpert, start, tiles, E,
                            None if TileRows is None else (TileRows, counts, bm))
        # pos: segment start + earlier entries of the same expert (earlier steps, then the
        # rank inside the step)
        base = start * bm
        for s in ag.range(0, N, SUB):
            base = _positions_step(Ids, Peers, Pos, s, base, be)

    if tile_rows:
        def moe_layout_small_rows(Ids: ag.Tensor["N", ag.i32], Peers: ag.Tensor["NP", ag.i32],
                                  ExpertStart: ag.Tensor[1, "E", ag.i32],
                                  TileExpert: ag.Tensor["MT", 1, ag.i32],
                                  Tiles: ag.Tensor[1, 1, ag.i32],
                                  Pos: ag.Tensor["N", 1, ag.i32],
                                  TileRows: ag.Tensor["MT", 1, ag.i32]):
            layout(Ids, Peers, ExpertStart, TileExpert, Tiles, Pos, TileRows)

        return ag.kernel(moe_layout_small_rows, threads=128,
                         name=f"moe_layout_small_rows_{be}_{bm}")

    # Peers: the ids again under their own dim (see positions_kernel)
    def moe_layout_small(Ids: ag.Tensor["N", ag.i32], Peers: ag.Tensor["NP", ag.i32],
                         ExpertStart: ag.Tensor[1, "E", ag.i32],
                         TileExpert: ag.Tensor["MT", 1, ag.i32], Tiles: ag.Tensor[1, 1, ag.i32],
                         Pos: ag.Tensor["N", 1, ag.i32]):
        layout(Ids, Peers, ExpertStart, TileExpert, Tiles, Pos, None)

    return ag.kernel(moe_layout_small, threads=128, name=f"moe_layout_small_{be}_{bm}")


# ----------------------------------------------------------------------------- gather and combine


def tag_positions(Pos) -> None:
    """Tags for the verifier (no code) of a scatter through Pos [N, 1] (permute, and the fp8
    path's permute_quantize): Pos[i] holds position(i), an injective map (what the positions
    kernel computes: a bijection onto the layout's non-padding rows), so the rows the scatter
    writes are distinct."""
    position = ag.opaque("position")
    ag.tag_tensor(Pos, value=lambda i, zero: position(i))
    ag.tag_assume(lambda a, b: ag.tag_any(a == b, position(a) != position(b)))


@functools.lru_cache(maxsize=None)
def permute_kernel(top_k: int, bh: int, pdl: bool = False) -> ag.KernelFunction:
    """xp[pos[t * k + j]] = x[t] for each slot j: CTA (t, b) reads columns [b * bh, +bh) of
    token t's row once and writes them to its k rows of the padded layout (a CTA per column
    block, not per token: a decode step's few tokens still spread over the SMs). pdl: launched
    with programmatic dependent launch, it waits for the kernels before it first thing and
    then lets the next kernel start at once (docs/pdl.md): a decode gate-up that prefetches
    its weights before its own wait (MoeSchedule.prefetch) gets the permute's whole run as
    its window, and, the trigger following the wait, the routing kernels before the permute
    are complete by the time the gate-up starts, which is what lets it read the routing map
    before its wait."""

    def moe_permute(X: ag.Tensor["T", "H", ag.bf16], Pos: ag.Tensor["N", 1, ag.i32],
                    Xp: ag.Tensor["M", "H", ag.bf16]):
        tag_positions(Pos)
        if pdl:   # x, pos: the previous kernels' outputs; xp: the last layer's gate-up read it
            ag.wait_prior_grids()
            ag.allow_dependent_launch()
        t, block = ag.grid(X.shape[0], ag.cdiv(X.shape[1], bh))
        h0 = block * bh
        x = ag.load(X, (t, h0), (1, bh))
        for j in range(top_k):
            ag.store(Xp, (ag.load_scalar(Pos, (t * top_k + j, 0)), h0), x)

    # Xp's padding rows are never written (nor read), on purpose
    return ag.kernel(moe_permute, threads=128,
                     name=f"moe_permute_k{top_k}_{bh}" + ("_pdl" if pdl else ""),
                     partial_outputs=("Xp",))


@functools.lru_cache(maxsize=None)
def combine_kernel(top_k: int, bh: int, splits: int = 0,
                   pdl: bool = False) -> ag.KernelFunction:
    """out[t] = sum over j of weights[t, j] * y[pos[t * k + j]], in fp32, rounded once. With
    splits > 0, y is the down GEMM's fp32 partial sums [splits, M, H] (decode with split_k),
    added up here too. CTA (t, b) makes columns [b * bh, +bh) of token t's row (a CTA per
    column block: a decode step's few tokens still spread over the SMs). pdl: launched with
    programmatic dependent launch after a PDL down GEMM (MoeSchedule.pdl_combine), it waits
    for the kernels before it first thing (everything it reads is theirs: y, and pos and the
    weights of the routing) and then lets the next kernel start, so only its launch and
    prologue overlap the down's tail (docs/pdl.md)."""
    y_dims, y_type = (("S", "M", "H"), ag.f32) if splits else (("M", "H"), ag.bf16)

    def moe_combine(Y: ag.Tensor[(*y_dims, y_type)], Pos: ag.Tensor["N", 1, ag.i32],
                    Weights: ag.Tensor["T", top_k, ag.f32], Out: ag.Tensor["T", "H", ag.bf16]):
        # For the verifier (no code): row r of the layout holds token token_of(r)'s data, Pos
        # holds position(i), and routing's contract is token_of(position(i)) == i // k; Out's
        # row t is token t. store.coords then proves every output row sums rows of its own
        # token only: a padding row (token_of unconstrained) or another token's row cannot
        # reach it.
        position, token_of = ag.opaque("position"), ag.opaque("token_of")
        ag.tag_tensor(Pos, value=lambda i, zero: position(i))
        if splits:
            ag.tag_tensor(Y, token=lambda piece, r, h: token_of(r))
        else:
            ag.tag_tensor(Y, token=lambda r, h: token_of(r))
        ag.tag_tensor(Out, token=lambda t, h: t)
        ag.tag_assume(lambda i: token_of(position(i)) == i // top_k)
        if pdl:   # every read and the store after the wait; the trigger after it too
            ag.wait_prior_grids()
            ag.allow_dependent_launch()
        t, block = ag.grid(Out.shape[0], ag.cdiv(Out.shape[1], bh))
        h0 = block * bh
        rows = [ag.load_scalar(Pos, (t * top_k + j, 0)) for j in range(top_k)]
        weights = [ag.load_scalar(Weights, (t, j)) for j in range(top_k)]

        def row_of_y(row, h0):
            """y's row (fp32), its K slices' partial sums added up."""
            if not splits:
                return ag.load(Y, (row, h0), (1, bh)).to(ag.f32)
            y = ag.load(Y, (0, row, h0), (1, bh))
            for piece in range(1, splits):
                y = y + ag.load(Y, (piece, row, h0), (1, bh))
            return y

        total = row_of_y(rows[0], h0) * weights[0]
        for row, w in zip(rows[1:], weights[1:]):
            total = total + row_of_y(row, h0) * w
        ag.store(Out, (t, h0), total.to(ag.bf16))

    name = f"moe_combine_k{top_k}_{bh}" + (f"_s{splits}" if splits else "") + \
        ("_pdl" if pdl else "")
    return ag.kernel(moe_combine, threads=128, name=name)
