"""Which GemmSchedule runs a given matmul problem: a tuned choice from the on-disk cache when
there is one, else a shape heuristic. `argus.ops.tune_matmul` measures the candidates on the GPU
and records the winner with a fingerprint of the candidate set, so a shape is tuned once per
card, and again only when a new Argus offers other candidates for it.

The cache is one JSON file per GPU name under $ARGUS_CACHE_DIR/matmul (default
~/.cache/argus/matmul); entries are keyed by the problem signature. The agent publishes its
measured winners through `record_agent_choice` into one more file per card class (argus.ops.moe
card_class: H100 / H200), the class of the card that measured them, and `choose` reads the
running card's class only, so a schedule measured best on one class never runs on the other.
Its older classless file (`any`) is kept and read as the H100 class's (AGENT_LEGACY_CARD says
why). ops never reads the agent's store, since ops sits below the agent (ARCHITECTURE.md §2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from argus import dtypes
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.ops import gemm_model, split_k, tuning_cache
from argus.ops.moe import CARD_H100, CARDS, card_class
from argus.target.limits import SMEM_PER_CTA_OPTIN


@dataclass(frozen=True)
class Problem:
    """What fixes the kernel and its best schedule."""

    m: int
    n: int
    k: int
    batch: int
    in_dtype: str
    out_dtype: str
    b_layout: str          # "nk" or "kn"
    tma_store_ok: bool     # C's layout allows the stmatrix + TMA-store epilogue

    @property
    def key(self) -> str:
        return (f"{self.batch}x{self.m}x{self.n}x{self.k}:{self.in_dtype}->{self.out_dtype}:"
                f"{self.b_layout}:{'tma' if self.tma_store_ok else 'direct'}")


def kernel_for(p: Problem, s: GemmSchedule):
    """(kernel, schedule) that compute problem `p` under `s`: the problem's own GEMM kernel, or
    for a split-K schedule the batched kernel with fp32 output that computes one K slice per
    batch (argus/ops/split_k.py; the partials' sum is `split_k_sum`), or with tail splits the
    kernel built for them (its tail's sum is `tail_sum_kernel`). A "tf32" problem runs the
    fp32 kernel with precision="tf32"."""
    precision = "tf32" if p.in_dtype == "tf32" else None
    in_dtype = dtypes.f32 if precision else dtypes.from_name(p.in_dtype)
    out_dtype = dtypes.from_name(p.out_dtype)
    if s.split_k > 1:
        return (gemm_kernel(in_dtype, dtypes.f32, p.b_layout, True, precision=precision),
                dataclasses.replace(s, split_k=1))
    # tail splits: the kernel that also takes the K-slice views and the workspace
    if s.scheduler == "dynamic":   # the kernel that takes the work counter
        return gemm_kernel(in_dtype, out_dtype, p.b_layout, p.batch > 1, precision=precision,
                           dynamic=True), s
    return gemm_kernel(in_dtype, out_dtype, p.b_layout, p.batch > 1, s.tail_splits,
                       precision=precision, tail_fused=s.tail_finish == "fused"), s


def heuristic(p: Problem) -> GemmSchedule:
    """A good schedule without measuring (HOPPER.md §2.1 recipe, skinny-M variants)."""
    return _fit_tf32(p, _heuristic(p))


def _fit_tf32(p: Problem, s: GemmSchedule) -> GemmSchedule | None:
    """A schedule for bf16 made to fit a tf32 problem: bk = 32 (a 128-byte row of fp32: the
    same bytes per stage as bf16's 64); None for what tf32 does not run yet (split-K, tail
    splits: their K-slice checks assume 16-bit elements). Other problems: `s` itself."""
    if p.in_dtype != "tf32":
        return s
    if s.split_k > 1 or s.tail_splits > 1:
        return None
    return dataclasses.replace(s, bk=32)


def _heuristic(p: Problem) -> GemmSchedule:
    epilogue = "tma" if p.tma_store_ok and p.out_dtype in ("bf16", "f16") else "direct"
    if p.m * p.batch <= 32:
        # Weight streaming with few tokens: swap-AB, 64 weight rows per tile and a ring of
        # two-slice stages (the tuned choice on the H200 at 16 x 8192 x 8192 in both layouts,
        # 89-92% of copy bandwidth: docs/perf/gemm.md).
        return _swap_ab(p, bm=64, k_atoms=2)
    if p.m * p.batch <= 64:
        # Weight-streaming regime: one 64-row consumer, narrow N tiles so that every SM
        # streams its own slice of B, a deep ring to keep bytes in flight.
        return GemmSchedule(bm=64, bn=64, consumers=1, stages=12, epilogue="direct")
    if p.m * p.batch <= 256:
        return GemmSchedule(bm=128, bn=64, stages=8, epilogue="direct")
    stages = 3 if epilogue == "tma" else 4
    if p.batch * _tiles(p.m, 128) * _tiles(p.n, 256) < _SMS:
        # fewer 128x256 tiles than SMs (e.g. 1024^3): smaller tiles put more SMs to work
        return GemmSchedule(bn=128, stages=5, epilogue=epilogue)
    return GemmSchedule(epilogue=epilogue, stages=stages)


_SMS = 132  # H100 / H200 SXM


def _tiles(extent: int, tile: int) -> int:
    return -(-extent // tile)


def candidates(p: Problem) -> list[GemmSchedule]:
    """The bounded set `argus.ops.tune_matmul` measures (every one legal for this problem)."""
    base = heuristic(p)
    out = [base]
    if p.m * p.batch > 256:
        out += [GemmSchedule(stages=4), GemmSchedule(stages=4, persistent=False),
                GemmSchedule(bn=128, stages=6)]
        out += [GemmSchedule(stages=4, cluster_m=2)]  # 2x1 clusters multicast B
        out += [GemmSchedule(stages=4, zero_by_wgmma=True)]
        if p.tma_store_ok and p.out_dtype in ("bf16", "f16"):
            out += [GemmSchedule(epilogue="tma", stages=3, group_m=16),
                    GemmSchedule(bn=128, stages=5, epilogue="tma")]
            out += [GemmSchedule(epilogue="tma", stages=3, cluster_m=2),
                    GemmSchedule(bn=128, stages=5, epilogue="tma", cluster_m=2)]
            # one more ring stage beside the staging buffer: 128x128 with the whole tile
            # staged, 128x256 staged in two rounds of 128 columns
            out += [GemmSchedule(bn=128, stages=6, epilogue="tma", cluster_m=2),
                    GemmSchedule(stages=4, epilogue="tma", cluster_m=2,
                                 store_cols=_tma_staging(128, 256, 4))]
        if p.batch * _tiles(p.m, 128) * _tiles(p.n, 256) < 2 * _SMS:
            out += [GemmSchedule(bm=64, bn=128, consumers=1, stages=8)]
        # ping-pong: two consumer warpgroups on whole tiles in turns, one's epilogue under the
        # other's MMAs (pays where the epilogue is a large share: small K, few k steps)
        out += [GemmSchedule(bm=128, bn=128, stages=6, pingpong=True),
                GemmSchedule(bm=64, bn=256, stages=5, pingpong=True)]
        if p.tma_store_ok and p.out_dtype in ("bf16", "f16"):
            # the TMA-store ping-pong: 0.98x cuBLAS geomean on six large cases on the H200
            # since the K loop's bookkeeping cut (docs/perf/gemm.md, 2026-12-03 15:00), 1.08x at
            # 2048x7168x2048 NN where the cooperative 128x256 is 0.95x
            out += [GemmSchedule(bm=128, bn=128, stages=6, pingpong=True, epilogue="tma",
                                 store_cols=64)]
    else:
        out += [GemmSchedule(bm=64, bn=128, consumers=1, stages=8),
                GemmSchedule(bm=128, bn=128, stages=6),
                GemmSchedule(bm=64, bn=64, consumers=1, stages=8)]
    if p.m * p.batch <= 64:
        # weight streaming: several 128-byte K slices per stage give each weight row a longer
        # contiguous read per TMA round; narrower N tiles put more SMs to work (on the H200 at
        # 16x8192x8192 the best of them came within 2% of the best k_atoms=1 schedule, no better:
        # docs/perf/gemm.md)
        out += [GemmSchedule(bm=64, bn=64, consumers=1, stages=6, k_atoms=2),
                GemmSchedule(bm=64, bn=64, consumers=1, stages=3, k_atoms=4),
                GemmSchedule(bm=64, bn=128, consumers=1, stages=4, k_atoms=2),
                GemmSchedule(bm=64, bn=64, consumers=1, stages=6, k_atoms=2,
                             persistent=False)]
        if p.b_layout == "nk":  # an MN-major B is read in 64-column atoms
            out += [GemmSchedule(bm=64, bn=32, consumers=1, stages=8, k_atoms=2)]
        out += _split_k_candidates(p)
        out += _swap_ab_candidates(p)
    if p.m * p.batch > 256:
        out += _wave_fitting_tiles(p)
        # tail_split_candidates(p) are not tuning candidates: slower than the plain kernel in
        # every case measured on the H200 (docs/perf/gemm.md run 5)
    seen, unique = set(), []
    for s in (_fit_tf32(p, s) for s in out):
        if s is not None and s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def _split_k_candidates(p: Problem) -> list[GemmSchedule]:
    """Split-K for weight streaming: K slices multiply the units of work, so that about one
    unit per SM (or two) streams weights even when N / bn is below the SM count."""
    out = []
    for bn, stages in ((64, 12), (128, 8), (256, 4)):
        tiles = _tiles(p.n, bn)
        for splits in (2, 3, 4, 6, 8):
            units = tiles * splits
            if split_k.why_not(p.k, splits, p.batch) is None and \
                    _SMS * 0.9 <= units <= 2 * _SMS:
                out.append(GemmSchedule(bm=64, bn=bn, consumers=1, stages=stages,
                                        split_k=splits, epilogue="direct"))
                break  # the fewest splits that fill the SMs: least partial traffic
    return out


def _swap_ab_candidates(p: Problem) -> list[GemmSchedule]:
    """Swap-AB with few tokens: W's rows fill wgmma's 64-row side (read MN-major for x @ W
    with W [K, N]), the tokens its N side (16, 32 or 64 of them), so a stage holds bm weight
    rows and bn token rows instead of 64 token rows (mostly zero fill): about 1.6x more
    weight bytes in flight per SM for 16 tokens. cuBLAS picks this shape of kernel on the
    H200 for 16 x 8192 x 8192 (Nsight Compute: nvjet_sm90_tst_64x16_64x16,
    docs/perf/gemm.md)."""
    out = [_swap_ab(p, bm=64, k_atoms=1), _swap_ab(p, bm=64, k_atoms=2),
           _swap_ab(p, bm=128, k_atoms=1)]
    # 128-row tiles leave half the SMs idle at N = 8192: split K to fill them
    tiles = _tiles(p.n, 128)
    for splits in (2, 3, 4):
        if split_k.why_not(p.k, splits, p.batch) is None and tiles * splits >= 0.9 * _SMS:
            out.append(dataclasses.replace(_swap_ab(p, bm=128, k_atoms=1), split_k=splits))
            break
    return out


def _swap_ab(p: Problem, *, bm: int, k_atoms: int) -> GemmSchedule:
    """The swap-AB schedule with `bm` weight rows per tile, the smallest token tile (16, 32,
    64) that holds M, and as many stages as a 200 KB ring holds (at most 16)."""
    tokens = next(t for t in (16, 32, 64) if p.m <= t)
    stages = min(16, 200 * 1024 // (k_atoms * (bm + tokens) * 64 * 2))
    return GemmSchedule(bm=bm, bn=tokens, consumers=bm // 64, stages=stages, k_atoms=k_atoms,
                        swap_ab=True)


def _wave_fitting_tiles(p: Problem) -> list[GemmSchedule]:
    """Narrower tiles when the last wave of 128x256 tiles would leave many SMs idle (2048 x
    7168: 448 tiles are 3.4 waves of 132; 128x176 tiles make 656, 5.0 waves: the tile cuBLAS
    runs there, Nsight Compute `nvjet_sm90_tst_176x128_64x5_1x2`, docs/perf/gemm.md). The time
    of a tile is about proportional to its width, so the two widths with the least waves x
    width are offered when they beat 256-wide tiles by 5%, with the TMA-store epilogue (in
    32- or 16-column blocks) where the output allows it and with 2x1 clusters."""
    def cost(bn: int) -> int:
        return -(-p.batch * _tiles(p.m, 128) * _tiles(p.n, bn) // _SMS) * bn

    # an MN-major B is read in 64-column atoms; a 2x1 cluster splits B into two whole halves
    widths = (192,) if p.b_layout == "kn" else (224, 192, 176, 160)
    out = []
    for bn in sorted(widths, key=cost)[:2]:
        if cost(bn) > 0.95 * cost(256):
            continue
        tma = p.tma_store_ok and p.out_dtype in ("bf16", "f16")
        clusters = (1, 2) if p.b_layout == "nk" or (bn // 64) % 2 == 0 else (1,)
        for epilogue in ("tma", "direct") if tma else ("direct",):
            # the ring gets what the 128 x bn staging tile leaves of ~220 KB, 3 to 5 stages
            staging = 128 * bn * 2 if epilogue == "tma" else 0
            stages = max(3, min(5, (220 * 1024 - staging) // ((128 + bn) * 64 * 2)))
            out += [GemmSchedule(bn=bn, stages=stages, epilogue=epilogue, cluster_m=c)
                    for c in clusters]
            # one more stage, the tile staged in rounds (128x176: 5 stages, the depth cuBLAS
            # runs, instead of 4; on the H200 3 -> 4 stages took that shape from 108 to 90 us)
            cols = _tma_staging(128, bn, stages + 1) if epilogue == "tma" else None
            if cols:
                out += [GemmSchedule(bn=bn, stages=stages + 1, epilogue="tma",
                                     cluster_m=clusters[-1], store_cols=cols)]
    return out


def tail_split_candidates(p: Problem, finish: str = "kernel") -> list[GemmSchedule]:
    """The 128x256 cluster schedules with their last wave in K slices (GemmSchedule.
    tail_splits), when that wave would leave most SMs idle (under 60% full: 2048 x 7168 has
    26 units of 2x1 clusters in its fourth wave of 66). The split count is the one of least
    tail time, ceil(tail units x S / clusters) / S of a wave (ties: the fewest slices, the
    least partial traffic), among those that cut K into TMA-readable slices. `finish` is
    their GemmSchedule.tail_finish: "kernel" (a second kernel sums the slices) or "fused"
    (the last slice to arrive at a tile does)."""
    out = []
    bases = [GemmSchedule(stages=4, cluster_m=2)]   # the direct epilogue only (GemmSchedule)
    for base in bases:
        clusters = base.num_sms // base.cluster_m
        units = p.batch * _tiles(_tiles(p.m, base.bm), base.cluster_m) * _tiles(p.n, base.bn)
        tail = units % clusters if units >= clusters else units
        if not tail or tail >= 0.6 * clusters:
            continue
        splits = [s for s in range(2, 9) if split_k.tail_why_not(p.k, s) is None]
        if splits:
            best = min(splits, key=lambda s: (-(-tail * s // clusters) / s, s))
            out.append(dataclasses.replace(base, tail_splits=best, tail_finish=finish))
    return out


# what the ring and the TMA-store staging may use: the opt-in maximum less the barriers and
# alignment (about 1 KB in the GEMM kernel)
_SMEM_BUDGET = SMEM_PER_CTA_OPTIN - 2048


def _tma_staging(bm: int, bn: int, stages: int) -> int | None:
    """`store_cols` for the TMA-store epilogue beside a `stages`-deep ring of bm x bn tiles
    (64-deep bf16 slices): 0 when the whole tile's staging fits, else the most columns, in whole
    store blocks, that do; None when not even one block does."""
    width = next(w for w in (64, 32, 16) if bn % w == 0)
    cols = (_SMEM_BUDGET - stages * (bm + bn) * 64 * 2) // (bm * 2) // width * width
    if cols >= bn:
        return 0
    return cols if cols >= width else None


def load_cache(gpu: str) -> dict:
    return tuning_cache.load("matmul", gpu)


def candidates_fingerprint(problem: Problem) -> str:
    """A short hash of the candidate set of `problem`: a tuned choice recorded with another
    fingerprint was picked from other candidates (an older Argus) and is not trusted."""
    import hashlib

    text = "\n".join(repr(s) for s in candidates(problem))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def store_choice(gpu: str, problem: Problem, schedule: GemmSchedule, ms: float) -> None:
    tuning_cache.record("matmul", gpu, problem.key, schedule, ms,
                        candidates=candidates_fingerprint(problem))


def untuned(p: Problem) -> GemmSchedule:
    """The choice without timing: the candidate of least time in the analytic model
    (argus/ops/gemm_model.py: waves, padding, stages, clusters, epilogue; constants fitted on
    H200 timings), or for skinny problems the heuristic (their tuned weight-streaming
    schedules). Always one of candidates(p), never split-K: one kernel to compile."""
    if p.m * p.batch <= gemm_model.SKINNY:
        return heuristic(p)
    return gemm_model.pick(p, candidates(p))


def choose(problem: Problem, gpu: str | None, card: str | None = None) -> GemmSchedule:
    """The tuned choice for `problem` on `gpu` (the device's name) when one was recorded from
    today's candidates, else the agent's best known schedule for the device's card class
    `card` (argus.ops.moe card_of; None: the class the name gives, card_class's rule without
    the memory), else the untuned model's choice."""
    if gpu is not None:
        entry = load_cache(gpu).get(problem.key)
        fresh = entry is not None and \
            entry.get("candidates", None) in (None, candidates_fingerprint(problem))
        if fresh:
            try:
                return GemmSchedule(**entry["schedule"])
            except (TypeError, ValueError):
                pass  # written by another version of GemmSchedule: ignore it
        found = agent_choice(problem.key, card or card_class(gpu, 0))
        if found:
            try:
                return GemmSchedule(**found)
            except (TypeError, ValueError):
                pass  # written by another version of GemmSchedule: ignore it
    return untuned(problem)


# The agent's choices: the tuning-cache kind that holds them, one "GPU" file per card class.
# AGENT_LEGACY_GPU is the file every choice went to before they were kept per class (nothing
# says which card measured those); it is read as AGENT_LEGACY_CARD's, the H100 class, the rule
# the agent's experience store applies to its own unrecorded rows (argus/agent/store.py): the
# class argus.ops.moe gives an unknown card and a host without CUDA, where most of the agent's
# runs planned. It is never written again nor deleted: a class-file entry (a withdrawal too)
# overrides it, key by key.
AGENT_KIND, AGENT_LEGACY_GPU, AGENT_LEGACY_CARD = "matmul_agent", "any", CARD_H100
_WITHDRAWN = {"schedule": None, "ms": None}   # a class file's "no agent schedule" over the legacy


def _agent_card(card: str) -> str:
    if card not in CARDS:
        raise ValueError(f"argus.ops.schedules: card class {card!r} is not one of {CARDS}; "
                         f"fix: pass argus.ops.moe.card_of(device) (CARD_H100 / CARD_H200)")
    return card


def load_agent_choices(card: str) -> dict:
    """Every agent entry card class `card` sees, by problem key: its own file's over, for the
    legacy class, the legacy file's (withdrawals included: their "schedule" is None)."""
    own = tuning_cache.load(AGENT_KIND, _agent_card(card))
    if card != AGENT_LEGACY_CARD:
        return own
    return {**tuning_cache.load(AGENT_KIND, AGENT_LEGACY_GPU), **own}


def agent_choice(key: str, card: str) -> dict | None:
    """The GemmSchedule fields the agent measured fastest for problem `key` on card class
    `card`, or None."""
    entry = load_agent_choices(card).get(key)
    return entry.get("schedule") if isinstance(entry, dict) else None


def record_agent_choice(key: str, params: dict | None, ms: float | None = None, *,
                        card: str) -> None:
    """The agent's way into the matmul tuning cache: `params` (GemmSchedule fields) is the
    fastest correct schedule it measured on card class `card` (argus.ops.moe CARD_H100 /
    CARD_H200: the measuring device's) for the problem whose `Problem.key` is `key` (a GEMM
    task's signature is that key), or None to withdraw the class's entry. `choose` prefers a
    fresh `tune_matmul` entry for the card, then this class's, then the heuristic."""
    if params is not None:
        tuning_cache.write(AGENT_KIND, _agent_card(card), key, {"schedule": dict(params), "ms": ms})
    elif card == AGENT_LEGACY_CARD and key in tuning_cache.load(AGENT_KIND, AGENT_LEGACY_GPU):
        tuning_cache.write(AGENT_KIND, card, key, dict(_WITHDRAWN))  # hides the legacy entry
    else:
        tuning_cache.write(AGENT_KIND, _agent_card(card), key, None)
