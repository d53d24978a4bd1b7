"""The untuned GEMM choice (argus/ops/gemm_model.py) without a GPU: the shipped constants are
what `fit` makes of the shipped rows; the shipped model picks within a few percent of the
measured best of every recorded problem (every tuning candidate timed on the H200,
2026-12-03), and so does a fit that never saw the problem (leave one shape out); the
per-schedule corrections are what make that so; the predictions track the recorded times; the
model's wave and padding arithmetic; the sweep's JSON becomes data rows; and the choice is
always a legal single-kernel candidate of the problem (so a first call compiles one kernel)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from argus.kernels.gemm import GemmSchedule
from argus.ops import gemm_model as G
from argus.ops import schedules
from argus.ops.schedules import Problem, candidates


@pytest.fixture(scope="module")
def points():
    """The rows the model is fitted on and corrected by (M * batch > SKINNY)."""
    return [pt for pt in G.load_points() if pt.m * pt.batch > G.SKINNY]


def _picks(groups, constants, rows=None):
    """group -> (picked schedule, its measured us, the group's best us)."""
    out = {}
    for name, pts in groups.items():
        best, best_us, times = G.best_measured(pts)
        pick = G.pick(pts[0], list(times), constants, rows)
        out[name] = (pick, times[pick], best_us)
    return out


def _geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs))


def test_shipped_constants_are_the_fitted_ones(points):
    data = G.CONSTANTS_FILE.read_text()
    assert "gemm_model_data.json" in data and "H200" in data
    assert G.shipped() != G.Constants()   # fitted, not the starting point
    # and refitting the shipped rows gives them back (the data and the constants agree)
    refit = G.fit(points).as_vector()
    assert refit == pytest.approx(G.shipped().as_vector(), rel=1e-3)


def test_the_data_is_of_the_code_it_models(points):
    """Every row is of the sweep at 743d912 (the warp-uniform role index) or of the untuned
    runs' --record at 654cde7 and 9155f80 (2048x7168x2048, timed by all three, agrees within
    2.4%), and each problem has every schedule it measured among its candidates today, each
    timed once per commit."""
    import json

    rows = json.loads(G.DATA_FILE.read_text())["points"]
    assert {r["commit"] for r in rows} == {"743d912", "654cde7", "9155f80"}
    assert not any((r["m"], r["n"], r["k"], r["b_layout"]) == (4095, 4097, 4096, "kn")
                   for r in rows)   # B copied into an aligned buffer first: not modelled
    for name, pts in G.groups(points).items():
        p = pts[0]
        problem = Problem(p.m, p.n, p.k, p.batch, "bf16", "bf16", p.b_layout, p.n % 8 == 0)
        assert {pt.schedule for pt in pts} <= set(candidates(problem)), name
    for name, commits in _commits_of_rows(rows).items():
        for commit, schedules_timed in commits.items():
            assert len(set(schedules_timed)) == len(schedules_timed), (name, commit)


def _commits_of_rows(rows) -> dict:
    """problem -> commit -> the schedules (as sorted field tuples) its rows timed."""
    out: dict = {}
    for r in rows:
        name = (r["batch"], r["m"], r["n"], r["k"], r["b_layout"])
        out.setdefault(name, {}).setdefault(r["commit"], []).append(
            tuple(sorted(r["schedule"].items())))
    return out


def test_shipped_model_picks_near_the_measured_best(points):
    """On every recorded problem (23, all candidates timed) the pick measured within 7% of the
    best, 2% on the geometric mean (1.016 and 1.066 at the fit of 2026-12-03 with the problem
    offsets and premiums of issue 18; 1.018 before); exact at 11."""
    picks = _picks(G.groups(points), G.shipped())
    assert len(picks) >= 20
    ratios = {name: us / best_us for name, (_, us, best_us) in picks.items()}
    assert _geomean(ratios.values()) < 1.025, ratios
    assert max(ratios.values()) < 1.08, ratios
    assert sum(r == 1 for r in ratios.values()) >= 8, ratios


def test_per_schedule_corrections_pick_better_than_tile_kinds_alone(points):
    """The reason for `Corrections.schedules`: with the tile kinds' factors alone the refitted
    model picks the 4-stage, 2x1-cluster, two-round 128x256 almost everywhere, which measured
    slower than the 3-stage whole-tile one (1.035x the best on the geometric mean, 1.163x worst
    on 2026-12-03)."""
    factors = G.shipped_corrections()
    alone = G.Corrections(factors.kinds, {}, factors.kind_problems)
    with_kinds, with_schedules = [], []
    for pts in G.groups(points).values():
        _, best_us, times = G.best_measured(pts)
        usable = list(times)
        by_kind = min(usable, key=lambda s: G.expected_us(pts[0], s, G.shipped(), alone))
        with_kinds.append(times[by_kind] / best_us)
        with_schedules.append(times[G.pick(pts[0], usable)] / best_us)
    assert _geomean(with_schedules) < _geomean(with_kinds) - 0.01
    assert max(with_schedules) < max(with_kinds)


# Leave one shape out: fitted without these problems (both layouts), the model still picks the
# fastest measured schedule of each (the ping-pong at 2048x7168x2048 NN, the cooperative 128x256
# at 8192x28672x8192, the ping-pong with the direct epilogue at the ragged 4095x4097x4096) but
# 2048x7168x2048 NT: there the 128x224 with 2x1 clusters (3.3% slower than the ping-pong
# 128x128), a kind that ran 15% faster than predicted at 4096x3584x18944 NT (2026-12-04)
HELD_OUT = ((1, 2048, 7168, 2048), (1, 8192, 28672, 8192), (1, 4095, 4097, 4096))


def test_a_fit_without_some_problems_picks_their_best(points):
    held = G.cross_validate(points, HELD_OUT)
    assert len(held) == 5   # 4095x4097x4096 NN is not in the data
    for name, (pick, us, best_us) in held.items():
        bound = 1.035 if name == "1x2048x7168x2048:nk" else 1.0
        assert us <= bound * best_us, f"{name}: picked {pick} ({us} us), best {best_us} us"
    assert {s.pingpong for s, _, _ in held.values()} == {True, False}


@pytest.mark.slow
def test_leave_one_shape_out_over_every_problem(points):
    """The honest estimate of the pick on a problem the fit never saw: every shape left out
    in turn. 1.017x the measured best on the geometric mean, worst 1.066x, on the 743d912 rows
    (2026-12-03); with the 654cde7 rows 1.0345x, worst 1.194x (3000x5000x2000 NN, then the one
    problem with rows starting mid-sector: left out, nothing fitted `misaligned`); with the
    9155f80 rows (4096x4096x1000 has such rows too) 1.0280x, worst 1.169x (4096x3584x18944 NT)
    before the ping-pong K term, 1.0225x, worst 1.138x with it (32x1024^3 NN: ping-pong's gain at
    small K, the module docstring's known miss). The K term's gain is one pick, 4096x3584x18944
    NT, whose two leaders the held-out fit ranks 0.1% apart: fragile, but the criterion for
    keeping a term."""
    held = G.cross_validate(points)
    ratios = {name: us / best_us for name, (_, us, best_us) in held.items()}
    assert len(ratios) == len(G.groups(points))
    assert _geomean(ratios.values()) < 1.025 and max(ratios.values()) < 1.14, ratios
    assert ratios["1x3000x5000x2000:kn"] < 1.01, ratios


def test_predictions_track_the_recorded_times(points):
    logs = [math.log(G.predict_us(pt, pt.schedule) / pt.us) for pt in points]
    rms = math.sqrt(sum(x * x for x in logs) / len(logs))
    assert rms < 0.08, rms
    # and the fit improves on the starting constants
    start = [math.log(G.predict_us(pt, pt.schedule, G.Constants()) / pt.us) for pt in points]
    assert rms < math.sqrt(sum(x * x for x in start) / len(start))
    # what a pick sees: within each problem, after the corrections (0.035 on 2026-12-03)
    factors = G.shipped_corrections()
    within = []
    for pts in G.groups(points).values():
        r = [math.log(G.expected_us(pt, pt.schedule, None, factors) / pt.us) for pt in pts]
        within += [x - sum(r) / len(r) for x in r]
    assert math.sqrt(sum(x * x for x in within) / len(within)) < 0.045


def test_points_from_a_sweep_row():
    """A case of scripts/gpu_gemm_bench.py's JSON: the screen's times, the finalists' re-timed
    ones scaled onto the screen's (their mean ratio), batch 0 as 1, NN as kn, the schedule as
    its fields that differ from the defaults; load_points reads the schedule back."""
    import json

    a, b, c = (GemmSchedule(stages=3, epilogue="tma"), GemmSchedule(stages=4, cluster_m=2),
               GemmSchedule(bm=128, bn=128, stages=6, pingpong=True))
    row = {"batch": 0, "M": 4096, "N": 4096, "K": 4096, "layout": "NN", "cublas_ms": 0.2,
           "candidates": [[0.100, repr(a)], [0.110, repr(b)], [0.130, repr(c)]],
           "finalists": [[0.105, repr(a)], [0.1155, repr(b)]]}
    rows = G.points_from_sweep([row], "abc1234", "a test")
    assert [r["timing"] for r in rows] == ["finalist", "finalist", "screen"]
    # both finalists ran 5% slower than their screen: scaled back onto it
    assert [r["us"] for r in rows] == pytest.approx([100.0, 110.0, 130.0])
    assert rows[0]["schedule"] == {"stages": 3, "epilogue": "tma"}
    assert all(r["batch"] == 1 and r["b_layout"] == "kn" for r in rows)
    assert rows[0]["cublas_tflops"] == pytest.approx(2 * 4096 ** 3 / 0.2e-3 / 1e12, rel=1e-3)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.json"
        path.write_text(json.dumps({"points": rows}))
        assert [pt.schedule for pt in G.load_points(path)] == [a, b, c]


def test_the_2026_12_04_rows_are_the_record_converted():
    """The data's 654cde7 rows are what points_from_record makes of the run's --record rows:
    a record row (whole schedule, raw us) converts to the stored form, and every stored row
    of that commit reads back as a candidate of its problem (test_the_data_is_of_...)."""
    import dataclasses
    import json

    s = GemmSchedule(bn=192, stages=4, epilogue="tma", cluster_m=2)
    rec = [{"batch": 1, "m": 3000, "n": 5000, "k": 2000, "b_layout": "nk",
            "schedule": dataclasses.asdict(s), "us": 92.6199951171875, "commit": "unknown"}]
    res = [{"batch": 1, "M": 3000, "N": 5000, "K": 2000, "layout": "NT", "cublas_ms": 0.0876}]
    row, = G.points_from_record(rec, res, "654cde7", "a test")
    assert row["schedule"] == {"bn": 192, "epilogue": "tma", "cluster_m": 2}   # stages=4: default
    assert row["us"] == 92.62 and row["timing"] == "screen" and row["commit"] == "654cde7"
    assert row["cublas_tflops"] == pytest.approx(2 * 3000 * 5000 * 2000 / 0.0876e-3 / 1e12,
                                                 abs=0.1)
    stored = [r for r in json.loads(G.DATA_FILE.read_text())["points"]
              if r["commit"] == "654cde7"]
    assert len(stored) == 129
    assert {k: row[k] for k in ("schedule", "us")} in [
        {k: r[k] for k in ("schedule", "us")} for r in stored]


def test_waves_and_padding():
    s = GemmSchedule(stages=4)                    # 128 x 256 tiles, 132 SMs
    p = Problem(128 * 132, 256, 4096, 1, "bf16", "bf16", "nk", True)
    one_wave = G.predict_us(p, s)
    # one more row: 132 more tiles of padding, a second wave of equal cost
    two = G.predict_us(Problem(128 * 132 + 1, 256, 4096, 1, "bf16", "bf16", "nk", True), s)
    assert two == pytest.approx(2 * one_wave)
    # fewer tiles than SMs cost the same as a full wave (idle SMs are not faster)
    assert G.predict_us(Problem(128, 256, 4096, 1, "bf16", "bf16", "nk", True), s) == \
        pytest.approx(one_wave)


def test_the_model_fixes_the_issues_worst_untuned_cases(points):
    """Issue 18: 2048x7168x2048 (448 128x256 tiles, 3.4 waves) ran the 128x256 heuristic, and
    the untuned run of 2026-12-02 its 128x176 2x1-cluster pick at 0.866x cuBLAS; the model of
    2026-12-03 took the 128x176 without clusters for NT (0.923x on the H200), a kind measured at
    two problems whose correction was mostly this problem's offset. Since then NN takes the
    ping-pong 128x128 (896 tiles, 6.8 waves), a kind measured at every problem, the fastest
    measured there; NT since 2026-12-04 the 128x224 with 2x1 clusters (512 tiles, 3.9 waves),
    measured at three problems, 1.033x the ping-pong there (recorded rows). Both are predicted
    well ahead of the heuristic's 128x256."""
    measured = G.groups(points)
    factors = G.shipped_corrections()
    for layout in ("kn", "nk"):
        p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", layout, True)
        s = schedules.untuned(p)
        assert s.bn < 256 and G.predict_us(p, s) < 0.95 * G.predict_us(p, schedules.heuristic(p))
        assert factors.kind_problems[G.tile_kind(s)] >= 3
        _, best_us, times = G.best_measured(measured[f"1x2048x7168x2048:{layout}"])
        assert times[s] < 1.035 * best_us, (layout, s, times[s], best_us)
        assert s.pingpong == (layout == "kn")


# The shapes of the untuned runs of 2026-12-04 (scripts/gpu_gemm_untuned.py --record, H200):
# the first's picks measured 1.079x (NT) and 1.189x (NN) the best at 3000x5000x2000, 1.112x /
# 1.041x at 4096x3584x18944; the refit on its rows picks within 3.5% of the best of the
# recorded rows at each, and the second run (9155f80, the refit's picks run as picks, plus
# 4096x4096x1000) keeps every pick. Pick over best by the pooled rows of both runs: exact but
# 2048x7168x2048 NT (1.027: `test_the_model_fixes_...`), 4096x3584x18944 NN (the ping-pong
# 128x128 tma: 781.5 then 826.5 us, 1.006x the pooled best, 799.6 us) and 4096x4096x1000 NN
# (the 128x256 s3 g16, 1.032x the 128x256 s4 c2 sc128 of NT's pick: one run)
TODAY = ((3000, 5000, 2000), (4096, 3584, 18944), (2048, 7168, 2048), (4096, 4096, 1000))
TODAY_BOUNDS = {(TODAY[2], "nk"): 1.035, (TODAY[1], "kn"): 1.01, (TODAY[3], "kn"): 1.035}


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("shape", TODAY)
def test_the_refit_picks_near_the_recorded_best_of_the_2026_12_04_run(points, shape, layout):
    m, n, k = shape
    pts = G.groups(points)[f"1x{m}x{n}x{k}:{layout}"]
    _, best_us, times = G.best_measured(pts)
    assert len(times) >= 15   # every single-kernel candidate was timed
    s = schedules.untuned(Problem(m, n, k, 1, "bf16", "bf16", layout, True))
    assert s in times, f"{shape} {layout}: the pick {s} was not timed"
    assert times[s] <= TODAY_BOUNDS.get((shape, layout), 1.0) * best_us, \
        (shape, layout, s, times[s], best_us)


def test_misaligned_rows_cost_l2_bytes():
    """The L2 term (2026-12-04): a box row that starts mid-sector costs `misaligned` more. At
    3000x5000x2000 NN, B [2000, 5000] has a 10000-byte pitch (every other row 16 bytes into a
    sector): measured, the 128x256 without clusters ran 1.16-1.19x the one with 2x1 clusters
    (B multicast halves its bytes) at NN but 0.98x at NT, whose pitches (4000 bytes) are
    sector-aligned. The model, fitted, says the same of the ratio's direction and size."""
    c = G.shipped()
    assert G.sector_overhead(4000, c) == 1.0 and G.sector_overhead(8192, c) == 1.0
    assert G.sector_overhead(10000, c) == pytest.approx(1 + c.misaligned / 2)
    assert c.misaligned > 1.0    # fitted: a misaligned row costs over twice an aligned one
    one, two = GemmSchedule(stages=3, epilogue="tma"), \
        GemmSchedule(stages=3, epilogue="tma", cluster_m=2)
    nn = Problem(3000, 5000, 2000, 1, "bf16", "bf16", "kn", True)
    nt = Problem(3000, 5000, 2000, 1, "bf16", "bf16", "nk", True)
    assert G.predict_us(nn, one, c) / G.predict_us(nn, two, c) > 1.10
    assert G.predict_us(nt, one, c) / G.predict_us(nt, two, c) < 1.02
    # K-major A with K = 1000 (a 2000-byte pitch) is misaligned alike; swap-AB trades them
    odd = Problem(4096, 4096, 1000, 1, "bf16", "bf16", "nk", True)
    assert G.operand_bytes(odd, one, c) > G.operand_bytes(nt, one, c)


def test_ping_pongs_main_loop_slows_with_k():
    """`Constants.pp_k` (2026-12-04, issue 18): ping-pong's per-step cost grows as (K / 2048) **
    pp_k. Why: at 2048x7168x2048 NT the ping-pong 128x128 ran 0.974x the 128x224 with 2x1
    clusters and at 4096x3584x18944 NT 1.169x (the same tiles per SM and waves at both: 896 and
    512 tiles, 6.8 and 3.9 waves), where the model said 1.044x and 1.053x. Fitted, it is small
    (0.003: +0.7% at K 18944) and moves no bf16 pick of scripts/gpu_gemm_untuned.py's shapes; it
    is kept because leaving each shape out improves with it (1.0280x -> 1.0225x the measured
    best, worst 1.169x -> 1.138x: test_leave_one_shape_out_over_every_problem)."""
    c = G.shipped()
    assert 0 < c.pp_k < 0.05
    pp = GemmSchedule(bm=128, bn=128, stages=6, pingpong=True, epilogue="tma", store_cols=64)
    wide = GemmSchedule(bn=224, epilogue="tma", cluster_m=2, store_cols=192)
    ratio = {k: G.predict_us(Problem(2048, 7168, k, 1, "bf16", "bf16", "nk", True), pp, c)
             / G.predict_us(Problem(2048, 7168, k, 1, "bf16", "bf16", "nk", True), wide, c)
             for k in (1024, 2048, 8192, 32768)}
    assert ratio[1024] < ratio[2048] < ratio[8192] < ratio[32768], ratio
    flat = dataclasses.replace(c, pp_k=0.0)
    assert G.predict_us(Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True), pp, c) == \
        pytest.approx(G.predict_us(Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True), pp,
                                   flat))   # 1 at K = PP_K


def test_tf32_operands_are_four_byte_rows():
    """A tf32 problem's tiles hold 4-byte elements (bk = 32, 128-byte rows): its L2 bytes and
    row pitches are twice a bf16 problem's at the same K, so K = 1000 is a 4000-byte pitch,
    sector-aligned, where bf16's 2000 bytes is not (review 2026-12-04: the term assumed 2)."""
    c = G.shipped()
    s = GemmSchedule(bk=32, stages=3, epilogue="tma")
    tf32 = Problem(4096, 4096, 1000, 1, "tf32", "f32", "nk", True)
    aligned = Problem(4096, 4096, 1024, 1, "tf32", "f32", "nk", True)
    bf16 = Problem(4096, 4096, 1000, 1, "bf16", "bf16", "nk", True)
    assert G.element_bytes(tf32) == 4 and G.element_bytes(bf16) == 2
    assert G.operand_bytes(tf32, s, c) == pytest.approx(G.operand_bytes(aligned, s, c))
    assert G.operand_bytes(tf32, s, c) == pytest.approx((s.bm + s.bn) * 32 * 4)
    assert G.operand_bytes(bf16, s, c) > (s.bm + s.bn) * 32 * 2


def test_tf32_multiplies_at_half_the_bf16_rate():
    """Hopper's tf32 wgmma runs at half the bf16 rate (494 against 989 dense TFLOP/s, H100 SXM
    datasheet): a tf32 problem's main loop takes about twice a bf16 one's at the same M, N, K
    (bk = 32 steps: twice the steps, each the bytes and tensor-core time of bf16's bk = 64).
    Without the rate (the constants fitted on bf16 only) the model called tf32 about as fast as
    bf16, and with 4-byte elements alone the L2 term bound on every tf32 step (half the MMA time
    for the same bytes): 8 of 30 untuned tf32 picks moved for that alone (7 off ping-pong)."""
    c = G.shipped()
    for m, n, k in ((8192, 8192, 8192), (2048, 7168, 2048)):
        bf16 = Problem(m, n, k, 1, "bf16", "bf16", "nk", True)
        tf32 = Problem(m, n, k, 1, "tf32", "bf16", "nk", True)
        s = GemmSchedule(stages=4, epilogue="tma", cluster_m=2, store_cols=128)
        ratio = G.predict_us(tf32, dataclasses.replace(s, bk=32), c) / G.predict_us(bf16, s, c)
        assert 1.85 < ratio < 2.1, (m, n, k, ratio)
        # the tensor cores bind, not L2: the same bytes per step as bf16's, twice the MMA time
        mma = c.mma * G.mma_cost(tf32) * s.bm * s.bn * 32
        assert c.l2 * G.operand_bytes(tf32, dataclasses.replace(s, bk=32), c) < mma
    assert G.mma_cost(Problem(64, 64, 64, 1, "tf32", "f32", "nk", True)) == G.TF32_MMA == 2.0


def test_tf32_at_k_1000_picks_as_at_its_aligned_neighbours():
    """K = 1000 is a misaligned pitch for bf16 (2000 bytes, where the model takes 2x1 clusters)
    but not for tf32 (4000 bytes), and at half rate the L2 term binds on no tf32 schedule
    here: the untuned tf32 pick at K = 1000 is the one at K = 1024 and 2048 (before the rate it
    was the 128x256 with 2x1 clusters, picked for an L2 cost tf32 does not pay)."""
    pick = {k: schedules.untuned(Problem(4096, 4096, k, 1, "tf32", "f32", "nk", True))
            for k in (1000, 1024, 2048)}
    assert pick[1000] == pick[1024] == pick[2048], pick
    assert all(s.bk == 32 for s in pick.values())
    bf16 = schedules.untuned(Problem(4096, 4096, 1000, 1, "bf16", "f32", "nk", True))
    assert bf16.cluster_m == 2   # bf16's misaligned rows keep the clusters


def test_an_unmeasured_tile_carries_the_margin():
    """512x5000x4096 x @ W.T, corrected by the shipped rows less the 128x160's (measured at one
    problem since 2026-12-04): no 128x160 row, so 128x160 candidates pay exactly
    UNMEASURED_MARGIN, more than any measured kind's premium; the premium falls as the problems
    behind a kind grow. Without rows (nothing measured, every kind alike) the least predicted
    candidate is picked."""
    p = Problem(512, 5000, 4096, 1, "bf16", "bf16", "nk", True)
    factors = G.corrections([pt for pt in G._rows() if pt.schedule.bn != 160])
    narrow = [c for c in candidates(p) if c.bn == 160]
    assert narrow and all(G.tile_kind(c) not in factors.kinds for c in narrow)
    assert all(factors.factor(c) == pytest.approx(1 + G.UNMEASURED_MARGIN) for c in narrow)
    measured = [c for c in candidates(p) if G.tile_kind(c) in factors.kinds]
    assert max(factors.uncertainty(c) for c in measured) < factors.uncertainty(narrow[0])
    by_count = sorted(measured, key=lambda c: factors.kind_problems[G.tile_kind(c)])
    assert factors.uncertainty(by_count[0]) > factors.uncertainty(by_count[-1])
    usable = [c for c in candidates(p) if c.split_k == 1 and c.tail_splits == 1]
    assert G.pick(p, candidates(p), rows=[]) == min(usable, key=lambda c: G.predict_us(p, c))


WIDE = GemmSchedule(stages=3, epilogue="tma")                 # 128 x 256
NARROW = GemmSchedule(bn=192, stages=4, epilogue="tma")       # 128 x 192


def _rows_at(problem, schedules_and_factors, group):
    """Rows of `problem` whose times are the model's prediction times the given factors."""
    return [G.Point(problem.m, problem.n, problem.k, problem.batch, problem.b_layout, s,
                    f * G.predict_us(problem, s), group) for s, f in schedules_and_factors]


def _problem(i):
    return Problem(1024 + 256 * i, 4096 + 512 * (i % 5), 2048 + 1024 * (i % 3), 1, "bf16",
                   "bf16", "nk", True)


def test_a_one_problem_correction_does_not_beat_a_well_measured_schedule():
    """Issue 18 (3000x5000x2000 NN picked a 128x192 measured at one problem: 0.806x cuBLAS).
    The wide tile is measured at 20 problems as predicted; the narrow one at one of them, 5%
    faster than the model says there (the wide one as predicted): at a problem where the
    narrow one's prediction is 1.7% better, the well-measured wide tile is picked, since the
    narrow tile's one problem buys it only part of its 5% and a larger premium. Measured 5%
    fast at all 20 problems, the same narrow tile wins."""
    rows = [pt for i in range(20) for pt in _rows_at(_problem(i), [(WIDE, 1.0)], f"p{i}")]
    once = rows + _rows_at(_problem(0), [(NARROW, 0.95)], "p0")
    often = rows + [pt for i in range(20) for pt in _rows_at(_problem(i), [(NARROW, 0.95)],
                                                              f"p{i}")]
    new = Problem(4096, 9728, 4096, 1, "bf16", "bf16", "nk", True)
    gain = G.predict_us(new, NARROW) / G.predict_us(new, WIDE)
    assert 0.975 < gain < 0.99   # the narrow tile is predicted 1-2.5% faster there
    assert G.pick(new, [WIDE, NARROW], rows=once) == WIDE
    assert G.pick(new, [WIDE, NARROW], rows=often) == NARROW
    factors = G.corrections(once)
    assert factors.kind_problems[G.tile_kind(NARROW)] == 1
    assert factors.schedule_problems[NARROW] == 1 and factors.schedule_problems[WIDE] == 20
    assert factors.uncertainty(NARROW) > 1.5 * factors.uncertainty(WIDE)


def test_a_problems_offset_is_not_a_tile_kinds_correction():
    """What went wrong at 2048x7168x2048: every schedule there ran faster than predicted, and
    the one kind measured only there took that for its own. Here a problem where both tiles
    ran 10% fast, the wide one also as predicted at 19 others: the narrow tile is no faster
    than the wide one where both were measured, so its kind's correction stays near the wide
    one's (within 1%, not 10%) and the wide tile is picked at a problem where the narrow one is
    predicted a little faster. Without the offset (per-kind means) it would be 7.5% faster."""
    rows = [pt for i in range(1, 20) for pt in _rows_at(_problem(i), [(WIDE, 1.0)], f"p{i}")]
    rows += _rows_at(_problem(0), [(WIDE, 0.9), (NARROW, 0.9)], "p0")
    factors = G.corrections(rows)
    wide = factors.kinds[G.tile_kind(WIDE)] * factors.schedules[WIDE]
    narrow = factors.kinds[G.tile_kind(NARROW)] * factors.schedules[NARROW]
    assert narrow == pytest.approx(wide, rel=0.01)
    new = Problem(4096, 9728, 4096, 1, "bf16", "bf16", "nk", True)
    assert G.pick(new, [WIDE, NARROW], rows=rows) == WIDE


def test_a_tile_kind_is_corrected_by_its_measured_rows():
    """Two problems, each with the wide tile as predicted and the narrow one 20% slower:
    offsets log(1.2) / 2, the kinds' effects -+ log(1.2) / (2 + KIND_PRIOR) (their contrast
    log 1.2 shrunk by 2 problems against KIND_PRIOR pseudo-problems), each schedule's own the
    mean of what is left over 2 + SCHEDULE_PRIOR; another schedule of a measured kind gets the
    kind's factor alone; the premium is z * sqrt(1 / (2 + KIND_PRIOR) + 1 / (n + SCHEDULE_PRIOR))
    with z such that a kind and schedule measured nowhere pay UNMEASURED_MARGIN; the pick
    minimizes the corrected time."""
    log12 = math.log(1.2)
    rows = [pt for i in range(2) for pt in _rows_at(_problem(i), [(WIDE, 1.0), (NARROW, 1.2)],
                                                     f"p{i}")]
    factors = G.corrections(rows)
    kind = log12 / (2 + G.KIND_PRIOR)
    assert factors.kinds == {G.tile_kind(WIDE): pytest.approx(math.exp(-kind)),
                             G.tile_kind(NARROW): pytest.approx(math.exp(kind))}
    own = 2 * (log12 / 2 - kind) / (2 + G.SCHEDULE_PRIOR)
    assert factors.schedules == {WIDE: pytest.approx(math.exp(-own)),
                                 NARROW: pytest.approx(math.exp(own))}
    z = math.log(1 + G.UNMEASURED_MARGIN) / math.sqrt(1 / G.KIND_PRIOR + 1 / G.SCHEDULE_PRIOR)
    premium = math.exp(z * math.sqrt(1 / (2 + G.KIND_PRIOR) + 1 / (2 + G.SCHEDULE_PRIOR)))
    assert factors.factor(NARROW) == pytest.approx(math.exp(kind + own) * premium)
    same_kind = GemmSchedule(bn=192, stages=5, epilogue="direct")
    assert factors.factor(same_kind) == pytest.approx(math.exp(kind) * math.exp(
        z * math.sqrt(1 / (2 + G.KIND_PRIOR) + 1 / G.SCHEDULE_PRIOR)))
    p = Problem(3000, 5000, 2000, 1, "bf16", "bf16", "nk", True)
    other = GemmSchedule(bm=128, bn=128, stages=5, epilogue="tma")
    assert G.expected_us(p, other, None, factors) == pytest.approx(
        G.predict_us(p, other) * (1 + G.UNMEASURED_MARGIN))
    for q in _problems():
        if q.m * q.batch > G.SKINNY:
            usable = [c for c in candidates(q) if c.split_k == 1 and c.tail_splits == 1]
            got = G.expected_us(q, G.pick(q, candidates(q)), None, G.shipped_corrections())
            assert got == min(G.expected_us(q, c, None, G.shipped_corrections())
                              for c in usable), q


def test_the_pick_is_deterministic_and_cheap(points):
    """No timing at pick time, only arithmetic: the corrections rebuilt from the shipped rows
    are the same numbers, and building them (354 rows, one small solve) and a pick take little
    CPU (about 10 ms and 0.3 ms here; bounds 20x that, CPU time)."""
    import time

    start = time.process_time()
    again = G.corrections(points)
    build = time.process_time() - start
    assert again == G.shipped_corrections()
    assert build < 0.5, build
    p = Problem(3000, 5000, 2000, 1, "bf16", "bf16", "kn", True)
    picks = []
    start = time.process_time()
    for _ in range(20):
        picks.append(G.pick(p, candidates(p)))
    assert (time.process_time() - start) / 20 < 0.02
    assert len(set(picks)) == 1


def _problems():
    rng = random.Random(18)
    out = [Problem(m, n, k, b, dt, o, lay, ok)
           for (m, n, k, b) in ((4096, 4096, 4096, 1), (300, 8192, 8192, 1), (16, 8192, 8192, 1),
                                (2048, 2048, 2048, 8), (4095, 4097, 4096, 1), (257, 129, 72, 1))
           for dt, o in (("bf16", "bf16"), ("f16", "f32"))
           for lay, ok in (("nk", True), ("kn", False))]
    for _ in range(40):
        out.append(Problem(rng.randint(1, 20000), rng.choice([8, 64, 1000, 4096, 14336]),
                           16 * rng.randint(1, 1000), rng.choice([1, 1, 4]),
                           "bf16", rng.choice(["bf16", "f32"]), rng.choice(["nk", "kn"]),
                           rng.random() < 0.5))
    return out


def test_the_untuned_choice_is_a_legal_single_kernel_candidate():
    for p in _problems():
        s = schedules.untuned(p)
        assert s in candidates(p), p
        assert s.split_k == 1, p        # a split-K launch compiles a second (sum) kernel
        if s.epilogue == "tma":
            assert p.tma_store_ok and p.out_dtype in ("bf16", "f16"), (p, s)
        assert schedules.choose(p, None) == s


@pytest.mark.parametrize("problem", [Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True),
                                     Problem(3000, 5000, 2000, 1, "bf16", "bf16", "kn", True)],
                         ids=["2048x7168x2048-nk", "3000x5000x2000-kn"])
def test_untuned_choices_lower(problem):
    from argus.compiler import lower_only

    kernel, schedule = schedules.kernel_for(problem, schedules.untuned(problem))
    lower_only(kernel, s=schedule)


def test_pick_refuses_an_empty_choice():
    p = Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True)
    with pytest.raises(ValueError, match="single-kernel"):
        G.pick(p, [GemmSchedule(bm=64, bn=64, consumers=1, split_k=2)])
