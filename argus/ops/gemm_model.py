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
compile), the one of least expected time: the prediction times what the measured rows say of
the model there (`Corrections`): the mean log residual of the schedule's tile kind (bm x bn,
consumers, ping-pong), then of the schedule itself over what the kind's leaves, each shrunk
toward none by SHRINK pseudo-rows. A kind no row measured is extrapolated and carries a risk
premium (UNMEASURED_MARGIN), so it wins only by more than that.

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

What it misses: ping-pong's cost against the cooperative 128x256 grows with K (measured, same
problem: 0.94x at 32 x 1024^3, 0.97-0.98x at 8 x 2048^3, 1.01-1.10x at K = 4096, 1.05-1.11x
at K >= 8192 but for 512 x 8192 x 8192, two waves or less, 0.99-1.00x), and each correction
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
# did not see (0.067 rms on log time within its problem, leaving each kind out in turn; the
# fit's own rms is 0.071 over its 354 rows, shape offsets included; the tests hold it < 0.08)
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
    for it. `rows`: the measured points that correct each tile kind and schedule (default: the
    shipped data, M * batch > SKINNY)."""
    usable = [s for s in candidates if getattr(s, "split_k", 1) == 1
              and getattr(s, "tail_splits", 1) == 1]
    if not usable:
        raise ValueError("gemm_model.pick: no single-kernel candidate to choose from")
    factors = shipped_corrections() if rows is None and c is None else corrections(
        _rows() if rows is None else rows, c)
    return min(usable, key=lambda s: expected_us(p, s, c, factors))


def expected_us(p, s, c: Constants | None, factors: Corrections) -> float:
    """`predict_us` times what the measured rows say of the model for the schedule
    (`Corrections.factor`): its tile kind's correction and its own, or, for a tile kind never
    measured, 1 + UNMEASURED_MARGIN."""
    return predict_us(p, s, c) * factors.factor(s)


def tile_kind(s) -> tuple:
    """What of a schedule the fit extrapolates across when no row has it: the tile and how its
    consumers share it (stages, clusters, epilogues, staging rounds and rasters are factors
    and per-element costs the fit sees on every tile)."""
    return (s.bm, s.bn, bool(s.pingpong), s.consumers, bool(s.swap_ab))


SHRINK = 1.0  # pseudo-rows of "the model is right" in each mean residual


@dataclass(frozen=True)
class Corrections:
    """What the measured rows say of the model, as factors on its prediction: `kinds` maps a
    tile kind to exp(mean log(measured / predicted)) over its rows, `schedules` maps a
    schedule to the same mean over its own rows of what its kind's factor leaves, both shrunk
    toward 1 by SHRINK pseudo-rows (one row says less than twenty)."""

    kinds: dict
    schedules: dict

    def factor(self, s) -> float:
        """A measured kind's factor times the schedule's own (1 for a schedule no row has: its
        stages, clusters and epilogue are factors the fit sees on every kind); a kind no row
        measured: 1 + UNMEASURED_MARGIN."""
        kind = self.kinds.get(tile_kind(s))
        if kind is None:
            return 1 + UNMEASURED_MARGIN
        return kind * self.schedules.get(s, 1.0)


def corrections(rows, c: Constants | None = None) -> Corrections:
    """The tile kinds' and then the schedules' mean log residuals over `rows` (`Corrections`;
    why per schedule too: the module docstring). A schedule's mean is over the problems it was
    timed on (22-23 for each 128x256 and 128x128 candidate in the shipped data), so it says
    what the schedule does on any shape; the constants keep the shape dependence (waves,
    steps, padding)."""
    logs: dict = {}
    for pt in rows:
        logs.setdefault(tile_kind(pt.schedule), []).append(
            (pt.schedule, math.log(pt.us / predict_us(pt, pt.schedule, c))))
    kinds = {kind: sum(r for _, r in v) / (len(v) + SHRINK) for kind, v in logs.items()}
    left: dict = {}
    for kind, v in logs.items():
        for s, r in v:
            left.setdefault(s, []).append(r - kinds[kind])
    return Corrections({k: math.exp(v) for k, v in kinds.items()},
                       {s: math.exp(sum(v) / (len(v) + SHRINK)) for s, v in left.items()})


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
            s = eval(text, {"__builtins__": {}, "GemmSchedule": GemmSchedule})  # noqa: S307 - our own repr()
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


def shape_of(pt: Point) -> tuple:
    """(batch, M, N, K): a problem in both B layouts (the unit cross-validation leaves out)."""
    return (pt.batch, pt.m, pt.n, pt.k)


def cross_validate(points: list[Point], shapes=None) -> dict[str, tuple]:
    """Leave one shape out: for each shape (both layouts; `shapes`: those only, default all),
    fit on the other shapes' points and pick among the held-out problem's measured schedules
    with that fit's constants and rows. group -> (picked schedule, its measured us, the
    group's best us): picked / best is what the model would have lost there."""
    out = {}
    for shape in shapes or sorted({shape_of(pt) for pt in points}):
        train = [pt for pt in points if shape_of(pt) != shape]
        constants = fit(train)
        held = groups([pt for pt in points if shape_of(pt) == shape])
        for name, pts in held.items():
            _, best_us, times = best_measured(pts)
            chosen = pick(pts[0], list(times), constants, train)
            out[name] = (chosen, times[chosen], best_us)
    return out
