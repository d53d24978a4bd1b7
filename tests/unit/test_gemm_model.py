"""The untuned GEMM choice (argus/ops/gemm_model.py) without a GPU: the shipped constants are
what `fit` makes of the shipped rows; the shipped model picks within a few percent of the
measured best of every recorded problem (every tuning candidate timed on the H200,
2026-12-03), and so does a fit that never saw the problem (leave one shape out); the
per-schedule corrections are what make that so; the predictions track the recorded times; the
model's wave and padding arithmetic; the sweep's JSON becomes data rows; and the choice is
always a legal single-kernel candidate of the problem (so a first call compiles one kernel)."""

from __future__ import annotations

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
    """Every row is of the sweep at 743d912 (the warp-uniform role index), and each problem
    has every schedule it measured among its candidates today, each timed once."""
    import json

    rows = json.loads(G.DATA_FILE.read_text())["points"]
    assert {r["commit"] for r in rows} == {"743d912"}
    assert not any((r["m"], r["n"], r["k"], r["b_layout"]) == (4095, 4097, 4096, "kn")
                   for r in rows)   # B copied into an aligned buffer first: not modelled
    for name, pts in G.groups(points).items():
        p = pts[0]
        problem = Problem(p.m, p.n, p.k, p.batch, "bf16", "bf16", p.b_layout, p.n % 8 == 0)
        assert {pt.schedule for pt in pts} <= set(candidates(problem)), name
        assert len({pt.schedule for pt in pts}) == len(pts), name


def test_shipped_model_picks_near_the_measured_best(points):
    """On every recorded problem (23, all candidates timed) the pick measured within 7% of the
    best, 2% on the geometric mean (1.018 and 1.066 at the fit of 2026-12-03); exact at 10."""
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
    alone = G.Corrections(factors.kinds, {})
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
# fastest measured schedule of each (the ping-pong at 2048x7168x2048, the cooperative 128x256
# at 8192x28672x8192, the ping-pong with the direct epilogue at the ragged 4095x4097x4096)
HELD_OUT = ((1, 2048, 7168, 2048), (1, 8192, 28672, 8192), (1, 4095, 4097, 4096))


def test_a_fit_without_some_problems_picks_their_best(points):
    held = G.cross_validate(points, HELD_OUT)
    assert len(held) == 5   # 4095x4097x4096 NN is not in the data
    for name, (pick, us, best_us) in held.items():
        assert us == best_us, f"{name}: picked {pick} ({us} us), best {best_us} us"
    assert {s.pingpong for s, _, _ in held.values()} == {True, False}


@pytest.mark.slow
def test_leave_one_shape_out_over_every_problem(points):
    """The honest estimate of the pick on a problem the fit never saw: every shape left out
    in turn (1.017x the measured best on the geometric mean, worst 1.066x, 2026-12-03)."""
    held = G.cross_validate(points)
    ratios = [us / best_us for _, us, best_us in held.values()]
    assert len(ratios) == len(G.groups(points))
    assert _geomean(ratios) < 1.025 and max(ratios) < 1.08, ratios


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
    the untuned run of 2026-12-02 its 128x176 2x1-cluster pick at 0.866x cuBLAS. Now: NN the
    ping-pong 128x128 (896 tiles, 6.8 waves), the fastest measured there; NT the 128x176 without
    clusters (656 tiles, 5.0 waves), 3.6% behind the ping-pong and ahead of the 2x1-cluster
    128x176 (83.7 against 84.8 us on the H200, 2026-12-03): each a tile kind measured there,
    within 4% of the best, predicted well ahead of the heuristic's 128x256."""
    measured = G.groups(points)
    for layout in ("kn", "nk"):
        p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", layout, True)
        s = schedules.untuned(p)
        assert s.bn < 256 and G.predict_us(p, s) < 0.95 * G.predict_us(p, schedules.heuristic(p))
        assert G.tile_kind(s) in G.shipped_corrections().kinds
        _, best_us, times = G.best_measured(measured[f"1x2048x7168x2048:{layout}"])
        assert times[s] < 1.04 * best_us, (layout, s, times[s], best_us)
    assert schedules.untuned(Problem(2048, 7168, 2048, 1, "bf16", "bf16", "kn", True)).pingpong


def test_an_unmeasured_tile_carries_the_margin():
    """512x5000x4096 x @ W.T: 128x160 tiles (4 x 32 = 128, one wave; no 128x160 row measured)
    are predicted 9% faster than 128x176 (116 tiles, also one wave, measured), less than the
    margin an unmeasured tile kind carries and what the measured kind's rows say of it: 128x176
    is picked. Without rows (nothing measured, every kind alike) the least predicted one is."""
    p = Problem(512, 5000, 4096, 1, "bf16", "bf16", "nk", True)
    s = schedules.untuned(p)
    factors = G.shipped_corrections()
    assert (s.bm, s.bn) == (128, 176) and G.tile_kind(s) in factors.kinds
    narrow = [c for c in candidates(p) if c.bn == 160]
    assert narrow and all(G.tile_kind(c) not in factors.kinds for c in narrow)
    assert min(G.predict_us(p, c) for c in narrow) < 0.93 * G.predict_us(p, s)
    assert all(factors.factor(c) == 1 + G.UNMEASURED_MARGIN for c in narrow)
    assert G.pick(p, candidates(p), rows=[]).bn == 160


def test_a_tile_kind_is_corrected_by_its_measured_rows(points):
    """A kind whose rows ran 20% slower than predicted: its factor exp(2 log 1.2 / (2 +
    SHRINK)); the schedule's own factor is the same mean of what the kind's leaves (a third of
    log 1.2 per row); another schedule of that kind gets the kind's factor alone; a kind
    without rows: 1 + UNMEASURED_MARGIN; the pick minimizes the corrected time."""
    s = GemmSchedule(bn=192, stages=4, epilogue="tma", cluster_m=2)
    pts = [G.Point(m, 5000, 2000, 1, "nk", s, 1.2 * G.predict_us(
        Problem(m, 5000, 2000, 1, "bf16", "bf16", "nk", True), s), "g") for m in (3000, 4000)]
    factors = G.corrections(pts)
    kind = 2 * math.log(1.2) / (2 + G.SHRINK)
    assert factors.kinds == {G.tile_kind(s): pytest.approx(math.exp(kind))}
    assert factors.schedules == {s: pytest.approx(math.exp(2 * (math.log(1.2) - kind)
                                                           / (2 + G.SHRINK)))}
    assert factors.factor(s) == pytest.approx(1.2 ** (2 / 3 + 2 / 9))
    same_kind = GemmSchedule(bn=192, stages=5, epilogue="direct")
    assert factors.factor(same_kind) == pytest.approx(math.exp(kind))
    p = Problem(3000, 5000, 2000, 1, "bf16", "bf16", "nk", True)
    other = GemmSchedule(stages=4, epilogue="tma", cluster_m=2)
    assert G.expected_us(p, other, None, factors) == pytest.approx(
        G.predict_us(p, other) * (1 + G.UNMEASURED_MARGIN))
    for q in _problems():
        if q.m * q.batch > G.SKINNY:
            usable = [c for c in candidates(q) if c.split_k == 1 and c.tail_splits == 1]
            got = G.expected_us(q, G.pick(q, candidates(q)), None, G.shipped_corrections())
            assert got == min(G.expected_us(q, c, None, G.shipped_corrections())
                              for c in usable), q


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
