"""The untuned GEMM choice (argus/ops/gemm_model.py) without a GPU: the shipped constants pick
the measured-best schedule of every recorded problem with several measured schedules, a fit
that never saw some of those problems picks their best too (held-out split), the predictions
track the recorded times, the model's wave and padding arithmetic, and the choice is always a
legal single-kernel candidate of the problem (so a first call compiles one kernel)."""

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
    return G.load_points()


def _picks(groups, constants, rows=None):
    """group -> (picked schedule, its measured us, the group's best us)."""
    out = {}
    for name, pts in groups.items():
        best, best_us, times = G.best_measured(pts)
        pick = G.pick(pts[0], list(times), constants, rows)
        out[name] = (pick, times[pick], best_us)
    return out


def test_shipped_constants_are_the_fitted_ones():
    data = G.CONSTANTS_FILE.read_text()
    assert "gemm_model_data.json" in data and "H200" in data
    assert G.shipped() != G.Constants()   # fitted, not the starting point


def test_shipped_model_picks_the_measured_best(points):
    groups = G.groups(points)
    assert len(groups) >= 6
    for name, (pick, us, best_us) in _picks(groups, G.shipped()).items():
        assert us == best_us, f"{name}: picked {pick} ({us} us), best {best_us} us"


HELD_OUT = ("1x512x8192x8192:kn", "1x512x8192x8192:nk", "1x2048x7168x2048:kn")


def test_a_fit_without_some_problems_picks_their_best(points):
    """Held-out split: fitted on every row but those of three problems, the model still picks
    the fastest measured schedule of each of them."""
    train = [pt for pt in points if pt.group not in HELD_OUT and pt.m * pt.batch > G.SKINNY]
    assert len(train) < len([pt for pt in points if pt.m * pt.batch > G.SKINNY])
    constants = G.fit(train)
    held = {g: pts for g, pts in G.groups(points).items() if g in HELD_OUT}
    assert set(held) == set(HELD_OUT)
    for name, (pick, us, best_us) in _picks(held, constants, train).items():
        assert us == best_us, f"{name}: picked {pick} ({us} us), best {best_us} us"


def test_predictions_track_the_recorded_times(points):
    logs = [math.log(G.predict_us(pt, pt.schedule) / pt.us) for pt in points
            if pt.m * pt.batch > G.SKINNY]
    rms = math.sqrt(sum(x * x for x in logs) / len(logs))
    assert rms < 0.08, rms
    # and the fit improves on the starting constants
    start = [math.log(G.predict_us(pt, pt.schedule, G.Constants()) / pt.us) for pt in points
             if pt.m * pt.batch > G.SKINNY]
    assert rms < math.sqrt(sum(x * x for x in start) / len(start))


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


def test_the_model_fixes_the_issues_worst_untuned_cases():
    """Issue 18: 2048x7168x2048 (448 128x256 tiles, 3.4 waves) ran the 128x256 heuristic; the
    model trades width for a fuller last wave, with a tile it was measured on (128x224: 512
    tiles, 3.9 waves), not the unmeasured 128x176 it picked before (predicted 2% faster, 5%
    slower than predicted on the H200)."""
    p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    s = schedules.untuned(p)
    assert s.bn < 256 and G.predict_us(p, s) < 0.95 * G.predict_us(p, schedules.heuristic(p))
    assert G.tile_kind(s) in G.shipped_corrections()


def test_an_unmeasured_tile_carries_the_margin():
    """3000x5000x2000 (held out): 128x192 tiles (648, 4.9 waves; no measured 128x192 row) are
    predicted 5% faster than 128x256 (480, 3.6 waves), less than the margin an unmeasured tile
    kind carries: 128x256 is picked. Without rows (nothing measured, every kind alike) the
    least predicted one is."""
    p = Problem(3000, 5000, 2000, 1, "bf16", "bf16", "nk", True)
    s = schedules.untuned(p)
    assert (s.bm, s.bn, s.epilogue) == (128, 256, "tma")
    narrow = [c for c in candidates(p) if c.bn == 192]
    assert narrow and all(G.tile_kind(c) not in G.shipped_corrections() for c in narrow)
    assert min(G.predict_us(p, c) for c in narrow) < G.predict_us(p, s)
    assert G.pick(p, candidates(p), rows=[]).bn == 192


def test_a_tile_kind_is_corrected_by_its_measured_rows(points):
    """A kind whose rows ran 20% slower than predicted: exp(log 1.2 / (1 + SHRINK)); a kind
    without rows: 1 + UNMEASURED_MARGIN; the pick minimizes the corrected time."""
    s = GemmSchedule(bn=192, stages=4, epilogue="tma", cluster_m=2)
    pts = [G.Point(m, 5000, 2000, 1, "nk", s, 1.2 * G.predict_us(
        Problem(m, 5000, 2000, 1, "bf16", "bf16", "nk", True), s), "g") for m in (3000, 4000)]
    factors = G.corrections(pts)
    assert factors == {G.tile_kind(s): pytest.approx(math.exp(2 * math.log(1.2) /
                                                              (2 + G.SHRINK)))}
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
