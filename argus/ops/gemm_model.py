"""The untuned GEMM choice: an analytic time model of a GemmSchedule on a problem, so the first
call of a shape nobody tuned runs a good schedule without timing anything and compiles one
kernel.

The model, per problem (M, N, K, batch, B layout) and schedule:

    units  = batch * ceil(M / bm) * ceil(N / bn)      (swap-AB: M and N trade places)
    waves  = ceil(units / SMs)                       (the last wave costs a whole wave, however
                                                      empty: wave quantization; ceil also
                                                      charges the padding of ragged tiles)
    steps  = ceil(K / (bk * k_atoms))
    t_step = (max(mma * rate * bm * bn * bk * k_atoms, l2 * operand bytes) + step)
             * pipeline factors (fewer than 4 stages, 2x1 cluster, MN-major B, ping-pong and
             its K term (K / 2048) ** pp_k, one consumer); rate 2 for tf32 (`mma_cost`)
    t_tile = steps * t_step + (epilogue(direct | TMA store, per element, + per staging round)
             + tile (the fixed per-tile cost: refill, scheduling)) / (1 + overlap if ping-pong)
             + nonpersistent (a non-persistent grid's extra per tile)
    time   = waves * t_tile

Operand bytes (`operand_bytes`): what one SM reads from L2 per step, a bm x bk slab of A and a
bk x bn one of B (halved by a 2x1 cluster's B multicast), each times its rows' sector overhead
(`sector_overhead`): a 128-byte box row that starts 16 bytes into a 32-byte sector (a row pitch
of an odd multiple of 16 bytes: K = 8 mod 16 for a K-major operand, N = 8 mod 16 for an N-major
B) costs 1 + `misaligned` times an aligned one. Why (2026-12-04, issue 18): at 3000x5000x2000
NN (B [2000, 5000], pitch 10000 bytes, every other row mid-sector) the 128x256 without clusters
ran 1.16-1.19x the one with 2x1 clusters, 128x128 and 64x256 tiles 1.3-1.6x, while at NT (all
pitches 4000 bytes, aligned) the cluster gained nothing; the model of 2026-12-03 had no operand
traffic and picked the 128x256 without clusters there, 1.189x the best (0.805x cuBLAS). Fitted
on every row, `misaligned` comes out 2.27 (a mid-sector row costs about 3.3 aligned ones: more
than its one extra sector, which TMA's request path would explain; not measured apart) and `l2`
9.6e-6 us per byte (about 14 TB/s over 132 SMs), which binds only there: it changes no pick at
an aligned problem of the data. It rests on that one problem (both layouts): leaving it out of
the fit, nothing constrains `misaligned` and the held-out NN pick stays 1.194x.
`overlap` (fitted 2.1: ping-pong hides about 2/3 of its epilogue and tile cost, where the model
of 2026-12-03 assumed half of the epilogue) moves 4096x3584x18944 NN to the measured best.

Shared-memory stages enter through the stage factor, L2 reuse through the cluster factor (B
multicast halves what the pair reads from L2) and the grouped raster every candidate uses.
The constants are fitted (`fit`, Levenberg-Marquardt on log time) to the per-schedule timings
recorded on an H200 in docs/perf/gemm.md (gemm_model_data.json says which rows, with their
commits); they ship as package data (gemm_model.json) for the H100/H200 class (132 SMs).

`pick` chooses among a problem's tuning candidates (so every choice is legal for it: the
candidate set is built from the problem), leaving out split-K (its sum is a second kernel to
compile), the one of least expected time: the prediction times what the measured rows say of
the model there (`Corrections`): the effect of the schedule's tile kind (bm x bn, consumers,
ping-pong) beyond the offset each measured problem has as a whole, then of the schedule itself
beyond its kind's, each a ridge estimate shrunk toward none by KIND_PRIOR / SCHEDULE_PRIOR
pseudo-problems, times a risk premium that grows as the problems behind those estimates get
fewer (an upper quantile of the time, not its mean). A kind no row measured is extrapolated
and pays the whole premium (UNMEASURED_MARGIN), so it wins only by more than that.

Why problem offsets and a premium by problems measured (2026-12-03, issue 18): the 128x192 tile
was measured at one problem, 2048x7168x2048 NN, where 17 of the 18 schedules timed ran 2-14%
faster than predicted. With the per-kind mean residual (shrunk by one pseudo-row) it took that
problem's offset for its own (factor 0.954, the best of any kind) and won 3000x5000x2000 in both
layouts; on the H200 that pick ran 0.806x cuBLAS (NN). Against the other kinds of its one
problem it was only 2% faster than the model says, and one problem is little evidence: now it
keeps 1/3 of that and pays a premium of about 8% against about 3% for the 128x256 measured at
22 problems.

Why per schedule: the constants price stages, 2x1 clusters and staging rounds alike on every
tile and shape, and the fit (on every candidate of 23 problems of the 2026-12-03 H200 sweep,
354 rows) leaves those factors near nothing; the rows say more. Within its problem the 128x256
tile with 3 stages and the whole tile staged (TMA store) ran 2.0-2.5% faster than the model
said (rasters 8 and 16), the same tile with 4 stages, 2x1 clusters and two staging rounds 0.4%
slower: with tile-kind corrections alone the refitted model picked the latter at 20 of the 23
problems, 1.035x the measured best (geometric mean, worst 1.163x). With the per-schedule
corrections a fit that never saw the problem picks within 1.017x of the measured best
(geometric mean, leaving one shape out, both layouts; worst 1.066x at 8192^3 NN, where the
pick and the best differ only in raster, group_m 16 and 8: in that 1.5 ms case the 20-call
screen and the re-timed finalists differ by up to 9%).

With the 2026-12-04 rows (scripts/gpu_gemm_untuned.py --record: 3000x5000x2000, 4096x3584x18944,
2048x7168x2048; 483 rows fitted, 27 problems) the shipped model picks within 1.016x of the
measured best on the geometric mean (worst 1.066x, 8192^3 NN; exact at 14), and leaving each
shape out 1.035x (worst 1.194x, 3000x5000x2000 NN, above); the model without the L2 and
overlap terms, refitted on the same rows: 1.024x (worst 1.194x) and 1.039x (worst 1.194x).
The rms on log time falls from 0.081 to 0.069.

With the rows of the refit's picks run as picks (2026-12-04 ~01:40 UTC, commit 9155f80: the
same three shapes and 4096x4096x1000, whose K-major rows are 2000 bytes apart; 642 rows, 29
problems) and the ping-pong K term (`pp_k`): rms 0.067, in-sample 1.016x (worst 1.066x, exact
at 14), leaving each shape out 1.0225x, worst 1.138x (32 x 1024^3 NN); the same rows without
the K term 0.067, 1.016x and 1.0280x, worst 1.169x (4096x3584x18944 NT). 3000x5000x2000 NN
left out is now exact: 4096x4096x1000's rows fit `misaligned` without it. The K term: at
2048x7168x2048 NT the ping-pong 128x128 ran 0.974x the 128x224 with 2x1 clusters, at
4096x3584x18944 NT 1.169x, with the same tiles and waves at both (the model: 1.044x, 1.053x).
Fitted it is small (0.003, +0.7% at K = 18944), changes no bf16 pick of
scripts/gpu_gemm_untuned.py's shapes, and its gain left out is one pick whose two leaders the
held-out fit ranks 0.1% apart; kept because leaving shapes out improves, not because it fixes
2048x7168x2048 NT, which it does not (the 128x224 stays the pick: 1.027x the pooled best).
An L2-residency term (L2 bytes dearer by a fitted share as A and B outgrow 50 MB) made the fit
worse (rms 0.070) and was dropped.

What it misses: ping-pong's cost against the cooperative 128x256 grows with K (measured on
older code, same problem: 0.94x at 32 x 1024^3, 0.97-0.98x at 8 x 2048^3, 1.01-1.10x at
K = 4096, 1.05-1.11x at K >= 8192 but for 512 x 8192 x 8192, two waves or less, 0.99-1.00x;
`pp_k` takes a little of it), and each correction
is one number per schedule, so the model keeps the cooperative tile at small K where
ping-pong wins by 5% (32 x 1024^3) and may take ping-pong where a fuller last wave pays for
its slower main loop at large K. Why the margin: a tile kind left out of the fit lands 0.067
rms (log time, within its problem) from what the fitted kinds say, the lone 64-row consumer
0.12 slower, so an extrapolated kind must win by more than about 1.5 times that error. A gain
from wave quantization smaller than the model's error is no gain.

Skinny problems (M * batch <= 256) keep the shape heuristic: its weight-streaming schedules
are the tuned winners already, and the model knows nothing of memory-bound regimes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

CONSTANTS_FILE = Path(__file__).with_name("gemm_model.json")
DATA_FILE = Path(__file__).with_name("gemm_model_data.json")
SKINNY = 256  # M * batch at or below this: the heuristic decides
# The risk premium of a tile kind no row measured: about 1.5 times the error of a kind the fit
# did not see (0.067 rms on log time within its problem, leaving each kind out in turn, on the
# 743d912 rows; the fit's own rms is 0.067 over its 642 rows of 2026-12-04, shape offsets
# included, 0.069 over the 483 before, 0.071 over the 354 before that; the tests hold it < 0.08)
UNMEASURED_MARGIN = 0.10


@dataclass(frozen=True)
class Constants:
    """The model's constants (times in microseconds). Positive by construction (fitted in log
    space); `stage` etc. are fractions."""

    mma: float = 3.5e-7       # us per bm x bn x bk element-step of MMA work
    step: float = 0.04        # us of fixed cost per pipeline step (barriers, descriptors)
    tile: float = 0.05        # us of fixed cost per tile (refill, scheduling)
    epi_direct: float = 1e-4  # us per output element, st.global epilogue
    epi_tma: float = 3e-6     # us per output element, stmatrix + TMA store
    round: float = 0.1        # us per extra staging round (store_cols < bn)
    stage: float = 0.01       # slowdown per stage below 4
    cluster: float = 0.005    # speedup of a 2x1 cluster (beyond its multicast's fewer bytes)
    kn: float = 0.005         # slowdown of an MN-major B
    pingpong: float = 0.01    # slowdown of ping-pong's main loop
    one_wg: float = 0.15      # slowdown of a lone 64-row consumer
    nonpersistent: float = 1.4  # extra us per tile of a non-persistent grid
    l2: float = 1.2e-5        # us per operand byte an SM reads from L2 (~11 TB/s over 132 SMs)
    misaligned: float = 0.25  # extra cost of a box row that starts 16 bytes into a sector
    overlap: float = 1.0      # ping-pong hides overlap / (1 + overlap) of epilogue and tile cost
    pp_k: float = 0.01        # ping-pong's main loop slows by (K / PP_K) ** pp_k

    def as_vector(self) -> list[float]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    @classmethod
    def from_vector(cls, v) -> Constants:
        return cls(*(float(x) for x in v))


@functools.cache
def shipped() -> Constants:
    """The constants fitted on the recorded data (gemm_model.json), or the defaults."""
    try:
        data = json.loads(CONSTANTS_FILE.read_text())
        return Constants(**data["constants"])
    except (OSError, ValueError, TypeError, KeyError):
        return Constants()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def predict_us(p, s, c: Constants | None = None) -> float:
    """Predicted microseconds of schedule `s` (a GemmSchedule) on problem `p` (anything with
    m, n, k, batch and b_layout)."""
    c = c or shipped()
    rows, cols = (p.n, p.m) if getattr(s, "swap_ab", False) else (p.m, p.n)
    splits = max(1, getattr(s, "split_k", 1))
    units = p.batch * splits * _cdiv(rows, s.bm) * _cdiv(cols, s.bn)
    sms = (s.num_sms // s.cluster_m) * s.cluster_m
    waves = _cdiv(units, sms)
    k_atoms = getattr(s, "k_atoms", 1)
    steps = _cdiv(_cdiv(p.k, splits), s.bk * k_atoms)
    factor = 1 + c.stage * max(0, 4 - s.stages)
    if s.cluster_m == 2:
        factor *= 1 - min(c.cluster, 0.5)
    if p.b_layout == "kn":
        factor *= 1 + c.kn
    if s.pingpong:
        factor *= (1 + c.pingpong) * (p.k / splits / PP_K) ** c.pp_k
    elif s.consumers == 1:
        factor *= 1 + c.one_wg
    mma = c.mma * mma_cost(p)
    t_step = (max(mma * s.bm * s.bn * s.bk * k_atoms, c.l2 * operand_bytes(p, s, c))
              + c.step) * factor
    elems = s.bm * s.bn
    if s.epilogue == "tma":
        cols_per_round = getattr(s, "store_cols", 0) or s.bn
        epilogue = c.epi_tma * elems + c.round * (_cdiv(s.bn, cols_per_round) - 1)
    else:
        epilogue = c.epi_direct * elems
    fixed = epilogue + c.tile
    if s.pingpong:  # one warpgroup's epilogue and refill run under the other's main loop
        fixed *= 1 / (1 + c.overlap)
    per_tile = steps * t_step + fixed + (0 if s.persistent else c.nonpersistent)
    tail_splits = getattr(s, "tail_splits", 1)
    if tail_splits > 1 and units % sms:
        # the last partial wave in K slices: whole waves, then rounds of slices of 1/S the
        # steps with an fp32 epilogue, then the sum (not fitted yet: no measured rows)
        tail = units % sms if units > sms else units
        rounds = _cdiv(tail * tail_splits, sms)
        t_slice = _cdiv(steps, tail_splits) * t_step + c.epi_direct * elems + c.tile
        return (waves - 1) * per_tile + rounds * t_slice + c.tile
    return waves * per_tile


# The K at which ping-pong's K term is 1 (`Constants.pp_k`): 2048, the depth of the problem
# where its miss was seen (2048x7168x2048 NT)
PP_K = 2048


def sector_overhead(row_bytes: int, c: Constants) -> float:
    """The L2 traffic of an operand's tile rows over their bytes: TMA reads each 128-byte row
    of a box (64 bf16 along the contiguous dimension) in 32-byte sectors, and a row that starts
    16 bytes into a sector (the row pitch `row_bytes` an odd multiple of 16) reads a fifth
    sector: with a pitch of 10000 bytes (B [2000, 5000] row-major) every other row does,
    1.125x the bytes."""
    aligned = math.gcd(row_bytes, 32) / 32
    return 1 + (1 - aligned) * c.misaligned


def operand_bytes(p, s, c: Constants) -> float:
    """Bytes of A and B one SM reads from L2 per pipeline step: a bm x bk slab of the operand
    the tile's rows index and a bk x bn one of the other, in sectors (`sector_overhead` of
    each operand's row pitch: A [M, K] and an nk B [N, K] are K-major, a kn B [K, N] is
    N-major), the columns' operand halved by a 2x1 cluster's multicast."""
    k_elems = s.bk * getattr(s, "k_atoms", 1)
    elem = element_bytes(p)
    a_pitch = elem * p.k
    b_pitch = elem * (p.n if p.b_layout == "kn" else p.k)
    rows_pitch, cols_pitch = (b_pitch, a_pitch) if getattr(s, "swap_ab", False) else \
        (a_pitch, b_pitch)
    rows = s.bm * k_elems * elem * sector_overhead(rows_pitch, c)
    cols = s.bn * k_elems * elem * sector_overhead(cols_pitch, c) / s.cluster_m
    return rows + cols


def _is_tf32(p) -> bool:
    return getattr(p, "in_dtype", "bf16") in ("tf32", "f32", "float32")


def element_bytes(p) -> int:
    """Bytes of one input element: 4 for a tf32 problem (fp32 inputs: its tiles hold bk = 32
    four-byte elements a 128-byte row, `schedules._fit_tf32`), else 2. Measured points carry no
    dtype: every recorded row is 16-bit (gemm_model_data.json)."""
    return 4 if _is_tf32(p) else 2


# The cost of one tf32 multiply-accumulate against one 16-bit one: Hopper's tf32 wgmma runs at
# half the bf16 rate (dense: 494 against 989 TFLOP/s on the H100 SXM datasheet; the H200 has the
# same SMs and clocks). Not fitted: no tf32 row is recorded.
TF32_MMA = 2.0


def mma_cost(p) -> float:
    """`Constants.mma` (fitted on 16-bit rows) times this for the problem's input type: a tf32
    problem's bk = 32 steps move the bytes of bf16's bk = 64 but take as long in the tensor
    cores as bf16's 64 (`TF32_MMA`), so its MMA time is twice bf16's at the same M, N, K."""
    return TF32_MMA if _is_tf32(p) else 1.0


def pick(p, candidates, c: Constants | None = None, rows: list | None = None,
         priors: tuple | None = None):
    """The candidate of least expected time (`expected_us`; split-K and tail splits left out:
    their sum is a second kernel, and the constants were fitted on no tail-split timing); ties
    go to the earlier candidate. `candidates` are the problem's tuning candidates, all legal
    for it. `rows`: the measured points that correct each tile kind and schedule (default: the
    shipped data, M * batch > SKINNY); `priors`: (kind, schedule) pseudo-problems of
    `corrections` (default KIND_PRIOR, SCHEDULE_PRIOR)."""
    usable = [s for s in candidates if getattr(s, "split_k", 1) == 1
              and getattr(s, "tail_splits", 1) == 1]
    if not usable:
        raise ValueError("gemm_model.pick: no single-kernel candidate to choose from")
    if rows is None and c is None and priors is None:
        factors = shipped_corrections()
    else:
        factors = corrections(_rows() if rows is None else rows, c, *(priors or ()))
    return min(usable, key=lambda s: expected_us(p, s, c, factors))


def expected_us(p, s, c: Constants | None, factors: Corrections) -> float:
    """`predict_us` times what the measured rows say of the model for the schedule and the
    risk of believing them (`Corrections.factor`)."""
    return predict_us(p, s, c) * factors.factor(s)


def tile_kind(s) -> tuple:
    """What of a schedule the fit extrapolates across when no row has it: the tile and how its
    consumers share it (stages, clusters, epilogues, staging rounds and rasters are factors
    and per-element costs the fit sees on every tile)."""
    return (s.bm, s.bn, bool(s.pingpong), s.consumers, bool(s.swap_ab))


# Pseudo-problems of "no effect" in each tile kind's and each schedule's correction (ridge
# priors, in problems measured: a kind measured at one problem keeps 1 / (1 + KIND_PRIOR) of
# what that problem said of it). Chosen by leaving one shape out (`cross_validate`) over
# {0.25 .. 16} x {1 .. 32} on the 2026-12-03 rows (docs/perf/gemm.md): every pair in
# {2 .. 16} x {1 .. 8} picks within 1.017x of the measured best on the geometric mean, worst
# 1.066x, the best of the grid; kind priors below 2 or schedule priors of 16 and more do
# worse (1.019-1.036, worst up to 1.163). Within that plateau the cross-validation cannot
# tell: it leaves both layouts of a shape out, so a kind measured at one shape is unmeasured
# there. The tie is broken by the rows' empirical-Bayes ratios (scatter of a kind's or a
# schedule's effect from one problem to the next over the scatter between kinds or between
# schedules): 1.0 for kinds, 8.1 for schedules; the kind prior nearest is 2, the schedule
# prior 4 (8 is next to the cliff at 16). Of the 16 pairs in {2, 4, 8, 16} x {1, 2, 4, 8},
# 10 make the same choice on every shape of scripts/gpu_gemm_untuned.py; the other 6 (a
# schedule prior of 1, or 8 with a kind prior of 8 or 16) keep 128x192 at 3000x5000x2000,
# where it and the 128x256 are predicted within 0.4% of each other.
KIND_PRIOR = 2.0
SCHEDULE_PRIOR = 4.0


@dataclass(frozen=True)
class Corrections:
    """What the measured rows say of the model, as factors on its prediction, and how much to
    believe them. A problem's rows share an offset (the model misses a whole problem by a few
    percent, every schedule alike: at 2048x7168x2048 NN 17 of 18 ran 2-14% faster than predicted),
    which says nothing of one schedule against another; `kinds` maps a tile kind to exp(its
    effect beyond its problems' offsets), `schedules` a schedule to exp(its effect beyond its
    kind's), each a ridge estimate shrunk toward none by KIND_PRIOR / SCHEDULE_PRIOR
    pseudo-problems (`corrections`). `kind_problems` / `schedule_problems`: on how many
    distinct problems each was measured; `priors`: the pseudo-problems they were shrunk by,
    which also set the risk premium (`factor`)."""

    kinds: dict
    schedules: dict
    kind_problems: dict = dataclasses.field(default_factory=dict)
    schedule_problems: dict = dataclasses.field(default_factory=dict)
    priors: tuple = (KIND_PRIOR, SCHEDULE_PRIOR)

    def uncertainty(self, s) -> float:
        """The standard error of the schedule's corrected log time, in units of one problem's
        scatter: sqrt(1 / (kind problems + kind prior) + 1 / (schedule problems + schedule
        prior)), the posterior spread of the two ridge estimates."""
        kind_prior, schedule_prior = self.priors
        return math.sqrt(1 / (self.kind_problems.get(tile_kind(s), 0) + kind_prior)
                         + 1 / (self.schedule_problems.get(s, 0) + schedule_prior))

    def factor(self, s) -> float:
        """The kind's factor times the schedule's (1 for what no row has), times the risk
        premium exp(z * `uncertainty`): the schedule is ranked by an upper quantile of its
        time, not its mean, so a correction measured on one problem must win by more than one
        measured on twenty. z is set so a kind no row measured pays exactly UNMEASURED_MARGIN
        (the leave-one-kind-out error, module docstring); with the shipped rows the 128x256
        with 3 stages (kind and schedule measured at 23 and 22 problems) pays 3.1%, the
        128x192 with 4 stages (one problem) 8.4%, an unmeasured 128x160 10%."""
        kind_prior, schedule_prior = self.priors
        z = math.log(1 + UNMEASURED_MARGIN) / math.sqrt(1 / kind_prior + 1 / schedule_prior)
        return (self.kinds.get(tile_kind(s), 1.0) * self.schedules.get(s, 1.0)
                * math.exp(z * self.uncertainty(s)))


def corrections(rows, c: Constants | None = None, kind_prior: float = KIND_PRIOR,
                schedule_prior: float = SCHEDULE_PRIOR) -> Corrections:
    """The tile kinds' and then the schedules' effects on log(measured / predicted) over
    `rows` (`Corrections`; why per schedule too: the module docstring).

    Kinds: each problem's rows of a kind are one observation (their mean residual y), and
    y = offset(problem) + effect(kind) is solved by least squares with a ridge of `kind_prior`
    on the effects (the offsets free), so each distinct problem counts once and a kind seen at
    one problem keeps only what it did against the other kinds there, shrunk by 1 / (1 +
    kind_prior). Schedules: the mean over the problems they were timed on of what the offset
    and the kind's effect leave, shrunk by `schedule_prior` pseudo-problems. Deterministic (a
    small dense solve, 31 unknowns on the shipped rows)."""
    import numpy as np

    res = [(pt.group, tile_kind(pt.schedule), pt.schedule,
            math.log(pt.us / predict_us(pt, pt.schedule, c))) for pt in rows]
    cells: dict = {}
    for g, kind, _, r in res:
        cells.setdefault((g, kind), []).append(r)
    problems = sorted({g for g, _ in cells})
    kinds = sorted({kind for _, kind in cells})
    at = {g: i for i, g in enumerate(problems)}
    at.update({kind: len(problems) + i for i, kind in enumerate(kinds)})
    a = np.zeros((len(at), len(at)))
    b = np.zeros(len(at))
    for (g, kind), v in sorted(cells.items()):
        i, j = at[g], at[kind]
        y = sum(v) / len(v)
        a[i, i] += 1
        a[j, j] += 1
        a[i, j] += 1
        a[j, i] += 1
        b[i] += y
        b[j] += y
    for kind in kinds:
        a[at[kind], at[kind]] += kind_prior
    x = np.linalg.solve(a, b) if len(at) else b
    offset = {g: float(x[at[g]]) for g in problems}
    effect = {kind: float(x[at[kind]]) for kind in kinds}
    left: dict = {}
    for g, kind, s, r in res:
        left.setdefault(s, {}).setdefault(g, []).append(r - offset[g] - effect[kind])
    kind_problems: dict = {}
    for _, kind in cells:
        kind_problems[kind] = kind_problems.get(kind, 0) + 1
    schedules = {s: math.exp(sum(sum(v) / len(v) for v in per.values())
                             / (len(per) + schedule_prior)) for s, per in left.items()}
    return Corrections({kind: math.exp(e) for kind, e in effect.items()}, schedules,
                       kind_problems, {s: len(per) for s, per in left.items()},
                       (kind_prior, schedule_prior))


def _rows() -> list:
    try:
        return [pt for pt in load_points() if pt.m * pt.batch > SKINNY]
    except (OSError, ValueError, KeyError):
        return []


@functools.cache
def shipped_corrections() -> Corrections:
    """`corrections` of the shipped constants over the shipped rows."""
    return corrections(_rows())


# ----------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class Point:
    """One measured (problem, schedule, time) row of gemm_model_data.json."""

    m: int
    n: int
    k: int
    batch: int
    b_layout: str
    schedule: object
    us: float
    group: str


def load_points(path: Path = DATA_FILE) -> list[Point]:
    """The recorded measurements, each schedule built as today's GemmSchedule (rows a newer
    GemmSchedule refuses are dropped)."""
    from argus.kernels.gemm import GemmSchedule

    out = []
    for row in json.loads(Path(path).read_text())["points"]:
        try:
            s = GemmSchedule(**row["schedule"])
        except (TypeError, ValueError):
            continue
        group = f"{row['batch']}x{row['m']}x{row['n']}x{row['k']}:{row['b_layout']}"
        out.append(Point(row["m"], row["n"], row["k"], row["batch"], row["b_layout"], s,
                         row["us"], group))
    return out


def fit(points: list[Point], start: Constants | None = None, iterations: int = 200,
        prior: float = 0.05) -> Constants:
    """Least squares on log(predicted / measured) over `points` (Levenberg-Marquardt in the
    logs of the constants, so they stay positive), with a weak pull (`prior`) toward `start`
    for constants the data barely constrain."""
    import numpy as np

    start = start or Constants()
    x0 = np.log(np.array(start.as_vector()))
    measured = np.log(np.array([pt.us for pt in points]))

    def residuals(x):
        c = Constants.from_vector(np.exp(x))
        r = [math.log(predict_us(pt, pt.schedule, c)) for pt in points]
        return np.concatenate([np.array(r) - measured, prior * (x - x0)])

    x, lam = x0.copy(), 1e-2
    r = residuals(x)
    for _ in range(iterations):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            dx = np.zeros_like(x)
            dx[j] = 1e-5
            jac[:, j] = (residuals(x + dx) - r) / 1e-5
        a = jac.T @ jac
        g = jac.T @ r
        step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-9), -g)
        r_new = residuals(x + step)
        if r_new @ r_new < r @ r:
            x, r, lam = x + step, r_new, lam / 3
            if np.abs(step).max() < 1e-7:
                break
        else:
            lam *= 4
    return Constants.from_vector(np.exp(x))


def groups(points: list[Point]) -> dict[str, list[Point]]:
    """The measured schedules of each problem with more than one of them."""
    out: dict[str, list[Point]] = {}
    for pt in points:
        out.setdefault(pt.group, []).append(pt)
    return {g: pts for g, pts in out.items() if len({pt.schedule for pt in pts}) > 1}


def best_measured(pts: list[Point]):
    """(schedule, us) of the fastest measurement in a group (repeats pooled by their mean)."""
    times: dict = {}
    for pt in pts:
        times.setdefault(pt.schedule, []).append(pt.us)
    s, us = min(((s, sum(v) / len(v)) for s, v in times.items()), key=lambda r: r[1])
    return s, us, {s: sum(v) / len(v) for s, v in times.items()}


def write_constants(c: Constants, fitted_on: str, path: Path = CONSTANTS_FILE) -> None:
    path.write_text(json.dumps({"fitted_on": fitted_on, "constants": dataclasses.asdict(c)},
                               indent=1) + "\n")


def points_from_sweep(rows: list[dict], commit: str, source: str) -> list[dict]:
    """gemm_model_data.json rows from the rows of a tuned sweep (scripts/gpu_gemm_bench.py's
    JSON: per case its screen, [ms, repr(GemmSchedule)] of every candidate, and the finalists
    re-timed). A finalist's time is its re-timed one, put on the screen's scale: the finalists
    run after the screen, in alternating rounds of 100 calls, and on the H200 (2026-12-03) ran
    0-9% slower than their own screen times, the three of a case alike (the GPU's clocks, not
    the schedules), so a raw finalist time would rank it below candidates timed earlier.
    Schedules are stored as their fields that differ from GemmSchedule()'s defaults."""
    from argus.kernels.gemm import GemmSchedule

    default = dataclasses.asdict(GemmSchedule())
    out = []
    for row in rows:
        batch = max(1, row["batch"])        # the bench writes 0 for an unbatched case
        screen = {text: ms for ms, text in row["candidates"]}
        final = {text: ms for ms, text in row.get("finalists") or [] if text in screen}
        scale = math.exp(sum(math.log(screen[t] / ms) for t, ms in final.items())
                         / len(final)) if len(final) > 1 else 1.0
        flops = 2 * batch * row["M"] * row["N"] * row["K"]
        for text, ms in screen.items():
            # our own repr() of a GemmSchedule, with no builtins reachable
            s = eval(text, {"__builtins__": {}, "GemmSchedule": GemmSchedule})  # noqa: S307
            refined = text in final and len(final) > 1
            out.append({"batch": batch, "m": row["M"], "n": row["N"], "k": row["K"],
                        "b_layout": "kn" if row["layout"] == "NN" else "nk",
                        "schedule": {k: v for k, v in dataclasses.asdict(s).items()
                                     if default[k] != v},
                        "us": round((final[text] * scale if refined else ms) * 1e3, 2),
                        "timing": "finalist" if refined else "screen",
                        "cublas_tflops": round(flops / row["cublas_ms"] / 1e9, 1),
                        "commit": commit, "source": source})
    return out


def points_from_record(points: list[dict], results: list[dict], commit: str,
                       source: str) -> list[dict]:
    """gemm_model_data.json rows from scripts/gpu_gemm_untuned.py --record's rows (`points`:
    whole schedules as dicts, raw us, commit as $ARGUS_COMMIT or 'unknown') and the same run's
    untuned.json (`results`: cuBLAS's time per case): the schedule as its fields that differ
    from GemmSchedule()'s defaults, us to 0.01, timing 'screen' (20 calls each), the commit and
    source given (how the 2026-12-04 rows were added)."""
    from argus.kernels.gemm import GemmSchedule

    default = dataclasses.asdict(GemmSchedule())
    cublas = {(r["batch"], r["M"], r["N"], r["K"], "kn" if r["layout"] == "NN" else "nk"):
              2 * r["batch"] * r["M"] * r["N"] * r["K"] / r["cublas_ms"] / 1e9
              for r in results if "cublas_ms" in r}
    out = []
    for r in points:
        key = (r["batch"], r["m"], r["n"], r["k"], r["b_layout"])
        row = {"batch": r["batch"], "m": r["m"], "n": r["n"], "k": r["k"],
               "b_layout": r["b_layout"],
               "schedule": {k: v for k, v in r["schedule"].items() if default[k] != v},
               "us": round(r["us"], 2), "timing": "screen"}
        if key in cublas:
            row["cublas_tflops"] = round(cublas[key], 1)
        out.append({**row, "commit": commit, "source": source})
    return out


def shape_of(pt: Point) -> tuple:
    """(batch, M, N, K): a problem in both B layouts (the unit cross-validation leaves out)."""
    return (pt.batch, pt.m, pt.n, pt.k)


def cross_validate(points: list[Point], shapes=None, priors: tuple | None = None,
                   fits: dict | None = None) -> dict[str, tuple]:
    """Leave one shape out: for each shape (both layouts; `shapes`: those only, default all),
    fit on the other shapes' points and pick among the held-out problem's measured schedules
    with that fit's constants and rows (`priors`: `corrections`' pseudo-problems, default the
    shipped ones). group -> (picked schedule, its measured us, the group's best us): picked /
    best is what the model would have lost there. `fits`: a dict to keep each shape's fitted
    constants in across calls (a search over priors refits nothing)."""
    out = {}
    fits = {} if fits is None else fits
    for shape in shapes or sorted({shape_of(pt) for pt in points}):
        train = [pt for pt in points if shape_of(pt) != shape]
        if shape not in fits:
            fits[shape] = fit(train)
        held = groups([pt for pt in points if shape_of(pt) == shape])
        for name, pts in held.items():
            _, best_us, times = best_measured(pts)
            chosen = pick(pts[0], list(times), fits[shape], train,
                          priors or (KIND_PRIOR, SCHEDULE_PRIOR))
            out[name] = (chosen, times[chosen], best_us)
    return out
