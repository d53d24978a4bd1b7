"""A CPU model of the MoE grouped GEMM's L2 / DRAM traffic (issue 16): which unit orders and
walks read the weights from DRAM how many times. Not a measurement; docs/perf/moe.md
(2026-12-07, "CPU only, not measured") gives its validation against the H100 Nsight readings.

What it models. The prefill grouped GEMM (argus/kernels/moe.py, moe_fp8.py) computes units
(m-tile, n-tile) over the expert-sorted, 128-row padded rows; each unit runs `k_blocks` K
blocks and each K block reads its A box (bm rows x bk), its B box (the expert's tile rows x
bk) and, at fp8, the two scale boxes. The CTAs (`ctas`, 132) take units either as the static
persistent walk (CTA c runs sequence[c], sequence[c + ctas], ...: `_walk`), or in sequence
order as they free up (the dynamic walk, `scheduler="dynamic"`, and, to this model, the grid of
one CTA a unit: the hardware hands blockIdx out in order as SMs free up). Time is in K-block
units: a unit's blocks each take 1 x (1 + jitter * N(0,1)) (clipped at 0.25; drawn per unit,
so CTAs drift apart as a random walk) x the CTA's speed (1 + cta_spread * N(0,1), drawn once).
Every box read, in global time order, goes through one LRU cache of `l2_bytes` (the H100 and
H200 have 50 MB in two partitions; a unified 50 MB LRU is the optimistic reading, 25 MB the
pessimistic one where each partition holds its own copy of what its SMs read: both are
reported). A miss reads the box from DRAM; the unit's output tile is written once (counted,
and it occupies the cache as it passes). Set associativity, sectors, the TMA's prefetch depth
(the ring's stages: a CTA reads at most `stages` blocks ahead, far less than the reuse
distances that matter here) and DRAM's feedback on speed are not modeled.

    python scripts/moe_l2_model.py                      # DeepSeek-V3 gate-up, every order,
                                                        # both walks, jitter 0 / 0.02 / 0.05
    python scripts/moe_l2_model.py --model mixtral --l2-mb 50 25 --orders "expert g16"
    python scripts/moe_l2_model.py --bias-scale 0       # the balanced routing
(each configuration takes 5-15 s of one CPU core)
"""


import argparse
import heapq
import math
import random
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Gemm:
    """One grouped GEMM's geometry as the walk sees it: bytes a K block reads per box."""

    name: str
    k_blocks: int          # K / bk
    a_box: int             # bm rows x bk x element bytes
    b_box: int             # the tile's weight rows x bk x element bytes
    a_scale_box: int       # activation scales of the box (0: bf16)
    b_scale_box: int       # weight scales of the box (0: bf16)
    out_tile: int          # bytes a unit writes


def deepseek_gate_up() -> Gemm:
    """fp8 gate-up, FP8_PREFILL_SPLIT_SMEM_TMA: 128 x 256 tiles (128 gate + 128 up weight rows),
    bk 128, K = H = 7168; K-major fp32 activation scales (128 rows a box) and one gate + one up
    weight scale a block (a 32-byte sector each); h stored as 128 x 128 bf16."""
    return Gemm("deepseek-v3 fp8 gate-up", 7168 // 128, 128 * 128, 256 * 128, 128 * 4, 2 * 32,
                128 * 128 * 2)


def deepseek_down() -> Gemm:
    """fp8 down, the same schedule: 128 x 256 tiles of y (256 weight rows), bk 128, K = I = 2048;
    y stored as 128 x 256 bf16 (n-tiles: H / 256 = 28)."""
    return Gemm("deepseek-v3 fp8 down", 2048 // 128, 128 * 128, 256 * 128, 128 * 4, 32,
                128 * 256 * 2)


def mixtral_gate_up() -> Gemm:
    """bf16 gate-up, PREFILL_TMA: 128 x 256 tiles, bk 64, K = H = 4096; h 128 x 128 bf16."""
    return Gemm("mixtral bf16 gate-up", 4096 // 64, 128 * 64 * 2, 256 * 64 * 2, 0, 0,
                128 * 128 * 2)


# ----------------------------------------------------------------------------- unit orders


def tile_coords(unit: int, m_tiles: int, n_tiles: int, group_m: int) -> tuple[int, int]:
    """argus.kernels.warp_specialized.tile_coords on host integers (the kernel's raster)."""
    width = group_m * n_tiles
    first_m = unit // width * group_m
    size = min(m_tiles - first_m, group_m)
    within = unit % width
    return first_m + within % size, within // size


def grouped_order(tile_expert: list[int], n_tiles: int, group_m: int) -> list[tuple[int, int]]:
    """The kernels' grouped raster over all m-tiles (groups may straddle experts)."""
    mt = len(tile_expert)
    return [tile_coords(u, mt, n_tiles, group_m) for u in range(mt * n_tiles)]


def expert_order(tile_expert: list[int], n_tiles: int, group_m: int) -> list[tuple[int, int]]:
    """Groups that never straddle an expert: each expert's m-tiles in chunks of group_m (0: the
    whole expert), each chunk n-tile by n-tile with its m-tiles fastest, so the m-tiles that
    share a weight tile are neighbours in the sequence."""
    order = []
    for first, last in expert_spans(tile_expert):
        step = group_m or (last - first)
        for g in range(first, last, step):
            top = min(g + step, last)
            order += [(m, n) for n in range(n_tiles) for m in range(g, top)]
    return order


def expert_spans(tile_expert: list[int]) -> list[tuple[int, int]]:
    """[first, last) m-tiles of each expert with rows, in layout order."""
    spans, start = [], 0
    for m in range(1, len(tile_expert) + 1):
        if m == len(tile_expert) or tile_expert[m] != tile_expert[start]:
            spans.append((start, m))
            start = m
    return spans


# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Walk:
    """How units reach CTAs and how the CTAs' speeds vary."""

    dynamic: bool = False      # in sequence order as CTAs free up (dynamic walk / unit grid)
    jitter: float = 0.0        # per-unit relative spread of a unit's time
    cta_spread: float = 0.0    # per-CTA relative spread of speed (fixed for the launch)
    ctas: int = 132
    seed: int = 0


def simulate(g: Gemm, tile_expert: list[int], order: list[tuple[int, int]], walk: Walk,
             l2_bytes: int = 50 << 20, half: frozenset = frozenset(),
             half_time: float = 1.0) -> dict:
    """DRAM bytes (reads by kind, writes) of the units in `order` on `walk`, through an LRU of
    l2_bytes. Each unit must appear once (checked). `half`: m-tiles whose units' blocks take
    `half_time` of a block (MoeFp8Schedule.half_tile_last's half tiles: `half_tiles`)."""
    n_units = len(order)
    if len(set(order)) != n_units:
        raise ValueError("simulate: the order repeats a unit; each (m-tile, n-tile) runs once")
    rng = random.Random(walk.seed)
    ctas = min(walk.ctas, n_units)
    speed = [max(0.25, 1.0 + walk.cta_spread * rng.gauss(0.0, 1.0)) for _ in range(ctas)]
    cache: OrderedDict = OrderedDict()
    held = 0
    miss = {"A": 0, "B": 0, "As": 0, "Bs": 0}
    reads = dict.fromkeys(miss, 0)
    written = 0

    def touch(key, kind: str, size: int) -> None:
        nonlocal held
        reads[kind] += size
        if key in cache:
            cache.move_to_end(key)
            return
        miss[kind] += size
        cache[key] = size
        held += size
        while held > l2_bytes:
            held -= cache.popitem(last=False)[1]

    def write(key, size: int) -> None:
        nonlocal held, written
        written += size
        cache[key] = size
        held += size
        while held > l2_bytes:
            held -= cache.popitem(last=False)[1]

    # each CTA: (time of its next K block, cta, unit index in order, k, seconds a block)
    next_unit = ctas
    heap = []
    own = [list(range(c, n_units, ctas)) for c in range(ctas)] if not walk.dynamic else None
    pos = [0] * ctas

    def block_time(c: int, u: int) -> float:
        t = max(0.25, 1.0 + walk.jitter * rng.gauss(0.0, 1.0)) * speed[c]
        return t * half_time if order[u][0] in half else t

    for c in range(ctas):
        heapq.heappush(heap, (0.0, c, c, 0, block_time(c, c)))
    end = 0.0
    while heap:
        t, c, u, k, dt = heapq.heappop(heap)
        m, n = order[u]
        e = tile_expert[m]
        touch(("A", m, k), "A", g.a_box)
        touch(("B", e, n, k), "B", g.b_box)
        if g.a_scale_box:
            touch(("As", m, k), "As", g.a_scale_box)
            touch(("Bs", e, n, k), "Bs", g.b_scale_box)
        t += dt
        if k + 1 < g.k_blocks:
            heapq.heappush(heap, (t, c, u, k + 1, dt))
            continue
        write(("C", m, n), g.out_tile)
        end = max(end, t)
        if walk.dynamic:
            if next_unit < n_units:
                heapq.heappush(heap, (t, c, next_unit, 0, block_time(c, next_unit)))
                next_unit += 1
        else:
            pos[c] += 1
            if pos[c] < len(own[c]):
                heapq.heappush(heap, (t, c, own[c][pos[c]], 0,
                                      block_time(c, own[c][pos[c]])))
    dram_reads = sum(miss.values())
    return dict(units=n_units, dram_read=dram_reads, dram_write=written,
                dram=dram_reads + written, miss=miss, reads=reads, end=end,
                hit=1.0 - dram_reads / max(1, sum(reads.values())))


def ideal_bytes(g: Gemm, tile_expert: list[int], n_tiles: int, routed_rows: int) -> float:
    """Each weight tile of an expert with rows, each routed row's A and h once."""
    experts = len(set(tile_expert))
    a_row = g.a_box // 128 * g.k_blocks
    return (experts * n_tiles * g.b_box * g.k_blocks + routed_rows * a_row
            + routed_rows * n_tiles * g.out_tile // 128)


# ----------------------------------------------------------------------------- routing


def routed_counts(model: str, tokens: int, bias_scale: float, seed: int) -> list[int]:
    """Rows an expert from gpu_moe_bench.torch_route on CPU tensors of the bench's distribution
    (randn logits, bias_scale x randn correction bias): not the bench's CUDA random stream."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_moe_bench import MODELS, torch_route

    E, k, _, _, routing = MODELS[model]
    g = torch.Generator().manual_seed(seed)
    bias = torch.randn(E, generator=g) * bias_scale
    logits = torch.randn(tokens, E, generator=g)
    ids, _ = torch_route(logits, k, routing, bias)
    return torch.bincount(ids.reshape(-1), minlength=E).tolist()


def tile_experts(counts: list[int], bm: int = 128) -> list[int]:
    """The expert of each padded m-tile in layout order (zero-row experts have none)."""
    return [e for e, c in enumerate(counts) for _ in range(math.ceil(c / bm))]


def half_tiles(counts: list[int], bm: int = 128) -> frozenset:
    """The m-tiles (layout order, as tile_experts) that MoeFp8Schedule.half_tile_last runs as
    half tiles: each expert's last m-tile when it holds <= bm / 2 routed rows."""
    out, m = set(), 0
    for c in counts:
        tiles = math.ceil(c / bm)
        if tiles and c - (tiles - 1) * bm <= bm // 2:
            out.add(m + tiles - 1)
        m += tiles
    return frozenset(out)


# ----------------------------------------------------------------------------- report


ORDERS = {
    "grouped g8 (default)": lambda te, nt: grouped_order(te, nt, 8),
    "grouped g4": lambda te, nt: grouped_order(te, nt, 4),
    "grouped g16": lambda te, nt: grouped_order(te, nt, 16),
    "grouped g32": lambda te, nt: grouped_order(te, nt, 32),
    "m-major (g1: an m-tile's n-tiles together)": lambda te, nt: grouped_order(te, nt, 1),
    "grouped g64": lambda te, nt: grouped_order(te, nt, 64),
    "expert g8 (groups inside an expert)": lambda te, nt: expert_order(te, nt, 8),
    "expert g16": lambda te, nt: expert_order(te, nt, 16),
    "expert g32": lambda te, nt: expert_order(te, nt, 32),
    "expert whole (weights-stationary: an (e, n)'s m-tiles together)":
        lambda te, nt: expert_order(te, nt, 0),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("deepseek", "mixtral"), default="deepseek")
    ap.add_argument("--bias-scale", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orders", nargs="*", default=None, choices=list(ORDERS), metavar="NAME",
                    help="orders by name (default: all): " + "; ".join(ORDERS))
    ap.add_argument("--jitter", type=float, nargs="*", default=[0.0, 0.02, 0.05])
    ap.add_argument("--cta-spread", type=float, default=0.0)
    ap.add_argument("--l2-mb", type=float, nargs="*", default=[50.0])
    ap.add_argument("--walks", nargs="*", default=["static", "dynamic"],
                    choices=("static", "dynamic"))
    ap.add_argument("--half-time", type=float, default=None,
                    help="half_tile_last: each expert's last m-tile of <= 64 rows takes this "
                         "fraction of a unit's time (h310: 0.6 doubles the static walk's reads)")
    args = ap.parse_args()
    if args.model == "deepseek":
        g, counts, n_tiles = deepseek_gate_up(), routed_counts("deepseek-v3", 16384,
                                                              args.bias_scale, args.seed), 16
    else:
        g, counts, n_tiles = mixtral_gate_up(), routed_counts("mixtral", 16384, 0.0,
                                                             args.seed), 112
    te = tile_experts(counts)
    nz = sorted(c for c in counts if c)
    print(f"# {g.name}: rows an expert median {sorted(counts)[len(counts) // 2]}, max "
          f"{max(counts)}, empty {counts.count(0)}; m-tiles {len(te)}, units "
          f"{len(te) * n_tiles}; ideal {ideal_bytes(g, te, n_tiles, sum(nz)) / 1e9:.2f} GB",
          flush=True)
    half = half_tiles(counts) if args.half_time is not None else frozenset()
    if half:
        print(f"# half tiles: {len(half)} m-tiles at {args.half_time} of a unit's time")
    names = args.orders or list(ORDERS)
    print("| order | walk | jitter | L2 MB | DRAM GB (reads W / A / written) | L2 hit |")
    print("|---|---|---|---|---|---|")
    for name in names:
        order = ORDERS[name](te, n_tiles)
        for walk_name in args.walks:
            for jit in args.jitter:
                for l2 in args.l2_mb:
                    r = simulate(g, te, order, Walk(dynamic=walk_name == "dynamic", jitter=jit,
                                                    cta_spread=args.cta_spread, seed=args.seed),
                                 int(l2 * (1 << 20)), half, args.half_time or 1.0)
                    mi = r["miss"]
                    print(f"| {name} | {walk_name} | {jit} | {l2:g} | {r['dram'] / 1e9:.1f} "
                          f"({(mi['B'] + mi['Bs']) / 1e9:.1f} / {(mi['A'] + mi['As']) / 1e9:.2f}"
                          f" / {r['dram_write'] / 1e9:.2f}) | {100 * r['hit']:.0f}% |",
                          flush=True)


if __name__ == "__main__":
    main()
