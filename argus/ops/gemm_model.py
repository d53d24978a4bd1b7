"""The untuned GEMM choice: an analytic time model of a GemmSchedule on a problem, so the first
call of a shape nobody tuned runs a good schedule without timing anything and compiles one
kernel.

The model, per problem (M, N, K, batch, B layout) and schedule:

    units  = batch * ceil(M / bm) * ceil(N / bn)      (swap-AB: M and N trade places)
    waves  = ceil(units / SMs)                       (the last wave costs a whole wave, however
                                                      empty: wave quantization; ceil also
                                                      charges the padding of ragged tiles)
    steps  = ceil(K / (bk * k_atoms))
    t_step = (mma * bm * bn * bk * k_atoms + step) * pipeline factors
             (fewer than 4 stages, 2x1 cluster multicast, MN-major B, ping-pong, one consumer)
    t_tile = steps * t_step + epilogue(direct | TMA store, per element, + per staging round)
             + tile (the fixed per-tile cost: refill, scheduling; non-persistent grids pay more)
    time   = waves * t_tile

Shared-memory stages enter through the stage factor, L2 reuse through the cluster factor (B
multicast halves what the pair reads from L2) and the grouped raster every candidate uses.
The constants are fitted (`fit`, Levenberg-Marquardt on log time) to the per-schedule timings
recorded on an H200 in docs/perf/gemm.md (gemm_model_data.json says which rows, with their
commits); they ship as package data (gemm_model.json) for the H100/H200 class (132 SMs).

`pick` chooses among a problem's tuning candidates (so every choice is legal for it: the
candidate set is built from the problem), leaving out split-K (its sum is a second kernel to
compile), the one of least expected time: the prediction times what the measured rows of that
tile kind (bm x bn, consumers, ping-pong) say of the model there (their mean log residual,
shrunk toward none by SHRINK pseudo-rows); a kind no row measured is extrapolated and carries
a risk premium of the model's error (UNMEASURED_MARGIN), so it wins only by more than that.
Why: a narrower tile wins in the model by filling the last wave (2048 x 7168: 656 128x176
tiles are 4.97 waves of 132 SMs, 512 128x224 tiles 3.88, so 5 x 176 = 880 columns of waves
against 4 x 224 = 896, 2% less), but it also moves more operand bytes per MMA (per k step a
CTA reads bm + bn / cluster rows for bm x bn products: +15% bytes per product at 176 against
224, +17% at 192 against 256) and has more fixed cost per tile, which the fit sees only
through the tiles it was measured on. On the H200 (2026-12-02, untuned run) the two
wave-filling tiles the model picked ran 5-6% slower than predicted (128x176 at
2048x7168x2048: 90.0 us, predicted 85.7; 128x192, never measured, at 3000x5000x2000: 98 us,
predicted 92.6), while the measured 128x224 there ran at 85.9; the one recorded 128x176 row
(4095x4097x4096) ran 5% slower than predicted too. A gain from wave quantization smaller
than the model's error is no gain.

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
# The risk premium of a tile kind no row measured: about twice the fit's rms error on log time
# (0.046 over its 74 rows; the tests hold it < 0.08)
UNMEASURED_MARGIN = 0.10


@dataclass(frozen=True)
class Constants:
    """The model's constants (times in microseconds). Positive by construction (fitted in log
    space); `stage` etc. are fractions."""

    mma: float = 2.6e-8       # us per bm x bn x bk element-step of MMA work
    step: float = 0.02        # us of fixed cost per pipeline step (barriers, descriptors)
    tile: float = 1.0         # us of fixed cost per tile (refill, scheduling)
    epi_direct: float = 5e-5  # us per output element, st.global epilogue
    epi_tma: float = 3e-5     # us per output element, stmatrix + TMA store
    round: float = 0.5        # us per extra staging round (store_cols < bn)
    stage: float = 0.2        # slowdown per stage below 4
    cluster: float = 0.05     # speedup of a 2x1 cluster (B multicast)
    kn: float = 0.02          # slowdown of an MN-major B
    pingpong: float = 0.2     # slowdown of ping-pong's main loop
    one_wg: float = 0.1       # slowdown of a lone 64-row consumer
    nonpersistent: float = 2.0  # extra us per tile of a non-persistent grid

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
        factor *= 1 + c.pingpong
    elif s.consumers == 1:
        factor *= 1 + c.one_wg
    t_step = (c.mma * s.bm * s.bn * s.bk * k_atoms + c.step) * factor
    elems = s.bm * s.bn
    if s.epilogue == "tma":
        cols_per_round = getattr(s, "store_cols", 0) or s.bn
        epilogue = c.epi_tma * elems + c.round * (_cdiv(s.bn, cols_per_round) - 1)
    else:
        epilogue = c.epi_direct * elems
    if s.pingpong:  # one warpgroup's epilogue runs under the other's main loop
        epilogue *= 0.5
    per_tile = steps * t_step + epilogue + c.tile + (0 if s.persistent else c.nonpersistent)
    tail_splits = getattr(s, "tail_splits", 1)
    if tail_splits > 1 and units % sms:
        # the last partial wave in K slices: whole waves, then rounds of slices of 1/S the
        # steps with an fp32 epilogue, then the sum (not fitted yet: no measured rows)
        tail = units % sms if units > sms else units
        rounds = _cdiv(tail * tail_splits, sms)
        t_slice = _cdiv(steps, tail_splits) * t_step + c.epi_direct * elems + c.tile
        return (waves - 1) * per_tile + rounds * t_slice + c.tile
    return waves * per_tile


def pick(p, candidates, c: Constants | None = None, rows: list | None = None):
    """The candidate of least expected time (`expected_us`; split-K and tail splits left out:
    their sum is a second kernel, and the constants were fitted on no tail-split timing); ties
    go to the earlier candidate. `candidates` are the problem's tuning candidates, all legal
    for it. `rows`: the measured points that correct each tile kind (default: the shipped
    data, M * batch > SKINNY)."""
    usable = [s for s in candidates if getattr(s, "split_k", 1) == 1
              and getattr(s, "tail_splits", 1) == 1]
    if not usable:
        raise ValueError("gemm_model.pick: no single-kernel candidate to choose from")
    factors = shipped_corrections() if rows is None and c is None else corrections(
        _rows() if rows is None else rows, c)
    return min(usable, key=lambda s: expected_us(p, s, c, factors))


def expected_us(p, s, c: Constants | None, factors: dict) -> float:
    """`predict_us` times what the measured rows of the schedule's tile kind say of the model
    there (`corrections`), or, for a kind never measured, times 1 + UNMEASURED_MARGIN."""
    return predict_us(p, s, c) * factors.get(tile_kind(s), 1 + UNMEASURED_MARGIN)


def tile_kind(s) -> tuple:
    """What of a schedule the fit extrapolates across when no row has it: the tile and how its
    consumers share it (stages, clusters, epilogues, staging rounds and rasters are factors
    and per-element costs the fit sees on every tile)."""
    return (s.bm, s.bn, bool(s.pingpong), s.consumers, bool(s.swap_ab))


SHRINK = 1.0  # pseudo-rows of "the model is right" in each tile kind's mean residual


def corrections(rows, c: Constants | None = None) -> dict:
    """tile kind -> exp(mean of log(measured / predicted) over its rows), shrunk toward 1 by
    SHRINK pseudo-rows (one row says less than ten)."""
    logs: dict = {}
    for pt in rows:
        logs.setdefault(tile_kind(pt.schedule), []).append(
            math.log(pt.us / predict_us(pt, pt.schedule, c)))
    return {kind: math.exp(sum(v) / (len(v) + SHRINK)) for kind, v in logs.items()}


def _rows() -> list:
    try:
        return [pt for pt in load_points() if pt.m * pt.batch > SKINNY]
    except (OSError, ValueError, KeyError):
        return []


@functools.cache
def shipped_corrections() -> dict:
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
